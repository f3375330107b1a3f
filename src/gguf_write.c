/* gguf_write.c - see gguf_write.h: GGUF output (dflash convert). Uses model.c
 * (to load the input) and gguf_model.c (shared names); nothing calls back. */
#include "gguf_write.h"

#include <cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf_model.h"
#include "util.h"
#include "weight.h"

void ggm_quantize_q8_0(const float *x, int n, uint8_t *out) {
    for (int b = 0; b < n / 32; b++) {
        const float *v = x + 32 * b;
        uint8_t *o = out + 34 * b;
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(v[i]));
        float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        uint16_t h = dfl_f32_to_f16(d);
        o[0] = (uint8_t)h;
        o[1] = (uint8_t)(h >> 8);
        for (int i = 0; i < 32; i++) o[2 + i] = (uint8_t)(int8_t)roundf(v[i] * id);
    }
}

void ggm_quantize_q4_0(const float *x, int n, uint8_t *out) {
    for (int b = 0; b < n / 32; b++) {
        const float *v = x + 32 * b;
        uint8_t *o = out + 18 * b;
        float amax = 0, max = 0; /* the value of largest magnitude, with its sign (first one on ties) */
        for (int i = 0; i < 32; i++)
            if (amax < fabsf(v[i])) {
                amax = fabsf(v[i]);
                max = v[i];
            }
        float d = max / -8, id = d != 0 ? 1.0f / d : 0.0f;
        uint16_t h = dfl_f32_to_f16(d);
        o[0] = (uint8_t)h;
        o[1] = (uint8_t)(h >> 8);
        for (int i = 0; i < 16; i++) {
            int q0 = (int)(int8_t)(v[i] * id + 8.5f), q1 = (int)(int8_t)(v[i + 16] * id + 8.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            o[2 + i] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

typedef struct {
    gguf_writer *w;
    void **bufs;
    int nb;
    int q8; /* 0 f16, 1 q8_0, 2 q4_0 */
} conv;

static void *keep(conv *cv, size_t n) {
    cv->bufs = dfl_realloc(cv->bufs, sizeof(void *) * (size_t)(cv->nb + 1));
    return cv->bufs[cv->nb++] = dfl_malloc(n ? n : 1);
}

/* conv.q8 / put_mats kinds: 0 f16, 1 q8_0, 2 q4_0, PUT_BF16 (exact for a
 * bf16 checkpoint); PUT_F32 overrides the file's kind (routers: exact) */
enum { PUT_F32 = 3, PUT_BF16 = 4 };

/* One row of COLS floats in kind Q8 at O (row_size(q8, cols) bytes). */
static void put_row(int q8, const float *row, int cols, uint8_t *o) {
    if (q8 == 1) ggm_quantize_q8_0(row, cols, o);
    else if (q8 == 2) ggm_quantize_q4_0(row, cols, o);
    else if (q8 == PUT_F32) memcpy(o, row, sizeof(float) * (size_t)cols);
    else
        for (int k = 0; k < cols; k++) {
            uint16_t h = q8 == PUT_BF16 ? dfl_f32_to_bf16(row[k]) : dfl_f32_to_f16(row[k]);
            o[2 * k] = (uint8_t)h;
            o[2 * k + 1] = (uint8_t)(h >> 8);
        }
}

static size_t row_size(int q8, int cols) {
    return q8 == 1 ? (size_t)cols / 32 * 34 : q8 == 2 ? (size_t)cols / 32 * 18 : (size_t)cols * (q8 == PUT_F32 ? 4 : 2);
}

static ggml_type kind_type(int q8) {
    return q8 == 1 ? GGML_Q8_0 : q8 == 2 ? GGML_Q4_0 : q8 == PUT_F32 ? GGML_F32 : q8 == PUT_BF16 ? GGML_BF16 : GGML_F16;
}

/* The kind a matrix of COLS columns gets in a file of kind FILE_Q8 (KIND
 * PUT_F32 forces f32): Q8_0 / Q4_0 need whole blocks of 32, else f16, as
 * llama.cpp's converter falls back. */
static int mat_kind(int file_q8, int kind, int cols) {
    return kind == PUT_F32 ? PUT_F32 : (file_q8 != 1 && file_q8 != 2) || cols % 32 == 0 ? file_q8 : 0;
}

/* One tensor of put_mats, converted when the writer reaches it (the
 * matrices stay in the mapped model until then). */
typedef struct {
    const wt_weight **ws; /* [n] */
    int n, hd, q8;
    size_t rb; /* bytes per output row */
} mats_job;

static int fill_mats(void *ctx, void *dst, size_t nbytes) {
    const mats_job *j = ctx;
    int rows = j->ws[0]->rows, cols = j->ws[0]->cols, q8 = j->q8;
    float *row = dfl_malloc(sizeof(float) * (size_t)cols);
    int *perm = j->hd > 0 ? ggm_unpermute(rows, j->hd) : NULL;
    uint8_t *d = dst;
    for (int e = 0; e < j->n; e++)
        for (int r = 0; r < rows; r++) {
            wt_get_row(row, j->ws[e], r);
            /* HF row r goes to GGUF row perm[r] */
            uint8_t *o = d + ((size_t)e * rows + (size_t)(perm ? perm[r] : r)) * j->rb;
            put_row(q8, row, cols, o);
        }
    free(row);
    free(perm);
    (void)nbytes; /* = rb * rows * n, as put_mats declared it */
    return 0;
}

/* N matrices of one shape as one tensor: [rows, cols] when n == 1, else the
 * stack [n, rows, cols] (ggml ne {cols, rows, n}: llama.cpp's ffn_*_exps).
 * Rows as F16, Q8_0 or Q4_0 (conv.q8; kind PUT_F32 overrides it), in HF
 * row order, or llama's Q/K order when hd > 0. Converted while the file is
 * written (fill_mats), so convert holds one tensor at a time. */
static void put_mats(conv *cv, const char *name, const wt_weight *const *ws, int n, int hd, int kind) {
    int rows = ws[0]->rows, cols = ws[0]->cols, q8 = mat_kind(cv->q8, kind, cols);
    mats_job *j = keep(cv, sizeof *j);
    j->ws = keep(cv, sizeof(wt_weight *) * (size_t)n);
    memcpy(j->ws, ws, sizeof(wt_weight *) * (size_t)n);
    j->n = n;
    j->hd = hd;
    j->q8 = q8;
    j->rb = row_size(q8, cols);
    int64_t ne[3] = {cols, rows, n};
    gguf_w_tensor_fill(cv->w, name, kind_type(q8), n > 1 ? 3 : 2, ne, fill_mats, j);
}

/* A matrix gathered row by row (put_rows): output row o is row src_r[o] of
 * src_w[o]; column c of it is the source's column colperm[c] (NULL: c). */
typedef struct {
    const wt_weight **src_w; /* [rows] */
    int *src_r;              /* [rows] */
    int *colperm;            /* [cols] or NULL */
    int rows, cols, q8;
    size_t rb;
} rows_job;

static int fill_rows(void *ctx, void *dst, size_t nbytes) {
    const rows_job *j = ctx;
    float *row = dfl_malloc(sizeof(float) * (size_t)j->cols), *pr = dfl_malloc(sizeof(float) * (size_t)j->cols);
    for (int o = 0; o < j->rows; o++) {
        wt_get_row(row, j->src_w[o], j->src_r[o]);
        if (j->colperm)
            for (int c = 0; c < j->cols; c++) pr[c] = row[j->colperm[c]];
        put_row(j->q8, j->colperm ? pr : row, j->cols, (uint8_t *)dst + (size_t)o * j->rb);
    }
    free(row);
    free(pr);
    (void)nbytes; /* = rb * rows */
    return 0;
}

/* A new rows_job of ROWS rows of COLS columns in the file's kind; the
 * caller fills src_w / src_r (and colperm) before the file is written. */
static rows_job *put_rows(conv *cv, const char *name, int rows, int cols) {
    rows_job *j = keep(cv, sizeof *j);
    j->src_w = keep(cv, sizeof(wt_weight *) * (size_t)rows);
    j->src_r = keep(cv, sizeof(int) * (size_t)rows);
    j->colperm = NULL;
    j->rows = rows;
    j->cols = cols;
    j->q8 = mat_kind(cv->q8, 0, cols);
    j->rb = row_size(j->q8, cols);
    int64_t ne[2] = {cols, rows};
    gguf_w_tensor_fill(cv->w, name, kind_type(j->q8), 2, ne, fill_rows, j);
    return j;
}

/* One matrix (put_mats with n = 1, the file's kind). */
static void put_mat(conv *cv, const char *name, const wt_weight *w, int hd) { put_mats(cv, name, &w, 1, hd, 0); }

/* Layer L's expert block as llama.cpp's qwen3moe writes it: the router
 * blk.L.ffn_gate_inp [E, H] (f32: routing decisions kept exact) and the
 * stacks ffn_{gate,up,down}_exps [E, rows, cols]. */
static void put_experts(conv *cv, int l, const mdl_layer *L, int E) {
    char b[64];
    snprintf(b, sizeof b, "blk.%d.ffn_gate_inp.weight", l);
    const wt_weight *r = &L->router;
    put_mats(cv, b, &r, 1, 0, PUT_F32);
    const wt_weight **ws = dfl_malloc(sizeof(wt_weight *) * (size_t)E);
    static const char *const stk[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    for (int p = 0; p < 3; p++) {
        for (int e = 0; e < E; e++) ws[e] = p == 0 ? &L->experts[e].wg : p == 1 ? &L->experts[e].wu : &L->experts[e].wd;
        snprintf(b, sizeof b, "blk.%d.%s.weight", l, stk[p]);
        put_mats(cv, b, ws, E, 0, 0);
    }
    free(ws);
}

static void put_vec(conv *cv, const char *name, const float *v, int n) {
    float *d = keep(cv, sizeof(float) * (size_t)n);
    memcpy(d, v, sizeof(float) * (size_t)n);
    int64_t ne[1] = {n};
    gguf_w_tensor(cv->w, name, GGML_F32, 1, ne, d);
}

/* ---- the Qwen3.5 family: llama.cpp's qwen35, qwen35moe, qwen3next ---------
 *
 * What llama.cpp's converter (conversion/qwen.py: Qwen3NextModel,
 * _LinearAttentionVReorderBase) writes, and gguf_model.c reads back:
 *   - norms (attn_norm, post_attention_norm, attn_q/k_norm, output_norm) as
 *     1 + w in f32 (model.c holds exactly that); ssm_norm as it is;
 *   - ssm_a = -exp(A_log) (model.c's neg_a), ssm_dt.bias = dt_bias,
 *     ssm_conv1d [C, K] squeezed (ne {K, C}), f32;
 *   - Qwen3.5 (not Qwen3-Next) with more value heads than key heads: the
 *     value heads moved from grouped order (value head h = g*r + j of key
 *     head g) to tiled order (slot j*nk + g) in attn_qkv's v rows,
 *     attn_gate's rows, ssm_beta / ssm_alpha rows, ssm_a, ssm_dt,
 *     ssm_conv1d's v channels and ssm_out's columns (gguf_model.c keeps that
 *     order and sets cfg.lin_v_tiled);
 *   - Qwen3-Next: in_proj_qkvz regrouped into attn_qkv [all q | all k |
 *     all v] and attn_gate (model.c's lin_qkv and lin_z already are), and
 *     in_proj_ba kept fused as ssm_ba (per key head g: its r b rows, then
 *     its r a rows), re-fused here from lin_b / lin_a.
 * The multi-token-prediction blocks (mtp.*) are not read by model.c, so
 * none are written (no nextn_predict_layers key). */

/* The source index, in grouped order, of slot O of a value-head block of
 * NK * R heads of D values each laid out in the file's order (tiled: slot
 * j*nk + g holds grouped head g*r + j). */
static int v_src(int o, int nk, int r, int d, int tiled) {
    if (!tiled) return o;
    int p = o / d, i = o % d, j = p / nk, g = p % nk;
    return (g * r + j) * d + i;
}

static void put_vec_perm(conv *cv, const char *name, const float *v, int n, int nk, int r, int tiled) {
    float *d = keep(cv, sizeof(float) * (size_t)n);
    for (int o = 0; o < n; o++) d[o] = v[v_src(o, nk, r, 1, tiled)];
    int64_t ne[1] = {n};
    gguf_w_tensor(cv->w, name, GGML_F32, 1, ne, d);
}

/* config.json's (its text_config's) keys that cfg_model does not keep:
 * intermediate_size as given (0: none; Qwen3-Next's cfg.inter is its
 * shared expert's width), the mrope sections (padded with 0 to
 * 4; Qwen3.5's default [11, 11, 10, 0] as the converter writes it), and
 * full_attention_interval (default 4). */
static int q35_json(const char *dir, int *has_inter, int32_t sec[4], int *iv) {
    char *p = dfl_path_join(dir, "config.json"), *txt = dfl_read_file(p, NULL);
    cJSON *root = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    if (!cJSON_IsObject(root)) {
        dfl_seterr("%s: not a JSON object", p);
        free(p);
        cJSON_Delete(root);
        return -1;
    }
    free(p);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (!cJSON_IsObject(t)) t = root;
    const cJSON *is = cJSON_GetObjectItemCaseSensitive(t, "intermediate_size");
    *has_inter = cJSON_IsNumber(is) && is->valuedouble >= 1 && is->valuedouble < 1e9 ? (int)is->valuedouble : 0;
    const cJSON *fi = cJSON_GetObjectItemCaseSensitive(t, "full_attention_interval");
    *iv = cJSON_IsNumber(fi) ? (int)fi->valuedouble : 4;
    static const int32_t def[4] = {11, 11, 10, 0};
    memcpy(sec, def, sizeof def);
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(t, "rope_parameters");
    if (!cJSON_IsObject(rp)) rp = cJSON_GetObjectItemCaseSensitive(t, "rope_scaling");
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(rp, "mrope_section"), *e;
    if (cJSON_IsArray(ms) && cJSON_GetArraySize(ms) <= 4) {
        int i = 0;
        memset(sec, 0, sizeof(int32_t) * 4);
        cJSON_ArrayForEach(e, ms) if (cJSON_IsNumber(e)) sec[i++] = (int32_t)e->valuedouble;
    }
    cJSON_Delete(root);
    return 0;
}

/* ARCH's keys of a Qwen3.5-family model M read from directory IN. */
static int q35_keys(conv *cv, const mdl_model *m, const char *in, const char *arch) {
    const cfg_model *c = &m->cfg;
    int has_inter, iv;
    int32_t sec[4];
    if (q35_json(in, &has_inter, sec, &iv)) return -1;
    int moe = c->qwen35_moe || c->qwen3_next;
    char k[128];
    gguf_writer *w = cv->w;
#define KU(name, v) (snprintf(k, sizeof k, "%s.%s", arch, name), gguf_w_u32(w, k, (uint32_t)(v)))
#define KF(name, v) (snprintf(k, sizeof k, "%s.%s", arch, name), gguf_w_f32(w, k, (float)(v)))
    KU("block_count", c->n_layers);
    KU("context_length", c->max_pos);
    KU("embedding_length", c->hidden);
    if (has_inter) KU("feed_forward_length", has_inter);
    KU("attention.head_count", c->n_heads);
    KU("attention.head_count_kv", c->n_kv_heads);
    if (!c->qwen3_next) {
        snprintf(k, sizeof k, "%s.rope.dimension_sections", arch);
        gguf_w_arr_i32(w, k, sec, 4);
    }
    KF("rope.freq_base", c->rope_theta);
    KF("attention.layer_norm_rms_epsilon", c->eps);
    if (moe) {
        KU("expert_count", c->n_experts);
        KU("expert_used_count", c->n_experts_used);
    }
    KU("attention.key_length", c->head_dim);
    KU("attention.value_length", c->head_dim);
    if (moe) {
        KU("expert_feed_forward_length", c->moe_inter);
        if (c->shared_inter) KU("expert_shared_feed_forward_length", c->shared_inter);
    }
    KU("ssm.conv_kernel", c->lin_conv);
    KU("ssm.state_size", c->lin_k_dim);
    KU("ssm.group_count", c->lin_k_heads);
    KU("ssm.time_step_rank", c->lin_v_heads);
    KU("ssm.inner_size", c->lin_v_dim * c->lin_v_heads);
    uint8_t rec[CFG_MAX_LAYERS];
    for (int l = 0; l < c->n_layers; l++) rec[l] = (uint8_t)(c->linear_layer[l] != 0);
    snprintf(k, sizeof k, "%s.attention.recurrent_layers", arch);
    gguf_w_arr_bool(w, k, rec, (uint64_t)c->n_layers);
    KU("full_attention_interval", iv);
    KU("rope.dimension_count", c->rot_dim ? c->rot_dim : c->head_dim);
#undef KU
#undef KF
    return 0;
}

/* Layer l's Gated DeltaNet tensors (see above). */
static void q35_linear(conv *cv, const mdl_model *m, int l) {
    const cfg_model *c = &m->cfg;
    const mdl_layer *L = &m->layers[l];
    int H = c->hidden, nk = c->lin_k_heads, nv = c->lin_v_heads, r = nv / nk, dv = c->lin_v_dim;
    int qk = 2 * nk * c->lin_k_dim, vd = nv * dv, C = qk + vd, K = c->lin_conv;
    int tiled = !c->qwen3_next && nv > nk;
    char b[64];
#define NAME(sub) (snprintf(b, sizeof b, "blk.%d.%s", l, sub), b)
    put_vec_perm(cv, NAME("ssm_a"), L->neg_a, nv, nk, r, tiled);
    float *cw = keep(cv, sizeof(float) * (size_t)C * K); /* [C][K]: ne {K, C} */
    for (int o = 0; o < C; o++) {
        int src = o < qk ? o : qk + v_src(o - qk, nk, r, dv, tiled);
        memcpy(cw + (size_t)o * K, L->conv_w + (size_t)src * K, sizeof(float) * (size_t)K);
    }
    int64_t ne[2] = {K, C};
    gguf_w_tensor(cv->w, NAME("ssm_conv1d.weight"), GGML_F32, 2, ne, cw);
    put_vec_perm(cv, NAME("ssm_dt.bias"), L->dt_bias, nv, nk, r, tiled);
    rows_job *j;
    if (c->qwen3_next) { /* per key head g: b rows g*r.., then a rows g*r.. */
        j = put_rows(cv, NAME("ssm_ba.weight"), 2 * nv, H);
        for (int o = 0; o < 2 * nv; o++) {
            int g = o / (2 * r), i = o % (2 * r);
            j->src_w[o] = i < r ? &L->lin_b : &L->lin_a;
            j->src_r[o] = g * r + i % r;
        }
    } else {
        const wt_weight *ab[2] = {&L->lin_a, &L->lin_b};
        for (int t = 0; t < 2; t++) {
            j = put_rows(cv, NAME(t ? "ssm_beta.weight" : "ssm_alpha.weight"), nv, H);
            for (int o = 0; o < nv; o++) j->src_w[o] = ab[t], j->src_r[o] = v_src(o, nk, r, 1, tiled);
        }
    }
    j = put_rows(cv, NAME("attn_qkv.weight"), C, H);
    for (int o = 0; o < C; o++) j->src_w[o] = &L->lin_qkv, j->src_r[o] = o < qk ? o : qk + v_src(o - qk, nk, r, dv, tiled);
    j = put_rows(cv, NAME("attn_gate.weight"), vd, H);
    for (int o = 0; o < vd; o++) j->src_w[o] = &L->lin_z, j->src_r[o] = v_src(o, nk, r, dv, tiled);
    put_vec(cv, NAME("ssm_norm.weight"), L->lin_norm, dv);
    j = put_rows(cv, NAME("ssm_out.weight"), H, vd);
    for (int o = 0; o < H; o++) j->src_w[o] = &L->lin_out, j->src_r[o] = o;
    if (tiled) {
        j->colperm = keep(cv, sizeof(int) * (size_t)vd);
        for (int o = 0; o < vd; o++) j->colperm[o] = v_src(o, nk, r, dv, 1);
    }
#undef NAME
}

/* Every tensor of a Qwen3.5-family model, in the converter's order. */
static void q35_tensors(conv *cv, const mdl_model *m) {
    const cfg_model *c = &m->cfg;
    int H = c->hidden, hd = c->head_dim;
    put_mat(cv, "token_embd.weight", &m->embed, 0);
    if (m->lm_head.data != m->embed.data) put_mat(cv, "output.weight", &m->lm_head, 0);
    for (int l = 0; l < c->n_layers; l++) {
        const mdl_layer *L = &m->layers[l];
        char b[64];
#define M(sub, wt) (snprintf(b, sizeof b, "blk.%d.%s.weight", l, sub), put_mat(cv, b, wt, 0))
#define V(sub, v, nn) (snprintf(b, sizeof b, "blk.%d.%s.weight", l, sub), put_vec(cv, b, v, nn))
        V("attn_norm", L->in_norm, H);
        if (c->linear_layer[l]) q35_linear(cv, m, l);
        if (c->moe_layer[l]) {
            /* the stacks, then the router (the converter's order here) */
            const wt_weight **ws = dfl_malloc(sizeof(wt_weight *) * (size_t)c->n_experts);
            static const char *const stk[3] = {"ffn_down_exps", "ffn_gate_exps", "ffn_up_exps"};
            for (int p = 0; p < 3; p++) {
                for (int e = 0; e < c->n_experts; e++)
                    ws[e] = p == 0 ? &L->experts[e].wd : p == 1 ? &L->experts[e].wg : &L->experts[e].wu;
                snprintf(b, sizeof b, "blk.%d.%s.weight", l, stk[p]);
                put_mats(cv, b, ws, c->n_experts, 0, 0);
            }
            free(ws);
            const wt_weight *rt = &L->router;
            snprintf(b, sizeof b, "blk.%d.ffn_gate_inp.weight", l);
            put_mats(cv, b, &rt, 1, 0, PUT_F32);
            if (c->shared_inter) {
                M("ffn_down_shexp", &L->sh_wd);
                M("ffn_gate_shexp", &L->sh_wg);
                M("ffn_up_shexp", &L->sh_wu);
                float *g = keep(cv, sizeof(float) * (size_t)H);
                memcpy(g, L->sh_gate, sizeof(float) * (size_t)H);
                int64_t ne[2] = {H, 1};
                snprintf(b, sizeof b, "blk.%d.ffn_gate_inp_shexp.weight", l);
                gguf_w_tensor(cv->w, b, GGML_F32, 2, ne, g);
            }
        } else {
            M("ffn_down", &L->wd);
            M("ffn_gate", &L->wg);
            M("ffn_up", &L->wu);
        }
        V("post_attention_norm", L->post_norm, H);
        if (!c->linear_layer[l]) {
            V("attn_k_norm", L->k_norm, hd);
            M("attn_k", &L->wk);
            M("attn_output", &L->wo);
            V("attn_q_norm", L->q_norm, hd);
            M("attn_q", &L->wq);
            M("attn_v", &L->wv);
        }
#undef M
#undef V
    }
    put_vec(cv, "output_norm.weight", m->final_norm, H);
}

/* ---- gpt-oss and Gemma-4: llama.cpp's gpt-oss and gemma4 ------------------
 *
 * What llama.cpp's converter (conversion/gpt_oss.py, conversion/gemma.py
 * Gemma4Model) writes, and gguf_model.c reads back. gpt-oss: the experts
 * de-interleaved into ffn_{gate,up,down}_exps with their biases
 * (ffn_*_exps.bias [E][rows], f32), the router ffn_gate_inp f32 with its
 * bias, attn_sinks, the attention biases, YaRN as rope.scaling.*; experts
 * loaded from MXFP4 are written back as GGML MXFP4 (the converter keeps
 * openai's blocks; so does the load, WT_MXFP4, so the codes and scale
 * bytes come back as they were), others in the file's type.
 * Gemma-4: the sliding layers' head as key_length_swa, the full layers' as
 * key_length, head_count_kv per layer when the kv heads differ, the
 * sliding_window_pattern array, rope.freq_base (full) / freq_base_swa, the
 * full layers' proportional RoPE as rope_freqs.weight (1 for the rotating
 * pairs, 1e30 for the rest), no attn_v on full layers with
 * attention_k_eq_v, the per-layer inputs, layer_output_scale; norms as
 * they are (Gemma-4's are plain w). What a GGUF of either cannot say is
 * refused naming it. */

/* W's row R as ggml MXFP4 blocks at O (cols/32 * 17 bytes: the e8m0 byte,
 * then element j in the low nibble of byte j and j + 16 in its high one),
 * if W is MXFP4 (weight.h: the codes as loaded); else -1. */
static int mxfp4_row(const wt_weight *w, int r, uint8_t *o) {
    if (w->dtype != WT_MXFP4) return -1;
    int nb = w->cols / 32;
    const uint8_t *q = (const uint8_t *)w->data + (size_t)r * w->cols / 2, *e = (const uint8_t *)w->scales + (size_t)r * nb;
    for (int b = 0; b < nb; b++, o += 17) {
        const uint8_t *c = q + 16 * b; /* element i: nibble i % 2 of byte i / 2 */
        o[0] = e[b];
        for (int j = 0; j < 16; j++) {
            int lo = c[j / 2] >> (4 * (j % 2)) & 15, hi = c[(j + 16) / 2] >> (4 * (j % 2)) & 15;
            o[1 + j] = (uint8_t)(lo | hi << 4);
        }
    }
    return 0;
}

typedef struct {
    const wt_weight **ws; /* [n] */
    int n;
} mx_job;

static int fill_mxfp4(void *ctx, void *dst, size_t nbytes) {
    const mx_job *j = ctx;
    int rows = j->ws[0]->rows;
    size_t rb = (size_t)j->ws[0]->cols / 32 * 17;
    for (int e = 0; e < j->n; e++)
        for (int r = 0; r < rows; r++)
            if (mxfp4_row(j->ws[e], r, (uint8_t *)dst + ((size_t)e * rows + r) * rb)) {
                dfl_seterr("MXFP4 rows changed between the check and the write");
                return -1;
            }
    (void)nbytes;
    return 0;
}

/* The stack WS[0..n) as MXFP4 when every row is one (see mxfp4_row), else
 * as put_mats does. */
static void put_stack(conv *cv, const char *name, const wt_weight *const *ws, int n) {
    int rows = ws[0]->rows, cols = ws[0]->cols, mx = 1;
    uint8_t *tmp = dfl_malloc((size_t)cols / 32 * 17 + 1);
    for (int e = 0; e < n && mx; e++)
        for (int r = 0; r < rows && mx; r++) mx = mxfp4_row(ws[e], r, tmp) == 0;
    free(tmp);
    if (!mx) {
        put_mats(cv, name, ws, n, 0, 0);
        return;
    }
    mx_job *j = keep(cv, sizeof *j);
    j->ws = keep(cv, sizeof(wt_weight *) * (size_t)n);
    memcpy(j->ws, ws, sizeof(wt_weight *) * (size_t)n);
    j->n = n;
    int64_t ne[3] = {cols, rows, n};
    gguf_w_tensor_fill(cv->w, name, GGML_MXFP4, 3, ne, fill_mxfp4, j);
}

static void put_arr2(conv *cv, const char *name, const float *v, int ne0, int ne1) {
    float *d = keep(cv, sizeof(float) * (size_t)ne0 * ne1);
    memcpy(d, v, sizeof(float) * (size_t)ne0 * ne1);
    int64_t ne[2] = {ne0, ne1};
    gguf_w_tensor(cv->w, name, GGML_F32, 2, ne, d);
}

/* 1 if any expert matrix of M is MXFP4 (general.file_type MOSTLY_MXFP4_MOE, as the converter) */
static int has_mxfp4(const mdl_model *m) {
    const mdl_layer *L = &m->layers[0];
    if (!L->experts) return 0;
    uint8_t *tmp = dfl_malloc((size_t)L->experts[0].wg.cols / 32 * 17 + 1);
    int mx = mxfp4_row(&L->experts[0].wg, 0, tmp) == 0;
    free(tmp);
    return mx;
}

static int gptoss_write(conv *cv, const mdl_model *m, const char *in) {
    const cfg_model *c = &m->cfg;
    gguf_writer *w = cv->w;
    const char *arch = "gpt-oss";
    char k[128];
    if (c->swiglu_limit != 7.0f) {
        dfl_seterr("%s: swiglu_limit %g cannot be written to GGUF (llama.cpp's gpt-oss clamps at 7)", in,
                   (double)c->swiglu_limit);
        return -1;
    }
    if (c->rope_yarn && (c->yarn_truncate || fabs(c->yarn_attn_factor - (0.1 * log(c->rope_factor) + 1.0)) > 1e-12)) {
        dfl_seterr("%s: YaRN with %s cannot be written to GGUF (gpt-oss GGUF files mean truncate false and the "
                   "default attention factor)", in, c->yarn_truncate ? "truncate true" : "another attention_factor");
        return -1;
    }
    int alt = 1; /* llama.cpp's default: every other layer slides, from layer 0 */
    for (int l = 0; l < c->n_layers; l++) alt &= c->sliding_layer[l] == (l % 2 == 0);
#define KU(name, v) (snprintf(k, sizeof k, "%s.%s", arch, name), gguf_w_u32(w, k, (uint32_t)(v)))
#define KF(name, v) (snprintf(k, sizeof k, "%s.%s", arch, name), gguf_w_f32(w, k, (float)(v)))
    KU("block_count", c->n_layers);
    KU("context_length", c->max_pos);
    KU("embedding_length", c->hidden);
    KU("feed_forward_length", c->moe_inter);
    KU("attention.head_count", c->n_heads);
    KU("attention.head_count_kv", c->n_kv_heads);
    if (c->rope_yarn) {
        snprintf(k, sizeof k, "%s.rope.scaling.type", arch);
        gguf_w_str(w, k, "yarn");
        KF("rope.scaling.factor", c->rope_factor);
        KU("rope.scaling.original_context_length", c->rope_orig_max_pos);
        KF("rope.scaling.yarn_beta_fast", c->yarn_beta_fast);
        KF("rope.scaling.yarn_beta_slow", c->yarn_beta_slow);
    }
    KF("rope.freq_base", c->rope_theta);
    KF("attention.layer_norm_rms_epsilon", c->eps);
    KU("expert_count", c->n_experts);
    KU("expert_used_count", c->n_experts_used);
    KU("attention.key_length", c->head_dim);
    KU("attention.value_length", c->head_dim);
    KU("attention.sliding_window", c->window);
    KU("expert_feed_forward_length", c->moe_inter);
    if (!alt) { /* llama.cpp reads the array where the converter writes none */
        uint8_t sw[CFG_MAX_LAYERS];
        for (int l = 0; l < c->n_layers; l++) sw[l] = c->sliding_layer[l] != 0;
        snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", arch);
        gguf_w_arr_bool(w, k, sw, (uint64_t)c->n_layers);
    }
#undef KU
#undef KF
    return 0;
}

static void gptoss_tensors(conv *cv, const mdl_model *m) {
    const cfg_model *c = &m->cfg;
    int H = c->hidden, E = c->n_experts, I = c->moe_inter, hd = c->head_dim;
    int q = c->n_heads * hd, kv = c->n_kv_heads * hd;
    put_mat(cv, "token_embd.weight", &m->embed, 0);
    if (m->lm_head.data != m->embed.data) put_mat(cv, "output.weight", &m->lm_head, 0);
    const wt_weight **ws = dfl_malloc(sizeof(wt_weight *) * (size_t)E);
    float *bias = dfl_malloc(sizeof(float) * (size_t)E * (I > H ? I : H));
    for (int l = 0; l < c->n_layers; l++) {
        const mdl_layer *L = &m->layers[l];
        char b[64];
#define NAME(sub) (snprintf(b, sizeof b, "blk.%d.%s", l, sub), b)
        put_vec(cv, NAME("attn_norm.weight"), L->in_norm, H);
        put_vec(cv, NAME("post_attention_norm.weight"), L->post_norm, H);
        put_mat(cv, NAME("attn_q.weight"), &L->wq, 0);
        put_vec(cv, NAME("attn_q.bias"), L->bq, q);
        put_mat(cv, NAME("attn_k.weight"), &L->wk, 0);
        put_vec(cv, NAME("attn_k.bias"), L->bk, kv);
        put_mat(cv, NAME("attn_v.weight"), &L->wv, 0);
        put_vec(cv, NAME("attn_v.bias"), L->bv, kv);
        put_mat(cv, NAME("attn_output.weight"), &L->wo, 0);
        put_vec(cv, NAME("attn_output.bias"), L->bo, H);
        put_vec(cv, NAME("attn_sinks.weight"), L->sinks, c->n_heads);
        const wt_weight *rt = &L->router;
        put_mats(cv, NAME("ffn_gate_inp.weight"), &rt, 1, 0, PUT_F32);
        put_vec(cv, NAME("ffn_gate_inp.bias"), L->router_bias, E);
        static const char *const stk[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
        for (int p = 0; p < 3; p++) {
            int n = p == 2 ? H : I;
            for (int e = 0; e < E; e++) {
                const mdl_expert *x = &L->experts[e];
                ws[e] = p == 0 ? &x->wg : p == 1 ? &x->wu : &x->wd;
                memcpy(bias + (size_t)e * n, p == 0 ? x->bg : p == 1 ? x->bu : x->bd, sizeof(float) * (size_t)n);
            }
            snprintf(b, sizeof b, "blk.%d.%s.weight", l, stk[p]);
            put_stack(cv, b, ws, E);
            snprintf(b, sizeof b, "blk.%d.%s.bias", l, stk[p]);
            put_arr2(cv, b, bias, n, E);
        }
#undef NAME
    }
    free(ws);
    free(bias);
    put_vec(cv, "output_norm.weight", m->final_norm, H);
}

static int gemma4_write(conv *cv, const mdl_model *m, const char *in) {
    const cfg_model *c = &m->cfg;
    gguf_writer *w = cv->w;
    const char *arch = "gemma4";
    char k[128];
    if (c->full_factor != 1.0) {
        dfl_seterr("%s: rope_parameters.full_attention.factor %g cannot be written to GGUF (llama.cpp's gemma4 "
                   "has no key for it)", in, c->full_factor);
        return -1;
    }
    int hd_full = 0, kv_same = 1;
    for (int l = 0; l < c->n_layers; l++) {
        if (!c->sliding_layer[l]) hd_full = cfg_head_dim(c, l);
        kv_same &= cfg_kv_heads(c, l) == c->n_kv_heads;
    }
#define KU(name, v) (snprintf(k, sizeof k, "%s.%s", arch, name), gguf_w_u32(w, k, (uint32_t)(v)))
#define KF(name, v) (snprintf(k, sizeof k, "%s.%s", arch, name), gguf_w_f32(w, k, (float)(v)))
    KU("block_count", c->n_layers);
    KU("context_length", c->max_pos);
    KU("embedding_length", c->hidden);
    KU("feed_forward_length", c->inter);
    KU("attention.head_count", c->n_heads);
    if (kv_same) KU("attention.head_count_kv", c->n_kv_heads);
    else {
        int32_t kv[CFG_MAX_LAYERS];
        for (int l = 0; l < c->n_layers; l++) kv[l] = cfg_kv_heads(c, l);
        snprintf(k, sizeof k, "%s.attention.head_count_kv", arch);
        gguf_w_arr_i32(w, k, kv, (uint64_t)c->n_layers);
    }
    KF("rope.freq_base", c->full_theta);
    KF("rope.freq_base_swa", c->rope_theta);
    KF("attention.layer_norm_rms_epsilon", c->eps);
    KU("attention.key_length", hd_full);
    KU("attention.value_length", hd_full);
    if (c->softcap > 0) KF("final_logit_softcapping", c->softcap);
    KU("attention.sliding_window", c->window ? c->window : 512);
    KU("attention.shared_kv_layers", 0);
    KU("embedding_length_per_layer_input", c->ple);
    uint8_t sw[CFG_MAX_LAYERS];
    for (int l = 0; l < c->n_layers; l++) sw[l] = c->sliding_layer[l] != 0;
    snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", arch);
    gguf_w_arr_bool(w, k, sw, (uint64_t)c->n_layers);
    KU("attention.key_length_swa", c->head_dim);
    KU("attention.value_length_swa", c->head_dim);
    KU("rope.dimension_count", hd_full);
    KU("rope.dimension_count_swa", c->head_dim);
#undef KU
#undef KF
    return 0;
}

static void gemma4_tensors(conv *cv, const mdl_model *m) {
    const cfg_model *c = &m->cfg;
    int H = c->hidden, hd_full = c->head_dim;
    for (int l = 0; l < c->n_layers; l++)
        if (!c->sliding_layer[l]) hd_full = cfg_head_dim(c, l);
    float *rf = keep(cv, sizeof(float) * (size_t)(hd_full / 2));
    for (int i = 0; i < hd_full / 2; i++) rf[i] = i < c->full_rot ? 1.0f : 1e30f;
    int64_t ne1[1] = {hd_full / 2};
    gguf_w_tensor(cv->w, "rope_freqs.weight", GGML_F32, 1, ne1, rf);
    put_mat(cv, "token_embd.weight", &m->embed, 0);
    if (m->lm_head.data != m->embed.data) put_mat(cv, "output.weight", &m->lm_head, 0);
    if (c->ple) put_mat(cv, "per_layer_token_embd.weight", &m->ple_embed, 0);
    for (int l = 0; l < c->n_layers; l++) {
        const mdl_layer *L = &m->layers[l];
        int hd = cfg_head_dim(c, l);
        char b[64];
#define NAME(sub) (snprintf(b, sizeof b, "blk.%d.%s", l, sub), b)
        put_vec(cv, NAME("attn_norm.weight"), L->in_norm, H);
        put_vec(cv, NAME("layer_output_scale.weight"), &L->layer_scalar, 1);
        put_mat(cv, NAME("ffn_down.weight"), &L->wd, 0);
        put_mat(cv, NAME("ffn_gate.weight"), &L->wg, 0);
        put_mat(cv, NAME("ffn_up.weight"), &L->wu, 0);
        if (c->ple) {
            put_mat(cv, NAME("inp_gate.weight"), &L->ple_gate, 0);
            put_mat(cv, NAME("proj.weight"), &L->ple_proj, 0);
        }
        put_vec(cv, NAME("post_attention_norm.weight"), L->attn_out_norm, H);
        put_vec(cv, NAME("post_ffw_norm.weight"), L->ffn_out_norm, H);
        if (c->ple) put_vec(cv, NAME("post_norm.weight"), L->ple_norm, H);
        put_vec(cv, NAME("ffn_norm.weight"), L->post_norm, H);
        put_vec(cv, NAME("attn_k_norm.weight"), L->k_norm, hd);
        put_mat(cv, NAME("attn_k.weight"), &L->wk, 0);
        put_mat(cv, NAME("attn_output.weight"), &L->wo, 0);
        put_vec(cv, NAME("attn_q_norm.weight"), L->q_norm, hd);
        put_mat(cv, NAME("attn_q.weight"), &L->wq, 0);
        if (!(c->k_eq_v && !c->sliding_layer[l])) put_mat(cv, NAME("attn_v.weight"), &L->wv, 0);
#undef NAME
    }
    put_vec(cv, "output_norm.weight", m->final_norm, H);
    if (c->ple) {
        put_mat(cv, "per_layer_model_proj.weight", &m->ple_model_proj, 0);
        put_vec(cv, "per_layer_proj_norm.weight", m->ple_proj_norm, c->ple);
    }
}

/* "<0xHH>": a byte-fallback token (gguf-py's BYTE type) */
static int is_byte_token(const char *s) {
    return strlen(s) == 6 && !strncmp(s, "<0x", 3) && isxdigit((unsigned char)s[3]) &&
           isxdigit((unsigned char)s[4]) && s[5] == '>';
}

/* Gemma 4's special tokens that llama.cpp's converter types USER_DEFINED
 * (Gemma4Model.set_vocab's visible_tokens: always rendered, for the chat
 * parser) */
static int gemma4_visible(const char *s) {
    static const char *const v[] = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>",
                                    "<|tool_response>", "<tool_response|>", "<|\"|>"};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (!strcmp(s, v[i])) return 1;
    return 0;
}

/* tokenizer.json (+ tokenizer_config.json, config.json ids) -> tokenizer.* keys.
 * A byte-level BPE is llama.cpp's "gpt2" with the pre-tokenizer named;
 * Gemma's SentencePiece-style BPE is its "gemma4" as Gemma4Model.set_vocab
 * writes it (tokens, scores, token_type, merges, add_space_prefix false),
 * but for one thing: an added token that is not special is typed
 * USER_DEFINED (llama.cpp's converter types those below the base vocabulary
 * size NORMAL, so their HF split, such as tab runs and HTML tags, is lost
 * but for newline runs; llama.cpp splits USER_DEFINED tokens out as HF
 * does), so the file gives HF's ids. */
static int put_tokenizer(conv *cv, const char *dir, const cfg_model *c) {
    char *p = dfl_path_join(dir, "tokenizer.json");
    char *txt = dfl_read_file(p, NULL);
    cJSON *root = txt ? cJSON_Parse(txt) : NULL, *tc = NULL, *cj = NULL;
    char **tokens = NULL;
    int32_t *types = NULL;
    const char **merges = NULL;
    char **mbuf = NULL;
    int n = 0, nm = 0, rc = -1;
    if (!txt) goto out;
    free(txt);
    if (!cJSON_IsObject(root)) {
        dfl_seterr("%s: not a JSON object", p);
        goto out;
    }
    /* the pre-tokenizer regex names llama.cpp's pre-tokenizer; Gemma's
     * SentencePiece-style BPE (normalizer Replace " " -> U+2581, byte
     * fallback) is llama.cpp's tokenizer.ggml.model "gemma4" */
    const char *pre = NULL;
    cJSON *pt = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), *e;
    cJSON *nz = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    cJSON *nzp = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(nz, "pattern"), "String");
    cJSON *nzc = cJSON_GetObjectItemCaseSensitive(nz, "content");
    int gemma = cJSON_IsString(nzp) && !strcmp(nzp->valuestring, " ") && cJSON_IsString(nzc) &&
                !strcmp(nzc->valuestring, "\xe2\x96\x81") &&
                cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "model"),
                                                              "byte_fallback"));
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers")) {
        cJSON *re = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "pattern"), "Regex");
        if (cJSON_IsString(re)) {
            for (const ggm_pretok *t = ggm_pretoks; t->name; t++)
                if (!strcmp(re->valuestring, t->re)) pre = t->name;
        }
    }
    if (!pre && !gemma) {
        dfl_seterr("%s: pre-tokenizer is neither Qwen2/3's, Qwen3.5's, Llama-3's nor gpt-oss's (no GGUF tokenizer.ggml.pre for it)", p);
        goto out;
    }
    cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    cJSON *mg = cJSON_GetObjectItemCaseSensitive(model, "merges");
    cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(mg)) {
        dfl_seterr("%s: model.vocab or model.merges missing", p);
        goto out;
    }
    n = c->vocab;
    cJSON_ArrayForEach(e, vocab) if (cJSON_IsNumber(e) && e->valuedouble >= n && e->valuedouble < (1 << 24)) n =
        (int)e->valuedouble + 1;
    cJSON_ArrayForEach(e, added) {
        cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (cJSON_IsNumber(id) && id->valuedouble >= n && id->valuedouble < (1 << 24)) n = (int)id->valuedouble + 1;
    }
    tokens = dfl_calloc((size_t)n, sizeof(char *));
    types = dfl_calloc((size_t)n, sizeof(int32_t));
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= n) continue;
        int id = (int)e->valuedouble;
        free(tokens[id]);
        tokens[id] = dfl_strdup(e->string);
        types[id] = TT_NORMAL;
        if (gemma && is_byte_token(e->string)) types[id] = TT_BYTE;
    }
    cJSON_ArrayForEach(e, added) {
        cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id"), *ct = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(ct) || id->valuedouble < 0 || id->valuedouble >= n) continue;
        int i = (int)id->valuedouble;
        const char *s = ct->valuestring;
        size_t sl = strlen(s);
        /* llama.cpp: special tokens, and ones that look special (<|...|>), are CONTROL */
        int special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special")) ||
                      (!gemma && sl >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + sl - 2, "|>"));
        free(tokens[i]);
        tokens[i] = dfl_strdup(s);
        types[i] = special && !(gemma && gemma4_visible(s)) ? TT_CONTROL : TT_USER;
    }
    for (int i = 0; i < n; i++)
        if (!tokens[i]) {
            char b[32];
            snprintf(b, sizeof b, "[PAD%d]", i);
            tokens[i] = dfl_strdup(b);
            types[i] = TT_UNUSED;
        }
    nm = cJSON_GetArraySize(mg);
    merges = dfl_calloc((size_t)(nm ? nm : 1), sizeof(char *));
    mbuf = dfl_calloc((size_t)(nm ? nm : 1), sizeof(char *));
    int k = 0;
    cJSON_ArrayForEach(e, mg) {
        if (cJSON_IsString(e)) merges[k] = e->valuestring;
        else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                 cJSON_IsString(e->child->next)) {
            size_t la = strlen(e->child->valuestring), lb = strlen(e->child->next->valuestring);
            char *b = mbuf[k] = dfl_malloc(la + lb + 2);
            memcpy(b, e->child->valuestring, la);
            b[la] = ' ';
            memcpy(b + la + 1, e->child->next->valuestring, lb + 1);
            merges[k] = b;
        } else {
            dfl_seterr("%s: merge %d is malformed", p, k);
            goto out;
        }
        k++;
    }
    if (gemma) {
        /* llama.cpp's Gemma4Model.set_vocab: no pre key, every score -1000
         * (gguf-py's LlamaHfVocab), add_space_prefix false, the unk id */
        float *sc = dfl_malloc((size_t)n * sizeof(float));
        for (int i = 0; i < n; i++) sc[i] = -1000.0f;
        gguf_w_str(cv->w, "tokenizer.ggml.model", "gemma4");
        gguf_w_arr_str(cv->w, "tokenizer.ggml.tokens", (const char *const *)tokens, (uint64_t)n);
        gguf_w_arr_f32(cv->w, "tokenizer.ggml.scores", sc, (uint64_t)n);
        free(sc);
        gguf_w_arr_i32(cv->w, "tokenizer.ggml.token_type", types, (uint64_t)n);
        gguf_w_arr_str(cv->w, "tokenizer.ggml.merges", merges, (uint64_t)nm);
        cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
        for (int i = 0; cJSON_IsString(unk) && i < n; i++)
            if (!strcmp(tokens[i], unk->valuestring)) {
                gguf_w_u32(cv->w, "tokenizer.ggml.unknown_token_id", (uint32_t)i);
                break;
            }
        gguf_w_bool(cv->w, "tokenizer.ggml.add_space_prefix", 0);
    } else {
        gguf_w_str(cv->w, "tokenizer.ggml.model", "gpt2");
        gguf_w_str(cv->w, "tokenizer.ggml.pre", pre);
        gguf_w_arr_str(cv->w, "tokenizer.ggml.tokens", (const char *const *)tokens, (uint64_t)n);
        gguf_w_arr_i32(cv->w, "tokenizer.ggml.token_type", types, (uint64_t)n);
        gguf_w_arr_str(cv->w, "tokenizer.ggml.merges", merges, (uint64_t)nm);
    }
    /* ids: tokenizer_config.json tokens (eos, pad), config.json bos / eos */
    free(p);
    p = dfl_path_join(dir, "config.json");
    txt = dfl_read_file(p, NULL);
    cj = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    cJSON *bos = cJSON_GetObjectItemCaseSensitive(cj, "bos_token_id");
    int eos = c->n_eos ? c->eos_ids[0] : -1, pad = -1;
    free(p);
    p = dfl_path_join(dir, "tokenizer_config.json");
    const char *tmpl = NULL;
    if (dfl_file_exists(p)) {
        txt = dfl_read_file(p, NULL);
        tc = txt ? cJSON_Parse(txt) : NULL;
        free(txt);
        cJSON *ct = cJSON_GetObjectItemCaseSensitive(tc, "chat_template");
        if (cJSON_IsString(ct)) tmpl = ct->valuestring;
        const char *names[2] = {"eos_token", "pad_token"};
        int *ids[2] = {&eos, &pad};
        for (int i = 0; i < 2; i++) {
            cJSON *t = cJSON_GetObjectItemCaseSensitive(tc, names[i]);
            if (cJSON_IsObject(t)) t = cJSON_GetObjectItemCaseSensitive(t, "content");
            if (!cJSON_IsString(t)) continue;
            for (int j = 0; j < n; j++)
                if (!strcmp(tokens[j], t->valuestring) && types[j] != TT_NORMAL) *ids[i] = j;
        }
    }
    /* A plain prompt's special tokens: what tokenizer.json's post_processor
     * adds (TemplateProcessing "single"; Gemma's <bos>, Llama-3's
     * <|begin_of_text|>; Qwen3's ByteLevel none), as dflash's own tokenizer
     * reads them (tok_encode_prompt), become add_bos_token / add_eos_token:
     * the GGUF gives the same ids. GGUF names one token each side: the
     * post_processor's token before the text is written as bos_token_id
     * (over config.json's), the one after must be the eos token. A
     * post_processor GGUF cannot say is refused. (tokenizer_config.json's
     * add_bos_token is not what the tokenizer applies, so it is not read.) */
    int32_t pp[16];
    int npre = 0, npost = 0;
    free(p);
    p = dfl_path_join(dir, "tokenizer.json");
    if (tok_json_prompt_specials(cJSON_GetObjectItemCaseSensitive(root, "post_processor"), n, p, pp, &npre,
                                 &npost) != 0)
        goto out;
    if (npre > 1 || npost > 1) {
        dfl_seterr("%s: the post_processor puts %d special tokens before and %d after a prompt: a GGUF file has "
                   "one of each (tokenizer.ggml.add_bos_token / add_eos_token)", p, npre, npost);
        goto out;
    }
    if (npost && pp[npre] != eos) {
        dfl_seterr("%s: the post_processor appends token %d, which is not the eos token (%d): a GGUF file can "
                   "only append tokenizer.ggml.eos_token_id", p, (int)pp[npre], eos);
        goto out;
    }
    if (npre) gguf_w_u32(cv->w, "tokenizer.ggml.bos_token_id", (uint32_t)pp[0]);
    else if (cJSON_IsNumber(bos)) gguf_w_u32(cv->w, "tokenizer.ggml.bos_token_id", (uint32_t)bos->valuedouble);
    if (eos >= 0) gguf_w_u32(cv->w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    if (pad >= 0) gguf_w_u32(cv->w, "tokenizer.ggml.padding_token_id", (uint32_t)pad);
    gguf_w_bool(cv->w, "tokenizer.ggml.add_bos_token", npre == 1);
    gguf_w_bool(cv->w, "tokenizer.ggml.add_eos_token", npost == 1);
    if (tmpl) gguf_w_str(cv->w, "tokenizer.chat_template", tmpl);
    rc = 0;
out:
    for (int i = 0; i < n && tokens; i++) free(tokens[i]);
    free(tokens);
    free(types);
    for (int i = 0; i < nm && mbuf; i++) free(mbuf[i]);
    free(mbuf);
    free(merges);
    cJSON_Delete(root);
    cJSON_Delete(tc);
    cJSON_Delete(cj);
    free(p);
    return rc;
}

