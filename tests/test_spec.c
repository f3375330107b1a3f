/* test_spec.c - the decoding loop (spec.c) with scripted target and draft.
 *
 * The scripted target "knows" a fixed sequence seq[]: given a correct prefix
 * it predicts seq[pos]; after a wrong token it predicts junk, as a real model
 * would predict something else. The scripted draft guesses seq[] and is wrong
 * where the test says. Every case checks the output against plain decoding
 * (block size 1) and the stop/budget/context rules. */
#include "check.h"
#include "sample.h"
#include "spec.h"

#define SEQ_LEN 4096
static int32_t seq[SEQ_LEN];

typedef struct {
    int len;              /* committed positions */
    int32_t pending[64];  /* tokens of the last verify */
    int last_T;
    int prompt;           /* prompt length (positions before the first anchor) */
    unsigned wrong_mask;  /* draft slot i is wrong when bit (round+i)%32 set */
    int wrong_every;      /* draft slot wrong if (pos % wrong_every) == 0; 0 = never */
    int all_wrong;
    int max_width;
    int verify_calls, draft_calls;
    int next_row;           /* next verify row predict may ask for */
    int rejected_at_verify; /* a predicted row rejected its draft */
    int predict_rows;       /* spec_params.predict_rows for run() */
    long rows_predicted, rows_wasted; /* rows projected; of them after a rejection in the same call */
    int trim;               /* cut the drafts at the first wrong one (spec_iface.trim, as a grammar does) */
    int trim_calls, trimmed; /* calls, drafts cut */
    const spec_batch_cost *batch; /* spec_params.batch for run() */
    int planned_k;          /* the k of the last plan (spec_batch_cost.plan); -1: none */
    int rows_auto;          /* spec_params.predict_rows_auto for run() */
} mock;

static int mock_verify(void *ud, const int32_t *tok, int T) {
    mock *m = ud;
    for (int i = 0; i < T; i++) m->pending[i] = tok[i];
    m->last_T = T;
    m->next_row = 0;
    m->rejected_at_verify = 0;
    if (T > m->max_width) m->max_width = T;
    m->verify_calls++;
    if (m->batch) CHECK(m->planned_k + 1 == T, "verify of %d rows after a plan of %d drafts", T, m->planned_k);
    return 0;
}

/* Rows must come in order, and never past a row whose prediction already
 * rejected the draft that follows it. */
static int mock_predict(void *ud, int i, int n, int32_t *pred) {
    mock *m = ud;
    CHECK(i == m->next_row && n >= 1 && i + n <= m->last_T, "predict rows %d+%d after %d of %d", i, n,
          m->next_row, m->last_T);
    CHECK(!m->rejected_at_verify, "rows asked for after a rejection");
    int ok = 1;
    for (int r = 0; r < i + n; r++) {
        int pos = m->len + r; /* position of pending[r] */
        ok = ok && m->pending[r] == seq[pos];
        if (r >= i) pred[r - i] = ok ? seq[pos + 1] : 90000 + (m->pending[r] * 31 + r) % 1000;
    }
    for (int r = i; r < i + n; r++)
        if (r + 1 == m->last_T || m->pending[r + 1] != pred[r - i]) { /* row r ends the round */
            m->rejected_at_verify = 1;
            m->rows_wasted += i + n - 1 - r;
            break;
        }
    m->next_row = i + n;
    m->rows_predicted += n;
    return 0;
}

static int mock_accept(void *ud, int keep) {
    mock *m = ud;
    CHECK(keep >= 1 && keep <= m->last_T, "keep %d of %d", keep, m->last_T);
    for (int i = 0; i < keep; i++) CHECK(m->pending[i] == seq[m->len + i], "committed a wrong token");
    m->len += keep;
    return 0;
}

static int mock_draft(void *ud, int32_t anchor, int k, int32_t *out) {
    mock *m = ud;
    CHECK(anchor == seq[m->len], "anchor %d != seq[%d]", anchor, m->len);
    for (int i = 0; i < k; i++) {
        int pos = m->len + 1 + i;
        int wrong = m->all_wrong || (m->wrong_every && pos % m->wrong_every == 0);
        out[i] = wrong ? 80000 + pos : seq[pos];
    }
    m->draft_calls++;
    return 0;
}

