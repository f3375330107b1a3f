/* threads.c - the persistent worker pool behind tp_for. Prefix: tp_.
 *
 * One pool per process: n_threads - 1 worker threads plus the caller, which
 * does chunk 0 itself. A tp_for call publishes (fn, ctx, n) and bumps a
 * generation counter; workers spin on that counter for a short while
 * (TP_SPIN_NS) and then sleep on a condition variable, so back-to-back calls
 * (one per matmul, hundreds per token) cost a few microseconds while an idle
 * process burns no CPU. The caller waits for the workers the same way.
 *
 * [0, n) is cut into up to TP_CHUNKS_PER_THREAD chunks per thread, which
 * the threads claim in turn from an atomic counter, so a thread that starts
 * late (a busy or oversubscribed machine) leaves its share to the others
 * instead of holding the call up. Which thread runs a chunk, and where the
 * chunks are cut, must never change a result: every fn computes each item
 * the same way whatever range it is given (matmul tiles, attention jobs,
 * elementwise parts). Callers that need a coarser grain (matmul splits output
 * columns in tiles of 16) pass the number of tiles as n.
 *
 * tp_for from inside a chunk (or from a second application thread while the
 * pool is busy) does not deadlock: it runs the whole range on the calling
 * thread. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_SET */
#include "threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

/* A waiting thread spins with pause for TP_SPIN_NS, then keeps polling
 * with sched_yield (so an oversubscribed or busy machine still runs the
 * thread it waits for) until TP_YIELD_NS, then blocks. */
#define TP_SPIN_NS 20000.0
#define TP_YIELD_NS 200000.0
#define TP_CHUNKS_PER_THREAD 4

typedef struct {
    int n;                 /* threads including the caller; 0: no pool */
    pthread_t *tids;       /* [n-1] workers */
    pthread_mutex_t mu;    /* guards sleeping on go/done */
    pthread_cond_t go, done;
    atomic_uint gen;       /* bumped once per job (and at shutdown) */
    unsigned gen0;         /* gen when the workers were started */
    atomic_int pending;    /* workers still busy with the current job */
    int quit;              /* read after a gen bump */
    int caller_sleeping;   /* guarded by mu */
    pthread_mutex_t call;  /* held by the thread inside tp_for */
    /* the current job, written before the gen bump */
    tp_fn fn;
    void *ctx;
    int items, chunk, n_chunks; /* chunk c = [c*chunk, min(items, (c+1)*chunk)) */
    atomic_int next;            /* the next chunk to claim */
} tp_pool;

static tp_pool pool = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .go = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
    .call = PTHREAD_MUTEX_INITIALIZER,
};
static _Thread_local int tp_in_chunk; /* this thread is running a chunk */

static inline void tp_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Claim and run chunks until none is left. */
static void tp_run_chunks(void) {
    for (;;) {
        int c = atomic_fetch_add_explicit(&pool.next, 1, memory_order_relaxed);
        if (c >= pool.n_chunks) return;
        int start = c * pool.chunk, end = start + pool.chunk < pool.items ? start + pool.chunk : pool.items;
        pool.fn(pool.ctx, start, end);
    }
}

/* One step of a spin-wait that began at *t0 (0: not yet timed); i counts
 * the steps. Returns 0 once it is time to block. */
static int tp_spin(int i, double *t0) {
    if ((i & 63) == 63) {
        double t = dfl_now();
        if (*t0 == 0) *t0 = t;
        double ns = (t - *t0) * 1e9;
        if (ns > TP_YIELD_NS) return 0;
        if (ns > TP_SPIN_NS) {
            sched_yield();
            return 1;
        }
    }
    tp_relax();
    return 1;
}

/* Wait until pool.gen differs from seen; returns the new value. */
static unsigned tp_wait_gen(unsigned seen) {
    double t0 = 0;
    for (int i = 0;; i++) {
        unsigned g = atomic_load_explicit(&pool.gen, memory_order_acquire);
        if (g != seen) return g;
        if (!tp_spin(i, &t0)) break;
    }
    pthread_mutex_lock(&pool.mu);
    unsigned g;
    while ((g = atomic_load_explicit(&pool.gen, memory_order_acquire)) == seen)
        pthread_cond_wait(&pool.go, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
    return g;
}

static void *tp_worker(void *arg) {
    (void)arg;
    unsigned seen = pool.gen0; /* written before pthread_create */
    tp_in_chunk = 1;
    for (;;) {
        seen = tp_wait_gen(seen);
        if (pool.quit) break;
        tp_run_chunks();
        if (atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_acq_rel) == 1) {
            /* last one out: wake the caller if it stopped spinning */
            pthread_mutex_lock(&pool.mu);
            if (pool.caller_sleeping) pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.mu);
        }
    }
    return NULL;
}

