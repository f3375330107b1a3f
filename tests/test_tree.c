/* test_tree.c - exact tree verification (backend.h's tree rule, spec.h's
 * tree round).
 *
 * Backend level: every node of a random token tree verified in one forward
 * has the logits, argmax and taps plain decoding computes for the same
 * prefix, bit for bit; tree_commit keeps a path whose K/V then serve a decode
 * bit-identical to a fresh one; bad paths and models the rule excludes are
 * refused. Engine level: DFlash with --tree N (several budgets) emits exactly
 * plain decoding's tokens, greedy and temp 0.8, on the demo pair and the tiny
 * pair. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "dflash.h"
#include "model.h"
#include "sample.h"
#include "util.h"

static const char *root = ".";
static int slow = 1;
static void *bi;

static char *rpath(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", root, name);
    return buf[k];
}

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}

/* Chain forward of tok[0..n) on st with the last row's logits (lg [V]) and
 * every row's taps (tp [n][2][H]). */
static int chain(void *st, const int32_t *tok, int n, float *lg, const int *taps, float *tp) {
    be_batch b = {.T = n, .tokens = tok, .n_logits = 1, .logits = lg, .n_taps = 2, .tap_layers = taps};
    if (be_cpu.forward(st, &b) != 0) return -1;
    return be_cpu.taps(st, 0, n, tp);
}

/* A random tree of T nodes below a prefix of P tokens on model dir: node
 * rows against plain decoding, then tree_commit and decode after it. */
