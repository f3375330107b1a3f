/* test_gguf.c - the GGUF reader, writer and model loading.
 *
 *   - writer -> reader round trip of every value type and of tensors;
 *   - hostile files (made here by editing a good one): each fails with one
 *     line naming the file and the culprit, never a crash;
 *   - dflash convert of the tiny test models: every weight of the F16 GGUF is
 *     the f16 rounding of the checkpoint's; every weight of the Q8_0 GGUF is
 *     bit-identical to the engine's own q8_0 quantization of the checkpoint
 *     (--quant q8_0), so greedy tokens are equal too; llama's Q/K rows come
 *     back in Hugging Face order after llama.cpp's permutation;
 *   - Q4_0 / Q4_1 blocks convert exactly to the MLX 4-bit layout;
 *   - every quant type matches ggml's own dequantized values; a Q4_K_M-like
 *     file (Q6_K tensors) loads them as MLX Q8 group 16 and decodes the same
 *     greedy tokens one at a time as in one verify block;
 *   - the tokenizer from the GGUF gives the ids of tokenizer.json, and a
 *     plain prompt the special tokens of tokenizer.ggml.add_bos_token /
 *     add_eos_token (llama.cpp's defaults when absent; bad values refused
 *     naming the key); dflash convert writes those flags from
 *     tokenizer.json's post_processor, so both give the same ids;
 *   - gpt-oss and Gemma-4 as llama.cpp v0.5.0's converter writes them (its
 *     files of the tiny checkpoints, vocabularies cut to 1024): the same
 *     logits as the checkpoints bit for bit, the MXFP4 experts included;
 *     dflash convert writes the converter's keys and bytes; bad metadata
 *     refused naming the key; gpt-oss's tokenizer as "gpt-4o". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "check.h"
#include "dflash.h"
#include "gguf.h"
#include "gguf_model.h"
#include "gguf_write.h"
#include "cpu/kernels.h"
#include "cpu/threads.h"
#include "model.h"
#include "backend.h"
#include "quant.h"
#include "rope.h"
#include "safetensors.h"
#include "sample.h"
#include "synth.h"
#include <math.h>
#include "tokenizer.h"
#include "tmpdir.h"
#include "util.h"


/* ----------------------------------------------------------- round trip */

static float f32v[3] = {1.5f, -2.0f, 3.25f};
static uint16_t f16data[64 * 2];

static void write_sample(const char *p) {
    gguf_writer *w = gguf_w_new();
    gguf_w_str(w, "general.architecture", "test");
    gguf_w_u32(w, "a.u32", 4000000000u);
    gguf_w_i32(w, "a.i32", -7);
    gguf_w_f32(w, "a.f32", 0.25f);
    gguf_w_bool(w, "a.bool", 1);
    const char *strs[] = {"x", "", "h\xc3\xa9llo"};
    gguf_w_arr_str(w, "a.strs", strs, 3);
    int32_t iv[4] = {1, -2, 3, -4};
    gguf_w_arr_i32(w, "a.i32s", iv, 4);
    gguf_w_arr_f32(w, "a.f32s", f32v, 3);
    for (int i = 0; i < 128; i++) f16data[i] = dfl_f32_to_f16((float)i);
    int64_t ne[2] = {64, 2}, ne1[1] = {3};
    gguf_w_tensor(w, "t.f16", GGML_F16, 2, ne, f16data);
    gguf_w_tensor(w, "t.f32", GGML_F32, 1, ne1, f32v);
    if (gguf_w_write(w, p) != 0) fprintf(stderr, "write: %s\n", dfl_lasterr());
    gguf_w_free(w);
}

TEST(round_trip) {
    const char *p = path("sample.gguf", NULL);
    write_sample(p);
    CHECK(gguf_is_gguf(p), "magic");
    gguf_file g;
    CHECK(gguf_open(&g, p) == 0, "open: %s", dfl_lasterr());
    if (!g.path) return;
    int64_t v;
    double d;
    int b;
    const char *s;
    size_t n;
    CHECK(g.version == 3 && g.n_kv == 8 && g.n_tensors == 2, "counts %u %d %d", g.version, g.n_kv, g.n_tensors);
    CHECK(gguf_get_int(&g, "a.u32", &v, 1) == 0 && v == 4000000000LL, "u32");
    CHECK(gguf_get_int(&g, "a.i32", &v, 1) == 0 && v == -7, "i32");
    CHECK(gguf_get_float(&g, "a.f32", &d, 1) == 0 && d == 0.25, "f32");
    CHECK(gguf_get_bool(&g, "a.bool", &b, 1) == 0 && b == 1, "bool");
    CHECK(gguf_get_str(&g, "general.architecture", &s, &n, 1) == 0 && n == 4 && !memcmp(s, "test", 4), "str");
    CHECK(gguf_get_int(&g, "missing", &v, 0) == 1, "optional missing");
    CHECK(gguf_get_int(&g, "missing", &v, 1) == -1 && strstr(dfl_lasterr(), "missing key 'missing'"), "required");
    CHECK(gguf_get_int(&g, "a.f32", &v, 1) == -1 && strstr(dfl_lasterr(), "expected an integer"), "%s",
          dfl_lasterr());
    const gguf_kv *kv = gguf_find_kv(&g, "a.strs");
    CHECK(kv && kv->type == GGUF_ARRAY && kv->atype == GGUF_STRING && kv->n == 3, "strs");
    if (kv) {
        s = gguf_arr_str(kv, 2, &n);
        CHECK(n == 6 && !memcmp(s, "h\xc3\xa9llo", 6), "strs[2]");
        s = gguf_arr_str(kv, 1, &n);
        CHECK(n == 0, "strs[1]");
    }
    kv = gguf_find_kv(&g, "a.i32s");
    CHECK(kv && kv->n == 4 && gguf_arr_int(kv, 3) == -4, "i32s");
    kv = gguf_find_kv(&g, "a.f32s");
    CHECK(kv && kv->n == 3 && gguf_arr_float(kv, 2) == 3.25, "f32s");
    const gguf_tensor *t = gguf_find_tensor(&g, "t.f16");
    CHECK(t && t->type == GGML_F16 && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 2 && t->nbytes == 256,
          "t.f16 info");
    CHECK(t && !memcmp(t->data, f16data, 256), "t.f16 data");
    CHECK(t && (t->offset % 32) == 0 && ((size_t)((const uint8_t *)t->data - g.map.data) % 32) == 0, "aligned");
    t = gguf_find_tensor(&g, "t.f32");
    CHECK(t && t->nbytes == 12 && !memcmp(t->data, f32v, 12), "t.f32");
    gguf_close(&g);
}

/* Tensors made at write time (gguf_w_tensor_fill): bytes i * k + 1 of
 * tensor k; a fill that fails fails the write and leaves no file. */
static int fill_pattern(void *ctx, void *dst, size_t n) {
    int k = *(const int *)ctx;
    if (k < 0) {
        dfl_seterr("fill %d refused", k);
        return -1;
    }
    for (size_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = (uint8_t)(i * (size_t)k + 1);
    return 0;
}

TEST(filled_tensors) {
    const char *p = path("filled.gguf", NULL);
    static int k1 = 3, k2 = 7, bad = -1;
    gguf_writer *w = gguf_w_new();
    gguf_w_str(w, "general.architecture", "test");
    int64_t small[2] = {64, 2}, large[2] = {64, 40}, ne1[1] = {3};
    gguf_w_tensor_fill(w, "t.small", GGML_F16, 2, small, fill_pattern, &k1);
    gguf_w_tensor(w, "t.f32", GGML_F32, 1, ne1, f32v);
    gguf_w_tensor_fill(w, "t.large", GGML_F16, 2, large, fill_pattern, &k2); /* the scratch grows */
    gguf_w_tensor_fill(w, "t.again", GGML_F16, 2, small, fill_pattern, &k2); /* and is reused */
    CHECK(gguf_w_write(w, p) == 0, "write: %s", dfl_lasterr());
    gguf_w_free(w);
    gguf_file g;
    CHECK(gguf_open(&g, p) == 0, "open: %s", dfl_lasterr());
    if (!g.path) return;
    const char *names[] = {"t.small", "t.large", "t.again"};
    int ks[] = {3, 7, 7};
    size_t sizes[] = {256, 5120, 256};
    for (int i = 0; i < 3; i++) {
        const gguf_tensor *t = gguf_find_tensor(&g, names[i]);
        CHECK(t && t->nbytes == sizes[i], "%s size", names[i]);
        int same = t != NULL;
        for (size_t b = 0; t && b < t->nbytes; b++) same = same && ((const uint8_t *)t->data)[b] == (uint8_t)(b * (size_t)ks[i] + 1);
        CHECK(same, "%s: bytes are not the fill's", names[i]);
    }
    const gguf_tensor *t = gguf_find_tensor(&g, "t.f32");
    CHECK(t && t->nbytes == 12 && !memcmp(t->data, f32v, 12), "t.f32 between filled tensors");
    gguf_close(&g);
    const char *q = path("fill-fails.gguf", NULL);
    w = gguf_w_new();
    gguf_w_tensor_fill(w, "t.small", GGML_F16, 2, small, fill_pattern, &k1);
    gguf_w_tensor_fill(w, "t.bad", GGML_F16, 2, small, fill_pattern, &bad);
    CHECK(gguf_w_write(w, q) == -1 && strstr(dfl_lasterr(), "fill -1 refused"), "a failing fill: %s", dfl_lasterr());
    gguf_w_free(w);
    CHECK(access(q, F_OK) != 0, "a failed write left %s", q);
}

/* ------------------------------------------------------------ bad files */

/* Offsets of the fields of sample.gguf, found by walking it. */
typedef struct {
    size_t kv0_type;  /* u32 type of the first kv (general.architecture) */
    size_t strs_len0; /* u64 length of a.strs element 0 */
    size_t strs_count;
    size_t arr_type;  /* u32 element type of a.strs */
    size_t bool_val;
    size_t t0_ndims, t0_ne0, t0_type, t0_off, t1_off;
    size_t t0_name_len;
    size_t key1_len; /* u64 length of the second key */
} layout;

static uint64_t rd(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void wr(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint8_t *find(uint8_t *b, size_t n, const char *s) {
    size_t k = strlen(s);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(b + i, s, k)) return b + i;
    return NULL;
}

static layout find_layout(const uint8_t *b) {
    layout L = {0};
    size_t o = 24;
    for (int k = 0; k < 8; k++) {
        if (k == 1) L.key1_len = o;
        size_t kl = rd(b + o, 8);
        char key[64] = {0};
        memcpy(key, b + o + 8, kl < 63 ? kl : 63);
        o += 8 + kl;
        uint32_t ty = (uint32_t)rd(b + o, 4);
        if (k == 0) L.kv0_type = o;
        o += 4;
        if (ty == GGUF_STRING) o += 8 + rd(b + o, 8);
        else if (ty == GGUF_ARRAY) {
            uint32_t at = (uint32_t)rd(b + o, 4);
            uint64_t n = rd(b + o + 4, 8);
            if (!strcmp(key, "a.strs")) {
                L.arr_type = o;
                L.strs_count = o + 4;
                L.strs_len0 = o + 12;
            }
            o += 12;
            for (uint64_t i = 0; i < n; i++) o += at == GGUF_STRING ? 8 + rd(b + o, 8) : 4;
        } else {
            if (ty == GGUF_BOOL) L.bool_val = o;
            o += ty == GGUF_BOOL ? 1 : 4;
        }
    }
    for (int t = 0; t < 2; t++) {
        if (t == 0) L.t0_name_len = o;
        o += 8 + rd(b + o, 8);
        uint32_t nd = (uint32_t)rd(b + o, 4);
        if (t == 0) {
            L.t0_ndims = o;
            L.t0_ne0 = o + 4;
        }
        o += 4 + 8 * nd;
        if (t == 0) L.t0_type = o;
        o += 4;
        if (t == 0) L.t0_off = o;
        else L.t1_off = o;
        o += 8;
    }
    return L;
}

typedef struct {
    const char *what;
    size_t *at; /* field to patch (NULL: special) */
    uint64_t val;
    int width;
    const char *expect;
} bad_case;

TEST(bad_files) {
    const char *good = path("sample.gguf", NULL);
    write_sample(good);
    size_t n;
    uint8_t *orig = (uint8_t *)dfl_read_file(good, &n);
    if (!orig) return;
    layout L = find_layout(orig);
    size_t zero = 0, four = 4, eight = 8, sixteen = 16;
    const bad_case cases[] = {
        {"bad magic", &zero, 0x4655474B, 4, "not a GGUF file"},
        {"version 1", &four, 1, 4, "version 1 not supported"},
        {"big-endian version", &four, 0x03000000, 4, "not supported"},
        {"huge tensor count", &eight, (uint64_t)1 << 60, 8, "tensor count"},
        {"huge kv count", &sixteen, (uint64_t)1 << 40, 8, "key/value count"},
        {"kv count past the end", &sixteen, 60, 8, "cannot fit"},
        {"unknown value type", &L.kv0_type, 99, 4, "unknown value type 99"},
        {"key length past the end", &L.key1_len, (uint64_t)1 << 62, 8, "truncated"},
        {"empty key", &L.key1_len, 0, 8, "bad length 0"},
        {"nested array", &L.arr_type, GGUF_ARRAY, 4, "array of arrays"},
        {"array of unknown type", &L.arr_type, 77, 4, "unknown values"},
        {"string count too large", &L.strs_count, (uint64_t)1 << 61, 8, "cannot fit"},
        {"string length past the end", &L.strs_len0, (uint64_t)1 << 40, 8, "truncated"},
        {"bool 2", &L.bool_val, 2, 1, "bool value 2"},
        {"0 dims", &L.t0_ndims, 0, 4, "0 dimensions"},
        {"5 dims", &L.t0_ndims, 5, 4, "5 dimensions"},
        {"zero dimension", &L.t0_ne0, 0, 8, "is zero or too large"},
        {"huge dimension", &L.t0_ne0, (uint64_t)1 << 63, 8, "is zero or too large"},
        {"row not a block multiple", &L.t0_type, GGML_Q4_K, 4, "not a multiple of Q4_K's block"},
        {"unknown tensor type", &L.t0_type, 99, 4, "unknown or unsupported ggml type 99"},
        {"misaligned offset", &L.t0_off, 8, 8, "not a multiple of the alignment"},
        {"offset past the end", &L.t1_off, (uint64_t)1 << 40, 8, "beyond the data section"},
        {"offset wraps", &L.t1_off, UINT64_MAX - 31, 8, "beyond the data section"},
        {"overlapping tensors", &L.t1_off, 0, 8, "overlap"},
        {"tensor name past the end", &L.t0_name_len, (uint64_t)1 << 50, 8, "truncated"},
    };
    const char *bad = path("bad.gguf", NULL);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t *b = dfl_malloc(n);
        memcpy(b, orig, n);
        wr(b + *cases[i].at, cases[i].val, cases[i].width);
        write_file(bad, b, n);
        free(b);
        gguf_file g;
        int rc = gguf_open(&g, bad);
        const char *e = dfl_lasterr();
        CHECK(rc == -1, "%s: accepted", cases[i].what);
        if (rc == 0) {
            gguf_close(&g);
            continue;
        }
        CHECK(strstr(e, bad) == e && strstr(e, cases[i].expect) && !strchr(e, '\n'), "%s: message '%s'",
              cases[i].what, e);
    }
    /* every truncation of the header and infos fails cleanly */
    for (size_t cut = 0; cut < 420 && cut < n; cut += 7) {
        write_file(bad, orig, cut);
        gguf_file g;
        int rc = gguf_open(&g, bad);
        CHECK(rc == -1 && strstr(dfl_lasterr(), bad), "cut at %zu: rc %d '%s'", cut, rc, dfl_lasterr());
        if (rc == 0) gguf_close(&g);
    }
    /* a duplicate key and a duplicate tensor name: rename a.i32 to a.u32, t.f32 to t.f16 */
    {
        uint8_t *b = dfl_malloc(n);
        memcpy(b, orig, n);
        uint8_t *k = find(b, n, "a.i32");
        if (k) memcpy(k, "a.u32", 5);
        write_file(bad, b, n);
        gguf_file g;
        CHECK(gguf_open(&g, bad) == -1 && strstr(dfl_lasterr(), "key 'a.u32' appears twice"), "dup key: %s",
              dfl_lasterr());
        memcpy(b, orig, n);
        k = find(b, n, "a.bool");
        if (k) k[1] = '\n';
        write_file(bad, b, n);
        CHECK(gguf_open(&g, bad) == -1 && strstr(dfl_lasterr(), "control character") && !strchr(dfl_lasterr(), '\n'),
              "newline in a key: %s", dfl_lasterr());
        memcpy(b, orig, n);
        k = find(b, n, "t.f32");
        if (k) memcpy(k, "t.f16", 5);
        write_file(bad, b, n);
        CHECK(gguf_open(&g, bad) == -1 && strstr(dfl_lasterr(), "tensor 't.f16' appears twice"), "dup tensor: %s",
              dfl_lasterr());
        free(b);
    }
    free(orig);
    /* bad general.alignment */
    {
        gguf_writer *w = gguf_w_new();
        gguf_w_u32(w, "general.alignment", 24);
        gguf_w_write(w, bad);
        gguf_w_free(w);
        gguf_file g;
        CHECK(gguf_open(&g, bad) == -1 && strstr(dfl_lasterr(), "not a power of two"), "%s", dfl_lasterr());
        w = gguf_w_new();
        gguf_w_str(w, "general.alignment", "32");
        gguf_w_write(w, bad);
        gguf_w_free(w);
        CHECK(gguf_open(&g, bad) == -1 && strstr(dfl_lasterr(), "expected uint32"), "%s", dfl_lasterr());
    }
    /* not a file */
    gguf_file g;
    CHECK(gguf_open(&g, tmpdir) == -1 && strstr(dfl_lasterr(), tmpdir), "dir: %s", dfl_lasterr());
}

/* ----------------------------------------------------- model conversion */

static char qwen_f16[512], qwen_q8[512];

static int convert(const char *in, const char *out, const char *type) {
    int rc = ggm_convert(in, out, type, NULL);
    if (rc) fprintf(stderr, "  convert %s: %s\n", in, dfl_lasterr());
    return rc;
}

/* Every matrix of a and b, row by row through wt_get_row, equal (b's row
 * values passed through round() first when round is set). */
static int same_weights(const mdl_model *a, const mdl_model *b, float (*round)(float), const char *what) {
    const wt_weight *wa[8], *wb[8];
    int bad = 0;
    float *x = NULL, *y = NULL;
    for (int l = -1; l < a->cfg.n_layers && !bad; l++) {
        int k = 0;
        if (l < 0) {
            wa[k] = &a->embed, wb[k++] = &b->embed;
            wa[k] = &a->lm_head, wb[k++] = &b->lm_head;
        } else {
            const mdl_layer *A = &a->layers[l], *B = &b->layers[l];
            const wt_weight *xa[] = {&A->wq, &A->wk, &A->wv, &A->wo, &A->wg, &A->wu, &A->wd};
            const wt_weight *xb[] = {&B->wq, &B->wk, &B->wv, &B->wo, &B->wg, &B->wu, &B->wd};
            for (int i = 0; i < 7; i++) wa[k] = xa[i], wb[k++] = xb[i];
            for (int i = 0; i < a->cfg.hidden; i++)
                if (A->in_norm[i] != B->in_norm[i] || A->post_norm[i] != B->post_norm[i]) bad = 1;
        }
        for (int i = 0; i < k && !bad; i++) {
            if (wa[i]->rows != wb[i]->rows || wa[i]->cols != wb[i]->cols) {
                bad = 1;
                break;
            }
            x = dfl_realloc(x, sizeof(float) * (size_t)wa[i]->cols);
            y = dfl_realloc(y, sizeof(float) * (size_t)wa[i]->cols);
            for (int r = 0; r < wa[i]->rows && !bad; r++) {
                wt_get_row(x, wa[i], r);
                wt_get_row(y, wb[i], r);
                for (int j = 0; j < wa[i]->cols; j++) {
                    float want = round ? round(y[j]) : y[j];
                    if (memcmp(&x[j], &want, 4)) {
                        fprintf(stderr, "  %s: layer %d matrix %d row %d col %d: %g vs %g\n", what, l, i, r, j, x[j],
                                want);
                        bad = 1;
                        break;
                    }
                }
            }
        }
    }
    free(x);
    free(y);
    return !bad;
}

static float to_f16(float v) { return dfl_f16_to_f32(dfl_f32_to_f16(v)); }

TEST(convert_qwen3) {
    snprintf(qwen_f16, sizeof qwen_f16, "%s/qwen-f16.gguf", tmpdir);
    snprintf(qwen_q8, sizeof qwen_q8, "%s/qwen-q8_0.gguf", tmpdir);
    CHECK(convert("tests/models/tiny-qwen3", qwen_f16, "f16") == 0, "f16");
    CHECK(convert("tests/models/tiny-qwen3", qwen_q8, "q8_0") == 0, "q8_0");
    mdl_model hf, f16, q8;
    if (mdl_load(&hf, "tests/models/tiny-qwen3") != 0) return;
    CHECK(mdl_load(&f16, qwen_f16) == 0, "load f16: %s", dfl_lasterr());
    CHECK(mdl_load(&q8, qwen_q8) == 0, "load q8: %s", dfl_lasterr());
    const cfg_model *a = &hf.cfg, *b = &f16.cfg;
    CHECK(a->hidden == b->hidden && a->inter == b->inter && a->n_layers == b->n_layers && a->n_heads == b->n_heads &&
              a->n_kv_heads == b->n_kv_heads && a->head_dim == b->head_dim && a->vocab == b->vocab &&
              a->eps == b->eps && a->rope_theta == b->rope_theta && a->max_pos == b->max_pos &&
              a->tie_embeddings == b->tie_embeddings && b->qk_norm && b->arch == CFG_QWEN3,
          "config differs");
    CHECK(b->n_eos >= 1 && b->eos_ids[0] == 151645, "eos %d", b->eos_ids[0]);
    CHECK(f16.layers[0].wq.dtype == WT_F16 && q8.layers[0].wq.dtype == WT_Q8 && q8.layers[0].wq.group_size == 32,
          "dtypes");
    CHECK(same_weights(&f16, &hf, to_f16, "f16"), "f16 weights are not the f16 rounding of the checkpoint's");
    CHECK(qt_model(&hf, QT_Q8_0, 0) == 0, "qt_model");
    CHECK(same_weights(&q8, &hf, NULL, "q8_0"), "q8_0 weights differ from --quant q8_0");
    mdl_free(&hf);
    mdl_free(&f16);
    mdl_free(&q8);
}

static int32_t *greedy(const char *model, const char *quant, const char *text, size_t *n) {
    dflash_params p = dflash_default_params();
    p.n_threads = 2;
    p.quant = quant;
    dflash_model *m = dflash_load(model, NULL, &p);
    if (!m) {
        fprintf(stderr, "  load %s: %s\n", model, dflash_error());
        return NULL;
    }
    int32_t *ids = NULL, *out = NULL;
    size_t ni = 0;
    *n = 0;
    dflash_gen g = dflash_default_gen();
    g.n_predict = 24;
    g.ignore_eos = 1;
    if (dflash_tokenize(m, text, strlen(text), &ids, &ni) == 0)
        dflash_generate(m, ids, ni, &g, NULL, NULL, &out, n, NULL);
    free(ids);
    dflash_free(m);
    return out;
}

TEST(q8_0_tokens_equal_engine_q8_0) {
    const char *prompts[] = {"The quick brown", "Hello, world", "def f(x): return x"}; /* ids < 16384 */
    for (int i = 0; i < 3; i++) {
        size_t na, nb;
        int32_t *a = greedy("tests/models/tiny-qwen3", "q8_0", prompts[i], &na);
        int32_t *b = greedy(qwen_q8, NULL, prompts[i], &nb);
        CHECK(a && b && na == 24 && na == nb && !memcmp(a, b, na * 4), "prompt %d", i);
        free(a);
        free(b);
    }
}

/* tiny-llama3 without its rope scaling: the permuted Q/K rows must come
 * back in HF order */
TEST(convert_llama) {
    char dir[512], p[600];
    snprintf(dir, sizeof dir, "%s/llama", tmpdir);
    mkdir(dir, 0777);
    char *txt = dfl_read_file("tests/models/tiny-llama3/config.json", NULL);
    cJSON *j = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    if (!j) return;
    cJSON_DeleteItemFromObject(j, "rope_scaling");
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_file(p, s, strlen(s));
    free(s);
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) return;
    const char *links[] = {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                           "model-00003-of-00003.safetensors", "model.safetensors.index.json", "tokenizer.json",
                           "tokenizer_config.json"};
    for (int i = 0; i < 6; i++) {
        char src[4200];
        snprintf(src, sizeof src, "%s/tests/models/tiny-llama3/%s", cwd, links[i]);
        snprintf(p, sizeof p, "%s/%s", dir, links[i]);
        if (symlink(src, p) != 0) fprintf(stderr, "symlink %s\n", p);
    }
    const char *out = path("llama-f16.gguf", NULL);
    CHECK(convert(dir, out, "f16") == 0, "convert");
    mdl_model hf, gg;
    if (mdl_load(&hf, dir) != 0) {
        fprintf(stderr, "  %s\n", dfl_lasterr());
        return;
    }
    CHECK(mdl_load(&gg, out) == 0, "load: %s", dfl_lasterr());
    CHECK(gg.cfg.arch == CFG_LLAMA && !gg.cfg.qk_norm && !gg.cfg.tie_embeddings, "config");
    CHECK(same_weights(&gg, &hf, to_f16, "llama f16"), "weights");
    /* the file itself holds permuted rows: GGUF row 1 of attn_q is HF row hd/2 */
    gguf_file g;
    if (gguf_open(&g, out) == 0) {
        const gguf_tensor *t = gguf_find_tensor(&g, "blk.0.attn_q.weight");
        float x[64];
        wt_get_row(x, &hf.layers[0].wq, hf.cfg.head_dim / 2);
        const uint16_t *row1 = (const uint16_t *)t->data + t->ne[0];
        CHECK(t && dfl_f16_to_f32(row1[0]) == to_f16(x[0]) && dfl_f16_to_f32(row1[5]) == to_f16(x[5]),
              "row 1 is not HF row hd/2");
        gguf_close(&g);
    }
    mdl_free(&hf);
    mdl_free(&gg);
}

