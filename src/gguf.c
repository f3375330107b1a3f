/* gguf.c - see gguf.h. The format is read from its public description
 * (ggml's docs/gguf.md); no code from ggml. */
#include "gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct {
    int type;
    const char *name;
    int blck;
    size_t size;
} types[] = {
    {GGML_F32, "F32", 1, 4},       {GGML_F16, "F16", 1, 2},       {GGML_Q4_0, "Q4_0", 32, 18},
    {GGML_Q4_1, "Q4_1", 32, 20},   {GGML_Q5_0, "Q5_0", 32, 22},   {GGML_Q5_1, "Q5_1", 32, 24},
    {GGML_Q8_0, "Q8_0", 32, 34},   {GGML_Q8_1, "Q8_1", 32, 36},   {GGML_Q2_K, "Q2_K", 256, 84},
    {GGML_Q3_K, "Q3_K", 256, 110}, {GGML_Q4_K, "Q4_K", 256, 144}, {GGML_Q5_K, "Q5_K", 256, 176},
    {GGML_Q6_K, "Q6_K", 256, 210}, {GGML_Q8_K, "Q8_K", 256, 292}, {GGML_I8, "I8", 1, 1},
    {GGML_I16, "I16", 1, 2},       {GGML_I32, "I32", 1, 4},       {GGML_I64, "I64", 1, 8},
    {GGML_F64, "F64", 1, 8},       {GGML_BF16, "BF16", 1, 2},     {GGML_MXFP4, "MXFP4", 32, 17},
};

static int type_index(int t) {
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (types[i].type == t) return (int)i;
    return -1;
}

const char *ggml_type_name(ggml_type t) {
    int i = type_index((int)t);
    return i < 0 ? "?" : types[i].name;
}
int ggml_blck_size(int t) {
    int i = type_index(t);
    return i < 0 ? 0 : types[i].blck;
}
size_t ggml_type_size(int t) {
    int i = type_index(t);
    return i < 0 ? 0 : types[i].size;
}

static const char *vnames[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                               "bool",  "string", "array", "uint64", "int64", "float64"};
const char *gguf_vtype_name(gguf_vtype t) { return (unsigned)t < 13 ? vnames[t] : "?"; }

