/* spec.c - see spec.h. */
#include "spec.h"

#include <string.h>

#include "util.h"

static int is_stop(const spec_params *p, int32_t t) {
    for (int i = 0; i < p->n_stop; i++)
        if (p->stop[i] == t) return 1;
    return 0;
}

/* --- draft length control ------------------------------------------------
 * Expected tokens from a round with k drafts: E(k) = 1 + sum_{j<=k} prod_{i<=j} p_i,
 * p_i = acceptance rate of draft position i given i-1 accepted, from decayed
 * counts with a prior of weight 1 centred on p_{i-1} (p_1: on 1/2), so a
 * position never tried inherits its predecessor's rate instead of a guess.
 * Cost: draft(k) + verify forward(k+1) + the expected cost of the predict
 * calls (the call for rows r.. is made only when drafts 1..r were accepted),
 * each from running averages; a width never measured is interpolated
 * linearly between measured neighbours, or extrapolated as half fixed cost,
 * half proportional to width. Pick the k with the best E(k)/cost(k), a
 * k > 0 needing DRAFT_MARGIN over plain decoding. Until both ends are measured the rounds explore: the first
 * drafts the whole block (every position gets tried), the next one is plain.
 * When k = 0 keeps winning, a probe drafting the whole block runs after
 * probe_gap plain rounds so the acceptance estimates stay current; a probe
 * after which k = 0 still wins doubles the gap (4 up to 256), so a useless
 * draft costs little (under batching a whole block costs as much as ~10
 * plain rounds of the sequence: probing every 4 rounds cost more than the
 * drafting gained). With the batch's model a probe drafts the k that would
 * be best if every draft were accepted, and none runs when even that would
 * lose to plain decoding (beside others whose plain rounds are cheap).
 * Batched (spec_params.batch): the costs are the batch's instead - the
 * predicted seconds of a round of every running sequence under each k
 * (spec_batch_cost), the acceptance stays this sequence's own - and k
 * maximizes the batch's tokens per second (batch_best); the own timings
 * are the fallback while the batch's model has too few measurements. */
/* Draft only when the model expects at least this gain over plain decoding:
 * near break-even the estimates' errors decide, and drafting also slows the
 * plain steps around it (more memory touched). */
#define DRAFT_MARGIN 1.05

/* Running cost: follows a drop at once and a rise slowly, so a round slowed
 * by something else (another process, a cold cache) barely moves it. */
static void ema(double *v, double x) { *v = *v == 0 ? x : x < *v ? 0.5 * *v + 0.5 * x : 0.9 * *v + 0.1 * x; }

static double est(const double *a, int w, int max) {
    if (a[w] > 0) return a[w];
    int lo = w - 1, hi = w + 1;
    while (lo >= 1 && a[lo] == 0) lo--;
    while (hi <= max && a[hi] == 0) hi++;
    if (lo >= 1 && hi <= max) return a[lo] + (a[hi] - a[lo]) * (w - lo) / (double)(hi - lo);
    int n = lo >= 1 ? lo : hi <= max ? hi : 0;
    if (!n) return 0;
    return a[n] * (0.5 + 0.5 * (double)w / n);
}

/* Expected seconds of the predict calls of a verify of k drafts, rows asked
 * for R at a time (R = 0: all at once): call c happens when the drafts
 * before its first row were all accepted. p[i] = acceptance rate of draft i. */
static double predict_cost(const spec_auto *c, const double *p, int k, int R) {
    if (R <= 0 || R > k + 1) R = k + 1;
    double cost = 0, reach = 1;
    for (int r0 = 0; r0 <= k; r0 += R) {
        int n = k + 1 - r0 < R ? k + 1 - r0 : R;
        cost += reach * est(c->predict, n, SPEC_MAX_BLOCK);
        for (int i = r0 + 1; i <= r0 + n && i <= k; i++) reach *= p[i];
    }
    return cost;
}

/* p[1..k]: the acceptance rate of each draft position (the prior above). */
static void accept_rates(const spec_auto *c, int k, double *p) {
    double prev = 0.5;
    for (int i = 1; i <= k; i++) prev = p[i] = (c->acc[i] + prev) / (c->tot[i] + 1.0);
}

/* reach[0..k]: the probability that drafts 1..i are all accepted. */
static void reach_of(const double *p, int k, double *reach) {
    reach[0] = 1;
    for (int i = 1; i <= k; i++) reach[i] = reach[i - 1] * p[i];
}

