/*
 * writeDirect(fd, buffers, position, adaptive?) -> bytes written straight from `buffers` (the rest went through a
 * bounce buffer or, for the partial pages at both ends, through the page cache)
 * copyDirect(fdIn, positionIn, fdOut, positionOut, length) -> length (pread into the bounce buffers, then the same
 * direct writes; ENODATA when the input ends first)
 *
 * Writes the Uint8Arrays of `buffers` back to back from `position` of `fd` with O_DIRECT for every whole 4 KiB page
 * of the range: the bytes go from this process's memory to the device, and no page of the page cache is allocated
 * for them. Why: on VMs whose free memory is handed back to the host (virtio-balloon free page reporting), the fresh
 * page-cache pages a buffered write of a large file needs are faulted in again on the host at their first touch;
 * measured on a 2-vCPU VM, 2.37 GiB from anonymous memory: buffered pwrite 4.0-7.3 s (all of it in
 * copy_folio_from_iter_atomic, the copy into new page-cache pages; the same write over pages already cached took
 * 0.36 s), O_DIRECT 0.84-1.2 s. A page of the output is written from the caller's memory where that memory has the
 * page's alignment (the loader places owned data so), in 16 MiB writes, else gathered into a 4 MiB bounce buffer per
 * thread first.
 * Four threads keep several writes in flight (each direct write waits for the device).
 *
 * With `adaptive` (saveFile, and the merges', bakes' and GGUF converter's workers), each piece of a range of 1 MiB
 * or more of whole pages goes the way that cost less lately instead, direct or through the page cache
 * (write_way_next, below): which is faster depends on the machine, and on a VM on its history.
 *
 * The descriptor's O_DIRECT flag is set for the call and restored after it. EINVAL means "direct I/O is not
 * possible here" (a file system without it, an unusual alignment): nothing is promised about what was written, and
 * the caller writes the same range again another way (positions are explicit). Other errors are the write's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "copy_args.h"
#include "direct_write.h"

/* Offset and memory alignment of every direct write: a page, which every Linux block device accepts. */
#define ALIGN ((uint64_t)4096)
/* Bytes per direct write straight from memory: 16 MiB measured 1.13-1.32 s for 2.37 GiB, 4 MiB 1.29-1.37 s. */
#define CHUNK ((uint64_t)16 << 20)
/* Bytes per bounce buffer (and per write from it): the largest request of the usual block device, 4 threads' worth
 * kept small for the byte-copy commands' memory. */
#define BOUNCE ((uint64_t)4 << 20)
/* Writer threads, the calling one included. */
#define THREADS 4
/* Largest buffered write of the partial pages at the ends (two pages at most, in pieces). */
#define EDGE 4096

typedef struct {
  const uint8_t *data;
  uint64_t at; /* output offset of data[0] */
  uint64_t length;
} span;

typedef struct {
  int fd;
  int src_fd;        /* copyDirect: the input (-1: the spans) */
  int64_t src_delta; /* copyDirect: input offset of output byte `at` is at + src_delta */
  const span *spans;
  size_t n_spans;
  uint64_t begin, end; /* the direct range, ALIGN-aligned */
  atomic_uint_fast64_t next;
  atomic_uint_fast64_t from_memory;
  atomic_int err;
  /* Adaptive calls: a descriptor of the file without O_DIRECT (its own open file description), else -1. Each piece
   * then goes the way write_way_next picks, and its cost is recorded. */
  int buffered_fd;
} job;

/* The span holding output byte `at` (spans are sorted, back to back, none empty). */
static size_t find_span(const span *spans, size_t n, uint64_t at) {
  size_t lo = 0, hi = n;
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (spans[mid].at <= at) lo = mid;
    else hi = mid;
  }
  return lo;
}

/* Output bytes [at, at + length) into `into`. */
static void gather(const span *spans, size_t n, uint64_t at, uint64_t length, uint8_t *into) {
  for (size_t i = find_span(spans, n, at); length > 0; i++) {
    uint64_t skip = at - spans[i].at;
    uint64_t take = spans[i].length - skip < length ? spans[i].length - skip : length;
    memcpy(into, spans[i].data + skip, take);
    into += take;
    at += take;
    length -= take;
  }
}

/* Output bytes [at, at + length) into `into`: from the spans, or read from the input. */
static int fill(const job *j, uint64_t at, uint64_t length, uint8_t *into) {
  if (j->src_fd < 0) {
    gather(j->spans, j->n_spans, at, length, into);
    return 0;
  }
  return read_all(j->src_fd, into, length, (uint64_t)((int64_t)at + j->src_delta));
}

