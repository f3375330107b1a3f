/* test_vocab.c - the draft's vocabulary (src/vocab.h, --draft-vocab) and the
 * round statistics of dflash_stats (issue 23 items 5 and 6).
 *
 * Rank files: a good file parses; every kind of bad file is refused with
 * its file name, line and culprit; written counts read back in rank order;
 * the selection is the top N ascending, padded with the smallest unlisted
 * ids. Backend: a draft block scoring gathered ids gives each id's logit
 * bit-identical to the full head's (bf16, MLX q8 and q4 targets, the demo
 * pair), and its proposals and top-k are the subset's, mapped to ids.
 * Engine: DFlash output equals plain decoding with every --draft-vocab
 * choice, chain and tree, greedy and temp 0.8 (seeded); the round
 * statistics add up (histogram sum = rounds, tokens = first + plain steps +
 * committed in rounds); bad choices are refused before anything runs. */
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
#include "tmpdir.h"
#include "util.h"
#include "vocab.h"

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

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}

/* voc_rank_parse of text fails and its message holds every needle. */
static int parse_fails(const char *text, int vocab, const char *n1, const char *n2) {
    voc_rank r;
    if (voc_rank_parse(text, strlen(text), "bad.rank", vocab, &r) == 0) {
        voc_rank_free(&r);
        return 0;
    }
    const char *e = dfl_lasterr();
    if (!strstr(e, "bad.rank") || !strstr(e, n1) || (n2 && !strstr(e, n2))) {
        fprintf(stderr, "  error was: %s\n", e);
        return 0;
    }
    return r.ids == NULL && r.n == 0;
}

TEST(rank_parse) {
    const char *good = "dflash-vocab-rank 1 100\r\n# a comment\n\n7 9\n 3\t9\n99 2\n0 1\n";
    voc_rank r;
    CHECK(voc_rank_parse(good, strlen(good), "good", 100, &r) == 0, "%s", dfl_lasterr());
    CHECK(r.vocab == 100 && r.n == 4, "vocab %d, n %d", r.vocab, r.n);
    if (r.n == 4) {
        CHECK(r.ids[0] == 7 && r.ids[1] == 3 && r.ids[2] == 99 && r.ids[3] == 0, "ids");
        CHECK(r.counts[0] == 9 && r.counts[1] == 9 && r.counts[2] == 2 && r.counts[3] == 1, "counts");
    }
    voc_rank_free(&r);
    CHECK(voc_rank_parse(good, strlen(good), "good", 0, &r) == 0, "vocab 0: any header");
    voc_rank_free(&r);
    /* not NUL-terminated: only len bytes count */
    size_t upto = (size_t)(strstr(good, "7 9\n") - good) + 4;
    CHECK(voc_rank_parse(good, upto, "good", 100, &r) == 0 && r.n == 1 && r.ids[0] == 7, "a prefix of the text: %s",
          dfl_lasterr());
    voc_rank_free(&r);

    CHECK(parse_fails("", 100, "empty", NULL), "empty file");
    CHECK(parse_fails("\n\n", 100, "empty", NULL), "blank lines only");
    CHECK(parse_fails("hello 1 100\n", 100, "line 1", "not a dflash rank file"), "no magic");
    CHECK(parse_fails("# first\ndflash-vocab-rank 1 100\n", 100, "line 1", "not a comment"), "comment first");
    CHECK(parse_fails("dflash-vocab-rank 2 100\n1 1\n", 100, "line 1", "version"), "version 2");
    CHECK(parse_fails("dflash-vocab-rank 1\n1 1\n", 100, "line 1", "vocabulary size"), "no vocab");
    CHECK(parse_fails("dflash-vocab-rank 1 0\n", 100, "line 1", "vocabulary size"), "vocab 0");
    CHECK(parse_fails("dflash-vocab-rank 1 100 x\n", 100, "line 1", "vocabulary size"), "junk after header");
    CHECK(parse_fails("dflash-vocab-rank 1 100\n", 200, "vocabulary of 100", "has 200"), "other vocabulary");
    CHECK(parse_fails("dflash-vocab-rank 1 100\n", 100, "lists no token ids", NULL), "no ids");
    CHECK(parse_fails("dflash-vocab-rank 1 100\n5 3\n5 2\n", 100, "line 3", "listed twice"), "duplicate");
    CHECK(parse_fails("dflash-vocab-rank 1 100\n100 3\n", 100, "line 2", "outside the vocabulary"), "id = vocab");
    CHECK(parse_fails("dflash-vocab-rank 1 100\n5 3\n6 4\n", 100, "line 3", "larger than the line before"),
          "counts not ranked");
    CHECK(parse_fails("dflash-vocab-rank 1 100\n5 0\n", 100, "line 2", "counts are >= 1"), "count 0");
    CHECK(parse_fails("dflash-vocab-rank 1 100\n5\n", 100, "line 2", "ID COUNT"), "one number");
    CHECK(parse_fails("dflash-vocab-rank 1 100\n5 3 7\n", 100, "line 2", "ID COUNT"), "three numbers");
    CHECK(parse_fails("dflash-vocab-rank 1 100\n-5 3\n", 100, "line 2", "ID COUNT"), "negative id");
    CHECK(parse_fails("dflash-vocab-rank 1 100\n5 -3\n", 100, "line 2", "ID COUNT"), "negative count");
    CHECK(parse_fails("dflash-vocab-rank 1 100\n5 3x\n", 100, "line 2", "ID COUNT"), "junk in a count");
    CHECK(parse_fails("dflash-vocab-rank 1 100\n5 99999999999999999999\n", 100, "line 2", "ID COUNT"), "overflow");
    CHECK(parse_fails("dflash-vocab-rank 1 100\n4 3\n5 3\n6\n", 100, "line 4", "ID COUNT"), "later line");
    CHECK(parse_fails("dflash-vocab-rank 1 99999999\n", 100, "line 1", NULL), "huge vocabulary");
    /* a NUL inside is not a digit */
    static const char nul[] = "dflash-vocab-rank 1 100\n5 3\0\n";
    CHECK(voc_rank_parse(nul, sizeof nul - 1, "nul", 100, &r) != 0 && strstr(dfl_lasterr(), "line 2"),
          "NUL in a line accepted");
    /* a missing file names the path */
    CHECK(voc_rank_read("/nonexistent/vocab_rank.txt", 0, &r) != 0 &&
              strstr(dfl_lasterr(), "/nonexistent/vocab_rank.txt"),
          "missing file: %s", dfl_lasterr());
}