/* The drafts before the first one the target can never choose (the
 * scripted draft's wrong tokens are 80000 + pos, which seq[] never holds). */
static int mock_trim(void *ud, const int32_t *d, int k) {
    mock *m = ud;
    m->trim_calls++;
    for (int i = 0; i < k; i++)
        if (d[i] >= 80000) {
            m->trimmed += k - i;
            return i;
        }
    return k;
}

typedef struct {
    int32_t out[SEQ_LEN];
    int n;
} sink;

static int emit(void *ud, int32_t t) {
    sink *s = ud;
    s->out[s->n++] = t;
    return 0;
}

/* Run the loop; returns the emitted count in s. */
static void run(mock *m, sink *s, int n_predict, int block, int draft_max, int room, const int32_t *stop, int n_stop,
                spec_stats *st) {
    int prompt = m->prompt;
    m->len = prompt;
    s->n = 0;
    m->rows_predicted = m->rows_wasted = 0;
    spec_iface it = {.ud = m, .verify = mock_verify, .predict = mock_predict, .accept = mock_accept,
                     .draft = block > 1 ? mock_draft : NULL, .trim = m->trim ? mock_trim : NULL};
    spec_params p = {.n_predict = n_predict, .block_size = block, .draft_max = draft_max, .room = room, .stop = stop,
                     .n_stop = n_stop, .predict_rows = m->predict_rows, .batch = m->batch,
                     .predict_rows_auto = m->rows_auto};
    int rc = spec_run(&it, &p, seq[prompt], emit, s, st);
    CHECK(rc == 0, "spec_run failed");
}

static void init_seq(void) {
    for (int i = 0; i < SEQ_LEN; i++) seq[i] = 100 + (i * 7919) % 5000;
}

static int same(const sink *a, const sink *b) {
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->out[i] != b->out[i]) return 0;
    return 1;
}

TEST(plain_decoding) {
    mock m = {.prompt = 10};
    sink s;
    spec_stats st;
    run(&m, &s, 50, 1, -1, 1000, NULL, 0, &st);
    CHECK(s.n == 50, "emitted %d", s.n);
    for (int i = 0; i < s.n; i++) CHECK(s.out[i] == seq[10 + i], "token %d", i);
    CHECK(m.draft_calls == 0 && m.max_width == 1, "plain used drafts");
    CHECK(st.rounds == 0 && st.plain_steps == 49, "rounds %d plain %d", st.rounds, st.plain_steps);
}

/* A trimmed block verifies only the drafts before the first refused one:
 * the output is plain decoding's, no verify holds a wrong draft, and every
 * verified draft is accepted. */
TEST(trim_cuts_refused_drafts) {
    for (int we = 2; we <= 5; we++) {
        mock m = {.prompt = 7, .wrong_every = we, .trim = 1};
        sink s, ref;
        spec_stats st;
        m.trim = 0;
        run(&m, &ref, 120, 1, -1, 1000, NULL, 0, &st);
        m.trim = 1;
        run(&m, &s, 120, 16, 15, 1000, NULL, 0, &st);
        CHECK(same(&s, &ref), "wrong_every %d: output differs from plain", we);
        CHECK(m.trim_calls > 0 && m.trimmed > 0, "wrong_every %d: nothing trimmed (%d calls)", we, m.trim_calls);
        CHECK(m.max_width <= we, "wrong_every %d: a verify of width %d holds a wrong draft", we, m.max_width);
        long verified = 0;
        for (int w = 2; w <= SPEC_MAX_BLOCK; w++) verified += (long)st.width_hist[w] * (w - 1);
        CHECK(st.committed_in_rounds - st.rounds == verified, "wrong_every %d: %ld accepted of %ld verified", we,
              st.committed_in_rounds - st.rounds, verified);
    }
}

