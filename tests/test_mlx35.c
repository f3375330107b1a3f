/* test_mlx35.c - Qwen3.5 as mlx-lm converts it (model.c mlx_layout).
 *
 * mlx-lm (models/qwen3_5.py Model.sanitize + TextModel.sanitize) renames
 * model.language_model.X to language_model.model.X, moves conv1d.weight
 * from [C, 1, K] to [C, K, 1] and, in the same pass, stores the zero-
 * centred norms (input/post_attention_layernorm, q_norm, k_norm, the final
 * norm) as 1 + w rounded to bf16. Checked here:
 *   - the unquantized MLX layout, written here from tests/models/tiny-qwen35
 *     by those three steps, gives logits bit-identical to the HF checkpoint
 *     whose f32 1 + w norm scales are rounded to bf16 the same way (every
 *     other number is the same bf16 value), and DFlash = greedy on it;
 *   - tests/models/tiny-qwen35-mlx-q4 (tools/reference/make_tiny_mlx.py,
 *     4-bit group 32): every norm, conv1d, dt_bias, A_log bit-equal to the
 *     HF model's (norms: bf16(1 + w)); every matrix dequantizes to the HF
 *     weights within 1.5 quantization steps; logits near the HF fixture's
 *     (bound below); DFlash with tiny-qwen35-draft = its own greedy output;
 *   - half-converted files (conv1d layouts mixed across layers; mlx-lm's
 *     names with the HF conv1d layout) are refused naming the tensor. A file
 *     whose conv1d was moved but whose norms were not shifted (or shifted
 *     twice) cannot be told from a real conversion: nothing checks that.
 * KEEPTMP=1 keeps the files written under /tmp/dflash_mlx35_* (to compare
 * them with tools/reference/make_tiny_mlx.py's: the same tensors). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "dflash.h"
#include "cpu/kernels.h"
#include "model.h"
#include "quant.h"
#include "safetensors.h"
#include "sample.h"
#include "util.h"

static const char *root = ".";
static void *bi;
static char tmp[] = "/tmp/dflash_mlx35_XXXXXX";

static char *rp(const char *a) {
    static char buf[4][700];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", root, a);
    return buf[k];
}

static int ends(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

static int is_zero_centred_norm(const st_tensor *t) {
    return t->ndim == 1 && (ends(t->name, ".input_layernorm.weight") || ends(t->name, ".post_attention_layernorm.weight") ||
                            !strcmp(t->name, "model.norm.weight") || ends(t->name, ".q_norm.weight") ||
                            ends(t->name, ".k_norm.weight"));
}

/* Write DIR as tests/models/MODEL (tiny-qwen35, tiny-qwen35moe or
 * tiny-qwen3next) converted the way mlx-lm's sanitize() does it: names under
 * language_model.model. (mlx_names), conv1d [C, K, 1] for the layers whose
 * bit is set in conv_mask, the zero-centred norms bf16(1 + w) (shift), the
 * fused experts mlp.experts.gate_up_proj [E, 2I, H] split into
 * mlp.switch_mlp.gate_proj / up_proj.weight [E, I, H] (rows :I and I:) and
 * mlp.experts.down_proj renamed mlp.switch_mlp.down_proj.weight. A Qwen3.5
 * config is wrapped as the published multimodal one (text_config). */
