/* chat.c - chat templates written out in C (see chat.h).
 *
 * CHAT_QWEN3 follows the Qwen3 template in models/qwen3-tokenizer/
 * tokenizer_config.json (the version Qwen3 was released with) as jinja2
 * renders it with trim_blocks and lstrip_blocks, the way transformers does:
 *   - a first "system" message opens the prompt; later ones are ordinary turns;
 *   - last_query_index: the last "user" message whose content is not wrapped
 *     in <tool_response>...</tool_response> (n - 1 if there is none);
 *   - an assistant message takes its reasoning from reasoning_content when
 *     given, else from a "<think>...</think>" prefix of its content;
 *   - assistant turns after last_query_index carry a think block (empty if
 *     there is no reasoning) when they are the last message or have
 *     reasoning; earlier ones keep only the answer;
 *   - consecutive "tool" messages share one user turn of <tool_response> blocks;
 *   - the generation prompt is "<|im_start|>assistant\n", followed by an empty
 *     think block only when thinking is switched off (CHAT_THINK_OFF).
 *   - with tools, the system turn holds the "# Tools" section: the first
 *     system message's content and a blank line, then one tojson line per
 *     tool inside <tools></tools> and the <tool_call> instructions;
 *   - an assistant message's tool_calls follow its content as
 *     <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call> blocks,
 *     separated by a newline (and from the content, when there is some).
 * Roles other than system/user/assistant/tool are an error here (the
 * template silently drops them).
 *
 * CHAT_LLAMA3 is the Llama-3 Instruct template: <|begin_of_text|>, then per
 * message "<|start_header_id|>ROLE<|end_header_id|>\n\n" + content with
 * white space trimmed (Python str.strip()) + "<|eot_id|>", and the generation
 * prompt "<|start_header_id|>assistant<|end_header_id|>\n\n". The Llama-3.1
 * template's date/tools system preamble is not reproduced.
 *
 * CHAT_GEMMA is the Gemma 3 template of models/gemma3-tokenizer/tokenizer_config.json
 * (chat.h describes it); its pieces are literals of that template.
 *
 * CHAT_GEMMA4 and CHAT_GEMMA4_EARLY are Gemma 4's two templates named in
 * tests/fixtures/chat/gemma4/README (chat.h describes them; the README says
 * where they come from); their pieces are the literals those templates write,
 * their tool declarations the output of its macros for the same JSON.
 *
 * CHAT_HARMONY is gpt-oss's chat_template.jinja (models/gptoss-tokenizer/,
 * upstream 2025-08-08), tools included, as chat.h describes it; every piece
 * below is a literal of that template or what its macros write.
 *
 * The templates meet JSON (tools, call arguments, results) as the Python
 * values transformers gives them: pj_parse reads it as json.loads does, and
 * the jv_ / py_ helpers do what jinja2 and Python do with those values. */
#include "chat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cJSON.h>

#include "util.h"

/* A piece of a string: s[0..n). */
typedef struct {
    const char *s;
    size_t n;
} span;

static span whole(const char *s) { return (span){s, strlen(s)}; }
static void put_span(dfl_buf *b, span x) { dfl_buf_add(b, x.s, x.n); }

/* Python's s.lstrip('\n'), s.rstrip('\n'), s.strip('\n') */
static span lstrip_nl(span x) {
    while (x.n && x.s[0] == '\n') x.s++, x.n--;
    return x;
}
static span rstrip_nl(span x) {
    while (x.n && x.s[x.n - 1] == '\n') x.n--;
    return x;
}
static span strip_nl(span x) { return rstrip_nl(lstrip_nl(x)); }

/* Offset of the first / last occurrence of needle in x, or -1. */
static long find_first(span x, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= x.n; i++)
        if (memcmp(x.s + i, needle, k) == 0) return (long)i;
    return -1;
}
static long find_last(span x, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = x.n >= k ? x.n - k + 1 : 0; i-- > 0;)
        if (memcmp(x.s + i, needle, k) == 0) return (long)i;
    return -1;
}

static int starts_with(span x, const char *p) {
    size_t k = strlen(p);
    return x.n >= k && memcmp(x.s, p, k) == 0;
}
static int ends_with(span x, const char *p) {
    size_t k = strlen(p);
    return x.n >= k && memcmp(x.s + x.n - k, p, k) == 0;
}

/* ---- Python's json.dumps(x, ensure_ascii=False): the template's tojson ---- */

static void py_json_str(dfl_buf *b, const char *s) {
    dfl_buf_char(b, '"');
    for (const unsigned char *u = (const unsigned char *)s; *u; u++) {
        char e[8];
        switch (*u) {
        case '"': dfl_buf_str(b, "\\\""); break;
        case '\\': dfl_buf_str(b, "\\\\"); break;
        case '\n': dfl_buf_str(b, "\\n"); break;
        case '\r': dfl_buf_str(b, "\\r"); break;
        case '\t': dfl_buf_str(b, "\\t"); break;
        case '\b': dfl_buf_str(b, "\\b"); break;
        case '\f': dfl_buf_str(b, "\\f"); break;
        default:
            if (*u < 0x20) {
                snprintf(e, sizeof e, "\\u%04x", *u);
                dfl_buf_str(b, e);
            } else {
                dfl_buf_add(b, (const char *)u, 1);
            }
        }
    }
    dfl_buf_char(b, '"');
}

/* ---- JSON as Python's json.loads reads it ---------------------------------
 * The templates see what transformers hands them: Python values from
 * json.loads. pj_parse builds the same tree as cJSON nodes, with two things
 * cJSON alone loses: a number node keeps its literal in valuestring (an int
 * and a float print differently: 1 and 1.0), and what Python reads but the
 * renderers here cannot write back the same is refused rather than
 * changed: NaN / Infinity, a string with U+0000 or a lone surrogate, a key
 * twice in one object (json.loads keeps the last value at the first
 * place), nesting deeper than PJ_DEPTH. */
enum { PJ_OK = 0, PJ_NOT_JSON = -1, PJ_REFUSED = -2, PJ_DEPTH = 64 };

typedef struct {
    const char *s;
    size_t n, i;
    const char *why; /* PJ_REFUSED: what */
} pj_reader;

static void pj_ws(pj_reader *r) {
    while (r->i < r->n && (r->s[r->i] == ' ' || r->s[r->i] == '\t' || r->s[r->i] == '\n' || r->s[r->i] == '\r'))
        r->i++;
}

static int pj_hex4(const char *s, unsigned *u) {
    *u = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *u = *u * 16 + (unsigned)d;
    }
    return 0;
}

static void utf8_put(dfl_buf *b, unsigned u) {
    char t[4];
    int k = 0;
    if (u < 0x80) t[k++] = (char)u;
    else if (u < 0x800) t[k++] = (char)(0xc0 | u >> 6), t[k++] = (char)(0x80 | (u & 63));
    else if (u < 0x10000) t[k++] = (char)(0xe0 | u >> 12), t[k++] = (char)(0x80 | (u >> 6 & 63)), t[k++] = (char)(0x80 | (u & 63));
    else t[k++] = (char)(0xf0 | u >> 18), t[k++] = (char)(0x80 | (u >> 12 & 63)), t[k++] = (char)(0x80 | (u >> 6 & 63)),
         t[k++] = (char)(0x80 | (u & 63));
    dfl_buf_add(b, t, (size_t)k);
}

/* A string at r->s[r->i] == '"': its decoded text (malloc'd), or NULL (rc set). */
static char *pj_string(pj_reader *r, int *rc) {
    dfl_buf b = {0};
    dfl_buf_str(&b, "");
    for (r->i++; r->i < r->n; r->i++) {
        unsigned char c = (unsigned char)r->s[r->i];
        if (c == '"') {
            r->i++;
            return dfl_buf_take(&b);
        }
        if (c < 0x20) break; /* json.loads (strict) refuses control characters in strings */
        if (c != '\\') {
            dfl_buf_add(&b, &r->s[r->i], 1);
            continue;
        }
        if (++r->i >= r->n) break;
        char e = r->s[r->i];
        const char *plain = strchr("\"\\/bfnrt", e);
        if (plain && e) {
            static const char out[] = "\"\\/\b\f\n\r\t";
            dfl_buf_char(&b, out[plain - "\"\\/bfnrt"]);
            continue;
        }
        unsigned u, lo;
        if (e != 'u' || r->i + 4 >= r->n || pj_hex4(r->s + r->i + 1, &u)) break;
        r->i += 4;
        if (u >= 0xd800 && u < 0xdc00 && r->i + 6 < r->n && r->s[r->i + 1] == '\\' && r->s[r->i + 2] == 'u' &&
            !pj_hex4(r->s + r->i + 3, &lo) && lo >= 0xdc00 && lo < 0xe000) {
            u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
            r->i += 6;
        } else if (u >= 0xd800 && u < 0xe000) {
            dfl_buf_free(&b);
            r->why = "a lone surrogate (\\ud800-\\udfff) in a string";
            *rc = PJ_REFUSED;
            return NULL;
        }
        if (u == 0) {
            dfl_buf_free(&b);
            r->why = "U+0000 in a string";
            *rc = PJ_REFUSED;
            return NULL;
        }
        utf8_put(&b, u);
    }
    dfl_buf_free(&b);
    *rc = PJ_NOT_JSON;
    return NULL;
}

static int pj_digits(pj_reader *r) {
    size_t a = r->i;
    while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') r->i++;
    return r->i > a;
}