/* The plan of a chain round with k drafts (spec_round), predict calls of R
 * rows (0: all at once), their cost counted in own_s when they are the
 * sequence's own (own). */
static spec_round round_plan(const spec_auto *c, const double *reach, int k, int R, int own) {
    spec_round r = {.k = k, .rows = R, .shared = !own, .tokens = 0};
    for (int j = 0; j <= k; j++) r.tokens += reach[j];
    if (own) {
        int rows[SPEC_MAX_BLOCK];
        double at[SPEC_MAX_BLOCK];
        int n = spec_round_calls(&r, reach, rows, at);
        for (int i = 0; i < n; i++) r.own_s += at[i] * est(c->predict, rows[i], SPEC_MAX_BLOCK);
    }
    return r;
}

/* Rows per predict call the batch's model chooses among (spec_params.
 * predict_rows_auto): one at a time projects no row past the first rejected
 * draft but makes more steps; 0 = every row of the verify at once. */
static const int rows_options[] = {1, 2, 4, 0};
enum { ROWS_OPTIONS = sizeof rows_options / sizeof rows_options[0] };

/* The best plan with k_lo..k_hi drafts from the batch's cost model (*rows:
 * its rows per predict call), or -1 if the model cannot predict yet: the
 * most tokens per second of the whole batch, (others' tokens + this
 * sequence's) / the batch's round, this sequence's tokens from drafting
 * discounted by DRAFT_MARGIN; rows per call R, or each of rows_options when
 * rows_auto. Alone the others' tokens are 0 and the round is this
 * sequence's: the same choice as own_best's. */
static int batch_best(const spec_auto *c, const double *p, int k_lo, int k_hi, int R, int rows_auto,
                      const spec_batch_cost *bc, int *rows) {
    spec_round plan[SPEC_MAX_BLOCK * ROWS_OPTIONS];
    double cost[SPEC_MAX_BLOCK * ROWS_OPTIONS], reach[SPEC_MAX_BLOCK + 1], others = 0;
    int n = 0;
    if (k_lo > k_hi) return -1;
    reach_of(p, k_hi, reach);
    for (int k = k_lo; k <= k_hi; k++)
        for (int o = 0, last = -1; o < (rows_auto ? ROWS_OPTIONS : 1); o++) {
            int r = rows_auto ? rows_options[o] : R, per_call = r <= 0 || r > k + 1 ? k + 1 : r;
            if (per_call == last) continue; /* the same calls as the option before */
            last = per_call;
            plan[n++] = round_plan(c, reach, k, r, bc->predict_own);
        }
    if (bc->round_costs(bc->ud, reach, plan, n, cost, &others) != 0) return -1;
    int best = -1;
    double best_rate = 0;
    for (int i = 0; i < n; i++) {
        if (!(cost[i] > 0)) continue;
        double rate = (others + (plan[i].k ? plan[i].tokens / DRAFT_MARGIN : plan[i].tokens)) / cost[i];
        if (best < 0 || rate > best_rate) {
            best_rate = rate;
            best = i;
        }
    }
    if (best < 0) return -1;
    *rows = plan[best].rows;
    return plan[best].k;
}

/* The best k from this sequence's own timings (alone, or the batch's model
 * not ready). */
static int own_best(const spec_auto *c, const double *p, int cap, int R) {
    int best = 0;
    double best_rate = 0, e = 1, prod = 1;
    for (int k = 0; k <= cap; k++) {
        if (k > 0) {
            prod *= p[k];
            e += prod;
        }
        double cost = est(c->verify, k + 1, SPEC_MAX_BLOCK) + predict_cost(c, p, k, R) +
                      (k ? est(c->draft, k, SPEC_MAX_BLOCK - 1) : 0);
        double rate = k ? e / cost / DRAFT_MARGIN : e / cost;
        if (rate > best_rate) {
            best_rate = rate;
            best = k;
        }
    }
    return best;
}

/* k for a round with at most cap drafts; *rows: rows per predict call
 * (R unless the batch's model chose, rows_auto). */
