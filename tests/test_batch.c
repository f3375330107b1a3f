/* test_batch.c - several sequences of one model (dflash_seq_new) and the
 * batched target forward and draft blocks under them (be_ops.forward_multi,
 * draft_block_multi, batch.h).
 *
 *   forward_multi_rows  the CPU backend's forward_multi over sequences with
 *                       prefills of different lengths (one longer than a
 *                       pass), then decode / verify batches of 1..16 rows:
 *                       every sequence's logits, taps and argmax are
 *                       bit-identical to the same forwards run alone
 *                       (predict_multi's ids and logits, mixed in one
 *                       pass, to argmax's and logits'); a tree
 *                       batch and a sequence given twice are refused with
 *                       nothing run
 *   forward_multi_families  the same (no refusals) on the tiny checkpoints
 *                       of the other layer kinds: gpt-oss and Gemma-4
 *                       sliding rings (wrapped), Gemma-4 kv / MoE, Qwen3-MoE,
 *                       Llama-3
 *   draft_multi_blocks  the CPU backend's draft_block_multi over 17 draft
 *                       states (6 with DFLASH_FAST) with contexts of
 *                       different lengths (rows pending and projected):
 *                       blocks of 8 and 16 rows (two passes of the draft),
 *                       some slots or all, ids < 32768, the whole
 *                       vocabulary or two ranked selections (gathered heads
 *                       shared by several blocks), extra ids, top-k: every
 *                       output bit-identical to draft_block alone, two
 *                       rounds; a bad block and a state given twice are
 *                       refused with nothing proposed
 *   seqs_concurrent     the model and four sequences generating at once on
 *                       five threads (greedy and sampled with a seed, DFlash
 *                       on and off, a ranked draft vocabulary (the gathered
 *                       draft head) chained and in a tree, logprobs, a
 *                       grammar, an auto tree whose tree batches run alone,
 *                       a generation stopped by its callback): each gives
 *                       the tokens (and log-probabilities) it gives alone,
 *                       and the steps were shared (the most sequences in
 *                       one step >= 2)
 *   cost_model          the scheduler's measured cost model (batch.h): step
 *                       times of a known line give back that line's costs
 *                       for a round of the batch under each plan (the
 *                       others' plans, argmax calls by their index, own
 *                       predict seconds), nothing before a measurement,
 *                       costs that never fall with rows; the per-step token
 *                       budget of a prefill chunk
 *   prefill_budget      a long prompt (300 rows; fast: 150) prefilled
 *                       while another sequence decodes: its chunks and the
 *                       decode rows share steps of at most the model's
 *                       step_tokens rows, and both replies are the ones
 *                       they get alone
 *   prefix_copy         dflash_copy_prefix: a prompt's prefix copied from a
 *                       donor sequence (idle, or prefilling on another
 *                       thread; the model's own sequence as either end)
 *                       gives the reply and log-probabilities of a fresh
 *                       sequence, greedy and sampled, with and without the
 *                       draft; nothing copied where dst holds as much; bad
 *                       sources refused
 *   prefix_copy_refused recurrent layers and sliding-window rings refuse
 *                       the copy, nothing changed; full-length sliding
 *                       caches copy exactly
 *   seq_errors          a sequence of a tokenizer-only model is refused; a
 *                       sequence's bad request fails with its own error while
 *                       the others generate
 *
 * Uses the shipped demo pair and tests/models' tiny checkpoints. DFLASH_FAST (and
 * the sanitizers' builds): fewer steps, two tiny checkpoints, one concurrent
 * round of 24 tokens. make tsan runs it under ThreadSanitizer, where the
 * forward_multi tests are skipped (one caller thread). */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "batch.h"
#include "check.h"
#include "demo_pair.h"
#include "multi_rows.h"

/* ---- the backend: forward_multi against forward (multi_rows.h) ----------- */

static mr_target mr_cpu(demo_target *t) {
    return (mr_target){.be = &be_cpu, .bi = t->bi, .tm = &t->tm, .V = t->V, .fast = fast};
}

/* Under ThreadSanitizer the forward_multi tests are skipped: one caller
 * thread (the worker pool is test_threads'), several minutes there; the
 * release and ASan runs keep them. */
#if defined(__SANITIZE_THREAD__)
enum { MULTI_ROWS = 0 };
#else
enum { MULTI_ROWS = 1 };
#endif

TEST(forward_multi_rows) {
    if (!MULTI_ROWS) return;
    demo_target t;
    if (target_open(&t) != 0) return;
    CHECK(be_cpu.forward_multi != NULL, "the CPU backend has no forward_multi");
    mr_target mt = mr_cpu(&t);
    if (be_cpu.forward_multi) multi_rows(&mt, "demo target", 1);
    target_close(&t);
}

/* The layer kinds forward_multi runs beside the demo's Qwen3: sliding
 * windows in rings (gpt-oss, Gemma-4: window 8, ring 72 rows, wrapped), attention
 * sinks and biases, MoE experts (Qwen3-MoE, Gemma-4's MoE block), Gemma-4's
 * per-layer inputs, wide heads and k = v, Llama-3's RoPE scaling. */
TEST(forward_multi_families) {
    static const char *const dirs[] = {"tests/models/tiny-gptoss",     "tests/models/tiny-gemma4",
                                       "tests/models/tiny-gemma4-kv",  "tests/models/tiny-gemma4-moe",
                                       "tests/models/tiny-qwen3moe",   "tests/models/tiny-llama3"};
    if (!MULTI_ROWS || !be_cpu.forward_multi) return;
    size_t nd = fast ? 2 : sizeof dirs / sizeof dirs[0]; /* DFLASH_FAST: the two with rings */
    for (size_t d = 0; d < nd; d++) {
        demo_target t = {0};
        if (mdl_load(&t.tm, rpath(dirs[d])) != 0) {
            CHECK(0, "mdl_load %s: %s (make unpack)", dirs[d], dfl_lasterr());
            continue;
        }
        be_options bo = {.n_threads = 0};
        t.bi = be_cpu.open(&bo);
        int ok = t.bi && be_cpu.prepare(t.bi, &t.tm) == 0;
        CHECK(ok, "%s: backend: %s", dirs[d], dfl_lasterr());
        t.V = t.tm.cfg.vocab;
        mr_target mt = mr_cpu(&t);
        if (ok) multi_rows(&mt, dirs[d], 0);
        if (ok) be_cpu.release(t.bi, &t.tm);
        if (t.bi) be_cpu.close(t.bi);
        mdl_free(&t.tm);
    }
}

/* ---- the backend: draft_block_multi against draft_block ------------------ */

enum { NDRAFT = 17, DRAFT_ROUNDS = 2 }; /* 17 blocks of 16 rows: two passes of the draft (256 rows each at most) */

/* One block's request and everything it returns. */
typedef struct {
    void *ds;
    int32_t tok[16], out[16], top_ids[16 * 8];
    float *logits, xl[16 * 2], top_logp[16 * 8];
} blk_out;

/* Block k of round r on states o[0..n): lengths, slots, vocabularies (ids
 * 0..32767, the whole vocabulary, or one of two ranked selections, shared
 * by several blocks: a gathered head they share), extra ids and top-k vary
 * from block to block. */
static be_draft_block blk_req(blk_out *o, int k, int r, const mdl_model *d, const int32_t *const *sel, int V) {
    static const int32_t extra[2] = {151645, 151643};
    int B = k == 3 ? 8 : 16, nv = k % 4 == 0 ? 32768 : k == 5 ? 0 : 1000 + 500 * (k % 2);
    const int32_t *ids = k % 4 == 0 || k == 5 ? NULL : sel[k % 2];
    o->tok[0] = (int32_t)((31u * (unsigned)(k + 1) + 977u * (unsigned)r) % 30000u);
    for (int i = 1; i < B; i++) o->tok[i] = d->cfg.mask_token_id;
    memset(o->out, 0xff, sizeof o->out);
    int ns = k % 3 == 1 ? B / 2 : 0;
    size_t rows = (size_t)(ns ? ns : B - 1), cols = nv ? (size_t)nv : (size_t)V;
    free(o->logits);
    o->logits = malloc(sizeof(float) * rows * cols);
    return (be_draft_block){.B = B, .tokens = o->tok, .n_slots = ns, .n_vocab = nv, .ids = ids,
                            .extra = k % 2 ? extra : NULL, .n_extra = k % 2 ? 2 : 0, .out = o->out,
                            .logits = o->logits, .extra_logits = o->xl, .top_k = k % 3 == 2 ? 8 : 0,
                            .top_ids = o->top_ids, .top_logp = o->top_logp};
}

