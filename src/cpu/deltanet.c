/* deltanet.c - see deltanet.h. */
#include "deltanet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "util.h"

void dn_init(dn_state *s, const cfg_model *c, int rows) {
    memset(s, 0, sizeof *s);
    s->rows = rows;
    s->H = c->hidden;
    s->nk = c->lin_k_heads, s->nv = c->lin_v_heads, s->dk = c->lin_k_dim, s->dv = c->lin_v_dim;
    s->C = 2 * s->nk * s->dk + s->nv * s->dv;
    s->v_tiled = c->lin_v_tiled;
    s->K = c->lin_conv;
    s->eps = c->eps;
    s->lin_of = dfl_malloc(sizeof(int) * (size_t)c->n_layers);
    for (int l = 0; l < c->n_layers; l++) s->lin_of[l] = c->linear_layer[l] ? s->n_lin++ : -1;
    size_t nc = (size_t)s->n_lin * (s->K - 1) * s->C, nr = (size_t)s->n_lin * s->nv * s->dk * s->dv;
    s->conv = dfl_malloc64(sizeof(float) * (nc ? nc : 1));
    s->snap_conv = dfl_malloc64(sizeof(float) * (nc ? nc : 1));
    s->rec_mem[0] = dfl_malloc64(sizeof(float) * nr);
    s->rec_mem[1] = dfl_malloc64(sizeof(float) * nr);
    s->rec = dfl_malloc(sizeof(float *) * (size_t)(s->n_lin ? s->n_lin : 1));
    s->snap_rec = dfl_malloc(sizeof(float *) * (size_t)(s->n_lin ? s->n_lin : 1));
    s->in_snap = dfl_malloc((size_t)(s->n_lin ? s->n_lin : 1));
    size_t per = (size_t)s->nv * s->dk * s->dv;
    for (int li = 0; li < s->n_lin; li++) {
        s->rec[li] = s->rec_mem[0] + per * li;
        s->snap_rec[li] = s->rec_mem[1] + per * li;
    }
    s->keep_mix = dfl_malloc64(sizeof(float) * (size_t)s->n_lin * DN_KEEP * s->C);
    s->keep_ab = dfl_malloc64(sizeof(float) * (size_t)s->n_lin * DN_KEEP * 2 * s->nv);
    size_t vd = (size_t)s->nv * s->dv;
    s->mix = dfl_malloc64(sizeof(float) * rows * (size_t)s->C);
    s->cv = dfl_malloc64(sizeof(float) * rows * (size_t)s->C);
    s->z = dfl_malloc64(sizeof(float) * rows * vd);
    s->core = dfl_malloc64(sizeof(float) * rows * vd);
    s->ab = dfl_malloc64(sizeof(float) * rows * 2 * (size_t)s->nv);
    dn_reset(s);
}

void dn_free(dn_state *s) {
    free(s->lin_of);
    free(s->conv);
    free(s->snap_conv);
    free(s->rec_mem[0]);
    free(s->rec_mem[1]);
    free(s->rec);
    free(s->snap_rec);
    free(s->in_snap);
    free(s->keep_mix);
    free(s->keep_ab);
    free(s->mix);
    free(s->cv);
    free(s->z);
    free(s->core);
    free(s->ab);
    memset(s, 0, sizeof *s);
}

void dn_reset(dn_state *s) {
    memset(s->conv, 0, sizeof(float) * (size_t)s->n_lin * (s->K - 1) * s->C);
    for (int li = 0; li < s->n_lin; li++) {
        memset(s->rec[li], 0, sizeof(float) * (size_t)s->nv * s->dk * s->dv);
        s->in_snap[li] = 0;
    }
    s->snap_len = -1;
    s->n_keep = 0;
}

void dn_snapshot(dn_state *s, int len) {
    memcpy(s->snap_conv, s->conv, sizeof(float) * (size_t)s->n_lin * (s->K - 1) * s->C);
    /* S: no copy. The buffer holding the state becomes the snapshot; the
     * next update reads it and writes the other buffer (in_snap) */
    for (int li = 0; li < s->n_lin; li++) {
        if (!s->in_snap[li]) {
            float *t = s->rec[li];
            s->rec[li] = s->snap_rec[li];
            s->snap_rec[li] = t;
        }
        s->in_snap[li] = 1;
    }
    s->snap_len = len;
    s->n_keep = 0;
}

