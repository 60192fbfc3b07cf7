/*
 * Owned copies of file bytes: fresh anonymous memory filled with pread by several threads, in one call.
 *
 *   readOwned(fd, position, length, threads, pages) -> ArrayBuffer of `length` bytes the caller owns
 *   ownedPages()                                    -> "huge" | "small" | "undecided": this process's page choice
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
 * Which pages (`pages`: 0 = this process's choice, 1 = huge, 2 = small): huge pages are the better choice where
 * their first touch is cheap (0.06-0.1 s/GiB here, against ~0.5-4 s/GiB for 4 KiB pages), but another VM measured
 * 0.4-1.7 s/GiB for huge pages against ~0.75 s/GiB for small ones. So the first call large enough decides, on its
 * own memory: it times the first touch of its first 2 MiB page; when that is cheaper than 4 KiB pages are anywhere
 * measured (HUGE_IS_CHEAP_NS) huge pages win outright; otherwise it times its second 2 MiB as 512 small pages and
 * keeps whichever was cheaper for the rest of the process. Those touches are pages the copy needs anyway.
 */
#define _GNU_SOURCE
#include <errno.h>
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
int st_pread_parallel(int fd, uint8_t *dst, size_t length, uint64_t position, size_t threads);
void *st_huge_map(size_t length, size_t *map_length, int huge);
napi_value st_huge_buffer(napi_env env, void *addr, size_t map_length, size_t length);

#define HUGE_PAGE ((size_t)2 << 20)
#define MAX_LENGTH 4294967296.0
#define MAX_SAFE_INTEGER 9007199254740991.0
#define MAX_THREADS 16

enum { PAGES_UNDECIDED = 0, PAGES_HUGE = 1, PAGES_SMALL = 2 };

/* A first touch of a 2 MiB page below this is cheaper than 512 first touches of 4 KiB pages on any machine
 * measured (the cheapest: 1.9 µs each, ~0.95 ms for 2 MiB): 0.5 ms. */
#define HUGE_IS_CHEAP_NS 500000LL

static atomic_int g_pages = PAGES_UNDECIDED;

/* This thread's CPU time: a first touch's cost without the time other processes held the CPU (a wall clock made
 * a loaded machine pick small pages now and then). */
static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void advise_small(uint8_t *addr, size_t length) {
#ifdef MADV_NOHUGEPAGE
  (void)madvise(addr, length, MADV_NOHUGEPAGE);
#else
  (void)addr;
  (void)length;
#endif
}

/* Decides this process's page choice on `addr` (advised huge, at least two huge pages long), as described above. */
static int decide_pages(uint8_t *addr) {
  volatile uint8_t *bytes = addr;
  long long start = now_ns();
  bytes[0] = 0;
  long long huge_ns = now_ns() - start;
  if (huge_ns <= HUGE_IS_CHEAP_NS) return PAGES_HUGE;
  advise_small(addr + HUGE_PAGE, HUGE_PAGE);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (page == 0 || page > HUGE_PAGE) page = 4096;
  start = now_ns();
  for (size_t at = 0; at < HUGE_PAGE; at += page) bytes[HUGE_PAGE + at] = 0;
  long long small_ns = now_ns() - start;
  return small_ns < huge_ns ? PAGES_SMALL : PAGES_HUGE;
}

napi_value st_js_read_owned(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 5) {
    st_throw_code(env, EINVAL, "readOwned(fd, position, length, threads, pages) needs 5 arguments");
    return NULL;
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
  int choice = pages != 0 ? (int)pages : atomic_load(&g_pages);
  size_t map_length = 0;
  uint8_t *addr = st_huge_map((size_t)length, &map_length, choice != PAGES_SMALL);
  if (addr == NULL) {
    st_throw_errno(env, errno, "mmap (readOwned)");
    return NULL;
  }
  if (choice == PAGES_SMALL) {
    advise_small(addr, map_length);
  } else if (choice == PAGES_UNDECIDED && map_length >= 2 * HUGE_PAGE) {
    choice = decide_pages(addr);
    atomic_store(&g_pages, choice);
    if (choice == PAGES_SMALL) advise_small(addr + 2 * HUGE_PAGE, map_length - 2 * HUGE_PAGE);
  }
  int err = st_pread_parallel(fd, addr, (size_t)length, position, (size_t)threads);
  if (err != 0) {
    munmap(addr, map_length);
    st_throw_errno(env, err, err == EIO ? "pread (input/output error, or the file ended early: did it shrink?)" : "pread");
    return NULL;
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