static void tree_rows_exact(const char *dir, int P, int T) {
    mdl_model m;
    if (mdl_load(&m, rpath(dir)) != 0 || be_cpu.prepare(bi, &m) != 0) {
        CHECK(0, "load %s: %s", dir, dfl_lasterr());
        return;
    }
    int V = m.cfg.vocab, H = m.cfg.hidden, L = m.cfg.n_layers;
    int taps[2] = {0, L - 1};
    void *st = be_cpu.create(bi, &m, 256), *ref = be_cpu.create(bi, &m, 256);
    int32_t pre[128], tok[64], path[130];
    int parent[64], depth[64];
    for (int i = 0; i < P; i++) pre[i] = (int32_t)(rnd() % (uint32_t)V);
    for (int t = 0; t < T; t++) { /* deep chains with side branches */
        parent[t] = t == 0 ? -1 : rnd() % 4 == 0 ? (int)(rnd() % (uint32_t)(t + 1)) - 1 : t - 1;
        depth[t] = parent[t] < 0 ? 0 : depth[parent[t]] + 1;
        tok[t] = (int32_t)(rnd() % (uint32_t)V);
    }
    float *lg = malloc(sizeof(float) * (size_t)T * V), *one = malloc(sizeof(float) * (size_t)V);
    float *tp = malloc(sizeof(float) * (size_t)T * 2 * H), *rtp = malloc(sizeof(float) * 130 * 2 * H);
    be_batch pb = {.T = P, .tokens = pre};
    CHECK(be_cpu.forward(st, &pb) == 0 && be_cpu.forward(ref, &pb) == 0, "%s: prefill: %s", dir, dfl_lasterr());
    be_batch tb = {.T = T, .tokens = tok, .n_logits = T, .logits = lg, .n_taps = 2, .tap_layers = taps, .keep_rows = 1,
                   .tree_parent = parent};
    int rc = be_cpu.forward(st, &tb);
    CHECK(rc == 0, "%s: tree forward: %s", dir, dfl_lasterr());
    if (rc == 0) CHECK(be_cpu.taps(st, 0, T, tp) == 0, "%s: taps: %s", dir, dfl_lasterr());
    int bad_l = 0, bad_t = 0, bad_a = 0;
    for (int t = 0; t < T && rc == 0; t++) {
        int n = depth[t] + 1;
        for (int u = t, d = depth[t]; d >= 0; u = parent[u], d--) path[d] = tok[u];
        be_cpu.truncate(ref, P);
        if (chain(ref, path, n, one, taps, rtp) != 0) {
            CHECK(0, "%s: chain: %s", dir, dfl_lasterr());
            break;
        }
        bad_l += memcmp(one, lg + (size_t)t * V, sizeof(float) * V) != 0;
        bad_t += memcmp(rtp + (size_t)(n - 1) * 2 * H, tp + (size_t)t * 2 * H, sizeof(float) * 2 * H) != 0;
        int32_t a;
        bad_a += be_cpu.argmax(st, t, 1, &a) != 0 || a != smp_argmax(one, V);
    }
    CHECK(bad_l == 0 && bad_t == 0 && bad_a == 0, "%s: of %d tree rows, %d logits, %d taps, %d argmax differ from "
          "plain decoding of the same prefix", dir, T, bad_l, bad_t, bad_a);
    /* keep the path to the deepest node */
    int deep = 0;
    for (int t = 0; t < T; t++) deep = depth[t] > depth[deep] ? t : deep;
    int n = depth[deep] + 1, rows[64];
    for (int u = deep, d = depth[deep]; d >= 0; u = parent[u], d--) rows[d] = u;
    for (int d = 0; d < n; d++) path[d] = tok[rows[d]];
    if (n >= 3) { /* a path with a gap is refused */
        int gap[2] = {rows[0], rows[2]};
        CHECK(be_cpu.tree_commit(st, gap, 2) != 0, "%s: a path skipping a node was accepted", dir);
    }
    int not_root = rows[1 < n ? 1 : 0];
    CHECK(n < 2 || be_cpu.tree_commit(st, &not_root, 1) != 0, "%s: a path not starting at a root was accepted", dir);
    CHECK(be_cpu.tree_commit(st, rows, n) == 0 && be_cpu.length(st) == P + n, "%s: tree_commit: %s", dir,
          dfl_lasterr());
    CHECK(be_cpu.taps(st, 0, n, tp) == 0, "%s: taps after commit: %s", dir, dfl_lasterr());
    be_cpu.truncate(ref, P);
    CHECK(chain(ref, path, n, one, taps, rtp) == 0, "chain");
    CHECK(!memcmp(tp, rtp, sizeof(float) * (size_t)n * 2 * H), "%s: taps after commit are not the path's", dir);
    /* decode 6 tokens after the commit; the same from a fresh sequence */
    int bad_d = 0;
    void *fresh = be_cpu.create(bi, &m, 256);
    memcpy(path + n, tok, sizeof(int32_t) * 6); /* any tokens */
    int32_t all[256];
    memcpy(all, pre, sizeof(int32_t) * (size_t)P);
    memcpy(all + P, path, sizeof(int32_t) * (size_t)(n + 6));
    be_batch fb = {.T = P + n, .tokens = all};
    CHECK(be_cpu.forward(fresh, &fb) == 0, "fresh prefill: %s", dfl_lasterr());
    for (int i = 0; i < 6; i++) {
        be_batch s1 = {.T = 1, .tokens = path + n + i, .n_logits = 1, .logits = one};
        be_batch s2 = {.T = 1, .tokens = path + n + i, .n_logits = 1, .logits = lg};
        CHECK(be_cpu.forward(st, &s1) == 0 && be_cpu.forward(fresh, &s2) == 0, "decode: %s", dfl_lasterr());
        bad_d += memcmp(one, lg, sizeof(float) * V) != 0;
    }
    CHECK(bad_d == 0, "%s: %d of 6 decode steps after tree_commit differ from a fresh sequence's", dir, bad_d);
    fprintf(stderr, "  %s: %d tree rows (depth %d) after %d tokens, committed %d: exact\n", dir, T, depth[deep], P, n);
    be_cpu.destroy(fresh);
    be_cpu.destroy(st);
    be_cpu.destroy(ref);
    free(lg);
    free(one);
    free(tp);
    free(rtp);
    be_cpu.release(bi, &m);
    mdl_free(&m);
}

TEST(tree_rows_qwen3) {
    tree_rows_exact("tests/models/tiny-qwen3", 50, 40);
    tree_rows_exact("tests/models/tiny-qwen3", 3, 64);
    tree_rows_exact("tests/models/tiny-qwen3-q8", 60, 33);
}

TEST(tree_rows_llama_moe_demo) {
    tree_rows_exact("tests/models/tiny-llama3", 20, 24);
    tree_rows_exact("tests/models/tiny-qwen3moe", 40, 30);
    tree_rows_exact("models/demo/target", 70, 64);
}