static size_t vsize(uint32_t t) { /* fixed-size value types; 0 for string/array/unknown */
    static const size_t s[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < 13 ? s[t] : 0;
}

int gguf_is_gguf(const char *path) {
    struct stat st;
    if (!path || stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char m[4];
    int ok = fread(m, 1, 4, f) == 4 && memcmp(m, "GGUF", 4) == 0;
    fclose(f);
    return ok;
}

/* ---------------------------------------------------------------- reading */

typedef struct {
    const uint8_t *p;
    size_t n, off;
    const char *path;
    char ctx[96]; /* "key 'K': " / "tensor 'T': " while reading one, for messages */
} rd;

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int need(rd *r, uint64_t n, const char *what) {
    if (n > r->n - r->off) {
        dfl_seterr("%s: %struncated at byte %zu (%s needs %llu bytes, %zu left)", r->path, r->ctx, r->off, what,
                   (unsigned long long)n, r->n - r->off);
        return -1;
    }
    return 0;
}

static int rd_u32(rd *r, uint32_t *v, const char *what) {
    if (need(r, 4, what)) return -1;
    *v = (uint32_t)le(r->p + r->off, 4);
    r->off += 4;
    return 0;
}

static int rd_u64(rd *r, uint64_t *v, const char *what) {
    if (need(r, 8, what)) return -1;
    *v = le(r->p + r->off, 8);
    r->off += 8;
    return 0;
}

/* A string: u64 length + bytes. *s points into the mapping. */
static int rd_str(rd *r, const char **s, uint64_t *n, const char *what) {
    if (rd_u64(r, n, what) || need(r, *n, what)) return -1;
    *s = (const char *)r->p + r->off;
    r->off += (size_t)*n;
    return 0;
}

/* A key or tensor name: 1..max bytes, no NUL inside; a malloc'd C string. */
static char *rd_name(rd *r, const char *what, size_t max) {
    const char *s;
    uint64_t n;
    size_t at = r->off;
    if (rd_str(r, &s, &n, what)) return NULL;
    int ctl = 0;
    for (uint64_t i = 0; i < n && n <= max; i++) ctl |= (unsigned char)s[i] < 0x20 || s[i] == 0x7f;
    if (n == 0 || n > max || ctl) {
        dfl_seterr("%s: %s at byte %zu: bad length %llu (1..%zu bytes) or a control character inside", r->path, what,
                   at, (unsigned long long)n, max);
        return NULL;
    }
    char *c = dfl_malloc((size_t)n + 1);
    memcpy(c, s, (size_t)n);
    c[n] = 0;
    return c;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef struct {
    uint64_t b, e;
    int i;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->b < y->b ? -1 : x->b > y->b;
}

static int parse_kv(rd *r, gguf_kv *kv) {
    uint32_t t;
    if (rd_u32(r, &t, "value type")) return -1;
    kv->type = (gguf_vtype)t;
    kv->n = 1;
    if (t > GGUF_FLOAT64) {
        dfl_seterr("%s: key '%s': unknown value type %u", r->path, kv->key, t);
        return -1;
    }
    if (t == GGUF_ARRAY) {
        uint32_t at;
        if (rd_u32(r, &at, "array type") || rd_u64(r, &kv->n, "array length")) return -1;
        kv->atype = (gguf_vtype)at;
        if (at > GGUF_FLOAT64 || at == GGUF_ARRAY) {
            dfl_seterr("%s: key '%s': array of %s (type %u) not supported", r->path, kv->key,
                       at == GGUF_ARRAY ? "arrays" : "unknown values", at);
            return -1;
        }
        kv->val = r->p + r->off;
        if (at == GGUF_STRING) {
            /* each string takes at least its 8-byte length: bound n before allocating */
            if (kv->n > (r->n - r->off) / 8) {
                dfl_seterr("%s: key '%s': %llu strings cannot fit in the %zu bytes left", r->path, kv->key,
                           (unsigned long long)kv->n, r->n - r->off);
                return -1;
            }
            uint64_t *off = dfl_malloc(sizeof(uint64_t) * (size_t)(kv->n ? kv->n : 1));
            kv->soff = off;
            for (uint64_t i = 0; i < kv->n; i++) {
                const char *s;
                uint64_t n;
                off[i] = (uint64_t)(r->p + r->off - kv->val);
                if (rd_str(r, &s, &n, "array string")) return -1;
            }
            return 0;
        }
        size_t es = vsize(at);
        if (kv->n > (r->n - r->off) / es) {
            dfl_seterr("%s: key '%s': %llu %s values cannot fit in the %zu bytes left", r->path, kv->key,
                       (unsigned long long)kv->n, gguf_vtype_name((gguf_vtype)at), r->n - r->off);
            return -1;
        }
        r->off += (size_t)(kv->n * es);
        return 0;
    }
    kv->val = r->p + r->off;
    if (t == GGUF_STRING) {
        const char *s;
        uint64_t n;
        return rd_str(r, &s, &n, "string value");
    }
    if (need(r, vsize(t), "value")) return -1;
    if (t == GGUF_BOOL && r->p[r->off] > 1) {
        dfl_seterr("%s: key '%s': bool value %u is neither 0 nor 1", r->path, kv->key, r->p[r->off]);
        return -1;
    }
    r->off += vsize(t);
    return 0;
}

int gguf_open(gguf_file *g, const char *path) {
    memset(g, 0, sizeof *g);
    if (dfl_map_file(path, &g->map) != 0) return -1;
    g->path = dfl_strdup(path);
    rd r = {g->map.data, g->map.size, 0, path, ""};
    uint32_t magic;
    uint64_t nt, nkv;
    if (g->map.size < 4 || memcmp(g->map.data, "GGUF", 4) != 0) {
        dfl_seterr("%s: not a GGUF file (no \"GGUF\" magic)", path);
        goto fail;
    }
    if (rd_u32(&r, &magic, "magic") || rd_u32(&r, &g->version, "version")) goto fail;
    if (g->version != 2 && g->version != 3) {
        dfl_seterr("%s: GGUF version %u not supported (2 or 3; a big-endian file reads as a huge version)", path,
                   g->version);
        goto fail;
    }
    if (rd_u64(&r, &nt, "tensor count") || rd_u64(&r, &nkv, "key/value count")) goto fail;
    /* a key/value takes >= 8+1+4+1 bytes, a tensor info >= 8+1+4+8+4+8 */
    if (nkv > (r.n - r.off) / 14 || nkv > (1u << 24)) {
        dfl_seterr("%s: key/value count %llu cannot fit in the file", path, (unsigned long long)nkv);
        goto fail;
    }
    if (nt > (r.n - r.off) / 33 || nt > (1u << 24)) {
        dfl_seterr("%s: tensor count %llu cannot fit in the file", path, (unsigned long long)nt);
        goto fail;
    }
    g->kv = dfl_calloc((size_t)(nkv ? nkv : 1), sizeof *g->kv);
    g->alignment = 32;
    for (uint64_t i = 0; i < nkv; i++) {
        gguf_kv *kv = &g->kv[i];
        if (!(kv->key = rd_name(&r, "key", 65535))) goto fail;
        g->n_kv++;
        snprintf(r.ctx, sizeof r.ctx, "key '%.64s': ", kv->key);
        if (parse_kv(&r, kv)) goto fail;
        r.ctx[0] = 0;
    }
    /* unique keys */
    if (g->n_kv > 1) {
        char **ks = dfl_malloc(sizeof(char *) * (size_t)g->n_kv);
        for (int i = 0; i < g->n_kv; i++) ks[i] = g->kv[i].key;
        qsort(ks, (size_t)g->n_kv, sizeof *ks, cmp_str);
        for (int i = 1; i < g->n_kv; i++)
            if (!strcmp(ks[i - 1], ks[i])) {
                dfl_seterr("%s: key '%s' appears twice", path, ks[i]);
                free(ks);
                goto fail;
            }
        free(ks);
    }
    const gguf_kv *al = gguf_find_kv(g, "general.alignment");
    if (al) {
        if (al->type != GGUF_UINT32) {
            dfl_seterr("%s: key 'general.alignment' is %s, expected uint32", path, gguf_vtype_name(al->type));
            goto fail;
        }
        g->alignment = le(al->val, 4);
        if (g->alignment == 0 || (g->alignment & (g->alignment - 1)) || g->alignment > (1u << 20)) {
            dfl_seterr("%s: general.alignment %llu is not a power of two in 1..2^20", path,
                       (unsigned long long)g->alignment);
            goto fail;
        }
    }
    g->t = dfl_calloc((size_t)(nt ? nt : 1), sizeof *g->t);
    for (uint64_t i = 0; i < nt; i++) {
        gguf_tensor *t = &g->t[i];
        uint32_t nd, ty;
        if (!(t->name = rd_name(&r, "tensor name", 4096))) goto fail;
        g->n_tensors++;
        snprintf(r.ctx, sizeof r.ctx, "tensor '%.64s': ", t->name);
        if (rd_u32(&r, &nd, "n_dims")) goto fail;
        if (nd < 1 || nd > 4) {
            dfl_seterr("%s: tensor '%s': %u dimensions (1..4 supported)", path, t->name, nd);
            goto fail;
        }
        t->n_dims = (int)nd;
        for (int d = 0; d < 4; d++) t->ne[d] = 1;
        const uint64_t max_ne = (uint64_t)1 << 46;
        uint64_t numel = 1;
        for (uint32_t d = 0; d < nd; d++) {
            uint64_t v;
            if (rd_u64(&r, &v, "tensor dimension")) goto fail;
            if (v == 0 || v > max_ne || numel > max_ne / v) {
                dfl_seterr("%s: tensor '%s': dimension %u = %llu is zero or too large", path, t->name, d,
                           (unsigned long long)v);
                goto fail;
            }
            t->ne[d] = (int64_t)v;
            numel *= v;
        }
        if (rd_u32(&r, &ty, "tensor type") || rd_u64(&r, &t->offset, "tensor offset")) goto fail;
        int blck = ggml_blck_size((int)ty);
        if (!blck) {
            dfl_seterr("%s: tensor '%s': unknown or unsupported ggml type %u", path, t->name, ty);
            goto fail;
        }
        t->type = (ggml_type)ty;
        if (t->ne[0] % blck) {
            dfl_seterr("%s: tensor '%s': row length %lld is not a multiple of %s's block of %d", path, t->name,
                       (long long)t->ne[0], ggml_type_name(t->type), blck);
            goto fail;
        }
        t->nbytes = (size_t)(numel / (uint64_t)blck * ggml_type_size((int)ty));
        if (t->offset % g->alignment) {
            dfl_seterr("%s: tensor '%s': offset %llu is not a multiple of the alignment %llu", path, t->name,
                       (unsigned long long)t->offset, (unsigned long long)g->alignment);
            goto fail;
        }
    }
    /* unique names */
    if (g->n_tensors > 1) {
        char **ns = dfl_malloc(sizeof(char *) * (size_t)g->n_tensors);
        for (int i = 0; i < g->n_tensors; i++) ns[i] = g->t[i].name;
        qsort(ns, (size_t)g->n_tensors, sizeof *ns, cmp_str);
        for (int i = 1; i < g->n_tensors; i++)
            if (!strcmp(ns[i - 1], ns[i])) {
                dfl_seterr("%s: tensor '%s' appears twice", path, ns[i]);
                free(ns);
                goto fail;
            }
        free(ns);
    }
    /* data section: after the infos, padded to the alignment */
    uint64_t pad = (g->alignment - r.off % g->alignment) % g->alignment;
    if (nt && pad > r.n - r.off) {
        dfl_seterr("%s: truncated before the data section (byte %zu + %llu padding)", path, r.off,
                   (unsigned long long)pad);
        goto fail;
    }
    g->data_off = nt ? r.off + (size_t)pad : r.off;
    size_t dsize = r.n - g->data_off;
    span *sp = dfl_malloc(sizeof(span) * (size_t)(nt ? nt : 1));
    for (int i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->t[i];
        if (t->offset > dsize || t->nbytes > dsize - t->offset) {
            dfl_seterr("%s: tensor '%s': bytes [%llu, +%zu) go beyond the data section (%zu bytes)", path, t->name,
                       (unsigned long long)t->offset, t->nbytes, dsize);
            free(sp);
            goto fail;
        }
        t->data = g->map.data + g->data_off + t->offset;
        sp[i] = (span){t->offset, t->offset + t->nbytes, i};
    }
    qsort(sp, (size_t)g->n_tensors, sizeof *sp, cmp_span);
    for (int i = 1; i < g->n_tensors; i++)
        if (sp[i].b < sp[i - 1].e) {
            dfl_seterr("%s: tensors '%s' and '%s' overlap", path, g->t[sp[i - 1].i].name, g->t[sp[i].i].name);
            free(sp);
            goto fail;
        }
    free(sp);
    return 0;
fail:
    gguf_close(g);
    return -1;
}

void gguf_close(gguf_file *g) {
    for (int i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free((void *)g->kv[i].soff);
    }
    free(g->kv);
    for (int i = 0; i < g->n_tensors; i++) free(g->t[i].name);
    free(g->t);
    if (g->map.data) dfl_unmap(&g->map);
    free(g->path);
    memset(g, 0, sizeof *g);
}

const gguf_kv *gguf_find_kv(const gguf_file *g, const char *key) {
    for (int i = 0; i < g->n_kv; i++)
        if (!strcmp(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name) {
    for (int i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->t[i].name, name)) return &g->t[i];
    return NULL;
}

static int64_t scalar_int(gguf_vtype t, const uint8_t *p, int *ok) {
    *ok = 1;
    switch (t) {
    case GGUF_UINT8: return p[0];
    case GGUF_BOOL: return p[0] != 0;
    case GGUF_INT8: return (int8_t)p[0];
    case GGUF_UINT16: return (int64_t)le(p, 2);
    case GGUF_INT16: return (int16_t)le(p, 2);
    case GGUF_UINT32: return (int64_t)le(p, 4);
    case GGUF_INT32: return (int32_t)le(p, 4);
    case GGUF_INT64: return (int64_t)le(p, 8);
    case GGUF_UINT64: {
        uint64_t v = le(p, 8);
        if (v > INT64_MAX) *ok = 0;
        return (int64_t)v;
    }
    default: *ok = 0; return 0;
    }
}

static double scalar_float(gguf_vtype t, const uint8_t *p, int *ok) {
    *ok = 1;
    if (t == GGUF_FLOAT32) {
        union { uint32_t u; float f; } v = {(uint32_t)le(p, 4)};
        return v.f;
    }
    if (t == GGUF_FLOAT64) {
        union { uint64_t u; double f; } v = {le(p, 8)};
        return v.f;
    }
    return (double)scalar_int(t, p, ok);
}

static const gguf_kv *lookup(const gguf_file *g, const char *key, int required, int *rc) {
    const gguf_kv *kv = gguf_find_kv(g, key);
    *rc = 0;
    if (!kv) {
        if (required) dfl_seterr("%s: missing key '%s'", g->path, key);
        *rc = required ? -1 : 1;
    }
    return kv;
}

int gguf_get_int(const gguf_file *g, const char *key, int64_t *out, int required) {
    int rc, ok;
    const gguf_kv *kv = lookup(g, key, required, &rc);
    if (!kv) return rc;
    int64_t v = kv->type == GGUF_ARRAY ? 0 : scalar_int(kv->type, kv->val, &ok);
    if (kv->type == GGUF_ARRAY || !ok) {
        dfl_seterr("%s: key '%s' is %s, expected an integer", g->path, key, gguf_vtype_name(kv->type));
        return -1;
    }
    *out = v;
    return 0;
}

int gguf_get_float(const gguf_file *g, const char *key, double *out, int required) {
    int rc, ok;
    const gguf_kv *kv = lookup(g, key, required, &rc);
    if (!kv) return rc;
    double v = kv->type == GGUF_ARRAY ? 0 : scalar_float(kv->type, kv->val, &ok);
    if (kv->type == GGUF_ARRAY || !ok) {
        dfl_seterr("%s: key '%s' is %s, expected a number", g->path, key, gguf_vtype_name(kv->type));
        return -1;
    }
    *out = v;
    return 0;
}

int gguf_get_bool(const gguf_file *g, const char *key, int *out, int required) {
    int rc;
    const gguf_kv *kv = lookup(g, key, required, &rc);
    if (!kv) return rc;
    if (kv->type != GGUF_BOOL) {
        dfl_seterr("%s: key '%s' is %s, expected bool", g->path, key, gguf_vtype_name(kv->type));
        return -1;
    }
    *out = kv->val[0] != 0;
    return 0;
}

int gguf_get_str(const gguf_file *g, const char *key, const char **s, size_t *n, int required) {
    int rc;
    const gguf_kv *kv = lookup(g, key, required, &rc);
    if (!kv) return rc;
    if (kv->type != GGUF_STRING) {
        dfl_seterr("%s: key '%s' is %s, expected string", g->path, key, gguf_vtype_name(kv->type));
        return -1;
    }
    *n = (size_t)le(kv->val, 8);
    *s = (const char *)kv->val + 8;
    return 0;
}

const char *gguf_arr_str(const gguf_kv *kv, uint64_t i, size_t *n) {
    const uint8_t *p = kv->val + kv->soff[i];
    *n = (size_t)le(p, 8);
    return (const char *)p + 8;
}

int64_t gguf_arr_int(const gguf_kv *kv, uint64_t i) {
    int ok;
    return scalar_int(kv->atype, kv->val + i * vsize(kv->atype), &ok);
}

double gguf_arr_float(const gguf_kv *kv, uint64_t i) {
    int ok;
    return scalar_float(kv->atype, kv->val + i * vsize(kv->atype), &ok);
}

/* ---------------------------------------------------------------- writing */

typedef struct {
    char *name;
    ggml_type type;
    int n_dims;
    int64_t ne[4];
    const void *data;
    int (*fill)(void *ctx, void *dst, size_t nbytes); /* instead of data: made at write time */
    void *ctx;
    size_t nbytes;
    uint64_t offset;
} w_tensor;

struct gguf_writer {
    uint8_t *kv;
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    w_tensor *t;
    int n_t, cap_t;
    uint64_t data_len;
};

gguf_writer *gguf_w_new(void) { return dfl_calloc(1, sizeof(gguf_writer)); }

void gguf_w_free(gguf_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w->kv);
    free(w);
}

static void put(gguf_writer *w, const void *p, size_t n) {
    if (w->kv_len + n > w->kv_cap) {
        w->kv_cap = (w->kv_len + n) * 2 + 256;
        w->kv = dfl_realloc(w->kv, w->kv_cap);
    }
    if (n) memcpy(w->kv + w->kv_len, p, n); /* p may be NULL when n is 0 (a writer with no key/values) */
    w->kv_len += n;
}
static void put_le(gguf_writer *w, uint64_t v, int n) {
    uint8_t b[8];
    for (int i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, (size_t)n);
}
static void put_str(gguf_writer *w, const char *s) {
    size_t n = strlen(s);
    put_le(w, n, 8);
    put(w, s, n);
}
static void put_key(gguf_writer *w, const char *key, gguf_vtype t) {
    put_str(w, key);
    put_le(w, (uint32_t)t, 4);
    w->n_kv++;
}
static uint32_t f32_bits(float f) {
    union { float f; uint32_t u; } v = {f};
    return v.u;
}

void gguf_w_str(gguf_writer *w, const char *key, const char *val) {
    put_key(w, key, GGUF_STRING);
    put_str(w, val);
}
void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v) {
    put_key(w, key, GGUF_UINT32);
    put_le(w, v, 4);
}
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v) {
    put_key(w, key, GGUF_INT32);
    put_le(w, (uint32_t)v, 4);
}
void gguf_w_f32(gguf_writer *w, const char *key, float v) {
    put_key(w, key, GGUF_FLOAT32);
    put_le(w, f32_bits(v), 4);
}
void gguf_w_bool(gguf_writer *w, const char *key, int v) {
    put_key(w, key, GGUF_BOOL);
    put_le(w, v ? 1 : 0, 1);
}
void gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n) {
    put_key(w, key, GGUF_ARRAY);
    put_le(w, GGUF_STRING, 4);
    put_le(w, n, 8);
    for (uint64_t i = 0; i < n; i++) put_str(w, v[i]);
}
void gguf_w_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n) {
    put_key(w, key, GGUF_ARRAY);
    put_le(w, GGUF_INT32, 4);
    put_le(w, n, 8);
    for (uint64_t i = 0; i < n; i++) put_le(w, (uint32_t)v[i], 4);
}
void gguf_w_arr_bool(gguf_writer *w, const char *key, const uint8_t *v, uint64_t n) {
    put_key(w, key, GGUF_ARRAY);
    put_le(w, GGUF_BOOL, 4);
    put_le(w, n, 8);
    for (uint64_t i = 0; i < n; i++) put_le(w, v[i] ? 1 : 0, 1);
}
void gguf_w_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n) {
    put_key(w, key, GGUF_ARRAY);
    put_le(w, GGUF_FLOAT32, 4);
    put_le(w, n, 8);
    for (uint64_t i = 0; i < n; i++) put_le(w, f32_bits(v[i]), 4);
}