static const char *base_name(const char *dir) {
    const char *s = dir + strlen(dir);
    while (s > dir && s[-1] == '/') s--;
    const char *e = s;
    while (s > dir && s[-1] != '/') s--;
    static _Thread_local char b[128];
    snprintf(b, sizeof b, "%.*s", (int)(e - s), s);
    return b;
}

int ggm_convert(const char *in, const char *out, const char *type, const char *tok_dir) {
    int q8 = 0;
    if (!type || !strcmp(type, "f16")) q8 = 0;
    else if (!strcmp(type, "q8_0")) q8 = 1;
    else if (!strcmp(type, "q4_0")) q8 = 2;
    else if (!strcmp(type, "bf16")) q8 = PUT_BF16;
    else {
        dfl_seterr("--type '%s' not supported (f16, bf16, q8_0 or q4_0)", type);
        return -1;
    }
    char *st = dfl_path_join(in, "model.safetensors");
    int same = dfl_same_file(in, out) || dfl_same_file(st, out);
    free(st);
    if (same) {
        dfl_seterr("output %s is the input %s: choose another -o", out, in);
        return -1;
    }
    if (gguf_is_gguf(in)) {
        dfl_seterr("%s is already a GGUF file (convert reads Hugging Face / MLX directories)", in);
        return -1;
    }
    struct stat sin;
    if (stat(in, &sin) == 0 && !S_ISDIR(sin.st_mode)) {
        dfl_seterr("%s is a file: convert reads a Hugging Face / MLX model directory (config.json, *.safetensors)",
                   in);
        return -1;
    }
    mdl_model m;
    if (mdl_load(&m, in) != 0) return -1;
    /* GGUF qwen3moe / qwen3next have no key for it: llama.cpp's graphs (and
     * dflash's GGUF loader) always renormalise the top-k weights */
    if ((m.cfg.arch == CFG_QWEN3_MOE || m.cfg.qwen3_next) && m.cfg.n_moe_layers && !m.cfg.norm_topk) {
        dfl_seterr("%s: norm_topk_prob=false cannot be written to GGUF (a %s GGUF always renormalises the "
                   "top-k expert weights)", in, m.cfg.qwen3_next ? "qwen3next" : "qwen3moe");
        mdl_free(&m);
        return -1;
    }
    const cfg_model *c = &m.cfg;
    int rc = -1;
    conv cv = {gguf_w_new(), NULL, 0, q8};
    if (!tok_dir) tok_dir = in;
    char *tj = dfl_path_join(tok_dir, "tokenizer.json");
    int has_tok = dfl_file_exists(tj);
    free(tj);
    if (!has_tok) {
        dfl_seterr("%s has no tokenizer.json%s", tok_dir,
                   c->is_draft ? ": a draft takes its target's (--target TARGET_DIR), as llama.cpp's converter does" : "");
        goto out;
    }
    int q35 = c->arch == CFG_QWEN3_5 && !c->is_draft, zoo2 = c->arch == CFG_GPT_OSS || c->arch == CFG_GEMMA4;
    const char *arch = c->is_draft                ? "dflash"
                       : c->arch == CFG_GPT_OSS   ? "gpt-oss"
                       : c->arch == CFG_GEMMA4    ? "gemma4"
                       : c->arch == CFG_QWEN3     ? "qwen3"
                       : c->arch == CFG_QWEN3_MOE ? "qwen3moe"
                       : q35 && c->qwen3_next     ? "qwen3next"
                       : q35 && c->qwen35_moe     ? "qwen35moe"
                       : q35                      ? "qwen35"
                                                  : "llama";
    char k[128];
    gguf_writer *w = cv.w;
    gguf_w_str(w, "general.architecture", arch);
    gguf_w_str(w, "general.type", "model");
    gguf_w_str(w, "general.name", base_name(in));
    /* llama.cpp's MOSTLY_Q8_0 / Q4_0 / BF16 / F16 */
    gguf_w_u32(w, "general.file_type",
               c->arch == CFG_GPT_OSS && has_mxfp4(&m) ? 38 : q8 == 1 ? 7 : q8 == 2 ? 2 : q8 == PUT_BF16 ? 32 : 1);
    gguf_w_u32(w, "general.quantization_version", 2);
    if (zoo2) {
        int gpt = c->arch == CFG_GPT_OSS;
        if ((gpt ? gptoss_write(&cv, &m, in) : gemma4_write(&cv, &m, in)) || put_tokenizer(&cv, tok_dir, c)) goto out;
        if (gpt) gptoss_tensors(&cv, &m);
        else gemma4_tensors(&cv, &m);
        rc = gguf_w_write(w, out);
        goto out;
    }
    if (q35) {
        if (q35_keys(&cv, &m, in, arch) || put_tokenizer(&cv, tok_dir, c)) goto out;
        q35_tensors(&cv, &m);
        rc = gguf_w_write(w, out);
        goto out;
    }
#define KU(name, v) (snprintf(k, sizeof k, "%s.%s", arch, name), gguf_w_u32(w, k, (uint32_t)(v)))
#define KF(name, v) (snprintf(k, sizeof k, "%s.%s", arch, name), gguf_w_f32(w, k, (float)(v)))
    KU("block_count", c->n_layers);
    KU("context_length", c->max_pos);
    KU("embedding_length", c->hidden);
    KU("feed_forward_length", c->inter);
    KU("attention.head_count", c->n_heads);
    KU("attention.head_count_kv", c->n_kv_heads);
    KF("rope.freq_base", c->rope_theta);
    KF("attention.layer_norm_rms_epsilon", c->eps);
    KU("attention.key_length", c->head_dim);
    KU("attention.value_length", c->head_dim);
    if (c->arch == CFG_QWEN3_MOE) { /* dense layers (mlp_only_layers) are the ones without ffn_gate_inp */
        KU("expert_count", c->n_experts);
        KU("expert_used_count", c->n_experts_used);
        KU("expert_feed_forward_length", c->moe_inter);
    }
    if (c->arch == CFG_LLAMA) {
        KU("vocab_size", c->vocab);
        KU("rope.dimension_count", c->head_dim);
    }
#undef KU
#undef KF
    if (c->is_draft) { /* llama.cpp's DFlash keys: target layers stored +1 (hidden-state index) */
        int32_t tl[CFG_MAX_TAPS];
        for (int i = 0; i < c->n_taps; i++) tl[i] = c->tap_layers[i] + 1;
        snprintf(k, sizeof k, "%s.block_size", arch);
        gguf_w_u32(w, k, (uint32_t)c->block_size);
        gguf_w_arr_i32(w, "dflash.target_layers", tl, (uint64_t)c->n_taps);
        gguf_w_u32(w, "dflash.vocab_size", (uint32_t)c->vocab);
        gguf_w_u32(w, "tokenizer.ggml.mask_token_id", (uint32_t)c->mask_token_id);
    }
    if (put_tokenizer(&cv, tok_dir, c) != 0) goto out;
    if (c->is_draft) {
        put_mat(&cv, "fc.weight", &m.fc, 0);
        put_vec(&cv, "enc.output_norm.weight", m.hidden_norm, c->hidden);
    } else {
        put_mat(&cv, "token_embd.weight", &m.embed, 0);
    }
    put_vec(&cv, "output_norm.weight", m.final_norm, c->hidden);
    if (!c->is_draft && m.lm_head.data != m.embed.data) put_mat(&cv, "output.weight", &m.lm_head, 0);
    int llama = c->arch == CFG_LLAMA;
    if (c->rope_llama3) { /* llama.cpp's rope_freqs: one divisor per frequency */
        int half = c->head_dim / 2;
        float *f = keep(&cv, sizeof(float) * (size_t)half);
        const double pi = 3.14159265358979323846;
        double lo_wl = c->rope_orig_max_pos / c->rope_low_freq, hi_wl = c->rope_orig_max_pos / c->rope_high_freq;
        for (int i = 0; i < half; i++) {
            float freq = 1.0f / powf((float)c->rope_theta, (float)(2 * i) / (float)c->head_dim);
            double wl = 2 * pi / freq;
            if (wl < hi_wl) f[i] = 1;
            else if (wl > lo_wl) f[i] = (float)c->rope_factor;
            else {
                double sm = (c->rope_orig_max_pos / wl - c->rope_low_freq) / (c->rope_high_freq - c->rope_low_freq);
                f[i] = (float)(1 / ((1 - sm) / c->rope_factor + sm));
            }
        }
        int64_t ne[1] = {half};
        gguf_w_tensor(cv.w, "rope_freqs.weight", GGML_F32, 1, ne, f);
    }
    for (int l = 0; l < c->n_layers; l++) {
        const mdl_layer *L = &m.layers[l];
        char b[64];
#define M(sub, wt, hd) (snprintf(b, sizeof b, "blk.%d.%s.weight", l, sub), put_mat(&cv, b, wt, hd))
#define V(sub, v, nn) (snprintf(b, sizeof b, "blk.%d.%s.weight", l, sub), put_vec(&cv, b, v, nn))
        V("attn_norm", L->in_norm, c->hidden);
        M("attn_q", &L->wq, llama ? c->head_dim : 0);
        M("attn_k", &L->wk, llama ? c->head_dim : 0);
        M("attn_v", &L->wv, 0);
        M("attn_output", &L->wo, 0);
        if (L->q_norm) V("attn_q_norm", L->q_norm, c->head_dim);
        if (L->k_norm) V("attn_k_norm", L->k_norm, c->head_dim);
        V("ffn_norm", L->post_norm, c->hidden);
        if (c->moe_layer[l]) {
            put_experts(&cv, l, L, c->n_experts);
        } else {
            M("ffn_gate", &L->wg, 0);
            M("ffn_up", &L->wu, 0);
            M("ffn_down", &L->wd, 0);
        }
#undef M
#undef V
    }
    rc = gguf_w_write(w, out);
out:
    gguf_w_free(cv.w);
    for (int i = 0; i < cv.nb; i++) free(cv.bufs[i]);
    free(cv.bufs);
    mdl_free(&m);
    return rc;
}
