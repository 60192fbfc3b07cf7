/* Anonymous memory in 2 MiB-aligned mappings advised MADV_HUGEPAGE, handed to JavaScript as ArrayBuffers (huge.c). */
#ifndef ST_HUGE_H
#define ST_HUGE_H

#include <stddef.h>

#include <node_api.h>

#define HUGE_PAGE_SIZE ((size_t)2 << 20)

/* Maps `length` bytes (rounded up to whole 2 MiB pages, `*map_length`) of zeroed anonymous memory whose start is
 * 2 MiB aligned (THP needs aligned ranges), advised MADV_HUGEPAGE when `huge`. NULL (errno set) on failure. */
void *st_huge_map(size_t length, size_t *map_length, int huge);
/* The ArrayBuffer over the first `length` bytes of `addr` (mapped by st_huge_map, `map_length` bytes), owning it:
 * unmapped by the buffer's finalizer or by freeHuge(). On failure the memory is unmapped, an error is thrown and
 * NULL is returned. */
napi_value st_huge_buffer(napi_env env, void *addr, size_t map_length, size_t length);
/* allocHuge(length) and freeHuge(buffer) (see safetensors_native.c's list). */
napi_value st_js_alloc_huge(napi_env env, napi_callback_info info);
napi_value st_js_free_huge(napi_env env, napi_callback_info info);
/* The counters stats() reports: allocations mapped, buffers not yet finalized, bytes mapped. */
void st_huge_stats(double *allocations, double *buffers, double *bytes);

#endif
