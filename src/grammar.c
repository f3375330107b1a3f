/* grammar.c - see grammar.h. GBNF parser, checks, the stack-set matcher.
 * (JSON Schema to GBNF: grammar_schema.c.)
 *
 * Compiled form: sym[] holds every alternative of every rule as a run of
 * symbols ending in GR_SYM_END; rule r's alternatives start at
 * sym[alt[rule_alt0[r] + i]] for i < rule_nalt[r]. A symbol is a character
 * set (code point ranges[first .. first + n), negated or not) or a reference
 * to a rule. Groups and repetitions become rules of their own:
 *   X*  ->  R ::= X R | ""        X+  ->  R ::= X R | X        X?  ->  R ::= X | ""
 *   X{m,n} -> m copies of X, then R_{n-m} with R_k ::= X R_{k-1} | "" (R_0 empty)
 *   X{m,}  -> m copies of X, then X*
 *
 * Matcher state: a set of stacks, each a list of positions in sym[] (the
 * bottom first, the top last); the top is always a character set after
 * expansion (a rule reference on top is replaced by its continuation and
 * each of the rule's alternatives; an END pops). A continuation that is an
 * END is not pushed (right recursion does not deepen the stack). The empty
 * stack means "root complete". Stacks are kept unique. */
#include "grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

typedef enum { GR_SYM_END, GR_SYM_CHARS, GR_SYM_RULE } gr_sym_kind;

typedef struct {
    uint8_t kind;    /* gr_sym_kind */
    uint8_t negated; /* GR_SYM_CHARS: matches what the ranges do not */
    int32_t a;       /* CHARS: first range; RULE: the rule */
    int32_t n;       /* CHARS: number of ranges */
} gr_sym;

typedef struct {
    uint32_t lo, hi; /* code points lo..hi inclusive */
} gr_range;

struct gr_grammar {
    gr_sym *sym;
    int n_sym;
    int32_t *alt;       /* [n_alt] index in sym of each alternative's first symbol */
    int32_t *rule_alt0; /* [n_rules] */
    int32_t *rule_nalt; /* [n_rules] */
    gr_range *ranges;
    int n_ranges, n_rules, root;
};

/* ---- parsing ---------------------------------------------------------------- */

typedef struct {
    gr_sym *s;
    int n, cap;
} p_seq;

typedef struct {
    char *name;
    p_seq *alts;
    int n_alts, cap_alts;
    int defined_line; /* 0: only referenced so far */
    int used_line;    /* first reference (for "not defined") */
    int parent;       /* the user rule a generated rule belongs to; its own index for a user rule */
} p_rule;

typedef struct {
    const char *t, *end;
    int line;
    p_rule *rules;
    int n_rules, cap_rules;
    int32_t *hash; /* open addressing over rule names: index + 1, 0 empty */
    int hcap;
    gr_range *ranges;
    int n_ranges, cap_ranges;
    long n_sym;    /* symbols so far (limit) */
    int cur_rule;  /* the user rule being parsed */
    int n_gen;     /* generated rules so far */
    int depth;     /* parentheses */
    int failed;
} parser;

static int perr(parser *p, const char *fmt, const char *arg) {
    if (!p->failed) {
        char msg[256];
        snprintf(msg, sizeof msg, fmt, arg ? arg : "");
        dfl_seterr("grammar: line %d: %s", p->line, msg);
    }
    p->failed = 1;
    return -1;
}

static uint32_t hash_name(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static void rehash(parser *p) {
    free(p->hash);
    p->hcap = p->hcap ? 2 * p->hcap : 256;
    p->hash = dfl_calloc((size_t)p->hcap, sizeof(int32_t));
    for (int i = 0; i < p->n_rules; i++) {
        const char *nm = p->rules[i].name;
        uint32_t h = hash_name(nm, strlen(nm)) & (uint32_t)(p->hcap - 1);
        while (p->hash[h]) h = (h + 1) & (uint32_t)(p->hcap - 1);
        p->hash[h] = i + 1;
    }
}

static int new_rule(parser *p, const char *name, size_t n, int parent) {
    if (p->n_rules >= GR_MAX_RULES) return perr(p, "more than %s rules (groups and repetitions count)", "32768");
    if (p->n_rules == p->cap_rules) {
        p->cap_rules = p->cap_rules ? 2 * p->cap_rules : 32;
        p->rules = dfl_realloc(p->rules, sizeof(p_rule) * (size_t)p->cap_rules);
    }
    p_rule *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    r->name = dfl_malloc(n + 1);
    memcpy(r->name, name, n);
    r->name[n] = 0;
    r->parent = parent < 0 ? p->n_rules : parent;
    p->n_rules++;
    if (2 * p->n_rules > p->hcap) rehash(p);
    else {
        uint32_t h = hash_name(name, n) & (uint32_t)(p->hcap - 1);
        while (p->hash[h]) h = (h + 1) & (uint32_t)(p->hcap - 1);
        p->hash[h] = p->n_rules;
    }
    return p->n_rules - 1;
}

/* The rule named name[0..n), created (undefined) on first sight. */
static int rule_id(parser *p, const char *name, size_t n) {
    if (p->hcap) {
        uint32_t h = hash_name(name, n) & (uint32_t)(p->hcap - 1);
        for (; p->hash[h]; h = (h + 1) & (uint32_t)(p->hcap - 1)) {
            const char *nm = p->rules[p->hash[h] - 1].name;
            if (strlen(nm) == n && !memcmp(nm, name, n)) return p->hash[h] - 1;
        }
    }
    return new_rule(p, name, n, -1);
}

static int gen_rule(parser *p) {
    char nm[160];
    snprintf(nm, sizeof nm, "%.100s~%d", p->rules[p->cur_rule].name, ++p->n_gen);
    return new_rule(p, nm, strlen(nm), p->cur_rule);
}

static p_seq *add_alt(parser *p, int r) {
    p_rule *R = &p->rules[r];
    if (R->n_alts == R->cap_alts) {
        R->cap_alts = R->cap_alts ? 2 * R->cap_alts : 4;
        R->alts = dfl_realloc(R->alts, sizeof(p_seq) * (size_t)R->cap_alts);
    }
    p_seq *s = &R->alts[R->n_alts++];
    memset(s, 0, sizeof *s);
    return s;
}

static int push_sym(parser *p, p_seq *s, gr_sym y) {
    if (++p->n_sym > GR_MAX_SYMBOLS) return perr(p, "the grammar is too large (more than %s symbols after expanding repetitions)", "262144");
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->s = dfl_realloc(s->s, sizeof(gr_sym) * (size_t)s->cap);
    }
    s->s[s->n++] = y;
    return 0;
}