static cJSON *pj_value(pj_reader *r, int depth, int *rc) {
    pj_ws(r);
    if (r->i >= r->n) return *rc = PJ_NOT_JSON, NULL;
    const char *s = r->s + r->i;
    size_t left = r->n - r->i;
    if (depth > PJ_DEPTH) {
        r->why = "nesting deeper than 64";
        return *rc = PJ_REFUSED, NULL;
    }
    if (*s == '{' || *s == '[') {
        int obj = *s == '{';
        cJSON *x = obj ? cJSON_CreateObject() : cJSON_CreateArray();
        r->i++;
        pj_ws(r);
        if (r->i < r->n && r->s[r->i] == (obj ? '}' : ']')) {
            r->i++;
            return x;
        }
        for (;;) {
            char *key = NULL;
            if (obj) {
                pj_ws(r);
                if (r->i >= r->n || r->s[r->i] != '"' || !(key = pj_string(r, rc))) {
                    if (r->i >= r->n || r->s[r->i] != '"') *rc = PJ_NOT_JSON;
                    break;
                }
                if (cJSON_GetObjectItemCaseSensitive(x, key)) {
                    r->why = "a key twice in one object";
                    *rc = PJ_REFUSED;
                    free(key);
                    break;
                }
                pj_ws(r);
                if (r->i >= r->n || r->s[r->i] != ':') {
                    *rc = PJ_NOT_JSON;
                    free(key);
                    break;
                }
                r->i++;
            }
            cJSON *v = pj_value(r, depth + 1, rc);
            if (!v) {
                free(key);
                break;
            }
            if (obj) cJSON_AddItemToObject(x, key, v), free(key);
            else cJSON_AddItemToArray(x, v);
            pj_ws(r);
            if (r->i < r->n && r->s[r->i] == ',') {
                r->i++;
                continue;
            }
            if (r->i < r->n && r->s[r->i] == (obj ? '}' : ']')) {
                r->i++;
                return x;
            }
            *rc = PJ_NOT_JSON;
            break;
        }
        cJSON_Delete(x);
        return NULL;
    }
    if (*s == '"') {
        char *t = pj_string(r, rc);
        cJSON *x = t ? cJSON_CreateString(t) : NULL;
        free(t);
        return x;
    }
    static const char *const words[] = {"true", "false", "null", "NaN", "Infinity", "-Infinity"};
    for (int k = 0; k < 6; k++) {
        size_t l = strlen(words[k]);
        if (left >= l && !memcmp(s, words[k], l)) {
            r->i += l;
            if (k >= 3) {
                r->why = "NaN or Infinity";
                return *rc = PJ_REFUSED, NULL;
            }
            return k == 0 ? cJSON_CreateTrue() : k == 1 ? cJSON_CreateFalse() : cJSON_CreateNull();
        }
    }
    size_t a = r->i;
    if (r->s[r->i] == '-') r->i++;
    if (r->i < r->n && r->s[r->i] == '0') r->i++;
    else if (!pj_digits(r)) return *rc = PJ_NOT_JSON, NULL;
    if (r->i < r->n && r->s[r->i] == '.') {
        r->i++;
        if (!pj_digits(r)) return *rc = PJ_NOT_JSON, NULL;
    }
    if (r->i < r->n && (r->s[r->i] == 'e' || r->s[r->i] == 'E')) {
        r->i++;
        if (r->i < r->n && (r->s[r->i] == '+' || r->s[r->i] == '-')) r->i++;
        if (!pj_digits(r)) return *rc = PJ_NOT_JSON, NULL;
    }
    char *lit = dfl_malloc(r->i - a + 1);
    memcpy(lit, r->s + a, r->i - a);
    lit[r->i - a] = 0;
    double v = strtod(lit, NULL);
    if (!isfinite(v)) { /* json.loads: float('inf') */
        free(lit);
        r->why = "a number too large for a float";
        return *rc = PJ_REFUSED, NULL;
    }
    cJSON *x = cJSON_CreateNumber(v);
    x->valuestring = lit; /* the literal: freed by cJSON_Delete with the node */
    return x;
}

/* text as json.loads reads it: the tree, or NULL with *rc PJ_NOT_JSON (json.loads
 * raises) or PJ_REFUSED (an error naming `what` and the reason is set). */
static cJSON *pj_parse(const char *text, const char *what, int *rc) {
    pj_reader r = {.s = text, .n = strlen(text)};
    *rc = PJ_OK;
    cJSON *x = pj_value(&r, 0, rc);
    if (x) {
        pj_ws(&r);
        if (r.i < r.n) {
            cJSON_Delete(x);
            x = NULL;
            *rc = PJ_NOT_JSON;
        }
    }
    if (!x && *rc == PJ_REFUSED)
        dfl_seterr("chat_render: %s: JSON that Python reads but this renderer does not write back the same (%s)",
                   what, r.why);
    if (!x && *rc == PJ_OK) *rc = PJ_NOT_JSON;
    return x;
}

/* Python's repr of a float (shortest round trip; exponent form below 1e-4 and from 1e16). */
static void py_float(dfl_buf *b, double v) {
    char t[40], digits[24];
    int p;
    for (p = 1; p < 17; p++) {
        snprintf(t, sizeof t, "%.*e", p - 1, v);
        if (strtod(t, NULL) == v) break;
    }
    snprintf(t, sizeof t, "%.*e", p - 1, v);
    const char *c = t;
    int neg = *c == '-', nd = 0;
    if (neg) c++;
    for (; *c && *c != 'e'; c++)
        if (*c != '.') digits[nd++] = *c;
    int exp10 = atoi(c + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    int decpt = v == 0 ? 1 : exp10 + 1;
    if (neg) dfl_buf_char(b, '-');
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            dfl_buf_str(b, "0.");
            for (int k = 0; k < -decpt; k++) dfl_buf_char(b, '0');
            dfl_buf_str(b, digits);
        } else if (decpt >= nd) {
            dfl_buf_str(b, digits);
            for (int k = nd; k < decpt; k++) dfl_buf_char(b, '0');
            dfl_buf_str(b, ".0");
        } else {
            dfl_buf_add(b, digits, (size_t)decpt);
            dfl_buf_char(b, '.');
            dfl_buf_str(b, digits + decpt);
        }
    } else {
        dfl_buf_char(b, digits[0]);
        if (nd > 1) {
            dfl_buf_char(b, '.');
            dfl_buf_str(b, digits + 1);
        }
        dfl_buf_printf(b, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
}

/* A number as Python writes it (str, repr and json.dumps agree): from its
 * literal when pj_parse read it (an int as written, "-0" as 0; a float by
 * repr), else (a cJSON tree) by its value, an integral one as an int. */
static void py_num(dfl_buf *b, const cJSON *x) {
    const char *lit = x->valuestring;
    if (lit && !strpbrk(lit, ".eE")) dfl_buf_str(b, strcmp(lit, "-0") ? lit : "0");
    else if (lit) py_float(b, x->valuedouble);
    else if (x->valuedouble == floor(x->valuedouble) && fabs(x->valuedouble) < 9007199254740992.0)
        dfl_buf_printf(b, "%.0f", x->valuedouble);
    else py_float(b, x->valuedouble);
}

static void py_json(dfl_buf *b, const cJSON *x) {
    if (cJSON_IsNull(x)) dfl_buf_str(b, "null");
    else if (cJSON_IsTrue(x)) dfl_buf_str(b, "true");
    else if (cJSON_IsFalse(x)) dfl_buf_str(b, "false");
    else if (cJSON_IsNumber(x)) py_num(b, x);
    else if (cJSON_IsString(x)) py_json_str(b, x->valuestring);
    else if (cJSON_IsArray(x) || cJSON_IsObject(x)) {
        int obj = cJSON_IsObject(x);
        dfl_buf_str(b, obj ? "{" : "[");
        for (const cJSON *c = x->child; c; c = c->next) {
            if (c != x->child) dfl_buf_str(b, ", ");
            if (obj) {
                py_json_str(b, c->string ? c->string : "");
                dfl_buf_str(b, ": ");
            }
            py_json(b, c);
        }
        dfl_buf_str(b, obj ? "}" : "]");
    }
}

/* ---- what jinja2 does with those values -------------------------------------
 * A value is a node of such a tree; NULL is jinja's Undefined. The renders
 * below refuse (an error, as the template's own raise) where jinja2 would
 * raise, and also where reproducing it would take more than this: Python's
 * repr of a string that is not printable ASCII, str.upper() / str.lower()
 * of letters beyond ASCII where they decide something. */

/* x[key] (and x.key): an object's member, else Undefined. (jinja2 falls back
 * to Python attributes: on a dict, x['items'] finds the bound method
 * dict.items, which is no mapping and, where it is tested for truth, leads
 * to the same text as Undefined in both templates.) */
static const cJSON *jv_get(const cJSON *x, const char *key) {
    return cJSON_IsObject(x) ? cJSON_GetObjectItemCaseSensitive(x, key) : NULL;
}

static int jv_truthy(const cJSON *x) {
    if (!x || cJSON_IsNull(x) || cJSON_IsFalse(x)) return 0;
    if (cJSON_IsNumber(x)) return x->valuedouble != 0;
    if (cJSON_IsString(x)) return x->valuestring[0] != 0;
    if (cJSON_IsArray(x) || cJSON_IsObject(x)) return x->child != NULL;
    return 1;
}

static int jv_is(const cJSON *x, const char *s) { return cJSON_IsString(x) && !strcmp(x->valuestring, s); }

static int jv_err(const char *what, const char *why) {
    dfl_seterr("chat_render: %s: %s", what, why);
    return -1;
}

/* Length of the UTF-8 character at s (1 for a stray byte). */
static size_t u8_len(const unsigned char *s) {
    return s[0] < 0xc0 ? 1 : s[0] < 0xe0 ? (s[1] ? 2 : 1) : s[0] < 0xf0 ? (s[1] && s[2] ? 3 : 1) : (s[1] && s[2] && s[3] ? 4 : 1);
}

/* Python's len(): code points */
static size_t py_len(const char *s) {
    size_t n = 0;
    for (const unsigned char *u = (const unsigned char *)s; *u; u += u8_len(u)) n++;
    return n;
}

/* What `for v in x` goes through: an array's items, an object's keys, a
 * string's characters (the last two as a new array: *owned set; free with
 * cJSON_Delete); anything else raises (TypeError: not iterable). */
static const cJSON *jv_iter(const cJSON *x, cJSON **owned, const char *what) {
    *owned = NULL;
    if (cJSON_IsArray(x)) return x;
    if (cJSON_IsObject(x) || cJSON_IsString(x)) {
        cJSON *a = cJSON_CreateArray();
        if (cJSON_IsObject(x))
            for (const cJSON *c = x->child; c; c = c->next) cJSON_AddItemToArray(a, cJSON_CreateString(c->string));
        else
            for (const unsigned char *u = (const unsigned char *)x->valuestring; *u;) {
                size_t k = u8_len(u);
                char ch[5] = {0};
                memcpy(ch, u, k);
                cJSON_AddItemToArray(a, cJSON_CreateString(ch));
                u += k;
            }
        return *owned = a;
    }
    jv_err(what, "not a list (the template iterates over it)");
    return NULL;
}

/* `name in x` (x or []): 1 / 0, -1 where Python raises (a number, true). */
static int jv_in(const char *name, const cJSON *x, const char *what) {
    if (!jv_truthy(x)) return 0;
    if (cJSON_IsString(x)) return strstr(x->valuestring, name) != NULL; /* a substring, as Python's `in` */
    if (cJSON_IsObject(x)) return cJSON_GetObjectItemCaseSensitive(x, name) != NULL;
    if (cJSON_IsArray(x)) {
        for (const cJSON *c = x->child; c; c = c->next)
            if (jv_is(c, name)) return 1;
        return 0;
    }
    return jv_err(what, "\"required\" is neither a list, a string nor an object");
}

/* Python's repr of a string: printable ASCII only (else an error). */
static int py_repr_str(dfl_buf *b, const char *s, const char *what) {
    int dq = strchr(s, '\'') && !strchr(s, '"');
    dfl_buf_char(b, dq ? '"' : '\'');
    for (const unsigned char *u = (const unsigned char *)s; *u; u++) {
        if (*u >= 0x80) return jv_err(what, "Python's repr() of a string beyond ASCII is not reproduced");
        if (*u == '\\' || *u == (dq ? '"' : '\'')) dfl_buf_char(b, '\\'), dfl_buf_char(b, (char)*u);
        else if (*u == '\n') dfl_buf_str(b, "\\n");
        else if (*u == '\r') dfl_buf_str(b, "\\r");
        else if (*u == '\t') dfl_buf_str(b, "\\t");
        else if (*u < 0x20 || *u == 0x7f) dfl_buf_printf(b, "\\x%02x", *u);
        else dfl_buf_char(b, (char)*u);
    }
    dfl_buf_char(b, dq ? '"' : '\'');
    return 0;
}

/* Python's str(x) (jinja2's {{ x }}; Undefined prints nothing); repr inside
 * lists and dicts. */
static int py_str_r(dfl_buf *b, const cJSON *x, int repr, const char *what) {
    if (!x) return 0;
    if (cJSON_IsNull(x)) dfl_buf_str(b, "None");
    else if (cJSON_IsTrue(x)) dfl_buf_str(b, "True");
    else if (cJSON_IsFalse(x)) dfl_buf_str(b, "False");
    else if (cJSON_IsNumber(x)) py_num(b, x);
    else if (cJSON_IsString(x)) return repr ? py_repr_str(b, x->valuestring, what) : (dfl_buf_str(b, x->valuestring), 0);
    else {
        int obj = cJSON_IsObject(x);
        dfl_buf_char(b, obj ? '{' : '[');
        for (const cJSON *c = x->child; c; c = c->next) {
            if (c != x->child) dfl_buf_str(b, ", ");
            if (obj && (py_repr_str(b, c->string, what) || dfl_buf_str(b, ": "))) return -1;
            if (py_str_r(b, c, 1, what)) return -1;
        }
        dfl_buf_char(b, obj ? '}' : ']');
    }
    return 0;
}
static int py_str(dfl_buf *b, const cJSON *x, const char *what) { return py_str_r(b, x, 0, what); }

/* The code point at u (u8_len bytes; a stray byte is itself). */
static unsigned u8_cp(const unsigned char *u) {
    size_t k = u8_len(u);
    if (k == 1) return u[0];
    if (k == 2) return (u[0] & 31u) << 6 | (u[1] & 63u);
    if (k == 3) return (u[0] & 15u) << 12 | (u[1] & 63u) << 6 | (u[2] & 63u);
    return (u[0] & 7u) << 18 | (u[1] & 63u) << 12 | (u[2] & 63u) << 6 | (u[3] & 63u);
}

/* Could the character at u change under str.lower() / str.upper() beyond
 * ASCII? (a superset: the blocks with cased letters: Latin, Greek, Coptic,
 * Cyrillic, Armenian, Georgian, Cherokee, Glagolitic, letterlike symbols,
 * enclosed and fullwidth letters, Deseret and the cased blocks of the upper
 * planes) */
static int cased_beyond_ascii(const unsigned char *u) {
    if (u[0] < 0x80 || u8_len(u) == 1) return 0;
    unsigned c = u8_cp(u);
    static const unsigned ranges[][2] = {{0xb5, 0x58f},     {0x10a0, 0x10ff},   {0x13a0, 0x13ff},   {0x1c80, 0x1cbf},
                                         {0x1d00, 0x1fff},  {0x2100, 0x218f},   {0x24b6, 0x24e9},   {0x2c00, 0x2d2f},
                                         {0xa640, 0xa7ff},  {0xab30, 0xabbf},   {0xfb00, 0xfb17},   {0xff21, 0xff5a},
                                         {0x10400, 0x104ff}, {0x10570, 0x105bf}, {0x10c80, 0x10cff}, {0x118a0, 0x118ff},
                                         {0x16e40, 0x16e9f}, {0x1e900, 0x1e95f}};
    for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++)
        if (c >= ranges[k][0] && c <= ranges[k][1]) return 1;
    return 0;
}