TEST(full_acceptance_plus_bonus) {
    mock m = {.prompt = 5};
    sink s, ref;
    spec_stats st;
    run(&m, &ref, 1 + 16 * 4, 1, -1, 1000, NULL, 0, &st);
    run(&m, &s, 1 + 16 * 4, 16, 15, 1000, NULL, 0, &st);
    CHECK(same(&s, &ref), "output differs from plain");
    CHECK(st.rounds == 4, "rounds %d", st.rounds);
    CHECK(st.committed_in_rounds == 64, "tau*rounds %ld", st.committed_in_rounds);
    for (int i = 0; i < 15; i++) CHECK(st.tried[i] == 4 && st.accepted[i] == 4, "pos %d", i);
}

TEST(first_draft_rejected) {
    mock m = {.prompt = 3, .all_wrong = 1};
    sink s, ref;
    spec_stats st;
    run(&m, &ref, 40, 1, -1, 1000, NULL, 0, &st);
    run(&m, &s, 40, 16, 15, 1000, NULL, 0, &st);
    CHECK(same(&s, &ref), "output differs from plain");
    /* 1 token from the prefill, 38 drafting rounds of tau 1, a last plain step */
    CHECK(st.rounds == 38 && st.committed_in_rounds == 38 && st.plain_steps == 1,
          "tau must be 1: rounds %d committed %ld", st.rounds, st.committed_in_rounds);
    CHECK(st.tried[0] == 38 && st.accepted[0] == 0 && st.tried[1] == 0, "acceptance stats");
}

TEST(stop_token_inside_accepted_prefix) {
    mock m = {.prompt = 7};
    sink s, ref;
    spec_stats st;
    int32_t stop = seq[7 + 12]; /* the 13th generated token */
    /* make sure the stop token does not occur earlier */
    for (int i = 7; i < 7 + 12; i++) CHECK(seq[i] != stop, "test sequence repeats");
    run(&m, &ref, 100, 1, -1, 1000, &stop, 1, &st);
    CHECK(ref.n == 12 && st.stopped_by == 1, "plain emitted %d", ref.n);
    run(&m, &s, 100, 16, 15, 1000, &stop, 1, &st);
    CHECK(same(&s, &ref) && st.stopped_by == 1, "dflash emitted %d", s.n);
}

TEST(stop_token_first) {
    mock m = {.prompt = 7};
    sink s;
    spec_stats st;
    int32_t stop = seq[7];
    run(&m, &s, 100, 16, -1, 1000, &stop, 1, &st);
    CHECK(s.n == 0 && st.stopped_by == 1, "emitted %d", s.n);
}

TEST(budget_smaller_than_block) {
    for (int n = 1; n <= 20; n++) {
        mock m = {.prompt = 4};
        sink s, ref;
        spec_stats st;
        run(&m, &ref, n, 1, -1, 1000, NULL, 0, &st);
        run(&m, &s, n, 16, 15, 1000, NULL, 0, &st);
        CHECK(s.n == n && same(&s, &ref), "n=%d emitted %d", n, s.n);
        CHECK(m.max_width <= n, "n=%d verify width %d exceeds the budget", n, m.max_width);
    }
}

TEST(last_round_of_one_token_skips_draft) {
    mock m = {.prompt = 4};
    sink s;
    spec_stats st;
    run(&m, &s, 2, 16, 15, 1000, NULL, 0, &st);
    CHECK(s.n == 2 && m.draft_calls == 0 && st.plain_steps == 1, "draft calls %d", m.draft_calls);
}

TEST(context_end) {
    for (int room = 0; room <= 40; room += 3) {
        mock m = {.prompt = 6};
        sink s, ref;
        spec_stats st, st2;
        run(&m, &ref, 1000, 1, -1, room, NULL, 0, &st);
        CHECK(ref.n == room + 1 && st.stopped_by == 2, "room %d plain emitted %d", room, ref.n);
        run(&m, &s, 1000, 16, 15, room, NULL, 0, &st2);
        CHECK(same(&s, &ref) && st2.stopped_by == 2, "room %d dflash emitted %d", room, s.n);
        CHECK(m.len <= 6 + room, "room %d: committed %d positions", room, m.len - 6);
    }
}