/* tiny-llama3 with its llama3 RoPE scaling: rope_freqs.weight carries it;
 * the cos/sin tables agree with the config.json formula to float rounding,
 * and greedy tokens are the same */
TEST(llama3_rope_freqs) {
    const char *out = path("llama3-f16.gguf", NULL);
    CHECK(convert("tests/models/tiny-llama3", out, "f16") == 0, "convert");
    mdl_model hf, gg;
    if (mdl_load(&hf, "tests/models/tiny-llama3") != 0) return;
    CHECK(mdl_load(&gg, out) == 0, "load: %s", dfl_lasterr());
    if (!gg.layers) {
        mdl_free(&hf);
        return;
    }
    CHECK(gg.cfg.n_rope_div == hf.cfg.head_dim / 2 && !gg.cfg.rope_llama3 && hf.cfg.rope_llama3, "rope config");
    int n = 512, half = hf.cfg.head_dim / 2;
    float *c1 = dfl_malloc(sizeof(float) * (size_t)(n * half)), *s1 = dfl_malloc(sizeof(float) * (size_t)(n * half));
    float *c2 = dfl_malloc(sizeof(float) * (size_t)(n * half)), *s2 = dfl_malloc(sizeof(float) * (size_t)(n * half));
    rope_fill(&hf.cfg, n, c1, s1);
    rope_fill(&gg.cfg, n, c2, s2);
    double worst = 0;
    for (int i = 0; i < n * half; i++) {
        double d = fabs((double)c1[i] - c2[i]) + fabs((double)s1[i] - s2[i]);
        if (d > worst) worst = d;
    }
    fprintf(stderr, "  largest cos/sin difference over %d positions: %.3g\n", n, worst);
    CHECK(worst < 1e-4, "rope tables differ by %g", worst);
    free(c1), free(s1), free(c2), free(s2);
    mdl_free(&hf);
    mdl_free(&gg);
    /* and the engine uses them (the CPU backend once built its own tables
     * without them): the same greedy tokens as the directory */
    const char *prompts[] = {"The quick brown", "Hello, world", "def f(x): return x"};
    for (int i = 0; i < 3; i++) {
        size_t na, nb;
        int32_t *a = greedy("tests/models/tiny-llama3", NULL, prompts[i], &na);
        int32_t *b = greedy(out, NULL, prompts[i], &nb);
        CHECK(a && b && na == 24 && na == nb && !memcmp(a, b, na * 4), "prompt %d", i);
        free(a);
        free(b);
    }
}

/* the demo draft as architecture dflash: its config and weights come back */
TEST(convert_draft) {
    const char *out = path("draft.gguf", NULL);
    CHECK(ggm_convert("models/demo/draft", out, "f16", NULL) == -1 && strstr(dfl_lasterr(), "--target"), "%s",
          dfl_lasterr());
    CHECK(ggm_convert("models/demo/draft", out, "f16", "models/demo/target") == 0, "convert: %s", dfl_lasterr());
    mdl_model hf, gg;
    if (mdl_load(&hf, "models/demo/draft") != 0) return;
    CHECK(mdl_load(&gg, out) == 0, "load: %s", dfl_lasterr());
    if (gg.layers) {
        const cfg_model *a = &hf.cfg, *b = &gg.cfg;
        CHECK(b->is_draft && b->block_size == a->block_size && b->mask_token_id == a->mask_token_id &&
                  b->n_taps == a->n_taps && !memcmp(b->tap_layers, a->tap_layers, sizeof(int) * (size_t)a->n_taps) &&
                  b->vocab == a->vocab && b->n_layers == a->n_layers && b->hidden == a->hidden,
              "draft config differs");
        gguf_file g;
        if (gguf_open(&g, out) == 0) {
            const gguf_kv *tl = gguf_find_kv(&g, "dflash.target_layers");
            CHECK(tl && tl->n == 3 && gguf_arr_int(tl, 0) == a->tap_layers[0] + 1, "target_layers stored +1");
            gguf_close(&g);
        }
        int bad = 0;
        float x[1024], y[1024];
        for (int r = 0; r < hf.fc.rows && !bad; r++) {
            wt_get_row(x, &gg.fc, r);
            wt_get_row(y, &hf.fc, r);
            for (int j = 0; j < hf.fc.cols; j++) bad |= x[j] != to_f16(y[j]);
        }
        for (int i = 0; i < a->hidden; i++) bad |= gg.hidden_norm[i] != hf.hidden_norm[i];
        CHECK(!bad, "fc / hidden_norm differ");
    }
    mdl_free(&hf);
    mdl_free(&gg);
}

/* 1 if matrices a and b hold the same values (any dtype each) */
/* a's rows equal b's rows passed through round (NULL: as they are) */
static int same_rounded(const wt_weight *a, const wt_weight *b, float (*round)(float)) {
    if (a->rows != b->rows || a->cols != b->cols) return 0;
    float *x = malloc(sizeof(float) * (size_t)a->cols), *y = malloc(sizeof(float) * (size_t)a->cols);
    int same = x && y;
    for (int r = 0; r < a->rows && same; r++) {
        wt_get_row(x, a, r);
        wt_get_row(y, b, r);
        for (int j = 0; round && j < a->cols; j++) y[j] = round(y[j]);
        same = !memcmp(x, y, sizeof(float) * (size_t)a->cols);
    }
    free(x);
    free(y);
    return same;
}

static int same_matrix(const wt_weight *a, const wt_weight *b) { return same_rounded(a, b, NULL); }

/* 1 if MXFP4 matrices a and b hold the same codes and scale bytes (-0 and +0 apart) */
static int same_mx4(const wt_weight *a, const wt_weight *b) {
    size_t n = (size_t)a->rows * a->cols;
    return a->dtype == WT_MXFP4 && b->dtype == WT_MXFP4 && a->rows == b->rows && a->cols == b->cols &&
           !memcmp(a->data, b->data, n / 2) && !memcmp(a->scales, b->scales, n / 32);
}

static int same_vec(const float *a, const float *b, int n) {
    return (!a && !b) || (a && b && !memcmp(a, b, sizeof(float) * (size_t)n));
}

/* tests/fixtures/gguf/tiny-draft-llama.gguf was written by llama.cpp's own
 * convert_hf_to_gguf.py (v0.5.0, DFlashModel, --outtype bf16
 * --target-model-dir tests/models/tiny-qwen3) from tests/models/tiny-draft
 * (tools/llama/gguf_race.sh files; the tiny vocabulary made it write no
 * tokenizer). It must load as the same draft: config, every weight. */
TEST(llama_converter_draft) {
    mdl_model hf, gg;
    if (mdl_load(&hf, "tests/models/tiny-draft") != 0) return;
    CHECK(mdl_load(&gg, "tests/fixtures/gguf/tiny-draft-llama.gguf") == 0, "load: %s", dfl_lasterr());
    if (gg.layers) {
        const cfg_model *a = &hf.cfg, *b = &gg.cfg;
        CHECK(b->is_draft && b->block_size == a->block_size && b->mask_token_id == a->mask_token_id &&
                  b->n_taps == a->n_taps && !memcmp(b->tap_layers, a->tap_layers, sizeof(int) * (size_t)a->n_taps) &&
                  b->n_layers == a->n_layers && b->hidden == a->hidden && b->n_heads == a->n_heads &&
                  b->n_kv_heads == a->n_kv_heads && b->head_dim == a->head_dim && b->inter == a->inter &&
                  b->rope_theta == a->rope_theta && b->eps == a->eps,
              "draft config differs");
        int bad = !same_matrix(&gg.fc, &hf.fc) || !same_vec(gg.hidden_norm, hf.hidden_norm, a->hidden) ||
                  !same_vec(gg.final_norm, hf.final_norm, a->hidden);
        for (int l = 0; l < a->n_layers && !bad; l++) {
            const mdl_layer *x = &gg.layers[l], *y = &hf.layers[l];
            bad |= !same_matrix(&x->wq, &y->wq) || !same_matrix(&x->wk, &y->wk) || !same_matrix(&x->wv, &y->wv) ||
                   !same_matrix(&x->wo, &y->wo) || !same_matrix(&x->wg, &y->wg) || !same_matrix(&x->wu, &y->wu) ||
                   !same_matrix(&x->wd, &y->wd) || !same_vec(x->in_norm, y->in_norm, a->hidden) ||
                   !same_vec(x->post_norm, y->post_norm, a->hidden) ||
                   !same_vec(x->q_norm, y->q_norm, a->head_dim) || !same_vec(x->k_norm, y->k_norm, a->head_dim);
        }
        CHECK(!bad, "a weight of the llama.cpp-converted draft differs from the checkpoint's");
    }
    mdl_free(&hf);
    mdl_free(&gg);
}

