/*
 * Huge-page backed anonymous memory (allocHuge, freeHuge, and the owned copies of owned.c): the ArrayBuffer's
 * finalizer munmaps unless freeHuge() already did (`freed`); the struct itself is always freed by the finalizer, which
 * runs exactly once.
 */
#define _GNU_SOURCE
#ifndef NAPI_VERSION
#define NAPI_VERSION 8
#endif

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "bridge.h"
#include "common.h"
#include "huge.h"

static atomic_long g_huge;          /* huge allocations currently mmapped */
static atomic_long g_huge_structs;  /* huge structs alive (finalizer not yet run) */
static atomic_llong g_huge_bytes;   /* bytes currently mmapped by huge allocations */

static napi_value undefined_value(napi_env env) {
  napi_value u = NULL;
  napi_get_undefined(env, &u);
  return u;
}

typedef struct st_huge {
  void *addr;
  size_t map_length;
  napi_env env;
  napi_ref ref; /* weak reference to the ArrayBuffer, so freeHuge can check it was given the right one */
  int freed;    /* munmapped by freeHuge: the finalizer must not munmap again */
  struct st_huge *prev, *next;
} st_huge;

/* Live (mmapped) huge allocations of every env; the address is unique while mapped. */
static pthread_mutex_t g_huge_lock = PTHREAD_MUTEX_INITIALIZER;
static st_huge *g_huge_head;

static void huge_link(st_huge *h) {
  pthread_mutex_lock(&g_huge_lock);
  h->prev = NULL;
  h->next = g_huge_head;
  if (g_huge_head != NULL) g_huge_head->prev = h;
  g_huge_head = h;
  pthread_mutex_unlock(&g_huge_lock);
}

/* Unmaps and unlinks h unless already done. Only h's own env thread calls this, so no double unmap. */
static void huge_unmap(st_huge *h) {
  pthread_mutex_lock(&g_huge_lock);
  int was_freed = h->freed;
  if (!was_freed) {
    h->freed = 1;
    if (h->prev != NULL) h->prev->next = h->next;
    else g_huge_head = h->next;
    if (h->next != NULL) h->next->prev = h->prev;
    h->prev = h->next = NULL;
  }
  pthread_mutex_unlock(&g_huge_lock);
  if (!was_freed) {
    munmap(h->addr, h->map_length);
    atomic_fetch_sub(&g_huge, 1);
    atomic_fetch_sub(&g_huge_bytes, (long long)h->map_length);
  }
}

static void huge_finalize(napi_env env, void *data, void *hint) {
  (void)data;
  st_huge *h = hint;
  huge_unmap(h);
  if (h->ref != NULL) napi_delete_reference(env, h->ref);
  free(h);
  atomic_fetch_sub(&g_huge_structs, 1);
}

