/* batch.c - the forward scheduler of batch.h. */
#include "batch.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

/* One sequence's waiting forward, argmax or draft block (on its caller's
 * stack); a step runs the requests of one kind (batch.h's order). */
typedef struct bat_req {
    bat_kind kind;
    void *st;
    const be_batch *batch;       /* BAT_FORWARD */
    const be_draft_block *draft; /* BAT_DRAFT: st is the draft state */
    int row, n;                  /* BAT_ARGMAX: kept rows row..row+n-1: their logits into logits [n][vocab]
                                    if set (sampling), else their argmaxes into out */
    int32_t *out;
    float *logits;
    int rc, done;
    char err[512];       /* the error of a failed forward (rc -1) */
    struct bat_req *next;
} bat_req;

/* ---- measured step costs (the cost model of batch.h) ----------------------
 * A kind of step's seconds as coef[0] + coef[1] * parts + coef[2] * rows:
 * a step's fixed cost (the weights read once), a part's (a sequence in a
 * forward or argmax step: its attention, its gathers; a block in a draft
 * step: its layers over the block's rows) and a row's (a verify or argmax
 * row; a draft slot projected through the head). Least squares over the
 * steps with a decay of FIT_DECAY per step, the coefficients kept >= 0: the
 * best fit among the subsets of the three terms whose coefficients are all
 * >= 0; ties go to the larger subset, so while the steps cannot tell the
 * terms apart (all of one shape) the fit spreads the cost over them. A
 * line, not a curve, so noisy steps of a few shapes give a cost that grows
 * with rows everywhere, as a step's does. */
#define FIT_DECAY 0.98
typedef struct {
    double xx[3][3], xt[3], tt; /* decayed sums of x x', x t, t t over steps, x = (1, parts, rows) */
    double coef[3];
    int n;                      /* steps measured */
} bat_fit;

/* Solves the normal equations on the terms in mask (ridge 1e-9 of each
 * diagonal); 0 and beta (zeros outside mask) or -1 if singular. */
static int fit_solve(const bat_fit *f, int mask, double *beta) {
    int idx[3], m = 0;
    for (int i = 0; i < 3; i++)
        if (mask >> i & 1) idx[m++] = i;
    double a[3][4];
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < m; j++) a[i][j] = f->xx[idx[i]][idx[j]] * (i == j ? 1 + 1e-9 : 1);
        a[i][m] = f->xt[idx[i]];
    }
    for (int c = 0; c < m; c++) { /* Gauss-Jordan with partial pivoting */
        int p = c;
        for (int r = c + 1; r < m; r++)
            if (fabs(a[r][c]) > fabs(a[p][c])) p = r;
        if (!(fabs(a[p][c]) > 0)) return -1;
        for (int j = 0; j <= m; j++) {
            double t = a[c][j];
            a[c][j] = a[p][j];
            a[p][j] = t;
        }
        for (int r = 0; r < m; r++) {
            if (r == c) continue;
            double q = a[r][c] / a[c][c];
            for (int j = c; j <= m; j++) a[r][j] -= q * a[c][j];
        }
    }
    beta[0] = beta[1] = beta[2] = 0;
    for (int i = 0; i < m; i++) beta[idx[i]] = a[i][m] / a[i][i];
    return 0;
}

static void fit_add(bat_fit *f, int parts, int rows, double s) {
    if (parts < 1 || !(s > 0)) return;
    double x[3] = {1, parts, rows};
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++) f->xx[i][j] = FIT_DECAY * f->xx[i][j] + x[i] * x[j];
        f->xt[i] = FIT_DECAY * f->xt[i] + x[i] * s;
    }
    f->tt = FIT_DECAY * f->tt + s * s;
    f->n++;
    double best = INFINITY;
    for (int mask = 7; mask >= 1; mask--) {
        double beta[3];
        if (fit_solve(f, mask, beta) != 0 || beta[0] < 0 || beta[1] < 0 || beta[2] < 0) continue;
        double rss = f->tt;
        for (int i = 0; i < 3; i++) {
            rss -= 2 * beta[i] * f->xt[i];
            for (int j = 0; j < 3; j++) rss += beta[i] * beta[j] * f->xx[i][j];
        }
        if (rss < best - 1e-12 * f->tt) {
            best = rss;
            memcpy(f->coef, beta, sizeof beta);
        }
    }
}

