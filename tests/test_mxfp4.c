/* test_mxfp4.c - gpt-oss's MXFP4 experts (openai's checkpoints) loaded as
 * WT_MXFP4 matrices (weight.h: the e2m1 codes and e8m0 bytes as stored,
 * model.c mxfp4_rows).
 *
 * From tests/models/tiny-gptoss (BF16, checked against transformers in
 * test_reference.c) this writes two checkpoints: "mx", its experts encoded
 * in MXFP4 as transformers stores them (gate_up_proj_blocks [E, 2I, H/32, 16]
 * output-major with gate and up rows interleaved, the low nibble first,
 * e8m0 scales [E, 2I, H/32]; down_proj likewise) with quantization_config
 * {"quant_method": "mxfp4"}, and "dq", the same values decoded here (FP4
 * value table times 2^(s-127), exact in bf16) back into BF16 input-major
 * tensors. Checks: every expert row of mx equals dq's bit for bit (the
 * conversion is exact and reads the layout as the BF16 path does); with f32
 * activations the two models' logits and greedy tokens are identical (with
 * int8 activations the difference is printed); verify rows equal decode
 * rows on mx; a bad MXFP4 scale fails naming the tensor. And the 4-bit
 * form against the 8-bit one the experts were loaded into before
 * (wt_mx4_to_q8): the same model both ways gives the same logits bit for
 * bit, forward of 40 rows and decode rows, under every kernel variant this
 * CPU runs, in both activation modes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "backend.h"
#include "check.h"
#include "cpu/kernels.h"
#include "model.h"
#include "safetensors.h"
#include "sample.h"
#include "tmpdir.h"
#include "util.h"

static const char *root = ".";
static void *bi;

static const float fp4[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};

/* The nearest FP4 code of x (|x| <= 6 after scaling), ties to the lower magnitude. */
static int fp4_code(float x) {
    int best = 0;
    for (int c = 1; c < 16; c++)
        if (fabsf(fp4[c] - x) < fabsf(fp4[best] - x)) best = c;
    return best;
}

/* Encode w (element (r, k) at w[r * rs + k * ks], rows x cols, float) as
 * MXFP4 rows: blocks [rows][cols/32][16], scales [rows][cols/32]; decoded
 * values to dq[r][k]. */
static void encode(const float *w, size_t rs, size_t ks, int rows, int cols, uint8_t *blk, uint8_t *sc, float *dq) {
    for (int r = 0; r < rows; r++)
        for (int b = 0; b < cols / 32; b++) {
            float amax = 0;
            for (int j = 0; j < 32; j++) {
                float a = fabsf(w[r * rs + (size_t)(b * 32 + j) * ks]);
                amax = a > amax ? a : amax;
            }
            int e = amax > 0 ? (int)ceilf(log2f(amax / 6.0f)) : -20;
            sc[(size_t)r * (cols / 32) + b] = (uint8_t)(e + 127);
            uint8_t *o = blk + ((size_t)r * (cols / 32) + b) * 16;
            for (int j = 0; j < 32; j++) {
                int c = fp4_code(ldexpf(w[r * rs + (size_t)(b * 32 + j) * ks], -e));
                if (j % 2 == 0) o[j / 2] = (uint8_t)c;
                else o[j / 2] |= (uint8_t)(c << 4);
                dq[(size_t)r * cols + b * 32 + j] = ldexpf(fp4[c], e);
            }
        }
}

static void write_config(const char *dir, int mx) {
    char src[600];
    snprintf(src, sizeof src, "%s/tests/models/tiny-gptoss/config.json", root);
    char *txt = dfl_read_file(src, NULL);
    cJSON *j = cJSON_Parse(txt);
    if (mx) {
        cJSON *q = cJSON_AddObjectToObject(j, "quantization_config");
        cJSON_AddStringToObject(q, "quant_method", "mxfp4");
    }
    char *out = cJSON_Print(j), *p = dfl_path_join(dir, "config.json");
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(out, f);
        fclose(f);
    }
    free(p);
    free(out);
    free(txt);
    cJSON_Delete(j);
}

