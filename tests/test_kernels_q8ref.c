/* test_kernels_q8ref.c - the forward pass in q8 mode (kernels.h
 * kn_set_act_quant: int8 activations for Q8/Q4 weights, bfloat16 ones for
 * BF16 weights) against the PyTorch float32 fixtures of the tiny checkpoints
 * (tests/fixtures/README.md). test_reference.c checks the same fixtures in
 * f32 mode with the tight bounds.
 *
 * q8 mode rounds every activation row entering a Q8/Q4 matmul to int8 per
 * 32 columns, so the logits move by far more than f32 rounding. Bound
 * (measured, with a margin; see bench/NOTES.md): max |logit diff| <=
 * LOGIT_BOUND, on these 6-layer models of hidden size 32 (one int8 block
 * per row: the worst case for block scaling). From it:
 *   - argmax of a row must match the reference wherever our top-2 gap
 *     exceeds 2 * LOGIT_BOUND (the reference cannot reorder those);
 *   - a greedy continuation must follow the reference until a step whose
 *     top-2 gap is under 2 * LOGIT_BOUND; it may leave it only there.
 * Runs with the avx512 variant when the CPU has VNNI, else with the generic
 * C reference of q8 mode (same numbers bit for bit). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "cpu/kernels.h"
#include "model.h"
#include "safetensors.h"
#include "sample.h"
#include "cpu/threads.h"
#include "util.h"

#define LOGIT_BOUND 1.5f

static const char *root = ".";
static void *bi; /* the CPU backend instance (main) */

static const st_tensor *get(const st_set *s, int i, const char *key) {
    char name[64];
    snprintf(name, sizeof name, "p%d.%s", i, key);
    return st_find(s, name);
}

/* The largest minus the second largest of v[0..n). */
static float top2_gap(const float *v, int n) {
    float a = -INFINITY, b = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (v[i] > a) b = a, a = v[i];
        else if (v[i] > b) b = v[i];
    }
    return a - b;
}

