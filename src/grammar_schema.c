/* grammar_schema.c - JSON Schema to GBNF (gr_from_json_schema, grammar.h).
 *
 * The output is a GBNF text: the shared JSON rules (json-string,
 * json-number, ... and ws: nothing, a space, or a newline and up to 16
 * spaces or tabs between tokens) and one rule per schema node, named s0, s1, ... (def-N for
 * $defs / definitions entries, made once each, so recursive schemas become
 * recursive rules); root is the top node's rule. Each schema node becomes:
 *   const / enum        the values' compact JSON text as literals
 *   anyOf / oneOf       alternatives (oneOf's exclusivity is not enforced)
 *   string, number, integer, boolean, null: the JSON rules (numbers have at
 *                       most 16 digits in their integral and fractional parts)
 *   array               "[" items, minItems..maxItems of them "]"
 *   object              "{" the properties in their listed order, each
 *                       required one present, optional ones omissible, no
 *                       others (additionalProperties false or absent) "}";
 *                       no properties: any JSON object
 * A list of types is an alternative per type. Keywords outside this set
 * are refused by name and path (pattern, minLength, minimum, ...), so a
 * schema is never silently weakened; pure annotations are ignored. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "grammar.h"
#include "util.h"

enum { SCHEMA_MAX_DEPTH = 64 };

static const char json_rules[] =
    "json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null\n"
    "json-object ::= \"{\" ws ( json-string ws \":\" ws json-value ws ( \",\" ws json-string ws \":\" ws json-value ws )* )? \"}\"\n"
    "json-array ::= \"[\" ws ( json-value ws ( \",\" ws json-value ws )* )? \"]\"\n"
    "json-string ::= \"\\\"\" json-char* \"\\\"\"\n"
    "json-char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "json-int-part ::= \"0\" | [1-9] [0-9]{0,15}\n"
    "json-integer ::= \"-\"? json-int-part\n"
    "json-number ::= \"-\"? json-int-part ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n"
    "json-boolean ::= \"true\" | \"false\"\n"
    "json-null ::= \"null\"\n"
    "ws ::= ( \" \" | \"\\n\" [ \\t]{0,16} )?\n";

const char *gr_json_object_gbnf(void) {
    static char text[sizeof json_rules + 32];
    if (!text[0]) snprintf(text, sizeof text, "root ::= json-object\n%s", json_rules);
    return text;
}

/* s[0..n) as a GBNF string literal (quotes included). */
static void sb_literal(dfl_buf *b, const char *s, size_t n) {
    dfl_buf_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)s[i];
        if (c == '"') dfl_buf_add(b, "\\\"", 2);
        else if (c == '\\') dfl_buf_add(b, "\\\\", 2);
        else if (c == '\n') dfl_buf_add(b, "\\n", 2);
        else if (c < 0x20 || c == 0x7f) dfl_buf_printf(b, "\\x%02x", c);
        else dfl_buf_add(b, (const char *)&c, 1);
    }
    dfl_buf_add(b, "\"", 1);
}

typedef struct {
    dfl_buf out;       /* the rules */
    const cJSON *root; /* the whole schema ($ref targets) */
    int n_rules;
    struct {
        const cJSON *node;
        int id;
    } defs[256];
    int n_defs;
} conv;

static int cv_err(const char *path, const char *fmt, const char *arg) {
    char msg[256];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    dfl_seterr("json_schema: %s at %s", msg, path[0] ? path : "#");
    return -1;
}

static int gen(conv *c, const cJSON *node, const char *path, int depth, char *name, size_t name_size);

/* path + "/" + key, into buf */
static const char *sub_path(char *buf, size_t size, const char *path, const char *key) {
    snprintf(buf, size, "%s/%s", path[0] ? path : "#", key);
    return buf;
}

/* The compact JSON text of v as a literal. */
static void put_value_literal(conv *c, const cJSON *v) {
    char *t = cJSON_PrintUnformatted(v);
    sb_literal(&c->out, t, strlen(t));
    free(t);
}

static int is_annotation(const char *k) {
    static const char *const ann[] = {"title", "description", "$schema", "$id", "default", "examples",
                                      "$comment", "format", "strict", "$defs", "definitions", "readOnly",
                                      "writeOnly", "deprecated"};
    for (size_t i = 0; i < sizeof ann / sizeof ann[0]; i++)
        if (!strcmp(k, ann[i])) return 1;
    return 0;
}