/* The two checkpoints; 0 or -1. */
static int make_dirs(const char *mxd, const char *dqd) {
    st_set in;
    char src[600];
    snprintf(src, sizeof src, "%s/tests/models/tiny-gptoss/model.safetensors", root);
    if (st_open_file(&in, src) != 0) {
        CHECK(0, "%s", dfl_lasterr());
        return -1;
    }
    mkdir(mxd, 0777);
    mkdir(dqd, 0777);
    write_config(mxd, 1);
    write_config(dqd, 0);
    int n = in.n;
    st_out *omx = calloc((size_t)2 * n, sizeof(st_out)), *odq = calloc((size_t)n, sizeof(st_out));
    void **bufs = calloc((size_t)4 * n, sizeof(void *));
    char (*names)[128] = calloc((size_t)2 * n, 128);
    int nm = 0, nd = 0, nb = 0;
    for (int i = 0; i < n; i++) {
        const st_tensor *t = &in.t[i];
        size_t len = strlen(t->name);
        int gu = len > 12 && !strcmp(t->name + len - 12, "gate_up_proj"), dn = len > 9 && !strcmp(t->name + len - 9, "down_proj");
        st_out keep = {t->name, t->dtype, t->ndim, {t->shape[0], t->shape[1], t->shape[2], t->shape[3]}, t->data};
        if (!gu && !dn) {
            omx[nm++] = keep;
            odq[nd++] = keep;
            continue;
        }
        /* stored input-major [E, in, out]: output row r, input k at [e][k][r] */
        int E = (int)t->shape[0], cin = (int)t->shape[1], cout = (int)t->shape[2];
        size_t per = (size_t)cin * cout;
        float *w = malloc(sizeof(float) * per), *dq = malloc(sizeof(float) * per);
        uint8_t *blk = bufs[nb++] = malloc((size_t)E * cout * cin / 2), *sc = bufs[nb++] = malloc((size_t)E * cout * cin / 32);
        uint16_t *dqt = bufs[nb++] = malloc(sizeof(uint16_t) * (size_t)E * per);
        for (int e = 0; e < E; e++) {
            for (size_t k = 0; k < per; k++) {
                uint16_t h;
                memcpy(&h, (const char *)t->data + 2 * ((size_t)e * per + k), 2);
                w[k] = dfl_bf16_to_f32(h);
            }
            encode(w, 1, (size_t)cout, cout, cin, blk + (size_t)e * cout * cin / 2, sc + (size_t)e * cout * cin / 32, dq);
            for (int r = 0; r < cout; r++) /* back to input-major, bf16 (exact) */
                for (int k = 0; k < cin; k++) dqt[(size_t)e * per + (size_t)k * cout + r] = dfl_f32_to_bf16(dq[(size_t)r * cin + k]);
        }
        free(w);
        free(dq);
        odq[nd++] = (st_out){t->name, ST_BF16, 3, {E, cin, cout, 0}, dqt};
        snprintf(names[2 * i], 128, "%s_blocks", t->name);
        snprintf(names[2 * i + 1], 128, "%s_scales", t->name);
        omx[nm++] = (st_out){names[2 * i], ST_U8, 4, {E, cout, cin / 32, 16}, blk};
        omx[nm++] = (st_out){names[2 * i + 1], ST_U8, 3, {E, cout, cin / 32, 0}, sc};
    }
    char *pm = dfl_path_join(mxd, "model.safetensors"), *pd = dfl_path_join(dqd, "model.safetensors");
    int rc = st_write(pm, omx, nm, NULL) || st_write(pd, odq, nd, NULL) ? -1 : 0;
    CHECK(rc == 0, "write: %s", dfl_lasterr());
    free(pm);
    free(pd);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    free(bufs);
    free(names);
    free(omx);
    free(odq);
    st_close(&in);
    return rc;
}

