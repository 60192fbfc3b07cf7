/* The main addon's side of safetensors_v8 (unaccounted.h): the functions it handed over, once given (bridge.c). */
#ifndef ST_BRIDGE_H
#define ST_BRIDGE_H

#include <stdbool.h>

#include <node_api.h>

#include "unaccounted.h"

/* Keeps `api` for every later call (the process's Node is one: any thread may give it); `key`: windows are made
 * their own detach keys (unaccounted.h says when). */
void st_bridge_set(const st_unaccounted_api *api, bool key);
/* The functions safetensors_v8 handed over, or NULL: windows are then counted external ArrayBuffers. */
const st_unaccounted_api *st_bridge(void);
/* Detaches `buffer` (keyed by st_bridge's functions or not): 0, or -1 when it cannot be detached. */
int st_detach(napi_env env, napi_value buffer);
/* Makes `buffer` its own detach key, where st_bridge_set asked for keys: it cannot move to another thread or
 * ArrayBuffer any more. */
void st_keep_in_thread(napi_env env, napi_value buffer);

#endif
