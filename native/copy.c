/*
 * safetensors_copy: optional Node-API addon (its own target, pure C and Node-API only, so one build serves every
 * Node version) with one function Node has no binding for:
 *
 *   copyRange(fdIn, positionIn, fdOut, positionOut, length) -> bytes copied
 *   privatePages(view)                                      -> whether any page under the view is private
 *   writeDirect(fd, buffers, position)                      -> bytes written, bypassing the page cache (direct_write.c)
 *   copyDirect(fdIn, positionIn, fdOut, positionOut, length) -> length, the same direct writes from the input's bytes
 *   preallocate(fd, length)                                 -> whether the file's first `length` bytes now have disk
 *                                                              blocks (fallocate; below says why)
 *
 * and SIMD kernels of the GGUF converter (q8FromF16), of model merges (mergeLinear16, and mergeLinear16FileAsync from
 * file to file on libuv's pool: merge_file.c) and LoRA bakes
 * (halfToFloat32, float32ToHalf, loraAddLowRank) and TIES (keepSortedMagnitudes, subtract16, consensus2), on the calling
 * thread.
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
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

#include <node_api.h>

#include "copy_args.h"
#include "direct_write.h"
#include "gguf_q8.h"
#include "merge_file.h"
#include "merge_kernels.h"

/* Linux moves at most 0x7ffff000 bytes per call; ask for 1 GiB at a time. */
#define MAX_CHUNK ((size_t)1 << 30)

static napi_value copy_range(napi_env env, napi_callback_info info) {
  double args[5];
  if (copy_args(env, info, "copyRange(fdIn, positionIn, fdOut, positionOut, length)", args) != 0) return NULL;
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

/*
 * preallocate(fd, length): give the file disk blocks for its first `length` bytes (extending it to `length` if it is
 * shorter) with fallocate(2), before a large output is written into it. Why, on ext4 (the usual Linux file system):
 * - a file whose blocks are still to be allocated when it is renamed over an existing one is flushed by the rename
 *   (ext4's auto_da_alloc: it starts writeback of the whole file and waits to queue it), so replacing an existing
 *   2.37 GiB merge output took 4.7 s in the rename alone on the 2-vCPU VM of 2026-12-03, against 0.05 s for a file
 *   preallocated first (`mv` over an existing file after dd, measured both ways);
 * - direct writes into allocated blocks share the file's lock instead of taking it alone;
 * - a disk too small fails here, before anything is written, not after gigabytes.
 * False when the file system or OS cannot (EOPNOTSUPP, ENODEV, not Linux...): the caller sizes the file with
 * ftruncate. ENOSPC, EDQUOT and EFBIG, which the writes would meet too, are thrown with their errno names.
 */
static napi_value preallocate(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (argc < 2) {
    napi_throw_type_error(env, "EINVAL", "preallocate(fd, length)");
    return NULL;
  }
  double fd = integer_arg(env, argv[0], "fd"), length = integer_arg(env, argv[1], "length");
  if (fd < 0 || length < 0) return NULL;
  bool done = false;
#ifdef __linux__
  if (length > 0) {
    int rc;
    do rc = fallocate((int)fd, 0, 0, (off_t)length);
    while (rc != 0 && errno == EINTR);
    /* Only what the writes would meet too is an error; anything else (EOPNOTSUPP, ENODEV for a device or pipe...)
     * leaves the writes to go as they would have. */
    if (rc != 0 && (errno == ENOSPC || errno == EDQUOT || errno == EFBIG)) return throw_errno(env, errno, "fallocate");
    done = rc == 0;
  }
#endif
  napi_value result;
  if (napi_get_boolean(env, done, &result) != napi_ok) return NULL;
  return result;
}

/*
 * privatePages(view): whether any page under a typed array is private to this process rather than a page of a file,
 * read from /proc/self/pagemap (bit 61: file page or shared anonymous; 62: swapped; 63: present). Over a private
 * file mapping, a page written through it becomes anonymous (copy on write): its bytes are no longer the file's.
 * Pages not present were never written (or their writes were discarded). True whenever this cannot be told (no
 * pagemap, not Linux), so that callers fall back to copying the bytes themselves.
 */
static napi_value private_pages(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 1) {
    napi_throw_type_error(env, "EINVAL", "privatePages(view)");
    return NULL;
  }
  bool is_typed = false;
  if (napi_is_typedarray(env, argv[0], &is_typed) != napi_ok || !is_typed) {
    napi_throw_type_error(env, "EINVAL", "privatePages(view): view must be a typed array");
    return NULL;
  }
  napi_typedarray_type type;
  size_t count = 0, offset = 0;
  void *data = NULL;
  napi_value buffer;
  if (napi_get_typedarray_info(env, argv[0], &type, &count, &data, &buffer, &offset) != napi_ok) return NULL;
  size_t element = 1;
  switch (type) {
    case napi_int16_array: case napi_uint16_array: element = 2; break;
    case napi_int32_array: case napi_uint32_array: case napi_float32_array: element = 4; break;
    case napi_float64_array: case napi_bigint64_array: case napi_biguint64_array: element = 8; break;
    default: element = 1;
  }
  size_t length = count * element;
  bool result = true;
#ifdef __linux__
  if (length == 0 || data == NULL) {
    result = false;
  } else {
    static int pagemap = -2;
    if (pagemap == -2) pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    long page = sysconf(_SC_PAGESIZE);
    if (pagemap >= 0 && page > 0) {
      uint64_t first = (uintptr_t)data / (uint64_t)page;
      uint64_t last = ((uintptr_t)data + length - 1) / (uint64_t)page;
      uint64_t entries[4096];
      result = false;
      for (uint64_t at = first; at <= last && !result;) {
        size_t want = (size_t)(last - at + 1 < 4096 ? last - at + 1 : 4096);
        ssize_t got = pread(pagemap, entries, want * sizeof entries[0], (off_t)(at * sizeof entries[0]));
        if (got <= 0 || got % (ssize_t)sizeof entries[0] != 0) {
          result = true;
          break;
        }
        size_t n = (size_t)got / sizeof entries[0];
        for (size_t i = 0; i < n; i++) {
          uint64_t e = entries[i];
          int present = (int)(e >> 63) & 1, swapped = (int)(e >> 62) & 1, file = (int)(e >> 61) & 1;
          if (swapped || (present && !file)) {
            result = true;
            break;
          }
        }
        at += n;
      }
    }
  }
#endif
  napi_value out;
  if (napi_get_boolean(env, result, &out) != napi_ok) return NULL;
  return out;
}

