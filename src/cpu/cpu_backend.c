/* cpu_backend.c - the CPU backend: the target forward (Qwen3, Llama,
 * Qwen3-MoE, Qwen3.5, gpt-oss, Gemma-4) with a KV cache (sliding layers: a ring) and
 * hidden taps, and the DFlash draft forward. Implements be_ops (backend.h).
 *
 * The instance (open) owns a worker pool (tp_create with the model's thread
 * count; every parallel step of its sequences runs on it, so models on
 * different threads never share or restart each other's workers) and makes
 * sure the kernel variant is chosen (kn_init_once: process-wide, chosen once
 * from the CPU and the environment); prepare() gives the model's Q8/Q4 matrices
 * the kernels' packed copies (cb_pack, cpu_pack.c), release() frees them
 * (cb_unpack): they are the backend's, as cu_model's device copies are CUDA's.
 * Weights stay where mdl_load put them: be_data is not used.
 *
 * Every step works row by row with a fixed reduction order (kn_matmul is
 * batch-invariant; norms, RoPE and attention below loop over one row's data
 * in an order that does not depend on how many rows are in the batch), so a
 * row's logits and taps are bit-identical for T = 1 and for any T > 1. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "attention.h"
#include "backend.h"
#include "cpu_backend.h"
#include "deltanet.h"
#include "kernels.h"
#include "rope.h"
#include "sample.h"
#include "threads.h"
#include "util.h"

enum { CHUNK = 32 }; /* rows per pass through the layers (prefill is chunked) */
/* Positions per page of a target sequence's KV cache (cpu_seq's page rule) */
enum { KV_PAGE_SHIFT = 4, KV_PAGE = 1 << KV_PAGE_SHIFT };
enum { ARGMAX_SLICE = 16384 }; /* lm_head rows per matmul in argmax (a multiple of 16) */
/* Committed rows a draft keeps pending before projecting them (>= BE_MAX_ROWS,
 * so one draft_feed always fits after a flush). */
enum { PEND_ROWS = BE_MAX_ROWS };

/* Block rows per pass of the draft's layers in draft_block_multi (whole
 * blocks; more blocks take more passes). */
enum { DRAFT_PASS_ROWS = BE_MAX_ROWS };
/* Slot rows per pass over a draft head (its logits one ARGMAX_SLICE of ids
 * at a time: [HEAD_ROWS][ARGMAX_SLICE] floats). */
enum { HEAD_ROWS = BE_KEEP_ROWS };

/* ---- small row kernels --------------------------------------------------- */

/* out[n] = x[n] / sqrt(mean(x^2) + eps) * w[n] (w NULL: no weight) */
static void rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)n + eps);
    if (!w) {
        for (int i = 0; i < n; i++) out[i] = x[i] * r;
        return;
    }
    for (int i = 0; i < n; i++) out[i] = x[i] * r * w[i];
}

static void rmsnorm_rows(float *out, const float *x, const float *w, int rows, int n, float eps) {
    for (int t = 0; t < rows; t++) rmsnorm(out + (size_t)t * n, x + (size_t)t * n, w, n, eps);
}

/* RoPE tables: cos/sin [n_ctx][hd/2] (neox pairing: d with d + hd/2). */
typedef struct {
    int n_ctx, half;
    float *cos, *sin;
} rope_table;

static void rope_init(rope_table *r, const cfg_model *c, int n_ctx) {
    int half = (c->rot_dim ? c->rot_dim : c->head_dim) / 2; /* rotary dims / 2 (rope.h) */
    r->n_ctx = n_ctx;
    r->half = half;
    r->cos = dfl_malloc(sizeof(float) * (size_t)n_ctx * half);
    r->sin = dfl_malloc(sizeof(float) * (size_t)n_ctx * half);
    rope_fill(c, n_ctx, r->cos, r->sin); /* as HF: 1 / theta^(2i/hd) in float, llama3 scaling, GGUF rope_freqs */
}

/* Gemma-4's full layers: proportional RoPE over their whole head of hd dims */
static void rope_init_proportional(rope_table *r, const cfg_model *c, int hd, int n_ctx) {
    r->n_ctx = n_ctx;
    r->half = hd / 2;
    r->cos = dfl_malloc(sizeof(float) * (size_t)n_ctx * r->half);
    r->sin = dfl_malloc(sizeof(float) * (size_t)n_ctx * r->half);
    rope_fill_proportional(c, hd, n_ctx, r->cos, r->sin);
}

static void rope_free(rope_table *r) {
    free(r->cos);
    free(r->sin);
}

/* In place on n_heads heads of x[n_heads*hd]: optional per-head RMSNorm with
 * weight norm[hd], then RoPE at position pos on dims 0..2*half-1 (pairs d,
 * d + half; the rest of a partially rotated head passes through). */
static void norm_rope(float *x, int n_heads, int hd, const float *norm, float eps, const rope_table *r,
                      int pos) {
    int half = r->half;
    const float *cs = r->cos + (size_t)pos * half, *sn = r->sin + (size_t)pos * half;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * hd;
        if (norm) rmsnorm(v, v, norm, hd, eps);
        for (int i = 0; i < half; i++) {
            float a = v[i], b = v[i + half];
            v[i] = a * cs[i] - b * sn[i];
            v[i + half] = b * cs[i] + a * sn[i];
        }
    }
}

/* y[n] += b[n] */
static void add_bias(float *y, const float *b, int n) {
    for (int i = 0; i < n; i++) y[i] += b[i];
}

/* ---- scratch activations ------------------------------------------------- */

typedef struct {
    int rows;
    float *x, *xn;     /* [rows][H] residual stream, normed copy */
    float *q, *att;    /* [rows][nh*hd] */
    float *qg, *gate;  /* gated attention (Qwen3.5), else NULL: [rows][nh][2*hd] q_proj
                          as computed, [rows][nh*hd] its output gates */
    float *k, *v;      /* [rows][nkv*hd] */
    float *g, *u;      /* [rows][I] */
    /* expert blocks (a model with experts; NULL otherwise), P = rows * k pairs */
    float *rl;         /* [rows][n_experts] router logits, then probabilities */
    int *sel;          /* [rows][k] chosen experts, by rank */
    float *wsel;       /* [rows][k] their weights */
    int *slot;         /* [rows][k] the pair's row in xe/ye */
    int *start;        /* [n_experts + 1] first pair row of each expert */
    float *xe, *ye;    /* [P][H] inputs gathered by expert, expert outputs */
    float *ge, *ue;    /* [P][moe_inter] */
    float *sh;         /* [rows][H] the shared expert's gated output (Qwen3.5-MoE), Gemma-4 MoE's dense
                          MLP output h1, else NULL */
    float *rn, *h2;    /* [rows][H] Gemma-4 MoE (cfg.g4_moe): the router's input, the experts' sum; else NULL */
    /* Gemma-4 per-layer inputs (cfg.ple = P > 0), else NULL */
    float *ple;        /* [rows][L*P] every layer's inputs of the rows */
    float *pt;         /* [rows][P] one layer's gate */
    float *pe;         /* [L*P] one row of embed_tokens_per_layer */
} scratch;

static void scratch_init(scratch *s, const cfg_model *c, int rows) {
    size_t H = (size_t)c->hidden, Q = (size_t)cfg_max_q(c), KV = (size_t)cfg_max_kv(c); /* the widest layer's */
    s->rows = rows;
    s->x = dfl_malloc64(sizeof(float) * rows * H);
    s->xn = dfl_malloc64(sizeof(float) * rows * H);
    s->q = dfl_malloc64(sizeof(float) * rows * Q);
    s->att = dfl_malloc64(sizeof(float) * rows * Q);
    s->k = dfl_malloc64(sizeof(float) * rows * KV);
    s->v = dfl_malloc64(sizeof(float) * rows * KV);
    s->g = dfl_malloc64(sizeof(float) * rows * (size_t)c->inter);
    s->u = dfl_malloc64(sizeof(float) * rows * (size_t)c->inter);
    s->qg = s->gate = NULL;
    if (c->attn_gate) {
        s->qg = dfl_malloc64(sizeof(float) * rows * 2 * Q);
        s->gate = dfl_malloc64(sizeof(float) * rows * Q);
    }
    s->rl = NULL, s->sel = NULL, s->wsel = NULL, s->slot = NULL, s->start = NULL;
    s->xe = s->ye = s->ge = s->ue = s->sh = NULL;
    if (c->shared_inter || c->g4_moe) s->sh = dfl_malloc64(sizeof(float) * rows * H);
    s->rn = s->h2 = NULL;
    if (c->g4_moe) {
        s->rn = dfl_malloc64(sizeof(float) * rows * H);
        s->h2 = dfl_malloc64(sizeof(float) * rows * H);
    }
    s->ple = s->pt = s->pe = NULL;
    if (c->ple) {
        size_t LP = (size_t)c->n_layers * c->ple;
        s->ple = dfl_malloc64(sizeof(float) * rows * LP);
        s->pt = dfl_malloc64(sizeof(float) * rows * (size_t)c->ple);
        s->pe = dfl_malloc64(sizeof(float) * LP);
    }
    if (c->n_moe_layers) {
        size_t E = (size_t)c->n_experts, K = (size_t)c->n_experts_used, P = rows * K;
        s->rl = dfl_malloc64(sizeof(float) * rows * E);
        s->sel = dfl_malloc(sizeof(int) * P);
        s->wsel = dfl_malloc(sizeof(float) * P);
        s->slot = dfl_malloc(sizeof(int) * P);
        s->start = dfl_malloc(sizeof(int) * (E + 1));
        s->xe = dfl_malloc64(sizeof(float) * P * H);
        s->ye = dfl_malloc64(sizeof(float) * P * H);
        s->ge = dfl_malloc64(sizeof(float) * P * (size_t)c->moe_inter);
        s->ue = dfl_malloc64(sizeof(float) * P * (size_t)c->moe_inter);
    }
}

/* What scratch_init sizes a scratch by, per row (two configs with the same
 * dims take the same scratch). */
enum { SCRATCH_DIMS = 13 };
static void scratch_dims(const cfg_model *c, long *d) {
    const long v[SCRATCH_DIMS] = {c->hidden,     cfg_max_q(c), cfg_max_kv(c),   c->inter,        c->attn_gate,
                                  c->shared_inter, c->g4_moe,  c->ple,          c->n_layers,     c->n_moe_layers,
                                  c->n_experts,  c->n_experts_used, c->moe_inter};
    memcpy(d, v, sizeof v);
}

static void scratch_free(scratch *s) {
    free(s->x);
    free(s->xn);
    free(s->q);
    free(s->att);
    free(s->qg);
    free(s->gate);
    free(s->k);
    free(s->v);
    free(s->g);
    free(s->u);
    free(s->rl);
    free(s->sel);
    free(s->wsel);
    free(s->slot);
    free(s->start);
    free(s->xe);
    free(s->ye);
    free(s->ge);
    free(s->ue);
    free(s->sh);
    free(s->rn);
    free(s->h2);
    free(s->ple);
    free(s->pt);
    free(s->pe);
}

/* The instance: one per dflash_model. The draft blocks' working memory is
 * the instance's (the backend runs one call at a time: batch.h), grown on
 * demand for the block rows of the widest pass so far. */
typedef struct {
    char desc[64];  /* describe()'s line */
    tp_pool *tp;    /* its worker pool */
    scratch ds;     /* draft_block_multi's pass: ds_rows rows (0: none yet) of a draft of dims ds_dims */
    int ds_rows;
    long ds_dims[SCRATCH_DIMS]; /* scratch_dims */
    float *dl;      /* [HEAD_ROWS][ARGMAX_SLICE] logits of one slice of a draft head (NULL: none yet) */
    /* the KV pages of all its target sequences (the page rule, cpu_seq) */
    pthread_mutex_t kv_mu;
    size_t kv_budget;  /* bytes they may hold together; 0: no limit */
    size_t kv_used, kv_peak;
} cpu_be;

/* 1 if a and b are the same loaded model: the same struct, or copies of one
 * (a library sequence holds a copy of its model's mdl_model, sharing every
 * weight: the layers array identifies them). */
static int same_model(const mdl_model *a, const mdl_model *b) { return a == b || (a->layers && a->layers == b->layers); }

/* gelu_pytorch_tanh as PyTorch computes it in float:
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
static inline float gelu_tanh(float x) {
    const float beta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
    return 0.5f * x * (1.0f + tanhf(beta * (x + kappa * (x * x * x))));
}

/* g = act(g) * u elementwise (act: silu, or Gemma-4's gelu_tanh), SWIGLU_PART
 * elements per job (the last one shorter): each element's value depends on
 * nothing else. */