/* Publish the job already stored in pool (or quit) to the workers. */
static void tp_kick(void) {
    pthread_mutex_lock(&pool.mu);
    atomic_fetch_add_explicit(&pool.gen, 1, memory_order_release);
    pthread_cond_broadcast(&pool.go);
    pthread_mutex_unlock(&pool.mu);
}

void tp_shutdown(void) {
    if (pool.n == 0) return;
    pool.quit = 1;
    tp_kick();
    for (int i = 0; i < pool.n - 1; i++) pthread_join(pool.tids[i], NULL);
    free(pool.tids);
    pool.tids = NULL;
    pool.n = 0;
    pool.quit = 0;
}

void tp_init(int n_threads) {
    tp_shutdown();
    if (n_threads <= 0) n_threads = tp_physical_cores();
    if (n_threads > 1024) n_threads = 1024;
    pool.tids = dfl_calloc((size_t)n_threads, sizeof(pthread_t));
    pool.gen0 = atomic_load(&pool.gen);
    pool.n = 1;
    for (int i = 1; i < n_threads; i++) {
        /* pool.n is read by workers only after a gen bump, which comes
         * after this loop (the pthread_create barrier orders the rest). */
        if (pthread_create(&pool.tids[i - 1], NULL, tp_worker, (void *)(intptr_t)i) != 0) {
            fprintf(stderr, "dflash: warning: could not start thread %d of %d; using %d\n",
                    i + 1, n_threads, i);
            break;
        }
        pool.n++;
    }
    if (pool.n == 1) { /* a pool of one is no pool */
        free(pool.tids);
        pool.tids = NULL;
        pool.n = 0;
    }
}

int tp_threads(void) { return pool.n > 0 ? pool.n : 1; }

void tp_for(int n, tp_fn fn, void *ctx) {
    if (n <= 0) return;
    if (pool.n <= 1 || n == 1 || tp_in_chunk || pthread_mutex_trylock(&pool.call) != 0) {
        fn(ctx, 0, n); /* no pool, nested, or the pool is busy: run inline */
        return;
    }
    pool.fn = fn;
    pool.ctx = ctx;
    pool.items = n;
    pool.n_chunks = n < pool.n * TP_CHUNKS_PER_THREAD ? n : pool.n * TP_CHUNKS_PER_THREAD;
    pool.chunk = (n + pool.n_chunks - 1) / pool.n_chunks;
    pool.n_chunks = (n + pool.chunk - 1) / pool.chunk;
    atomic_store_explicit(&pool.next, 0, memory_order_relaxed);
    atomic_store_explicit(&pool.pending, pool.n - 1, memory_order_relaxed);
    tp_kick(); /* the gen bump (release) publishes the job to the workers */

    tp_in_chunk = 1;
    tp_run_chunks();
    tp_in_chunk = 0;

    /* wait for the workers: spin, then sleep */
    double t0 = 0;
    for (int i = 0; atomic_load_explicit(&pool.pending, memory_order_acquire) != 0; i++) {
        if (!tp_spin(i, &t0)) {
            pthread_mutex_lock(&pool.mu);
            pool.caller_sleeping = 1;
            while (atomic_load_explicit(&pool.pending, memory_order_acquire) != 0)
                pthread_cond_wait(&pool.done, &pool.mu);
            pool.caller_sleeping = 0;
            pthread_mutex_unlock(&pool.mu);
            break;
        }
    }
    pthread_mutex_unlock(&pool.call);
}

/* Count distinct cores among the CPUs this process may run on: CPUs that
 * share a thread_siblings_list are hyperthreads of one core. */
int tp_physical_cores(void) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int fallback = online > 0 ? (int)online : 1;
    cpu_set_t set;
    int have_set = sched_getaffinity(0, sizeof set, &set) == 0;
    if (have_set && CPU_COUNT(&set) > 0) fallback = CPU_COUNT(&set);

    char (*lists)[128] = dfl_calloc(CPU_SETSIZE, sizeof *lists);
    int n_lists = 0, ok = 1;
    for (int cpu = 0; cpu < CPU_SETSIZE && ok; cpu++) {
        if (have_set && !CPU_ISSET(cpu, &set)) continue;
        char path[96], buf[128] = {0};
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu);
        FILE *f = fopen(path, "r");
        if (!f) {
            if (have_set) ok = 0; /* an allowed CPU without topology: give up */
            else if (cpu >= fallback) break;
            continue;
        }
        if (!fgets(buf, sizeof buf, f)) ok = 0;
        fclose(f);
        buf[strcspn(buf, "\n")] = 0;
        int dup = 0;
        for (int i = 0; i < n_lists && !dup; i++) dup = strcmp(lists[i], buf) == 0;
        if (!dup) strcpy(lists[n_lists++], buf);
    }
    free(lists);
    if (!ok || n_lists == 0) return fallback;
    return n_lists < fallback ? n_lists : fallback;
}