/* A Uint8Array's bytes, or NULL with a TypeError thrown. */
static uint8_t *u8_bytes(napi_env env, napi_value value, size_t *length, const char *usage) {
  return typed_array_arg(env, value, napi_uint8_array, length, usage);
}

/* A Float32Array's values, or NULL with a TypeError thrown. */
static float *f32_values(napi_env env, napi_value value, size_t *length, const char *usage) {
  return typed_array_arg(env, value, napi_float32_array, length, usage);
}

/*
 * q8FromF16(src, count, dst): `count` F16 values (a multiple of 32) from the Uint8Array `src` to Q8_0 blocks in the
 * Uint8Array `dst` (native/gguf_q8.c). Returns 1 when the AVX2 kernel ran, 0 for the portable one. Runs on the
 * calling thread (the GGUF converter's worker threads call it).
 */
static napi_value q8_from_f16(napi_env env, napi_callback_info info) {
  static const char usage[] = "q8FromF16(src: Uint8Array, count, dst: Uint8Array)";
  size_t argc = 3;
  napi_value argv[3];
  double count = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 3 ||
      napi_get_value_double(env, argv[1], &count) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", usage);
    return NULL;
  }
  size_t src_length = 0, dst_length = 0;
  uint8_t *src = u8_bytes(env, argv[0], &src_length, usage);
  if (src == NULL) return NULL;
  uint8_t *dst = u8_bytes(env, argv[2], &dst_length, usage);
  if (dst == NULL) return NULL;
  if (!(count >= 0 && count <= 9007199254740991.0) || count != (double)(uint64_t)count ||
      (uint64_t)count % 32 != 0) {
    napi_throw_range_error(env, "EINVAL", "q8FromF16: count must be a whole number of 32-value blocks");
    return NULL;
  }
  size_t blocks = (size_t)((uint64_t)count / 32);
  if (src_length / 64 < blocks || dst_length / 34 < blocks) {
    napi_throw_range_error(env, "EINVAL", "q8FromF16: src or dst is shorter than count needs");
    return NULL;
  }
  int simd = q8_0_from_f16(src, blocks, dst);
  napi_value result;
  if (napi_create_int32(env, simd, &result) != napi_ok) return NULL;
  return result;
}

