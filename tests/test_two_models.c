/* test_two_models.c - several models in one process, used from several
 * threads (issue #12): each model's thread count is its own; two models
 * with different thread counts generate at the same time on two threads,
 * each giving the tokens it gives alone (and with one thread); a model is
 * loaded and freed again and again on one thread while another model
 * generates on a second thread.
 *
 * Before the per-model worker pools (threads.c) all models shared one
 * process-wide pool that dflash_load restarted: the first check failed
 * (the second load changed the first model's count) and the last one hung
 * (a worker told to quit in the middle of another thread's job). A hang is
 * reported by a watchdog (DFLASH_TEST_WATCHDOG seconds, default 900: far
 * above the test's run time, even under ThreadSanitizer) as a failure.
 *
 * Uses the shipped demo pair (models/demo); make tsan runs it under
 * ThreadSanitizer. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "dflash.h"

static char target[512], draft[512];
static const char *prompt_a = "Solve for x: 3x + 5 = 20.", *prompt_b = "Evaluate 44 * 9 - 30.";
enum { N_PREDICT = 40 };

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "  FAIL test_two_models: no progress before the watchdog (a deadlock?)\n"
                              "test_two_models: 0 passed, 1 failed\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
    _exit(1);
}

static dflash_model *load(int n_threads, int with_draft) {
    dflash_params p = dflash_default_params();
    p.n_threads = n_threads;
    p.backend = "cpu";
    dflash_model *m = dflash_load(target, with_draft ? draft : NULL, &p);
    if (!m) fprintf(stderr, "  load (%d threads): %s\n", n_threads, dflash_error());
    return m;
}

/* Greedy tokens for prompt, from a fresh sequence; DFlash when the model has
 * a draft. Returns n (N_PREDICT) or -1. */
static int gen(dflash_model *m, const char *prompt, int32_t *out) {
    char *chat;
    dflash_message msg = {"user", prompt};
    if (!(chat = dflash_chat_prompt(m, &msg, 1, 1, 0))) return -1;
    int32_t *ids = NULL, *got = NULL;
    size_t n = 0, n_got = 0;
    int rc = dflash_tokenize(m, chat, strlen(chat), &ids, &n);
    free(chat);
    if (rc != 0) return -1;
    dflash_gen g = dflash_default_gen();
    g.n_predict = N_PREDICT;
    g.ignore_eos = 1;
    dflash_reset(m);
    rc = dflash_generate(m, ids, n, &g, NULL, NULL, &got, &n_got, NULL);
    free(ids);
    if (rc != 0 || n_got != N_PREDICT) {
        fprintf(stderr, "  generate: rc %d, %zu tokens: %s\n", rc, n_got, rc ? dflash_error() : "");
        free(got);
        return -1;
    }
    memcpy(out, got, sizeof(int32_t) * N_PREDICT);
    free(got);
    return N_PREDICT;
}

TEST(thread_count_is_per_model) {
    dflash_model *a = load(2, 0), *b = a ? load(3, 0) : NULL;
    CHECK(a && b, "load failed");
    if (!a || !b) goto out;
    dflash_info ia, ib;
    dflash_get_info(a, &ia);
    dflash_get_info(b, &ib);
    CHECK(ia.n_threads == 2, "the first model (2 threads) reports %d after a second load with 3", ia.n_threads);
    CHECK(ib.n_threads == 3, "the second model reports %d threads, want 3", ib.n_threads);
    dflash_free(b);
    b = NULL;
    dflash_get_info(a, &ia);
    CHECK(ia.n_threads == 2, "the first model reports %d threads after freeing the second", ia.n_threads);
    int32_t x[N_PREDICT];
    CHECK(gen(a, prompt_a, x) == N_PREDICT, "generation after the other model was freed");
out:
    dflash_free(b);
    dflash_free(a);
}

typedef struct {
    dflash_model *m;
    const char *prompt;
    const int32_t *ref;
    int reps;            /* at least this many runs */
    atomic_int *stop;    /* then more until *stop (NULL: exactly reps) */
    int runs, bad, errors;
} gen_job;

static void *gen_thread(void *arg) {
    gen_job *j = arg;
    for (int r = 0; r < j->reps || (j->stop && !atomic_load(j->stop)); r++) {
        int32_t got[N_PREDICT];
        if (gen(j->m, j->prompt, got) != N_PREDICT) j->errors++;
        else if (memcmp(got, j->ref, sizeof got) != 0) j->bad++;
        j->runs++;
    }
    return NULL;
}