TEST(block_length_one) {
    mock m = {.prompt = 4};
    sink s, ref;
    spec_stats st;
    run(&m, &ref, 30, 1, -1, 1000, NULL, 0, &st);
    run(&m, &s, 30, 16, 0, 1000, NULL, 0, &st); /* draft_max 0 */
    CHECK(same(&s, &ref) && m.draft_calls == 0, "draft-max 0 drafted");
}

TEST(mixed_acceptance_all_block_sizes) {
    int blocks[] = {2, 3, 4, 8, 16};
    for (int every = 2; every <= 9; every++) {
        mock m = {.prompt = 9, .wrong_every = every};
        sink ref;
        spec_stats st;
        run(&m, &ref, 200, 1, -1, 3000, NULL, 0, &st);
        for (int b = 0; b < 5; b++)
            for (int dm = -1; dm <= 1; dm++) {
                sink s;
                int draft_max = dm < 0 ? -1 : blocks[b] - 1;
                run(&m, &s, 200, blocks[b], draft_max, 3000, NULL, 0, &st);
                CHECK(same(&s, &ref), "every %d block %d draft_max %d differs", every, blocks[b], draft_max);
            }
    }
}

/* Predictions asked for a few rows at a time give the same output, stop at
 * the first rejection, and project fewer rows than whole verifies. */
TEST(predict_rows_stop_at_rejection) {
    for (int every = 2; every <= 7; every++) {
        mock m = {.prompt = 9, .wrong_every = every};
        sink ref;
        spec_stats st;
        run(&m, &ref, 300, 16, 15, 3000, NULL, 0, &st);
        long all_rows = m.rows_predicted;
        CHECK(all_rows == st.predicted_rows, "stats count %ld rows, mock %ld", st.predicted_rows, all_rows);
        for (int rows = 1; rows <= 5; rows++) {
            sink s;
            m.predict_rows = rows;
            run(&m, &s, 300, 16, 15, 3000, NULL, 0, &st);
            CHECK(same(&s, &ref), "every %d predict_rows %d differs", every, rows);
            CHECK(m.rows_predicted < all_rows, "every %d rows %d: %ld rows projected, whole verifies %ld", every,
                  rows, m.rows_predicted, all_rows);
            if (rows == 1) CHECK(m.rows_wasted == 0, "one row at a time wasted %ld rows", m.rows_wasted);
            /* rows past the first rejection: fewer than one call's worth per round */
            CHECK(m.rows_wasted <= (long)(rows - 1) * st.rounds, "every %d rows %d wasted %ld", every, rows,
                  m.rows_wasted);
        }
    }
}

/* A scripted batch cost model (spec_batch_cost): a round of the batch costs
 * the others' rounds (base) plus, for this sequence's plan, its steps'
 * fixed cost (fixed: 0 beside others, who pay it already), `row` per
 * verify row and per expected predicted row (reach-weighted), and a draft
 * block draft_fixed + draft_slot per slot; the others emit others_tokens. */
typedef struct {
    double base, others_tokens, fixed, row, draft_fixed, draft_slot;
    double call; /* > 0: a predict call costs this (reach-weighted) and its rows `row` each (not the verify's) */
    int not_ready;   /* rounds the model cannot predict yet (-1) */
    int calls, plans;
    mock *m;
} cost_mock;

static int cm_round_costs(void *ud, const double *reach, const spec_round *r, int n, double *cost, double *others) {
    cost_mock *c = ud;
    c->calls++;
    if (c->not_ready > 0) {
        c->not_ready--;
        return -1;
    }
    for (int i = 0; i < n; i++) {
        CHECK(r[i].k >= 0 && r[i].k < 16 && r[i].tokens >= 1 && r[i].tokens <= r[i].k + 1 && r[i].shared &&
                  r[i].own_s == 0,
              "plan %d: k %d, %.2f tokens", i, r[i].k, r[i].tokens);
        int crows[SPEC_MAX_BLOCK];
        double at[SPEC_MAX_BLOCK], rows = 0, calls = 0;
        int nc = spec_round_calls(&r[i], reach, crows, at);
        for (int j = 0; j < nc; j++) rows += at[j] * crows[j], calls += at[j];
        cost[i] = c->base + c->fixed + c->row * (c->call > 0 ? rows : r[i].k + 1 + rows) + c->call * calls +
                  (r[i].k ? c->draft_fixed + c->draft_slot * r[i].k : 0);
    }
    *others = c->others_tokens;
    return 0;
}