static int blk_same(const blk_out *a, const blk_out *b, const be_draft_block *q, int V) {
    size_t ns = (size_t)(q->n_slots ? q->n_slots : q->B - 1), nv = q->n_vocab ? (size_t)q->n_vocab : (size_t)V;
    size_t K = (size_t)q->top_k, nx = (size_t)q->n_extra;
    return !memcmp(a->out, b->out, sizeof a->out) && !memcmp(a->logits, b->logits, sizeof(float) * ns * nv) &&
           !memcmp(a->xl, b->xl, sizeof(float) * ns * nx) &&
           !memcmp(a->top_ids, b->top_ids, sizeof(int32_t) * ns * K) &&
           !memcmp(a->top_logp, b->top_logp, sizeof(float) * ns * K);
}

/* NDRAFT draft states with contexts of different lengths (appended host
 * rows, then fed target taps left pending), their blocks alone and in one
 * draft_block_multi: every output bit-identical; then a bad block among
 * them and a state given twice are refused with nothing proposed. */
TEST(draft_multi_blocks) {
    if (!MULTI_ROWS) return;
    demo_target t;
    if (target_open(&t) != 0) return;
    mdl_model d;
    if (mdl_load(&d, rpath("models/demo/draft")) != 0 || be_cpu.prepare(t.bi, &d) != 0) {
        CHECK(0, "draft: %s", dfl_lasterr());
        target_close(&t);
        return;
    }
    CHECK(be_cpu.draft_block_multi != NULL, "the CPU backend has no draft_block_multi");
    const cfg_model *dc = &d.cfg;
    size_t F = (size_t)dc->n_taps * dc->hidden;
    int nd = fast ? 6 : NDRAFT;
    /* the taps the drafts are fed: a target forward of 8 rows */
    int32_t pre[8] = {9707, 11, 1879, 374, 264, 1273, 13, 576};
    be_batch tb = {.T = 8, .tokens = pre, .n_taps = dc->n_taps, .tap_layers = dc->tap_layers};
    CHECK(be_cpu.forward(t.seq, &tb) == 0, "target forward: %s", dfl_lasterr());
    int32_t *sel[2];
    for (int s = 0; s < 2; s++) { /* two ranked selections: ascending ids */
        sel[s] = malloc(sizeof(int32_t) * 1500);
        for (int i = 0; i < 1500; i++) sel[s][i] = (int32_t)(i * (s ? 13 : 7) + s);
    }
    float *feats = malloc(sizeof(float) * F * 128);
    for (size_t i = 0; i < F * 128; i++) feats[i] = (float)((int)((i * 2654435761u) >> 20 & 1023) - 512) / 256.0f;
    blk_out alone[NDRAFT] = {{0}}, multi[NDRAFT] = {{0}};
    void *sts[NDRAFT];
    for (int k = 0; k < nd; k++) {
        alone[k].ds = be_cpu.draft_create(t.bi, &d, &t.tm, 256);
        multi[k].ds = be_cpu.draft_create(t.bi, &d, &t.tm, 256);
        int n = 10 + (k * 17) % 50, fed = k % 4 ? 1 + k % 8 : 0; /* context rows, of them fed (pending) */
        for (int a = 0; a < 2; a++) {
            void *ds = a ? multi[k].ds : alone[k].ds;
            CHECK(be_cpu.draft_ctx_append(ds, feats + (size_t)k * F, n - fed) == 0 &&
                      (!fed || be_cpu.draft_feed(ds, t.seq, 0, fed) == 0),
                  "context of draft %d: %s", k, dfl_lasterr());
        }
        sts[k] = multi[k].ds;
    }
    for (int r = 0; r < DRAFT_ROUNDS; r++) {
        be_draft_block qa[NDRAFT], qm[NDRAFT];
        for (int k = 0; k < nd; k++) {
            qa[k] = blk_req(&alone[k], k, r, &d, (const int32_t *const *)sel, t.V);
            qm[k] = blk_req(&multi[k], k, r, &d, (const int32_t *const *)sel, t.V);
            CHECK(be_cpu.draft_block(alone[k].ds, &qa[k]) == 0, "round %d draft %d alone: %s", r, k, dfl_lasterr());
        }
        CHECK(be_cpu.draft_block_multi(sts, qm, nd) == 0, "round %d draft_block_multi: %s", r, dfl_lasterr());
        int bad = 0;
        for (int k = 0; k < nd; k++) {
            int same = blk_same(&alone[k], &multi[k], &qa[k], t.V);
            if (!same) fprintf(stderr, "  round %d block %d: batched differs from alone\n", r, k);
            bad += !same;
        }
        CHECK(bad == 0, "round %d: %d of %d draft blocks differ from the same block alone", r, bad, nd);
        for (int k = 0; k < nd; k++) /* the next round: one more fed row on some */
            for (int a = 0; a < 2 && k % 3 == 0; a++)
                be_cpu.draft_feed(a ? multi[k].ds : alone[k].ds, t.seq, 0, 1);
    }
    /* refusals: nothing proposed */
    be_draft_block q[2];
    q[0] = blk_req(&multi[0], 0, 0, &d, (const int32_t *const *)sel, t.V);
    q[1] = blk_req(&multi[1], 1, 0, &d, (const int32_t *const *)sel, t.V);
    q[1].B = 1;
    CHECK(be_cpu.draft_block_multi(sts, q, 2) != 0 && strstr(dfl_lasterr(), "block 1"), "a block of 1 row: %s",
          dfl_lasterr());
    q[1].B = 16;
    void *twice[2] = {sts[0], sts[0]};
    CHECK(be_cpu.draft_block_multi(twice, q, 2) != 0 && strstr(dfl_lasterr(), "twice"), "a state twice: %s",
          dfl_lasterr());
    CHECK(multi[0].out[0] == -1, "a refused draft_block_multi proposed %d", multi[0].out[0]);
    for (int k = 0; k < nd; k++) {
        be_cpu.draft_destroy(alone[k].ds);
        be_cpu.draft_destroy(multi[k].ds);
        free(alone[k].logits);
        free(multi[k].logits);
    }
    free(feats);
    free(sel[0]);
    free(sel[1]);
    be_cpu.release(t.bi, &d);
    mdl_free(&d);
    target_close(&t);
}

/* ---- sequences on threads ------------------------------------------------ */

enum { NJOBS = 5, N_PREDICT = 48, N_PREDICT_FAST = 24 };

typedef struct {
    dflash_model *m;  /* the model's own sequence (seq NULL) */
    dflash_seq *seq;
    int prompt;
    dflash_gen g;
    int stop_after;   /* > 0: the callback stops the generation after this many tokens */
    int n_cb;
    pthread_barrier_t *start;
    int32_t *out;
    size_t n;
    lp_log lps;
    int rc;
    char err[256];
} job;

static int job_on_token(void *ud, int32_t id, const char *text, size_t len) {
    job *j = ud;
    (void)id, (void)text, (void)len;
    return j->stop_after > 0 && ++j->n_cb >= j->stop_after;
}

static int job_on_lp(void *ud, const dflash_logprob *lp) { return on_lp(&((job *)ud)->lps, lp); }

