/* test_grammar.c - the GBNF parser's errors, the matcher on accepted and
 * rejected strings (fed whole, byte by byte and split inside UTF-8
 * characters), the bounds, and JSON Schema -> GBNF against hand-checked
 * strings and by matching JSON texts with the converted grammar. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "grammar.h"
#include "util.h"

static gr_grammar *parse(const char *s) { return gr_parse(s, strlen(s)); }

/* 1 accepted as a whole string, 0 rejected or only a prefix; the feed in
 * pieces of `step` bytes must agree with the whole feed. */
static int matches_step(const gr_grammar *g, const char *s, size_t step) {
    gr_state *st = gr_state_new(g);
    if (!st) return -1;
    size_t n = strlen(s);
    int live = 1;
    for (size_t i = 0; i < n && live == 1; i += step) live = gr_feed(st, s + i, i + step <= n ? step : n - i);
    int r = live == 1 ? gr_can_end(st) : live < 0 ? -1 : 0;
    gr_state_free(st);
    return r;
}

static int matches(const gr_grammar *g, const char *s) {
    int whole = matches_step(g, s, strlen(s) ? strlen(s) : 1);
    int bytes = matches_step(g, s, 1), threes = matches_step(g, s, 3);
    CHECK(whole == bytes && whole == threes, "'%s': whole %d, bytes %d, 3-byte pieces %d", s, whole, bytes, threes);
    return whole;
}

/* 1 if s is a prefix the grammar can continue (fed whole). */
static int live_prefix(const gr_grammar *g, const char *s) {
    gr_state *st = gr_state_new(g);
    int r = gr_feed(st, s, strlen(s));
    gr_state_free(st);
    return r;
}

TEST(parse_errors) {
    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"", "empty"},
        {"   # only a comment\n", "empty"},
        {"root ::= foo", "rule 'foo' is used but not defined"},
        {"root ::= \"a\"\nroot ::= \"b\"", "rule 'root' is defined twice"},
        {"item ::= \"a\"", "no rule 'root'"},
        {"root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive"},
        {"root ::= a\na ::= b \"x\"\nb ::= \"\" | a", "left-recursive"},
        {"root ::= (\"a\"?)*", "left recursion through 'root'"},
        {"root ::= \"a\" root", "rule 'root' can never finish"},
        {"root ::= \"abc", "unterminated string literal"},
        {"root ::= [a-", "unterminated character class"},
        {"root ::= [z-a]", "end before its start"},
        {"root ::= []", "empty character class"},
        {"root ::= \"\\q\"", "unknown escape \\q"},
        {"root ::= \"\\x4\"", "\\x needs hexadecimal digits"},
        {"root ::= (\"a\"", "expected ) to close a group"},
        {"root ::= \"a\")", "unmatched )"},
        {"root ::= \"a\"{3,1}", "n < m"},
        {"root ::= \"a\"{99999}", "above 4096"},
        {"root ::= \"a\" @", "unexpected character '@'"},
        {"root \"a\"", "expected ::="},
        {"::= \"a\"", "expected a rule name"},
        {"root ::= \"\"*", "repetition of an empty string"},
        {"root ::= \"\xff\"", "invalid UTF-8"},
        {"root ::= \"a\"\nx ::= y", "line 2: rule 'y' is used but not defined"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gr_grammar *g = parse(bad[i].text);
        CHECK(!g && strstr(dfl_lasterr(), bad[i].needle), "'%s': %s, error '%s', want '%s'", bad[i].text,
              g ? "parsed" : "refused", g ? "" : dfl_lasterr(), bad[i].needle);
        CHECK(!g || !strncmp(dfl_lasterr(), "grammar: ", 9), "message prefix: %s", dfl_lasterr());
        gr_free(g);
    }
    /* too large: nested repetitions multiply */
    /* too large: 70 repetitions of 4096 copies */
    char *big = malloc(70 * 12 + 16);
    strcpy(big, "root ::= ");
    for (int i = 0; i < 70; i++) strcat(big, "\"a\"{4096} ");
    gr_grammar *g = parse(big);
    CHECK(!g && strstr(dfl_lasterr(), "too large"), "huge: %s", g ? "parsed" : dfl_lasterr());
    gr_free(g);
    free(big);
    /* deep parentheses */
    char deep[600] = "root ::= ";
    for (int i = 0; i < 200; i++) strcat(deep, "(");
    g = parse(deep);
    CHECK(!g && strstr(dfl_lasterr(), "nested more than 128"), "deep: %s", g ? "parsed" : dfl_lasterr());
    gr_free(g);
}