/* Seconds of a step of `parts` parts and `rows` rows (no parts: no step,
 * 0 s); -1: nothing measured. */
static double fit_at(const bat_fit *f, double parts, double rows) {
    if (parts <= 0) return 0;
    return f->n ? f->coef[0] + f->coef[1] * parts + f->coef[2] * rows : -1;
}

struct bat_sched {
    const be_ops *be;
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* for the waiting requests: a step finished, or one can run (a sequence left, the
                            backend was released) */
    pthread_cond_t lk;   /* for bat_lock: the backend was released */
    pthread_cond_t nt;   /* for bat_sleep: bat_notify was called */
    unsigned long notified; /* bat_notify calls so far */
    int busy;            /* a thread is using the backend */
    int n_pending;       /* requests in pending, not yet taken by a step */
    bat_req *pending;
    double lock_t0;      /* when bat_lock took the backend */
    double active_t0;    /* when c.active last went from 0 to 1 */
    bat_counts c;        /* c.active: sequences between bat_enter and bat_leave */
    bat_member *members; /* the generations inside (bat_enter .. bat_leave) */
    bat_fit forward_cost, argmax_cost, draft_cost;
    int step_tokens;     /* the per-step token budget of bat_prefill_rows */
};

/* One step's seconds into its kind's fit (b->mu held). */
static void measure(bat_sched *b, bat_kind kind, int parts, int rows, double s) {
    fit_add(kind == BAT_FORWARD ? &b->forward_cost : kind == BAT_ARGMAX ? &b->argmax_cost : &b->draft_cost, parts,
            rows, s);
}

bat_sched *bat_new(const be_ops *be, int step_tokens) {
    bat_sched *b = dfl_calloc(1, sizeof *b);
    b->be = be;
    b->step_tokens = step_tokens > 0 ? step_tokens : BAT_STEP_TOKENS;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    pthread_cond_init(&b->lk, NULL);
    pthread_cond_init(&b->nt, NULL);
    return b;
}

void bat_free(bat_sched *b) {
    if (!b) return;
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    pthread_cond_destroy(&b->lk);
    pthread_cond_destroy(&b->nt);
    free(b);
}

void bat_enter(bat_sched *b, bat_member *me) {
    pthread_mutex_lock(&b->mu);
    *me = (bat_member){.next = b->members};
    b->members = me;
    if (b->c.active++ == 0) b->active_t0 = dfl_now();
    pthread_mutex_unlock(&b->mu);
}

/* A step can run: something waits, every running generation waits, nobody
 * holds the backend (b->mu held). */
static int step_ready(const bat_sched *b) { return !b->busy && b->n_pending > 0 && b->n_pending >= b->c.active; }

/* The backend was released (b->mu held): a bat_lock waiter, and the
 * waiting requests if a step can run now. Only these are woken: waking
 * every waiting thread at each change costs a context switch per thread on
 * a busy machine. */
static void released(bat_sched *b) {
    pthread_cond_signal(&b->lk);
    if (step_ready(b)) pthread_cond_broadcast(&b->cv);
}

void bat_leave(bat_sched *b, bat_member *me) {
    pthread_mutex_lock(&b->mu);
    for (bat_member **pp = &b->members; *pp; pp = &(*pp)->next)
        if (*pp == me) {
            *pp = me->next;
            break;
        }
    if (--b->c.active == 0) b->c.active_s += dfl_now() - b->active_t0;
    if (step_ready(b)) pthread_cond_broadcast(&b->cv); /* the waiting sequences may be all there is now */
    pthread_mutex_unlock(&b->mu);
}

