/* model.c - see model.h. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf_model.h"
#include "util.h"

static const st_tensor *need(const mdl_model *m, const char *name) {
    const st_tensor *t = st_find(&m->st, name);
    if (!t) dfl_seterr("missing tensor '%s'", name);
    return t;
}

static int shape_is(const st_tensor *t, int ndim, int64_t d0, int64_t d1) {
    if (t->ndim != ndim) return 0;
    if (t->shape[0] != d0) return 0;
    return ndim < 2 || t->shape[1] == d1;
}

static void shape_str(const st_tensor *t, char *buf, size_t n) {
    int k = snprintf(buf, n, "[");
    for (int i = 0; i < t->ndim && (size_t)k < n; i++)
        k += snprintf(buf + k, n - (size_t)k, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if ((size_t)k < n) snprintf(buf + k, n - (size_t)k, "]");
}

static int float_kind(st_dtype d, wt_dtype *out) {
    switch (d) {
    case ST_F32: *out = WT_F32; return 1;
    case ST_F16: *out = WT_F16; return 1;
    case ST_BF16: *out = WT_BF16; return 1;
    default: return 0;
    }
}

/* shape [d0, d1] (n = 0) or [n, d0, d1] */
static int shape_is_n(const st_tensor *t, int n, int64_t d0, int64_t d1) {
    if (n == 0) return shape_is(t, 2, d0, d1);
    return t->ndim == 3 && t->shape[0] == n && t->shape[1] == d0 && t->shape[2] == d1;
}

static void want_str(char *buf, size_t len, int n, int64_t d0, int64_t d1) {
    if (n) snprintf(buf, len, "[%d, %lld, %lld]", n, (long long)d0, (long long)d1);
    else snprintf(buf, len, "[%lld, %lld]", (long long)d0, (long long)d1);
}

/* Bind tensor NAME as one [rows, cols] matrix (n = 0) or as n stacked ones
 * [n, rows, cols] (w[0..n-1], views into the mapping): plain F32/F16/BF16,
 * or the MLX affine layout when QBASE.scales exists (QBASE.biases beside
 * it; packed U32 [.., rows, cols*bits/32], scales/biases [.., rows,
 * cols/group]). */
static int bind_mat(mdl_model *m, const char *name, const char *qbase, int n, int rows, int cols, wt_weight *w) {
    char sname[320], bname[320], got[64], want[64];
    snprintf(sname, sizeof sname, "%s.scales", qbase);
    snprintf(bname, sizeof bname, "%s.biases", qbase);
    const st_tensor *t = need(m, name);
    if (!t) return -1;
    int nw = n ? n : 1;
    wt_weight v;
    memset(&v, 0, sizeof v);
    v.rows = rows;
    v.cols = cols;
    v.data = t->data;
    const st_tensor *s = st_find(&m->st, sname), *b = NULL;
    size_t data_step, scale_step = 0;
    if (!s) {
        if (!float_kind(t->dtype, &v.dtype)) {
            dfl_seterr("tensor '%s': dtype %s not supported for weights (F32, F16, BF16, or MLX-quantized U32)",
                       name, st_dtype_name(t->dtype));
            return -1;
        }
        if (!shape_is_n(t, n, rows, cols)) {
            shape_str(t, got, sizeof got);
            want_str(want, sizeof want, n, rows, cols);
            dfl_seterr("tensor '%s': shape %s, expected %s from config.json", name, got, want);
            return -1;
        }
        m->weight_bytes += t->nbytes;
        data_step = (size_t)rows * cols * st_dtype_size(t->dtype);
    } else {
        /* MLX affine quantized */
        int bits = m->cfg.q_bits, g = m->cfg.q_group;
        if (!bits) {
            dfl_seterr("tensor '%s' is quantized but config.json has no \"quantization\" entry", sname);
            return -1;
        }
        if (!(b = need(m, bname))) return -1;
        if (t->dtype != ST_U32) {
            dfl_seterr("tensor '%s': dtype %s, expected U32 (packed %d-bit)", name, st_dtype_name(t->dtype), bits);
            return -1;
        }
        if (m->cfg.q_mixed && t->ndim == (n ? 3 : 2) && s->ndim == t->ndim && t->shape[t->ndim - 1] > 0 &&
            s->shape[s->ndim - 1] > 0) {
            /* per-tensor entries: this tensor's bits and group from its shapes */
            int64_t pc = t->shape[t->ndim - 1], sc = s->shape[s->ndim - 1];
            if (pc * 32 % cols == 0 && cols % sc == 0) {
                int b2 = (int)(pc * 32 / cols), g2 = (int)(cols / sc);
                if ((b2 == 4 || b2 == 8) && (g2 == 32 || g2 == 64 || g2 == 128)) bits = b2, g = g2;
            }
        }
        if (cols % g) {
            dfl_seterr("tensor '%s': %d columns not a multiple of group_size %d", name, cols, g);
            return -1;
        }
        if (!shape_is_n(t, n, rows, (int64_t)cols * bits / 32)) {
            shape_str(t, got, sizeof got);
            want_str(want, sizeof want, n, rows, (int64_t)cols * bits / 32);
            dfl_seterr("tensor '%s': shape %s, expected %s (%d x %d at %d bits)", name, got, want, rows, cols, bits);
            return -1;
        }
        const st_tensor *sb[2] = {s, b};
        for (int i = 0; i < 2; i++) {
            wt_dtype k;
            if (!float_kind(sb[i]->dtype, &k)) {
                dfl_seterr("tensor '%s': dtype %s not supported (F32, F16 or BF16)", sb[i]->name,
                           st_dtype_name(sb[i]->dtype));
                return -1;
            }
            if (!shape_is_n(sb[i], n, rows, cols / g)) {
                shape_str(sb[i], got, sizeof got);
                want_str(want, sizeof want, n, rows, cols / g);
                dfl_seterr("tensor '%s': shape %s, expected %s", sb[i]->name, got, want);
                return -1;
            }
            v.scale_dtype = k;
        }
        if (s->dtype != b->dtype) {
            dfl_seterr("tensors '%s' and '%s' have different dtypes", sname, bname);
            return -1;
        }
        v.dtype = bits == 8 ? WT_Q8 : WT_Q4;
        v.bits = bits;
        v.group_size = g;
        v.scales = s->data;
        v.biases = b->data;
        m->weight_bytes += t->nbytes + s->nbytes + b->nbytes;
        data_step = (size_t)rows * cols / 32 * bits * 4;
        scale_step = (size_t)rows * (cols / g) * st_dtype_size(s->dtype);
    }
    for (int i = 0; i < nw; i++) {
        w[i] = v;
        w[i].data = (const char *)t->data + data_step * i;
        if (s) {
            w[i].scales = (const char *)s->data + scale_step * i;
            w[i].biases = (const char *)b->data + scale_step * i;
        }
        if (wt_check(&w[i], name) != 0) return -1;
    }
    return 0;
}

