/*
 * safetensors_v8: the one V8 call the Node-API cannot make, in an addon of its own (unaccounted.h says how the main
 * addon uses it and why): an ArrayBuffer over memory we own, created with `v8::BackingStore::EmptyDeleter`. V8 counts
 * every other external backing store (including those of napi_create_external_arraybuffer) as external memory of the
 * isolate and starts a full GC ("external memory pressure") each time that count grows by ~64 MB; a backing store with
 * the empty deleter is not counted (V8's BackingStore::PerIsolateAccountingLength returns 0 for it). The memory's
 * lifetime is the main addon's: it tracks the buffer with a finalizer (napi_add_finalizer) and detaches it before
 * unmapping, through `detach` here (the buffers are their own detach keys: unaccounted.h says why).
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
/* The v8::Local a napi_value is: the address of a handle slot, exactly what a v8::Local holds (Node's own
 * JsValueFromV8LocalValue / V8LocalValueFromJsValue are these casts). */
static_assert(sizeof(v8::Local<v8::Value>) == sizeof(napi_value), "v8::Local and napi_value differ in size");

static v8::Local<v8::Value> local_of(napi_value value) {
  v8::Local<v8::Value> local;
  std::memcpy(static_cast<void *>(&local), &value, sizeof value);
  return local;
}

/* Creates an ArrayBuffer over [data, data + length) in the current handle scope. 0 on success. */
static int unaccounted_arraybuffer(napi_env env, void *data, size_t length, napi_value *out) {
  (void)env;
  v8::Isolate *isolate = v8::Isolate::GetCurrent();
  if (isolate == nullptr) return -1;
  std::unique_ptr<v8::BackingStore> store =
      v8::ArrayBuffer::NewBackingStore(data, length, v8::BackingStore::EmptyDeleter, nullptr);
  v8::Local<v8::ArrayBuffer> buffer = v8::ArrayBuffer::New(isolate, std::move(store));
  if (buffer.IsEmpty()) return -1;
  std::memcpy(out, &buffer, sizeof buffer);
  return 0;
}

static int set_detach_key(napi_env env, napi_value value) {
  (void)env;
  v8::Local<v8::Value> local = local_of(value);
  if (local.IsEmpty() || !local->IsArrayBuffer()) return -1;
  v8::Local<v8::ArrayBuffer> buffer = local.As<v8::ArrayBuffer>();
  buffer->SetDetachKey(buffer);
  return 0;
}

static int detach(napi_env env, napi_value value) {
  (void)env;
  v8::Local<v8::Value> local = local_of(value);
  if (local.IsEmpty() || !local->IsArrayBuffer()) return -1;
  v8::Local<v8::ArrayBuffer> buffer = local.As<v8::ArrayBuffer>();
  if (!buffer->IsDetachable()) return -1;
  /* The key must be the one set, and V8 12.4 and older refuse a key where none was set: the buffer itself first,
   * then none. Nothing (a pending exception, cleared here) when neither is it; the caller reports it. */
  v8::TryCatch caught(v8::Isolate::GetCurrent());
  if (buffer->Detach(buffer).IsJust()) return 0;
  caught.Reset();
  return buffer->Detach(v8::Local<v8::Value>()).IsJust() ? 0 : -1;
}

static const st_unaccounted_api api = {ST_UNACCOUNTED_VERSION, unaccounted_arraybuffer, set_detach_key, detach};
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