static void job_run(job *j) {
    j->n_cb = 0;
    j->lps.n = 0;
    free(j->out);
    j->out = NULL;
    if (j->g.on_logprob) j->g.on_logprob = job_on_lp;
    j->rc = j->seq ? dflash_seq_generate(j->seq, prompt[j->prompt], prompt_len[j->prompt], &j->g, job_on_token, j,
                                         &j->out, &j->n, NULL)
                   : dflash_generate(j->m, prompt[j->prompt], prompt_len[j->prompt], &j->g, job_on_token, j, &j->out,
                                     &j->n, NULL);
    if (j->rc != 0) snprintf(j->err, sizeof j->err, "%s", dflash_error());
}

static void *job_thread(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->start);
    job_run(j);
    return NULL;
}

static const char *const texts[] = {"Solve for x: 3x + 5 = 20.", "Evaluate 44 * 9 - 30.",
                                    "Write a haiku about the sea.", "List three prime numbers."};

/* the jobs' settings: greedy DFlash drafting over the 2000 most frequent
 * ids (the gathered draft head, --draft-vocab freq:2000); greedy plain;
 * sampled DFlash with logprobs; sampled plain with a grammar; greedy DFlash
 * with an auto tree over every ranked id, stopped by its callback */
static void job_settings(job *j) {
    static char rank[600]; /* read by the jobs' threads: written once, before any */
    if (!rank[0]) snprintf(rank, sizeof rank, "%s/models/demo/target/vocab_rank.txt", root);
    for (int i = 0; i < NJOBS; i++) {
        dflash_gen g = dflash_default_gen();
        g.n_predict = fast ? N_PREDICT_FAST : N_PREDICT;
        g.ignore_eos = 1;
        j[i].prompt = i % n_prompts;
        j[i].stop_after = 0;
        if (i == 0) g.draft_vocab = 2000, g.draft_vocab_rank = rank;
        if (i == 1) g.use_draft = 0;
        if (i == 2) {
            g.temp = 0.8f, g.top_k = 40, g.seed = 1234;
            g.on_logprob = job_on_lp;
            g.top_logprobs = 3;
        }
        if (i == 3) {
            g.temp = 0.7f, g.seed = 99, g.use_draft = 0;
            g.grammar = "root ::= [a-z ]+ \".\"";
            g.ignore_eos = 0;
        }
        if (i == 4) {
            g.tree = -1;
            g.draft_vocab_rank = rank;
            j[i].stop_after = 9;
        }
        j[i].g = g;
    }
}

TEST(seqs_concurrent) {
    if (!demo) return;
    dflash_seq *seq[NJOBS] = {NULL};
    for (int i = 1; i < NJOBS; i++) {
        seq[i] = dflash_seq_new(demo);
        CHECK(seq[i] != NULL, "dflash_seq_new: %s", dflash_error());
        if (!seq[i]) goto out;
    }
    job ref[NJOBS] = {{0}}, got[NJOBS] = {{0}};
    job_settings(ref);
    job_settings(got);
    /* alone: each on the model's own sequence, fresh */
    for (int i = 0; i < NJOBS; i++) {
        ref[i].m = demo;
        dflash_reset(demo);
        job_run(&ref[i]);
        CHECK(ref[i].rc == 0 && ref[i].n > 0, "job %d alone: %s", i, ref[i].err);
    }
    CHECK(ref[4].n == 9, "the callback's stop after 9 tokens gave %zu", ref[4].n);
    dflash_batch_info b0, b1;
    dflash_batch_stats(demo, &b0);
    int rounds = fast ? 1 : 2;
    for (int r = 0; r < rounds; r++) { /* round 2: the sequences' prompt caches are warm */
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, NJOBS);
        pthread_t th[NJOBS];
        for (int i = 0; i < NJOBS; i++) {
            got[i].m = demo;
            got[i].seq = seq[i];
            got[i].start = &start;
            got[i].prompt = (i + r) % n_prompts; /* another prompt per round: the cache rule under batching */
            CHECK(pthread_create(&th[i], NULL, job_thread, &got[i]) == 0, "pthread_create");
        }
        for (int i = 0; i < NJOBS; i++) pthread_join(th[i], NULL);
        pthread_barrier_destroy(&start);
        for (int i = 0; i < NJOBS; i++) {
            static job tmp[NJOBS]; /* the same settings, alone on the model's own sequence */
            job alone = ref[i];    /* the same prompt: ref is that run */
            if (got[i].prompt != ref[i].prompt) {
                memset(tmp, 0, sizeof tmp);
                job_settings(tmp);
                alone = tmp[i];
                alone.m = demo;
                alone.prompt = got[i].prompt;
                dflash_reset(demo);
                job_run(&alone);
            }
            CHECK(got[i].rc == 0, "round %d job %d: %s", r, i, got[i].err);
            CHECK(alone.rc == 0 && got[i].n == alone.n && !memcmp(got[i].out, alone.out, sizeof(int32_t) * alone.n),
                  "round %d job %d (prompt %d): %zu tokens under load differ from the %zu alone", r, i, got[i].prompt,
                  got[i].n, alone.n);
            CHECK(same_lps(&got[i].lps, &alone.lps), "round %d job %d: logprobs differ from alone", r, i);
            if (alone.out != ref[i].out) free(alone.out);
        }
    }
    dflash_batch_stats(demo, &b1);
    CHECK(b1.active == 0, "%d generations still counted as running", b1.active);
    CHECK(b1.max_batch >= 2, "no step had two sequences (max %d; %ld steps)", b1.max_batch, b1.steps - b0.steps);
    /* the demo pair on the CPU batches every step of several sequences (a
     * tree batch runs alone, outside the shared pass) */
    CHECK(b1.unbatched_steps == b0.unbatched_steps, "%ld steps ran their sequences one by one (not batched)",
          b1.unbatched_steps - b0.unbatched_steps);
    /* every draft block of a sequence goes through the scheduler's draft steps */
    CHECK(b1.draft_steps > b0.draft_steps && b1.draft_seq_steps - b0.draft_seq_steps >= b1.draft_steps - b0.draft_steps,
          "draft steps %ld -> %ld (%ld blocks)", b0.draft_steps, b1.draft_steps, b1.draft_seq_steps - b0.draft_seq_steps);
    fprintf(stderr, "  %ld steps, mean batch %.2f sequences, most %d; %ld draft steps, mean %.2f blocks, most %d\n",
            b1.steps - b0.steps,
            b1.steps > b0.steps ? (double)(b1.seq_steps - b0.seq_steps) / (double)(b1.steps - b0.steps) : 0.0,
            b1.max_batch, b1.draft_steps - b0.draft_steps,
            b1.draft_steps > b0.draft_steps
                ? (double)(b1.draft_seq_steps - b0.draft_seq_steps) / (double)(b1.draft_steps - b0.draft_steps)
                : 0.0,
            b1.max_draft_batch);
    for (int i = 0; i < NJOBS; i++) {
        free(ref[i].out);
        free(got[i].out);
    }
out:
    for (int i = 0; i < NJOBS; i++) dflash_seq_free(seq[i]);
}

/* ---- the scheduler's cost model ------------------------------------------ */

/* the lines the steps follow below: seconds = fixed + per part + per row */
static double line(const double *c, double parts, double rows) { return parts > 0 ? c[0] + c[1] * parts + c[2] * rows : 0; }

/* an argmax step expected to have `parts` parts: its fixed cost as likely as the step */
static double aline(const double *c, double parts, double rows) {
    return parts > 0 ? (parts < 1 ? parts : 1) * c[0] + c[1] * parts + c[2] * rows : 0;
}

/* a plan of k drafts, `rows` rows per predict call (0: all), its tokens
 * and own seconds; the acceptance: reach[i] = 1/2^i */
static const double reach_half[SPEC_MAX_BLOCK + 1] = {1, 0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125,
                                                      0.00390625, 0.001953125, 0.0009765625, 0.00048828125,
                                                      0.000244140625, 0.0001220703125, 0.00006103515625,
                                                      0.000030517578125, 0.0000152587890625};