/* Bind BASE.weight as a [rows, cols] matrix (see bind_mat). */
static int bind_linear(mdl_model *m, const char *base, int rows, int cols, wt_weight *w) {
    char name[320];
    snprintf(name, sizeof name, "%s.weight", base);
    return bind_mat(m, name, base, 0, rows, cols, w);
}

/* Bytes of one row of an unpacked matrix's data, and (*srow) of its scales
 * and of its biases (0 for a float matrix; MXFP4: its e8m0 bytes, no
 * biases). */
static size_t row_bytes(const wt_weight *w, size_t *srow) {
    if (w->dtype == WT_MXFP4) {
        *srow = (size_t)w->cols / 32;
        return (size_t)w->cols / 2;
    }
    *srow = w->bits ? (size_t)(w->cols / w->group_size) * (w->scale_dtype == WT_F32 ? 4 : 2) : 0;
    return w->bits ? (size_t)w->cols / 32 * w->bits * 4 : (size_t)w->cols * (w->dtype == WT_F32 ? 4 : 2);
}

/* Rows r0..r0+n-1 of an unpacked matrix as a matrix of their own. */
static wt_weight rows_of(const wt_weight *w, int r0, int n) {
    wt_weight v = *w;
    size_t srow, row = row_bytes(w, &srow);
    v.rows = n;
    v.data = (const char *)w->data + row * r0;
    if (w->bits) {
        v.scales = (const char *)w->scales + srow * r0;
        if (w->biases) v.biases = (const char *)w->biases + srow * r0;
    }
    return v;
}

void *mdl_own(mdl_model *m, size_t n) {
    void *p = dfl_malloc(n ? n : 1);
    m->owned = dfl_realloc(m->owned, sizeof(void *) * (size_t)(m->n_owned + 1));
    m->owned[m->n_owned++] = p;
    return p;
}

/* A matrix of its own (owned by m) made of W's row runs: run i is rows
 * src[i] .. src[i] + len[i] - 1, in the order given, the runs' lengths
 * summing to ROWS. Float and MLX-quantized rows alike (data, and scales and
 * biases row for row). */
static wt_weight gather_rows(mdl_model *m, const wt_weight *w, int n_runs, const int *src, const int *len, int rows) {
    wt_weight v = *w;
    v.rows = rows;
    size_t srow, row = row_bytes(w, &srow);
    char *d = mdl_own(m, row * (size_t)rows), *sc = NULL, *bi = NULL;
    v.data = d;
    if (w->bits) {
        v.scales = sc = mdl_own(m, srow * (size_t)rows);
        if (w->biases) v.biases = bi = mdl_own(m, srow * (size_t)rows);
    }
    for (int i = 0, at = 0; i < n_runs; at += len[i], i++) {
        memcpy(d + row * at, (const char *)w->data + row * src[i], row * len[i]);
        if (w->bits) memcpy(sc + srow * at, (const char *)w->scales + srow * src[i], srow * len[i]);
        if (bi) memcpy(bi + srow * at, (const char *)w->biases + srow * src[i], srow * len[i]);
    }
    return v;
}

/* Qwen3-Next's fused input projections under PRE (config.h: per key head g,
 * in_proj_qkvz rows [q_g | k_g | v_g | z_g], in_proj_ba rows [b_g | a_g])
 * regrouped into the Qwen3.5 matrices: lin_qkv [all q | all k | all v],
 * lin_z, lin_b, lin_a. Copies (the fused rows are read once, at load). */
static int bind_fused_in_proj(mdl_model *m, const char *pre, mdl_layer *L) {
    const cfg_model *c = &m->cfg;
    int H = c->hidden, nk = c->lin_k_heads, dk = c->lin_k_dim, r = c->lin_v_heads / nk, rv = r * c->lin_v_dim;
    int G = 2 * dk + 2 * rv; /* in_proj_qkvz rows of one key head */
    char b[256];
    wt_weight qkvz, ba;
    snprintf(b, sizeof b, "%sin_proj_qkvz", pre);
    if (bind_linear(m, b, nk * G, H, &qkvz)) return -1;
    snprintf(b, sizeof b, "%sin_proj_ba", pre);
    if (bind_linear(m, b, 2 * nk * r, H, &ba)) return -1;
    int *src = dfl_malloc(sizeof(int) * 3 * (size_t)nk), *len = dfl_malloc(sizeof(int) * 3 * (size_t)nk);
    /* lin_qkv: the q rows of every key head, then the k rows, then the v rows */
    for (int part = 0; part < 3; part++)
        for (int g = 0; g < nk; g++) {
            src[part * nk + g] = g * G + (part == 0 ? 0 : part == 1 ? dk : 2 * dk);
            len[part * nk + g] = part < 2 ? dk : rv;
        }
    L->lin_qkv = gather_rows(m, &qkvz, 3 * nk, src, len, 2 * nk * dk + nk * rv);
    for (int g = 0; g < nk; g++) src[g] = g * G + 2 * dk + rv, len[g] = rv;
    L->lin_z = gather_rows(m, &qkvz, nk, src, len, nk * rv);
    free(src);
    free(len);
    mdl_split_ba(m, &ba, nk, r, &L->lin_b, &L->lin_a);
    return 0;
}

