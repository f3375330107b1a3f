/* tokenizer.c - byte-level BPE from a Hugging Face tokenizer.json (see tokenizer.h).
 *
 * Pipeline of tok_encode(), the same as HF tokenizers with add_special_tokens=false:
 *   1. reject invalid UTF-8 (error names the byte offset);
 *   2. cut the text at added tokens (leftmost, then longest match), which are
 *      emitted as their ids and never normalized;
 *   3. NFC-normalize each remaining segment (utf8proc, with HF's Unicode 9.0
 *      view of newer characters, see NFC_NEWER_THAN_9);
 *   4. split the segment with the pre-tokenizer regex from the file (PCRE2,
 *      behaviour "Isolated": matches and the gaps between them are pieces);
 *   5. BPE-merge each piece: start from one symbol per byte, repeatedly merge
 *      the adjacent pair with the lowest merge rank (leftmost on ties); a
 *      heap of candidate pairs keeps long pieces O(n log n), and a per-call
 *      cache reuses the ids of pieces seen before.
 * The regex's \s and \S become \p{White_Space} and \P{White_Space}: PCRE2's
 * \s also matches U+180E, HF's (Oniguruma) does not.
 *
 * Ids and bytes. The vocabulary in the file is written in the GPT-2
 * "bytes_to_unicode" alphabet (each byte shown as one printable character).
 * At load every entry is turned back into its raw bytes, so everything after
 * load works on raw bytes and ids: the BPE starts from byte_id[byte] and merges
 * (left id, right id) pairs; decoding is a table lookup.
 *
 * Supported tokenizer.json subset (anything else is a load error, never a
 * silent difference): normalizer null or NFC; pre_tokenizer null, ByteLevel,
 * or a Sequence of Split(Regex, behavior Isolated, invert false) and
 * ByteLevel (add_prefix_space false); model BPE without byte_fallback,
 * subword prefix, word suffix or dropout; ignore_merges honoured; decoder
 * null or ByteLevel. Added tokens are matched on the raw text whatever their
 * normalized flag; lstrip, rstrip or single_word true is a load error (all
 * false in the Qwen3, Llama-3 and gpt-oss files). The gpt-oss (o200k_harmony)
 * file needs nothing more: its case-aware letter classes, optional
 * contraction suffixes and 1-3 digit groups are PCRE2 syntax as written, it
 * has no normalizer, and ignore_merges is true.
 *
 * SentencePiece-style BPE (Gemma 3), "charmode": chosen by a decoder that is
 * Replace / ByteFallback / Fuse steps (a Sequence, in that order) instead of
 * ByteLevel. The vocab is literal UTF-8 (U+2581 for the space, "<0xNN>" byte
 * tokens), kept as it is; normalizers Replace (String pattern) and NFC apply
 * in the file's order; a Split with a String pattern (behavior
 * MergedWithPrevious or Isolated) may cut the normalized text; a piece starts
 * as one symbol per character, a character missing from the vocab as the
 * <0xNN> tokens of its bytes (model.byte_fallback must be true and all 256
 * byte tokens present: HF would otherwise emit unk_token, not implemented);
 * then the same rank-ordered merging. What an id decodes to (tok_piece,
 * tok_decode) is the decoder's output for it: the Replace steps, then
 * "<0xNN>" -> the byte; added tokens go through the decoder as well, as HF
 * decodes them. One difference, on invalid output only: a run of byte
 * tokens that is not valid UTF-8 comes out with each maximal invalid
 * subpart as one U+FFFD (as @lenml/tokenizers' TextDecoder does), where HF's
 * ByteFallback writes one U+FFFD per byte of the whole run. Refused by name:
 * a Strip / Metaspace / other decoder step, Replace with a Regex, Split with
 * another behavior or invert, a ByteLevel pre-tokenizer in charmode,
 * byte_fallback in byte-level mode. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <cjson/cJSON.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "util.h"

/* GPT-2 pattern, used when a ByteLevel pre-tokenizer has use_regex=true. */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef struct {
    char *text; /* raw bytes, NUL-terminated */
    int len;
    int id;
    int special;
} added_token;

/* One merge rule in the pair table. key = left id << 32 | right id;
 * key == EMPTY_KEY marks a free slot. */
typedef struct {
    uint64_t key;
    int32_t rank; /* position in the merges list: lower merges first */
    int32_t id;   /* id of the merged token */
} merge_slot;
#define EMPTY_KEY UINT64_MAX

struct tok_tokenizer {
    int n_vocab; /* 1 + largest id */

    /* Raw bytes of every id: piece of id i = pieces[piece_off[i] .. + piece_len[i]).
     * Ids that exist in neither vocab nor added tokens have length 0. */
    char *pieces;
    uint32_t *piece_off; /* [n_vocab] */
    uint32_t *piece_len; /* [n_vocab] */
    int max_piece_len;

    /* model vocab (not added tokens), keyed by raw bytes: slot = id + 1, 0 = empty */
    int32_t *vmap;
    uint32_t vmap_mask; /* capacity - 1, capacity a power of two > 2 * entries */

    merge_slot *mmap;
    uint32_t mmap_mask;
    /* merges of two single-byte tokens, by byte values: [256 * 256], rank -1 = none.
     * Every piece starts as bytes, so its first candidates come from here. */
    struct byte_merge { int32_t rank, id; } *bmerge;

    int byte_id[256]; /* id of the single-byte token, -1 if the vocab lacks it */
    int ignore_merges;

    /* SentencePiece-style BPE (Gemma): the vocab is literal UTF-8 text, not
     * the GPT-2 byte alphabet; a piece starts as one symbol per character,
     * and a character missing from the vocab becomes its bytes' <0xNN>
     * tokens (model.byte_fallback). Chosen by a decoder of Replace /
     * ByteFallback / Fuse steps instead of ByteLevel. */
    int charmode;
    int byte_tok[256]; /* charmode: id of "<0xNN>" */

    /* normalizers, in the file's order */
    struct norm_op {
        int kind; /* NORM_NFC or NORM_REPLACE */
        char *from, *to; /* NORM_REPLACE: literal pattern and its replacement */
        size_t nfrom, nto;
    } norm[8];
    int n_norm;

    /* Split pre-tokenizer with a literal String pattern (NULL: none) */
    char *split_lit;
    size_t nsplit;
    int split_merge_prev; /* behavior MergedWithPrevious (1) or Isolated (0) */

    /* decoder (charmode): Replace steps applied to every token's text, then
     * ByteFallback turning "<0xNN>" into the byte */
    struct { char *from, *to; } dec_replace[8];
    int n_dec_replace, dec_byte_fallback;

    /* What each id decodes to (tok_piece, tok_decode): the same arrays as
     * pieces/piece_off/piece_len in byte-level mode; in charmode the
     * decoder's output for the token's text. */
    char *dpieces;
    uint32_t *dpiece_off, *dpiece_len;

    /* sorted by length, longest first, so the first hit at a position is the longest */
    added_token *added;
    int n_added;
    unsigned char added_first[256]; /* 1 if some added token starts with this byte */

    pcre2_code *re; /* pre-tokenizer; NULL = each segment is one piece */

    char *chat_template;
    int eos_id;

    /* post_processor (TemplateProcessing's "single"): the special tokens a
     * plain prompt gets before and after its text (tok_encode_prompt) */
    int32_t pp_ids[16];
    int n_pp_pre, n_pp_post; /* pp_ids[0..pre) before, [pre..pre+post) after */
    char pp_unsupported[64]; /* a post_processor type not read here ("" = none) */
};

/* ---------------------------------------------------------------- hashing */

