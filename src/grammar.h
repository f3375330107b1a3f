/* grammar.h - constrained decoding: GBNF grammars and a matcher over the
 * UTF-8 bytes of tokens; JSON Schema to GBNF. Prefix: gr_.
 *
 * The format is llama.cpp's GBNF: rules `name ::= alternatives`, string
 * literals "..." (escapes \n \r \t \\ \" \' \[ \] \- \^ \/ \xHH \uHHHH
 * \UHHHHHHHH), character classes [a-z0-9_] and [^...], `.` (any character),
 * grouping ( ), alternation |, repetition * + ? {m} {m,} {m,n}, comments
 * from # to the end of the line; the start rule is `root`. A rule may span
 * lines: it ends where the next `name ::=` begins. Characters are Unicode
 * code points; the matcher decodes the bytes it is fed and holds a partial
 * UTF-8 sequence across calls (tokens split characters).
 *
 * Checked at parse time, each an error naming the rule and line: a syntax
 * error, a rule used but not defined, a rule defined twice, no `root`, an
 * empty grammar, left recursion (a rule that can reach itself without
 * consuming input), a rule that can never finish (no alternative derives a
 * finite string), and the size limits below. So every live matcher state can
 * still be completed, and matching never loops.
 *
 * The matcher is a pushdown automaton run on a set of stacks (one per way
 * the input so far can be parsed): each stack holds the positions still to
 * match, the top being a character set. A byte that no stack accepts kills
 * the state. Bounds: GR_MAX_STACKS stacks, GR_MAX_DEPTH positions per
 * stack and GR_MAX_EXPAND expansion steps per character; reaching one is an error (-1 with a message), never a silently
 * different language. */
#ifndef DFL_GRAMMAR_H
#define DFL_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

enum {
    GR_MAX_TEXT = 1 << 20,     /* grammar text bytes */
    GR_MAX_SYMBOLS = 1 << 18,  /* symbols after expanding repetitions */
    GR_MAX_RULES = 1 << 15,    /* rules, the ones made for groups and repetitions included */
    GR_MAX_REPEAT = 4096,      /* the m and n of {m,n} */
    GR_MAX_NESTING = 128,      /* nested parentheses */
    GR_MAX_STACKS = 1024,      /* parse stacks one state may hold */
    GR_MAX_DEPTH = 512,        /* positions on one stack (nesting of the text being matched) */
    GR_MAX_EXPAND = 1 << 16,   /* expansion steps for one character (a backstop: each stack popped
                                  to is expanded once per character) */
};

typedef struct gr_grammar gr_grammar;
typedef struct gr_state gr_state;

/* Parse and check text[0..len). NULL + dfl_seterr("grammar: line L: ...") on
 * any error. */
gr_grammar *gr_parse(const char *text, size_t len);
void gr_free(gr_grammar *g);
int gr_n_rules(const gr_grammar *g); /* rules, generated ones included (tests) */

/* A matcher state at the start of root. It references g (which must
 * outlive it). NULL + error if the start alone exceeds a bound. */
gr_state *gr_state_new(const gr_grammar *g);
void gr_state_free(gr_state *s);
/* dst = src (both of the same grammar). */
void gr_state_copy(gr_state *dst, const gr_state *src);

/* Advance over bytes b[0..n): 1 if the input so far is still the prefix of
 * some string of the language (a partial UTF-8 character at the end counts
 * when some character it can become is accepted), 0 if not (the state is
 * then dead: every later feed returns 0), -1 + error when a bound is hit. */
int gr_feed(gr_state *s, const void *b, size_t n);
/* 1 if the input so far is a whole string of the language (root complete,
 * no partial character held). */
int gr_can_end(const gr_state *s);
/* 1 if no further byte can be accepted (a complete state with nothing more:
 * generation must end here). */
int gr_is_done(const gr_state *s);
/* allowed[b] = 1 if byte b can come next; scratch: any state of the same
 * grammar (overwritten). -1 + error on a bound. */
int gr_next_bytes(const gr_state *s, gr_state *scratch, uint8_t allowed[256]);

/* JSON Schema (a JSON text) to GBNF text (malloc'd). Supported: type
 * (object, array, string, number, integer, boolean, null, or a list of
 * them), properties, required, additionalProperties (false or absent:
 * only the listed properties, in their order, the required ones present),
 * items, minItems, maxItems, enum, const, anyOf, oneOf, $ref to #/$defs/NAME
 * or #/definitions/NAME; ignored annotations: title, description, $schema,
 * $id, default, examples, $comment, format, strict. Anything else is
 * refused: NULL + dfl_seterr naming the keyword and its JSON path, e.g.
 * "json_schema: unsupported keyword 'pattern' at #/properties/name". The
 * output allows white space between JSON tokens (rule ws: nothing, a
 * space, or a newline and up to 16 spaces or tabs); numbers have at most
 * 16 digits in the integral and fractional parts, 3 in the exponent. */
char *gr_from_json_schema(const char *schema, size_t len);
/* The GBNF of any JSON object at the top level ({"type":"json_object"}). */
const char *gr_json_object_gbnf(void);

#endif