enum { SWIGLU_PART = 2048 };
typedef struct {
    float *g;
    const float *u;
    size_t n;
    int gelu;
} swiglu_job;

static void swiglu_part(void *p, int start, int end) {
    swiglu_job *j = p;
    size_t a = (size_t)start * SWIGLU_PART, e = (size_t)end * SWIGLU_PART;
    if (e > j->n) e = j->n;
    if (j->gelu) {
        for (size_t i = a; i < e; i++) j->g[i] = gelu_tanh(j->g[i]) * j->u[i];
        return;
    }
    for (size_t i = a; i < e; i++) {
        float g = j->g[i];
        j->g[i] = g / (1.0f + expf(-g)) * j->u[i];
    }
}

/* g[n] = act(g) * u (gelu: GeGLU, else SwiGLU), in parallel parts when large */
static void gated_act(tp_pool *tp, float *g, const float *u, size_t n, int gelu) {
    swiglu_job j = {g, u, n, gelu};
    if (n < 2 * SWIGLU_PART) swiglu_part(&j, 0, (int)((n + SWIGLU_PART - 1) / SWIGLU_PART));
    else tp_for(tp, (int)((n + SWIGLU_PART - 1) / SWIGLU_PART), swiglu_part, &j);
}

static void swiglu(tp_pool *tp, float *g, const float *u, size_t n) { gated_act(tp, g, u, n, 0); }

/* x += Wd(silu(Wg n) * (Wu n)), n = post_norm(x); for T rows. Gemma-4:
 * gelu_tanh for silu, and ffn_out_norm on the output before the add. */
/* out[T][H] = Wd(act(Wg n) * (Wu n)), n = post_norm(x) (in s->xn) */
static void dense_mlp(tp_pool *tp, scratch *s, const mdl_layer *L, const cfg_model *c, int T, float *out) {
    int H = c->hidden, I = c->inter;
    rmsnorm_rows(s->xn, s->x, L->post_norm, T, H, c->eps);
    float *ys[2] = {s->g, s->u};
    const wt_weight *ws[2] = {&L->wg, &L->wu};
    kn_matmul_n(tp, ys, s->xn, ws, 2, T);
    gated_act(tp, s->g, s->u, (size_t)T * I, c->geglu);
    kn_matmul(tp, out, s->g, &L->wd, T);
}

static void mlp(tp_pool *tp, scratch *s, const mdl_layer *L, const cfg_model *c, int T) {
    int H = c->hidden;
    dense_mlp(tp, s, L, c, T, s->xn);
    if (L->ffn_out_norm) rmsnorm_rows(s->xn, s->xn, L->ffn_out_norm, T, H, c->eps);
    for (size_t i = 0; i < (size_t)T * H; i++) s->x[i] += s->xn[i];
}

/* Gemma-4's per-layer input of layer l: x += ple_norm(Wproj (gelu_tanh(Wgate
 * x) * in_l)), in_l = row t's slice l of s->ple ([T][P], ple_inputs). */
static void ple_block(tp_pool *tp, scratch *s, const mdl_layer *L, int l, const cfg_model *c, int T) {
    int H = c->hidden, P = c->ple;
    size_t LP = (size_t)c->n_layers * P;
    kn_matmul(tp, s->pt, s->x, &L->ple_gate, T); /* [T][P] */
    for (int t = 0; t < T; t++) {
        float *g = s->pt + (size_t)t * P;
        const float *in = s->ple + t * LP + (size_t)l * P;
        for (int i = 0; i < P; i++) g[i] = gelu_tanh(g[i]) * in[i];
    }
    kn_matmul(tp, s->xn, s->pt, &L->ple_proj, T); /* [T][H] */
    rmsnorm_rows(s->xn, s->xn, L->ple_norm, T, H, c->eps);
    for (size_t i = 0; i < (size_t)T * H; i++) s->x[i] += s->xn[i];
}

/* One row's routing: p = softmax(l[E]) in f32 (in place), sel[k] = the k
 * largest p, largest first (ties: the lower index), w[k] their p, divided
 * by their sum (in rank order) when norm. Depends on this row alone. */
/* sel[k] = the indices of the k largest of l[E], largest first (ties: the
 * lower index) */
static void top_k(const float *l, int E, int k, int *sel) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < E; i++) {
            int taken = 0;
            for (int q = 0; q < j; q++) taken |= sel[q] == i;
            if (!taken && (best < 0 || l[i] > l[best])) best = i;
        }
        sel[j] = best;
    }
}

static void route(float *l, int E, int k, int norm, int *sel, float *w) {
    float mx = l[0], sum = 0.0f;
    for (int i = 1; i < E; i++) mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < E; i++) sum += l[i] = expf(l[i] - mx);
    for (int i = 0; i < E; i++) l[i] /= sum;
    top_k(l, E, k, sel);
    for (int j = 0; j < k; j++) w[j] = l[sel[j]];
    if (norm) {
        float t = 0.0f;
        for (int j = 0; j < k; j++) t += w[j];
        for (int j = 0; j < k; j++) w[j] /= t;
    }
}

/* gpt-oss's routing of one row: l[E] = router logits (bias added), sel[k]
 * = the k largest logits, largest first (ties: the lower index), w[k] =
 * softmax over those k logits (max subtracted, sums in rank order). */
static void route_topk_softmax(const float *l, int E, int k, int *sel, float *w) {
    top_k(l, E, k, sel);
    float mx = l[sel[0]], sum = 0.0f;
    for (int j = 0; j < k; j++) sum += w[j] = expf(l[sel[j]] - mx);
    for (int j = 0; j < k; j++) w[j] /= sum;
}

/* gpt-oss's expert activation on rows n of one expert, in place in g:
 * g = clamp(g + bg, max L), u = clamp(u + bu, -L, L),
 * g = g * sigmoid(1.702 g) * (u + 1). */
static void clamped_swiglu(float *g, const float *u, const float *bg, const float *bu, int n, int I, float L) {
    for (int r = 0; r < n; r++)
        for (int i = 0; i < I; i++) {
            float a = g[(size_t)r * I + i] + bg[i], b = u[(size_t)r * I + i] + bu[i];
            a = a > L ? L : a;
            b = b > L ? L : b < -L ? -L : b;
            g[(size_t)r * I + i] = a / (1.0f + expf(-1.702f * a)) * (b + 1.0f);
        }
}

/* The expert block on T rows: each row routed on its router input rin
 * ([T][H]; route, then (Gemma-4) each weight times router_pes[e]; gpt-oss:
 * route_topk_softmax on the biased logits), out[t] += sum over its k
 * experts, in rank order, of w_j * Wd_e(act(Wg_e n) * (Wu_e n)), n = xin[t]
 * ([T][H]; act: silu, gelu_tanh with c->geglu; gpt-oss: Wd_e
 * clamped_swiglu(...) + bd_e) (+ the gated shared expert on xin,
 * Qwen3.5-MoE). The rows routed to one expert go through its matrices in
 * one kn_matmul (row-invariant, so a row's expert output does not depend
 * on which rows share it), and each row's sum has one order: a row's result
 * is the same bits for any T and any mix of rows. */
static void experts(tp_pool *tp, scratch *s, const mdl_layer *L, const cfg_model *c, int T, const float *rin,
                    const float *xin, float *out) {
    int H = c->hidden, E = c->n_experts, K = c->n_experts_used, I = c->moe_inter;
    kn_matmul(tp, s->rl, rin, &L->router, T);
    for (int e = 0; e <= E; e++) s->start[e] = 0;
    for (int t = 0; t < T; t++) {
        float *rl = s->rl + (size_t)t * E;
        if (L->router_bias) { /* gpt-oss */
            add_bias(rl, L->router_bias, E);
            route_topk_softmax(rl, E, K, s->sel + (size_t)t * K, s->wsel + (size_t)t * K);
        } else {
            route(rl, E, K, c->norm_topk, s->sel + (size_t)t * K, s->wsel + (size_t)t * K);
        }
        if (L->router_pes) /* Gemma-4 */
            for (int j = 0; j < K; j++) s->wsel[t * K + j] *= L->router_pes[s->sel[t * K + j]];
        for (int j = 0; j < K; j++) s->start[s->sel[t * K + j] + 1]++;
    }
    for (int e = 0; e < E; e++) s->start[e + 1] += s->start[e];
    /* pairs grouped by expert, rows ascending within an expert; start[e]
     * becomes the end of expert e's rows on the way, then moves back */
    for (int t = 0; t < T; t++)
        for (int j = 0; j < K; j++) {
            int p = s->start[s->sel[t * K + j]]++;
            s->slot[t * K + j] = p;
            memcpy(s->xe + (size_t)p * H, xin + (size_t)t * H, sizeof(float) * H);
        }
    for (int e = E; e > 0; e--) s->start[e] = s->start[e - 1];
    s->start[0] = 0;
    for (int e = 0; e < E; e++) {
        int a = s->start[e], n = s->start[e + 1] - a;
        if (!n) continue;
        const mdl_expert *x = &L->experts[e];
        float *ys[2] = {s->ge + (size_t)a * I, s->ue + (size_t)a * I};
        const wt_weight *ws[2] = {&x->wg, &x->wu};
        kn_matmul_n(tp, ys, s->xe + (size_t)a * H, ws, 2, n);
        if (x->bg) clamped_swiglu(s->ge + (size_t)a * I, s->ue + (size_t)a * I, x->bg, x->bu, n, I, c->swiglu_limit);
    }
    if (!L->router_bias) gated_act(tp, s->ge, s->ue, (size_t)T * K * I, c->geglu);
    for (int e = 0; e < E; e++) {
        int a = s->start[e], n = s->start[e + 1] - a;
        if (!n) continue;
        kn_matmul(tp, s->ye + (size_t)a * H, s->ge + (size_t)a * I, &L->experts[e].wd, n);
        if (L->experts[e].bd)
            for (int r = 0; r < n; r++) add_bias(s->ye + (size_t)(a + r) * H, L->experts[e].bd, H);
    }
    /* the shared expert (Qwen3.5-MoE): sh = sigmoid(sh_gate . n) * Wd(silu(Wg n) * (Wu n)) */
    if (L->sh_gate) {
        float *ys[2] = {s->g, s->u};
        const wt_weight *ws[2] = {&L->sh_wg, &L->sh_wu};
        kn_matmul_n(tp, ys, xin, ws, 2, T);
        swiglu(tp, s->g, s->u, (size_t)T * c->shared_inter);
        kn_matmul(tp, s->sh, s->g, &L->sh_wd, T);
        for (int t = 0; t < T; t++) {
            const float *n = xin + (size_t)t * H;
            float dot = 0.0f;
            for (int d = 0; d < H; d++) dot += L->sh_gate[d] * n[d];
            float sg = 1.0f / (1.0f + expf(-dot));
            for (int d = 0; d < H; d++) s->sh[(size_t)t * H + d] *= sg;
        }
    }
    for (int t = 0; t < T; t++) {
        float *xr = out + (size_t)t * H;
        for (int d = 0; d < H; d++) {
            float acc = 0.0f;
            for (int j = 0; j < K; j++) acc += s->wsel[t * K + j] * s->ye[(size_t)s->slot[t * K + j] * H + d];
            if (L->sh_gate) acc += s->sh[(size_t)t * H + d];
            xr[d] += acc;
        }
    }
}

/* The expert block as a layer's MLP (Qwen3-MoE, Qwen3.5-MoE, Qwen3-Next,
 * gpt-oss): x += experts(n), n = post_norm(x) routing and feeding them. */
static void moe(tp_pool *tp, scratch *s, const mdl_layer *L, const cfg_model *c, int T) {
    rmsnorm_rows(s->xn, s->x, L->post_norm, T, c->hidden, c->eps);
    experts(tp, s, L, c, T, s->xn, s->xn, s->x);
}

/* Gemma-4's MoE layer (cfg.g4_moe, model.h) on T rows, r = x:
 * h1 = ffn_out_norm1(dense MLP(post_norm(r))) in s->sh; the router's input
 * rmsnorm(r) * router_scale * H^-0.5 in s->rn; the experts' input
 * moe_in_norm(r) in s->xn; h2 = ffn_out_norm2(their sum) in s->h2;
 * x = r + ffn_out_norm(h1 + h2). Row by row throughout: batch-invariant as
 * experts() is. */
