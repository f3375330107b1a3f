/* threads.c - the persistent worker pools behind tp_for. Prefix: tp_.
 *
 * A pool is n_threads - 1 worker threads plus the caller, which does chunks
 * itself. A tp_for call publishes (fn, ctx, n) and bumps the pool's
 * generation counter; workers spin on that counter for a short while
 * (TP_SPIN_NS) and then sleep on a condition variable, so back-to-back calls
 * (one per matmul, hundreds per token) cost a few microseconds while an idle
 * pool burns no CPU. The caller waits for the workers the same way.
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
 * Every pool is independent (nothing here is process-wide but the
 * thread-local "inside a chunk" flag), so models with their own pools run
 * side by side, and creating or destroying one never disturbs a job of
 * another. tp_for from inside a chunk (of any pool), or on a pool another
 * thread holds, does not deadlock: it runs the whole range on the calling
 * thread. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_SET */
#include "threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
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
#define TP_MAX_THREADS 1024

struct tp_pool {
    int n;                 /* threads including the caller (1: no workers) */
    pthread_t *tids;       /* [n-1] workers */
    pthread_mutex_t mu;    /* guards sleeping on go/done */
    pthread_cond_t go, done;
    atomic_uint gen;       /* bumped once per job (and at shutdown) */
    unsigned gen0;         /* gen when the workers were started */
    atomic_int pending;    /* workers still busy with the current job */
    int quit;              /* written before a gen bump, read after it */
    int caller_sleeping;   /* guarded by mu */
    pthread_mutex_t call;  /* held by the thread inside tp_for */
    /* the current job, written before the gen bump */
    tp_fn fn;
    void *ctx;
    int items, chunk, n_chunks; /* chunk c = [c*chunk, min(items, (c+1)*chunk)) */
    atomic_int next;            /* the next chunk to claim */
};

static _Thread_local int tp_in_chunk; /* this thread is running a chunk (of any pool) */

static inline void tp_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Claim and run chunks of p's current job until none is left. */
static void tp_run_chunks(tp_pool *p) {
    for (;;) {
        int c = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (c >= p->n_chunks) return;
        int start = c * p->chunk, end = start + p->chunk < p->items ? start + p->chunk : p->items;
        p->fn(p->ctx, start, end);
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

/* Wait until p->gen differs from seen; returns the new value. */
static unsigned tp_wait_gen(tp_pool *p, unsigned seen) {
    double t0 = 0;
    for (int i = 0;; i++) {
        unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen) return g;
        if (!tp_spin(i, &t0)) break;
    }
    pthread_mutex_lock(&p->mu);
    unsigned g;
    while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) pthread_cond_wait(&p->go, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *tp_worker(void *arg) {
    tp_pool *p = arg;
    unsigned seen = p->gen0; /* written before pthread_create */
    tp_in_chunk = 1;
    for (;;) {
        seen = tp_wait_gen(p, seen);
        if (p->quit) break;
        tp_run_chunks(p);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            /* last one out: wake the caller if it stopped spinning */
            pthread_mutex_lock(&p->mu);
            if (p->caller_sleeping) pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

/* Publish the job already stored in p (or quit) to its workers. */
static void tp_kick(tp_pool *p) {
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
}

tp_pool *tp_create(int n_threads) {
    if (n_threads <= 0) n_threads = tp_physical_cores();
    if (n_threads > TP_MAX_THREADS) n_threads = TP_MAX_THREADS;
    tp_pool *p = dfl_calloc(1, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->call, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->next, 0);
    p->gen0 = 0;
    p->n = 1;
    if (n_threads > 1) p->tids = dfl_calloc((size_t)n_threads - 1, sizeof(pthread_t));
    for (int i = 1; i < n_threads; i++) {
        /* p->n is read only by the owner; workers read the job after a gen
         * bump, which comes after this loop */
        if (pthread_create(&p->tids[i - 1], NULL, tp_worker, p) != 0) {
            fprintf(stderr, "dflash: warning: could not start thread %d of %d; using %d\n", i + 1, n_threads, i);
            break;
        }
        p->n++;
    }
    return p;
}

void tp_destroy(tp_pool *p) {
    if (!p) return;
    if (p->n > 1) {
        p->quit = 1;
        tp_kick(p);
        for (int i = 0; i < p->n - 1; i++) pthread_join(p->tids[i], NULL);
    }
    free(p->tids);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->call);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p);
}

int tp_threads(const tp_pool *p) { return p ? p->n : 1; }

void tp_for(tp_pool *p, int n, tp_fn fn, void *ctx) {
    if (n <= 0) return;
    if (!p || p->n <= 1 || n == 1 || tp_in_chunk || pthread_mutex_trylock(&p->call) != 0) {
        fn(ctx, 0, n); /* no pool, nested, or the pool is busy: run inline */
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->items = n;
    p->n_chunks = n < p->n * TP_CHUNKS_PER_THREAD ? n : p->n * TP_CHUNKS_PER_THREAD;
    p->chunk = (n + p->n_chunks - 1) / p->n_chunks;
    p->n_chunks = (n + p->chunk - 1) / p->chunk;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    tp_kick(p); /* the gen bump (release) publishes the job to the workers */

    tp_in_chunk = 1;
    tp_run_chunks(p);
    tp_in_chunk = 0;

    /* wait for the workers: spin, then sleep */
    double t0 = 0;
    for (int i = 0; atomic_load_explicit(&p->pending, memory_order_acquire) != 0; i++) {
        if (!tp_spin(i, &t0)) {
            pthread_mutex_lock(&p->mu);
            p->caller_sleeping = 1;
            while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0) pthread_cond_wait(&p->done, &p->mu);
            p->caller_sleeping = 0;
            pthread_mutex_unlock(&p->mu);
            break;
        }
    }
    pthread_mutex_unlock(&p->call);
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