/* Q4_0 and Q4_1 blocks -> MLX Q4, exact; an unsupported type is named */
TEST(q4_blocks) {
    enum { R = 2, C = 64 };
    uint8_t q40[R * C / 32 * 18], q41[R * C / 32 * 20];
    float want0[R][C], want1[R][C];
    uint32_t seed = 12345;
    for (int r = 0; r < R; r++)
        for (int b = 0; b < C / 32; b++) {
            uint8_t *p0 = q40 + (r * (C / 32) + b) * 18, *p1 = q41 + (r * (C / 32) + b) * 20;
            uint16_t d = dfl_f32_to_f16(0.01f * (float)(r + b + 1)), mn = dfl_f32_to_f16(-0.3f * (float)(b + 1));
            wr(p0, d, 2);
            wr(p1, d, 2);
            wr(p1 + 2, mn, 2);
            for (int i = 0; i < 16; i++) {
                seed = seed * 1103515245u + 12345u;
                uint8_t v = (uint8_t)(seed >> 16);
                p0[2 + i] = v;
                p1[4 + i] = v;
                for (int h = 0; h < 2; h++) {
                    int q = h ? v >> 4 : v & 15, j = b * 32 + i + 16 * h;
                    want0[r][j] = dfl_f16_to_f32(d) * (float)(q - 8);
                    want1[r][j] = dfl_f16_to_f32(d) * (float)q + dfl_f16_to_f32(mn);
                }
            }
        }
    for (int k = 0; k < 2; k++) {
        mdl_model m;
        memset(&m, 0, sizeof m);
        wt_weight w = {.rows = R, .cols = C};
        ggm_q4_weight(&m, k ? q41 : q40, R, C, NULL, k, &w);
        CHECK(w.dtype == WT_Q4 && w.group_size == 32 && wt_check(&w, "q4") == 0, "weight");
        float x[C];
        for (int r = 0; r < R; r++) {
            wt_get_row(x, &w, r);
            CHECK(!memcmp(x, k ? want1[r] : want0[r], sizeof x), "Q4_%d row %d differs", k, r);
        }
        mdl_free(&m);
    }
}

/* qwen_f16 rewritten: key DROP left out, key SET (type/value by kind) put
 * in its place (or added), tensor RETYPE given type Q8_1 with fitting bytes,
 * tensor DROPT left out. */
static const char *rewrite_src = qwen_f16;
static const char *rewrite(const char *drop, const char *set, int kind, const char *sval, double nval,
                           const char *retype, const char *dropt) {
    static char out[600];
    snprintf(out, sizeof out, "%s/bad-model.gguf", tmpdir);
    gguf_file g;
    if (gguf_open(&g, rewrite_src) != 0) return out;
    gguf_writer *w = gguf_w_new();
    int done = 0;
    for (int i = 0; i < g.n_kv; i++) {
        const gguf_kv *kv = &g.kv[i];
        if (set && !strcmp(kv->key, set)) {
            if (kind == 's') gguf_w_str(w, set, sval);
            else if (kind == 'f') gguf_w_f32(w, set, (float)nval);
            else gguf_w_u32(w, set, (uint32_t)nval);
            done = 1;
        } else if (!drop || strcmp(kv->key, drop)) {
            gguf_w_copy_kv(w, kv);
        }
    }
    if (set && !done) {
        if (kind == 's') gguf_w_str(w, set, sval);
        else if (kind == 'f') gguf_w_f32(w, set, (float)nval);
        else gguf_w_u32(w, set, (uint32_t)nval);
    }
    static uint8_t *q5;
    for (int i = 0; i < g.n_tensors; i++) {
        const gguf_tensor *t = &g.t[i];
        if (dropt && !strcmp(t->name, dropt)) continue;
        if (retype && !strcmp(t->name, retype)) {
            size_t nb = (size_t)(t->ne[0] * t->ne[1] / 32 * 36);
            q5 = dfl_realloc(q5, nb);
            memset(q5, 0, nb);
            gguf_w_tensor(w, t->name, GGML_Q8_1, t->n_dims, t->ne, q5);
        } else {
            gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
        }
    }
    if (gguf_w_write(w, out) != 0) fprintf(stderr, "  rewrite: %s\n", dfl_lasterr());
    gguf_w_free(w);
    gguf_close(&g);
    return out;
}

TEST(bad_models) {
    static const struct {
        const char *what, *drop, *set;
        int kind;
        const char *sval;
        double nval;
        const char *retype, *dropt, *expect;
    } cases[] = {
        {"other architecture", NULL, "general.architecture", 's', "gemma3", 0, NULL, NULL,
         "unsupported architecture 'gemma3'"},
        {"no block_count", "qwen3.block_count", NULL, 0, NULL, 0, NULL, NULL, "missing key 'qwen3.block_count'"},
        {"string hidden size", NULL, "qwen3.embedding_length", 's', "32", 0, NULL, NULL,
         "key 'qwen3.embedding_length' is string, expected an integer"},
        {"zero heads", NULL, "qwen3.attention.head_count", 'u', NULL, 0, NULL, NULL, "sizes must be positive"},
        {"4e9 layers", NULL, "qwen3.block_count", 'u', NULL, 4e9, NULL, NULL, "\"num_hidden_layers\" must be an integer"},
        {"2000 layers", NULL, "qwen3.block_count", 'u', NULL, 2000, NULL, NULL, "larger than dflash supports"},
        {"odd head size", NULL, "qwen3.attention.key_length", 'u', NULL, 7, NULL, NULL, "value_length"},
        {"bad eps", NULL, "qwen3.attention.layer_norm_rms_epsilon", 'f', NULL, -1, NULL, NULL,
         "rms_norm_eps -1 out of range"},
        {"yarn", NULL, "qwen3.rope.scaling.type", 's', "yarn", 0, NULL, NULL, "'yarn' not supported"},
        {"missing tensor", NULL, NULL, 0, NULL, 0, NULL, "blk.3.attn_k.weight", "missing tensor 'blk.3.attn_k.weight'"},
        {"Q8_1 tensor", NULL, NULL, 0, NULL, 0, "blk.0.ffn_up.weight", NULL,
         "tensor 'blk.0.ffn_up.weight': type Q8_1 not supported"},
        {"Q8_1 norm", NULL, NULL, 0, NULL, 0, "output_norm.weight", NULL, "type Q8_1 not supported for a vector"},
        {"spm tokenizer", NULL, "tokenizer.ggml.model", 's', "llama", 0, NULL, NULL,
         "tokenizer.ggml.model 'llama' not supported"},
        {"unknown pre", NULL, "tokenizer.ggml.pre", 's', "deepseek-v3", 0, NULL, NULL,
         "tokenizer.ggml.pre 'deepseek-v3' not supported"},
        {"eos out of range", NULL, "tokenizer.ggml.eos_token_id", 'u', NULL, 1e9, NULL, NULL,
         "eos_token_id 1000000000 is not a token"},
        {"no tokens", "tokenizer.ggml.tokens", NULL, 0, NULL, 0, NULL, NULL, "missing key 'tokenizer.ggml.tokens'"},
    };
    dflash_params p = dflash_default_params();
    p.n_threads = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *f = rewrite(cases[i].drop, cases[i].set, cases[i].kind, cases[i].sval, cases[i].nval,
                                cases[i].retype, cases[i].dropt);
        dflash_model *m = dflash_load(f, NULL, &p);
        const char *e = dflash_error();
        CHECK(!m, "%s: loaded", cases[i].what);
        if (m) {
            dflash_free(m);
            continue;
        }
        CHECK(strstr(e, f) && strstr(e, cases[i].expect) && !strchr(e, '\n'), "%s: '%s'", cases[i].what, e);
    }
    /* a chat template the engine does not know: loads, chat prompts fail clearly */
    const char *f = rewrite(NULL, "tokenizer.chat_template", 's', "{% for m in messages %}{{ m.content }}{% endfor %}",
                            0, NULL, NULL);
    dflash_model *m = dflash_load(f, NULL, &p);
    CHECK(m != NULL, "load: %s", dflash_error());
    if (m) {
        dflash_message msg = {"user", "hi"};
        char *s = dflash_chat_prompt(m, &msg, 1, 1, -1);
        CHECK(!s && strstr(dflash_error(), "unknown chat template"), "%s", dflash_error());
        free(s);
        dflash_free(m);
    }
}

/* Greedy ids from MODEL (a tokenizer from TOKDIR) on PROMPT ids. */
static int32_t *greedy_ids(const char *model, const char *quant, const char *tokdir, const int32_t *prompt, size_t np,
                           size_t *n) {
    dflash_params p = dflash_default_params();
    p.n_threads = 2;
    p.quant = quant;
    p.tokenizer = tokdir;
    dflash_model *m = dflash_load(model, NULL, &p);
    *n = 0;
    if (!m) {
        fprintf(stderr, "  load %s: %s\n", model, dflash_error());
        return NULL;
    }
    int32_t *out = NULL;
    dflash_gen g = dflash_default_gen();
    g.n_predict = 24;
    g.ignore_eos = 1;
    if (dflash_generate(m, prompt, np, &g, NULL, NULL, &out, n, NULL) != 0) fprintf(stderr, "  %s\n", dflash_error());
    dflash_free(m);
    return out;
}

/* The MoE and Qwen3.5 families as llama.cpp's converter writes them
 * (tests/fixtures/gguf/, tools/llama/zoo_gguf.sh; test_reference.c checks
 * their logits against transformers): qwen3moe's bf16 file holds exactly the
 * checkpoint's weights, expert by expert, its dense layer by name; the
 * Q8_0 qwen35moe file (its 48-wide shared-expert down projection F16: rows
 * not a multiple of 32) greedy-decodes as the checkpoint with --quant q8_0. */
TEST(llama_converter_families) {
    mdl_model hf, gg;
    if (mdl_load(&hf, "tests/models/tiny-qwen3moe") != 0) return;
    CHECK(mdl_load(&gg, "tests/fixtures/gguf/tiny-qwen3moe-bf16.gguf") == 0, "load: %s", dfl_lasterr());
    if (gg.layers) {
        const cfg_model *a = &hf.cfg, *b = &gg.cfg;
        CHECK(b->arch == CFG_QWEN3_MOE && b->n_experts == a->n_experts && b->n_experts_used == a->n_experts_used &&
                  b->moe_inter == a->moe_inter && b->norm_topk && b->inter == a->inter &&
                  !memcmp(b->moe_layer, a->moe_layer, (size_t)a->n_layers) && b->tie_embeddings == a->tie_embeddings,
              "qwen3moe config differs");
        int bad = !same_matrix(&gg.embed, &hf.embed) || !same_vec(gg.final_norm, hf.final_norm, a->hidden);
        for (int l = 0; l < a->n_layers && !bad; l++) {
            const mdl_layer *x = &gg.layers[l], *y = &hf.layers[l];
            bad |= !same_matrix(&x->wq, &y->wq) || !same_matrix(&x->wk, &y->wk) || !same_matrix(&x->wv, &y->wv) ||
                   !same_matrix(&x->wo, &y->wo) || !same_vec(x->in_norm, y->in_norm, a->hidden) ||
                   !same_vec(x->post_norm, y->post_norm, a->hidden) ||
                   !same_vec(x->q_norm, y->q_norm, a->head_dim) || !same_vec(x->k_norm, y->k_norm, a->head_dim);
            if (a->moe_layer[l]) {
                bad |= !same_matrix(&x->router, &y->router);
                for (int e = 0; e < a->n_experts && !bad; e++)
                    bad |= !same_matrix(&x->experts[e].wg, &y->experts[e].wg) ||
                           !same_matrix(&x->experts[e].wu, &y->experts[e].wu) ||
                           !same_matrix(&x->experts[e].wd, &y->experts[e].wd);
            } else {
                bad |= !same_matrix(&x->wg, &y->wg) || !same_matrix(&x->wu, &y->wu) || !same_matrix(&x->wd, &y->wd);
            }
            if (bad) fprintf(stderr, "  layer %d differs\n", l);
        }
        CHECK(!bad, "a weight of the llama.cpp-converted qwen3moe differs from the checkpoint's");
    }
    mdl_free(&hf);
    mdl_free(&gg);
    /* Qwen3.5: the config as the checkpoint's, value heads tiled */
    if (mdl_load(&hf, "tests/models/tiny-qwen35moe") != 0) return;
    CHECK(mdl_load(&gg, "tests/fixtures/gguf/tiny-qwen35moe-q8_0.gguf") == 0, "load: %s", dfl_lasterr());
    if (gg.layers) {
        const cfg_model *a = &hf.cfg, *b = &gg.cfg;
        CHECK(b->arch == CFG_QWEN3_5 && b->qwen35_moe && b->shared_inter == a->shared_inter &&
                  b->n_experts == a->n_experts && b->moe_inter == a->moe_inter && b->rot_dim == a->rot_dim &&
                  b->attn_gate && !memcmp(b->linear_layer, a->linear_layer, (size_t)a->n_layers) &&
                  b->lin_k_heads == a->lin_k_heads && b->lin_v_heads == a->lin_v_heads &&
                  b->lin_k_dim == a->lin_k_dim && b->lin_v_dim == a->lin_v_dim && b->lin_conv == a->lin_conv &&
                  b->lin_v_tiled && !a->lin_v_tiled,
              "qwen35moe config differs");
    }
    mdl_free(&hf);
    mdl_free(&gg);
    /* Q8_0 experts: every matrix the converter quantized equals the engine's
     * own Q8_0 of the bf16 file's (the router it keeps F32, dflash's
     * --quant q8_0 quantizes, so whole-model tokens are not compared) */
    if (mdl_load(&hf, "tests/fixtures/gguf/tiny-qwen35moe-bf16.gguf") != 0) return;
    CHECK(mdl_load(&gg, "tests/fixtures/gguf/tiny-qwen35moe-q8_0.gguf") == 0, "load: %s", dfl_lasterr());
    CHECK(qt_model(&hf, QT_Q8_0, 32) == 0, "quantize: %s", dfl_lasterr());
    if (gg.layers) {
        const cfg_model *a = &hf.cfg;
        int bad = !same_matrix(&gg.embed, &hf.embed), n = 1;
        for (int l = 0; l < a->n_layers && !bad; l++) {
            const mdl_layer *x = &gg.layers[l], *y = &hf.layers[l];
            const wt_weight *xs[] = {&x->wq, &x->wk, &x->wv, &x->wo, &x->lin_qkv, &x->lin_z, &x->lin_b, &x->lin_a,
                                     &x->lin_out, &x->sh_wg, &x->sh_wu};
            const wt_weight *ys[] = {&y->wq, &y->wk, &y->wv, &y->wo, &y->lin_qkv, &y->lin_z, &y->lin_b, &y->lin_a,
                                     &y->lin_out, &y->sh_wg, &y->sh_wu};
            for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++) {
                bad |= !same_matrix(xs[k], ys[k]);
                n += xs[k]->rows > 0;
            }
            for (int e = 0; e < a->n_experts; e++, n += 3)
                bad |= !same_matrix(&x->experts[e].wg, &y->experts[e].wg) ||
                       !same_matrix(&x->experts[e].wu, &y->experts[e].wu) ||
                       !same_matrix(&x->experts[e].wd, &y->experts[e].wd);
            if (bad) fprintf(stderr, "  layer %d differs\n", l);
        }
        CHECK(!bad, "a Q8_0 weight of the converted qwen35moe differs from the engine's Q8_0 of the bf16 file");
        CHECK(n > 100, "only %d matrices compared", n);
    }
    mdl_free(&hf);
    mdl_free(&gg);
    /* and it runs: greedy through the public API with a tokenizer from elsewhere */
    static const int32_t prompt[6] = {9707, 11, 1879, 13, 576, 3974};
    size_t nb;
    int32_t *y = greedy_ids("tests/fixtures/gguf/tiny-qwen35moe-q8_0.gguf", NULL, "tests/models/tiny-qwen35moe",
                            prompt, 6, &nb);
    CHECK(y && nb == 24, "qwen35moe q8_0 greedy: %zu tokens", nb);
    free(y);
}

/* dflash convert of a qwen3_moe checkpoint: llama.cpp's qwen3moe layout
 * (the same tensor names and shapes as its own converter's file of the same
 * checkpoint), the router f32 (exact), the experts F16 = the f16 rounding of
 * the checkpoint's, Q8_0 = the engine's own Q8_0; the f16 file decodes as
 * the checkpoint does; norm_topk_prob=false (no GGUF key) is refused. */
