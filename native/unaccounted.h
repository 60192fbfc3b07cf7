/*
 * How the main addon (safetensors_native, Node-API only: one binary for every Node version) gets ArrayBuffers that V8
 * does not count as external memory from the small addon that can make them (safetensors_v8, unaccounted.cc: V8's
 * C++ API, so one binary per Node ABI). JavaScript loads the small addon for the running Node's ABI, checks the ABI
 * it was built for, and passes its `arraybuffer` external to the main addon's useUncountedWindows(); without it,
 * windows are counted external ArrayBuffers (napi_create_external_arraybuffer).
 *
 * Why it matters, measured on a 2.5 GB mapping (one window, a fresh process, 2 vCPUs): a counted window's creation
 * runs a full mark-compact for external memory pressure, 7-110 ms on Node 20, 22, 24 and 26, where the reference
 * loads the whole file in 2.6 ms; an uncounted one costs a few microseconds. napi_adjust_external_memory cannot
 * cancel the count: a negative change first left every creation's full GC in place (Node 20, 22: V8 also counts
 * backing stores in its global memory limit) and then aborted the process on Node 24 and 26 (V8 checks that the
 * external total never falls below zero).
 */
#ifndef ST_UNACCOUNTED_H
#define ST_UNACCOUNTED_H

#include <stddef.h>
#include <stdint.h>

#include <node_api.h>

/* Creates an ArrayBuffer over [data, data + length) that V8 does not count, in the current handle scope; the memory
 * stays the caller's (nothing frees it when the buffer dies). 0 on success, -1 on failure (nothing thrown). */
typedef int (*st_unaccounted_arraybuffer_fn)(napi_env env, void *data, size_t length, napi_value *out);
/* Makes `buffer` its own detach key: JavaScript can no longer detach it (a transfer to a worker throws), only
 * `detach`. 0, or -1 when `buffer` is not an ArrayBuffer. */
typedef int (*st_set_detach_key_fn)(napi_env env, napi_value buffer);
/* Detaches `buffer`, its own detach key or none set. 0, or -1 (not an ArrayBuffer, not detachable, another key). */
typedef int (*st_detach_fn)(napi_env env, napi_value buffer);

/*
 * What safetensors_v8 hands over: a napi external whose data points at this, tagged ST_UNACCOUNTED_TAG.
 *
 * Why detach keys: the mapped windows and huge buffers must never move to another thread (close() and freeHuge()
 * unmap them), and worker_threads.markAsUntransferable did that through Node 22. From Node 24 it sets a detach key of
 * Node's own, after which napi_detach_arraybuffer (which passes no key) aborts the process (V8's Detach returns
 * Nothing and Node checks it): close() of a mapped file crashed. There (src/io/native.ts tells by a probe), the main
 * addon makes the buffers their own detach keys instead: a transfer, to a worker or by ArrayBuffer.prototype.transfer,
 * throws a TypeError, and the addon detaches them here. Not before Node 24: there a keyed buffer aborts the process in
 * postMessage (Node 20) or in transfer() (Node 22) instead of throwing, and markAsUntransferable stays. Only windows
 * are keyed: huge buffers are napi external buffers, which Node itself detaches (with no key) when a worker exits.
 */
typedef struct {
  uint32_t version; /* ST_UNACCOUNTED_VERSION */
  st_unaccounted_arraybuffer_fn arraybuffer;
  st_set_detach_key_fn set_detach_key;
  st_detach_fn detach;
} st_unaccounted_api;

#define ST_UNACCOUNTED_VERSION 2u
/* napi_type_tag: both halves random, shared by the two addons. */
#define ST_UNACCOUNTED_TAG_LOWER 0x5a1f7e4b9c3d2e81ull
#define ST_UNACCOUNTED_TAG_UPPER 0x3e9b6f10d4a7c582ull

#endif
