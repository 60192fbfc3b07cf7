/* Owned copies of file bytes read by several threads (owned.c): the functions safetensors_native.c exports. */
#ifndef ST_OWNED_H
#define ST_OWNED_H

#include <node_api.h>

napi_value st_js_read_owned(napi_env env, napi_callback_info info);
napi_value st_js_owned_pages(napi_env env, napi_callback_info info);

#endif
