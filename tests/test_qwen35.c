/* test_qwen35.c - state that a rollback cannot just forget by moving a
 * length: Qwen3.5's recurrent layers (backend.h, deltanet.h) on the
 * committed tiny-qwen35, tiny-qwen35moe and tiny-qwen3next, and the
 * sliding-window rings (cpu_backend.c's ring rule) of gpt-oss (tiny-gptoss)
 * and Gemma-4 (tiny-gemma4: five sliding layers and a full one with a wider
 * head, per-layer inputs; tiny-gemma4-kv: two full layers with
 * attention_k_eq_v)
 * (tests/models; their HF references are checked in test_reference.c).
 *
 * Every check here is bit for bit against plain decoding, one token per
 * forward: verify widths, every rollback point of every verify width, a
 * forward longer than the snapshot window, a rollback past it (the
 * sequence restarts), and through the public API a repeated prompt and a
 * second chat-like turn (prompt-prefix reuse on a recurrent model). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "cpu/deltanet.h"
#include "dflash.h"
#include "model.h"
#include "quant.h"
#include "synth.h"
#include "util.h"

static const char *root = ".";
static void *bi;

static char *rp(const char *a) { /* a path under the repository (absolute ones as they are) */
    static char buf[2][600];
    static int k;
    k = (k + 1) % 2;
    if (a[0] == '/') snprintf(buf[k], sizeof buf[k], "%s", a);
    else snprintf(buf[k], sizeof buf[k], "%s/%s", root, a);
    return buf[k];
}

enum { N = 140, NCTX = 256 };
static mdl_model m;
static int V, H, L;
static int32_t tok[N];
static float *ref_l, *ref_t; /* [N][V], [N][L][H]: one token per forward */
static int taps[32];

/* Forward T tokens; logits of all T rows to lg, taps of all layers to tp. */
static int fwd(void *st, const int32_t *t, int T, float *lg, float *tp) {
    be_batch b = {.T = T, .tokens = t, .n_logits = lg ? T : 0, .logits = lg, .n_taps = tp ? L : 0, .tap_layers = taps};
    if (be_cpu.forward(st, &b) != 0) return -1;
    return tp ? be_cpu.taps(st, 0, T, tp) : 0;
}

/* rows p..p+T-1 of (lg, tp) equal the reference rows */
static int same_rows(const float *lg, const float *tp, int p, int T) {
    return !memcmp(lg, ref_l + (size_t)p * V, sizeof(float) * (size_t)T * V) &&
           (!tp || !memcmp(tp, ref_t + (size_t)p * L * H, sizeof(float) * (size_t)T * L * H));
}

static const char *model_dir = "tests/models/tiny-qwen35";

static int setup(void) {
    if (mdl_load(&m, rp(model_dir)) != 0) {
        CHECK(0, "load: %s", dfl_lasterr());
        return -1;
    }
    V = m.cfg.vocab, H = m.cfg.hidden, L = m.cfg.n_layers;
    for (int l = 0; l < L; l++) taps[l] = l;
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 7919 + 101) % V);
    ref_l = malloc(sizeof(float) * N * (size_t)V);
    ref_t = malloc(sizeof(float) * N * (size_t)L * H);
    void *st = be_cpu.create(bi, &m, NCTX);
    int rc = 0;
    for (int i = 0; i < N && rc == 0; i++) rc = fwd(st, tok + i, 1, ref_l + (size_t)i * V, ref_t + (size_t)i * L * H);
    CHECK(rc == 0, "decode: %s", dfl_lasterr());
    int finite = 1;
    for (size_t i = 0; i < (size_t)N * V; i++) finite &= isfinite(ref_l[i]) != 0;
    CHECK(finite, "non-finite logits");
    be_cpu.destroy(st);
    return rc;
}

/* Prefill widths 2..64 (the chunking at 32 rows included) from empty. */
TEST(widths_equal_decode) {
    float *lg = malloc(sizeof(float) * 64 * (size_t)V), *tp = malloc(sizeof(float) * 64 * (size_t)L * H);
    int bad = 0;
    for (int T = 2; T <= 64; T += (T < 20 ? 1 : 11)) {
        void *st = be_cpu.create(bi, &m, NCTX);
        /* a few single rows, then T at once, then T at once again */
        int ok = fwd(st, tok, 3, lg, tp) == 0 && same_rows(lg, tp, 0, 3);
        ok = ok && fwd(st, tok + 3, T, lg, tp) == 0 && same_rows(lg, tp, 3, T);
        ok = ok && fwd(st, tok + 3 + T, T, lg, tp) == 0 && same_rows(lg, tp, 3 + T, T);
        if (!ok) {
            fprintf(stderr, "  width %d differs from decode\n", T);
            bad++;
        }
        be_cpu.destroy(st);
    }
    CHECK(bad == 0, "%d verify widths differ from decode rows", bad);
    free(lg);
    free(tp);
}

