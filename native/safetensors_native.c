/*
 * safetensors_native: optional Node-API addon for safetensors-ts.
 *
 *   open(fd, length, populate)        -> mapping handle (an external value)
 *   window(handle, offset, length)    -> ArrayBuffer over [offset, offset + length) of the mapping, zero-copy
 *   advise(handle, advice, offset, length)
 *   close(handle)                     -> munmap now, detach every window still alive
 *   isClosed(handle)                  -> boolean
 *   allocHuge(length)                 -> ArrayBuffer over anonymous memory, MADV_HUGEPAGE
 *   freeHuge(buffer)                  -> munmap now, detach the buffer
 *   stats()                           -> live counters (for leak checks)
 *
 * Lifetime of a file mapping (all on the thread of the napi_env that made it; counters are process-wide):
 *
 *   A mapping struct is owned jointly by its JS handle and by every window whose finalizer has not run yet.
 *   It is freed (and munmapped, unless already closed) when the handle has been finalized and no window
 *   remains. close() munmaps at once, but first detaches every window ArrayBuffer still reachable through its
 *   weak reference, so no JS view can see unmapped memory; the windows' finalizers still run later (V8 frees the
 *   detached backing store) and only drop their share. The `closed` flag guarantees a single munmap.
 *
 * Lifetime of a huge allocation: the ArrayBuffer's finalizer munmaps unless freeHuge() already did (`freed`);
 * the struct itself is always freed by the finalizer, which runs exactly once.
 *
 * Errors are thrown as JS Errors whose `code` is the errno name (EINVAL, ENOMEM, EBADF, ERANGE, ...).
 */
#define _GNU_SOURCE
#ifndef NAPI_VERSION
#define NAPI_VERSION 8
#endif

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <node_api.h>

#include "common.h"
#include "header_scan.h"
#include "huge.h"
#include "journal.h"
#include "owned.h"
#include "bridge.h"

#define MAX_WINDOW_BYTES ((uint64_t)1 << 32)


/* ------------------------------------------------------------------------------------------------------ */
/* Process-wide counters, read by stats(). */

static atomic_long g_mappings;      /* mapping structs alive */
static atomic_long g_mapped;        /* file mappings currently mmapped */
static atomic_long g_windows;       /* window structs alive (finalizer not yet run) */

static size_t page_size(void) {
  static size_t cached;
  if (cached == 0) {
    long p = sysconf(_SC_PAGESIZE);
    cached = p > 0 ? (size_t)p : 4096;
  }
  return cached;
}


/* ------------------------------------------------------------------------------------------------------ */
/* Argument helpers */

static napi_value undefined_value(napi_env env) {
  napi_value u = NULL;
  napi_get_undefined(env, &u);
  return u;
}

/* ------------------------------------------------------------------------------------------------------ */
/* Opening a file and reading its first bytes in one call */

/* Whether an edit journal exists for the file at `path` (native twin of journalPathFor + hasJournal in
 * src/edit/journal.ts: `<dir>/.<name>-journal`): 1 yes, 0 no, -1 undecided (the JavaScript check decides). Node's
 * path.join normalizes the directory lexically, which the kernel's lookup matches except across a ".." after a
 * symbolic link: a directory with a ".." segment after a name is left undecided, and so is every stat error but
 * "no such file" (the JavaScript check then reports it as before). */
static double journal_state(const char *path, size_t length) {
  if (length == 0 || path[length - 1] == '/') return -1;
  const char *slash = strrchr(path, '/');
  size_t dir_length = slash == NULL ? 0 : (size_t)(slash - path) + 1; /* with its slash */
  /* Segments of the directory: a ".." after a name is where the lexical and the kernel's lookups can part. */
  bool named = false;
  for (size_t begin = 0, end; begin < dir_length; begin = end + 1) {
    end = begin;
    while (path[end] != '/') end++;
    size_t n = end - begin;
    bool dots = (n == 1 && path[begin] == '.') || (n == 2 && path[begin] == '.' && path[begin + 1] == '.');
    if (n == 2 && dots && named) return -1;
    if (n > 0 && !dots) named = true;
  }
  char journal[4096 + 16];
  const char *name = path + dir_length;
  size_t name_length = length - dir_length;
  if (dir_length + 1 + name_length + 8 + 1 > sizeof journal) return -1;
  memcpy(journal, path, dir_length);
  journal[dir_length] = '.';
  memcpy(journal + dir_length + 1, name, name_length);
  memcpy(journal + dir_length + 1 + name_length, "-journal", 9);
  struct stat st;
  if (stat(journal, &st) == 0) return 1;
  /* ENAMETOOLONG: the file's name is too long to take the journal's affixes, so no journal can exist. */
  return errno == ENOENT || errno == ENOTDIR || errno == ENAMETOOLONG ? 0 : -1;
}