TEST(convert_qwen3moe) {
    char f16p[512], q8p[512], q4src[512];
    snprintf(f16p, sizeof f16p, "%s/moe-f16.gguf", tmpdir);
    snprintf(q8p, sizeof q8p, "%s/moe-q8_0.gguf", tmpdir);
    CHECK(convert("tests/models/tiny-qwen3moe", f16p, "f16") == 0, "f16");
    CHECK(convert("tests/models/tiny-qwen3moe", q8p, "q8_0") == 0, "q8_0");
    gguf_file ours, theirs;
    if (gguf_open(&ours, f16p) || gguf_open(&theirs, "tests/fixtures/gguf/tiny-qwen3moe-bf16.gguf")) {
        CHECK(0, "open: %s", dfl_lasterr());
        return;
    }
    int same_set = ours.n_tensors == theirs.n_tensors;
    for (int i = 0; i < theirs.n_tensors; i++) {
        const gguf_tensor *t = &theirs.t[i], *o = gguf_find_tensor(&ours, t->name);
        if (!o || o->n_dims != t->n_dims || memcmp(o->ne, t->ne, sizeof t->ne)) {
            fprintf(stderr, "  %s: %s in ours\n", t->name, o ? "another shape" : "missing");
            same_set = 0;
        }
    }
    CHECK(same_set, "tensors differ from llama.cpp's converter's (%d vs %d)", ours.n_tensors, theirs.n_tensors);
    const gguf_tensor *r = gguf_find_tensor(&ours, "blk.0.ffn_gate_inp.weight");
    const gguf_tensor *x = gguf_find_tensor(&ours, "blk.0.ffn_gate_exps.weight");
    CHECK(r && r->type == GGML_F32 && x && x->type == GGML_F16 && x->n_dims == 3, "router / expert types");
    gguf_close(&ours);
    gguf_close(&theirs);
    mdl_model hf, f16, q8;
    if (mdl_load(&hf, "tests/models/tiny-qwen3moe") != 0) return;
    CHECK(mdl_load(&f16, f16p) == 0, "load f16: %s", dfl_lasterr());
    CHECK(mdl_load(&q8, q8p) == 0, "load q8_0: %s", dfl_lasterr());
    if (f16.layers && q8.layers) {
        const cfg_model *a = &hf.cfg, *b = &f16.cfg;
        CHECK(b->arch == CFG_QWEN3_MOE && b->n_experts == a->n_experts && b->n_experts_used == a->n_experts_used &&
                  b->moe_inter == a->moe_inter && b->norm_topk && b->inter == a->inter &&
                  b->n_moe_layers == a->n_moe_layers && b->n_moe_layers < a->n_layers &&
                  !memcmp(b->moe_layer, a->moe_layer, (size_t)a->n_layers),
              "config differs");
        CHECK(same_weights(&f16, &hf, to_f16, "f16"), "f16 attention / dense weights");
        int bad = 0, n = 0;
        for (int l = 0; l < a->n_layers; l++) {
            if (!a->moe_layer[l]) continue;
            const mdl_layer *X = &f16.layers[l], *Y = &hf.layers[l];
            bad |= !same_matrix(&X->router, &Y->router) || !same_matrix(&q8.layers[l].router, &Y->router);
            for (int e = 0; e < a->n_experts; e++, n += 3)
                bad |= !same_rounded(&X->experts[e].wg, &Y->experts[e].wg, to_f16) ||
                       !same_rounded(&X->experts[e].wu, &Y->experts[e].wu, to_f16) ||
                       !same_rounded(&X->experts[e].wd, &Y->experts[e].wd, to_f16);
        }
        CHECK(!bad && n > 0, "f16 experts / routers differ (%d expert matrices)", n);
        CHECK(qt_model(&hf, QT_Q8_0, 32) == 0, "quantize: %s", dfl_lasterr());
        bad = 0;
        for (int l = 0; l < a->n_layers; l++)
            for (int e = 0; a->moe_layer[l] && e < a->n_experts; e++)
                bad |= !same_matrix(&q8.layers[l].experts[e].wg, &hf.layers[l].experts[e].wg) ||
                       !same_matrix(&q8.layers[l].experts[e].wu, &hf.layers[l].experts[e].wu) ||
                       !same_matrix(&q8.layers[l].experts[e].wd, &hf.layers[l].experts[e].wd);
        CHECK(!bad && q8.layers[0].experts[0].wg.dtype == WT_Q8, "Q8_0 experts differ from the engine's Q8_0");
    }
    mdl_free(&hf);
    mdl_free(&f16);
    mdl_free(&q8);
    static const int32_t prompt[6] = {9707, 11, 1879, 13, 576, 3974};
    size_t na, nb;
    int32_t *ya = greedy_ids("tests/models/tiny-qwen3moe", NULL, NULL, prompt, 6, &na);
    int32_t *yb = greedy_ids(f16p, NULL, NULL, prompt, 6, &nb);
    CHECK(ya && yb && na == 24 && na == nb && !memcmp(ya, yb, na * sizeof *ya), "f16 file's greedy tokens differ");
    free(ya);
    free(yb);
    snprintf(q4src, sizeof q4src, "%s/moe-q4.gguf", tmpdir);
    CHECK(ggm_convert("tests/models/tiny-qwen3moe-q4", q4src, "f16", NULL) != 0 &&
              strstr(dfl_lasterr(), "norm_topk_prob=false cannot be written"),
          "norm_topk_prob=false: %s", dfl_lasterr());
}

/* Key/value A equal to B: type, count and bytes (strings: their text). */
static int same_kv(const gguf_kv *a, const gguf_kv *b) {
    if (a->type != b->type || a->atype != b->atype || a->n != b->n) return 0;
    if (a->type == GGUF_STRING) { /* u64 length, then the bytes */
        uint64_t la, lb;
        memcpy(&la, a->val, 8), memcpy(&lb, b->val, 8);
        return la == lb && !memcmp(a->val + 8, b->val + 8, (size_t)la);
    }
    if (a->type == GGUF_ARRAY && a->atype == GGUF_STRING) {
        for (uint64_t i = 0; i < a->n; i++) {
            size_t na, nb;
            const char *x = gguf_arr_str(a, i, &na), *y = gguf_arr_str(b, i, &nb);
            if (na != nb || memcmp(x, y, na)) return 0;
        }
        return 1;
    }
    static const int sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    gguf_vtype t = a->type == GGUF_ARRAY ? a->atype : a->type;
    return t <= 12 && sz[t] && !memcmp(a->val, b->val, (size_t)sz[t] * a->n);
}

/* keys the comparison leaves out: the tokenizer (llama.cpp's files here were
 * written without one; dflash convert writes tokenizer.json's), the name
 * and size label, and the vocab_size the converter adds for no tokenizer */
static int skip_key(const char *k) {
    size_t n = strlen(k);
    return !strncmp(k, "tokenizer.", 10) || !strcmp(k, "general.name") || !strcmp(k, "general.size_label") ||
           (n > 11 && !strcmp(k + n - 11, ".vocab_size"));
}

/* dflash convert of tiny-qwen35 / tiny-qwen35moe / tiny-qwen3next at
 * --type bf16 against llama.cpp's converter's file of the same checkpoint
 * (tests/fixtures/gguf/NAME-bf16.gguf): the same keys and values (but
 * skip_key's), the same tensors in the same order with the same shapes and
 * types, the same bytes but ssm_a's (-exp(A_log): C's expf and torch's exp
 * may differ in the last bit; within 1 ulp here). Then our file loaded,
 * logits of the fixture's prompts against the HF checkpoint's load:
 * bit-identical for qwen3next (no reordering); for qwen35 / qwen35moe
 * within test_reference.c's 1e-3 with every row's argmax equal (their value
 * heads stay in the converter's tiled order, cfg.lin_v_tiled, so ssm_out
 * sums its columns in another order: 1e-4 and 2.4e-4 seen), as llama.cpp's
 * own files load; and DFlash with tiny-qwen35-draft = greedy of our file. */
static void convert_q35_one(const char *name) {
    char in[128], ours_p[512], fx[160];
    snprintf(in, sizeof in, "tests/models/%s", name);
    snprintf(ours_p, sizeof ours_p, "%s/%s-bf16.gguf", tmpdir, name);
    snprintf(fx, sizeof fx, "tests/fixtures/gguf/%s-bf16.gguf", name);
    if (convert(in, ours_p, "bf16") != 0) {
        CHECK(0, "%s: convert", name);
        return;
    }
    gguf_file ours, theirs;
    if (gguf_open(&ours, ours_p) || gguf_open(&theirs, fx)) {
        CHECK(0, "open: %s", dfl_lasterr());
        return;
    }
    int nk = 0;
    for (int i = 0; i < theirs.n_kv; i++) {
        const gguf_kv *t = &theirs.kv[i], *o = gguf_find_kv(&ours, t->key);
        if (skip_key(t->key)) continue;
        nk++;
        CHECK(o && same_kv(o, t), "%s: key %s %s", name, t->key, o ? "differs" : "missing");
    }
    for (int i = 0; i < ours.n_kv; i++)
        CHECK(skip_key(ours.kv[i].key) || gguf_find_kv(&theirs, ours.kv[i].key), "%s: key %s not in llama.cpp's", name,
              ours.kv[i].key);
    CHECK(ours.n_tensors == theirs.n_tensors, "%s: %d tensors, llama.cpp's %d", name, ours.n_tensors, theirs.n_tensors);
    int ulp_off = 0;
    for (int i = 0; i < theirs.n_tensors && i < ours.n_tensors; i++) {
        const gguf_tensor *t = &theirs.t[i], *o = &ours.t[i];
        int same = !strcmp(o->name, t->name) && o->n_dims == t->n_dims && !memcmp(o->ne, t->ne, sizeof t->ne) &&
                   o->type == t->type && o->nbytes == t->nbytes;
        CHECK(same, "%s: tensor %d: %s vs llama.cpp's %s (shape, type or order)", name, i, o->name, t->name);
        if (!same || !memcmp(o->data, t->data, t->nbytes)) continue;
        size_t nm = strlen(t->name);
        int ok = nm > 6 && !strcmp(t->name + nm - 6, ".ssm_a") && t->type == GGML_F32;
        for (size_t k = 0; ok && k < t->nbytes / 4; k++) {
            float x, y;
            memcpy(&x, (const char *)o->data + 4 * k, 4), memcpy(&y, (const char *)t->data + 4 * k, 4);
            ok = fabsf(x - y) <= fabsf(y) * 1.2e-7f;
        }
        ulp_off += ok;
        CHECK(ok, "%s: tensor %s: data differ from llama.cpp's", name, t->name);
    }
    fprintf(stderr, "  %s: %d keys, %d tensors as llama.cpp's, %d ssm_a within 1 ulp\n", name, nk, theirs.n_tensors,
            ulp_off);
    gguf_close(&ours);
    gguf_close(&theirs);
    mdl_model hf, gg;
    if (mdl_load(&hf, in) || mdl_load(&gg, ours_p)) {
        CHECK(0, "load: %s", dfl_lasterr());
        return;
    }
    int tiled = !hf.cfg.qwen3_next && hf.cfg.lin_v_heads > hf.cfg.lin_k_heads;
    CHECK(gg.cfg.lin_v_tiled == tiled && gg.cfg.arch == CFG_QWEN3_5 && gg.cfg.qwen3_next == hf.cfg.qwen3_next &&
              gg.cfg.qwen35_moe == hf.cfg.qwen35_moe && gg.cfg.n_moe_layers == hf.cfg.n_moe_layers &&
              gg.cfg.rot_dim == hf.cfg.rot_dim && !memcmp(gg.cfg.linear_layer, hf.cfg.linear_layer, (size_t)hf.cfg.n_layers),
          "%s: config differs", name);
    st_set fxs;
    char rf[160];
    snprintf(rf, sizeof rf, "tests/fixtures/%s.ref.safetensors", name);
    be_options bo = {.n_threads = 2};
    void *be = be_cpu.open(&bo);
    kn_set_act_quant(0);
    float worst = 0;
    int np = 0;
    if (be && st_open_file(&fxs, rf) == 0) {
        int V = hf.cfg.vocab;
        for (int i = 0;; i++, np++) {
            char nm[32];
            snprintf(nm, sizeof nm, "p%d.ids", i);
            const st_tensor *ids = st_find(&fxs, nm);
            if (!ids) break;
            int T = (int)ids->shape[0];
            float *la = malloc(sizeof(float) * (size_t)T * V), *lb = malloc(sizeof(float) * (size_t)T * V);
            mdl_model *ms[2] = {&gg, &hf};
            float *ls[2] = {la, lb};
            for (int k = 0; k < 2; k++) {
                void *st = be_cpu.create(be, ms[k], 256);
                be_batch b = {.T = T, .tokens = ids->data, .n_logits = T, .logits = ls[k]};
                CHECK(st && be_cpu.forward(st, &b) == 0, "forward: %s", dfl_lasterr());
                if (st) be_cpu.destroy(st);
            }
            if (!tiled) CHECK(!memcmp(la, lb, sizeof(float) * (size_t)T * V), "%s p%d: logits not bit-identical", name, i);
            for (size_t j = 0; j < (size_t)T * V; j++) worst = fmaxf(worst, fabsf(la[j] - lb[j]));
            for (int t = 0; t < T; t++)
                CHECK(smp_argmax(la + (size_t)t * V, V) == smp_argmax(lb + (size_t)t * V, V), "%s p%d row %d argmax", name, i, t);
            free(la), free(lb);
        }
        st_close(&fxs);
    }
    CHECK(np >= 4 && worst <= 1e-3f, "%s: %d prompts, logits %g off the HF checkpoint's", name, np, worst);
    fprintf(stderr, "  %s: logits of our file vs the HF checkpoint's: max |diff| %.2e%s\n", name, worst,
            tiled ? " (tiled value heads)" : " (bit-identical)");
    if (be) be_cpu.close(be);
    mdl_free(&hf);
    mdl_free(&gg);
    /* DFlash = greedy on our file */
    static const int32_t prompt[6] = {9707, 11, 1879, 13, 576, 3974};
    dflash_params pr = dflash_default_params();
    pr.n_threads = 2;
    pr.tokenizer = in;
    dflash_model *plain = dflash_load(ours_p, NULL, &pr), *spec = dflash_load(ours_p, "tests/models/tiny-qwen35-draft", &pr);
    CHECK(plain && spec, "load: %s", dflash_error());
    for (int b = 0; plain && spec && b < 3; b++) {
        static const int blocks[3] = {2, 16, 0};
        dflash_gen g = dflash_default_gen();
        g.n_predict = 24;
        g.ignore_eos = 1;
        int32_t *x = NULL, *y = NULL;
        size_t nx = 0, ny = 0;
        dflash_generate(plain, prompt, 6, &g, NULL, NULL, &x, &nx, NULL);
        g.block_size = blocks[b];
        g.draft_max = blocks[b] ? blocks[b] - 1 : -1;
        dflash_reset(spec);
        CHECK(dflash_generate(spec, prompt, 6, &g, NULL, NULL, &y, &ny, NULL) == 0, "dflash: %s", dflash_error());
        CHECK(nx == 24 && nx == ny && !memcmp(x, y, nx * sizeof *x), "%s block %d: DFlash differs from greedy", name,
              blocks[b]);
        free(x), free(y);
    }
    dflash_free(plain);
    dflash_free(spec);
}

TEST(convert_qwen35_family) {
    convert_q35_one("tiny-qwen35");
    convert_q35_one("tiny-qwen35moe");
    convert_q35_one("tiny-qwen3next");
    /* --type q8_0: the tensor types llama.cpp's q8_0 file has (its 48-wide
     * ffn_down_shexp F16, routers and vectors F32) */
    char p8[512];
    snprintf(p8, sizeof p8, "%s/q35moe-q8_0.gguf", tmpdir);
    gguf_file ours, theirs;
    if (convert("tests/models/tiny-qwen35moe", p8, "q8_0") || gguf_open(&ours, p8) ||
        gguf_open(&theirs, "tests/fixtures/gguf/tiny-qwen35moe-q8_0.gguf")) {
        CHECK(0, "q8_0: %s", dfl_lasterr());
        return;
    }
    int same = ours.n_tensors == theirs.n_tensors;
    for (int i = 0; same && i < theirs.n_tensors; i++)
        same = !strcmp(ours.t[i].name, theirs.t[i].name) && ours.t[i].type == theirs.t[i].type &&
               !memcmp(ours.t[i].ne, theirs.t[i].ne, sizeof ours.t[i].ne);
    CHECK(same, "q8_0 tensor table differs from llama.cpp's");
    gguf_close(&ours);
    gguf_close(&theirs);
}

/* A qwen35moe file with one multi-token-prediction block appended the way
 * llama.cpp's converter writes Qwen3.5 checkpoints (block_count + 1,
 * nextn_predict_layers 1, recurrent_layers one longer, the block's layer
 * tensors and its nextn.* tensors under blk.N): dflash decodes it exactly
 * as the file without the block; nextn_predict_layers >= block_count is
 * refused. */
static const char *with_nextn(const char *src, const char *arch, int64_t nextn) {
    static char out[600];
    snprintf(out, sizeof out, "%s/nextn.gguf", tmpdir);
    gguf_file g;
    if (gguf_open(&g, src) != 0) return out;
    char kb[96], kr[96], kn[96];
    snprintf(kb, sizeof kb, "%s.block_count", arch);
    snprintf(kr, sizeof kr, "%s.attention.recurrent_layers", arch);
    snprintf(kn, sizeof kn, "%s.nextn_predict_layers", arch);
    int64_t nl = 0, full = -1;
    gguf_get_int(&g, kb, &nl, 1);
    const gguf_kv *rk = gguf_find_kv(&g, kr);
    for (uint64_t k = 0; rk && k < rk->n; k++)
        if (!gguf_arr_int(rk, k)) full = (int64_t)k; /* the last full-attention block: the MTP block's kind */
    gguf_writer *w = gguf_w_new();
    for (int i = 0; i < g.n_kv; i++) {
        const gguf_kv *kv = &g.kv[i];
        if (!strcmp(kv->key, kb)) {
            gguf_w_u32(w, kb, (uint32_t)(nl + 1));
        } else if (!strcmp(kv->key, kr)) {
            int32_t rl[64];
            for (uint64_t k = 0; k < kv->n && k < 63; k++) rl[k] = (int32_t)gguf_arr_int(kv, k);
            rl[kv->n] = 0; /* the MTP block is a full-attention block */
            gguf_w_arr_i32(w, kr, rl, kv->n + 1);
        } else {
            gguf_w_copy_kv(w, kv);
        }
    }
    gguf_w_u32(w, kn, (uint32_t)nextn);
    char pre[32], name[160];
    snprintf(pre, sizeof pre, "blk.%lld.", (long long)full);
    int nt = g.n_tensors;
    for (int i = 0; i < nt; i++) {
        const gguf_tensor *t = &g.t[i];
        gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
    }
    for (int i = 0; i < nt; i++) {
        const gguf_tensor *t = &g.t[i];
        if (strncmp(t->name, pre, strlen(pre))) continue;
        snprintf(name, sizeof name, "blk.%lld.%s", (long long)nl, t->name + strlen(pre));
        gguf_w_tensor(w, name, t->type, t->n_dims, t->ne, t->data);
    }
    const gguf_tensor *norm = gguf_find_tensor(&g, "output_norm.weight");
    static const char *const nx[] = {"nextn.enorm", "nextn.hnorm", "nextn.shared_head_norm"};
    for (int i = 0; norm && i < 3; i++) {
        snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)nl, nx[i]);
        gguf_w_tensor(w, name, norm->type, norm->n_dims, norm->ne, norm->data);
    }
    if (gguf_w_write(w, out) != 0) fprintf(stderr, "  nextn: %s\n", dfl_lasterr());
    gguf_w_free(w);
    gguf_close(&g);
    return out;
}