/* A DFlash round: verify [accepted prefix, rejected junk] of width T at
 * position P, keep `keep` rows, decode on: every (T, keep) gives decode's
 * bits afterwards, and truncate returns the length asked. */
TEST(rollback_every_point) {
    enum { P = 9, AFTER = 6 };
    float *lg = malloc(sizeof(float) * 64 * (size_t)V), *tp = malloc(sizeof(float) * 64 * (size_t)L * H);
    int bad = 0, combos = 0;
    int Ts[] = {1, 2, 3, 5, 8, 16, 17, 33, 64};
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
        int T = Ts[ti];
        for (int keep = 0; keep <= T; keep++) {
            if (T > 17 && keep % 7 && keep != T && keep != 1) continue;
            void *st = be_cpu.create(bi, &m, NCTX);
            int32_t v[64];
            for (int i = 0; i < T; i++) v[i] = i < keep ? tok[P + i] : (int32_t)((tok[P + i] + 1 + 17 * i) % V);
            int ok = fwd(st, tok, P, NULL, NULL) == 0 && fwd(st, v, T, lg, NULL) == 0;
            ok = ok && same_rows(lg, NULL, P, keep); /* accepted rows: decode's bits */
            ok = ok && be_cpu.truncate(st, P + keep) == P + keep && be_cpu.length(st) == P + keep;
            ok = ok && fwd(st, tok + P + keep, AFTER, lg, tp) == 0 && same_rows(lg, tp, P + keep, AFTER);
            /* a second rollback inside the same kept rows, then on */
            ok = ok && be_cpu.truncate(st, P + keep + 2) == P + keep + 2;
            ok = ok && fwd(st, tok + P + keep + 2, 1, lg, tp) == 0 && same_rows(lg, tp, P + keep + 2, 1);
            if (!ok) {
                fprintf(stderr, "  T %d keep %d: state after rollback differs from plain decoding\n", T, keep);
                bad++;
            }
            combos++;
            be_cpu.destroy(st);
        }
    }
    fprintf(stderr, "  %d (width, keep) rollbacks checked\n", combos);
    CHECK(bad == 0, "%d of %d rollbacks are not exact", bad, combos);
    free(lg);
    free(tp);
}

/* A forward of more than DN_KEEP rows keeps its last DN_KEEP; a rollback
 * before them restarts the sequence (truncate returns 0), and running the
 * rows again gives decode's bits. */
TEST(long_forward_and_restart) {
    enum { T = 100 };
    float *lg = malloc(sizeof(float) * T * (size_t)V);
    void *st = be_cpu.create(bi, &m, NCTX);
    CHECK(fwd(st, tok, T, lg, NULL) == 0 && same_rows(lg, NULL, 0, T), "100-row prefill differs from decode");
    int m1 = T - DN_KEEP + 5;
    CHECK(be_cpu.truncate(st, m1) == m1, "rollback into the kept rows of a long forward refused");
    CHECK(fwd(st, tok + m1, 4, lg, NULL) == 0 && same_rows(lg, NULL, m1, 4), "decode after that rollback differs");
    /* the last forward had 4 rows, from m1: m1 - 1 is before it */
    CHECK(be_cpu.truncate(st, m1 - 1) == 0 && be_cpu.length(st) == 0, "rollback past the snapshot must restart");
    CHECK(fwd(st, tok, 20, lg, NULL) == 0 && same_rows(lg, NULL, 0, 20), "rerun after a restart differs");
    /* truncate at or beyond the length changes nothing */
    CHECK(be_cpu.truncate(st, 20) == 20 && be_cpu.truncate(st, 99) == 20, "no-op truncate");
    CHECK(fwd(st, tok + 20, 1, lg, NULL) == 0 && same_rows(lg, NULL, 20, 1), "decode after a no-op truncate");
    be_cpu.destroy(st);
    free(lg);
}

/* The ring rule (a sliding layer keeps window + BE_DN_KEEP rows): after a
 * 100-row prefill (the ring of 72 rows wrapped), a rollback whose next row
 * still finds its window in the ring is exact, one position earlier the
 * sequence restarts, and the rerun equals decode. */