static uint64_t hash_bytes(const char *s, size_t n) { /* FNV-1a, 64-bit */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint32_t hash_pair(uint64_t key) {
    key *= 0x9e3779b97f4a7c15ull;
    return (uint32_t)(key >> 32);
}

static uint32_t pow2_above(size_t n) {
    uint32_t c = 16;
    while (c < 2 * n) c <<= 1;
    return c;
}

/* Model vocab lookup by raw bytes; -1 if absent. */
static int vocab_find(const tok_tokenizer *t, const char *s, size_t n) {
    uint32_t i = (uint32_t)hash_bytes(s, n) & t->vmap_mask;
    for (;; i = (i + 1) & t->vmap_mask) {
        int32_t v = t->vmap[i];
        if (v == 0) return -1;
        int id = v - 1;
        if (t->piece_len[id] == n && memcmp(t->pieces + t->piece_off[id], s, n) == 0) return id;
    }
}

/* Inserts id (its bytes already in pieces); keeps the first id on a duplicate key. */
static void vocab_insert(tok_tokenizer *t, int id) {
    const char *s = t->pieces + t->piece_off[id];
    size_t n = t->piece_len[id];
    uint32_t i = (uint32_t)hash_bytes(s, n) & t->vmap_mask;
    for (;; i = (i + 1) & t->vmap_mask) {
        int32_t v = t->vmap[i];
        if (v == 0) {
            t->vmap[i] = id + 1;
            return;
        }
        int o = v - 1;
        if (t->piece_len[o] == n && memcmp(t->pieces + t->piece_off[o], s, n) == 0) return;
    }
}

static const merge_slot *merge_find(const tok_tokenizer *t, int a, int b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint32_t i = hash_pair(key) & t->mmap_mask;
    for (;; i = (i + 1) & t->mmap_mask) {
        const merge_slot *s = &t->mmap[i];
        if (s->key == key) return s;
        if (s->key == EMPTY_KEY) return NULL;
    }
}

/* A later duplicate of a merge overwrites the earlier rank, as HF does. */
static void merge_insert(tok_tokenizer *t, int a, int b, int rank, int id) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint32_t i = hash_pair(key) & t->mmap_mask;
    for (;; i = (i + 1) & t->mmap_mask) {
        merge_slot *s = &t->mmap[i];
        if (s->key == key || s->key == EMPTY_KEY) {
            s->key = key;
            s->rank = rank;
            s->id = id;
            return;
        }
    }
}

/* ------------------------------------------------- GPT-2 byte alphabet */

/* bytes_to_unicode(): printable bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF stand
 * for themselves; the other 68 bytes map, in order, to U+0100..U+0143. */
static void byte_alphabet(int b2u[256], int u2b[324]) {
    for (int c = 0; c < 324; c++) u2b[c] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
        b2u[b] = printable ? b : 256 + extra++;
        u2b[b2u[b]] = b;
    }
}

/* Byte-level string (UTF-8) -> raw bytes in out (cap >= strlen(s)). Returns
 * the length, or -1 if some character is not in the alphabet. */
static long bytelevel_to_raw(const int u2b[324], const char *s, char *out) {
    const unsigned char *p = (const unsigned char *)s;
    long n = 0;
    while (*p) {
        int cp;
        if (p[0] < 0x80) {
            cp = p[0];
            p += 1;
        } else if ((p[0] & 0xe0) == 0xc0 && (p[1] & 0xc0) == 0x80) {
            cp = (p[0] & 0x1f) << 6 | (p[1] & 0x3f);
            p += 2;
        } else {
            return -1; /* the alphabet stops at U+0143: two bytes at most */
        }
        if (cp >= 324 || u2b[cp] < 0) return -1;
        out[n++] = (char)u2b[cp];
    }
    return n;
}

/* ------------------------------------------------------------- loading */

/* Copy of pat with \s and \S replaced by \p{White_Space} and \P{White_Space}.
 * PCRE2's \s (with UCP) also matches U+180E, which stopped being white space
 * in Unicode 6.3; Oniguruma (HF tokenizers) follows the property. */
static char *fix_whitespace_class(const char *pat) {
    size_t n = strlen(pat), k = 0;
    char *out = dfl_malloc(n * 8 + 1);
    for (size_t i = 0; i < n; i++) {
        if (pat[i] == '\\' && i + 1 < n) {
            char c = pat[i + 1];
            if (c == 's' || c == 'S') {
                const char *r = c == 's' ? "\\p{White_Space}" : "\\P{White_Space}";
                memcpy(out + k, r, strlen(r));
                k += strlen(r);
            } else {
                out[k++] = '\\';
                out[k++] = c;
            }
            i++;
        } else {
            out[k++] = pat[i];
        }
    }
    out[k] = 0;
    return out;
}

static int compile_regex(tok_tokenizer *t, const char *pat, const char *path) {
    char *fixed = fix_whitespace_class(pat);
    int err;
    PCRE2_SIZE eoff;
    t->re = pcre2_compile((PCRE2_SPTR)fixed, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err,
                          &eoff, NULL);
    free(fixed);
    if (!t->re) {
        char msg[256];
        pcre2_get_error_message(err, (PCRE2_UCHAR *)msg, sizeof msg);
        dfl_seterr("%s: pre-tokenizer regex: %s near offset %zu", path, msg, (size_t)eoff);
        return -1;
    }
    pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if JIT is absent */
    return 0;
}

static int is_type(const cJSON *o, const char *type) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(ty) && strcmp(ty->valuestring, type) == 0;
}

/* The literal String of a {"String": "..."} pattern (non-empty), or NULL. */
static const char *string_pattern(const cJSON *o) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "pattern"), "String");
    return cJSON_IsString(s) && s->valuestring[0] ? s->valuestring : NULL;
}

/* One pre-tokenizer of the supported kinds; sets *pat to the regex it runs (or leaves it). */
static int parse_pretok(tok_tokenizer *t, const cJSON *p, const char **pat, const char *path) {
    if (is_type(p, "ByteLevel")) {
        if (t->charmode) {
            dfl_seterr("%s: a ByteLevel pre-tokenizer with a decoder that is not ByteLevel is not supported", path);
            return -1;
        }
        const cJSON *aps = cJSON_GetObjectItemCaseSensitive(p, "add_prefix_space");
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(p, "use_regex");
        if (cJSON_IsTrue(aps)) {
            dfl_seterr("%s: ByteLevel add_prefix_space=true is not supported", path);
            return -1;
        }
        if (!cJSON_IsFalse(ur)) { /* use_regex defaults to true */
            if (*pat) {
                dfl_seterr("%s: two pre-tokenizer regexes are not supported", path);
                return -1;
            }
            *pat = GPT2_PATTERN;
        }
        return 0;
    }
    if (is_type(p, "Split") && string_pattern(p)) { /* Gemma: " ", MergedWithPrevious */
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(p, "behavior");
        const cJSON *inv = cJSON_GetObjectItemCaseSensitive(p, "invert");
        int prev = cJSON_IsString(beh) && strcmp(beh->valuestring, "MergedWithPrevious") == 0;
        int iso = cJSON_IsString(beh) && strcmp(beh->valuestring, "Isolated") == 0;
        if ((!prev && !iso) || cJSON_IsTrue(inv)) {
            dfl_seterr("%s: pre_tokenizer Split with a String pattern: behavior %s%s is not supported "
                       "(MergedWithPrevious or Isolated, invert false)", path,
                       cJSON_IsString(beh) ? beh->valuestring : "(missing)", cJSON_IsTrue(inv) ? ", invert true" : "");
            return -1;
        }
        if (*pat || t->split_lit) {
            dfl_seterr("%s: two splitting pre-tokenizers are not supported", path);
            return -1;
        }
        t->split_lit = dfl_strdup(string_pattern(p));
        t->nsplit = strlen(t->split_lit);
        t->split_merge_prev = prev;
        return 0;
    }
    if (is_type(p, "Split")) {
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(p, "pattern"), "Regex");
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(p, "behavior");
        const cJSON *inv = cJSON_GetObjectItemCaseSensitive(p, "invert");
        if (!cJSON_IsString(re) || !cJSON_IsString(beh) ||
            strcmp(beh->valuestring, "Isolated") != 0 || cJSON_IsTrue(inv)) {
            dfl_seterr("%s: only Split with a Regex pattern, behavior Isolated, invert false is "
                       "supported", path);
            return -1;
        }
        if (*pat || t->split_lit) {
            dfl_seterr("%s: two splitting pre-tokenizers are not supported", path);
            return -1;
        }
        *pat = re->valuestring;
        return 0;
    }
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type");
    dfl_seterr("%s: unsupported pre_tokenizer type %s", path,
               cJSON_IsString(ty) ? ty->valuestring : "(missing)");
    return -1;
}

enum { NORM_NFC = 1, NORM_REPLACE };

static int parse_normalizer(tok_tokenizer *t, const cJSON *n, const char *path) {
    if (!n || cJSON_IsNull(n)) return 0;
    int nmax = (int)(sizeof t->norm / sizeof t->norm[0]);
    if ((is_type(n, "NFC") || is_type(n, "Replace")) && t->n_norm == nmax) {
        dfl_seterr("%s: more than %d normalizers are not supported", path, nmax);
        return -1;
    }
    if (is_type(n, "NFC")) {
        t->norm[t->n_norm++].kind = NORM_NFC;
        return 0;
    }
    if (is_type(n, "Replace")) { /* Gemma: Replace " " by "\u2581" */
        const char *from = string_pattern(n);
        const cJSON *to = cJSON_GetObjectItemCaseSensitive(n, "content");
        if (!from || !cJSON_IsString(to)) {
            dfl_seterr("%s: normalizer Replace: only a non-empty String pattern and a string content are "
                       "supported (a Regex pattern is not)", path);
            return -1;
        }
        struct norm_op *o = &t->norm[t->n_norm++];
        o->kind = NORM_REPLACE;
        o->from = dfl_strdup(from);
        o->to = dfl_strdup(to->valuestring);
        o->nfrom = strlen(o->from);
        o->nto = strlen(o->to);
        return 0;
    }
    if (is_type(n, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(n, "normalizers")) {
            if (parse_normalizer(t, e, path) != 0) return -1;
        }
        return 0;
    }
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(n, "type");
    dfl_seterr("%s: unsupported normalizer type %s", path,
               cJSON_IsString(ty) ? ty->valuestring : "(missing)");
    return -1;
}

