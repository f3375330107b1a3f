/* test_tokenizer.c - the Qwen3 and gpt-oss tokenizers against reference ids.
 *
 * Reference ids come from @lenml/tokenizers 3.7.2 (tools/reference/tokenizer_ref.mjs)
 * and, for the characters where that JS port differs from HF tokenizers, from
 * HF tokenizers itself (noted below). Files are found relative to the
 * repository root: $DFLASH_ROOT, else the current directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utf8proc.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "gguf_model.h"
#include "gguf_write.h"
#include "tmpdir.h"
#include "tokenizer.h"
#include "util.h"

static tok_tokenizer *T;
static char ROOT[4000];
static char TOKDIR[4096];

static char *root_path(const char *rel) { return dfl_path_join(ROOT, rel); }

/* ids of text, or NULL (n = 0) on error */
static int32_t *enc(const char *text, size_t len, size_t *n) {
    int32_t *ids;
    if (tok_encode(T, text, len, &ids, n) != 0) {
        fprintf(stderr, "  encode failed: %s\n", dfl_lasterr());
        *n = 0;
        return NULL;
    }
    return ids;
}

static int ids_equal(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static void print_ids(const char *what, const int32_t *a, size_t n) {
    fprintf(stderr, "    %s (%zu):", what, n);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", a[i]);
    fprintf(stderr, "%s\n", n > 40 ? " ..." : "");
}

#define CHECK_IDS(text, ...)                                                                   \
    do {                                                                                       \
        static const int32_t want_[] = {__VA_ARGS__};                                          \
        size_t n_, nw_ = sizeof want_ / sizeof want_[0];                                       \
        int32_t *got_ = enc(text, strlen(text), &n_);                                          \
        int ok_ = got_ && ids_equal(got_, n_, want_, nw_);                                     \
        CHECK(ok_, "encode(\"%s\")", text);                                                    \
        if (!ok_) {                                                                            \
            print_ids("got ", got_, n_);                                                       \
            print_ids("want", want_, nw_);                                                     \
        }                                                                                      \
        free(got_);                                                                            \
    } while (0)

/* Whole decode of ids with a fresh decoder. malloc'd, NUL-terminated. */
static char *decode_all(const int32_t *ids, size_t n, size_t *len) {
    size_t cap = tok_max_piece(T), used = 0, alloc = 1024;
    char *out = dfl_malloc(alloc);
    tok_decoder d = {0};
    for (size_t i = 0; i <= n; i++) {
        if (used + cap + 1 > alloc) out = dfl_realloc(out, alloc = (used + cap + 1) * 2);
        used += i < n ? tok_decode(T, &d, ids[i], out + used, cap) : tok_decode_flush(&d, out + used, cap);
    }
    out[used] = 0;
    *len = used;
    return out;
}

/* Read the output of `xz -dc path` (the fixtures are xz-compressed). */
static char *read_xz(const char *path, size_t *len) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "xz -dc '%s'", path);
    FILE *f = popen(cmd, "r");
    if (!f) return NULL;
    size_t cap = 1 << 20, n = 0, r;
    char *buf = dfl_malloc(cap);
    while ((r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 >= cap) buf = dfl_realloc(buf, cap *= 2);
    }
    if (pclose(f) != 0) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* ------------------------------------------------------------------ tests */

TEST(load) {
    double t0 = dfl_now();
    tok_tokenizer *t = tok_load(TOKDIR);
    double dt = dfl_now() - t0;
    CHECK(t != NULL, "tok_load: %s", dfl_lasterr());
    if (!t) return;
    fprintf(stderr, "  load: %.3f s\n", dt);
    CHECK(tok_n_vocab(t) == 151669, "n_vocab %d", tok_n_vocab(t));
    CHECK(tok_eos_id(t) == 151645, "eos %d", tok_eos_id(t));
    const char *ct = tok_chat_template(t);
    CHECK(ct && strlen(ct) == 4116 && strstr(ct, "<|im_start|>"), "chat template");
    CHECK(tok_lookup(t, "<|im_end|>") == 151645, "lookup im_end");
    CHECK(tok_lookup(t, "\xc4\xa0the") == 279, "lookup Gthe %d", tok_lookup(t, "\xc4\xa0the"));
    CHECK(tok_lookup(t, "Hello") == 9707, "lookup Hello");
    CHECK(tok_lookup(t, "no-such-token-xyzzy") == -1, "lookup missing");
    CHECK(tok_max_piece(t) >= 256, "max piece %zu", tok_max_piece(t));
    tok_free(t);
}

/* ids that two other implementations (@lenml/tokenizers and a Python BPE)
 * agree on for these strings */
TEST(logistics_cases) {
    CHECK_IDS("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
              151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198, 151667, 271, 151668, 271);
    CHECK_IDS("The quick brown fox", 785, 3974, 13876, 38835);
    CHECK_IDS("Hello, world! It's 2024.   \xc3\x9c" "n\xc3\xaf" "c\xc3\xb6" "d\xc3\xa9 "
              "\xe4\xb8\xad\xe6\x96\x87\xe6\xb5\x8b\xe8\xaf\x95 123456\n\n  def f(x):\n\treturn x",
              9707, 11, 1879, 0, 1084, 594, 220, 17, 15, 17, 19, 13, 256, 30512, 77, 37572, 66, 2956,
              128505, 72858, 16744, 81705, 220, 16, 17, 18, 19, 20, 21, 271, 220, 707, 282, 2075, 982,
              853, 856);
    size_t n;
    int32_t *ids = enc("", 0, &n);
    CHECK(ids != NULL && n == 0, "empty text gives %zu ids", n);
    free(ids);
}

/* Characters on which the JS reference and HF tokenizers differ (the corpus
 * leaves them out); expected ids from HF tokenizers 0.23.2 itself
 * (tools/reference/tokenizer_hf_check.py on the GPU machine):
 *   U+0085 is white space and U+FEFF is not (Unicode White_Space);
 *   U+180E is not white space (PCRE2's \s says it is, hence \p{White_Space});
 *   "'\u017f" (long s) gives the same ids whichever way "(?i:'s)" treats it;
 *   letters new in Unicode 15 are not \p{L} for HF either (U+1E030, U+31350);
 *   HF's NFC has Unicode 9.0 tables: U+2DFA U+08D3 is not reordered and the
 *   Dives Akuru pair U+11935 U+11930 is not composed (NFC_NEWER_THAN_9). */