/* pread until `length` bytes or the end of the file; the count read, or -1 (errno set). */
static ssize_t pread_full(int fd, uint8_t *to, size_t length, off_t at) {
  size_t done = 0;
  while (done < length) {
    ssize_t got = pread(fd, to + done, length - done, at + (off_t)done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return -1;
    if (got == 0) break;
    done += (size_t)got;
  }
  return (ssize_t)done;
}

/* openHead(path, head: Uint8Array, info: Float64Array, journal: boolean) -> bytes read into `head`; `info` (at least
 * 5 numbers) gets fd, size, st_dev, st_ino, and the journal state (journal_state, or -1 when `journal` is false).
 * One call instead of open + fstat + pread through node:fs (and the journal stat every reader makes), writing into
 * buffers the caller reuses: opening a file is most of what reading a safetensors header costs, so this is what
 * makes an open fast. The fd is the caller's to close. Reads min(head.length, size) bytes. */
static napi_value js_open_head(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 4) {
    st_throw_code(env, EINVAL, "openHead(path, head, info, journal) needs 4 arguments");
    return NULL;
  }
  char path[4096];
  size_t path_length = 0;
  if (napi_get_value_string_utf8(env, argv[0], path, sizeof path, &path_length) != napi_ok) {
    st_throw_code(env, EINVAL, "path must be a string");
    return NULL;
  }
  if (path_length >= sizeof path - 1 || strlen(path) != path_length) {
    st_throw_code(env, ENAMETOOLONG, "path is too long or contains a NUL byte");
    return NULL;
  }
  napi_typedarray_type head_type, info_type;
  size_t head_length = 0, info_length = 0;
  void *head = NULL, *out = NULL;
  bool is_typedarray = false;
  if (napi_is_typedarray(env, argv[1], &is_typedarray) != napi_ok || !is_typedarray ||
      napi_get_typedarray_info(env, argv[1], &head_type, &head_length, &head, NULL, NULL) != napi_ok ||
      head_type != napi_uint8_array || napi_is_typedarray(env, argv[2], &is_typedarray) != napi_ok ||
      !is_typedarray || napi_get_typedarray_info(env, argv[2], &info_type, &info_length, &out, NULL, NULL) != napi_ok ||
      info_type != napi_float64_array || info_length < 5) {
    st_throw_code(env, EINVAL, "openHead(path, head, info, journal) needs a Uint8Array and a Float64Array of 5");
    return NULL;
  }
  bool check_journal = false;
  if (napi_get_value_bool(env, argv[3], &check_journal) != napi_ok) {
    st_throw_code(env, EINVAL, "openHead: journal must be a boolean");
    return NULL;
  }

  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    st_throw_errno(env, errno, "open");
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    st_throw_errno(env, err, "fstat");
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    st_throw_code(env, S_ISDIR(st.st_mode) ? EISDIR : ENODEV, "not a regular file");
    return NULL;
  }
  size_t want = (uint64_t)st.st_size < head_length ? (size_t)st.st_size : head_length;
  ssize_t got = pread_full(fd, head, want, 0);
  if (got != (ssize_t)want) {
    int err = got < 0 ? errno : EIO;
    close(fd);
    st_throw_errno(env, err, "pread");
    return NULL;
  }
  size_t done = want;
  ((double *)out)[0] = (double)fd;
  ((double *)out)[1] = (double)st.st_size;
  /* As Node's fstat reports them (doubles), so that the two compare equal (src/io/node-save.ts). */
  ((double *)out)[2] = (double)st.st_dev;
  ((double *)out)[3] = (double)st.st_ino;
  ((double *)out)[4] = check_journal ? journal_state(path, path_length) : -1;
  napi_value result;
  if (napi_create_double(env, (double)done, &result) != napi_ok) {
    close(fd);
    st_throw_code(env, ENOMEM, "cannot build the result");
    return NULL;
  }
  return result;
}

/* preadInto(fd, uint8array, position, threads): fill the whole array with the file's bytes from `position`, split
 * across up to `threads` threads (the calling one included), blocking until all are done. Copying a large region
 * into freshly allocated memory was 4x faster with two threads than with one on the 2-vCPU machines measured
 * (page faults of the destination dominate, and they proceed in parallel). */
typedef struct {
  int fd;
  uint8_t *dst;
  size_t length;
  uint64_t position;
  int err;
} pread_job;

static void *pread_job_run(void *arg) {
  pread_job *job = arg;
  size_t done = 0;
  while (done < job->length) {
    size_t want = job->length - done;
    if (want > (size_t)1 << 30) want = (size_t)1 << 30;
    ssize_t got = pread(job->fd, job->dst + done, want, (off_t)(job->position + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      job->err = got < 0 ? errno : EIO; /* 0: the file ended early (it shrank) */
      return NULL;
    }
    done += (size_t)got;
  }
  return NULL;
}

#define MAX_PREAD_THREADS 16

/* Runs fn on each of the n jobs (job i at jobs + i * size): the first on the calling thread, the others on threads
 * of their own (inline when a thread cannot be started). Returns when all are done. */
static void run_jobs(void *(*fn)(void *), void *jobs, size_t size, size_t n) {
  pthread_t tids[MAX_PREAD_THREADS];
  int started[MAX_PREAD_THREADS] = {0};
  for (size_t i = 1; i < n; i++) {
    void *job = (uint8_t *)jobs + i * size;
    started[i] = pthread_create(&tids[i], NULL, fn, job) == 0;
    if (!started[i]) fn(job);
  }
  if (n > 0) fn(jobs);
  for (size_t i = 1; i < n; i++)
    if (started[i]) pthread_join(tids[i], NULL);
}

/* The same for owned.c. */
void st_run_jobs(void *(*fn)(void *), void *jobs, size_t size, size_t n) { run_jobs(fn, jobs, size, n); }

/* Fills dst[0, length) from the file at `position` with up to `threads` threads; 0 or the first errno (EIO: the
 * file ended early). Pieces are whole 2 MiB (huge) pages, so that no page is faulted by two threads. */
int st_pread_parallel(int fd, uint8_t *dst, size_t length, uint64_t position, size_t threads) {
  if (threads == 0) threads = 1;
  size_t piece = (length + threads - 1) / threads;
  piece = (piece + HUGE_PAGE_SIZE - 1) / HUGE_PAGE_SIZE * HUGE_PAGE_SIZE;
  pread_job jobs[MAX_PREAD_THREADS];
  size_t n = 0;
  for (size_t at = 0; at < length && n < MAX_PREAD_THREADS; at += piece, n++) {
    jobs[n] = (pread_job){fd, dst + at, length - at < piece ? length - at : piece, position + at, 0};
  }
  run_jobs(pread_job_run, jobs, sizeof jobs[0], n);
  int err = 0;
  for (size_t i = 0; i < n && err == 0; i++) err = jobs[i].err;
  return err;
}

static napi_value js_pread_into(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 4) {
    st_throw_code(env, EINVAL, "preadInto(fd, array, position, threads) needs 4 arguments");
    return NULL;
  }
  int32_t fd = -1;
  if (napi_get_value_int32(env, argv[0], &fd) != napi_ok || fd < 0) {
    st_throw_code(env, EBADF, "fd must be a non-negative integer file descriptor");
    return NULL;
  }
  bool is_typedarray = false;
  NAPI_CALL(env, napi_is_typedarray(env, argv[1], &is_typedarray));
  napi_typedarray_type type;
  size_t length = 0;
  void *data = NULL;
  if (!is_typedarray ||
      napi_get_typedarray_info(env, argv[1], &type, &length, &data, NULL, NULL) != napi_ok ||
      type != napi_uint8_array) {
    st_throw_code(env, EINVAL, "array must be a Uint8Array");
    return NULL;
  }
  uint64_t position = 0, threads = 1;
  if (st_get_index(env, argv[2], "position", MAX_SAFE_INTEGER, &position) != 0) return NULL;
  if (st_get_index(env, argv[3], "threads", MAX_PREAD_THREADS, &threads) != 0) return NULL;
  if (threads == 0) threads = 1;
  if (length == 0) return undefined_value(env);

  int err = st_pread_parallel(fd, data, length, position, (size_t)threads);
  if (err != 0) {
    st_throw_errno(env, err, "pread");
    return NULL;
  }
  return undefined_value(env);
}