void mdl_split_ba(mdl_model *m, const wt_weight *ba, int nk, int r, wt_weight *b, wt_weight *a) {
    int *src = dfl_malloc(sizeof(int) * (size_t)nk), *len = dfl_malloc(sizeof(int) * (size_t)nk);
    for (int g = 0; g < nk; g++) src[g] = g * 2 * r, len[g] = r;
    *b = gather_rows(m, ba, nk, src, len, nk * r);
    for (int g = 0; g < nk; g++) src[g] = g * 2 * r + r;
    *a = gather_rows(m, ba, nk, src, len, nk * r);
    free(src);
    free(len);
}

/* Layer PRE (e.g. "model.layers.3.")'s expert block, in whichever layout
 * the checkpoint has (model.h). */
static int bind_experts(mdl_model *m, const char *pre, mdl_layer *L) {
    const cfg_model *c = &m->cfg;
    int E = c->n_experts, H = c->hidden, I = c->moe_inter;
    char b[256], n2[256];
    snprintf(b, sizeof b, "%smlp.gate", pre);
    if (bind_linear(m, b, E, H, &L->router)) return -1;
    L->experts = dfl_calloc((size_t)E, sizeof(mdl_expert));
    wt_weight *tmp = dfl_malloc(sizeof(wt_weight) * (size_t)E);
    int rc = -1;
    static const char *proj[3] = {"gate_proj", "up_proj", "down_proj"};
    snprintf(b, sizeof b, "%smlp.switch_mlp.gate_proj.weight", pre);
    snprintf(n2, sizeof n2, "%smlp.experts.gate_up_proj", pre);
    if (st_find(&m->st, b)) { /* mlx-lm: stacked [E, rows, cols] */
        for (int p = 0; p < 3; p++) {
            char base[256], name[320];
            snprintf(base, sizeof base, "%smlp.switch_mlp.%s", pre, proj[p]);
            snprintf(name, sizeof name, "%s.weight", base);
            if (bind_mat(m, name, base, E, p == 2 ? H : I, p == 2 ? I : H, tmp)) goto out;
            for (int e = 0; e < E; e++) *(p == 0 ? &L->experts[e].wg : p == 1 ? &L->experts[e].wu : &L->experts[e].wd) = tmp[e];
        }
    } else if (st_find(&m->st, n2)) { /* transformers 5: gate and up fused, float */
        if (bind_mat(m, n2, n2, E, 2 * I, H, tmp)) goto out;
        for (int e = 0; e < E; e++) {
            L->experts[e].wg = rows_of(&tmp[e], 0, I);
            L->experts[e].wu = rows_of(&tmp[e], I, I);
        }
        snprintf(n2, sizeof n2, "%smlp.experts.down_proj", pre);
        if (bind_mat(m, n2, n2, E, H, I, tmp)) goto out;
        for (int e = 0; e < E; e++) L->experts[e].wd = tmp[e];
    } else { /* HF checkpoints: one matrix per expert */
        for (int e = 0; e < E; e++)
            for (int p = 0; p < 3; p++) {
                snprintf(b, sizeof b, "%smlp.experts.%d.%s", pre, e, proj[p]);
                mdl_expert *x = &L->experts[e];
                if (bind_linear(m, b, p == 2 ? H : I, p == 2 ? I : H, p == 0 ? &x->wg : p == 1 ? &x->wu : &x->wd))
                    goto out;
            }
    }
    rc = 0;
out:
    free(tmp);
    return rc;
}

/* dst [rows][cols] = the elements (r, c) of src at (r * rs + c * cs) elements
 * of ES bytes, in 32 x 32 tiles (a transpose reads across rows). */
static void copy_strided(char *dst, const char *src, int rows, int cols, size_t rs, size_t cs, size_t es) {
    for (int r0 = 0; r0 < rows; r0 += 32)
        for (int c0 = 0; c0 < cols; c0 += 32)
            for (int r = r0; r < rows && r < r0 + 32; r++)
                for (int c = c0; c < cols && c < c0 + 32; c++)
                    memcpy(dst + ((size_t)r * cols + c) * es, src + ((size_t)r * rs + (size_t)c * cs) * es, es);
}

static float *bind_f32(mdl_model *m, const char *name, int64_t d0, int64_t d1, int64_t d2);

/* NAME: a float tensor of shape [d0, d1, d2], else NULL + error. */
static const st_tensor *need_float3(mdl_model *m, const char *name, int64_t d0, int64_t d1, int64_t d2, wt_dtype *k) {
    const st_tensor *t = need(m, name);
    if (!t) return NULL;
    if (!float_kind(t->dtype, k)) {
        dfl_seterr("tensor '%s': dtype %s not supported (F32, F16 or BF16, or MXFP4 as %s_blocks + %s_scales)", name,
                   st_dtype_name(t->dtype), name, name);
        return NULL;
    }
    if (t->ndim != 3 || t->shape[0] != d0 || t->shape[1] != d1 || t->shape[2] != d2) {
        char got[64];
        shape_str(t, got, sizeof got);
        dfl_seterr("tensor '%s': shape %s, expected [%lld, %lld, %lld]", name, got, (long long)d0, (long long)d1,
                   (long long)d2);
        return NULL;
    }
    m->weight_bytes += t->nbytes;
    return t;
}

/* An MXFP4 tensor NAME_blocks [E, rows, cols/32, 16] (U8: two 4-bit e2m1
 * codes per byte, the low nibble first) with NAME_scales [E, rows, cols/32]
 * (U8 e8m0: 2^(s - 127) per 32 values), checked. */