void *st_huge_map(size_t length, size_t *map_length, int huge) {
  size_t rounded = (length + HUGE_PAGE_SIZE - 1) & ~(HUGE_PAGE_SIZE - 1);
  /* Over-allocate by one huge page, then trim. */
  size_t reserve = rounded + HUGE_PAGE_SIZE;
  uint8_t *raw = mmap(NULL, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  uintptr_t aligned = ((uintptr_t)raw + HUGE_PAGE_SIZE - 1) & ~(uintptr_t)(HUGE_PAGE_SIZE - 1);
  size_t head = aligned - (uintptr_t)raw;
  size_t tail = reserve - head - rounded;
  if (head > 0) munmap(raw, head);
  if (tail > 0) munmap((uint8_t *)aligned + rounded, tail);
#ifdef MADV_HUGEPAGE
  /* Best effort: with THP disabled this fails and the memory is simply made of small pages. */
  if (huge) (void)madvise((void *)aligned, rounded, MADV_HUGEPAGE);
#else
  (void)huge;
#endif
  *map_length = rounded;
  return (void *)aligned;
}

napi_value st_huge_buffer(napi_env env, void *addr, size_t map_length, size_t length) {
  st_huge *h = calloc(1, sizeof *h);
  if (h == NULL) {
    munmap(addr, map_length);
    st_throw_errno(env, ENOMEM, "allocHuge");
    return NULL;
  }
  h->addr = addr;
  h->map_length = map_length;
  h->env = env;
  atomic_fetch_add(&g_huge, 1);
  atomic_fetch_add(&g_huge_structs, 1);
  atomic_fetch_add(&g_huge_bytes, (long long)map_length);
  huge_link(h);

  napi_value result;
  if (napi_create_external_arraybuffer(env, addr, length, huge_finalize, h, &result) != napi_ok) {
    /* As in window(): the finalizer may still run, so unmap now (idempotent) but leave h to it. */
    huge_unmap(h);
    st_throw_code(env, ENOMEM, "cannot create an external ArrayBuffer for allocHuge");
    return NULL;
  }
  if (napi_create_reference(env, result, 0, &h->ref) != napi_ok) {
    /* The finalizer still runs and unmaps; freeHuge just will not recognise this buffer. */
    h->ref = NULL;
  }
  return result;
}

/* allocHuge(length): zeroed, writable, 2 MiB aligned, MADV_HUGEPAGE; length rounded up to 2 MiB internally. */
napi_value st_js_alloc_huge(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 1) {
    st_throw_code(env, EINVAL, "allocHuge(length) needs a length");
    return NULL;
  }
  uint64_t length = 0;
  if (st_get_index(env, argv[0], "allocHuge length", MAX_WINDOW_LENGTH, &length) != 0) return NULL;
  napi_value result;
  if (length == 0) {
    NAPI_CALL(env, napi_create_arraybuffer(env, 0, NULL, &result));
    return result;
  }
  size_t map_length = 0;
  void *addr = st_huge_map((size_t)length, &map_length, 1);
  if (addr == NULL) {
    st_throw_errno(env, errno, "mmap (allocHuge)");
    return NULL;
  }
  return st_huge_buffer(env, addr, map_length, (size_t)length);
}

/* freeHuge(buffer): munmap now and detach. A detached or empty buffer is a no-op. */
napi_value st_js_free_huge(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  bool is_arraybuffer = false;
  if (argc < 1 || napi_is_arraybuffer(env, argv[0], &is_arraybuffer) != napi_ok || !is_arraybuffer) {
    st_throw_code(env, EINVAL, "freeHuge(buffer) needs an ArrayBuffer returned by allocHuge");
    return NULL;
  }
  bool detached = false;
  NAPI_CALL(env, napi_is_detached_arraybuffer(env, argv[0], &detached));
  if (detached) return undefined_value(env);
  void *data = NULL;
  size_t length = 0;
  NAPI_CALL(env, napi_get_arraybuffer_info(env, argv[0], &data, &length));
  if (length == 0) return undefined_value(env);

  st_huge *found = NULL;
  pthread_mutex_lock(&g_huge_lock);
  for (st_huge *h = g_huge_head; h != NULL; h = h->next) {
    if (h->addr == data && h->env == env) {
      found = h;
      break;
    }
  }
  pthread_mutex_unlock(&g_huge_lock);
  bool same = false;
  if (found != NULL && found->ref != NULL) {
    napi_value mine = NULL;
    if (napi_get_reference_value(env, found->ref, &mine) == napi_ok && mine != NULL) {
      NAPI_CALL(env, napi_strict_equals(env, mine, argv[0], &same));
    }
  }
  if (!same) {
    st_throw_code(env, EINVAL, "freeHuge(buffer): this ArrayBuffer was not returned by allocHuge");
    return NULL;
  }
  if (st_detach(env, argv[0]) != 0) {
    st_throw_code(env, EBUSY, "freeHuge: the buffer cannot be detached; it stays allocated");
    return NULL;
  }
  huge_unmap(found);
  return undefined_value(env);
}

void st_huge_stats(double *allocations, double *buffers, double *bytes) {
  *allocations = (double)atomic_load(&g_huge);
  *buffers = (double)atomic_load(&g_huge_structs);
  *bytes = (double)atomic_load(&g_huge_bytes);
}