/* A model with recurrent layers refuses a tree batch, naming why. */
TEST(tree_refused_recurrent) {
    mdl_model m;
    if (mdl_load(&m, rpath("tests/models/tiny-qwen35")) != 0 || be_cpu.prepare(bi, &m) != 0) {
        CHECK(0, "load: %s", dfl_lasterr());
        return;
    }
    void *st = be_cpu.create(bi, &m, 64);
    int32_t tok[3] = {1, 2, 3};
    int parent[3] = {-1, 0, 0};
    be_batch b = {.T = 3, .tokens = tok, .keep_rows = 1, .tree_parent = parent};
    CHECK(be_cpu.forward(st, &b) != 0 && strstr(dfl_lasterr(), "Gated DeltaNet"), "qwen3.5 tree: %s", dfl_lasterr());
    int bad[3] = {-1, 1, 0};
    be_batch b2 = {.T = 3, .tokens = tok, .tree_parent = bad};
    CHECK(be_cpu.forward(st, &b2) != 0 && strstr(dfl_lasterr(), "parent"), "a parent after its child: %s",
          dfl_lasterr());
    be_cpu.destroy(st);
    be_cpu.release(bi, &m);
    mdl_free(&m);
}

/* The draft's top-k per slot: the best ids of its logits, best first (ties:
 * the lower id), top_ids[i][0] = out[i], log-probabilities of the softmax. */
TEST(draft_top_k) {
    dflash_params pp = dflash_default_params();
    mdl_model t, d;
    if (mdl_load(&t, rpath("models/demo/target")) != 0 || mdl_load(&d, rpath("models/demo/draft")) != 0 ||
        be_cpu.prepare(bi, &t) != 0 || be_cpu.prepare(bi, &d) != 0) {
        CHECK(0, "load demo pair: %s", dfl_lasterr());
        return;
    }
    (void)pp;
    void *st = be_cpu.create(bi, &t, 128), *ds = be_cpu.draft_create(bi, &d, &t, 128);
    int32_t pre[20];
    for (int i = 0; i < 20; i++) pre[i] = (int32_t)(rnd() % 4000);
    be_batch b = {.T = 20, .tokens = pre, .n_taps = d.cfg.n_taps, .tap_layers = d.cfg.tap_layers};
    CHECK(be_cpu.forward(st, &b) == 0 && be_cpu.draft_feed(ds, st, 0, 20) == 0, "prefill: %s", dfl_lasterr());
    enum { B = 16, NS = 15, K = 8, NV = 4096 };
    int32_t blk[B], out[NS], ids[NS * K], extra[1] = {t.cfg.vocab - 1};
    float lp[NS * K], xl[NS];
    float *lg = malloc(sizeof(float) * NS * NV);
    blk[0] = pre[19];
    for (int i = 1; i < B; i++) blk[i] = d.cfg.mask_token_id;
    be_draft_block q = {.B = B, .tokens = blk, .n_slots = NS, .n_vocab = NV, .extra = extra, .n_extra = 1, .out = out,
                        .logits = lg, .extra_logits = xl, .top_k = K, .top_ids = ids, .top_logp = lp};
    CHECK(be_cpu.draft_block(ds, &q) == 0, "draft block: %s", dfl_lasterr());
    int bad = 0;
    for (int i = 0; i < NS; i++) {
        const float *l = lg + (size_t)i * NV;
        double mx = xl[i], sum = 0;
        for (int j = 0; j < NV; j++) mx = l[j] > mx ? l[j] : mx;
        for (int j = 0; j < NV; j++) sum += exp(l[j] - mx);
        sum += exp(xl[i] - mx);
        int32_t prev = -1;
        for (int k = 0; k < K; k++) { /* the k-th best: the best below the (k-1)-th in (logit desc, id asc) */
            int32_t best = -1;
            float bv = -INFINITY;
            for (int j = 0; j <= NV; j++) {
                float v = j < NV ? l[j] : xl[i];
                int32_t id = j < NV ? j : extra[0];
                float pv = prev < 0 ? INFINITY : prev < NV ? l[prev] : xl[i];
                int below = prev < 0 || v < pv || (v == pv && j > (prev < NV ? prev : NV));
                if (below && (best < 0 || v > bv)) best = id, bv = v;
            }
            bad += ids[i * K + k] != best;
            bad += fabs(lp[i * K + k] - (bv - mx - log(sum))) > 1e-4;
            prev = best == extra[0] ? NV : best;
        }
        bad += ids[i * K] != out[i];
    }
    CHECK(bad == 0, "%d top-k entries differ from the ranking of the draft's logits", bad);
    q.top_k = BE_DRAFT_TOPK + 1;
    CHECK(be_cpu.draft_block(ds, &q) != 0 && strstr(dfl_lasterr(), "top_k"), "top_k past the limit: %s",
          dfl_lasterr());
    free(lg);
    be_cpu.draft_destroy(ds);
    be_cpu.destroy(st);
    be_cpu.release(bi, &t);
    be_cpu.release(bi, &d);
    mdl_free(&t);
    mdl_free(&d);
}