/* Take / give back the backend (b->mu held): the one place busy and the
 * lock_s clock change for bat_lock, bat_unlock and bat_sleep. */
static void take(bat_sched *b) {
    while (b->busy) pthread_cond_wait(&b->lk, &b->mu);
    b->busy = 1;
    b->lock_t0 = dfl_now();
}

static void give_back(bat_sched *b) {
    b->busy = 0;
    b->c.lock_s += dfl_now() - b->lock_t0;
    released(b);
}

void bat_lock(bat_sched *b) {
    pthread_mutex_lock(&b->mu);
    take(b);
    pthread_mutex_unlock(&b->mu);
}

void bat_unlock(bat_sched *b) {
    pthread_mutex_lock(&b->mu);
    give_back(b);
    pthread_mutex_unlock(&b->mu);
}

void bat_sleep(bat_sched *b, int timeout_ms) {
    pthread_mutex_lock(&b->mu);
    unsigned long seen = b->notified; /* before the backend is released: no notify is lost */
    give_back(b);
    struct timespec until;
    if (timeout_ms > 0) {
        clock_gettime(CLOCK_REALTIME, &until);
        long ns = until.tv_nsec + (long)timeout_ms * 1000000L;
        until.tv_sec += ns / 1000000000L;
        until.tv_nsec = ns % 1000000000L;
    }
    while (b->notified == seen)
        if (timeout_ms > 0 ? pthread_cond_timedwait(&b->nt, &b->mu, &until) != 0 : pthread_cond_wait(&b->nt, &b->mu) != 0)
            break; /* the time is up */
    take(b);
    pthread_mutex_unlock(&b->mu);
}

void bat_notify(bat_sched *b) {
    pthread_mutex_lock(&b->mu);
    b->notified++;
    pthread_cond_broadcast(&b->nt);
    pthread_mutex_unlock(&b->mu);
}

void bat_stats(bat_sched *b, bat_counts *out) {
    pthread_mutex_lock(&b->mu);
    *out = b->c;
    if (b->c.active) out->active_s += dfl_now() - b->active_t0; /* the running stretch so far */
    pthread_mutex_unlock(&b->mu);
}

/* Each function below runs one kind of request of a step (the backend
 * held, b->mu not) and returns 1 if two or more that could share a pass ran
 * one by one (no multi call in the backend, or it refused them): each still
 * gets its own result, only the sharing is lost (bat_counts.unbatched). */

/* The argmaxes and logits of one step: one predict_multi (rows of several
 * sequences through one pass over the lm_head), else one by one. */
static int run_argmax(bat_sched *b, bat_req **r, int n) {
    int rc = -1;
    if (n > 1 && b->be->predict_multi) {
        void *sts[BE_MAX_SEQS];
        int row[BE_MAX_SEQS], cnt[BE_MAX_SEQS];
        int32_t *out[BE_MAX_SEQS];
        float *logits[BE_MAX_SEQS];
        for (int i = 0; i < n; i++)
            sts[i] = r[i]->st, row[i] = r[i]->row, cnt[i] = r[i]->n, out[i] = r[i]->out, logits[i] = r[i]->logits;
        rc = b->be->predict_multi(sts, row, cnt, out, logits, n);
        if (rc == 0)
            for (int i = 0; i < n; i++) r[i]->rc = 0;
    }
    if (rc != 0)
        for (int i = 0; i < n; i++) {
            r[i]->rc = r[i]->logits ? b->be->logits(r[i]->st, r[i]->row, r[i]->n, r[i]->logits)
                                    : b->be->argmax(r[i]->st, r[i]->row, r[i]->n, r[i]->out);
            if (r[i]->rc != 0) snprintf(r[i]->err, sizeof r[i]->err, "%s", dfl_lasterr());
        }
    return n > 1 && rc != 0;
}

/* The draft blocks of one step: one draft_block_multi (the draft's weights
 * read once for every block), else one by one. */
