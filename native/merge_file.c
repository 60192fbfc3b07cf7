/*
 * mergeLinear16FileAsync(fds, positions, weights, divisor, bf16, count, outPath, outPosition, threads)
 *   -> Promise of the bytes written
 *
 * A linear merge of `count` 16-bit values (F16, or BF16 when `bf16`) read from each input file (`fds[j]` from byte
 * `positions[j]`) written at `outPosition` of the file at `outPath` (sized already): merge_linear16's bytes, with no
 * byte passing through JavaScript. The output's whole pages are written from 4 MiB page-aligned pieces, each with
 * O_DIRECT or through the page cache (below), the partial pages at both ends through the page cache. `threads`
 * threads (the calling one included) each take the next piece: read every input's part of it 256 KiB at a time into
 * buffers that stay in the core's cache, merge into the piece, write the piece; so one thread's write overlaps
 * another's reads and merging.
 *
 * Measured on the 2-vCPU VM (the bench's linear merge of two 2.37 GiB F16 fine-tunes): per 2 MiB chunk, the worker
 * threads' reads into JavaScript buffers, merge, and writeDirect (a 4 MiB bounce buffer allocated and three threads
 * created per call, the chunk copied into it) took 2.1 s user + 3.7-4.6 s system CPU, 5.6-6.3 s wall; the
 * figures of this path are in bench/figures/merge-models.ts.
 *
 * Each piece goes to the file the way that wrote the last large writes faster (write_cheaper, direct_write.c):
 * this merge on the host of 2026-12-03 took 6.2-8.4 s wall with direct writes only, 2.75-5.8 s with buffered ones
 * only (A/B, load 4-6).
 *
 * EINVAL: not possible here (no O_DIRECT on this file system, an odd output position): the caller merges the range
 * another way. ENODATA: an input ended before its range. Other errors are the reads' and writes' (ENOSPC...).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "copy_args.h"
#include "direct_write.h"
#include "merge_file.h"
#include "merge_kernels.h"

#define ALIGN ((uint64_t)4096)
/* Output bytes per piece (one direct write): a multiple of ALIGN. */
#define PIECE ((uint64_t)4 << 20)
/* Output bytes per step of a piece: each input's part (the same length for 16-bit inputs) is read into a buffer of
 * this size, which stays in the core's L2 cache for the merge that follows. */
#define STEP ((uint64_t)256 << 10)
#define MAX_INPUTS 64
#define MAX_THREADS 8

typedef struct {
  const int *fds;
  const uint64_t *positions; /* byte position of element 0 of each input */
  size_t n;
  const float *weights;
  int bf16, normalize;
  float divisor;
  uint64_t out_position; /* file position of element 0 of the output */
  int direct_fd, buffered_fd;
  uint64_t begin, end; /* the direct range (file positions, ALIGN-aligned) */
  atomic_uint_fast64_t next;
  atomic_int err;
} merge_job;

/* Output bytes [from, to) (file positions, even offsets from out_position) merged into `into`, read through `in`
 * (n buffers of STEP bytes), STEP at a time. */
static int merge_range(const merge_job *j, uint64_t from, uint64_t to, uint8_t *into, uint8_t *const *in) {
  for (uint64_t at = from; at < to; at += STEP) {
    uint64_t length = to - at < STEP ? to - at : STEP;
    uint64_t element = (at - j->out_position) / 2;
    for (size_t k = 0; k < j->n; k++) {
      int err = read_all(j->fds[k], in[k], length, j->positions[k] + element * 2);
      if (err != 0) return err;
    }
    merge_linear16((const uint8_t *const *)in, j->weights, j->n, j->bf16, j->normalize, j->divisor, length / 2,
                   into + (at - from));
  }
  return 0;
}

static void fail(merge_job *j, int err) {
  int none = 0;
  atomic_compare_exchange_strong(&j->err, &none, err);
}

/*
 * Piece buffers kept from call to call (a task is a few pieces; fresh buffers are page faults and zeroed pages each
 * time, 600 MiB of them over the bench's merge).
 */
#define SPARE_PIECES 8
/* A piece buffer also holds the read buffers of up to this many inputs, after the piece. */
#define PIECE_INPUTS 4
#define PIECE_BYTES (PIECE + PIECE_INPUTS * STEP)
static pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *spare_pieces[SPARE_PIECES];
static int spare_count = 0;

static uint8_t *take_piece(void) {
  uint8_t *piece = NULL;
  pthread_mutex_lock(&spare_lock);
  if (spare_count > 0) piece = spare_pieces[--spare_count];
  pthread_mutex_unlock(&spare_lock);
  if (piece == NULL && posix_memalign((void **)&piece, ALIGN, PIECE_BYTES) != 0) piece = NULL;
  return piece;
}

static void give_piece(uint8_t *piece) {
  if (piece == NULL) return;
  pthread_mutex_lock(&spare_lock);
  if (spare_count < SPARE_PIECES) {
    spare_pieces[spare_count++] = piece;
    piece = NULL;
  }
  pthread_mutex_unlock(&spare_lock);
  free(piece);
}

