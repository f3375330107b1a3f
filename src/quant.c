/* quant.c - see quant.h. */
#include "quant.h"

#include <math.h>
#include <string.h>

#include "util.h"

static float store(wt_dtype t, void *arr, int i, float v) {
    if (t == WT_F32) {
        ((float *)arr)[i] = v;
        return v;
    }
    uint16_t h = t == WT_BF16 ? dfl_f32_to_bf16(v) : dfl_f32_to_f16(v);
    ((uint16_t *)arr)[i] = h;
    return t == WT_BF16 ? dfl_bf16_to_f32(h) : dfl_f16_to_f32(h);
}

void qt_row(const float *w, int cols, int bits, int g, wt_dtype st, uint32_t *packed, void *scales, void *biases) {
    int qmax = (1 << bits) - 1;
    memset(packed, 0, sizeof(uint32_t) * (size_t)cols * bits / 32);
    for (int g0 = 0; g0 < cols; g0 += g) {
        float lo = w[g0], hi = w[g0];
        for (int j = g0; j < g0 + g; j++) {
            lo = w[j] < lo ? w[j] : lo;
            hi = w[j] > hi ? w[j] : hi;
        }
        float s = store(st, scales, g0 / g, (hi - lo) / (float)qmax);
        float b = store(st, biases, g0 / g, lo);
        for (int j = g0; j < g0 + g; j++) {
            int q = s > 0 ? (int)lrintf((w[j] - b) / s) : 0;
            q = q < 0 ? 0 : q > qmax ? qmax : q;
            packed[(size_t)j * bits / 32] |= (uint32_t)q << ((j * bits) % 32);
        }
    }
}

/* ---- whole models ---------------------------------------------------------- */
#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_model.h"
#include "gguf_write.h"
#include "safetensors.h"
#include "weight.h"

int qt_parse(const char *s, qt_kind *k) {
    if (!s || !*s) *k = QT_KEEP;
    else if (!strcmp(s, "bf16")) *k = QT_BF16;
    else if (!strcmp(s, "q8")) *k = QT_Q8;
    else if (!strcmp(s, "q4")) *k = QT_Q4;
    else if (!strcmp(s, "q8_0")) *k = QT_Q8_0;
    else {
        dfl_seterr("unknown quantization '%s' (bf16, q8, q4 or q8_0)", s);
        return -1;
    }
    return 0;
}


/* Re-encode w (any dtype) as kind k; returns the new weight. */
static wt_weight convert(mdl_model *m, const wt_weight *w, qt_kind k, int group) {
    wt_weight o = *w;
    if (k == QT_Q8_0) { /* Q8_0 blocks, then the same conversion as a GGUF load */
        if (w->cols % 32) return o;
        size_t rb = (size_t)w->cols / 32 * 34;
        uint8_t *blk = dfl_malloc(rb * (size_t)w->rows);
        float *x = dfl_malloc(sizeof(float) * (size_t)w->cols);
        for (int r = 0; r < w->rows; r++) {
            wt_get_row(x, w, r);
            ggm_quantize_q8_0(x, w->cols, blk + rb * (size_t)r);
        }
        ggm_q8_0_weight(m, blk, w->rows, w->cols, NULL, &o);
        free(blk);
        free(x);
        return o;
    }
    int bits = k == QT_Q8 ? 8 : 4;
    if (k == QT_KEEP || (k == QT_BF16 && w->dtype == WT_BF16) || (k != QT_BF16 && w->cols % group)) return o;
    /* MXFP4 (weight.h) already holds at most 8 bits of exact values: q8 keeps it */
    if ((k == QT_Q8 && (w->dtype == WT_Q8 || w->dtype == WT_MXFP4)) || (k == QT_Q4 && w->dtype == WT_Q4)) return o;
    float *row = dfl_malloc(sizeof(float) * (size_t)w->cols);
    if (k == QT_BF16) {
        uint16_t *d = mdl_own(m, sizeof(uint16_t) * (size_t)w->rows * w->cols);
        for (int r = 0; r < w->rows; r++) {
            wt_get_row(row, w, r);
            for (int j = 0; j < w->cols; j++) d[(size_t)r * w->cols + j] = dfl_f32_to_bf16(row[j]);
        }
        o.dtype = WT_BF16;
        o.data = d;
        o.scales = o.biases = NULL;
        o.bits = o.group_size = 0;
    } else {
        size_t words = (size_t)w->cols * bits / 32, ng = (size_t)(w->cols / group);
        uint32_t *d = mdl_own(m, sizeof(uint32_t) * words * w->rows);
        uint16_t *sc = mdl_own(m, sizeof(uint16_t) * ng * w->rows), *bi = mdl_own(m, sizeof(uint16_t) * ng * w->rows);
        for (int r = 0; r < w->rows; r++) {
            wt_get_row(row, w, r);
            qt_row(row, w->cols, bits, group, WT_BF16, d + words * r, sc + ng * r, bi + ng * r);
        }
        o.dtype = bits == 8 ? WT_Q8 : WT_Q4;
        o.data = d;
        o.scales = sc;
        o.biases = bi;
        o.scale_dtype = WT_BF16;
        o.bits = bits;
        o.group_size = group;
    }
    free(row);
    return o;
}