/* DFlash with --tree N = plain decoding, token for token, greedy and temp
 * 0.8 (same seed), for every budget and auto (-1); tree rounds ran. */
static void tree_lossless(dflash_model *m, int32_t **p, size_t *len, int n, int n_predict, float temp,
                          const char *what) {
    int budgets[] = {4, 8, 16, 32, 64, -1};
    int bad = 0, runs = 0, rounds = 0;
    double tau[6] = {0};
    for (int i = 0; i < n; i++) {
        dflash_gen g = dflash_default_gen();
        g.n_predict = n_predict;
        g.temp = temp;
        g.top_p = temp > 0 ? 0.95f : 1.0f;
        g.seed = 99 + (uint64_t)i;
        g.use_draft = 0;
        int32_t *ref, *out;
        size_t nref, nout;
        dflash_stats st;
        dflash_reset(m);
        if (dflash_generate(m, p[i], len[i], &g, NULL, NULL, &ref, &nref, &st) != 0) {
            CHECK(0, "plain: %s", dflash_error());
            continue;
        }
        g.use_draft = 1;
        for (int k = 0; k < 6; k++) {
            if (!slow && (budgets[k] == 4 || budgets[k] == 32)) continue; /* DFLASH_FAST: 8, 16, 64, auto */
            g.tree = budgets[k];
            dflash_reset(m);
            if (dflash_generate(m, p[i], len[i], &g, NULL, NULL, &out, &nout, &st) != 0) {
                CHECK(0, "tree %d: %s", g.tree, dflash_error());
                bad++;
                continue;
            }
            runs++;
            rounds += st.rounds;
            tau[k] += st.tau / n;
            if (nout != nref || memcmp(out, ref, sizeof(int32_t) * nref)) {
                bad++;
                fprintf(stderr, "  %s: prompt %d tree %d: %zu vs %zu tokens, differ\n", what, i, g.tree, nout, nref);
            }
            free(out);
        }
        free(ref);
    }
    fprintf(stderr, "  %s: %d prompts x %d budgets, %d mismatches; tau at 4/8/16/32/64/auto = %.2f %.2f %.2f %.2f "
            "%.2f %.2f%s\n", what, n, slow ? 6 : 4, bad, tau[0], tau[1], tau[2], tau[3], tau[4], tau[5],
            slow ? "" : " (4 and 32 not run: DFLASH_FAST)");
    CHECK(bad == 0, "%s: %d of %d tree runs differ from plain decoding", what, bad, runs);
    CHECK(rounds > 0, "%s: no tree round ran", what);
}

static void prompts_from(dflash_model *m, int n_each, int32_t **p, size_t *len, int *n) {
    const char *files[] = {"bench/prompts/code.jsonl", "bench/prompts/math.jsonl", "bench/prompts/chat.jsonl"};
    for (int f = 0; f < 3; f++) {
        char *txt = dfl_read_file(rpath(files[f]), NULL);
        CHECK(txt != NULL, "missing %s", files[f]);
        char *line = txt;
        for (int k = 0; txt && k < n_each && line && *line; k++) {
            char *end = strchr(line, '\n');
            if (end) *end = 0;
            char *q = strstr(line, "\"prompt\": \"");
            if (q) {
                q += 11;
                char *e = strstr(q, "\"}");
                if (e) *e = 0;
            } else {
                q = line;
            }
            dflash_message msg = {"user", q};
            char *chat = k % 3 == 2 ? NULL : dflash_chat_prompt(m, &msg, 1, 1, 0);
            const char *text = chat ? chat : q;
            if (dflash_tokenize(m, text, strlen(text), &p[*n], &len[*n]) == 0) (*n)++;
            free(chat);
            line = end ? end + 1 : NULL;
        }
        free(txt);
    }
}

