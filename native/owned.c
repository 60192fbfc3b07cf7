/*
 * Owned copies of file bytes: fresh anonymous memory filled with pread by several threads, in one call.
 *
 *   readOwned(fd, position, length, threads, pages[, chunks]) -> ArrayBuffer of `length` bytes the caller owns;
 *       `chunks` (a Float64Array of 2, optional) gets how many 2 MiB chunks were read into huge and small pages
 *   ownedPages()                                    -> "huge" | "small" | "undecided": the page size the last
 *       adaptive copy ended with (the next starts with it only within SMALL_STICKS_NS, else with huge pages)
 *
 * The memory is a private anonymous mapping (never a mapping of the file): later writes to the file, or its
 * truncation, do not change it, and a file that shrank under the read gives an error (EIO), never SIGBUS. It is
 * unmapped by the ArrayBuffer's finalizer or at once by freeHuge(), like allocHuge()'s memory.
 *
 * Where the time goes (32 MiB from the page cache into fresh memory, 2-vCPU VM, C probes and perf): pread into fresh
 * huge pages costs 6.4-8.5 ms of CPU on one thread, half of it the kernel's copy out of 8192 4 KiB page-cache folios
 * (_copy_to_iter 50%, filemap_get_read_batch 12%), a third the zeroing of the huge pages (clear_page 30%). A fresh
 * 4 KiB page costs 1.6-2.2 µs to fault in, whether touched or populated with MADV_POPULATE_WRITE, and faults of two
 * threads did not overlap: 32 MiB of small pages took 13-18 ms on one thread or two. Copying from a mapping of the
 * file (memcpy) is as dear once its page tables are counted (MADV_POPULATE_READ 2.1 ms, munmap 1.5 ms), and a
 * truncation during it would be SIGBUS: pread it is. The reference (a mapping + torch's clone into fresh 4 KiB pages)
 * spends 20-25 ms of CPU on the same 32 MiB, 8,737 faults.
 *
 * Huge or small pages (`pages`: 0 = chosen as the copy goes, 1 = huge, 2 = small). A 2 MiB chunk in huge pages
 * costs 0.45-0.65 ms of CPU, zeroing and copy, when the guest's free memory is backed by the host; but this VM's
 * balloon reports free 2 MiB blocks to the host, which drops them, and a huge page taken from them is faulted in
 * again 4 KiB at a time by the host: 4-6.5 ms a chunk (such streaks hit 3 of 40 fresh processes, all chunks after
 * the first costly one), while 4 KiB pages come from smaller free blocks, never reported: 1.1-1.3 ms a chunk. On
 * 2 GiB, huge pages cost 0.7-1.9 s/GiB at such times and small ones 0.45-0.75 s/GiB. So no choice made once holds:
 * the copy times each chunk (the CPU time of its thread, so that other processes' use of the CPU does not count),
 * each thread by its own chunks (see judge), switches to small pages after a costly huge chunk (COSTLY_HUGE_CHUNK_NS,
 * or small pages' own cost once measured) and tries huge pages again now and then (EXPLORE_EVERY). A costly chunk is
 * 99% clear_page (perf): nothing before it tells it from a cheap one.
 *
 * Threads: as many as asked, at most one per usable CPU, claiming 2 MiB chunks one at a time; helpers read into
 * staging mappings of their own and move their chunks into the copy, so that the caller can take back a chunk whose
 * helper lost its CPU (see CHUNK_* and RESCUE_*). Each chunk's pages are faulted in from user space before its pread,
 * so that no thread holds the mmap lock while fresh memory is zeroed (see touch_pages). Traced in fresh Node processes
 * (2 threads, the host having the memory): 0.15-0.25 ms to the first chunk (mappings, pthread_create ~0.1 ms),
 * chunks of 0.45-0.65 ms of CPU (fault and zeroing 0.17-0.25 ms, copy 0.25-0.4 ms), a helper's move 0.04-0.05 ms
 * (0.1-0.4 ms while the caller faults a page of the copy in), 4.5-6.0 ms for 32 MiB. A copy whose helpers moved
 * chunks in is made of several mappings (one per moved chunk, at most), all unmapped together.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sched.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "huge.h"
#include "owned.h"

#define MAX_THREADS 16

enum { PAGES_UNDECIDED = 0, PAGES_HUGE = 1, PAGES_SMALL = 2 };

/* A 2 MiB chunk in huge pages (first touch + the copy, CPU time) above this is costly: its thread tries small pages
 * for its next chunks, until small ones have been measured (then their cost is the bar). Measured on the VM above:
 * 0.45-0.65 ms normally, 5-7 ms when the host faults the memory in again; a chunk in small pages 1.1-1.8 ms. */