static void cm_plan(void *ud, const double *reach, const spec_round *r) {
    (void)reach;
    cost_mock *c = ud;
    c->plans++;
    c->m->planned_k = r->k;
}

/* --draft-max auto under a batch's cost model: the output is plain decoding's
 * whatever the model says; a plan comes before every verify and names its
 * width; drafts that cost more than they give are only probed, ever more
 * rarely; the same acceptance and costs that make a sequence draft alone
 * make it decode plainly beside others whose rounds are cheap; while the
 * model cannot predict, the loop times its own calls. */
TEST(batch_cost_model) {
    mock m = {.prompt = 5, .planned_k = -1};
    sink ref, s;
    spec_stats st;
    run(&m, &ref, 400, 1, -1, 3000, NULL, 0, &st);
    /* alone, every draft right (E(k) -> k + 1 as the acceptance is learnt),
     * a round's fixed cost 10 rows': plain rounds until the first probe
     * (the prior acceptance is 1/2), then a whole block every round */
    cost_mock c = {.fixed = 1, .row = 0.1, .draft_fixed = 1, .draft_slot = 0.1, .m = &m};
    spec_batch_cost bc = {.ud = &c, .round_costs = cm_round_costs, .plan = cm_plan};
    m.batch = &bc;
    m.max_width = 0;
    run(&m, &s, 400, 16, -1, 3000, NULL, 0, &st);
    CHECK(same(&s, &ref), "cheap drafts: output differs from plain decoding");
    CHECK(c.plans == st.rounds + st.plain_steps, "%d plans for %d rounds", c.plans, st.rounds + st.plain_steps);
    CHECK(st.plain_steps <= 6 && m.max_width == 16, "cheap drafts: %d plain steps, widest verify %d",
          st.plain_steps, m.max_width);
    /* the same beside others that emit 8 tokens a round for 2 (their rounds
     * pay the steps' fixed cost): this sequence's drafts would slow their
     * rounds more than they add even if every draft were accepted, so it
     * decodes plainly and never probes */
    c = (cost_mock){.base = 2, .others_tokens = 8, .row = 0.1, .draft_fixed = 1, .draft_slot = 0.1, .m = &m};
    m.planned_k = -1;
    run(&m, &s, 400, 16, -1, 3000, NULL, 0, &st);
    CHECK(same(&s, &ref), "beside others: output differs from plain decoding");
    CHECK(st.rounds == 0, "beside others: %d drafting rounds of %d", st.rounds, st.rounds + st.plain_steps);
    /* drafts that pay only when accepted, half of them wrong (p ~ 1/2):
     * plain decoding wins, and every drafting round is a probe (of the
     * length that would win with all drafts accepted), after 4, 8, 16, ...
     * plain rounds */
    c = (cost_mock){.fixed = 1, .row = 0.1, .draft_fixed = 1, .draft_slot = 0.1, .m = &m};
    m.wrong_every = 2;
    sink ref2;
    mock plain2 = {.prompt = 5, .wrong_every = 2};
    run(&plain2, &ref2, 400, 1, -1, 3000, NULL, 0, &st);
    run(&m, &s, 400, 16, -1, 3000, NULL, 0, &st);
    CHECK(same(&s, &ref2), "probes: output differs from plain decoding");
    CHECK(st.rounds >= 2 && st.rounds <= 7, "probes: %d drafting rounds of %d", st.rounds, st.rounds + st.plain_steps);
    /* drafts that never pay: no probes */
    c = (cost_mock){.fixed = 1, .row = 0.1, .draft_fixed = 100, .m = &m};
    m.wrong_every = 3;
    sink ref3;
    mock plain = {.prompt = 5, .wrong_every = 3};
    run(&plain, &ref3, 400, 1, -1, 3000, NULL, 0, &st);
    run(&m, &s, 400, 16, -1, 3000, NULL, 0, &st);
    CHECK(same(&s, &ref3), "costly drafts: output differs from plain decoding");
    CHECK(st.rounds == 0, "costly drafts: %d drafting rounds", st.rounds);
    /* the model not ready for the first 10 rounds: own timings (exploring a
     * whole block first), then the model's choice */
    c = (cost_mock){.fixed = 1, .row = 0.1, .draft_fixed = 1, .draft_slot = 0.1, .not_ready = 10, .m = &m};
    m.wrong_every = 0;
    run(&m, &s, 400, 16, -1, 3000, NULL, 0, &st);
    CHECK(same(&s, &ref) && c.not_ready == 0 && st.plain_steps <= 16, "not ready: %d plain steps", st.plain_steps);
    /* a fixed draft_max plans every round too (for the others' model) */
    c = (cost_mock){.row = 1, .m = &m};
    m.max_width = 0;
    run(&m, &s, 400, 16, 7, 3000, NULL, 0, &st);
    CHECK(same(&s, &ref) && c.calls == 0 && c.plans == st.rounds + st.plain_steps && m.max_width == 8,
          "draft_max 7: %d cost calls, %d plans, widest %d", c.calls, c.plans, m.max_width);
    /* the rows per predict call, chosen by the model (predict_rows_auto),
     * a draft wrong now and then; draft_max 7 (the model picks the rows
     * only) and auto: rows dear and calls free - one row a call, no row
     * projected past a rejection; calls dear - every row at once */
    m.rows_auto = 1;
    m.wrong_every = 5;
    m.predict_rows = 4;
    mock pl = {.prompt = 5, .wrong_every = 5};
    run(&pl, &ref3, 400, 1, -1, 3000, NULL, 0, &st);
    for (int dm = 7; dm >= -1; dm -= 8) {
        c = (cost_mock){.fixed = 1, .row = 0.1, .call = 1e-4, .m = &m};
        run(&m, &s, 400, 16, dm, 3000, NULL, 0, &st);
        CHECK(same(&s, &ref3) && st.rounds > 10 && m.rows_wasted == 0 && st.predicted_rows == st.n_emitted - 1,
              "draft_max %d, rows dear: %d rounds, %ld rows wasted, %ld predicted for %d tokens", dm, st.rounds,
              m.rows_wasted, st.predicted_rows, st.n_emitted);
        c = (cost_mock){.fixed = 1, .row = 1e-4, .call = 0.1, .m = &m};
        run(&m, &s, 400, 16, dm, 3000, NULL, 0, &st);
        long verified = 0;
        for (int w = 1; w <= SPEC_MAX_BLOCK; w++) verified += (long)w * st.width_hist[w];
        CHECK(same(&s, &ref3) && st.rounds > 10 && m.rows_wasted > 0 && st.predicted_rows == verified,
              "draft_max %d, calls dear: %d rounds, %ld rows wasted, %ld predicted of %ld verified", dm, st.rounds,
              m.rows_wasted, st.predicted_rows, verified);
    }
    m.batch = NULL;
}