static void *merge_worker(void *arg) {
  merge_job *j = arg;
  uint8_t *piece = take_piece(), *in[MAX_INPUTS];
  uint8_t *ins = NULL; /* read buffers of more than PIECE_INPUTS inputs */
  if (piece == NULL || (j->n > PIECE_INPUTS && (ins = malloc(j->n * STEP)) == NULL)) {
    give_piece(piece);
    fail(j, ENOMEM);
    return NULL;
  }
  if (ins == NULL) ins = piece + PIECE;
  for (size_t k = 0; k < j->n; k++) in[k] = ins + k * STEP;
  for (;;) {
    if (atomic_load(&j->err) != 0) break;
    uint64_t at = j->begin + atomic_fetch_add(&j->next, 1) * PIECE;
    if (at >= j->end) break;
    uint64_t length = j->end - at < PIECE ? j->end - at : PIECE;
    int err = merge_range(j, at, at + length, piece, in);
    if (err == 0) err = write_cheaper(j->direct_fd, j->buffered_fd, piece, length, at);
    if (err != 0) {
      fail(j, err);
      break;
    }
  }
  if (ins != piece + PIECE) free(ins);
  give_piece(piece);
  return NULL;
}

/* Output bytes [from, to) (less than two pages) merged and written through the page cache. */
static int write_edge(const merge_job *j, uint64_t from, uint64_t to) {
  if (to <= from) return 0;
  uint8_t *into = malloc(to - from), *ins = malloc(j->n * STEP), *in[MAX_INPUTS];
  int err = into == NULL || ins == NULL ? ENOMEM : 0;
  if (err == 0) {
    for (size_t k = 0; k < j->n; k++) in[k] = ins + k * STEP;
    err = merge_range(j, from, to, into, in);
  }
  if (err == 0) err = write_all(j->buffered_fd, into, to - from, from);
  free(ins);
  free(into);
  return err;
}

static int run_merge(merge_job *j, uint64_t count, const char *path, int threads) {
  uint64_t start = j->out_position, stop = start + count * 2;
  j->begin = (start + ALIGN - 1) / ALIGN * ALIGN;
  j->end = stop / ALIGN * ALIGN;
  if (j->end < j->begin) j->end = j->begin;
  atomic_init(&j->next, 0);
  atomic_init(&j->err, 0);
#ifdef O_DIRECT
  j->buffered_fd = open(path, O_WRONLY | O_CLOEXEC);
  if (j->buffered_fd < 0) return errno;
  j->direct_fd = -1;
  if (j->end > j->begin) {
    j->direct_fd = open(path, O_WRONLY | O_CLOEXEC | O_DIRECT);
    if (j->direct_fd < 0) {
      int err = errno;
      close(j->buffered_fd);
      return err;
    }
    pthread_t tids[MAX_THREADS - 1];
    bool started[MAX_THREADS - 1] = {false};
    uint64_t pieces = (j->end - j->begin + PIECE - 1) / PIECE;
    int helpers = threads - 1;
    if ((uint64_t)helpers > pieces - 1) helpers = (int)(pieces - 1);
    for (int i = 0; i < helpers; i++) started[i] = pthread_create(&tids[i], NULL, merge_worker, j) == 0;
    merge_worker(j);
    for (int i = 0; i < helpers; i++)
      if (started[i]) pthread_join(tids[i], NULL);
  }
  int err = atomic_load(&j->err);
  if (err == 0) err = write_edge(j, start, j->end > j->begin ? j->begin : stop);
  if (err == 0 && j->end > j->begin) err = write_edge(j, j->end, stop);
  if (j->direct_fd >= 0) close(j->direct_fd);
  if (close(j->buffered_fd) != 0 && err == 0) err = errno;
  return err;
#else
  (void)path;
  (void)threads;
  return EINVAL; /* no O_DIRECT here */
#endif
}

/* A number argument (false when it is not a number). */
static bool number_arg(napi_env env, napi_value value, double *out) {
  return napi_get_value_double(env, value, out) == napi_ok;
}

/* One call's arguments, copied out of JavaScript (an async call runs after its caller's values are gone). */
typedef struct {
  int fds[MAX_INPUTS];
  uint64_t positions[MAX_INPUTS];
  float weights[MAX_INPUTS];
  uint32_t n;
  bool bf16;
  double divisor, count, out_position;
  int threads;
  char path[4096];
  int err; /* the async call's result */
  napi_deferred deferred;
  napi_async_work work;
} merge_call;