TEST(nextn_blocks) {
    static const int32_t prompt[6] = {9707, 11, 1879, 13, 576, 3974};
    const char *src = "tests/fixtures/gguf/tiny-qwen35moe-bf16.gguf", *tok = "tests/models/tiny-qwen35moe";
    size_t na, nb;
    int32_t *ya = greedy_ids(src, NULL, tok, prompt, 6, &na);
    const char *f = with_nextn(src, "qwen35moe", 1);
    mdl_model m;
    CHECK(mdl_load(&m, f) == 0, "load with a nextn block: %s", dfl_lasterr());
    if (m.layers) {
        CHECK(m.cfg.n_layers == 4, "%d decoder layers (the nextn block counted)", m.cfg.n_layers);
        mdl_free(&m);
    }
    int32_t *yb = greedy_ids(f, NULL, tok, prompt, 6, &nb);
    CHECK(ya && yb && na == 24 && na == nb && !memcmp(ya, yb, na * sizeof *ya),
          "greedy tokens with the nextn block differ from the file without it");
    free(ya);
    free(yb);
    f = with_nextn(src, "qwen35moe", 5);
    CHECK(mdl_load(&m, f) != 0 && strstr(dfl_lasterr(), "nextn_predict_layers 5 is out of range"), "%s", dfl_lasterr());
}

/* Hostile edits of the family files: each fails at load naming the culprit. */
TEST(bad_family_models) {
    static const struct {
        const char *src, *what, *drop, *set;
        int kind;
        double nval;
        const char *dropt, *expect;
    } cases[] = {
        {"tiny-qwen3moe-bf16", "sigmoid router", NULL, "qwen3moe.expert_gating_func", 'u', 2, NULL,
         "expert_gating_func 2 is not softmax"},
        {"tiny-qwen3moe-bf16", "scaled experts", NULL, "qwen3moe.expert_weights_scale", 'f', 2.5, NULL,
         "expert_weights_scale 2.5 is not 1"},
        {"tiny-qwen3moe-bf16", "no expert count", "qwen3moe.expert_count", NULL, 0, 0, NULL,
         "missing key 'qwen3moe.expert_count'"},
        {"tiny-qwen3moe-bf16", "top-k above experts", NULL, "qwen3moe.expert_used_count", 'u', 9, NULL,
         "num_experts_per_tok 9 out of range"},
        {"tiny-qwen3moe-bf16", "no expert tensor", NULL, NULL, 0, 0, "blk.2.ffn_down_exps.weight",
         "missing tensor 'blk.2.ffn_down_exps.weight'"},
        {"tiny-qwen35moe-bf16", "scalar recurrent_layers", NULL, "qwen35moe.attention.recurrent_layers", 'u', 1, NULL,
         "must be an array of 4 booleans"},
        {"tiny-qwen35moe-bf16", "no ssm group count", "qwen35moe.ssm.group_count", NULL, 0, 0, NULL,
         "missing key 'qwen35moe.ssm.group_count'"},
        {"tiny-qwen35moe-bf16", "inner size off", NULL, "qwen35moe.ssm.inner_size", 'u', 66, NULL,
         "ssm.inner_size 66 is not a multiple"},
        {"tiny-qwen35moe-bf16", "value heads off", NULL, "qwen35moe.ssm.time_step_rank", 'u', 3, NULL,
         "ssm.inner_size 64 is not a multiple of ssm.time_step_rank 3"},
        {"tiny-qwen35moe-bf16", "no ssm_a", NULL, NULL, 0, 0, "blk.2.ssm_a", "missing tensor 'blk.2.ssm_a'"},
        {"tiny-qwen35moe-bf16", "no shared expert", NULL, NULL, 0, 0, "blk.0.ffn_up_shexp.weight",
         "missing tensor 'blk.0.ffn_up_shexp.weight'"},
        {"tiny-qwen35moe-bf16", "no shared width", "qwen35moe.expert_shared_feed_forward_length", NULL, 0, 0, NULL,
         "missing key 'qwen35moe.expert_shared_feed_forward_length'"},
        {"tiny-qwen35-bf16", "conv kernel off", NULL, "qwen35.ssm.conv_kernel", 'u', 3, NULL,
         "tensor 'blk.0.ssm_conv1d.weight': shape [4, 128] (2 dims), expected [3, 128]"},
        {"tiny-qwen35-bf16", "rotary dims odd", NULL, "qwen35.rope.dimension_count", 'u', 7, NULL,
         "partial_rotary_factor"},
        {"tiny-qwen3next-bf16", "no ssm_ba", NULL, NULL, 0, 0, "blk.2.ssm_ba.weight",
         "missing tensor 'blk.2.ssm_ba.weight'"},
        {"tiny-qwen3next-bf16", "value heads off", NULL, "qwen3next.ssm.time_step_rank", 'u', 2, NULL,
         "tensor 'blk.0.ssm_ba.weight': shape [32, 8] (2 dims), expected [32, 4]"},
        {"tiny-qwen3next-bf16", "no shared width", "qwen3next.expert_shared_feed_forward_length", NULL, 0, 0, NULL,
         "missing key 'qwen3next.expert_shared_feed_forward_length'"},
    };
    static char src[160];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(src, sizeof src, "tests/fixtures/gguf/%s.gguf", cases[i].src);
        rewrite_src = src;
        const char *f = rewrite(cases[i].drop, cases[i].set, cases[i].kind, NULL, cases[i].nval, NULL, cases[i].dropt);
        mdl_model m;
        int rc = mdl_load(&m, f);
        const char *e = dfl_lasterr();
        CHECK(rc != 0, "%s: loaded", cases[i].what);
        if (rc == 0) {
            mdl_free(&m);
            continue;
        }
        CHECK(strstr(e, f) && strstr(e, cases[i].expect) && !strchr(e, '\n'), "%s: '%s'", cases[i].what, e);
    }
    rewrite_src = qwen_f16;
}

/* tests/fixtures/gguf/quants-ggml.bin: for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
 * Q4_K, Q5_K, Q6_K, random blocks (3 rows x 512) and the floats ggml's own
 * dequantize (to_float of llama.cpp v0.5.0's libggml-base) gives for them.
 * Every weight the engine sees after the load-time conversion must equal
 * ggml's (as a number: a zero weight may come out as +0 where ggml has -0); and kn_matmul on them (T = 1 and inside T = 16) agrees
 * with a double-precision dot of ggml's weights. */
TEST(quants_match_ggml) {
    size_t n;
    uint8_t *b = (uint8_t *)dfl_read_file("tests/fixtures/gguf/quants-ggml.bin", &n);
    CHECK(b != NULL, "fixture: %s", dfl_lasterr());
    if (!b) return;
    int seen = 0;
    for (size_t o = 0; o + 12 <= n; seen++) {
        uint32_t h[3];
        memcpy(h, b + o, 12);
        o += 12;
        int type = (int)h[0], rows = (int)h[1], cols = (int)h[2];
        size_t rb = (size_t)cols / (size_t)ggml_blck_size(type) * ggml_type_size(type);
        const uint8_t *blocks = b + o;
        o += rb * (size_t)rows;
        const float *want = (const float *)(b + o);
        o += sizeof(float) * (size_t)rows * (size_t)cols;
        if (o > n) break;
        mdl_model m;
        memset(&m, 0, sizeof m);
        wt_weight w;
        ggm_dequant_weight(&m, type, blocks, rows, cols, &w);
        CHECK(wt_check(&w, ggml_type_name(type)) == 0, "%s", dfl_lasterr());
        if (type == GGML_Q6_K) /* the MLX 8-bit layout with groups of 16, not F32 */
            CHECK(w.dtype == WT_Q8 && w.bits == 8 && w.group_size == 16 && wt_bytes(&w) <= (size_t)rows * cols * 3 / 2,
                  "Q6_K became %s g%d, %zu bytes", wt_dtype_name(w.dtype), w.group_size, wt_bytes(&w));
        float x[512];
        int bad = 0;
        for (int r = 0; r < rows; r++) {
            wt_get_row(x, &w, r);
            for (int j = 0; j < cols && !bad; j++)
                if (x[j] != want[r * cols + j]) { /* as numbers: scale*q + bias gives +0 where ggml's d*(q-8) gives -0 */
                    CHECK(0, "%s row %d col %d: %.9g, ggml %.9g", ggml_type_name(type), r, j, x[j], want[r * cols + j]);
                    bad = 1;
                }
        }
        /* matmul: 16 activation rows; row 5 alone gives the same bits */
        float *act = dfl_malloc64(sizeof(float) * 16 * (size_t)cols), y16[16 * 3], y1[3];
        uint32_t sd = 7u + (uint32_t)type;
        for (int i = 0; i < 16 * cols; i++) {
            sd = sd * 1103515245u + 12345u;
            act[i] = (float)((int)(sd >> 16) % 2001 - 1000) / 1000.0f;
        }
        tp_pool *tp = tp_create(2); /* the rows split over two threads */
        kn_matmul(tp, y16, act, &w, 16);
        kn_matmul(tp, y1, act + 5 * cols, &w, 1);
        CHECK(!memcmp(y1, y16 + 5 * rows, sizeof y1), "%s: T=1 and T=16 differ", ggml_type_name(type));
        /* the kernels' packed copy (made by the CPU backend, cb_pack) gives the same bits */
        float yp[16 * 3];
        CHECK(kn_pack(&w) == 0, "pack");
        kn_matmul(tp, yp, act, &w, 16);
        tp_destroy(tp);
        CHECK(!memcmp(yp, y16, sizeof yp), "%s: packed weights give other bits", ggml_type_name(type));
        kn_unpack(&w);
        for (int r = 0; r < rows; r++) {
            double ref = 0, mag = 0;
            for (int j = 0; j < cols; j++) {
                ref += (double)want[r * cols + j] * act[5 * cols + j];
                mag += fabs((double)want[r * cols + j] * act[5 * cols + j]);
            }
            /* int8 activations (q8 mode) are off by <= amax/254 per element */
            CHECK(fabs(y1[r] - ref) <= 0.02 * mag + 1e-6, "%s row %d: %g vs reference %g", ggml_type_name(type), r,
                  y1[r], ref);
        }
        free(act);
        mdl_free(&m);
    }
    CHECK(seen == 8, "fixture holds %d types", seen);
    free(b);
}

/* ---- a Q4_K_M-like file: Q6_K tensors --------------------------------- */

/* A valid Q6_K block of x[256] (not llama.cpp's quantizer, only a
 * reasonable one): sub-block scales d * sc (int8 sc, some negative), codes
 * q = clamp(round(x / (d*sc)) + 32, 0, 63), packed as ggml lays them out. */
static void q6k_block(const float *x, uint8_t *blk) {
    float sub[16], smax = 0;
    for (int i = 0; i < 16; i++) {
        float a = 0;
        for (int j = 0; j < 16; j++) a = fmaxf(a, fabsf(x[16 * i + j]));
        sub[i] = (i % 5 == 3 ? -a : a) / 31.0f;
        smax = fmaxf(smax, fabsf(sub[i]));
    }
    float d = dfl_f16_to_f32(dfl_f32_to_f16(smax / 127.0f));
    memset(blk, 0, 210);
    uint8_t *ql = blk, *qh = blk + 128;
    for (int i = 0; i < 16; i++) {
        int sc = d > 0 ? (int)lrintf(sub[i] / d) : 0;
        sc = sc > 127 ? 127 : sc < -127 ? -127 : sc;
        blk[192 + i] = (uint8_t)(int8_t)sc;
        for (int j = 0; j < 16; j++) {
            int w = 16 * i + j, q = sc ? (int)lrintf(x[w] / (d * (float)sc)) + 32 : 32;
            q = q < 0 ? 0 : q > 63 ? 63 : q;
            int h = w / 128, k = (w % 128) / 32, l = w % 32;
            ql[64 * h + l + 32 * (k & 1)] |= (uint8_t)((q & 15) << (4 * (k >> 1)));
            qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * k));
        }
    }
    uint16_t dh = dfl_f32_to_f16(d);
    memcpy(blk + 208, &dh, 2);
}

/* ggml's value of weight j of a Q6_K row. */
static float q6k_value(const uint8_t *row, int j) {
    const uint8_t *blk = row + (size_t)(j / 256) * 210;
    int w = j % 256, h = w / 128, k = (w % 128) / 32, l = w % 32;
    int q = ((blk[64 * h + l + 32 * (k & 1)] >> (4 * (k >> 1))) & 15) | ((blk[128 + 32 * h + l] >> (2 * k)) & 3) << 4;
    uint16_t dh;
    memcpy(&dh, blk + 208, 2);
    return dfl_f16_to_f32(dh) * (float)(int8_t)blk[192 + w / 16] * (float)(q - 32);
}

static int is_q6k_name(const char *n) {
    return !strcmp(n, "token_embd.weight") || !strcmp(n, "output.weight") || strstr(n, "attn_v.weight") ||
           strstr(n, "ffn_down.weight");
}

/* A synthetic Qwen3 (hidden 256, so K-quant rows fit) as a GGUF the way
 * Q4_K_M files mix types: token_embd, output, attn_v, ffn_down Q6_K, the
 * other matrices Q8_0 (dflash writes no Q4_K), norms F32. Loads with every
 * Q6_K tensor as MLX Q8 group 16 (no F32 copy) holding ggml's values, and
 * decodes batch-invariantly: greedy tokens one at a time equal the argmax
 * of the same rows in one verify block, logits bit for bit - in f32 and in
 * q8 activation mode. */
TEST(q6k_model) {
    syn_spec s = syn_default();
    s.c.hidden = 256;
    s.c.inter = 512;
    s.c.head_dim = 64;
    s.c.tie_embeddings = 0;
    s.dtype = WT_F16;
    const char *src = path("q6k-src", NULL), *f16p = path("q6k-f16.gguf", NULL), *q6p = path("q6k.gguf", NULL);
    CHECK(syn_write(src, &s) == 0, "synth: %s", dfl_lasterr());
    if (ggm_convert(src, f16p, "f16", "tests/models/tiny-qwen3") != 0) {
        CHECK(0, "convert: %s", dfl_lasterr());
        return;
    }
    gguf_file g;
    if (gguf_open(&g, f16p) != 0) {
        CHECK(0, "open: %s", dfl_lasterr());
        return;
    }
    gguf_writer *w = gguf_w_new();
    for (int i = 0; i < g.n_kv; i++) gguf_w_copy_kv(w, &g.kv[i]);
    uint8_t *bufs[64];
    int nbuf = 0, n_q6 = 0;
    for (int i = 0; i < g.n_tensors; i++) {
        const gguf_tensor *t = &g.t[i];
        if (t->n_dims != 2 || t->type != GGML_F16 || nbuf == 64) {
            gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
            continue;
        }
        int cols = (int)t->ne[0], rows = (int)t->ne[1], q6 = is_q6k_name(t->name);
        float *x = dfl_malloc(sizeof(float) * (size_t)cols);
        size_t rb = q6 ? (size_t)cols / 256 * 210 : (size_t)cols / 32 * 34;
        uint8_t *o = bufs[nbuf++] = dfl_malloc(rb * (size_t)rows);
        for (int r = 0; r < rows; r++) {
            for (int j = 0; j < cols; j++) x[j] = dfl_f16_to_f32(((const uint16_t *)t->data)[(size_t)r * cols + j]);
            if (q6)
                for (int b = 0; b < cols / 256; b++) q6k_block(x + 256 * b, o + (size_t)r * rb + (size_t)b * 210);
            else
                ggm_quantize_q8_0(x, cols, o + (size_t)r * rb);
        }
        free(x);
        n_q6 += q6;
        gguf_w_tensor(w, t->name, q6 ? GGML_Q6_K : GGML_Q8_0, 2, t->ne, o);
    }
    CHECK(gguf_w_write(w, q6p) == 0, "write: %s", dfl_lasterr());
    gguf_w_free(w);
    gguf_close(&g);
    for (int i = 0; i < nbuf; i++) free(bufs[i]);
    CHECK(n_q6 == 2 + 2 * s.c.n_layers, "%d Q6_K tensors", n_q6);

    for (int q8 = 0; q8 < 2; q8++) {
        kn_set_act_quant(q8);
        mdl_model m;
        if (mdl_load(&m, q6p) != 0) {
            CHECK(0, "load: %s", dfl_lasterr());
            break;
        }
        /* every Q6_K tensor: Q8 group 16, ggml's values */
        if (q8 == 0 && gguf_open(&g, q6p) == 0) {
            float *row = dfl_malloc(sizeof(float) * 512);
            for (int i = 0; i < g.n_tensors; i++) {
                const gguf_tensor *t = &g.t[i];
                if (t->type != GGML_Q6_K) continue;
                const wt_weight *kw = !strcmp(t->name, "token_embd.weight") ? &m.embed
                                      : !strcmp(t->name, "output.weight")   ? &m.lm_head
                                      : strstr(t->name, "attn_v")           ? &m.layers[atoi(t->name + 4)].wv
                                                                            : &m.layers[atoi(t->name + 4)].wd;
                CHECK(kw->dtype == WT_Q8 && kw->group_size == 16 && kw->rows == t->ne[1] && kw->cols == t->ne[0],
                      "%s: %s g%d", t->name, wt_dtype_name(kw->dtype), kw->group_size);
                int bad = 0, cols = (int)t->ne[0];
                for (int r = 0; r < kw->rows && !bad; r++) {
                    wt_get_row(row, kw, r);
                    for (int j = 0; j < cols && !bad; j++) {
                        float want = q6k_value((const uint8_t *)t->data + (size_t)r * (size_t)(cols / 256 * 210), j);
                        if (row[j] != want) {
                            CHECK(0, "%s row %d col %d: %g, ggml %g", t->name, r, j, row[j], want);
                            bad = 1;
                        }
                    }
                }
            }
            free(row);
            gguf_close(&g);
        }
        /* greedy one token at a time, then the same rows as one verify block */
        be_options bo = {.n_threads = 2};
        void *be = be_cpu.open(&bo);
        CHECK(be && be_cpu.prepare(be, &m) == 0, "backend: %s", dfl_lasterr());
        if (q8 && kn_act_quant() && kn_has_pack()) CHECK(m.lm_head.packed != NULL, "q8 mode: lm_head not packed");
        void *st = be_cpu.create(be, &m, 64);
        enum { NP = 5, NG = 16 };
        int V = m.cfg.vocab;
        int32_t tok[NP + NG] = {3, 141, 59, 265, 35};
        float *l1 = dfl_malloc(sizeof(float) * (size_t)V * NG), *lb = dfl_malloc(sizeof(float) * (size_t)V * NG);
        be_batch b = {.T = NP, .tokens = tok, .n_logits = 1, .logits = l1};
        CHECK(be_cpu.forward(st, &b) == 0, "prompt: %s", dfl_lasterr());
        tok[NP] = smp_argmax(l1, V);
        for (int i = 0; i < NG - 1; i++) { /* logits of row i predict tok[NP + i + 1] */
            be_batch b1 = {.T = 1, .tokens = tok + NP + i, .n_logits = 1, .logits = l1 + (size_t)i * V};
            CHECK(be_cpu.forward(st, &b1) == 0, "decode: %s", dfl_lasterr());
            tok[NP + i + 1] = smp_argmax(l1 + (size_t)i * V, V);
        }
        be_cpu.truncate(st, NP);
        be_batch bv = {.T = NG - 1, .tokens = tok + NP, .n_logits = NG - 1, .logits = lb};
        CHECK(be_cpu.forward(st, &bv) == 0, "verify: %s", dfl_lasterr());
        int same = 1, distinct = 0;
        for (int i = 0; i < NG - 1; i++) {
            same &= smp_argmax(lb + (size_t)i * V, V) == tok[NP + i + 1];
            distinct += tok[NP + i + 1] != tok[NP + i];
        }
        CHECK(same && !memcmp(l1, lb, sizeof(float) * (size_t)V * (NG - 1)),
              "q8 mode %d: the verify block differs from decoding one token at a time", q8);
        CHECK(distinct > 0, "degenerate greedy run");
        be_cpu.destroy(st);
        be_cpu.release(be, &m);
        be_cpu.close(be);
        free(l1);
        free(lb);
        mdl_free(&m);
    }
    kn_set_act_quant(-1);
}

