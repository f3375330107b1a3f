/* test_stopstr.c - stop strings over streamed text (src/stopstr.c): cut
 * exactly, never shown, also across piece boundaries; the result does not
 * depend on how the text is split; whole UTF-8 characters only. */
#include <stdint.h>

#include "check.h"
#include "stopstr.h"

typedef struct {
    char s[4096];
    size_t n;
    int calls;
} sink;

static void put(void *ud, const char *t, size_t len) {
    sink *k = ud;
    if (k->n + len < sizeof k->s) memcpy(k->s + k->n, t, len), k->n += len;
    k->s[k->n] = 0;
    k->calls++;
}

/* Feed the pieces (NULL-terminated), finish, return the output in *k and
 * whether a stop matched. */
static int run(const char *const *stops, int ns, const char *const *pieces, sink *k) {
    memset(k, 0, sizeof *k);
    ss_matcher *m = ss_new(stops, ns);
    int hit = 0;
    for (int i = 0; pieces[i]; i++) hit |= ss_feed(m, pieces[i], strlen(pieces[i]), put, k);
    ss_finish(m, put, k);
    CHECK(hit == ss_matched(m), "return value and ss_matched agree");
    ss_free(m);
    return hit;
}

TEST(no_stops_pass_through) {
    sink k;
    const char *p[] = {"Hello", " wor", "ld", NULL};
    CHECK(run(NULL, 0, p, &k) == 0, "no match");
    CHECK(strcmp(k.s, "Hello world") == 0, "got '%s'", k.s);
    const char *e[] = {"", ""};
    CHECK(run(e, 2, p, &k) == 0 && strcmp(k.s, "Hello world") == 0, "empty stops ignored: '%s'", k.s);
}

TEST(cut_in_one_piece) {
    sink k;
    const char *st[] = {"END"};
    const char *p[] = {"Hello END world", NULL};
    CHECK(run(st, 1, p, &k) == 1, "match");
    CHECK(strcmp(k.s, "Hello ") == 0, "got '%s'", k.s);
}

TEST(cut_across_pieces) {
    sink k;
    const char *st[] = {"END"};
    const char *p[] = {"Hel", "lo E", "N", "D more", NULL};
    CHECK(run(st, 1, p, &k) == 1, "match");
    CHECK(strcmp(k.s, "Hello ") == 0, "got '%s'", k.s);
    const char *q[] = {"E", "N", "D", NULL};
    CHECK(run(st, 1, q, &k) == 1 && k.n == 0 && k.calls == 0, "stop as the whole text: nothing out");
}

TEST(hold_back_then_release) {
    const char *st[] = {"END"};
    ss_matcher *m = ss_new(st, 1);
    sink k;
    memset(&k, 0, sizeof k);
    CHECK(ss_feed(m, "ab E", 4, put, &k) == 0 && strcmp(k.s, "ab ") == 0, "E held: '%s'", k.s);
    CHECK(ss_feed(m, "N", 1, put, &k) == 0 && strcmp(k.s, "ab ") == 0, "EN held: '%s'", k.s);
    CHECK(ss_feed(m, "X", 1, put, &k) == 0 && strcmp(k.s, "ab ENX") == 0, "ENX released: '%s'", k.s);
    CHECK(ss_feed(m, " E", 2, put, &k) == 0 && strcmp(k.s, "ab ENX ") == 0, "'%s'", k.s);
    ss_finish(m, put, &k);
    CHECK(strcmp(k.s, "ab ENX E") == 0, "finish releases the tail: '%s'", k.s);
    CHECK(ss_feed(m, "", 0, put, &k) == 0, "empty piece");
    ss_free(m);
}

TEST(after_match_nothing) {
    const char *st[] = {"\n\n"};
    ss_matcher *m = ss_new(st, 1);
    sink k;
    memset(&k, 0, sizeof k);
    CHECK(ss_feed(m, "a\n", 2, put, &k) == 0, "no match yet");
    CHECK(ss_feed(m, "\nb", 2, put, &k) == 1, "match");
    CHECK(ss_feed(m, "more", 4, put, &k) == 1, "still matched");
    ss_finish(m, put, &k);
    CHECK(strcmp(k.s, "a") == 0, "got '%s'", k.s);
    ss_free(m);
}

