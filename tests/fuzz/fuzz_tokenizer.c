/* fuzz_tokenizer.c - encode and decode with the real Qwen3 tokenizer
 * (models/qwen3-tokenizer, loaded once), or with bit 1 of the first byte
 * Gemma 3's (models/gemma3-tokenizer: SentencePiece-style, byte fallback;
 * oracle there: decode(encode(x)) == x with U+2581 read as a space, exactly).
 * Bit 0 of the first byte picks the mode.
 * Oracles: invalid UTF-8 is refused with an error; valid UTF-8 encodes; the
 * decoded ids are valid UTF-8 and re-encode to the same ids (round trip of
 * the normalized text); text with nothing to normalize (no byte >= 0xCC)
 * decodes to itself; tok_encode_prompt gives the same ids after <bos>
 * (Gemma) or alone (Qwen3); decoding arbitrary ids (any int32) streams
 * valid UTF-8 and never writes past tok_max_piece(). */
#include "fuzz_common.h"
#include "tokenizer.h"
#include "util.h"

static tok_tokenizer *T, *QWEN, *GEMMA;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *root = getenv("DFLASH_ROOT");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models/qwen3-tokenizer", root ? root : ".");
    QWEN = tok_load(dir);
    snprintf(dir, sizeof dir, "%s/models/gemma3-tokenizer", root ? root : ".");
    GEMMA = QWEN ? tok_load(dir) : NULL;
    if (!QWEN || !GEMMA) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", dfl_lasterr());
        exit(1);
    }
    return 0;
}

static char *decode_all(const int32_t *ids, size_t n, size_t *len) {
    size_t cap = tok_max_piece(T) + 8, w = 0, room = n * cap + cap;
    char *out = dfl_malloc(room);
    tok_decoder d = {{0}, 0};
    for (size_t i = 0; i < n; i++) {
        size_t k = tok_decode(T, &d, ids[i], out + w, cap);
        if (k > tok_max_piece(T)) abort();
        if (dfl_utf8_invalid_at(out + w, k) >= 0) abort(); /* every piece is whole characters */
        w += k;
    }
    w += tok_decode_flush(&d, out + w, cap);
    *len = w;
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0] & 1, gemma = (data[0] >> 1) & 1;
    T = gemma ? GEMMA : QWEN;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    if (mode == 1) { /* arbitrary ids */
        size_t k = n / 4;
        int32_t *ids = dfl_malloc(sizeof(int32_t) * (k ? k : 1));
        memcpy(ids, s, k * 4);
        size_t len;
        char *out = decode_all(ids, k, &len);
        if (dfl_utf8_invalid_at(out, len) >= 0) abort();
        free(out);
        free(ids);
        return 0;
    }
    int32_t *ids;
    size_t m;
    int rc = tok_encode(T, s, n, &ids, &m);
    if (dfl_utf8_invalid_at(s, n) >= 0) {
        if (rc == 0) abort(); /* invalid UTF-8 must be refused */
        return 0;
    }
    if (rc != 0) abort();
    { /* a plain prompt: the post_processor's tokens around the same ids (Gemma: <bos>; Qwen3: none) */
        int32_t *pids;
        size_t pm, bos = gemma ? 1 : 0;
        if (tok_encode_prompt(T, s, n, &pids, &pm) != 0 || pm != m + bos || (gemma && pids[0] != 2) ||
            (m && memcmp(pids + bos, ids, m * sizeof *ids)))
            abort();
        free(pids);
    }
    size_t len;
    char *text = decode_all(ids, m, &len);
    if (dfl_utf8_invalid_at(text, len) >= 0) abort();
    if (gemma) { /* exact round trip, U+2581 decoding as a space */
        size_t j = 0, i = 0;
        for (; i < n && j < len; j++) {
            int bar = i + 3 <= n && !memcmp(s + i, "\xe2\x96\x81", 3);
            if (text[j] != (bar ? ' ' : s[i])) abort();
            i += bar ? 3 : 1;
        }
        if (i != n || j != len) abort();
        free(text);
        free(ids);
        return 0;
    }
    int plain = 1;
    for (size_t i = 0; i < n; i++) plain &= (uint8_t)s[i] < 0xcc;
    if (plain && (len != n || memcmp(text, s, n))) abort(); /* nothing to normalize: exact round trip */
    int32_t *ids2;
    size_t m2;
    if (tok_encode(T, text, len, &ids2, &m2) != 0) abort();
    if (m2 != m || memcmp(ids, ids2, m * sizeof *ids)) abort(); /* the normalized text re-encodes the same */
    free(ids2);
    free(text);
    free(ids);
    return 0;
}