static int write_variant(const char *model, const char *dir, int mlx_names, unsigned conv_mask, int shift) {
    st_set s;
    char path[800];
    snprintf(path, sizeof path, "tests/models/%s/model.safetensors", model);
    if (mkdir(dir, 0755) || st_open_file(&s, rp(path))) return -1;
    int n = 0, cap = 2 * s.n;
    st_out *o = calloc((size_t)cap, sizeof *o);
    char **names = calloc((size_t)cap, sizeof *names);
    void **bufs = calloc((size_t)cap, sizeof *bufs);
    for (int i = 0; i < s.n; i++) {
        const st_tensor *t = &s.t[i];
        char nm[300];
        if (mlx_names && !strncmp(t->name, "model.", 6)) snprintf(nm, sizeof nm, "language_model.model.%s", t->name + 6);
        else snprintf(nm, sizeof nm, "%s", t->name);
        o[n] = (st_out){NULL, t->dtype, t->ndim, {0}, t->data};
        memcpy(o[n].shape, t->shape, sizeof t->shape);
        int layer = -1;
        if (ends(nm, "conv1d.weight") && sscanf(t->name, "model.layers.%d.", &layer) == 1 && (conv_mask >> layer & 1)) {
            o[n].shape[1] = t->shape[2]; /* [C, 1, K] -> [C, K, 1]: the same values in the same order */
            o[n].shape[2] = 1;
        }
        if (shift && is_zero_centred_norm(t)) {
            uint16_t *v = bufs[n] = malloc(t->nbytes);
            for (int j = 0; j < (int)t->shape[0]; j++)
                v[j] = dfl_f32_to_bf16(dfl_bf16_to_f32(((const uint16_t *)t->data)[j]) + 1.0f);
            o[n].data = v;
        }
        char *cut = strstr(nm, "mlp.experts.");
        if (cut && ends(nm, "experts.gate_up_proj") && t->ndim == 3) {
            int64_t E = t->shape[0], I = t->shape[1] / 2, H = t->shape[2];
            size_t half = (size_t)I * H * 2;
            for (int k = 0; k < 2; k++) {
                char *v = bufs[n] = malloc(half * (size_t)E);
                for (int64_t e = 0; e < E; e++) memcpy(v + half * e, (const char *)t->data + half * (2 * e + k), half);
                o[n] = (st_out){NULL, t->dtype, 3, {E, I, H}, v};
                *cut = 0;
                names[n] = malloc(strlen(nm) + 40);
                sprintf(names[n], "%smlp.switch_mlp.%s.weight", nm, k ? "up_proj" : "gate_proj");
                o[n].name = names[n];
                n++;
            }
            continue;
        }
        if (cut && ends(nm, "experts.down_proj")) {
            *cut = 0;
            strcat(nm, "mlp.switch_mlp.down_proj.weight");
        }
        names[n] = dfl_strdup(nm);
        o[n].name = names[n];
        n++;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int rc = st_write(path, o, n, "{\"format\":\"mlx\"}");
    size_t len;
    snprintf(path, sizeof path, "tests/models/%s/config.json", model);
    char *cfg = dfl_read_file(rp(path), &len);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    int moe = !strcmp(model, "tiny-qwen35moe");
    if (!cfg || !f) rc = -1;
    else if (!strcmp(model, "tiny-qwen3next")) fputs(cfg, f);
    else
        fprintf(f, "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"tie_word_embeddings\": true, "
                   "\"text_config\": %s}\n", moe ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration",
                moe ? "qwen3_5_moe" : "qwen3_5", cfg);
    if (f) fclose(f);
    free(cfg);
    for (int i = 0; i < n; i++) free(names[i]), free(bufs[i]);
    free(names), free(bufs), free(o);
    st_close(&s);
    return rc;
}

/* The zero-centred norms of a loaded HF Qwen3.5 (f32 1 + w) rounded to bf16. */
static void round_norms(mdl_model *m) {
    int H = m->cfg.hidden, hd = m->cfg.head_dim;
    float *v[3 + 0];
    for (int i = 0; i < H; i++) m->final_norm[i] = dfl_bf16_to_f32(dfl_f32_to_bf16(m->final_norm[i]));
    for (int l = 0; l < m->cfg.n_layers; l++) {
        mdl_layer *L = &m->layers[l];
        v[0] = L->in_norm, v[1] = L->post_norm;
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < H; i++) v[k][i] = dfl_bf16_to_f32(dfl_f32_to_bf16(v[k][i]));
        if (!m->cfg.linear_layer[l])
            for (int i = 0; i < hd; i++) {
                L->q_norm[i] = dfl_bf16_to_f32(dfl_f32_to_bf16(L->q_norm[i]));
                L->k_norm[i] = dfl_bf16_to_f32(dfl_f32_to_bf16(L->k_norm[i]));
            }
    }
}

static int same_floats(const float *a, const float *b, int n) { return !memcmp(a, b, sizeof(float) * (size_t)n); }