void dn_forget(dn_state *s) {
    for (int li = 0; li < s->n_lin; li++) /* the state lives in rec again */
        if (s->in_snap[li]) {
            float *t = s->rec[li];
            s->rec[li] = s->snap_rec[li];
            s->snap_rec[li] = t;
            s->in_snap[li] = 0;
        }
    s->snap_len = -1;
    s->n_keep = 0;
}

void dn_advance(dn_state *s, int T) {
    if (s->snap_len >= 0) s->n_keep += T;
}

/* ---- the two steps every row goes through (forward and replay) ---------- */

/* cv[t][ch] = silu(sum_j w[ch][j] * hist[t + j][ch]) over hist = the K-1
 * conv-state rows then mix[0..T-1], j ascending; then the conv state becomes
 * the last K-1 rows of hist. */
static void conv_rows(float *state, const float *w, const float *mix, float *cv, int T, int C, int K) {
    for (int t = 0; t < T; t++) {
        float *o = cv + (size_t)t * C;
        for (int ch = 0; ch < C; ch++) o[ch] = 0.0f;
        for (int j = 0; j < K; j++) {
            int r = t + j - (K - 1); /* row of mix, or state row K-1+r when negative */
            const float *x = r < 0 ? state + (size_t)(K - 1 + r) * C : mix + (size_t)r * C;
            for (int ch = 0; ch < C; ch++) o[ch] += w[(size_t)ch * K + j] * x[ch];
        }
        for (int ch = 0; ch < C; ch++) o[ch] = o[ch] / (1.0f + expf(-o[ch]));
    }
    int keep = K - 1;
    if (T >= keep) {
        memcpy(state, mix + (size_t)(T - keep) * C, sizeof(float) * (size_t)keep * C);
    } else {
        memmove(state, state + (size_t)T * C, sizeof(float) * (size_t)(keep - T) * C);
        memcpy(state + (size_t)(keep - T) * C, mix, sizeof(float) * (size_t)T * C);
    }
}

typedef struct {
    const dn_state *s;
    const mdl_layer *L;
    float *rec;        /* this layer's [nv][dk][dv], updated in place */
    const float *src;  /* row 0 reads the state from here instead (the snapshot), or NULL */
    const float *cv;   /* [T][C] */
    const float *ab;   /* [T][2][nv]: a, then b */
    const float *z;    /* [T][nv*dv], NULL in a replay */
    float *core;       /* [T][nv*dv], NULL in a replay */
    int T;
} delta_job;

/* Four floats as one value (16 bytes: SSE on x86-64's baseline, NEON on
 * arm64; no instruction-set choice involved). Each lane is computed with
 * the same IEEE operations, in the same order, as a scalar loop would: the
 * bits do not depend on the vector width. */
