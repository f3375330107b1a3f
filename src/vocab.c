/* vocab.c - rank files of the draft's vocabulary (vocab.h). */
#include "vocab.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static const char rank_magic[] = "dflash-vocab-rank";

/* A decimal number at s[*at..end) (digits only, at most 18 of them), *at
 * moved past it. 0, or -1 when there is none or it is too long. */
static int read_number(const char *s, size_t end, size_t *at, int64_t *v) {
    size_t i = *at;
    int64_t x = 0;
    int digits = 0;
    while (i < end && s[i] >= '0' && s[i] <= '9') {
        if (++digits > 18) return -1;
        x = x * 10 + (s[i] - '0');
        i++;
    }
    if (!digits) return -1;
    *at = i;
    *v = x;
    return 0;
}

static size_t skip_blanks(const char *s, size_t end, size_t i) {
    while (i < end && (s[i] == ' ' || s[i] == '\t')) i++;
    return i;
}

void voc_rank_free(voc_rank *r) {
    if (!r) return;
    free(r->ids);
    free(r->counts);
    memset(r, 0, sizeof *r);
}

int voc_rank_parse(const char *text, size_t len, const char *name, int vocab, voc_rank *out) {
    memset(out, 0, sizeof *out);
    uint8_t *seen = NULL;
    int cap = 0, lineno = 0, have_header = 0;
    size_t pos = 0;
    while (pos < len) {
        size_t end = pos;
        while (end < len && text[end] != '\n') end++;
        size_t next = end < len ? end + 1 : end;
        lineno++;
        if (end > pos && text[end - 1] == '\r') end--;
        size_t i = skip_blanks(text, end, pos);
        if (i == end || text[i] == '#') { /* blank or a comment */
            if (!have_header && i < end) {
                dfl_seterr("%s line %d: a rank file starts with \"%s 1 VOCAB\", not a comment", name, lineno,
                           rank_magic);
                goto fail;
            }
            pos = next;
            continue;
        }
        if (!have_header) {
            size_t m = sizeof rank_magic - 1;
            int64_t version = 0, v = 0;
            if (end - i < m || memcmp(text + i, rank_magic, m) != 0) {
                dfl_seterr("%s line %d: not a dflash rank file (want \"%s 1 VOCAB\")", name, lineno, rank_magic);
                goto fail;
            }
            i = skip_blanks(text, end, i + m);
            if (read_number(text, end, &i, &version) != 0 || version != 1) {
                dfl_seterr("%s line %d: rank file version missing or not 1 (this dflash reads version 1)", name,
                           lineno);
                goto fail;
            }
            i = skip_blanks(text, end, i);
            if (read_number(text, end, &i, &v) != 0 || v < 1 || v > (1 << 24) || skip_blanks(text, end, i) != end) {
                dfl_seterr("%s line %d: header wants a vocabulary size 1..%d after the version", name, lineno, 1 << 24);
                goto fail;
            }
            if (vocab > 0 && v != vocab) {
                dfl_seterr("%s line %d: ranking made for a vocabulary of %lld ids, the model has %d", name, lineno,
                           (long long)v, vocab);
                goto fail;
            }
            out->vocab = (int)v;
            seen = dfl_calloc((size_t)v, 1);
            have_header = 1;
            pos = next;
            continue;
        }
        int64_t id = 0, count = 0;
        if (read_number(text, end, &i, &id) != 0) {
            dfl_seterr("%s line %d: want \"ID COUNT\" (two decimal numbers)", name, lineno);
            goto fail;
        }
        size_t j = skip_blanks(text, end, i);
        if (j == i || read_number(text, end, &j, &count) != 0 || skip_blanks(text, end, j) != end) {
            dfl_seterr("%s line %d: want \"ID COUNT\" (two decimal numbers)", name, lineno);
            goto fail;
        }
        if (id >= out->vocab) {
            dfl_seterr("%s line %d: token id %lld is outside the vocabulary (0..%d)", name, lineno, (long long)id,
                       out->vocab - 1);
            goto fail;
        }
        if (seen[id]) {
            dfl_seterr("%s line %d: token id %lld is listed twice", name, lineno, (long long)id);
            goto fail;
        }
        if (count < 1) {
            dfl_seterr("%s line %d: count %lld of id %lld (counts are >= 1)", name, lineno, (long long)count,
                       (long long)id);
            goto fail;
        }
        if (out->n && count > out->counts[out->n - 1]) {
            dfl_seterr("%s line %d: count %lld is larger than the line before's %lld (most frequent first)", name,
                       lineno, (long long)count, (long long)out->counts[out->n - 1]);
            goto fail;
        }
        seen[id] = 1;
        if (out->n == cap) {
            cap = cap ? 2 * cap : 1024;
            out->ids = dfl_realloc(out->ids, sizeof(int32_t) * (size_t)cap);
            out->counts = dfl_realloc(out->counts, sizeof(int64_t) * (size_t)cap);
        }
        out->ids[out->n] = (int32_t)id;
        out->counts[out->n] = count;
        out->n++;
        pos = next;
    }
    if (!have_header) {
        dfl_seterr("%s: empty: no \"%s 1 VOCAB\" header", name, rank_magic);
        goto fail;
    }
    if (!out->n) {
        dfl_seterr("%s: lists no token ids", name);
        goto fail;
    }
    free(seen);
    return 0;
fail:
    free(seen);
    voc_rank_free(out);
    return -1;
}

int voc_rank_read(const char *path, int vocab, voc_rank *out) {
    memset(out, 0, sizeof *out);
    size_t len = 0;
    char *text = dfl_read_file(path, &len);
    if (!text) return -1;
    int rc = voc_rank_parse(text, len, path, vocab, out);
    free(text);
    return rc;
}

typedef struct {
    int64_t count;
    int32_t id;
} rank_entry;

static int by_count_then_id(const void *a, const void *b) {
    const rank_entry *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

int voc_rank_write(const char *path, const int64_t *counts, int vocab) {
    rank_entry *e = dfl_malloc(sizeof *e * (size_t)(vocab > 0 ? vocab : 1));
    int n = 0;
    for (int i = 0; i < vocab; i++)
        if (counts[i] > 0) e[n++] = (rank_entry){.count = counts[i], .id = i};
    if (!n) {
        free(e);
        dfl_seterr("%s: no tokens counted: nothing to rank", path);
        return -1;
    }
    qsort(e, (size_t)n, sizeof *e, by_count_then_id);
    char *tmp = NULL;
    FILE *f = dfl_create_tmp(path, &tmp);
    if (!f) {
        free(e);
        return -1;
    }
    int ok = fprintf(f, "%s 1 %d\n", rank_magic, vocab) > 0;
    for (int i = 0; i < n && ok; i++) ok = fprintf(f, "%d %lld\n", e[i].id, (long long)e[i].count) > 0;
    free(e);
    return dfl_commit_tmp(f, tmp, path, ok);
}

static int by_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

void voc_select(const voc_rank *r, int n, int32_t *out) {
    int k = n < r->n ? n : r->n;
    memcpy(out, r->ids, sizeof(int32_t) * (size_t)k);
    if (k < n) { /* the smallest ids the ranking does not list */
        uint8_t *listed = dfl_calloc((size_t)r->vocab, 1);
        for (int i = 0; i < r->n; i++) listed[r->ids[i]] = 1;
        for (int id = 0; id < r->vocab && k < n; id++)
            if (!listed[id]) out[k++] = id;
        free(listed);
    }
    qsort(out, (size_t)n, sizeof(int32_t), by_id);
}