TEST(hf_edge_characters) {
    static const struct {
        const char *text;
        int n;
        int32_t ids[8];
    } cases[] = {
        {"\xc2\x85", 2, {126, 227}},
        {"a\xc2\x85" "b", 4, {64, 126, 227, 65}},
        {"x \xc2\x85 y", 4, {87, 2139, 227, 379}},
        {"a\xc2\x85\xc2\x85 b", 6, {64, 126, 227, 126, 227, 293}},
        {" \xc2\x85\x0a", 3, {2139, 227, 198}},
        {"\xef\xbb\xbf", 1, {3225}},
        {"\xef\xbb\xbfHello", 2, {3225, 9707}},
        {"a\xef\xbb\xbf b", 3, {64, 3225, 293}},
        {"a \xef\xbb\xbf\xef\xbb\xbf b", 4, {64, 75780, 3225, 293}},
        {"it'\xc5\xbf", 3, {275, 6, 144815}},
        {"IT'\xc5\xbf here", 4, {952, 6, 144815, 1588}},
        {"'\xc5\xbf", 2, {6, 144815}},
        {"'\xe2\x84\xaa", 2, {6, 42}},
        {"\xe1\xa0\x8e", 2, {123970, 236}},
        {"a\xe1\xa0\x8e b", 4, {64, 123970, 236, 293}},
        {"a \xe1\xa0\x8e\xe1\xa0\x8e b", 7, {64, 86089, 254, 236, 123970, 236, 293}},
        {"\xe1\xa0\x8e\xe1\xa0\x8e  x", 6, {123970, 236, 123970, 236, 220, 856}},
        {"x\xe2\x80\xa8y", 4, {87, 378, 101, 88}},
        {"\x0b\x0c", 2, {199, 200}},
        {"a \xe3\x80\x80 b", 4, {64, 220, 22441, 293}},
        {"\xc2\xa0\xc2\xa0x", 3, {4102, 4102, 87}},
        {"a\xf0\x9e\x80\xb0" "b", 6, {64, 172, 252, 222, 108, 65}},
        {"\xe4\xb8\xad\xf0\xb1\x8d\x90\xe6\x96\x87", 6, {15946, 172, 109, 235, 238, 16744}},
        {"'\xc5\xbfx", 3, {6, 144815, 87}},
        {"it'\xc5\xbftop", 4, {275, 6, 144815, 3481}},
        {"'\xc5\xbf\xc5\xbf", 3, {6, 144815, 144815}},
        {"x'\xc5\xbf" "1", 4, {87, 6, 144815, 16}},
        {"\xe3\x82\xbe\xe2\xb7\xba\xe0\xa3\x93", 7, {135892, 158, 115, 118, 156, 96, 241}},
        {"a\xcc\x95\xcc\x80", 3, {6362, 136, 243}},
        {"a\xcc\x80\xcc\x95", 3, {6362, 136, 243}},
        {"\xe0\xad\x87\xe0\xac\xbe", 3, {156, 255, 233}},
        {"\xf0\x91\x8d\x87\xf0\x91\x8c\xbe", 3, {128240, 235, 233}},
        {"\xf0\x91\xa4\xb5\xf0\x91\xa4\xb0", 6, {128240, 97, 113, 128240, 97, 108}},
        {"e\xe1\xaa\xb0\xcc\x96", 6, {68, 136, 244, 157, 103, 108}},
        {"e\xe0\xa3\xa3\xcc\x80", 4, {4458, 156, 96, 96}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n;
        int32_t *ids = enc(cases[i].text, strlen(cases[i].text), &n);
        int ok = ids && ids_equal(ids, n, cases[i].ids, (size_t)cases[i].n);
        CHECK(ok, "case %zu", i);
        if (!ok) {
            print_ids("got ", ids, n);
            print_ids("want", cases[i].ids, (size_t)cases[i].n);
        }
        free(ids);
    }
}

/* NFC composes, reorders and maps singletons, also next to ASCII and added tokens */
TEST(nfc) {
    static const char *pairs[][2] = {
        {"e\xcc\x81", "\xc3\xa9"},                                    /* e + acute */
        {"A\xcc\x8a", "\xc3\x85"},                                    /* A + ring */
        {"\xe2\x84\xab", "\xc3\x85"},                                /* Angstrom sign */
        {"<\xcc\xb8", "\xe2\x89\xae"},                               /* < + long solidus = not-less */
        {"\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81"}, /* jamo L V T */
        {"a\xcc\x95\xcc\x80", "\xc3\xa0\xcc\x95"},                  /* reorder, then compose */
        {"x e\xcc\x81 y", "x \xc3\xa9 y"},
        {"<think>e\xcc\x81", "<think>\xc3\xa9"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        size_t n1, n2;
        int32_t *a = enc(pairs[i][0], strlen(pairs[i][0]), &n1);
        int32_t *b = enc(pairs[i][1], strlen(pairs[i][1]), &n2);
        CHECK(a && b && ids_equal(a, n1, b, n2), "pair %zu", i);
        free(a);
        free(b);
    }
    /* an added token is not normalized together with what follows it */
    size_t n;
    int32_t *ids = enc("<|im_end|>\xcc\x81", 12, &n);
    size_t m = 0;
    char *back = ids ? decode_all(ids, n, &m) : NULL;
    CHECK(ids && n >= 2 && ids[0] == 151645 && m == 12 && memcmp(back, "<|im_end|>\xcc\x81", 12) == 0,
          "added token + combining mark");
    free(back);
    free(ids);
}

TEST(special_tokens) {
    static const char *names[26] = {
        "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
        "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
        "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
        "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
        "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"};
    for (int i = 0; i < 26; i++) {
        int id = 151643 + i;
        size_t n;
        int32_t *ids = enc(names[i], strlen(names[i]), &n);
        CHECK(ids && n == 1 && ids[0] == id, "encode %s", names[i]);
        CHECK(tok_lookup(T, names[i]) == id, "lookup %s", names[i]);
        char buf[4096];
        tok_decoder d = {0};
        size_t m = tok_decode(T, &d, id, buf, sizeof buf);
        CHECK(m == strlen(names[i]) && memcmp(buf, names[i], m) == 0, "decode %d", id);
        free(ids);
        /* glued to text on both sides, and twice in a row */
        char txt[128];
        snprintf(txt, sizeof txt, "a%s%sb", names[i], names[i]);
        ids = enc(txt, strlen(txt), &n);
        CHECK(ids && n == 4 && ids[1] == id && ids[2] == id && ids[0] == 64 && ids[3] == 65,
              "encode %s", txt);
        free(ids);
    }
}

typedef struct {
    char *blob;
    size_t nblob;
    int ndocs;
    const char **doc; /* [ndocs] into blob */
    size_t *len;
    int32_t **ids; /* reference ids [ndocs][nids[i]] */
    size_t *nids;
} corpus;
static corpus C;

/* Ids separated by spaces, up to the end of s, into a malloc'd array. */
static int32_t *parse_ids(const char *s, size_t *n) {
    size_t k = 0, cap = 16;
    int32_t *ids = dfl_malloc(cap * sizeof *ids);
    for (const char *q = s; *q;) {
        char *e;
        long v = strtol(q, &e, 10);
        if (e == q) break;
        if (k == cap) ids = dfl_realloc(ids, (cap *= 2) * sizeof *ids);
        ids[k++] = (int32_t)v;
        q = e;
    }
    *n = k;
    return ids;
}

static int load_corpus(void) {
    char *cp = root_path("tests/fixtures/tokenizer/corpus.txt.xz");
    char *ip = root_path("tests/fixtures/tokenizer/ids.txt.xz");
    size_t nids_txt;
    C.blob = read_xz(cp, &C.nblob);
    char *idtxt = C.blob ? read_xz(ip, &nids_txt) : NULL;
    free(cp);
    free(ip);
    if (!idtxt) return -1;
    int cap = 0;
    for (size_t p = 0; p < C.nblob;) {
        if (C.blob[p] != '#') return -1;
        char *end;
        size_t n = strtoul(C.blob + p + 1, &end, 10);
        if (*end != '\n' || (size_t)(end + 1 - C.blob) + n > C.nblob) return -1;
        if (C.ndocs == cap) {
            cap = cap * 2 + 64;
            C.doc = dfl_realloc(C.doc, cap * sizeof *C.doc);
            C.len = dfl_realloc(C.len, cap * sizeof *C.len);
        }
        C.doc[C.ndocs] = end + 1;
        C.len[C.ndocs++] = n;
        p = (size_t)(end + 1 - C.blob) + n;
    }
    C.ids = dfl_calloc(C.ndocs, sizeof *C.ids);
    C.nids = dfl_calloc(C.ndocs, sizeof *C.nids);
    char *s = idtxt;
    for (int d = 0; d < C.ndocs; d++) {
        char *nl = strchr(s, '\n');
        if (!nl) return -1;
        *nl = 0;
        C.ids[d] = parse_ids(s, &C.nids[d]);
        s = nl + 1;
    }
    free(idtxt);
    return 0;
}

/* T's ids for every corpus document against the reference: C.ids, or
 * ovr[d] where ovr (NULL: none) has an entry for document d. */
static void corpus_check(int32_t **ovr, const size_t *novr) {
    CHECK(C.ndocs > 0, "corpus fixtures missing or malformed");
    size_t bytes = 0, ntok = 0;
    int bad = 0;
    double t0 = dfl_now();
    for (int d = 0; d < C.ndocs; d++) {
        size_t n;
        int32_t *ids = enc(C.doc[d], C.len[d], &n);
        const int32_t *want = ovr && ovr[d] ? ovr[d] : C.ids[d];
        size_t nwant = ovr && ovr[d] ? novr[d] : C.nids[d];
        bytes += C.len[d];
        ntok += n;
        if (!ids || !ids_equal(ids, n, want, nwant)) {
            size_t i = 0;
            while (ids && i < n && i < nwant && ids[i] == want[i]) i++;
            if (bad++ < 5) {
                fprintf(stderr, "  doc %d (%zu bytes): first difference at id %zu\n", d, C.len[d], i);
                size_t from = i > 3 ? i - 3 : 0;
                print_ids("got ", ids ? ids + from : NULL, ids && n > from ? n - from : 0);
                print_ids("want", want + from, nwant - from);
            }
        }
        free(ids);
    }
    double dt = dfl_now() - t0;
    fprintf(stderr, "  %d documents, %zu bytes, %zu ids: %.3f s, %.2f MB/s\n", C.ndocs, bytes, ntok,
            dt, bytes / dt / 1e6);
    CHECK(bytes >= 1000000, "corpus has only %zu bytes", bytes);
    CHECK(bad == 0, "%d of %d documents differ", bad, C.ndocs);
}

TEST(corpus_matches_reference) { corpus_check(NULL, NULL); }

static void free_ids(int32_t **want, size_t *nwant) {
    for (int d = 0; want && d < C.ndocs; d++) free(want[d]);
    free(want);
    free(nwant);
}

/* decode(encode(x)) == NFC(x), whole and streamed; no streamed chunk ends inside a character */
TEST(round_trip) {
    int bad = 0, partial = 0;
    for (int d = 0; d < C.ndocs; d++) {
        size_t n, m;
        int32_t *ids = enc(C.doc[d], C.len[d], &n);
        char *txt = decode_all(ids, n, &m);
        unsigned char *nfc = NULL;
        utf8proc_ssize_t k = utf8proc_map((const unsigned char *)C.doc[d], (utf8proc_ssize_t)C.len[d],
                                          &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (k < 0 || (size_t)k != m || memcmp(nfc, txt, m) != 0) {
            if (bad++ < 3) fprintf(stderr, "  doc %d: round trip differs\n", d);
        }
        /* streamed: every chunk is whole UTF-8 */
        tok_decoder dec = {0};
        size_t cap = tok_max_piece(T);
        char *buf = dfl_malloc(cap);
        for (size_t i = 0; i < n; i++) {
            size_t w = tok_decode(T, &dec, ids[i], buf, cap);
            if (dfl_utf8_invalid_at(buf, w) >= 0) partial++;
        }
        CHECK(dec.npend == 0, "doc %d: bytes held at the end", d);
        free(buf);
        free(nfc);
        free(txt);
        free(ids);
    }
    CHECK(bad == 0, "%d documents do not round-trip", bad);
    CHECK(partial == 0, "%d streamed chunks held a partial character", partial);
}

TEST(stream_decode_utf8) {
    /* U+1FAE0 (melting face, F0 9F AB A0) is not one token: its bytes span several */
    const char *emoji = "\xf0\x9f\xab\xa0";
    size_t n;
    int32_t *ids = enc(emoji, 4, &n);
    CHECK(ids && n >= 2, "emoji should take several tokens, got %zu", n);
    tok_decoder d = {0};
    char out[4096], all[64];
    size_t total = 0;
    for (size_t i = 0; ids && i < n; i++) {
        size_t w = tok_decode(T, &d, ids[i], out, sizeof out);
        CHECK(w == 0 || (i == n - 1 && w == 4), "token %zu of the emoji wrote %zu bytes", i, w);
        memcpy(all + total, out, w);
        total += w;
    }
    CHECK(total == 4 && memcmp(all, emoji, 4) == 0, "emoji came back wrong");
    CHECK(tok_decode_flush(&d, out, sizeof out) == 0, "nothing should be held");
    free(ids);

    /* byte tokens one at a time: F0 9F 98 80 = U+1F600 */
    int b[4] = {tok_lookup(T, "\xc3\xb0"), tok_lookup(T, "\xc5\x81"), tok_lookup(T, "\xc4\xba"),
                tok_lookup(T, "\xc4\xa2")};
    CHECK(b[0] >= 0 && b[1] >= 0 && b[2] >= 0 && b[3] >= 0, "byte tokens");
    memset(&d, 0, sizeof d);
    size_t w0 = tok_decode(T, &d, b[0], out, sizeof out);
    size_t w1 = tok_decode(T, &d, b[1], out, sizeof out);
    size_t w2 = tok_decode(T, &d, b[2], out, sizeof out);
    CHECK(w0 == 0 && w1 == 0 && w2 == 0 && d.npend == 3, "held %d", d.npend);
    size_t w3 = tok_decode(T, &d, b[3], out, sizeof out);
    CHECK(w3 == 4 && memcmp(out, "\xf0\x9f\x98\x80", 4) == 0, "completed emoji %zu", w3);

    /* an interrupted sequence becomes one U+FFFD, then the next character */
    memset(&d, 0, sizeof d);
    tok_decode(T, &d, b[0], out, sizeof out);
    tok_decode(T, &d, b[1], out, sizeof out);
    size_t w = tok_decode(T, &d, tok_lookup(T, "a"), out, sizeof out);
    CHECK(w == 4 && memcmp(out, "\xef\xbf\xbd" "a", 4) == 0, "interrupted sequence");
    /* held bytes at the end of the stream come out as one U+FFFD */
    memset(&d, 0, sizeof d);
    tok_decode(T, &d, b[0], out, sizeof out);
    tok_decode(T, &d, b[1], out, sizeof out);
    w = tok_decode_flush(&d, out, sizeof out);
    CHECK(w == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0 && d.npend == 0, "flush");
    /* a lone continuation byte (0x80 = "Ģ") and byte 0xFF ("ÿ") are U+FFFD each */
    memset(&d, 0, sizeof d);
    w = tok_decode(T, &d, tok_lookup(T, "\xc4\xa2"), out, sizeof out);
    CHECK(w == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0, "lone continuation");
    w = tok_decode(T, &d, tok_lookup(T, "\xc3\xbf"), out, sizeof out);
    CHECK(w == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0, "0xff");
    /* out-of-range ids write nothing */
    CHECK(tok_decode(T, &d, -1, out, sizeof out) == 0, "id -1");
    CHECK(tok_decode(T, &d, 151669, out, sizeof out) == 0, "id 151669");
    CHECK(tok_decode(T, &d, 1 << 30, out, sizeof out) == 0, "id 2^30");
}

TEST(invalid_utf8) {
    static const struct {
        const char *s;
        size_t len;
        long off;
    } cases[] = {
        {"abc\xff", 4, 3},        {"\x80", 1, 0},           {"ok \xc0\xaf", 5, 3}, /* overlong */
        {"x\xed\xa0\x80y", 5, 1}, /* surrogate */ {"ab\xe4\xb8", 4, 2},         /* truncated */
        {"\xf4\x90\x80\x80", 4, 0}, /* > U+10FFFF */ {"<|im_end|>\xfe", 11, 10},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t *ids = (int32_t *)1;
        size_t n = 99;
        int rc = tok_encode(T, cases[i].s, cases[i].len, &ids, &n);
        char want[64];
        snprintf(want, sizeof want, "offset %ld", cases[i].off);
        CHECK(rc == -1 && ids == NULL && n == 0, "case %zu accepted", i);
        CHECK(strstr(dfl_lasterr(), want) != NULL, "case %zu: error \"%s\" lacks \"%s\"", i,
              dfl_lasterr(), want);
    }
}

/* A text made of one huge run (white space, letters, digits) stays fast and exact. */
TEST(long_runs) {
    size_t n = 200000;
    char *s = dfl_malloc(n + 2);
    const char fill[] = {' ', 'a', '7', '\n', '-'};
    for (size_t f = 0; f < sizeof fill; f++) {
        memset(s, fill[f], n);
        s[n] = 'x';
        double t0 = dfl_now();
        size_t m, k;
        int32_t *ids = enc(s, n + 1, &m);
        double dt = dfl_now() - t0;
        CHECK(ids != NULL, "fill '%c'", fill[f]);
        char *back = decode_all(ids, m, &k);
        CHECK(k == n + 1 && memcmp(back, s, k) == 0, "round trip fill '%c'", fill[f]);
        CHECK(dt < 5.0, "fill '%c' took %.2f s", fill[f], dt);
        free(back);
        free(ids);
    }
    free(s);
}

/* A long run of combining marks of four classes in descending class order
 * (U+0301 230, U+0316 220, U+05B0 10, U+0334 1) after 'a': NFC sorts the run
 * stably by class and composes a + U+0301 into U+00E1. utf8proc's own
 * ordering (an adjacent-swap sort) is quadratic in the run: this input
 * (96000 marks, 192 KB) took it about a minute; the tokenizer's linear
 * ordering well under a second (docs/reliability.md). The check is the
 * output, exactly: ids decode to the NFC text and equal the NFC text's ids. */
TEST(nfc_long_mark_run) {
    enum { N = 24000 };
    static const char mark[4][3] = {"\xcc\x81", "\xcc\x96", "\xd6\xb0", "\xcc\xb4"};
    char *in = dfl_malloc(1 + 8 * (size_t)N + 1), *want = dfl_malloc(2 + 8 * (size_t)N + 1);
    size_t n = 0, w = 0;
    in[n++] = 'a';
    for (int i = 0; i < N; i++)
        for (int k = 0; k < 4; k++, n += 2) memcpy(in + n, mark[k], 2);
    memcpy(want, "\xc3\xa1", 2); /* a + U+0301 composed */
    w = 2;
    for (int k = 3; k >= 0; k--)
        for (int i = 0; i < N - (k == 0); i++, w += 2) memcpy(want + w, mark[k], 2);
    size_t m1, m2, k;
    int32_t *ids = enc(in, n, &m1), *ids2 = enc(want, w, &m2);
    CHECK(ids && ids2, "encode");
    char *back = ids ? decode_all(ids, m1, &k) : NULL;
    CHECK(back && k == w && memcmp(back, want, w) == 0, "decoded text is the NFC form (%zu bytes, want %zu)", k, w);
    CHECK(ids && ids2 && ids_equal(ids, m1, ids2, m2), "ids equal the NFC text's ids");
    free(back);
    free(ids);
    free(ids2);
    free(in);
    free(want);
}

/* Random mixes of starters, composing letters, Hangul jamo and marks of
 * many classes: the tokenizer's text after NFC (decode of the ids) equals
 * utf8proc_map's NFC, the implementation it replaced. */
TEST(nfc_matches_utf8proc) {
    static const int32_t cps[] = {'a', 'e', 'o', 'A', ' ', 0x00E1, 0x0301, 0x0300, 0x0316, 0x0327, 0x0334, 0x0345,
                                  0x05B0, 0x05B8, 0x0653, 0x0654, 0x0655, 0x093C, 0x0CBC, 0x1100, 0x1161, 0x11A8,
                                  0xAC00, 0x1E0D, 0x0307, 0x0323, 0x031B, 0x0F71, 0x0F72, 0x0F80, 0x3099, 0x304B,
                                  0x0915, 0x0B47, 0x0B3E, 0x0B57, 0x1025, 0x102E, 0x212B, 0x2126, 0x0344, 0x1D15E};
    uint64_t r = 12345;
    int bad = 0;
    for (int it = 0; it < 3000; it++) {
        char s[400];
        size_t n = 0;
        int len = 1 + (int)(r % 40);
        for (int i = 0; i < len; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            n += (size_t)utf8proc_encode_char(cps[(r >> 33) % (sizeof cps / sizeof cps[0])], (utf8proc_uint8_t *)s + n);
        }
        unsigned char *want = NULL;
        utf8proc_ssize_t wn = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &want,
                                           UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        size_t m, k;
        int32_t *ids = enc(s, n, &m);
        char *back = ids ? decode_all(ids, m, &k) : NULL;
        if (wn < 0 || !back || (size_t)wn != k || memcmp(back, want, k)) bad++;
        free(back);
        free(ids);
        free(want);
    }
    CHECK(bad == 0, "%d of 3000 texts differ from utf8proc_map's NFC", bad);
}

/* Missing, truncated and inconsistent files give an error, not a crash. */
TEST(bad_files) {
    tok_tokenizer *t = tok_load("/nonexistent-dir");
    CHECK(t == NULL && strstr(dfl_lasterr(), "tokenizer.json"), "missing dir: %s", dfl_lasterr());

    char dir[] = "/tmp/dfl_tok_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    char *tj = dfl_path_join(dir, "tokenizer.json"), *tc = dfl_path_join(dir, "tokenizer_config.json");
    char *src = dfl_path_join(TOKDIR, "tokenizer.json");
    size_t len;
    char *real = dfl_read_file(src, &len);
    CHECK(real != NULL, "read %s", src);
    static const struct {
        const char *what;
        const char *text;
    } bad[] = {
        {"empty", ""},
        {"not an object", "[1,2,3]"},
        {"no model", "{\"added_tokens\":[]}"},
        {"not BPE", "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}"},
        {"merge not in vocab",
         "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[[\"a\",\"b\"]]}}"},
        {"bad id", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-4},\"merges\":[]}}"},
        {"bad regex",
         "{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":"
         "\"Isolated\",\"invert\":false},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}"},
        {"unknown normalizer",
         "{\"normalizer\":{\"type\":\"Lowercase\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},"
         "\"merges\":[]}}"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(tj, bad[i].text, strlen(bad[i].text));
        t = tok_load(dir);
        CHECK(t == NULL, "%s: loaded", bad[i].what);
        CHECK(strstr(dfl_lasterr(), tj) != NULL, "%s: error \"%s\" lacks the path", bad[i].what,
              dfl_lasterr());
        tok_free(t);
    }
    /* what tokenizer.c does not implement is refused, naming the field */
    static const struct {
        const char *text, *names;
    } refused[] = {
        {"{\"added_tokens\":[{\"id\":1,\"content\":\"<x>\",\"lstrip\":true}],\"model\":{\"type\":\"BPE\","
         "\"vocab\":{\"a\":0},\"merges\":[]}}", "lstrip"},
        {"{\"added_tokens\":[{\"id\":1,\"content\":\"<x>\",\"single_word\":true}],\"model\":{\"type\":\"BPE\","
         "\"vocab\":{\"a\":0},\"merges\":[]}}", "single_word"},
        {"{\"model\":{\"type\":\"BPE\",\"dropout\":0.1,\"vocab\":{\"a\":0},\"merges\":[]}}", "model.dropout"},
        {"{\"decoder\":{\"type\":\"Metaspace\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
         "decoder type Metaspace"},
        /* SentencePiece-style (charmode) parts dflash does not implement */
        {"{\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteFallback\"},{\"type\":\"Strip\","
         "\"content\":\" \",\"start\":1,\"stop\":0}]},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
         "decoder type Strip"},
        {"{\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteFallback\"},{\"type\":\"Replace\","
         "\"pattern\":{\"String\":\"x\"},\"content\":\" \"}]},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},"
         "\"merges\":[]}}", "decoder step Replace after"},
        {"{\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" +\"},\"content\":\"x\"},\"model\":"
         "{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}", "normalizer Replace"},
        {"{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"Contiguous\","
         "\"invert\":false},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}", "behavior Contiguous"},
        {"{\"decoder\":{\"type\":\"ByteFallback\"},\"model\":{\"type\":\"BPE\",\"byte_fallback\":false,"
         "\"vocab\":{\"a\":0},\"merges\":[]}}", "model.byte_fallback false"},
        {"{\"decoder\":{\"type\":\"ByteFallback\"},\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,"
         "\"vocab\":{\"a\":0},\"merges\":[]}}", "<0x00>"},
        {"{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"a\":0},\"merges\":[]}}",
         "model.byte_fallback"},
        {"{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"Fuse\"},\"model\":{\"type\":\"BPE\","
         "\"byte_fallback\":true,\"vocab\":{\"a\":0},\"merges\":[]}}", "ByteLevel pre-tokenizer"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        write_file(tj, refused[i].text, strlen(refused[i].text));
        t = tok_load(dir);
        CHECK(t == NULL && strstr(dfl_lasterr(), tj) && strstr(dfl_lasterr(), refused[i].names),
              "%s: loaded or error \"%s\"", refused[i].names, t ? "" : dfl_lasterr());
        tok_free(t);
    }
    /* chat_template.jinja, when there, is the template (over the config's) */
    {
        const char *mini = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}";
        char *tf = dfl_path_join(dir, "chat_template.jinja");
        write_file(tj, mini, strlen(mini));
        write_file(tc, "{\"chat_template\": \"from config\"}", 32);
        write_file(tf, "from file\n", 10);
        t = tok_load(dir);
        CHECK(t && tok_chat_template(t) && !strcmp(tok_chat_template(t), "from file\n"), "chat_template.jinja: %s",
              t ? tok_chat_template(t) : dfl_lasterr());
        tok_free(t);
        unlink(tf);
        t = tok_load(dir);
        CHECK(t && tok_chat_template(t) && !strcmp(tok_chat_template(t), "from config"), "config template: %s",
              t ? "" : dfl_lasterr());
        tok_free(t);
        write_file(tf, "a\0b", 3);
        t = tok_load(dir);
        CHECK(t == NULL && strstr(dfl_lasterr(), "chat_template.jinja") && strstr(dfl_lasterr(), "NUL"),
              "template with a NUL byte: %s", t ? "loaded" : dfl_lasterr());
        tok_free(t);
        unlink(tf);
        unlink(tc);
        free(tf);
    }
    if (real) { /* the real file cut short at a few places */
        size_t cuts[] = {1, 1000, len / 2, len - 2};
        for (size_t i = 0; i < 4; i++) {
            write_file(tj, real, cuts[i]);
            t = tok_load(dir);
            CHECK(t == NULL, "truncated at %zu: loaded", cuts[i]);
            tok_free(t);
        }
        /* good tokenizer.json, garbled config */
        write_file(tj, real, len);
        write_file(tc, "{\"eos_token\": ", 14);
        t = tok_load(dir);
        CHECK(t == NULL && strstr(dfl_lasterr(), "tokenizer_config.json"), "garbled config: %s",
              dfl_lasterr());
        tok_free(t);
        write_file(tc, "{\"eos_token\": \"<|nope|>\"}", 25);
        t = tok_load(dir);
        CHECK(t == NULL && strstr(dfl_lasterr(), "<|nope|>"), "unknown eos: %s", dfl_lasterr());
        tok_free(t);
        /* no config at all is fine: no template, no eos */
        unlink(tc);
        t = tok_load(dir);
        CHECK(t && tok_eos_id(t) == -1 && tok_chat_template(t) == NULL, "no config: %s",
              t ? "" : dfl_lasterr());
        tok_free(t);
    }
    unlink(tj);
    unlink(tc);
    rmdir(dir);
    free(real);
    free(src);
    free(tj);
    free(tc);
}

/* The old merges format ("a b" strings, as in Llama-3's file) gives the same
 * tokenizer: rewrite the real file that way and compare on corpus text. */
TEST(string_merges) {
    char *src = dfl_path_join(TOKDIR, "tokenizer.json");
    char *txt = dfl_read_file(src, NULL);
    free(src);
    cJSON *root = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    cJSON *merges = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "model"), "merges");
    CHECK(cJSON_IsArray(merges), "merges");
    if (!cJSON_IsArray(merges)) {
        cJSON_Delete(root);
        return;
    }
    cJSON *strs = cJSON_CreateArray(), *m;
    cJSON_ArrayForEach(m, merges) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s %s", cJSON_GetArrayItem(m, 0)->valuestring,
                 cJSON_GetArrayItem(m, 1)->valuestring);
        cJSON_AddItemToArray(strs, cJSON_CreateString(buf));
    }
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(root, "model"), "merges", strs);
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    char dir[] = "/tmp/dfl_tok_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char *tj = dfl_path_join(dir, "tokenizer.json");
    FILE *f = fopen(tj, "wb");
    if (f) {
        fputs(out, f);
        fclose(f);
    }
    free(out);
    tok_tokenizer *t2 = tok_load(dir);
    CHECK(t2 != NULL, "load with string merges: %s", dfl_lasterr());
    for (int d = 0; t2 && d < C.ndocs; d += 7) {
        int32_t *a, *b;
        size_t na, nb;
        int ra = tok_encode(T, C.doc[d], C.len[d], &a, &na);
        int rb = tok_encode(t2, C.doc[d], C.len[d], &b, &nb);
        CHECK(ra == 0 && rb == 0 && ids_equal(a, na, b, nb), "doc %d", d);
        free(a);
        free(b);
    }
    tok_free(t2);
    unlink(tj);
    rmdir(dir);
    free(tj);
}