typedef float v4 __attribute__((vector_size(16)));
static inline v4 ld4(const float *p) {
    v4 v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void st4(float *p, v4 v) { memcpy(p, &v, sizeof v); }

/* S[i][e] = S0[i][e] * decay; mem[e] += S[i][e] * k[i] (i ascending; S0
 * may be S) */
static void decay_read(float *S, const float *S0, const float *k, float decay, float *mem, int dk, int dv) {
    int e4 = dv & ~3;
    for (int e = 0; e < dv; e++) mem[e] = 0.0f;
    for (int i = 0; i < dk; i++) {
        float *Si = S + (size_t)i * dv, ki = k[i];
        const float *S0i = S0 + (size_t)i * dv;
        v4 dd = {decay, decay, decay, decay}, kk = {ki, ki, ki, ki};
        for (int e = 0; e < e4; e += 4) {
            v4 x = ld4(S0i + e) * dd;
            st4(Si + e, x);
            st4(mem + e, ld4(mem + e) + x * kk);
        }
        for (int e = e4; e < dv; e++) {
            float x = S0i[e] * decay;
            Si[e] = x;
            mem[e] += x * ki;
        }
    }
}

/* S[i][e] += k[i] * delta[e]; o[e] += S[i][e] * q[i] when q (i ascending) */
static void write_read(float *S, const float *k, const float *delta, const float *q, float *o, int dk, int dv) {
    int e4 = dv & ~3;
    if (q)
        for (int e = 0; e < dv; e++) o[e] = 0.0f;
    for (int i = 0; i < dk; i++) {
        float *Si = S + (size_t)i * dv, ki = k[i], qi = q ? q[i] : 0.0f;
        v4 kk = {ki, ki, ki, ki}, qq = {qi, qi, qi, qi};
        for (int e = 0; e < e4; e += 4) {
            v4 x = ld4(Si + e) + kk * ld4(delta + e);
            st4(Si + e, x);
            if (q) st4(o + e, ld4(o + e) + x * qq);
        }
        for (int e = e4; e < dv; e++) {
            float x = Si[e] + ki * delta[e];
            Si[e] = x;
            if (q) o[e] += x * qi;
        }
    }
}

/* x / sqrt(sum x^2 + 1e-6) into out[n] */
static void l2norm(float *out, const float *x, int n) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss + 1e-6f);
    for (int i = 0; i < n; i++) out[i] = x[i] * r;
}

/* Value heads h0..h1-1, every row in order (rows of one head depend on each
 * other through S_h; heads are independent). */
static void delta_heads(void *p, int h0, int h1) {
    const delta_job *j = p;
    const dn_state *s = j->s;
    int C = s->C, nv = s->nv, dk = s->dk, dv = s->dv, rep = s->nv / s->nk;
    float qn[512], kn[512], mem[512], delta[512], o[512]; /* dk, dv <= 512 (config.c) */
    float qscale = 1.0f / sqrtf((float)dk);
    for (int h = h0; h < h1; h++) {
        float *S = j->rec + (size_t)h * dk * dv;
        const float *S0 = j->src ? j->src + (size_t)h * dk * dv : S;
        int kh = s->v_tiled ? h % s->nk : h / rep; /* config.h: lin_v_tiled */
        for (int t = 0; t < j->T; t++) {
            const float *cv = j->cv + (size_t)t * C;
            l2norm(kn, cv + (size_t)s->nk * dk + (size_t)kh * dk, dk);
            const float *v = cv + (size_t)2 * s->nk * dk + (size_t)h * dv;
            float a = j->ab[(size_t)t * 2 * nv + h] + j->L->dt_bias[h];
            float b = j->ab[(size_t)t * 2 * nv + nv + h];
            float sp = a > 20.0f ? a : log1pf(expf(a)); /* softplus, as torch (threshold 20) */
            float decay = expf(j->L->neg_a[h] * sp), beta = 1.0f / (1.0f + expf(-b));
            /* S = decay S; mem = S^T k */
            decay_read(S, t == 0 ? S0 : S, kn, decay, mem, dk, dv);
            for (int e = 0; e < dv; e++) delta[e] = (v[e] - mem[e]) * beta;
            if (!j->core) { /* replay: the state only, by the same update */
                write_read(S, kn, delta, NULL, NULL, dk, dv);
                continue;
            }
            /* S += k delta^T; o = S^T q */
            l2norm(qn, cv + (size_t)kh * dk, dk);
            for (int i = 0; i < dk; i++) qn[i] *= qscale;
            write_read(S, kn, delta, qn, o, dk, dv);
            /* gated RMSNorm over the head */
            float ss = 0.0f;
            for (int e = 0; e < dv; e++) ss += o[e] * o[e];
            float r = 1.0f / sqrtf(ss / (float)dv + s->eps);
            const float *z = j->z + (size_t)t * nv * dv + (size_t)h * dv;
            float *out = j->core + (size_t)t * nv * dv + (size_t)h * dv;
            for (int e = 0; e < dv; e++) {
                float g = z[e] / (1.0f + expf(-z[e]));
                out[e] = o[e] * r * j->L->lin_norm[e] * g;
            }
        }
    }
}