TEST(ring_rollback_and_restart) {
    enum { T = 100 };
    int W = m.cfg.window, R = W + BE_DN_KEEP;
    float *lg = malloc(sizeof(float) * T * (size_t)V);
    void *st = be_cpu.create(bi, &m, NCTX);
    CHECK(fwd(st, tok, T, lg, NULL) == 0 && same_rows(lg, NULL, 0, T), "100-row prefill differs from decode");
    int m1 = T - R + W - 1; /* its next row's oldest key is the oldest position in the ring */
    CHECK(be_cpu.truncate(st, m1) == m1, "rollback to %d (window still in the ring) refused", m1);
    CHECK(fwd(st, tok + m1, 4, lg, NULL) == 0 && same_rows(lg, NULL, m1, 4), "decode after that rollback differs");
    CHECK(be_cpu.truncate(st, m1 - 1) == 0 && be_cpu.length(st) == 0, "rollback past the ring must restart");
    CHECK(fwd(st, tok, 20, lg, NULL) == 0 && same_rows(lg, NULL, 0, 20), "rerun after a restart differs");
    be_cpu.destroy(st);
    free(lg);
}

/* Threads do not change a bit: the heads of the delta rule are split
 * across workers only when there is enough work; here, a pool of 3 and 1. */
TEST(threads) {
    float *lg = malloc(sizeof(float) * 40 * (size_t)V);
    for (int th = 1; th <= 3; th += 2) {
        be_options o = {.n_threads = th};
        void *bt = be_cpu.open(&o), *st = be_cpu.create(bt, &m, NCTX);
        CHECK(fwd(st, tok, 40, lg, NULL) == 0 && same_rows(lg, NULL, 0, 40), "%d threads change logits", th);
        be_cpu.destroy(st);
        be_cpu.close(bt);
    }
    free(lg);
}

/* Through the engine: the same prompt twice (the cache holds it: the last
 * row is rerun, which on a recurrent model is a rollback into the prefill's
 * kept rows), and a prompt that extends the cached tokens (a chat turn). */
TEST(prompt_reuse) {
    dflash_model *dm = dflash_load(rp(model_dir), NULL, NULL);
    if (!dm) {
        CHECK(0, "load: %s", dflash_error());
        return;
    }
    dflash_gen g = dflash_default_gen();
    g.n_predict = 12;
    g.use_draft = 0;
    int32_t *a, *b, *c;
    size_t na, nb, nc;
    dflash_stats s1, s2, s3;
    dflash_reset(dm);
    CHECK(dflash_generate(dm, tok, 30, &g, NULL, NULL, &a, &na, &s1) == 0, "gen: %s", dflash_error());
    CHECK(dflash_generate(dm, tok, 30, &g, NULL, NULL, &b, &nb, &s2) == 0, "gen: %s", dflash_error());
    CHECK(na == nb && !memcmp(a, b, na * sizeof *a), "the repeated prompt gives other tokens");
    fprintf(stderr, "  repeated prompt: %d of 30 rows reused\n", s2.n_reused);
    /* turn 2: prompt + its answer + more: compare with a fresh model */
    int32_t p2[60];
    memcpy(p2, tok, 30 * sizeof *p2);
    memcpy(p2 + 30, b, nb * sizeof *p2);
    for (int i = 30 + (int)nb; i < 60; i++) p2[i] = tok[i];
    CHECK(dflash_generate(dm, p2, 60, &g, NULL, NULL, &c, &nc, &s3) == 0, "gen: %s", dflash_error());
    int reused = s3.n_reused;
    dflash_reset(dm);
    int32_t *fresh;
    size_t nf;
    CHECK(dflash_generate(dm, p2, 60, &g, NULL, NULL, &fresh, &nf, &s3) == 0, "gen: %s", dflash_error());
    CHECK(nf == nc && !memcmp(fresh, c, nf * sizeof *c), "turn 2 after reuse differs from a fresh run");
    fprintf(stderr, "  turn 2: %d of 60 rows reused\n", reused);
    free(a);
    free(b);
    free(c);
    free(fresh);
    dflash_free(dm);
}

/* Qwen3-Next's fused in_proj rows regrouped from an MLX 4-bit checkpoint
 * (packed words, scales and biases moved row for row) equal the bf16
 * checkpoint's regrouped rows quantized in memory: MLX quantization is per
 * row, so the two orders of regroup and quantize must give the same bytes. */