/* smp_argmax (SIMD where available) = the first index of the maximum. */
TEST(argmax_first_maximum) {
    static float x[151936];
    uint32_t r = 12345;
    int sizes[] = {1, 2, 15, 16, 17, 63, 64, 65, 1000, 151936};
    for (int si = 0; si < 10; si++) {
        int n = sizes[si];
        for (int rep = 0; rep < 20; rep++) {
            for (int i = 0; i < n; i++) {
                r = r * 1664525u + 1013904223u;
                x[i] = (float)(r >> 8) / 65536.0f - 128.0f;
            }
            int want = 0;
            if (rep % 3 == 1) { /* ties: the maximum several times */
                for (int i = 0; i < n; i += 1 + n / 4) x[i] = 1000.0f;
            }
            for (int i = 1; i < n; i++)
                if (x[i] > x[want]) want = i;
            CHECK(smp_argmax(x, n) == want, "n %d rep %d: %d != %d", n, rep, smp_argmax(x, n), want);
        }
    }
}

/* --tree auto's choice (spec_tree_pick / spec_tree_record) on scripted
 * rounds: each option's tokens and seconds a round with +-20% noise, the
 * best option (the 32-row tree) slowed 5x in its first round and 3x in its
 * second (CUDA graphs captured for new widths), the chain's and 8-row
 * tree's first rounds too. The choice must settle on the best option; the
 * rounds cut short (weigh 0: a tenth of each option's, emitting little)
 * must not count against it. */