/* The same tokenizer read from a GGUF file (dflash convert of a tiny model
 * that links models/qwen3-tokenizer): the same ids on every case above. */
static char GGUF_PATH[300];

TEST(gguf_load) {
    tok_tokenizer *t = ggm_tokenizer(GGUF_PATH);
    CHECK(t != NULL, "ggm_tokenizer: %s", dfl_lasterr());
    if (!t) return;
    CHECK(tok_n_vocab(t) == 151669, "n_vocab %d", tok_n_vocab(t));
    CHECK(tok_eos_id(t) == 151645, "eos %d", tok_eos_id(t));
    const char *ct = tok_chat_template(t);
    CHECK(ct && strcmp(ct, tok_chat_template(T)) == 0, "chat template differs");
    CHECK(tok_lookup(t, "<|im_end|>") == 151645, "lookup im_end");
    CHECK(tok_lookup(t, "\xc4\xa0the") == 279, "lookup Gthe");
    CHECK(tok_max_piece(t) == tok_max_piece(T), "max piece");
    for (int32_t id = 0; id < 151669; id++) {
        char a[512], b[512];
        tok_decoder da = {0}, db = {0};
        size_t na = tok_decode(t, &da, id, a, sizeof a), nb = tok_decode(T, &db, id, b, sizeof b);
        na += tok_decode_flush(&da, a + na, sizeof a - na);
        nb += tok_decode_flush(&db, b + nb, sizeof b - nb);
        if (na != nb || memcmp(a, b, na)) {
            CHECK(0, "id %d decodes differently", id);
            break;
        }
    }
    tok_free(t);
}