static void g4_moe(tp_pool *tp, scratch *s, const mdl_layer *L, const cfg_model *c, int T) {
    int H = c->hidden;
    size_t n = (size_t)T * H;
    dense_mlp(tp, s, L, c, T, s->sh);
    rmsnorm_rows(s->sh, s->sh, L->ffn_out_norm1, T, H, c->eps);
    const float root = 1.0f / sqrtf((float)H); /* hidden_size ** -0.5 */
    rmsnorm_rows(s->rn, s->x, L->router_scale, T, H, c->eps);
    for (size_t i = 0; i < n; i++) s->rn[i] *= root;
    rmsnorm_rows(s->xn, s->x, L->moe_in_norm, T, H, c->eps);
    memset(s->h2, 0, sizeof(float) * n);
    experts(tp, s, L, c, T, s->rn, s->xn, s->h2);
    rmsnorm_rows(s->h2, s->h2, L->ffn_out_norm2, T, H, c->eps);
    for (size_t i = 0; i < n; i++) s->xn[i] = s->sh[i] + s->h2[i];
    rmsnorm_rows(s->xn, s->xn, L->ffn_out_norm, T, H, c->eps);
    for (size_t i = 0; i < n; i++) s->x[i] += s->xn[i];
}

/* q, k, v = Wq xn, Wk xn, Wv xn for T rows of layer l (one parallel region;
 * without Wv, v = k). With a gated q_proj, each head's rows [query | gate]
 * are split into q and gate. */
static void qkv(tp_pool *tp, scratch *s, const mdl_layer *L, const cfg_model *c, int l, int T) {
    float *ys[3] = {c->attn_gate ? s->qg : s->q, s->k, s->v};
    const wt_weight *ws[3] = {&L->wq, &L->wk, &L->wv};
    kn_matmul_n(tp, ys, s->xn, ws, L->wv.rows ? 3 : 2, T);
    if (!L->wv.rows) /* Gemma-4 attention_k_eq_v: v = the keys as projected */
        memcpy(s->v, s->k, sizeof(float) * (size_t)T * cfg_kv_heads(c, l) * cfg_head_dim(c, l));
    if (L->bq) { /* gpt-oss: q, k, v biases */
        int nq = c->n_heads * c->head_dim, nk = c->n_kv_heads * c->head_dim;
        for (size_t t = 0; t < (size_t)T; t++) {
            add_bias(s->q + t * nq, L->bq, nq);
            add_bias(s->k + t * nk, L->bk, nk);
            add_bias(s->v + t * nk, L->bv, nk);
        }
    }
    if (!c->attn_gate) return;
    size_t hd = (size_t)c->head_dim, nh = (size_t)c->n_heads;
    for (size_t t = 0; t < (size_t)T; t++)
        for (size_t h = 0; h < nh; h++) {
            const float *src = s->qg + (t * nh + h) * 2 * hd;
            memcpy(s->q + (t * nh + h) * hd, src, sizeof(float) * hd);
            memcpy(s->gate + (t * nh + h) * hd, src + hd, sizeof(float) * hd);
        }
}

/* x += Wo att (+ bo) (gated: att * sigmoid(gate) first; Gemma-4: x +=
 * attn_out_norm(Wo att)) */
static void attn_out(tp_pool *tp, scratch *s, const mdl_layer *L, const cfg_model *c, int T) {
    if (c->attn_gate)
        for (size_t i = 0; i < (size_t)T * c->n_heads * c->head_dim; i++)
            s->att[i] = s->att[i] * (1.0f / (1.0f + expf(-s->gate[i])));
    kn_matmul(tp, s->xn, s->att, &L->wo, T);
    if (L->bo)
        for (size_t t = 0; t < (size_t)T; t++) add_bias(s->xn + t * c->hidden, L->bo, c->hidden);
    if (L->attn_out_norm) rmsnorm_rows(s->xn, s->xn, L->attn_out_norm, T, c->hidden, c->eps);
    for (size_t i = 0; i < (size_t)T * c->hidden; i++) s->x[i] += s->xn[i];
}

/* Rows t < T of k, v ([T][nkv*hd]) into the cache J describes at positions
 * pos0.. (at_cache_row: each kv head's rows [rows][hd] one contiguous run
 * per buffer or per page, for attention to stream); position p at row p,
 * or at row p % ring in a sliding layer's ring (J->ring). */
static void kv_store(const at_job *J, const float *k, const float *v, int T, int pos0, int nkv, int hd) {
    for (int h = 0; h < nkv; h++)
        for (int t = 0; t < T; t++) {
            int p = J->ring ? (pos0 + t) % J->ring : pos0 + t;
            size_t src = ((size_t)t * nkv + h) * hd;
            memcpy(at_cache_row(J, h, p, 0), k + src, sizeof(float) * hd);
            memcpy(at_cache_row(J, h, p, 1), v + src, sizeof(float) * hd);
        }
}

/* ---- one decoder layer ----------------------------------------------------- */

/* One sequence's rows in a layer pass: scratch rows off..off+T-1 at
 * positions pos0.. (a tree batch: J's depths), its keys J (the cache Ka/Va
 * or its pages, and Kb/Vb for the draft's block rows, with their strides;
 * out, q and the head counts are filled in by layer), store: the rows' K/V
 * go into J's cache first (0: nothing stored), RoPE table, recurrent state
 * (NULL: none). */
typedef struct {
    int off, T, pos0;
    at_job J;
    int store;
    const rope_table *rope;
    dn_state *dn;
} ly_seg;

/* One decoder layer (Qwen3, Llama, Qwen3-MoE, Qwen3.5) on the T rows of s->x
 * ([T][H], updated in place), rows at positions pos0..pos0+T-1: the target
 * forward and the draft block both run it, so a layer reads top to bottom
 * in one place.
 *   xn = in_norm(x);
 *   a Gated DeltaNet layer (Qwen3.5 linear_attention, dn != NULL): x +=
 *     dn_mixer(xn), its recurrent state in dn (deltanet.h); else
 *   q, k, v = Wq xn, Wk xn, Wv xn (Qwen3.5: q_proj also gives a gate per
 *     head); q/k norm + RoPE (Qwen3.5: on the first rot_dim dims);
 *   (gpt-oss: q, k, v biases added first)
 *   cache (target): k, v stored at positions pos0.. of J's cache (its
 *     pages, or a ring when J.ring: kv_store) before attention,
 *     so the rows see themselves causally (J->causal);
 *   att = attention of q over the keys J describes (gpt-oss: the last
 *     window positions in a sliding layer, and the head's sink; Qwen3.5:
 *     times sigmoid(gate)); x += Wo att (+ bo);
 *   x += Wd(silu(Wg n) * (Wu n)), n = post_norm(x), or the expert block
 *     (moe) in a layer that has one.
 * Gemma-4 (layer l's heads cfg_head_dim(l) wide, cfg_kv_heads(l) of them;
 * ROPE: the table of the layer's type): v RMS-normed per head without
 * weight; scores not scaled (c->attn_scale 1); x += attn_out_norm(Wo att);
 * x += ffn_out_norm(Wd(gelu_tanh(Wg n) * (Wu n))); x += the per-layer input
 * (ple_block); x *= layer_scalar.
 * Several sequences (segments, ly_seg) share one pass: every row-wise step
 * (norms, projections, MLP / experts) runs once over all T rows, so the
 * weights are read once for all of them; RoPE, the cache store, attention
 * and the recurrent mixer run per segment, each over its own positions and
 * cache. A row's result never depends on the rows beside it (backend.h's
 * batch invariance), so a segment computes exactly what it computes alone. */
static void layer(tp_pool *tp, scratch *s, const mdl_layer *L, int l, const cfg_model *c, const ly_seg *sg,
                  int n_seg, int T) {
    int H = c->hidden, hd = cfg_head_dim(c, l), nh = c->n_heads, nkv = cfg_kv_heads(c, l), kvd = nkv * hd;
    rmsnorm_rows(s->xn, s->x, L->in_norm, T, H, c->eps);
    if (c->linear_layer[l] && sg[0].dn) {
        for (int i = 0; i < n_seg; i++) {
            float *xn = s->xn + (size_t)sg[i].off * H;
            dn_mixer(tp, sg[i].dn, L, l, xn, xn, sg[i].T);
        }
        for (size_t i = 0; i < (size_t)T * H; i++) s->x[i] += s->xn[i];
        if (L->experts) moe(tp, s, L, c, T);
        else mlp(tp, s, L, c, T);
        return;
    }
    qkv(tp, s, L, c, l, T);
    for (int i = 0; i < n_seg; i++) {
        const ly_seg *g = &sg[i];
        for (int t = 0; t < g->T; t++) { /* a tree row's position: committed length + depth (backend.h) */
            int pos = g->J.tree_depth ? g->J.na + g->J.tree_depth[t] : g->pos0 + t;
            size_t r = (size_t)(g->off + t);
            norm_rope(s->q + r * nh * hd, nh, hd, L->q_norm, c->eps, g->rope, pos);
            norm_rope(s->k + r * kvd, nkv, hd, L->k_norm, c->eps, g->rope, pos);
        }
    }
    if (c->v_norm)
        for (size_t i = 0; i < (size_t)T * nkv; i++) rmsnorm(s->v + i * hd, s->v + i * hd, NULL, hd, c->eps);
    for (int i = 0; i < n_seg; i++) {
        const ly_seg *g = &sg[i];
        size_t r = (size_t)g->off;
        if (g->store) kv_store(&g->J, s->k + r * kvd, s->v + r * kvd, g->T, g->pos0, nkv, hd);
        at_job J = g->J;
        J.out = s->att + r * nh * hd, J.q = s->q + r * nh * hd, J.nh = nh, J.nkv = nkv, J.hd = hd;
        J.scale = c->attn_scale, J.sinks = L->sinks, J.window = c->sliding_layer[l] ? c->window : 0;
        at_run(tp, &J, g->T);
    }
    attn_out(tp, s, L, c, T);
    if (c->g4_moe) g4_moe(tp, s, L, c, T);
    else if (L->experts) moe(tp, s, L, c, T);
    else mlp(tp, s, L, c, T);
    if (L->ple_gate.rows) ple_block(tp, s, L, l, c, T);
    if (c->arch == CFG_GEMMA4)
        for (size_t i = 0; i < (size_t)T * H; i++) s->x[i] *= L->layer_scalar;
}

/* ---- target sequence state ----------------------------------------------- */

typedef struct {
    const mdl_model *m;
    cpu_be *be;      /* the instance: its workers, its page budget */
    tp_pool *tp;     /* the instance's workers */
    int n_ctx, len;
    /* K/V of the attention layers. A full layer (kv_rows = n_ctx) keeps
     * position p in page p / KV_PAGE, row p % KV_PAGE (the page rule below).
     * A sliding layer (window W, gpt-oss) has a ring of kv_rows = ring = W +
     * BE_DN_KEEP rows when that is less than n_ctx, [nkv][ring][hd] at kc +
     * kv_off[l] (vc likewise), allocated whole: position p at row p % ring.
     * Page rule: page i holds positions i*KV_PAGE .. i*KV_PAGE+KV_PAGE-1 of
     * every full layer: layer l's K as [nkv][KV_PAGE][hd] at page_off[l]
     * floats from the page's start, its V at page_vhalf + page_off[l]. A
     * forward gets the pages its rows need before anything runs (refused,
     * nothing changed, past the instance's kv_budget); truncate keeps them
     * (a rollback's rows are written again at once), trim gives back those
     * past the length, destroy all. So the memory a sequence holds follows
     * the positions it has used since its last trim, in steps of a page.
     * Ring rollback rule: positions hw - ring .. len - 1 are in the ring (hw:
     * the high-water length, the most rows held since the last restart: no
     * position past them has overwritten them). truncate(m) is exact when
     * the next row's keys max(0, m - W + 1) .. m - 1 are among them, i.e.
     * max(0, m - W + 1) >= hw - ring: always within the last BE_DN_KEEP rows
     * written (every DFlash verify); otherwise the sequence restarts empty
     * (truncate returns 0), as the recurrent rule does (backend.h). */
    float *kc, *vc;  /* the rings (NULL: none) */
    size_t *kv_off;  /* [n_layers] float offset of ring layer l's block in kc/vc */
    int *kv_rows;    /* [n_layers] its rows: n_ctx (paged), the ring, 0 for a linear layer */
    float **page;    /* [max_pages] page[0..n_pages) held, the rest NULL */
    int n_pages, max_pages;
    size_t page_bytes;  /* one page, K and V of every full layer */
    size_t *page_off;   /* [n_layers] floats from a page's start to full layer l's K */
    size_t page_vhalf;  /* floats from a page's start to its V half */
    int ring;        /* the sliding layers' ring rows, 0: no ring (full-length caches) */
    int hw;          /* high-water length (ring rule) */
    rope_table rope;
    rope_table rope_full; /* Gemma-4's full layers (proportional RoPE), else unused (n_ctx 0) */
    scratch s;
    dn_state *dn;    /* Gated DeltaNet states (a model with linear layers), else NULL */
    float *kept;     /* [BE_KEEP_ROWS][H] final-normed rows of the last forward with keep_rows */
    int n_kept;      /* rows in kept (0: the last forward kept none) */
    float *slice;    /* [BE_KEEP_ROWS][ARGMAX_SLICE] logits of one vocabulary slice */
    float *taps;     /* [BE_MAX_ROWS][cap_taps][H]; rows 0..tap_rows-1 hold the last
                        forward's taps as [tap_rows][n_taps][H] */
    int cap_taps;    /* taps per row the buffer has room for (grown on demand) */
    int tap_rows;    /* rows of taps the last forward left (0: it tapped none) */
    int n_taps;      /* taps per row of the last forward, layers tap_layers[] */
    int tap_layers[CFG_MAX_TAPS];
    /* the last forward (tree rule, backend.h) */
    int fwd_len;     /* the committed length before it */
    int fwd_T;       /* its rows */
    int tree;        /* it was a tree batch */
    int tree_parent[BE_KEEP_ROWS];            /* [fwd_T] parent rows (-1: committed) */
    int tree_depth[BE_KEEP_ROWS];             /* [fwd_T] depth of each row */
    int tree_anc[BE_KEEP_ROWS * BE_KEEP_ROWS]; /* [fwd_T][BE_KEEP_ROWS] ancestor row at each depth */
} cpu_seq;