static int need_mxfp4(mdl_model *m, const char *name, int E, int rows, int cols, const st_tensor **blk,
                      const st_tensor **sc) {
    char b[320], got[64];
    if (cols % 32) {
        dfl_seterr("tensor '%s_blocks': %d columns are not a multiple of the MXFP4 block of 32", name, cols);
        return -1;
    }
    snprintf(b, sizeof b, "%s_blocks", name);
    if (!(*blk = need(m, b))) return -1;
    snprintf(b, sizeof b, "%s_scales", name);
    if (!(*sc = need(m, b))) return -1;
    const st_tensor *t = *blk, *u = *sc;
    if (t->dtype != ST_U8 || u->dtype != ST_U8) {
        dfl_seterr("tensor '%s': dtype %s, expected U8 (MXFP4)", t->dtype != ST_U8 ? t->name : u->name,
                   st_dtype_name(t->dtype != ST_U8 ? t->dtype : u->dtype));
        return -1;
    }
    if (t->ndim != 4 || t->shape[0] != E || t->shape[1] != rows || t->shape[2] != cols / 32 || t->shape[3] != 16) {
        shape_str(t, got, sizeof got);
        dfl_seterr("tensor '%s': shape %s, expected [%d, %d, %d, 16]", t->name, got, E, rows, cols / 32);
        return -1;
    }
    if (u->ndim != 3 || u->shape[0] != E || u->shape[1] != rows || u->shape[2] != cols / 32) {
        shape_str(u, got, sizeof got);
        dfl_seterr("tensor '%s': shape %s, expected [%d, %d, %d]", u->name, got, E, rows, cols / 32);
        return -1;
    }
    return 0; /* weight_bytes: the matrices bound from them (mxfp4_rows) */
}

/* Rows src_row0, src_row0 + step, ... (n of them) of one expert's MXFP4
 * matrix (blk/sc at that expert) as a WT_MXFP4 weight (weight.h: openai's
 * nibble order is its layout): with step 1 the expert's rows in place in
 * the mapping, else copies owned by m (gate / up: every other row); a
 * scale byte outside 2..252 is refused naming the tensor. */
static int mxfp4_rows(mdl_model *m, const st_tensor *bt, const st_tensor *st, int e, int row0, int step, int n,
                      int cols, wt_weight *w) {
    int nb = cols / 32, src_rows = (int)bt->shape[1];
    const uint8_t *B = (const uint8_t *)bt->data + (size_t)e * src_rows * nb * 16;
    const uint8_t *S = (const uint8_t *)st->data + (size_t)e * src_rows * nb;
    for (int r = 0; r < n; r++) {
        size_t sr = (size_t)row0 + (size_t)r * step;
        for (int k = 0; k < nb; k++)
            if (!wt_mx4_e_ok(S[sr * nb + k])) {
                dfl_seterr("tensor '%s': MXFP4 scale byte %d (2^%d) at expert %d row %zu is outside the range "
                           "supported (2..252)", st->name, S[sr * nb + k], S[sr * nb + k] - 127, e, sr);
                return -1;
            }
    }
    const uint8_t *d = B + (size_t)row0 * nb * 16, *sc = S + (size_t)row0 * nb;
    if (step != 1) {
        uint8_t *dc = mdl_own(m, (size_t)n * nb * 16), *scc = mdl_own(m, (size_t)n * nb);
        for (int r = 0; r < n; r++) {
            size_t sr = (size_t)row0 + (size_t)r * step;
            memcpy(dc + (size_t)r * nb * 16, B + sr * nb * 16, (size_t)nb * 16);
            memcpy(scc + (size_t)r * nb, S + sr * nb, (size_t)nb);
        }
        d = dc, sc = scc;
    }
    *w = (wt_weight){.dtype = WT_MXFP4, .rows = n, .cols = cols, .data = d, .scales = sc, .group_size = 32, .bits = 4};
    m->weight_bytes += wt_bytes(w);
    return wt_check(w, bt->name);
}

/* gpt-oss's expert block under PRE (model.h): the router with its bias, and
 * each expert's gate, up and down matrices copied output-major (in the
 * stored dtype) with their biases. */