void gguf_w_copy_kv(gguf_writer *w, const gguf_kv *kv) {
    put_key(w, kv->key, kv->type);
    size_t n;
    if (kv->type == GGUF_ARRAY) {
        put_le(w, (uint32_t)kv->atype, 4);
        put_le(w, kv->n, 8);
        if (kv->atype == GGUF_STRING) n = kv->n ? (size_t)(kv->soff[kv->n - 1] + 8 + le(kv->val + kv->soff[kv->n - 1], 8)) : 0;
        else n = (size_t)kv->n * vsize(kv->atype);
    } else {
        n = kv->type == GGUF_STRING ? 8 + (size_t)le(kv->val, 8) : vsize(kv->type);
    }
    put(w, kv->val, n);
}

void gguf_w_tensor(gguf_writer *w, const char *name, ggml_type type, int n_dims, const int64_t *ne,
                   const void *data) {
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t * 2 + 16;
        w->t = dfl_realloc(w->t, sizeof(w_tensor) * (size_t)w->cap_t);
    }
    w_tensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    t->name = dfl_strdup(name);
    t->type = type;
    t->n_dims = n_dims;
    uint64_t numel = 1;
    for (int d = 0; d < n_dims; d++) {
        t->ne[d] = ne[d];
        numel *= (uint64_t)ne[d];
    }
    t->data = data;
    t->nbytes = (size_t)(numel / (uint64_t)ggml_blck_size(type) * ggml_type_size(type));
    t->offset = w->data_len;
    w->data_len += (t->nbytes + 31) / 32 * 32;
}