static int cmp_added_len(const void *a, const void *b) {
    const added_token *x = a, *y = b;
    if (x->len != y->len) return y->len - x->len;
    return x->id - y->id;
}

/* Integer id from a JSON number; -1 if not a whole number in range. */
static int json_id(const cJSON *v) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d < (1 << 24)) || d != (double)(int)d) return -1;
    return (int)d;
}

/* The merge's two parts as strings: ["a","b"] (new format) or "a b" (old). */
static int merge_parts(const cJSON *m, const char **a, const char **b, char *buf, size_t cap) {
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2) {
        const cJSON *x = cJSON_GetArrayItem(m, 0), *y = cJSON_GetArrayItem(m, 1);
        if (!cJSON_IsString(x) || !cJSON_IsString(y)) return -1;
        *a = x->valuestring;
        *b = y->valuestring;
        return 0;
    }
    if (cJSON_IsString(m)) {
        const char *s = m->valuestring, *sp = strchr(s, ' ');
        size_t n = strlen(s);
        if (!sp || strchr(sp + 1, ' ') || n + 1 > cap) return -1;
        memcpy(buf, s, n + 1);
        buf[sp - s] = 0;
        *a = buf;
        *b = buf + (sp - s) + 1;
        return 0;
    }
    return -1;
}

static int load_model(tok_tokenizer *t, const cJSON *root, const char *path) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(model) || !is_type(model, "BPE")) {
        dfl_seterr("%s: model is not BPE", path);
        return -1;
    }
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
        dfl_seterr("%s: model.vocab or model.merges missing", path);
        return -1;
    }
    const char *unsupported[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, unsupported[i]);
        if (cJSON_IsString(v) && v->valuestring[0]) {
            dfl_seterr("%s: model.%s is not supported", path, unsupported[i]);
            return -1;
        }
    }
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0) { /* HF then skips merges at random */
        dfl_seterr("%s: model.dropout %g is not supported (null or 0 only)", path, dropout->valuedouble);
        return -1;
    }
    int byte_fallback = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
    if (byte_fallback && !t->charmode) {
        dfl_seterr("%s: model.byte_fallback with a ByteLevel (or no) decoder is not supported", path);
        return -1;
    }
    if (!byte_fallback && t->charmode) { /* characters outside the vocab would become unk_token */
        dfl_seterr("%s: model.byte_fallback false is not supported with a SentencePiece-style (non-ByteLevel) "
                   "tokenizer", path);
        return -1;
    }
    t->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));

    /* pass 1: count, largest id, bytes needed */
    int max_id = -1, n_entries = 0;
    size_t text_bytes = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        int id = json_id(e);
        if (id < 0) {
            dfl_seterr("%s: vocab entry \"%s\" has a bad id", path, e->string);
            return -1;
        }
        if (id > max_id) max_id = id;
        text_bytes += strlen(e->string);
        n_entries++;
    }
    if (!cJSON_IsArray(added) && added && !cJSON_IsNull(added)) {
        dfl_seterr("%s: added_tokens is not an array", path);
        return -1;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        int id = json_id(cJSON_GetObjectItemCaseSensitive(e, "id"));
        if (!cJSON_IsString(c) || !c->valuestring[0] || id < 0) {
            dfl_seterr("%s: added_tokens entry without content or id", path);
            return -1;
        }
        /* these change what the token matches (white space around it, word
         * boundaries); no file read so far sets them */
        static const char *const flags[] = {"lstrip", "rstrip", "single_word"};
        for (int f = 0; f < 3; f++)
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, flags[f]))) {
                dfl_seterr("%s: added_tokens entry \"%s\" (id %d): %s=true is not supported", path,
                           c->valuestring, id, flags[f]);
                return -1;
            }
        if (id > max_id) max_id = id;
        text_bytes += strlen(c->valuestring);
        t->n_added++;
    }
    if (n_entries == 0) {
        dfl_seterr("%s: empty vocab", path);
        return -1;
    }
    t->n_vocab = max_id + 1;
    t->pieces = dfl_malloc(text_bytes + 1);
    t->piece_off = dfl_calloc((size_t)t->n_vocab, sizeof *t->piece_off);
    t->piece_len = dfl_calloc((size_t)t->n_vocab, sizeof *t->piece_len);

    /* pass 2: raw bytes of every vocab entry, then the vocab map */
    int b2u[256], u2b[324];
    byte_alphabet(b2u, u2b);
    size_t used = 0;
    cJSON_ArrayForEach(e, vocab) {
        int id = json_id(e);
        long n = t->charmode ? -1 : bytelevel_to_raw(u2b, e->string, t->pieces + used);
        if (n < 0) { /* not byte-level (or charmode): keep the text as it is */
            n = (long)strlen(e->string);
            memcpy(t->pieces + used, e->string, (size_t)n);
        }
        t->piece_off[id] = (uint32_t)used;
        t->piece_len[id] = (uint32_t)n;
        used += (size_t)n;
    }
    t->vmap_mask = pow2_above((size_t)n_entries) - 1;
    t->vmap = dfl_calloc((size_t)t->vmap_mask + 1, sizeof *t->vmap);
    cJSON_ArrayForEach(e, vocab) vocab_insert(t, json_id(e));
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_id[b] = vocab_find(t, &c, 1);
    }
    for (int b = 0; t->charmode && b < 256; b++) { /* HF looks up format!("<{b:#04X}>") */
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_tok[b] = vocab_find(t, name, 6);
        if (t->byte_tok[b] < 0) {
            dfl_seterr("%s: model.byte_fallback is true but the vocab has no token \"%s\"", path, name);
            return -1;
        }
    }

    /* merges: both parts and the result must be in the vocab (HF refuses the file otherwise) */
    int n_merges = cJSON_GetArraySize(merges);
    t->mmap_mask = pow2_above((size_t)n_merges) - 1;
    t->mmap = dfl_malloc(((size_t)t->mmap_mask + 1) * sizeof *t->mmap);
    for (size_t i = 0; i <= t->mmap_mask; i++) t->mmap[i].key = EMPTY_KEY;
    char buf[1024], ra[512], rb[1024];
    int rank = 0;
    cJSON_ArrayForEach(e, merges) {
        const char *a, *b;
        if (merge_parts(e, &a, &b, buf, sizeof buf) != 0 || strlen(a) >= sizeof ra ||
            strlen(b) >= sizeof ra) {
            dfl_seterr("%s: merge %d is malformed", path, rank);
            return -1;
        }
        long na = t->charmode ? -1 : bytelevel_to_raw(u2b, a, ra);
        long nb = t->charmode ? -1 : bytelevel_to_raw(u2b, b, rb);
        if (na < 0) memcpy(ra, a, (size_t)(na = (long)strlen(a)));
        if (nb < 0) memcpy(rb, b, (size_t)(nb = (long)strlen(b)));
        int ia = vocab_find(t, ra, (size_t)na), ib = vocab_find(t, rb, (size_t)nb);
        memmove(rb + na, rb, (size_t)nb); /* rb = a + b */
        memcpy(rb, ra, (size_t)na);
        int im = vocab_find(t, rb, (size_t)(na + nb));
        if (ia < 0 || ib < 0 || im < 0) {
            dfl_seterr("%s: merge %d (\"%s\" \"%s\"): %s not in vocab", path, rank, a, b,
                       ia < 0 ? "left part" : ib < 0 ? "right part" : "result");
            return -1;
        }
        merge_insert(t, ia, ib, rank, im);
        rank++;
    }
    t->bmerge = dfl_malloc(256 * 256 * sizeof *t->bmerge);
    for (int a = 0; a < 256; a++) {
        for (int b = 0; b < 256; b++) {
            const merge_slot *m = t->byte_id[a] >= 0 && t->byte_id[b] >= 0
                                      ? merge_find(t, t->byte_id[a], t->byte_id[b]) : NULL;
            t->bmerge[a * 256 + b].rank = m ? m->rank : -1;
            t->bmerge[a * 256 + b].id = m ? m->id : -1;
        }
    }

    /* added tokens: their text is both what they match and what they decode to */
    t->added = dfl_calloc((size_t)t->n_added + 1, sizeof *t->added);
    int k = 0;
    cJSON_ArrayForEach(e, added) {
        const char *c = cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring;
        added_token *a = &t->added[k++];
        a->id = json_id(cJSON_GetObjectItemCaseSensitive(e, "id"));
        a->text = dfl_strdup(c);
        a->len = (int)strlen(c);
        a->special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special"));
        memcpy(t->pieces + used, c, (size_t)a->len);
        t->piece_off[a->id] = (uint32_t)used;
        t->piece_len[a->id] = (uint32_t)a->len;
        used += (size_t)a->len;
        t->added_first[(unsigned char)c[0]] = 1;
    }
    qsort(t->added, (size_t)t->n_added, sizeof *t->added, cmp_added_len);

    for (int i = 0; i < t->n_vocab; i++)
        if ((int)t->piece_len[i] > t->max_piece_len) t->max_piece_len = (int)t->piece_len[i];
    t->dpieces = t->pieces; /* charmode: make_decoded() replaces these */
    t->dpiece_off = t->piece_off;
    t->dpiece_len = t->piece_len;
    return 0;
}