/* ------------------------------------------------------------------------------------------------------ */
/* File mappings */

typedef struct st_window st_window;

typedef struct st_mapping {
  uint8_t *addr;     /* start of the mapping; NULL when nothing is mapped (empty file, or closed) */
  uint64_t length;   /* bytes of the file covered */
  size_t map_length; /* length given to mmap; 0 when nothing was mapped */
  int closed;        /* set once munmap has run (explicit close or final release): never munmap twice */
  int handle_alive;  /* the JS handle has not been finalized yet */
  st_window **windows; /* windows whose finalizer has not run yet */
  size_t n_windows;
  size_t cap_windows;
} st_mapping;

struct st_window {
  st_mapping *mapping;
  napi_ref ref; /* weak (refcount 0) reference to the window's ArrayBuffer, to detach it on close */
  size_t slot;  /* index in mapping->windows */
};

/* Tags the handle so that a foreign external can never be taken for a mapping. */
static const napi_type_tag MAPPING_TAG = {0x5afe7e45a11a7e01ULL, 0x9c1d0e3b7f2a4d11ULL};

static void mapping_unmap(st_mapping *m) {
  if (m->closed) return;
  m->closed = 1;
  if (m->addr != NULL) {
    munmap(m->addr, m->map_length);
    atomic_fetch_sub(&g_mapped, 1);
  }
  m->addr = NULL;
}

/* Frees the mapping once nothing can reach it any more: the handle is gone and every window finalized. */
static void mapping_release_if_unused(st_mapping *m) {
  if (m->handle_alive || m->n_windows != 0) return;
  mapping_unmap(m);
  free(m->windows);
  free(m);
  atomic_fetch_sub(&g_mappings, 1);
}

static void mapping_handle_finalize(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  st_mapping *m = data;
  m->handle_alive = 0;
  mapping_release_if_unused(m);
}

/* Runs once per window: when its ArrayBuffer was garbage collected, or after close() detached it. */
static void window_finalize(napi_env env, void *data, void *hint) {
  (void)data;
  st_window *w = hint;
  st_mapping *m = w->mapping;
  size_t last = m->n_windows - 1;
  if (w->slot != last) {
    m->windows[w->slot] = m->windows[last];
    m->windows[w->slot]->slot = w->slot;
  }
  m->n_windows = last;
  if (w->ref != NULL) napi_delete_reference(env, w->ref);
  free(w);
  atomic_fetch_sub(&g_windows, 1);
  mapping_release_if_unused(m);
}

static st_mapping *get_mapping(napi_env env, napi_value handle) {
  napi_valuetype type;
  bool tagged = false;
  void *data = NULL;
  if (napi_typeof(env, handle, &type) != napi_ok || type != napi_external ||
      napi_check_object_type_tag(env, handle, &MAPPING_TAG, &tagged) != napi_ok || !tagged ||
      napi_get_value_external(env, handle, &data) != napi_ok || data == NULL) {
    st_throw_code(env, EINVAL, "not a mapping handle");
    return NULL;
  }
  return data;
}