/* A page's memory: its own mapping, so giving it back returns it to the
 * system at once (under AddressSanitizer the allocator's, so overruns are
 * caught); 64-byte aligned either way. NULL when there is none. */
#if defined(__SANITIZE_ADDRESS__)
#define KV_PAGE_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KV_PAGE_MALLOC 1
#endif
#endif
static float *page_map(size_t bytes) {
#ifdef KV_PAGE_MALLOC
    return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
#else
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
#endif
}

static void page_unmap(float *p, size_t bytes) {
#ifdef KV_PAGE_MALLOC
    (void)bytes;
    free(p);
#else
    munmap(p, bytes);
#endif
}

/* Pages for positions 0..rows-1 (the page rule): 0, or -1 + error naming
 * the budget (or the memory) with the pages held so far kept. */
static int seq_get_pages(cpu_seq *q, int rows) {
    int need = (rows + KV_PAGE - 1) / KV_PAGE;
    cpu_be *b = q->be;
    while (q->n_pages < need) {
        pthread_mutex_lock(&b->kv_mu);
        int over = b->kv_budget && b->kv_used + q->page_bytes > b->kv_budget;
        if (!over) {
            b->kv_used += q->page_bytes;
            if (b->kv_used > b->kv_peak) b->kv_peak = b->kv_used;
        }
        size_t used = b->kv_used;
        pthread_mutex_unlock(&b->kv_mu);
        if (over) {
            dfl_seterr("KV cache budget exhausted: position %d needs a page of %.2f MiB (%d positions) and the "
                       "sequences of this model hold %.1f MiB of the %.1f MiB budget (kv_budget_mib, --kv-budget)",
                       q->n_pages * KV_PAGE, q->page_bytes / 1048576.0, KV_PAGE, used / 1048576.0,
                       b->kv_budget / 1048576.0);
            return -1;
        }
        float *p = page_map(q->page_bytes);
        if (!p) {
            pthread_mutex_lock(&b->kv_mu);
            b->kv_used -= q->page_bytes;
            pthread_mutex_unlock(&b->kv_mu);
            dfl_seterr("KV cache: out of memory for a page of %.2f MiB (position %d)", q->page_bytes / 1048576.0,
                       q->n_pages * KV_PAGE);
            return -1;
        }
        q->page[q->n_pages++] = p;
    }
    return 0;
}

/* Give back the pages past those positions 0..rows-1 need. */
static void seq_trim_pages(cpu_seq *q, int rows) {
    int keep = (rows + KV_PAGE - 1) / KV_PAGE, n = 0;
    while (q->n_pages > keep) {
        page_unmap(q->page[--q->n_pages], q->page_bytes);
        q->page[q->n_pages] = NULL;
        n++;
    }
    if (!n) return;
    pthread_mutex_lock(&q->be->kv_mu);
    q->be->kv_used -= (size_t)n * q->page_bytes;
    pthread_mutex_unlock(&q->be->kv_mu);
}

/* The cache of layer l of q as attention reads it (keys 0..len-1 then the
 * batch's own: causal). */
static at_job seq_keys(const cpu_seq *q, int l) {
    const cfg_model *c = &q->m->cfg;
    size_t hd = (size_t)cfg_head_dim(c, l);
    if (q->kv_rows[l] == q->n_ctx)
        return (at_job){.pages = q->page, .page_k = q->page_off[l], .page_v = q->page_vhalf + q->page_off[l],
                        .page_shift = KV_PAGE_SHIFT, .a_head = KV_PAGE * hd, .a_row = hd, .na = q->len,
                        .causal = 1};
    return (at_job){.Ka = q->kc + q->kv_off[l], .Va = q->vc + q->kv_off[l], .a_head = (size_t)q->kv_rows[l] * hd,
                    .a_row = hd, .ring = q->kv_rows[l], .na = q->len, .causal = 1};
}

static void *cpu_create(void *be, const mdl_model *m, int n_ctx) {
    const cfg_model *c = &m->cfg;
    cpu_seq *q = dfl_calloc(1, sizeof *q);
    q->m = m;
    q->be = be;
    q->tp = q->be->tp;
    q->n_ctx = n_ctx;
    q->kv_off = dfl_calloc((size_t)c->n_layers, sizeof(size_t));
    q->kv_rows = dfl_malloc(sizeof(int) * (size_t)c->n_layers);
    q->page_off = dfl_calloc((size_t)c->n_layers, sizeof(size_t));
    q->ring = c->n_sliding_layers && c->window + BE_DN_KEEP < n_ctx ? c->window + BE_DN_KEEP : 0;
    size_t kv = 0, pg = 0;
    for (int l = 0; l < c->n_layers; l++) {
        q->kv_rows[l] = c->linear_layer[l] ? 0 : c->sliding_layer[l] && q->ring ? q->ring : n_ctx;
        size_t head_rows = (size_t)cfg_kv_heads(c, l) * cfg_head_dim(c, l);
        if (q->kv_rows[l] == n_ctx) {
            q->page_off[l] = pg;
            pg += KV_PAGE * head_rows;
        } else if (q->kv_rows[l]) {
            q->kv_off[l] = kv;
            kv += (size_t)q->kv_rows[l] * head_rows;
        }
    }
    if (kv) {
        q->kc = dfl_malloc64(sizeof(float) * kv);
        q->vc = dfl_malloc64(sizeof(float) * kv);
    }
    q->page_vhalf = pg;
    q->page_bytes = 2 * pg * sizeof(float);
    q->max_pages = (n_ctx + KV_PAGE - 1) / KV_PAGE;
    q->page = dfl_calloc((size_t)q->max_pages, sizeof *q->page);
    rope_init(&q->rope, c, n_ctx);
    if (c->arch == CFG_GEMMA4) {
        int l = c->n_layers - 1; /* a full layer (config.c: the last one is) */
        rope_init_proportional(&q->rope_full, c, cfg_head_dim(c, l), n_ctx);
    }
    scratch_init(&q->s, c, CHUNK);
    if (c->n_linear_layers) {
        q->dn = dfl_calloc(1, sizeof *q->dn);
        dn_init(q->dn, c, CHUNK);
    }
    q->kept = dfl_malloc64(sizeof(float) * BE_KEEP_ROWS * (size_t)c->hidden);
    q->slice = dfl_malloc64(sizeof(float) * BE_KEEP_ROWS * (size_t)ARGMAX_SLICE);
    return q;
}

static void cpu_destroy(void *st) {
    cpu_seq *q = st;
    if (!q) return;
    seq_trim_pages(q, 0);
    free(q->page);
    free(q->page_off);
    free(q->kept);
    free(q->slice);
    free(q->taps);
    free(q->kc);
    free(q->vc);
    free(q->kv_off);
    free(q->kv_rows);
    if (q->dn) {
        dn_free(q->dn);
        free(q->dn);
    }
    rope_free(&q->rope);
    if (q->rope_full.n_ctx) rope_free(&q->rope_full);
    scratch_free(&q->s);
    free(q);
}

static int cpu_length(void *st) { return ((cpu_seq *)st)->len; }

/* be_ops.trim: the pages past the length (and rows) go back (the page rule). */
static void cpu_trim(void *st, int rows) {
    cpu_seq *q = st;
    seq_trim_pages(q, rows > q->len ? rows : q->len);
}

/* be_ops.kv_bytes */
static size_t cpu_kv_bytes(void *st, int rows) {
    cpu_seq *q = st;
    return (size_t)((rows + KV_PAGE - 1) / KV_PAGE) * q->page_bytes;
}

/* be_ops.kv_need */
static size_t cpu_kv_need(void *st, int rows) {
    cpu_seq *q = st;
    size_t want = cpu_kv_bytes(st, rows), held = (size_t)q->n_pages * q->page_bytes;
    return want > held ? want - held : 0;
}

/* be_ops.kv_usage: the pages all sequences of the instance hold. */
static size_t cpu_kv_usage(void *be, size_t *budget, size_t *peak) {
    cpu_be *b = be;
    pthread_mutex_lock(&b->kv_mu);
    size_t used = b->kv_used;
    if (budget) *budget = b->kv_budget;
    if (peak) *peak = b->kv_peak;
    pthread_mutex_unlock(&b->kv_mu);
    return used;
}

/* The KV rule (backend.h); sliding-window rings by the ring rule (cpu_seq);
 * recurrent states by deltanet.h's rollback rule. */
static int cpu_truncate(void *st, int len) {
    cpu_seq *q = st;
    if (len < 0 || len >= q->len) return q->len;
    if (q->ring) {
        int need = len - q->m->cfg.window + 1; /* the next row's oldest key */
        if ((need > 0 ? need : 0) < q->hw - q->ring) len = 0;
        if (len == 0) q->hw = 0;
    }
    q->len = q->dn ? dn_rollback(q->tp, q->dn, q->m, len) : len;
    return q->len;
}

/* The prefix rule (backend.h): the pages holding positions 0..n-1 (every
 * attention layer's rows, the page rule), taken by dst first. Only paged
 * caches: a ring (its position p at row p % ring, the oldest ones
 * overwritten) and a recurrent state are refused. */
static int cpu_copy_prefix(void *dst, const void *src, int n) {
    cpu_seq *d = dst;
    const cpu_seq *q = src;
    const cfg_model *c = &q->m->cfg;
    const char *why = d == q                                                   ? "a sequence onto itself"
                      : q->dn || c->n_linear_layers                            ? "recurrent (Gated DeltaNet) layers"
                      : q->ring || d->ring                                     ? "sliding-window ring caches"
                      : d->n_ctx != q->n_ctx || d->m->cfg.n_layers != c->n_layers ? "states of different shapes"
                      : n < 0 || n > q->len                                    ? "rows beyond the source's length"
                                                                               : NULL;
    for (int l = 0; !why && l < c->n_layers; l++)
        if (d->kv_rows[l] != q->kv_rows[l] || d->page_off[l] != q->page_off[l]) why = "states of different shapes";
    if (why) {
        dfl_seterr("copy_prefix: not supported: %s (%d rows of %d)", why, n, q->len);
        return -1;
    }
    if (seq_get_pages(d, n) != 0) return -1; /* the budget: d unchanged but for pages it may use later */
    /* no rings here: every attention layer is paged, so whole pages (the
     * last one's rows past n too: forgotten rows, the KV rule) */
    for (int i = 0; i < (n + KV_PAGE - 1) / KV_PAGE; i++) memcpy(d->page[i], q->page[i], q->page_bytes);
    d->len = d->hw = n;
    d->n_kept = d->tap_rows = 0;
    d->fwd_len = n, d->fwd_T = 0, d->tree = 0;
    return 0;
}

/* Row embeddings x[T][H] of tokens tok[T] (Gemma-4: times sqrt(H), as
 * transformers' scaled embedding in float32 does). */
static void embed_rows(float *x, const mdl_model *m, const int32_t *tok, int T) {
    int H = m->cfg.hidden;
    for (int t = 0; t < T; t++) wt_get_row(x + (size_t)t * H, &m->embed, tok[t]);
    if (m->cfg.arch != CFG_GEMMA4) return;
    float sc = (float)sqrt((double)H);
    for (size_t i = 0; i < (size_t)T * H; i++) x[i] *= sc;
}

/* Gemma-4's per-layer inputs of T rows (s->x: their scaled embeddings) into
 * s->ple [T][L][P] (model.h): proj = ple_model_proj(x) / sqrt(H), each
 * layer's P values RMS-normed by ple_proj_norm, plus sqrt(P) times the
 * token's row of ple_embed, all times 1/sqrt(2) - each constant rounded to
 * float as transformers' float32 model has it. */
