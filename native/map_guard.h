/* Reads of file mappings that survive the file shrinking under them (map_guard.c). */
#ifndef SAFETENSORS_MAP_GUARD_H
#define SAFETENSORS_MAP_GUARD_H

/* 0 once the SIGBUS handler is in place (installed at the first call), EINVAL when it could not be: then map
 * nothing. */
int map_guard_ready(void);

/* What map_guarded returns after a SIGBUS (never an errno). */
#define MAP_GUARD_FAULT (-1)

/*
 * `run(arg)`'s result, or MAP_GUARD_FAULT when a SIGBUS was raised in this thread while it ran (a page of a file
 * mapping that the file no longer backs, or that could not be read). `run` must hold no lock and own no resource that
 * a jump out of it would leak between its reads of mappings (a SIGBUS comes only from those reads, never from inside
 * a system call it makes). Call map_guard_ready() first.
 */
int map_guarded(int (*run)(void *arg), void *arg);

#endif