static int contains(const char *s, size_t n, const char *w, size_t k) {
    for (size_t i = 0; i + k <= n; i++)
        if (s[i] == w[0] && memcmp(s + i, w, k) == 0) return 1;
    return 0;
}

/* Appends s[0..n) to buf with every occurrence of from replaced by to
 * (left to right, not overlapping: Rust's str::replace). */
static void replace_all(dfl_buf *b, const char *s, size_t n, const char *from, const char *to) {
    size_t k = strlen(from), i = 0;
    while (i < n) {
        if (i + k <= n && memcmp(s + i, from, k) == 0) {
            dfl_buf_str(b, to);
            i += k;
        } else {
            dfl_buf_add(b, s + i, 1);
            i++;
        }
    }
}

/* HF's ByteFallback test: six characters "<0x" HH ">" where HH parses as a
 * base-16 u8 (Rust's u8::from_str_radix: an optional '+', then digits). */
static int fallback_byte(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = s[3] == '+' ? 4 : 3; i < 5; i++) {
        int c = (unsigned char)s[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* charmode: what each token decodes to, as HF's decoder chain gives it for
 * one token (added tokens included, as HF decodes them too): the Replace
 * steps in order, then ByteFallback's "<0xNN>" -> byte NN. */
static int make_decoded(tok_tokenizer *t, const char *path) {
    dfl_buf out = {0}, x = {0}, y = {0};
    t->dpiece_off = dfl_malloc((size_t)t->n_vocab * sizeof *t->dpiece_off);
    t->dpiece_len = dfl_malloc((size_t)t->n_vocab * sizeof *t->dpiece_len);
    t->max_piece_len = 0;
    for (int id = 0; id < t->n_vocab; id++) {
        dfl_buf_reset(&x);
        dfl_buf_add(&x, t->pieces + t->piece_off[id], t->piece_len[id]);
        for (int r = 0; r < t->n_dec_replace; r++) {
            dfl_buf_reset(&y);
            replace_all(&y, x.s ? x.s : "", x.n, t->dec_replace[r].from, t->dec_replace[r].to);
            dfl_buf tmp = x;
            x = y;
            y = tmp;
        }
        int byte = t->dec_byte_fallback && x.s ? fallback_byte(x.s, x.n) : -1;
        t->dpiece_off[id] = (uint32_t)out.n;
        if (byte >= 0) dfl_buf_char(&out, (char)byte);
        else dfl_buf_add(&out, x.s ? x.s : "", x.n);
        t->dpiece_len[id] = (uint32_t)(out.n - t->dpiece_off[id]);
        if ((int)t->dpiece_len[id] > t->max_piece_len) t->max_piece_len = (int)t->dpiece_len[id];
        if (out.failed || x.failed || y.failed || out.n > UINT32_MAX / 2) {
            dfl_seterr("%s: decoded vocab too large", path);
            dfl_buf_free(&out);
            dfl_buf_free(&x);
            dfl_buf_free(&y);
            return -1;
        }
    }
    dfl_buf_free(&x);
    dfl_buf_free(&y);
    t->dpieces = dfl_buf_take(&out);
    return t->dpieces ? 0 : -1;
}

static int load_config(tok_tokenizer *t, const char *dir) {
    char *path = dfl_path_join(dir, "tokenizer_config.json");
    if (!dfl_file_exists(path)) {
        free(path);
        return 0;
    }
    char *txt = dfl_read_file(path, NULL);
    if (!txt) {
        free(path);
        return -1;
    }
    cJSON *cfg = cJSON_Parse(txt);
    free(txt);
    if (!cJSON_IsObject(cfg)) {
        dfl_seterr("%s: not a JSON object", path);
        cJSON_Delete(cfg);
        free(path);
        return -1;
    }
    /* chat_template: a string, or a list of {name, template} (take "default") */
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsString(ct)) {
        t->chat_template = dfl_strdup(ct->valuestring);
    } else if (cJSON_IsArray(ct)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, ct) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
            const cJSON *tx = cJSON_GetObjectItemCaseSensitive(e, "template");
            if (cJSON_IsString(nm) && strcmp(nm->valuestring, "default") == 0 && cJSON_IsString(tx))
                t->chat_template = dfl_strdup(tx->valuestring);
        }
    }
    /* eos_token: "<|im_end|>" or {"content": "<|im_end|>", ...} */
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(cfg, "eos_token");
    if (cJSON_IsObject(eos)) eos = cJSON_GetObjectItemCaseSensitive(eos, "content");
    if (cJSON_IsString(eos)) {
        t->eos_id = tok_lookup(t, eos->valuestring);
        if (t->eos_id < 0) {
            dfl_seterr("%s: eos_token \"%s\" is not a token", path, eos->valuestring);
            cJSON_Delete(cfg);
            free(path);
            return -1;
        }
    }
    cJSON_Delete(cfg);
    free(path);
    return 0;
}

/* DIR/chat_template.jinja, where a model keeps its template in a file of its
 * own (gpt-oss): when present it is the template, over tokenizer_config.json's
 * chat_template, as transformers reads them. */
static int load_template_file(tok_tokenizer *t, const char *dir) {
    char *path = dfl_path_join(dir, "chat_template.jinja");
    if (!dfl_file_exists(path)) {
        free(path);
        return 0;
    }
    size_t len;
    char *txt = dfl_read_file(path, &len);
    if (!txt) {
        free(path);
        return -1;
    }
    if (strlen(txt) != len) {
        dfl_seterr("%s: the template contains a NUL byte", path);
        free(txt);
        free(path);
        return -1;
    }
    free(t->chat_template);
    t->chat_template = txt;
    free(path);
    return 0;
}

/* One step of a SentencePiece-style decoder; *stage keeps them in the
 * order handled here: Replace steps, then ByteFallback, then Fuse. */
static int parse_dec_step(tok_tokenizer *t, const cJSON *d, int *stage, const char *path) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(d, "type");
    const char *name = cJSON_IsString(ty) ? ty->valuestring : "(missing)";
    int nmax = (int)(sizeof t->dec_replace / sizeof t->dec_replace[0]);
    if (is_type(d, "Replace") && *stage == 0) {
        const char *from = string_pattern(d);
        const cJSON *to = cJSON_GetObjectItemCaseSensitive(d, "content");
        if (!from || !cJSON_IsString(to) || t->n_dec_replace == nmax) {
            dfl_seterr("%s: decoder Replace: only a non-empty String pattern and a string content are supported "
                       "(at most %d of them)", path, nmax);
            return -1;
        }
        t->dec_replace[t->n_dec_replace].from = dfl_strdup(from);
        t->dec_replace[t->n_dec_replace++].to = dfl_strdup(to->valuestring);
        return 0;
    }
    if (is_type(d, "ByteFallback") && *stage < 1) {
        t->dec_byte_fallback = 1;
        *stage = 1;
        return 0;
    }
    if (is_type(d, "Fuse") && *stage < 2) { /* joins the tokens' texts: what decoding does anyway */
        *stage = 2;
        return 0;
    }
    if (is_type(d, "Replace") || is_type(d, "ByteFallback") || is_type(d, "Fuse"))
        dfl_seterr("%s: decoder step %s after a later kind of step is not supported (Replace, then ByteFallback, "
                   "then Fuse)", path, name);
    else
        dfl_seterr("%s: unsupported decoder type %s (ByteLevel, or a Sequence of Replace, ByteFallback and Fuse)",
                   path, name);
    return -1;
}