static spec_round plan_of(int k, int rows, double tokens, int shared, double own_s) {
    return (spec_round){.k = k, .rows = rows, .tokens = tokens, .shared = shared, .own_s = own_s};
}

static void plan_set(bat_sched *b, bat_member *me, spec_round r) { bat_plan(b, me, reach_half, &r); }

TEST(cost_model) {
    static const double F[3] = {1e-3, 5e-5, 2e-4}, A[3] = {2e-4, 1e-5, 4e-4}, D[3] = {0, 5e-4, 2e-4};
    bat_sched *b = bat_new(&be_cpu, 64);
    bat_member me, o[3];
    bat_enter(b, &me);
    CHECK(bat_prefill_rows(b, &me, 200) == 200, "alone: a chunk of %d rows", bat_prefill_rows(b, &me, 200));
    for (int i = 0; i < 3; i++) bat_enter(b, &o[i]);
    /* nobody planned: the whole budget */
    CHECK(bat_prefill_rows(b, &me, 200) == 64, "unplanned others: %d rows", bat_prefill_rows(b, &me, 200));
    /* mine: plain; k = 5 in calls of 4 rows (the second, of 2 rows, after 4 accepted: reach 1/16) */
    spec_round mine[2] = {plan_of(0, 0, 1, 1, 0), plan_of(5, 4, 3, 1, 0)};
    double cost[2], others = -1;
    CHECK(bat_round_costs(b, &me, reach_half, mine, 2, cost, &others) == -1,
          "costs predicted before any step was measured");
    /* the others: plain greedy; DFlash k = 3 greedy, all rows in one call;
     * DFlash k = 2 sampled (its predicts its own, 3 ms) */
    plan_set(b, &o[0], plan_of(0, 0, 1, 1, 0));
    plan_set(b, &o[1], plan_of(3, 0, 2.5, 1, 0));
    plan_set(b, &o[2], plan_of(2, 1, 2, 0, 3e-3));
    CHECK(bat_prefill_rows(b, &me, 200) == 64 - 8, "budget 64, others' rows 8: %d", bat_prefill_rows(b, &me, 200));
    CHECK(bat_prefill_rows(b, &me, 20) == 20, "budget 64, the rest of the prompt 20: %d", bat_prefill_rows(b, &me, 20));
    /* steps on the lines (several shapes each) */
    for (int parts = 1; parts <= 8; parts++)
        for (int rows = parts; rows <= 16 * parts; rows += 3 * parts) {
            bat_measure(b, BAT_FORWARD, parts, rows, line(F, parts, rows));
            bat_measure(b, BAT_ARGMAX, parts, rows, line(A, parts, rows));
            bat_measure(b, BAT_DRAFT, parts, rows, line(D, parts, rows));
        }
    CHECK(bat_round_costs(b, &me, reach_half, mine, 2, cost, &others) == 0, "no costs after the measurements");
    /* the others: 3 verify parts of 8 rows, 2 draft blocks of 5 slots, first
     * argmax calls of 2 sequences and 5 rows, 3 ms of their own, 5.5 tokens */
    double base = line(F, 3, 8) + line(D, 2, 5) + aline(A, 2, 5) + 3e-3;
    double want0 = base + line(F, 4, 9) - line(F, 3, 8) + aline(A, 3, 6) - aline(A, 2, 5);
    double want5 = base + line(F, 4, 14) - line(F, 3, 8) + line(D, 3, 10) - line(D, 2, 5) +
                   (aline(A, 3, 9) - aline(A, 2, 5)) + 0.0625 * aline(A, 1, 2);
    CHECK(others == 5.5, "others' tokens %g", others);
    CHECK(fabs(cost[0] - want0) < 1e-8 && fabs(cost[1] - want5) < 1e-8, "round costs %.6f / %.6f ms, want %.6f / %.6f",
          cost[0] * 1e3, cost[1] * 1e3, want0 * 1e3, want5 * 1e3);
    /* a sampled plan: its predicts are its own seconds, not argmax steps */
    spec_round own = plan_of(0, 0, 1, 0, 2e-3);
    CHECK(bat_round_costs(b, &me, reach_half, &own, 1, cost, &others) == 0 &&
              fabs(cost[0] - (base + line(F, 4, 9) - line(F, 3, 8) + 2e-3)) < 1e-8,
          "own predict seconds: %.6f ms", cost[0] * 1e3);
    /* wide plans of the others (64 rows): the budget's floor */
    plan_set(b, &o[0], plan_of(31, 0, 2, 1, 0));
    plan_set(b, &o[1], plan_of(15, 0, 2, 1, 0));
    plan_set(b, &o[2], plan_of(15, 1, 2, 0, 3e-3));
    CHECK(bat_prefill_rows(b, &me, 200) == BAT_MIN_PREFILL, "others' rows 64 of 64: %d", bat_prefill_rows(b, &me, 200));
    for (int i = 0; i < 3; i++) bat_leave(b, &o[i]);
    CHECK(bat_prefill_rows(b, &me, 200) == 200, "alone again: %d", bat_prefill_rows(b, &me, 200));
    /* steps slower with fewer rows (noise): the costs still never fall as rows grow */
    bat_measure(b, BAT_FORWARD, 1, 1, 9e-3);
    bat_measure(b, BAT_FORWARD, 1, 16, 1e-3);
    bat_measure(b, BAT_FORWARD, 1, 16, 1e-3);
    spec_round ks[16];
    double c16[16];
    for (int k = 0; k < 16; k++) ks[k] = plan_of(k, 0, 1, 1, 0);
    CHECK(bat_round_costs(b, &me, reach_half, ks, 16, c16, &others) == 0 && others == 0, "alone: others' tokens %g",
          others);
    for (int k = 1; k < 16; k++) CHECK(c16[k] >= c16[k - 1], "cost falls from %d to %d drafts", k - 1, k);
    bat_leave(b, &me);
    bat_free(b);
}

/* A sequence's callback after its second token (its first round planned):
 * waits until the other generation is inside the scheduler, so that one's
 * prefill runs beside this one's decoding (the steps then wait for both). */
typedef struct {
    dflash_model *m;
    int n_cb, waited;
} beside;

static int beside_cb(void *ud, int32_t id, const char *text, size_t len) {
    beside *w = ud;
    (void)id, (void)text, (void)len;
    if (__atomic_add_fetch(&w->n_cb, 1, __ATOMIC_ACQ_REL) != 2) return 0; /* the main thread reads n_cb too */
    for (int i = 0; i < 100000; i++) { /* 100 s at most */
        dflash_batch_info bi;
        dflash_batch_stats(w->m, &bi);
        if (bi.active >= 2) {
            w->waited = 1;
            return 0;
        }
        usleep(1000);
    }
    return 1;
}

typedef struct {
    dflash_seq *seq;
    const int32_t *prompt;
    size_t n_prompt;
    dflash_gen g;
    dflash_on_token cb;
    void *ud;
    int32_t *out;
    size_t n;
    int rc;
} seq_job;

static void *seq_job_thread(void *arg) {
    seq_job *j = arg;
    j->rc = dflash_seq_generate(j->seq, j->prompt, j->n_prompt, &j->g, j->cb, j->ud, &j->out, &j->n, NULL);
    return NULL;
}