#define COSTLY_HUGE_CHUNK_NS 2000000LL
/* Chunks in small pages between two tries of huge pages within a copy (a costly streak lasts; an isolated costly
 * chunk does not, and huge pages must come back). */
#define EXPLORE_EVERY 16
/* A copy starts with small pages only when the last copy ended on them less than this ago (the streaks measured
 * lasted well under a second); otherwise it starts with huge pages, which are 2x cheaper when the memory is there. */
#define SMALL_STICKS_NS 1000000000LL

/* The page size the last adaptive copy ended with, and when (CLOCK_MONOTONIC ns). */
static atomic_int g_pages = PAGES_UNDECIDED;
static atomic_llong g_pages_at = 0;

/* This thread's CPU time: a chunk's cost without the time other processes held the CPU (a wall clock made a loaded
 * machine pick small pages now and then). Time the host takes to make guest memory present is counted. */
static long long cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* CPUs this thread may run on (its affinity mask), at least 1. */
static size_t usable_cpus(void) {
#ifdef CPU_COUNT
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return (size_t)CPU_COUNT(&set);
#endif
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (size_t)n : 1;
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

/* Where a chunk is. The caller reads its chunks straight into the copy; a helper reads its chunk into its own slot of a
 * staging mapping and moves the pages into the copy (mremap, one page-table entry for a huge page) only if the caller
 * has not taken the chunk back meanwhile: a helper that loses its CPU in the middle of a chunk (another process's
 * turn: chunks of 0.5 ms of CPU measured 4-28 ms of wall time so, in 8 of 22 copies under load) then delays the copy
 * by about RESCUE_OFF_CPU_NS, not by the whole time it waits, and never writes into memory the caller already
 * returned. */
enum { CHUNK_FREE = 0, CHUNK_STAGING, CHUNK_MOVING, CHUNK_TAKEN_BACK, CHUNK_DONE };

/* The caller, out of chunks, takes back a helper's chunk once the helper has spent RESCUE_OFF_CPU_NS of the time since
 * it claimed the chunk off its CPU (waiting for one: it holds up the copy by just that), or has held the chunk longer
 * than four of the caller's fastest chunks in this copy plus RESCUE_SLACK_NS (RESCUE_AFTER_NS before the caller has
 * timed one), checking every RESCUE_POLL_NS. A chunk in huge pages takes 0.45-0.65 ms, in small ones 1.1-1.8 ms. */
#define RESCUE_OFF_CPU_NS 300000LL
#define RESCUE_SLACK_NS 500000LL
#define RESCUE_AFTER_NS 2000000LL
#define RESCUE_POLL_NS 100000LL

/* One thread of a copy: the page size of its next chunks, by what its own chunks cost (see judge), and its CPU clock,
 * by which the caller tells a helper that waits for a CPU. Only the thread itself reads and writes its page choice. */
typedef struct {
  int pages;
  long long cost[3];  /* its last full chunk's CPU time per page size (ns), 0 = not measured yet */
  size_t small_run;   /* its chunks in small pages since it last tried huge ones */
  clockid_t clock;
  bool clocked;
} thread_slot;

/* One copy, shared by its threads: each claims the next 2 MiB chunk, so a thread that the machine's other work keeps
 * off a CPU holds up at most the chunk it is on (with a fixed piece per thread, the last one to be scheduled set the
 * copy's time). The caller waits for the chunks to be done, not for its helper threads: a helper that only gets a CPU
 * after the last chunk was claimed finds nothing to do and leaves. Whichever of them leaves last frees the struct,
 * the staging mapping and the duplicated descriptor. */
typedef struct {
  int fd;       /* a dup of the caller's: a helper that runs late never reads through a descriptor reused since */
  uint8_t *dst; /* 2 MiB aligned, mapped in whole 2 MiB chunks */
  size_t length;
  uint64_t position;
  size_t count;          /* chunks */
  int advised;           /* the page size the copy and the staging mapping were advised for */
  int fixed;             /* nonzero: every chunk in `pages` */
  uint8_t *staging[MAX_THREADS]; /* each helper's staging mapping (by thread slot), chunk i at i * 2 MiB */
  size_t staging_length;
  signed char *moved_from; /* per chunk, the staging mapping (thread slot) it was moved in from, -1 before */
  atomic_int *state;     /* per chunk, CHUNK_* */
  atomic_llong *claimed; /* per chunk, when a helper claimed it (CLOCK_MONOTONIC ns), 0 before; and set before the */
  long long *claimed_cpu; /* chunk is marked CHUNK_STAGING: that helper's CPU time then (ns, -1 without its clock) */
  int *claimer;           /* and its thread slot */
  atomic_size_t next;
  int start;             /* the page size every thread starts with */
  atomic_int err;
  atomic_size_t chunks[3];    /* chunks read per page size */
  atomic_int refs;            /* the caller + helpers not yet gone */
  pthread_mutex_t lock;
  pthread_cond_t all_done;
  size_t finished;            /* chunks done (read, or skipped after an error); under lock */
  long long fastest;          /* the caller's fastest chunk in this copy (wall ns), 0 before its first */
  atomic_int slots_used;      /* thread slots handed out: 0 is the caller's */
  thread_slot slots[MAX_THREADS];
} owned_copy;

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

/* The page size for thread `self`'s next chunk: its own, or huge pages again after a run of small ones. */
static int pages_for(owned_copy *copy, int self) {
  thread_slot *slot = &copy->slots[self];
  if (copy->fixed || slot->pages != PAGES_SMALL) return slot->pages;
  if (++slot->small_run >= EXPLORE_EVERY) {
    slot->small_run = 0;
    return PAGES_HUGE;
  }
  return PAGES_SMALL;
}

/* After thread `self`'s full chunk in `pages` that cost `spent` (CPU ns): it keeps huge pages unless they are costly
 * (above its small pages' cost once known), and leaves small pages for huge ones that measured cheaper. Each thread by
 * its own chunks: huge pages come from per-CPU lists first, and costly ones came in runs on one thread while the
 * other's were cheap (the caller's 4 huge chunks of 4.7-5.3 ms in a row, the helper's 0.5 ms; or 4 of 5.3-6.8 ms).
 * A copy-wide choice sent both threads to small pages at the first costly chunk, or kept both on huge pages, by an
 * average, through such a run: 18-29 ms for 32 MiB. */
static void judge(owned_copy *copy, int self, int pages, long long spent) {
  thread_slot *slot = &copy->slots[self];
  if (copy->fixed) return;
  slot->cost[pages] = spent;
  long long small = slot->cost[PAGES_SMALL];
  if (pages == PAGES_HUGE) slot->pages = spent > (small != 0 ? small : COSTLY_HUGE_CHUNK_NS) ? PAGES_SMALL : PAGES_HUGE;
  else if (slot->cost[PAGES_HUGE] != 0 && slot->cost[PAGES_HUGE] < spent) slot->pages = PAGES_HUGE;
}

/* Unmaps what is left of thread slot `slot`'s staging mapping: every 2 MiB slot but those moved out, in runs. Never
 * the whole range: once the caller has returned, a new mapping (the next copy's, say) may have been placed in a hole
 * that a move left, and unmapping over it took that memory away (SIGSEGV in the next copy). */
static void unmap_staging(owned_copy *copy, int slot) {
  size_t run = 0;
  for (size_t i = 0; i <= copy->count; i++) {
    if (i < copy->count && copy->moved_from[i] != slot) {
      run++;
      continue;
    }
    if (run > 0) munmap(copy->staging[slot] + (i - run) * HUGE_PAGE_SIZE, run * HUGE_PAGE_SIZE);
    run = 0;
  }
}

/* The copy's bookkeeping arrays and the copy itself (its descriptor, lock and condition already gone). */
static void free_copy(owned_copy *copy) {
  free(copy->state);
  free(copy->claimed);
  free(copy->claimed_cpu);
  free(copy->claimer);
  free(copy->moved_from);
  free(copy);
}

static void owned_copy_release(owned_copy *copy) {
  if (atomic_fetch_sub(&copy->refs, 1) != 1) return;
  for (int i = 0; i < MAX_THREADS; i++)
    if (copy->staging[i] != NULL) unmap_staging(copy, i);
  close(copy->fd);
  pthread_mutex_destroy(&copy->lock);
  pthread_cond_destroy(&copy->all_done);
  free_copy(copy);
}

static void set_error(owned_copy *copy, int err) {
  int none = 0;
  if (err != 0) atomic_compare_exchange_strong(&copy->err, &none, err);
}

static void chunk_done(owned_copy *copy, size_t chunk) {
  atomic_store(&copy->state[chunk], CHUNK_DONE);
  pthread_mutex_lock(&copy->lock);
  if (++copy->finished == copy->count) pthread_cond_broadcast(&copy->all_done);
  pthread_mutex_unlock(&copy->lock);
}

/* Faults in the pages of [to, to + n) from user space (a write to one byte per page: one per huge page), so that
 * pread copies into present memory. A fault taken inside pread's copy (kernel mode) holds the process's mmap lock for
 * reading, zeroing included (x86 takes the per-mapping lock for user-mode faults only); a user-mode fault holds just
 * its mapping's lock. While one thread's pread faulted in fresh memory, another thread's mremap or madvise (which take
 * the mmap lock for writing) waited for it: 0.15-0.24 ms on average and up to 0.57 ms, 2-16 ms when the host was
 * faulting huge pages in again, against 0.04 and 0.005 ms after a touch (C probe, two pinned threads). In copies, a
 * helper's next chunk began 0.04-0.24 ms after its last had been read, and a switch to small pages (madvise) waited
 * 2-16 ms for the other thread's costly chunk. */
static void touch_pages(uint8_t *to, size_t n, int pages) {
  size_t step = pages == PAGES_HUGE ? HUGE_PAGE_SIZE : 4096;
  for (size_t i = 0; i < n; i += step) ((volatile uint8_t *)to)[i] = 0;
}

/* Thread `self` reads chunk `chunk` into `to` (its place in the copy, or a staging slot) in the page size the copy is
 * on, timing it for judge(); `*pages` gets that size. Returns 0 or an errno; nothing once the copy has failed. */
static int read_chunk(owned_copy *copy, int self, size_t chunk, uint8_t *to, int *pages) {
  *pages = pages_for(copy, self);
  if (atomic_load(&copy->err) != 0) return 0;
  size_t at = chunk * HUGE_PAGE_SIZE;
  size_t n = copy->length - at < HUGE_PAGE_SIZE ? copy->length - at : HUGE_PAGE_SIZE;
  /* The mappings were advised for `advised`; a chunk of the other size is advised before its first touch. */
  if (*pages != copy->advised) advise(to, HUGE_PAGE_SIZE, *pages);
  long long start = cpu_ns();
  touch_pages(to, n, *pages);
  int err = pread_full(copy->fd, to, n, copy->position + at);
  if (err == 0 && n == HUGE_PAGE_SIZE) judge(copy, self, *pages, cpu_ns() - start);
  return err;
}

/* Chunk `chunk`, kept as read in `pages`, with `err`: counted, marked done. */
static void chunk_kept(owned_copy *copy, size_t chunk, int pages, int err) {
  set_error(copy, err);
  atomic_fetch_add(&copy->chunks[pages], 1);
  chunk_done(copy, chunk);
}

/* Thread `self` moves the pages of chunk `chunk`, read at `from` (its staging slot), into the copy. Returns 0 or an
 * errno. */
static int move_in(owned_copy *copy, int self, size_t chunk, uint8_t *from) {
  if (atomic_load(&copy->err) != 0) return 0;
  void *to = copy->dst + chunk * HUGE_PAGE_SIZE;
  if (mremap(from, HUGE_PAGE_SIZE, HUGE_PAGE_SIZE, MREMAP_MAYMOVE | MREMAP_FIXED, to) == MAP_FAILED) return errno;
  copy->moved_from[chunk] = (signed char)self;
  return 0;
}

/* The caller reads chunk `chunk` in place, timing it (wall time: what a chunk takes to come in, for the rescue). */
static void caller_read(owned_copy *copy, size_t chunk) {
  long long start = now_ns();
  int pages;
  int err = read_chunk(copy, 0, chunk, copy->dst + chunk * HUGE_PAGE_SIZE, &pages);
  long long took = now_ns() - start;
  if (copy->fastest == 0 || took < copy->fastest) copy->fastest = took;
  chunk_kept(copy, chunk, pages, err);
}

/* The caller's share: chunks claimed in turn, read in place. */
static void owned_copy_work(owned_copy *copy) {
  for (;;) {
    size_t chunk = atomic_fetch_add(&copy->next, 1);
    if (chunk >= copy->count) return;
    caller_read(copy, chunk);
  }
}

/* A thread slot for the calling thread, its CPU clock set. With no slot left (never: at most MAX_THREADS threads), the
 * last slot is shared, which only blurs what the others can tell of it. */
static int claim_slot(owned_copy *copy) {
  int self = atomic_fetch_add(&copy->slots_used, 1);
  if (self >= MAX_THREADS) {
    atomic_store(&copy->slots_used, MAX_THREADS);
    return MAX_THREADS - 1;
  }
  thread_slot *slot = &copy->slots[self];
  slot->pages = copy->start;
  slot->clocked = pthread_getcpuclockid(pthread_self(), &slot->clock) == 0;
  return self;
}

/* A helper's share: chunks claimed in turn, read into their staging slots and moved into the copy unless taken
 * back. Every chunk is marked done exactly once: by the helper that moved it (or failed), else by the caller. */
static void *owned_copy_helper(void *arg) {
  owned_copy *copy = arg;
  int self = claim_slot(copy);
  bool clocked = copy->slots[self].clocked;
  for (;;) {
    size_t chunk = atomic_fetch_add(&copy->next, 1);
    if (chunk >= copy->count) break;
    copy->claimer[chunk] = self;
    copy->claimed_cpu[chunk] = clocked ? cpu_ns() : -1;
    atomic_store(&copy->claimed[chunk], now_ns());
    int expected = CHUNK_FREE;
    if (!atomic_compare_exchange_strong(&copy->state[chunk], &expected, CHUNK_STAGING)) continue;
    uint8_t *slot = copy->staging[self] + chunk * HUGE_PAGE_SIZE;
    int pages;
    int err = read_chunk(copy, self, chunk, slot, &pages);
    expected = CHUNK_STAGING;
    if (!atomic_compare_exchange_strong(&copy->state[chunk], &expected, CHUNK_MOVING)) continue;
    if (err == 0) err = move_in(copy, self, chunk, slot);
    chunk_kept(copy, chunk, pages, err);
  }
  owned_copy_release(copy);
  return NULL;
}

/* How long the helper of `chunk` (CHUNK_STAGING) has waited for a CPU since it claimed the chunk `age` ns ago; 0 when
 * its CPU clock cannot be read (then only the hold time counts). */
static long long off_cpu_ns(owned_copy *copy, size_t chunk, long long age) {
  struct timespec t;
  if (copy->claimed_cpu[chunk] < 0 || clock_gettime(copy->slots[copy->claimer[chunk]].clock, &t) != 0) return 0;
  long long ran = (long long)t.tv_sec * 1000000000LL + t.tv_nsec - copy->claimed_cpu[chunk];
  return age - ran;
}

/* The caller, out of chunks: reads in place every chunk a helper claimed and has not begun, or holds up (see
 * RESCUE_OFF_CPU_NS), checks the others again after RESCUE_POLL_NS, and so on; then waits for the moves under way (a
 * few microseconds each). A fixed wait of 1 ms from the end of the caller's own chunks cost the whole wait whenever a
 * helper had lost its CPU long before (a chunk claimed at 1.9 ms and begun at 6.7 ms was taken back at 6.6 ms, the
 * caller having run out at 5.6 ms), and too little for a helper's chunk of small pages that was under way. */
static void owned_copy_finish(owned_copy *copy) {
  long long hold = copy->fastest != 0 ? 4 * copy->fastest + RESCUE_SLACK_NS : RESCUE_AFTER_NS;
  for (;;) {
    long long now = now_ns();
    bool pending = false;
    bool read = false;
    for (size_t chunk = 0; chunk < copy->count; chunk++) {
      int state = atomic_load(&copy->state[chunk]);
      if (state != CHUNK_FREE && state != CHUNK_STAGING) continue;
      if (state == CHUNK_STAGING) {
        long long age = now - atomic_load(&copy->claimed[chunk]);
        if (age < hold && off_cpu_ns(copy, chunk, age) < RESCUE_OFF_CPU_NS) {
          pending = true;
          continue;
        }
      }
      if (atomic_compare_exchange_strong(&copy->state[chunk], &state, CHUNK_TAKEN_BACK)) {
        caller_read(copy, chunk);
        read = true;
      }
    }
    if (read) continue;
    if (!pending) break;
    long long due = now_ns() + RESCUE_POLL_NS;
    struct timespec deadline = {.tv_sec = due / 1000000000LL, .tv_nsec = due % 1000000000LL};
    pthread_mutex_lock(&copy->lock);
    if (copy->finished < copy->count) (void)pthread_cond_timedwait(&copy->all_done, &copy->lock, &deadline);
    bool all = copy->finished == copy->count;
    pthread_mutex_unlock(&copy->lock);
    if (all) return;
  }
  pthread_mutex_lock(&copy->lock);
  while (copy->finished < copy->count) pthread_cond_wait(&copy->all_done, &copy->lock);
  pthread_mutex_unlock(&copy->lock);
}

/* A copy of `count` chunks from `fd` (duplicated), its fields past these zero; NULL with errno set on failure. */
static owned_copy *owned_copy_new(int fd, size_t count) {
  owned_copy *copy = calloc(1, sizeof *copy);
  if (copy == NULL) return NULL;
  copy->state = calloc(count, sizeof *copy->state);
  copy->claimed = calloc(count, sizeof *copy->claimed);
  copy->claimed_cpu = calloc(count, sizeof *copy->claimed_cpu);
  copy->claimer = calloc(count, sizeof *copy->claimer);
  copy->moved_from = malloc(count);
  if (copy->moved_from != NULL) memset(copy->moved_from, -1, count);
  pthread_condattr_t attr;
  bool allocated = copy->state != NULL && copy->claimed != NULL && copy->claimed_cpu != NULL &&
                   copy->claimer != NULL && copy->moved_from != NULL;
  int err = allocated ? pthread_condattr_init(&attr) : ENOMEM;
  if (err == 0) {
    (void)pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    err = pthread_cond_init(&copy->all_done, &attr);
    pthread_condattr_destroy(&attr);
    if (err == 0 && (err = pthread_mutex_init(&copy->lock, NULL)) != 0) pthread_cond_destroy(&copy->all_done);
    if (err == 0 && (copy->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
      err = errno;
      pthread_cond_destroy(&copy->all_done);
      pthread_mutex_destroy(&copy->lock);
    }
  }
  if (err != 0) {
    free_copy(copy);
    errno = err;
    return NULL;
  }
  return copy;
}

/* Starts up to `helpers` detached threads on `copy`, on CPUs other than the caller's when there are any: a thread
 * created on the caller's CPU waited there until the caller's copy ended or the scheduler moved it (2 threads then
 * measured the time of one). Returns how many started. */
static size_t owned_copy_start_helpers(owned_copy *copy, size_t helpers) {
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return 0;
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
#ifdef CPU_COUNT
  cpu_set_t set;
  int cpu = sched_getcpu();
  if (cpu >= 0 && sched_getaffinity(0, sizeof set, &set) == 0 && CPU_ISSET(cpu, &set) && CPU_COUNT(&set) > 1) {
    CPU_CLR(cpu, &set);
    (void)pthread_attr_setaffinity_np(&attr, sizeof set, &set);
  }
#endif
  size_t started = 0;
  for (; started < helpers; started++) {
    atomic_fetch_add(&copy->refs, 1);
    pthread_t thread;
    if (pthread_create(&thread, &attr, owned_copy_helper, copy) != 0) {
      atomic_fetch_sub(&copy->refs, 1);
      break;
    }
  }
  pthread_attr_destroy(&attr);
  return started;
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
  if (st_get_index(env, argv[2], "length", MAX_WINDOW_LENGTH, &length) != 0) return NULL;
  if (st_get_index(env, argv[3], "threads", MAX_THREADS, &threads) != 0) return NULL;
  if (st_get_index(env, argv[4], "pages", 2, &pages) != 0) return NULL;
  napi_value result;
  if (length == 0) {
    if (napi_create_arraybuffer(env, 0, NULL, &result) != napi_ok) return NULL;
    return result;
  }
  int fixed = pages != 0;
  int start = (int)pages;
  if (!fixed) {
    /* Small pages only right after a copy that ended on them; huge pages otherwise (see SMALL_STICKS_NS). */
    int last = atomic_load(&g_pages);
    start = last == PAGES_SMALL && now_ns() - atomic_load(&g_pages_at) < SMALL_STICKS_NS ? PAGES_SMALL : PAGES_HUGE;
  }
  size_t map_length = 0;
  uint8_t *addr = st_huge_map((size_t)length, &map_length, start == PAGES_HUGE);
  if (addr == NULL) {
    st_throw_errno(env, errno, "mmap (readOwned)");
    return NULL;
  }
  if (start == PAGES_SMALL) advise(addr, map_length, PAGES_SMALL);

  /* No more threads than chunks, than requested, than CPUs this process may use: on 2 vCPUs a third or fourth
   * thread only waits for a CPU (in one process, 32 MiB copies took 4.2 ms with 2 threads, 5.6 ms with 4). */
  size_t count = ((size_t)length + HUGE_PAGE_SIZE - 1) / HUGE_PAGE_SIZE;
  size_t n = threads == 0 ? 1 : (size_t)threads;
  size_t cpus = usable_cpus();
  if (n > cpus) n = cpus;
  if (n > count) n = count;
  if (n > MAX_THREADS) n = MAX_THREADS;
  owned_copy *copy = owned_copy_new(fd, count);
  if (copy == NULL) {
    int err = errno;
    munmap(addr, map_length);
    st_throw_errno(env, err, "readOwned");
    return NULL;
  }
  copy->dst = addr;
  copy->length = (size_t)length;
  copy->position = position;
  copy->advised = start;
  copy->fixed = fixed;
  copy->count = count;
  atomic_init(&copy->next, 0);
  copy->start = start;
  atomic_init(&copy->err, 0);
  atomic_init(&copy->refs, 1);
  atomic_init(&copy->slots_used, 0);
  (void)claim_slot(copy); /* the caller's: 0 */
  for (int i = 0; i < 3; i++) {
    atomic_init(&copy->chunks[i], 0);
  }
  for (size_t i = 0; i < count; i++) {
    atomic_init(&copy->state[i], CHUNK_FREE);
    atomic_init(&copy->claimed[i], 0);
  }
  /* Each helper reads into a staging mapping of its own (address space only: a slot's pages exist once read into,
   * and leave it when moved in), so that no helper faults in a mapping another one's move changes. The caller reads
   * in place: a move costs 0.03-0.09 ms (most 0.04-0.05), and with the caller's chunks moved in too (no helper then
   * waits for a fault of the caller's in the copy), copies took 5.4-6.5 ms against 4.5-6.0 ms (6 each). */
  size_t staged = 1;
  for (; staged < n; staged++) {
    copy->staging[staged] = st_huge_map(count * HUGE_PAGE_SIZE, &copy->staging_length, start == PAGES_HUGE);
    if (copy->staging[staged] == NULL) break;
    if (start == PAGES_SMALL) advise(copy->staging[staged], copy->staging_length, PAGES_SMALL);
  }
  if (staged > 1) owned_copy_start_helpers(copy, staged - 1);
  owned_copy_work(copy);
  owned_copy_finish(copy);

  int err = atomic_load(&copy->err);
  if (chunks_out != NULL) {
    chunks_out[0] = (double)atomic_load(&copy->chunks[PAGES_HUGE]);
    chunks_out[1] = (double)atomic_load(&copy->chunks[PAGES_SMALL]);
  }
  int ended_on = copy->slots[0].pages;
  owned_copy_release(copy);
  if (err != 0) {
    munmap(addr, map_length);
    st_throw_errno(env, err, err == EIO ? "pread (input/output error, or the file ended early: did it shrink?)" : "pread");
    return NULL;
  }
  if (!fixed) {
    atomic_store(&g_pages, ended_on);
    atomic_store(&g_pages_at, now_ns());
  }
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