/* open(fd, length, populate) */
static napi_value js_open(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 2) {
    st_throw_code(env, EINVAL, "open(fd, length, populate?) needs fd and length");
    return NULL;
  }
  int32_t fd = -1;
  napi_valuetype type;
  NAPI_CALL(env, napi_typeof(env, argv[0], &type));
  if (type != napi_number || napi_get_value_int32(env, argv[0], &fd) != napi_ok || fd < 0) {
    st_throw_code(env, EBADF, "fd must be a non-negative integer file descriptor");
    return NULL;
  }
  uint64_t length = 0;
  if (st_get_index(env, argv[1], "length", MAX_SAFE_INTEGER, &length) != 0) return NULL;
  bool populate = false;
  if (argc >= 3) {
    napi_value flag;
    NAPI_CALL(env, napi_coerce_to_bool(env, argv[2], &flag));
    NAPI_CALL(env, napi_get_value_bool(env, flag, &populate));
  }
  if ((uint64_t)(size_t)length != length || length > (uint64_t)SIZE_MAX - page_size()) {
    st_throw_code(env, EOVERFLOW, "length does not fit in this process's address space");
    return NULL;
  }

  /* Bytes past the end of the file would raise SIGBUS on access: refuse them here. */
  struct stat st;
  if (fstat(fd, &st) != 0) {
    st_throw_errno(env, errno, "fstat");
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) {
    st_throw_code(env, ENODEV, "only regular files can be mapped");
    return NULL;
  }
  if (st.st_size < 0 || length > (uint64_t)st.st_size) {
    char message[160];
    snprintf(message, sizeof message, "length %llu is past the end of the file (%lld bytes)",
             (unsigned long long)length, (long long)st.st_size);
    st_throw_code(env, EINVAL, message);
    return NULL;
  }

  st_mapping *m = calloc(1, sizeof *m);
  if (m == NULL) {
    st_throw_errno(env, ENOMEM, "open");
    return NULL;
  }
  m->length = length;
  if (length > 0) {
    int flags = MAP_PRIVATE;
#ifdef MAP_POPULATE
    if (populate) flags |= MAP_POPULATE;
#endif
    void *addr = mmap(NULL, (size_t)length, PROT_READ, flags, fd, 0);
    if (addr == MAP_FAILED) {
      int err = errno;
      free(m);
      st_throw_errno(env, err, "mmap");
      return NULL;
    }
    /* Copy-on-write: a write through a view changes a private copy of that page, never the file, and never
     * crashes the process. Made writable only after mapping: MAP_POPULATE on a writable private mapping would
     * break copy-on-write for every page, i.e. copy the whole file. If mprotect fails the mapping stays read-only. */
    (void)mprotect(addr, (size_t)length, PROT_READ | PROT_WRITE);
    m->addr = addr;
    m->map_length = (size_t)length;
    atomic_fetch_add(&g_mapped, 1);
  }
  m->handle_alive = 1;
  atomic_fetch_add(&g_mappings, 1);

  napi_value handle;
  if (napi_create_external(env, m, mapping_handle_finalize, NULL, &handle) != napi_ok) {
    m->handle_alive = 0;
    mapping_release_if_unused(m);
    st_throw_code(env, ENOMEM, "cannot create the mapping handle");
    return NULL;
  }
  /* If tagging fails the handle is unusable; its finalizer still releases the mapping. */
  NAPI_CALL(env, napi_type_tag_object(env, handle, &MAPPING_TAG));
  return handle;
}

/* A window over [offset, offset + length) of m (checked by the caller, length > 0), tracked by m; with `weak`, also
 * a weak reference through which close() detaches it. 0, or -1 with a JS error thrown. */
static int make_window(napi_env env, st_mapping *m, uint64_t offset, uint64_t length, int weak, napi_value *out) {
  napi_value result;
  if (m->n_windows == m->cap_windows) {
    size_t cap = m->cap_windows == 0 ? 4 : m->cap_windows * 2;
    st_window **grown = realloc(m->windows, cap * sizeof *grown);
    if (grown == NULL) {
      st_throw_errno(env, ENOMEM, "window");
      return -1;
    }
    m->windows = grown;
    m->cap_windows = cap;
  }
  st_window *w = calloc(1, sizeof *w);
  if (w == NULL) {
    st_throw_errno(env, ENOMEM, "window");
    return -1;
  }
  w->mapping = m;
  w->slot = m->n_windows;
  m->windows[m->n_windows++] = w;
  atomic_fetch_add(&g_windows, 1);

  const st_unaccounted_api *uncounted = st_bridge();
  if (uncounted != NULL) {
    /* Not counted as external memory by V8 (see unaccounted.h); our finalizer tracks its lifetime instead. */
    if (uncounted->arraybuffer(env, m->addr + offset, (size_t)length, &result) != 0) {
      m->n_windows--;
      free(w);
      atomic_fetch_sub(&g_windows, 1);
      st_throw_code(env, ENOMEM, "cannot create an ArrayBuffer for the window");
      return -1;
    }
    st_keep_in_thread(env, result);
    if (napi_add_finalizer(env, result, w, window_finalize, w, NULL) != napi_ok) {
      /* Untracked, it could outlive the mapping: detach it and refuse. */
      st_detach(env, result);
      m->n_windows--;
      free(w);
      atomic_fetch_sub(&g_windows, 1);
      st_throw_code(env, ENOMEM, "cannot track the window");
      return -1;
    }
  } else if (napi_create_external_arraybuffer(env, m->addr + offset, (size_t)length, window_finalize, w, &result) !=
             napi_ok) {
    /* Node may or may not have called (or scheduled) the finalizer on this failure path, so w is left in place:
     * at worst a leak, never a double free. Unreachable in practice: the length is checked above. */
    st_throw_code(env, ENOMEM, "cannot create an external ArrayBuffer for the window");
    return -1;
  }
  if (weak && napi_create_reference(env, result, 0, &w->ref) != napi_ok) {
    /* Without a weak reference close() could not detach it: detach now; the finalizer cleans up later. */
    w->ref = NULL;
    st_detach(env, result);
    st_throw_code(env, ENOMEM, "cannot track the window");
    return -1;
  }
  *out = result;
  return 0;
}

/* Bytes read at once from the start of the file by loadViews: the length prefix and most headers (a 48-tensor header
 * is ~5 KB, a 1,750-tensor one ~200 KB and read in a second call). */
#define LOAD_HEAD_BYTES 16384
/* Larger headers go the ordinary way (src/io/native.ts NATIVE_SCAN_MAX_HEADER_BYTES). */
#define LOAD_MAX_HEADER_BYTES ((uint64_t)1 << 20)