static int bind_gptoss_experts(mdl_model *m, const char *pre, mdl_layer *L) {
    const cfg_model *c = &m->cfg;
    int E = c->n_experts, H = c->hidden, I = c->moe_inter;
    char b[256];
    wt_dtype kgu, kd;
    snprintf(b, sizeof b, "%smlp.router", pre);
    if (bind_linear(m, b, E, H, &L->router)) return -1;
    snprintf(b, sizeof b, "%smlp.router.bias", pre);
    if (!(L->router_bias = bind_f32(m, b, E, 0, 0))) return -1;
    snprintf(b, sizeof b, "%smlp.experts.gate_up_proj_blocks", pre);
    int mx = st_find(&m->st, b) != NULL; /* MXFP4 (openai's checkpoints) */
    const st_tensor *gu = NULL, *dn = NULL, *gub_t = NULL, *gus_t = NULL, *dnb_t = NULL, *dns_t = NULL;
    if (mx) {
        snprintf(b, sizeof b, "%smlp.experts.gate_up_proj", pre);
        if (need_mxfp4(m, b, E, 2 * I, H, &gub_t, &gus_t)) return -1;
        snprintf(b, sizeof b, "%smlp.experts.down_proj", pre);
        if (need_mxfp4(m, b, E, H, I, &dnb_t, &dns_t)) return -1;
    } else {
        snprintf(b, sizeof b, "%smlp.experts.gate_up_proj", pre);
        if (!(gu = need_float3(m, b, E, H, 2 * (int64_t)I, &kgu))) return -1;
        snprintf(b, sizeof b, "%smlp.experts.down_proj", pre);
        if (!(dn = need_float3(m, b, E, I, H, &kd))) return -1;
    }
    snprintf(b, sizeof b, "%smlp.experts.gate_up_proj_bias", pre);
    float *gub = bind_f32(m, b, E, 2 * (int64_t)I, 0);
    if (!gub) return -1;
    snprintf(b, sizeof b, "%smlp.experts.down_proj_bias", pre);
    float *db = bind_f32(m, b, E, H, 0);
    if (!db) {
        free(gub);
        return -1;
    }
    /* biases: [E][I] gate, [E][I] up, [E][H] down, owned by the model */
    float *bias = mdl_own(m, sizeof(float) * (size_t)E * (2 * (size_t)I + H));
    size_t egu = mx ? 0 : st_dtype_size(gu->dtype), ed = mx ? 0 : st_dtype_size(dn->dtype);
    char *wgu = mx ? NULL : mdl_own(m, egu * (size_t)E * 2 * I * H), *wd = mx ? NULL : mdl_own(m, ed * (size_t)E * H * I);
    L->experts = dfl_calloc((size_t)E, sizeof(mdl_expert));
    for (int e = 0; e < E; e++) {
        mdl_expert *x = &L->experts[e];
        float *bg = bias + (size_t)e * I, *bu = bias + (size_t)(E + e) * I, *bd = bias + 2 * (size_t)E * I + (size_t)e * H;
        for (int i = 0; i < I; i++) {
            bg[i] = gub[(size_t)e * 2 * I + 2 * i];
            bu[i] = gub[(size_t)e * 2 * I + 2 * i + 1];
        }
        memcpy(bd, db + (size_t)e * H, sizeof(float) * H);
        x->bg = bg, x->bu = bu, x->bd = bd;
        if (mx) { /* output-major already: gate row i = row 2i, up row i = row 2i + 1 */
            if (mxfp4_rows(m, gub_t, gus_t, e, 0, 2, I, H, &x->wg) ||
                mxfp4_rows(m, gub_t, gus_t, e, 1, 2, I, H, &x->wu) ||
                mxfp4_rows(m, dnb_t, dns_t, e, 0, 1, H, I, &x->wd)) {
                free(gub);
                free(db);
                return -1;
            }
            continue;
        }
        /* gate row i, column h = gate_up[e][h][2i] (up: 2i + 1); down row h, column i = down[e][i][h] */
        const char *src = (const char *)gu->data + egu * (size_t)e * H * 2 * I;
        char *g = wgu + egu * (size_t)e * 2 * I * H, *u = g + egu * (size_t)I * H;
        copy_strided(g, src, I, H, 2, 2 * (size_t)I, egu);
        copy_strided(u, src + egu, I, H, 2, 2 * (size_t)I, egu);
        char *d = wd + ed * (size_t)e * H * I;
        copy_strided(d, (const char *)dn->data + ed * (size_t)e * I * H, H, I, 1, H, ed);
        x->wg = (wt_weight){.dtype = kgu, .rows = I, .cols = H, .data = g};
        x->wu = (wt_weight){.dtype = kgu, .rows = I, .cols = H, .data = u};
        x->wd = (wt_weight){.dtype = kd, .rows = H, .cols = I, .data = d};
        if (wt_check(&x->wg, gu->name) || wt_check(&x->wu, gu->name) || wt_check(&x->wd, dn->name)) {
            free(gub);
            free(db);
            return -1;
        }
    }
    free(gub);
    free(db);
    /* the tensors copied above are not read again: out of the resident set
     * (MXFP4's down_proj stays in use in place) */
    if (mx) dfl_map_release(gub_t->data, gub_t->nbytes), dfl_map_release(gus_t->data, gus_t->nbytes);
    else dfl_map_release(gu->data, gu->nbytes), dfl_map_release(dn->data, dn->nbytes);
    return 0;
}

/* Copy tensor NAME, of shape [d0] (d1 = d2 = 0), [d0, d1] or [d0, d1, d2]
 * and a float dtype, to a new f32 array. */
static float *bind_f32(mdl_model *m, const char *name, int64_t d0, int64_t d1, int64_t d2) {
    const st_tensor *t = need(m, name);
    if (!t) return NULL;
    wt_dtype k;
    if (!float_kind(t->dtype, &k)) {
        dfl_seterr("tensor '%s': dtype %s not supported (F32, F16 or BF16)", name, st_dtype_name(t->dtype));
        return NULL;
    }
    int nd = d2 ? 3 : d1 ? 2 : 1;
    int64_t want[3] = {d0, d1, d2};
    int ok = t->ndim == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == want[i];
    if (!ok) {
        char got[64], w[64];
        shape_str(t, got, sizeof got);
        if (nd == 1) snprintf(w, sizeof w, "[%lld]", (long long)d0);
        else if (nd == 2) snprintf(w, sizeof w, "[%lld, %lld]", (long long)d0, (long long)d1);
        else snprintf(w, sizeof w, "[%lld, %lld, %lld]", (long long)d0, (long long)d1, (long long)d2);
        dfl_seterr("tensor '%s': shape %s, expected %s", name, got, w);
        return NULL;
    }
    size_t n = (size_t)d0 * (d1 ? d1 : 1) * (d2 ? d2 : 1);
    float *v = dfl_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        if (k == WT_F32) memcpy(&v[i], (const char *)t->data + 4 * i, 4);
        else {
            uint16_t h;
            memcpy(&h, (const char *)t->data + 2 * i, 2);
            v[i] = k == WT_BF16 ? dfl_bf16_to_f32(h) : dfl_f16_to_f32(h);
        }
    }
    m->weight_bytes += t->nbytes;
    return v;
}

/* Copy a [n] norm weight to a new f32 array; Qwen3.5's zero-centred RMSNorm
 * weights become 1 + w here (in f32, as the reference computes it), so every
 * norm downstream multiplies by the array as it is. An mlx-lm conversion
 * (m->mlx_norms) stored 1 + w itself, rounded to the file's dtype (its
 * sanitize() adds 1.0 in bf16): that stored value is the scale, and adding
 * 1 again would be wrong by a factor near 2. */
static float *bind_vec(mdl_model *m, const char *name, int n) {
    float *v = bind_f32(m, name, n, 0, 0);
    if (v && m->cfg.arch == CFG_QWEN3_5 && !m->cfg.is_draft && !m->mlx_norms)
        for (int i = 0; i < n; i++) v[i] = 1.0f + v[i];
    return v;
}