static int add_range(parser *p, uint32_t lo, uint32_t hi) {
    if (p->n_ranges >= GR_MAX_SYMBOLS) return perr(p, "too many character ranges%s", NULL);
    if (p->n_ranges == p->cap_ranges) {
        p->cap_ranges = p->cap_ranges ? 2 * p->cap_ranges : 64;
        p->ranges = dfl_realloc(p->ranges, sizeof(gr_range) * (size_t)p->cap_ranges);
    }
    p->ranges[p->n_ranges++] = (gr_range){lo, hi};
    return 0;
}

static int is_name_char(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static void skip_ws(parser *p) {
    while (p->t < p->end) {
        char c = *p->t;
        if (c == '\n') p->line++;
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') p->t++;
        else if (c == '#') {
            while (p->t < p->end && *p->t != '\n') p->t++;
        } else
            break;
    }
}

/* At a name followed by ::= (the start of the next rule)? */
static int at_rule_start(parser *p) {
    const char *q = p->t;
    while (q < p->end && is_name_char(*q)) q++;
    if (q == p->t) return 0;
    while (q < p->end && (*q == ' ' || *q == '\t')) q++;
    return p->end - q >= 3 && !memcmp(q, "::=", 3);
}

/* One UTF-8 code point at p->t (advanced); -1 on invalid UTF-8. */
static long utf8_next(parser *p) {
    const uint8_t *s = (const uint8_t *)p->t;
    size_t left = (size_t)(p->end - p->t);
    uint32_t c = s[0];
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || (size_t)n > left) return -1;
    if (n > 1) c &= 0x3F >> (n - 1);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return -1;
        c = c << 6 | (s[i] & 0x3F);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return -1;
    p->t += n;
    return (long)c;
}

static int hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One character of a literal or class, escapes decoded; -1 on error. */
static long parse_char(parser *p) {
    if (p->t >= p->end) return perr(p, "unexpected end of the grammar inside a literal or class%s", NULL);
    if (*p->t == '\n') return perr(p, "newline inside a literal or class (write \\n)%s", NULL);
    if (*p->t != '\\') {
        long c = utf8_next(p);
        if (c < 0) return perr(p, "invalid UTF-8%s", NULL);
        return c;
    }
    p->t++;
    if (p->t >= p->end) return perr(p, "unexpected end after a backslash%s", NULL);
    char e = *p->t++;
    int nhex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (nhex) {
        uint32_t v = 0;
        for (int i = 0; i < nhex; i++) {
            int h = p->t < p->end ? hexval(*p->t) : -1;
            if (h < 0) return perr(p, "\\%s needs hexadecimal digits", e == 'x' ? "x" : e == 'u' ? "u" : "U");
            v = v * 16 + (uint32_t)h;
            p->t++;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return perr(p, "escape beyond Unicode or a surrogate%s", NULL);
        return v;
    }
    switch (e) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': return e;
    default: {
        char b[2] = {e, 0};
        return perr(p, "unknown escape \\%s", b);
    }
    }
}

static int parse_alternates(parser *p, int r);

static int repeat_count(parser *p, long *v) {
    skip_ws(p);
    if (p->t >= p->end || *p->t < '0' || *p->t > '9') return perr(p, "expected a number in {m,n}%s", NULL);
    long x = 0;
    while (p->t < p->end && *p->t >= '0' && *p->t <= '9') {
        x = x * 10 + (*p->t++ - '0');
        if (x > GR_MAX_REPEAT) return perr(p, "repetition count above %s", "4096");
    }
    *v = x;
    skip_ws(p);
    return 0;
}

