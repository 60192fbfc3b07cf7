/* Errors and arguments for every file of the safetensors_native addon (common.h). */
#ifndef NAPI_VERSION
#define NAPI_VERSION 8
#endif

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

static const char *errno_name(int err) {
  switch (err) {
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EIO: return "EIO";
    case ENXIO: return "ENXIO";
    case E2BIG: return "E2BIG";
    case EBADF: return "EBADF";
    case EAGAIN: return "EAGAIN";
    case ENOMEM: return "ENOMEM";
    case EACCES: return "EACCES";
    case EFAULT: return "EFAULT";
    case EBUSY: return "EBUSY";
    case EEXIST: return "EEXIST";
    case ENODEV: return "ENODEV";
    case EISDIR: return "EISDIR";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case EINVAL: return "EINVAL";
    case ENFILE: return "ENFILE";
    case EMFILE: return "EMFILE";
    case ETXTBSY: return "ETXTBSY";
    case EFBIG: return "EFBIG";
    case ENOSPC: return "ENOSPC";
    case ERANGE: return "ERANGE";
    case ENOSYS: return "ENOSYS";
    case EOVERFLOW: return "EOVERFLOW";
    case ENOTSUP: return "ENOTSUP";
    default: return "EUNKNOWN";
  }
}

void st_throw_errno(napi_env env, int err, const char *what) {
  bool pending = false;
  if (napi_is_exception_pending(env, &pending) == napi_ok && pending) return;
  char message[512];
  snprintf(message, sizeof message, "%s: %s", what, strerror(err));
  napi_throw_error(env, errno_name(err), message);
}

void st_throw_code(napi_env env, int err, const char *message) {
  bool pending = false;
  if (napi_is_exception_pending(env, &pending) == napi_ok && pending) return;
  napi_throw_error(env, errno_name(err), message);
}

int st_get_index(napi_env env, napi_value value, const char *name, double max, uint64_t *out) {
  napi_valuetype type;
  char message[160];
  if (napi_typeof(env, value, &type) != napi_ok || type != napi_number) {
    snprintf(message, sizeof message, "%s must be a number", name);
    st_throw_code(env, EINVAL, message);
    return -1;
  }
  double d = 0;
  if (napi_get_value_double(env, value, &d) != napi_ok) {
    st_throw_code(env, EINVAL, "cannot read a number argument");
    return -1;
  }
  /* NaN fails every comparison below; -0 is accepted as 0. */
  if (!(d >= 0) || !(d <= MAX_SAFE_INTEGER) || d != (double)(uint64_t)d) {
    snprintf(message, sizeof message, "%s must be a non-negative safe integer", name);
    st_throw_code(env, EINVAL, message);
    return -1;
  }
  if (d > max) {
    snprintf(message, sizeof message, "%s is too large (%.0f > %.0f)", name, d, max);
    st_throw_code(env, ERANGE, message);
    return -1;
  }
  *out = (uint64_t)d;
  return 0;
}
