/*
 * A SIGBUS raised while a thread reads a file mapping inside map_guarded() returns MAP_GUARD_FAULT from it instead of
 * ending the process. Why: reading a page of a mapping past the file's new end (another process truncated it) raises
 * SIGBUS, and its default action ends the process with no error a caller could catch; with pread the same truncation
 * is a short read. The merges map their inputs because it is cheaper than pread's copy (merge_file.c), and keep
 * pread's promise through this guard: a shrunken input is an error with a code.
 *
 * The handler is installed once per process, chained: a SIGBUS outside a guarded call goes to the handler that was
 * there before, or gets the default action back (the faulting access runs again and ends the process as it would
 * have). SA_NODEFER leaves SIGBUS unblocked in the handler, so the jump out of it needs no saved signal mask
 * (sigsetjmp(_, 0): no system call per guarded call).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>

#include "map_guard.h"

static __thread sigjmp_buf *volatile guard;
static struct sigaction previous;
static pthread_once_t installed = PTHREAD_ONCE_INIT;
static int install_error;

static void on_sigbus(int signal, siginfo_t *info, void *context) {
  sigjmp_buf *to = guard;
  if (to != NULL) {
    guard = NULL;
    siglongjmp(*to, 1);
  }
  if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != NULL) {
    previous.sa_sigaction(signal, info, context);
  } else if ((previous.sa_flags & SA_SIGINFO) == 0 && previous.sa_handler != SIG_DFL &&
             previous.sa_handler != SIG_IGN) {
    previous.sa_handler(signal);
  } else {
    struct sigaction fallback = {.sa_handler = SIG_DFL};
    sigemptyset(&fallback.sa_mask);
    sigaction(SIGBUS, &fallback, NULL);
  }
}

static void install(void) {
  struct sigaction action = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK};
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGBUS, &action, &previous) != 0) install_error = EINVAL;
}

int map_guard_ready(void) {
  pthread_once(&installed, install);
  return install_error;
}

int map_guarded(int (*run)(void *arg), void *arg) {
  sigjmp_buf here;
  sigjmp_buf *volatile outer = guard;
  if (sigsetjmp(here, 0) != 0) {
    guard = outer;
    return MAP_GUARD_FAULT;
  }
  guard = &here;
  int result = run(arg);
  guard = outer;
  return result;
}