/* Apply a postfix operator to the last item s->s[from..n) of the
 * alternative being built for rule r (alternative index ai). */
static int apply_repeat(parser *p, int r, int ai, int from) {
    char op = *p->t++;
    long mn = 0, mx = -1;
    if (op == '*') mn = 0, mx = -1;
    else if (op == '+') mn = 1, mx = -1;
    else if (op == '?') mn = 0, mx = 1;
    else {
        if (repeat_count(p, &mn) != 0) return -1;
        mx = mn;
        if (p->t < p->end && *p->t == ',') {
            p->t++;
            skip_ws(p);
            mx = -1;
            if (p->t < p->end && *p->t != '}' && repeat_count(p, &mx) != 0) return -1;
        }
        if (p->t >= p->end || *p->t != '}') return perr(p, "expected } to close {m,n}%s", NULL);
        p->t++;
        if (mx >= 0 && mx < mn) return perr(p, "{m,n} with n < m%s", NULL);
    }
    /* the item as one symbol x */
    p_seq *s = &p->rules[r].alts[ai];
    gr_sym x;
    if (s->n - from == 1) {
        x = s->s[from];
    } else {
        int g = gen_rule(p);
        if (g < 0) return -1;
        p_seq *a = add_alt(p, g);
        s = &p->rules[r].alts[ai];
        for (int i = from; i < s->n; i++)
            if (push_sym(p, a, s->s[i]) != 0) return -1;
        p->n_sym -= s->n - from;
        x = (gr_sym){.kind = GR_SYM_RULE, .a = g};
    }
    s->n = from;
    for (long i = 0; i < mn; i++)
        if (push_sym(p, &p->rules[r].alts[ai], x) != 0) return -1;
    if (mx == mn) return 0;
    int tail;
    if (mx < 0) { /* X*: R ::= X R | "" */
        tail = gen_rule(p);
        if (tail < 0) return -1;
        p_seq *a = add_alt(p, tail);
        if (push_sym(p, a, x) != 0 || push_sym(p, a, (gr_sym){.kind = GR_SYM_RULE, .a = tail}) != 0) return -1;
        add_alt(p, tail);
    } else { /* R_k ::= X R_{k-1} | "", R_1 ::= X | "" */
        tail = -1;
        for (long k = 1; k <= mx - mn; k++) {
            int g = gen_rule(p);
            if (g < 0) return -1;
            p_seq *a = add_alt(p, g);
            if (push_sym(p, a, x) != 0) return -1;
            if (tail >= 0 && push_sym(p, &p->rules[g].alts[0], (gr_sym){.kind = GR_SYM_RULE, .a = tail}) != 0)
                return -1;
            add_alt(p, g);
            tail = g;
        }
    }
    return push_sym(p, &p->rules[r].alts[ai], (gr_sym){.kind = GR_SYM_RULE, .a = tail});
}