static int is_supported(const char *k) {
    static const char *const kw[] = {"type", "properties", "required", "additionalProperties", "items",
                                     "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "$ref"};
    for (size_t i = 0; i < sizeof kw / sizeof kw[0]; i++)
        if (!strcmp(k, kw[i])) return 1;
    return is_annotation(k);
}

static int new_rule(conv *c, char *name, size_t size) {
    snprintf(name, size, "s%d", c->n_rules++);
    return 0;
}

static int count_of(const cJSON *n, const char *key, const char *path, long *v, long dflt) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(n, key);
    *v = dflt;
    if (!x) return 0;
    char p[512];
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0) || x->valuedouble != floor(x->valuedouble))
        return cv_err(sub_path(p, sizeof p, path, key), "%s must be a non-negative integer", key);
    if (x->valuedouble > GR_MAX_REPEAT) return cv_err(sub_path(p, sizeof p, path, key), "%s above 4096", key);
    *v = (long)x->valuedouble;
    return 0;
}

static int gen_array(conv *c, const cJSON *n, const char *path, int depth, dfl_buf *body) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(n, "items");
    char item[32] = "json-value", p[512];
    if (items) {
        if (cJSON_IsArray(items)) return cv_err(sub_path(p, sizeof p, path, "items"), "items as a list (tuples) is not supported%s", NULL);
        if (gen(c, items, sub_path(p, sizeof p, path, "items"), depth + 1, item, sizeof item) != 0) return -1;
    }
    long mn, mx;
    if (count_of(n, "minItems", path, &mn, 0) != 0 || count_of(n, "maxItems", path, &mx, -1) != 0) return -1;
    if (mx >= 0 && mx < mn) return cv_err(path, "maxItems below minItems%s", NULL);
    if (mx == 0) {
        dfl_buf_printf(body, "\"[\" ws \"]\"");
        return 0;
    }
    dfl_buf_printf(body, "\"[\" ws ");
    if (mn == 0) dfl_buf_printf(body, "( ");
    dfl_buf_printf(body, "%s ws ( \",\" ws %s ws )", item, item);
    long lo = mn > 0 ? mn - 1 : 0;
    if (mx < 0) dfl_buf_printf(body, lo ? "{%ld,}" : "*", lo);
    else dfl_buf_printf(body, "{%ld,%ld}", lo, mx - 1);
    if (mn == 0) dfl_buf_printf(body, " )?");
    dfl_buf_printf(body, " \"]\"");
    return 0;
}

static int gen_object(conv *c, const cJSON *n, const char *path, int depth, dfl_buf *body) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(n, "properties"),
                *req = cJSON_GetObjectItemCaseSensitive(n, "required"),
                *add = cJSON_GetObjectItemCaseSensitive(n, "additionalProperties");
    char p[512], p2[768];
    if (props && !cJSON_IsObject(props)) return cv_err(sub_path(p, sizeof p, path, "properties"), "properties must be an object%s", NULL);
    if (req && !cJSON_IsArray(req)) return cv_err(sub_path(p, sizeof p, path, "required"), "required must be an array of names%s", NULL);
    int n_props = props ? cJSON_GetArraySize(props) : 0;
    if (add && !cJSON_IsFalse(add) && !(cJSON_IsTrue(add) && n_props == 0))
        return cv_err(sub_path(p, sizeof p, path, "additionalProperties"),
                      "additionalProperties other than false (or true with no properties) is not supported%s", NULL);
    /* every required name must be a property */
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) return cv_err(sub_path(p, sizeof p, path, "required"), "required must be an array of names%s", NULL);
        if (!props || !cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
            return cv_err(sub_path(p, sizeof p, path, "required"), "required property '%s' is not in properties", r->valuestring);
    }
    if (n_props == 0) {
        dfl_buf_printf(body, "json-object");
        return 0;
    }
    /* member rules M_k, then first_k / rest_k (see the comment at the top of gen_object's callers) */
    int base = c->n_rules;
    c->n_rules += 3 * (n_props + 1);
    int k = 0;
    for (const cJSON *pr = props->child; pr; pr = pr->next, k++) {
        char val[32];
        sub_path(p, sizeof p, path, "properties");
        snprintf(p2, sizeof p2, "%s/%s", p, pr->string);
        if (gen(c, pr, p2, depth + 1, val, sizeof val) != 0) return -1;
        int required = 0;
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next) required |= !strcmp(r->valuestring, pr->string);
        cJSON *key = cJSON_CreateString(pr->string);
        dfl_buf_printf(&c->out, "s%d ::= ", base + k); /* M_k: "key" ws ":" ws value ws */
        put_value_literal(c, key);
        cJSON_Delete(key);
        dfl_buf_printf(&c->out, " ws \":\" ws %s ws\n", val);
        int first = base + n_props + 1 + k, rest = base + 2 * (n_props + 1) + k;
        /* first_k: none emitted yet; rest_k: one at least, so a comma first */
        if (required) {
            dfl_buf_printf(&c->out, "s%d ::= s%d s%d\n", first, base + k, rest + 1);
            dfl_buf_printf(&c->out, "s%d ::= \",\" ws s%d s%d\n", rest, base + k, rest + 1);
        } else {
            dfl_buf_printf(&c->out, "s%d ::= s%d s%d | s%d\n", first, base + k, rest + 1, first + 1);
            dfl_buf_printf(&c->out, "s%d ::= \",\" ws s%d s%d | s%d\n", rest, base + k, rest + 1, rest + 1);
        }
    }
    dfl_buf_printf(&c->out, "s%d ::= \"\"\ns%d ::= \"\"\n", base + n_props + 1 + n_props, base + 2 * (n_props + 1) + n_props);
    dfl_buf_printf(body, "\"{\" ws s%d \"}\"", base + n_props + 1);
    return 0;
}