static void ple_inputs(tp_pool *tp, scratch *s, const mdl_model *m, const int32_t *tok, int T) {
    const cfg_model *c = &m->cfg;
    int P = c->ple, LP = c->n_layers * P;
    float ps = (float)pow(c->hidden, -0.5), es = (float)sqrt((double)P), is = (float)pow(2.0, -0.5);
    kn_matmul(tp, s->ple, s->x, &m->ple_model_proj, T);
    for (int t = 0; t < T; t++) {
        float *v = s->ple + (size_t)t * LP;
        wt_get_row(s->pe, &m->ple_embed, tok[t]);
        for (int i = 0; i < LP; i++) v[i] *= ps;
        for (int l = 0; l < c->n_layers; l++) rmsnorm(v + (size_t)l * P, v + (size_t)l * P, m->ple_proj_norm, P, c->eps);
        for (int i = 0; i < LP; i++) v[i] = (v[i] + s->pe[i] * es) * is;
    }
}

/* Final logit softcapping (Gemma-4): l = cap tanh(l / cap), on n values */
static void softcap(float *l, size_t n, float cap) {
    if (cap == 0) return;
    for (size_t i = 0; i < n; i++) l[i] = tanhf(l[i] / cap) * cap;
}

/* Rows [r0, r0+T) of sequence q's batch b, at positions q->len.. (one part
 * of a pass through the layers). */
typedef struct {
    cpu_seq *q;
    const be_batch *b;
    int r0, T;
} cpu_part;

/* One pass through the layers over the rows of n parts (at most CHUNK rows
 * in all; several parts: sequences of one model without recurrent layers or
 * tree batches, cpu_forward_multi), in s (the first part's scratch: the
 * backend runs one pass at a time). Each part's rows are computed as a
 * forward of that sequence alone computes them (layer). */
static void forward_parts(const cpu_part *p, int n) {
    cpu_seq *q0 = p[0].q;
    const mdl_model *m = q0->m;
    const cfg_model *c = &m->cfg;
    int H = c->hidden, T = 0, off[CHUNK];
    scratch *s = &q0->s;
    int32_t tok[CHUNK];
    for (int i = 0; i < n; i++) {
        off[i] = T;
        memcpy(tok + T, p[i].b->tokens + p[i].r0, sizeof(int32_t) * (size_t)p[i].T);
        T += p[i].T;
    }
    embed_rows(s->x, m, tok, T);
    if (c->ple) ple_inputs(q0->tp, s, m, tok, T);
    ly_seg sg[CHUNK];
    for (int l = 0; l < c->n_layers; l++) {
        const mdl_layer *L = &m->layers[l];
        for (int i = 0; i < n; i++) {
            cpu_seq *q = p[i].q;
            /* keys: the cache, positions 0..pos0+t for row t (causal; a
             * sliding layer the last window of them) */
            sg[i] = (ly_seg){.off = off[i], .T = p[i].T, .pos0 = q->len, .store = q->kv_rows[l] != 0,
                             .rope = c->arch == CFG_GEMMA4 && !c->sliding_layer[l] ? &q->rope_full : &q->rope,
                             .dn = q->dn, .J = q->kv_rows[l] ? seq_keys(q, l) : (at_job){.causal = 1}};
            if (q->tree) { /* keys: the committed rows, then the row's ancestors (attention.h) */
                sg[i].J.na = q->fwd_len;
                sg[i].J.tree_depth = q->tree_depth + p[i].r0;
                sg[i].J.tree_anc = q->tree_anc + (size_t)p[i].r0 * BE_KEEP_ROWS;
                sg[i].J.tree_stride = BE_KEEP_ROWS;
            }
        }
        layer(q0->tp, s, L, l, c, sg, n, T);
        for (int i = 0; i < n; i++) {
            const be_batch *b = p[i].b;
            for (int k = 0; k < b->n_taps; k++)
                if (b->tap_layers[k] == l)
                    for (int t = 0; t < p[i].T; t++)
                        memcpy(p[i].q->taps + ((size_t)(p[i].r0 + t) * b->n_taps + k) * H,
                               s->x + (size_t)(off[i] + t) * H, sizeof(float) * H);
        }
    }
    for (int i = 0; i < n; i++) {
        cpu_seq *q = p[i].q;
        const be_batch *b = p[i].b;
        int r0 = p[i].r0;
        const float *x = s->x + (size_t)off[i] * H;
        if (b->keep_rows) rmsnorm_rows(q->kept + (size_t)r0 * H, x, m->final_norm, p[i].T, H, c->eps);
        /* logits for the rows of this part that are among the last n_logits */
        int first = b->T - b->n_logits; /* batch row of logits row 0 */
        int a = r0 > first ? r0 : first, e = r0 + p[i].T;
        if (a < e) {
            int nl = e - a;
            rmsnorm_rows(s->xn, x + (size_t)(a - r0) * H, m->final_norm, nl, H, c->eps);
            kn_matmul(q->tp, b->logits + (size_t)(a - first) * c->vocab, s->xn, &m->lm_head, nl);
            softcap(b->logits + (size_t)(a - first) * c->vocab, (size_t)nl * c->vocab, c->softcap);
        }
        if (q->dn) dn_advance(q->dn, p[i].T);
        q->len += p[i].T;
        if (q->len > q->hw) q->hw = q->len;
    }
}

/* The checks and the per-forward state of sequence q before batch b runs
 * (the tree rule, the taps' room); -1 + error, q unchanged, if b is refused. */
static int forward_begin(cpu_seq *q, const be_batch *b) {
    const cfg_model *c = &q->m->cfg;
    if (be_check_batch(b, c, q->len, q->n_ctx) != 0) return -1;
    if (b->tree_parent && (q->dn || c->n_sliding_layers)) {
        dfl_seterr("forward: tree verification needs full attention in every layer; this %s model has %s "
                   "(use the chain: --tree 0)", c->arch_name,
                   q->dn ? "recurrent (Gated DeltaNet) layers" : "sliding-window layers");
        return -1;
    }
    if (seq_get_pages(q, q->len + b->T) != 0) return -1;
    if (b->n_taps > q->cap_taps) {
        free(q->taps);
        q->taps = dfl_malloc64(sizeof(float) * BE_MAX_ROWS * (size_t)b->n_taps * c->hidden);
        q->cap_taps = b->n_taps;
    }
    q->tree = 0;
    if (b->tree_parent) { /* backend.h's tree rule */
        for (int t = 0; t < b->T; t++) {
            int p = b->tree_parent[t], d = p < 0 ? 0 : q->tree_depth[p] + 1;
            q->tree_parent[t] = p;
            q->tree_depth[t] = d;
            int *anc = q->tree_anc + (size_t)t * BE_KEEP_ROWS;
            if (p >= 0) memcpy(anc, q->tree_anc + (size_t)p * BE_KEEP_ROWS, sizeof(int) * (size_t)d);
            anc[d] = t;
        }
        q->tree = 1;
    }
    q->fwd_len = q->len;
    q->fwd_T = b->T;
    q->n_kept = 0;
    q->tap_rows = b->n_taps ? b->T : 0;
    q->n_taps = b->n_taps;
    for (int i = 0; i < b->n_taps; i++) q->tap_layers[i] = b->tap_layers[i];
    return 0;
}

static int cpu_forward(void *st, const be_batch *b) {
    cpu_seq *q = st;
    if (forward_begin(q, b) != 0) return -1;
    /* recurrent states: snapshot at row s0 (deltanet.h), chunks cut there */
    int s0 = b->T > DN_KEEP ? b->T - DN_KEEP : 0;
    if (q->dn && s0 > 0) dn_forget(q->dn);
    for (int r0 = 0; r0 < b->T;) {
        int n = b->T - r0 < CHUNK ? b->T - r0 : CHUNK;
        if (r0 < s0 && r0 + n > s0) n = s0 - r0;
        if (q->dn && r0 == s0) dn_snapshot(q->dn, q->len);
        forward_parts(&(cpu_part){.q = q, .b = b, .r0 = r0, .T = n}, 1);
        r0 += n;
    }
    if (b->keep_rows) q->n_kept = b->T;
    return 0;
}

/* be_ops.forward_multi: the batches of n sequences in passes of up to CHUNK
 * rows, each pass taking the next rows of every sequence that has rows left
 * (a sequence's rows stay in order, so its keys are in place before its later
 * rows attend to them). Refused (nothing run) for a model with recurrent
 * layers (their snapshots are cut per forward), a tree batch, sequences of
 * different models or a sequence given twice. */
static int cpu_forward_multi(void *const *sts, const be_batch *bs, int n) {
    if (n < 1 || n > BE_MAX_SEQS) {
        dfl_seterr("forward_multi: %d sequences (1..%d)", n, BE_MAX_SEQS);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const cpu_seq *q = sts[i];
        if (q->dn || bs[i].tree_parent || !same_model(q->m, ((const cpu_seq *)sts[0])->m)) {
            dfl_seterr("forward_multi: sequence %d: %s", i,
                       q->dn ? "recurrent layers" : bs[i].tree_parent ? "a tree batch" : "another model");
            return -1;
        }
        for (int k = 0; k < i; k++)
            if (sts[k] == sts[i]) {
                dfl_seterr("forward_multi: sequence %d given twice", i);
                return -1;
            }
        if (be_check_batch(&bs[i], &q->m->cfg, q->len, q->n_ctx) != 0 ||
            seq_get_pages(sts[i], q->len + bs[i].T) != 0) {
            dfl_preferr("forward_multi: sequence %d", i);
            return -1;
        }
    }
    for (int i = 0; i < n; i++) forward_begin(sts[i], &bs[i]); /* checked above (the pages held): cannot fail */
    int done[BE_MAX_SEQS] = {0}, left = n;
    while (left > 0) {
        cpu_part p[CHUNK];
        int np = 0, rows = 0;
        for (int i = 0; i < n && rows < CHUNK; i++) {
            int k = bs[i].T - done[i] < CHUNK - rows ? bs[i].T - done[i] : CHUNK - rows;
            if (k <= 0) continue;
            p[np++] = (cpu_part){.q = sts[i], .b = &bs[i], .r0 = done[i], .T = k};
            rows += k;
            done[i] += k;
            left -= done[i] == bs[i].T;
        }
        forward_parts(p, np);
    }
    for (int i = 0; i < n; i++)
        if (bs[i].keep_rows) ((cpu_seq *)sts[i])->n_kept = bs[i].T;
    return 0;
}

/* The tree rule (backend.h): the path rows[0..n) of the last forward moves
 * into place. rows ascend (a parent comes before its child), so row i's
 * source rows[i] >= i is never a destination overwritten before it is read. */
static int cpu_tree_commit(void *st, const int *rows, int n) {
    cpu_seq *q = st;
    const cfg_model *c = &q->m->cfg;
    int T = q->fwd_T, base = q->fwd_len;
    if (be_check_path(rows, n, T, base, q->len, q->tree ? q->tree_parent : NULL) != 0) return -1;
    for (int l = 0; l < c->n_layers; l++) {
        if (!q->kv_rows[l]) continue;
        size_t hd = (size_t)cfg_head_dim(c, l);
        at_job J = seq_keys(q, l); /* a full layer: a tree never runs on rings (forward_begin) */
        for (int h = 0; h < cfg_kv_heads(c, l); h++)
            for (int i = 0; i < n; i++) {
                if (rows[i] == i) continue;
                for (int val = 0; val < 2; val++)
                    memcpy(at_cache_row(&J, h, base + i, val), at_cache_row(&J, h, base + rows[i], val),
                           sizeof(float) * hd);
            }
    }
    size_t H = (size_t)c->hidden, tr = (size_t)q->n_taps * H;
    for (int i = 0; i < n; i++) {
        if (rows[i] == i) continue;
        if (i < q->tap_rows) memcpy(q->taps + i * tr, q->taps + (size_t)rows[i] * tr, sizeof(float) * tr);
        if (i < q->n_kept) memcpy(q->kept + i * H, q->kept + (size_t)rows[i] * H, sizeof(float) * H);
    }
    if (q->tap_rows) q->tap_rows = n;
    if (q->n_kept) q->n_kept = n;
    q->len = base + n;
    q->hw = q->len > q->hw ? q->len : q->hw;
    q->tree = 0;
    q->fwd_T = n; /* the path is now the last forward's rows 0..n-1, a chain */
    return 0;
}

/* 0 if rows row..row+n-1 were kept by the last forward, else -1 naming op. */
static int check_kept(const cpu_seq *q, int row, int n, const char *op) {
    if (row >= 0 && n >= 1 && row + n <= q->n_kept) return 0;
    dfl_seterr("%s: rows %d..%d not kept by the last forward (%d kept)", op, row, row + n - 1, q->n_kept);
    return -1;
}