/* One alternative (a sequence) of rule r. */
static int parse_sequence(parser *p, int r) {
    add_alt(p, r);
    int ai = p->rules[r].n_alts - 1;
    for (;;) {
        skip_ws(p);
        if (p->t >= p->end || *p->t == '|' || *p->t == ')' || at_rule_start(p)) return 0;
        int from = p->rules[r].alts[ai].n;
        char c = *p->t;
        if (c == '"') {
            p->t++;
            while (p->t < p->end && *p->t != '"') {
                long ch = parse_char(p);
                if (ch < 0) return -1;
                int ri = p->n_ranges;
                if (add_range(p, (uint32_t)ch, (uint32_t)ch) != 0 ||
                    push_sym(p, &p->rules[r].alts[ai], (gr_sym){.kind = GR_SYM_CHARS, .a = ri, .n = 1}) != 0)
                    return -1;
            }
            if (p->t >= p->end) return perr(p, "unterminated string literal%s", NULL);
            p->t++;
            if (p->rules[r].alts[ai].n == from) { /* "": nothing to match; a postfix applies to nothing */
                skip_ws(p);
                if (p->t < p->end && (*p->t == '*' || *p->t == '+' || *p->t == '?' || *p->t == '{'))
                    return perr(p, "repetition of an empty string \"\"%s", NULL);
                continue;
            }
        } else if (c == '[') {
            p->t++;
            int neg = 0;
            if (p->t < p->end && *p->t == '^') neg = 1, p->t++;
            int ri = p->n_ranges, n = 0;
            while (p->t < p->end && *p->t != ']') {
                long lo = parse_char(p), hi = lo;
                if (lo < 0) return -1;
                if (p->t + 1 < p->end && *p->t == '-' && p->t[1] != ']') {
                    p->t++;
                    hi = parse_char(p);
                    if (hi < 0) return -1;
                    if (hi < lo) return perr(p, "character range with its end before its start%s", NULL);
                }
                if (add_range(p, (uint32_t)lo, (uint32_t)hi) != 0) return -1;
                n++;
            }
            if (p->t >= p->end) return perr(p, "unterminated character class%s", NULL);
            p->t++;
            if (!n && !neg) return perr(p, "empty character class []%s", NULL);
            if (push_sym(p, &p->rules[r].alts[ai], (gr_sym){.kind = GR_SYM_CHARS, .negated = (uint8_t)neg, .a = ri, .n = n}) != 0)
                return -1;
        } else if (c == '.') {
            p->t++;
            if (push_sym(p, &p->rules[r].alts[ai], (gr_sym){.kind = GR_SYM_CHARS, .negated = 1, .a = 0, .n = 0}) != 0)
                return -1;
        } else if (c == '(') {
            p->t++;
            if (++p->depth > GR_MAX_NESTING) return perr(p, "parentheses nested more than %s deep", "128");
            int g = gen_rule(p);
            if (g < 0 || parse_alternates(p, g) != 0) return -1;
            skip_ws(p);
            if (p->t >= p->end || *p->t != ')') return perr(p, "expected ) to close a group%s", NULL);
            p->t++;
            p->depth--;
            if (push_sym(p, &p->rules[r].alts[ai], (gr_sym){.kind = GR_SYM_RULE, .a = g}) != 0) return -1;
        } else if (is_name_char(c)) {
            const char *q = p->t;
            while (p->t < p->end && is_name_char(*p->t)) p->t++;
            int id = rule_id(p, q, (size_t)(p->t - q));
            if (id < 0) return -1;
            if (!p->rules[id].used_line) p->rules[id].used_line = p->line;
            if (push_sym(p, &p->rules[r].alts[ai], (gr_sym){.kind = GR_SYM_RULE, .a = id}) != 0) return -1;
        } else {
            char b[8];
            snprintf(b, sizeof b, (uint8_t)c >= 0x20 && (uint8_t)c < 0x7f ? "'%c'" : "\\x%02x", (uint8_t)c);
            return perr(p, "unexpected character %s", b);
        }
        skip_ws(p);
        while (p->t < p->end && (*p->t == '*' || *p->t == '+' || *p->t == '?' || *p->t == '{')) {
            /* a further operator applies to the whole expansion [from, n) of
             * this item (x{2}? is (x x)?), which may be empty (x{0}) */
            if (apply_repeat(p, r, ai, from) != 0) return -1;
            skip_ws(p);
        }
    }
}

static int parse_alternates(parser *p, int r) {
    for (;;) {
        if (parse_sequence(p, r) != 0) return -1;
        skip_ws(p);
        if (p->t < p->end && *p->t == '|') {
            p->t++;
            continue;
        }
        return 0;
    }
}

static int parse_all(parser *p) {
    skip_ws(p);
    if (p->t >= p->end) return perr(p, "the grammar is empty (no rules)%s", NULL);
    while (p->t < p->end) {
        const char *q = p->t;
        while (p->t < p->end && is_name_char(*p->t)) p->t++;
        if (q == p->t) {
            char b[8];
            snprintf(b, sizeof b, (uint8_t)*q >= 0x20 && (uint8_t)*q < 0x7f ? "'%c'" : "\\x%02x", (uint8_t)*q);
            return perr(p, "expected a rule name, found %s", b);
        }
        int r = rule_id(p, q, (size_t)(p->t - q));
        if (r < 0) return -1;
        skip_ws(p);
        if (p->end - p->t < 3 || memcmp(p->t, "::=", 3)) return perr(p, "expected ::= after rule name '%s'", p->rules[r].name);
        p->t += 3;
        if (p->rules[r].defined_line) return perr(p, "rule '%s' is defined twice", p->rules[r].name);
        p->rules[r].defined_line = p->line;
        p->cur_rule = r;
        p->n_gen = 0;
        if (parse_alternates(p, r) != 0) return -1;
        skip_ws(p);
        if (p->t < p->end && *p->t == ')') return perr(p, "unmatched )%s", NULL);
    }
    return 0;
}

/* ---- checks ------------------------------------------------------------------- */

