/* model.c - see model.h. */
#include "model.h"

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

static int float_kind(st_dtype d, kn_dtype *out) {
    switch (d) {
    case ST_F32: *out = KN_F32; return 1;
    case ST_F16: *out = KN_F16; return 1;
    case ST_BF16: *out = KN_BF16; return 1;
    default: return 0;
    }
}

/* Bind BASE.weight as a [rows, cols] matrix: plain F32/F16/BF16, or the MLX
 * affine layout when BASE.scales exists. */
static int bind_linear(mdl_model *m, const char *base, int rows, int cols, kn_weight *w) {
    char name[256], sname[256], bname[256], got[64];
    snprintf(name, sizeof name, "%s.weight", base);
    snprintf(sname, sizeof sname, "%s.scales", base);
    snprintf(bname, sizeof bname, "%s.biases", base);
    const st_tensor *t = need(m, name);
    if (!t) return -1;
    memset(w, 0, sizeof *w);
    w->rows = rows;
    w->cols = cols;
    w->data = t->data;
    const st_tensor *s = st_find(&m->st, sname);
    if (!s) {
        if (!float_kind(t->dtype, &w->dtype)) {
            dfl_seterr("tensor '%s': dtype %s not supported for weights (F32, F16, BF16, or MLX-quantized U32)",
                       name, st_dtype_name(t->dtype));
            return -1;
        }
        if (!shape_is(t, 2, rows, cols)) {
            shape_str(t, got, sizeof got);
            dfl_seterr("tensor '%s': shape %s, expected [%d, %d] from config.json", name, got, rows, cols);
            return -1;
        }
        m->weight_bytes += t->nbytes;
        return kn_check_weight(w, name);
    }
    /* MLX affine quantized */
    int bits = m->cfg.q_bits, g = m->cfg.q_group;
    if (!bits) {
        dfl_seterr("tensor '%s' is quantized but config.json has no \"quantization\" entry", sname);
        return -1;
    }
    const st_tensor *b = need(m, bname);
    if (!b) return -1;
    if (t->dtype != ST_U32) {
        dfl_seterr("tensor '%s': dtype %s, expected U32 (packed %d-bit)", name, st_dtype_name(t->dtype), bits);
        return -1;
    }
    if (cols % g) {
        dfl_seterr("tensor '%s': %d columns not a multiple of group_size %d", name, cols, g);
        return -1;
    }
    if (!shape_is(t, 2, rows, (int64_t)cols * bits / 32)) {
        shape_str(t, got, sizeof got);
        dfl_seterr("tensor '%s': shape %s, expected [%d, %d] (%d x %d at %d bits)", name, got, rows,
                   cols * bits / 32, rows, cols, bits);
        return -1;
    }
    const st_tensor *sb[2] = {s, b};
    for (int i = 0; i < 2; i++) {
        kn_dtype k;
        if (!float_kind(sb[i]->dtype, &k)) {
            dfl_seterr("tensor '%s': dtype %s not supported (F32, F16 or BF16)", sb[i]->name,
                       st_dtype_name(sb[i]->dtype));
            return -1;
        }
        if (!shape_is(sb[i], 2, rows, cols / g)) {
            shape_str(sb[i], got, sizeof got);
            dfl_seterr("tensor '%s': shape %s, expected [%d, %d]", sb[i]->name, got, rows, cols / g);
            return -1;
        }
        w->scale_dtype = k;
    }
    if (s->dtype != b->dtype) {
        dfl_seterr("tensors '%s' and '%s' have different dtypes", sname, bname);
        return -1;
    }
    w->dtype = bits == 8 ? KN_Q8 : KN_Q4;
    w->bits = bits;
    w->group_size = g;
    w->scales = s->data;
    w->biases = b->data;
    m->weight_bytes += t->nbytes + s->nbytes + b->nbytes;
    return kn_check_weight(w, name);
}