static void logits_of(const mdl_model *m, const int32_t *tok, int T, float *out) {
    void *st = be_cpu.create(bi, m, 256);
    be_batch b = {.T = T, .tokens = tok, .n_logits = T, .logits = out};
    CHECK(be_cpu.forward(st, &b) == 0, "forward: %s", dfl_lasterr());
    be_cpu.destroy(st);
}

TEST(mxfp4_experts_exact_and_forward) {
    char mxd[512], dqd[512];
    snprintf(mxd, sizeof mxd, "%s", path("mx", NULL));
    snprintf(dqd, sizeof dqd, "%s", path("dq", NULL));
    if (make_dirs(mxd, dqd)) return;
    mdl_model a, b;
    if (mdl_load(&a, mxd) != 0 || mdl_load(&b, dqd) != 0) {
        CHECK(0, "load: %s", dfl_lasterr());
        return;
    }
    const cfg_model *c = &a.cfg;
    int H = c->hidden, I = c->moe_inter, rows = 0, bad = 0;
    float *ra = malloc(sizeof(float) * (size_t)(H > I ? H : I)), *rb = malloc(sizeof(float) * (size_t)(H > I ? H : I));
    for (int l = 0; l < c->n_layers; l++)
        for (int e = 0; e < c->n_experts; e++) {
            const mdl_expert *xa = &a.layers[l].experts[e], *xb = &b.layers[l].experts[e];
            const wt_weight *wa[3] = {&xa->wg, &xa->wu, &xa->wd}, *wb[3] = {&xb->wg, &xb->wu, &xb->wd};
            for (int k = 0; k < 3; k++) {
                CHECK(wa[k]->dtype == WT_MXFP4 && wa[k]->group_size == 32 && wa[k]->rows == wb[k]->rows &&
                          wa[k]->cols == wb[k]->cols, "layer %d expert %d matrix %d: layout", l, e, k);
                for (int r = 0; r < wa[k]->rows; r++, rows++) {
                    wt_get_row(ra, wa[k], r);
                    wt_get_row(rb, wb[k], r);
                    bad += memcmp(ra, rb, sizeof(float) * (size_t)wa[k]->cols) != 0;
                }
            }
        }
    CHECK(bad == 0 && rows > 0, "%d of %d MXFP4 expert rows differ from their decoded BF16 values", bad, rows);
    fprintf(stderr, "  %d expert rows: MXFP4 as loaded equals the decoded values exactly\n", rows);
    free(ra);
    free(rb);
    /* forward: logits within the int8 path's rounding, the same greedy tokens */
    enum { T = 40, G = 24 };
    int V = c->vocab;
    int32_t tok[T + G], ta[G], tb[G];
    for (int i = 0; i < T; i++) tok[i] = (int32_t)((i * 7919 + 101) % V);
    float *la = malloc(sizeof(float) * (size_t)T * V), *lb = malloc(sizeof(float) * (size_t)T * V);
    logits_of(&a, tok, T, la);
    logits_of(&b, tok, T, lb);
    float d = 0;
    for (size_t i = 0; i < (size_t)T * V; i++) {
        float x = fabsf(la[i] - lb[i]);
        d = x > d || isnan(x) ? x : d;
    }
    /* with f32 activations the MXFP4 rows of exact values give the BF16
     * path's bits (same dot order); int8 activations (the default on
     * AVX2/VNNI) round differently: printed, not compared */
    if (!kn_act_quant())
        CHECK(d == 0, "MXFP4 vs decoded BF16 logits differ by %g with f32 activations", d);
    fprintf(stderr, "  logits (%s): max |MXFP4 - BF16| %.2e\n", kn_act_quant() ? "int8 activations" : "f32", d);
    const mdl_model *ms[2] = {&a, &b};
    int32_t *outs[2] = {ta, tb};
    for (int k = 0; k < 2; k++) {
        void *st = be_cpu.create(bi, ms[k], 256);
        be_batch pb = {.T = T, .tokens = tok, .n_logits = 1, .logits = la};
        be_cpu.forward(st, &pb);
        for (int g = 0; g < G; g++) {
            int32_t nx = smp_argmax(la, V);
            outs[k][g] = nx;
            be_batch s1 = {.T = 1, .tokens = &nx, .n_logits = 1, .logits = la};
            be_cpu.forward(st, &s1);
        }
        be_cpu.destroy(st);
    }
    int same = !memcmp(ta, tb, sizeof ta);
    CHECK(same || kn_act_quant(), "MXFP4 greedy tokens differ from the decoded BF16 model's");
    /* verify widths: rows of one forward of T equal one-token forwards */
    void *st = be_cpu.create(bi, &a, 256);
    int ok = 1;
    for (int i = 0; i < T; i++) {
        be_batch s1 = {.T = 1, .tokens = tok + i, .n_logits = 1, .logits = lb + (size_t)i * V};
        ok &= be_cpu.forward(st, &s1) == 0;
    }
    be_cpu.destroy(st);
    logits_of(&a, tok, T, la);
    CHECK(ok && !memcmp(la, lb, sizeof(float) * (size_t)T * V), "MXFP4: 40-row forward differs from decode rows");
    free(la);
    free(lb);
    mdl_free(&a);
    mdl_free(&b);
}

