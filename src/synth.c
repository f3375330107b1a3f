/* synth.c - see synth.h. */
#include "synth.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant.h"
#include "safetensors.h"
#include "util.h"

syn_spec syn_default(void) {
    syn_spec s;
    memset(&s, 0, sizeof s);
    cfg_model *c = &s.c;
    c->arch = CFG_QWEN3;
    c->hidden = 64;
    c->inter = 128;
    c->n_layers = 2;
    c->n_heads = 4;
    c->n_kv_heads = 2;
    c->head_dim = 16;
    c->vocab = 512;
    c->eps = 1e-6f;
    c->rope_theta = 1e6;
    c->qk_norm = 1;
    c->tie_embeddings = 1;
    c->max_pos = 256;
    s.dtype = WT_BF16;
    s.scale_dtype = WT_BF16;
    s.seed = 1;
    return s;
}

typedef struct {
    uint64_t s;
} rng;

static double uniform(rng *r) {
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return ((r->s >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static float normal(rng *r) { return (float)(sqrt(-2 * log(uniform(r))) * cos(6.283185307179586 * uniform(r))); }

/* About N(0, 1) and ~20x cheaper: the sum of the four 16-bit parts of one
 * draw, centred and scaled to variance 1 (Irwin-Hall, n = 4). For the
 * experts of real-shape MoE checkpoints (30B values), where only speed is
 * measured. */
static float normal_fast(rng *r) {
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    uint64_t x = r->s;
    double sum = (double)(x & 0xffff) + (double)(x >> 16 & 0xffff) + (double)(x >> 32 & 0xffff) + (double)(x >> 48);
    return (float)((sum - 4 * 32767.5) * (1.0 / 37837.23)); /* sd of the sum: sqrt(4 * (65536^2 - 1) / 12) */
}

typedef struct {
    st_out *t;
    int n, cap;
    void **bufs;
} tensors;

static void add(tensors *ts, const char *name, st_dtype d, int ndim, int64_t d0, int64_t d1, void *data) {
    if (ts->n == ts->cap) {
        ts->cap = ts->cap ? 2 * ts->cap : 64;
        ts->t = dfl_realloc(ts->t, sizeof(st_out) * (size_t)ts->cap);
        ts->bufs = dfl_realloc(ts->bufs, sizeof(void *) * (size_t)ts->cap);
    }
    st_out *o = &ts->t[ts->n];
    o->name = dfl_strdup(name);
    o->dtype = d;
    o->ndim = ndim;
    o->shape[0] = d0;
    o->shape[1] = d1;
    o->data = data;
    ts->bufs[ts->n++] = data;
}

static st_dtype st_of(wt_dtype k) { return k == WT_F32 ? ST_F32 : k == WT_F16 ? ST_F16 : ST_BF16; }
static size_t size_of(wt_dtype k) { return k == WT_F32 ? 4 : 2; }

static void put(wt_dtype k, void *arr, size_t i, float v) {
    if (k == WT_F32) ((float *)arr)[i] = v;
    else ((uint16_t *)arr)[i] = k == WT_BF16 ? dfl_f32_to_bf16(v) : dfl_f32_to_f16(v);
}

/* Rows [a, b) of a [rows, cols] matrix of N(0, std^2), plain or
 * MLX-quantized, each row from its own generator (seeded by the matrix seed
 * and the row), so rows can be made in any order or in parallel. */
typedef struct {
    const syn_spec *s;
    uint64_t seed;
    int rows, cols;
    float std;
    uint32_t *pk;
    void *sc, *bi, *w;
    int next; /* next row block to claim (atomic) */
} mrows;

enum { MROWS_BLOCK = 64 };

static void make_rows(mrows *m, int a, int b) {
    const syn_spec *s = m->s;
    int cols = m->cols;
    float *row = dfl_malloc(sizeof(float) * (size_t)cols);
    for (int i = a; i < b; i++) {
        rng r = {(m->seed ^ ((uint64_t)i * 0xbf58476d1ce4e5b9ull)) | 1};
        for (int k = 0; k < 4; k++) uniform(&r);
        if (s->c.n_moe_layers)
            for (int j = 0; j < cols; j++) row[j] = m->std * normal_fast(&r);
        else
            for (int j = 0; j < cols; j++) row[j] = m->std * normal(&r);
        if (s->c.q_bits) {
            int bits = s->c.q_bits, g = s->c.q_group;
            size_t so = size_of(s->scale_dtype) * (size_t)i * (cols / g);
            qt_row(row, cols, bits, g, s->scale_dtype, m->pk + (size_t)i * cols * bits / 32, (char *)m->sc + so,
                   (char *)m->bi + so);
        } else {
            for (int j = 0; j < cols; j++) put(s->dtype, m->w, (size_t)i * cols + j, row[j]);
        }
    }
    free(row);
}

static void *mrows_worker(void *p) {
    mrows *m = p;
    for (;;) {
        int blk = __atomic_fetch_add(&m->next, 1, __ATOMIC_RELAXED);
        int a = blk * MROWS_BLOCK;
        if (a >= m->rows) return NULL;
        make_rows(m, a, a + MROWS_BLOCK < m->rows ? a + MROWS_BLOCK : m->rows);
    }
}

/* A [rows, cols] matrix of N(0, std^2), plain or MLX-quantized (float when
 * cols is not a multiple of the group size). Small ones draw from the
 * model's generator in order; large ones (real model shapes) are made in
 * parallel, one generator per row. */
static void matrix(tensors *ts, const syn_spec *s, rng *r, const char *base, int rows, int cols, float std) {
    char name[256];
    syn_spec sf;
    if (s->c.q_bits && cols % s->c.q_group) { /* kept float, as mlx-lm and dflash quantize keep it
                                                 (tiny-qwen35moe's 32- and 48-column down_proj at group 64) */
        sf = *s;
        sf.c.q_bits = 0;
        s = &sf;
    }
    mrows m = {s, 0, rows, cols, std, NULL, NULL, NULL, NULL, 0};
    int b = s->c.q_bits, g = s->c.q_group;
    if (b) {
        m.pk = dfl_malloc(sizeof(uint32_t) * (size_t)rows * cols * b / 32);
        m.sc = dfl_malloc(size_of(s->scale_dtype) * (size_t)rows * (cols / g));
        m.bi = dfl_malloc(size_of(s->scale_dtype) * (size_t)rows * (cols / g));
    } else {
        m.w = dfl_malloc(size_of(s->dtype) * (size_t)rows * cols);
    }
    /* expert matrices (many of them, each below the threshold) are made
     * in parallel too when the model has experts (with normal_fast) */
    size_t par = s->c.n_moe_layers ? (size_t)1 << 16 : (size_t)1 << 22;
    if ((size_t)rows * cols < par) {
        float *row = dfl_malloc(sizeof(float) * (size_t)cols);
        for (int i = 0; i < rows; i++) {
            for (int j = 0; j < cols; j++) row[j] = std * normal(r);
            if (b) {
                size_t so = size_of(s->scale_dtype) * (size_t)i * (cols / g);
                qt_row(row, cols, b, g, s->scale_dtype, m.pk + (size_t)i * cols * b / 32, (char *)m.sc + so,
                       (char *)m.bi + so);
            } else {
                for (int j = 0; j < cols; j++) put(s->dtype, m.w, (size_t)i * cols + j, row[j]);
            }
        }
        free(row);
    } else {
        m.seed = r->s;
        uniform(r);
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        int nt = n < 1 ? 1 : n > 64 ? 64 : (int)n;
        pthread_t th[64];
        int started = 0;
        for (int i = 0; i < nt; i++) started += pthread_create(&th[started], NULL, mrows_worker, &m) == 0;
        mrows_worker(&m);
        for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    }
    snprintf(name, sizeof name, "%s.weight", base);
    if (b) {
        add(ts, name, ST_U32, 2, rows, (int64_t)cols * b / 32, m.pk);
        snprintf(name, sizeof name, "%s.scales", base);
        add(ts, name, st_of(s->scale_dtype), 2, rows, cols / g, m.sc);
        snprintf(name, sizeof name, "%s.biases", base);
        add(ts, name, st_of(s->scale_dtype), 2, rows, cols / g, m.bi);
    } else {
        add(ts, name, st_of(s->dtype), 2, rows, cols, m.w);
    }
}

/* A norm weight [n]: the scale 1 + 0.2 N(0, 1); Qwen3.5 stores its norms
 * zero-centred (the model scales by 1 + w), so there it writes 0.2 N(0, 1). */
static void vec(tensors *ts, const syn_spec *s, rng *r, const char *name, int n) {
    void *w = dfl_malloc(size_of(s->dtype) * (size_t)n);
    float one = s->c.arch == CFG_QWEN3_5 && !s->c.is_draft ? 0.0f : 1.0f;
    for (int i = 0; i < n; i++) put(s->dtype, w, (size_t)i, one + 0.2f * normal(r));
    add(ts, name, st_of(s->dtype), 1, n, 0, w);
}

/* A float tensor of shape [d0], [d0, d1] or [d0, d1, d2] (unused trailing
 * dims 0), never quantized: a + b * N(0, 1), or log(U(a, b)) when lg. */
static void fvec(tensors *ts, const syn_spec *s, rng *r, const char *name, int64_t d0, int64_t d1, int64_t d2,
                 float a, float b, int lg) {
    size_t n = (size_t)d0 * (d1 ? d1 : 1) * (d2 ? d2 : 1);
    void *w = dfl_malloc(size_of(s->dtype) * n);
    for (size_t i = 0; i < n; i++) put(s->dtype, w, i, lg ? logf(a + (b - a) * (float)uniform(r)) : a + b * normal(r));
    add(ts, name, st_of(s->dtype), d2 ? 3 : d1 ? 2 : 1, d0, d1, w);
    ts->t[ts->n - 1].shape[2] = d2;
}

/* Layer l's float tensor SUB [d0, d1, d2] of N(0, std^2) (gpt-oss's
 * stacked experts, input-major): normal_fast, one generator per [d1, d2]
 * slice seeded from r, so a real shape (12 G values) takes seconds. */
static void big3(tensors *ts, const syn_spec *s, rng *r, char *b, size_t nb, const char *pre, int l, const char *sub,
                 int64_t d0, int64_t d1, int64_t d2, float std) {
    snprintf(b, nb, "%slayers.%d.%s", pre, l, sub);
    size_t n = (size_t)d1 * d2;
    void *w = dfl_malloc(size_of(s->dtype) * n * (size_t)d0);
    uint64_t seed = r->s;
    uniform(r);
    for (int64_t e = 0; e < d0; e++) {
        rng g = {(seed ^ ((uint64_t)(e + 1) * 0xbf58476d1ce4e5b9ull)) | 1};
        for (size_t i = 0; i < n; i++) put(s->dtype, w, (size_t)e * n + i, std * normal_fast(&g));
    }
    add(ts, b, st_of(s->dtype), 3, d0, d1, w);
    ts->t[ts->n - 1].shape[2] = d2;
}

/* Layer l's MXFP4 tensor SUB [d0, rows, cols] as openai's checkpoints store
 * it: SUB_blocks [d0, rows, cols/32, 16] U8 (two e2m1 codes per byte) of
 * uniform random codes, SUB_scales [d0, rows, cols/32] U8 (e8m0) of 2^(e-127)
 * with e = e0 or e0 + 1 at random, e0 chosen so that the values' spread is
 * about std (the e2m1 values' rms over uniform codes is ~2.9). One
 * generator per expert slice, as big3. */
static void mx4(tensors *ts, rng *r, char *b, size_t nb, const char *pre, int l, const char *sub, int64_t d0,
                int64_t rows, int64_t cols, float std) {
    size_t nblk = (size_t)rows * (size_t)(cols / 32);
    uint8_t *q = dfl_malloc(nblk * 16 * (size_t)d0), *sc = dfl_malloc(nblk * (size_t)d0);
    int e0 = 127 + (int)floorf(log2f(std / 2.9f) + 0.5f);
    if (e0 < 2) e0 = 2;
    if (e0 > 251) e0 = 251;
    uint64_t seed = r->s;
    uniform(r);
    for (int64_t e = 0; e < d0; e++) {
        rng g = {(seed ^ ((uint64_t)(e + 1) * 0x94d049bb133111ebull)) | 1};
        uint8_t *qe = q + (size_t)e * nblk * 16, *se = sc + (size_t)e * nblk;
        for (size_t i = 0; i < nblk; i++) {
            uniform(&g);
            uint64_t x0 = g.s;
            uniform(&g);
            uint64_t x1 = g.s;
            memcpy(qe + 16 * i, &x0, 8);
            memcpy(qe + 16 * i + 8, &x1, 8);
            se[i] = (uint8_t)(e0 + (int)(x1 >> 63));
        }
    }
    snprintf(b, nb, "%slayers.%d.%s_blocks", pre, l, sub);
    add(ts, b, ST_U8, 4, d0, rows, q);
    ts->t[ts->n - 1].shape[2] = cols / 32;
    ts->t[ts->n - 1].shape[3] = 16;
    snprintf(b, nb, "%slayers.%d.%s_scales", pre, l, sub);
    add(ts, b, ST_U8, 3, d0, rows, sc);
    ts->t[ts->n - 1].shape[2] = cols / 32;
}

static int write_json(const char *dir, const char *file, cJSON *j) {
    char *path = dfl_path_join(dir, file), *txt = cJSON_Print(j), *tmp;
    FILE *f = dfl_create_tmp(path, &tmp);
    int rc = f ? dfl_commit_tmp(f, tmp, path, fputs(txt, f) >= 0) : -1;
    free(path);
    free(txt);
    return rc;
}

static int write_config(const char *dir, const syn_spec *s) {
    const cfg_model *c = &s->c;
    cJSON *j = cJSON_CreateObject();
    int moe35 = c->arch == CFG_QWEN3_5 && c->qwen35_moe;
    const char *arch = c->is_draft              ? "DFlashDraftModel"
                       : c->arch == CFG_GEMMA4    ? "Gemma4ForCausalLM"
                       : c->arch == CFG_GPT_OSS   ? "GptOssForCausalLM"
                       : c->arch == CFG_LLAMA     ? "LlamaForCausalLM"
                       : c->arch == CFG_QWEN3_MOE ? "Qwen3MoeForCausalLM"
                       : moe35                    ? "Qwen3_5MoeForCausalLM"
                       : c->arch == CFG_QWEN3_5   ? "Qwen3_5ForCausalLM"
                                                  : "Qwen3ForCausalLM";
    cJSON *a = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString(arch));
    cJSON_AddStringToObject(j, "model_type", c->arch == CFG_GEMMA4      ? "gemma4_text"
                                             : c->arch == CFG_GPT_OSS   ? "gpt_oss"
                                             : c->arch == CFG_LLAMA     ? "llama"
                                             : c->arch == CFG_QWEN3_MOE ? "qwen3_moe"
                                             : moe35                    ? "qwen3_5_moe_text"
                                             : c->arch == CFG_QWEN3_5   ? "qwen3_5_text"
                                                                        : "qwen3");
    if (c->arch == CFG_QWEN3_5) { /* the text config as Qwen3_5TextConfig writes it (transformers 5) */
        cJSON *lt = cJSON_AddArrayToObject(j, "layer_types");
        for (int l = 0; l < c->n_layers; l++)
            cJSON_AddItemToArray(lt, cJSON_CreateString(c->linear_layer[l] ? "linear_attention" : "full_attention"));
        cJSON_AddNumberToObject(j, "linear_num_key_heads", c->lin_k_heads);
        cJSON_AddNumberToObject(j, "linear_num_value_heads", c->lin_v_heads);
        cJSON_AddNumberToObject(j, "linear_key_head_dim", c->lin_k_dim);
        cJSON_AddNumberToObject(j, "linear_value_head_dim", c->lin_v_dim);
        cJSON_AddNumberToObject(j, "linear_conv_kernel_dim", c->lin_conv);
        /* rope_theta and partial_rotary_factor live in rope_parameters (no
         * mrope_section: text positions make it plain RoPE, config.c) */
        cJSON *rp = cJSON_AddObjectToObject(j, "rope_parameters");
        cJSON_AddStringToObject(rp, "rope_type", "default");
        cJSON_AddNumberToObject(rp, "rope_theta", c->rope_theta);
        cJSON_AddNumberToObject(rp, "partial_rotary_factor", (double)c->rot_dim / c->head_dim);
    }
    if (c->arch == CFG_QWEN3_MOE) { /* moe_layer[] is written back as mlp_only_layers + decoder_sparse_step */
        cJSON_AddNumberToObject(j, "num_experts", c->n_experts);
        cJSON_AddNumberToObject(j, "num_experts_per_tok", c->n_experts_used);
        cJSON_AddNumberToObject(j, "moe_intermediate_size", c->moe_inter);
        cJSON_AddBoolToObject(j, "norm_topk_prob", c->norm_topk);
        cJSON_AddNumberToObject(j, "decoder_sparse_step", c->sparse_step);
        cJSON *mo = cJSON_AddArrayToObject(j, "mlp_only_layers");
        for (int l = 0; l < c->n_layers; l++)
            if (!c->moe_layer[l] && c->n_experts > 0 && (l + 1) % c->sparse_step == 0)
                cJSON_AddItemToArray(mo, cJSON_CreateNumber(l));
        cJSON_AddBoolToObject(j, "use_sliding_window", 0);
    }
    if (moe35) { /* Qwen3_5MoeTextConfig: every layer experts + the shared one, top-k always renormalised
                  * (no norm_topk_prob, decoder_sparse_step, mlp_only_layers, intermediate_size) */
        cJSON_AddNumberToObject(j, "num_experts", c->n_experts);
        cJSON_AddNumberToObject(j, "num_experts_per_tok", c->n_experts_used);
        cJSON_AddNumberToObject(j, "moe_intermediate_size", c->moe_inter);
        cJSON_AddNumberToObject(j, "shared_expert_intermediate_size", c->shared_inter);
    }
    if (c->arch == CFG_GPT_OSS) { /* GptOssConfig as transformers 5 writes it; rope_theta in rope_parameters */
        cJSON_AddNumberToObject(j, "num_local_experts", c->n_experts);
        cJSON_AddNumberToObject(j, "num_experts_per_tok", c->n_experts_used);
        cJSON_AddNumberToObject(j, "sliding_window", c->window);
        cJSON_AddNumberToObject(j, "swiglu_limit", c->swiglu_limit);
        cJSON *lt = cJSON_AddArrayToObject(j, "layer_types");
        for (int l = 0; l < c->n_layers; l++)
            cJSON_AddItemToArray(lt, cJSON_CreateString(c->sliding_layer[l] ? "sliding_attention" : "full_attention"));
        cJSON *rp = cJSON_AddObjectToObject(j, "rope_parameters");
        cJSON_AddStringToObject(rp, "rope_type", "yarn");
        cJSON_AddNumberToObject(rp, "factor", c->rope_factor);
        cJSON_AddNumberToObject(rp, "beta_fast", c->yarn_beta_fast);
        cJSON_AddNumberToObject(rp, "beta_slow", c->yarn_beta_slow);
        cJSON_AddBoolToObject(rp, "truncate", c->yarn_truncate);
        cJSON_AddNumberToObject(rp, "original_max_position_embeddings", c->rope_orig_max_pos);
        cJSON_AddNumberToObject(rp, "rope_theta", c->rope_theta);
    }
    if (c->arch == CFG_GEMMA4) { /* Gemma4TextConfig as transformers 5.17 writes it */
        cJSON *lt = cJSON_AddArrayToObject(j, "layer_types");
        for (int l = 0; l < c->n_layers; l++)
            cJSON_AddItemToArray(lt, cJSON_CreateString(c->sliding_layer[l] ? "sliding_attention" : "full_attention"));
        cJSON_AddNumberToObject(j, "sliding_window", c->window);
        cJSON *pl = cJSON_AddObjectToObject(j, "per_layer_config");
        for (int l = 0; l < c->n_layers; l++)
            if (c->layer_hd[l] || c->layer_kv[l]) {
                char k[16];
                snprintf(k, sizeof k, "%d", l);
                cJSON *e = cJSON_AddObjectToObject(pl, k);
                cJSON_AddNumberToObject(e, "head_dim", cfg_head_dim(c, l));
                cJSON_AddNumberToObject(e, "num_key_value_heads", cfg_kv_heads(c, l));
            }
        cJSON *rp = cJSON_AddObjectToObject(j, "rope_parameters"), *sl = cJSON_AddObjectToObject(rp, "sliding_attention");
        cJSON_AddStringToObject(sl, "rope_type", "default");
        cJSON_AddNumberToObject(sl, "rope_theta", c->rope_theta);
        cJSON *fu = cJSON_AddObjectToObject(rp, "full_attention");
        cJSON_AddStringToObject(fu, "rope_type", "proportional");
        cJSON_AddNumberToObject(fu, "partial_rotary_factor", 0.25);
        cJSON_AddNumberToObject(fu, "rope_theta", c->full_theta);
        cJSON_AddStringToObject(j, "hidden_activation", "gelu_pytorch_tanh");
        if (c->softcap > 0) cJSON_AddNumberToObject(j, "final_logit_softcapping", c->softcap);
        else cJSON_AddNullToObject(j, "final_logit_softcapping");
        cJSON_AddNumberToObject(j, "hidden_size_per_layer_input", c->ple);
        cJSON_AddNumberToObject(j, "vocab_size_per_layer_input", c->vocab);
        cJSON_AddBoolToObject(j, "attention_k_eq_v", c->k_eq_v);
        cJSON_AddNumberToObject(j, "num_kv_shared_layers", 0);
        cJSON_AddBoolToObject(j, "enable_moe_block", c->g4_moe);
        if (c->g4_moe) {
            cJSON_AddNumberToObject(j, "num_experts", c->n_experts);
            cJSON_AddNumberToObject(j, "top_k_experts", c->n_experts_used);
            cJSON_AddNumberToObject(j, "moe_intermediate_size", c->moe_inter);
        }
        cJSON_AddBoolToObject(j, "use_double_wide_mlp", 0);
    }
    cJSON_AddNumberToObject(j, "hidden_size", c->hidden);
    if (!moe35) cJSON_AddNumberToObject(j, "intermediate_size", c->inter);
    cJSON_AddNumberToObject(j, "num_hidden_layers", c->n_layers);
    cJSON_AddNumberToObject(j, "num_attention_heads", c->n_heads);
    cJSON_AddNumberToObject(j, "num_key_value_heads", c->n_kv_heads);
    cJSON_AddNumberToObject(j, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(j, "vocab_size", c->vocab);
    cJSON_AddNumberToObject(j, "rms_norm_eps", c->eps);
    if (c->arch != CFG_QWEN3_5 && c->arch != CFG_GPT_OSS && c->arch != CFG_GEMMA4)
        cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(j, "max_position_embeddings", c->max_pos);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tie_embeddings);
    cJSON_AddBoolToObject(j, "attention_bias", c->attn_bias);
    if (c->arch != CFG_GEMMA4) cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddStringToObject(j, "torch_dtype", s->dtype == WT_F32 ? "float32" : s->dtype == WT_F16 ? "float16" : "bfloat16");
    if (s->mxfp4) {
        cJSON *q = cJSON_AddObjectToObject(j, "quantization_config");
        cJSON_AddStringToObject(q, "quant_method", "mxfp4");
    }
    if (c->q_bits) {
        cJSON *q = cJSON_AddObjectToObject(j, "quantization");
        cJSON_AddNumberToObject(q, "group_size", c->q_group);
        cJSON_AddNumberToObject(q, "bits", c->q_bits);
        for (int l = 0; s->router_bits && l < c->n_layers; l++)
            if (c->moe_layer[l]) {
                char k[64];
                snprintf(k, sizeof k, "model.layers.%d.mlp.gate", l);
                cJSON *e = cJSON_AddObjectToObject(q, k);
                cJSON_AddNumberToObject(e, "group_size", 64);
                cJSON_AddNumberToObject(e, "bits", s->router_bits);
            }
    }
    if (c->is_draft) {
        cJSON_AddNumberToObject(j, "block_size", c->block_size);
        cJSON_AddNumberToObject(j, "num_target_layers", c->n_target_layers);
        cJSON *d = cJSON_AddObjectToObject(j, "dflash_config");
        cJSON_AddNumberToObject(d, "mask_token_id", c->mask_token_id);
        cJSON *ids = cJSON_AddArrayToObject(d, "target_layer_ids");
        for (int i = 0; i < c->n_taps; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(c->tap_layers[i]));
    }
    int rc = write_json(dir, "config.json", j);
    cJSON_Delete(j);
    if (rc || c->is_draft) return rc;
    j = cJSON_CreateObject();
    cJSON *e = cJSON_AddArrayToObject(j, "eos_token_id");
    for (int i = 0; i < c->n_eos; i++) cJSON_AddItemToArray(e, cJSON_CreateNumber(c->eos_ids[i]));
    rc = write_json(dir, "generation_config.json", j);
    cJSON_Delete(j);
    return rc;
}

/* Bytes of a [rows, cols] matrix as syn_write stores it. */
static double mat_bytes(const syn_spec *s, int rows, int cols) {
    if (s->c.q_bits) return (double)rows * cols * (s->c.q_bits / 8.0 + 2.0 * size_of(s->scale_dtype) / s->c.q_group);
    return (double)rows * cols * size_of(s->dtype);
}

/* Large checkpoints (real shapes: a 30B-A3B is 17 GB at 4 bits) are written
 * a shard at a time, each shard's buffers freed once it is on disk, so the
 * memory synth needs is one shard's, not the model's. */
enum { SHARD_BYTES = 1 << 30 };
typedef struct {
    dfl_stage *sg; /* shards are staged files (dfl_stage_file) */
    int next, n;   /* next shard number (1-based), shard count */
    cJSON *wm;     /* the index's weight_map */
} shards;

static void tensors_free(tensors *ts) {
    for (int i = 0; i < ts->n; i++) {
        free((void *)ts->t[i].name);
        free(ts->bufs[i]);
    }
    ts->n = 0;
}

static int flush_shard(shards *sh, tensors *ts) {
    char fn[64];
    snprintf(fn, sizeof fn, "model-%05d-of-%05d.safetensors", sh->next++, sh->n);
    char *p = dfl_stage_file(sh->sg, fn);
    int rc = st_write(p, ts->t, ts->n, sh->next == 2 ? "{\"format\": \"pt\"}" : NULL);
    free(p);
    for (int i = 0; i < ts->n; i++) cJSON_AddStringToObject(sh->wm, ts->t[i].name, fn);
    tensors_free(ts);
    return rc;
}

/* Write the checkpoint's files into the staging directory of sg. */
static int write_model(dfl_stage *sg, const syn_spec *s) {
    const cfg_model *c = &s->c;
    const char *dir = sg->stage;
    free(dfl_stage_file(sg, "config.json")); /* write_config writes them into dir */
    if (!c->is_draft) free(dfl_stage_file(sg, "generation_config.json"));
    if (write_config(dir, s)) return -1;
    rng r = {s->seed * 0x9e3779b97f4a7c15ull + 12345};
    tensors ts = {0};
    int H = c->hidden, hd = c->head_dim, q = c->n_heads * hd, kv = c->n_kv_heads * hd;
    const char *pre = c->is_draft ? "" : "model.";
    char name[256];
    float sh = 1.0f / sqrtf((float)H), sq = 1.0f / sqrtf((float)q), si = 1.0f / sqrtf((float)c->inter);
    if (c->is_draft) {
        matrix(&ts, s, &r, "fc", H, c->n_taps * H, 1.0f / sqrtf((float)(c->n_taps * H)));
        vec(&ts, s, &r, "hidden_norm.weight", H);
    } else {
        snprintf(name, sizeof name, "%sembed_tokens", pre);
        matrix(&ts, s, &r, name, c->vocab, H, 1.0f);
        if (!c->tie_embeddings) matrix(&ts, s, &r, "lm_head", c->vocab, H, sh);
    }
    snprintf(name, sizeof name, "%snorm.weight", pre);
    vec(&ts, s, &r, name, H);
    if (c->arch == CFG_GEMMA4 && c->ple) { /* per-layer inputs (model.c) */
        int LP = c->n_layers * c->ple;
        snprintf(name, sizeof name, "%sembed_tokens_per_layer", pre);
        matrix(&ts, s, &r, name, c->vocab, LP, 1.0f);
        snprintf(name, sizeof name, "%sper_layer_model_projection", pre);
        matrix(&ts, s, &r, name, LP, H, sh);
        snprintf(name, sizeof name, "%sper_layer_projection_norm.weight", pre);
        vec(&ts, s, &r, name, c->ple);
    }
    if (s->layer_scale > 0) sh *= s->layer_scale, sq *= s->layer_scale, si *= s->layer_scale;
    /* Qwen3.5: gated q_proj (query + output gate per head); Gated DeltaNet
     * widths: conv channels C = q, k, v of in_proj_qkv, vd = value width */
    int qr = c->attn_gate ? 2 * q : q, nv = c->lin_v_heads, vd = nv * c->lin_v_dim;
    int C = 2 * c->lin_k_heads * c->lin_k_dim + vd;
    /* a layer's bytes (the largest kind of layer) decide the shards */
    double att = mat_bytes(s, qr, H) + 2 * mat_bytes(s, kv, H) + mat_bytes(s, H, q);
    double lin = c->n_linear_layers ? mat_bytes(s, C, H) + mat_bytes(s, vd, H) + 2 * mat_bytes(s, nv, H) +
                                          mat_bytes(s, H, vd)
                                    : 0;
    double lb = (att > lin ? att : lin) +
                (c->n_moe_layers ? mat_bytes(s, c->n_experts, H) +
                                       3.0 * c->n_experts * mat_bytes(s, c->moe_inter, H) * (s->mxfp4 ? 17.0 / 64 : 1) +
                                       (c->shared_inter ? 3 * mat_bytes(s, c->shared_inter, H) : 0) +
                                       (c->g4_moe ? 3 * mat_bytes(s, c->inter, H) : 0)
                                 : 3 * mat_bytes(s, c->inter, H));
    double head = mat_bytes(s, c->vocab, H) * (c->is_draft ? 0 : c->tie_embeddings ? 1 : 2);
    int per = lb >= SHARD_BYTES ? 1 : (int)(SHARD_BYTES / lb);
    shards out = {sg, 1, 0, NULL};
    int stream = head + lb * c->n_layers > 2.0 * SHARD_BYTES, rc = 0;
    if (stream) {
        out.n = 1 + (c->n_layers + per - 1) / per;
        out.wm = cJSON_CreateObject();
        rc = flush_shard(&out, &ts);
    }
    for (int l = 0; l < c->n_layers && rc == 0; l++) {
        char b[224];
        hd = cfg_head_dim(c, l), q = c->n_heads * hd, kv = cfg_kv_heads(c, l) * hd, qr = c->attn_gate ? 2 * q : q;
        sq = (s->layer_scale > 0 ? s->layer_scale : 1.0f) / sqrtf((float)q);
#define M(sub, rows, cols, std) snprintf(b, sizeof b, "%slayers.%d.%s", pre, l, sub), matrix(&ts, s, &r, b, rows, cols, std)
#define V(sub, n) snprintf(b, sizeof b, "%slayers.%d.%s.weight", pre, l, sub), vec(&ts, s, &r, b, n)
#define F(sub, d0, d1, d2, x, y, lg) snprintf(b, sizeof b, "%slayers.%d.%s", pre, l, sub), fvec(&ts, s, &r, b, d0, d1, d2, x, y, lg)
        if (c->linear_layer[l]) { /* Gated DeltaNet (model.c bind_linear_attn) */
            float sv = (s->layer_scale > 0 ? s->layer_scale : 1.0f) / sqrtf((float)vd);
            M("linear_attn.in_proj_qkv", C, H, sh);
            M("linear_attn.in_proj_z", vd, H, sh);
            M("linear_attn.in_proj_b", nv, H, sh);
            M("linear_attn.in_proj_a", nv, H, sh);
            M("linear_attn.out_proj", H, vd, sv);
            /* conv [C, 1, K] (the Hugging Face layout), std 1/sqrt(K); the
             * decay rates A = exp(A_log) in 0.5..4; the gated norm inside
             * the mixer scales by w itself (not 1 + w) */
            F("linear_attn.conv1d.weight", C, 1, c->lin_conv, 0.0f, 1.0f / sqrtf((float)c->lin_conv), 0);
            F("linear_attn.dt_bias", nv, 0, 0, 0.0f, 0.5f, 0);
            F("linear_attn.A_log", nv, 0, 0, 0.5f, 4.0f, 1);
            F("linear_attn.norm.weight", c->lin_v_dim, 0, 0, 1.0f, 0.2f, 0);
        } else {
            M("self_attn.q_proj", qr, H, sh);
            M("self_attn.k_proj", kv, H, sh);
            if (!(c->k_eq_v && !c->sliding_layer[l])) M("self_attn.v_proj", kv, H, sh);
            M("self_attn.o_proj", H, q, sq);
        }
        if (c->arch == CFG_GPT_OSS) { /* model.c bind_gptoss_experts; biases scaled with the layers */
            float ls = s->layer_scale > 0 ? s->layer_scale : 1.0f, sm = ls / sqrtf((float)c->moe_inter);
            int64_t E = c->n_experts, I = c->moe_inter;
            F("self_attn.q_proj.bias", q, 0, 0, 0.0f, 0.5f, 0);
            F("self_attn.k_proj.bias", kv, 0, 0, 0.0f, 0.5f, 0);
            F("self_attn.v_proj.bias", kv, 0, 0, 0.0f, 0.5f * ls, 0);
            F("self_attn.o_proj.bias", H, 0, 0, 0.0f, 0.1f * ls, 0);
            F("self_attn.sinks", c->n_heads, 0, 0, 0.0f, 1.0f, 0);
            M("mlp.router", c->n_experts, H, sh);
            F("mlp.router.bias", E, 0, 0, 0.0f, 0.5f, 0);
            if (s->mxfp4) mx4(&ts, &r, b, sizeof b, pre, l, "mlp.experts.gate_up_proj", E, 2 * I, H, sh);
            else big3(&ts, s, &r, b, sizeof b, pre, l, "mlp.experts.gate_up_proj", E, H, 2 * I, sh);
            F("mlp.experts.gate_up_proj_bias", E, 2 * I, 0, 0.0f, 0.5f, 0);
            if (s->mxfp4) mx4(&ts, &r, b, sizeof b, pre, l, "mlp.experts.down_proj", E, H, I, sm);
            else big3(&ts, s, &r, b, sizeof b, pre, l, "mlp.experts.down_proj", E, I, H, sm);
            F("mlp.experts.down_proj_bias", E, H, 0, 0.0f, 0.1f * ls, 0);
        } else if (c->g4_moe) { /* model.c bind_gemma4_experts: the dense MLP, the router, the experts [E, 2I, H] / [E, H, I] */
            float sm = (s->layer_scale > 0 ? s->layer_scale : 1.0f) / sqrtf((float)c->moe_inter);
            int64_t E = c->n_experts, I = c->moe_inter;
            M("mlp.gate_proj", c->inter, H, sh);
            M("mlp.up_proj", c->inter, H, sh);
            M("mlp.down_proj", H, c->inter, si);
            M("router.proj", c->n_experts, H, sh);
            F("router.scale", H, 0, 0, 1.0f, 0.2f, 0);
            F("router.per_expert_scale", E, 0, 0, 1.0f, 0.2f, 0);
            big3(&ts, s, &r, b, sizeof b, pre, l, "experts.gate_up_proj", E, 2 * I, H, sh);
            big3(&ts, s, &r, b, sizeof b, pre, l, "experts.down_proj", E, H, I, sm);
        } else if (c->moe_layer[l]) {
            float sm = (s->layer_scale > 0 ? s->layer_scale : 1.0f) / sqrtf((float)c->moe_inter);
            if (s->router_bits && c->q_bits) {
                syn_spec s8 = *s;
                s8.c.q_bits = s->router_bits;
                s8.c.q_group = 64;
                snprintf(b, sizeof b, "%slayers.%d.mlp.gate", pre, l);
                matrix(&ts, &s8, &r, b, c->n_experts, H, sh);
            } else {
                M("mlp.gate", c->n_experts, H, sh);
            }
            for (int e = 0; e < c->n_experts; e++) {
                char sub[64];
                snprintf(sub, sizeof sub, "mlp.experts.%d.gate_proj", e);
                M(sub, c->moe_inter, H, sh);
                snprintf(sub, sizeof sub, "mlp.experts.%d.up_proj", e);
                M(sub, c->moe_inter, H, sh);
                snprintf(sub, sizeof sub, "mlp.experts.%d.down_proj", e);
                M(sub, H, c->moe_inter, sm);
            }
            if (c->shared_inter) { /* Qwen3.5-MoE: the shared expert, and its sigmoid gate [1, H] (float) */
                float ss = (s->layer_scale > 0 ? s->layer_scale : 1.0f) / sqrtf((float)c->shared_inter);
                M("mlp.shared_expert.gate_proj", c->shared_inter, H, sh);
                M("mlp.shared_expert.up_proj", c->shared_inter, H, sh);
                M("mlp.shared_expert.down_proj", H, c->shared_inter, ss);
                F("mlp.shared_expert_gate.weight", 1, H, 0, 0.0f, sh, 0);
            }
        } else {
            M("mlp.gate_proj", c->inter, H, sh);
            M("mlp.up_proj", c->inter, H, sh);
            M("mlp.down_proj", H, c->inter, si);
        }
        V("input_layernorm", H);
        if (c->arch == CFG_GEMMA4) { /* the sandwich norms, the output ones scaled by layer_scale (synth.h) */
            float ls = s->layer_scale > 0 ? s->layer_scale : 1.0f;
            F("post_attention_layernorm.weight", H, 0, 0, ls, 0.2f * ls, 0);
            V("pre_feedforward_layernorm", H);
            F("post_feedforward_layernorm.weight", H, 0, 0, ls, 0.2f * ls, 0);
            F("layer_scalar", 1, 0, 0, 1.0f, 0.1f, 0);
            if (c->g4_moe) { /* the expert block's own norms: its input, both outputs */
                V("pre_feedforward_layernorm_2", H);
                F("post_feedforward_layernorm_1.weight", H, 0, 0, ls, 0.2f * ls, 0);
                F("post_feedforward_layernorm_2.weight", H, 0, 0, ls, 0.2f * ls, 0);
            }
            if (c->ple) {
                M("per_layer_input_gate", c->ple, H, sh);
                M("per_layer_projection", H, c->ple, 1.0f / sqrtf((float)c->ple));
                F("post_per_layer_input_norm.weight", H, 0, 0, ls, 0.2f * ls, 0);
            }
        } else {
            V("post_attention_layernorm", H);
        }
        if (c->qk_norm && !c->linear_layer[l]) {
            V("self_attn.q_norm", hd);
            V("self_attn.k_norm", hd);
        }
#undef M
#undef V
#undef F
        if (stream && ((l + 1) % per == 0 || l == c->n_layers - 1)) rc = flush_shard(&out, &ts);
    }
    if (stream) {
        if (rc == 0) {
            cJSON *idx = cJSON_CreateObject();
            cJSON_AddItemToObject(idx, "weight_map", out.wm);
            free(dfl_stage_file(sg, "model.safetensors.index.json"));
            rc = write_json(dir, "model.safetensors.index.json", idx);
            cJSON_Delete(idx);
            dfl_stage_drop(sg, "model.safetensors"); /* a stale single file would confuse */
        } else {
            cJSON_Delete(out.wm);
        }
    } else if (!s->sharded) {
        char *p = dfl_stage_file(sg, "model.safetensors");
        rc = st_write(p, ts.t, ts.n, "{\"format\": \"pt\"}");
        free(p);
        dfl_stage_drop(sg, "model.safetensors.index.json"); /* a stale index would win */
    } else { /* two shards: first half of the tensors, second half */
        cJSON *idx = cJSON_CreateObject(), *wm = cJSON_AddObjectToObject(idx, "weight_map");
        int half = ts.n / 2;
        for (int k = 0; k < 2 && rc == 0; k++) {
            char fn[64];
            snprintf(fn, sizeof fn, "model-%05d-of-00002.safetensors", k + 1);
            char *p = dfl_stage_file(sg, fn);
            int a = k ? half : 0, e = k ? ts.n : half;
            rc = st_write(p, ts.t + a, e - a, NULL);
            for (int i = a; i < e; i++) cJSON_AddStringToObject(wm, ts.t[i].name, fn);
            free(p);
        }
        free(dfl_stage_file(sg, "model.safetensors.index.json"));
        if (rc == 0) rc = write_json(dir, "model.safetensors.index.json", idx);
        cJSON_Delete(idx);
    }
    tensors_free(&ts);
    free(ts.t);
    free(ts.bufs);
    return rc;
}

int syn_write(const char *dir, const syn_spec *s) {
    dfl_stage sg;
    if (dfl_stage_open(&sg, dir) != 0) return -1;
    if (write_model(&sg, s) != 0) {
        dfl_stage_abort(&sg);
        return -1;
    }
    return dfl_stage_commit(&sg);
}

void syn_gptoss(cfg_model *c, int window) {
    c->arch = CFG_GPT_OSS;
    c->qk_norm = 0;
    c->attn_bias = 1;
    c->attn_sinks = 1;
    c->window = window;
    c->swiglu_limit = 7.0f;
    c->rope_theta = 150000;
    c->rope_yarn = 1;
    c->rope_factor = 32;
    c->yarn_beta_fast = 32;
    c->yarn_beta_slow = 1;
    c->yarn_truncate = 0;
    c->rope_orig_max_pos = 4096;
    c->yarn_attn_factor = 0.1 * log(32.0) + 1.0;
    c->n_sliding_layers = 0;
    for (int l = 0; l < c->n_layers; l++) {
        c->sliding_layer[l] = l % 2 == 0;
        c->n_sliding_layers += c->sliding_layer[l];
        c->moe_layer[l] = 1;
    }
    c->n_moe_layers = c->n_layers;
    c->sparse_step = 1;
    if (!c->n_experts) c->n_experts = 4, c->n_experts_used = 2;
    c->moe_inter = c->inter;
}

void syn_gemma4(cfg_model *c, int window, int hd_full, int kv_full, int k_eq_v, int ple) {
    c->arch = CFG_GEMMA4;
    c->qk_norm = 1;
    c->v_norm = 1;
    c->geglu = 1;
    c->attn_scale = 1.0f;
    c->attn_bias = 0;
    c->window = window;
    c->rope_theta = 1e4;
    c->full_theta = 1e6;
    c->full_factor = 1.0;
    c->full_rot = hd_full / 8; /* partial_rotary_factor 0.25 of hd_full / 2 pairs */
    c->softcap = 30.0f;
    c->ple = ple;
    c->k_eq_v = k_eq_v;
    c->n_sliding_layers = 0;
    for (int l = 0; l < c->n_layers; l++) {
        c->sliding_layer[l] = (l + 1) % 6 != 0 && l != c->n_layers - 1;
        c->n_sliding_layers += c->sliding_layer[l];
        c->layer_hd[l] = c->sliding_layer[l] || hd_full == c->head_dim ? 0 : (unsigned short)hd_full;
        c->layer_kv[l] = c->sliding_layer[l] || !kv_full || kv_full == c->n_kv_heads ? 0 : (unsigned short)kv_full;
    }
}

/* ---- dflash_synth (public API) ------------------------------------------- */
#include <limits.h>

#include "dflash.h"

int syn_shape(const char *shape, int draft, int bits, syn_spec *out) {
    static const struct {
        const char *name;
        int hidden, inter, layers, heads, kv, hd;
        /* experts: every layer's MLP the expert block (inter then only the
         * draft's MLP width); qwen3_moe (norm_topk_prob true), or with lk > 0
         * qwen3_5_moe_text (top-k renormalised, plus a shared expert of
         * width shared with its sigmoid gate) */
        int experts, used, moe_inter, shared;
        /* qwen3_5_text (lk > 0): Gated DeltaNet layers with full attention
         * every 4th (layers 3, 7, ...), gated q_proj, partial_rotary_factor
         * 0.25, vocab 248320, theta 1e7; lk/lv key/value heads of ldk/ldv
         * dims, conv kernel 4; untied: a separate lm_head */
        int lk, lv, ldk, ldv, untied;
        /* gpt_oss (window > 0): sliding window on layers 0, 2, ..., sinks,
         * biases, YaRN (factor 32 from 4096, theta 150000), every layer's
         * MLP the expert block (moe_inter = inter), o200k_harmony's vocab
         * 201088, untied */
        int window;
        /* gemma4_text (gwin > 0): every 6th layer full attention with heads
         * of ghd and gkv kv heads (their keys as values when keqv), the rest
         * sliding with window gwin; per-layer inputs of ple; vocab 262144,
         * tied, softcapping 30 */
        int gwin, ghd, gkv, keqv, ple;
    } shapes[] = {
        {"qwen3-0.6b", 1024, 3072, 28, 16, 8, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"qwen3-1.7b", 2048, 6144, 28, 16, 8, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"qwen3-4b", 2560, 9728, 36, 32, 8, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"qwen3-30b-a3b", 2048, 6144, 48, 32, 4, 128, 128, 8, 768, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, /* Qwen3-30B-A3B / Qwen3-Coder-30B-A3B */
        {"qwen3.5-0.8b", 1024, 3584, 24, 8, 2, 256, 0, 0, 0, 0, 16, 16, 128, 128, 0, 0, 0, 0, 0, 0, 0},
        {"qwen3.5-4b", 2560, 9216, 32, 16, 4, 256, 0, 0, 0, 0, 16, 32, 128, 128, 0, 0, 0, 0, 0, 0, 0},
        {"qwen3.5-9b", 4096, 12288, 32, 16, 4, 256, 0, 0, 0, 0, 16, 32, 128, 128, 1, 0, 0, 0, 0, 0, 0},
        {"qwen3.5-35b-a3b", 2048, 6144, 40, 16, 2, 256, 256, 8, 512, 512, 16, 32, 128, 128, 1, 0, 0, 0, 0, 0, 0}, /* Qwen3.5/3.6-35B-A3B */
        {"tiny", 64, 128, 4, 4, 2, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"tiny-moe", 64, 128, 4, 4, 2, 16, 8, 2, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"tiny-qwen35", 64, 128, 4, 4, 2, 16, 0, 0, 0, 0, 2, 4, 16, 16, 0, 0, 0, 0, 0, 0, 0},
        {"tiny-qwen35moe", 64, 128, 4, 4, 2, 16, 8, 2, 32, 48, 2, 4, 16, 16, 0, 0, 0, 0, 0, 0, 0},
        {"gpt-oss-20b", 2880, 2880, 24, 64, 8, 64, 32, 4, 2880, 0, 0, 0, 0, 0, 1, 128, 0, 0, 0, 0, 0},
        {"gpt-oss-120b", 2880, 2880, 36, 64, 8, 64, 128, 4, 2880, 0, 0, 0, 0, 0, 1, 128, 0, 0, 0, 0, 0},
        {"tiny-gptoss", 64, 128, 4, 4, 2, 16, 4, 2, 128, 0, 0, 0, 0, 0, 1, 8, 0, 0, 0, 0, 0},
        /* gemma-4-31B(-it) as its config reports it: 60 layers, 32 q / 16 kv
         * heads of 256 on sliding layers (window 1024), 4 kv heads of 512 on
         * the full ones with attention_k_eq_v, no per-layer inputs */
        {"gemma-4-31b", 5376, 21504, 60, 32, 16, 256, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1024, 512, 4, 1, 0},
        /* gemma-4-26B-A4B(-it): its config.json's text_config (the Hugging
         * Face file is not reachable here; these values as several public
         * repositories quote it, in agreement): hidden_size 2816,
         * intermediate_size 2112 (the dense MLP beside the experts),
         * num_hidden_layers 30, num_attention_heads 16, num_key_value_heads
         * 8, head_dim 256, sliding_window 1024, layer_types 5 sliding : 1
         * full, global_head_dim 512 with num_global_key_value_heads 2,
         * attention_k_eq_v true, enable_moe_block true, num_experts 128,
         * top_k_experts 8, moe_intermediate_size 704,
         * hidden_size_per_layer_input 0 (none), num_kv_shared_layers 0,
         * vocab_size 262144, final_logit_softcapping 30, RoPE as
         * gemma-4-31B's. Google's model card: 25.2B parameters, 3.8B active
         * (test_model synth_gemma4_moe checks this table against both) */
        {"gemma-4-26b-a4b", 2816, 2112, 30, 16, 8, 256, 128, 8, 704, 0, 0, 0, 0, 0, 0, 0, 1024, 512, 2, 1, 0},
        /* tests/models/tiny-gemma4's shape */
        {"tiny-gemma4", 64, 128, 6, 4, 2, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 32, 0, 0, 8},
        /* tests/models/tiny-gemma4-moe's: tiny-gemma4 with 4 experts, top 2, of 32 */
        {"tiny-gemma4-moe", 64, 128, 6, 4, 2, 16, 4, 2, 32, 0, 0, 0, 0, 0, 0, 0, 8, 32, 0, 0, 8},
    };
    int k = -1;
    for (int i = 0; i < (int)(sizeof shapes / sizeof shapes[0]); i++)
        if (!strcmp(shapes[i].name, shape)) k = i;
    if (k < 0) {
        dfl_seterr("unknown shape '%s' (qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-30b-a3b, qwen3.5-0.8b, qwen3.5-4b, "
                   "qwen3.5-9b, qwen3.5-35b-a3b, gpt-oss-20b, gpt-oss-120b, gemma-4-31b, gemma-4-26b-a4b, tiny, "
                   "tiny-moe, tiny-qwen35, tiny-qwen35moe, tiny-gptoss, tiny-gemma4, tiny-gemma4-moe)",
                   shape);
        return -1;
    }
    if (bits != 0 && bits != 4 && bits != 8) {
        dfl_seterr("bits must be 0 (bf16), 4 or 8, not %d", bits);
        return -1;
    }
    int g4 = shapes[k].gwin > 0;
    if (g4 && shapes[k].experts && bits && !draft) { /* as model.c: MLX-quantized Gemma-4 experts are refused */
        dfl_seterr("shape %s: --bits %d is not supported for Gemma-4's experts (write BF16 and load it with "
                   "--quant q8|q4)", shape, bits);
        return -1;
    }
    syn_spec s = syn_default();
    cfg_model *c = &s.c;
    c->hidden = shapes[k].hidden;
    c->inter = shapes[k].inter;
    c->n_layers = shapes[k].layers;
    c->n_heads = shapes[k].heads;
    c->n_kv_heads = shapes[k].kv;
    c->head_dim = shapes[k].hd;
    c->vocab = 151936;
    c->max_pos = 40960;
    c->q_bits = bits;
    c->q_group = bits ? (c->hidden % 64 ? 32 : 64) : 0;
    c->n_eos = 2;
    c->eos_ids[0] = 151645;
    c->eos_ids[1] = 151643;
    int q35 = shapes[k].lk > 0;
    if (q35) { /* the Qwen3.5 tokenizer: <|im_end|> 248046, <|endoftext|> 248044 */
        c->vocab = 248320;
        c->max_pos = 262144;
        c->rope_theta = 1e7;
        c->eos_ids[0] = 248046;
        c->eos_ids[1] = 248044;
        c->tie_embeddings = !shapes[k].untied;
    }
    if (q35 && !draft) {
        c->arch = CFG_QWEN3_5;
        c->attn_gate = 1;
        c->rot_dim = c->head_dim / 4;
        c->lin_k_heads = shapes[k].lk;
        c->lin_v_heads = shapes[k].lv;
        c->lin_k_dim = shapes[k].ldk;
        c->lin_v_dim = shapes[k].ldv;
        c->lin_conv = 4;
        for (int l = 0; l < c->n_layers; l++) {
            c->linear_layer[l] = (l + 1) % 4 != 0;
            c->n_linear_layers += c->linear_layer[l];
        }
    }
    int oss = shapes[k].window > 0;
    if (oss && bits == 8) { /* as dflash quantize: its 3-D experts have no MLX layout here */
        dfl_seterr("shape %s: --bits 8 is not supported for gpt-oss (--bits 4 writes MXFP4 experts as openai "
                   "ships them; or write BF16 and load it with --quant q8|q4)", shape);
        return -1;
    }
    if (oss && bits == 4 && !draft) { /* MXFP4 experts, the rest BF16 (openai's layout) */
        s.mxfp4 = 1;
        c->q_bits = 0;
        c->q_group = 0;
    }
    if (oss) { /* o200k_harmony: <|return|> 200002, <|call|> 200012, <|endoftext|> 199999 */
        c->vocab = 201088;
        c->max_pos = 131072;
        c->eos_ids[0] = 200002;
        c->eos_ids[1] = 200012;
        c->tie_embeddings = 0;
    }
    if (oss && !draft) syn_gptoss(c, shapes[k].window);
    if (g4) { /* Gemma's tokenizer: <eos> 1, <end_of_turn> 106 (Gemma 3's ids) */
        c->vocab = 262144;
        c->max_pos = 262144;
        c->eos_ids[0] = 1;
        c->eos_ids[1] = 106;
        c->tie_embeddings = 1;
    }
    if (g4 && !draft) syn_gemma4(c, shapes[k].gwin, shapes[k].ghd, shapes[k].gkv, shapes[k].keqv, shapes[k].ple);
    if (shapes[k].experts && !draft && g4) { /* enable_moe_block: every layer, beside the dense MLP */
        c->n_experts = shapes[k].experts;
        c->n_experts_used = shapes[k].used;
        c->moe_inter = shapes[k].moe_inter;
        c->norm_topk = 1;
        c->g4_moe = 1;
        c->sparse_step = 1;
        c->n_moe_layers = c->n_layers;
        for (int l = 0; l < c->n_layers; l++) c->moe_layer[l] = 1;
    } else if (shapes[k].experts && !draft && oss) {
        c->n_experts = shapes[k].experts;
        c->n_experts_used = shapes[k].used;
        c->moe_inter = shapes[k].moe_inter;
    } else if (shapes[k].experts && !draft) {
        c->arch = q35 ? CFG_QWEN3_5 : CFG_QWEN3_MOE;
        c->n_experts = shapes[k].experts;
        c->n_experts_used = shapes[k].used;
        c->moe_inter = shapes[k].moe_inter;
        c->norm_topk = 1;
        c->sparse_step = 1;
        c->n_moe_layers = c->n_layers;
        for (int l = 0; l < c->n_layers; l++) c->moe_layer[l] = 1;
        if (q35) { /* Qwen3.5-MoE: the shared expert; tied as the table says */
            c->qwen35_moe = 1;
            c->shared_inter = shapes[k].shared;
            c->inter = c->shared_inter; /* as config.c sets it (no intermediate_size) */
        } else {
            c->tie_embeddings = 0;
        }
    }
    if (draft) {
        c->is_draft = 1;
        c->n_target_layers = c->n_layers;
        c->n_layers = shapes[k].layers >= 5 ? 5 : 2;
        c->block_size = 16;
        /* Qwen3.5: the last id, as tiny-qwen35-draft; Gemma: <mask> 4 (Gemma 3's id) */
        c->mask_token_id = q35 ? c->vocab - 1 : g4 ? 4 : 151669;
        c->n_taps = c->n_layers;
        cfg_default_taps(c->n_target_layers, c->n_layers, c->tap_layers);
        c->tie_embeddings = 0;
        s.seed = 2;
    }
    *out = s;
    return 0;
}

void syn_count(const cfg_model *c, double *params, double *active) {
    double H = c->hidden, p = 0, a = 0;
    for (int l = 0; l < c->n_layers; l++) {
        double hd = cfg_head_dim(c, l), q = c->n_heads * hd, kv = cfg_kv_heads(c, l) * hd, lp;
        if (c->linear_layer[l]) {
            double vd = (double)c->lin_v_heads * c->lin_v_dim, C = 2.0 * c->lin_k_heads * c->lin_k_dim + vd;
            lp = (C + 2 * c->lin_v_heads) * H + 2 * vd * H;
        } else {
            lp = ((c->attn_gate ? 2 : 1) * q + q) * H + (c->k_eq_v && !c->sliding_layer[l] ? 1 : 2) * kv * H;
        }
        double dense = 3.0 * c->inter * H, ex = 0, exa = 0;
        if (c->moe_layer[l] && c->n_experts) {
            ex = 3.0 * c->n_experts * c->moe_inter * H;
            exa = ex / c->n_experts * c->n_experts_used;
            lp += c->n_experts * H; /* the router */
            if (!c->g4_moe) dense = c->shared_inter ? 3.0 * c->shared_inter * H : 0;
        }
        if (c->ple) lp += 2.0 * c->ple * H;
        p += lp + dense + ex;
        a += lp + dense + exa;
    }
    double emb = (double)c->vocab * H, ple = c->ple ? (double)c->vocab * c->ple * c->n_layers : 0;
    p += emb * (c->tie_embeddings ? 1 : 2) + ple;
    a += emb + (c->tie_embeddings ? 0 : H) + (ple ? c->ple * c->n_layers : 0);
    *params = p;
    *active = a;
}

int dflash_synth(const char *shape, int draft, int bits, const char *tokenizer_dir, const char *out_dir) {
    syn_spec s;
    if (syn_shape(shape, draft, bits, &s) != 0) return -1;
    /* the tokenizer is checked before anything is written */
    char real[PATH_MAX];
    static const char *tok_files[] = {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"};
    if (!draft && tokenizer_dir) {
        if (dfl_same_file(tokenizer_dir, out_dir)) { /* would replace the tokenizer */
            dfl_seterr("output directory %s is the tokenizer directory %s: choose another -o", out_dir,
                       tokenizer_dir);
            return -1;
        }
        if (!realpath(tokenizer_dir, real)) {
            dfl_seterr("--tokenizer %s: %s", tokenizer_dir, strerror(errno));
            return -1;
        }
        char *tj = dfl_path_join(real, tok_files[0]);
        int have = dfl_file_exists(tj);
        free(tj);
        if (!have) {
            dfl_seterr("--tokenizer %s: no tokenizer.json in it", tokenizer_dir);
            return -1;
        }
    }
    dfl_stage sg;
    if (dfl_stage_open(&sg, out_dir) != 0) return -1;
    if (write_model(&sg, &s) != 0) {
        dfl_stage_abort(&sg);
        return -1;
    }
    for (int i = 0; !draft && tokenizer_dir && i < 3; i++) {
        char *src = dfl_path_join(real, tok_files[i]), *dst = NULL;
        int rc = 0;
        if (dfl_file_exists(src)) {
            dst = dfl_stage_file(&sg, tok_files[i]);
            rc = symlink(src, dst);
        } else {
            dfl_stage_drop(&sg, tok_files[i]); /* not another tokenizer's file next to this one */
        }
        free(src);
        free(dst);
        if (rc != 0) {
            dfl_seterr("%s: cannot link %s: %s", out_dir, tok_files[i], strerror(errno));
            dfl_stage_abort(&sg);
            return -1;
        }
    }
    return dfl_stage_commit(&sg);
}