static int gen_type(conv *c, const cJSON *n, const char *type, const char *path, int depth, dfl_buf *body) {
    if (!strcmp(type, "string")) dfl_buf_printf(body, "json-string");
    else if (!strcmp(type, "number")) dfl_buf_printf(body, "json-number");
    else if (!strcmp(type, "integer")) dfl_buf_printf(body, "json-integer");
    else if (!strcmp(type, "boolean")) dfl_buf_printf(body, "json-boolean");
    else if (!strcmp(type, "null")) dfl_buf_printf(body, "json-null");
    else if (!strcmp(type, "array")) return gen_array(c, n, path, depth, body);
    else if (!strcmp(type, "object")) return gen_object(c, n, path, depth, body);
    else {
        char p[512];
        return cv_err(sub_path(p, sizeof p, path, "type"), "unknown type '%s'", type);
    }
    return 0;
}

/* The rule for schema node n into name. */
static int gen(conv *c, const cJSON *n, const char *path, int depth, char *name, size_t name_size) {
    char p[512];
    if (depth > SCHEMA_MAX_DEPTH) return cv_err(path, "nested more than 64 levels%s", NULL);
    if (cJSON_IsTrue(n)) {
        snprintf(name, name_size, "json-value");
        return 0;
    }
    if (cJSON_IsFalse(n)) return cv_err(path, "the schema false matches nothing%s", NULL);
    if (!cJSON_IsObject(n)) return cv_err(path, "a schema must be an object or a boolean%s", NULL);
    for (const cJSON *k = n->child; k; k = k->next)
        if (!is_supported(k->string)) return cv_err(path, "unsupported keyword '%s'", k->string);
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(n, "$ref");
    if (ref) {
        for (const cJSON *k = n->child; k; k = k->next)
            if (strcmp(k->string, "$ref") && !is_annotation(k->string))
                return cv_err(path, "keyword '%s' beside $ref is not supported", k->string);
        if (!cJSON_IsString(ref)) return cv_err(sub_path(p, sizeof p, path, "$ref"), "$ref must be a string%s", NULL);
        const char *r = ref->valuestring, *dname = NULL;
        const cJSON *defs = NULL;
        if (!strncmp(r, "#/$defs/", 8)) defs = cJSON_GetObjectItemCaseSensitive(c->root, "$defs"), dname = r + 8;
        else if (!strncmp(r, "#/definitions/", 14)) defs = cJSON_GetObjectItemCaseSensitive(c->root, "definitions"), dname = r + 14;
        else return cv_err(sub_path(p, sizeof p, path, "$ref"), "$ref '%s' is not of the form #/$defs/NAME or #/definitions/NAME", r);
        const cJSON *target = defs ? cJSON_GetObjectItemCaseSensitive(defs, dname) : NULL;
        if (!target) return cv_err(sub_path(p, sizeof p, path, "$ref"), "$ref '%s' names no definition", r);
        for (int i = 0; i < c->n_defs; i++)
            if (c->defs[i].node == target) {
                snprintf(name, name_size, "def-%d", c->defs[i].id);
                return 0;
            }
        if (c->n_defs >= 256) return cv_err(path, "more than 256 definitions referenced%s", NULL);
        int id = c->n_defs;
        c->defs[c->n_defs].node = target;
        c->defs[c->n_defs++].id = id;
        char inner[32], tp[512];
        snprintf(tp, sizeof tp, "%s", r);
        if (gen(c, target, tp, depth + 1, inner, sizeof inner) != 0) return -1;
        dfl_buf_printf(&c->out, "def-%d ::= %s\n", id, inner);
        snprintf(name, name_size, "def-%d", id);
        return 0;
    }
    dfl_buf body = {0};
    int rc = 0;
    const cJSON *cst = cJSON_GetObjectItemCaseSensitive(n, "const"), *en = cJSON_GetObjectItemCaseSensitive(n, "enum"),
                *any = cJSON_GetObjectItemCaseSensitive(n, "anyOf"), *one = cJSON_GetObjectItemCaseSensitive(n, "oneOf"),
                *type = cJSON_GetObjectItemCaseSensitive(n, "type");
    if (cst) {
        dfl_buf save = c->out;
        c->out = body;
        put_value_literal(c, cst);
        body = c->out;
        c->out = save;
    } else if (en) {
        if (!cJSON_IsArray(en) || !en->child) {
            rc = cv_err(sub_path(p, sizeof p, path, "enum"), "enum must be a non-empty array%s", NULL);
        } else {
            dfl_buf save = c->out;
            c->out = body;
            for (const cJSON *v = en->child; v; v = v->next) {
                if (v != en->child) dfl_buf_printf(&c->out, " | ");
                put_value_literal(c, v);
            }
            body = c->out;
            c->out = save;
        }
    } else if (any || one) {
        const cJSON *list = any ? any : one;
        const char *kw = any ? "anyOf" : "oneOf";
        if (any && one) rc = cv_err(path, "anyOf together with oneOf is not supported%s", NULL);
        else if (!cJSON_IsArray(list) || !list->child)
            rc = cv_err(sub_path(p, sizeof p, path, kw), "%s must be a non-empty array", kw);
        int i = 0;
        for (const cJSON *v = list->child; v && rc == 0; v = v->next, i++) {
            char sub[32], ip[600];
            snprintf(ip, sizeof ip, "%s/%s/%d", path[0] ? path : "#", kw, i);
            rc = gen(c, v, ip, depth + 1, sub, sizeof sub);
            if (rc == 0) dfl_buf_printf(&body, "%s%s", i ? " | " : "", sub);
        }
        for (const cJSON *k = n->child; k && rc == 0; k = k->next)
            if (strcmp(k->string, kw) && !is_annotation(k->string))
                rc = cv_err(path, "keyword '%s' beside anyOf/oneOf is not supported", k->string);
    } else if (cJSON_IsString(type)) {
        rc = gen_type(c, n, type->valuestring, path, depth, &body);
    } else if (cJSON_IsArray(type)) {
        int i = 0;
        for (const cJSON *t = type->child; t && rc == 0; t = t->next, i++) {
            if (!cJSON_IsString(t)) {
                rc = cv_err(sub_path(p, sizeof p, path, "type"), "type must be a string or an array of strings%s", NULL);
                break;
            }
            if (i) dfl_buf_printf(&body, " | ");
            dfl_buf_printf(&body, "( ");
            rc = gen_type(c, n, t->valuestring, path, depth, &body);
            dfl_buf_printf(&body, " )");
        }
        if (rc == 0 && i == 0) rc = cv_err(sub_path(p, sizeof p, path, "type"), "an empty list of types matches nothing%s", NULL);
    } else if (type) {
        rc = cv_err(sub_path(p, sizeof p, path, "type"), "type must be a string or an array of strings%s", NULL);
    } else if (cJSON_GetObjectItemCaseSensitive(n, "properties")) {
        rc = gen_object(c, n, path, depth, &body);
    } else if (cJSON_GetObjectItemCaseSensitive(n, "items")) {
        rc = gen_array(c, n, path, depth, &body);
    } else {
        dfl_buf_printf(&body, "json-value");
    }
    if (rc == 0 && body.failed) rc = -1; /* out of memory: the error is set */
    if (rc == 0) {
        new_rule(c, name, name_size);
        dfl_buf_printf(&c->out, "%s ::= %s\n", name, body.s ? body.s : "\"\"");
    }
    dfl_buf_free(&body);
    return rc;
}

char *gr_from_json_schema(const char *schema, size_t len) {
    cJSON *root = cJSON_ParseWithLength(schema, len);
    if (!root) {
        dfl_seterr("json_schema: not valid JSON");
        return NULL;
    }
    conv c = {.root = root};
    char top[32];
    if (gen(&c, root, "", 0, top, sizeof top) != 0 || c.out.failed) {
        cJSON_Delete(root);
        dfl_buf_free(&c.out);
        return NULL;
    }
    cJSON_Delete(root);
    dfl_buf all = {0};
    dfl_buf_printf(&all, "root ::= %s\n", top);
    dfl_buf_add(&all, c.out.s ? c.out.s : "", c.out.n);
    dfl_buf_add(&all, json_rules, strlen(json_rules));
    dfl_buf_free(&c.out);
    if (all.failed) {
        dfl_buf_free(&all);
        return NULL;
    }
    gr_grammar *g = gr_parse(all.s, all.n); /* e.g. a $ref cycle without input between: left recursion */
    if (!g) {
        dfl_preferr("json_schema");
        dfl_buf_free(&all);
        return NULL;
    }
    gr_free(g);
    return dfl_buf_take(&all);
}