TEST(gguf_same_ids) {
    tok_tokenizer *json = T;
    T = ggm_tokenizer(GGUF_PATH);
    CHECK(T != NULL, "ggm_tokenizer: %s", dfl_lasterr());
    if (T) {
        test_logistics_cases();
        test_hf_edge_characters();
        test_nfc();
        test_special_tokens();
        test_corpus_matches_reference();
        test_round_trip();
        tok_free(T);
    }
    T = json;
}

/* Qwen3.5's pre-tokenizer (combining marks join a word's letters) on the
 * Qwen3 vocabulary: the Qwen3 tokenizer.json with ggm_qwen35_re as its Split
 * regex, from tokenizer.json and from a GGUF whose tokenizer.ggml.pre is
 * "qwen35" (dflash convert writes it for that regex), against
 * tests/fixtures/tokenizer/ids-qwen35.txt.xz (@lenml/tokenizers on the same
 * tokenizer.json: "DOC ids" for the documents whose ids differ from Qwen3's;
 * tools/reference/tokenizer_qwen35_ref.py). */
TEST(qwen35_pretokenizer) {
    char dir[512], gg[512];
    snprintf(dir, sizeof dir, "%s", path("q35tok", NULL));
    snprintf(gg, sizeof gg, "%s", path("q35tok", "tiny.gguf"));
    mkdir(dir, 0755);
    char *src = root_path("models/qwen3-tokenizer/tokenizer.json"), *txt = dfl_read_file(src, NULL);
    free(src);
    cJSON *root = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    cJSON *split = cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), "pretokenizers"), 0);
    cJSON *re = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(split, "pattern"), "Regex");
    CHECK(cJSON_IsString(re) && !strcmp(re->valuestring, ggm_qwen2_re), "the Qwen3 tokenizer's regex is not ggm_qwen2_re");
    if (!cJSON_IsString(re)) {
        cJSON_Delete(root);
        return;
    }
    cJSON_SetValuestring(re, ggm_qwen35_re);
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    write_file(path("q35tok", "tokenizer.json"), out, strlen(out));
    free(out);
    char *cs = root_path("models/qwen3-tokenizer/tokenizer_config.json");
    size_t ncfg = 0;
    char *cfg = dfl_read_file(cs, &ncfg);
    free(cs);
    CHECK(cfg != NULL, "tokenizer_config.json: %s", dfl_lasterr());
    if (cfg) write_file(path("q35tok", "tokenizer_config.json"), cfg, ncfg);
    free(cfg);
    /* the reference: Qwen3's ids except where the fixture has a line */
    int32_t **ovr = dfl_calloc(C.ndocs ? C.ndocs : 1, sizeof *ovr);
    size_t *novr = dfl_calloc(C.ndocs ? C.ndocs : 1, sizeof *novr), nt;
    char *fx = root_path("tests/fixtures/tokenizer/ids-qwen35.txt.xz"), *lines = read_xz(fx, &nt);
    free(fx);
    CHECK(lines != NULL, "ids-qwen35.txt.xz missing");
    int n_ovr = 0;
    for (char *s = lines; s && *s;) {
        char *nl = strchr(s, '\n'), *e;
        if (nl) *nl = 0;
        long d = strtol(s, &e, 10);
        if (e != s && d >= 0 && d < C.ndocs && !ovr[d]) ovr[d] = parse_ids(e, &novr[d]), n_ovr++;
        s = nl ? nl + 1 : s + strlen(s);
    }
    free(lines);
    CHECK(n_ovr >= 30, "only %d documents in ids-qwen35.txt.xz", n_ovr);
    tok_tokenizer *qwen3 = T;
    /* the documents of the fixture tokenize differently with Qwen3's regex:
     * the test tells the two pre-tokenizers apart */
    int same = 0;
    for (int d = 0; d < C.ndocs; d++) {
        if (!ovr[d]) continue;
        size_t n;
        int32_t *ids = enc(C.doc[d], C.len[d], &n);
        same += ids && ids_equal(ids, n, ovr[d], novr[d]);
        free(ids);
    }
    CHECK(same == 0, "%d documents give Qwen3.5's ids with Qwen3's pre-tokenizer", same);
    T = tok_load(dir);
    CHECK(T != NULL, "tok_load %s: %s", dir, dfl_lasterr());
    if (T) {
        corpus_check(ovr, novr);
        tok_free(T);
    }
    /* dflash convert names the regex "qwen35"; the GGUF's tokenizer reads it back */
    char *tiny = root_path("tests/models/tiny-qwen3");
    CHECK(ggm_convert(tiny, gg, "f16", dir) == 0, "convert with the Qwen3.5 regex: %s", dfl_lasterr());
    free(tiny);
    gguf_file g;
    const char *pre;
    size_t npre = 0;
    if (gguf_open(&g, gg) == 0) {
        CHECK(gguf_get_str(&g, "tokenizer.ggml.pre", &pre, &npre, 1) == 0 && npre == 6 && !memcmp(pre, "qwen35", 6),
              "tokenizer.ggml.pre is not qwen35");
        gguf_close(&g);
    } else {
        CHECK(0, "gguf_open %s: %s", gg, dfl_lasterr());
    }
    T = ggm_tokenizer(gg);
    CHECK(T != NULL, "ggm_tokenizer %s: %s", gg, dfl_lasterr());
    if (T) {
        corpus_check(ovr, novr);
        tok_free(T);
    }
    T = qwen3;
    for (int d = 0; d < C.ndocs; d++) free(ovr[d]);
    free(ovr);
    free(novr);
}