/* Python's s.upper() for s whose letters beyond ASCII have no case (else an error). */
static int py_upper(dfl_buf *b, const char *s, const char *what) {
    for (const unsigned char *u = (const unsigned char *)s; *u; u += u8_len(u)) {
        if (cased_beyond_ascii(u)) return jv_err(what, "str.upper() of letters beyond ASCII is not reproduced");
        size_t k = u8_len(u);
        if (k == 1) dfl_buf_char(b, (char)(*u >= 'a' && *u <= 'z' ? *u - 32 : *u));
        else dfl_buf_add(b, u, k);
    }
    return 0;
}

/* x | upper: str(x).upper() */
static int jv_upper(dfl_buf *b, const cJSON *x, const char *what) {
    dfl_buf t = {0};
    dfl_buf_str(&t, "");
    int rc = py_str(&t, x, what);
    if (!rc) rc = py_upper(b, t.s, what);
    dfl_buf_free(&t);
    return rc;
}

/* str(x).upper() == s */
static int jv_upper_is(const cJSON *x, const char *s, int *is, const char *what) {
    dfl_buf t = {0};
    dfl_buf_str(&t, "");
    int rc = jv_upper(&t, x, what);
    *is = !rc && !strcmp(t.s, s);
    dfl_buf_free(&t);
    return rc;
}

/* jinja2's dictsort: an object's members by key, case-insensitively
 * (str.lower()), ties in the given order. The members in that order in
 * out[0..n) (malloc'd), or NULL + error where a letter beyond ASCII would
 * decide the order. */
static int dictsort_cmp(const char *a, const char *b, int *beyond) {
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
    for (; *x && *y; x += u8_len(x), y += u8_len(y)) {
        unsigned cx = u8_cp(x), cy = u8_cp(y);
        if (cx == cy) continue;
        if (cased_beyond_ascii(x) || cased_beyond_ascii(y)) *beyond = 1; /* lower() would decide */
        if (cx >= 'A' && cx <= 'Z') cx += 32;
        if (cy >= 'A' && cy <= 'Z') cy += 32;
        if (cx != cy) return cx < cy ? -1 : 1;
    }
    return *x ? 1 : *y ? -1 : 0;
}

static const cJSON **jv_dictsort(const cJSON *obj, int *n, const char *what) {
    *n = cJSON_GetArraySize(obj);
    const cJSON **v = dfl_calloc((size_t)(*n ? *n : 1), sizeof *v);
    int k = 0, beyond = 0;
    for (const cJSON *c = obj->child; c; c = c->next) {
        int j = k++;
        while (j > 0 && dictsort_cmp(v[j - 1]->string, c->string, &beyond) > 0) v[j] = v[j - 1], j--;
        v[j] = c;
    }
    if (beyond) {
        free(v);
        jv_err(what, "keys whose order depends on str.lower() of letters beyond ASCII (jinja2's dictsort) are not "
                     "sorted here");
        return NULL;
    }
    return v;
}

static int is_harmony(const char *t) {
    return t && strstr(t, "<|start|>") && strstr(t, "<|channel|>") && strstr(t, "<|message|>");
}

static int is_gemma(const char *t) { return t && strstr(t, "<start_of_turn>") && strstr(t, "<end_of_turn>"); }

static int is_gemma4(const char *t) { return t && strstr(t, "<|turn>") && strstr(t, "<turn|>"); }

const char *const *chat_stop_tokens(const char *template_text) {
    static const char *const harmony[CHAT_MAX_STOP + 1] = {"<|return|>", "<|call|>", NULL};
    static const char *const gemma[CHAT_MAX_STOP + 1] = {"<end_of_turn>", "<eos>", NULL};
    static const char *const gemma4[CHAT_MAX_STOP + 1] = {"<turn|>", "<eos>", "<|tool_response>", NULL};
    return is_harmony(template_text) ? harmony
           : is_gemma4(template_text) ? gemma4
           : is_gemma(template_text)  ? gemma
                                      : NULL;
}

/* Which of Gemma 4's templates t is (is_gemma4(t) holds): the think switch's
 * literal tells the two we render apart; the 2026-07-09 rewrite's own
 * names mark a revision whose rules differ (merged model turns,
 * preserve_thinking). */
static int gemma4_revision(const char *t) {
    static const char *const later_marks[] = {"preserve_thinking", "continue_same_model_turn", "Canonical Chat Template"};
    for (int i = 0; i < 3; i++)
        if (strstr(t, later_marks[i])) {
            dfl_seterr("chat_detect: this Gemma 4 chat template is a revision dflash does not render yet (it has "
                       "\"%s\"; known: the release template, \"<|think|>\", and the later one, \"<|think|>\\n\")",
                       later_marks[i]);
            return -1;
        }
    if (strstr(t, "'<|think|>\\n'")) return CHAT_GEMMA4;
    if (strstr(t, "'<|think|>'")) return CHAT_GEMMA4_EARLY;
    dfl_seterr("chat_detect: a Gemma 4 chat template (\"<|turn>\"/\"<turn|>\") without the think switch "
               "'<|think|>' of the known revisions: not supported");
    return -1;
}