TEST(rank_write_read_select) {
    enum { V = 3000 };
    int64_t *counts = calloc(V, sizeof *counts);
    for (int i = 0; i < V; i++) counts[i] = rnd() % 4 ? 0 : 1 + rnd() % 50; /* ties and gaps */
    int listed = 0;
    for (int i = 0; i < V; i++) listed += counts[i] > 0;
    char *file = path("rank.txt", NULL);
    CHECK(voc_rank_write(file, counts, V) == 0, "%s", dfl_lasterr());
    voc_rank r;
    CHECK(voc_rank_read(file, V, &r) == 0, "%s", dfl_lasterr());
    CHECK(r.n == listed, "%d ids read, %d counted", r.n, listed);
    int order_ok = 1;
    for (int i = 0; i < r.n; i++) {
        order_ok &= counts[r.ids[i]] == r.counts[i];
        if (i) order_ok &= r.counts[i] < r.counts[i - 1] || (r.counts[i] == r.counts[i - 1] && r.ids[i] > r.ids[i - 1]);
    }
    CHECK(order_ok, "not ranked by count, ties by id");
    /* the public check reads the same */
    int n_ids = 0;
    CHECK(dflash_vocab_rank_check(file, V, &n_ids) == 0 && n_ids == listed, "dflash_vocab_rank_check: %s",
          dflash_error());
    CHECK(dflash_vocab_rank_check(file, V + 1, &n_ids) != 0 && strstr(dflash_error(), file), "wrong vocab accepted");
    /* selection: the top n ascending; beyond the listed ids the smallest unlisted */
    int32_t *sel = malloc(sizeof(int32_t) * V);
    for (int n = 1; n <= V; n += n < 16 ? 1 : 733) {
        voc_select(&r, n, sel);
        uint8_t *want = calloc(V, 1);
        int k = 0;
        for (int i = 0; i < r.n && k < n; i++, k++) want[r.ids[i]] = 1;
        for (int id = 0; id < V && k < n; id++)
            if (!counts[id]) want[id] = 1, k++;
        int ok = 1;
        for (int i = 0; i < n; i++) ok &= want[sel[i]] && (i == 0 || sel[i] > sel[i - 1]);
        CHECK(ok, "selection of %d", n);
        free(want);
    }
    voc_select(&r, V, sel);
    int all = 1;
    for (int i = 0; i < V; i++) all &= sel[i] == i;
    CHECK(all, "selecting the whole vocabulary is not 0..V-1");
    free(sel);
    voc_rank_free(&r);
    int64_t zero[4] = {0};
    CHECK(voc_rank_write(path("empty.txt", NULL), zero, 4) != 0 && strstr(dfl_lasterr(), "nothing to rank"),
          "an empty ranking written");
    free(counts);
}