TEST(prefill_budget) {
    if (!demo) return;
    dflash_params p = dflash_default_params();
    p.step_tokens = 32;
    dflash_model *m = dflash_load(rpath("models/demo/target"), rpath("models/demo/draft"), &p);
    CHECK(m != NULL, "load: %s", dflash_error());
    if (!m) return;
    /* b's prompt: 300 rows (fast: 150), 31 a step; a: plain, a row a step, and
     * more tokens than b's chunks, so it decodes through b's whole prefill
     * (each step waits for both) */
    int32_t longp[300];
    size_t n_long = fast ? 150 : 300;
    for (size_t i = 0; i < n_long; i++) longp[i] = prompt[i % n_prompts][i % prompt_len[i % n_prompts]];
    dflash_gen ga = dflash_default_gen(), gb = dflash_default_gen();
    ga.use_draft = 0, ga.ignore_eos = 1, ga.n_predict = fast ? 24 : 64;
    gb.n_predict = 16;                                                   /* DFlash auto */
    /* alone, on the first model */
    int32_t *ref_a = NULL, *ref_b = NULL;
    size_t na = 0, nb = 0;
    dflash_reset(demo);
    CHECK(dflash_generate(demo, prompt[0], prompt_len[0], &ga, NULL, NULL, &ref_a, &na, NULL) == 0, "alone a: %s",
          dflash_error());
    dflash_reset(demo);
    CHECK(dflash_generate(demo, longp, n_long, &gb, NULL, NULL, &ref_b, &nb, NULL) == 0, "alone b: %s", dflash_error());
    dflash_seq *sa = dflash_seq_new(m), *sb = dflash_seq_new(m);
    CHECK(sa && sb, "dflash_seq_new: %s", dflash_error());
    beside w = {.m = m};
    seq_job ja = {.seq = sa, .prompt = prompt[0], .n_prompt = prompt_len[0], .g = ga, .cb = beside_cb, .ud = &w};
    seq_job jb = {.seq = sb, .prompt = longp, .n_prompt = n_long, .g = gb};
    pthread_t th;
    if (sa && sb && pthread_create(&th, NULL, seq_job_thread, &ja) == 0) {
        /* a has planned its first round and waits in its callback for b */
        while (__atomic_load_n(&w.n_cb, __ATOMIC_ACQUIRE) < 2) usleep(1000);
        seq_job_thread(&jb);
        pthread_join(th, NULL);
        CHECK(w.waited && ja.rc == 0 && jb.rc == 0, "generations: %d %d (waited %d)", ja.rc, jb.rc, w.waited);
        CHECK(ja.n == na && !memcmp(ja.out, ref_a, sizeof(int32_t) * na), "the decoding reply differs from alone");
        CHECK(jb.n == nb && !memcmp(jb.out, ref_b, sizeof(int32_t) * nb), "the long prompt's reply differs from alone");
        dflash_batch_info bi;
        dflash_batch_stats(m, &bi);
        /* a's first prefill ran alone (its prompt < 32 rows); then b's
         * rows went 31 a step beside a's one (a plain round plans 1 row) */
        CHECK(bi.max_rows <= 32 && bi.max_batch == 2 && bi.unbatched_steps == 0,
              "the most rows in a step %d (budget 32), most sequences %d, %ld unbatched", bi.max_rows, bi.max_batch,
              bi.unbatched_steps);
    }
    free(ja.out);
    free(jb.out);
    free(ref_a);
    free(ref_b);
    dflash_seq_free(sa);
    dflash_seq_free(sb);
    dflash_free(m);
}

/* ---- prompt prefixes copied between sequences (dflash_copy_prefix) -------- */

/* One generation of ids[0..n) on s (NULL: m's own sequence), logprobs into
 * lps when g asks for them; 0 or -1 (error printed). */
static int gen_on(dflash_model *m, dflash_seq *s, const int32_t *ids, size_t n, const dflash_gen *g, int32_t **out,
                  size_t *no, lp_log *lps, dflash_stats *st) {
    free(*out);
    *out = NULL;
    lps->n = 0;
    int rc = s ? dflash_seq_generate(s, ids, n, g, NULL, lps, out, no, st)
               : dflash_generate(m, ids, n, g, NULL, lps, out, no, st);
    if (rc != 0) fprintf(stderr, "  generate: %s\n", dflash_error());
    return rc;
}

typedef struct {
    dflash_seq *s;
    const int32_t *ids;
    size_t n;
    dflash_gen g;
    int32_t *out;
    size_t no;
    lp_log lps;
    int rc;
} donor_job;

static void *donor_thread(void *arg) {
    donor_job *j = arg;
    j->rc = gen_on(NULL, j->s, j->ids, j->n, &j->g, &j->out, &j->no, &j->lps, NULL);
    return NULL;
}

/* Prompts a = shared + prompt[0] and b = shared + prompt[1] (shared: 200
 * tokens; fast: 120). For greedy and sampled (seeded, logprobs), with and
 * without the draft, and a donor that ran without it before a drafting
 * copy: a donor sequence generates a, its prefix is copied into another
 * sequence, which then generates b: the reply, the log-probabilities
 * bit for bit, equal b's on a fresh sequence, and the reused count is the
 * shared prefix (the draft's context where it was copied). Also into and
 * from the model's own sequence, nothing copied where dst already holds as
 * much, bad arguments refused, and a copy from a donor that is prefilling
 * on another thread. */