static int auto_pick(spec_auto *c, int cap, int R, int rows_auto, const spec_batch_cost *bc, int *rows) {
    *rows = R;
    if (cap <= 0) return 0;
    double p[SPEC_MAX_BLOCK + 1];
    accept_rates(c, cap, p);
    int best = bc ? batch_best(c, p, 0, cap, R, rows_auto, bc, rows) : -1, modelled = best >= 0;
    if (best < 0) {
        if (est(c->draft, 1, SPEC_MAX_BLOCK - 1) == 0) return cap; /* explore: the whole block */
        if (c->verify[1] == 0) return 0;                            /* explore: one plain step */
        best = own_best(c, p, cap, R);
    }
    if (c->probe_gap < 4) c->probe_gap = 4;
    if (c->probed) { /* the round before was a probe: it did not make drafting win, probe half as often */
        c->probed = 0;
        if (best == 0 && c->probe_gap < 256) c->probe_gap *= 2;
    }
    if (best == 0) {
        if (++c->plain_run < c->probe_gap) return 0;
        c->plain_run = 0;
        int k = cap; /* the whole block: every position gets a new sample */
        if (modelled) { /* a probe only where drafting could win: with every draft accepted, k of the best plan */
            double sure[SPEC_MAX_BLOCK + 1];
            for (int i = 1; i <= cap; i++) sure[i] = 1;
            int r;
            k = batch_best(c, sure, 0, cap, R, 0, bc, &r);
            if (k <= 0) return 0; /* not even then (a batch of cheap plain rounds): no probe */
        }
        c->probing = 1;
        *rows = R; /* how many of its drafts a probe keeps is what it finds out: the default rows per call */
        return k;
    }
    c->plain_run = 0;
    c->probe_gap = 4;
    return best;
}

static void auto_update(spec_auto *c, int k, int a) {
    if (c->probing) {
        c->probing = 0;
        c->probed = 1;
    }
    for (int i = 1; i <= k && i <= a + 1; i++) {
        c->tot[i] = 0.98 * c->tot[i] + 1;
        c->acc[i] = 0.98 * c->acc[i] + (i <= a);
    }
}

/* --- tree auto ------------------------------------------------------------
 * Each option (the chain, trees of 8/16/32 rows) keeps decayed sums of the
 * tokens its weighed rounds emitted and the seconds they took (spec.h:
 * spec_tree_record says which rounds are weighed and how a slow one is
 * clamped); a round runs the option with the most tokens per second. Every
 * option runs three times first (a warm-up, then two weighed rounds);
 * afterwards a losing option is probed once per opt_gap of its rounds
 * waited, the gap doubling (8 up to 256) while it keeps losing, so a tree
 * that does not pay on this machine costs about one round in 256. Which
 * option runs never changes the output (every round is exact). */
static const int tree_options[SPEC_TREE_OPTS] = SPEC_TREE_OPTIONS;

int spec_tree_pick(spec_auto *c) {
    for (int o = 0; o < SPEC_TREE_OPTS; o++)
        if (c->opt_n[o] < 3 || c->opt_w[o] == 0) return o;
    int best = 0;
    for (int o = 1; o < SPEC_TREE_OPTS; o++)
        if (c->opt_tok[o] * c->opt_s[best] > c->opt_tok[best] * c->opt_s[o]) best = o;
    c->opt_gap[best] = 8;
    for (int o = 0; o < SPEC_TREE_OPTS; o++) {
        if (o == best) continue;
        if (c->opt_gap[o] < 8) c->opt_gap[o] = 8;
        if (++c->opt_wait[o] >= c->opt_gap[o]) {
            c->opt_wait[o] = 0;
            if (c->opt_gap[o] < 256) c->opt_gap[o] *= 2;
            return o;
        }
    }
    return best;
}

void spec_tree_record(spec_auto *c, int o, int tokens, double s, int weigh) {
    if (o < 0 || o >= SPEC_TREE_OPTS) return;
    if (c->opt_n[o]++ == 0 || !weigh) return; /* the warm-up, or a round cut short */
    double cap = c->opt_w[o] > 0 ? SPEC_TREE_CLAMP * c->opt_s[o] / c->opt_w[o] : s; /* 2x the mean so far */
    if (s > cap) s = cap;
    c->opt_tok[o] = 0.97 * c->opt_tok[o] + tokens;
    c->opt_s[o] = 0.97 * c->opt_s[o] + s;
    c->opt_w[o] = 0.97 * c->opt_w[o] + 1;
}

/* One tree round: draft a tree of at most budget rows and depth <= max_depth
 * below the anchor, verify it, follow the target's choices (spec.h).
 * out[0..a] = the accepted drafts then the bonus; returns a (drafts
 * accepted), or -1 on a model error. */
