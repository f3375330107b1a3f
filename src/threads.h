/* threads.h - a persistent worker pool. Prefix: tp_.
 *
 * One pool per process, created by tp_init() and reused for every parallel
 * loop (no thread is created per token). tp_for(n, fn, ctx) cuts [0, n)
 * into contiguous chunks (a few per thread; where depends only on n and the
 * thread count), the threads take them in turn, each calling fn(ctx, start,
 * end), and it returns when all are done. Which thread runs a chunk depends
 * on timing, so fn's result for an item must not depend on its range.
 * Calls must not nest. */
#ifndef DFL_THREADS_H
#define DFL_THREADS_H

typedef void (*tp_fn)(void *ctx, int start, int end);

/* n_threads <= 0: physical cores. Safe to call again to resize. */
void tp_init(int n_threads);
int tp_threads(void);
void tp_for(int n, tp_fn fn, void *ctx);
void tp_shutdown(void);
/* Number of physical cores (falls back to logical CPUs). */
int tp_physical_cores(void);

#endif