/* The arguments of mergeLinear16FileAsync into `c`; false after throwing. */
static bool merge_call_args(napi_env env, napi_callback_info info, merge_call *c) {
  static const char usage[] = "mergeLinear16FileAsync(fds: number[], positions: number[], weights: Float32Array, divisor, "
                              "bf16: boolean, count, outPath: string, outPosition, threads)";
  size_t argc = 9;
  napi_value argv[9];
  bool fds_array = false, positions_array = false;
  uint32_t n_positions = 0;
  double threads_arg = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 9 ||
      napi_is_array(env, argv[0], &fds_array) != napi_ok || !fds_array ||
      napi_is_array(env, argv[1], &positions_array) != napi_ok || !positions_array ||
      napi_get_array_length(env, argv[0], &c->n) != napi_ok ||
      napi_get_array_length(env, argv[1], &n_positions) != napi_ok || n_positions != c->n ||
      !number_arg(env, argv[3], &c->divisor) ||
      napi_get_value_bool(env, argv[4], &c->bf16) != napi_ok || !number_arg(env, argv[8], &threads_arg)) {
    napi_throw_type_error(env, "EINVAL", usage);
    return false;
  }
  if (weights_arg(env, argv[2], c->n, MAX_INPUTS, c->weights,
                  "mergeLinear16FileAsync: 1 to 64 inputs, one position and one weight each") != 0) {
    return false;
  }
  for (uint32_t k = 0; k < c->n; k++) {
    napi_value element;
    if (napi_get_element(env, argv[0], k, &element) != napi_ok) return false;
    double fd = integer_arg(env, element, "fd");
    if (fd < 0) return false;
    if (fd > INT32_MAX) {
      napi_throw_range_error(env, "EINVAL", "fd must be an int32");
      return false;
    }
    c->fds[k] = (int)fd;
    if (napi_get_element(env, argv[1], k, &element) != napi_ok) return false;
    double position = integer_arg(env, element, "position");
    if (position < 0) return false;
    c->positions[k] = (uint64_t)position;
  }
  c->count = integer_arg(env, argv[5], "count");
  if (c->count < 0) return false;
  c->out_position = integer_arg(env, argv[7], "outPosition");
  if (c->out_position < 0) return false;
  size_t path_length = 0;
  if (napi_get_value_string_utf8(env, argv[6], c->path, sizeof c->path, &path_length) != napi_ok ||
      path_length >= sizeof c->path - 1) {
    napi_throw_type_error(env, "EINVAL", "mergeLinear16FileAsync: outPath must be a string shorter than 4 KiB");
    return false;
  }
  c->threads = threads_arg >= 1 && threads_arg <= MAX_THREADS ? (int)threads_arg : 1;
  return true;
}

/* The merge of a call: 0 or an errno. */
static int merge_call_run(const merge_call *c) {
  merge_job j = {.fds = c->fds,
                 .positions = c->positions,
                 .n = c->n,
                 .weights = c->weights,
                 .bf16 = c->bf16,
                 .normalize = c->divisor == c->divisor,
                 .divisor = c->divisor == c->divisor ? (float)c->divisor : 1.0f,
                 .out_position = (uint64_t)c->out_position};
  /* 16-bit elements on even file positions: a piece's edges never split an element. */
  if ((uint64_t)c->out_position % 2 != 0) return EINVAL;
  return c->count == 0 ? 0 : run_merge(&j, (uint64_t)c->count, c->path, c->threads);
}

static void merge_call_execute(napi_env env, void *data) {
  (void)env;
  merge_call *c = data;
  c->err = merge_call_run(c);
}

static void merge_call_complete(napi_env env, napi_status status, void *data) {
  merge_call *c = data;
  napi_value value = NULL;
  if (status != napi_ok) c->err = ECANCELED;
  if (c->err == 0) {
    if (napi_create_double(env, c->count * 2, &value) == napi_ok) napi_resolve_deferred(env, c->deferred, value);
  } else {
    /* throw_errno throws; take the pending exception back as the rejection's value. */
    throw_errno(env, c->err, "mergeLinear16FileAsync");
    if (napi_get_and_clear_last_exception(env, &value) == napi_ok) napi_reject_deferred(env, c->deferred, value);
  }
  napi_delete_async_work(env, c->work);
  free(c);
}

/*
 * The merge runs on a thread of libuv's pool, so that the main thread starts it with no worker of its own. Starting the merge pool's two workers
 * (each a Node environment loading the package and the addon) took ~0.23 s of the bench's 2.6 s linear merge on the
 * 2-vCPU VM before the first byte was merged (strace -tt of the threads' creation, 2026-12-03).
 */
napi_value merge_linear16_file_async(napi_env env, napi_callback_info info) {
  merge_call *c = calloc(1, sizeof *c);
  if (c == NULL) return throw_errno(env, ENOMEM, "mergeLinear16FileAsync");
  if (!merge_call_args(env, info, c)) {
    free(c);
    return NULL;
  }
  napi_value promise, name;
  if (napi_create_promise(env, &c->deferred, &promise) != napi_ok ||
      napi_create_string_utf8(env, "mergeLinear16FileAsync", NAPI_AUTO_LENGTH, &name) != napi_ok ||
      napi_create_async_work(env, NULL, name, merge_call_execute, merge_call_complete, c, &c->work) != napi_ok) {
    free(c);
    return NULL;
  }
  if (napi_queue_async_work(env, c->work) != napi_ok) {
    napi_delete_async_work(env, c->work);
    free(c);
    return NULL;
  }
  return promise;
}