/* decoder: ByteLevel (or none) keeps byte-level mode; Replace / ByteFallback
 * / Fuse steps (alone or in a Sequence) choose charmode. */
static int parse_decoder(tok_tokenizer *t, const cJSON *dec, const char *path) {
    if (!dec || cJSON_IsNull(dec) || is_type(dec, "ByteLevel")) return 0;
    int stage = 0;
    t->charmode = 1;
    if (is_type(dec, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(dec, "decoders")) {
            if (parse_dec_step(t, e, &stage, path) != 0) return -1;
        }
        return 0;
    }
    return parse_dec_step(t, dec, &stage, path);
}

/* One TemplateProcessing's "single" sequence: special tokens, one "A". */
static int parse_template_pp(tok_tokenizer *t, const cJSON *pp, const char *path) {
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(pp, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(pp, "special_tokens");
    if (!cJSON_IsArray(single)) {
        dfl_seterr("%s: post_processor TemplateProcessing has no \"single\" array", path);
        return -1;
    }
    int seen_a = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, single) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
        const cJSON *sq = cJSON_GetObjectItemCaseSensitive(e, "Sequence");
        if (sq) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(sq, "id");
            if (seen_a || !cJSON_IsString(id) || strcmp(id->valuestring, "A")) {
                dfl_seterr("%s: post_processor \"single\": one Sequence \"A\" expected", path);
                return -1;
            }
            seen_a = 1;
            continue;
        }
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(sp, "id");
        if (!cJSON_IsString(name)) {
            dfl_seterr("%s: post_processor \"single\": an item that is neither SpecialToken nor Sequence", path);
            return -1;
        }
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(specials, name->valuestring),
                                                            "ids");
        if (!cJSON_IsArray(ids)) {
            dfl_seterr("%s: post_processor: special token \"%.60s\" is not in special_tokens", path, name->valuestring);
            return -1;
        }
        const cJSON *x;
        cJSON_ArrayForEach(x, ids) {
            if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble >= t->n_vocab ||
                x->valuedouble != (double)(int32_t)x->valuedouble) {
                dfl_seterr("%s: post_processor: special token \"%.60s\" has an id outside the vocabulary (0..%d)",
                           path, name->valuestring, t->n_vocab - 1);
                return -1;
            }
            if (t->n_pp_pre + t->n_pp_post >= (int)(sizeof t->pp_ids / sizeof t->pp_ids[0])) {
                dfl_seterr("%s: post_processor adds more than 16 special tokens", path);
                return -1;
            }
            t->pp_ids[t->n_pp_pre + t->n_pp_post] = (int32_t)x->valuedouble;
            if (seen_a) t->n_pp_post++;
            else t->n_pp_pre++;
        }
    }
    if (!seen_a) {
        dfl_seterr("%s: post_processor \"single\" has no Sequence \"A\"", path);
        return -1;
    }
    return 0;
}

/* post_processor: TemplateProcessing (alone or in a Sequence) is read;
 * ByteLevel adds no tokens; another type is remembered, and a plain prompt
 * is then refused naming it (tok_encode_prompt). */
static int parse_post_processor(tok_tokenizer *t, const cJSON *pp, const char *path) {
    if (!pp || cJSON_IsNull(pp) || is_type(pp, "ByteLevel")) return 0;
    if (is_type(pp, "TemplateProcessing")) return parse_template_pp(t, pp, path);
    if (is_type(pp, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pp, "processors")) {
            if (parse_post_processor(t, e, path) != 0) return -1;
        }
        return 0;
    }
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(pp, "type");
    snprintf(t->pp_unsupported, sizeof t->pp_unsupported, "%s", cJSON_IsString(ty) ? ty->valuestring : "(no type)");
    return 0;
}

int tok_json_prompt_specials(const cJSON *pp, int n_vocab, const char *path, int32_t ids[16], int *n_pre,
                             int *n_post) {
    tok_tokenizer *t = dfl_calloc(1, sizeof *t);
    t->n_vocab = n_vocab;
    int rc = parse_post_processor(t, pp, path);
    if (rc == 0 && t->pp_unsupported[0]) {
        dfl_seterr("%s: post_processor type \"%s\" is not supported (only TemplateProcessing and ByteLevel)", path,
                   t->pp_unsupported);
        rc = -1;
    }
    if (rc == 0) {
        memcpy(ids, t->pp_ids, sizeof t->pp_ids);
        *n_pre = t->n_pp_pre;
        *n_post = t->n_pp_post;
    }
    free(t);
    return rc;
}

/* normalizer, pre-tokenizer and model of a parsed tokenizer.json */
static int from_root(tok_tokenizer *t, const cJSON *root, const char *path) {
    if (parse_decoder(t, cJSON_GetObjectItemCaseSensitive(root, "decoder"), path) != 0) return -1;
    if (parse_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), path) != 0) return -1;
    const char *pat = NULL;
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (is_type(pt, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers")) {
            if (parse_pretok(t, e, &pat, path) != 0) return -1;
        }
    } else if (pt && !cJSON_IsNull(pt)) {
        if (parse_pretok(t, pt, &pat, path) != 0) return -1;
    }
    if (pat && compile_regex(t, pat, path) != 0) return -1;
    if (load_model(t, root, path) != 0) return -1;
    if (parse_post_processor(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), path) != 0) return -1;
    return t->charmode ? make_decoded(t, path) : 0;
}

tok_tokenizer *tok_from_json(const cJSON *root, const char *chat_template, int eos_id, const char *path) {
    tok_tokenizer *t = dfl_calloc(1, sizeof *t);
    t->eos_id = -1;
    if (from_root(t, root, path) != 0) {
        tok_free(t);
        return NULL;
    }
    if (eos_id >= t->n_vocab) {
        dfl_seterr("%s: eos token id %d is not a token (%d ids)", path, eos_id, t->n_vocab);
        tok_free(t);
        return NULL;
    }
    t->eos_id = eos_id;
    if (chat_template) t->chat_template = dfl_strdup(chat_template);
    return t;
}

tok_tokenizer *tok_load(const char *dir) {
    tok_tokenizer *t = dfl_calloc(1, sizeof *t);
    t->eos_id = -1;
    char *path = dfl_path_join(dir, "tokenizer.json");
    size_t len;
    cJSON *root = NULL;
    char *txt = dfl_read_file(path, &len);
    if (!txt) goto fail;
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(txt, len, &end, 0);
    size_t at = end ? (size_t)(end - txt) : 0;
    free(txt);
    if (!root) {
        dfl_seterr("%s: malformed JSON at byte %zu", path, at);
        goto fail;
    }
    if (!cJSON_IsObject(root)) {
        dfl_seterr("%s: not a JSON object", path);
        goto fail;
    }
    if (from_root(t, root, path) != 0) goto fail;
    cJSON_Delete(root);
    root = NULL;
    if (load_config(t, dir) != 0 || load_template_file(t, dir) != 0) goto fail;
    free(path);
    return t;
fail:
    cJSON_Delete(root);
    free(path);
    tok_free(t);
    return NULL;
}

void tok_free(tok_tokenizer *t) {
    if (!t) return;
    free(t->pieces);
    free(t->piece_off);
    free(t->piece_len);
    free(t->vmap);
    free(t->mmap);
    free(t->bmerge);
    for (int i = 0; i < t->n_added && t->added; i++) free(t->added[i].text);
    free(t->added);
    pcre2_code_free(t->re);
    free(t->chat_template);
    for (int i = 0; i < t->n_norm; i++) {
        free(t->norm[i].from);
        free(t->norm[i].to);
    }
    for (int i = 0; i < t->n_dec_replace; i++) {
        free(t->dec_replace[i].from);
        free(t->dec_replace[i].to);
    }
    free(t->split_lit);
    if (t->dpieces != t->pieces) free(t->dpieces);
    if (t->dpiece_off != t->piece_off) free(t->dpiece_off);
    if (t->dpiece_len != t->piece_len) free(t->dpiece_len);
    free(t);
}

int tok_n_vocab(const tok_tokenizer *t) { return t->n_vocab; }
const char *tok_chat_template(const tok_tokenizer *t) { return t->chat_template; }
int tok_eos_id(const tok_tokenizer *t) { return t->eos_id; }