static int check_rules(parser *p) {
    int n = p->n_rules;
    int root = -1;
    for (int i = 0; i < n; i++) {
        p_rule *R = &p->rules[i];
        if (R->parent == i && !R->defined_line) {
            p->line = R->used_line;
            return perr(p, "rule '%s' is used but not defined", R->name);
        }
        if (!strcmp(R->name, "root")) root = i;
    }
    if (root < 0) {
        p->line = 1;
        return perr(p, "no rule 'root' (the start rule)%s", NULL);
    }
    /* nullable and productive: fixpoints */
    uint8_t *nullable = dfl_calloc((size_t)n, 1), *productive = dfl_calloc((size_t)n, 1);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < n; i++) {
            p_rule *R = &p->rules[i];
            for (int a = 0; a < R->n_alts; a++) {
                int nul = 1, prod = 1;
                for (int k = 0; k < R->alts[a].n; k++) {
                    gr_sym y = R->alts[a].s[k];
                    if (y.kind == GR_SYM_RULE) {
                        nul &= nullable[y.a];
                        prod &= productive[y.a];
                    } else {
                        nul = 0;
                    }
                }
                if (nul && !nullable[i]) nullable[i] = 1, changed = 1;
                if (prod && !productive[i]) productive[i] = 1, changed = 1;
            }
        }
    }
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        if (!productive[i]) {
            p_rule *U = &p->rules[p->rules[i].parent];
            p->line = U->defined_line;
            rc = perr(p, "rule '%s' can never finish: every alternative refers back to it", p->rules[i].name);
        }
    /* left recursion: a cycle through the rules an alternative can start
     * with (its symbols up to and including the first non-nullable one);
     * iterative DFS with colours 0 new, 1 on the path, 2 done */
    uint8_t *colour = dfl_calloc((size_t)n, 1);
    int32_t *st_rule = dfl_malloc(sizeof(int32_t) * (size_t)(n + 1)), *st_alt = dfl_malloc(sizeof(int32_t) * (size_t)(n + 1)),
            *st_k = dfl_malloc(sizeof(int32_t) * (size_t)(n + 1));
    for (int s0 = 0; s0 < n && rc == 0; s0++) {
        if (colour[s0]) continue;
        int sp = 0;
        st_rule[0] = s0, st_alt[0] = 0, st_k[0] = 0;
        colour[s0] = 1;
        while (sp >= 0 && rc == 0) {
            p_rule *R = &p->rules[st_rule[sp]];
            if (st_alt[sp] >= R->n_alts) {
                colour[st_rule[sp]] = 2;
                sp--;
                continue;
            }
            p_seq *A = &R->alts[st_alt[sp]];
            int k = st_k[sp];
            int stop = k >= A->n || (k > 0 && !(A->s[k - 1].kind == GR_SYM_RULE && nullable[A->s[k - 1].a]));
            if (stop) {
                st_alt[sp]++;
                st_k[sp] = 0;
                continue;
            }
            st_k[sp]++;
            gr_sym y = A->s[k];
            if (y.kind != GR_SYM_RULE) {
                st_k[sp] = A->n; /* a character: nothing after it starts the alternative */
                continue;
            }
            if (colour[y.a] == 1) {
                p_rule *U = &p->rules[p->rules[y.a].parent];
                p->line = U->defined_line;
                if (p->rules[y.a].parent == y.a)
                    rc = perr(p, "rule '%s' is left-recursive (it can reach itself without consuming input)", p->rules[y.a].name);
                else
                    rc = perr(p, "left recursion through '%s' (in a group or repetition of that rule: a repeated item "
                                 "that can match nothing, or a rule reaching itself without consuming input)",
                              U->name);
                break;
            }
            if (colour[y.a] == 0) {
                colour[y.a] = 1;
                sp++;
                st_rule[sp] = y.a, st_alt[sp] = 0, st_k[sp] = 0;
            }
        }
    }
    free(colour);
    free(st_rule);
    free(st_alt);
    free(st_k);
    free(nullable);
    free(productive);
    return rc;
}

/* ---- compile ------------------------------------------------------------------- */

static void parser_free(parser *p) {
    for (int i = 0; i < p->n_rules; i++) {
        for (int a = 0; a < p->rules[i].n_alts; a++) free(p->rules[i].alts[a].s);
        free(p->rules[i].alts);
        free(p->rules[i].name);
    }
    free(p->rules);
    free(p->hash);
    free(p->ranges);
}

gr_grammar *gr_parse(const char *text, size_t len) {
    if (!text) len = 0;
    if (len > GR_MAX_TEXT) {
        dfl_seterr("grammar: %zu bytes, more than the limit of %d", len, GR_MAX_TEXT);
        return NULL;
    }
    parser p = {.t = text, .end = text + len, .line = 1};
    if (memchr(text ? text : "", 0, len)) {
        dfl_seterr("grammar: contains a NUL byte");
        return NULL;
    }
    if (parse_all(&p) != 0 || check_rules(&p) != 0) {
        parser_free(&p);
        return NULL;
    }
    gr_grammar *g = dfl_calloc(1, sizeof *g);
    long n_sym = 0, n_alt = 0;
    for (int i = 0; i < p.n_rules; i++) {
        n_alt += p.rules[i].n_alts;
        for (int a = 0; a < p.rules[i].n_alts; a++) n_sym += p.rules[i].alts[a].n + 1;
    }
    g->sym = dfl_malloc(sizeof(gr_sym) * (size_t)(n_sym + 1));
    g->alt = dfl_malloc(sizeof(int32_t) * (size_t)(n_alt + 1));
    g->rule_alt0 = dfl_malloc(sizeof(int32_t) * (size_t)p.n_rules);
    g->rule_nalt = dfl_malloc(sizeof(int32_t) * (size_t)p.n_rules);
    int ns = 0, na = 0;
    for (int i = 0; i < p.n_rules; i++) {
        g->rule_alt0[i] = na;
        g->rule_nalt[i] = p.rules[i].n_alts;
        for (int a = 0; a < p.rules[i].n_alts; a++) {
            g->alt[na++] = ns;
            for (int k = 0; k < p.rules[i].alts[a].n; k++) g->sym[ns++] = p.rules[i].alts[a].s[k];
            g->sym[ns++] = (gr_sym){.kind = GR_SYM_END};
        }
        if (!strcmp(p.rules[i].name, "root")) g->root = i;
    }
    g->sym[ns] = (gr_sym){.kind = GR_SYM_END};
    g->n_sym = ns;
    g->n_rules = p.n_rules;
    g->ranges = p.ranges;
    g->n_ranges = p.n_ranges;
    p.ranges = NULL;
    parser_free(&p);
    return g;
}

