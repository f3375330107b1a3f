/* safetensors.c - see safetensors.h. */
#include "safetensors.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    st_dtype d;
    size_t size;
} dtypes[] = {
    {"F32", ST_F32, 4},  {"F16", ST_F16, 2},   {"BF16", ST_BF16, 2}, {"F64", ST_F64, 8},
    {"I8", ST_I8, 1},    {"U8", ST_U8, 1},     {"I16", ST_I16, 2},   {"U16", ST_U16, 2},
    {"I32", ST_I32, 4},  {"U32", ST_U32, 4},   {"I64", ST_I64, 8},   {"U64", ST_U64, 8},
    {"BOOL", ST_BOOL, 1},
};

const char *st_dtype_name(st_dtype d) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (dtypes[i].d == d) return dtypes[i].name;
    return "?";
}

size_t st_dtype_size(st_dtype d) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (dtypes[i].d == d) return dtypes[i].size;
    return 0;
}

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

typedef struct {
    size_t begin, end;
    const char *name;
} range;

static int cmp_range(const void *a, const void *b) {
    const range *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

/* Parse one file's header and append its tensors to s. */
static int add_file(st_set *s, const char *path) {
    int fi = s->n_files;
    s->maps = dfl_realloc(s->maps, sizeof(dfl_map) * (size_t)(fi + 1));
    s->paths = dfl_realloc(s->paths, sizeof(char *) * (size_t)(fi + 1));
    dfl_map *m = &s->maps[fi];
    if (dfl_map_file(path, m) != 0) return -1;
    s->paths[fi] = dfl_strdup(path);
    s->n_files++;

    if (m->size < 8) {
        dfl_seterr("%s: truncated safetensors file (%zu bytes, no header length)", path, m->size);
        return -1;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | m->data[i];
    if (hlen > m->size - 8) {
        dfl_seterr("%s: header length %llu goes beyond the end of the file (%zu bytes)", path,
                   (unsigned long long)hlen, m->size);
        return -1;
    }
    if (hlen < 2) {
        dfl_seterr("%s: header length %llu is too small", path, (unsigned long long)hlen);
        return -1;
    }
    const uint8_t *base = m->data + 8 + hlen;
    size_t data_size = m->size - 8 - (size_t)hlen;
    cJSON *root = cJSON_ParseWithLength((const char *)m->data + 8, (size_t)hlen);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        dfl_seterr("%s: header is not a JSON object", path);
        return -1;
    }
    int count = 0;
    for (cJSON *e = root->child; e; e = e->next) count++;
    range *rs = dfl_malloc(sizeof(range) * (size_t)(count ? count : 1));
    int nr = 0, rc = -1;
    for (cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
        cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off) ||
            cJSON_GetArraySize(off) != 2) {
            dfl_seterr("%s: tensor '%s': entry needs dtype, shape and data_offsets", path, e->string);
            goto out;
        }
        st_tensor t = {0};
        size_t esz = 0;
        for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
            if (strcmp(dtypes[i].name, dt->valuestring) == 0) {
                t.dtype = dtypes[i].d;
                esz = dtypes[i].size;
            }
        if (!esz) {
            dfl_seterr("%s: tensor '%s': unknown dtype '%s'", path, e->string, dt->valuestring);
            goto out;
        }
        t.ndim = cJSON_GetArraySize(sh);
        if (t.ndim > 4) {
            dfl_seterr("%s: tensor '%s': %d dimensions (at most 4 supported)", path, e->string, t.ndim);
            goto out;
        }
        /* every number is range-checked as a double before any cast, and the
         * element count is checked before each multiplication (no wrap) */
        const uint64_t max_numel = (uint64_t)1 << 46;
        uint64_t numel = 1;
        for (int i = 0; i < t.ndim; i++) {
            cJSON *d = cJSON_GetArrayItem(sh, i);
            if (!cJSON_IsNumber(d) || !(d->valuedouble >= 0 && d->valuedouble <= (double)max_numel) ||
                d->valuedouble != floor(d->valuedouble)) {
                dfl_seterr("%s: tensor '%s': bad shape entry %d", path, e->string, i);
                goto out;
            }
            t.shape[i] = (int64_t)d->valuedouble;
            if (t.shape[i] && numel > max_numel / (uint64_t)t.shape[i]) {
                dfl_seterr("%s: tensor '%s': shape too large", path, e->string);
                goto out;
            }
            numel *= (uint64_t)t.shape[i];
        }
        cJSON *b0 = cJSON_GetArrayItem(off, 0), *b1 = cJSON_GetArrayItem(off, 1);
        if (!cJSON_IsNumber(b0) || !cJSON_IsNumber(b1) || !(b0->valuedouble >= 0) ||
            !(b1->valuedouble >= b0->valuedouble) || b0->valuedouble != floor(b0->valuedouble) ||
            b1->valuedouble != floor(b1->valuedouble)) {
            dfl_seterr("%s: tensor '%s': bad data_offsets", path, e->string);
            goto out;
        }
        if (b1->valuedouble > (double)data_size) {
            dfl_seterr("%s: tensor '%s': data_offsets [%.0f, %.0f) beyond the data section (%zu bytes)", path,
                       e->string, b0->valuedouble, b1->valuedouble, data_size);
            goto out;
        }
        size_t begin = (size_t)b0->valuedouble, end = (size_t)b1->valuedouble;
        if (end > data_size) { /* (double)data_size rounded up */
            dfl_seterr("%s: tensor '%s': data_offsets [%zu, %zu) beyond the data section (%zu bytes)",
                       path, e->string, begin, end, data_size);
            goto out;
        }
        if ((uint64_t)(end - begin) != numel * esz) {
            dfl_seterr("%s: tensor '%s': %zu bytes for shape with %llu %s elements (%llu bytes)", path,
                       e->string, end - begin, (unsigned long long)numel, dt->valuestring,
                       (unsigned long long)(numel * esz));
            goto out;
        }
        if (st_find(s, e->string)) {
            dfl_seterr("%s: tensor '%s' appears twice", path, e->string);
            goto out;
        }
        t.name = dfl_strdup(e->string);
        t.data = base + begin;
        t.nbytes = end - begin;
        t.file = s->paths[fi];
        rs[nr++] = (range){begin, end, t.name};
        s->t = dfl_realloc(s->t, sizeof(st_tensor) * (size_t)(s->n + 1));
        s->t[s->n++] = t;
        /* keep sorted for st_find (insertion: headers are small) */
        for (int i = s->n - 1; i > 0 && cmp_tensor(&s->t[i - 1], &s->t[i]) > 0; i--) {
            st_tensor tmp = s->t[i];
            s->t[i] = s->t[i - 1];
            s->t[i - 1] = tmp;
        }
    }
    qsort(rs, (size_t)nr, sizeof(range), cmp_range);
    /* ranges sorted by begin: each non-empty one must start at or after the
     * furthest end seen so far */
    for (int i = 0, last = -1; i < nr; i++) {
        if (rs[i].end == rs[i].begin) continue;
        if (last >= 0 && rs[i].begin < rs[last].end) {
            dfl_seterr("%s: tensors '%s' and '%s' overlap in the data section", path, rs[last].name,
                       rs[i].name);
            goto out;
        }
        if (last < 0 || rs[i].end > rs[last].end) last = i;
    }
    rc = 0;