/* The same rows and matmul as forward_chunk's logits, so the same bits. */
static int cpu_logits(void *st, int row, int n, float *out) {
    cpu_seq *q = st;
    if (check_kept(q, row, n, "logits") != 0) return -1;
    kn_matmul(q->tp, out, q->kept + (size_t)row * q->m->cfg.hidden, &q->m->lm_head, n);
    softcap(out, (size_t)n * q->m->cfg.vocab, q->m->cfg.softcap);
    return 0;
}

/* The lm_head a slice of rows at a time (the same bits per logit: a row
 * view is the same rows), keeping each row's first maximum; the slice's
 * logits stay in cache instead of [n][vocab] going out to memory. */
static int cpu_argmax(void *st, int row, int n, int32_t *out) {
    cpu_seq *q = st;
    if (check_kept(q, row, n, "argmax") != 0) return -1;
    const wt_weight *w = &q->m->lm_head;
    float best[BE_KEEP_ROWS];
    for (int r0 = 0; r0 < w->rows; r0 += ARGMAX_SLICE) {
        int nr = w->rows - r0 < ARGMAX_SLICE ? w->rows - r0 : ARGMAX_SLICE;
        wt_weight v = kn_row_view(w, r0, nr);
        kn_matmul(q->tp, q->slice, q->kept + (size_t)row * q->m->cfg.hidden, &v, n);
        softcap(q->slice, (size_t)n * nr, q->m->cfg.softcap); /* tanh may tie distinct logits: compare capped ones */
        for (int j = 0; j < n; j++) {
            const float *l = q->slice + (size_t)j * nr;
            int i = smp_argmax(l, nr);
            if (r0 == 0 || l[i] > best[j]) { /* ties keep the earlier index */
                best[j] = l[i];
                out[j] = r0 + i;
            }
        }
    }
    return 0;
}

/* be_ops.predict_multi: cpu_argmax's slices and comparisons over the kept
 * rows of several sequences, gathered CHUNK rows at a time into the first
 * sequence's scratch (xn), so each pass over the lm_head serves them all; a
 * row's logits are the same bits in any company (kn_matmul is batch-
 * invariant, a row view is the same rows), so each ids[] is what cpu_argmax
 * gives and each logits[] row, copied out a slice at a time, what
 * cpu_logits gives. */
static int cpu_predict_multi(void *const *sts, const int *row, const int *n, int32_t *const *ids,
                             float *const *logits, int ns) {
    cpu_seq *q0 = sts[0];
    const mdl_model *m = q0->m;
    int H = m->cfg.hidden;
    for (int i = 0; i < ns; i++) {
        const cpu_seq *q = sts[i];
        if (!same_model(q->m, m)) {
            dfl_seterr("predict_multi: sequence %d is of another model", i);
            return -1;
        }
        if (check_kept(q, row[i], n[i], logits[i] ? "logits" : "argmax") != 0) return -1;
    }
    const wt_weight *w = &m->lm_head;
    int si = 0, sj = 0; /* the next row to gather: sequence si, its row sj */
    while (si < ns) {
        int32_t *dst[CHUNK];
        float *ldst[CHUNK]; /* a logits row: its [vocab] out; NULL: an argmax row */
        int R = 0;
        for (; si < ns && R < CHUNK; sj = 0, si++) {
            const cpu_seq *q = sts[si];
            for (; sj < n[si] && R < CHUNK; sj++, R++) {
                memcpy(q0->s.xn + (size_t)R * H, q->kept + (size_t)(row[si] + sj) * H, sizeof(float) * (size_t)H);
                dst[R] = logits[si] ? NULL : ids[si] + sj;
                ldst[R] = logits[si] ? logits[si] + (size_t)sj * m->cfg.vocab : NULL;
            }
            if (sj < n[si]) break; /* this pass is full: go on in this sequence */
        }
        float best[CHUNK];
        for (int r0 = 0; r0 < w->rows; r0 += ARGMAX_SLICE) {
            int nr = w->rows - r0 < ARGMAX_SLICE ? w->rows - r0 : ARGMAX_SLICE;
            wt_weight v = kn_row_view(w, r0, nr);
            kn_matmul(q0->tp, q0->slice, q0->s.xn, &v, R);
            softcap(q0->slice, (size_t)R * nr, m->cfg.softcap);
            for (int j = 0; j < R; j++) {
                const float *l = q0->slice + (size_t)j * nr;
                if (ldst[j]) {
                    memcpy(ldst[j] + r0, l, sizeof(float) * (size_t)nr);
                    continue;
                }
                int i = smp_argmax(l, nr);
                if (r0 == 0 || l[i] > best[j]) {
                    best[j] = l[i];
                    *dst[j] = r0 + i;
                }
            }
        }
    }
    return 0;
}

static int cpu_taps(void *st, int row, int n, float *out) {
    cpu_seq *q = st;
    if (row < 0 || n < 1 || row + n > q->tap_rows) {
        dfl_seterr("taps: rows %d..%d not tapped by the last forward (%d rows)", row, row + n - 1, q->tap_rows);
        return -1;
    }
    size_t r = (size_t)q->n_taps * q->m->cfg.hidden;
    memcpy(out, q->taps + (size_t)row * r, sizeof(float) * r * n);
    return 0;
}

/* ---- DFlash draft -------------------------------------------------------- */

/* Context positions 0..len-1 are projected into kc/vc; positions
 * len..len+n_pend-1 are fed rows still waiting in pend (projected in one
 * batch by the next draft_block or draft_ctx_append, or when pend is full).
 * A row's K/V depend only on that row, so when rows are projected never
 * changes a bit. */
typedef struct {
    const mdl_model *d, *t; /* draft, target (embedding + lm_head) */
    cpu_be *be;             /* the instance (its draft block scratch) */
    tp_pool *tp;            /* its workers */
    int n_ctx, len, max_B;
    int hw;          /* the most positions projected since the memory past them was last given back */
    float *kc, *vc;  /* [n_layers][nkv][n_ctx][hd] context K/V, post k_norm + RoPE */
    rope_table rope;
    scratch s;       /* max(CHUNK, max_B) rows */
    float *c;        /* [CHUNK][H] fused context rows */
    float *pend;     /* [PEND_ROWS][n_taps][H] fed rows not yet projected */
    int n_pend;
    float *lg, *xl;  /* draft_block's logits when the caller passes none: */
    size_t cap_lg, cap_xl; /* [n_slots][n_vocab], [n_slots][n_extra] (floats allocated) */
    /* be_draft_block.ids: the target's lm_head rows of those ids, gathered
     * (head_ids[0..head.rows) the ids, as last asked; head.rows 0: none) */
    wt_weight head;
    int32_t *head_ids;
    void *head_data, *head_scales, *head_biases; /* head's own buffers */
} cpu_draft;

static void *cpu_draft_create(void *be, const mdl_model *d, const mdl_model *t, int n_ctx) {
    const cfg_model *c = &d->cfg;
    cpu_draft *q = dfl_calloc(1, sizeof *q);
    q->d = d;
    q->t = t;
    q->be = be;
    q->tp = ((cpu_be *)be)->tp;
    q->n_ctx = n_ctx;
    q->max_B = c->block_size > CHUNK ? c->block_size : CHUNK;
    size_t kv = (size_t)c->n_layers * n_ctx * c->n_kv_heads * c->head_dim;
    q->kc = dfl_malloc64(sizeof(float) * kv);
    q->vc = dfl_malloc64(sizeof(float) * kv);
    rope_init(&q->rope, c, n_ctx + q->max_B); /* block rows sit past the context */
    scratch_init(&q->s, c, q->max_B);
    q->c = dfl_malloc64(sizeof(float) * CHUNK * (size_t)c->hidden);
    q->pend = dfl_malloc64(sizeof(float) * PEND_ROWS * (size_t)c->n_taps * c->hidden);
    return q;
}

/* Forget the gathered head. */
static void head_free(cpu_draft *q) {
    kn_unpack(&q->head);
    free(q->head_ids);
    free(q->head_data);
    free(q->head_scales);
    free(q->head_biases);
    q->head_ids = NULL;
    q->head_data = q->head_scales = q->head_biases = NULL;
    memset(&q->head, 0, sizeof q->head);
}

/* q->head = rows ids[0..n) of lm (ascending, distinct, < lm->rows), in
 * lm's own format and packed as lm is, so that the kernels compute each
 * row's logit as they do in lm (bit for bit); kept while ids stay the same. */
static int head_gather(cpu_draft *q, const wt_weight *lm, const int32_t *ids, int n) {
    if (q->head.rows == n && !memcmp(q->head_ids, ids, sizeof(int32_t) * (size_t)n)) return 0;
    head_free(q);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= lm->rows || (i && ids[i] <= ids[i - 1])) {
            dfl_seterr("draft block: vocabulary id %d at %d (ids must ascend, each < %d)", ids[i], i, lm->rows);
            return -1;
        }
    wt_weight h = *lm;
    h.rows = n;
    h.packed = NULL;
    size_t elem = lm->dtype == WT_F32 ? 4 : lm->dtype == WT_F16 || lm->dtype == WT_BF16 ? 2 : 0;
    size_t row_bytes = elem ? (size_t)lm->cols * elem : (size_t)lm->cols * lm->bits / 8;
    size_t sg = elem                     ? 0
                : lm->dtype == WT_MXFP4 ? (size_t)lm->cols / 32 /* e8m0 bytes, no biases */
                                        : (size_t)(lm->cols / lm->group_size) * (lm->scale_dtype == WT_F32 ? 4 : 2);
    char *d = dfl_malloc64(row_bytes * (size_t)n), *sc = sg ? dfl_malloc64(sg * (size_t)n) : NULL;
    char *bi = sg && lm->biases ? dfl_malloc64(sg * (size_t)n) : NULL;
    for (int i = 0; i < n; i++) {
        memcpy(d + row_bytes * (size_t)i, (const char *)lm->data + row_bytes * (size_t)ids[i], row_bytes);
        if (sc) memcpy(sc + sg * (size_t)i, (const char *)lm->scales + sg * (size_t)ids[i], sg);
        if (bi) memcpy(bi + sg * (size_t)i, (const char *)lm->biases + sg * (size_t)ids[i], sg);
    }
    h.data = d;
    h.scales = sc;
    h.biases = bi;
    q->head_data = d, q->head_scales = sc, q->head_biases = bi;
    q->head_ids = dfl_malloc(sizeof(int32_t) * (size_t)n);
    memcpy(q->head_ids, ids, sizeof(int32_t) * (size_t)n);
    q->head = h;
    if (lm->packed && kn_pack(&q->head) != 0) {
        head_free(q);
        return -1;
    }
    return 0;
}

static void cpu_draft_destroy(void *st) {
    cpu_draft *q = st;
    if (!q) return;
    head_free(q);
    free(q->kc);
    free(q->vc);
    free(q->c);
    free(q->pend);
    free(q->lg);
    free(q->xl);
    rope_free(&q->rope);
    scratch_free(&q->s);
    free(q);
}

static int cpu_draft_ctx_length(void *st) {
    cpu_draft *q = st;
    return q->len + q->n_pend;
}

/* The memory of context positions len..hw-1 goes back to the system
 * (whole pages inside each [layer][head] run of kc / vc; they read as zero
 * when touched again, and a position is always written before it is read),
 * so a slot whose long context was dropped (a reset, an eviction, a new
 * prompt) does not keep it resident: the target's KV pages go back by the
 * page rule, this is the draft's share. Only for drops of at least
 * DRAFT_GIVE_BACK positions, not a DFlash rollback's few. */
enum { DRAFT_GIVE_BACK = 256 };
static void draft_give_back(cpu_draft *q, int len) {
    const cfg_model *c = &q->d->cfg;
    size_t hd = (size_t)c->head_dim, pg = (size_t)sysconf(_SC_PAGESIZE);
    for (int l = 0; l < c->n_layers; l++)
        for (int h = 0; h < c->n_kv_heads; h++)
            for (int val = 0; val < 2; val++) {
                float *run = (val ? q->vc : q->kc) + ((size_t)l * c->n_kv_heads + h) * q->n_ctx * hd;
                uintptr_t a = (uintptr_t)(run + (size_t)len * hd), b = (uintptr_t)(run + (size_t)q->hw * hd);
                a = (a + pg - 1) & ~(uintptr_t)(pg - 1);
                b &= ~(uintptr_t)(pg - 1);
                if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
            }
    q->hw = len;
}

/* Forget positions len.. : pending rows first, then projected ones. */
static void cpu_draft_ctx_truncate(void *st, int len) {
    cpu_draft *q = st;
    if (len < 0 || len >= q->len + q->n_pend) return;
    if (len >= q->len) {
        q->n_pend = len - q->len;
    } else {
        q->len = len;
        q->n_pend = 0;
        if (q->hw - len >= DRAFT_GIVE_BACK) draft_give_back(q, len);
    }
}