/* A whole number argument in [0, 2^53), or -1 with a RangeError thrown. */
static int64_t whole_arg(napi_env env, napi_value value, const char *what) {
  double x = 0;
  if (napi_get_value_double(env, value, &x) != napi_ok || !(x >= 0 && x <= 9007199254740991.0) ||
      x != (double)(uint64_t)x) {
    napi_throw_range_error(env, "EINVAL", what);
    return -1;
  }
  return (int64_t)x;
}

static napi_value int_result(napi_env env, int value) {
  napi_value result;
  if (napi_create_int32(env, value, &result) != napi_ok) return NULL;
  return result;
}

/*
 * halfToFloat32(src: Uint8Array, bf16, count, dst: Float32Array): F16 or BF16 codes to float32, and
 * float32ToHalf(src: Float32Array, bf16, count, dst: Uint8Array): back (merge_kernels.c). One parser for both: the
 * codes are the Uint8Array on one side, the values the Float32Array on the other.
 */
static napi_value convert16(napi_env env, napi_callback_info info, bool decode) {
  const char *usage = decode ? "halfToFloat32(src: Uint8Array, bf16: boolean, count, dst: Float32Array)"
                             : "float32ToHalf(src: Float32Array, bf16: boolean, count, dst: Uint8Array)";
  size_t argc = 4, codes_length = 0, values_length = 0;
  napi_value argv[4];
  bool bf16 = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 4 ||
      napi_get_value_bool(env, argv[1], &bf16) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", usage);
    return NULL;
  }
  uint8_t *codes = u8_bytes(env, argv[decode ? 0 : 3], &codes_length, usage);
  if (codes == NULL) return NULL;
  float *values = f32_values(env, argv[decode ? 3 : 0], &values_length, usage);
  if (values == NULL) return NULL;
  int64_t count = whole_arg(env, argv[2], decode ? "halfToFloat32: count must be a whole number"
                                                 : "float32ToHalf: count must be a whole number");
  if (count < 0) return NULL;
  if (codes_length / 2 < (uint64_t)count || values_length < (uint64_t)count) {
    napi_throw_range_error(env, "EINVAL", decode ? "halfToFloat32: src or dst is shorter than count needs"
                                                 : "float32ToHalf: src or dst is shorter than count needs");
    return NULL;
  }
  int simd = decode ? merge_decode16(codes, bf16, (size_t)count, values)
                    : merge_encode16(values, bf16, (size_t)count, codes);
  return int_result(env, simd);
}

static napi_value half_to_float32(napi_env env, napi_callback_info info) { return convert16(env, info, true); }

static napi_value float32_to_half(napi_env env, napi_callback_info info) { return convert16(env, info, false); }

/*
 * loraAddLowRank(values, rows, cols, left, right, rank, scaling, ratio, deltaDtype, magnitude | null): a LoRA
 * update added to float32 `values` [rows × cols] in place (merge_kernels.c); left [rows × rank], right
 * [cols × rank] and magnitude [rows] are Float32Arrays; deltaDtype 0 float32, 1 F16, 2 BF16.
 */