void gr_free(gr_grammar *g) {
    if (!g) return;
    free(g->sym);
    free(g->alt);
    free(g->rule_alt0);
    free(g->rule_nalt);
    free(g->ranges);
    free(g);
}

int gr_n_rules(const gr_grammar *g) { return g->n_rules; }

/* ---- matcher ------------------------------------------------------------------- */

/* A stack set: stacks[] = [depth, pos_0 .. pos_{depth-1}] back to back (pos
 * of the top last); n of them, len ints in all. */
typedef struct {
    int32_t *v;
    size_t len, cap;
    int n;
} gr_set;

struct gr_state {
    const gr_grammar *g;
    gr_set cur, next;
    /* dedup of next: slot = offset in next.v, valid when slot_gen == gen (this step) */
    uint32_t *slot, *slot_gen, gen;
    /* the stacks expansion has popped to in this step (the same table scheme
     * over popped.v): each is expanded once, however many empty paths reach it */
    gr_set popped;
    uint32_t *pslot, *pslot_gen;
    int32_t tmp[GR_MAX_DEPTH + 2]; /* the stack being expanded */
    long n_expand;                  /* expansion steps of the current character (GR_MAX_EXPAND) */
    uint8_t u8[4];                  /* a partial UTF-8 character fed so far */
    int u8_have, u8_need;           /* bytes held, bytes it needs in all (0: none pending) */
    int dead, err;
};

enum { GR_SLOTS = 4 * GR_MAX_STACKS }; /* a power of two */

static uint32_t hash_stack(const int32_t *s, int d) {
    uint32_t h = 2166136261u ^ (uint32_t)d;
    for (int i = 0; i < d; i++) h = (h ^ (uint32_t)s[i]) * 16777619u;
    return h;
}

/* Add stack s[0..d) to st->next unless there; -1 + error at the bound. */
static int set_add(gr_state *st, const int32_t *s, int d) {
    gr_set *o = &st->next;
    uint32_t h = hash_stack(s, d) & (GR_SLOTS - 1);
    for (; st->slot_gen[h] == st->gen; h = (h + 1) & (GR_SLOTS - 1)) {
        const int32_t *q = o->v + st->slot[h];
        if (q[0] == d && !memcmp(q + 1, s, sizeof(int32_t) * (size_t)d)) return 0;
    }
    if (o->n >= GR_MAX_STACKS) {
        dfl_seterr("grammar: more than %d parse stacks at once (the grammar is too ambiguous here)", GR_MAX_STACKS);
        return -1;
    }
    if (o->len + (size_t)d + 1 > o->cap) {
        o->cap = 2 * (o->len + (size_t)d + 1) + 64;
        o->v = dfl_realloc(o->v, sizeof(int32_t) * o->cap);
    }
    st->slot[h] = (uint32_t)o->len;
    st->slot_gen[h] = st->gen;
    o->v[o->len] = d;
    memcpy(o->v + o->len + 1, s, sizeof(int32_t) * (size_t)d);
    o->len += (size_t)d + 1;
    o->n++;
    return 0;
}

/* 1 if stack s[0..d) was popped to before in this step, else record it
 * (while the table has room) and 0. */
static int seen_pop(gr_state *st, const int32_t *s, int d) {
    gr_set *o = &st->popped;
    uint32_t h = hash_stack(s, d) & (GR_SLOTS - 1);
    for (; st->pslot_gen[h] == st->gen; h = (h + 1) & (GR_SLOTS - 1)) {
        const int32_t *q = o->v + st->pslot[h];
        if (q[0] == d && !memcmp(q + 1, s, sizeof(int32_t) * (size_t)d)) return 1;
    }
    if (2 * o->n >= GR_SLOTS) return 0; /* full: expand again (correct, only slower) */
    if (o->len + (size_t)d + 1 > o->cap) {
        o->cap = 2 * (o->len + (size_t)d + 1) + 64;
        o->v = dfl_realloc(o->v, sizeof(int32_t) * o->cap);
    }
    st->pslot[h] = (uint32_t)o->len;
    st->pslot_gen[h] = st->gen;
    o->v[o->len] = d;
    memcpy(o->v + o->len + 1, s, sizeof(int32_t) * (size_t)d);
    o->len += (size_t)d + 1;
    o->n++;
    return 0;
}

/* Expand st->tmp[0..d) until each resulting stack has a character set on
 * top (or is empty) and add them to st->next. tmp is restored on return. */