TEST(prefix_copy) {
    if (!demo) return;
    enum { SHARED = 200, SHARED_FAST = 120 };
    size_t ns = fast ? SHARED_FAST : SHARED, na = ns + prompt_len[0], nb = ns + prompt_len[1];
    int32_t *a = dfl_malloc(sizeof(int32_t) * na), *b = dfl_malloc(sizeof(int32_t) * nb);
    for (size_t i = 0; i < ns; i++) a[i] = b[i] = prompt[i % n_prompts][i % prompt_len[i % n_prompts]];
    memcpy(a + ns, prompt[0], sizeof(int32_t) * prompt_len[0]);
    memcpy(b + ns, prompt[1], sizeof(int32_t) * prompt_len[1]);
    size_t common = 0;
    while (common < na && common < nb && a[common] == b[common]) common++;
    dflash_seq *donor = dflash_seq_new(demo), *dst = dflash_seq_new(demo);
    CHECK(donor && dst, "dflash_seq_new: %s", dflash_error());
    int32_t *ref = NULL, *got = NULL, *tmp = NULL;
    size_t nref = 0, ngot = 0, ntmp = 0;
    static lp_log ref_lp, got_lp, tmp_lp;
    dflash_stats st;
    /* donor's drafting, dst's drafting, sampled */
    static const int var[][3] = {{1, 1, 0}, {0, 0, 0}, {1, 1, 1}, {0, 0, 1}, {0, 1, 0}};
    for (size_t v = 0; donor && dst && v < sizeof var / sizeof var[0]; v++) {
        dflash_gen gd = dflash_default_gen(), g;
        gd.n_predict = fast ? 16 : 32, gd.ignore_eos = 1;
        if (var[v][2]) gd.temp = 0.8f, gd.top_k = 40, gd.seed = 7 + (uint64_t)v, gd.on_logprob = on_lp, gd.top_logprobs = 3;
        g = gd;
        gd.use_draft = var[v][0];
        g.use_draft = var[v][1];
        dflash_reset(demo); /* the reference: b on a fresh sequence */
        CHECK(gen_on(demo, NULL, b, nb, &g, &ref, &nref, &ref_lp, NULL) == 0, "variant %zu: b alone", v);
        dflash_seq_reset(donor);
        dflash_seq_reset(dst);
        CHECK(gen_on(demo, donor, a, na, &gd, &tmp, &ntmp, &tmp_lp, NULL) == 0, "variant %zu: the donor", v);
        CHECK(dflash_seq_cached_prefix(donor, b, nb) == common && dflash_seq_cached_prefix(dst, b, nb) == 0,
              "variant %zu: cached prefixes %zu and %zu, want %zu and 0", v, dflash_seq_cached_prefix(donor, b, nb),
              dflash_seq_cached_prefix(dst, b, nb), common);
        int from = 7;
        int p = dflash_copy_prefix(demo, dst, &donor, 1, b, nb, &from);
        CHECK(p == (int)common && from == 0, "variant %zu: copied %d rows from %d: %s", v, p, from, dflash_error());
        CHECK(dflash_seq_cached_prefix(dst, b, nb) == common, "variant %zu: dst holds %zu", v,
              dflash_seq_cached_prefix(dst, b, nb));
        CHECK(gen_on(demo, dst, b, nb, &g, &got, &ngot, &got_lp, &st) == 0, "variant %zu: b after the copy", v);
        CHECK(ngot == nref && !memcmp(got, ref, sizeof(int32_t) * nref) && same_lps(&got_lp, &ref_lp),
              "variant %zu: the reply after the copy differs from a fresh sequence's (%zu / %zu tokens)", v, ngot, nref);
        /* the draft's context came along unless the donor ran without the draft */
        int want = var[v][1] && !var[v][0] ? 0 : (int)common;
        CHECK(st.n_reused == want, "variant %zu: %d prompt tokens reused, want %d", v, st.n_reused, want);
    }
    if (donor && dst) {
        dflash_gen g = dflash_default_gen();
        g.n_predict = 16, g.ignore_eos = 1, g.use_draft = 0; /* reused = copied (no draft context to match) */
        dflash_reset(demo);
        CHECK(gen_on(demo, NULL, b, nb, &g, &ref, &nref, &ref_lp, NULL) == 0, "b alone");
        /* dst holds all of b now: nothing longer to copy, from the model (NULL) or the donor */
        CHECK(gen_on(demo, dst, b, nb, &g, &got, &ngot, &got_lp, NULL) == 0, "b on dst");
        dflash_seq *srcs[2] = {NULL, donor};
        int from = 5;
        CHECK(dflash_copy_prefix(demo, dst, srcs, 2, b, nb, &from) == 0 && from == -1, "nothing to copy: from %d",
              from);
        /* into the model's own sequence, then from it */
        dflash_reset(demo);
        int p = dflash_copy_prefix(demo, NULL, &srcs[1], 1, b, nb, &from);
        CHECK(p == (int)common && from == 0, "into the model: %d rows from %d: %s", p, from, dflash_error());
        CHECK(gen_on(demo, NULL, b, nb, &g, &got, &ngot, &got_lp, &st) == 0 && ngot == nref &&
                  !memcmp(got, ref, sizeof(int32_t) * nref) && st.n_reused == (int)common,
              "the model after the copy: %zu tokens, %d reused", ngot, st.n_reused);
        dflash_seq_reset(dst);
        p = dflash_copy_prefix(demo, dst, srcs, 1, a, na, &from);
        CHECK(p == (int)common && from == 0, "from the model: %d rows from %d: %s", p, from, dflash_error());
        /* refused: a source that is the destination, another model's sequence */
        CHECK(dflash_copy_prefix(demo, dst, &dst, 1, b, nb, NULL) == -1 && strstr(dflash_error(), "destination"),
              "dst as its own source: %s", dflash_error());
        CHECK(dflash_copy_prefix(demo, NULL, srcs, 1, b, nb, NULL) == -1, "the model as its own source");
        CHECK(dflash_copy_prefix((dflash_model *)0, dst, srcs, 1, b, nb, NULL) == -1, "no model");
        /* a donor prefilling a on another thread meanwhile: whatever part
         * of it the copy finds, b's reply is the fresh one */
        dflash_seq_reset(donor);
        dflash_seq_reset(dst);
        donor_job dj = {.s = donor, .ids = a, .n = na, .g = g};
        pthread_t th;
        int copied = 0, tries = 0;
        if (pthread_create(&th, NULL, donor_thread, &dj) == 0) {
            while (copied == 0 && tries++ < 100000) {
                copied = dflash_copy_prefix(demo, dst, &donor, 1, b, nb, NULL);
                if (copied == 0) sched_yield();
            }
            pthread_join(th, NULL);
            CHECK(dj.rc == 0 && copied > 0 && copied <= (int)common, "the donor %d, copied %d rows", dj.rc, copied);
            CHECK(gen_on(demo, dst, b, nb, &g, &got, &ngot, &got_lp, &st) == 0 && ngot == nref &&
                      !memcmp(got, ref, sizeof(int32_t) * nref) && st.n_reused == copied,
                  "after a copy beside the donor's prefill: %zu tokens, %d reused of %d copied", ngot, st.n_reused,
                  copied);
            free(dj.out);
        }
    }
    free(ref);
    free(got);
    free(tmp);
    free(a);
    free(b);
    dflash_seq_free(donor);
    dflash_seq_free(dst);
}

/* Where copying cannot be exact it is refused and nothing changes: the
 * recurrent tiny-qwen35 and tiny-gptoss's sliding-window ring (window 8:
 * a ring of 72 rows at context 256); tiny-gptoss at context 64 keeps
 * full-length caches, and there the copy is made and exact. After a
 * refusal the destination generates what a fresh sequence does. */
TEST(prefix_copy_refused) {
    static const struct {
        const char *dir, *why;
        int n_ctx;
    } cases[] = {{"tests/models/tiny-qwen35", "recurrent", 256},
                 {"tests/models/tiny-gptoss", "ring", 256},
                 {"tests/models/tiny-gptoss", NULL, 64}};
    int32_t a[40], b[40];
    for (int i = 0; i < 40; i++) a[i] = b[i] = (int32_t)((i * 7919 + 13) % 16384);
    b[30] = 5, b[31] = 6; /* a common prefix of 30 */
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        dflash_params p = dflash_default_params();
        p.n_ctx = cases[k].n_ctx;
        dflash_model *m = dflash_load(rpath(cases[k].dir), NULL, &p);
        CHECK(m != NULL, "%s: %s", cases[k].dir, dflash_error());
        if (!m) continue;
        dflash_seq *s1 = dflash_seq_new(m), *s2 = dflash_seq_new(m);
        dflash_gen g = dflash_default_gen();
        g.n_predict = 8, g.ignore_eos = 1;
        int32_t *ref = NULL, *got = NULL;
        size_t nref = 0, ngot = 0;
        static lp_log lps;
        dflash_stats st;
        CHECK(s1 && s2 && gen_on(m, NULL, b, 40, &g, &ref, &nref, &lps, NULL) == 0 &&
                  gen_on(m, s1, a, 40, &g, &got, &ngot, &lps, NULL) == 0,
              "%s: generations", cases[k].dir);
        int rc = s1 && s2 ? dflash_copy_prefix(m, s2, &s1, 1, b, 40, NULL) : -2;
        if (cases[k].why)
            CHECK(rc == -1 && strstr(dflash_error(), "not supported") && strstr(dflash_error(), cases[k].why) &&
                      dflash_seq_cached_prefix(s2, b, 40) == 0,
                  "%s: copy gave %d (%s)", cases[k].dir, rc, dflash_error());
        else
            CHECK(rc == 30, "%s at context %d: copy gave %d (%s)", cases[k].dir, cases[k].n_ctx, rc, dflash_error());
        CHECK(s2 && gen_on(m, s2, b, 40, &g, &got, &ngot, &lps, &st) == 0 && ngot == nref &&
                  !memcmp(got, ref, sizeof(int32_t) * nref) && st.n_reused == (cases[k].why ? 0 : 30),
              "%s: the reply after the copy (%d reused) differs from a fresh one", cases[k].dir, st.n_reused);
        free(ref);
        free(got);
        dflash_seq_free(s1);
        dflash_seq_free(s2);
        dflash_free(m);
    }
}

/* ---- the KV budget (dflash_params.kv_budget_mib: the budget rule) -------- */

