/* The functions of safetensors_v8 the main addon was given (bridge.h, unaccounted.h). */
#ifndef NAPI_VERSION
#define NAPI_VERSION 8
#endif

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "bridge.h"

static _Atomic(const st_unaccounted_api *) g_api;
static atomic_bool g_key;

void st_bridge_set(const st_unaccounted_api *api, bool key) {
  atomic_store_explicit(&g_key, key, memory_order_relaxed);
  atomic_store_explicit(&g_api, api, memory_order_release);
}

const st_unaccounted_api *st_bridge(void) { return atomic_load_explicit(&g_api, memory_order_acquire); }

int st_detach(napi_env env, napi_value buffer) {
  const st_unaccounted_api *api = st_bridge();
  if (api != NULL) return api->detach(env, buffer);
  return napi_detach_arraybuffer(env, buffer) == napi_ok ? 0 : -1;
}

void st_keep_in_thread(napi_env env, napi_value buffer) {
  const st_unaccounted_api *api = st_bridge();
  if (api != NULL && atomic_load_explicit(&g_key, memory_order_relaxed)) (void)api->set_detach_key(env, buffer);
}