/* ---- the backend: a gathered draft head ----------------------------------- */

/* On target dir t and draft dir d: a draft block over a random context
 * scoring random ascending id sets (sizes ns[]) against the full head. */
static void gathered_head_exact(const char *t, const char *d) {
    mdl_model tm, dm;
    if (mdl_load(&tm, rpath(t)) != 0) {
        CHECK(0, "load %s: %s", t, dfl_lasterr());
        return;
    }
    if (mdl_load(&dm, rpath(d)) != 0) {
        CHECK(0, "load %s: %s", d, dfl_lasterr());
        mdl_free(&tm);
        return;
    }
    CHECK(be_cpu.prepare(bi, &tm) == 0 && be_cpu.prepare(bi, &dm) == 0, "prepare: %s", dfl_lasterr());
    const cfg_model *dc = &dm.cfg;
    int V = tm.cfg.vocab, H = dc->hidden, B = dc->block_size, S = B - 1, ctx = 40;
    void *ds = be_cpu.draft_create(bi, &dm, &tm, 256);
    float *feats = malloc(sizeof(float) * (size_t)ctx * dc->n_taps * H);
    for (int i = 0; i < ctx * dc->n_taps * H; i++) feats[i] = sinf((float)i * 0.173f) * 2.0f;
    CHECK(be_cpu.draft_ctx_append(ds, feats, ctx) == 0, "append: %s", dfl_lasterr());
    int32_t blk[64];
    blk[0] = 17;
    for (int i = 1; i < B; i++) blk[i] = dc->mask_token_id;
    float *full = malloc(sizeof(float) * (size_t)S * V), *sub = malloc(sizeof(float) * (size_t)S * V);
    int32_t out_full[64], out_sub[64];
    be_draft_block q = {.B = B, .tokens = blk, .n_vocab = V, .logits = full, .out = out_full};
    CHECK(be_cpu.draft_block(ds, &q) == 0, "full block: %s", dfl_lasterr());
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)V);
    const int sizes[] = {1, 7, 777, 1000, 4099, V / 2 + 5, V};
    for (int si = 0; si < (int)(sizeof sizes / sizeof sizes[0]); si++) {
        int n = sizes[si];
        /* n distinct ids, ascending: a random subset (the whole vocabulary at n = V) */
        int k = 0;
        for (int id = 0; id < V && k < n; id++)
            if ((int)(rnd() % (uint32_t)(V - id)) < n - k) ids[k++] = id;
        CHECK(k == n, "picked %d of %d", k, n);
        int32_t top_ids[64 * 4];
        float top_logp[64 * 4];
        int K = n < 4 ? n : 4;
        be_draft_block g = {.B = B, .tokens = blk, .n_vocab = n, .ids = ids, .logits = sub, .out = out_sub,
                            .top_k = K, .top_ids = top_ids, .top_logp = top_logp};
        CHECK(be_cpu.draft_block(ds, &g) == 0, "gathered block (%d ids): %s", n, dfl_lasterr());
        int same = 1, prop = 1, topk = 1;
        for (int s = 0; s < S; s++) {
            int best = 0;
            for (int j = 0; j < n; j++) {
                float a = sub[(size_t)s * n + j], b = full[(size_t)s * V + ids[j]];
                same &= memcmp(&a, &b, sizeof a) == 0;
                if (sub[(size_t)s * n + j] > sub[(size_t)s * n + best]) best = j;
            }
            prop &= out_sub[s] == ids[best];
            topk &= top_ids[s * K] == out_sub[s];
            for (int r = 1; r < K; r++) topk &= top_logp[s * K + r] <= top_logp[s * K + r - 1];
        }
        CHECK(same, "%s: %d gathered ids: logits differ from the full head's", t, n);
        CHECK(prop, "%s: %d gathered ids: proposals are not the subset's first maximum", t, n);
        CHECK(topk, "%s: %d gathered ids: top-k not led by the proposal", t, n);
        if (n == V) CHECK(!memcmp(out_sub, out_full, sizeof(int32_t) * (size_t)S), "all ids: proposals differ");
    }
    /* ids not ascending, or out of range: refused */
    int32_t bad[3] = {5, 5, 9};
    be_draft_block g = {.B = B, .tokens = blk, .n_vocab = 3, .ids = bad, .out = out_sub};
    CHECK(be_cpu.draft_block(ds, &g) != 0 && strstr(dfl_lasterr(), "ascend"), "repeated ids accepted");
    bad[1] = V;
    bad[2] = V + 1;
    CHECK(be_cpu.draft_block(ds, &g) != 0, "id past the vocabulary accepted");
    free(ids);
    free(full);
    free(sub);
    free(feats);
    be_cpu.draft_destroy(ds);
    be_cpu.release(bi, &dm);
    be_cpu.release(bi, &tm);
    mdl_free(&dm);
    mdl_free(&tm);
}