static int run_draft(bat_sched *b, bat_req **r, int n) {
    int rc = -1;
    if (n > 1 && b->be->draft_block_multi) {
        void *sts[BE_MAX_SEQS];
        be_draft_block bs[BE_MAX_SEQS];
        for (int i = 0; i < n; i++) sts[i] = r[i]->st, bs[i] = *r[i]->draft;
        rc = b->be->draft_block_multi(sts, bs, n);
        if (rc == 0)
            for (int i = 0; i < n; i++) r[i]->rc = 0;
    }
    if (rc != 0)
        for (int i = 0; i < n; i++) {
            r[i]->rc = b->be->draft_block(r[i]->st, r[i]->draft);
            if (r[i]->rc != 0) snprintf(r[i]->err, sizeof r[i]->err, "%s", dfl_lasterr());
        }
    return n > 1 && rc != 0;
}

/* The forwards of one step: the chains as one forward_multi, else one by
 * one; a tree batch alone (no backend batches one: backend.h). */
static int run_forward(bat_sched *b, bat_req **r, int n) {
    bat_req *c[BE_MAX_SEQS];
    int nc = 0, rc = -1;
    for (int i = 0; i < n; i++) {
        if (!r[i]->batch->tree_parent) {
            c[nc++] = r[i];
            continue;
        }
        r[i]->rc = b->be->forward(r[i]->st, r[i]->batch);
        if (r[i]->rc != 0) snprintf(r[i]->err, sizeof r[i]->err, "%s", dfl_lasterr());
    }
    if (nc > 1 && b->be->forward_multi) {
        void *sts[BE_MAX_SEQS];
        be_batch bs[BE_MAX_SEQS];
        for (int i = 0; i < nc; i++) sts[i] = c[i]->st, bs[i] = *c[i]->batch;
        rc = b->be->forward_multi(sts, bs, nc);
        if (rc == 0)
            for (int i = 0; i < nc; i++) c[i]->rc = 0;
    }
    if (rc != 0) /* one by one: each its own result */
        for (int i = 0; i < nc; i++) {
            c[i]->rc = b->be->forward(c[i]->st, c[i]->batch);
            if (c[i]->rc != 0) snprintf(c[i]->err, sizeof c[i]->err, "%s", dfl_lasterr());
        }
    return nc > 1 && rc != 0;
}

/* The kind a step runs (b->mu held, something pending): argmaxes before
 * draft blocks before forwards. A sequence's round goes forward (verify),
 * argmaxes (one or more), draft block, forward: a sequence whose kind
 * waits lets the others come round to it, so the sequences fall into step
 * and their forwards and draft blocks share passes. Nothing starves: after
 * an argmax a sequence drafts or forwards, after a draft it forwards, so
 * within a few steps every waiting request is of the kind that runs. */
static bat_kind step_kind(const bat_sched *b) {
    int has[BAT_KINDS] = {0};
    for (const bat_req *r = b->pending; r; r = r->next) has[r->kind] = 1;
    return has[BAT_ARGMAX] ? BAT_ARGMAX : has[BAT_DRAFT] ? BAT_DRAFT : BAT_FORWARD;
}

/* Queue *me and wait until a step (run by whichever waiting thread finds
 * every running generation waiting) has done it. */