/*
 * Large writes take the way that cost less lately, straight to the device (O_DIRECT) or through the page cache,
 * because which is faster depends on the machine, and on a VM on its history. On the 2-vCPU VM of 2026-12-02 (its free
 * memory handed back to the host, fresh page-cache pages faulted in again on the host), 2.37 GiB: buffered writes
 * 4.0-7.3 s, direct ones 0.84-1.2 s. On the host of 2026-12-03 (the same VM kind, a slower disk, its memory touched
 * before): `cp` 1.35-1.53 s, `dd bs=4M oflag=direct` 5.5-6.9 s.
 * What a way costs is nanoseconds per MiB of its writes, an average that forgets (3/4 of the last value and 1/4 of
 * the new one, which counts for at most twice the average), 0 until measured; process-wide, so that every call and
 * thread learns from the others' writes (a thread blocked in a slow write leaves the core to the others: a way's cost
 * per write is what choosing it costs). Until both ways are measured, writes alternate; afterwards a write now and
 * then goes the dearer way, so that a change (the device's queue filling, the host's pages) is seen: one in EXPLORE.
 * A direct write that explored and lost makes the next one come half as often, down to one in EXPLORE_RARELY: a
 * direct write into a file's unwritten (fallocated) blocks holds the inode's lock against the buffered writers until
 * the device is done. The bench's linear merge on the host of 2026-12-03 (disk 223-388 MB/s direct), interleaved
 * A/B: 1.64-2.04 s wall with buffered writes only, 2.05-2.78 s with one piece in 16 sent directly. A buffered write
 * that explores holds the lock only for its copy, and a way chosen by mistake must not last: with both ways backing
 * off, one merge went directly to that disk and took 7 s instead of 2.
 */
#define EXPLORE 16
#define EXPLORE_RARELY 512
/* Adaptive ranges shorter than this go directly (the LoRA bake writes 2 MiB blocks). */
#define LEARN_BYTES ((uint64_t)1 << 20)
static atomic_uint_fast64_t way_cost[2];
static atomic_uint_fast64_t ways_chosen;
static atomic_uint_fast64_t explore_every = EXPLORE, explore_at = EXPLORE;

/* The way that cost less lately, or -1 while either is unmeasured. */
static int cheaper_way(void) {
  uint64_t direct = atomic_load(&way_cost[WRITE_DIRECT]), buffered = atomic_load(&way_cost[WRITE_BUFFERED]);
  if (direct == 0 || buffered == 0) return -1;
  return buffered <= direct ? WRITE_BUFFERED : WRITE_DIRECT;
}

int write_way_next(void) {
  uint64_t n = atomic_fetch_add(&ways_chosen, 1);
  int best = cheaper_way();
  if (best < 0) { /* the unmeasured way, or either while neither is measured */
    uint64_t direct = atomic_load(&way_cost[WRITE_DIRECT]), buffered = atomic_load(&way_cost[WRITE_BUFFERED]);
    if (direct == 0 && buffered == 0) return (int)(n & 1);
    return direct == 0 ? WRITE_DIRECT : WRITE_BUFFERED;
  }
  uint64_t at = atomic_load(&explore_at);
  uint64_t every = best == WRITE_BUFFERED ? atomic_load(&explore_every) : EXPLORE;
  if (n >= at && atomic_compare_exchange_strong(&explore_at, &at, n + every)) return 1 - best;
  return best;
}

void write_way_cost(int way, uint64_t ns, uint64_t bytes) {
  if (bytes == 0) return;
  int best = cheaper_way();
  uint64_t cost = (uint64_t)((double)ns * (double)(1 << 20) / (double)bytes) + 1, old = atomic_load(&way_cost[way]);
  /* One write counts for at most twice the average: a stall of one (63 ms/MiB among buffered writes of 1.5-5 ms/MiB,
   * the same merge) must not send the next hundred the dearer way; a lasting change still shows in a few writes. */
  if (old != 0 && cost > 2 * old) cost = 2 * old;
  atomic_store(&way_cost[way], old == 0 ? cost : (old * 3 + cost) / 4 + 1);
  if (best < 0 || way == best || way != WRITE_DIRECT) return;
  /* A direct write that explored: the next comes as soon again if direct writes now win, else half as often. */
  uint64_t every = atomic_load(&explore_every);
  uint64_t next = cheaper_way() == way ? EXPLORE : every * 2 < EXPLORE_RARELY ? every * 2 : EXPLORE_RARELY;
  atomic_store(&explore_every, next);
}