/* The delta rule on T rows of one layer, heads in parallel when there is
 * enough work (the split never changes a head's arithmetic). */
static void delta_rows(tp_pool *tp, delta_job *j) {
    const dn_state *s = j->s;
    if ((size_t)s->nv * s->dk * s->dv * j->T < ((size_t)1 << 16)) delta_heads(j, 0, s->nv);
    else tp_for(tp, s->nv, delta_heads, j);
}

/* ---- forward ------------------------------------------------------------ */

void dn_mixer(tp_pool *tp, dn_state *s, const mdl_layer *L, int l, const float *xn, float *out, int T) {
    int li = s->lin_of[l], C = s->C, nv = s->nv, vd = nv * s->dv;
    float *ys[4] = {s->mix, s->z, s->core, s->cv};
    const wt_weight *ws[4] = {&L->lin_qkv, &L->lin_z, &L->lin_a, &L->lin_b};
    /* a and b land in core / cv first (free until the conv), then pack */
    kn_matmul_n(tp, ys, xn, ws, 4, T);
    for (int t = 0; t < T; t++) {
        memcpy(s->ab + (size_t)t * 2 * nv, s->core + (size_t)t * nv, sizeof(float) * nv);
        memcpy(s->ab + (size_t)t * 2 * nv + nv, s->cv + (size_t)t * nv, sizeof(float) * nv);
    }
    if (s->snap_len >= 0 && s->n_keep + T <= DN_KEEP) {
        memcpy(s->keep_mix + ((size_t)li * DN_KEEP + s->n_keep) * C, s->mix, sizeof(float) * (size_t)T * C);
        memcpy(s->keep_ab + ((size_t)li * DN_KEEP + s->n_keep) * 2 * nv, s->ab, sizeof(float) * (size_t)T * 2 * nv);
    } else if (s->snap_len >= 0) {
        dn_forget(s); /* cannot happen by the forward's chunking; never replay a partial record */
    }
    conv_rows(s->conv + (size_t)li * (s->K - 1) * C, L->conv_w, s->mix, s->cv, T, C, s->K);
    delta_job j = {s, L, s->rec[li], s->in_snap[li] ? s->snap_rec[li] : NULL, s->cv, s->ab, s->z, s->core, T};
    delta_rows(tp, &j);
    s->in_snap[li] = 0;
    (void)vd;
    kn_matmul(tp, out, s->core, &L->lin_out, T);
}

int dn_rollback(tp_pool *tp, dn_state *s, const mdl_model *m, int len) {
    if (s->snap_len < 0 || len < s->snap_len || len - s->snap_len > s->n_keep) {
        dn_reset(s);
        return 0;
    }
    int n = len - s->snap_len, C = s->C, nv = s->nv;
    memcpy(s->conv, s->snap_conv, sizeof(float) * (size_t)s->n_lin * (s->K - 1) * C);
    for (int li = 0; li < s->n_lin; li++) s->in_snap[li] = 1; /* the state is the snapshot again: no copy */
    for (int l = 0; l < m->cfg.n_layers; l++) {
        int li = s->lin_of[l];
        if (li < 0) continue;
        const mdl_layer *L = &m->layers[l];
        for (int r0 = 0; r0 < n; r0 += s->rows) {
            int T = n - r0 < s->rows ? n - r0 : s->rows;
            const float *mix = s->keep_mix + ((size_t)li * DN_KEEP + r0) * C;
            conv_rows(s->conv + (size_t)li * (s->K - 1) * C, L->conv_w, mix, s->cv, T, C, s->K);
            delta_job j = {s, L, s->rec[li], s->in_snap[li] ? s->snap_rec[li] : NULL, s->cv,
                           s->keep_ab + ((size_t)li * DN_KEEP + r0) * 2 * nv, NULL, NULL, T};
            delta_rows(tp, &j);
            s->in_snap[li] = 0;
        }
    }
    s->n_keep = n;
    return len;
}