int qt_model(mdl_model *m, qt_kind k, int group) {
    if (k == QT_KEEP) return 0;
    /* group 16: Q8 only, the layout GGUF Q6_K loads into (tests use it) */
    if (k != QT_BF16 && k != QT_Q8_0 && group != 32 && group != 64 && group != 128 && !(k == QT_Q8 && group == 16)) {
        dfl_seterr("group size %d not supported (32, 64 or 128)", group);
        return -1;
    }
    size_t bytes = 0;
    int tied = m->lm_head.data == m->embed.data;
    if (m->embed.rows) {
        m->embed = convert(m, &m->embed, k, group);
        bytes += wt_bytes(&m->embed);
        if (tied) m->lm_head = m->embed;
        else {
            m->lm_head = convert(m, &m->lm_head, k, group);
            bytes += wt_bytes(&m->lm_head);
        }
    }
    if (m->fc.rows) {
        m->fc = convert(m, &m->fc, k, group);
        bytes += wt_bytes(&m->fc);
    }
    for (int l = 0; l < m->cfg.n_layers; l++) {
        mdl_layer *L = &m->layers[l];
        wt_weight *ws[] = {&L->wq,      &L->wk,    &L->wv,    &L->wo,    &L->wg,      &L->wu,
                           &L->wd,      &L->router, &L->lin_qkv, &L->lin_z, &L->lin_b, &L->lin_a,
                           &L->lin_out, &L->sh_wg, &L->sh_wu, &L->sh_wd};
        for (int i = 0; i < (int)(sizeof ws / sizeof ws[0]); i++)
            if (ws[i]->rows) {
                *ws[i] = convert(m, ws[i], k, group);
                bytes += wt_bytes(ws[i]);
            }
        for (int e = 0; L->experts && e < m->cfg.n_experts; e++) {
            wt_weight *xs[] = {&L->experts[e].wg, &L->experts[e].wu, &L->experts[e].wd};
            for (int i = 0; i < 3; i++) {
                *xs[i] = convert(m, xs[i], k, group);
                bytes += wt_bytes(xs[i]);
            }
        }
    }
    /* norms are small; keep their count from the load */
    size_t norms = (size_t)m->cfg.hidden * (2 * m->cfg.n_layers + 1 + (m->hidden_norm != NULL)) * sizeof(float);
    m->weight_bytes = bytes + norms / 2;
    return 0;
}

static int write_all(const char *path, const void *b, size_t n) {
    char *tmp;
    FILE *f = dfl_create_tmp(path, &tmp);
    return f ? dfl_commit_tmp(f, tmp, path, fwrite(b, 1, n, f) == n) : -1;
}

