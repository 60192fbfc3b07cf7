/*
 * Arguments and errors of the safetensors_copy addon's functions (copy.c, direct_write.c): errors thrown as JS Errors
 * whose `code` is the errno name, integer arguments a JS number holds exactly, and the five arguments of a copy.
 * Its own module so that copy.c, which registers direct_write.c's functions, and direct_write.c, which uses these,
 * do not depend on each other (test/layout.test.ts checks the C modules for cycles).
 */
#ifndef NAPI_VERSION
#define NAPI_VERSION 8
#endif

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <node_api.h>

#include "copy_args.h"

/* Largest integer a JS number holds exactly. */
#define MAX_SAFE_INTEGER 9007199254740991.0

static const char *errno_name(int err) {
  switch (err) {
    case EBADF: return "EBADF";
    case EFBIG: return "EFBIG";
    case EINVAL: return "EINVAL";
    case EIO: return "EIO";
    case EISDIR: return "EISDIR";
    case ENOMEM: return "ENOMEM";
    case ENOSPC: return "ENOSPC";
    case ENOSYS: return "ENOSYS";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case EOVERFLOW: return "EOVERFLOW";
    case EPERM: return "EPERM";
    case EACCES: return "EACCES";
    case EROFS: return "EROFS";
    case ETXTBSY: return "ETXTBSY";
    case EXDEV: return "EXDEV";
    case EDQUOT: return "EDQUOT";
#ifdef ENODATA
    case ENODATA: return "ENODATA";
#endif
    default: return "EUNKNOWN";
  }
}

napi_value throw_errno(napi_env env, int err, const char *what) {
  char message[256];
  snprintf(message, sizeof message, "%s: %s", what, strerror(err));
  napi_throw_error(env, errno_name(err), message);
  return NULL;
}

/* A non-negative integer argument that a JS number holds exactly, or -1 (after throwing). */
double integer_arg(napi_env env, napi_value value, const char *name) {
  double number = -1;
  if (napi_get_value_double(env, value, &number) != napi_ok || !(number >= 0) || number > MAX_SAFE_INTEGER ||
      number != (double)(int64_t)number) {
    char message[128];
    snprintf(message, sizeof message, "%s must be a non-negative safe integer", name);
    napi_throw_type_error(env, "EINVAL", message);
    return -1;
  }
  return number;
}

int copy_args(napi_env env, napi_callback_info info, const char *usage, double args[5]) {
  size_t argc = 5;
  napi_value argv[5];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 5) {
    napi_throw_type_error(env, "EINVAL", usage);
    return -1;
  }
  static const char *names[5] = {"fdIn", "positionIn", "fdOut", "positionOut", "length"};
  for (int i = 0; i < 5; i++) {
    args[i] = integer_arg(env, argv[i], names[i]);
    if (args[i] < 0) return -1;
  }
  if (args[0] > INT32_MAX || args[2] > INT32_MAX) {
    napi_throw_type_error(env, "EINVAL", "file descriptors must be int32");
    return -1;
  }
  return 0;
}

void *typed_array_arg(napi_env env, napi_value value, napi_typedarray_type want, size_t *length, const char *usage) {
  bool is_typed = false;
  napi_typedarray_type type;
  size_t count = 0, offset = 0;
  void *data = NULL;
  napi_value buffer;
  if (napi_is_typedarray(env, value, &is_typed) != napi_ok || !is_typed ||
      napi_get_typedarray_info(env, value, &type, &count, &data, &buffer, &offset) != napi_ok || type != want) {
    napi_throw_type_error(env, "EINVAL", usage);
    return NULL;
  }
  *length = count;
  return data;
}

int weights_arg(napi_env env, napi_value value, uint32_t n, uint32_t max, float *weights, const char *message) {
  size_t count = 0;
  const float *data = typed_array_arg(env, value, napi_float32_array, &count, message);
  if (data == NULL) return -1;
  if (n == 0 || n > max || count != n) {
    napi_throw_type_error(env, "EINVAL", message);
    return -1;
  }
  memcpy(weights, data, n * sizeof(float));
  return 0;
}