/* With LLAMA_CPP_BIN (a llama.cpp build directory) set: from the same F16
 * source, llama-quantize --pure and dflash convert write byte-identical
 * Q8_0 and Q4_0 tensors. Without it the test says it was skipped. */
TEST(llama_quantize_same_bytes) {
    const char *lb = getenv("LLAMA_CPP_BIN");
    if (!lb || !*lb) {
        fprintf(stderr, "  skipped: set LLAMA_CPP_BIN to a llama.cpp build's bin directory\n");
        return;
    }
    const char *types[2][2] = {{"q8_0", "Q8_0"}, {"q4_0", "Q4_0"}};
    for (int k = 0; k < 2; k++) {
        char cmd[2048], lq[600], dq[600];
        snprintf(lq, sizeof lq, "%s/llama-%s.gguf", tmpdir, types[k][0]);
        snprintf(dq, sizeof dq, "%s/dflash-%s.gguf", tmpdir, types[k][0]);
        snprintf(cmd, sizeof cmd, "'%s/llama-quantize' --pure '%s' '%s' %s >/dev/null 2>&1", lb, qwen_f16, lq,
                 types[k][1]);
        CHECK(system(cmd) == 0, "llama-quantize failed: %s", cmd);
        CHECK(convert("tests/models/tiny-qwen3", dq, types[k][0]) == 0, "convert");
        gguf_file a, b;
        if (gguf_open(&a, lq) != 0) continue;
        if (gguf_open(&b, dq) == 0) {
            int same = 0;
            for (int i = 0; i < b.n_tensors; i++) {
                const gguf_tensor *x = &b.t[i], *y = gguf_find_tensor(&a, x->name);
                int eq = y && x->type == y->type && x->nbytes == y->nbytes && !memcmp(x->data, y->data, x->nbytes);
                CHECK(eq, "%s: tensor %s differs from llama-quantize's", types[k][0], x->name);
                same += eq;
            }
            CHECK(a.n_tensors == b.n_tensors, "tensor counts %d %d", a.n_tensors, b.n_tensors);
            fprintf(stderr, "  %s: %d of %d tensors byte-identical to llama-quantize's\n", types[k][0], same,
                    b.n_tensors);
            gguf_close(&b);
        }
        gguf_close(&a);
    }
}

/* bad draft metadata, through dflash_load with the demo target */
TEST(bad_drafts) {
    const char *good = path("draft.gguf", NULL); /* from convert_draft */
    rewrite_src = good;
    static const struct {
        const char *what, *drop, *set;
        double nval;
        const char *expect;
    } cases[] = {
        {"no mask token", "tokenizer.ggml.mask_token_id", NULL, 0, "missing key 'tokenizer.ggml.mask_token_id'"},
        {"no target layers", "dflash.target_layers", NULL, 0, "'dflash.target_layers' must be an array"},
        {"target layers a number", NULL, "dflash.target_layers", 3, "'dflash.target_layers' must be an array"},
        {"no block size", "dflash.block_size", NULL, 0, "missing key 'dflash.block_size'"},
        {"block size 1", NULL, "dflash.block_size", 1, "block_size 1 must be in 2..64"},
        {"mask token past the vocabulary", NULL, "tokenizer.ggml.mask_token_id", 1e9, "mask_token_id"},
        {"other hidden size", NULL, "dflash.embedding_length", 512, "tensor 'fc.weight': shape [768, 256]"},
    };
    dflash_params p = dflash_default_params();
    p.n_threads = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *f = rewrite(cases[i].drop, cases[i].set, 'u', NULL, cases[i].nval, NULL, NULL);
        dflash_model *m = dflash_load("models/demo/target", f, &p);
        const char *e = dflash_error();
        CHECK(!m, "%s: loaded", cases[i].what);
        if (m) {
            dflash_free(m);
            continue;
        }
        CHECK(strstr(e, cases[i].expect) && !strchr(e, '\n'), "%s: '%s'", cases[i].what, e);
    }
    rewrite_src = qwen_f16;
}

/* --------------------------------------------- a plain prompt's specials */

/* SRC with the keys DROP[0..nd) left out and the edits SET[0..ns) put in
 * their place or added (kind 'b' bool, 'u' uint32, 's' string), tensors
 * copied; written to tmpdir/NAME. */
typedef struct {
    const char *key;
    int kind;
    const char *s;
    double v;
} kv_edit;

static void put_edit(gguf_writer *w, const kv_edit *e) {
    if (e->kind == 'b') gguf_w_bool(w, e->key, e->v != 0);
    else if (e->kind == 's') gguf_w_str(w, e->key, e->s);
    else gguf_w_u32(w, e->key, (uint32_t)e->v);
}

static const char *edit_kvs(const char *src, const char *name, const char *const *drop, int nd, const kv_edit *set,
                            int ns) {
    const char *out = path(name, NULL);
    gguf_file g;
    if (gguf_open(&g, src) != 0) return out;
    gguf_writer *w = gguf_w_new();
    int done[8] = {0};
    for (int i = 0; i < g.n_kv; i++) {
        const gguf_kv *kv = &g.kv[i];
        int skip = 0;
        for (int k = 0; k < nd; k++) skip |= !strcmp(kv->key, drop[k]);
        for (int k = 0; k < ns && !skip; k++)
            if (!strcmp(kv->key, set[k].key)) {
                put_edit(w, &set[k]);
                done[k] = skip = 1;
            }
        if (!skip) gguf_w_copy_kv(w, kv);
    }
    for (int k = 0; k < ns; k++)
        if (!done[k]) put_edit(w, &set[k]);
    for (int i = 0; i < g.n_tensors; i++) {
        const gguf_tensor *t = &g.t[i];
        gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
    }
    if (gguf_w_write(w, out) != 0) fprintf(stderr, "  edit_kvs: %s\n", dfl_lasterr());
    gguf_w_free(w);
    gguf_close(&g);
    return out;
}

static const char *const pp_texts[] = {"Hello world", "", "<|im_end|> x\n\ty", "héllo wörld 123"};
enum { N_PP_TEXTS = sizeof pp_texts / sizeof pp_texts[0] };

/* PATH's tokenizer gives text i the ids BOS? + its tok_encode ids + EOS?
 * (-1: none) as a plain prompt, and tok_encode's unchanged */
static int prompt_ids_are(const char *what, const char *file, int bos, int eos) {
    dflash_model *m = dflash_load_tokenizer(file);
    if (!m) {
        fprintf(stderr, "  %s: %s\n", what, dflash_error());
        return 0;
    }
    int ok = 1;
    for (int i = 0; i < N_PP_TEXTS && ok; i++) {
        int32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        const char *t = pp_texts[i];
        ok = dflash_tokenize(m, t, strlen(t), &a, &na) == 0 && dflash_tokenize_prompt(m, t, strlen(t), &b, &nb) == 0;
        size_t pre = bos >= 0, post = eos >= 0;
        ok = ok && nb == na + pre + post && (!pre || b[0] == bos) && (!post || b[nb - 1] == eos) &&
             (!na || !memcmp(b + pre, a, na * sizeof *a));
        if (!ok) fprintf(stderr, "  %s: text %d: %zu ids, %zu as a plain prompt\n", what, i, na, nb);
        free(a);
        free(b);
    }
    dflash_free(m);
    return ok;
}

/* FILE's chat prompt for one user turn, as ids (the chat path: the
 * template writes its special tokens, tok_encode adds none); NULL on error */
static int32_t *chat_ids(const char *file, size_t *n) {
    dflash_model *m = dflash_load_tokenizer(file);
    int32_t *ids = NULL;
    *n = 0;
    dflash_message msg = {"user", "Hello there"};
    char *s = m ? dflash_chat_prompt(m, &msg, 1, 1, -1) : NULL;
    if (!s || dflash_tokenize(m, s, strlen(s), &ids, n) != 0) fprintf(stderr, "  chat_ids: %s\n", dflash_error());
    free(s);
    dflash_free(m);
    return ids;
}

/* A GGUF tokenizer's plain prompt: tokenizer.ggml.add_bos_token /
 * add_eos_token as llama.cpp reads them (absent: true for the Llama-3
 * pre-tokenizer, else false; add_eos false); bad values refused at load
 * naming the key. The tiny-qwen3 GGUF of convert_qwen3, edited. */
TEST(gguf_prompt_specials) {
    gguf_file g;
    int ab = -1, ae = -1;
    int64_t bos = -1;
    if (gguf_open(&g, qwen_f16) != 0) return;
    CHECK(gguf_get_bool(&g, "tokenizer.ggml.add_bos_token", &ab, 1) == 0 && ab == 0 &&
              gguf_get_bool(&g, "tokenizer.ggml.add_eos_token", &ae, 1) == 0 && ae == 0 &&
              gguf_get_int(&g, "tokenizer.ggml.bos_token_id", &bos, 1) == 0 && bos == 151643,
          "qwen3 GGUF: add_bos_token %d, add_eos_token %d, bos %lld", ab, ae, (long long)bos);
    gguf_close(&g);
    const int BOS = 151643, EOS = 151645;
    CHECK(prompt_ids_are("qwen3 GGUF as converted", qwen_f16, -1, -1), "qwen3 GGUF");
    CHECK(prompt_ids_are("qwen3 tokenizer.json", "tests/models/tiny-qwen3", -1, -1), "qwen3 tokenizer.json");
    /* the same ids from the GGUF and from tokenizer.json (ByteLevel post_processor: none) */
    dflash_model *a = dflash_load_tokenizer(qwen_f16), *b = dflash_load_tokenizer("tests/models/tiny-qwen3");
    for (int i = 0; a && b && i < N_PP_TEXTS; i++) {
        int32_t *x = NULL, *y = NULL;
        size_t nx = 0, ny = 0;
        const char *t = pp_texts[i];
        CHECK(dflash_tokenize_prompt(a, t, strlen(t), &x, &nx) == 0 &&
                  dflash_tokenize_prompt(b, t, strlen(t), &y, &ny) == 0 && nx == ny &&
                  (!nx || !memcmp(x, y, nx * sizeof *x)),
              "text %d: GGUF and tokenizer.json plain-prompt ids differ", i);
        free(x);
        free(y);
    }
    dflash_free(a);
    dflash_free(b);
    static const char *const add_bos = "tokenizer.ggml.add_bos_token", *const add_eos = "tokenizer.ggml.add_eos_token",
                             *const bos_id = "tokenizer.ggml.bos_token_id", *const eos_id = "tokenizer.ggml.eos_token_id",
                             *const pre = "tokenizer.ggml.pre";
    static const struct {
        const char *what, *drop[2];
        kv_edit set[2];
        int bos, eos;
        const char *err;
    } cases[] = {
        {"add_bos_token true", {NULL}, {{add_bos, 'b', NULL, 1}}, BOS, -1, NULL},
        {"add_bos_token absent, qwen2", {add_bos}, {{NULL}}, -1, -1, NULL},
        {"add_bos_token absent, llama-bpe", {add_bos}, {{pre, 's', "llama-bpe", 0}}, BOS, -1, NULL},
        {"add_bos_token false, llama-bpe", {NULL}, {{pre, 's', "llama-bpe", 0}}, -1, -1, NULL},
        {"add_bos_token absent, llama-bpe, no bos id", {add_bos, bos_id}, {{pre, 's', "llama-bpe", 0}}, -1, -1, NULL},
        {"add_eos_token true", {NULL}, {{add_eos, 'b', NULL, 1}}, -1, EOS, NULL},
        {"add_eos_token absent", {add_eos}, {{NULL}}, -1, -1, NULL},
        {"both true", {NULL}, {{add_bos, 'b', NULL, 1}, {add_eos, 'b', NULL, 1}}, BOS, EOS, NULL},
        {"another bos id", {NULL}, {{add_bos, 'b', NULL, 1}, {bos_id, 'u', NULL, 151644}}, 151644, -1, NULL},
        {"add_bos_token a string", {NULL}, {{add_bos, 's', "true", 0}}, 0, 0,
         "key 'tokenizer.ggml.add_bos_token' is string, expected bool"},
        {"add_eos_token an integer", {NULL}, {{add_eos, 'u', NULL, 1}}, 0, 0,
         "key 'tokenizer.ggml.add_eos_token' is uint32, expected bool"},
        {"bos id out of range, not added", {NULL}, {{bos_id, 'u', NULL, 1e9}}, -1, -1, NULL},
        {"bos id out of range, added", {NULL}, {{add_bos, 'b', NULL, 1}, {bos_id, 'u', NULL, 1e9}}, 0, 0,
         "tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id 1000000000 is not a token"},
        {"bos id a string", {NULL}, {{bos_id, 's', "1", 0}}, 0, 0,
         "key 'tokenizer.ggml.bos_token_id' is string, expected an integer"},
        {"add_bos_token true, no bos id", {bos_id}, {{add_bos, 'b', NULL, 1}}, 0, 0,
         "tokenizer.ggml.add_bos_token is true but there is no tokenizer.ggml.bos_token_id"},
        {"add_eos_token true, no eos id", {eos_id}, {{add_eos, 'b', NULL, 1}}, 0, 0,
         "tokenizer.ggml.add_eos_token is true but there is no tokenizer.ggml.eos_token_id"},
    };
    dflash_params p = dflash_default_params();
    p.n_threads = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int nd = cases[i].drop[1] ? 2 : cases[i].drop[0] ? 1 : 0, ns = cases[i].set[1].key ? 2 : cases[i].set[0].key ? 1 : 0;
        const char *f = edit_kvs(qwen_f16, "specials.gguf", cases[i].drop, nd, cases[i].set, ns);
        if (!cases[i].err) {
            CHECK(prompt_ids_are(cases[i].what, f, cases[i].bos, cases[i].eos), "%s", cases[i].what);
            /* a chat prompt is untouched by the flags: no BOS of theirs before the template's text */
            size_t nc = 0, nr = 0;
            int32_t *c = chat_ids(f, &nc), *r = chat_ids(qwen_f16, &nr);
            CHECK(c && r && nc == nr && !memcmp(c, r, nc * sizeof *c) && c[0] != BOS, "%s: chat ids differ",
                  cases[i].what);
            free(c);
            free(r);
            continue;
        }
        /* refused at load: the tokenizer alone, and the model with it */
        for (int k = 0; k < 2; k++) {
            dflash_model *m = k ? dflash_load(f, NULL, &p) : dflash_load_tokenizer(f);
            const char *e = dflash_error();
            CHECK(!m && strstr(e, f) && strstr(e, cases[i].err) && !strchr(e, '\n'), "%s (%s): '%s'", cases[i].what,
                  k ? "dflash_load" : "dflash_load_tokenizer", m ? "loaded" : e);
            dflash_free(m);
        }
    }
}