static void regrouped_rows_equal(const char *q4dir) {
    mdl_model a, b;
    if (mdl_load(&a, rp("tests/models/tiny-qwen3next")) || qt_model(&a, QT_Q4, 32) || mdl_load(&b, rp(q4dir))) {
        CHECK(0, "load: %s", dfl_lasterr());
        return;
    }
    int n = 0;
    for (int l = 0; l < a.cfg.n_layers; l++) {
        if (!a.cfg.linear_layer[l]) continue;
        const wt_weight *wa[] = {&a.layers[l].lin_qkv, &a.layers[l].lin_z, &a.layers[l].lin_b, &a.layers[l].lin_a};
        const wt_weight *wb[] = {&b.layers[l].lin_qkv, &b.layers[l].lin_z, &b.layers[l].lin_b, &b.layers[l].lin_a};
        for (int i = 0; i < 4; i++, n++) {
            const wt_weight *x = wa[i], *y = wb[i];
            size_t words = (size_t)x->rows * x->cols / 8 * 4, ng = (size_t)x->rows * (x->cols / 32) * 2;
            CHECK(x->bits == 4 && y->bits == 4 && x->rows == y->rows && x->cols == y->cols &&
                      x->scale_dtype == y->scale_dtype,
                  "layer %d matrix %d: layouts differ", l, i);
            CHECK(!memcmp(x->data, y->data, words) && !memcmp(x->scales, y->scales, ng) &&
                      !memcmp(x->biases, y->biases, ng),
                  "layer %d matrix %d: regrouped 4-bit rows differ", l, i);
        }
    }
    CHECK(n == 4 * a.cfg.n_linear_layers && n > 0, "%d matrices compared", n);
    fprintf(stderr, "  qwen3next: %d regrouped 4-bit matrices equal\n", n);
    mdl_free(&a);
    mdl_free(&b);
}

int main(void) {
    const char *r = getenv("DFLASH_ROOT");
    if (r) root = r;
    be_options bo = {.n_threads = 2};
    bi = be_cpu.open(&bo);
    /* the dense model, then Qwen3.5-MoE (experts routed per row: a row's
     * expert sum has one order whatever rows share the forward) */
    char tmp[] = "/tmp/dflash_q35_XXXXXX", q4[64], q4n[64];
    if (!mkdtemp(tmp)) return 1;
    snprintf(q4, sizeof q4, "%s/q4", tmp);
    snprintf(q4n, sizeof q4n, "%s/q4next", tmp);
    /* and MLX 4-bit copies of the MoE one and of Qwen3-Next (its fused
     * in_proj rows regrouped from packed rows), made by dflash quantize's code */
    char in[600];
    snprintf(in, sizeof in, "%s", rp("tests/models/tiny-qwen35moe"));
    int qrc = qt_checkpoint(in, q4, 4, 32);
    snprintf(in, sizeof in, "%s", rp("tests/models/tiny-qwen3next"));
    if (!qrc) qrc = qt_checkpoint(in, q4n, 4, 32);
    if (qrc) fprintf(stderr, "  quantize: %s\n", dfl_lasterr());
    /* a synthesized Gemma-4 with attention_k_eq_v (its full layer's values
     * are its keys) together with per-layer inputs (tiny-gemma4-kv from
     * transformers has k_eq_v without them), with the
     * Qwen3 tokenizer for the public-API test */
    char keqv[64], tl[128];
    snprintf(keqv, sizeof keqv, "%s/gemma4_keqv", tmp);
    syn_spec gs = syn_default();
    gs.c.n_layers = 6;
    syn_gemma4(&gs.c, 8, 32, 1, 1, 8);
    int grc = syn_write(keqv, &gs);
    char *tj = realpath(rp("models/qwen3-tokenizer/tokenizer.json"), NULL);
    snprintf(tl, sizeof tl, "%s/tokenizer.json", keqv);
    if (!grc) grc = tj ? symlink(tj, tl) : -1;
    free(tj);
    if (grc) fprintf(stderr, "  gemma4 k_eq_v synth: %s\n", dfl_lasterr());
    const char *dirs[] = {"tests/models/tiny-qwen35", "tests/models/tiny-qwen35moe", "tests/models/tiny-qwen3next", q4,
                          q4n, "tests/models/tiny-gptoss", "tests/models/tiny-gemma4", keqv,
                          "tests/models/tiny-gemma4-kv", "tests/models/tiny-gemma4-moe"};
    for (int d = 0; d < (int)(sizeof dirs / sizeof dirs[0]); d++) {
        model_dir = dirs[d];
        if ((d >= 3 && d <= 4 && qrc) || (dirs[d] == keqv && grc)) {
            check_n_fail++;
            continue;
        }
        fprintf(stderr, "# %s\n", model_dir);
        if (setup() == 0) {
            RUN(widths_equal_decode);
            RUN(rollback_every_point);
            if (m.cfg.n_linear_layers) RUN(long_forward_and_restart);
            if (m.cfg.n_sliding_layers) RUN(ring_rollback_and_restart);
            RUN(threads);
            RUN(prompt_reuse);
        } else {
            check_n_fail++;
        }
        free(ref_l);
        free(ref_t);
        mdl_free(&m);
    }
    if (!qrc) regrouped_rows_equal(q4n);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "  could not remove %s\n", tmp);
    be_cpu.close(bi);
    CHECK_DONE("test_qwen35");
}
