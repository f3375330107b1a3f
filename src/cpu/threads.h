/* threads.h - persistent worker pools. Prefix: tp_.
 *
 * A pool (tp_create) owns n_threads - 1 worker threads, started once and
 * reused for every parallel loop (no thread is created per token). Each CPU
 * backend instance - each dflash_model - owns its pool, so models have their
 * own thread counts and loading or freeing one never touches another's
 * threads. tp_for(p, n, fn, ctx) cuts [0, n) into contiguous chunks (a few
 * per thread; where depends only on n and the pool's thread count), the
 * caller and the workers take them in turn, each calling fn(ctx, start,
 * end), and it returns when all are done. Which thread runs a chunk depends
 * on timing, so fn's result for an item must not depend on its range.
 *
 * Concurrency: any thread may call tp_for on any pool at any time. A call
 * from inside a chunk (of any pool), or on a pool that another thread is
 * using at that moment, runs the whole range on the calling thread: the
 * same results, never a deadlock. tp_destroy must not overlap a tp_for on
 * the same pool (the owner destroys its pool after its last call). */
#ifndef DFL_THREADS_H
#define DFL_THREADS_H

typedef void (*tp_fn)(void *ctx, int start, int end);
typedef struct tp_pool tp_pool;

/* A pool of n_threads threads including the caller (n_threads <= 0: the
 * physical cores; capped at 1024). Fewer when the system refuses threads
 * (a warning on stderr). Never NULL. */
tp_pool *tp_create(int n_threads);
void tp_destroy(tp_pool *p); /* NULL is fine */
int tp_threads(const tp_pool *p); /* NULL: 1 */
/* p NULL: fn(ctx, 0, n) on the calling thread. */
void tp_for(tp_pool *p, int n, tp_fn fn, void *ctx);
/* Number of physical cores (falls back to logical CPUs). */
int tp_physical_cores(void);

#endif