TEST(gathered_head_bf16) { gathered_head_exact("tests/models/tiny-qwen3", "tests/models/tiny-draft"); }
TEST(gathered_head_q8) { gathered_head_exact("tests/models/tiny-qwen3-q8", "tests/models/tiny-draft"); }
TEST(gathered_head_q4) { gathered_head_exact("tests/models/tiny-qwen3-q4", "tests/models/tiny-draft"); }
TEST(gathered_head_demo) {
    if (access(rpath("models/demo/draft/model.safetensors"), R_OK) != 0) {
        CHECK(0, "demo pair missing (make unpack)");
        return;
    }
    gathered_head_exact("models/demo/target", "models/demo/draft");
}

/* ---- the engine: every vocabulary choice is lossless; the statistics ------ */

/* The round statistics of one drafting run add up. exact: the run ended
 * at its budget (ignore_eos), so every committed token was emitted. */
static void stats_add_up(const dflash_stats *st, int tree, int exact, const char *what) {
    long hist = 0, committed = 0, accepted = 0, at_pos = 0;
    for (int a = 0; a < 64; a++) {
        hist += st->accept_hist[a];
        committed += (long)(a + 1) * st->accept_hist[a];
        accepted += (long)a * st->accept_hist[a];
    }
    for (int i = 0; i < st->n_pos; i++) at_pos += st->accepted_at_pos[i];
    CHECK(hist == st->rounds, "%s: histogram sums to %ld, %d rounds", what, hist, st->rounds);
    CHECK(accepted == st->n_accepted, "%s: histogram accepts %ld, n_accepted %d", what, accepted, st->n_accepted);
    CHECK(at_pos == st->n_accepted, "%s: accepted per position %ld, accepted %d",
          what, at_pos, st->n_accepted);
    CHECK(fabs(st->tau * st->rounds - (double)committed) < 1e-6 * (committed + 1), "%s: tau %.4f x %d rounds != %ld",
          what, st->tau, st->rounds, committed);
    long tokens = 1 + st->plain_steps + committed; /* the first token comes with the prompt */
    CHECK(exact ? tokens == st->n_tokens : st->n_tokens <= tokens, "%s: %d tokens, 1 + %d plain + %ld in rounds", what,
          st->n_tokens, st->plain_steps, committed);
    CHECK(st->n_verified >= st->rounds + st->n_accepted, "%s: %d rows verified for %d rounds + %d accepted", what,
          st->n_verified, st->rounds, st->n_accepted);
    CHECK(tree ? st->n_tree_rounds == st->rounds : st->n_tree_rounds == 0, "%s: %d tree rounds of %d", what,
          st->n_tree_rounds, st->rounds);
    if (!tree) CHECK(st->n_verified == st->rounds + st->n_drafted, "%s: chain verified %d, rounds %d + drafted %d", what,
                     st->n_verified, st->rounds, st->n_drafted);
}