TEST(first_to_complete_wins) {
    sink k;
    const char *a[] = {"abc", "b"};
    const char *p1[] = {"xabcy", NULL};
    run(a, 2, p1, &k);
    CHECK(strcmp(k.s, "xa") == 0, "'b' completes first: '%s'", k.s);
    const char *b[] = {"bc", "abcd"};
    const char *p2[] = {"ab", "cd", NULL};
    run(b, 2, p2, &k);
    CHECK(strcmp(k.s, "a") == 0, "'bc' completes first: '%s'", k.s);
    const char *c[] = {"c", "abc"};
    const char *p3[] = {"xab", "c", NULL};
    run(c, 2, p3, &k);
    CHECK(strcmp(k.s, "x") == 0, "same end: the longest: '%s'", k.s);
    const char *d[] = {"aab"};
    const char *p4[] = {"a", "a", "a", "b", NULL};
    run(d, 1, p4, &k);
    CHECK(strcmp(k.s, "a") == 0, "overlapping prefix: '%s'", k.s);
}

TEST(utf8_pieces) {
    sink k;
    const char *st[] = {"\xc3\xa9!"}; /* "é!" */
    const char *p[] = {"caf", "\xc3\xa9", "\xc3\xa9", "!", "x", NULL};
    CHECK(run(st, 1, p, &k) == 1, "match");
    CHECK(strcmp(k.s, "caf\xc3\xa9") == 0, "got '%s'", k.s);
    const char *st2[] = {"\xe2\x82\xac\xe2\x82\xac"}; /* "€€" */
    const char *q[] = {"1\xe2\x82\xac", "2", NULL};
    CHECK(run(st2, 1, q, &k) == 0 && strcmp(k.s, "1\xe2\x82\xac" "2") == 0, "released: '%s'", k.s);
}

/* ---- random texts and splits against a byte-at-a-time reference ---------- */

static uint64_t rng = 88172645463325252ull;
static unsigned rnd(unsigned n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (unsigned)(rng % n);
}

/* alphabet of whole characters, 1 to 3 bytes */
static const char *alpha[] = {"a", "b", "\xc3\xa9", "\xe2\x82\xac", " "};

static void rand_text(char *out, int chars) {
    out[0] = 0;
    for (int i = 0; i < chars; i++) strcat(out, alpha[rnd(5)]);
}

static size_t reference(const char *t, char stops[][64], int ns) {
    size_t n = strlen(t);
    for (size_t e = 1; e <= n; e++) {
        size_t best = SIZE_MAX;
        for (int k = 0; k < ns; k++) {
            size_t l = strlen(stops[k]);
            if (l && l <= e && e - l < best && memcmp(t + e - l, stops[k], l) == 0) best = e - l;
        }
        if (best != SIZE_MAX) return best;
    }
    return n;
}

static int lead(unsigned char c) { return (c & 0xC0) != 0x80; }

/* Output pieces must be whole characters of the text: start and end where
 * a character of the full text starts (out() gets a prefix of the text). */
typedef struct {
    sink k;
    const char *full;
    int split_char;
} csink;

static void cput(void *ud, const char *t, size_t len) {
    csink *c = ud;
    size_t off = c->k.n, n = strlen(c->full);
    if (off + len > n || !lead((unsigned char)c->full[off]) || (off + len < n && !lead((unsigned char)c->full[off + len])))
        c->split_char = 1;
    put(&c->k, t, len);
}

TEST(random_splits_match_reference) {
    char text[512], stops[4][64];
    int bad = 0;
    for (int iter = 0; iter < 3000 && !bad; iter++) {
        rand_text(text, 1 + (int)rnd(40));
        int ns = 1 + (int)rnd(4);
        for (int k = 0; k < ns; k++) rand_text(stops[k], 1 + (int)rnd(4));
        const char *sp[4] = {stops[0], stops[1], stops[2], stops[3]};
        size_t want = reference(text, stops, ns);
        ss_matcher *m = ss_new(sp, ns);
        csink c;
        memset(&c, 0, sizeof c);
        c.full = text;
        size_t n = strlen(text), i = 0;
        int hit = 0;
        while (i < n) { /* random piece of whole characters */
            size_t j = i + 1 + rnd(6);
            if (j > n) j = n;
            while (j < n && !lead((unsigned char)text[j])) j++;
            hit |= ss_feed(m, text + i, j - i, cput, &c);
            i = j;
        }
        ss_finish(m, cput, &c);
        ss_free(m);
        if (c.k.n != want || memcmp(c.k.s, text, want) != 0 || hit != (want < n) || c.split_char) {
            CHECK(0, "text '%s' stop[0] '%s': got '%s', want %zu bytes, hit %d split %d", text, stops[0], c.k.s,
                  want, hit, c.split_char);
            bad = 1;
        }
    }
}

int main(void) {
    RUN(no_stops_pass_through);
    RUN(cut_in_one_piece);
    RUN(cut_across_pieces);
    RUN(hold_back_then_release);
    RUN(after_match_nothing);
    RUN(first_to_complete_wins);
    RUN(utf8_pieces);
    RUN(random_splits_match_reference);
    CHECK_DONE("test_stopstr");
}