/* loadViews(path, out: Float64Array, names: string[], journal: boolean, maxHeaderBytes, dtypeNames: string,
 *           dtypeBits: Float64Array) -> ArrayBuffer | null | -2
 *
 * What loadFile(path) needs for every tensor as a view, in one call: open, fstat, read the header, look for the edit
 * journal (when `journal`), check the header (st_scan_checked), map the whole file copy-on-write, close the
 * descriptor, and make one window over the whole mapping that V8 does not count as external memory. `out` gets
 * st_dev, st_ino, the data region's start, then st_scan_checked's numbers; `names[0]` gets the tensor names, in file
 * order, joined by NUL. The window alone keeps the mapping alive (there is no handle, so nothing can close it): it is unmapped when
 * the window is collected. null, with nothing left open or mapped, for everything it does not take (not a regular
 * file, a journal or an undecided one, a header over maxHeaderBytes or 1 MiB or not of the checked form, a file over
 * 4 GiB, windows V8 would count, any system call failing): the caller then reads the file the ordinary way, which
 * reports whatever is wrong. -2: `out` is too small, out[0] says how many numbers it needs.
 *
 * Measured (callgrind, the first loadFile of a fresh process, the benchmark's 48-tensor checkpoint): 1.13 M
 * instructions the ordinary way (open, head copies, scan, the header's objects, mapping, window, views), 0.61 M with
 * this call. */
static napi_value js_load_views(napi_env env, napi_callback_info info) {
  size_t argc = 7;
  napi_value argv[7];
  napi_value null_value = NULL;
  NAPI_CALL(env, napi_get_null(env, &null_value));
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 7 || st_bridge() == NULL)
    return null_value;
  char path[4096];
  size_t path_length = 0, capacity = 0, nbits = 0, names_length = 0;
  void *items = NULL, *bits = NULL;
  napi_typedarray_type type;
  bool is_typedarray = false, journal = false;
  double max_header = 0;
  char dtype_names[1024];
  dtype_table dtypes;
  if (napi_get_value_string_utf8(env, argv[0], path, sizeof path, &path_length) != napi_ok ||
      path_length >= sizeof path - 1 || strlen(path) != path_length ||
      napi_is_typedarray(env, argv[1], &is_typedarray) != napi_ok || !is_typedarray ||
      napi_get_typedarray_info(env, argv[1], &type, &capacity, &items, NULL, NULL) != napi_ok ||
      type != napi_float64_array || capacity < 8 || napi_get_value_bool(env, argv[3], &journal) != napi_ok ||
      napi_get_value_double(env, argv[4], &max_header) != napi_ok ||
      napi_get_value_string_utf8(env, argv[5], dtype_names, sizeof dtype_names, &names_length) != napi_ok ||
      napi_is_typedarray(env, argv[6], &is_typedarray) != napi_ok || !is_typedarray ||
      napi_get_typedarray_info(env, argv[6], &type, &nbits, &bits, NULL, NULL) != napi_ok ||
      type != napi_float64_array || st_dtype_table_parse(&dtypes, dtype_names, names_length, bits, nbits) != 0)
    return null_value;
  double *out = items;

  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return null_value;
  uint8_t head[LOAD_HEAD_BYTES];
  uint8_t *header = NULL; /* malloc'd when the header is past the head */
  struct stat st;
  napi_value result = null_value;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 8 || (uint64_t)st.st_size > MAX_WINDOW_BYTES ||
      (journal && journal_state(path, path_length) != 0))
    goto done;
  size_t size = (size_t)st.st_size;
  ssize_t got = pread_full(fd, head, size < sizeof head ? size : sizeof head, 0);
  if (got < 8) goto done;
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = (n << 8) | head[i];
  if ((double)n > max_header || n > LOAD_MAX_HEADER_BYTES || 8 + n > (uint64_t)size) goto done;
  const uint8_t *bytes = head + 8;
  if (8 + n > (uint64_t)got) {
    header = malloc((size_t)n);
    if (header == NULL || pread_full(fd, header, (size_t)n, 8) != (ssize_t)n) goto done;
    bytes = header;
  }
  size_t written = 0;
  int checked = st_scan_checked(bytes, (size_t)n, (double)size, &dtypes, out + 3, capacity - 3, &written);
  if (checked == -2) {
    out[0] = (double)(written + 3);
    napi_create_int32(env, -2, &result);
    goto done;
  }
  if (checked != 0) goto done;
  /* Copy-on-write and writable at once (open() maps read-only first because MAP_POPULATE on a writable private
   * mapping would copy every page; nothing is populated here): one mprotect fewer. */
  void *addr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (addr == MAP_FAILED) goto done;
  st_mapping *m = calloc(1, sizeof *m);
  if (m == NULL) {
    munmap(addr, size);
    goto done;
  }
  m->addr = addr;
  m->length = size;
  m->map_length = size;
  atomic_fetch_add(&g_mapped, 1);
  atomic_fetch_add(&g_mappings, 1);
  napi_value window;
  if (make_window(env, m, 0, size, 0, &window) != 0) {
    /* No window was left tracked: nothing else holds the mapping. */
    napi_value ignored;
    napi_get_and_clear_last_exception(env, &ignored);
    mapping_release_if_unused(m);
    goto done;
  }
  /* The names as one string, joined by NUL (names[0]; src/io/native.ts viewNames splits it): the checked form's
   * strings are ASCII from 0x20, so they hold no NUL and Latin-1 is the same bytes. One string and one element set
   * instead of one each per tensor (napi_set_element alone was ~1.1 k instructions a name, callgrind, Node 20). */
  size_t tensors = (size_t)out[3], joined_length = 0;
  for (size_t i = 0; i < tensors; i++) {
    const double *t = out + 3 + 2 + i * 6;
    joined_length += (size_t)(t[1] - t[0]) + (i > 0);
  }
  char stack_joined[8192];
  char *joined = joined_length <= sizeof stack_joined ? stack_joined : malloc(joined_length);
  if (joined == NULL) goto done; /* the window is collected like any other (and unmaps the file then) */
  char *at = joined;
  for (size_t i = 0; i < tensors; i++) {
    const double *t = out + 3 + 2 + i * 6;
    size_t length = (size_t)(t[1] - t[0]);
    if (i > 0) *at++ = '\0';
    memcpy(at, bytes + (size_t)t[0], length);
    at += length;
  }
  napi_value names;
  napi_status joined_status = napi_create_string_latin1(env, joined, joined_length, &names);
  if (joined != stack_joined) free(joined);
  if (joined_status != napi_ok || napi_set_element(env, argv[2], 0, names) != napi_ok) goto done;
  out[0] = (double)st.st_dev;
  out[1] = (double)st.st_ino;
  out[2] = (double)(8 + n);
  result = window;