TEST(matcher_basics) {
    gr_grammar *g = parse("# a comment\nroot ::= \"ab\" [0-9]+ (\"x\" | \"yz\")? tail\ntail ::= \"!\"{1,3}\n");
    CHECK(g != NULL, "parse: %s", dfl_lasterr());
    if (!g) return;
    CHECK(matches(g, "ab1!") == 1, "ab1!");
    CHECK(matches(g, "ab123yz!!!") == 1, "ab123yz!!!");
    CHECK(matches(g, "ab9x!!") == 1, "ab9x!!");
    CHECK(matches(g, "ab!") == 0, "needs a digit");
    CHECK(matches(g, "ab1!!!!") == 0, "four !");
    CHECK(matches(g, "ab1y!") == 0, "y without z");
    CHECK(matches(g, "ab12") == 0, "a prefix is not a whole string");
    CHECK(live_prefix(g, "ab12") == 1, "ab12 is a live prefix");
    CHECK(live_prefix(g, "ac") == 0, "ac is dead");
    gr_free(g);
    /* classes, negation, dot, escapes, repetition counts */
    g = parse("root ::= [^\"\\\\] . \"\\n\\t\\x41\\u00e9\" [a-cx-z]{2} [\\]\\-]{0,2}");
    CHECK(g != NULL, "parse: %s", dfl_lasterr());
    if (g) {
        CHECK(matches(g, "q\xe2\x82\xac\n\tA\xc3\xa9" "az]-") == 1, "full");
        CHECK(matches(g, "q!\n\tA\xc3\xa9" "cc") == 1, "no tail");
        CHECK(matches(g, "\"!\n\tA\xc3\xa9" "cc") == 0, "negated class");
        CHECK(matches(g, "q!\n\tA\xc3\xa9" "cd") == 0, "d not in class");
        CHECK(matches(g, "q!\n\tA\xc3\xa9" "cc]]]") == 0, "{0,2}");
        gr_free(g);
    }
    /* a rule spanning lines, alternatives on later lines */
    g = parse("root ::=\n  \"{\" ws (\n    item (\",\" ws item)*\n  )? \"}\"\nitem ::= [0-9]\n  | \"n\"\nws ::= [ ]*\n");
    CHECK(g != NULL, "multi-line parse: %s", dfl_lasterr());
    if (g) {
        CHECK(matches(g, "{ 1,n, 2}") == 1, "list");
        CHECK(matches(g, "{}") == 1, "empty list");
        CHECK(matches(g, "{1,}") == 0, "trailing comma");
        gr_free(g);
    }
    /* chained operators apply to the whole item before them: x{2}? is (x x)?;
     * x{0} leaves nothing to repeat (fuzz_grammar found a read before the
     * sequence: the second operator took the symbol before the item) */
    g = parse("root ::= \"a\" \"b\"{2}? \"c\"");
    CHECK(g != NULL, "x{2}? parse: %s", dfl_lasterr());
    if (g) {
        CHECK(matches(g, "ac") == 1 && matches(g, "abbc") == 1, "x{2}?: none or both");
        CHECK(matches(g, "abc") == 0, "x{2}?: not one");
        gr_free(g);
    }
    /* a repeated empty item is refused (it could match nothing forever), not read out of bounds */
    g = parse("root ::= \"b\"{0}* \"c\"");
    CHECK(!g && strstr(dfl_lasterr(), "can match nothing"), "x{0}*: %s", g ? "parsed" : dfl_lasterr());
    gr_free(g);
    g = parse("root ::= \"a\" \"b\"{0}+ \"c\"");
    CHECK(!g && strstr(dfl_lasterr(), "can match nothing"), "x{0}+ after an item: %s", g ? "parsed" : dfl_lasterr());
    gr_free(g);
}

/* UTF-8: a character split over feeds, invalid and overlong bytes, a class
 * of multi-byte characters checked on a partial character. */