static void nap_ms(int ms) {
    struct timespec ts = {.tv_sec = 0, .tv_nsec = ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* A generation on its own thread; with hold, its first token waits (up
 * to 30 s each) until `hold` other generations of m are seen waiting for
 * their reservation, then cancels the one `victim` (its cancel flag) and
 * waits for that call to return. The lp_log comes first: on_lp reads ud as
 * one. */
typedef struct hold_job {
    lp_log lps;
    dflash_model *m;
    dflash_seq *s;
    const int32_t *ids;
    size_t n;
    dflash_gen g;
    int hold, first, done, saw_waiting, rc, cancel;
    struct hold_job *victim;
    char err[256];
    int32_t *out;
    size_t no;
} hold_job;

static int hold_on_token(void *ud, int32_t id, const char *text, size_t len) {
    (void)id, (void)text, (void)len;
    hold_job *j = ud;
    if (j->hold && !j->first) {
        __atomic_store_n(&j->first, 1, __ATOMIC_RELEASE);
        for (int i = 0; i < 30000 && !j->saw_waiting; i++) {
            dflash_kv_info kv;
            dflash_kv_stats(j->m, &kv);
            if (kv.waiting >= j->hold) j->saw_waiting = 1;
            else nap_ms(1);
        }
        if (j->victim) {
            __atomic_store_n(&j->victim->cancel, 1, __ATOMIC_RELEASE);
            for (int i = 0; i < 30000 && !__atomic_load_n(&j->victim->done, __ATOMIC_ACQUIRE); i++) nap_ms(1);
        }
    }
    return 0;
}

static void *hold_thread(void *arg) {
    hold_job *j = arg;
    j->g.cancel = &j->cancel;
    j->rc = dflash_seq_generate(j->s, j->ids, j->n, &j->g, hold_on_token, j, &j->out, &j->no, NULL);
    if (j->rc != 0) snprintf(j->err, sizeof j->err, "%s", dflash_error());
    __atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* A model with a budget of 16 pages (3 MiB: the demo target's page is 16
 * positions x 12 layers x 2 kv heads x 64 x K and V in f32 = 192 KiB) and two
 * sequences: each reply equals the same request on the unlimited model (bit
 * for bit, logprobs too); a second sequence's request evicts the idle first
 * one's cache (least recently used), whose next request then prefills in
 * full; a request whose reservation (prompt + n_predict + 64 positions)
 * passes the budget fails at once with an error naming it, taking no
 * page, after which a small request runs; reset and free give the pages
 * back; three requests whose reservations do not fit together: the
 * second waits for the first's end, with the replies unchanged, the third
 * is cancelled while it waits (dflash_gen.cancel) and leaves the line
 * having computed nothing; a negative budget is refused at load. */
TEST(kv_budget) {
    if (!demo) return;
    dflash_params pp = dflash_default_params();
    pp.n_ctx = 1024;
    pp.kv_budget_mib = -1;
    dflash_model *m = dflash_load(rpath("models/demo/target"), rpath("models/demo/draft"), &pp);
    CHECK(!m && strstr(dflash_error(), "kv_budget_mib -1"), "a negative budget: %s", m ? "loaded" : dflash_error());
    dflash_free(m);
    pp.kv_budget_mib = 3;
    m = dflash_load(rpath("models/demo/target"), rpath("models/demo/draft"), &pp);
    CHECK(m != NULL, "load with a budget: %s", dflash_error());
    if (!m) return;
    dflash_seq *s1 = dflash_seq_new(m), *s2 = dflash_seq_new(m);
    CHECK(s1 && s2, "dflash_seq_new: %s", dflash_error());
    enum { NP = 100, NLONG = 300 };
    int32_t a[NP], b[NP], big[NLONG];
    for (int i = 0; i < NP; i++) a[i] = prompt[0][i % prompt_len[0]], b[i] = prompt[1][i % prompt_len[1]];
    for (int i = 0; i < NLONG; i++) big[i] = prompt[2][i % prompt_len[2]];
    dflash_gen g = dflash_default_gen();
    g.n_predict = 24, g.ignore_eos = 1, g.temp = 0.8f, g.seed = 11, g.on_logprob = on_lp, g.top_logprobs = 2;
    int32_t *ref[2] = {NULL, NULL}, *got = NULL;
    size_t nref[2] = {0, 0}, ngot = 0;
    static lp_log ref_lp[2], got_lp;
    dflash_stats st;
    for (int k = 0; k < 2; k++) {
        dflash_reset(demo);
        CHECK(gen_on(demo, NULL, k ? b : a, NP, &g, &ref[k], &nref[k], &ref_lp[k], NULL) == 0, "reference %d", k);
    }
    dflash_kv_info kv;
    /* a on s1, b on s2 (evicts s1), a on s1 again (evicts s2) */
    static const int order[3][2] = {{0, 0}, {1, 1}, {0, 0}};
    for (int r = 0; s1 && s2 && r < 3; r++) {
        int k = order[r][0];
        dflash_seq *s = order[r][1] ? s2 : s1;
        CHECK(gen_on(m, s, k ? b : a, NP, &g, &got, &ngot, &got_lp, &st) == 0, "round %d", r);
        CHECK(ngot == nref[k] && !memcmp(got, ref[k], sizeof(int32_t) * ngot) && same_lps(&got_lp, &ref_lp[k]),
              "round %d: the reply differs from the unlimited model's", r);
        CHECK(st.n_reused == 0, "round %d: %d prompt rows reused (the cache should have been evicted)", r, st.n_reused);
        dflash_kv_stats(m, &kv);
        CHECK(kv.paged && kv.budget == (size_t)3 << 20 && kv.used > 0 && kv.used <= kv.budget && kv.peak <= kv.budget &&
                  kv.evictions == r,
              "round %d: used %zu, budget %zu, peak %zu, evictions %ld (want %d)", r, kv.used, kv.budget, kv.peak,
              kv.evictions, r);
        CHECK(dflash_seq_cached_prefix(r == 1 ? s1 : s2, a, NP) == 0, "round %d: the evicted cache still answers", r);
    }
    if (s1 && s2) {
        dflash_kv_stats(m, &kv);
        size_t held = kv.used;
        CHECK(dflash_kv_reserve(m, NLONG, g.n_predict) == (size_t)25 * (192 << 10),
              "dflash_kv_reserve(%d, %d) = %zu (want 25 pages: %d + %d + 64 positions)", NLONG, g.n_predict,
              dflash_kv_reserve(m, NLONG, g.n_predict), NLONG, g.n_predict);
        CHECK(gen_on(m, s2, big, NLONG, &g, &got, &ngot, &got_lp, NULL) != 0 &&
                  strstr(dflash_error(), "KV cache budget: this generation reserves 388 positions") &&
                  strstr(dflash_error(), "--kv-budget"),
              "a prompt past the budget: %s", dflash_error());
        dflash_kv_stats(m, &kv);
        CHECK(kv.used <= held && kv.waits == 0, "the refused generation took pages (%zu -> %zu) or waited (%ld)", held,
              kv.used, kv.waits);
        CHECK(gen_on(m, s2, b, NP, &g, &got, &ngot, &got_lp, &st) == 0 && ngot == nref[1] &&
                  !memcmp(got, ref[1], sizeof(int32_t) * ngot),
              "a request after the refusal: %s", dflash_error());
        dflash_kv_stats(m, &kv);
        size_t before = kv.used;
        dflash_seq_reset(s2);
        dflash_kv_stats(m, &kv);
        CHECK(kv.used < before, "reset gave back nothing (%zu -> %zu)", before, kv.used);
        /* three at once: each reserves 12 of the 16 pages, so the second
         * and the third wait until the first ends (the first holds its
         * first token until both are seen waiting, then cancels the third,
         * which leaves the line having computed nothing); the second then
         * evicts the first's cache; replies unchanged */
        long ev0 = kv.evictions;
        dflash_seq *s3 = dflash_seq_new(m);
        CHECK(s3 != NULL, "a third sequence: %s", dflash_error());
        hold_job jc = {.m = m, .s = s3, .ids = b, .n = NP, .g = g};
        hold_job ja = {.m = m, .s = s1, .ids = a, .n = NP, .g = g, .hold = 2, .victim = &jc};
        hold_job jb = {.m = m, .s = s2, .ids = b, .n = NP, .g = g};
        pthread_t ta, tb, tc;
        if (s3 && pthread_create(&ta, NULL, hold_thread, &ja) == 0) {
            while (!__atomic_load_n(&ja.first, __ATOMIC_ACQUIRE) && !__atomic_load_n(&ja.done, __ATOMIC_ACQUIRE))
                nap_ms(1);
            int bt = pthread_create(&tb, NULL, hold_thread, &jb) == 0;
            int ct = pthread_create(&tc, NULL, hold_thread, &jc) == 0;
            pthread_join(ta, NULL);
            if (bt) pthread_join(tb, NULL);
            if (ct) pthread_join(tc, NULL);
            CHECK(ja.rc == 0 && ja.no == nref[0] && !memcmp(ja.out, ref[0], sizeof(int32_t) * ja.no) &&
                      same_lps(&ja.lps, &ref_lp[0]),
                  "the first of three at once: rc %d (%s), the reply differs from the unlimited model's", ja.rc,
                  ja.err);
            CHECK(ja.saw_waiting, "the second and third generations were never seen waiting for their reservations");
            CHECK(bt && jb.rc == 0 && jb.no == nref[1] && !memcmp(jb.out, ref[1], sizeof(int32_t) * jb.no) &&
                      same_lps(&jb.lps, &ref_lp[1]),
                  "the second of three at once (it waited): rc %d (%s), the reply differs from the unlimited model's",
                  jb.rc, jb.err);
            CHECK(ct && jc.rc != 0 && strstr(jc.err, "cancelled while waiting for its KV cache reservation") &&
                      jc.no == 0 && dflash_seq_cached_prefix(s3, b, NP) == 0,
                  "the third, cancelled while it waited: rc %d, %zu tokens, error '%s'", jc.rc, jc.no, jc.err);
            dflash_kv_stats(m, &kv);
            CHECK(kv.waits == 2 && kv.waiting == 0 && kv.evictions == ev0 + 1 && kv.peak <= kv.budget,
                  "three at once: waits %ld (want 2), waiting %d, evictions %ld (want %ld), peak %zu of %zu",
                  kv.waits, kv.waiting, kv.evictions, ev0 + 1, kv.peak, kv.budget);
            free(ja.out);
            free(jb.out);
            free(jc.out);
        }
        dflash_seq_free(s3);
    }
    dflash_seq_free(s1);
    dflash_seq_free(s2);
    dflash_kv_stats(m, &kv);
    CHECK(kv.used == 0, "%zu bytes held after every sequence was freed", kv.used);
    for (int k = 0; k < 2; k++) free(ref[k]);
    free(got);
    dflash_free(m);
}

/* ---- the draft context's memory given back (cpu_backend.c: draft_give_back) */

/* A sequence whose draft context held 340 positions gets a prompt that
 * shares ~60 of them (its draft context drops to those: the memory past it
 * goes back to the system, reading as zeros when touched again): its reply
 * equals a fresh sequence's, and the first request's reply again equals
 * the first one (greedy, DFlash on, so the draft context is read). */
TEST(draft_give_back) {
    if (!demo) return;
    dflash_seq *s = dflash_seq_new(demo), *f = dflash_seq_new(demo);
    CHECK(s && f, "dflash_seq_new: %s", dflash_error());
    if (!s || !f) {
        dflash_seq_free(s);
        dflash_seq_free(f);
        return;
    }
    dflash_gen g = dflash_default_gen();
    g.n_predict = 320, g.ignore_eos = 1, g.draft_max = 7; /* fixed: the rounds depend on the drafts alone */
    const int32_t *a = prompt[0];
    size_t na = prompt_len[0];
    int32_t *r1 = NULL, *r2 = NULL, *r3 = NULL, *fb = NULL, *b = NULL;
    size_t n1 = 0, n2 = 0, n3 = 0, nf = 0, nb = 0;
    dflash_stats t1, t2, t3, tf;
    int ok = dflash_seq_generate(s, a, na, &g, NULL, NULL, &r1, &n1, &t1) == 0 && n1 >= 40;
    /* b: a and the first 40 tokens of its reply, then another prompt - the
     * cache keeps na + 40 positions and drops ~280 */
    if (ok) {
        b = malloc(sizeof(int32_t) * (na + 40 + prompt_len[1]));
        memcpy(b, a, sizeof(int32_t) * na);
        memcpy(b + na, r1, sizeof(int32_t) * 40);
        memcpy(b + na + 40, prompt[1], sizeof(int32_t) * prompt_len[1]);
        nb = na + 40 + prompt_len[1];
    }
    ok = ok && dflash_seq_generate(s, b, nb, &g, NULL, NULL, &r2, &n2, &t2) == 0 &&
         dflash_seq_generate(f, b, nb, &g, NULL, NULL, &fb, &nf, &tf) == 0 &&
         dflash_seq_generate(s, a, na, &g, NULL, NULL, &r3, &n3, &t3) == 0;
    CHECK(ok, "generate: %s", dflash_error());
    CHECK(ok && t2.n_reused >= (int)na + 32 && t2.n_reused <= (int)na + 40,
          "the second request reused %d prompt rows (want about %zu)", ok ? t2.n_reused : -1, na + 40);
    CHECK(ok && n2 == nf && !memcmp(r2, fb, sizeof(int32_t) * n2),
          "after the context was cut back, a reply differs from a fresh sequence's");
    CHECK(ok && n3 == n1 && !memcmp(r3, r1, sizeof(int32_t) * n1),
          "the first request again: its reply differs from the first time");
    /* the output is greedy's whatever the draft proposes: the draft's
     * context is checked by its proposals' fate, round for round */
    CHECK(ok && t2.rounds == tf.rounds && t2.n_accepted == tf.n_accepted && t2.rounds > 0,
          "after the cut the drafts differ from a fresh sequence's: %d rounds / %d accepted vs %d / %d", t2.rounds,
          t2.n_accepted, tf.rounds, tf.n_accepted);
    CHECK(ok && t3.rounds == t1.rounds && t3.n_accepted == t1.n_accepted,
          "the first request again: %d rounds / %d accepted vs %d / %d the first time", t3.rounds, t3.n_accepted,
          t1.rounds, t1.n_accepted);
    free(r1), free(r2), free(r3), free(fb), free(b);
    dflash_seq_free(s);
    dflash_seq_free(f);
}

TEST(seq_errors) {
    dflash_model *tk = dflash_load_tokenizer(rpath("models/demo/target"));
    CHECK(tk != NULL, "load_tokenizer: %s", dflash_error());
    CHECK(tk && !dflash_seq_new(tk) && strstr(dflash_error(), "tokenizer only"), "a tokenizer-only model's sequence: %s",
          dflash_error());
    dflash_free(tk);
    if (!demo) return;
    dflash_seq *s = dflash_seq_new(demo);
    CHECK(s != NULL, "dflash_seq_new: %s", dflash_error());
    if (!s) return;
    int32_t bad = 1 << 30;
    dflash_gen g = dflash_default_gen();
    CHECK(dflash_seq_generate(s, &bad, 1, &g, NULL, NULL, NULL, NULL, NULL) != 0 &&
              strstr(dflash_error(), "outside the model's vocabulary"),
          "a bad token: %s", dflash_error());
    g.n_predict = 8;
    int32_t *out = NULL;
    size_t n = 0;
    CHECK(dflash_seq_generate(s, prompt[0], prompt_len[0], &g, NULL, NULL, &out, &n, NULL) == 0 && n == 8,
          "after the refusal: %s", dflash_error());
    free(out);
    dflash_seq_free(s);
}

int main(void) {
    (void)target_logits, (void)refused, (void)dflash_runs; /* demo_pair.h's, used by the other tests */
    demo_begin();
#if defined(__SANITIZE_THREAD__)
    fast = 1; /* one concurrent round: ThreadSanitizer is many times slower */
#endif
    if (demo) make_prompts(demo, texts, 4, 4);
    RUN(forward_multi_rows);
    RUN(forward_multi_families);
    RUN(draft_multi_blocks);
    RUN(seqs_concurrent);
    RUN(cost_model);
    RUN(prefill_budget);
    RUN(prefix_copy);
    RUN(prefix_copy_refused);
    RUN(kv_budget);
    RUN(draft_give_back);
    RUN(seq_errors);
    demo_end();
    CHECK_DONE("test_batch");
}