/* Two models (target + draft) with 2 and 3 threads, on two threads at once:
 * each gives its own single-threaded tokens. */
TEST(two_models_two_threads) {
    dflash_model *one = load(1, 1), *a = load(2, 1), *b = load(3, 1);
    CHECK(one && a && b, "load failed");
    if (!one || !a || !b) goto out;
    int32_t ref_a[N_PREDICT], ref_b[N_PREDICT], x[N_PREDICT];
    CHECK(gen(one, prompt_a, ref_a) == N_PREDICT && gen(one, prompt_b, ref_b) == N_PREDICT, "reference runs");
    CHECK(gen(a, prompt_a, x) == N_PREDICT && memcmp(x, ref_a, sizeof x) == 0, "2 threads alone differ from 1");
    CHECK(gen(b, prompt_b, x) == N_PREDICT && memcmp(x, ref_b, sizeof x) == 0, "3 threads alone differ from 1");
    gen_job ja = {a, prompt_a, ref_a, 3, NULL, 0, 0, 0}, jb = {b, prompt_b, ref_b, 3, NULL, 0, 0, 0};
    pthread_t ta, tb;
    CHECK(pthread_create(&ta, NULL, gen_thread, &ja) == 0, "pthread_create");
    CHECK(pthread_create(&tb, NULL, gen_thread, &jb) == 0, "pthread_create");
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK(ja.errors == 0 && jb.errors == 0, "errors: %d, %d", ja.errors, jb.errors);
    CHECK(ja.bad == 0, "model A (2 threads): %d of %d concurrent runs differ from its single-threaded run", ja.bad,
          ja.runs);
    CHECK(jb.bad == 0, "model B (3 threads): %d of %d concurrent runs differ from its single-threaded run", jb.bad,
          jb.runs);
out:
    dflash_free(one);
    dflash_free(a);
    dflash_free(b);
}

/* One thread generates with model A while this one loads, uses and frees
 * other models (other thread counts) several times. */
TEST(load_while_another_model_generates) {
    dflash_model *a = load(2, 1);
    CHECK(a != NULL, "load failed");
    if (!a) return;
    int32_t ref[N_PREDICT], ref_c[N_PREDICT], x[N_PREDICT];
    CHECK(gen(a, prompt_a, ref) == N_PREDICT, "reference run");
    dflash_model *c = load(1, 0);
    CHECK(c && gen(c, prompt_b, ref_c) == N_PREDICT, "reference run of the loaded model");
    dflash_free(c);
    atomic_int stop = 0;
    gen_job ja = {a, prompt_a, ref, 2, &stop, 0, 0, 0};
    pthread_t ta;
    CHECK(pthread_create(&ta, NULL, gen_thread, &ja) == 0, "pthread_create");
    int loads = 0, bad = 0;
    for (int i = 0; i < 6; i++) {
        dflash_model *m = load(i % 3 + 1, i % 2);
        if (!m) continue;
        loads++;
        bad += gen(m, prompt_b, x) != N_PREDICT || memcmp(x, ref_c, sizeof x) != 0;
        dflash_free(m);
    }
    atomic_store(&stop, 1);
    pthread_join(ta, NULL);
    CHECK(loads == 6, "%d of 6 loads", loads);
    CHECK(bad == 0, "%d of the loaded models' runs differ", bad);
    CHECK(ja.errors == 0 && ja.bad == 0, "model A: %d errors, %d of %d runs differ while others loaded", ja.errors,
          ja.bad, ja.runs);
    dflash_info in;
    dflash_get_info(a, &in);
    CHECK(in.n_threads == 2, "model A reports %d threads after the other loads, want 2", in.n_threads);
    dflash_free(a);
}

int main(void) {
    const char *r = getenv("DFLASH_ROOT");
    snprintf(target, sizeof target, "%s/models/demo/target", r ? r : ".");
    snprintf(draft, sizeof draft, "%s/models/demo/draft", r ? r : ".");
    const char *w = getenv("DFLASH_TEST_WATCHDOG");
    signal(SIGALRM, on_alarm);
    alarm(w && atoi(w) > 0 ? (unsigned)atoi(w) : 900);
    RUN(thread_count_is_per_model);
    RUN(two_models_two_threads);
    RUN(load_while_another_model_generates);
    CHECK_DONE("test_two_models");
}
