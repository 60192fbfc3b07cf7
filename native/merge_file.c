/*
 * mergeLinear16FileAsync(fds, positions, weights, divisor, bf16, count, outPath, outPosition, threads)
 *   -> Promise of the bytes written
 *
 * A linear merge of `count` 16-bit values (F16, or BF16 when `bf16`) read from each input file (`fds[j]` from byte
 * `positions[j]`) written at `outPosition` of the file at `outPath` (sized already): merge_linear16's bytes, with no
 * byte passing through JavaScript. The output's whole pages are written from 4 MiB page-aligned pieces, each with
 * O_DIRECT or through the page cache (below), the partial pages at both ends through the page cache. `threads`
 * threads (the calling one included) each take the next piece: map every input's part of it, merge it 256 KiB at a
 * time, and write each 256 KiB as it is merged (through the page cache) or the whole piece (directly); so one
 * thread's write overlaps another's merging.
 *
 * Inputs are mapped, not read: pread's copy out of the page cache was a fifth of the merge's CPU (perf -a). The bench's
 * linear merge on the 2-vCPU VM, quiet, interleaved A/B, 2026-12-03: 2.24-2.41 s wall with pread, 1.76-2.24 s with a
 * mapping of each piece's inputs (system CPU 1.93-2.17 -> 1.08-1.60 s), peak RSS 73 -> 103 MiB (the mapped pieces),
 * same bytes. A mapping of a whole task (32 MiB an input) was no faster and held 200 MiB; MADV_POPULATE_READ of it
 * cost 0.3-0.5 s more. A page of an input that its file no longer backs (truncated by another process during the
 * merge) is a SIGBUS, turned into ENODATA by map_guard.c, as pread's short read was. Where no mapping can be made,
 * the piece's inputs are read as before: 256 KiB at a time into buffers that stay in the core's cache.
 *
 * Buffered writes of 256 KiB, each as soon as it is merged, rather than of the 4 MiB piece: the same A/B, 1.94 s
 * median wall (1 MiB: 2.03 s, 64 KiB: 3.10 s) against 2.97 s, system CPU 1.5 against 3.5 s. The step is still in
 * the core's cache for the kernel's copy, and a writer holds the inode's lock, which the others spin on, for a
 * sixteenth of the time.
 *
 * Measured on the 2-vCPU VM (the bench's linear merge of two 2.37 GiB F16 fine-tunes): per 2 MiB chunk, the worker
 * threads' reads into JavaScript buffers, merge, and writeDirect (a 4 MiB bounce buffer allocated and three threads
 * created per call, the chunk copied into it) took 2.1 s user + 3.7-4.6 s system CPU, 5.6-6.3 s wall; the
 * figures of this path are in bench/figures/merge-models.ts.
 *
 * Each piece goes to the file the way that wrote the last large writes faster (write_way_next, direct_write.c):
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
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "copy_args.h"
#include "direct_write.h"
#include "map_guard.h"
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
  uint64_t page; /* the mappings' page size; 0: inputs are read, not mapped */
  const float *weights;
  int bf16, normalize;
  float divisor;
  uint64_t out_position; /* file position of element 0 of the output */
  uint64_t count;        /* elements merged */
  int direct_fd, buffered_fd;
  uint64_t begin, end; /* the direct range (file positions, ALIGN-aligned) */
  atomic_uint_fast64_t next;
  atomic_int err;
} merge_job;

/* A range's merge, step by step, over its inputs' bytes: mapped (`mapped[k]` holds element `first` of input k) or read
 * into `in`. */
typedef struct {
  const merge_job *j;
  uint64_t from, to, first;
  int fd; /* >= 0: each step is merged into `into` and written there at once; else into its place in `into` */
  uint8_t *into;
  uint8_t *const *in;
  const uint8_t *mapped[MAX_INPUTS];
} steps;