typedef struct {
    const char *name;
    int draft_vocab;
    int use_rank; /* the shipped ranking */
} vocab_choice;

TEST(lossless_every_vocab_demo) {
    if (access(rpath("models/demo/draft/model.safetensors"), R_OK) != 0 ||
        access(rpath("models/qwen3-tokenizer/vocab_rank.txt"), R_OK) != 0) {
        CHECK(0, "demo pair or models/qwen3-tokenizer/vocab_rank.txt missing (make unpack)");
        return;
    }
    dflash_params pp = dflash_default_params();
    pp.n_ctx = 1024;
    dflash_model *m = dflash_load(rpath("models/demo/target"), rpath("models/demo/draft"), &pp);
    if (!m) {
        CHECK(0, "load demo: %s", dflash_error());
        return;
    }
    const char *texts[] = {"Solve for x: 3x + 5 = 20.", "Write a Python function `add(a, b)` that returns a + b.",
                           "What is a lighthouse for?", "Evaluate 44 * 9 - 30."};
    int n_prompts = slow ? 4 : 1;
    const vocab_choice choices[] = {{"default (ids < 32768)", 0, 0}, {"full", -1, 0}, {"freq:32768", 32768, 1},
                                    {"freq:777", 777, 1}, {"every ranked id", 0, 1}, {"ids < 1000", 1000, 0}};
    const int n_choices = (int)(sizeof choices / sizeof choices[0]);
    const char *rank = rpath("models/qwen3-tokenizer/vocab_rank.txt");
    for (int pi = 0; pi < n_prompts; pi++) {
        dflash_message msg = {"user", texts[pi]};
        char *chat = dflash_chat_prompt(m, &msg, 1, 1, 0);
        int32_t *p = NULL;
        size_t np = 0;
        CHECK(chat && dflash_tokenize(m, chat, strlen(chat), &p, &np) == 0, "tokenize: %s", dflash_error());
        free(chat);
        if (!p) continue;
        for (int mode = 0; mode < 4; mode++) { /* chain greedy, chain temp, tree greedy, tree temp */
            if (!slow && (mode == 1 || mode == 2)) continue; /* DFLASH_FAST (variant reruns): two of four */
            int tree = mode >= 2 ? 16 : 0;
            float temp = mode % 2 ? 0.8f : 0.0f;
            dflash_gen g = dflash_default_gen();
            g.n_predict = slow ? 48 : 24;
            g.temp = temp;
            g.seed = 1234 + (uint64_t)pi;
            g.ignore_eos = temp == 0; /* greedy: to the budget (exact sums); sampled: stop tokens live */
            g.draft_max = 15;         /* auto would learn from the previous choice and may stop drafting */
            g.use_draft = 0;
            int32_t *plain = NULL, *spec = NULL;
            size_t n_plain = 0, n_spec = 0;
            dflash_stats st;
            dflash_reset(m);
            CHECK(dflash_generate(m, p, np, &g, NULL, NULL, &plain, &n_plain, &st) == 0, "plain: %s", dflash_error());
            g.use_draft = 1;
            g.tree = tree;
            for (int c = 0; c < n_choices; c++) {
                char what[160];
                snprintf(what, sizeof what, "prompt %d, %s, %s, --draft-vocab %s", pi, tree ? "tree 16" : "chain",
                         temp > 0 ? "temp 0.8" : "greedy", choices[c].name);
                g.draft_vocab = choices[c].draft_vocab;
                g.draft_vocab_rank = choices[c].use_rank ? rank : NULL;
                dflash_reset(m);
                if (dflash_generate(m, p, np, &g, NULL, NULL, &spec, &n_spec, &st) != 0) {
                    CHECK(0, "%s: %s", what, dflash_error());
                    continue;
                }
                CHECK(n_spec == n_plain && !memcmp(spec, plain, sizeof(int32_t) * n_plain),
                      "%s: output differs from plain decoding", what);
                CHECK(st.rounds > 0, "%s: never drafted", what);
                stats_add_up(&st, tree, g.ignore_eos, what);
                free(spec);
            }
            free(plain);
        }
        free(p);
    }
    dflash_free(m);
}

