/*
 * threads.h — a small pool of worker threads that runs one parallel loop at a time.
 *
 * emb_threads_run(pool, n, fn, arg) calls fn(arg, task, worker) once for every task in 0 .. n-1 and
 * returns when all have finished. The calling thread is worker 0 and takes tasks too; the pool's
 * own threads are workers 1 .. size-1. Tasks are handed out in increasing order from a shared
 * counter, so which worker runs a task varies from run to run: a task must write only its own
 * outputs and use only its worker's scratch, and then the result never depends on the number of
 * threads or on their timing.
 *
 * Native builds use POSIX threads. Idle workers spin for about 100 µs (the encoder's loops follow
 * each other closely) and then sleep on a condition variable, so a pool costs nothing between
 * calls; while the pool is held (emb_threads_hold) they yield and wait again instead of sleeping.
 * The caller waits only for tasks that were taken, never for a worker that has not started yet
 * (threads.c). The solo rule: after a held call in which the other workers ran under 1/8 of its
 * tasks (they had no core most of the time), the next EMB_SOLO_CALLS held calls run every loop
 * on the caller alone, then the pool is tried again. wasm builds have no threads here: a NULL
 * pool (or a pool of size 1) runs the loop on the caller.
 */
#ifndef EMB_THREADS_H
#define EMB_THREADS_H

#include <stddef.h>

#include "edgembed.h"

#define EMB_MAX_THREADS 64

typedef struct emb_threads emb_threads;

typedef void (*emb_task_fn)(void *arg, size_t task, int worker);

/* A pool of n_threads workers, the caller included (n_threads - 1 new threads); 1 gives NULL. */
emb_status emb_threads_init(emb_threads **out, int n_threads);
void emb_threads_free(emb_threads *pool);
int emb_threads_size(const emb_threads *pool);  /* 1 for NULL */
void emb_threads_run(emb_threads *pool, size_t n_tasks, emb_task_fn fn, void *arg);
/* Between hold(pool, 1) and hold(pool, 0) (an encode call's many loops) idle workers do not go
   to sleep: past the spin they yield the core and wait again, so that a loop never needs a
   wake-up, which on a busy machine costs the caller ~100 µs a loop. NULL: nothing. */
void emb_threads_hold(emb_threads *pool, int on);
/* Held calls run on the caller alone after one where the other workers ran under 1/8 of the
   tasks (threads.c; tests/runtime/test_native.c checks the count). */
#define EMB_SOLO_CALLS 8

/* Online CPUs this process may run on (sched affinity where the OS tells it), at least 1. */
int emb_cpu_count(void);

#endif /* EMB_THREADS_H */