TEST(tree_auto_settles_on_the_best) {
    static const double tok[SPEC_TREE_OPTS] = {7.0, 6.6, 8.0, 11.0}; /* chain, 8, 16, 32 rows */
    static const double sec[SPEC_TREE_OPTS] = {1.6e-3, 1.2e-3, 1.7e-3, 1.5e-3};
    spec_auto c;
    memset(&c, 0, sizeof c);
    uint32_t r = 12345;
    int best_late = 0, runs[SPEC_TREE_OPTS] = {0};
    for (int round = 0; round < 400; round++) {
        int o = spec_tree_pick(&c);
        CHECK(o >= 0 && o < SPEC_TREE_OPTS, "round %d: option %d", round, o);
        if (o < 0 || o >= SPEC_TREE_OPTS) return;
        r = r * 1664525u + 1013904223u;
        double noise = 0.8 + 0.4 * (double)(r >> 8) / (double)(1u << 24);
        double s = sec[o] * noise * (runs[o] == 0 ? 5.0 : o == 3 && runs[o] == 1 ? 3.0 : 1.0);
        int cut = (r >> 4) % 10 == 0; /* the tokens left cut this round short */
        int t = cut ? 1 : (int)(tok[o] * (2.0 - noise) + 0.5);
        spec_tree_record(&c, o, t, s, !cut);
        runs[o]++;
        if (round >= 100) best_late += o == 3;
    }
    CHECK(best_late >= 270, "the 32-row tree ran %d of the last 300 rounds (runs: %d %d %d %d)", best_late, runs[0],
          runs[1], runs[2], runs[3]);
    for (int o = 0; o < SPEC_TREE_OPTS; o++) CHECK(runs[o] >= 3, "option %d ran %d times: never explored", o, runs[o]);
    /* the clamp: a weighed round counts at most SPEC_TREE_CLAMP x the mean */
    memset(&c, 0, sizeof c);
    spec_tree_record(&c, 1, 5, 1.0, 1); /* warm-up: not weighed */
    CHECK(c.opt_w[1] == 0 && c.opt_n[1] == 1, "the warm-up was weighed");
    spec_tree_record(&c, 1, 5, 1e-3, 1);
    spec_tree_record(&c, 1, 5, 1.0, 1);
    CHECK(c.opt_s[1] < 0.97e-3 + SPEC_TREE_CLAMP * 1e-3 + 1e-9, "a slow round counted %g s", c.opt_s[1]);
    spec_tree_record(&c, 1, 1, 1e-4, 0);
    CHECK(c.opt_n[1] == 4 && c.opt_w[1] < 2, "a round cut short was weighed");
}

int main(void) {
    init_seq();
    RUN(argmax_first_maximum);
    RUN(plain_decoding);
    RUN(full_acceptance_plus_bonus);
    RUN(trim_cuts_refused_drafts);
    RUN(first_draft_rejected);
    RUN(stop_token_inside_accepted_prefix);
    RUN(stop_token_first);
    RUN(budget_smaller_than_block);
    RUN(last_round_of_one_token_skips_draft);
    RUN(context_end);
    RUN(block_length_one);
    RUN(mixed_acceptance_all_block_sizes);
    RUN(predict_rows_stop_at_rejection);
    RUN(batch_cost_model);
    RUN(tree_auto_settles_on_the_best);
    CHECK_DONE("test_spec");
}