out:
    free(rs);
    cJSON_Delete(root);
    return rc;
}

int st_open_file(st_set *s, const char *path) {
    memset(s, 0, sizeof *s);
    if (add_file(s, path) != 0) {
        st_close(s);
        return -1;
    }
    return 0;
}

int st_open_dir(st_set *s, const char *dir) {
    memset(s, 0, sizeof *s);
    char *idx = dfl_path_join(dir, "model.safetensors.index.json");
    if (!dfl_file_exists(idx)) {
        free(idx);
        char *p = dfl_path_join(dir, "model.safetensors");
        if (!dfl_file_exists(p)) {
            dfl_seterr("%s: no model.safetensors or model.safetensors.index.json", dir);
            free(p);
            return -1;
        }
        int rc = st_open_file(s, p);
        free(p);
        return rc;
    }
    char *txt = dfl_read_file(idx, NULL);
    cJSON *root = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(wm)) {
        dfl_seterr("%s: not valid JSON with a \"weight_map\" object", idx);
        goto fail;
    }
    /* open each distinct shard once, in order of first mention */
    for (cJSON *e = wm->child; e; e = e->next) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/')) {
            dfl_seterr("%s: weight_map entry '%s' must name a file in the same directory", idx, e->string);
            goto fail;
        }
        char *p = dfl_path_join(dir, e->valuestring);
        int seen = 0;
        for (int i = 0; i < s->n_files; i++) seen |= strcmp(s->paths[i], p) == 0;
        if (!seen && add_file(s, p) != 0) {
            free(p);
            goto fail;
        }
        free(p);
    }
    for (cJSON *e = wm->child; e; e = e->next) {
        const st_tensor *t = st_find(s, e->string);
        char *p = dfl_path_join(dir, e->valuestring);
        int ok = t && strcmp(t->file, p) == 0;
        free(p);
        if (!ok) {
            dfl_seterr("%s: tensor '%s' is not in shard %s", idx, e->string, e->valuestring);
            goto fail;
        }
    }
    cJSON_Delete(root);
    free(idx);
    return 0;