int chat_detect(const char *template_text) {
    if (!template_text) {
        dfl_seterr("chat_detect: the model has no chat template");
        return -1;
    }
    if (is_harmony(template_text)) return CHAT_HARMONY;
    if (is_gemma4(template_text)) return gemma4_revision(template_text);
    if (is_gemma(template_text)) return CHAT_GEMMA;
    if (strstr(template_text, "<|im_start|>")) return CHAT_QWEN3;
    if (strstr(template_text, "<|start_header_id|>")) return CHAT_LLAMA3;
    dfl_seterr("chat_detect: unknown chat template (not ChatML \"<|im_start|>\", Llama-3 "
               "\"<|start_header_id|>\", harmony \"<|start|>\"/\"<|channel|>\", Gemma 3 "
               "\"<start_of_turn>\"/\"<end_of_turn>\" or Gemma 4 \"<|turn>\"/\"<turn|>\")");
    return -1;
}

static int check_messages(const chat_message *m, int n, int qwen) {
    if (n < 1 || !m) {
        dfl_seterr("chat_render: no messages");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (!m[i].role || !m[i].role[0]) {
            dfl_seterr("chat_render: message %d has no role", i);
            return -1;
        }
        if (!m[i].content) {
            dfl_seterr("chat_render: message %d (%s) has no content", i, m[i].role);
            return -1;
        }
        const char *r = m[i].role;
        if (qwen && strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") &&
            strcmp(r, "tool")) {
            dfl_seterr("chat_render: message %d: unknown role \"%s\"", i, r);
            return -1;
        }
        if (m[i].n_tool_calls < 0 || (m[i].n_tool_calls > 0 && (!m[i].tool_calls || strcmp(r, "assistant")))) {
            dfl_seterr("chat_render: message %d (%s): tool_calls only on assistant messages", i, r);
            return -1;
        }
        for (int k = 0; k < m[i].n_tool_calls; k++)
            if (!m[i].tool_calls[k].name || !m[i].tool_calls[k].arguments) {
                dfl_seterr("chat_render: message %d: tool call %d has no name or arguments", i, k);
                return -1;
            }
    }
    return 0;
}

static int is_role(const chat_message *m, const char *role) { return strcmp(m->role, role) == 0; }

static char *render_qwen3(const chat_message *m, int n, const cJSON *tools, int add_generation_prompt,
                          chat_think think) {
    dfl_buf b = {0};
    if (tools && tools->child) {
        dfl_buf_str(&b, "<|im_start|>system\n");
        if (is_role(&m[0], "system")) {
            dfl_buf_str(&b, m[0].content);
            dfl_buf_str(&b, "\n\n");
        }
        dfl_buf_str(&b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
                  "provided with function signatures within <tools></tools> XML tags:\n<tools>");
        for (const cJSON *t = tools->child; t; t = t->next) {
            dfl_buf_str(&b, "\n");
            py_json(&b, t);
        }
        dfl_buf_str(&b, "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                  "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
                  "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
    } else if (is_role(&m[0], "system")) {
        dfl_buf_str(&b, "<|im_start|>system\n");
        dfl_buf_str(&b, m[0].content);
        dfl_buf_str(&b, "<|im_end|>\n");
    }
    /* the last real user query; a user turn that only carries tool output does not count */
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--) {
        span c = whole(m[i].content);
        if (is_role(&m[i], "user") && !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
            last_query = i;
            break;
        }
    }
    for (int i = 0; i < n; i++) {
        const chat_message *msg = &m[i];
        int last = i == n - 1;
        if (is_role(msg, "user") || (is_role(msg, "system") && i > 0)) {
            dfl_buf_str(&b, "<|im_start|>");
            dfl_buf_str(&b, msg->role);
            dfl_buf_str(&b, "\n");
            dfl_buf_str(&b, msg->content);
            dfl_buf_str(&b, "<|im_end|>\n");
        } else if (is_role(msg, "assistant")) {
            span content = whole(msg->content), reasoning = {"", 0};
            if (msg->reasoning_content) {
                reasoning = whole(msg->reasoning_content);
            } else if (find_first(content, "</think>") >= 0) {
                /* content.split('</think>')[-1].lstrip('\n') */
                long e = find_last(content, "</think>");
                span after = {content.s + e + 8, content.n - (size_t)e - 8};
                /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
                span before = rstrip_nl((span){content.s, (size_t)find_first(content, "</think>")});
                long t = find_last(before, "<think>");
                if (t >= 0) before = (span){before.s + t + 7, before.n - (size_t)t - 7};
                reasoning = lstrip_nl(before);
                content = lstrip_nl(after);
            }
            dfl_buf_str(&b, "<|im_start|>assistant\n");
            if (i > last_query && (last || reasoning.n > 0)) {
                dfl_buf_str(&b, "<think>\n");
                put_span(&b, strip_nl(reasoning));
                dfl_buf_str(&b, "\n</think>\n\n");
                put_span(&b, lstrip_nl(content));
            } else {
                put_span(&b, content);
            }
            for (int k = 0; k < msg->n_tool_calls; k++) {
                if (k > 0 || content.n > 0) dfl_buf_str(&b, "\n");
                dfl_buf_str(&b, "<tool_call>\n{\"name\": \"");
                dfl_buf_str(&b, msg->tool_calls[k].name);
                dfl_buf_str(&b, "\", \"arguments\": ");
                dfl_buf_str(&b, msg->tool_calls[k].arguments);
                dfl_buf_str(&b, "}\n</tool_call>");
            }
            dfl_buf_str(&b, "<|im_end|>\n");
        } else if (is_role(msg, "tool")) {
            if (i == 0 || !is_role(&m[i - 1], "tool")) dfl_buf_str(&b, "<|im_start|>user");
            dfl_buf_str(&b, "\n<tool_response>\n");
            dfl_buf_str(&b, msg->content);
            dfl_buf_str(&b, "\n</tool_response>");
            if (last || !is_role(&m[i + 1], "tool")) dfl_buf_str(&b, "<|im_end|>\n");
        } /* else: the first system message, written above */
    }
    if (add_generation_prompt) {
        dfl_buf_str(&b, "<|im_start|>assistant\n");
        if (think == CHAT_THINK_OFF) dfl_buf_str(&b, "<think>\n\n</think>\n\n");
    }
    return dfl_buf_take(&b);
}

/* Length of the UTF-8 white-space character at s (Python str.isspace), or 0. */
static size_t py_space(const unsigned char *s, size_t n) {
    if (n >= 1 && ((s[0] >= 0x09 && s[0] <= 0x0d) || (s[0] >= 0x1c && s[0] <= 0x20))) return 1;
    if (n >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0)) return 2;
    if (n >= 3 && s[0] == 0xe1 && s[1] == 0x9a && s[2] == 0x80) return 3; /* U+1680 */
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x80 && /* U+2000-200A, U+2028, U+2029, U+202F */
        ((s[2] >= 0x80 && s[2] <= 0x8a) || s[2] == 0xa8 || s[2] == 0xa9 || s[2] == 0xaf))
        return 3;
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x81 && s[2] == 0x9f) return 3; /* U+205F */
    if (n >= 3 && s[0] == 0xe3 && s[1] == 0x80 && s[2] == 0x80) return 3; /* U+3000 */
    return 0;
}

/* Python str.strip(): white space off both ends. */
static span py_strip(span x) {
    const unsigned char *u = (const unsigned char *)x.s;
    size_t a = 0, b = x.n, k;
    while (a < b && (k = py_space(u + a, b - a)) > 0) a += k;
    for (;;) { /* from the end: try the 1-, 2- and 3-byte forms ending at b */
        size_t got = 0;
        for (size_t l = 1; l <= 3 && l <= b - a && !got; l++)
            if (py_space(u + b - l, l) == l) got = l;
        if (!got) break;
        b -= got;
    }
    return (span){x.s + a, b - a};
}