/* The prompts of tiny-qwen35's fixture (any model of its vocabulary) through A: against B's logits of every row, bit-
 * identical (exact 1) or max |diff| and the same argmax (exact 2), or the
 * last row against the fixture's logits (exact 0); returns the max |diff|. */
static float logits_vs(mdl_model *a, mdl_model *b, int exact) {
    st_set fx;
    if (st_open_file(&fx, rp("tests/fixtures/tiny-qwen35.ref.safetensors"))) {
        CHECK(0, "%s", dfl_lasterr());
        return INFINITY;
    }
    int V = a->cfg.vocab, np = 0;
    float worst = 0;
    for (int i = 0;; i++, np++) {
        char nm[32];
        snprintf(nm, sizeof nm, "p%d.ids", i);
        const st_tensor *ids = st_find(&fx, nm);
        if (!ids) break;
        snprintf(nm, sizeof nm, "p%d.logits", i);
        const st_tensor *lg = st_find(&fx, nm);
        int T = (int)ids->shape[0];
        float *la = malloc(sizeof(float) * (size_t)T * V), *lb = malloc(sizeof(float) * (size_t)T * V);
        void *sa = be_cpu.create(bi, a, 256);
        be_batch ba = {.T = T, .tokens = ids->data, .n_logits = T, .logits = la};
        CHECK(be_cpu.forward(sa, &ba) == 0, "forward: %s", dfl_lasterr());
        be_cpu.destroy(sa);
        if (exact) {
            void *sb = be_cpu.create(bi, b, 256);
            be_batch bb = {.T = T, .tokens = ids->data, .n_logits = T, .logits = lb};
            CHECK(be_cpu.forward(sb, &bb) == 0, "forward: %s", dfl_lasterr());
            be_cpu.destroy(sb);
            if (exact == 1) CHECK(same_floats(la, lb, T * V), "p%d: logits not bit-identical", i);
            for (size_t j = 0; j < (size_t)T * V; j++)
                worst = fabsf(la[j] - lb[j]) > worst ? fabsf(la[j] - lb[j]) : worst;
            for (int t = 0; exact == 2 && t < T; t++)
                CHECK(smp_argmax(la + (size_t)t * V, V) == smp_argmax(lb + (size_t)t * V, V), "p%d row %d argmax", i, t);
        } else {
            const float *r = lg->data, *x = la + (size_t)(T - 1) * V;
            for (int j = 0; j < V; j++) worst = fabsf(x[j] - r[j]) > worst ? fabsf(x[j] - r[j]) : worst;
        }
        free(la), free(lb);
    }
    CHECK(np >= 4, "%d prompts", np);
    st_close(&fx);
    return worst;
}

/* DFlash with tiny-qwen35-draft on TARGET = its plain greedy output, for
 * the fixture's prompts at block sizes 2, 3, 8, 16 and auto. */
static void dflash_is_greedy(const char *target) {
    dflash_params pr = dflash_default_params();
    pr.tokenizer = rp("tests/models/tiny-qwen35");
    dflash_model *plain = dflash_load(target, NULL, &pr), *spec = dflash_load(target, rp("tests/models/tiny-qwen35-draft"), &pr);
    st_set fx;
    CHECK(plain && spec, "load: %s", dflash_error());
    if (!plain || !spec || st_open_file(&fx, rp("tests/fixtures/tiny-qwen35.ref.safetensors"))) {
        dflash_free(plain), dflash_free(spec);
        return;
    }
    int rounds = 0, np = 0;
    for (int i = 0;; i++, np++) {
        char nm[32];
        snprintf(nm, sizeof nm, "p%d.ids", i);
        const st_tensor *ids = st_find(&fx, nm);
        if (!ids) break;
        dflash_gen g = dflash_default_gen();
        g.n_predict = 24;
        int32_t *want = NULL, *out = NULL;
        size_t nw = 0, nout = 0;
        dflash_stats s;
        CHECK(dflash_generate(plain, ids->data, (size_t)ids->shape[0], &g, NULL, NULL, &want, &nw, &s) == 0,
              "plain: %s", dflash_error());
        int blocks[] = {2, 3, 8, 16, 0};
        for (int b = 0; b < 5 && want; b++) {
            g.block_size = blocks[b];
            g.draft_max = blocks[b] ? blocks[b] - 1 : -1;
            dflash_reset(spec);
            CHECK(dflash_generate(spec, ids->data, (size_t)ids->shape[0], &g, NULL, NULL, &out, &nout, &s) == 0,
                  "dflash: %s", dflash_error());
            CHECK(nout == nw && !memcmp(out, want, nw * sizeof(int32_t)), "p%d block %d: DFlash != greedy", i,
                  blocks[b]);
            rounds += s.rounds;
            free(out);
            out = NULL;
        }
        free(want);
    }
    CHECK(np >= 4 && rounds > 0, "%d prompts, %d rounds", np, rounds);
    fprintf(stderr, "  %s: %d prompts x 5 block sizes, %d rounds, all = greedy\n", target, np, rounds);
    st_close(&fx);
    dflash_free(plain);
    dflash_free(spec);
}

