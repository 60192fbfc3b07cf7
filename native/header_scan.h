/* native/header_scan.c's checked scan, for the functions of native/safetensors_native.c that read headers. */
#ifndef ST_HEADER_SCAN_H
#define ST_HEADER_SCAN_H

#include <stddef.h>
#include <stdint.h>

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

#endif