static int quantizable(const st_tensor *t, int group) {
    size_t n = strlen(t->name);
    if (t->ndim != 2 || t->shape[1] % group || n < 7 || strcmp(t->name + n - 7, ".weight")) return 0;
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16) return 0;
    /* "_proj.": q/k/v/o, MLPs, experts, Qwen3.5's linear_attn in/out_proj
     * (in_proj_qkv, _z, _a, _b too); routers and the shared-expert gate stay */
    return strstr(t->name, "_proj.") || strstr(t->name, "in_proj_") || strstr(t->name, "embed_tokens.") ||
           !strcmp(t->name, "lm_head.weight") ||
           !strcmp(t->name, "fc.weight");
}

/* Every check on the input comes before the first byte is written: the
 * model loads (config and every tensor), config.json and the small files
 * are read into memory, the weights are quantized in memory; only then is
 * OUT staged (util.h dfl_stage) and committed, so a failure leaves OUT as it
 * was (and a new OUT does not appear). */
int qt_checkpoint(const char *in, const char *out, int bits, int group) {
    if (bits != 4 && bits != 8) {
        dfl_seterr("--bits must be 4 or 8, not %d", bits);
        return -1;
    }
    if (group != 32 && group != 64 && group != 128) {
        dfl_seterr("--group-size must be 32, 64 or 128, not %d", group);
        return -1;
    }
    struct stat sin;
    if (stat(in, &sin) != 0) {
        dfl_seterr("%s: %s", in, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(sin.st_mode)) {
        if (gguf_is_gguf(in))
            dfl_seterr("%s is a GGUF file: quantize reads a Hugging Face / MLX model directory (a GGUF model is "
                       "quantized at load with --quant q8|q4)", in);
        else
            dfl_seterr("%s is not a directory: quantize reads a Hugging Face / MLX model directory (config.json, "
                       "*.safetensors)", in);
        return -1;
    }
    if (dfl_same_file(in, out)) { /* writing into IN would replace the weights being read */
        dfl_seterr("output directory %s is the input directory %s: choose another -o", out, in);
        return -1;
    }
    mdl_model m;
    if (mdl_load(&m, in) != 0) return -1;
    if (m.cfg.arch == CFG_GPT_OSS) { /* its experts are 3-D input-major tensors MLX does not lay out so */
        dfl_seterr("%s: quantize does not write gpt-oss checkpoints yet; load the BF16 checkpoint with --quant q8 "
                   "or --quant q4 (every matrix, the experts too, converted at load)", in);
        mdl_free(&m);
        return -1;
    }
    if (m.cfg.arch == CFG_GEMMA4) { /* its per-layer-input tensors and layer_scalar are not written yet */
        dfl_seterr("%s: quantize does not write Gemma-4 checkpoints yet; load the BF16 checkpoint with --quant q8 "
                   "or --quant q4", in);
        mdl_free(&m);
        return -1;
    }
    if (m.cfg.q_bits) {
        dfl_seterr("%s is already quantized (%d-bit)", in, m.cfg.q_bits);
        mdl_free(&m);
        return -1;
    }
    /* config.json + quantization; the other small files copied: all read now */
    char *cin = dfl_path_join(in, "config.json"), *txt = dfl_read_file(cin, NULL);
    cJSON *j = txt ? cJSON_Parse(txt) : NULL;
    int read_ok = txt != NULL;
    free(txt);
    if (!j) {
        if (read_ok) dfl_seterr("%s: not valid JSON", cin);
        free(cin);
        mdl_free(&m);
        return -1;
    }
    free(cin);
    cJSON_DeleteItemFromObject(j, "quantization");
    cJSON_DeleteItemFromObject(j, "quantization_config");
    cJSON *q = cJSON_AddObjectToObject(j, "quantization");
    cJSON_AddNumberToObject(q, "group_size", group);
    cJSON_AddNumberToObject(q, "bits", bits);
    cJSON_AddItemToObject(j, "quantization_config", cJSON_Duplicate(q, 1));
    char *cfg_txt = cJSON_Print(j);
    cJSON_Delete(j);
    enum { N_EXTRA = 3 };
    static const char *extra[N_EXTRA] = {"generation_config.json", "tokenizer.json", "tokenizer_config.json"};
    char *xbuf[N_EXTRA] = {NULL};
    size_t xlen[N_EXTRA] = {0};
    int rc = 0;
    for (int i = 0; i < N_EXTRA && rc == 0; i++) {
        char *a = dfl_path_join(in, extra[i]);
        if (dfl_file_exists(a) && !(xbuf[i] = dfl_read_file(a, &xlen[i]))) rc = -1;
        free(a);
    }
    if (rc) {
        for (int i = 0; i < N_EXTRA; i++) free(xbuf[i]);
        free(cfg_txt);
        mdl_free(&m);
        return -1;
    }
    st_out *ts = dfl_calloc((size_t)m.st.n * 3, sizeof(st_out));
    void **bufs = dfl_calloc((size_t)m.st.n * 3, sizeof(void *));
    int n = 0, nb = 0;
    char (*names)[256] = dfl_calloc((size_t)m.st.n * 3, 256);
    for (int i = 0; i < m.st.n; i++) {
        const st_tensor *t = &m.st.t[i];
        if (!quantizable(t, group)) {
            ts[n] = (st_out){t->name, t->dtype, t->ndim, {t->shape[0], t->shape[1], t->shape[2], t->shape[3]}, t->data};
            n++;
            continue;
        }
        wt_weight w = {.rows = (int)t->shape[0], .cols = (int)t->shape[1], .data = t->data,
                       .dtype = t->dtype == ST_F32 ? WT_F32 : t->dtype == ST_F16 ? WT_F16 : WT_BF16};
        size_t words = (size_t)w.cols * bits / 32, ng = (size_t)(w.cols / group);
        uint32_t *pk = bufs[nb++] = dfl_malloc(sizeof(uint32_t) * words * w.rows);
        uint16_t *sc = bufs[nb++] = dfl_malloc(2 * ng * w.rows), *bi = bufs[nb++] = dfl_malloc(2 * ng * w.rows);
        float *row = dfl_malloc(sizeof(float) * (size_t)w.cols);
        for (int r = 0; r < w.rows; r++) {
            wt_get_row(row, &w, r);
            qt_row(row, w.cols, bits, group, WT_BF16, pk + words * r, sc + ng * r, bi + ng * r);
        }
        free(row);
        size_t base = strlen(t->name) - 7; /* without ".weight" */
        snprintf(names[n], 256, "%.*s.weight", (int)base, t->name);
        ts[n] = (st_out){names[n], ST_U32, 2, {w.rows, (int64_t)words}, pk};
        n++;
        snprintf(names[n], 256, "%.*s.scales", (int)base, t->name);
        ts[n] = (st_out){names[n], ST_BF16, 2, {w.rows, (int64_t)ng}, sc};
        n++;
        snprintf(names[n], 256, "%.*s.biases", (int)base, t->name);
        ts[n] = (st_out){names[n], ST_BF16, 2, {w.rows, (int64_t)ng}, bi};
        n++;
    }
    /* the input is validated and read: write everything into the stage, then commit */
    dfl_stage sg;
    rc = dfl_stage_open(&sg, out);
    if (rc == 0) {
        char *p = dfl_stage_file(&sg, "model.safetensors");
        rc = st_write(p, ts, n, "{\"format\": \"mlx\"}");
        free(p);
        dfl_stage_drop(&sg, "model.safetensors.index.json"); /* a stale index would win over the new file */
        if (rc == 0) {
            p = dfl_stage_file(&sg, "config.json");
            rc = write_all(p, cfg_txt, strlen(cfg_txt));
            free(p);
        }
        for (int i = 0; i < N_EXTRA && rc == 0; i++) {
            if (!xbuf[i]) continue;
            p = dfl_stage_file(&sg, extra[i]);
            rc = write_all(p, xbuf[i], xlen[i]);
            free(p);
        }
        if (rc == 0) rc = dfl_stage_commit(&sg);
        else dfl_stage_abort(&sg);
    }
    for (int i = 0; i < nb; i++) free(bufs[i]);
    free(bufs);
    free(ts);
    free(names);
    for (int i = 0; i < N_EXTRA; i++) free(xbuf[i]);
    free(cfg_txt);
    mdl_free(&m);
    return rc;
}