done:
  free(header);
  close(fd);
  return result;
}

/* window(handle, offset, length) */
static napi_value js_window(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 3) {
    st_throw_code(env, EINVAL, "window(handle, offset, length) needs 3 arguments");
    return NULL;
  }
  st_mapping *m = get_mapping(env, argv[0]);
  if (m == NULL) return NULL;
  uint64_t offset = 0, length = 0;
  if (st_get_index(env, argv[1], "offset", MAX_SAFE_INTEGER, &offset) != 0) return NULL;
  if (st_get_index(env, argv[2], "window length", MAX_WINDOW_LENGTH, &length) != 0) return NULL;
  if (m->closed) {
    st_throw_code(env, EBADF, "the mapping is closed");
    return NULL;
  }
  if (offset > m->length || length > m->length - offset) {
    char message[200];
    snprintf(message, sizeof message, "window [%llu, %llu + %llu) is outside the mapping (%llu bytes)",
             (unsigned long long)offset, (unsigned long long)offset, (unsigned long long)length,
             (unsigned long long)m->length);
    st_throw_code(env, ERANGE, message);
    return NULL;
  }
  napi_value result;
  if (length == 0) {
    /* Points at nothing, so it needs no tracking. */
    NAPI_CALL(env, napi_create_arraybuffer(env, 0, NULL, &result));
    return result;
  }

  if (make_window(env, m, offset, length, 1, &result) != 0) return NULL;
  return result;
}

static int parse_advice(const char *name, int *advice) {
  if (strcmp(name, "normal") == 0) *advice = MADV_NORMAL;
  else if (strcmp(name, "random") == 0) *advice = MADV_RANDOM;
  else if (strcmp(name, "sequential") == 0) *advice = MADV_SEQUENTIAL;
  else if (strcmp(name, "willneed") == 0) *advice = MADV_WILLNEED;
  else if (strcmp(name, "dontneed") == 0) *advice = MADV_DONTNEED;
#ifdef MADV_HUGEPAGE
  else if (strcmp(name, "hugepage") == 0) *advice = MADV_HUGEPAGE;
#else
  else if (strcmp(name, "hugepage") == 0) *advice = -1; /* no THP on this system: nothing to do */
#endif
  else return -1;
  return 0;
}

/* prefault(handle, threads): read one byte of every page of the mapping, split across threads, so that later reads
 * take no page fault (MAP_POPULATE maps the pages but, measured on VMs, left each first access slow). */
typedef struct {
  const volatile uint8_t *start;
  size_t length;
  size_t page;
  uint64_t sum;
} touch_job;

static void *touch_job_run(void *arg) {
  touch_job *job = arg;
  uint64_t sum = 0;
  for (size_t at = 0; at < job->length; at += job->page) sum += job->start[at];
  job->sum = sum;
  return NULL;
}

static napi_value js_prefault(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 2) {
    st_throw_code(env, EINVAL, "prefault(handle, threads) needs 2 arguments");
    return NULL;
  }
  st_mapping *m = get_mapping(env, argv[0]);
  if (m == NULL) return NULL;
  uint64_t threads = 1;
  if (st_get_index(env, argv[1], "threads", MAX_PREAD_THREADS, &threads) != 0) return NULL;
  if (threads == 0) threads = 1;
  if (m->closed) {
    st_throw_code(env, EBADF, "the mapping is closed");
    return NULL;
  }
  if (m->addr == NULL || m->length == 0) return undefined_value(env);
  size_t page = page_size();
  size_t piece = ((size_t)m->length + threads - 1) / threads;
  piece = (piece + page - 1) / page * page;
  touch_job jobs[MAX_PREAD_THREADS];
  size_t n = 0;
  for (size_t at = 0; at < (size_t)m->length && n < MAX_PREAD_THREADS; at += piece, n++) {
    size_t length = (size_t)m->length - at < piece ? (size_t)m->length - at : piece;
    jobs[n] = (touch_job){m->addr + at, length, page, 0};
  }
  run_jobs(touch_job_run, jobs, sizeof jobs[0], n);
  return undefined_value(env);
}

