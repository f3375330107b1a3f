/* batch.h - one target forward for many sequences of a model (continuous
 * batching). Prefix: bat_.
 *
 * Each sequence runs its own decoding loop on its own thread (the caller's
 * of dflash_seq_generate). Its target forwards go through bat_forward, its
 * greedy argmaxes through bat_argmax and its draft blocks through
 * bat_draft: the call waits until every sequence inside a generation
 * (bat_enter .. bat_leave) has one of these waiting, then one of the
 * waiting threads runs a step: the waiting requests of one kind - the
 * argmaxes and logits if there are any (one predict_multi: one pass over
 * the lm_head for greedy sequences' argmaxes and sampling ones' logits),
 * else the draft blocks (one be_ops.draft_block_multi: the draft's weights
 * read once for every block), else the forwards (one forward_multi: the
 * target's weights read once for every sequence); each caller returns with
 * its own result, the others wait for a later step. That order brings the
 * sequences' rounds (forward, argmaxes, draft block) into step with each
 * other and starves nothing (batch.c: step_kind). Every other backend call
 * of a sequence (logits, rollback, draft_feed) runs between bat_lock and
 * bat_unlock: the backend instance (its worker pool, the pass's scratch)
 * computes one thing at a time.
 *
 * Rule: a sequence joins at the next step (its first forward waits for the
 * one running) and leaves at once (bat_leave: the others no longer wait for
 * it). Exactness: forward_multi leaves each sequence as its own forward()
 * would (backend.h's batch invariance), so which sequences share a step
 * never changes a result, and draft_block_multi gives each block what
 * draft_block alone gives it; a backend without forward_multi or
 * draft_block_multi, or a batch it refuses, runs them one by one. */
#ifndef DFL_BATCH_H
#define DFL_BATCH_H

#include "backend.h"
#include "spec.h"

typedef struct bat_sched bat_sched;

/* The kinds of step, in the order a step picks them (batch.c: step_kind);
 * BAT_ARGMAX steps carry logits requests (bat_logits) too. */
typedef enum { BAT_ARGMAX, BAT_DRAFT, BAT_FORWARD, BAT_KINDS } bat_kind;

/* A generation inside the scheduler (bat_enter .. bat_leave), with the plan
 * of its current round for the batch's cost model. The caller owns it; the
 * fields are the scheduler's (under its lock). */
typedef struct bat_member {
    struct bat_member *next;
    int planned;         /* plan holds this generation's current round (0: none yet, e.g. prefilling) */
    spec_round plan;
    double reach[SPEC_MAX_BLOCK + 1]; /* its acceptance: reach[0..plan.k] */
} bat_member;

/* Counters since bat_new (under the scheduler's lock; bat_stats copies them). */
typedef struct {
    int active;          /* sequences inside a generation now */
    long steps;          /* target forwards run (one per step, whatever its sequences; argmax-only steps not counted) */
    long seq_steps;      /* sequence forwards in them (seq_steps / steps = mean batch) */
    long rows;           /* rows in them */
    int last_batch;      /* sequences in the last step */
    int max_batch;       /* the most in one step */
    int max_rows;        /* the most rows in one step */
    long draft_steps;    /* draft steps run (each one draft_block_multi or its blocks one by one) */
    long draft_seq_steps; /* draft blocks in them */
    int max_draft_batch; /* the most draft blocks in one step */
    long unbatched;      /* steps (of any kind) whose requests could share a pass but ran one by one:
                            the backend has no multi call for them or refused them (batch.c) */
    long argmax_steps;   /* argmax steps run */
    long argmax_rows;    /* rows in them */
    /* where the time of the generations goes (seconds on the wall clock):
     * forward_s / draft_s / argmax_s in steps of each kind, lock_s
     * with the backend held by bat_lock (rollbacks, draft feeds, logits for
     * sampling), active_s while at least one generation runs; active_s less
     * the others is the time no one used the backend (each generation's own
     * work between its calls, the hand-offs between threads) */
    double forward_s, draft_s, argmax_s, lock_s, active_s;
} bat_counts;

/* step_tokens: dflash_params.step_tokens (bat_prefill_rows); <= 0: BAT_STEP_TOKENS. */
enum { BAT_STEP_TOKENS = 64, BAT_MIN_PREFILL = 16 };
bat_sched *bat_new(const be_ops *be, int step_tokens);
void bat_free(bat_sched *b);
void bat_enter(bat_sched *b, bat_member *me);
void bat_leave(bat_sched *b, bat_member *me);
/* be->forward(st, batch), batched with the other sequences' forwards of this
 * step; 0, or -1 with the error of this sequence's forward set. */
int bat_forward(bat_sched *b, void *st, const be_batch *batch);
/* be->argmax(st, row, n, out), batched likewise. */
int bat_argmax(bat_sched *b, void *st, int row, int n, int32_t *out);
/* be->logits(st, row, n, out), batched likewise: the same steps as the
 * argmaxes (BAT_ARGMAX: one predict_multi, one pass over the lm_head for
 * the greedy rows and the sampled ones). */
int bat_logits(bat_sched *b, void *st, int row, int n, float *out);
/* be->draft_block(dst, blk) on draft state dst, batched likewise with the
 * other sequences' draft blocks. */
int bat_draft(bat_sched *b, void *dst, const be_draft_block *blk);
void bat_lock(bat_sched *b);
void bat_unlock(bat_sched *b);
/* With bat_lock held: release the backend, sleep until the next
 * bat_notify (or timeout_ms, if > 0, have passed), take the backend again
 * (a generation waiting for memory that others hold: engine.c's admission
 * rule). A notify between the caller's check and this call is not lost. */
void bat_sleep(bat_sched *b, int timeout_ms);
/* Wake every bat_sleep (the caller changed what they wait for). */
void bat_notify(bat_sched *b);
void bat_stats(bat_sched *b, bat_counts *out);

/* The cost model of a round of the batch (spec_batch_cost, for --draft-max
 * auto): every step's seconds are measured - a forward's and an argmax's as
 * a curve over the step's rows, a draft step's as a fit of
 * a + b * blocks + c * slots (batch.c) - and a round of the batch is the
 * running members' plans (bat_plan) together: one draft step over their
 * blocks, one forward over their verify rows, their argmax calls in steps
 * (the c-th calls of all together) and their own predict seconds.
 * bat_round_costs: cost[i] = that round's predicted seconds if me runs r[i]
 * and the other planned members their plans; *others_tokens = the others'
 * expected tokens. -1 while a curve it needs has no measurement yet. */
int bat_round_costs(bat_sched *b, const bat_member *me, const double *reach, const spec_round *r, int n,
                    double *cost, double *others_tokens);
void bat_plan(bat_sched *b, bat_member *me, const double *reach, const spec_round *r);
/* One step's measurement into the model (each step the scheduler runs adds
 * its own; for tests): parts = sequences (forward, argmax) or blocks
 * (draft), rows = rows (forward, argmax) or slots (draft). */
void bat_measure(bat_sched *b, bat_kind kind, int parts, int rows, double s);

/* Rows of me's next prompt chunk (the per-step token budget): max rows (the
 * rest of the prompt, at most a forward's) while no other generation runs,
 * else the step budget less the rows the other members' plans put in a step,
 * at least BAT_MIN_PREFILL (and at most max). */
int bat_prefill_rows(bat_sched *b, const bat_member *me, int max);

#endif