/* ---- gpt-oss (o200k_harmony): models/gptoss-tokenizer ------------------
 * No normalizer, a case-aware regex with 1-3 digit groups, ignore_merges,
 * the harmony special tokens. Reference: @lenml/tokenizers 3.7.2 on the same
 * files (tests/fixtures/tokenizer/ids-gptoss.txt.xz for the corpus; the
 * strings below from the same run, tools/reference/tokenizer_ref.mjs). */
static tok_tokenizer *GPTOSS;

TEST(gptoss_load) {
    CHECK(GPTOSS != NULL, "tok_load models/gptoss-tokenizer: %s", dfl_lasterr());
    if (!GPTOSS) return;
    CHECK(tok_n_vocab(GPTOSS) == 200019, "n_vocab %d", tok_n_vocab(GPTOSS));
    CHECK(tok_eos_id(GPTOSS) == 200002, "eos %d (<|return|>)", tok_eos_id(GPTOSS));
    /* the template comes from chat_template.jinja (tokenizer_config.json has none) */
    const char *ct = tok_chat_template(GPTOSS);
    CHECK(ct && strlen(ct) == 16738 && strstr(ct, "<|start|>system<|message|>"), "chat template");
    static const struct { const char *s; int id; } sp[] = {
        {"<|startoftext|>", 199998}, {"<|endoftext|>", 199999}, {"<|reserved_200000|>", 200000},
        {"<|return|>", 200002},      {"<|constrain|>", 200003}, {"<|channel|>", 200005},
        {"<|start|>", 200006},       {"<|end|>", 200007},       {"<|message|>", 200008},
        {"<|call|>", 200012},        {"<|reserved_200017|>", 200017}, {"<|endofprompt|>", 200018},
    };
    tok_tokenizer *keep = T;
    T = GPTOSS;
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) {
        size_t n;
        int32_t *ids = enc(sp[i].s, strlen(sp[i].s), &n);
        CHECK(ids && n == 1 && ids[0] == sp[i].id, "encode %s", sp[i].s);
        CHECK(tok_lookup(GPTOSS, sp[i].s) == sp[i].id, "lookup %s", sp[i].s);
        size_t m;
        char *back = ids ? decode_all(ids, n, &m) : NULL;
        CHECK(back && m == strlen(sp[i].s) && !memcmp(back, sp[i].s, m), "decode %d", sp[i].id);
        free(back);
        free(ids);
    }
    T = keep;
}

TEST(gptoss_cases) {
    if (!GPTOSS) return;
    tok_tokenizer *keep = T;
    T = GPTOSS;
    CHECK_IDS("Hello world", 13225, 2375);
    CHECK_IDS("CamelCaseWord", 137910, 6187, 12929);               /* upper-case letters open a word */
    CHECK_IDS("HTTPServer", 17893, 6444);
    CHECK_IDS("don't DON'T Don'T", 91418, 153384, 6070, 51532);     /* contractions join the word */
    CHECK_IDS("'S'T'RE'VE'M'LL'D", 31233, 51532, 6, 1099, 6, 19511, 95346, 6, 7454, 78685);
    CHECK_IDS("1234567", 7633, 19354, 22);                          /* digits in groups of 3 */
    CHECK_IDS("x1234567y", 87, 7633, 19354, 22, 88);
    CHECK_IDS("hello\r\n\r\nworld", 24912, 1414, 24169);
    CHECK_IDS("a  \n\n  b", 64, 11691, 220, 287);
    CHECK_IDS("foo//bar\n/", 16660, 393, 2990, 198, 14);
    CHECK_IDS(" !!!\n\n", 77623);
    CHECK_IDS("e\xcc\x81", 68, 13430);                               /* no NFC: e + U+0301 stays */
    CHECK_IDS("\xc7\x85ungla \xc7\x88" "ab", 131, 227, 988, 1675, 220, 131, 230, 378); /* titlecase Lt */
    CHECK_IDS("<|start|>assistant<|channel|>final<|message|>Hi<|return|>", 200006, 173781, 200005, 17196,
              200008, 12194, 200002);
    CHECK_IDS("<|reserved_200000|><|endofprompt|>", 200000, 200018);
    T = keep;
}

TEST(gptoss_corpus) {
    if (!GPTOSS) return;
    size_t nt;
    char *fx = root_path("tests/fixtures/tokenizer/ids-gptoss.txt.xz"), *lines = read_xz(fx, &nt);
    free(fx);
    CHECK(lines != NULL, "ids-gptoss.txt.xz missing");
    if (!lines || C.ndocs == 0) {
        free(lines);
        return;
    }
    int32_t **want = dfl_calloc((size_t)C.ndocs, sizeof *want);
    size_t *nwant = dfl_calloc((size_t)C.ndocs, sizeof *nwant);
    int nl = 0;
    for (char *s = lines; *s && nl < C.ndocs; nl++) {
        char *e = strchr(s, '\n');
        if (e) *e = 0;
        want[nl] = parse_ids(s, &nwant[nl]);
        s = e ? e + 1 : s + strlen(s);
    }
    free(lines);
    CHECK(nl == C.ndocs, "ids-gptoss.txt.xz has %d lines for %d documents", nl, C.ndocs);
    /* the fixture is not Qwen3's: most documents differ */
    int same = 0;
    for (int d = 0; d < C.ndocs; d++) same += ids_equal(want[d], nwant[d], C.ids[d], C.nids[d]);
    CHECK(same < C.ndocs / 10, "%d documents have Qwen3's ids", same);
    tok_tokenizer *keep = T;
    T = GPTOSS;
    if (nl == C.ndocs) corpus_check(want, nwant);
    /* decode(encode(x)) == x exactly (no normalizer), streamed chunks whole UTF-8 */
    int bad = 0, partial = 0;
    size_t cap = tok_max_piece(T);
    char *buf = dfl_malloc(cap);
    for (int d = 0; d < C.ndocs; d++) {
        size_t n, m;
        int32_t *ids = enc(C.doc[d], C.len[d], &n);
        char *txt = decode_all(ids, n, &m);
        if (m != C.len[d] || memcmp(txt, C.doc[d], m)) {
            if (bad++ < 3) fprintf(stderr, "  doc %d: round trip differs\n", d);
        }
        tok_decoder dec = {0};
        for (size_t i = 0; i < n; i++)
            if (dfl_utf8_invalid_at(buf, tok_decode(T, &dec, ids[i], buf, cap)) >= 0) partial++;
        if (dec.npend) partial++;
        free(txt);
        free(ids);
    }
    free(buf);
    CHECK(bad == 0, "%d documents do not round-trip", bad);
    CHECK(partial == 0, "%d streamed chunks held a partial character", partial);
    T = keep;
    free_ids(want, nwant);
}

/* ---- Gemma 3 (SentencePiece-style BPE): models/gemma3-tokenizer -----------
 * normalizer Replace " " -> U+2581, pre-tokenizer Split " " MergedWithPrevious
 * (a no-op after the normalizer), BPE over characters with byte_fallback
 * (<0xNN>, ids 238..493), 6415 added tokens (newline, tab and U+2581 runs,
 * HTML tags, <start_of_turn> ...), decoder Replace U+2581 -> " ",
 * ByteFallback, Fuse. Reference: @lenml/tokenizers 3.7.2 on the same files
 * (tests/fixtures/tokenizer/ids-gemma3.txt.xz; the strings below from the
 * same run). */
static tok_tokenizer *GEMMA;

TEST(gemma_load) {
    CHECK(GEMMA != NULL, "tok_load models/gemma3-tokenizer: %s", dfl_lasterr());
    if (!GEMMA) return;
    CHECK(tok_n_vocab(GEMMA) == 262145, "n_vocab %d", tok_n_vocab(GEMMA));
    CHECK(tok_eos_id(GEMMA) == 106, "eos %d (<end_of_turn>)", tok_eos_id(GEMMA));
    const char *ct = tok_chat_template(GEMMA);
    CHECK(ct && strstr(ct, "<start_of_turn>") && strstr(ct, "first_user_prefix"), "chat template");
    static const struct { const char *s; int id; } sp[] = {
        {"<pad>", 0}, {"<eos>", 1}, {"<bos>", 2}, {"<unk>", 3}, {"<start_of_turn>", 105}, {"<end_of_turn>", 106},
        {"\n", 107}, {"\t", 255968}, {"<start_of_image>", 255999}, {"<image_soft_token>", 262144},
    };
    tok_tokenizer *keep = T;
    T = GEMMA;
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) {
        size_t n;
        int32_t *ids = enc(sp[i].s, strlen(sp[i].s), &n);
        CHECK(ids && n == 1 && ids[0] == sp[i].id, "encode %s", sp[i].s);
        CHECK(tok_lookup(GEMMA, sp[i].s) == sp[i].id, "lookup %s", sp[i].s);
        size_t m;
        char *back = ids ? decode_all(ids, n, &m) : NULL;
        CHECK(back && m == strlen(sp[i].s) && !memcmp(back, sp[i].s, m), "decode %d", sp[i].id);
        free(back);
        free(ids);
    }
    /* vocab entries are looked up by their own text; pieces are what they decode to */
    CHECK(tok_lookup(GEMMA, "\xe2\x96\x81the") == 506, "lookup \\u2581the: %d", tok_lookup(GEMMA, "\xe2\x96\x81the"));
    CHECK(tok_lookup(GEMMA, "<0x0A>") == 248, "lookup <0x0A>: %d", tok_lookup(GEMMA, "<0x0A>"));
    size_t len;
    const char *p = tok_piece(GEMMA, 506, &len);
    CHECK(p && len == 4 && !memcmp(p, " the", 4), "piece of 506");
    p = tok_piece(GEMMA, 248, &len);
    CHECK(p && len == 1 && p[0] == '\n', "piece of <0x0A>");
    p = tok_piece(GEMMA, 138, &len); /* the added token "\u2581\u2581" goes through the decoder too */
    CHECK(p && len == 2 && !memcmp(p, "  ", 2), "piece of 138");
    T = keep;
}