/* Gemma-4's expert block under PRE ("model.layers.L."; model.h): the router
 * and the experts as transformers 5.17 stores them, float, bound in place.
 * Other layouts (MLX-quantized or split experts) are refused by name: no
 * reference says how they are laid out for this family. */
static int bind_gemma4_experts(mdl_model *m, const char *pre, mdl_layer *L) {
    const cfg_model *c = &m->cfg;
    int E = c->n_experts, H = c->hidden, I = c->moe_inter;
    char b[256], q[300];
    snprintf(b, sizeof b, "%srouter.proj", pre);
    if (bind_linear(m, b, E, H, &L->router)) return -1;
    snprintf(b, sizeof b, "%srouter.scale", pre);
    if (!(L->router_scale = bind_f32(m, b, H, 0, 0))) return -1;
    snprintf(b, sizeof b, "%srouter.per_expert_scale", pre);
    if (!(L->router_pes = bind_f32(m, b, E, 0, 0))) return -1;
    static const char *part[2] = {"gate_up_proj", "down_proj"};
    for (int p = 0; p < 2; p++) {
        snprintf(b, sizeof b, "%sexperts.%s", pre, part[p]);
        snprintf(q, sizeof q, "%s.scales", b);
        if (st_find(&m->st, q) || !st_find(&m->st, b)) {
            dfl_seterr("tensor '%s': %s; Gemma-4's experts are supported as transformers stores them (float "
                       "experts.gate_up_proj [E, 2*moe_inter, H], experts.down_proj [E, H, moe_inter]), not "
                       "MLX-quantized or in another layout (quantize at load with --quant q8|q4 instead)",
                       b, st_find(&m->st, q) ? "MLX-quantized" : "missing");
            return -1;
        }
    }
    L->experts = dfl_calloc((size_t)E, sizeof(mdl_expert));
    wt_weight *tmp = dfl_malloc(sizeof(wt_weight) * (size_t)E);
    int rc = -1;
    snprintf(b, sizeof b, "%sexperts.gate_up_proj", pre);
    if (bind_mat(m, b, b, E, 2 * I, H, tmp)) goto out; /* [E, 2I, H] */
    for (int e = 0; e < E; e++) {
        L->experts[e].wg = rows_of(&tmp[e], 0, I);
        L->experts[e].wu = rows_of(&tmp[e], I, I);
    }
    snprintf(b, sizeof b, "%sexperts.down_proj", pre);
    if (bind_mat(m, b, b, E, H, I, tmp)) goto out; /* [E, H, I] */
    for (int e = 0; e < E; e++) L->experts[e].wd = tmp[e];
    rc = 0;
out:
    free(tmp);
    return rc;
}

/* Layer L's Gated DeltaNet under PRE (".../layers.L.linear_attn."). */
static int bind_linear_attn(mdl_model *m, const char *pre, mdl_layer *L) {
    const cfg_model *c = &m->cfg;
    int H = c->hidden, nv = c->lin_v_heads, vd = nv * c->lin_v_dim;
    int C = 2 * c->lin_k_heads * c->lin_k_dim + vd, K = c->lin_conv;
    char b[256];
#define LA_LIN(field, sub, r, cc)                                              \
    snprintf(b, sizeof b, "%s%s", pre, sub);                                   \
    if (bind_linear(m, b, r, cc, &L->field)) return -1;
#define LA_VEC(field, sub, d0, d1, d2)                                         \
    snprintf(b, sizeof b, "%s%s", pre, sub);                                   \
    if (!(L->field = bind_f32(m, b, d0, d1, d2))) return -1;
    if (c->qwen3_next) {
        if (bind_fused_in_proj(m, pre, L)) return -1;
    } else {
        LA_LIN(lin_qkv, "in_proj_qkv", C, H);
        LA_LIN(lin_z, "in_proj_z", vd, H);
        LA_LIN(lin_b, "in_proj_b", nv, H);
        LA_LIN(lin_a, "in_proj_a", nv, H);
    }
    LA_LIN(lin_out, "out_proj", H, vd);
    /* conv1d: HF [C, 1, K], mlx-lm [C, K, 1] (its sanitize() moves the axis);
     * the same C*K values in the same order either way. Every layer must have
     * the layout the first one has (mdl_load set m->mlx_norms from it). */
    snprintf(b, sizeof b, "%sconv1d.weight", pre);
    const st_tensor *cw = st_find(&m->st, b);
    if (cw && cw->ndim == 3 && cw->shape[0] == C && K != 1 &&
        ((m->mlx_norms && cw->shape[1] == 1 && cw->shape[2] == K) ||
         (!m->mlx_norms && cw->shape[1] == K && cw->shape[2] == 1))) {
        char got[64];
        shape_str(cw, got, sizeof got);
        dfl_seterr("tensor '%s': shape %s (%s layout), but the first linear-attention layer's conv1d.weight "
                   "has %s's: a checkpoint half converted by mlx-lm (whether its norm weights are stored as w "
                   "or 1 + w cannot be told); convert the Hugging Face checkpoint again",
                   b, got, m->mlx_norms ? "Hugging Face's" : "mlx-lm's", m->mlx_norms ? "mlx-lm" : "Hugging Face");
        return -1;
    }
    if (m->mlx_norms) {
        LA_VEC(conv_w, "conv1d.weight", C, K, 1);
    } else {
        LA_VEC(conv_w, "conv1d.weight", C, 1, K);
    }
    LA_VEC(dt_bias, "dt_bias", nv, 0, 0);
    LA_VEC(neg_a, "A_log", nv, 0, 0);
    LA_VEC(lin_norm, "norm.weight", c->lin_v_dim, 0, 0);
#undef LA_LIN
#undef LA_VEC
    for (int h = 0; h < nv; h++) {
        if (!isfinite(L->neg_a[h]) || L->neg_a[h] > 80.0f) {
            dfl_seterr("tensor '%sA_log': value %g at head %d is out of range (exp overflows)", pre, L->neg_a[h], h);
            return -1;
        }
        L->neg_a[h] = -expf(L->neg_a[h]);
    }
    return 0;
}

