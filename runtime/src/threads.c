/*
 * threads.c — the worker threads of an emb_context (threads.h). POSIX threads natively; wasm
 * builds and EMB_NO_THREADS builds run every loop on the caller.
 */
#if !defined(__wasm__) && !defined(EMB_NO_THREADS)
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif

#include "threads.h"

#if defined(__wasm__) || defined(EMB_NO_THREADS)

emb_status emb_threads_init(emb_threads **out, int n_threads) {
    *out = NULL;
    return n_threads <= 1 ? EMB_STATUS_OK : EMB_STATUS_UNSUPPORTED;
}
void emb_threads_free(emb_threads *pool) { (void)pool; }
int emb_threads_size(const emb_threads *pool) {
    (void)pool;
    return 1;
}
void emb_threads_run(emb_threads *pool, size_t n_tasks, emb_task_fn fn, void *arg) {
    (void)pool;
    for (size_t t = 0; t < n_tasks; t++) fn(arg, t, 0);
}
void emb_threads_hold(emb_threads *pool, int on) { (void)pool, (void)on; }
int emb_cpu_count(void) { return 1; }

#else

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include "platform.h"

/* Busy-wait rounds before sleeping (or, while the pool is held, before yielding the core and
   waiting again): about 100 µs here, longer than the gap between two loops of one encode call
   on an idle machine, far shorter than a scheduler tick. */
#define EMB_SPIN_ROUNDS 4000

/*
 * One 64-bit word says which loop is running and hands out its tasks:
 *   bits 48..63 the loop's generation, 24..47 its number of tasks, 0..23 the next task.
 * A worker claims a task with one fetch_add, which returns the loop's size with the index: a
 * claim always belongs to the loop running at that moment, so a worker that wakes up late can
 * neither run a task of a loop that has ended nor read its fields (a loop cannot end while one of
 * its claimed tasks is unfinished). The caller returns when every task is done, without waiting
 * for workers that never got a core: on a busy machine a loop just runs on fewer threads.
 */
#define EMB_GEN_SHIFT 48
#define EMB_SIZE_SHIFT 24
#define EMB_INDEX_MASK ((1ull << 24) - 1)
#define EMB_MAX_TASKS (1ull << 23)

struct emb_threads {
    int size;                 /* workers, the caller included */
    pid_t pid;                /* the process that made the threads (a fork child has none) */
    pthread_t threads[EMB_MAX_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t wake;      /* a new loop, or stop */
    pthread_cond_t done_cv;   /* the last task of a loop finished */
    _Atomic uint64_t work;    /* generation | tasks | next task, see above */
    atomic_size_t done;       /* tasks of the current loop finished */
    atomic_int sleeping;      /* workers waiting on `wake` */
    atomic_int held;          /* emb_threads_hold: idle workers yield instead of sleeping */
    /* the held call's tasks: all of them, and those the caller ran; held calls left to run solo */
    size_t call_tasks, call_own;
    int solo, solo_calls;
    int stop;
    emb_task_fn fn;           /* the current loop, written before `work` is published */
    void *arg;
};

typedef struct worker_start {
    emb_threads *pool;
    int id;
} worker_start;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static uint64_t generation(uint64_t w) { return w >> EMB_GEN_SHIFT; }

/* Claims and runs tasks of the current loop until none is left; returns how many it ran. */
static size_t take_tasks(emb_threads *p, int id) {
    for (size_t ran = 0;; ran++) {
        uint64_t w = atomic_fetch_add_explicit(&p->work, 1, memory_order_acquire);
        size_t t = (size_t)(w & EMB_INDEX_MASK), n = (size_t)((w >> EMB_SIZE_SHIFT) & EMB_INDEX_MASK);
        if (t >= n) return ran;
        p->fn(p->arg, t, id);
        if (atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel) + 1 == n) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static void *worker_main(void *start) {
    emb_threads *p = ((worker_start *)start)->pool;
    int id = ((worker_start *)start)->id;
    emb_dealloc(start);
    uint64_t seen = generation(atomic_load_explicit(&p->work, memory_order_acquire));
    for (;;) {
        uint64_t gen = generation(atomic_load_explicit(&p->work, memory_order_acquire));
        for (int i = 0; gen == seen && i < EMB_SPIN_ROUNDS; i++) {
            cpu_relax();
            gen = generation(atomic_load_explicit(&p->work, memory_order_acquire));
        }
        if (gen == seen && atomic_load_explicit(&p->held, memory_order_relaxed)) {
            sched_yield();  /* the next loop of this call is near: stay awake, but let others run */
            continue;
        }
        if (gen == seen) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleeping, 1);
            /* seq_cst with the caller's store of `work` and load of `sleeping`: no lost wake-up */
            while ((gen = generation(atomic_load(&p->work))) == seen && !p->stop) {
                pthread_cond_wait(&p->wake, &p->mu);
            }
            atomic_fetch_sub(&p->sleeping, 1);
            int stop = p->stop;
            pthread_mutex_unlock(&p->mu);
            if (stop) return NULL;
        }
        seen = gen;
        (void)take_tasks(p, id);
    }
}