static int tree_round(const spec_iface *it, const spec_params *p, int32_t anchor, int budget, int max_depth,
                      int32_t *out, spec_stats *st) {
    int32_t tok[SPEC_MAX_BLOCK], pred[SPEC_MAX_BLOCK];
    int parent[SPEC_MAX_BLOCK], path[SPEC_MAX_BLOCK], depth[SPEC_MAX_BLOCK];
    double t0 = dfl_now();
    int n = it->draft_tree(it->ud, anchor, budget, max_depth, tok, parent);
    if (n < 1 || n > budget) {
        if (n >= 0) dfl_seterr("draft tree: %d nodes for a budget of %d", n, budget);
        return -1;
    }
    int md = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 ? parent[0] != -1 || tok[0] != anchor : parent[i] < 0 || parent[i] >= i) {
            dfl_seterr("draft tree: node %d has parent %d", i, parent[i]);
            return -1;
        }
        depth[i] = i ? depth[parent[i]] + 1 : 0;
        md = depth[i] > md ? depth[i] : md;
    }
    double t1 = dfl_now();
    if (it->verify_tree(it->ud, tok, parent, n) != 0) return -1;
    int a = 0, cur = 0, next = 0; /* next: the first row not predicted yet */
    path[0] = 0;
    for (;;) {
        if (cur >= next) {
            int r = p->predict_rows > 0 ? p->predict_rows : n;
            if (r > n - cur) r = n - cur;
            if (it->predict(it->ud, cur, r, pred + cur) != 0) return -1;
            st->predicted_rows += r;
            next = cur + r;
        }
        if (pred[cur] < 0) return -1; /* the sampler failed on a row plain decoding uses too */
        int c = cur + 1;
        while (c < n && !(parent[c] == cur && tok[c] == pred[cur])) c++;
        if (c == n) break;
        path[++a] = cur = c;
    }
    double t2 = dfl_now();
    if (it->accept_path(it->ud, path, a + 1) != 0) return -1;
    st->draft_s += t1 - t0;
    st->verify_s += t2 - t1;
    st->other_s += dfl_now() - t2;
    st->width_hist[n]++;
    if (n > 1) {
        st->rounds++;
        st->committed_in_rounds += a + 1;
        st->accept_hist[a]++;
        st->tree_rounds++;
        for (int i = 0; i < md && i <= a; i++) {
            st->tried[i]++;
            st->accepted[i] += i < a;
        }
    } else {
        st->plain_steps++;
    }
    for (int i = 1; i <= a; i++) out[i - 1] = tok[path[i]];
    out[a] = pred[cur];
    return a;
}