static int expand(gr_state *st, int d) {
    const gr_grammar *g = st->g;
    if (++st->n_expand > GR_MAX_EXPAND) {
        dfl_seterr("grammar: more than %d expansion steps for one character (the grammar is too ambiguous here: "
                   "alternatives that match the same empty text multiply)", GR_MAX_EXPAND);
        return -1;
    }
    if (d == 0) return set_add(st, st->tmp, 0);
    int32_t p = st->tmp[d - 1];
    const gr_sym *y = &g->sym[p];
    if (y->kind == GR_SYM_END) return d > 1 && seen_pop(st, st->tmp, d - 1) ? 0 : expand(st, d - 1);
    if (y->kind == GR_SYM_CHARS) return set_add(st, st->tmp, d);
    /* a rule: the continuation (dropped when it is an END), then each alternative */
    int base = d;
    if (g->sym[p + 1].kind == GR_SYM_END) base = d - 1;
    else st->tmp[d - 1] = p + 1;
    if (base + 1 > GR_MAX_DEPTH) {
        st->tmp[d - 1] = p;
        dfl_seterr("grammar: the text nests deeper than %d levels", GR_MAX_DEPTH);
        return -1;
    }
    int32_t saved = st->tmp[base];
    int rc = 0;
    for (int a = 0; a < g->rule_nalt[y->a] && rc == 0; a++) {
        st->tmp[base] = g->alt[g->rule_alt0[y->a] + a];
        rc = expand(st, base + 1);
    }
    st->tmp[base] = saved;
    st->tmp[d - 1] = p;
    return rc;
}

static void begin_next(gr_state *st) {
    st->n_expand = 0;
    st->next.len = 0;
    st->next.n = 0;
    st->popped.len = 0;
    st->popped.n = 0;
    if (++st->gen == 0) { /* wrapped: clear so no stale slot matches */
        memset(st->slot_gen, 0, sizeof(uint32_t) * GR_SLOTS);
        memset(st->pslot_gen, 0, sizeof(uint32_t) * GR_SLOTS);
        st->gen = 1;
    }
}

static void swap_sets(gr_state *st) {
    gr_set t = st->cur;
    st->cur = st->next;
    st->next = t;
}

gr_state *gr_state_new(const gr_grammar *g) {
    gr_state *st = dfl_calloc(1, sizeof *st);
    st->g = g;
    st->slot = dfl_malloc(sizeof(uint32_t) * GR_SLOTS);
    st->slot_gen = dfl_calloc(GR_SLOTS, sizeof(uint32_t));
    st->pslot = dfl_malloc(sizeof(uint32_t) * GR_SLOTS);
    st->pslot_gen = dfl_calloc(GR_SLOTS, sizeof(uint32_t));
    begin_next(st);
    int rc = 0;
    for (int a = 0; a < g->rule_nalt[g->root] && rc == 0; a++) {
        st->tmp[0] = g->alt[g->rule_alt0[g->root] + a];
        rc = expand(st, 1);
    }
    swap_sets(st);
    if (rc != 0) { /* the start already exceeds a bound */
        gr_state_free(st);
        return NULL;
    }
    return st;
}

void gr_state_free(gr_state *st) {
    if (!st) return;
    free(st->cur.v);
    free(st->next.v);
    free(st->slot);
    free(st->slot_gen);
    free(st->popped.v);
    free(st->pslot);
    free(st->pslot_gen);
    free(st);
}

void gr_state_copy(gr_state *dst, const gr_state *src) {
    if (dst->cur.cap < src->cur.len) {
        dst->cur.cap = src->cur.len + 64;
        dst->cur.v = dfl_realloc(dst->cur.v, sizeof(int32_t) * dst->cur.cap);
    }
    if (src->cur.len) memcpy(dst->cur.v, src->cur.v, sizeof(int32_t) * src->cur.len);
    dst->cur.len = src->cur.len;
    dst->cur.n = src->cur.n;
    dst->g = src->g;
    memcpy(dst->u8, src->u8, sizeof dst->u8);
    dst->u8_have = src->u8_have;
    dst->u8_need = src->u8_need;
    dst->dead = src->dead;
    dst->err = src->err;
}

static int chars_match(const gr_grammar *g, const gr_sym *y, uint32_t c) {
    int in = 0;
    for (int i = 0; i < y->n && !in; i++) in = c >= g->ranges[y->a + i].lo && c <= g->ranges[y->a + i].hi;
    return in != y->negated;
}

/* Does the set of y meet the code points lo..hi? */
static int chars_meet(const gr_grammar *g, const gr_sym *y, uint32_t lo, uint32_t hi) {
    if (!y->negated) {
        for (int i = 0; i < y->n; i++)
            if (g->ranges[y->a + i].lo <= hi && g->ranges[y->a + i].hi >= lo) return 1;
        return 0;
    }
    /* negated: lo..hi is not covered by the ranges */
    uint32_t x = lo;
    for (int pass = 0; pass <= y->n; pass++) {
        int moved = 0;
        for (int i = 0; i < y->n; i++) {
            const gr_range *r = &g->ranges[y->a + i];
            if (r->lo <= x && r->hi >= x) {
                if (r->hi >= hi) return 0;
                x = r->hi + 1;
                moved = 1;
            }
        }
        if (!moved) return 1;
    }
    return 1;
}