static int step_wait(bat_sched *b, bat_req *req) {
    bat_req me_ = *req, *me = &me_;
    pthread_mutex_lock(&b->mu);
    me->next = b->pending;
    b->pending = me;
    b->n_pending++; /* no wake-up: if this completes the step, this thread runs it */
    while (!me->done) {
        if (!step_ready(b)) {
            pthread_cond_wait(&b->cv, &b->mu);
            continue;
        }
        /* every sequence inside a generation waits: this thread runs the
         * step, the requests of one kind, oldest first */
        bat_kind kind = step_kind(b);
        int skip = -BE_MAX_SEQS, n = 0; /* the list is newest first: skip all but the oldest BE_MAX_SEQS */
        for (const bat_req *p = b->pending; p; p = p->next) skip += p->kind == kind;
        bat_req *r[BE_MAX_SEQS];
        for (bat_req **pp = &b->pending; *pp;) {
            if ((*pp)->kind == kind && skip-- <= 0) {
                r[n++] = *pp;
                *pp = (*pp)->next; /* off the list */
            } else {
                pp = &(*pp)->next;
            }
        }
        for (int i = 0; i < n / 2; i++) { /* oldest first */
            bat_req *t = r[i];
            r[i] = r[n - 1 - i];
            r[n - 1 - i] = t;
        }
        b->n_pending -= n;
        b->busy = 1;
        pthread_mutex_unlock(&b->mu);
        double t0 = dfl_now();
        int rows = 0, solo;
        if (kind == BAT_FORWARD) {
            for (int i = 0; i < n; i++) rows += r[i]->batch->T;
            solo = run_forward(b, r, n);
            if (b->be->finish) b->be->finish(r[0]->st); /* the step's time is its own work (backend.h) */
        } else if (kind == BAT_DRAFT) {
            solo = run_draft(b, r, n);
        } else {
            for (int i = 0; i < n; i++) rows += r[i]->n;
            solo = run_argmax(b, r, n);
        }
        double dt = dfl_now() - t0;
        int slots = 0;
        for (int i = 0; kind == BAT_DRAFT && i < n; i++) slots += r[i]->draft->n_slots;
        pthread_mutex_lock(&b->mu);
        measure(b, kind, n, kind == BAT_DRAFT ? slots : rows, dt);
        b->busy = 0;
        b->c.unbatched += solo;
        if (kind == BAT_FORWARD) {
            b->c.forward_s += dt;
            b->c.steps++;
            b->c.seq_steps += n;
            b->c.rows += rows;
            b->c.last_batch = n;
            if (n > b->c.max_batch) b->c.max_batch = n;
            if (rows > b->c.max_rows) b->c.max_rows = rows;
        } else if (kind == BAT_DRAFT) {
            b->c.draft_s += dt;
            b->c.draft_steps++;
            b->c.draft_seq_steps += n;
            if (n > b->c.max_draft_batch) b->c.max_draft_batch = n;
        } else {
            b->c.argmax_s += dt;
            b->c.argmax_steps++;
            b->c.argmax_rows += rows;
        }
        for (int i = 0; i < n; i++) r[i]->done = 1;
        pthread_cond_broadcast(&b->cv); /* this step's requests */
        released(b);
    }
    pthread_mutex_unlock(&b->mu);
    if (me->rc != 0) dfl_seterr("%s", me->err);
    return me->rc;
}

int bat_forward(bat_sched *b, void *st, const be_batch *batch) {
    return step_wait(b, &(bat_req){.kind = BAT_FORWARD, .st = st, .batch = batch});
}

int bat_argmax(bat_sched *b, void *st, int row, int n, int32_t *out) {
    return step_wait(b, &(bat_req){.kind = BAT_ARGMAX, .st = st, .row = row, .n = n, .out = out});
}

int bat_logits(bat_sched *b, void *st, int row, int n, float *out) {
    return step_wait(b, &(bat_req){.kind = BAT_ARGMAX, .st = st, .row = row, .n = n, .logits = out});
}

int bat_draft(bat_sched *b, void *dst, const be_draft_block *blk) {
    return step_wait(b, &(bat_req){.kind = BAT_DRAFT, .st = dst, .draft = blk});
}

void bat_measure(bat_sched *b, bat_kind kind, int parts, int rows, double s) {
    pthread_mutex_lock(&b->mu);
    measure(b, kind, parts, rows, s);
    pthread_mutex_unlock(&b->mu);
}

void bat_plan(bat_sched *b, bat_member *me, const double *reach, const spec_round *r) {
    pthread_mutex_lock(&b->mu);
    me->plan = *r;
    memcpy(me->reach, reach, sizeof(double) * (size_t)(r->k + 1));
    me->planned = 1;
    pthread_mutex_unlock(&b->mu);
}