int spec_run(const spec_iface *it, const spec_params *p, int32_t first, spec_emit_fn emit, void *emit_ud,
             spec_stats *st) {
    memset(st, 0, sizeof *st);
    spec_auto local;
    memset(&local, 0, sizeof local);
    spec_auto *ctl = p->ctl ? p->ctl : &local;
    int32_t tok[SPEC_MAX_BLOCK], pred[SPEC_MAX_BLOCK];
    int maxk = p->block_size - 1;
    if (maxk > SPEC_MAX_BLOCK - 1) maxk = SPEC_MAX_BLOCK - 1;
    if (!it->draft) maxk = 0;
    if (p->draft_max >= 0 && p->draft_max < maxk) maxk = p->draft_max;
    int32_t anchor = first;
    int used = 0; /* positions committed since the prompt */
    if (p->n_predict <= 0) return 0;
    if (anchor < 0) return -1; /* the sampler failed (non-finite logits) and said why */
    if (is_stop(p, anchor)) {
        st->stopped_by = 1;
        return 0;
    }
    st->n_emitted = 1;
    if (emit(emit_ud, anchor)) {
        st->stopped_by = 3;
        return 0;
    }
    while (st->n_emitted < p->n_predict) {
        int room = p->room - used; /* the anchor needs one position, each draft one more */
        if (room < 1) {
            st->stopped_by = 2;
            return 0;
        }
        int left = p->n_predict - st->n_emitted;
        int cap = maxk;
        if (cap > left - 1) cap = left - 1;
        if (cap > room - 1) cap = room - 1;
        int auto_tree = p->tree < 0 && it->draft_tree && cap > 0, opt = auto_tree ? spec_tree_pick(ctl) : 0;
        int tree = auto_tree ? tree_options[opt] : p->tree;
        int budget = tree < room ? tree : room; /* every tree row takes a position until the commit */
        double tr = dfl_now();
        if (tree > 1 && it->draft_tree && cap > 0 && budget > 1) {
            int32_t out[SPEC_MAX_BLOCK];
            int a = tree_round(it, p, anchor, budget, cap, out, st);
            if (a < 0) return -1;
            if (auto_tree) spec_tree_record(ctl, opt, a + 1, dfl_now() - tr, cap == maxk && budget == tree);
            used += a + 1;
            for (int i = 0; i <= a; i++) { /* the accepted drafts, then the bonus */
                if (is_stop(p, out[i])) {
                    st->stopped_by = 1;
                    return 0;
                }
                st->n_emitted++;
                if (emit(emit_ud, out[i])) {
                    st->stopped_by = 3;
                    return 0;
                }
            }
            anchor = out[a];
            continue;
        }
        int R = p->predict_rows, rows_auto = p->batch && p->predict_rows_auto && !p->batch->predict_own;
        int k = tree > 1 ? 0 : p->draft_max < 0 ? auto_pick(ctl, cap, R, rows_auto, p->batch, &R) : cap;
        if (p->batch) { /* what this round asks of the batch, whatever chose k */
            double pr[SPEC_MAX_BLOCK + 1], reach[SPEC_MAX_BLOCK + 1];
            accept_rates(ctl, k, pr);
            if (p->draft_max >= 0 && rows_auto && k > 0) { /* a fixed k: the rows per call the model prefers */
                int r;
                if (batch_best(ctl, pr, k, k, R, 1, p->batch, &r) >= 0) R = r;
            }
            reach_of(pr, k, reach);
            spec_round plan = round_plan(ctl, reach, k, R, p->batch->predict_own);
            p->batch->plan(p->batch->ud, reach, &plan);
        }
        tok[0] = anchor;
        double t0 = dfl_now();
        if (k > 0 && it->draft(it->ud, anchor, k, tok + 1) != 0) return -1;
        int k_drafted = k;
        if (k > 0 && it->trim) {
            int kt = it->trim(it->ud, tok + 1, k);
            if (kt >= 0 && kt < k) k = kt;
        }
        double t1 = dfl_now();
        if (it->verify(it->ud, tok, k + 1) != 0) return -1;
        ema(&ctl->verify[k + 1], dfl_now() - t1);
        /* predictions a few rows at a time, up to the first rejection:
         * row j predicts the position of tok[j + 1]; row k only the bonus */
        int a = 0;
        for (int i = 0, open = 1; open;) {
            int n = R > 0 ? R : k + 1;
            if (n > k + 1 - i) n = k + 1 - i;
            double tp = dfl_now();
            if (it->predict(it->ud, i, n, pred + i) != 0) return -1;
            ema(&ctl->predict[n], dfl_now() - tp);
            st->predicted_rows += n;
            for (int j = i; j < i + n && open; j++) {
                if (pred[j] < 0) return -1; /* the sampler failed on a row plain decoding uses too */
                if (j < k && tok[j + 1] == pred[j])
                    a = j + 1;
                else
                    open = 0;
            }
            i += n;
        }
        double t2 = dfl_now();
        if (it->accept(it->ud, a + 1) != 0) return -1;
        double t3 = dfl_now();
        if (auto_tree) spec_tree_record(ctl, opt, a + 1, t3 - tr, cap == maxk);
        used += a + 1;
        st->draft_s += t1 - t0;
        st->verify_s += t2 - t1;
        st->other_s += t3 - t2;
        st->width_hist[k + 1]++;
        if (k_drafted > 0) ema(&ctl->draft[k_drafted], t1 - t0);
        if (k > 0) {
            auto_update(ctl, k, a);
            st->rounds++;
            st->committed_in_rounds += a + 1;
            st->accept_hist[a]++;
            for (int i = 0; i < k && i <= a; i++) {
                st->tried[i]++;
                st->accepted[i] += i < a;
            }
        } else {
            st->plain_steps++;
        }
        /* emit accepted drafts, then the bonus; a stop token ends the output
         * exactly where plain decoding would end it */
        for (int i = 0; i <= a; i++) {
            int32_t t = i < a ? tok[i + 1] : pred[a];
            if (is_stop(p, t)) {
                st->stopped_by = 1;
                return 0;
            }
            st->n_emitted++;
            if (emit(emit_ud, t)) {
                st->stopped_by = 3;
                return 0;
            }
        }
        anchor = pred[a];
    }
    return 0;
}