TEST(tree_lossless_demo_pair) {
    dflash_params pp = dflash_default_params();
    pp.n_ctx = 1024;
    pp.n_threads = 2;
    dflash_model *m = dflash_load(rpath("models/demo/target"), rpath("models/demo/draft"), &pp);
    CHECK(m != NULL, "load: %s", dflash_error());
    if (!m) return;
    int32_t *p[64];
    size_t len[64];
    int n = 0;
    prompts_from(m, slow ? 6 : 2, p, len, &n);
    tree_lossless(m, p, len, n, slow ? 64 : 32, 0.0f, "demo pair, greedy");
    tree_lossless(m, p, len, slow ? 6 : 3, 48, 0.8f, "demo pair, temp 0.8");
    /* refused where tree rounds would not be exact yet, naming why */
    dflash_gen g = dflash_default_gen();
    g.tree = 16;
    g.repeat_penalty = 1.1f;
    int32_t *out = NULL;
    size_t nout;
    CHECK(dflash_generate(m, p[0], len[0], &g, NULL, NULL, &out, &nout, NULL) != 0 &&
              strstr(dflash_error(), "penalties"), "tree with a penalty: %s", dflash_error());
    g = dflash_default_gen();
    g.tree = 65;
    CHECK(dflash_generate(m, p[0], len[0], &g, NULL, NULL, &out, &nout, NULL) != 0 && strstr(dflash_error(), "2..64"),
          "tree 65: %s", dflash_error());
    for (int i = 0; i < n; i++) free(p[i]);
    dflash_free(m);
}

TEST(tree_lossless_tiny_pair) {
    dflash_params pp = dflash_default_params();
    pp.n_threads = 2;
    dflash_model *m = dflash_load(rpath("tests/models/tiny-qwen3"), rpath("tests/models/tiny-draft"), &pp);
    CHECK(m != NULL, "load: %s", dflash_error());
    if (!m) return;
    enum { N = 12 };
    int32_t *p[N];
    size_t len[N];
    for (int i = 0; i < N; i++) {
        len[i] = 1 + rnd() % 50;
        p[i] = malloc(sizeof(int32_t) * len[i]);
        for (size_t k = 0; k < len[i]; k++) p[i][k] = (int32_t)(rnd() % 16000);
    }
    tree_lossless(m, p, len, slow ? N : 4, 32, 0.0f, "tiny pair, greedy");
    tree_lossless(m, p, len, slow ? 6 : 2, 32, 0.8f, "tiny pair, temp 0.8");
    for (int i = 0; i < N; i++) free(p[i]);
    dflash_free(m);
}

/* A recurrent target refuses --tree up front, naming why. */
TEST(tree_refused_qwen35_pair) {
    dflash_params pp = dflash_default_params();
    pp.n_threads = 2;
    dflash_model *m =
        dflash_load(rpath("tests/models/tiny-qwen35"), rpath("tests/models/tiny-qwen35-draft"), &pp);
    CHECK(m != NULL, "load: %s", dflash_error());
    if (!m) return;
    dflash_gen g = dflash_default_gen();
    g.tree = 8;
    int32_t prompt[3] = {1, 2, 3}, *out = NULL;
    size_t nout;
    CHECK(dflash_generate(m, prompt, 3, &g, NULL, NULL, &out, &nout, NULL) != 0 &&
              strstr(dflash_error(), "Gated DeltaNet"), "qwen3.5 --tree: %s", dflash_error());
    /* auto falls back to the chain there: the same output as plain decoding */
    int32_t *ref = NULL;
    size_t nref = 0;
    g = dflash_default_gen();
    g.n_predict = 24;
    g.use_draft = 0;
    CHECK(dflash_generate(m, prompt, 3, &g, NULL, NULL, &ref, &nref, NULL) == 0, "plain: %s", dflash_error());
    g.use_draft = 1;
    g.tree = -1;
    dflash_reset(m);
    CHECK(dflash_generate(m, prompt, 3, &g, NULL, NULL, &out, &nout, NULL) == 0 && nout == nref &&
              !memcmp(out, ref, sizeof(int32_t) * nref), "qwen3.5 --tree auto: %s", dflash_error());
    free(out);
    free(ref);
    dflash_free(m);
}

int main(void) {
    const char *r = getenv("DFLASH_ROOT");
    if (r) root = r;
    if (getenv("DFLASH_FAST")) slow = 0;
    be_options bo = {.n_threads = 2};
    bi = be_cpu.open(&bo);
    RUN(tree_rows_qwen3);
    RUN(tree_rows_llama_moe_demo);
    RUN(tree_refused_recurrent);
    RUN(draft_top_k);
    RUN(tree_lossless_tiny_pair);
    RUN(tree_lossless_demo_pair);
    RUN(tree_refused_qwen35_pair);
    be_cpu.close(bi);
    CHECK_DONE("test_tree");
}