/* MODEL converted to the unquantized MLX layout here (write_variant):
 * logits bit-identical to the HF checkpoint's with its norms rounded as
 * mlx-lm stores them, DFlash = greedy with tiny-qwen35-draft (same widths) */
static void bf16_layout(const char *model, int mlx_names) {
    char dir[128], hf[128];
    snprintf(dir, sizeof dir, "%s/%s", tmp, model);
    snprintf(hf, sizeof hf, "tests/models/%s", model);
    if (write_variant(model, dir, mlx_names, ~0u, 1)) {
        CHECK(0, "write: %s", dfl_lasterr());
        return;
    }
    mdl_model a, b;
    if (mdl_load(&a, dir) || mdl_load(&b, rp(hf))) {
        CHECK(0, "load: %s", dfl_lasterr());
        return;
    }
    CHECK(a.mlx_norms && !b.mlx_norms, "mlx_norms %d %d", a.mlx_norms, b.mlx_norms);
    round_norms(&b);
    CHECK(same_floats(a.final_norm, b.final_norm, a.cfg.hidden), "final norm");
    logits_vs(&a, &b, 1);
    mdl_free(&a);
    mdl_free(&b);
    dflash_is_greedy(dir);
}

TEST(mlx_bf16_qwen35_bit_identical) { bf16_layout("tiny-qwen35", 1); }
/* the experts split from transformers 5's fused gate_up_proj into
 * switch_mlp (qwen3_5_moe.py Model.sanitize) */
TEST(mlx_bf16_qwen35moe_bit_identical) { bf16_layout("tiny-qwen35moe", 1); }
/* names stay model.*; experts stacked into switch_mlp, the fused
 * in_proj_qkvz / in_proj_ba kept (qwen3_next.py Model.sanitize) */
TEST(mlx_bf16_qwen3next_bit_identical) { bf16_layout("tiny-qwen3next", 0); }

/* Element (r, j) of the MLX matrix W (Q4/Q8, bf16 scales and biases): its
 * quantized value q and its group's scale and bias (the value: s * q + b). */
static void mlx_element(const wt_weight *w, int r, int j, int *q, float *s, float *b) {
    int per = 32 / w->bits, qm = (1 << w->bits) - 1;
    uint32_t word = ((const uint32_t *)w->data)[(size_t)r * (w->cols / per) + j / per];
    *q = (int)(word >> (j % per * w->bits)) & qm;
    size_t gi = (size_t)r * (w->cols / w->group_size) + j / w->group_size;
    *s = dfl_bf16_to_f32(((const uint16_t *)w->scales)[gi]);
    *b = dfl_bf16_to_f32(((const uint16_t *)w->biases)[gi]);
}

/* dequantized MLX matrix W (Q4/Q8, bf16 scales) against the float one F:
 * max |w - f| in quantization steps (|scale|) */
static double steps_off(const wt_weight *w, const wt_weight *f) {
    double worst = 0;
    for (int r = 0; r < w->rows; r++)
        for (int j = 0; j < w->cols; j++) {
            int q;
            float s, bb;
            mlx_element(w, r, j, &q, &s, &bb);
            float x = dfl_bf16_to_f32(((const uint16_t *)f->data)[(size_t)r * f->cols + j]);
            double d = fabs((double)s * q + bb - x) / fabs(s);
            worst = d > worst ? d : worst;
        }
    return worst;
}