/* The experts of M replaced by their exact 8-bit form (wt_mx4_to_q8: MLX
 * Q8, group 32, bf16 scales and biases; buffers owned by M); returns the
 * experts' bytes before (*b4) and after. */
static size_t to_8bit(mdl_model *m, size_t *b4) {
    size_t after = 0;
    *b4 = 0;
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int e = 0; e < m->cfg.n_experts; e++) {
            mdl_expert *x = &m->layers[l].experts[e];
            wt_weight *ws[3] = {&x->wg, &x->wu, &x->wd};
            for (int k = 0; k < 3; k++) {
                wt_weight *w = ws[k];
                size_t n = (size_t)w->rows * w->cols;
                uint8_t *q = mdl_own(m, n);
                uint16_t *sc = mdl_own(m, n / 16), *bs = mdl_own(m, n / 16);
                *b4 += wt_bytes(w);
                wt_mx4_to_q8(w, q, sc, bs);
                *w = (wt_weight){.dtype = WT_Q8, .rows = w->rows, .cols = w->cols, .data = q, .scales = sc,
                                 .biases = bs, .scale_dtype = WT_BF16, .group_size = 32, .bits = 8};
                CHECK(wt_check(w, "8-bit form") == 0, "%s", dfl_lasterr());
                after += wt_bytes(w);
            }
        }
    return after;
}

/* Logits of a 40-row forward, then of 40 one-row forwards (decode), of M. */
static void both_logits(const mdl_model *m, const int32_t *tok, int T, float *fwd, float *dec) {
    logits_of(m, tok, T, fwd);
    void *st = be_cpu.create(bi, m, 256);
    for (int i = 0; i < T; i++) {
        be_batch s1 = {.T = 1, .tokens = tok + i, .n_logits = 1, .logits = dec + (size_t)i * m->cfg.vocab};
        CHECK(be_cpu.forward(st, &s1) == 0, "decode: %s", dfl_lasterr());
    }
    be_cpu.destroy(st);
}