int tok_lookup(const tok_tokenizer *t, const char *token) {
    for (int i = 0; i < t->n_added; i++)
        if (strcmp(t->added[i].text, token) == 0) return t->added[i].id;
    size_t n = strlen(token);
    if (t->charmode) return vocab_find(t, token, n); /* the vocab's own text ("\u2581the", "<0x0A>") */
    char *raw = dfl_malloc(n + 1);
    int b2u[256], u2b[324];
    byte_alphabet(b2u, u2b);
    long m = bytelevel_to_raw(u2b, token, raw);
    int id = m < 0 ? vocab_find(t, token, n) : vocab_find(t, raw, (size_t)m);
    free(raw);
    return id;
}

/* ------------------------------------------------------------- encoding */

/* Scratch space of one tok_encode() call; grows as needed. */
typedef struct {
    int32_t *ids; /* output [n, cap] */
    size_t n, cap;
    int32_t *sym, *prev, *next; /* BPE symbols of the current piece [scap] */
    int32_t *prank, *pid;       /* rank and result of the pair (i, next[i]); -1 = no merge */
    uint64_t *heap;             /* candidate merges (rank << 32 | pos) [3 * scap] */
    size_t scap;
    pcre2_match_data *md;
    /* Per-call piece cache: a piece's ids, keyed by its bytes. Pieces repeat a
     * lot ("Ġthe", "\n", "(") so this skips most of the BPE on long texts. */
    struct cache_slot { uint32_t key_off, key_len, ids_off, ids_n; } *cache;
    uint32_t cache_mask, cache_used;
    char *ckeys; /* cached piece bytes */
    size_t ckeys_n, ckeys_cap;
    int32_t *cids; /* cached piece ids */
    size_t cids_n, cids_cap;
} enc_state;