/* The prefix rule (backend.h) for the draft's context: projected rows
 * 0..min(n, len)-1 of every layer ([n_layers][nkv][n_ctx][hd]: per layer
 * and head n rows of hd floats), the rest of the n from src's pending rows
 * ([n_pend][n_taps][H], position len + i at row i) into dst's. */
static int cpu_draft_ctx_copy(void *dst, const void *src, int n) {
    cpu_draft *d = dst;
    const cpu_draft *q = src;
    const cfg_model *c = &q->d->cfg;
    if (d == q || d->n_ctx != q->n_ctx || d->d->cfg.n_layers != c->n_layers || n < 0 || n > q->len + q->n_pend) {
        dfl_seterr("draft_ctx_copy: not supported: %s (%d rows of %d)",
                   d == q ? "a context onto itself" : n < 0 || n > q->len + q->n_pend ? "rows beyond the source's"
                                                                                    : "different shapes",
                   n, q->len + q->n_pend);
        return -1;
    }
    int proj = n < q->len ? n : q->len;
    size_t hd = (size_t)c->head_dim;
    for (size_t lh = 0; lh < (size_t)c->n_layers * c->n_kv_heads; lh++) {
        size_t o = lh * (size_t)q->n_ctx * hd;
        memcpy(d->kc + o, q->kc + o, sizeof(float) * (size_t)proj * hd);
        memcpy(d->vc + o, q->vc + o, sizeof(float) * (size_t)proj * hd);
    }
    d->len = proj;
    if (d->len > d->hw) d->hw = d->len;
    d->n_pend = n - proj;
    memcpy(d->pend, q->pend, sizeof(float) * (size_t)d->n_pend * c->n_taps * c->hidden);
    return 0;
}

/* 0, or -1 + error if n more rows do not fit the context. */
static int draft_room(const cpu_draft *q, int n) {
    if (q->len + q->n_pend + n <= q->n_ctx) return 0;
    dfl_seterr("draft context full: %d + %d > %d", q->len + q->n_pend, n, q->n_ctx);
    return -1;
}

/* c = hidden_norm(fc . f) for each feature row (feats: [n][n_taps][H]), then
 * per layer K = RoPE(k_norm(Wk c)), V = Wv c stored at positions len.. .
 * Nothing may be pending (the rows land at len). */
static void draft_project(cpu_draft *q, const float *feats, int n) {
    const cfg_model *c = &q->d->cfg;
    int H = c->hidden, hd = c->head_dim, nkv = c->n_kv_heads, kvd = nkv * hd;
    for (int r0 = 0; r0 < n; r0 += CHUNK) {
        int T = n - r0 < CHUNK ? n - r0 : CHUNK, pos0 = q->len;
        kn_matmul(q->tp, q->s.xn, feats + (size_t)r0 * c->n_taps * H, &q->d->fc, T);
        rmsnorm_rows(q->c, q->s.xn, q->d->hidden_norm, T, H, c->eps);
        for (int l = 0; l < c->n_layers; l++) {
            const mdl_layer *L = &q->d->layers[l];
            float *ys[2] = {q->s.k, q->s.v};
            const wt_weight *ws[2] = {&L->wk, &L->wv};
            kn_matmul_n(q->tp, ys, q->c, ws, 2, T);
            for (int t = 0; t < T; t++)
                norm_rope(q->s.k + (size_t)t * kvd, nkv, hd, L->k_norm, c->eps, &q->rope, pos0 + t);
            at_job J = {.Ka = q->kc + (size_t)l * q->n_ctx * kvd, .Va = q->vc + (size_t)l * q->n_ctx * kvd,
                        .a_head = (size_t)q->n_ctx * hd, .a_row = (size_t)hd};
            kv_store(&J, q->s.k, q->s.v, T, pos0, nkv, hd);
        }
        q->len += T;
        if (q->len > q->hw) q->hw = q->len;
    }
}

/* Project the pending rows (positions len..len+n_pend-1), in one batch. */
static void flush_pending(cpu_draft *q) {
    int n = q->n_pend;
    q->n_pend = 0;
    if (n) draft_project(q, q->pend, n);
}

static int cpu_draft_ctx_append(void *st, const float *feats, int n) {
    cpu_draft *q = st;
    if (n < 0 || draft_room(q, n) != 0) return -1;
    flush_pending(q);
    draft_project(q, feats, n);
    return 0;
}

/* Taps rows row..row+n-1 of the target's last forward join the pending rows;
 * a full buffer is projected first. */
static int cpu_draft_feed(void *st, void *seq, int row, int n) {
    cpu_draft *q = st;
    const cpu_seq *t = seq;
    const cfg_model *c = &q->d->cfg;
    int same = t->n_taps == c->n_taps && t->m->cfg.hidden == c->hidden;
    for (int i = 0; same && i < c->n_taps; i++) same = t->tap_layers[i] == c->tap_layers[i];
    if (!same) {
        dfl_seterr("draft_feed: the last forward tapped %d layers, not the %d the draft reads", t->n_taps, c->n_taps);
        return -1;
    }
    if (row < 0 || n < 0 || row + n > t->tap_rows) {
        dfl_seterr("draft_feed: rows %d..%d not tapped by the last forward (%d rows)", row, row + n - 1, t->tap_rows);
        return -1;
    }
    if (draft_room(q, n) != 0) return -1;
    if (q->n_pend + n > PEND_ROWS) flush_pending(q);
    size_t r = (size_t)c->n_taps * c->hidden;
    memcpy(q->pend + (size_t)q->n_pend * r, t->taps + (size_t)row * r, sizeof(float) * r * n);
    q->n_pend += n;
    return 0;
}

/* *buf holds at least n floats afterwards (old contents dropped). */
static float *grow(float **buf, size_t *cap, size_t n) {
    if (n > *cap) {
        free(*buf);
        *buf = dfl_malloc64(sizeof(float) * n);
        *cap = n;
    }
    return *buf;
}

/* be_draft_block.top_k: each slot's best top_k ids among ids 0..nv-1 then
 * b->extra (a later id only when strictly greater, as out[] is chosen) and
 * their log-probabilities under the softmax over those ids. lg: [ns][nv],
 * xl: [ns][n_extra]. */
static int draft_top_k(const be_draft_block *b, const float *lg, const float *xl, int ns, int nv) {
    int K = b->top_k, nx = b->n_extra;
    if (K > BE_DRAFT_TOPK || K > nv + nx || !b->top_ids || !b->top_logp) {
        dfl_seterr("draft block: top_k %d (at most %d and the %d scored ids, with both output buffers)", K,
                   BE_DRAFT_TOPK, nv + nx);
        return -1;
    }
    for (int i = 0; i < ns; i++) {
        const float *l = lg + (size_t)i * nv, *x = xl + (size_t)i * nx;
        int32_t *ids = b->top_ids + (size_t)i * K;
        float *lp = b->top_logp + (size_t)i * K, mx = -INFINITY;
        int n = 0;
        for (int j = 0; j < nv + nx; j++) {
            float v = j < nv ? l[j] : x[j - nv];
            mx = v > mx ? v : mx;
            if (n == K && !(v > lp[K - 1])) continue;
            int at = n < K ? n++ : K - 1; /* insert after every candidate >= v */
            while (at > 0 && !(lp[at - 1] >= v)) {
                lp[at] = lp[at - 1];
                ids[at] = ids[at - 1];
                at--;
            }
            lp[at] = v;
            ids[at] = j < nv ? (b->ids ? b->ids[j] : j) : b->extra[j - nv];
        }
        float sum = 0.0f;
        for (int j = 0; j < nv; j++) sum += expf(l[j] - mx);
        for (int e = 0; e < nx; e++) sum += expf(x[e] - mx);
        float lz = mx + logf(sum);
        for (int k = 0; k < K; k++) lp[k] -= lz;
    }
    return 0;
}

/* The checks draft_block makes before it computes anything, and the
 * gathered head of b->ids (kept in q while the ids stay the same); 0, or -1
 * + error with nothing proposed. */
static int draft_check(cpu_draft *q, const be_draft_block *b) {
    const mdl_model *tg = q->t;
    int max_B = q->max_B < DRAFT_PASS_ROWS ? q->max_B : DRAFT_PASS_ROWS;
    if (b->B < 2 || b->B > max_B) {
        dfl_seterr("draft block length %d out of range 2..%d", b->B, max_B);
        return -1;
    }
    for (int i = 0; i < b->B; i++)
        if (b->tokens[i] < 0 || b->tokens[i] >= tg->cfg.vocab) {
            dfl_seterr("draft block token %d outside the vocabulary", b->tokens[i]);
            return -1;
        }
    if (b->ids && b->n_vocab < 1) {
        dfl_seterr("draft block: %d vocabulary ids given", b->n_vocab);
        return -1;
    }
    int nv = b->n_vocab > 0 && b->n_vocab < tg->cfg.vocab ? b->n_vocab : tg->cfg.vocab;
    if (b->top_k > 0 && (b->top_k > BE_DRAFT_TOPK || b->top_k > nv + b->n_extra || !b->top_ids || !b->top_logp)) {
        dfl_seterr("draft block: top_k %d (at most %d and the %d scored ids, with both output buffers)", b->top_k,
                   BE_DRAFT_TOPK, nv + b->n_extra);
        return -1;
    }
    return b->ids ? head_gather(q, &tg->lm_head, b->ids, nv) : 0;
}

/* Slots a block proposes, ids it scores (draft_block's rules). */
static int block_slots(const be_draft_block *b) { return b->n_slots > 0 && b->n_slots < b->B - 1 ? b->n_slots : b->B - 1; }
static int block_nv(const cpu_draft *q, const be_draft_block *b) {
    return b->n_vocab > 0 && b->n_vocab < q->t->cfg.vocab ? b->n_vocab : q->t->cfg.vocab;
}

/* 1 if blocks a and b score the same head (the same ids, by number or by
 * rank). */
static int same_head(const cpu_draft *qa, const be_draft_block *a, const cpu_draft *qb, const be_draft_block *b) {
    int nv = block_nv(qa, a);
    if (nv != block_nv(qb, b) || !a->ids != !b->ids) return 0;
    return !a->ids || !memcmp(a->ids, b->ids, sizeof(int32_t) * (size_t)nv);
}

/* The proposals of block b from its slots' logits lg [ns][nv] (ids 0..nv-1,
 * or b->ids) and xn [ns][H], the slots' final-normed rows (the extra ids'
 * logits into xl [ns][nx]; tmp: H floats). */
static int draft_propose(const cpu_draft *q, const be_draft_block *b, const float *lg, float *xl, const float *xn,
                         float *tmp, int ns, int nv) {
    int H = q->d->cfg.hidden, nx = b->n_extra;
    for (int e = 0; e < nx; e++) { /* a few ids beyond the prefix (stop tokens) */
        wt_get_row(tmp, &q->t->lm_head, b->extra[e]);
        for (int i = 0; i < ns; i++) {
            const float *x = xn + (size_t)i * H;
            float acc = 0.0f;
            for (int d = 0; d < H; d++) acc += tmp[d] * x[d];
            xl[(size_t)i * nx + e] = acc;
        }
    }
    if (b->top_k > 0 && draft_top_k(b, lg, xl, ns, nv) != 0) return -1;
    if (b->out)
        for (int i = 0; i < ns; i++) { /* first maximum over ids 0..nv-1, then the extra ids */
            const float *l = lg + (size_t)i * nv;
            int32_t j = smp_argmax(l, nv), id = b->ids ? b->ids[j] : j;
            float best = l[j];
            for (int e = 0; e < nx; e++)
                if (xl[(size_t)i * nx + e] > best) {
                    best = xl[(size_t)i * nx + e];
                    id = b->extra[e];
                }
            b->out[i] = id;
        }
    return 0;
}

/* One pass of draft_block_multi over the blocks bs[0..n) of states qs
 * (checked, nothing pending; their rows fit DRAFT_PASS_ROWS), in the
 * instance's scratch:
 *   x = the target's embedding of every block's tokens, [R][H], block i at
 *       rows off[i]..off[i]+B_i-1;
 *   the draft's layers over all R rows, block i's rows at positions
 *       len_i.. attending (no mask) to its own context and its own block;
 *   xn = final_norm of each block's slot rows 1..ns_i, gathered head by
 *       head; each head's logits over those rows, a vocabulary slice at a
 *       time, into each block's logits [ns_i][nv_i];
 *   the extra ids' logits, top candidates and proposals per block.
 * Every step is row by row (layer(), kn_matmul's batch invariance, a row
 * view's logits those of the same rows of the whole head), so each block
 * gets the bits it gets alone. */