TEST(utf8_split) {
    gr_grammar *g = parse("root ::= [\\u00e0-\\u00ff] \"\xe2\x82\xac\" [\\U0001F600-\\U0001F64F]");
    CHECK(g != NULL, "parse: %s", dfl_lasterr());
    if (!g) return;
    const char *ok = "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"; /* é € 😀 */
    for (size_t cut = 0; cut <= strlen(ok); cut++) {
        gr_state *st = gr_state_new(g);
        int a = gr_feed(st, ok, cut), b = gr_feed(st, ok + cut, strlen(ok) - cut);
        CHECK(a == 1 && b == 1 && gr_can_end(st), "cut at %zu: %d %d end %d", cut, a, b, gr_can_end(st));
        gr_state_free(st);
    }
    gr_state *st = gr_state_new(g);
    CHECK(gr_feed(st, "\xc3", 1) == 1 && !gr_can_end(st), "a lead byte of an accepted range is live, not an end");
    gr_state_free(st);
    CHECK(live_prefix(g, "\xc2") == 0, "lead byte C2 only reaches U+0080..U+00BF: none in the class");
    CHECK(live_prefix(g, "\xc3\xa9\xe2\x82") == 1, "partial euro sign");
    CHECK(live_prefix(g, "\xc3\xa9\xe2\x83") == 0, "partial of another character");
    CHECK(live_prefix(g, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x99") == 1, "partial emoji in range");
    CHECK(live_prefix(g, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x9a") == 0, "partial emoji past the range");
    CHECK(live_prefix(g, "\x80") == 0, "a lone continuation byte");
    CHECK(live_prefix(g, "\xc1\xa9") == 0, "overlong");
    gr_free(g);
    g = parse("root ::= .*");
    st = gr_state_new(g);
    uint8_t allowed[256];
    gr_state *tmp = gr_state_new(g);
    CHECK(gr_next_bytes(st, tmp, allowed) == 0, "next bytes");
    int n_ok = 0;
    for (int b = 0; b < 256; b++) n_ok += allowed[b];
    /* 0x00..0x7F, C2..DF, E0..EF, F0..F4 */
    CHECK(n_ok == 128 + 30 + 16 + 5, "any character: %d first bytes allowed", n_ok);
    CHECK(gr_feed(st, "\xed\xa0", 2) == 0, "a surrogate's bytes are dead");
    gr_state_free(st);
    gr_state_free(tmp);
    gr_free(g);
}

TEST(done_and_bounds) {
    gr_grammar *g = parse("root ::= \"yes\" | \"no\" | \"nope\"");
    gr_state *st = gr_state_new(g);
    CHECK(gr_feed(st, "no", 2) == 1 && gr_can_end(st) && !gr_is_done(st), "no: end possible, nope continues");
    CHECK(gr_feed(st, "pe", 2) == 1 && gr_can_end(st) && gr_is_done(st), "nope: done");
    CHECK(gr_feed(st, "x", 1) == 0 && !gr_can_end(st), "nothing after done");
    gr_state_free(st);
    gr_free(g);
    /* nesting bound: an error, not a rejection */
    g = parse("root ::= \"[\" root \"]\" | \"x\"");
    st = gr_state_new(g);
    int rc = 1;
    for (int i = 0; i < 2 * GR_MAX_DEPTH && rc == 1; i++) rc = gr_feed(st, "[", 1);
    CHECK(rc == -1 && strstr(dfl_lasterr(), "deeper than"), "depth: rc %d, %s", rc, dfl_lasterr());
    gr_state_free(st);
    gr_free(g);
    /* stack bound: 2000 ways to place the first x */
    g = parse("root ::= (\"x\"?){0,2000}");
    CHECK(g != NULL, "parse: %s", dfl_lasterr());
    st = g ? gr_state_new(g) : NULL;
    CHECK(!st && strstr(dfl_lasterr(), "more than 1024 parse stacks"), "ambiguous: %s", st ? "no error" : dfl_lasterr());
    gr_state_free(st);
    gr_free(g);
    /* empty paths that multiply (2^40 ways to match nothing): each stack
     * popped to is expanded once, so this is quick and exact */
    g = parse("root ::= e{40} \"b\" e{40} \"c\"\ne ::= \"\" | \"\" | \"x\"");
    CHECK(g != NULL, "parse: %s", dfl_lasterr());
    if (g) {
        CHECK(matches(g, "bc") == 1 && matches(g, "xxbxc") == 1 && matches(g, "xb") == 0, "exponential empty paths");
        gr_free(g);
    }
    /* ambiguity that dedup keeps small */
    g = parse("root ::= (\"x\" | \"x\" | [x])*");
    st = gr_state_new(g);
    rc = 1;
    for (int i = 0; i < 3000 && rc == 1; i++) rc = gr_feed(st, "x", 1);
    CHECK(rc == 1 && gr_can_end(st), "duplicates merge: rc %d %s", rc, dfl_lasterr());
    gr_state_free(st);
    gr_free(g);
    /* right recursion does not deepen the stack */
    g = parse("root ::= \"a\" root | \"b\"");
    st = gr_state_new(g);
    rc = 1;
    for (int i = 0; i < 5000 && rc == 1; i++) rc = gr_feed(st, "a", 1);
    CHECK(rc == 1 && gr_feed(st, "b", 1) == 1 && gr_can_end(st), "long right recursion: %d %s", rc, dfl_lasterr());
    gr_state_free(st);
    gr_free(g);
}

/* The GBNF of a schema up to the shared JSON rules. */
static char *schema_rules(const char *schema) {
    char *s = gr_from_json_schema(schema, strlen(schema));
    char *e = s ? strstr(s, "json-value ::=") : NULL;
    if (e) *e = 0;
    return s;
}

static int schema_matches(const char *schema, const char *json) {
    char *s = gr_from_json_schema(schema, strlen(schema));
    gr_grammar *g = s ? gr_parse(s, strlen(s)) : NULL;
    int r = g ? matches(g, json) : -1;
    gr_free(g);
    free(s);
    return r;
}

/* Hand-checked conversions: an object with a required and an optional
 * property (first_k / rest_k rules), an array of an enum with bounds,
 * anyOf with a $ref to a list of types. */
TEST(schema_strings) {
    static const struct {
        const char *schema, *want;
    } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"const\":\"x\\\"y\"}},\"required\":[\"a\"]}",
         "root ::= s11\n"
         "s9 ::= json-integer\n"
         "s0 ::= \"\\\"a\\\"\" ws \":\" ws s9 ws\n"
         "s3 ::= s0 s7\n"
         "s6 ::= \",\" ws s0 s7\n"
         "s10 ::= \"\\\"x\\\\\\\"y\\\"\"\n"
         "s1 ::= \"\\\"b\\\"\" ws \":\" ws s10 ws\n"
         "s4 ::= s1 s8 | s5\n"
         "s7 ::= \",\" ws s1 s8 | s8\n"
         "s5 ::= \"\"\n"
         "s8 ::= \"\"\n"
         "s11 ::= \"{\" ws s3 \"}\"\n"},
        {"{\"type\":\"array\",\"items\":{\"enum\":[1,\"two\",null]},\"minItems\":1,\"maxItems\":3}",
         "root ::= s1\n"
         "s0 ::= \"1\" | \"\\\"two\\\"\" | \"null\"\n"
         "s1 ::= \"[\" ws s0 ws ( \",\" ws s0 ws ){0,2} \"]\"\n"},
        {"{\"anyOf\":[{\"type\":\"string\"},{\"$ref\":\"#/$defs/n\"}],\"$defs\":{\"n\":{\"type\":[\"number\",\"null\"]}}}",
         "root ::= s2\n"
         "s0 ::= json-string\n"
         "s1 ::= ( json-number ) | ( json-null )\n"
         "def-0 ::= s1\n"
         "s2 ::= s0 | def-0\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = schema_rules(cases[i].schema);
        CHECK(got && !strcmp(got, cases[i].want), "schema %zu:\n%s\nwant:\n%s", i, got ? got : dfl_lasterr(), cases[i].want);
        free(got);
    }
    const char *obj = cases[0].schema;
    CHECK(schema_matches(obj, "{\"a\": 5, \"b\": \"x\\\"y\"}") == 1, "a and b");
    CHECK(schema_matches(obj, "{\"a\":-12}") == 1, "a only");
    CHECK(schema_matches(obj, "{ \"a\" : 0 }") == 1, "spaces");
    CHECK(schema_matches(obj, "{\"b\": \"x\\\"y\"}") == 0, "a is required");
    CHECK(schema_matches(obj, "{\"a\": 1, \"c\": 2}") == 0, "no other properties");
    CHECK(schema_matches(obj, "{\"a\": 1.5}") == 0, "integer");
    CHECK(schema_matches(obj, "{\"a\": 01}") == 0, "no leading zero");
    CHECK(schema_matches(obj, "{\"a\": 1, \"b\": \"z\"}") == 0, "const");
    CHECK(schema_matches(cases[1].schema, "[]") == 0, "minItems 1");
    CHECK(schema_matches(cases[1].schema, "[1, \"two\", null]") == 1, "three items");
    CHECK(schema_matches(cases[1].schema, "[1,1,1,1]") == 0, "maxItems 3");
    CHECK(schema_matches(cases[2].schema, "-1.5e+10") == 1 && schema_matches(cases[2].schema, "\"\\u00e9\"") == 1 &&
          schema_matches(cases[2].schema, "true") == 0, "anyOf");
    /* recursion through $defs, json_object */
    const char *tree = "{\"$ref\":\"#/$defs/t\",\"$defs\":{\"t\":{\"type\":\"object\",\"properties\":{\"kids\":"
                       "{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/t\"}}}}}}";
    CHECK(schema_matches(tree, "{\"kids\":[{},{\"kids\":[{}]}]}") == 1, "recursive schema");
    gr_grammar *g = gr_parse(gr_json_object_gbnf(), strlen(gr_json_object_gbnf()));
    CHECK(g && matches(g, "{\"a\": [1, {\"b\": null}], \"c\": \"\\n\"}") == 1 && matches(g, "[1]") == 0 &&
          matches(g, "{\"a\" 1}") == 0, "json_object grammar");
    gr_free(g);
}

/* Refusals name the keyword and where it is. */
TEST(schema_errors) {
    static const struct {
        const char *schema, *needle;
    } bad[] = {
        {"{\"type\":\"string\",\"pattern\":\"a\"}", "unsupported keyword 'pattern' at #"},
        {"{\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":1}}}", "unsupported keyword 'minimum' at #/properties/n"},
        {"{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":2}}", "'minLength' at #/items"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":{\"type\":\"string\"}}", "additionalProperties"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "required property 'b' is not in properties"},
        {"{\"type\":\"uuid\"}", "unknown type 'uuid' at #/type"},
        {"{\"$ref\":\"http://x/y\"}", "is not of the form"},
        {"{\"$ref\":\"#/$defs/q\"}", "names no definition"},
        {"{\"enum\":[]}", "enum must be a non-empty array"},
        {"{\"type\":\"array\",\"maxItems\":-1}", "maxItems must be a non-negative integer"},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "maxItems below minItems"},
        {"false", "matches nothing"},
        {"[1]", "must be an object or a boolean"},
        {"{\"type\":", "not valid JSON"},
        {"{\"$ref\":\"#/$defs/a\",\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"}]}}}", "can never finish"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *s = gr_from_json_schema(bad[i].schema, strlen(bad[i].schema));
        CHECK(!s && strstr(dfl_lasterr(), bad[i].needle) && !strncmp(dfl_lasterr(), "json_schema", 11),
              "%s: %s, want '%s'", bad[i].schema, s ? s : dfl_lasterr(), bad[i].needle);
        free(s);
    }
    /* deep nesting: refused, not a stack overflow */
    char deep[8192] = "";
    for (int i = 0; i < 500; i++) strcat(deep, "{\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 500; i++) strcat(deep, "}");
    char *s = gr_from_json_schema(deep, strlen(deep));
    CHECK(!s && strstr(dfl_lasterr(), "nested more than 64"), "deep: %s", s ? "converted" : dfl_lasterr());
    free(s);
}

int main(void) {
    RUN(parse_errors);
    RUN(matcher_basics);
    RUN(utf8_split);
    RUN(done_and_bounds);
    RUN(schema_strings);
    RUN(schema_errors);
    CHECK_DONE("test_grammar");
}