/* Bad draft vocabularies are refused before anything is generated, naming
 * the culprit. */
TEST(bad_vocab_refused) {
    if (access(rpath("models/demo/draft/model.safetensors"), R_OK) != 0) {
        CHECK(0, "demo pair missing (make unpack)");
        return;
    }
    dflash_params pp = dflash_default_params();
    pp.n_ctx = 256;
    dflash_model *m = dflash_load(rpath("models/demo/target"), rpath("models/demo/draft"), &pp);
    if (!m) {
        CHECK(0, "load demo: %s", dflash_error());
        return;
    }
    int32_t prompt[4] = {785, 3974, 13876, 38835};
    char *wrong_vocab = path("wrong_vocab.txt", NULL), *garbage = path("garbage.txt", NULL);
    FILE *f = fopen(wrong_vocab, "w");
    if (f) fputs("dflash-vocab-rank 1 16384\n5 3\n", f), fclose(f);
    f = fopen(garbage, "w");
    if (f) fputs("dflash-vocab-rank 1 151936\n5 3\n6 three\n", f), fclose(f);
    const char *rank = rpath("models/qwen3-tokenizer/vocab_rank.txt");
    struct {
        int draft_vocab;
        const char *rank, *needle;
    } cases[] = {
        {-2, NULL, "draft vocabulary -2"},
        {-1, rank, "whole vocabulary ranks nothing"},
        {151937, rank, "only 151936"},
        {100, "/nonexistent/rank.txt", "/nonexistent/rank.txt"},
        {100, wrong_vocab, "made for a vocabulary of 16384"},
        {100, garbage, "line 3"},
    };
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        dflash_gen g = dflash_default_gen();
        g.n_predict = 4;
        g.draft_vocab = cases[i].draft_vocab;
        g.draft_vocab_rank = cases[i].rank;
        int32_t *out = NULL;
        size_t n = 0;
        int emitted = 0;
        dflash_stats st;
        int rc = dflash_generate(m, prompt, 4, &g, NULL, NULL, &out, &n, &st);
        emitted = out && n > 0;
        CHECK(rc != 0 && !emitted && strstr(dflash_error(), cases[i].needle), "case %d (%s): rc %d, error '%s'", i,
              cases[i].needle, rc, rc ? dflash_error() : "");
        free(out);
    }
    /* the draft timing takes the same checks, and the vocabulary when good */
    dflash_gen g = dflash_default_gen();
    double s = 0;
    g.draft_vocab = -2;
    CHECK(dflash_time_draft_gen(m, &g, 32, 1, &s) != 0, "time_draft took a bad vocabulary");
    g.draft_vocab = 4096;
    g.draft_vocab_rank = rank;
    CHECK(dflash_time_draft_gen(m, &g, 32, 1, &s) == 0 && s > 0, "time_draft by rank: %s", dflash_error());
    dflash_free(m);
}

int main(void) {
    const char *r = getenv("DFLASH_ROOT");
    if (r) root = r;
    if (getenv("DFLASH_FAST")) slow = 0;
    if (tmpdir_make("vocab") != 0) {
        fprintf(stderr, "cannot make a temporary directory\n");
        return 1;
    }
    be_options bo = {.n_threads = 2};
    bi = be_cpu.open(&bo);
    RUN(rank_parse);
    RUN(rank_write_read_select);
    RUN(gathered_head_bf16);
    RUN(gathered_head_q8);
    RUN(gathered_head_q4);
    RUN(gathered_head_demo);
    RUN(lossless_every_vocab_demo);
    RUN(bad_vocab_refused);
    be_cpu.close(bi);
    tmpdir_remove();
    CHECK_DONE("test_vocab");
}