/* W (MLX Q4/Q8, bf16 scales) as an F32 matrix of fl32(scale * q + bias),
 * its buffer owned by M */
static wt_weight dequantized(mdl_model *m, const wt_weight *w) {
    float *d = mdl_own(m, sizeof(float) * (size_t)w->rows * w->cols);
    for (int r = 0; r < w->rows; r++)
        for (int j = 0; j < w->cols; j++) {
            int q;
            float s, bb;
            mlx_element(w, r, j, &q, &s, &bb);
            d[(size_t)r * w->cols + j] = (float)((double)s * q + bb);
        }
    wt_weight f = {.dtype = WT_F32, .rows = w->rows, .cols = w->cols, .data = d};
    return f;
}

TEST(mlx_q4_fixture) {
    mdl_model a, b;
    if (mdl_load(&a, rp("tests/models/tiny-qwen35-mlx-q4")) || mdl_load(&b, rp("tests/models/tiny-qwen35"))) {
        CHECK(0, "load: %s", dfl_lasterr());
        return;
    }
    CHECK(a.mlx_norms && a.cfg.q_bits == 4 && a.cfg.q_group == 32, "mlx %d, %d bits, group %d", a.mlx_norms,
          a.cfg.q_bits, a.cfg.q_group);
    round_norms(&b);
    int H = a.cfg.hidden, hd = a.cfg.head_dim;
    CHECK(same_floats(a.final_norm, b.final_norm, H), "final norm");
    double worst = steps_off(&a.embed, &b.embed);
    CHECK(a.lm_head.data == a.embed.data, "tied head");
    for (int l = 0; l < a.cfg.n_layers; l++) {
        mdl_layer *x = &a.layers[l], *y = &b.layers[l];
        CHECK(same_floats(x->in_norm, y->in_norm, H) && same_floats(x->post_norm, y->post_norm, H), "layer %d norms", l);
        const wt_weight *wa[] = {&x->wq, &x->wk, &x->wv, &x->wo, &x->lin_qkv, &x->lin_z, &x->lin_b, &x->lin_a,
                                 &x->lin_out, &x->wg, &x->wu, &x->wd};
        const wt_weight *wb[] = {&y->wq, &y->wk, &y->wv, &y->wo, &y->lin_qkv, &y->lin_z, &y->lin_b, &y->lin_a,
                                 &y->lin_out, &y->wg, &y->wu, &y->wd};
        for (int k = 0; k < 12; k++) {
            if (!wb[k]->rows) continue;
            CHECK(wa[k]->dtype == WT_Q4 && wa[k]->rows == wb[k]->rows && wa[k]->cols == wb[k]->cols,
                  "layer %d matrix %d", l, k);
            double d = steps_off(wa[k], wb[k]);
            worst = d > worst ? d : worst;
        }
        if (a.cfg.linear_layer[l]) {
            int C = 2 * a.cfg.lin_k_heads * a.cfg.lin_k_dim + a.cfg.lin_v_heads * a.cfg.lin_v_dim, nv = a.cfg.lin_v_heads;
            CHECK(same_floats(x->conv_w, y->conv_w, C * a.cfg.lin_conv), "layer %d conv1d", l);
            CHECK(same_floats(x->dt_bias, y->dt_bias, nv) && same_floats(x->neg_a, y->neg_a, nv) &&
                      same_floats(x->lin_norm, y->lin_norm, a.cfg.lin_v_dim),
                  "layer %d dt_bias / A_log / gated norm", l);
        } else {
            CHECK(same_floats(x->q_norm, y->q_norm, hd) && same_floats(x->k_norm, y->k_norm, hd), "layer %d qk norms", l);
        }
    }
    CHECK(worst <= 1.5, "a matrix is %.2f quantization steps off the HF weights", worst);
    /* 4-bit group-32 weights move the logits by several units; dflash's own
     * 4-bit quantization of the HF checkpoint (quant.c) says how many */
    float d = logits_vs(&a, &b, 0);
    mdl_model c;
    float dq = INFINITY;
    if (mdl_load(&c, rp("tests/models/tiny-qwen35")) == 0) {
        if (qt_model(&c, QT_Q4, 32) == 0) dq = logits_vs(&c, &b, 0);
        mdl_free(&c);
    }
    CHECK(d <= 1.5f * dq, "last-row logits %.3g off the HF fixture, dflash's own 4-bit %.3g", d, dq);
    /* the HF checkpoint's own loading with every matrix replaced by the MLX
     * file's dequantized one (f32) and its norms rounded as mlx-lm stores
     * them: the MLX file's math through the float path, so the logits agree
     * within test_reference.c's bound (the Q4 kernel and the F32 one differ
     * only in f32 rounding) */
    b.embed = dequantized(&b, &a.embed);
    b.lm_head = b.embed;
    for (int l = 0; l < a.cfg.n_layers; l++) {
        mdl_layer *x = &a.layers[l], *y = &b.layers[l];
        wt_weight *wa[] = {&x->wq, &x->wk, &x->wv, &x->wo, &x->lin_qkv, &x->lin_z, &x->lin_b, &x->lin_a,
                           &x->lin_out, &x->wg, &x->wu, &x->wd};
        wt_weight *wb[] = {&y->wq, &y->wk, &y->wv, &y->wo, &y->lin_qkv, &y->lin_z, &y->lin_b, &y->lin_a,
                           &y->lin_out, &y->wg, &y->wu, &y->wd};
        for (int k = 0; k < 12; k++)
            if (wb[k]->rows && wa[k]->bits) *wb[k] = dequantized(&b, wa[k]);
    }
    float dd = logits_vs(&a, &b, 2);
    CHECK(dd <= 1e-3f, "logits %.3g off the dequantized float model's", dd);
    fprintf(stderr, "  tiny-qwen35-mlx-q4: matrices within %.2f steps, last-row logits within %.3g of HF's "
                    "(dflash quantize's q4: %.3g), %.2e of the dequantized float model's\n", worst, d, dq, dd);
    mdl_free(&a);
    mdl_free(&b);
    dflash_is_greedy(rp("tests/models/tiny-qwen35-mlx-q4"));
}