static void push_id(enc_state *st, int32_t id) {
    if (st->n == st->cap) st->ids = dfl_realloc(st->ids, (st->cap = st->cap * 2 + 64) * sizeof *st->ids);
    st->ids[st->n++] = id;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

static void push_candidate(const tok_tokenizer *t, enc_state *st, size_t *hn, int pos) {
    const merge_slot *m = merge_find(t, st->sym[pos], st->sym[st->next[pos]]);
    st->prank[pos] = m ? m->rank : -1;
    st->pid[pos] = m ? m->id : -1;
    if (m) heap_push(st->heap, hn, (uint64_t)(uint32_t)m->rank << 32 | (uint32_t)pos);
}

/* BPE of one piece p[0..n), ids appended to st->ids.
 * Symbols form a linked list over positions 0..ns-1 (next/prev = -1 at the
 * ends); position 0 always stays alive because a merge keeps its left side.
 * Invariant: prank[i]/pid[i] describe the current pair (i, next[i]) of every
 * live i; they are refreshed whenever sym[i] or sym[next[i]] changes. Heap
 * entries go stale when a neighbour merges; a popped entry is used only if
 * its rank is still prank[pos] (ranks are unique per pair). */
static void bpe_piece(const tok_tokenizer *t, enc_state *st, const char *p, size_t n) {
    if (n > st->scap) {
        st->scap = n > 2 * st->scap ? n : 2 * st->scap;
        st->sym = dfl_realloc(st->sym, st->scap * sizeof *st->sym);
        st->prev = dfl_realloc(st->prev, st->scap * sizeof *st->prev);
        st->next = dfl_realloc(st->next, st->scap * sizeof *st->next);
        st->heap = dfl_realloc(st->heap, 3 * st->scap * sizeof *st->heap);
        st->prank = dfl_realloc(st->prank, st->scap * sizeof *st->prank);
        st->pid = dfl_realloc(st->pid, st->scap * sizeof *st->pid);
    }
    const unsigned char *u = (const unsigned char *)p;
    unsigned char *byte = (unsigned char *)st->heap; /* scratch: the bytes kept, [ns] */
    int ns = 0;
    size_t hn = 0;
    if (t->charmode) { /* one symbol per character; one per byte (<0xNN>) for those not in the vocab */
        for (size_t i = 0; i < n;) {
            size_t cl = u[i] < 0x80 ? 1 : u[i] < 0xe0 ? 2 : u[i] < 0xf0 ? 3 : 4; /* p is valid UTF-8 */
            if (cl > n - i) cl = n - i;
            int id = vocab_find(t, p + i, cl);
            if (id >= 0) st->sym[ns++] = id;
            else
                for (size_t k = 0; k < cl; k++) st->sym[ns++] = t->byte_tok[u[i + k]];
            i += cl;
        }
        for (int i = 0; i < ns; i++) {
            st->prev[i] = i - 1;
            st->next[i] = i + 1 < ns ? i + 1 : -1;
            st->prank[i] = st->pid[i] = -1;
        }
        for (int i = 0; i + 1 < ns; i++) push_candidate(t, st, &hn, i);
        goto merge;
    }
    for (size_t i = 0; i < n; i++) {
        int id = t->byte_id[u[i]];
        if (id < 0) continue; /* a byte missing from the vocab is dropped, as HF does */
        byte[ns] = u[i];
        st->sym[ns++] = id;
    }
    for (int i = 0; i < ns; i++) {
        st->prev[i] = i - 1;
        st->next[i] = i + 1 < ns ? i + 1 : -1;
        st->prank[i] = st->pid[i] = -1;
        if (i + 1 < ns) {
            const struct byte_merge *bm = &t->bmerge[byte[i] * 256 + byte[i + 1]];
            st->prank[i] = bm->rank;
            st->pid[i] = bm->id;
        }
    }
    for (int i = 0; i + 1 < ns; i++) /* after the loop above: heap and byte share memory */
        if (st->prank[i] >= 0) heap_push(st->heap, &hn, (uint64_t)(uint32_t)st->prank[i] << 32 | (uint32_t)i);
merge:
    while (hn > 0) {
        uint64_t top = heap_pop(st->heap, &hn);
        int pos = (int)(uint32_t)top, rank = (int)(top >> 32);
        int nx = st->next[pos];
        if (st->sym[pos] < 0 || nx < 0 || st->prank[pos] != rank) continue;
        st->sym[pos] = st->pid[pos];
        st->sym[nx] = -1; /* dead */
        st->next[pos] = st->next[nx];
        if (st->next[nx] >= 0) st->prev[st->next[nx]] = pos;
        if (st->prev[pos] >= 0) push_candidate(t, st, &hn, st->prev[pos]);
        if (st->next[pos] >= 0) push_candidate(t, st, &hn, pos);
        else st->prank[pos] = -1;
    }
    for (int i = ns ? 0 : -1; i >= 0; i = st->next[i]) push_id(st, st->sym[i]);
}

static void encode_piece(const tok_tokenizer *t, enc_state *st, const char *p, size_t n) {
    if (n == 0) return;
    if (n == 1 && !t->charmode) {
        int id = t->byte_id[(unsigned char)p[0]];
        if (id >= 0) push_id(st, id);
        return;
    }
    if (t->ignore_merges) {
        int id = vocab_find(t, p, n);
        if (id >= 0) {
            push_id(st, id);
            return;
        }
    }
    if (n > 64) { /* long pieces rarely repeat */
        bpe_piece(t, st, p, n);
        return;
    }
    uint32_t h = (uint32_t)hash_bytes(p, n), i = h & st->cache_mask;
    for (;; i = (i + 1) & st->cache_mask) {
        struct cache_slot *c = &st->cache[i];
        if (c->key_len == 0) break;
        if (c->key_len == n && memcmp(st->ckeys + c->key_off, p, n) == 0) {
            for (uint32_t k = 0; k < c->ids_n; k++) push_id(st, st->cids[c->ids_off + k]);
            return;
        }
    }
    size_t first = st->n;
    bpe_piece(t, st, p, n);
    if (st->cache_used * 2 > st->cache_mask) return; /* full: stop adding */
    size_t nids = st->n - first;
    if (st->ckeys_n + n > st->ckeys_cap)
        st->ckeys = dfl_realloc(st->ckeys, st->ckeys_cap = (st->ckeys_cap + n) * 2);
    if (st->cids_n + nids > st->cids_cap)
        st->cids = dfl_realloc(st->cids, (st->cids_cap = (st->cids_cap + nids) * 2) * sizeof *st->cids);
    struct cache_slot *c = &st->cache[i];
    c->key_off = (uint32_t)st->ckeys_n;
    c->key_len = (uint32_t)n;
    c->ids_off = (uint32_t)st->cids_n;
    c->ids_n = (uint32_t)nids;
    memcpy(st->ckeys + st->ckeys_n, p, n);
    memcpy(st->cids + st->cids_n, st->ids + first, nids * sizeof *st->cids);
    st->ckeys_n += n;
    st->cids_n += nids;
    st->cache_used++;
}

/* HF tokenizers normalizes with Unicode 9.0 tables (crate
 * unicode-normalization-alignments 0.1.12); utf8proc has Unicode 15.0. A
 * character unassigned in 9.0 is, for HF, a starter that neither decomposes
 * nor composes. These are the characters for which that differs from
 * utf8proc's view: not assigned in Unicode 9.0, and in utf8proc's tables
 * with a non-zero combining class, a canonical decomposition, or a part in a
 * composition. Made by tools/reference/nfc_newer_than_9.c. */
static const int32_t NFC_NEWER_THAN_9[][2] = {
    {0x07FD, 0x07FD},   {0x0898, 0x089F},   {0x08CA, 0x08D3},   {0x09FE, 0x09FE},
    {0x0C3C, 0x0C3C},   {0x0D3B, 0x0D3C},   {0x0EBA, 0x0EBA},   {0x1715, 0x1715},
    {0x1ABF, 0x1ACE},   {0x1DF6, 0x1DFA},   {0xA82C, 0xA82C},   {0x10D24, 0x10D27},
    {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF}, {0x10F46, 0x10F50}, {0x10F82, 0x10F85},
    {0x11070, 0x11070}, {0x1133B, 0x1133B}, {0x1145E, 0x1145E}, {0x11839, 0x1183A},
    {0x11930, 0x11930}, {0x11935, 0x11935}, {0x11938, 0x11938}, {0x1193D, 0x1193E},
    {0x11943, 0x11943}, {0x119E0, 0x119E0}, {0x11A34, 0x11A34}, {0x11A47, 0x11A47},
    {0x11A99, 0x11A99}, {0x11D42, 0x11D42}, {0x11D44, 0x11D45}, {0x11D97, 0x11D97},
    {0x11F41, 0x11F42}, {0x16FF0, 0x16FF1}, {0x1E08F, 0x1E08F}, {0x1E130, 0x1E136},
    {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF}, {0x1E4EC, 0x1E4EF},
};

static int newer_than_9(int32_t cp) {
    int lo = 0, hi = (int)(sizeof NFC_NEWER_THAN_9 / sizeof NFC_NEWER_THAN_9[0]) - 1;
    if (cp < NFC_NEWER_THAN_9[0][0]) return 0;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < NFC_NEWER_THAN_9[mid][0]) hi = mid - 1;
        else if (cp > NFC_NEWER_THAN_9[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

/* Canonical ordering of v[0..n) (code points after decomposition): each
 * maximal run of non-starters (combining class > 0) sorted stably by class.
 * utf8proc_map does the same with an adjacent-swap (bubble) sort over the
 * whole text, quadratic in the length of a run of mixed marks (80 KB: 5.5 s);
 * here short runs take an insertion sort and long ones a counting sort. */
static void canonical_order(utf8proc_int32_t *v, size_t n, utf8proc_int32_t *tmp, uint8_t *cls) {
    for (size_t i = 0; i < n; i++) cls[i] = (uint8_t)utf8proc_get_property(v[i])->combining_class;
    for (size_t a = 0; a < n;) {
        if (!cls[a]) {
            a++;
            continue;
        }
        size_t b = a;
        while (b < n && cls[b]) b++; /* [a, b): a run of non-starters */
        if (b - a < 32) {
            for (size_t i = a + 1; i < b; i++) {
                utf8proc_int32_t x = v[i];
                uint8_t c = cls[i];
                size_t j = i;
                for (; j > a && cls[j - 1] > c; j--) {
                    v[j] = v[j - 1];
                    cls[j] = cls[j - 1];
                }
                v[j] = x;
                cls[j] = c;
            }
        } else {
            size_t start[257] = {0};
            for (size_t i = a; i < b; i++) start[cls[i] + 1]++;
            for (int c = 0; c < 256; c++) start[c + 1] += start[c];
            for (size_t i = a; i < b; i++) tmp[start[cls[i]]++] = v[i];
            memcpy(v + a, tmp, sizeof *v * (b - a));
            for (size_t i = a; i < b; i++) cls[i] = (uint8_t)utf8proc_get_property(v[i])->combining_class;
        }
        a = b;
    }
}

/* utf8proc_map(s, n, out, UTF8PROC_STABLE | UTF8PROC_COMPOSE) with the
 * same result in linear time: utf8proc's own per-character decomposition
 * and composition (utf8proc_reencode), our canonical ordering between them.
 * s[0..n) is valid UTF-8. Returns the length of *out (malloc'd) or a
 * negative utf8proc error. */
static utf8proc_ssize_t nfc_linear(const unsigned char *s, size_t n, unsigned char **out) {
    const utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    size_t cap = n + 8, len = 0;
    utf8proc_int32_t *v = dfl_malloc(sizeof *v * cap);
    *out = NULL;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t cl = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (cl <= 0) {
            free(v);
            return cl < 0 ? cl : UTF8PROC_ERROR_INVALIDUTF8;
        }
        i += (size_t)cl;
        for (;;) {
            utf8proc_ssize_t k = utf8proc_decompose_char(cp, v + len, (utf8proc_ssize_t)(cap - len), opt, NULL);
            if (k < 0) {
                free(v);
                return k;
            }
            if ((size_t)k <= cap - len) {
                len += (size_t)k;
                break;
            }
            v = dfl_realloc(v, sizeof *v * (cap = 2 * cap + (size_t)k));
        }
    }
    utf8proc_int32_t *tmp = dfl_malloc(sizeof *tmp * (len + 1));
    uint8_t *cls = dfl_malloc(len + 1);
    canonical_order(v, len, tmp, cls);
    free(tmp);
    free(cls);
    if (len + 1 > cap) v = dfl_realloc(v, sizeof *v * (len + 1)); /* reencode wants one spare byte */
    utf8proc_ssize_t k = utf8proc_reencode(v, (utf8proc_ssize_t)len, opt);
    if (k < 0) {
        free(v);
        return k;
    }
    *out = (unsigned char *)v;
    return k;
}

/* NFC of s[0..n): *out is a malloc'd copy, or NULL when no character is
 * U+0300 or above (lead bytes below 0xCC): nothing there decomposes or
 * combines, so NFC changes nothing. Only the stretches around such
 * characters go through utf8proc: the text is cut just before ASCII
 * characters, which are starters that never compose with what precedes them,
 * so NFC(a + b) = NFC(a) + NFC(b) at such a cut. */
static int nfc(const char *s, size_t n, char **out, size_t *out_n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t j = 0;
    while (j < n && u[j] < 0xcc) j++;
    *out = NULL;
    if (j == n) return 0;
    size_t cap = n + n / 4 + 16, w = 0, i = 0;
    char *buf = dfl_malloc(cap);
#define APPEND(p, len)                                                                   \
    do {                                                                                 \
        if (w + (len) > cap) buf = dfl_realloc(buf, cap = (w + (len)) * 2);              \
        memcpy(buf + w, (p), (len));                                                     \
        w += (len);                                                                      \
    } while (0)
    while (i < n) { /* i: a cut point; j: the next byte >= 0xCC at or after i, or n */
        if (j == n) {
            APPEND(s + i, n - i);
            break;
        }
        size_t a = j, b = j;
        while (a > i && u[a] >= 0x80) a--; /* back to the ASCII char that may start a composition */
        while (b < n && u[b] >= 0x80) b++; /* on to the next ASCII char */
        APPEND(s + i, a - i);
        /* normalize [a, b), copying characters in NFC_NEWER_THAN_9 as they are:
         * for HF they are starters, which cut the text like ASCII does */
        for (size_t r = a, q = a; r < b;) {
            utf8proc_int32_t cp = 0;
            utf8proc_ssize_t cl = q < b ? utf8proc_iterate(u + q, (utf8proc_ssize_t)(b - q), &cp) : 0;
            int cut = q == b || newer_than_9(cp);
            if (!cut) {
                q += (size_t)cl;
                continue;
            }
            if (q > r) {
                unsigned char *m = NULL;
                utf8proc_ssize_t k = nfc_linear(u + r, q - r, &m);
                if (k < 0) {
                    dfl_seterr("tok_encode: NFC: %s", utf8proc_errmsg(k));
                    free(buf);
                    return -1;
                }
                APPEND(m, (size_t)k);
                free(m);
            }
            APPEND(s + q, (size_t)cl);
            r = q = q + (size_t)cl;
        }
        i = j = b;
        while (j < n && u[j] < 0xcc) j++;
    }
#undef APPEND
    *out = buf;
    *out_n = w;
    return 0;
}

/* One stretch of text between added tokens. */
static int encode_segment(const tok_tokenizer *t, enc_state *st, const char *s, size_t n) {
    if (n == 0) return 0;
    char *norm = NULL;
    for (int k = 0; k < t->n_norm; k++) { /* the normalizers in order; norm: the latest copy */
        char *out = NULL;
        size_t m = 0;
        if (t->norm[k].kind == NORM_NFC) {
            if (nfc(s, n, &out, &m) != 0) {
                free(norm);
                return -1;
            }
        } else if (contains(s, n, t->norm[k].from, t->norm[k].nfrom)) {
            dfl_buf b = {0};
            replace_all(&b, s, n, t->norm[k].from, t->norm[k].to);
            m = b.n;
            out = dfl_buf_take(&b);
            if (!out) {
                free(norm);
                return -1;
            }
        }
        if (out) {
            free(norm);
            norm = out;
            s = out;
            n = m;
        }
    }
    if (t->split_lit) { /* a literal delimiter: Isolated, or MergedWithPrevious (the piece ends after it) */
        size_t start = 0, k = t->nsplit;
        for (size_t i = 0; i + k <= n;) {
            if (memcmp(s + i, t->split_lit, k) != 0) {
                i++;
                continue;
            }
            if (t->split_merge_prev) {
                encode_piece(t, st, s + start, i + k - start);
            } else {
                encode_piece(t, st, s + start, i - start);
                encode_piece(t, st, s + i, k);
            }
            start = i += k;
        }
        encode_piece(t, st, s + start, n - start);
        free(norm);
        return 0;
    }
    if (!t->re) {
        encode_piece(t, st, s, n);
        free(norm);
        return 0;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
    size_t gap = 0, at = 0; /* gap: start of text not yet emitted; at: where to search */
    while (at < n) {
        int rc = pcre2_match(t->re, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK, st->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            char msg[256];
            pcre2_get_error_message(rc, (PCRE2_UCHAR *)msg, sizeof msg);
            dfl_seterr("tok_encode: pre-tokenizer regex: %s", msg);
            free(norm);
            return -1;
        }
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* empty match: step over one character */
            at = ms + 1;
            while (at < n && ((unsigned char)s[at] & 0xc0) == 0x80) at++;
            continue;
        }
        if (ms > gap) encode_piece(t, st, s + gap, ms - gap);
        encode_piece(t, st, s + ms, me - ms);
        gap = at = me;
    }
    if (gap < n) encode_piece(t, st, s + gap, n - gap);
    free(norm);
    return 0;
}

int tok_encode(const tok_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    if (len > INT32_MAX) { /* positions in a piece are int32 */
        dfl_seterr("tok_encode: text of %zu bytes is too long", len);
        return -1;
    }
    long bad = dfl_utf8_invalid_at(text, len);
    if (bad >= 0) {
        dfl_seterr("tok_encode: invalid UTF-8 at byte offset %ld (0x%02x)", bad,
                   (unsigned char)text[bad]);
        return -1;
    }
    enc_state st;
    memset(&st, 0, sizeof st);
    if (t->re) st.md = pcre2_match_data_create_from_pattern(t->re, NULL);
    /* the piece cache holds at most one entry per 16 bytes of text, 64K entries */
    st.cache_mask = pow2_above(len / 16 < 65536 ? len / 16 : 65536) - 1;
    st.cache = dfl_calloc((size_t)st.cache_mask + 1, sizeof *st.cache);
    int rc = 0;
    size_t seg = 0, i = 0; /* seg: start of the current non-added stretch */
    while (i < len && rc == 0) {
        const added_token *hit = NULL;
        if (t->added_first[(unsigned char)text[i]]) {
            for (int k = 0; k < t->n_added && !hit; k++) { /* longest first */
                const added_token *a = &t->added[k];
                if (a->text[0] == text[i] && (size_t)a->len <= len - i &&
                    memcmp(a->text, text + i, (size_t)a->len) == 0)
                    hit = a;
            }
        }
        if (!hit) {
            i++;
            continue;
        }
        rc = encode_segment(t, &st, text + seg, i - seg);
        push_id(&st, hit->id);
        i += (size_t)hit->len;
        seg = i;
    }
    if (rc == 0) rc = encode_segment(t, &st, text + seg, len - seg);
    pcre2_match_data_free(st.md);
    free(st.sym);
    free(st.prev);
    free(st.next);
    free(st.heap);
    free(st.prank);
    free(st.pid);
    free(st.cache);
    free(st.ckeys);
    free(st.cids);
    if (rc != 0) {
        free(st.ids);
        return -1;
    }
    *ids = st.ids ? st.ids : dfl_malloc(sizeof **ids);
    *n = st.n;
    return 0;
}

/* ------------------------------------------------------------- decoding */

size_t tok_max_piece(const tok_tokenizer *t) {
    /* worst case: 3 held bytes + the piece, every byte replaced by U+FFFD (3 bytes) */
    return 3 * ((size_t)t->max_piece_len + 3) + 1;
}

static size_t put_fffd(char *out, size_t w, size_t cap) {
    if (w + 3 > cap) return w;
    out[w] = (char)0xef;
    out[w + 1] = (char)0xbf;
    out[w + 2] = (char)0xbd;
    return w + 3;
}

/* Decode held bytes + b[0..n) into out. Complete characters are copied, each
 * maximal invalid subpart becomes one U+FFFD (as Python's and Rust's lossy
 * decoders do), and a valid but incomplete tail is held in d. */
static size_t decode_bytes(tok_decoder *d, const unsigned char *b, size_t n, char *out, size_t cap) {
    unsigned char buf[4];
    size_t np = (size_t)d->npend, total = np + n, w = 0, i = 0;
    memcpy(buf, d->pend, np);
    d->npend = 0;
#define AT(k) ((k) < np ? buf[(k)] : b[(k)-np])
    while (i < total) {
        unsigned c = AT(i);
        if (c < 0x80) {
            if (w < cap) out[w++] = (char)c;
            i++;
            continue;
        }
        size_t need;
        unsigned lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
        if (c >= 0xc2 && c <= 0xdf) need = 1;
        else if (c >= 0xe0 && c <= 0xef) {
            need = 2;
            if (c == 0xe0) lo = 0xa0;
            if (c == 0xed) hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3;
            if (c == 0xf0) lo = 0x90;
            if (c == 0xf4) hi = 0x8f;
        } else {
            w = put_fffd(out, w, cap);
            i++;
            continue;
        }
        size_t k = 1;
        for (; k <= need && i + k < total; k++) {
            unsigned x = AT(i + k);
            if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xbf)) break;
        }
        if (k > need) { /* complete */
            if (w + need + 1 <= cap)
                for (size_t j = 0; j <= need; j++) out[w++] = (char)AT(i + j);
            i += need + 1;
        } else if (i + k == total) { /* valid so far, more bytes to come */
            for (size_t j = 0; j < k; j++) d->pend[j] = AT(i + j);
            d->npend = (int)k;
            i = total;
        } else { /* broken by byte i+k: the valid prefix becomes one U+FFFD */
            w = put_fffd(out, w, cap);
            i += k;
        }
    }
#undef AT
    return w;
}

