/* native/header_scan.c: the header scanners (JavaScript functions) and the checked scan that the functions of
 * native/safetensors_native.c that read headers call. */
#ifndef ST_HEADER_SCAN_H
#define ST_HEADER_SCAN_H

#include <stddef.h>
#include <stdint.h>

#include <node_api.h>

#define MAX_DTYPES 64

/* Dtype names and bits per element, in src/format/dtypes.ts's order (passed by the JavaScript caller). */
typedef struct {
  const char *name[MAX_DTYPES];
  size_t length[MAX_DTYPES];
  double bits[MAX_DTYPES];
  size_t count;
} dtype_table;

int st_dtype_table_parse(dtype_table *table, const char *names, size_t length, const double *bits, size_t nbits);
int st_scan_checked(const uint8_t *bytes, size_t length, double file_length, const dtype_table *dtypes, double *out,
                    size_t capacity, size_t *written);

/* scanHeader, scanRun, findSyntaxError and scanChecked (see there). */
napi_value st_js_scan_header(napi_env env, napi_callback_info info);
napi_value st_js_scan_run(napi_env env, napi_callback_info info);
napi_value st_js_find_syntax_error(napi_env env, napi_callback_info info);
napi_value st_js_scan_checked(napi_env env, napi_callback_info info);

#endif
