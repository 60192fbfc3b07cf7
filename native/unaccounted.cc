/*
 * safetensors_v8: the one V8 call the Node-API cannot make, in an addon of its own (unaccounted.h says how the main
 * addon uses it and why): an ArrayBuffer over memory we own, created with `v8::BackingStore::EmptyDeleter`. V8 counts
 * every other external backing store (including those of napi_create_external_arraybuffer) as external memory of the
 * isolate and starts a full GC ("external memory pressure") each time that count grows by ~64 MB; a backing store with
 * the empty deleter is not counted (V8's BackingStore::PerIsolateAccountingLength returns 0 for it). The memory's
 * lifetime is the main addon's: it tracks the buffer with a finalizer (napi_add_finalizer) and detaches it before
 * unmapping.
 *
 * V8's C++ API ties this binary to one Node ABI: it exports `abi` (the NODE_MODULE_VERSION it was built for), and
 * JavaScript hands it to the main addon only when that is the running Node's (src/io/native.ts). Without a usable V8
 * API (V8 sandbox builds, where external pointers are not allowed) it exports no `arraybuffer`.
 *
 *   abi            NODE_MODULE_VERSION of the headers it was built with
 *   arraybuffer    a napi external over an st_unaccounted_api (tagged), or absent
 */
#include <cstring>
#include <memory>

#include <node_api.h>
#include <node_version.h>
#include <v8.h>

#include "unaccounted.h"

#if !defined(V8_ENABLE_SANDBOX)
/* Creates an ArrayBuffer over [data, data + length) in the current handle scope. Returns 0 on success. */
static int unaccounted_arraybuffer(napi_env env, void *data, size_t length, napi_value *out) {
  (void)env;
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
}

static const st_unaccounted_api api = {ST_UNACCOUNTED_VERSION, unaccounted_arraybuffer};
#endif

NAPI_MODULE_INIT(/* napi_env env, napi_value exports */) {
  napi_value abi;
  if (napi_create_int32(env, NODE_MODULE_VERSION, &abi) != napi_ok) return nullptr;
  if (napi_set_named_property(env, exports, "abi", abi) != napi_ok) return nullptr;
#if !defined(V8_ENABLE_SANDBOX)
  static const napi_type_tag tag = {ST_UNACCOUNTED_TAG_LOWER, ST_UNACCOUNTED_TAG_UPPER};
  napi_value external;
  if (napi_create_external(env, const_cast<st_unaccounted_api *>(&api), nullptr, nullptr, &external) != napi_ok ||
      napi_type_tag_object(env, external, &tag) != napi_ok ||
      napi_set_named_property(env, exports, "arraybuffer", external) != napi_ok)
    return nullptr;
#endif
  return exports;
}
