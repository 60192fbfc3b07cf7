/* What every file of the safetensors_native addon shares: errors thrown with errno names, and integer arguments. */
#ifndef ST_COMMON_H
#define ST_COMMON_H

#include <stdbool.h>
#include <stdint.h>

#include <node_api.h>

/* Largest integer a JS number holds exactly. */
#define MAX_SAFE_INTEGER 9007199254740991.0
/* Node 20: one Buffer/external ArrayBuffer is at most 2^32 bytes (buffer.constants.MAX_LENGTH). */
#define MAX_WINDOW_LENGTH ((double)4294967296.0)

/* Throws Error(code = errno name, message = "<what>: <strerror>") unless an exception is already pending. */
void st_throw_errno(napi_env env, int err, const char *what);
/* Same, with our own message (no strerror text). */
void st_throw_code(napi_env env, int err, const char *message);
/* A non-negative integer JS number, at most `max`. Returns 0 on success; otherwise throws and returns -1. */
int st_get_index(napi_env env, napi_value value, const char *name, double max, uint64_t *out);

/* Returns NULL from the calling function, with a JS error thrown (Node-API's own message) unless one is pending,
 * when a Node-API call fails. */
#define NAPI_CALL(env, call)                                                \
  do {                                                                      \
    if ((call) != napi_ok) {                                                \
      const napi_extended_error_info *info_ = NULL;                         \
      napi_get_last_error_info((env), &info_);                              \
      bool pending_ = false;                                                \
      napi_is_exception_pending((env), &pending_);                          \
      if (!pending_) {                                                      \
        const char *msg_ = info_ != NULL && info_->error_message != NULL    \
                               ? info_->error_message                       \
                               : "Node-API call failed";                    \
        napi_throw_error((env), "EFAULT", msg_);                            \
      }                                                                     \
      return NULL;                                                          \
    }                                                                       \
  } while (0)

#endif