static napi_value lora_add_low_rank(napi_env env, napi_callback_info info) {
  static const char usage[] =
      "loraAddLowRank(values: Float32Array, rows, cols, left: Float32Array, right: Float32Array, rank, scaling, "
      "ratio, deltaDtype, magnitude: Float32Array | null)";
  size_t argc = 10, values_length = 0, left_length = 0, right_length = 0, magnitude_length = 0;
  napi_value argv[10];
  double scaling = 0, ratio = 0;
  int32_t delta_dtype = 0;
  napi_valuetype magnitude_type;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 10 ||
      napi_get_value_double(env, argv[6], &scaling) != napi_ok ||
      napi_get_value_double(env, argv[7], &ratio) != napi_ok ||
      napi_get_value_int32(env, argv[8], &delta_dtype) != napi_ok || delta_dtype < 0 || delta_dtype > 2 ||
      napi_typeof(env, argv[9], &magnitude_type) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", usage);
    return NULL;
  }
  float *values = f32_values(env, argv[0], &values_length, usage);
  if (values == NULL) return NULL;
  const float *left = f32_values(env, argv[3], &left_length, usage);
  if (left == NULL) return NULL;
  const float *right = f32_values(env, argv[4], &right_length, usage);
  if (right == NULL) return NULL;
  const float *magnitude = NULL;
  if (magnitude_type != napi_null) {
    magnitude = f32_values(env, argv[9], &magnitude_length, usage);
    if (magnitude == NULL) return NULL;
  }
  int64_t rows = whole_arg(env, argv[1], "loraAddLowRank: rows must be a whole number");
  if (rows < 0) return NULL;
  int64_t cols = whole_arg(env, argv[2], "loraAddLowRank: cols must be a whole number");
  if (cols < 0) return NULL;
  int64_t rank = whole_arg(env, argv[5], "loraAddLowRank: rank must be a whole number");
  if (rank < 0) return NULL;
  /* Each product below is at most the length of a typed array, so none overflows 2^63. */
  if ((cols > 0 && (uint64_t)rows > values_length / (uint64_t)cols) ||
      (rank > 0 && ((uint64_t)rows > left_length / (uint64_t)rank || (uint64_t)cols > right_length / (uint64_t)rank)) ||
      (magnitude != NULL && magnitude_length < (uint64_t)rows)) {
    napi_throw_range_error(env, "EINVAL", "loraAddLowRank: an array is shorter than rows, cols and rank need");
    return NULL;
  }
  int simd = merge_add_low_rank(values, (size_t)rows, (size_t)cols, left, right, (size_t)rank, (float)scaling,
                                (float)ratio, delta_dtype, magnitude);
  if (simd < 0) {
    napi_throw_error(env, "ENOMEM", "loraAddLowRank: out of memory");
    return NULL;
  }
  return int_result(env, simd);
}

/*
 * keepSortedMagnitudes(values: Float32Array, descending, from, to, keepScratch?): keep the entries whose position after
 * torch's unstable sort of the magnitudes is in [from, to), zero the others, in place (merge_kernels.c). keepScratch:
 * the calling thread keeps the working memory for its next call (a worker's; at most 256 MiB, freed with the thread).
 */
static napi_value keep_sorted_magnitudes(napi_env env, napi_callback_info info) {
  static const char usage[] =
      "keepSortedMagnitudes(values: Float32Array, descending: boolean, from, to, keepScratch?: boolean)";
  size_t argc = 5, length = 0;
  napi_value argv[5];
  bool descending = false, keep_scratch = false;
  double from = 0, to = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 4 || argc > 5 ||
      (argc == 5 && napi_get_value_bool(env, argv[4], &keep_scratch) != napi_ok) ||
      napi_get_value_bool(env, argv[1], &descending) != napi_ok || napi_get_value_double(env, argv[2], &from) != napi_ok ||
      napi_get_value_double(env, argv[3], &to) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", usage);
    return NULL;
  }
  float *values = f32_values(env, argv[0], &length, usage);
  if (values == NULL) return NULL;
  if (length > 0x7fffffff || !(from >= -9007199254740991.0 && from <= 9007199254740991.0) ||
      !(to >= -9007199254740991.0 && to <= 9007199254740991.0) || from != (double)(int64_t)from ||
      to != (double)(int64_t)to) {
    napi_throw_range_error(env, "EINVAL", "keepSortedMagnitudes: at most 2^31 - 1 values; whole-number bounds");
    return NULL;
  }
  if (merge_keep_sorted(values, length, descending, (int64_t)from, (int64_t)to, keep_scratch) < 0) {
    napi_throw_error(env, "ENOMEM", "keepSortedMagnitudes: out of memory");
    return NULL;
  }
  return int_result(env, 0);
}