void gguf_w_tensor_fill(gguf_writer *w, const char *name, ggml_type type, int n_dims, const int64_t *ne,
                        int (*fill)(void *ctx, void *dst, size_t nbytes), void *ctx) {
    gguf_w_tensor(w, name, type, n_dims, ne, NULL);
    w->t[w->n_t - 1].fill = fill;
    w->t[w->n_t - 1].ctx = ctx;
}

int gguf_w_write(gguf_writer *w, const char *path) {
    char *tmp;
    FILE *f = dfl_create_tmp(path, &tmp);
    if (!f) return -1;
    /* header + key/values + tensor infos, built in one buffer after the kvs */
    gguf_writer h = {0};
    put(&h, "GGUF", 4);
    put_le(&h, 3, 4);
    put_le(&h, (uint64_t)w->n_t, 8);
    put_le(&h, w->n_kv, 8);
    put(&h, w->kv, w->kv_len);
    for (int i = 0; i < w->n_t; i++) {
        const w_tensor *t = &w->t[i];
        put_str(&h, t->name);
        put_le(&h, (uint32_t)t->n_dims, 4);
        for (int d = 0; d < t->n_dims; d++) put_le(&h, (uint64_t)t->ne[d], 8);
        put_le(&h, (uint32_t)t->type, 4);
        put_le(&h, t->offset, 8);
    }
    static const uint8_t zero[32];
    put(&h, zero, (32 - h.kv_len % 32) % 32);
    int ok = fwrite(h.kv, 1, h.kv_len, f) == h.kv_len;
    free(h.kv);
    /* one scratch buffer, as large as the largest filled tensor: the only
     * tensor data this writer holds */
    void *scratch = NULL;
    size_t scratch_n = 0;
    char fill_err[768] = ""; /* a fill's own message outlives dfl_commit_tmp's */
    for (int i = 0; i < w->n_t && ok; i++) {
        const w_tensor *t = &w->t[i];
        size_t padn = (32 - t->nbytes % 32) % 32;
        const void *d = t->data;
        if (t->fill) {
            if (t->nbytes > scratch_n) {
                free(scratch);
                scratch = dfl_malloc(t->nbytes);
                scratch_n = t->nbytes;
            }
            if (t->fill(t->ctx, scratch, t->nbytes) != 0) {
                snprintf(fill_err, sizeof fill_err, "%s: tensor %s: %s", path, t->name, dfl_lasterr());
                ok = 0;
            }
            d = scratch;
        }
        ok = ok && fwrite(d, 1, t->nbytes, f) == t->nbytes && fwrite(zero, 1, padn, f) == padn;
    }
    free(scratch);
    int rc = dfl_commit_tmp(f, tmp, path, ok);
    if (fill_err[0]) dfl_seterr("%s", fill_err);
    return rc;
}