static int draft_pass(cpu_draft *const *qs, const be_draft_block *bs, int n) {
    cpu_be *be = qs[0]->be;
    const cfg_model *c = &qs[0]->d->cfg;
    const mdl_model *tg = qs[0]->t;
    int H = c->hidden, hd = c->head_dim, kvd = c->n_kv_heads * hd, R = 0, off[BE_MAX_SEQS];
    int32_t tok[DRAFT_PASS_ROWS];
    for (int i = 0; i < n; i++) {
        off[i] = R;
        memcpy(tok + R, bs[i].tokens, sizeof(int32_t) * (size_t)bs[i].B);
        R += bs[i].B;
    }
    long dims[SCRATCH_DIMS];
    scratch_dims(c, dims);
    if (be->ds_rows < R || memcmp(dims, be->ds_dims, sizeof dims)) { /* grown to the widest pass so far */
        if (be->ds_rows) scratch_free(&be->ds);
        be->ds_rows = R > CHUNK ? R : CHUNK; /* >= CHUNK: ds.q holds H floats for draft_propose */
        memcpy(be->ds_dims, dims, sizeof dims);
        scratch_init(&be->ds, c, be->ds_rows);
    }
    if (!be->dl) be->dl = dfl_malloc64(sizeof(float) * HEAD_ROWS * (size_t)ARGMAX_SLICE);
    scratch *s = &be->ds;
    embed_rows(s->x, tg, tok, R); /* the target's embedding (Gemma-4: scaled, as its embed_tokens module) */
    ly_seg sg[BE_MAX_SEQS];
    for (int l = 0; l < c->n_layers; l++) {
        for (int i = 0; i < n; i++) {
            const cpu_draft *q = qs[i];
            size_t r = (size_t)off[i] * kvd;
            /* keys: the projected context 0..len-1, then all B block rows
             * (not causal; the block's K/V are never cached) */
            at_job J = {.Ka = q->kc + (size_t)l * q->n_ctx * kvd, .Va = q->vc + (size_t)l * q->n_ctx * kvd,
                        .Kb = s->k + r, .Vb = s->v + r, .na = q->len, .nb = bs[i].B,
                        .a_head = (size_t)q->n_ctx * hd, .a_row = (size_t)hd, .b_head = (size_t)hd,
                        .b_row = (size_t)kvd};
            sg[i] = (ly_seg){.off = off[i], .T = bs[i].B, .pos0 = q->len, .J = J, .rope = &q->rope};
        }
        layer(be->tp, s, &qs[0]->d->layers[l], l, c, sg, n, R);
    }
    /* the heads: the blocks scoring the same ids share each pass over it */
    int head_of[BE_MAX_SEQS], row0[BE_MAX_SEQS];
    for (int i = 0; i < n; i++) {
        head_of[i] = i;
        for (int k = 0; k < i; k++)
            if (head_of[k] == k && same_head(qs[k], &bs[k], qs[i], &bs[i])) {
                head_of[i] = k;
                break;
            }
    }
    float *lgs[BE_MAX_SEQS], *xls[BE_MAX_SEQS];
    for (int i = 0; i < n; i++) {
        cpu_draft *q = qs[i];
        size_t ns = (size_t)block_slots(&bs[i]), nv = (size_t)block_nv(q, &bs[i]), nx = (size_t)bs[i].n_extra;
        lgs[i] = bs[i].logits ? bs[i].logits : grow(&q->lg, &q->cap_lg, ns * nv);                /* [ns][nv] */
        xls[i] = bs[i].extra_logits ? bs[i].extra_logits : grow(&q->xl, &q->cap_xl, ns * nx + 1); /* [ns][nx] */
    }
    for (int h = 0; h < n; h++) {
        if (head_of[h] != h) continue;
        int Rh = 0, nv = block_nv(qs[h], &bs[h]);
        for (int i = h; i < n; i++) /* the head's blocks' slot rows, gathered */
            if (head_of[i] == h) {
                int ns = block_slots(&bs[i]);
                row0[i] = Rh;
                rmsnorm_rows(s->xn + (size_t)Rh * H, s->x + (size_t)(off[i] + 1) * H, qs[i]->d->final_norm, ns, H,
                             c->eps);
                Rh += ns;
            }
        wt_weight head = bs[h].ids ? qs[h]->head : kn_row_view(&tg->lm_head, 0, nv); /* ids[0..nv) or ids 0..nv-1 */
        for (int a = 0; a < Rh; a += HEAD_ROWS) {
            int nr = Rh - a < HEAD_ROWS ? Rh - a : HEAD_ROWS;
            for (int v0 = 0; v0 < nv; v0 += ARGMAX_SLICE) {
                int nc = nv - v0 < ARGMAX_SLICE ? nv - v0 : ARGMAX_SLICE;
                wt_weight v = kn_row_view(&head, v0, nc);
                kn_matmul(be->tp, be->dl, s->xn + (size_t)a * H, &v, nr);
                for (int i = h; i < n; i++) { /* each row's logits to its block */
                    if (head_of[i] != h) continue;
                    int ns = block_slots(&bs[i]);
                    for (int k = 0; k < ns; k++) {
                        int r = row0[i] + k;
                        if (r >= a && r < a + nr)
                            memcpy(lgs[i] + (size_t)k * nv + v0, be->dl + (size_t)(r - a) * nc, sizeof(float) * nc);
                    }
                }
            }
        }
        for (int i = h; i < n; i++)
            if (head_of[i] == h &&
                draft_propose(qs[i], &bs[i], lgs[i], xls[i], s->xn + (size_t)row0[i] * H, s->q, block_slots(&bs[i]),
                              nv) != 0)
                return -1;
    }
    return 0;
}

/* be_ops.draft_block_multi: every block checked first (nothing proposed
 * when one is refused), the pending context rows projected, then passes
 * of whole blocks up to DRAFT_PASS_ROWS rows. */
static int cpu_draft_block_multi(void *const *sts, const be_draft_block *bs, int n) {
    if (n < 1 || n > BE_MAX_SEQS) {
        dfl_seterr("draft_block_multi: %d blocks (1..%d)", n, BE_MAX_SEQS);
        return -1;
    }
    cpu_draft *qs[BE_MAX_SEQS];
    for (int i = 0; i < n; i++) {
        qs[i] = sts[i];
        if (!same_model(qs[i]->d, qs[0]->d) || !same_model(qs[i]->t, qs[0]->t) || qs[i]->be != qs[0]->be) {
            dfl_seterr("draft_block_multi: block %d: a draft of another model", i);
            return -1;
        }
        for (int k = 0; k < i; k++)
            if (qs[k] == qs[i]) {
                dfl_seterr("draft_block_multi: draft state %d given twice", i);
                return -1;
            }
        if (draft_check(qs[i], &bs[i]) != 0) {
            if (n > 1) dfl_preferr("draft_block_multi: block %d", i);
            return -1;
        }
    }
    for (int i = 0; i < n; i++) flush_pending(qs[i]);
    for (int i0 = 0; i0 < n;) {
        int i1 = i0, rows = 0;
        while (i1 < n && rows + bs[i1].B <= DRAFT_PASS_ROWS) rows += bs[i1++].B;
        if (draft_pass(qs + i0, bs + i0, i1 - i0) != 0) return -1;
        i0 = i1;
    }
    return 0;
}

static int cpu_draft_block(void *st, const be_draft_block *b) { return cpu_draft_block_multi(&st, b, 1); }

/* ---- the backend instance ------------------------------------------------- */


static int cpu_probe(char *why, size_t n) {
    if (why && n) why[0] = 0;
    return 1;
}

static void *cpu_open(const be_options *o) {
    kn_init_once(); /* before prepare: packing depends on the kernel mode */
    cpu_be *b = dfl_calloc(1, sizeof *b);
    b->tp = tp_create(o ? o->n_threads : 0);
    pthread_mutex_init(&b->kv_mu, NULL);
    b->kv_budget = o ? o->kv_budget : 0;
    return b;
}

static void cpu_close(void *be) {
    cpu_be *b = be;
    if (!b) return;
    tp_destroy(b->tp);
    pthread_mutex_destroy(&b->kv_mu);
    if (b->ds_rows) scratch_free(&b->ds);
    free(b->dl);
    free(b);
}

static int cpu_n_threads(void *be) { return be ? tp_threads(((cpu_be *)be)->tp) : 1; }

/* The kernel variant and the activation modes now in force. */
static const char *cpu_describe(void *be) {
    static _Thread_local char fallback[64];
    char *d = be ? ((cpu_be *)be)->desc : fallback;
    snprintf(d, 64, "%s%s%s", kn_variant(), kn_act_quant() ? "+int8-act" : "", kn_act_bf16() ? "+bf16-act" : "");
    return d;
}

static int cpu_draft_q8(void *be) { return kn_act_quant(); }

static int cpu_prepare(void *be, mdl_model *m) { return cb_pack(m); }

static void cpu_release(void *be, mdl_model *m) { cb_unpack(m); }

/* Each chunk of the buffer is read as 8 sequential streams side by side
 * (one stream per core leaves bandwidth unused), summed in 32-byte vectors. */
typedef struct {
    const uint64_t *buf;
    size_t words_per_item;
    uint64_t out[256];
} bw_job;

enum { BW_STREAMS = 8 };

static void bw_part(void *ctx, int start, int end) {
    typedef unsigned long long v4 __attribute__((vector_size(32)));
    typedef unsigned long long v4u __attribute__((vector_size(32), aligned(8)));
    bw_job *j = ctx;
    size_t q = (size_t)(end - start) * j->words_per_item / BW_STREAMS;
    const uint64_t *p = j->buf + (size_t)start * j->words_per_item;
    v4 a[BW_STREAMS] = {{0}};
    for (size_t i = 0; i + 4 <= q; i += 4)
        for (int s = 0; s < BW_STREAMS; s++) a[s] += *(const v4u *)(p + s * q + i);
    v4 t = a[0];
    for (int s = 1; s < BW_STREAMS; s++) t ^= a[s];
    j->out[start % 256] += t[0] ^ t[1] ^ t[2] ^ t[3];
}

/* Read bandwidth: a parallel read of a 512 MiB buffer with the instance's
 * worker threads, best of 5 passes (be NULL: a pool of the physical cores
 * for the occasion). */
static double cpu_bandwidth(void *be) {
    tp_pool *tp = be ? ((cpu_be *)be)->tp : tp_create(0);
    size_t bytes = (size_t)512 << 20;
    bw_job j;
    memset(&j, 0, sizeof j);
    j.words_per_item = bytes / 8 / 256;
    uint64_t *buf = dfl_malloc64(bytes);
    for (size_t i = 0; i < bytes / 8; i++) buf[i] = i * 0x9e3779b97f4a7c15ull;
    j.buf = buf;
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = dfl_now();
        tp_for(tp, 256, bw_part, &j);
        double dt = dfl_now() - t0;
        if (bytes / dt / 1e9 > best) best = bytes / dt / 1e9;
    }
    volatile uint64_t sink = j.out[0];
    (void)sink;
    free(buf);
    if (!be) tp_destroy(tp);
    return best;
}

const be_ops be_cpu = {
    .name = "cpu",
    .draft_ids = 1,
    .predict_rows = 4, /* bench/NOTES.md */
    .probe = cpu_probe,
    .open = cpu_open,
    .close = cpu_close,
    .describe = cpu_describe,
    .n_threads = cpu_n_threads,
    .draft_q8 = cpu_draft_q8,
    .prepare = cpu_prepare,
    .release = cpu_release,
    .bandwidth = cpu_bandwidth,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .forward = cpu_forward,
    .forward_multi = cpu_forward_multi,
    .length = cpu_length,
    .truncate = cpu_truncate,
    .trim = cpu_trim,
    .kv_usage = cpu_kv_usage,
    .kv_need = cpu_kv_need,
    .kv_bytes = cpu_kv_bytes,
    .logits = cpu_logits,
    .argmax = cpu_argmax,
    .predict_multi = cpu_predict_multi,
    .taps = cpu_taps,
    .tree_commit = cpu_tree_commit,
    .copy_prefix = cpu_copy_prefix,
    .draft_create = cpu_draft_create,
    .draft_destroy = cpu_draft_destroy,
    .draft_feed = cpu_draft_feed,
    .draft_ctx_append = cpu_draft_ctx_append,
    .draft_ctx_length = cpu_draft_ctx_length,
    .draft_ctx_truncate = cpu_draft_ctx_truncate,
    .draft_block = cpu_draft_block,
    .draft_block_multi = cpu_draft_block_multi,
    .draft_ctx_copy = cpu_draft_ctx_copy,
};
