/*
 * Owned copies of file bytes: fresh anonymous memory filled with pread by several threads, in one call.
 *
 *   readOwned(fd, position, length, threads, pages[, chunks]) -> ArrayBuffer of `length` bytes the caller owns;
 *       `chunks` (a Float64Array of 2, optional) gets how many 2 MiB chunks were read into huge and small pages
 *   ownedPages()                                    -> "huge" | "small" | "undecided": the page size copies start with
 *
 * The memory is a private anonymous mapping (never a mapping of the file): later writes to the file, or its
 * truncation, do not change it, and a file that shrank under the read gives an error (EIO), never SIGBUS. It is
 * unmapped by the ArrayBuffer's finalizer or at once by freeHuge(), like allocHuge()'s memory.
 *
 * Where the time goes (32 MiB from the page cache into fresh memory, 2-vCPU VM, C probe, median of 3): first touch
 * of fresh 4 KiB pages ~25 ms (1.9-3 µs a page), of 2 MiB pages 3.5 ms; the kernel's copy (pread) into memory
 * already faulted in 6.2 ms; pread into fresh huge pages 8-12 ms on one thread and 4.4-8 ms on two (the copy and
 * the faults both proceed in parallel). Copying from a mapping of the file instead (memcpy) costs as much once the
 * mapping's page-table work is counted (setting up 8192 entries, then 1.4-1.9 ms to unmap them), and a truncation
 * during the copy would be SIGBUS: pread it is.
 *
 * Huge or small pages (`pages`: 0 = chosen as the copy goes, 1 = huge, 2 = small). A first touch of a huge page
 * costs what making its memory present costs, and that changes within one machine: on the VM above, 32 MiB of huge
 * pages cost 0.06-0.1 s/GiB (memory the guest had used lately), but 2 GiB cost 0.7-1.9 s/GiB (memory the balloon
 * had handed back to the host, faulted in again), where 4 KiB pages cost 0.45-0.75 s/GiB: 2 GiB took 1.5-4.1 s
 * with huge pages and 0.9-1.6 s with small ones. Another VM measured 0.4-1.7 s/GiB for huge pages. So no choice
 * made once holds: each thread reads its piece 2 MiB at a time, times each chunk (its CPU time, so that other
 * processes' use of the CPU does not count), and keeps the page size whose recent chunks cost less, trying the other
 * when the current one is not clearly cheap (CHEAP_CHUNK_NS) and, now and then, again (EXPLORE_EVERY chunks).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <node_api.h>

/* safetensors_native.c */
void st_throw_errno(napi_env env, int err, const char *what);
void st_throw_code(napi_env env, int err, const char *message);
int st_get_index(napi_env env, napi_value value, const char *name, double max, uint64_t *out);
void st_run_jobs(void *(*fn)(void *), void *jobs, size_t size, size_t n);
void *st_huge_map(size_t length, size_t *map_length, int huge);
napi_value st_huge_buffer(napi_env env, void *addr, size_t map_length, size_t length);

#define HUGE_PAGE ((size_t)2 << 20)
#define MAX_LENGTH 4294967296.0
#define MAX_SAFE_INTEGER 9007199254740991.0
#define MAX_THREADS 16

enum { PAGES_UNDECIDED = 0, PAGES_HUGE = 1, PAGES_SMALL = 2 };

/* A 2 MiB chunk (first touch + the copy) below this is cheap whatever the page size: small pages cannot do much
 * better (512 first touches of 4 KiB pages cost ~0.95 ms on the cheapest machine measured, before the copy). */
#define CHEAP_CHUNK_NS 1000000LL
/* Chunks between two tries of the other page size, when the current one is not cheap (64 MiB of a thread's piece). */
#define EXPLORE_EVERY 32

/* The page size copies start with: the one that won the last adaptive copy. */
static atomic_int g_pages = PAGES_UNDECIDED;

/* This thread's CPU time: a chunk's cost without the time other processes held the CPU (a wall clock made a loaded
 * machine pick small pages now and then). Time the host takes to make guest memory present is counted. */
static long long cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void advise(uint8_t *addr, size_t length, int pages) {
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
  (void)madvise(addr, length, pages == PAGES_SMALL ? MADV_NOHUGEPAGE : MADV_HUGEPAGE);
#else
  (void)addr;
  (void)length;
  (void)pages;
#endif
}

typedef struct {
  int fd;
  uint8_t *dst; /* 2 MiB aligned */
  size_t length;
  uint64_t position;
  int pages; /* PAGES_HUGE / PAGES_SMALL: the size to start with; */
  int fixed; /* nonzero: keep it */
  int err;
  long long cost[3]; /* recent cost of a chunk per page size (ns), 0 = not measured yet */
  size_t chunks[3];  /* chunks read per page size */
} owned_job;