uint64_t write_way_clock(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int read_all(int fd, uint8_t *into, uint64_t length, uint64_t from) {
  while (length > 0) {
    ssize_t got = pread(fd, into, length, (off_t)from);
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (got == 0) return ENODATA; /* the input ended */
    into += got;
    from += (uint64_t)got;
    length -= (uint64_t)got;
  }
  return 0;
}

int write_all(int fd, const uint8_t *from, uint64_t length, uint64_t at) {
  while (length > 0) {
    size_t want = length < ((uint64_t)1 << 30) ? (size_t)length : (size_t)1 << 30;
    ssize_t done = pwrite(fd, from, want, (off_t)at);
    if (done < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (done == 0) return EIO;
    from += done;
    at += (uint64_t)done;
    length -= (uint64_t)done;
  }
  return 0;
}

/* `length` bytes of `from` written at `at` the way that cost less lately: through `direct_fd` (O_DIRECT) or
 * `buffered_fd` (the page cache). 0 or an errno. */
static int write_cheaper(int direct_fd, int buffered_fd, const uint8_t *from, uint64_t length, uint64_t at) {
  int way = write_way_next();
  uint64_t began = write_way_clock();
  int err = write_all(way == WRITE_DIRECT ? direct_fd : buffered_fd, from, length, at);
  if (err == 0) write_way_cost(way, write_way_clock() - began, length);
  return err;
}

/* `length` bytes (whole pages) written at `at`: directly, or for an adaptive call the way that cost less lately. */
static int write_way(const job *j, const uint8_t *from, uint64_t length, uint64_t at) {
  if (j->buffered_fd < 0) return write_all(j->fd, from, length, at);
  return write_cheaper(j->fd, j->buffered_fd, from, length, at);
}

static void *writer(void *arg) {
  job *j = arg;
  uint8_t *bounce = NULL;
  for (;;) {
    if (atomic_load(&j->err) != 0) break;
    uint64_t at = j->begin + atomic_fetch_add(&j->next, 1) * CHUNK;
    if (at >= j->end) break;
    uint64_t length = j->end - at < CHUNK ? j->end - at : CHUNK;
    const uint8_t *from = NULL;
    bool direct = false;
    if (j->src_fd < 0) {
      const span *s = &j->spans[find_span(j->spans, j->n_spans, at)];
      from = s->data + (at - s->at);
      direct = at + length <= s->at + s->length && (uintptr_t)from % ALIGN == 0;
    }
    int err = 0;
    if (direct) {
      err = write_way(j, from, length, at);
    } else if (bounce == NULL && posix_memalign((void **)&bounce, ALIGN, BOUNCE) != 0) {
      bounce = NULL;
      err = ENOMEM;
    } else {
      for (uint64_t done = 0; done < length && err == 0; done += BOUNCE) {
        uint64_t take = length - done < BOUNCE ? length - done : BOUNCE;
        err = fill(j, at + done, take, bounce);
        if (err == 0) err = write_way(j, bounce, take, at + done);
      }
    }
    if (err != 0) {
      int none = 0;
      atomic_compare_exchange_strong(&j->err, &none, err);
      break;
    }
    if (direct) atomic_fetch_add(&j->from_memory, length);
  }
  free(bounce);
  return NULL;
}

/* Buffered writes of output bytes [from, to), through a small buffer. */
static int write_edge(const job *j, uint64_t from, uint64_t to) {
  uint8_t piece[EDGE];
  for (uint64_t at = from; at < to;) {
    uint64_t take = to - at < EDGE ? to - at : EDGE;
    int err = fill(j, at, take, piece);
    if (err == 0) err = write_all(j->fd, piece, take, at);
    if (err != 0) return err;
    at += take;
  }
  return 0;
}

/*
 * Output bytes [start, stop) of `j` written: O_DIRECT for its whole pages (the descriptor's flags restored after;
 * `adaptive`: each piece the cheaper way), the partial pages at both ends through the page cache. An errno, or 0.
 */
static int run_job(job *j, uint64_t start, uint64_t stop, bool adaptive) {
  uint64_t begin = (start + ALIGN - 1) / ALIGN * ALIGN, end = stop / ALIGN * ALIGN;
  j->begin = begin;
  j->end = end;
  atomic_init(&j->next, 0);
  atomic_init(&j->from_memory, 0);
  atomic_init(&j->err, 0);
  int err = 0;
  if (end > begin) {
#ifdef O_DIRECT
    /* Writes past the end of the file are serialized by ext4 (an exclusive inode lock): size the file first. */
    struct stat st;
    if (fstat(j->fd, &st) != 0) err = errno;
    else if ((uint64_t)st.st_size < stop && ftruncate(j->fd, (off_t)stop) != 0) err = errno;
    int flags = err != 0 ? -1 : fcntl(j->fd, F_GETFL);
    if (err != 0) {
    } else if (flags < 0 || fcntl(j->fd, F_SETFL, flags | O_DIRECT) != 0) {
      err = errno;
    } else {
      /* `adaptive`: a second open file description without O_DIRECT for the pieces that go through the page cache
       * (the flag belongs to the description; without /proc, every piece goes directly). */
      if (adaptive && end - begin >= LEARN_BYTES) {
        char name[64];
        snprintf(name, sizeof name, "/proc/self/fd/%d", j->fd);
        j->buffered_fd = open(name, O_WRONLY | O_CLOEXEC);
      }
      pthread_t threads[THREADS - 1];
      bool started[THREADS - 1] = {false};
      for (int i = 0; i < THREADS - 1; i++) started[i] = pthread_create(&threads[i], NULL, writer, j) == 0;
      writer(j);
      for (int i = 0; i < THREADS - 1; i++)
        if (started[i]) pthread_join(threads[i], NULL);
      err = atomic_load(&j->err);
      if (j->buffered_fd >= 0) close(j->buffered_fd);
      j->buffered_fd = -1;
      if (fcntl(j->fd, F_SETFL, flags) != 0 && err == 0) err = errno;
    }
#else
    err = EINVAL; /* no O_DIRECT here (macOS has F_NOCACHE, a hint only) */
#endif
  }
  /* The partial pages at both ends (or everything, when the range holds no whole page) through the page cache. */
  if (err == 0) err = write_edge(j, start, end > begin ? begin : stop);
  if (err == 0 && end > begin) err = write_edge(j, end, stop);
  return err;
}

napi_value direct_write(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  bool is_array = false, adaptive = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3 || argc > 4 ||
      napi_is_array(env, argv[1], &is_array) != napi_ok || !is_array ||
      (argc == 4 && napi_get_value_bool(env, argv[3], &adaptive) != napi_ok)) {
    napi_throw_type_error(env, "EINVAL", "writeDirect(fd, buffers, position, adaptive?: boolean)");
    return NULL;
  }
  double fd_arg = integer_arg(env, argv[0], "fd");
  if (fd_arg < 0) return NULL;
  double position = integer_arg(env, argv[2], "position");
  if (position < 0) return NULL;
  if (fd_arg > INT32_MAX) {
    napi_throw_type_error(env, "EINVAL", "fd must be an int32");
    return NULL;
  }
  int fd = (int)fd_arg;
  uint32_t count = 0;
  if (napi_get_array_length(env, argv[1], &count) != napi_ok) return NULL;
  span *spans = malloc((count > 0 ? count : 1) * sizeof *spans);
  if (spans == NULL) return throw_errno(env, ENOMEM, "writeDirect");
  size_t n = 0;
  uint64_t at = (uint64_t)position;
  for (uint32_t i = 0; i < count; i++) {
    napi_value element;
    bool is_typed = false;
    napi_typedarray_type type;
    size_t length = 0;
    void *data = NULL;
    if (napi_get_element(env, argv[1], i, &element) != napi_ok ||
        napi_is_typedarray(env, element, &is_typed) != napi_ok || !is_typed ||
        napi_get_typedarray_info(env, element, &type, &length, &data, NULL, NULL) != napi_ok ||
        type != napi_uint8_array) {
      free(spans);
      napi_throw_type_error(env, "EINVAL", "writeDirect: every buffer must be a Uint8Array");
      return NULL;
    }
    if (length == 0) continue;
    /* Buffers adjacent in memory (subarrays of one allocation) become one span. */
    if (n > 0 && spans[n - 1].data + spans[n - 1].length == (const uint8_t *)data) spans[n - 1].length += length;
    else spans[n++] = (span){data, at, length};
    at += length;
  }
  job j = {.fd = fd, .src_fd = -1, .spans = spans, .n_spans = n, .buffered_fd = -1};
  int err = run_job(&j, (uint64_t)position, at, adaptive);
  free(spans);
  if (err != 0) return throw_errno(env, err, "writeDirect");
  napi_value result;
  if (napi_create_double(env, (double)atomic_load(&j.from_memory), &result) != napi_ok) return NULL;
  return result;
}

napi_value copy_direct(napi_env env, napi_callback_info info) {
  double args[5];
  if (copy_args(env, info, "copyDirect(fdIn, positionIn, fdOut, positionOut, length)", args) != 0) return NULL;
  uint64_t out = (uint64_t)args[3], length = (uint64_t)args[4];
  job j = {.fd = (int)args[2], .src_fd = (int)args[0], .src_delta = (int64_t)args[1] - (int64_t)out, .buffered_fd = -1};
  int err = length == 0 ? 0 : run_job(&j, out, out + length, false);
  if (err != 0) return throw_errno(env, err, "copyDirect");
  napi_value result;
  if (napi_create_double(env, args[4], &result) != napi_ok) return NULL;
  return result;
}
