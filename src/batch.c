/* batch.c - the forward scheduler of batch.h. */
#include "batch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* What a request asks for; a step runs the requests of one kind (batch.h's
 * order). */
typedef enum { REQ_ARGMAX, REQ_DRAFT, REQ_FORWARD, REQ_KINDS } req_kind;

/* One sequence's waiting forward, argmax or draft block (on its caller's stack). */
typedef struct bat_req {
    req_kind kind;
    void *st;
    const be_batch *batch;       /* REQ_FORWARD */
    const be_draft_block *draft; /* REQ_DRAFT: st is the draft state */
    int row, n;                  /* REQ_ARGMAX: kept rows row..row+n-1 into out */
    int32_t *out;
    int rc, done;
    char err[512];       /* the error of a failed forward (rc -1) */
    struct bat_req *next;
} bat_req;

struct bat_sched {
    const be_ops *be;
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* for the waiting requests: a step finished, or one can run (a sequence left, the
                            backend was released) */
    pthread_cond_t lk;   /* for bat_lock: the backend was released */
    int busy;            /* a thread is using the backend */
    int n_pending;       /* requests in pending, not yet taken by a step */
    bat_req *pending;
    bat_counts c;        /* c.active: sequences between bat_enter and bat_leave */
};

bat_sched *bat_new(const be_ops *be) {
    bat_sched *b = dfl_calloc(1, sizeof *b);
    b->be = be;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    pthread_cond_init(&b->lk, NULL);
    return b;
}

void bat_free(bat_sched *b) {
    if (!b) return;
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    pthread_cond_destroy(&b->lk);
    free(b);
}

void bat_enter(bat_sched *b) {
    pthread_mutex_lock(&b->mu);
    b->c.active++;
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

void bat_leave(bat_sched *b) {
    pthread_mutex_lock(&b->mu);
    b->c.active--;
    if (step_ready(b)) pthread_cond_broadcast(&b->cv); /* the waiting sequences may be all there is now */
    pthread_mutex_unlock(&b->mu);
}

void bat_lock(bat_sched *b) {
    pthread_mutex_lock(&b->mu);
    while (b->busy) pthread_cond_wait(&b->lk, &b->mu);
    b->busy = 1;
    pthread_mutex_unlock(&b->mu);
}

void bat_unlock(bat_sched *b) {
    pthread_mutex_lock(&b->mu);
    b->busy = 0;
    released(b);
    pthread_mutex_unlock(&b->mu);
}

void bat_stats(bat_sched *b, bat_counts *out) {
    pthread_mutex_lock(&b->mu);
    *out = b->c;
    pthread_mutex_unlock(&b->mu);
}

/* Each function below runs one kind of request of a step (the backend
 * held, b->mu not) and returns 1 if two or more that could share a pass ran
 * one by one (no multi call in the backend, or it refused them): each still
 * gets its own result, only the sharing is lost (bat_counts.unbatched). */

/* The argmaxes of one step: one argmax_multi (rows of several sequences
 * through one pass over the lm_head), else one by one. */
static int run_argmax(bat_sched *b, bat_req **r, int n) {
    int rc = -1;
    if (n > 1 && b->be->argmax_multi) {
        void *sts[BE_MAX_SEQS];
        int row[BE_MAX_SEQS], cnt[BE_MAX_SEQS];
        int32_t *out[BE_MAX_SEQS];
        for (int i = 0; i < n; i++) sts[i] = r[i]->st, row[i] = r[i]->row, cnt[i] = r[i]->n, out[i] = r[i]->out;
        rc = b->be->argmax_multi(sts, row, cnt, out, n);
        if (rc == 0)
            for (int i = 0; i < n; i++) r[i]->rc = 0;
    }
    if (rc != 0)
        for (int i = 0; i < n; i++) {
            r[i]->rc = b->be->argmax(r[i]->st, r[i]->row, r[i]->n, r[i]->out);
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
static req_kind step_kind(const bat_sched *b) {
    int has[REQ_KINDS] = {0};
    for (const bat_req *r = b->pending; r; r = r->next) has[r->kind] = 1;
    return has[REQ_ARGMAX] ? REQ_ARGMAX : has[REQ_DRAFT] ? REQ_DRAFT : REQ_FORWARD;
}

/* Queue *me and wait until a step (run by whichever waiting thread finds
 * every running generation waiting) has done it. */
static int bat_wait(bat_sched *b, bat_req *req) {
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
        req_kind kind = step_kind(b);
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
        int rows = 0, solo;
        if (kind == REQ_FORWARD) {
            for (int i = 0; i < n; i++) rows += r[i]->batch->T;
            solo = run_forward(b, r, n);
        } else if (kind == REQ_DRAFT) {
            solo = run_draft(b, r, n);
        } else {
            solo = run_argmax(b, r, n);
        }
        pthread_mutex_lock(&b->mu);
        b->busy = 0;
        b->c.unbatched += solo;
        if (kind == REQ_FORWARD) {
            b->c.steps++;
            b->c.seq_steps += n;
            b->c.rows += rows;
            b->c.last_batch = n;
            if (n > b->c.max_batch) b->c.max_batch = n;
        } else if (kind == REQ_DRAFT) {
            b->c.draft_steps++;
            b->c.draft_seq_steps += n;
            if (n > b->c.max_draft_batch) b->c.max_draft_batch = n;
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
    return bat_wait(b, &(bat_req){.kind = REQ_FORWARD, .st = st, .batch = batch});
}

int bat_argmax(bat_sched *b, void *st, int row, int n, int32_t *out) {
    return bat_wait(b, &(bat_req){.kind = REQ_ARGMAX, .st = st, .row = row, .n = n, .out = out});
}

int bat_draft(bat_sched *b, void *dst, const be_draft_block *blk) {
    return bat_wait(b, &(bat_req){.kind = REQ_DRAFT, .st = dst, .draft = blk});
}