TEST(gemma_cases) {
    if (!GEMMA) return;
    tok_tokenizer *keep = T;
    T = GEMMA;
    CHECK_IDS("Hello world", 9259, 1902);
    CHECK_IDS("  leading spaces ", 138, 26016, 9952, 236743);
    CHECK_IDS("a\tb\t\tc", 236746, 255968, 236763, 255969, 236755);   /* tab runs are added tokens */
    CHECK_IDS("line1\n\n\nline2", 1257, 236770, 109, 1257, 236778);    /* so are newline runs */
    CHECK_IDS("<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", 105, 2364, 107, 10979, 106, 107,
              105, 4368, 107);
    CHECK_IDS("<table><tr><td>x</td></tr></table>", 168, 173, 175, 236781, 183, 181, 176);
    /* U+2581 typed in the text: the same as a space for the BPE; "\u2581\u2581" is an added token */
    CHECK_IDS("\xe2\x96\x81literal \xe2\x96\x81\xe2\x96\x81", 37087, 236743, 138);
    /* U+10FFFD is not in the vocab: byte fallback, <0xF4> <0x8F> <0xBF> <0xBD> */
    CHECK_IDS("\xee\x80\x80\xf4\x8f\xbf\xbdx", 245863, 482, 381, 429, 427, 236781);
    CHECK_IDS("<0x41>", 236820, 236771, 236781, 236812, 236770, 236813); /* text, not the byte token */
    CHECK_IDS("e\xcc\x81", 236744, 238288);                              /* no NFC */
    CHECK_IDS("<image_soft_token><bos><eos>", 262144, 2, 1);
    CHECK_IDS("\xf0\x9f\xab\xa0", 253547);
    CHECK_IDS("\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88",
              94951, 236945, 95830);
    CHECK_IDS("x = 1234567;", 236781, 578, 236743, 236770, 236778, 236800, 236812, 236810, 236825, 236832, 236793);
    /* byte-fallback pieces decode to their bytes; streamed, the character comes out whole */
    {
        const int32_t ids[] = {482, 381, 429, 427, 236781};
        tok_decoder d = {0};
        char out[256];
        size_t w = 0, cap = tok_max_piece(T);
        int early = 0;
        for (int i = 0; i < 5; i++) {
            size_t k = tok_decode(T, &d, ids[i], out + w, cap);
            if (i < 3 && k) early = 1;
            w += k;
        }
        w += tok_decode_flush(&d, out + w, cap);
        CHECK(!early && w == 5 && !memcmp(out, "\xf4\x8f\xbf\xbdx", 5), "byte fallback decode (%zu bytes)", w);
    }
    T = keep;
}

/* The reference's Gemma 3 ids of the corpus documents (want [ndocs],
 * nwant [ndocs]; free with free_ids); the number of lines read (0: none) */
static int gemma_ids(int32_t ***want_out, size_t **nwant_out) {
    size_t nt;
    char *fx = root_path("tests/fixtures/tokenizer/ids-gemma3.txt.xz"), *lines = read_xz(fx, &nt);
    free(fx);
    CHECK(lines != NULL, "ids-gemma3.txt.xz missing");
    *want_out = NULL;
    *nwant_out = NULL;
    if (!lines || C.ndocs == 0) {
        free(lines);
        return 0;
    }
    int32_t **want = dfl_calloc((size_t)C.ndocs, sizeof *want);
    size_t *nwant = dfl_calloc((size_t)C.ndocs, sizeof *nwant);
    int nl = 0;
    for (char *s = lines; *s && nl < C.ndocs; nl++) {
        char *e = strchr(s, '\n');
        if (e) *e = 0;
        want[nl] = parse_ids(s, &nwant[nl]);
        s = e ? e + 1 : s + strlen(s);
    }
    free(lines);
    CHECK(nl == C.ndocs, "ids-gemma3.txt.xz has %d lines for %d documents", nl, C.ndocs);
    *want_out = want;
    *nwant_out = nwant;
    return nl;
}

TEST(gemma_corpus) {
    if (!GEMMA) return;
    int32_t **want;
    size_t *nwant;
    int nl = gemma_ids(&want, &nwant);
    if (!nl) return;
    /* the corpus exercises byte fallback (<0x00>..<0xFF> are ids 238..493) */
    int docs_fallback = 0;
    for (int d = 0; d < nl; d++) {
        int any = 0;
        for (size_t i = 0; i < nwant[d]; i++) any |= want[d][i] >= 238 && want[d][i] <= 493;
        docs_fallback += any;
    }
    fprintf(stderr, "  %d documents use byte-fallback tokens\n", docs_fallback);
    CHECK(docs_fallback >= 10, "only %d documents use byte fallback", docs_fallback);
    tok_tokenizer *keep = T;
    T = GEMMA;
    if (nl == C.ndocs) corpus_check(want, nwant);
    /* decode(encode(x)) == x with U+2581 read as a space (the decoder's Replace), exactly */
    int bad = 0, partial = 0;
    size_t cap = tok_max_piece(T);
    char *buf = dfl_malloc(cap);
    for (int d = 0; d < C.ndocs; d++) {
        size_t n, m;
        int32_t *ids = enc(C.doc[d], C.len[d], &n);
        char *txt = decode_all(ids, n, &m);
        dfl_buf exp = {0};
        for (size_t i = 0; i < C.len[d]; i++) {
            if (i + 3 <= C.len[d] && !memcmp(C.doc[d] + i, "\xe2\x96\x81", 3)) {
                dfl_buf_char(&exp, ' ');
                i += 2;
            } else {
                dfl_buf_add(&exp, C.doc[d] + i, 1);
            }
        }
        if (m != exp.n || memcmp(txt, exp.s ? exp.s : "", m)) {
            if (bad++ < 3) fprintf(stderr, "  doc %d: round trip differs\n", d);
        }
        dfl_buf_free(&exp);
        tok_decoder dec = {0};
        for (size_t i = 0; i < n; i++)
            if (dfl_utf8_invalid_at(buf, tok_decode(T, &dec, ids[i], buf, cap)) >= 0) partial++;
        if (dec.npend) partial++;
        free(txt);
        free(ids);
    }
    free(buf);
    CHECK(bad == 0, "%d documents do not round-trip", bad);
    CHECK(partial == 0, "%d streamed chunks held a partial character", partial);
    T = keep;
    for (int d = 0; d < C.ndocs; d++) free(want[d]);
    free(want);
    free(nwant);
}

/* ---- Gemma's tokenizer in a GGUF file (tokenizer.ggml.model "gemma4") ----
 * GEMMA_GGUF: dflash convert of tiny-gemma4 with models/gemma3-tokenizer as
 * its tokenizer (ggm_convert's tok_dir). main runs gemma_load, gemma_cases
 * and gemma_corpus again on the tokenizer read back from it: the same ids
 * as the reference on every case and corpus document. */
static char GEMMA_GGUF[300];

/* SRC with KEY replaced by what PUT writes from the old value (PUT NULL:
 * KEY left out), as tmpdir/NAME; the path */
static const char *tok_edit(const char *src, const char *name, const char *key,
                            void (*put)(gguf_writer *w, const gguf_kv *old)) {
    const char *out = path(name, NULL);
    gguf_file g;
    if (gguf_open(&g, src) != 0) return out;
    gguf_writer *w = gguf_w_new();
    for (int i = 0; i < g.n_kv; i++) {
        if (strcmp(g.kv[i].key, key)) gguf_w_copy_kv(w, &g.kv[i]);
        else if (put) put(w, &g.kv[i]);
    }
    for (int i = 0; i < g.n_tensors; i++)
        gguf_w_tensor(w, g.t[i].name, g.t[i].type, g.t[i].n_dims, g.t[i].ne, g.t[i].data);
    if (gguf_w_write(w, out) != 0) fprintf(stderr, "  tok_edit: %s\n", dfl_lasterr());
    gguf_w_free(w);
    gguf_close(&g);
    return out;
}

/* token_type [n] of OLD with FROM -> TO (all of them), or token AT set to TO */
static void put_types(gguf_writer *w, const gguf_kv *old, int from, int at, int to) {
    int32_t *v = dfl_malloc(old->n * sizeof *v);
    for (uint64_t i = 0; i < old->n; i++) {
        v[i] = (int32_t)gguf_arr_int(old, i);
        if (v[i] == from || (int64_t)i == at) v[i] = to;
    }
    gguf_w_arr_i32(w, old->key, v, old->n);
    free(v);
}
static void types_llama(gguf_writer *w, const gguf_kv *old) { put_types(w, old, TT_USER, -1, TT_NORMAL); }
static void types_bad(gguf_writer *w, const gguf_kv *old) { put_types(w, old, -1, 300, 9); }
static void types_float(gguf_writer *w, const gguf_kv *old) {
    float *v = dfl_calloc(old->n, sizeof *v);
    gguf_w_arr_f32(w, old->key, v, old->n);
    free(v);
}
/* a string array OLD with entry AT replaced by REPL */
static void put_strs(gguf_writer *w, const gguf_kv *old, uint64_t at, const char *repl) {
    char **v = dfl_malloc(old->n * sizeof *v);
    for (uint64_t i = 0; i < old->n; i++) {
        size_t n;
        const char *x = gguf_arr_str(old, i, &n);
        v[i] = dfl_malloc(n + 1);
        memcpy(v[i], x, n);
        v[i][n] = 0;
        if (i == at) {
            free(v[i]);
            v[i] = dfl_strdup(repl);
        }
    }
    gguf_w_arr_str(w, old->key, (const char *const *)v, old->n);
    for (uint64_t i = 0; i < old->n; i++) free(v[i]);
    free(v);
}
static void merges_bad(gguf_writer *w, const gguf_kv *old) { put_strs(w, old, 7, "nospace"); }
static void tokens_empty(gguf_writer *w, const gguf_kv *old) { put_strs(w, old, 500, ""); }
static void eos_big(gguf_writer *w, const gguf_kv *old) { gguf_w_u32(w, old->key, 300000); }
static void bos_off(gguf_writer *w, const gguf_kv *old) { gguf_w_bool(w, old->key, 0); }

