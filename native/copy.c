/*
 * safetensors_copy: optional Node-API addon (its own target, pure C and Node-API only, so one build serves every
 * Node version) with one function Node has no binding for:
 *
 *   copyRange(fdIn, positionIn, fdOut, positionOut, length) -> bytes copied
 *
 * It copies with copy_file_range(2), in the kernel: the bytes never enter this process (and file systems that
 * share extents, such as XFS, Btrfs and NFS 4.2, may not copy them at all). Both positions are explicit, so neither
 * descriptor's file offset moves. Fewer bytes than `length` are copied only when the input ends first.
 *
 * Errors are thrown as JS Errors whose `code` is the errno name. ENOSYS, EXDEV, EINVAL, EOPNOTSUPP and EBADF mean
 * "not possible here" (no such system call, files on different file systems, special files): callers copy another
 * way. Without copy_file_range (not Linux), every call throws ENOSYS.
 */
#define _GNU_SOURCE
#ifndef NAPI_VERSION
#define NAPI_VERSION 8
#endif

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

#include <node_api.h>

/* Largest integer a JS number holds exactly. */
#define MAX_SAFE_INTEGER 9007199254740991.0
/* Linux moves at most 0x7ffff000 bytes per call; ask for 1 GiB at a time. */
#define MAX_CHUNK ((size_t)1 << 30)

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
    default: return "EUNKNOWN";
  }
}

static napi_value throw_errno(napi_env env, int err, const char *what) {
  char message[256];
  snprintf(message, sizeof message, "%s: %s", what, strerror(err));
  napi_throw_error(env, errno_name(err), message);
  return NULL;
}

/* A non-negative integer argument that a JS number holds exactly, or -1 (after throwing). */
static double integer_arg(napi_env env, napi_value value, const char *name) {
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

static napi_value copy_range(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 5) {
    napi_throw_type_error(env, "EINVAL", "copyRange(fdIn, positionIn, fdOut, positionOut, length)");
    return NULL;
  }
  static const char *names[5] = {"fdIn", "positionIn", "fdOut", "positionOut", "length"};
  double args[5];
  for (int i = 0; i < 5; i++) {
    args[i] = integer_arg(env, argv[i], names[i]);
    if (args[i] < 0) return NULL;
  }
  if (args[0] > INT32_MAX || args[2] > INT32_MAX) {
    napi_throw_type_error(env, "EINVAL", "file descriptors must be int32");
    return NULL;
  }
#if defined(__linux__) && defined(SYS_copy_file_range)
  int fd_in = (int)args[0], fd_out = (int)args[2];
  int64_t in = (int64_t)args[1], out = (int64_t)args[3];
  uint64_t left = (uint64_t)args[4], done = 0;
  while (left > 0) {
    size_t want = left < MAX_CHUNK ? (size_t)left : MAX_CHUNK;
    ssize_t got = syscall(SYS_copy_file_range, fd_in, &in, fd_out, &out, want, 0u);
    if (got < 0) {
      if (errno == EINTR) continue;
      return throw_errno(env, errno, "copy_file_range");
    }
    if (got == 0) break; /* the input ended */
    done += (uint64_t)got;
    left -= (uint64_t)got;
  }
  napi_value result;
  if (napi_create_double(env, (double)done, &result) != napi_ok) return NULL;
  return result;
#else
  return throw_errno(env, ENOSYS, "copy_file_range");
#endif
}

NAPI_MODULE_INIT(/* napi_env env, napi_value exports */) {
  napi_value fn;
  if (napi_create_function(env, "copyRange", NAPI_AUTO_LENGTH, copy_range, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "copyRange", fn) != napi_ok) return NULL;
  return exports;
}