/* Copy a [n] norm weight to a new f32 array. */
static float *bind_vec(mdl_model *m, const char *name, int n) {
    const st_tensor *t = need(m, name);
    if (!t) return NULL;
    kn_dtype k;
    if (!float_kind(t->dtype, &k)) {
        dfl_seterr("tensor '%s': dtype %s not supported (F32, F16 or BF16)", name, st_dtype_name(t->dtype));
        return NULL;
    }
    if (!shape_is(t, 1, n, 0)) {
        char got[64];
        shape_str(t, got, sizeof got);
        dfl_seterr("tensor '%s': shape %s, expected [%d]", name, got, n);
        return NULL;
    }
    float *v = dfl_malloc(sizeof(float) * (size_t)n);
    for (int i = 0; i < n; i++) {
        if (k == KN_F32) memcpy(&v[i], (const char *)t->data + 4 * i, 4);
        else {
            uint16_t h;
            memcpy(&h, (const char *)t->data + 2 * i, 2);
            v[i] = k == KN_BF16 ? dfl_bf16_to_f32(h) : dfl_f16_to_f32(h);
        }
    }
    m->weight_bytes += t->nbytes;
    return v;
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
    int H = c->hidden, hd = c->head_dim, q = c->n_heads * hd, kv = c->n_kv_heads * hd;
    const char *pre = c->is_draft ? "" : "model.";
    char base[192];
    m->layers = dfl_calloc((size_t)c->n_layers, sizeof(mdl_layer));
    if (!c->is_draft) {
        snprintf(base, sizeof base, "%sembed_tokens", pre);
        if (bind_linear(m, base, c->vocab, H, &m->embed)) goto fail;
        if (c->tie_embeddings) {
            m->lm_head = m->embed;
        } else {
            if (!st_find(&m->st, "lm_head.weight")) {
                dfl_seterr("missing tensor 'lm_head.weight' (config.json has tie_word_embeddings=false)");
                goto fail;
            }
            if (bind_linear(m, "lm_head", c->vocab, H, &m->lm_head)) goto fail;
        }
    } else {
        if (bind_linear(m, "fc", H, c->n_taps * H, &m->fc)) goto fail;
        if (!(m->hidden_norm = bind_vec(m, "hidden_norm.weight", H))) goto fail;
    }
    snprintf(base, sizeof base, "%snorm.weight", pre);
    if (!(m->final_norm = bind_vec(m, base, H))) goto fail;
    for (int l = 0; l < c->n_layers; l++) {
        mdl_layer *L = &m->layers[l];
        char b[224];
#define LIN(field, sub, r, cc)                                                 \
    snprintf(b, sizeof b, "%slayers.%d.%s", pre, l, sub);                      \
    if (bind_linear(m, b, r, cc, &L->field)) goto fail;
#define VEC(field, sub, n)                                                     \
    snprintf(b, sizeof b, "%slayers.%d.%s.weight", pre, l, sub);               \
    if (!(L->field = bind_vec(m, b, n))) goto fail;
        LIN(wq, "self_attn.q_proj", q, H);
        LIN(wk, "self_attn.k_proj", kv, H);
        LIN(wv, "self_attn.v_proj", kv, H);
        LIN(wo, "self_attn.o_proj", H, q);
        LIN(wg, "mlp.gate_proj", c->inter, H);
        LIN(wu, "mlp.up_proj", c->inter, H);
        LIN(wd, "mlp.down_proj", H, c->inter);
        VEC(in_norm, "input_layernorm", H);
        VEC(post_norm, "post_attention_layernorm", H);
        if (c->qk_norm) {
            VEC(q_norm, "self_attn.q_norm", hd);
            VEC(k_norm, "self_attn.k_norm", hd);
        }
#undef LIN
#undef VEC
    }
    return 0;
fail:
    dfl_preferr("%s", dir);
    mdl_free(m);
    return -1;
}

/* Every distinct matrix of the model, once (a tied lm_head is the embedding). */
static int matrices(mdl_model *m, kn_weight **out) {
    int n = 0;
    if (m->embed.rows) out[n++] = &m->embed;
    if (m->lm_head.rows && m->lm_head.data != m->embed.data) out[n++] = &m->lm_head;
    if (m->fc.rows) out[n++] = &m->fc;
    for (int l = 0; l < m->cfg.n_layers && m->layers; l++) {
        mdl_layer *L = &m->layers[l];
        kn_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wg, &L->wu, &L->wd};
        for (int i = 0; i < 7; i++) out[n++] = ws[i];
    }
    return n;
}

int mdl_pack(mdl_model *m) {
    kn_weight **ws = dfl_malloc(sizeof(kn_weight *) * (size_t)(3 + 7 * m->cfg.n_layers));
    int n = matrices(m, ws), rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        if (!ws[i]->packed) rc = kn_pack(ws[i]);
    free(ws);
    if (m->lm_head.data == m->embed.data) m->lm_head.packed = m->embed.packed;
    return rc;
}

void mdl_unpack(mdl_model *m) {
    if (!m->layers && !m->embed.rows) return;
    if (m->lm_head.data == m->embed.data) m->lm_head.packed = NULL; /* shares the embedding's copy */
    kn_weight **ws = dfl_malloc(sizeof(kn_weight *) * (size_t)(3 + 7 * m->cfg.n_layers));
    int n = matrices(m, ws);
    for (int i = 0; i < n; i++) kn_unpack(ws[i]);
    free(ws);
}

void mdl_free(mdl_model *m) {
    mdl_unpack(m);
    if (m->layers)
        for (int l = 0; l < m->cfg.n_layers; l++) {
            mdl_layer *L = &m->layers[l];
            free(L->in_norm);
            free(L->post_norm);
            free(L->q_norm);
            free(L->k_norm);
        }
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->final_norm);
    free(m->hidden_norm);
    st_close(&m->st);
    if (m->gguf) {
        gguf_close(m->gguf);
        free(m->gguf);
    }
    memset(m, 0, sizeof *m);
}