/* subtract16(x: Float32Array, base: Float32Array, bf16, count): x - base rounded to F16 or BF16, in place. */
static napi_value subtract16_js(napi_env env, napi_callback_info info) {
  static const char usage[] = "subtract16(x: Float32Array, base: Float32Array, bf16: boolean, count)";
  size_t argc = 4, x_length = 0, base_length = 0;
  napi_value argv[4];
  bool bf16 = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 4 ||
      napi_get_value_bool(env, argv[2], &bf16) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", usage);
    return NULL;
  }
  float *x = f32_values(env, argv[0], &x_length, usage);
  if (x == NULL) return NULL;
  const float *base = f32_values(env, argv[1], &base_length, usage);
  if (base == NULL) return NULL;
  int64_t count = whole_arg(env, argv[3], "subtract16: count must be a whole number");
  if (count < 0) return NULL;
  if (x_length < (uint64_t)count || base_length < (uint64_t)count) {
    napi_throw_range_error(env, "EINVAL", "subtract16: x or base is shorter than count needs");
    return NULL;
  }
  return int_result(env, merge_subtract16(x, base, bf16, (size_t)count));
}

/*
 * consensus2(base, a, b, weights, bf16, normalize, lambda, count, out): TIES's combination of two task vectors
 * (Float32Arrays; weights: the two rounded weights and the rounded divisors of a alone, b alone and both).
 */
static napi_value consensus2_js(napi_env env, napi_callback_info info) {
  static const char usage[] =
      "consensus2(base, a, b, weights: Float32Array, bf16: boolean, normalize: boolean, lambda, count, out)";
  size_t argc = 9, lengths[5] = {0, 0, 0, 0, 0};
  napi_value argv[9];
  bool bf16 = false, normalize = false;
  double lambda = 1;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 9 ||
      napi_get_value_bool(env, argv[4], &bf16) != napi_ok || napi_get_value_bool(env, argv[5], &normalize) != napi_ok ||
      napi_get_value_double(env, argv[6], &lambda) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", usage);
    return NULL;
  }
  const float *base = f32_values(env, argv[0], &lengths[0], usage);
  if (base == NULL) return NULL;
  const float *a = f32_values(env, argv[1], &lengths[1], usage);
  if (a == NULL) return NULL;
  const float *b = f32_values(env, argv[2], &lengths[2], usage);
  if (b == NULL) return NULL;
  const float *w = f32_values(env, argv[3], &lengths[3], usage);
  if (w == NULL) return NULL;
  float *out = f32_values(env, argv[8], &lengths[4], usage);
  if (out == NULL) return NULL;
  int64_t count = whole_arg(env, argv[7], "consensus2: count must be a whole number");
  if (count < 0) return NULL;
  if (lengths[3] != 5) {
    napi_throw_range_error(env, "EINVAL", "consensus2: weights must hold 5 values");
    return NULL;
  }
  for (int k = 0; k < 5; k++) {
    if (k != 3 && lengths[k] < (uint64_t)count) {
      napi_throw_range_error(env, "EINVAL", "consensus2: an array is shorter than count needs");
      return NULL;
    }
  }
  return int_result(env, merge_consensus2(base, a, b, w, bf16, normalize, (float)lambda, (size_t)count, out));
}

/* At most this many inputs to one linear merge call (mergekit configs merge a handful of models). */
#define MERGE_MAX_INPUTS 64

/*
 * mergeLinear16(srcs, weights, divisor, bf16, count, dst): a linear merge of `count` 16-bit values of each Uint8Array
 * in `srcs` (F16, or BF16 when `bf16`), with float32 `weights` (a Float32Array), normalized by `divisor` unless it is
 * NaN, into the Uint8Array `dst` (native/merge_kernels.c). Returns 1 when the AVX2 kernel ran, 0 for the portable one.
 */