/* tiny-qwen3 with Qwen3's tokenizer.json given another post_processor PP
 * (JSON), in tmpdir/NAME */
static const char *qwen_with_pp(const char *name, const char *pp) {
    static cJSON *tok;
    const char *dir = path(name, NULL);
    mkdir(dir, 0777);
    if (!tok) {
        char *txt = dfl_read_file("tests/models/tiny-qwen3/tokenizer.json", NULL);
        tok = txt ? cJSON_Parse(txt) : NULL;
        free(txt);
        if (!tok) return dir;
    }
    cJSON_ReplaceItemInObjectCaseSensitive(tok, "post_processor", cJSON_Parse(pp));
    char *s = cJSON_PrintUnformatted(tok);
    char p[700], cwd[4096], src[4300];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    write_file(p, s, strlen(s));
    free(s);
    if (!getcwd(cwd, sizeof cwd)) return dir;
    const char *links[] = {"config.json", "generation_config.json", "model.safetensors", "tokenizer_config.json"};
    for (int i = 0; i < 4; i++) {
        snprintf(src, sizeof src, "%s/tests/models/tiny-qwen3/%s", cwd, links[i]);
        snprintf(p, sizeof p, "%s/%s", dir, links[i]);
        if (symlink(src, p) != 0) fprintf(stderr, "symlink %s\n", p);
    }
    return dir;
}

/* dflash convert writes what tokenizer.json's post_processor adds to a plain
 * prompt as add_bos_token / add_eos_token (Qwen3: false, convert_qwen3),
 * so the GGUF's plain-prompt ids are tokenizer.json's; a post_processor
 * GGUF cannot express is refused. */
TEST(convert_prompt_specials) {
#define SP(name, id) "{\"id\":\"" name "\",\"ids\":[" #id "],\"tokens\":[\"" name "\"]}"
#define TOK(name) "{\"SpecialToken\":{\"id\":\"" name "\",\"type_id\":0}}"
#define SEQ_A "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}"
    static const struct {
        const char *what, *pp;
        int bos, eos; /* the GGUF's add_bos_token / add_eos_token ids (-1: false) */
        const char *err;
    } cases[] = {
        /* Llama-3's form: ByteLevel then TemplateProcessing; <|im_start|> over config.json's bos 151643 */
        {"a token before",
         "{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":"
         "false,\"use_regex\":false},{\"type\":\"TemplateProcessing\",\"single\":[" TOK("<|im_start|>") "," SEQ_A
         "],\"pair\":[],\"special_tokens\":{\"<|im_start|>\":" SP("<|im_start|>", 151644) "}}]}",
         151644, -1, NULL},
        {"eos after",
         "{\"type\":\"TemplateProcessing\",\"single\":[" SEQ_A "," TOK("<|im_end|>") "],\"special_tokens\":{"
         "\"<|im_end|>\":" SP("<|im_end|>", 151645) "}}",
         -1, 151645, NULL},
        {"both",
         "{\"type\":\"TemplateProcessing\",\"single\":[" TOK("<|endoftext|>") "," SEQ_A "," TOK("<|im_end|>")
         "],\"special_tokens\":{\"<|endoftext|>\":" SP("<|endoftext|>", 151643) ",\"<|im_end|>\":"
         SP("<|im_end|>", 151645) "}}",
         151643, 151645, NULL},
        {"two before",
         "{\"type\":\"TemplateProcessing\",\"single\":[" TOK("<|endoftext|>") "," TOK("<|im_start|>") "," SEQ_A
         "],\"special_tokens\":{\"<|endoftext|>\":" SP("<|endoftext|>", 151643) ",\"<|im_start|>\":"
         SP("<|im_start|>", 151644) "}}",
         0, 0, "post_processor puts 2 special tokens before and 0 after"},
        {"a non-eos token after",
         "{\"type\":\"TemplateProcessing\",\"single\":[" SEQ_A "," TOK("<|endoftext|>") "],\"special_tokens\":{"
         "\"<|endoftext|>\":" SP("<|endoftext|>", 151643) "}}",
         0, 0, "appends token 151643, which is not the eos token (151645)"},
        {"RobertaProcessing", "{\"type\":\"RobertaProcessing\",\"sep\":[\"</s>\",2],\"cls\":[\"<s>\",0]}", 0, 0,
         "post_processor type \"RobertaProcessing\" is not supported"},
    };
#undef SP
#undef TOK
#undef SEQ_A
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "pp%zu", i);
        const char *dir = qwen_with_pp(name, cases[i].pp);
        char out[600];
        snprintf(out, sizeof out, "%s/pp%zu.gguf", tmpdir, i);
        int rc = ggm_convert(dir, out, "f16", NULL);
        if (cases[i].err) {
            const char *e = dfl_lasterr();
            CHECK(rc != 0 && strstr(e, cases[i].err) && strstr(e, "tokenizer.json") && !strchr(e, '\n'), "%s: '%s'",
                  cases[i].what, rc ? e : "converted");
            continue;
        }
        CHECK(rc == 0, "%s: convert: %s", cases[i].what, dfl_lasterr());
        if (rc) continue;
        gguf_file g;
        int ab = -1, ae = -1;
        int64_t bos = -1;
        if (gguf_open(&g, out) != 0) continue;
        CHECK(gguf_get_bool(&g, "tokenizer.ggml.add_bos_token", &ab, 1) == 0 && ab == (cases[i].bos >= 0) &&
                  gguf_get_bool(&g, "tokenizer.ggml.add_eos_token", &ae, 1) == 0 && ae == (cases[i].eos >= 0) &&
                  gguf_get_int(&g, "tokenizer.ggml.bos_token_id", &bos, 1) == 0 &&
                  bos == (cases[i].bos >= 0 ? cases[i].bos : 151643),
              "%s: add_bos_token %d, add_eos_token %d, bos %lld", cases[i].what, ab, ae, (long long)bos);
        gguf_close(&g);
        /* both give BOS? + ids + EOS?, so the same ids */
        CHECK(prompt_ids_are(cases[i].what, dir, cases[i].bos, cases[i].eos), "%s: tokenizer.json", cases[i].what);
        CHECK(prompt_ids_are(cases[i].what, out, cases[i].bos, cases[i].eos), "%s: GGUF", cases[i].what);
    }
}


/* ---- gpt-oss and Gemma-4 as llama.cpp's converter writes them ------------
 *
 * tests/fixtures/gguf/tiny-{gptoss-mxfp4,gemma4,gemma4-kv}-v1k.gguf come from
 * tools/llama/zoo_gguf.sh: tools/llama/zoo_cut.py cuts the tiny models'
 * vocabularies to 1024 tokens (the files stay small) and encodes
 * tiny-gptoss's experts in MXFP4 as openai's checkpoints store them, then
 * llama.cpp's convert_hf_to_gguf.py writes bf16 files (the MXFP4 experts
 * as GGML MXFP4). zoo2_cut makes the same checkpoints here, by the same
 * rules, so the GGUF files are compared with the safetensors checkpoints
 * they came from. */
static const double fp4v[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};
enum { ZOO2_V = 1024 };

/* w [rows][cols] (element (r, k) at w[r * rs + k * ks], bf16 bits) as MXFP4
 * rows: blocks [rows][cols/32][16], scales [rows][cols/32] (zoo_cut.py's
 * rules: e the smallest >= -125 with 6 * 2^e >= max |x|, -20 for zeros;
 * the nearest code, the lowest on ties; all exact in double). */
static void zoo2_encode(const uint16_t *w, size_t rs, size_t ks, int rows, int cols, uint8_t *blk, uint8_t *sc) {
    for (int r = 0; r < rows; r++)
        for (int b = 0; b < cols / 32; b++) {
            double x[32], amax = 0;
            /* a compare, not fmax: aarch64 gcc 12's vectorizer dies on the
             * fmax reduction here (internal compiler error, -O2) */
            for (int j = 0; j < 32; j++) {
                x[j] = dfl_bf16_to_f32(w[r * rs + (size_t)(b * 32 + j) * ks]);
                double a = fabs(x[j]);
                if (a > amax) amax = a;
            }
            int e = -20;
            if (amax > 0)
                for (e = -125; ldexp(6.0, e) < amax; e++) {}
            sc[(size_t)r * (cols / 32) + b] = (uint8_t)(e + 127);
            uint8_t *o = blk + ((size_t)r * (cols / 32) + b) * 16;
            for (int j = 0; j < 32; j++) {
                double y = ldexp(x[j], -e);
                int best = 0;
                for (int c = 1; c < 16; c++)
                    if (fabs(fp4v[c] - y) < fabs(fp4v[best] - y)) best = c;
                if (j % 2 == 0) o[j / 2] = (uint8_t)best;
                else o[j / 2] |= (uint8_t)(best << 4);
            }
        }
}

static int ends_with(const char *s, const char *t) {
    size_t a = strlen(s), b = strlen(t);
    return a >= b && !strcmp(s + a - b, t);
}

/* tests/models/NAME cut to ZOO2_V tokens (MX: experts in MXFP4) in DIR. */
static int zoo2_cut(const char *name, const char *dir, int mx) {
    char src[256];
    snprintf(src, sizeof src, "tests/models/%s/model.safetensors", name);
    st_set in;
    if (st_open_file(&in, src) != 0) {
        CHECK(0, "%s", dfl_lasterr());
        return -1;
    }
    mkdir(dir, 0777);
    snprintf(src, sizeof src, "tests/models/%s/config.json", name);
    char *txt = dfl_read_file(src, NULL);
    cJSON *j = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    if (!j) {
        st_close(&in);
        return -1;
    }
    cJSON_ReplaceItemInObject(j, "vocab_size", cJSON_CreateNumber(ZOO2_V));
    if (cJSON_GetObjectItemCaseSensitive(j, "vocab_size_per_layer_input"))
        cJSON_ReplaceItemInObject(j, "vocab_size_per_layer_input", cJSON_CreateNumber(ZOO2_V));
    if (mx) cJSON_AddStringToObject(cJSON_AddObjectToObject(j, "quantization_config"), "quant_method", "mxfp4");
    char *out = cJSON_Print(j), *cp = dfl_path_join(dir, "config.json");
    write_file(cp, out, strlen(out));
    free(out);
    free(cp);
    cJSON_Delete(j);
    st_out *o = calloc((size_t)2 * in.n, sizeof(st_out));
    void **bufs = calloc((size_t)2 * in.n, sizeof(void *));
    char (*names)[128] = calloc((size_t)2 * in.n, 128);
    int n = 0, nb = 0;
    for (int i = 0; i < in.n; i++) {
        const st_tensor *t = &in.t[i];
        st_out k = {t->name, t->dtype, t->ndim, {t->shape[0], t->shape[1], t->shape[2], t->shape[3]}, t->data};
        if (ends_with(t->name, "embed_tokens.weight") || ends_with(t->name, "lm_head.weight") ||
            ends_with(t->name, "embed_tokens_per_layer.weight"))
            k.shape[0] = ZOO2_V; /* the first rows, as they are */
        if (mx && (ends_with(t->name, "experts.gate_up_proj") || ends_with(t->name, "experts.down_proj"))) {
            int E = (int)t->shape[0], cin = (int)t->shape[1], cout = (int)t->shape[2];
            size_t per = (size_t)cin * cout;
            uint8_t *blk = bufs[nb++] = malloc((size_t)E * per / 2), *sc = bufs[nb++] = malloc((size_t)E * per / 32);
            for (int e = 0; e < E; e++) /* stored input-major [E, in, out]: output row r, input k at [e][k][r] */
                zoo2_encode((const uint16_t *)t->data + (size_t)e * per, 1, (size_t)cout, cout, cin,
                            blk + (size_t)e * per / 2, sc + (size_t)e * per / 32);
            snprintf(names[2 * i], 128, "%s_blocks", t->name);
            snprintf(names[2 * i + 1], 128, "%s_scales", t->name);
            o[n++] = (st_out){names[2 * i], ST_U8, 4, {E, cout, cin / 32, 16}, blk};
            o[n++] = (st_out){names[2 * i + 1], ST_U8, 3, {E, cout, cin / 32, 0}, sc};
            continue;
        }
        o[n++] = k;
    }
    char *pm = dfl_path_join(dir, "model.safetensors");
    int rc = st_write(pm, o, n, NULL);
    CHECK(rc == 0, "write %s: %s", pm, dfl_lasterr());
    free(pm);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    free(bufs);
    free(names);
    free(o);
    st_close(&in);
    return rc;
}

/* Logits [T][V] of M on TOK (CPU backend). */
static void zoo2_logits(void *be, const mdl_model *m, const int32_t *tok, int T, float *out) {
    void *st = be_cpu.create(be, m, 256);
    be_batch b = {.T = T, .tokens = tok, .n_logits = T, .logits = out};
    CHECK(st && be_cpu.forward(st, &b) == 0, "forward: %s", dfl_lasterr());
    if (st) be_cpu.destroy(st);
}

/* The two models' configs say the same where it matters here. */
static int zoo2_same_cfg(const cfg_model *a, const cfg_model *b) {
    int n = a->n_layers;
    return a->arch == b->arch && a->hidden == b->hidden && a->n_layers == b->n_layers && a->n_heads == b->n_heads &&
           a->n_kv_heads == b->n_kv_heads && a->head_dim == b->head_dim && a->vocab == b->vocab &&
           a->eps == b->eps && a->rope_theta == b->rope_theta && a->tie_embeddings == b->tie_embeddings &&
           a->inter == b->inter && a->n_experts == b->n_experts && a->n_experts_used == b->n_experts_used &&
           a->moe_inter == b->moe_inter && a->attn_bias == b->attn_bias && a->attn_sinks == b->attn_sinks &&
           a->window == b->window && a->n_sliding_layers == b->n_sliding_layers &&
           !memcmp(a->sliding_layer, b->sliding_layer, (size_t)n) && a->swiglu_limit == b->swiglu_limit &&
           a->rope_yarn == b->rope_yarn && a->yarn_truncate == b->yarn_truncate && a->rope_factor == b->rope_factor &&
           a->rope_orig_max_pos == b->rope_orig_max_pos && a->yarn_beta_fast == b->yarn_beta_fast &&
           a->yarn_beta_slow == b->yarn_beta_slow && a->yarn_attn_factor == b->yarn_attn_factor &&
           a->attn_scale == b->attn_scale && a->v_norm == b->v_norm && a->k_eq_v == b->k_eq_v &&
           a->geglu == b->geglu && a->ple == b->ple && a->softcap == b->softcap && a->full_theta == b->full_theta &&
           a->full_factor == b->full_factor && a->full_rot == b->full_rot && a->qk_norm == b->qk_norm &&
           !memcmp(a->layer_hd, b->layer_hd, sizeof(a->layer_hd[0]) * (size_t)n) &&
           !memcmp(a->layer_kv, b->layer_kv, sizeof(a->layer_kv[0]) * (size_t)n);
}

/* GGUF = checkpoint: config, logits bit for bit on a prompt longer than the
 * sliding window (f32 activations and the default mode), and 16 greedy
 * tokens. */
static void zoo2_compare(const char *what, const char *gguf, const char *dir) {
    mdl_model hf, gg;
    if (mdl_load(&hf, dir) != 0) {
        CHECK(0, "%s: load %s: %s", what, dir, dfl_lasterr());
        return;
    }
    if (mdl_load(&gg, gguf) != 0) {
        CHECK(0, "%s: load %s: %s", what, gguf, dfl_lasterr());
        mdl_free(&hf);
        return;
    }
    CHECK(zoo2_same_cfg(&hf.cfg, &gg.cfg), "%s: the GGUF's config differs from the checkpoint's", what);
    /* the converter writes gpt-oss's routers F32 (the same values): with
     * bf16 weights the default mode rounds activations to bf16, with f32
     * ones not, so the checkpoint's routers become the same F32 here */
    for (int l = 0; l < hf.cfg.n_layers; l++) {
        wt_weight *r = &hf.layers[l].router;
        if (r->rows && r->dtype == WT_BF16 && gg.layers[l].router.dtype == WT_F32) {
            float *f = mdl_own(&hf, sizeof(float) * (size_t)r->rows * r->cols);
            for (int i = 0; i < r->rows; i++) wt_get_row(f + (size_t)i * r->cols, r, i);
            r->data = f;
            r->dtype = WT_F32;
        }
    }
    be_options bo = {.n_threads = 2};
    void *be = be_cpu.open(&bo);
    int prev = kn_act_quant(), V = hf.cfg.vocab;
    enum { T = 20, N = 16 };
    int32_t tok[T + N];
    for (int i = 0; i < T; i++) tok[i] = (int32_t)((i * 397 + 11) % ZOO2_V);
    float *la = malloc(sizeof(float) * (T + N) * (size_t)V), *lb = malloc(sizeof(float) * (T + N) * (size_t)V);
    for (int mode = 0; mode < 2; mode++) {
        kn_set_act_quant(mode ? prev : 0);
        zoo2_logits(be, &hf, tok, T, la);
        zoo2_logits(be, &gg, tok, T, lb);
        float d = 0;
        for (size_t i = 0; i < (size_t)T * V; i++) d = fmaxf(d, fabsf(la[i] - lb[i]));
        CHECK(!memcmp(la, lb, sizeof(float) * T * (size_t)V), "%s (%s activations): logits differ by up to %g", what,
              mode ? "default" : "f32", d);
        if (mode && !prev) break;
    }
    /* greedy: the argmax of each step's last row, both models */
    int32_t ya[T + N], yb[T + N];
    memcpy(ya, tok, sizeof tok[0] * T);
    memcpy(yb, tok, sizeof tok[0] * T);
    for (int s = 0; s < N; s++) {
        zoo2_logits(be, &hf, ya, T + s, la);
        zoo2_logits(be, &gg, yb, T + s, lb);
        ya[T + s] = smp_argmax(la + (size_t)(T + s - 1) * V, V);
        yb[T + s] = smp_argmax(lb + (size_t)(T + s - 1) * V, V);
    }
    CHECK(!memcmp(ya, yb, sizeof ya), "%s: greedy tokens differ", what);
    kn_set_act_quant(prev);
    fprintf(stderr, "  %s: GGUF logits bit-identical to the checkpoint's, %d greedy tokens equal\n", what, N);
    free(la);
    free(lb);
    be_cpu.close(be);
    mdl_free(&hf);
    mdl_free(&gg);
}