static int merge_steps(void *arg) {
  const steps *s = arg;
  const merge_job *j = s->j;
  for (uint64_t at = s->from; at < s->to; at += STEP) {
    uint64_t length = s->to - at < STEP ? s->to - at : STEP;
    uint64_t element = (at - j->out_position) / 2;
    const uint8_t *src[MAX_INPUTS];
    for (size_t k = 0; k < j->n; k++) {
      if (s->mapped[k] != NULL) {
        src[k] = s->mapped[k] + (element - s->first) * 2;
        continue;
      }
      int err = read_all(j->fds[k], s->in[k], length, j->positions[k] + element * 2);
      if (err != 0) return err;
      src[k] = s->in[k];
    }
    uint8_t *into = s->fd >= 0 ? s->into : s->into + (at - s->from);
    merge_linear16(src, j->weights, j->n, j->bf16, j->normalize, j->divisor, length / 2, into);
    if (s->fd >= 0) {
      int err = write_all(s->fd, into, length, at);
      if (err != 0) return err;
    }
  }
  return 0;
}

/* After a SIGBUS in a mapping: ENODATA when an input has shrunk below its range (pread's answer), else EIO. */
static int fault_error(const merge_job *j, uint64_t count) {
  for (size_t k = 0; k < j->n; k++) {
    struct stat st;
    if (fstat(j->fds[k], &st) == 0 && (uint64_t)st.st_size < j->positions[k] + count * 2) return ENODATA;
  }
  return EIO;
}

/* Output bytes [from, to) (file positions, even offsets from out_position) merged STEP at a time from mappings of the
 * inputs' parts, or read through `in` (n buffers of STEP bytes): into `into`, or with `fd` >= 0 each step written at
 * its position of `fd` as it is merged (`into` then holds a step). */
static int merge_range(const merge_job *j, uint64_t from, uint64_t to, uint8_t *into, uint8_t *const *in, int fd) {
  steps s = {.j = j, .from = from, .to = to, .first = (from - j->out_position) / 2, .fd = fd, .into = into, .in = in};
  void *maps[MAX_INPUTS] = {NULL};
  size_t lengths[MAX_INPUTS] = {0};
  bool any = false;
  for (size_t k = 0; k < j->n && j->page != 0; k++) {
    uint64_t first = j->positions[k] + s.first * 2, start = first / j->page * j->page;
    size_t length = (size_t)(first + (to - from) - start);
    void *map = mmap(NULL, length, PROT_READ, MAP_SHARED, j->fds[k], (off_t)start);
    if (map == MAP_FAILED) continue; /* this input is read */
    maps[k] = map;
    lengths[k] = length;
    s.mapped[k] = (const uint8_t *)map + (first - start);
    any = true;
  }
  int err = any ? map_guarded(merge_steps, &s) : merge_steps(&s);
  if (err == MAP_GUARD_FAULT) err = fault_error(j, j->count);
  for (size_t k = 0; k < j->n; k++)
    if (maps[k] != NULL) munmap(maps[k], lengths[k]);
  return err;
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
    /* Through the page cache, each step is written as soon as it is merged (it is still in the core's cache); a direct
     * write takes the whole piece. A way's cost is the piece's merge and write. */
    int way = j->direct_fd >= 0 ? write_way_next() : WRITE_BUFFERED;
    uint64_t began = write_way_clock();
    int err = merge_range(j, at, at + length, piece, in, way == WRITE_BUFFERED ? j->buffered_fd : -1);
    if (err == 0 && way == WRITE_DIRECT) err = write_all(j->direct_fd, piece, length, at);
    if (err == 0) write_way_cost(way, write_way_clock() - began, length);
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
    err = merge_range(j, from, to, into, in, -1);
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
  if (c->count == 0) return 0;
  j.count = (uint64_t)c->count;
  /* Inputs are mapped when each is long enough now (an input that is not is pread's ENODATA, up front) and a SIGBUS
   * from one that shrinks later can be caught. */
  long page = sysconf(_SC_PAGESIZE);
  j.page = page > 0 && map_guard_ready() == 0 ? (uint64_t)page : 0;
  for (size_t k = 0; k < j.n; k++) {
    struct stat st;
    if (fstat(j.fds[k], &st) != 0 || !S_ISREG(st.st_mode)) j.page = 0;
    else if ((uint64_t)st.st_size < j.positions[k] + j.count * 2) return ENODATA;
  }
  return run_merge(&j, j.count, c->path, c->threads);
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