static int has_u2581(const char *x, size_t len) {
    for (size_t i = 0; i + 3 <= len; i++)
        if (!memcmp(x + i, "\xe2\x96\x81", 3)) return 1;
    return 0;
}

/* the keys as llama.cpp's Gemma4Model.set_vocab writes them: model gemma4,
 * no pre, a score (-1000) per token, 256 BYTE tokens at 238..493, the
 * special added tokens CONTROL, unk 3, bos 2, eos 106 (<end_of_turn>, the
 * -it tokenizer_config.json's), add_bos_token true, add_space_prefix false;
 * a plain prompt gets <bos> */
TEST(gemma_gguf_keys) {
    gguf_file g;
    if (gguf_open(&g, GEMMA_GGUF) != 0) {
        CHECK(0, "open %s: %s", GEMMA_GGUF, dfl_lasterr());
        return;
    }
    const char *s;
    size_t n;
    CHECK(gguf_get_str(&g, "tokenizer.ggml.model", &s, &n, 1) == 0 && n == 6 && !memcmp(s, "gemma4", 6), "model");
    CHECK(!gguf_find_kv(&g, "tokenizer.ggml.pre"), "a pre key");
    const gguf_kv *tk = gguf_find_kv(&g, "tokenizer.ggml.tokens"), *sc = gguf_find_kv(&g, "tokenizer.ggml.scores"),
                  *ty = gguf_find_kv(&g, "tokenizer.ggml.token_type"), *mg = gguf_find_kv(&g, "tokenizer.ggml.merges");
    CHECK(tk && tk->n == 262145 && sc && sc->atype == GGUF_FLOAT32 && sc->n == tk->n && ty && ty->n == tk->n &&
              mg && mg->n == 514906, "tokens / scores / types / merges");
    if (tk && sc && ty && sc->n == tk->n && ty->n == tk->n) {
        int count[8] = {0}, bytes_at = 1, scores = 1;
        for (uint64_t i = 0; i < tk->n; i++) {
            int64_t t = gguf_arr_int(ty, i);
            if (t >= 0 && t < 8) count[t]++;
            if (t == TT_BYTE && (i < 238 || i > 493)) bytes_at = 0;
            scores &= gguf_arr_float(sc, i) == -1000.0;
        }
        fprintf(stderr, "  types: %d normal, %d byte, %d control, %d user-defined\n", count[TT_NORMAL],
                count[TT_BYTE], count[TT_CONTROL], count[TT_USER]);
        CHECK(count[TT_BYTE] == 256 && bytes_at && count[TT_CONTROL] == 9 &&
                  count[TT_USER] == 6415 - 9 && scores, "token types or scores");
    }
    int64_t v;
    CHECK(gguf_get_int(&g, "tokenizer.ggml.unknown_token_id", &v, 1) == 0 && v == 3, "unk");
    CHECK(gguf_get_int(&g, "tokenizer.ggml.bos_token_id", &v, 1) == 0 && v == 2, "bos");
    CHECK(gguf_get_int(&g, "tokenizer.ggml.eos_token_id", &v, 1) == 0 && v == 106, "eos");
    int b;
    CHECK(gguf_get_bool(&g, "tokenizer.ggml.add_bos_token", &b, 1) == 0 && b == 1, "add_bos");
    CHECK(gguf_get_bool(&g, "tokenizer.ggml.add_space_prefix", &b, 1) == 0 && b == 0, "add_space_prefix");
    gguf_close(&g);
    tok_tokenizer *t = ggm_tokenizer(GEMMA_GGUF);
    if (!t) return;
    int32_t *ids = NULL;
    size_t ni = 0;
    CHECK(tok_encode_prompt(t, "Hello world", 11, &ids, &ni) == 0 && ni == 3 && ids[0] == 2 && ids[1] == 9259 &&
              ids[2] == 1902, "plain prompt: %zu ids", ni);
    free(ids);
    tok_free(t);
    /* add_bos_token false: none */
    t = ggm_tokenizer(tok_edit(GEMMA_GGUF, "g-nobos.gguf", "tokenizer.ggml.add_bos_token", bos_off));
    CHECK(t != NULL, "no bos: %s", dfl_lasterr());
    if (t && tok_encode_prompt(t, "Hello world", 11, &ids, &ni) == 0) {
        CHECK(ni == 2 && ids[0] == 9259, "add_bos_token false: %zu ids", ni);
        free(ids);
    }
    tok_free(t);
}

/* The file typed as llama.cpp's converter types it (the added tokens that
 * are not special NORMAL: HF's split of tab runs, HTML tags, U+2581 runs,
 * <unusedN> is gone; newline runs split out all the same, as llama.cpp's
 * gemma4 pre-tokenizer does): the reference's ids on every corpus document
 * that holds no tab, '<', '[' or U+2581, and on the newline cases. (No
 * Gemma 3 token mixes a newline with anything else, and the merges rebuild
 * the corpus's newline runs: these ids are the same without that split.) */
TEST(gemma_gguf_llama_types) {
    tok_tokenizer *t = ggm_tokenizer(tok_edit(GEMMA_GGUF, "g-llama.gguf", "tokenizer.ggml.token_type", types_llama));
    CHECK(t != NULL, "load: %s", dfl_lasterr());
    if (!t) return;
    tok_tokenizer *keep = T;
    T = t;
    CHECK_IDS("line1\n\n\nline2", 1257, 236770, 109, 1257, 236778);
    CHECK_IDS("a\n\nb\nc\n", 236746, 108, 236763, 107, 236755, 107);
    CHECK_IDS("<start_of_turn>user\nHi<end_of_turn>\n", 105, 2364, 107, 10979, 106, 107);
    int32_t **want;
    size_t *nwant;
    int nl = gemma_ids(&want, &nwant), used = 0, bad = 0, nlines = 0;
    for (int d = 0; d < nl; d++) {
        const char *x = C.doc[d];
        size_t len = C.len[d];
        if (memchr(x, '\t', len) || memchr(x, '<', len) || memchr(x, '[', len) ||
            has_u2581(x, len))
            continue;
        used++;
        nlines += memchr(x, '\n', len) != NULL;
        size_t n;
        int32_t *ids = enc(x, len, &n);
        if (!ids || !ids_equal(ids, n, want[d], nwant[d])) bad++;
        free(ids);
    }
    fprintf(stderr, "  %d of %d documents compared (%d with newlines), %d differ\n", used, nl, nlines, bad);
    CHECK(used >= 100 && nlines >= 50 && bad == 0, "%d of %d documents differ", bad, used);
    free_ids(want, nwant);
    T = keep;
    tok_free(t);
}