/* Advance every stack over code point c. */
static int step_char(gr_state *st, uint32_t c) {
    const gr_grammar *g = st->g;
    begin_next(st);
    size_t off = 0;
    for (int k = 0; k < st->cur.n; k++) {
        const int32_t *s = st->cur.v + off + 1;
        int d = st->cur.v[off];
        off += (size_t)d + 1;
        if (d == 0) continue; /* complete: takes no more characters */
        const gr_sym *y = &g->sym[s[d - 1]];
        if (!chars_match(g, y, c)) continue;
        memcpy(st->tmp, s, sizeof(int32_t) * (size_t)d);
        st->tmp[d - 1] = s[d - 1] + 1;
        if (expand(st, d) != 0) return -1;
    }
    swap_sets(st);
    return st->cur.n > 0;
}

/* Some stack accepts a character that starts with the held partial bytes? */
static int partial_viable(const gr_state *st) {
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    uint32_t v = st->u8[0] & (0x3F >> (st->u8_need - 1));
    for (int i = 1; i < st->u8_have; i++) v = v << 6 | (st->u8[i] & 0x3F);
    int rest = st->u8_need - st->u8_have;
    uint32_t lo = v << (6 * rest), hi = lo | ((1u << (6 * rest)) - 1);
    if (lo < min[st->u8_need]) lo = min[st->u8_need];
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF)) return 0; /* nothing, or only surrogates */
    size_t off = 0;
    for (int k = 0; k < st->cur.n; k++) {
        const int32_t *s = st->cur.v + off + 1;
        int d = st->cur.v[off];
        off += (size_t)d + 1;
        if (d && chars_meet(st->g, &st->g->sym[s[d - 1]], lo, hi)) return 1;
    }
    return 0;
}

int gr_feed(gr_state *st, const void *bytes, size_t n) {
    const uint8_t *b = bytes;
    if (st->err) {
        dfl_seterr("grammar: the matcher hit a bound earlier");
        return -1;
    }
    for (size_t i = 0; i < n && !st->dead; i++) {
        uint8_t x = b[i];
        if (st->u8_need == 0) {
            if (x < 0x80) {
                int rc = step_char(st, x);
                if (rc < 0) return st->err = 1, -1;
                if (rc == 0) st->dead = 1;
                continue;
            }
            int need = (x & 0xE0) == 0xC0 ? 2 : (x & 0xF0) == 0xE0 ? 3 : (x & 0xF8) == 0xF0 ? 4 : 0;
            if (!need || x == 0xC0 || x == 0xC1 || x > 0xF4) {
                st->dead = 1;
                break;
            }
            st->u8[0] = x;
            st->u8_have = 1;
            st->u8_need = need;
        } else {
            if ((x & 0xC0) != 0x80) {
                st->dead = 1;
                break;
            }
            st->u8[st->u8_have++] = x;
        }
        if (st->u8_have < st->u8_need) {
            if (!partial_viable(st)) st->dead = 1;
            continue;
        }
        /* a whole multi-byte character */
        uint32_t c = st->u8[0] & (0x3F >> (st->u8_need - 1));
        for (int k = 1; k < st->u8_need; k++) c = c << 6 | (st->u8[k] & 0x3F);
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        int bad = c < min[st->u8_need] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF);
        st->u8_have = st->u8_need = 0;
        if (bad) {
            st->dead = 1;
            break;
        }
        int rc = step_char(st, c);
        if (rc < 0) return st->err = 1, -1;
        if (rc == 0) st->dead = 1;
    }
    if (st->dead) {
        st->cur.n = 0;
        st->cur.len = 0;
        st->u8_have = st->u8_need = 0;
    }
    return !st->dead;
}

int gr_can_end(const gr_state *st) {
    if (st->dead || st->u8_need) return 0;
    size_t off = 0;
    for (int k = 0; k < st->cur.n; k++) {
        if (st->cur.v[off] == 0) return 1;
        off += (size_t)st->cur.v[off] + 1;
    }
    return 0;
}

int gr_is_done(const gr_state *st) {
    if (st->dead || st->u8_need) return 0;
    size_t off = 0;
    int complete = 0;
    for (int k = 0; k < st->cur.n; k++) {
        int d = st->cur.v[off];
        if (d == 0) complete = 1;
        else {
            const gr_sym *y = &st->g->sym[st->cur.v[off + (size_t)d]];
            if (chars_meet(st->g, y, 0, 0x10FFFF)) return 0;
        }
        off += (size_t)d + 1;
    }
    return complete;
}

int gr_next_bytes(const gr_state *st, gr_state *t, uint8_t allowed[256]) {
    int rc = 0;
    for (int b = 0; b < 256; b++) {
        gr_state_copy(t, st);
        uint8_t x = (uint8_t)b;
        int r = gr_feed(t, &x, 1);
        if (r < 0) {
            rc = -1;
            break;
        }
        allowed[b] = (uint8_t)r;
    }
    return rc;
}
