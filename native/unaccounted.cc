/*
 * One V8 call the Node-API cannot make: an ArrayBuffer over memory we own, created with
 * `v8::BackingStore::EmptyDeleter`.
 *
 * Why: V8 counts every other external backing store (including those of napi_create_external_arraybuffer) as
 * external memory of the isolate and starts a full GC ("external memory pressure") each time that count grows by
 * ~64 MB. Views of a memory-mapped file are page cache, not heap: counting them made 48 views of a 2.4 GiB file cost
 * 16–45 ms of GC. A backing store with the empty deleter is not counted (V8's BackingStore::PerIsolateAccountingLength
 * returns 0 for it), so mapping-wide buffers cost nothing. The memory's lifetime is ours: the caller tracks the
 * buffer with a finalizer (napi_add_finalizer) and detaches it before unmapping.
 *
 * This is the only place the addon uses V8's C++ API, which ties the binary to one Node ABI; the loader treats a
 * binary built for another ABI as absent. Without a usable V8 API (V8 sandbox builds, where external pointers are
 * not allowed) it reports 0 and the C side falls back to counted external buffers.
 */
#include <cstring>
#include <memory>

#include <node_api.h>
#include <v8.h>

extern "C" int st_unaccounted_supported(void) {
#if defined(V8_ENABLE_SANDBOX)
  return 0;
#else
  return 1;
#endif
}

/* Creates an ArrayBuffer over [data, data + length) in the current handle scope. Returns 0 on success. */
extern "C" int st_unaccounted_arraybuffer(napi_env env, void *data, size_t length, napi_value *out) {
  (void)env;
#if defined(V8_ENABLE_SANDBOX)
  (void)data;
  (void)length;
  (void)out;
  return -1;
#else
  v8::Isolate *isolate = v8::Isolate::GetCurrent();
  if (isolate == nullptr) return -1;
  std::unique_ptr<v8::BackingStore> store =
      v8::ArrayBuffer::NewBackingStore(data, length, v8::BackingStore::EmptyDeleter, nullptr);
  v8::Local<v8::ArrayBuffer> buffer = v8::ArrayBuffer::New(isolate, std::move(store));
  if (buffer.IsEmpty()) return -1;
  /* A napi_value is the address of a handle slot, exactly what a v8::Local holds (Node's own
   * JsValueFromV8LocalValue is this cast). */
  static_assert(sizeof(buffer) == sizeof(napi_value), "v8::Local and napi_value differ in size");
  std::memcpy(out, &buffer, sizeof buffer);
  return 0;
#endif
}