fail:
    cJSON_Delete(root);
    free(idx);
    st_close(s);
    return -1;
}

void st_close(st_set *s) {
    for (int i = 0; i < s->n; i++) free(s->t[i].name);
    for (int i = 0; i < s->n_files; i++) {
        dfl_unmap(&s->maps[i]);
        free(s->paths[i]);
    }
    free(s->t);
    free(s->maps);
    free(s->paths);
    memset(s, 0, sizeof *s);
}

const st_tensor *st_find(const st_set *s, const char *name) {
    int lo = 0, hi = s->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(s->t[mid].name, name);
        if (c == 0) return &s->t[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

int st_write(const char *path, const st_out *t, int n, const char *metadata_json) {
    cJSON *root = cJSON_CreateObject();
    if (metadata_json) {
        cJSON *md = cJSON_Parse(metadata_json);
        if (!cJSON_IsObject(md)) {
            cJSON_Delete(md);
            cJSON_Delete(root);
            dfl_seterr("%s: metadata is not a JSON object", path);
            return -1;
        }
        cJSON_AddItemToObject(root, "__metadata__", md);
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++) numel *= (size_t)t[i].shape[d];
        size_t nb = numel * st_dtype_size(t[i].dtype);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "dtype", st_dtype_name(t[i].dtype));
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t[i].ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[d]));
        cJSON *of = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + nb)));
        cJSON_AddItemToObject(root, t[i].name, e);
        off += (nb + 7) & ~(size_t)7;
    }
    char *hdr = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    size_t hlen = strlen(hdr), pad = (8 - hlen % 8) % 8;
    char *tmp;
    FILE *f = dfl_create_tmp(path, &tmp); /* renamed to path once complete */
    if (!f) {
        free(hdr);
        return -1;
    }
    uint8_t len8[8];
    uint64_t L = hlen + pad;
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)(L >> (8 * i));
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(hdr, 1, hlen, f) == hlen;
    for (size_t i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
    free(hdr);
    static const uint8_t zeros[8];
    for (int i = 0; ok && i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++) numel *= (size_t)t[i].shape[d];
        size_t nb = numel * st_dtype_size(t[i].dtype);
        ok = fwrite(t[i].data, 1, nb, f) == nb && fwrite(zeros, 1, (8 - nb % 8) % 8, f) == (8 - nb % 8) % 8;
    }
    return dfl_commit_tmp(f, tmp, path, ok);
}