/* Bad gemma4 tokenizer metadata is refused naming the key */
TEST(gemma_gguf_bad) {
    static const char *const no_merges[] = {"tokenizer.ggml.merges"};
    struct {
        const char *name, *key;
        void (*put)(gguf_writer *, const gguf_kv *);
        const char *expect;
    } cases[] = {
        {"g-b1.gguf", no_merges[0], NULL, "missing key 'tokenizer.ggml.merges'"},
        {"g-b2.gguf", "tokenizer.ggml.merges", merges_bad, "tokenizer.ggml.merges: merge 7 'nospace'"},
        {"g-b3.gguf", "tokenizer.ggml.token_type", types_bad, "tokenizer.ggml.token_type of token 300 is 9"},
        {"g-b4.gguf", "tokenizer.ggml.token_type", types_float, "tokenizer.ggml.token_type must be an integer array"},
        {"g-b5.gguf", "tokenizer.ggml.tokens", tokens_empty, "tokenizer.ggml.tokens: token 500 is empty"},
        {"g-b6.gguf", "tokenizer.ggml.eos_token_id", eos_big, "tokenizer.ggml.eos_token_id 300000 is not a token"},
        {"g-b7.gguf", "tokenizer.ggml.tokens", NULL, "missing key 'tokenizer.ggml.tokens'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tok_tokenizer *t = ggm_tokenizer(tok_edit(GEMMA_GGUF, cases[i].name, cases[i].key, cases[i].put));
        const char *e = dfl_lasterr();
        CHECK(!t && strstr(e, cases[i].expect) && !strchr(e, '\n'), "%s: %s", cases[i].name, t ? "loaded" : e);
        tok_free(t);
        unlink(path(cases[i].name, NULL));
    }
}

/* Split with a String pattern, on a small charmode tokenizer: the pieces of
 * "the-final--countdown" are those of HF's SplitDelimiterBehavior docs
 * (MergedWithPrevious: "the-" "final-" "-" "countdown"; Isolated: "the" "-"
 * "final" "-" "-" "countdown"). Merges e+- , l+-, -+-, -+f would join
 * across those boundaries, so the ids show where the pieces end. */
TEST(split_string_behaviors) {
    const char *behav[] = {"MergedWithPrevious", "Isolated"};
    /* vocab: <0x00>..<0xFF> = 0..255, then the letters, "-", and the merges' results */
    const char *chars = "thefinalcoudw-";
    for (int b = 0; b < 2; b++) {
        dfl_buf j = {0};
        dfl_buf_printf(&j, "{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},\"behavior\":\"%s\","
                           "\"invert\":false},\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteFallback\"},"
                           "{\"type\":\"Fuse\"}]},\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{", behav[b]);
        for (int i = 0; i < 256; i++) dfl_buf_printf(&j, "\"<0x%02X>\":%d,", i, i);
        int id = 256;
        for (const char *c = chars; *c; c++)
            if (!strchr(c + 1, *c)) dfl_buf_printf(&j, "\"%c\":%d,", *c, id++);
        dfl_buf_printf(&j, "\"e-\":%d,\"l-\":%d,\"--\":%d,\"-f\":%d},\"merges\":[[\"e\",\"-\"],[\"l\",\"-\"],[\"-\",\"-\"],"
                           "[\"-\",\"f\"]]}}", id, id + 1, id + 2, id + 3);
        char *txt = dfl_buf_take(&j);
        cJSON *root = cJSON_Parse(txt);
        free(txt);
        tok_tokenizer *t = root ? tok_from_json(root, NULL, -1, "split-test") : NULL;
        cJSON_Delete(root);
        CHECK(t != NULL, "%s: %s", behav[b], dfl_lasterr());
        if (!t) continue;
        const char *text = "the-final--countdown";
        int32_t *ids;
        size_t n;
        CHECK(tok_encode(t, text, strlen(text), &ids, &n) == 0, "encode");
        /* as tokens: join the pieces with '|' */
        dfl_buf got = {0};
        for (size_t i = 0; i < n; i++) {
            size_t len;
            const char *p = tok_piece(t, ids[i], &len);
            if (i) dfl_buf_char(&got, '|');
            dfl_buf_add(&got, p, len);
        }
        const char *want = b == 0 ? "t|h|e-|f|i|n|a|l-|-|c|o|u|n|t|d|o|w|n" : "t|h|e|-|f|i|n|a|l|-|-|c|o|u|n|t|d|o|w|n";
        char *g = dfl_buf_take(&got);
        CHECK(g && !strcmp(g, want), "%s: got %s, want %s", behav[b], g, want);
        free(g);
        free(ids);
        tok_free(t);
    }
}

static void find_root(void) {
    const char *env = getenv("DFLASH_ROOT");
    snprintf(ROOT, sizeof ROOT, "%s", env && *env ? env : ".");
    snprintf(TOKDIR, sizeof TOKDIR, "%s/models/qwen3-tokenizer", ROOT);
}

/* A plain prompt gets the post_processor's special tokens (TemplateProcessing
 * "single": Gemma's <bos>), as HF's tokenizer(text) gives them:
 * tests/fixtures/tokenizer/prompt-ids.json from @lenml/tokenizers
 * (tools/reference/tokenizer_prompt_ref.mjs), 18 texts for each of the three
 * tokenizers; Qwen3's and gpt-oss's ids are tok_encode's unchanged. A
 * post_processor dflash does not read, or a malformed one, is refused. */
TEST(plain_prompt_special_tokens) {
    char *path = root_path("tests/fixtures/tokenizer/prompt-ids.json");
    char *txt = dfl_read_file(path, NULL);
    free(path);
    cJSON *doc = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    const cJSON *texts = cJSON_GetObjectItem(doc, "texts"), *all = cJSON_GetObjectItem(doc, "ids");
    CHECK(cJSON_GetArraySize(texts) >= 15 && cJSON_IsObject(all), "read prompt-ids.json");
    static const char *const dirs[] = {"models/qwen3-tokenizer", "models/gptoss-tokenizer", "models/gemma3-tokenizer"};
    int n_checked = 0;
    for (int d = 0; d < 3 && doc; d++) {
        char *dir = root_path(dirs[d]);
        tok_tokenizer *t = tok_load(dir);
        free(dir);
        CHECK(t != NULL, "load %s: %s", dirs[d], dfl_lasterr());
        const cJSON *want = cJSON_GetObjectItem(all, dirs[d]);
        CHECK(cJSON_GetArraySize(want) == cJSON_GetArraySize(texts), "%s: one list per text", dirs[d]);
        for (int k = 0; t && k < cJSON_GetArraySize(texts) && k < cJSON_GetArraySize(want); k++) {
            const char *text = cJSON_GetArrayItem(texts, k)->valuestring;
            const cJSON *w = cJSON_GetArrayItem(want, k);
            int32_t *ids = NULL, *plain = NULL;
            size_t n = 0, np = 0;
            int rc = tok_encode_prompt(t, text, strlen(text), &ids, &n);
            CHECK(rc == 0, "%s text %d: %s", dirs[d], k, dfl_lasterr());
            int same = rc == 0 && (int)n == cJSON_GetArraySize(w);
            for (size_t i = 0; same && i < n; i++) same = ids[i] == cJSON_GetArrayItem(w, (int)i)->valueint;
            CHECK(same, "%s text %d (\"%.30s\"): %zu ids, reference %d", dirs[d], k, text, n, cJSON_GetArraySize(w));
            if (!same && ids) print_ids("got", ids, n);
            /* Gemma: <bos> then tok_encode's ids; the others: tok_encode's ids */
            CHECK(tok_encode(t, text, strlen(text), &plain, &np) == 0, "encode");
            int bos = d == 2;
            CHECK(n == np + (size_t)bos && (!bos || ids[0] == 2) && (!np || !memcmp(ids + bos, plain, np * sizeof *ids)),
                  "%s text %d: prompt = %s tok_encode", dirs[d], k, bos ? "<bos> +" : "");
            n_checked += same;
            free(ids), free(plain);
        }
        tok_free(t);
    }
    CHECK(n_checked >= 45, "%d prompts matched", n_checked);
    cJSON_Delete(doc);

    /* post_processors dflash refuses, naming the problem; ByteLevel / absent add nothing */
    char dir[] = "/tmp/dfl_tokpp_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    char *tj = dfl_path_join(dir, "tokenizer.json");
    static const char model[] = "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"<s>\":1},\"merges\":[]}";
    static const struct {
        const char *pp, *err; /* err NULL: loads; "!X": loads, a prompt is refused naming X */
        int pre, post;
    } cases[] = {
        {"null", NULL, 0, 0},
        {"{\"type\":\"ByteLevel\"}", NULL, 0, 0},
        {"{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},{\"Sequence\":{\"id\":"
         "\"A\"}},{\"SpecialToken\":{\"id\":\"<s>\"}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1]}}}",
         NULL, 1, 1},
        {"{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\"},{\"type\":\"TemplateProcessing\",\"single\":"
         "[{\"SpecialToken\":{\"id\":\"<s>\"}},{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{\"<s>\":{\"ids\":[1]}}}]}",
         NULL, 1, 0},
        {"{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<x>\"}},{\"Sequence\":{\"id\":\"A\"}}],"
         "\"special_tokens\":{}}",
         "<x>", 0, 0},
        {"{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},{\"Sequence\":{\"id\":\"A\"}}],"
         "\"special_tokens\":{\"<s>\":{\"ids\":[7]}}}",
         "outside the vocabulary", 0, 0},
        {"{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}}],\"special_tokens\":{\"<s>\":"
         "{\"ids\":[1]}}}",
         "Sequence", 0, 0},
        {"{\"type\":\"TemplateProcessing\"}", "single", 0, 0},
        {"{\"type\":\"BertProcessing\",\"cls\":[\"<s>\",1],\"sep\":[\"<s>\",1]}", "!BertProcessing", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[1024];
        snprintf(json, sizeof json, "{\"post_processor\":%s,%s}", cases[i].pp, model);
        write_file(tj, json, strlen(json));
        tok_tokenizer *t = tok_load(dir);
        const char *e = cases[i].err;
        if (e && e[0] != '!') {
            CHECK(t == NULL && strstr(dfl_lasterr(), e) && strstr(dfl_lasterr(), "post_processor"),
                  "case %zu: refused naming %s: %s", i, e, t ? "(loaded)" : dfl_lasterr());
        } else {
            CHECK(t != NULL, "case %zu loads: %s", i, dfl_lasterr());
            int32_t *ids = NULL;
            size_t n = 0;
            int rc = t ? tok_encode_prompt(t, "aa", 2, &ids, &n) : -1;
            if (e) {
                CHECK(rc == -1 && strstr(dfl_lasterr(), e + 1), "case %zu: prompt refused naming %s: %s", i, e + 1,
                      dfl_lasterr());
            } else {
                size_t want = (size_t)(cases[i].pre + 2 + cases[i].post);
                CHECK(rc == 0 && n == want && (!cases[i].pre || ids[0] == 1) && (!cases[i].post || ids[n - 1] == 1) &&
                          ids[cases[i].pre] == 0,
                      "case %zu: %zu ids", i, n);
            }
            free(ids);
        }
        tok_free(t);
    }
    unlink(tj);
    rmdir(dir);
    free(tj);
}

int main(void) {
    find_root();
    T = tok_load(TOKDIR);
    if (!T) {
        fprintf(stderr, "cannot load %s: %s (run from the repo root or set DFLASH_ROOT)\n", TOKDIR,
                dfl_lasterr());
        printf("test_tokenizer: 0 passed, 1 failed\n");
        return 1;
    }
    if (load_corpus() != 0) fprintf(stderr, "corpus fixtures missing or malformed\n");
    if (tmpdir_make("tok") != 0) {
        fprintf(stderr, "cannot make a temporary directory\n");
        printf("test_tokenizer: 0 passed, 1 failed\n");
        return 1;
    }
    RUN(load);
    RUN(logistics_cases);
    RUN(hf_edge_characters);
    RUN(nfc);
    RUN(special_tokens);
    RUN(corpus_matches_reference);
    RUN(round_trip);
    RUN(stream_decode_utf8);
    RUN(invalid_utf8);
    RUN(long_runs);
    RUN(nfc_long_mark_run);
    RUN(nfc_matches_utf8proc);
    RUN(bad_files);
    RUN(string_merges);
    RUN(split_string_behaviors);
    snprintf(GGUF_PATH, sizeof GGUF_PATH, "/tmp/dflash-test-tok-%d.gguf", (int)getpid());
    char *tiny = root_path("tests/models/tiny-qwen3");
    if (ggm_convert(tiny, GGUF_PATH, "f16", NULL) != 0) fprintf(stderr, "convert: %s\n", dfl_lasterr());
    free(tiny);
    RUN(gguf_load);
    RUN(gguf_same_ids);
    RUN(qwen35_pretokenizer);
    char *gdir = root_path("models/gptoss-tokenizer");
    GPTOSS = tok_load(gdir);
    free(gdir);
    RUN(gptoss_load);
    RUN(gptoss_cases);
    RUN(gptoss_corpus);
    tok_free(GPTOSS);
    char *gemdir = root_path("models/gemma3-tokenizer");
    GEMMA = tok_load(gemdir);
    free(gemdir);
    RUN(gemma_load);
    RUN(gemma_cases);
    RUN(gemma_corpus);
    tok_free(GEMMA);
    /* the same from a GGUF file dflash convert writes (tokenizer.ggml.model gemma4) */
    snprintf(GEMMA_GGUF, sizeof GEMMA_GGUF, "%s", path("gemma4-tok.gguf", NULL));
    char *g4 = root_path("tests/models/tiny-gemma4"), *g3tok = root_path("models/gemma3-tokenizer");
    if (ggm_convert(g4, GEMMA_GGUF, "f16", g3tok) != 0) fprintf(stderr, "convert: %s\n", dfl_lasterr());
    free(g4);
    free(g3tok);
    GEMMA = ggm_tokenizer(GEMMA_GGUF);
    RUN(gemma_load);
    RUN(gemma_cases);
    RUN(gemma_corpus);
    tok_free(GEMMA);
    RUN(gemma_gguf_keys);
    RUN(gemma_gguf_llama_types);
    RUN(gemma_gguf_bad);
    unlink(GEMMA_GGUF);
    RUN(plain_prompt_special_tokens);
    unlink(GGUF_PATH);
    tmpdir_remove();
    tok_free(T);
    for (int d = 0; d < C.ndocs; d++) free(C.ids[d]);
    free(C.ids);
    free(C.nids);
    free(C.doc);
    free(C.len);
    free(C.blob);
    CHECK_DONE("test_tokenizer");
}