static void check_q8(const char *name, int pack) {
    char mp[600], fp[600];
    snprintf(mp, sizeof mp, "%s/tests/models/%s", root, name);
    snprintf(fp, sizeof fp, "%s/tests/fixtures/%s.ref.safetensors", root, name);
    mdl_model m;
    st_set fx;
    if (mdl_load(&m, mp) != 0 || st_open_file(&fx, fp) != 0) {
        CHECK(0, "%s: %s", name, dfl_lasterr());
        return;
    }
    /* pack the linear weights as a loader would (kn_pack); the embedding
     * keeps its original for lookups, a tied lm_head shares its copy */
    wt_weight *ws[2 + 7 * 64];
    int nw = 0;
    ws[nw++] = &m.embed;
    if (m.lm_head.data != m.embed.data) ws[nw++] = &m.lm_head;
    for (int l = 0; l < m.cfg.n_layers && l < 64; l++) {
        mdl_layer *L = &m.layers[l];
        wt_weight *lw[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wg, &L->wu, &L->wd};
        for (int i = 0; i < 7; i++) ws[nw++] = lw[i];
    }
    if (pack) {
        for (int i = 0; i < nw; i++) CHECK(kn_pack(ws[i]) == 0, "%s: kn_pack: %s", name, dfl_lasterr());
        if (m.lm_head.data == m.embed.data) m.lm_head.packed = m.embed.packed;
    }
    const be_ops *be = &be_cpu;
    int V = m.cfg.vocab;
    float worst = 0, maxlogit = 0, min_gap_ok = INFINITY;
    int rows = 0, rows_checked = 0, steps = 0, steps_checked = 0, left = 0, np = 0;
    for (int i = 0; get(&fx, i, "ids"); i++, np++) {
        const st_tensor *ids = get(&fx, i, "ids"), *lg = get(&fx, i, "logits"), *am = get(&fx, i, "argmax"),
                        *gr = get(&fx, i, "greedy");
        int T = (int)ids->shape[0], nl = (int)lg->shape[0];
        void *st = be->create(bi, &m, 256);
        float *logits = malloc(sizeof(float) * (size_t)T * V);
        be_batch b = {.T = T, .tokens = ids->data, .n_logits = T, .logits = logits};
        CHECK(be->forward(st, &b) == 0, "%s p%d forward: %s", name, i, dfl_lasterr());
        /* the bound, on the rows the fixture has */
        const float *ref = lg->data;
        for (size_t j = 0; j < (size_t)nl * V; j++) {
            float d = fabsf(logits[(size_t)(T - nl) * V + j] - ref[j]);
            if (!(d <= worst)) worst = d;
            if (fabsf(ref[j]) > maxlogit) maxlogit = fabsf(ref[j]);
        }
        /* argmax wherever our gap leaves no doubt */
        const int32_t *ref_am = am->data;
        for (int t = 0; t < T; t++, rows++) {
            const float *row = logits + (size_t)t * V;
            float gap = top2_gap(row, V);
            if (gap <= 2 * LOGIT_BOUND) continue;
            rows_checked++;
            CHECK(smp_argmax(row, V) == ref_am[t], "%s p%d row %d: argmax %d != %d with a gap of %.3f", name, i, t,
                  smp_argmax(row, V), ref_am[t], gap);
        }
        /* greedy: follow the reference until a near tie */
        const int32_t *rg = gr->data;
        int n = (int)gr->shape[0];
        float *last = logits + (size_t)(T - 1) * V;
        steps += n;
        for (int k = 0; k < n; k++) {
            int32_t next = smp_argmax(last, V);
            float gap = top2_gap(last, V);
            if (next != rg[k]) {
                CHECK(gap <= 2 * LOGIT_BOUND, "%s p%d: greedy step %d: %d != %d with a gap of %.3f", name, i, k,
                      next, rg[k], gap);
                left++;
                break;
            }
            steps_checked++;
            if (gap < min_gap_ok) min_gap_ok = gap;
            be_batch s1 = {.T = 1, .tokens = &next, .n_logits = 1, .logits = last};
            be->forward(st, &s1);
        }
        free(logits);
        be->destroy(st);
    }
    CHECK(worst <= LOGIT_BOUND, "%s: logits differ by %g > %g", name, worst, LOGIT_BOUND);
    /* f32 mode stays within 1e-3 (test_reference.c): q8 mode must be on */
    CHECK(worst > 1e-3f, "%s: logits within %g of f32: is q8 mode off?", name, worst);
    fprintf(stderr,
            "  %s%s: %d prompts, max |logit diff| %.3f (largest |logit| %.1f); argmax checked on %d of %d rows; "
            "greedy equal for %d of %d steps, %d prompts left the reference at a near tie (smallest gap "
            "followed %.3f)\n",
            name, pack ? " packed" : "", np, worst, maxlogit, rows_checked, rows, steps_checked, steps, left,
            min_gap_ok);
    if (pack) {
        if (m.lm_head.packed == m.embed.packed) m.lm_head.packed = NULL;
        for (int i = 0; i < nw; i++) kn_unpack(ws[i]);
    }
    st_close(&fx);
    mdl_free(&m);
}

TEST(tiny_qwen3_q8) {
    check_q8("tiny-qwen3-q8", 0);
    check_q8("tiny-qwen3-q8", 1);
}

TEST(tiny_qwen3_q4) {
    check_q8("tiny-qwen3-q4", 0);
    check_q8("tiny-qwen3-q4", 1);
}

/* BF16 weights: bfloat16 activations where the CPU has AVX512_BF16 */
TEST(tiny_bf16) {
    if (!kn_act_bf16()) {
        fprintf(stderr, "  (no bfloat16 activation path here: skipped)\n");
        return;
    }
    check_q8("tiny-qwen3", 0);
    check_q8("tiny-llama3", 0);
}

int main(void) {
    const char *r = getenv("DFLASH_ROOT");
    if (r) root = r;
    be_options bo = {.n_threads = 2};
    bi = be_cpu.open(&bo); /* kn_init_once, a pool of 2 threads */
    kn_set_act_quant(1);
    if (!kn_act_quant()) kn_force_variant("generic"); /* no fast q8 path: the C reference */
    fprintf(stderr, "  q8 mode with the %s variant\n", kn_variant());
    RUN(tiny_qwen3_q8);
    RUN(tiny_qwen3_q4);
    RUN(tiny_bf16);
    be_cpu.close(bi);
    CHECK_DONE("test_kernels_q8ref");
}