size_t tok_decode(const tok_tokenizer *t, tok_decoder *d, int32_t id, char *out, size_t cap) {
    if (id < 0 || id >= t->n_vocab) return 0;
    return decode_bytes(d, (const unsigned char *)t->dpieces + t->dpiece_off[id], t->dpiece_len[id],
                        out, cap);
}

const char *tok_piece(const tok_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    *len = t->dpiece_len[id];
    return t->dpieces + t->dpiece_off[id];
}

size_t tok_decode_flush(tok_decoder *d, char *out, size_t cap) {
    size_t w = 0;
    if (d->npend > 0) w = put_fffd(out, 0, cap); /* a held tail is always one valid prefix */
    d->npend = 0;
    return w;
}

int tok_encode_prompt(const tok_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    if (t->pp_unsupported[0]) {
        dfl_seterr("tok_encode_prompt: the tokenizer's post_processor type \"%s\" is not supported (only "
                   "TemplateProcessing and ByteLevel)", t->pp_unsupported);
        return -1;
    }
    int32_t *body;
    size_t nb;
    if (tok_encode(t, text, len, &body, &nb) != 0) return -1;
    size_t pre = (size_t)t->n_pp_pre, post = (size_t)t->n_pp_post;
    int32_t *out = dfl_malloc((pre + nb + post ? pre + nb + post : 1) * sizeof *out);
    memcpy(out, t->pp_ids, pre * sizeof *out);
    if (nb) memcpy(out + pre, body, nb * sizeof *out);
    memcpy(out + pre + nb, t->pp_ids + pre, post * sizeof *out);
    free(body);
    *ids = out;
    *n = pre + nb + post;
    return 0;
}