TEST(mxfp4_4bit_equals_8bit) {
    char mxd[512];
    snprintf(mxd, sizeof mxd, "%s", path("mx", NULL));
    mdl_model a, b;
    if (mdl_load(&a, mxd) != 0 || mdl_load(&b, mxd) != 0) {
        CHECK(0, "load: %s", dfl_lasterr());
        return;
    }
    size_t b4, b8 = to_8bit(&b, &b4);
    /* 4 + 8/32 bits a value against 8 + 32/32 */
    CHECK(b4 * 36 == b8 * 17, "expert bytes: %zu at 4 bits, %zu at 8", b4, b8);
    fprintf(stderr, "  experts: %zu bytes as MXFP4, %zu as 8-bit\n", b4, b8);
    enum { T = 40 };
    int V = a.cfg.vocab, runs = 0;
    int32_t tok[T];
    for (int i = 0; i < T; i++) tok[i] = (int32_t)((i * 7919 + 101) % V);
    float *fa = malloc(sizeof(float) * T * V), *fb = malloc(sizeof(float) * T * V);
    float *da = malloc(sizeof(float) * T * V), *db = malloc(sizeof(float) * T * V);
    for (int i = 0; i < kn_variant_count(); i++)
        for (int q8 = 0; q8 < 2; q8++) {
            const char *v = kn_variant_name(i);
            kn_set_act_quant(q8);
            if (!kn_variant_supported(v) || kn_force_variant(v) != 0 || (q8 && !kn_act_quant())) continue;
            both_logits(&a, tok, T, fa, da);
            both_logits(&b, tok, T, fb, db);
            CHECK(!memcmp(fa, fb, sizeof(float) * T * V) && !memcmp(da, db, sizeof(float) * T * V),
                  "%s, %s activations: MXFP4 and 8-bit logits differ", v, q8 ? "int8" : "f32");
            CHECK(!memcmp(fa, da, sizeof(float) * T * V), "%s, %s activations: forward rows differ from decode rows", v,
                  q8 ? "int8" : "f32");
            fprintf(stderr, "  %s, %s activations: 4-bit = 8-bit, forward and decode\n", v, q8 ? "int8" : "f32");
            runs++;
        }
    CHECK(runs >= 2, "only %d variant / mode runs", runs);
    kn_set_act_quant(-1);
    kn_init();
    free(fa);
    free(fb);
    free(da);
    free(db);
    mdl_free(&a);
    mdl_free(&b);
}

/* Bad MXFP4 tensors fail naming them. */
TEST(mxfp4_bad_tensors) {
    char mxd[512];
    snprintf(mxd, sizeof mxd, "%s", path("mx", NULL));
    char *p = dfl_path_join(mxd, "model.safetensors");
    size_t n;
    char *orig = dfl_read_file(p, &n);
    if (!orig) {
        CHECK(0, "%s", dfl_lasterr());
        free(p);
        return;
    }
    st_set s;
    mdl_model m;
    /* a scale byte of 255 (e8m0's NaN) in layer 1's down_proj; then blocks
     * of the wrong shape */
    size_t off = 0;
    if (st_open_file(&s, p) == 0) {
        const st_tensor *t = st_find(&s, "model.layers.1.mlp.experts.down_proj_scales");
        if (t) off = (size_t)((const uint8_t *)t->data - s.maps[0].data) + 5;
        st_close(&s);
    }
    CHECK(off > 0, "no down_proj_scales in the MXFP4 checkpoint");
    if (off) {
        char *mut = malloc(n);
        memcpy(mut, orig, n);
        mut[off] = (char)255;
        write_file(p, mut, n);
        free(mut);
        CHECK(mdl_load(&m, mxd) != 0 && strstr(dfl_lasterr(), "down_proj_scales") && strstr(dfl_lasterr(), "255"),
              "scale 255: %s", dfl_lasterr());
        write_file(p, orig, n);
    }
    CHECK(mdl_load(&m, mxd) == 0, "restored checkpoint: %s", dfl_lasterr());
    mdl_free(&m);
    free(orig);
    free(p);
}

int main(void) {
    const char *r = getenv("DFLASH_ROOT");
    if (r) root = r;
    if (tmpdir_make("mxfp4")) return 1;
    be_options bo = {.n_threads = 2};
    bi = be_cpu.open(&bo);
    /* once with f32 activations (bit-exact against BF16), once with the
     * default mode (int8 activations where the CPU has them) */
    setenv("DFLASH_ACT", "f32", 1);
    kn_init();
    RUN(mxfp4_experts_exact_and_forward);
    unsetenv("DFLASH_ACT");
    kn_init();
    if (kn_act_quant()) RUN(mxfp4_experts_exact_and_forward);
    RUN(mxfp4_4bit_equals_8bit);
    RUN(mxfp4_bad_tensors);
    be_cpu.close(bi);
    tmpdir_remove();
    CHECK_DONE("test_mxfp4");
}
