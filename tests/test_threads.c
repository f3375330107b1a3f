/* test_threads.c - the tp_ worker pools (threads.c): every index of a
 * range runs exactly once, the cut points depend only on n and the thread
 * count, nested calls (same pool or another) run inline, and pools are
 * independent: two pools driven by two threads at once, one pool shared by
 * two callers, pools created and destroyed again and again while another
 * pool is in the middle of its jobs (before the per-model pools, one
 * process-wide pool was restarted under a running job: a hang).
 * make tsan runs this under ThreadSanitizer. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "cpu/threads.h"
#include "util.h"

typedef struct {
    atomic_int *hits;        /* [n] times each index was visited, or NULL */
    atomic_llong sum;
    int nested;              /* call tp_for inside the chunk: on inner, or the same pool */
    tp_pool *self, *inner;
    atomic_llong nested_sum;
} pool_ctx;

static void nested_fn(void *ctx, int start, int end) {
    pool_ctx *c = ctx;
    for (int i = start; i < end; i++) atomic_fetch_add(&c->nested_sum, i);
}

static void sum_fn(void *ctx, int start, int end) {
    pool_ctx *c = ctx;
    long long s = 0;
    for (int i = start; i < end; i++) {
        s += i;
        if (c->hits) atomic_fetch_add(&c->hits[i], 1);
    }
    atomic_fetch_add(&c->sum, s);
    if (c->nested) tp_for(c->inner ? c->inner : c->self, 10, nested_fn, ctx);
}

/* Records the chunk boundaries seen for one call. */
static atomic_int starts_seen[64];
static void bounds_fn(void *ctx, int start, int end) {
    (void)ctx;
    (void)end;
    if (start < 64) atomic_fetch_add(&starts_seen[start], 1);
}

/* Number of chunks tp_for cuts n items into on nt threads. */
static int n_chunks(int n, int nt) {
    if (nt <= 1) return 1;
    int k = n < 4 * nt ? n : 4 * nt, chunk = (n + k - 1) / k;
    return (n + chunk - 1) / chunk;
}

TEST(one_pool) {
    CHECK(tp_physical_cores() >= 1, "%d", tp_physical_cores());
    CHECK(tp_threads(NULL) == 1, "no pool: %d", tp_threads(NULL));
    pool_ctx c;
    memset(&c, 0, sizeof c);
    tp_for(NULL, 100, sum_fn, &c); /* no pool: runs inline */
    CHECK(atomic_load(&c.sum) == 4950, "%lld", (long long)atomic_load(&c.sum));

    int sizes[] = {2, 3, 1, 0, 4};
    for (int si = 0; si < 5; si++) {
        tp_pool *p = tp_create(sizes[si]);
        int nt = tp_threads(p);
        CHECK(sizes[si] <= 0 ? nt == tp_physical_cores() : nt == sizes[si], "tp_create(%d) gave %d", sizes[si], nt);
        /* many small calls: every index visited exactly once each time */
        int n = 1000, calls = 3000;
        memset(&c, 0, sizeof c);
        c.hits = dfl_calloc((size_t)n, sizeof(atomic_int));
        long long want = 0;
        for (int k = 0; k < calls; k++) {
            int m = 1 + k % n;
            tp_for(p, m, sum_fn, &c);
            want += (long long)m * (m - 1) / 2;
        }
        CHECK(atomic_load(&c.sum) == want, "threads=%d: sum %lld want %lld", nt, (long long)atomic_load(&c.sum),
              want);
        int bad = 0;
        for (int i = 0; i < n; i++) bad += atomic_load(&c.hits[i]) != calls / n * (n - i); /* m > i in each cycle */
        CHECK(bad == 0, "threads=%d: %d indices visited the wrong number of times", nt, bad);
        free(c.hits);
        c.hits = NULL;

        /* the cut points depend on n and nt only: chunks of ceil(50 / min(50, 4 nt)) */
        for (int i = 0; i < 64; i++) atomic_store(&starts_seen[i], 0);
        for (int k = 0; k < 50; k++) tp_for(p, 50, bounds_fn, NULL);
        int ok = 1, step = nt > 1 ? (50 + 4 * nt - 1) / (4 * nt) : 50;
        for (int i = 0; i < 50; i++) ok &= atomic_load(&starts_seen[i]) == (i % step == 0 ? 50 : 0);
        CHECK(ok, "threads=%d: chunk starts are not the multiples of %d", nt, step);

        /* tp_for on the same pool from inside a chunk runs inline instead of deadlocking */
        memset(&c, 0, sizeof c);
        c.nested = 1;
        c.self = p;
        tp_for(p, 8, sum_fn, &c);
        CHECK(atomic_load(&c.sum) == 28, "%lld", (long long)atomic_load(&c.sum));
        CHECK(atomic_load(&c.nested_sum) == 45LL * n_chunks(8, nt), "nested sum %lld",
              (long long)atomic_load(&c.nested_sum));
        tp_destroy(p);
    }
    tp_destroy(NULL);

    /* sleep-then-wake path: workers block after their spin window */
    tp_pool *p = tp_create(2);
    memset(&c, 0, sizeof c);
    for (int k = 0; k < 3; k++) {
        struct timespec ts = {0, 3 * 1000 * 1000};
        nanosleep(&ts, NULL);
        tp_for(p, 100, sum_fn, &c);
    }
    CHECK(atomic_load(&c.sum) == 3 * 4950, "%lld", (long long)atomic_load(&c.sum));
    tp_destroy(p);
}