/* advise(handle, advice, offset?, length?): the range defaults to the whole mapping and is widened to pages. */
static napi_value js_advise(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 2) {
    st_throw_code(env, EINVAL, "advise(handle, advice, offset?, length?) needs handle and advice");
    return NULL;
  }
  st_mapping *m = get_mapping(env, argv[0]);
  if (m == NULL) return NULL;
  char name[32];
  size_t name_length = 0;
  napi_valuetype type;
  NAPI_CALL(env, napi_typeof(env, argv[1], &type));
  int advice = 0;
  if (type != napi_string || napi_get_value_string_utf8(env, argv[1], name, sizeof name, &name_length) != napi_ok ||
      parse_advice(name, &advice) != 0) {
    st_throw_code(env, EINVAL,
               "advice must be one of normal, random, sequential, willneed, dontneed, hugepage");
    return NULL;
  }
  uint64_t offset = 0, length = 0;
  bool has_offset = false, has_length = false;
  if (argc >= 3) {
    NAPI_CALL(env, napi_typeof(env, argv[2], &type));
    has_offset = type != napi_undefined;
  }
  if (argc >= 4) {
    NAPI_CALL(env, napi_typeof(env, argv[3], &type));
    has_length = type != napi_undefined;
  }
  if (has_offset && st_get_index(env, argv[2], "offset", MAX_SAFE_INTEGER, &offset) != 0) return NULL;
  if (has_length && st_get_index(env, argv[3], "length", MAX_SAFE_INTEGER, &length) != 0) return NULL;
  if (m->closed) {
    st_throw_code(env, EBADF, "the mapping is closed");
    return NULL;
  }
  if (offset > m->length) {
    st_throw_code(env, ERANGE, "advise offset is past the end of the mapping");
    return NULL;
  }
  if (!has_length) length = m->length - offset;
  if (length > m->length - offset) {
    st_throw_code(env, ERANGE, "advise range is outside the mapping");
    return NULL;
  }
  if (length == 0 || m->addr == NULL || advice == -1) return undefined_value(env);

  size_t page = page_size();
  size_t start = (size_t)offset & ~(page - 1);
  size_t end = ((size_t)(offset + length) + page - 1) & ~(page - 1);
  size_t mapped_end = (m->map_length + page - 1) & ~(page - 1);
  if (end > mapped_end) end = mapped_end;
  if (madvise(m->addr + start, end - start, advice) != 0) {
    int err = errno;
    char what[64];
    snprintf(what, sizeof what, "madvise(%s)", name);
    st_throw_errno(env, err, what);
    return NULL;
  }
  return undefined_value(env);
}

/* close(handle): idempotent. */
static napi_value js_close(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 1) {
    st_throw_code(env, EINVAL, "close(handle) needs a handle");
    return NULL;
  }
  st_mapping *m = get_mapping(env, argv[0]);
  if (m == NULL) return NULL;
  if (m->closed) return undefined_value(env);
  /* Snapshot the live windows first, so that the list may change under us (should a finalizer ever run
   * synchronously during a detach) without a window being skipped. */
  size_t count = 0;
  napi_value *live = NULL;
  if (m->n_windows > 0) {
    live = malloc(m->n_windows * sizeof *live);
    if (live == NULL) {
      st_throw_errno(env, ENOMEM, "close");
      return NULL;
    }
  }
  for (size_t i = 0; i < m->n_windows; i++) {
    st_window *w = m->windows[i];
    napi_value buffer = NULL;
    if (w->ref == NULL) continue; /* detached when it was made */
    if (napi_get_reference_value(env, w->ref, &buffer) != napi_ok || buffer == NULL) continue; /* collected */
    live[count++] = buffer;
  }
  /* Detach first: if any window could not be detached, keep the memory mapped rather than risk a crash. */
  for (size_t i = 0; i < count; i++) {
    bool detached = false;
    if (napi_is_detached_arraybuffer(env, live[i], &detached) != napi_ok ||
        (!detached && st_detach(env, live[i]) != 0)) {
      free(live);
      st_throw_code(env, EBUSY, "a window of this mapping cannot be detached; the mapping stays open");
      return NULL;
    }
  }
  free(live);
  mapping_unmap(m);
  return undefined_value(env);
}

static napi_value js_is_closed(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 1) {
    st_throw_code(env, EINVAL, "isClosed(handle) needs a handle");
    return NULL;
  }
  st_mapping *m = get_mapping(env, argv[0]);
  if (m == NULL) return NULL;
  napi_value result;
  NAPI_CALL(env, napi_get_boolean(env, m->closed != 0, &result));
  return result;
}

/* ------------------------------------------------------------------------------------------------------ */

static napi_value make_number(napi_env env, double value) {
  napi_value v = NULL;
  napi_create_double(env, value, &v);
  return v;
}

static napi_value make_boolean(napi_env env, bool value) {
  napi_value v = NULL;
  napi_get_boolean(env, value, &v);
  return v;
}

/* useUncountedWindows(external, key): windows made from now on are not counted by V8, through the function of
 * safetensors_v8 that `external` carries (unaccounted.h); with `key`, windows are made their own detach keys. The caller has checked that it was built for this Node. */
static napi_value js_use_uncounted_windows(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  bool key = false;
  if (argc < 2 || napi_get_value_bool(env, argv[1], &key) != napi_ok) {
    st_throw_code(env, EINVAL, "useUncountedWindows(external, key) needs a boolean key");
    return NULL;
  }
  static const napi_type_tag tag = {ST_UNACCOUNTED_TAG_LOWER, ST_UNACCOUNTED_TAG_UPPER};
  napi_valuetype type;
  bool tagged = false;
  void *data = NULL;
  if (argc < 1 || napi_typeof(env, argv[0], &type) != napi_ok || type != napi_external ||
      napi_check_object_type_tag(env, argv[0], &tag, &tagged) != napi_ok || !tagged ||
      napi_get_value_external(env, argv[0], &data) != napi_ok || data == NULL) {
    st_throw_code(env, EINVAL, "useUncountedWindows(external) needs the arraybuffer external of safetensors_v8");
    return NULL;
  }
  const st_unaccounted_api *api = data;
  if (api->version != ST_UNACCOUNTED_VERSION || api->arraybuffer == NULL || api->detach == NULL ||
      api->set_detach_key == NULL) {
    st_throw_code(env, EINVAL, "useUncountedWindows: safetensors_v8 is of another version");
    return NULL;
  }
  st_bridge_set(api, key);
  return undefined_value(env);
}