/* Qwen3.5 / Qwen3-Next under PRE: an mlx-lm conversion or not, from the
 * first linear-attention layer's conv1d.weight, [C, K, 1] there and
 * [C, 1, K] in the HF checkpoint (mlx-lm's sanitize() moves the axis and,
 * in the same pass, stores the zero-centred norms input_layernorm,
 * post_attention_layernorm, q_norm, k_norm and the final norm as 1 + w;
 * linear_attn.norm is a plain RMSNorm in both). Sets m->mlx_norms. Names
 * under language_model.model. are mlx-lm's own, so they must come with its
 * conv1d layout. A missing or misshapen tensor is left to bind_linear_attn
 * to name. */
static int mlx_layout(mdl_model *m, const char *pre) {
    const cfg_model *c = &m->cfg;
    int l = 0;
    while (l < c->n_layers && !c->linear_layer[l]) l++;
    if (l == c->n_layers) return 0;
    char b[224];
    snprintf(b, sizeof b, "%slayers.%d.linear_attn.conv1d.weight", pre, l);
    const st_tensor *t = st_find(&m->st, b);
    m->mlx_norms = t && t->ndim == 3 && t->shape[1] == c->lin_conv && t->shape[2] == 1 && c->lin_conv != 1;
    if (t && !m->mlx_norms && !strcmp(pre, "language_model.model.")) {
        char got[64];
        shape_str(t, got, sizeof got);
        dfl_seterr("tensor '%s': shape %s, but names under language_model.model. are mlx-lm's, whose "
                   "conv1d.weight is [C, %d, 1]: a checkpoint half converted by mlx-lm (whether its norm "
                   "weights are stored as w or 1 + w cannot be told); convert the Hugging Face checkpoint again",
                   b, got, c->lin_conv);
        return -1;
    }
    return 0;
}

int mdl_check_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || S_ISDIR(st.st_mode) || gguf_is_gguf(path)) return 0; /* missing: config.json says */
    size_t n = strlen(path);
    dfl_seterr("%s %s", path,
               n >= 5 && !strcmp(path + n - 5, ".gguf")
                   ? "is not a GGUF file (no \"GGUF\" magic at its start)"
                   : "is a file; pass the model directory that holds it (config.json, *.safetensors, "
                     "tokenizer.json) or a GGUF file");
    return -1;
}