/* SRC with byte OFF of tensor NAME's data set to V, as tmpdir/OUT. */
static const char *poke_tensor(const char *src, const char *out, const char *name, size_t off, const void *v, size_t n) {
    const char *p = path(out, NULL);
    gguf_file g;
    if (gguf_open(&g, src) != 0) return p;
    const gguf_tensor *t = gguf_find_tensor(&g, name);
    size_t len = 0;
    char *b = dfl_read_file(src, &len);
    if (t && b && g.data_off + t->offset + off + n <= len) {
        memcpy(b + g.data_off + t->offset + off, v, n);
        write_file(p, b, len);
    }
    free(b);
    gguf_close(&g);
    return p;
}

/* P kept (path() has four buffers): one of 16 slots. */
static const char *kept(const char *p) {
    static char b[16][512];
    static int k;
    k = (k + 1) % 16;
    snprintf(b[k], sizeof b[k], "%s", p);
    return b[k];
}

/* Bad gpt-oss / gemma4 metadata and tensors fail at load with one line
 * naming the key or tensor. */
TEST(bad_zoo2_models) {
    const char *go = "tests/fixtures/gguf/tiny-gptoss-mxfp4-v1k.gguf", *g4 = "tests/fixtures/gguf/tiny-gemma4-v1k.gguf";
    static const char *const no_pat[] = {"gemma4.attention.sliding_window_pattern"};
    static const char *const no_eff[] = {"gpt-oss.expert_feed_forward_length"};
    struct {
        const char *what, *file, *expect;
    } cases[] = {
        {"shared kv", kept(edit_kvs(g4, "z1.gguf", NULL, 0, &(kv_edit){"gemma4.attention.shared_kv_layers", 'u', NULL, 2}, 1)),
         "gemma4.attention.shared_kv_layers 2"},
        {"gemma4 MoE", kept(edit_kvs(g4, "z2.gguf", NULL, 0, &(kv_edit){"gemma4.expert_count", 'u', NULL, 4}, 1)),
         "key 'gemma4.expert_count' is not supported"},
        {"no swa pattern", kept(edit_kvs(g4, "z3.gguf", no_pat, 1, NULL, 0)), "gemma4.attention.sliding_window_pattern"},
        {"swa rope dims", kept(edit_kvs(g4, "z4.gguf", NULL, 0, &(kv_edit){"gemma4.rope.dimension_count_swa", 'u', NULL, 8}, 1)),
         "rope.dimension_count_swa 8"},
        {"gemma4 softcap", kept(edit_kvs(g4, "z5.gguf", NULL, 0, &(kv_edit){"gemma4.attn_logit_softcapping", 'u', NULL, 50}, 1)),
         "key 'gemma4.attn_logit_softcapping' is not supported"},
        {"rope linear", kept(edit_kvs(go, "z6.gguf", NULL, 0, &(kv_edit){"gpt-oss.rope.scaling.type", 's', "linear", 0}, 1)),
         "gpt-oss.rope.scaling.type 'linear' not supported"},
        {"gating", kept(edit_kvs(go, "z7.gguf", NULL, 0, &(kv_edit){"gpt-oss.expert_gating_func", 'u', NULL, 1}, 1)),
         "gpt-oss.expert_gating_func 1"},
        {"yarn attn factor",
         kept(edit_kvs(go, "z8.gguf", NULL, 0, &(kv_edit){"gpt-oss.rope.scaling.yarn_ext_factor", 'u', NULL, 1}, 1)),
         "key 'gpt-oss.rope.scaling.yarn_ext_factor' is not supported"},
        {"no expert ff", kept(edit_kvs(go, "z9.gguf", no_eff, 1, NULL, 0)), "gpt-oss.expert_feed_forward_length"},
        {"mxfp4 scale", kept(poke_tensor(go, "z10.gguf", "blk.1.ffn_down_exps.weight", 17 * 5, &(uint8_t){255}, 1)),
         "tensor 'blk.1.ffn_down_exps.weight': MXFP4 scale byte 255"},
        {"rope_freqs", kept(poke_tensor(g4, "z11.gguf", "rope_freqs.weight", 4 * 2, &(float){0.5f}, 4)),
         "tensor 'rope_freqs.weight': entry 2 = 0.5"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mdl_model m;
        int rc = mdl_load(&m, cases[i].file);
        const char *e = dfl_lasterr();
        CHECK(rc != 0 && strstr(e, cases[i].expect) && !strchr(e, '\n'), "%s: %s", cases[i].what,
              rc ? e : "loaded");
        if (rc == 0) mdl_free(&m);
    }
}

TEST(llama_converter_zoo2) {
    static const struct {
        const char *fixture, *model;
        int mx;
    } cases[] = {
        {"tiny-gptoss-mxfp4-v1k", "tiny-gptoss", 1},
        {"tiny-gemma4-v1k", "tiny-gemma4", 0},
        {"tiny-gemma4-kv-v1k", "tiny-gemma4-kv", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *dir = path(cases[i].fixture, NULL);
        char f[256], d[512];
        snprintf(d, sizeof d, "%s", dir);
        snprintf(f, sizeof f, "tests/fixtures/gguf/%s.gguf", cases[i].fixture);
        if (zoo2_cut(cases[i].model, d, cases[i].mx) != 0) continue;
        zoo2_compare(cases[i].fixture, f, d);
    }
    /* the MXFP4 experts: every row of the GGUF's equals the checkpoint's bit for bit */
    mdl_model hf, gg;
    if (mdl_load(&hf, path("tiny-gptoss-mxfp4-v1k", NULL)) != 0) return;
    if (mdl_load(&gg, "tests/fixtures/gguf/tiny-gptoss-mxfp4-v1k.gguf") != 0) {
        mdl_free(&hf);
        return;
    }
    int bad = 0, n = 0;
    for (int l = 0; l < hf.cfg.n_layers; l++)
        for (int e = 0; e < hf.cfg.n_experts; e++, n += 3) {
            const mdl_expert *x = &gg.layers[l].experts[e], *y = &hf.layers[l].experts[e];
            bad |= x->wg.dtype != WT_MXFP4 || y->wd.dtype != WT_MXFP4 || !same_matrix(&x->wg, &y->wg) ||
                   !same_mx4(&x->wg, &y->wg) || !same_mx4(&x->wu, &y->wu) || !same_mx4(&x->wd, &y->wd) ||
                   !same_matrix(&x->wu, &y->wu) ||
                   !same_matrix(&x->wd, &y->wd) || memcmp(x->bg, y->bg, sizeof(float) * (size_t)hf.cfg.moe_inter) ||
                   memcmp(x->bd, y->bd, sizeof(float) * (size_t)hf.cfg.hidden);
        }
    CHECK(!bad && n > 0, "gpt-oss: MXFP4 experts of the GGUF differ from the checkpoint's (%d matrices)", n);
    mdl_free(&hf);
    mdl_free(&gg);
}

/* dflash convert of gpt-oss and Gemma-4 (llama.cpp's gpt-oss / gemma4): of
 * the three cut checkpoints at --type bf16, every key and tensor of the
 * converter's file (tests/fixtures/gguf/NAME-v1k.gguf; but skip_key's) with
 * the same value, type, shape and bytes (the MXFP4 experts included: the
 * blocks come back from the codes and scale bytes as loaded; nothing else
 * written), and the
 * file's logits bit-identical to the checkpoint's; the full tiny models
 * (gpt-oss's experts BF16) through f16 and q8_0 files: their greedy tokens
 * as the directory's (f16: the f16 rounding; q8_0 as --quant q8_0). */
TEST(convert_zoo2) {
    static const struct {
        const char *fixture, *model;
        int mx;
    } cases[] = {
        {"tiny-gptoss-mxfp4-v1k", "tiny-gptoss", 1},
        {"tiny-gemma4-v1k", "tiny-gemma4", 0},
        {"tiny-gemma4-kv-v1k", "tiny-gemma4-kv", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *name = cases[i].fixture;
        char dir[512], tok[128], ours_p[512], fx[160];
        snprintf(dir, sizeof dir, "%s", path(name, NULL));
        snprintf(ours_p, sizeof ours_p, "%s/%s-ours.gguf", tmpdir, name);
        snprintf(tok, sizeof tok, "tests/models/%s", cases[i].model);
        snprintf(fx, sizeof fx, "tests/fixtures/gguf/%s.gguf", name);
        if (zoo2_cut(cases[i].model, dir, cases[i].mx) != 0) continue;
        if (ggm_convert(dir, ours_p, "bf16", tok) != 0) {
            CHECK(0, "%s: convert: %s", name, dfl_lasterr());
            continue;
        }
        gguf_file ours, theirs;
        if (gguf_open(&ours, ours_p) || gguf_open(&theirs, fx)) {
            CHECK(0, "open: %s", dfl_lasterr());
            continue;
        }
        int nk = 0, nt = 0;
        for (int k = 0; k < theirs.n_kv; k++) {
            const gguf_kv *t = &theirs.kv[k], *o = gguf_find_kv(&ours, t->key);
            if (skip_key(t->key)) continue;
            nk++;
            CHECK(o && same_kv(o, t), "%s: key %s %s", name, t->key, o ? "differs" : "missing");
        }
        for (int k = 0; k < ours.n_kv; k++)
            CHECK(skip_key(ours.kv[k].key) || gguf_find_kv(&theirs, ours.kv[k].key), "%s: key %s not the converter's",
                  name, ours.kv[k].key);
        CHECK(ours.n_tensors == theirs.n_tensors, "%s: %d tensors, the converter's %d", name, ours.n_tensors,
              theirs.n_tensors);
        for (int k = 0; k < theirs.n_tensors; k++) {
            const gguf_tensor *t = &theirs.t[k], *o = gguf_find_tensor(&ours, t->name);
            int same = o && o->type == t->type && o->n_dims == t->n_dims && !memcmp(o->ne, t->ne, sizeof t->ne) &&
                       o->nbytes == t->nbytes && !memcmp(o->data, t->data, t->nbytes);
            nt += t->type == GGML_MXFP4;
            CHECK(same, "%s: tensor %s %s", name, t->name, o ? "differs" : "missing");
        }
        CHECK(nk > 15 && (!cases[i].mx || nt == 12), "%s: %d keys, %d MXFP4 tensors compared", name, nk, nt);
        gguf_close(&ours);
        gguf_close(&theirs);
        zoo2_compare(name, ours_p, dir);
    }
    /* the full tiny models: bf16 files decode as the directory does; f16
     * ones hold the f16 rounding; Q8_0 matrices are the engine's own Q8_0
     * (the converter's f16 fallbacks and f32 router aside, which --quant
     * q8_0 would quantize: tokens are not compared there) */
    static const char *const full[] = {"tiny-gptoss", "tiny-gemma4", "tiny-gemma4-kv"};
    static const int32_t prompt[6] = {9707, 11, 1879, 13, 576, 3974};
    for (int i = 0; i < 3; i++) {
        char in[128], bfp[512], f16p[512], q8p[512];
        snprintf(in, sizeof in, "tests/models/%s", full[i]);
        snprintf(bfp, sizeof bfp, "%s/%s-bf16.gguf", tmpdir, full[i]);
        snprintf(f16p, sizeof f16p, "%s/%s-f16.gguf", tmpdir, full[i]);
        snprintf(q8p, sizeof q8p, "%s/%s-q8_0.gguf", tmpdir, full[i]);
        CHECK(convert(in, bfp, "bf16") == 0 && convert(in, f16p, "f16") == 0 && convert(in, q8p, "q8_0") == 0,
              "%s: convert: %s", full[i], dfl_lasterr());
        mdl_model hf, g16, g8;
        if (mdl_load(&hf, in) != 0) continue;
        CHECK(mdl_load(&g16, f16p) == 0, "%s: load f16: %s", full[i], dfl_lasterr());
        CHECK(mdl_load(&g8, q8p) == 0, "%s: load q8_0: %s", full[i], dfl_lasterr());
        if (g16.layers) CHECK(same_weights(&g16, &hf, to_f16, "f16"), "%s: f16 weights", full[i]);
        CHECK(qt_model(&hf, QT_Q8_0, 32) == 0, "quantize: %s", dfl_lasterr());
        if (g8.layers) {
            CHECK(same_weights(&g8, &hf, NULL, "q8_0") && g8.layers[0].wq.dtype == WT_Q8, "%s: Q8_0 weights",
                  full[i]);
            int bad = 0;
            for (int l = 0; l < hf.cfg.n_layers && hf.cfg.n_experts; l++)
                for (int e = 0; e < hf.cfg.n_experts; e++)
                    bad |= !same_matrix(&g8.layers[l].experts[e].wg, &hf.layers[l].experts[e].wg) ||
                           !same_matrix(&g8.layers[l].experts[e].wd, &hf.layers[l].experts[e].wd);
            CHECK(!bad, "%s: Q8_0 experts differ from the engine's Q8_0", full[i]);
        }
        if (g16.layers) mdl_free(&g16);
        if (g8.layers) mdl_free(&g8);
        mdl_free(&hf);
        size_t na, nb;
        int32_t *ya = greedy_ids(in, NULL, NULL, prompt, 6, &na), *yb = greedy_ids(bfp, NULL, NULL, prompt, 6, &nb);
        CHECK(ya && yb && na == 24 && nb == na && !memcmp(ya, yb, na * sizeof *ya), "%s: bf16 file's greedy tokens",
              full[i]);
        free(ya), free(yb);
    }
}

/* gpt-oss's tokenizer (o200k_harmony) in a GGUF file as llama.cpp's
 * converter names it (tokenizer.ggml.pre "gpt-4o"): dflash convert writes
 * it, and the file's tokenizer gives tokenizer.json's ids. */
TEST(gptoss_tokenizer_gguf) {
    char out[512];
    snprintf(out, sizeof out, "%s/gptoss-tok.gguf", tmpdir);
    if (ggm_convert("tests/models/tiny-gptoss", out, "q8_0", "models/gptoss-tokenizer") != 0) {
        CHECK(0, "convert: %s", dfl_lasterr());
        return;
    }
    gguf_file g;
    const char *s;
    size_t n;
    CHECK(gguf_open(&g, out) == 0 && gguf_get_str(&g, "tokenizer.ggml.pre", &s, &n, 1) == 0 && n == 6 &&
              !memcmp(s, "gpt-4o", 6),
          "tokenizer.ggml.pre: %s", dfl_lasterr());
    gguf_close(&g);
    static const char *const texts[] = {"Hello world", "The QUICK brown fox's 12345 jumps!\n\tx  y",
                                        "<|start|>user<|message|>héllo wörld<|end|>", "", "don't  WE'LL 1234567"};
    dflash_model *a = dflash_load_tokenizer("models/gptoss-tokenizer"), *b = dflash_load_tokenizer(out);
    CHECK(a && b, "load: %s", dflash_error());
    for (size_t i = 0; a && b && i < sizeof texts / sizeof texts[0]; i++) {
        int32_t *x = NULL, *y = NULL;
        size_t nx = 0, ny = 0;
        int ok = dflash_tokenize_prompt(a, texts[i], strlen(texts[i]), &x, &nx) == 0 &&
                 dflash_tokenize_prompt(b, texts[i], strlen(texts[i]), &y, &ny) == 0 && nx == ny &&
                 (!nx || !memcmp(x, y, nx * sizeof *x));
        CHECK(ok, "text %zu: %zu ids from tokenizer.json, %zu from the GGUF", i, nx, ny);
        free(x);
        free(y);
    }
    dflash_free(a);
    dflash_free(b);
}

int main(void) {
    const char *env = getenv("DFLASH_ROOT");
    if (env && *env && chdir(env) != 0) return 1;
    if (tmpdir_make("test-gguf") != 0) return 1;
    RUN(round_trip);
    RUN(filled_tensors);
    RUN(bad_files);
    RUN(convert_qwen3);
    RUN(q8_0_tokens_equal_engine_q8_0);
    RUN(convert_llama);
    RUN(llama3_rope_freqs);
    RUN(convert_draft);
    RUN(llama_converter_draft);
    RUN(bad_models);
    RUN(bad_drafts);
    RUN(gguf_prompt_specials);
    RUN(convert_prompt_specials);
    RUN(llama_converter_families);
    RUN(llama_converter_zoo2);
    RUN(bad_zoo2_models);
    RUN(convert_zoo2);
    RUN(gptoss_tokenizer_gguf);
    RUN(convert_qwen3moe);
    RUN(nextn_blocks);
    RUN(bad_family_models);
    RUN(convert_qwen35_family);
    RUN(q4_blocks);
    RUN(quants_match_ggml);
    RUN(q6k_model);
    RUN(llama_quantize_same_bytes);
    tmpdir_remove();
    CHECK_DONE("test_gguf");
}