/* A chunk of one pool calling tp_for on another pool: inline, no deadlock
 * (also when the other pool's own chunks call back into the first). */
TEST(nested_across_pools) {
    tp_pool *a = tp_create(2), *b = tp_create(3);
    pool_ctx c;
    for (int k = 0; k < 200; k++) {
        memset(&c, 0, sizeof c);
        c.nested = 1;
        c.self = k % 2 ? a : b;
        c.inner = k % 2 ? b : a;
        tp_for(c.self, 40, sum_fn, &c);
        if (atomic_load(&c.sum) != 780 || atomic_load(&c.nested_sum) != 45LL * n_chunks(40, tp_threads(c.self))) {
            CHECK(0, "round %d: sum %lld, nested %lld", k, (long long)atomic_load(&c.sum),
                  (long long)atomic_load(&c.nested_sum));
            break;
        }
    }
    tp_destroy(a);
    tp_destroy(b);
}

typedef struct {
    tp_pool *p;
    int calls;
    atomic_int *go;      /* spin until set, so the callers overlap */
    long long got, want;
} caller_job;

static void *caller(void *arg) {
    caller_job *j = arg;
    while (j->go && !atomic_load(j->go)) {
    }
    pool_ctx c;
    memset(&c, 0, sizeof c);
    for (int k = 0; k < j->calls; k++) {
        int m = 1 + (k * 37) % 500;
        tp_for(j->p, m, sum_fn, &c);
        j->want += (long long)m * (m - 1) / 2;
    }
    j->got = atomic_load(&c.sum);
    return NULL;
}

/* Two threads, each with its own pool, at the same time; then two threads
 * sharing one pool (the one that finds it busy runs its range inline). */
TEST(two_callers) {
    for (int shared = 0; shared <= 1; shared++) {
        tp_pool *a = tp_create(2), *b = shared ? a : tp_create(3);
        atomic_int go = 0;
        caller_job ja = {a, 3000, &go, 0, 0}, jb = {b, 3000, &go, 0, 0};
        pthread_t ta, tb;
        int ok = pthread_create(&ta, NULL, caller, &ja) == 0 && pthread_create(&tb, NULL, caller, &jb) == 0;
        CHECK(ok, "pthread_create");
        if (!ok) return;
        atomic_store(&go, 1);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        CHECK(ja.got == ja.want && jb.got == jb.want, "%s: sums %lld/%lld, %lld/%lld",
              shared ? "one shared pool" : "two pools", ja.got, ja.want, jb.got, jb.want);
        if (!shared) tp_destroy(b);
        tp_destroy(a);
    }
}

typedef struct {
    int cycles;
    int bad;
} churn_job;

/* Create a pool (1..4 threads), use it, destroy it; again and again. */
static void *churn(void *arg) {
    churn_job *j = arg;
    for (int k = 0; k < j->cycles; k++) {
        tp_pool *p = tp_create(1 + k % 4);
        pool_ctx c;
        memset(&c, 0, sizeof c);
        for (int r = 0; r < 3; r++) tp_for(p, 64, sum_fn, &c);
        j->bad += atomic_load(&c.sum) != 3 * 2016;
        tp_destroy(p);
    }
    return NULL;
}

/* Pools start and stop on one thread while another pool runs job after job
 * on another thread: no job is disturbed, nothing hangs. */
TEST(create_destroy_while_another_pool_runs) {
    tp_pool *p = tp_create(2);
    atomic_int go = 1;
    caller_job busy = {p, 20000, &go, 0, 0};
    churn_job ch = {300, 0};
    pthread_t tb, tc;
    int ok = pthread_create(&tb, NULL, caller, &busy) == 0 && pthread_create(&tc, NULL, churn, &ch) == 0;
    CHECK(ok, "pthread_create");
    if (!ok) return;
    pthread_join(tc, NULL);
    pthread_join(tb, NULL);
    CHECK(ch.bad == 0, "%d of %d short-lived pools gave wrong sums", ch.bad, ch.cycles);
    CHECK(busy.got == busy.want, "the busy pool's sum %lld, want %lld", busy.got, busy.want);
    tp_destroy(p);
}

int main(void) {
    RUN(one_pool);
    RUN(nested_across_pools);
    RUN(two_callers);
    RUN(create_destroy_while_another_pool_runs);
    CHECK_DONE("test_threads");
}