emb_status emb_threads_init(emb_threads **out, int n_threads) {
    *out = NULL;
    if (n_threads <= 1) return EMB_STATUS_OK;
    if (n_threads > EMB_MAX_THREADS) return EMB_STATUS_INVALID_ARGUMENT;
    emb_threads *p = emb_alloc(sizeof *p);
    if (!p) return EMB_STATUS_OUT_OF_MEMORY;
    emb_memset(p, 0, sizeof *p);
    p->pid = getpid();
    atomic_init(&p->work, (uint64_t)0);
    atomic_init(&p->done, (size_t)0);
    atomic_init(&p->sleeping, 0);
    atomic_init(&p->held, 0);
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        emb_dealloc(p);
        return EMB_STATUS_OUT_OF_MEMORY;
    }
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    p->size = 1;
    for (int i = 1; i < n_threads; i++) {
        worker_start *ws = emb_alloc(sizeof *ws);
        if (!ws) break;
        ws->pool = p;
        ws->id = i;
        if (pthread_create(&p->threads[i], NULL, worker_main, ws) != 0) {
            emb_dealloc(ws);
            break;
        }
        p->size++;
    }
    if (p->size != n_threads) {
        emb_threads_free(p);
        return EMB_STATUS_OUT_OF_MEMORY;
    }
    *out = p;
    return EMB_STATUS_OK;
}

void emb_threads_free(emb_threads *p) {
    if (!p) return;
    atomic_store(&p->held, 0);
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    if (p->pid == getpid()) {
        for (int i = 1; i < p->size; i++) pthread_join(p->threads[i], NULL);
    }
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done_cv);
    pthread_mutex_destroy(&p->mu);
    emb_dealloc(p);
}

int emb_threads_size(const emb_threads *p) { return p ? p->size : 1; }

/* A held call in which the other workers ran under 1/8 of the tasks had them without a core
   most of the time (a busy machine, or a CPU quota shared by the threads): their spinning only
   took time from the caller. The next EMB_SOLO_CALLS held calls then run every loop on the
   caller alone (the same results: a task's output never depends on who runs it), and the
   workers sleep; then the pool is tried again. EMB_SOLO_CALLS: threads.h. */

void emb_threads_hold(emb_threads *p, int on) {
    if (!p) return;
    if (on) {
        p->call_tasks = p->call_own = 0;
        p->solo = p->solo_calls > 0;
        if (p->solo) {
            p->solo_calls--;
            return;
        }
        atomic_store_explicit(&p->held, 1, memory_order_relaxed);
        return;
    }
    atomic_store_explicit(&p->held, 0, memory_order_relaxed);
    if (!p->solo && p->call_tasks >= 8 * (size_t)p->size && (p->call_tasks - p->call_own) * 8 < p->call_tasks) {
        p->solo_calls = EMB_SOLO_CALLS;
    }
    p->solo = 0;
}

void emb_threads_run(emb_threads *p, size_t n_tasks, emb_task_fn fn, void *arg) {
    /* one task, no pool, or a forked child whose pool threads do not exist: run here */
    if (!p || n_tasks <= 1 || n_tasks >= EMB_MAX_TASKS || p->pid != getpid() || p->solo) {
        for (size_t t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->done, (size_t)0, memory_order_relaxed);
    uint64_t gen = (generation(atomic_load_explicit(&p->work, memory_order_relaxed)) + 1) & 0xFFFF;
    atomic_store(&p->work, gen << EMB_GEN_SHIFT | (uint64_t)n_tasks << EMB_SIZE_SHIFT);
    if (atomic_load(&p->sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    p->call_own += take_tasks(p, 0);
    p->call_tasks += n_tasks;
    /* tasks other workers claimed may still run */
    for (int i = 0; atomic_load_explicit(&p->done, memory_order_acquire) != n_tasks && i < EMB_SPIN_ROUNDS; i++) {
        cpu_relax();
    }
    if (atomic_load_explicit(&p->done, memory_order_acquire) != n_tasks) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load_explicit(&p->done, memory_order_acquire) != n_tasks) pthread_cond_wait(&p->done_cv, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}

int emb_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

#endif
