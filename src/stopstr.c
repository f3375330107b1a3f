/* stopstr.c - stop strings over streamed text (see stopstr.h).
 *
 * The result does not depend on how the text is cut into pieces: it is what
 * feeding one byte at a time would give. The first stop string to complete
 * wins (of several completing at the same byte, the longest), and the text is
 * cut where that occurrence starts. */
#include "stopstr.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct ss_matcher {
    char **stop;   /* [n] the non-empty stop strings */
    size_t *len;   /* [n] their lengths */
    int n;
    size_t maxlen; /* longest stop string */
    char *buf;     /* [cap] held tail, then the new piece: buf[0..nbuf) */
    size_t nbuf, cap;
    int matched;
};

ss_matcher *ss_new(const char *const *stops, int n) {
    ss_matcher *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->stop = calloc((size_t)(n > 0 ? n : 1), sizeof *s->stop);
    s->len = calloc((size_t)(n > 0 ? n : 1), sizeof *s->len);
    if (!s->stop || !s->len) {
        ss_free(s);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        size_t l = strlen(stops[i]);
        if (l == 0) continue;
        s->stop[s->n] = malloc(l + 1);
        if (!s->stop[s->n]) {
            ss_free(s);
            return NULL;
        }
        memcpy(s->stop[s->n], stops[i], l + 1);
        s->len[s->n++] = l;
        if (l > s->maxlen) s->maxlen = l;
    }
    return s;
}

void ss_free(ss_matcher *s) {
    if (!s) return;
    if (s->stop)
        for (int i = 0; i < s->n; i++) free(s->stop[i]);
    free(s->stop);
    free(s->len);
    free(s->buf);
    free(s);
}

int ss_matched(const ss_matcher *s) { return s->matched; }

int ss_feed(ss_matcher *s, const char *text, size_t len, ss_out_fn out, void *ud) {
    if (s->matched) return 1;
    if (s->n == 0) {
        if (len) out(ud, text, len);
        return 0;
    }
    if (s->nbuf + len > s->cap) {
        size_t cap = 2 * (s->nbuf + len) + 16;
        char *b = realloc(s->buf, cap);
        if (!b) return 1; /* out of memory: stop rather than show a stop string */
        s->buf = b;
        s->cap = cap;
    }
    size_t old = s->nbuf;
    if (len) memcpy(s->buf + old, text, len);
    s->nbuf += len;
    /* a match ending inside the old tail would have been found before */
    for (size_t e = old + 1; e <= s->nbuf; e++) {
        size_t best = SIZE_MAX;
        for (int k = 0; k < s->n; k++) {
            size_t l = s->len[k];
            if (l <= e && e - l < best && memcmp(s->buf + e - l, s->stop[k], l) == 0) best = e - l;
        }
        if (best != SIZE_MAX) {
            if (best) out(ud, s->buf, best);
            s->matched = 1;
            s->nbuf = 0;
            return 1;
        }
    }
    /* hold back from the earliest position whose suffix starts a stop string */
    size_t keep = s->nbuf;
    for (size_t i = s->nbuf >= s->maxlen ? s->nbuf - s->maxlen + 1 : 0; i < s->nbuf && keep == s->nbuf; i++) {
        size_t sl = s->nbuf - i;
        for (int k = 0; k < s->n; k++)
            if (sl < s->len[k] && memcmp(s->buf + i, s->stop[k], sl) == 0) {
                keep = i;
                break;
            }
    }
    if (keep) out(ud, s->buf, keep);
    memmove(s->buf, s->buf + keep, s->nbuf - keep);
    s->nbuf -= keep;
    return 0;
}

void ss_finish(ss_matcher *s, ss_out_fn out, void *ud) {
    if (!s->matched && s->nbuf) out(ud, s->buf, s->nbuf);
    s->nbuf = 0;
}
