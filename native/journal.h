/* Journaled in-place edits and CRC-32C (journal.c): the functions safetensors_native.c exports. */
#ifndef ST_JOURNAL_H
#define ST_JOURNAL_H

#include <node_api.h>

/* Chooses the CRC-32C code for this CPU; called from the addon's init, once per environment (worker threads too). */
void st_journal_init(void);
napi_value st_js_crc32c(napi_env env, napi_callback_info info);
napi_value st_js_journal_ranges(napi_env env, napi_callback_info info);
napi_value st_js_journal_begin(napi_env env, napi_callback_info info);
napi_value st_js_journal_fill(napi_env env, napi_callback_info info);
napi_value st_js_open_writable(napi_env env, napi_callback_info info);
napi_value st_js_journal_end(napi_env env, napi_callback_info info);
napi_value st_js_write_repeated(napi_env env, napi_callback_info info);

#endif