static void refused(const char *sub, int mlx_names, unsigned conv_mask, int shift, const char *want) {
    char dir[128];
    snprintf(dir, sizeof dir, "%s/%s", tmp, sub);
    if (write_variant("tiny-qwen35", dir, mlx_names, conv_mask, shift)) {
        CHECK(0, "write: %s", dfl_lasterr());
        return;
    }
    mdl_model m;
    int rc = mdl_load(&m, dir);
    CHECK(rc != 0 && strstr(dfl_lasterr(), want) && strstr(dfl_lasterr(), "half converted"), "%s: rc %d, '%s'", sub,
          rc, rc ? dfl_lasterr() : "");
    if (!rc) mdl_free(&m);
}

TEST(half_converted_refused) {
    /* layer 0 moved, layer 2 not (and the reverse), under either naming */
    refused("mixed1", 1, 1u, 1, "'language_model.model.layers.2.linear_attn.conv1d.weight'");
    refused("mixed2", 0, 1u << 2, 0, "'model.layers.2.linear_attn.conv1d.weight'");
    /* mlx-lm's names, HF conv1d everywhere: sanitize() never writes that */
    refused("names", 1, 0, 1, "'language_model.model.layers.0.linear_attn.conv1d.weight'");
}

int main(void) {
    const char *r = getenv("DFLASH_ROOT");
    if (r) root = r;
    if (!mkdtemp(tmp)) return 1;
    be_options bo = {.n_threads = 2};
    bi = be_cpu.open(&bo);
    kn_set_act_quant(0);
    RUN(mlx_bf16_qwen35_bit_identical);
    RUN(mlx_bf16_qwen35moe_bit_identical);
    RUN(mlx_bf16_qwen3next_bit_identical);
    RUN(mlx_q4_fixture);
    RUN(half_converted_refused);
    be_cpu.close(bi);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (getenv("KEEPTMP") == NULL && system(cmd) != 0) fprintf(stderr, "  could not remove %s\n", tmp);
    CHECK_DONE("test_mlx35");
}