/* Expected seconds of an argmax step whose parts are expected to be `parts`
 * (the sum of their calls' probabilities) and rows `rows`: the fixed cost
 * as likely as the step (at most 1), the rest as the fit. */
static double argmax_at(const bat_fit *f, double parts, double rows) {
    if (parts <= 0) return 0;
    if (!f->n) return -1;
    return (parts < 1 ? parts : 1) * f->coef[0] + f->coef[1] * parts + f->coef[2] * rows;
}

/* The predicted seconds of a round (batch.h) under b->mu: the others'
 * parts and rows per kind (verify sequences and rows, draft blocks and
 * slots, the c-th argmax calls' expected sequences and rows) are summed
 * once; each plan adds its own to them. */
int bat_round_costs(bat_sched *b, const bat_member *me, const double *reach, const spec_round *r, int n,
                    double *cost, double *others_tokens) {
    pthread_mutex_lock(&b->mu);
    double seqs = 0, rows = 0, blocks = 0, slots = 0, own = 0, tokens = 0;
    double call_seqs[SPEC_MAX_BLOCK] = {0}, call_rows[SPEC_MAX_BLOCK] = {0}, at[SPEC_MAX_BLOCK];
    int call_n[SPEC_MAX_BLOCK];
    for (const bat_member *o = b->members; o; o = o->next) {
        if (o == me || !o->planned) continue;
        const spec_round *p = &o->plan;
        seqs++;
        rows += p->k + 1;
        blocks += p->k > 0;
        slots += p->k;
        own += p->own_s;
        tokens += p->tokens;
        int nc = p->shared ? spec_round_calls(p, o->reach, call_n, at) : 0;
        for (int c = 0; c < nc; c++) {
            call_seqs[c] += at[c];
            call_rows[c] += at[c] * call_n[c];
        }
    }
    const bat_fit *F = &b->forward_cost, *A = &b->argmax_cost, *D = &b->draft_cost;
    double fwd = fit_at(F, seqs, rows), drf = fit_at(D, blocks, slots), base = fwd + drf + own;
    int rc = fwd < 0 || drf < 0;
    for (int c = 0; c < SPEC_MAX_BLOCK; c++)
        if (call_seqs[c] > 0 && A->n) base += argmax_at(A, call_seqs[c], call_rows[c]);
    for (int i = 0; i < n && !rc; i++) {
        const spec_round *p = &r[i];
        double f = fit_at(F, seqs + 1, rows + p->k + 1);
        double d = p->k ? fit_at(D, blocks + 1, slots + p->k) : drf; /* the draft step with it */
        rc |= f < 0 || d < 0;
        cost[i] = base + (f - fwd) + (d - drf) + p->own_s;
        int nc = p->shared ? spec_round_calls(p, reach, call_n, at) : 0;
        for (int c = 0; c < nc && !rc; c++) {
            double a1 = argmax_at(A, call_seqs[c] + 1, call_rows[c] + call_n[c]);
            double a0 = argmax_at(A, call_seqs[c], call_rows[c]);
            rc |= a1 < 0;
            cost[i] += at[c] * (a1 - a0);
        }
    }
    *others_tokens = tokens;
    pthread_mutex_unlock(&b->mu);
    return rc ? -1 : 0;
}

int bat_prefill_rows(bat_sched *b, const bat_member *me, int max) {
    pthread_mutex_lock(&b->mu);
    int others = 0, rows = 0;
    for (const bat_member *o = b->members; o; o = o->next)
        if (o != me) {
            others++;
            rows += o->planned ? o->plan.k + 1 : 0;
        }
    int n = b->step_tokens - rows;
    pthread_mutex_unlock(&b->mu);
    if (!others) return max;
    n = n < BAT_MIN_PREFILL ? BAT_MIN_PREFILL : n;
    return n < max ? n : max;
}