static int pread_full(int fd, uint8_t *dst, size_t length, uint64_t position) {
  size_t done = 0;
  while (done < length) {
    ssize_t got = pread(fd, dst + done, length - done, (off_t)(position + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return got < 0 ? errno : EIO; /* 0: the file ended early (it shrank) */
    done += (size_t)got;
  }
  return 0;
}

/* The page size for the next chunk, from the costs measured so far. */
static int next_pages(const owned_job *job, int current, size_t chunk) {
  int other = current == PAGES_HUGE ? PAGES_SMALL : PAGES_HUGE;
  long long mine = job->cost[current], theirs = job->cost[other];
  if (mine == 0 || mine <= CHEAP_CHUNK_NS) return current;
  if (theirs == 0 || chunk % EXPLORE_EVERY == 0) return other;
  return theirs < mine ? other : current;
}

static void *owned_job_run(void *arg) {
  owned_job *job = arg;
  int pages = job->pages;
  /* The mapping was advised for `job->pages`; a chunk of the other size is advised before its first touch. */
  for (size_t at = 0, chunk = 0; at < job->length; at += HUGE_PAGE, chunk++) {
    size_t n = job->length - at < HUGE_PAGE ? job->length - at : HUGE_PAGE;
    if (!job->fixed && chunk > 0) pages = next_pages(job, pages, chunk);
    if (pages != job->pages) advise(job->dst + at, HUGE_PAGE, pages);
    job->chunks[pages]++;
    long long start = cpu_ns();
    int err = pread_full(job->fd, job->dst + at, n, job->position + at);
    if (err != 0) {
      job->err = err;
      return NULL;
    }
    if (n == HUGE_PAGE) {
      long long spent = cpu_ns() - start;
      job->cost[pages] = job->cost[pages] == 0 ? spent : (3 * job->cost[pages] + spent) / 4;
    }
  }
  return NULL;
}

napi_value st_js_read_owned(napi_env env, napi_callback_info info) {
  size_t argc = 6;
  napi_value argv[6];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 5) {
    st_throw_code(env, EINVAL, "readOwned(fd, position, length, threads, pages) needs 5 arguments");
    return NULL;
  }
  double *chunks_out = NULL;
  if (argc >= 6) {
    bool is_typedarray = false;
    napi_typedarray_type type;
    size_t count = 0;
    void *data = NULL;
    if (napi_is_typedarray(env, argv[5], &is_typedarray) != napi_ok || !is_typedarray ||
        napi_get_typedarray_info(env, argv[5], &type, &count, &data, NULL, NULL) != napi_ok ||
        type != napi_float64_array || count < 2) {
      st_throw_code(env, EINVAL, "readOwned: chunks must be a Float64Array of 2");
      return NULL;
    }
    chunks_out = data;
  }
  int32_t fd = -1;
  if (napi_get_value_int32(env, argv[0], &fd) != napi_ok || fd < 0) {
    st_throw_code(env, EBADF, "fd must be a non-negative integer file descriptor");
    return NULL;
  }
  uint64_t position = 0, length = 0, threads = 1, pages = 0;
  if (st_get_index(env, argv[1], "position", MAX_SAFE_INTEGER, &position) != 0) return NULL;
  if (st_get_index(env, argv[2], "length", MAX_LENGTH, &length) != 0) return NULL;
  if (st_get_index(env, argv[3], "threads", MAX_THREADS, &threads) != 0) return NULL;
  if (st_get_index(env, argv[4], "pages", 2, &pages) != 0) return NULL;
  napi_value result;
  if (length == 0) {
    if (napi_create_arraybuffer(env, 0, NULL, &result) != napi_ok) return NULL;
    return result;
  }
  int fixed = pages != 0;
  int start = fixed ? (int)pages : atomic_load(&g_pages);
  if (start == PAGES_UNDECIDED) start = PAGES_HUGE;
  size_t map_length = 0;
  uint8_t *addr = st_huge_map((size_t)length, &map_length, start == PAGES_HUGE);
  if (addr == NULL) {
    st_throw_errno(env, errno, "mmap (readOwned)");
    return NULL;
  }
  if (start == PAGES_SMALL) advise(addr, map_length, PAGES_SMALL);

  /* Pieces of whole 2 MiB chunks, one per thread. */
  if (threads == 0) threads = 1;
  size_t piece = ((size_t)length + threads - 1) / threads;
  piece = (piece + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
  owned_job jobs[MAX_THREADS];
  size_t n = 0;
  for (size_t at = 0; at < length && n < MAX_THREADS; at += piece, n++) {
    size_t this_piece = (size_t)length - at < piece ? (size_t)length - at : piece;
    jobs[n] = (owned_job){fd, addr + at, this_piece, position + at, start, fixed, 0, {0, 0, 0}, {0, 0, 0}};
  }
  st_run_jobs(owned_job_run, jobs, sizeof jobs[0], n);
  int err = 0;
  size_t small_won = 0, huge_won = 0, huge_chunks = 0, small_chunks = 0;
  for (size_t i = 0; i < n; i++) {
    if (err == 0) err = jobs[i].err;
    huge_chunks += jobs[i].chunks[PAGES_HUGE];
    small_chunks += jobs[i].chunks[PAGES_SMALL];
    long long huge = jobs[i].cost[PAGES_HUGE], small = jobs[i].cost[PAGES_SMALL];
    if (huge != 0 && small != 0) {
      if (small < huge) small_won++;
      else huge_won++;
    }
  }
  if (chunks_out != NULL) {
    chunks_out[0] = (double)huge_chunks;
    chunks_out[1] = (double)small_chunks;
  }
  if (err != 0) {
    munmap(addr, map_length);
    st_throw_errno(env, err, err == EIO ? "pread (input/output error, or the file ended early: did it shrink?)" : "pread");
    return NULL;
  }
  /* The next copy starts with the size that cost less in most threads that tried both, else with this one's. */
  if (!fixed) atomic_store(&g_pages, small_won + huge_won == 0 ? start : small_won > huge_won ? PAGES_SMALL : PAGES_HUGE);
  return st_huge_buffer(env, addr, map_length, (size_t)length);
}

napi_value st_js_owned_pages(napi_env env, napi_callback_info info) {
  (void)info;
  int choice = atomic_load(&g_pages);
  const char *name = choice == PAGES_HUGE ? "huge" : choice == PAGES_SMALL ? "small" : "undecided";
  napi_value result;
  if (napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &result) != napi_ok) return NULL;
  return result;
}