int mdl_load(mdl_model *m, const char *dir) {
    memset(m, 0, sizeof *m);
    if (mdl_check_path(dir) != 0) return -1;
    if (gguf_is_gguf(dir)) return ggm_load(m, dir);
    if (cfg_load(&m->cfg, dir) != 0) return -1;
    if (st_open_dir(&m->st, dir) != 0) return -1;
    const cfg_model *c = &m->cfg;
    int H = c->hidden;
    const char *pre = c->is_draft ? "" : "model.";
    /* a multimodal Qwen3.5 checkpoint keeps its text model under
     * model.language_model. (lm_head.weight at the top; model.visual.* and
     * mtp.* are not read); mlx-lm's conversion of one under
     * language_model.model. (an untied head as language_model.lm_head.weight) */
    const char *head = "lm_head";
    if (c->arch == CFG_QWEN3_5 && st_find(&m->st, "model.language_model.embed_tokens.weight"))
        pre = "model.language_model.";
    else if (c->arch == CFG_QWEN3_5 && st_find(&m->st, "language_model.model.embed_tokens.weight"))
        pre = "language_model.model.", head = "language_model.lm_head";
    if (c->arch == CFG_QWEN3_5 && !c->is_draft && mlx_layout(m, pre) != 0) goto fail;
    /* a multimodal Gemma-4 checkpoint: model.language_model. (model.vision_tower.*,
     * model.audio_tower.*, model.embed_vision.* ... are not read) */
    if (c->arch == CFG_GEMMA4 && st_find(&m->st, "model.language_model.embed_tokens.weight"))
        pre = "model.language_model.";
    char base[192];
    m->layers = dfl_calloc((size_t)c->n_layers, sizeof(mdl_layer));
    if (!c->is_draft) {
        snprintf(base, sizeof base, "%sembed_tokens", pre);
        if (bind_linear(m, base, c->vocab, H, &m->embed)) goto fail;
        if (c->tie_embeddings) {
            m->lm_head = m->embed;
        } else {
            snprintf(base, sizeof base, "%s.weight", head);
            if (!st_find(&m->st, base)) {
                dfl_seterr("missing tensor '%s' (config.json has tie_word_embeddings=false)", base);
                goto fail;
            }
            if (bind_linear(m, head, c->vocab, H, &m->lm_head)) goto fail;
        }
    } else {
        if (bind_linear(m, "fc", H, c->n_taps * H, &m->fc)) goto fail;
        if (!(m->hidden_norm = bind_vec(m, "hidden_norm.weight", H))) goto fail;
    }
    snprintf(base, sizeof base, "%snorm.weight", pre);
    if (!(m->final_norm = bind_vec(m, base, H))) goto fail;
    if (c->ple) {
        int LP = c->n_layers * c->ple;
        snprintf(base, sizeof base, "%sembed_tokens_per_layer", pre);
        if (bind_linear(m, base, c->vocab, LP, &m->ple_embed)) goto fail;
        snprintf(base, sizeof base, "%sper_layer_model_projection", pre);
        if (bind_linear(m, base, LP, H, &m->ple_model_proj)) goto fail;
        snprintf(base, sizeof base, "%sper_layer_projection_norm.weight", pre);
        if (!(m->ple_proj_norm = bind_vec(m, base, c->ple))) goto fail;
    }
    for (int l = 0; l < c->n_layers; l++) {
        mdl_layer *L = &m->layers[l];
        int hd = cfg_head_dim(c, l), q = c->n_heads * hd, kv = cfg_kv_heads(c, l) * hd;
        char b[224];
#define LIN(field, sub, r, cc)                                                 \
    snprintf(b, sizeof b, "%slayers.%d.%s", pre, l, sub);                      \
    if (bind_linear(m, b, r, cc, &L->field)) goto fail;
#define VEC(field, sub, n)                                                     \
    snprintf(b, sizeof b, "%slayers.%d.%s.weight", pre, l, sub);               \
    if (!(L->field = bind_vec(m, b, n))) goto fail;
#define VECN(field, sub, n)                                                    \
    snprintf(b, sizeof b, "%slayers.%d.%s", pre, l, sub);                      \
    if (!(L->field = bind_f32(m, b, n, 0, 0))) goto fail;
        if (c->linear_layer[l]) {
            snprintf(b, sizeof b, "%slayers.%d.linear_attn.", pre, l);
            if (bind_linear_attn(m, b, L)) goto fail;
        } else {
            LIN(wq, "self_attn.q_proj", c->attn_gate ? 2 * q : q, H);
            LIN(wk, "self_attn.k_proj", kv, H);
            if (!(c->k_eq_v && !c->sliding_layer[l])) { /* Gemma-4 k_eq_v: a full layer's values are its keys */
                LIN(wv, "self_attn.v_proj", kv, H);
            }
            LIN(wo, "self_attn.o_proj", H, q);
        }
        if (c->attn_bias) {
            VECN(bq, "self_attn.q_proj.bias", q);
            VECN(bk, "self_attn.k_proj.bias", kv);
            VECN(bv, "self_attn.v_proj.bias", kv);
            VECN(bo, "self_attn.o_proj.bias", H);
        }
        if (c->attn_sinks) {
            VECN(sinks, "self_attn.sinks", c->n_heads);
        }
        if (c->g4_moe) { /* the dense MLP and the expert block beside it */
            LIN(wg, "mlp.gate_proj", c->inter, H);
            LIN(wu, "mlp.up_proj", c->inter, H);
            LIN(wd, "mlp.down_proj", H, c->inter);
            snprintf(b, sizeof b, "%slayers.%d.", pre, l);
            if (bind_gemma4_experts(m, b, L)) goto fail;
            VEC(moe_in_norm, "pre_feedforward_layernorm_2", H);
            VEC(ffn_out_norm1, "post_feedforward_layernorm_1", H);
            VEC(ffn_out_norm2, "post_feedforward_layernorm_2", H);
        } else if (c->moe_layer[l] && c->arch == CFG_GPT_OSS) {
            snprintf(b, sizeof b, "%slayers.%d.", pre, l);
            if (bind_gptoss_experts(m, b, L)) goto fail;
        } else if (c->moe_layer[l]) {
            snprintf(b, sizeof b, "%slayers.%d.", pre, l);
            if (bind_experts(m, b, L)) goto fail;
            if (c->shared_inter) {
                LIN(sh_wg, "mlp.shared_expert.gate_proj", c->shared_inter, H);
                LIN(sh_wu, "mlp.shared_expert.up_proj", c->shared_inter, H);
                LIN(sh_wd, "mlp.shared_expert.down_proj", H, c->shared_inter);
                snprintf(b, sizeof b, "%slayers.%d.mlp.shared_expert_gate.weight", pre, l);
                if (!(L->sh_gate = bind_f32(m, b, 1, H, 0))) goto fail;
            }
        } else {
            LIN(wg, "mlp.gate_proj", c->inter, H);
            LIN(wu, "mlp.up_proj", c->inter, H);
            LIN(wd, "mlp.down_proj", H, c->inter);
        }
        VEC(in_norm, "input_layernorm", H);
        if (c->arch == CFG_GEMMA4) {
            VEC(attn_out_norm, "post_attention_layernorm", H);
            VEC(post_norm, "pre_feedforward_layernorm", H);
            VEC(ffn_out_norm, "post_feedforward_layernorm", H);
            snprintf(b, sizeof b, "%slayers.%d.layer_scalar", pre, l);
            float *sc = bind_f32(m, b, 1, 0, 0);
            if (!sc) goto fail;
            L->layer_scalar = sc[0];
            free(sc);
            if (c->ple) {
                LIN(ple_gate, "per_layer_input_gate", c->ple, H);
                LIN(ple_proj, "per_layer_projection", H, c->ple);
                VEC(ple_norm, "post_per_layer_input_norm", H);
            }
        } else {
            VEC(post_norm, "post_attention_layernorm", H);
        }
        if (c->qk_norm && !c->linear_layer[l]) {
            VEC(q_norm, "self_attn.q_norm", hd);
            VEC(k_norm, "self_attn.k_norm", hd);
        }
#undef LIN
#undef VEC
#undef VECN
    }
    return 0;
fail:
    dfl_preferr("%s", dir);
    mdl_free(m);
    return -1;
}

void mdl_free(mdl_model *m) {
    if (m->layers)
        for (int l = 0; l < m->cfg.n_layers; l++) {
            mdl_layer *L = &m->layers[l];
            free(L->in_norm);
            free(L->post_norm);
            free(L->q_norm);
            free(L->k_norm);
            free(L->experts);
            free(L->conv_w);
            free(L->dt_bias);
            free(L->neg_a);
            free(L->lin_norm);
            free(L->sh_gate);
            free(L->bq);
            free(L->bk);
            free(L->bv);
            free(L->bo);
            free(L->sinks);
            free(L->router_bias);
            free(L->attn_out_norm);
            free(L->ffn_out_norm);
            free(L->ple_norm);
            free(L->router_scale);
            free(L->router_pes);
            free(L->moe_in_norm);
            free(L->ffn_out_norm1);
            free(L->ffn_out_norm2);
        }
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->final_norm);
    free(m->hidden_norm);
    free(m->ple_proj_norm);
    st_close(&m->st);
    if (m->gguf) {
        gguf_close(m->gguf);
        free(m->gguf);
    }
    memset(m, 0, sizeof *m);
}