/* uncountedWindows() -> whether windows are ArrayBuffers V8 does not count as external memory. */
static napi_value js_uncounted_windows(napi_env env, napi_callback_info info) {
  (void)info;
  return make_boolean(env, st_bridge() != NULL);
}

static napi_value js_stats(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value result;
  NAPI_CALL(env, napi_create_object(env, &result));
  NAPI_CALL(env, napi_set_named_property(env, result, "mappings", make_number(env, (double)atomic_load(&g_mappings))));
  NAPI_CALL(env, napi_set_named_property(env, result, "mapped", make_number(env, (double)atomic_load(&g_mapped))));
  NAPI_CALL(env, napi_set_named_property(env, result, "windows", make_number(env, (double)atomic_load(&g_windows))));
  double huge_allocations = 0, huge_buffers = 0, huge_bytes = 0;
  st_huge_stats(&huge_allocations, &huge_buffers, &huge_bytes);
  NAPI_CALL(env, napi_set_named_property(env, result, "hugeAllocations", make_number(env, huge_allocations)));
  NAPI_CALL(env, napi_set_named_property(env, result, "hugeBuffers", make_number(env, huge_buffers)));
  NAPI_CALL(env, napi_set_named_property(env, result, "hugeBytes", make_number(env, huge_bytes)));
  return result;
}

NAPI_MODULE_INIT(/* napi_env env, napi_value exports */) {
  napi_property_descriptor props[] = {
      {"open", NULL, js_open, NULL, NULL, NULL, napi_enumerable, NULL},
      {"scanHeader", NULL, st_js_scan_header, NULL, NULL, NULL, napi_enumerable, NULL},
      {"scanChecked", NULL, st_js_scan_checked, NULL, NULL, NULL, napi_enumerable, NULL},
      {"loadViews", NULL, js_load_views, NULL, NULL, NULL, napi_enumerable, NULL},
      {"scanRun", NULL, st_js_scan_run, NULL, NULL, NULL, napi_enumerable, NULL},
      {"findSyntaxError", NULL, st_js_find_syntax_error, NULL, NULL, NULL, napi_enumerable, NULL},
      {"crc32c", NULL, st_js_crc32c, NULL, NULL, NULL, napi_enumerable, NULL},
      {"journalRanges", NULL, st_js_journal_ranges, NULL, NULL, NULL, napi_enumerable, NULL},
      {"writeRepeated", NULL, st_js_write_repeated, NULL, NULL, NULL, napi_enumerable, NULL},
      {"journalBegin", NULL, st_js_journal_begin, NULL, NULL, NULL, napi_enumerable, NULL},
      {"journalFill", NULL, st_js_journal_fill, NULL, NULL, NULL, napi_enumerable, NULL},
      {"openWritable", NULL, st_js_open_writable, NULL, NULL, NULL, napi_enumerable, NULL},
      {"journalEnd", NULL, st_js_journal_end, NULL, NULL, NULL, napi_enumerable, NULL},
      {"openHead", NULL, js_open_head, NULL, NULL, NULL, napi_enumerable, NULL},
      {"preadInto", NULL, js_pread_into, NULL, NULL, NULL, napi_enumerable, NULL},
      {"window", NULL, js_window, NULL, NULL, NULL, napi_enumerable, NULL},
      {"advise", NULL, js_advise, NULL, NULL, NULL, napi_enumerable, NULL},
      {"prefault", NULL, js_prefault, NULL, NULL, NULL, napi_enumerable, NULL},
      {"close", NULL, js_close, NULL, NULL, NULL, napi_enumerable, NULL},
      {"isClosed", NULL, js_is_closed, NULL, NULL, NULL, napi_enumerable, NULL},
      {"allocHuge", NULL, st_js_alloc_huge, NULL, NULL, NULL, napi_enumerable, NULL},
      {"freeHuge", NULL, st_js_free_huge, NULL, NULL, NULL, napi_enumerable, NULL},
      {"readOwned", NULL, st_js_read_owned, NULL, NULL, NULL, napi_enumerable, NULL},
      {"ownedPages", NULL, st_js_owned_pages, NULL, NULL, NULL, napi_enumerable, NULL},
      {"stats", NULL, js_stats, NULL, NULL, NULL, napi_enumerable, NULL},
      {"pageSize", NULL, NULL, NULL, NULL, make_number(env, (double)page_size()), napi_enumerable, NULL},
      {"hugePageSize", NULL, NULL, NULL, NULL, make_number(env, (double)HUGE_PAGE_SIZE), napi_enumerable, NULL},
      {"maxWindowLength", NULL, NULL, NULL, NULL, make_number(env, MAX_WINDOW_LENGTH), napi_enumerable, NULL},
      /* Bumped with every change of a function's arguments or results (src/io/native.ts checks it): 2 = openHead
       * into caller buffers, scanHeader; 3 = scanHeader refuses (-1) a header that repeats a tensor name; 4 = openHead
       * takes `journal` and reports st_dev, st_ino and the journal state; 5 = uncountedWindows() is a function, set by
       * useUncountedWindows(). */
      {"interfaceVersion", NULL, NULL, NULL, NULL, make_number(env, 5), napi_enumerable, NULL},
      {"useUncountedWindows", NULL, js_use_uncounted_windows, NULL, NULL, NULL, napi_enumerable, NULL},
      {"uncountedWindows", NULL, js_uncounted_windows, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  st_journal_init();
  if (napi_define_properties(env, exports, sizeof props / sizeof props[0], props) != napi_ok) return NULL;
  return exports;
}