static napi_value merge_linear16_js(napi_env env, napi_callback_info info) {
  static const char usage[] =
      "mergeLinear16(srcs: Uint8Array[], weights: Float32Array, divisor, bf16: boolean, count, dst: Uint8Array)";
  size_t argc = 6;
  napi_value argv[6];
  double count = 0, divisor = 0;
  bool bf16 = false, is_array = false;
  uint32_t n = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 6 ||
      napi_is_array(env, argv[0], &is_array) != napi_ok || !is_array ||
      napi_get_array_length(env, argv[0], &n) != napi_ok || napi_get_value_double(env, argv[2], &divisor) != napi_ok ||
      napi_get_value_bool(env, argv[3], &bf16) != napi_ok || napi_get_value_double(env, argv[4], &count) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", usage);
    return NULL;
  }
  float weights[MERGE_MAX_INPUTS];
  if (weights_arg(env, argv[1], n, MERGE_MAX_INPUTS, weights, "mergeLinear16: 1 to 64 inputs, one weight each") != 0) {
    return NULL;
  }
  size_t length = 0;
  const uint8_t *srcs[MERGE_MAX_INPUTS];
  for (uint32_t j = 0; j < n; j++) {
    napi_value element;
    if (napi_get_element(env, argv[0], j, &element) != napi_ok) return NULL;
    srcs[j] = u8_bytes(env, element, &length, usage);
    if (srcs[j] == NULL) return NULL;
    if (length / 2 < (uint64_t)count) {
      napi_throw_range_error(env, "EINVAL", "mergeLinear16: an input is shorter than count needs");
      return NULL;
    }
  }
  uint8_t *dst = u8_bytes(env, argv[5], &length, usage);
  if (dst == NULL) return NULL;
  if (length / 2 < (uint64_t)count) {
    napi_throw_range_error(env, "EINVAL", "mergeLinear16: dst is shorter than count needs");
    return NULL;
  }
  int normalize = divisor == divisor;
  int simd = merge_linear16(srcs, weights, n, bf16, normalize, normalize ? (float)divisor : 1.0f, (size_t)count, dst);
  napi_value result;
  if (napi_create_int32(env, simd, &result) != napi_ok) return NULL;
  return result;
}

NAPI_MODULE_INIT(/* napi_env env, napi_value exports */) {
  napi_value fn;
  if (napi_create_function(env, "copyRange", NAPI_AUTO_LENGTH, copy_range, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "copyRange", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "privatePages", NAPI_AUTO_LENGTH, private_pages, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "privatePages", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "writeDirect", NAPI_AUTO_LENGTH, direct_write, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "writeDirect", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "copyDirect", NAPI_AUTO_LENGTH, copy_direct, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "copyDirect", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "preallocate", NAPI_AUTO_LENGTH, preallocate, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "preallocate", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "q8FromF16", NAPI_AUTO_LENGTH, q8_from_f16, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "q8FromF16", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "mergeLinear16", NAPI_AUTO_LENGTH, merge_linear16_js, NULL, &fn) != napi_ok) {
    return NULL;
  }
  if (napi_set_named_property(env, exports, "mergeLinear16", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "mergeLinear16FileAsync", NAPI_AUTO_LENGTH, merge_linear16_file_async, NULL, &fn) !=
      napi_ok) {
    return NULL;
  }
  if (napi_set_named_property(env, exports, "mergeLinear16FileAsync", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "halfToFloat32", NAPI_AUTO_LENGTH, half_to_float32, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "halfToFloat32", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "float32ToHalf", NAPI_AUTO_LENGTH, float32_to_half, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "float32ToHalf", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "loraAddLowRank", NAPI_AUTO_LENGTH, lora_add_low_rank, NULL, &fn) != napi_ok) {
    return NULL;
  }
  if (napi_set_named_property(env, exports, "loraAddLowRank", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "keepSortedMagnitudes", NAPI_AUTO_LENGTH, keep_sorted_magnitudes, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "keepSortedMagnitudes", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "subtract16", NAPI_AUTO_LENGTH, subtract16_js, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "subtract16", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "consensus2", NAPI_AUTO_LENGTH, consensus2_js, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "consensus2", fn) != napi_ok) return NULL;
  return exports;
}