static char *render_llama3(const chat_message *m, int n, int add_generation_prompt) {
    dfl_buf b = {0};
    dfl_buf_str(&b, "<|begin_of_text|>");
    for (int i = 0; i < n; i++) {
        dfl_buf_str(&b, "<|start_header_id|>");
        dfl_buf_str(&b, m[i].role);
        dfl_buf_str(&b, "<|end_header_id|>\n\n");
        put_span(&b, py_strip(whole(m[i].content)));
        dfl_buf_str(&b, "<|eot_id|>");
    }
    if (add_generation_prompt) dfl_buf_str(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return dfl_buf_take(&b);
}

/* Gemma 3's template (chat.h). */
static char *render_gemma(const chat_message *m, int n, int add_generation_prompt) {
    int first = is_role(&m[0], "system");
    for (int i = 0; i < n; i++)
        if (m[i].n_tool_calls > 0) {
            dfl_seterr("chat_render: message %d: tool_calls are not supported with the Gemma template (it has "
                       "no tool calls)", i);
            return NULL;
        }
    for (int i = first; i < n; i++)
        if (is_role(&m[i], "user") != ((i - first) % 2 == 0)) {
            dfl_seterr("chat_render: message %d (%s): Conversation roles must alternate "
                       "user/assistant/user/assistant/... (the Gemma template raises)", i, m[i].role);
            return NULL;
        }
    dfl_buf b = {0};
    dfl_buf_str(&b, "<bos>");
    for (int i = first; i < n; i++) {
        dfl_buf_str(&b, "<start_of_turn>");
        dfl_buf_str(&b, is_role(&m[i], "assistant") ? "model" : m[i].role);
        dfl_buf_str(&b, "\n");
        if (first && i == first) { /* the system prompt opens the first turn */
            dfl_buf_str(&b, m[0].content);
            dfl_buf_str(&b, "\n\n");
        }
        put_span(&b, py_strip(whole(m[i].content)));
        dfl_buf_str(&b, "<end_of_turn>\n");
    }
    if (add_generation_prompt) dfl_buf_str(&b, "<start_of_turn>model\n");
    return dfl_buf_take(&b);
}

/* Gemma 4's strip_thinking macro: the pieces between "<channel|>" tags,
 * each cut at its first "<|channel>", joined, then trimmed. */
static void gemma4_strip_thinking(dfl_buf *b, const char *text) {
    static const char OPEN[] = "<|channel>", CLOSE[] = "<channel|>";
    dfl_buf t = {0};
    dfl_buf_str(&t, "");
    span rest = whole(text);
    for (;;) {
        long c = find_first(rest, CLOSE);
        span part = {rest.s, c >= 0 ? (size_t)c : rest.n};
        long o = find_first(part, OPEN);
        dfl_buf_add(&t, part.s, o >= 0 ? (size_t)o : part.n);
        if (c < 0) break;
        rest = (span){rest.s + c + strlen(CLOSE), rest.n - (size_t)c - strlen(CLOSE)};
    }
    if (t.s) put_span(b, py_strip((span){t.s, t.n}));
    dfl_buf_free(&t);
}

/* ---- harmony's tool namespace (gpt-oss's render_typescript_type and
 * render_tool_namespace macros) ------------------------------------------- */

/* render_typescript_type(spec): a JSON schema as a TypeScript-like type. */
static int ts_type(dfl_buf *b, const cJSON *spec, int depth) {
    static const char WHAT[] = "tools (harmony)";
    if (depth > PJ_DEPTH) return jv_err(WHAT, "a schema nested deeper than 64");
    const cJSON *t = jv_get(spec, "type");
    if (jv_is(t, "array")) {
        const cJSON *items = jv_get(spec, "items");
        if (jv_truthy(items)) {
            const cJSON *it = jv_get(items, "type");
            if (jv_is(it, "string")) dfl_buf_str(b, "string[]");
            else if (jv_is(it, "number") || jv_is(it, "integer")) dfl_buf_str(b, "number[]");
            else if (jv_is(it, "boolean")) dfl_buf_str(b, "boolean[]");
            else {
                dfl_buf in = {0};
                dfl_buf_str(&in, "");
                if (ts_type(&in, items, depth + 1)) return dfl_buf_free(&in), -1;
                if (!strcmp(in.s, "object | object") || py_len(in.s) > 50) dfl_buf_str(b, "any[]");
                else dfl_buf_str(b, in.s), dfl_buf_str(b, "[]");
                dfl_buf_free(&in);
            }
        } else {
            dfl_buf_str(b, "any[]");
        }
        if (jv_truthy(jv_get(spec, "nullable"))) dfl_buf_str(b, " | null");
        return 0;
    }
    if (cJSON_IsArray(t) && t->child) { /* a list of types: joined */
        for (const cJSON *c = t->child; c; c = c->next)
            if ((c != t->child && dfl_buf_str(b, " | ")) || py_str(b, c, WHAT)) return -1;
        return 0;
    }
    const cJSON *one = jv_get(spec, "oneOf");
    if (jv_truthy(one)) { /* (the template's has_object_variants is set inside a loop, so never seen: always this) */
        cJSON *owned;
        const cJSON *vs = jv_iter(one, &owned, WHAT);
        if (!vs) return -1;
        int rc = 0;
        for (const cJSON *v = vs->child; v && !rc; v = v->next) {
            rc = ts_type(b, v, depth + 1);
            const cJSON *d = jv_get(v, "description"), *def = jv_get(v, "default");
            if (!rc && jv_truthy(d)) {
                if (!cJSON_IsString(d)) rc = jv_err(WHAT, "a oneOf variant's description is not a string");
                else dfl_buf_str(b, "// "), dfl_buf_str(b, d->valuestring);
            }
            if (!rc && def) dfl_buf_str(b, "                    // default: "), py_json(b, def);
            if (!rc && v->next) dfl_buf_str(b, " | \n");
        }
        cJSON_Delete(owned);
        return rc;
    }
    if (jv_is(t, "string")) {
        const cJSON *en = jv_get(spec, "enum");
        if (jv_truthy(en)) {
            cJSON *owned;
            const cJSON *vs = jv_iter(en, &owned, WHAT);
            if (!vs) return -1;
            int rc = 0;
            dfl_buf_char(b, '"');
            for (const cJSON *v = vs->child; v && !rc; v = v->next)
                rc = (v != vs->child && dfl_buf_str(b, "\" | \"")) || py_str(b, v, WHAT);
            dfl_buf_char(b, '"');
            cJSON_Delete(owned);
            return rc ? -1 : 0;
        }
        dfl_buf_str(b, "string");
        if (jv_truthy(jv_get(spec, "nullable"))) dfl_buf_str(b, " | null");
    } else if (jv_is(t, "number") || jv_is(t, "integer")) {
        dfl_buf_str(b, "number");
    } else if (jv_is(t, "boolean")) {
        dfl_buf_str(b, "boolean");
    } else if (jv_is(t, "object")) {
        const cJSON *props = jv_get(spec, "properties"), *req = jv_get(spec, "required");
        if (!jv_truthy(props)) return dfl_buf_str(b, "object"), 0;
        if (!cJSON_IsObject(props)) return jv_err(WHAT, "\"properties\" is not an object");
        dfl_buf_str(b, "{\n");
        for (const cJSON *p = props->child; p; p = p->next) {
            int in = jv_in(p->string, req, WHAT);
            if (in < 0) return -1;
            dfl_buf_str(b, p->string);
            if (!in) dfl_buf_char(b, '?');
            dfl_buf_str(b, ": \n                "); /* the template's indentation between two {{ }} */
            if (ts_type(b, p, depth + 1)) return -1;
            if (p->next) dfl_buf_str(b, ", ");
        }
        dfl_buf_char(b, '}');
    } else {
        dfl_buf_str(b, "any");
    }
    return 0;
}

/* render_tool_namespace("functions", tools) */
static int harmony_namespace(dfl_buf *b, const cJSON *tools) {
    static const char WHAT[] = "tools (harmony)";
    dfl_buf_str(b, "## functions\n\nnamespace functions {\n\n");
    for (const cJSON *t = tools->child; t; t = t->next) {
        const cJSON *fn = jv_get(t, "function");
        const cJSON *desc = jv_get(fn, "description"), *name = jv_get(fn, "name"), *params = jv_get(fn, "parameters");
        if (!cJSON_IsString(desc))
            return jv_err(WHAT, "a function without a string \"description\" (the template writes \"// \" + it)");
        if (!cJSON_IsString(name)) return jv_err(WHAT, "a function without a string \"name\"");
        dfl_buf_str(b, "// ");
        dfl_buf_str(b, desc->valuestring);
        dfl_buf_str(b, "\ntype ");
        dfl_buf_str(b, name->valuestring);
        dfl_buf_str(b, " = ");
        const cJSON *props = jv_truthy(params) ? jv_get(params, "properties") : NULL, *req = jv_get(params, "required");
        if (!jv_truthy(props)) {
            dfl_buf_str(b, "() => any;\n\n");
            continue;
        }
        if (!cJSON_IsObject(props)) return jv_err(WHAT, "\"parameters\".\"properties\" is not an object");
        dfl_buf_str(b, "(_: {\n");
        for (const cJSON *p = props->child; p; p = p->next) {
            const cJSON *pd = jv_get(p, "description"), *def = jv_get(p, "default");
            if (jv_truthy(pd)) {
                if (!cJSON_IsString(pd)) return jv_err(WHAT, "a parameter's description is not a string");
                dfl_buf_str(b, "// ");
                dfl_buf_str(b, pd->valuestring);
                dfl_buf_str(b, "\n");
            }
            int in = jv_in(p->string, req, WHAT);
            if (in < 0) return -1;
            dfl_buf_str(b, p->string);
            if (!in) dfl_buf_char(b, '?');
            dfl_buf_str(b, ": ");
            if (ts_type(b, p, 0)) return -1;
            if (def) {
                int en = jv_truthy(jv_get(p, "enum")), one = !en && jv_truthy(jv_get(p, "oneOf"));
                if (en || one) { /* the template adds the default as a string */
                    if (!cJSON_IsString(def))
                        return jv_err(WHAT, "the default of an enum or oneOf parameter is not a string");
                    dfl_buf_str(b, en ? ", // default: " : "// default: ");
                    dfl_buf_str(b, def->valuestring);
                } else {
                    dfl_buf_str(b, ", // default: ");
                    py_json(b, def);
                }
            }
            dfl_buf_str(b, ",\n");
        }
        dfl_buf_str(b, "}) => any;\n\n");
    }
    dfl_buf_str(b, "} // namespace functions");
    return 0;
}

/* ---- Gemma 4's tool declarations, calls and results (its format_argument,
 * format_parameters and format_function_declaration macros) --------------- */

static const char G4_QUOTE[] = "<|\"|>"; /* the templates' string delimiter */

/* format_argument(x, escape_keys) */
static int g4_argument(dfl_buf *b, const cJSON *x, int escape_keys, const char *what, int depth) {
    if (depth > PJ_DEPTH) return jv_err(what, "nesting deeper than 64");
    if (cJSON_IsString(x)) {
        dfl_buf_str(b, G4_QUOTE);
        dfl_buf_str(b, x->valuestring);
        dfl_buf_str(b, G4_QUOTE);
    } else if (cJSON_IsBool(x)) {
        dfl_buf_str(b, cJSON_IsTrue(x) ? "true" : "false");
    } else if (cJSON_IsObject(x)) {
        int n;
        const cJSON **v = jv_dictsort(x, &n, what);
        if (!v) return -1;
        dfl_buf_char(b, '{');
        int rc = 0;
        for (int k = 0; k < n && !rc; k++) {
            if (k) dfl_buf_char(b, ',');
            if (escape_keys) dfl_buf_str(b, G4_QUOTE);
            dfl_buf_str(b, v[k]->string);
            if (escape_keys) dfl_buf_str(b, G4_QUOTE);
            dfl_buf_char(b, ':');
            rc = g4_argument(b, v[k], escape_keys, what, depth + 1);
        }
        free(v);
        if (rc) return -1;
        dfl_buf_char(b, '}');
    } else if (cJSON_IsArray(x)) {
        dfl_buf_char(b, '[');
        for (const cJSON *c = x->child; c; c = c->next) {
            if (c != x->child) dfl_buf_char(b, ',');
            if (g4_argument(b, c, escape_keys, what, depth + 1)) return -1;
        }
        dfl_buf_char(b, ']');
    } else {
        return py_str(b, x, what); /* a number as Python writes it, None */
    }
    return 0;
}

/* <|"|>str(item)<|"|> for each item of a required list, "," between */
static int g4_required(dfl_buf *b, const cJSON *req, const char *what) {
    cJSON *owned;
    const cJSON *items = jv_iter(req, &owned, what);
    if (!items) return -1;
    int rc = 0;
    for (const cJSON *c = items->child; c && !rc; c = c->next) {
        dfl_buf_str(b, G4_QUOTE);
        rc = py_str(b, c, what);
        dfl_buf_str(b, G4_QUOTE);
        if (c->next) dfl_buf_char(b, ',');
    }
    cJSON_Delete(owned);
    return rc;
}

/* format_parameters(properties): early is the release template, whose
 * property type is its "type" string or the first of a list of them. */
static int g4_parameters(dfl_buf *b, const cJSON *props, int early, int depth) {
    static const char WHAT[] = "tools (Gemma 4)";
    static const char *const standard[] = {"description", "type", "properties", "required", "nullable"};
    if (depth > PJ_DEPTH) return jv_err(WHAT, "a schema nested deeper than 64");
    if (!cJSON_IsObject(props)) return jv_err(WHAT, "\"properties\" is not an object");
    int n, first = 1, rc = 0;
    const cJSON **v = jv_dictsort(props, &n, WHAT);
    if (!v) return -1;
    for (int k = 0; k < n && !rc; k++) {
        const cJSON *val = v[k];
        int std = 0, comma = 0;
        for (int s = 0; s < 5; s++) std |= !strcmp(val->string, standard[s]);
        if (std) continue;
        if (!first) dfl_buf_char(b, ',');
        first = 0;
        dfl_buf_str(b, val->string);
        dfl_buf_str(b, ":{");
        const cJSON *desc = jv_get(val, "description"), *type = jv_get(val, "type");
        if (jv_truthy(desc)) {
            dfl_buf_str(b, "description:");
            dfl_buf_str(b, G4_QUOTE);
            if ((rc = py_str(b, desc, WHAT))) break;
            dfl_buf_str(b, G4_QUOTE);
            comma = 1;
        }
        if (jv_truthy(jv_get(val, "nullable"))) {
            if (comma) dfl_buf_char(b, ',');
            comma = 1;
            dfl_buf_str(b, "nullable:true");
        }
        if (early && !cJSON_IsString(type)) { /* value['type'][0] */
            if (!type) {
                rc = jv_err(WHAT, "a property without \"type\" (the release template takes its first item)");
                break;
            }
            type = cJSON_IsArray(type) ? type->child : NULL;
        }
        int is_string, is_object, is_array;
        if ((rc = jv_upper_is(type, "STRING", &is_string, WHAT)) || (rc = jv_upper_is(type, "OBJECT", &is_object, WHAT)) ||
            (rc = jv_upper_is(type, "ARRAY", &is_array, WHAT)))
            break;
        if (is_string) {
            const cJSON *en = jv_get(val, "enum");
            if (jv_truthy(en)) {
                if (comma) dfl_buf_char(b, ',');
                comma = 1;
                dfl_buf_str(b, "enum:");
                if ((rc = g4_argument(b, en, 1, WHAT, 0))) break;
            }
        } else if (is_object) {
            const cJSON *p = jv_get(val, "properties"), *req = jv_get(val, "required");
            dfl_buf_str(b, ",properties:{");
            if ((rc = g4_parameters(b, cJSON_IsObject(p) ? p : val, early, depth + 1))) break;
            dfl_buf_char(b, '}');
            if (jv_truthy(req)) {
                dfl_buf_str(b, ",required:[");
                if ((rc = g4_required(b, req, WHAT))) break;
                dfl_buf_char(b, ']');
            }
        } else if (is_array) {
            const cJSON *items = jv_get(val, "items");
            if (cJSON_IsObject(items) && items->child) {
                dfl_buf_str(b, ",items:{");
                int m, ifirst = 1;
                const cJSON **iv = jv_dictsort(items, &m, WHAT);
                if (!iv) {
                    rc = -1;
                    break;
                }
                for (int j = 0; j < m && !rc; j++) {
                    const cJSON *x = iv[j];
                    if (cJSON_IsNull(x)) continue;
                    if (!ifirst) dfl_buf_char(b, ',');
                    ifirst = 0;
                    if (!strcmp(x->string, "properties")) {
                        dfl_buf_str(b, "properties:{");
                        if (cJSON_IsObject(x)) rc = g4_parameters(b, x, early, depth + 1);
                        dfl_buf_char(b, '}');
                    } else if (!strcmp(x->string, "required")) {
                        dfl_buf_str(b, "required:[");
                        rc = g4_required(b, x, WHAT);
                        dfl_buf_char(b, ']');
                    } else if (!strcmp(x->string, "type")) {
                        dfl_buf_str(b, "type:");
                        if (cJSON_IsString(x)) {
                            dfl_buf_str(b, G4_QUOTE);
                            rc = py_upper(b, x->valuestring, WHAT);
                            dfl_buf_str(b, G4_QUOTE);
                        } else { /* item_value | map('upper') | list */
                            cJSON *owned;
                            const cJSON *ts = jv_iter(x, &owned, WHAT);
                            if (!ts) {
                                rc = -1;
                                break;
                            }
                            dfl_buf_char(b, '[');
                            for (const cJSON *c = ts->child; c && !rc; c = c->next) {
                                if (c != ts->child) dfl_buf_char(b, ',');
                                dfl_buf_str(b, G4_QUOTE);
                                rc = jv_upper(b, c, WHAT);
                                dfl_buf_str(b, G4_QUOTE);
                            }
                            dfl_buf_char(b, ']');
                            cJSON_Delete(owned);
                        }
                    } else {
                        dfl_buf_str(b, x->string);
                        dfl_buf_char(b, ':');
                        rc = g4_argument(b, x, 1, WHAT, 0);
                    }
                }
                free(iv);
                if (rc) break;
                dfl_buf_char(b, '}');
            }
        }
        if (comma) dfl_buf_char(b, ',');
        dfl_buf_str(b, "type:");
        dfl_buf_str(b, G4_QUOTE);
        if ((rc = jv_upper(b, type, WHAT))) break;
        dfl_buf_str(b, G4_QUOTE);
        dfl_buf_char(b, '}');
    }
    free(v);
    return rc;
}

/* <|tool>format_function_declaration(tool)<tool|> */
static int g4_declaration(dfl_buf *b, const cJSON *tool, int early) {
    static const char WHAT[] = "tools (Gemma 4)";
    const cJSON *fn = jv_get(tool, "function");
    if (!cJSON_IsObject(fn)) return jv_err(WHAT, "a tool without a \"function\" object");
    const cJSON *params = jv_get(fn, "parameters"), *resp = jv_get(fn, "response");
    dfl_buf_str(b, "<|tool>declaration:");
    if (py_str(b, jv_get(fn, "name"), WHAT)) return -1;
    dfl_buf_str(b, "{description:");
    dfl_buf_str(b, G4_QUOTE);
    if (py_str(b, jv_get(fn, "description"), WHAT)) return -1;
    dfl_buf_str(b, G4_QUOTE);
    if (jv_truthy(params)) {
        const cJSON *props = jv_get(params, "properties"), *req = jv_get(params, "required"), *t = jv_get(params, "type");
        dfl_buf_str(b, ",parameters:{");
        if (jv_truthy(props)) {
            dfl_buf_str(b, "properties:{");
            if (g4_parameters(b, props, early, 0)) return -1;
            dfl_buf_str(b, "},");
        }
        if (jv_truthy(req)) {
            dfl_buf_str(b, "required:[");
            if (g4_required(b, req, WHAT)) return -1;
            dfl_buf_str(b, "],");
        }
        if (jv_truthy(t)) { /* (the template closes "parameters" here only) */
            dfl_buf_str(b, "type:");
            dfl_buf_str(b, G4_QUOTE);
            if (jv_upper(b, t, WHAT)) return -1;
            dfl_buf_str(b, G4_QUOTE);
            dfl_buf_char(b, '}');
        }
    }
    if (resp) {
        const cJSON *rd = jv_get(resp, "description");
        int obj;
        dfl_buf_str(b, ",response:{");
        if (jv_truthy(rd)) {
            dfl_buf_str(b, "description:");
            dfl_buf_str(b, G4_QUOTE);
            if (py_str(b, rd, WHAT)) return -1;
            dfl_buf_str(b, G4_QUOTE);
            dfl_buf_char(b, ',');
        }
        if (jv_upper_is(jv_get(resp, "type"), "OBJECT", &obj, WHAT)) return -1;
        if (obj) {
            dfl_buf_str(b, "type:");
            dfl_buf_str(b, G4_QUOTE);
            dfl_buf_str(b, "OBJECT");
            dfl_buf_str(b, G4_QUOTE);
            dfl_buf_char(b, '}');
        }
    }
    dfl_buf_str(b, "}<tool|>");
    return 0;
}

/* A call's arguments as the templates get them: the object its JSON text
 * is (what a transformers user passes: a dict), or the text itself when it
 * is not a JSON object. *tree: that object (cJSON_Delete it) or NULL;
 * -1 + error for JSON that pj_parse refuses. */
static int call_arguments(const chat_tool_call *c, int msg, cJSON **tree) {
    char what[64];
    snprintf(what, sizeof what, "message %d: the arguments of \"%.20s\"", msg, c->name);
    int rc;
    *tree = pj_parse(c->arguments, what, &rc);
    if (rc == PJ_REFUSED) return -1;
    if (*tree && !cJSON_IsObject(*tree)) cJSON_Delete(*tree), *tree = NULL;
    return 0;
}

/* The tools array of tools_json as json.loads reads it: *tools NULL for
 * none (NULL text); -1 + error if it is not a JSON array or is refused. */
static int parse_tools_json(const char *tools_json, cJSON **tools) {
    *tools = NULL;
    if (!tools_json) return 0;
    int rc;
    *tools = pj_parse(tools_json, "tools", &rc);
    if (rc == PJ_REFUSED) return -1;
    if (!cJSON_IsArray(*tools)) {
        cJSON_Delete(*tools);
        *tools = NULL;
        dfl_seterr("chat_render: tools must be a JSON array");
        return -1;
    }
    return 0;
}

/* ---- Gemma 4 ---------------------------------------------------------------- */

/* One turn as the Gemma 4 templates get it: a message, with, for an
 * assistant message that made tool calls, the tool messages answering them
 * folded in (chat.h). */
typedef struct {
    const chat_message *m;
    const char *content;         /* NULL: none */
    const chat_message *results; /* the "tool" messages that answer m's calls, in order */
    int n_results;
} g4_turn;

/* A tool result's content as the templates get it (tool_responses[].response):
 * the JSON value it is, else the text. */
static int g4_response(dfl_buf *b, const char *name, const char *content, int msg) {
    char what[48];
    snprintf(what, sizeof what, "message %d (tool)", msg);
    int rc;
    cJSON *v = pj_parse(content, what, &rc);
    if (rc == PJ_REFUSED) return -1;
    int err = 0;
    dfl_buf_str(b, "<|tool_response>response:");
    dfl_buf_str(b, name);
    dfl_buf_char(b, '{');
    if (cJSON_IsObject(v)) {
        int n;
        const cJSON **kv = jv_dictsort(v, &n, what);
        err = !kv;
        for (int k = 0; k < n && !err; k++) {
            if (k) dfl_buf_char(b, ',');
            dfl_buf_str(b, kv[k]->string);
            dfl_buf_char(b, ':');
            err = g4_argument(b, kv[k], 0, what, 0) != 0;
        }
        free(kv);
    } else {
        dfl_buf_str(b, "value:");
        if (v) err = g4_argument(b, v, 0, what, 0) != 0;
        else dfl_buf_str(b, G4_QUOTE), dfl_buf_str(b, content), dfl_buf_str(b, G4_QUOTE);
    }
    dfl_buf_str(b, "}<tool_response|>");
    cJSON_Delete(v);
    return err ? -1 : 0;
}

static const char *gemma4_name(chat_format f) { return f == CHAT_GEMMA4 ? "Gemma 4" : "Gemma 4 (early)"; }

/* Gemma 4's templates (chat.h). */
static char *render_gemma4(chat_format f, const chat_message *m, int n, const cJSON *tools, int add_generation_prompt,
                           chat_think think) {
    int later = f == CHAT_GEMMA4;
    for (int i = 0; i < n; i++)
        if (!is_role(&m[i], "system") && !is_role(&m[i], "developer") && !is_role(&m[i], "user") &&
            !is_role(&m[i], "assistant") && !is_role(&m[i], "tool")) {
            dfl_seterr("chat_render: message %d: unknown role \"%s\" (the %s template takes system, developer, user, "
                       "assistant and tool)", i, m[i].role, gemma4_name(f));
            return NULL;
        }
    int first = is_role(&m[0], "system") || is_role(&m[0], "developer");
    /* fold each call's results (and the answer that continues its turn) into it */
    g4_turn *t = dfl_calloc((size_t)n, sizeof *t);
    int nt = 0, last_user = -1;
    for (int i = first; i < n;) {
        g4_turn *u = &t[nt];
        u->m = &m[i];
        u->content = m[i].content;
        if (is_role(&m[i], "tool")) {
            dfl_seterr("chat_render: message %d (tool): a tool result must follow the assistant message whose call "
                       "it answers (the %s template writes results into that model turn)", i, gemma4_name(f));
            free(t);
            return NULL;
        }
        if (is_role(&m[i], "user")) last_user = nt;
        int j = i + 1;
        if (m[i].n_tool_calls > 0) {
            while (j < n && is_role(&m[j], "tool")) j++;
            u->results = &m[i + 1];
            u->n_results = j - i - 1;
            if (u->n_results > m[i].n_tool_calls) {
                dfl_seterr("chat_render: message %d (tool): a result beyond the %d call(s) of message %d (the k-th "
                           "result after a message answers its k-th call)", i + 1 + m[i].n_tool_calls,
                           m[i].n_tool_calls, i);
                free(t);
                return NULL;
            }
            if (u->n_results) { /* the text of a turn goes after its calls and results: the answer after them */
                u->content = NULL;
                if (j < n && is_role(&m[j], "assistant") && m[j].n_tool_calls == 0 && m[j].content[0])
                    u->content = m[j++].content;
            }
        }
        nt++;
        i = j;
    }
    dfl_buf b = {0};
    int err = 0;
    dfl_buf_str(&b, "<bos>");
    if (think == CHAT_THINK_ON || (tools && tools->child) || first) {
        dfl_buf_str(&b, "<|turn>system\n");
        if (think == CHAT_THINK_ON) dfl_buf_str(&b, later ? "<|think|>\n" : "<|think|>");
        if (first) put_span(&b, py_strip(whole(m[0].content)));
        if (tools)
            for (const cJSON *x = tools->child; x && !err; x = x->next) err = g4_declaration(&b, x, !later) != 0;
        dfl_buf_str(&b, "<turn|>\n");
    }
    int prev_results = 0; /* the last turn ended with tool results (the template's prev_message_type) */
    for (int k = 0; k < nt && !err; k++) {
        const g4_turn *u = &t[k];
        int model = is_role(u->m, "assistant"), calls = u->m->n_tool_calls > 0;
        if (!(later && prev_results && calls)) { /* the later template continues a turn of calls and results */
            dfl_buf_str(&b, "<|turn>");
            dfl_buf_str(&b, model ? "model" : u->m->role);
            dfl_buf_str(&b, "\n");
        }
        prev_results = 0;
        if (calls) {
            const char *rc = u->m->reasoning_content;
            if (later && rc && rc[0] && k > last_user) {
                dfl_buf_str(&b, "<|channel>thought\n");
                dfl_buf_str(&b, rc);
                dfl_buf_str(&b, "<channel|>");
            }
            for (int c = 0; c < u->m->n_tool_calls && !err; c++) {
                const chat_tool_call *call = &u->m->tool_calls[c];
                cJSON *args;
                if (call_arguments(call, (int)(u->m - m), &args)) {
                    err = 1;
                    break;
                }
                dfl_buf_str(&b, "<|tool_call>call:");
                dfl_buf_str(&b, call->name);
                dfl_buf_char(&b, '{');
                if (args) { /* the object's members by key, key:value */
                    int na;
                    char what[64];
                    snprintf(what, sizeof what, "message %d: the arguments of \"%.20s\"", (int)(u->m - m), call->name);
                    const cJSON **kv = jv_dictsort(args, &na, what);
                    err = !kv;
                    for (int a = 0; a < na && !err; a++) {
                        if (a) dfl_buf_char(&b, ',');
                        dfl_buf_str(&b, kv[a]->string);
                        dfl_buf_char(&b, ':');
                        err = g4_argument(&b, kv[a], 0, what, 0) != 0;
                    }
                    free(kv);
                } else {
                    dfl_buf_str(&b, call->arguments);
                }
                cJSON_Delete(args);
                dfl_buf_str(&b, "}<tool_call|>");
            }
        }
        for (int r = 0; r < u->n_results && !err; r++)
            err = g4_response(&b, u->m->tool_calls[r].name, u->results[r].content, (int)(u->results + r - m)) != 0;
        prev_results = u->n_results > 0;
        if (u->content) {
            if (model) gemma4_strip_thinking(&b, u->content);
            else put_span(&b, py_strip(whole(u->content)));
        }
        if (!(u->n_results && !(u->content && u->content[0]))) dfl_buf_str(&b, "<turn|>\n");
    }
    free(t);
    if (err) {
        dfl_buf_free(&b);
        return NULL;
    }
    if (add_generation_prompt) {
        if (!prev_results) dfl_buf_str(&b, "<|turn>model\n");
        if (think != CHAT_THINK_ON) dfl_buf_str(&b, "<|channel>thought\n<channel|>");
    }
    return dfl_buf_take(&b);
}

/* ---- harmony ------------------------------------------------------------------ */

static const char HARMONY_IDENTITY[] = "You are ChatGPT, a large language model trained by OpenAI.";

const char *chat_harmony_check(const chat_harmony_opts *ho) {
    if (!ho) return NULL;
    const char *e = ho->reasoning_effort;
    if (e && strcmp(e, "low") && strcmp(e, "medium") && strcmp(e, "high"))
        return "reasoning_effort must be \"low\", \"medium\" or \"high\" (gpt-oss's three efforts)";
    const char *d = ho->date;
    if (d) { /* YYYY-MM-DD, month 01-12, day 01-31: what strftime_now("%Y-%m-%d") writes */
        int ok = strlen(d) == 10 && d[4] == '-' && d[7] == '-';
        for (int i = 0; ok && i < 10; i++) ok = i == 4 || i == 7 || (d[i] >= '0' && d[i] <= '9');
        int mon = ok ? (d[5] - '0') * 10 + d[6] - '0' : 0, day = ok ? (d[8] - '0') * 10 + d[9] - '0' : 0;
        if (!ok || mon < 1 || mon > 12 || day < 1 || day > 31) return "date must be YYYY-MM-DD (e.g. 2026-12-07)";
    }
    if (ho->model_identity && strstr(ho->model_identity, "<|"))
        return "model_identity holds \"<|\", which would open a harmony token in the system message";
    return NULL;
}

char *chat_render_harmony(const chat_message *m, int n, const char *tools_json, const chat_harmony_opts *o,
                          int add_generation_prompt) {
    if (check_messages(m, n, 0) != 0) return NULL;
    chat_harmony_opts none = {0};
    if (!o) o = &none;
    const char *bad = chat_harmony_check(o);
    if (bad) {
        dfl_seterr("chat_render: %s", bad);
        return NULL;
    }
    if (o->model_identity && dfl_utf8_invalid_at(o->model_identity, strlen(o->model_identity)) >= 0) {
        dfl_seterr("chat_render: model_identity is not valid UTF-8");
        return NULL;
    }
    char today[32];
    const char *date = o->date;
    if (!date) { /* strftime_now("%Y-%m-%d"): transformers' datetime.now(), local time */
        time_t now = time(NULL);
        struct tm tm;
        if (!localtime_r(&now, &tm) || !strftime(today, sizeof today, "%Y-%m-%d", &tm)) {
            dfl_seterr("chat_render: cannot read today's date");
            return NULL;
        }
        date = today;
    }
    int first = is_role(&m[0], "system") || is_role(&m[0], "developer");
    for (int i = 0; i < n; i++) {
        const char *r = m[i].role;
        if (m[i].n_tool_calls > 1) {
            dfl_seterr("chat_render: message %d: %d tool calls in one message; the harmony template writes the "
                       "first only (gpt-oss makes one per reply: give each call its own assistant message)", i,
                       m[i].n_tool_calls);
            return NULL;
        }
        if (i >= first && (is_role(&m[i], "system") || is_role(&m[i], "developer"))) {
            dfl_seterr("chat_render: message %d: a %s message after the first message (the harmony template "
                       "would drop it)", i, r);
            return NULL;
        }
        if (!is_role(&m[i], "system") && !is_role(&m[i], "developer") && !is_role(&m[i], "user") &&
            !is_role(&m[i], "assistant") && !is_role(&m[i], "tool")) {
            dfl_seterr("chat_render: message %d: unknown role \"%s\"", i, r);
            return NULL;
        }
        if (is_role(&m[i], "assistant")) {
            static const char *const tags[] = {"<|channel|>analysis<|message|>", "<|channel|>final<|message|>"};
            for (int k = 0; k < 2; k++) {
                if (strstr(m[i].content, tags[k]) ||
                    (m[i].reasoning_content && strstr(m[i].reasoning_content, tags[k]))) {
                    dfl_seterr("chat_render: message %d (assistant): its %s holds \"%s\"; give the analysis as "
                               "reasoning_content and the final answer as content", i,
                               strstr(m[i].content, tags[k]) ? "content" : "reasoning_content", tags[k]);
                    return NULL;
                }
            }
            if (m[i].n_tool_calls && m[i].content[0] && m[i].reasoning_content && m[i].reasoning_content[0]) {
                dfl_seterr("chat_render: message %d (assistant): content and reasoning_content beside a tool call "
                           "(the harmony template raises: the analysis goes in one or the other)", i);
                return NULL;
            }
        }
    }
    cJSON *tools;
    if (parse_tools_json(tools_json, &tools)) return NULL;
    int any_tools = tools && tools->child;
    dfl_buf b = {0};
    dfl_buf_str(&b, "<|start|>system<|message|>");
    dfl_buf_str(&b, o->model_identity ? o->model_identity : HARMONY_IDENTITY);
    dfl_buf_str(&b, "\nKnowledge cutoff: 2024-06\nCurrent date: ");
    dfl_buf_str(&b, date);
    dfl_buf_str(&b, "\n\nReasoning: ");
    dfl_buf_str(&b, o->reasoning_effort ? o->reasoning_effort : "medium");
    dfl_buf_str(&b, "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every "
                    "message.");
    if (any_tools) dfl_buf_str(&b, "\nCalls to these tools must go to the commentary channel: 'functions'.");
    dfl_buf_str(&b, "<|end|>");
    int err = 0;
    if ((first && m[0].content[0]) || any_tools) {
        dfl_buf_str(&b, "<|start|>developer<|message|>");
        if (first && m[0].content[0]) {
            dfl_buf_str(&b, "# Instructions\n\n");
            dfl_buf_str(&b, m[0].content);
            dfl_buf_str(&b, "\n\n");
        }
        if (any_tools) {
            dfl_buf_str(&b, "# Tools\n\n");
            err = harmony_namespace(&b, tools) != 0;
        }
        dfl_buf_str(&b, "<|end|>");
    }
    cJSON_Delete(tools);
    const char *last_call = NULL; /* the name a tool result is from: the last call's */
    for (int i = first; i < n && !err; i++) {
        const chat_message *msg = &m[i];
        if (is_role(msg, "user")) {
            dfl_buf_str(&b, "<|start|>user<|message|>");
            dfl_buf_str(&b, msg->content);
            dfl_buf_str(&b, "<|end|>");
        } else if (is_role(msg, "tool")) {
            if (!last_call) {
                dfl_seterr("chat_render: message %d (tool): no assistant tool call before it to answer (the harmony "
                           "template raises)", i);
                err = 1;
                break;
            }
            dfl_buf_str(&b, "<|start|>functions.");
            dfl_buf_str(&b, last_call);
            dfl_buf_str(&b, " to=assistant<|channel|>commentary<|message|>");
            py_json_str(&b, msg->content);
            dfl_buf_str(&b, "<|end|>");
        } else if (msg->n_tool_calls) {
            int answer_later = 0; /* a later assistant message without calls: this one's analysis is dropped */
            for (int k = i + 1; k < n; k++) answer_later |= is_role(&m[k], "assistant") && !m[k].n_tool_calls;
            const char *analysis = msg->content[0]                                     ? msg->content
                                   : msg->reasoning_content && msg->reasoning_content[0] ? msg->reasoning_content
                                                                                         : NULL;
            if (analysis && !answer_later) {
                dfl_buf_str(&b, "<|start|>assistant<|channel|>analysis<|message|>");
                dfl_buf_str(&b, analysis);
                dfl_buf_str(&b, "<|end|>");
            }
            cJSON *args;
            if (call_arguments(&msg->tool_calls[0], i, &args)) {
                err = 1;
                break;
            }
            dfl_buf_str(&b, "<|start|>assistant to=functions.");
            dfl_buf_str(&b, msg->tool_calls[0].name);
            dfl_buf_str(&b, "<|channel|>commentary json<|message|>");
            if (args) py_json(&b, args); /* tojson of the object */
            else py_json_str(&b, msg->tool_calls[0].arguments);
            cJSON_Delete(args);
            dfl_buf_str(&b, "<|call|>");
            last_call = msg->tool_calls[0].name;
        } else if (i == n - 1 && !add_generation_prompt) { /* a training turn: its reasoning, <|return|> */
            if (msg->reasoning_content) {
                dfl_buf_str(&b, "<|start|>assistant<|channel|>analysis<|message|>");
                dfl_buf_str(&b, msg->reasoning_content);
                dfl_buf_str(&b, "<|end|>");
            }
            dfl_buf_str(&b, "<|start|>assistant<|channel|>final<|message|>");
            dfl_buf_str(&b, msg->content);
            dfl_buf_str(&b, "<|return|>");
        } else { /* an earlier answer: the final channel only */
            dfl_buf_str(&b, "<|start|>assistant<|channel|>final<|message|>");
            dfl_buf_str(&b, msg->content);
            dfl_buf_str(&b, "<|end|>");
            last_call = NULL;
        }
    }
    if (err) {
        dfl_buf_free(&b);
        return NULL;
    }
    if (add_generation_prompt) dfl_buf_str(&b, "<|start|>assistant");
    return dfl_buf_take(&b);
}

char *chat_render_opts(chat_format f, const chat_message *m, int n, const char *tools_json,
                       int add_generation_prompt, chat_think think, const chat_harmony_opts *ho) {
    if (f == CHAT_HARMONY) return chat_render_harmony(m, n, tools_json, ho, add_generation_prompt);
    const char *set = !ho                   ? NULL
                      : ho->reasoning_effort ? "reasoning_effort"
                      : ho->date             ? "date"
                      : ho->model_identity   ? "model_identity"
                                             : NULL;
    if (set) {
        dfl_seterr("chat_render: %s is an option of gpt-oss's harmony template; this model's template (%s) has "
                   "none", set, f == CHAT_QWEN3 ? "Qwen3" : f == CHAT_LLAMA3 ? "Llama-3" : f == CHAT_GEMMA ? "Gemma 3" : "Gemma 4");
        return NULL;
    }
    return chat_render_tools(f, m, n, tools_json, add_generation_prompt, think);
}

char *chat_render_tools(chat_format f, const chat_message *m, int n, const char *tools_json,
                        int add_generation_prompt, chat_think think) {
    if (f == CHAT_HARMONY) return chat_render_harmony(m, n, tools_json, NULL, add_generation_prompt);
    if (f != CHAT_QWEN3 && f != CHAT_LLAMA3 && f != CHAT_GEMMA && f != CHAT_GEMMA4 && f != CHAT_GEMMA4_EARLY) {
        dfl_seterr("chat_render: unknown chat format %d", (int)f);
        return NULL;
    }
    if (check_messages(m, n, f == CHAT_QWEN3) != 0) return NULL;
    cJSON *tools;
    if (parse_tools_json(tools_json, &tools)) return NULL;
    int any_tools = tools && tools->child, calls = 0;
    for (int i = 0; i < n; i++) calls |= m[i].n_tool_calls > 0;
    char *s = NULL;
    if (f == CHAT_GEMMA) {
        if (any_tools) dfl_seterr("chat_render: tools are not supported with the Gemma template (it has none)");
        else if (calls) dfl_seterr("chat_render: tool_calls are not supported with the Gemma template (it has no tool calls)");
        else s = render_gemma(m, n, add_generation_prompt);
    } else if (f == CHAT_GEMMA4 || f == CHAT_GEMMA4_EARLY) {
        s = render_gemma4(f, m, n, tools, add_generation_prompt, think);
    } else if (f == CHAT_LLAMA3 && (any_tools || calls)) {
        dfl_seterr("chat_render: tools and tool_calls need the Qwen3 (ChatML) template; this model's is Llama-3");
    } else {
        s = f == CHAT_QWEN3 ? render_qwen3(m, n, tools, add_generation_prompt, think)
                            : render_llama3(m, n, add_generation_prompt);
    }
    cJSON_Delete(tools);
    return s;
}

char *chat_render(chat_format f, const chat_message *m, int n, int add_generation_prompt,
                  chat_think think) {
    return chat_render_tools(f, m, n, NULL, add_generation_prompt, think);
}

char *chat_next_turn(chat_format f, const char *user, chat_think think) {
    dfl_buf b = {0};
    if (f == CHAT_QWEN3) {
        dfl_buf_str(&b, "<|im_end|>\n<|im_start|>user\n");
        dfl_buf_str(&b, user);
        dfl_buf_str(&b, "<|im_end|>\n<|im_start|>assistant\n");
        if (think == CHAT_THINK_OFF) dfl_buf_str(&b, "<think>\n\n</think>\n\n");
    } else if (f == CHAT_HARMONY) {
        dfl_buf_str(&b, "<|end|><|start|>user<|message|>");
        dfl_buf_str(&b, user);
        dfl_buf_str(&b, "<|end|><|start|>assistant");
    } else if (f == CHAT_GEMMA) {
        dfl_buf_str(&b, "<end_of_turn>\n<start_of_turn>user\n");
        put_span(&b, py_strip(whole(user)));
        dfl_buf_str(&b, "<end_of_turn>\n<start_of_turn>model\n");
    } else if (f == CHAT_GEMMA4 || f == CHAT_GEMMA4_EARLY) {
        dfl_buf_str(&b, "<turn|>\n<|turn>user\n");
        put_span(&b, py_strip(whole(user)));
        dfl_buf_str(&b, "<turn|>\n<|turn>model\n");
        if (think != CHAT_THINK_ON) dfl_buf_str(&b, "<|channel>thought\n<channel|>");
    } else if (f == CHAT_LLAMA3) {
        dfl_buf_str(&b, "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n");
        put_span(&b, py_strip(whole(user)));
        dfl_buf_str(&b, "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    } else {
        dfl_buf_free(&b);
        dfl_seterr("chat_next_turn: unknown chat format %d", (int)f);
        return NULL;
    }
    return dfl_buf_take(&b);
}
