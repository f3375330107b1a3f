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
 * p_i = running acceptance rate of draft position i given i-1 accepted.
 * Cost: draft(k) + verify(k+1), running averages of measured times; widths
 * never measured are estimated from the nearest measured one. Pick the k with
 * the best E(k)/cost(k). When k = 0 wins, every 16th round probes k = 2 so
 * the acceptance estimates keep up. */
typedef struct {
    double verify[SPEC_MAX_BLOCK + 1]; /* seconds per verify of width w; 0 = unknown */
    double draft[SPEC_MAX_BLOCK + 1];  /* seconds per draft of k tokens */
    double acc[SPEC_MAX_BLOCK + 1];    /* pseudo-counts of accepted at position i */
    double tot[SPEC_MAX_BLOCK + 1];
    int plain_run;
} auto_ctl;

static void ema(double *v, double x) { *v = *v == 0 ? x : 0.8 * *v + 0.2 * x; }

static double est(const double *a, int w, int max) {
    if (a[w] > 0) return a[w];
    for (int d = 1; d <= max; d++) {
        if (w - d >= 1 && a[w - d] > 0) return a[w - d] * (1.0 + 0.05 * d);
        if (w + d <= max && a[w + d] > 0) return a[w + d] / (1.0 + 0.05 * d);
    }
    return 0;
}

static int auto_pick(auto_ctl *c, int cap) {
    if (cap <= 0) return 0;
    if (est(c->verify, 1, cap + 1) == 0) return cap; /* nothing measured yet: try the widest */
    int best = 0;
    double best_rate = 0, e = 1, prod = 1;
    for (int k = 0; k <= cap; k++) {
        if (k > 0) {
            prod *= (c->acc[k] + 1.0) / (c->tot[k] + 2.0);
            e += prod;
        }
        double cost = est(c->verify, k + 1, cap + 1) + (k ? est(c->draft, k, cap) : 0);
        if (k > 0 && c->draft[k] == 0 && est(c->draft, k, cap) == 0) cost *= 1.2; /* unknown draft cost */
        double rate = e / cost;
        if (rate > best_rate) {
            best_rate = rate;
            best = k;
        }
    }
    if (best == 0 && ++c->plain_run % 16 == 0) return cap < 2 ? cap : 2;
    if (best) c->plain_run = 0;
    return best;
}

int spec_run(const spec_iface *it, const spec_params *p, int32_t first, spec_emit_fn emit, void *emit_ud,
             spec_stats *st) {
    memset(st, 0, sizeof *st);
    auto_ctl ctl;
    memset(&ctl, 0, sizeof ctl);
    int32_t tok[SPEC_MAX_BLOCK], pred[SPEC_MAX_BLOCK];
    int maxk = p->block_size - 1;
    if (maxk > SPEC_MAX_BLOCK - 1) maxk = SPEC_MAX_BLOCK - 1;
    if (!it->draft) maxk = 0;
    if (p->draft_max >= 0 && p->draft_max < maxk) maxk = p->draft_max;
    int32_t anchor = first;
    int used = 0; /* positions committed since the prompt */
    if (p->n_predict <= 0) return 0;
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
        int k = p->draft_max < 0 ? auto_pick(&ctl, cap) : cap;
        tok[0] = anchor;
        double t0 = dfl_now();
        if (k > 0 && it->draft(it->ud, anchor, k, tok + 1) != 0) return -1;
        double t1 = dfl_now();
        if (it->verify(it->ud, tok, k + 1, pred) != 0) return -1;
        double t2 = dfl_now();
        int a = 0;
        while (a < k && tok[a + 1] == pred[a]) a++;
        if (it->accept(it->ud, a + 1) != 0) return -1;
        double t3 = dfl_now();
        used += a + 1;
        st->draft_s += t1 - t0;
        st->verify_s += t2 - t1;
        st->other_s += t3 - t2;
        st->width_hist[k + 1]++;
        ema(&ctl.verify[k + 1], t2 - t1);
        if (k > 0) {
            ema(&ctl.draft[k], t1 - t0);
            st->rounds++;
            st->committed_in_rounds += a + 1;
            for (int i = 0; i < k && i <= a; i++) {
                st->tried[i]++;
                ctl.tot[i + 1]++;
                if (i < a) {
                    st->accepted[i]++;
                    ctl.acc[i + 1]++;
                }
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
