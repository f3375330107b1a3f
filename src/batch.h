/* batch.h - one target forward for many sequences of a model (continuous
 * batching). Prefix: bat_.
 *
 * Each sequence runs its own decoding loop on its own thread (the caller's
 * of dflash_seq_generate). Its target forwards go through bat_forward, its
 * greedy argmaxes through bat_argmax and its draft blocks through
 * bat_draft: the call waits until every sequence inside a generation
 * (bat_enter .. bat_leave) has one of these waiting, then one of the
 * waiting threads runs a step: the waiting requests of one kind - the
 * argmaxes if there are any (one argmax_multi: one pass over the lm_head),
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

typedef struct bat_sched bat_sched;

/* Counters since bat_new (under the scheduler's lock; bat_stats copies them). */
typedef struct {
    int active;          /* sequences inside a generation now */
    long steps;          /* target forwards run (one per step, whatever its sequences; argmax-only steps not counted) */
    long seq_steps;      /* sequence forwards in them (seq_steps / steps = mean batch) */
    long rows;           /* rows in them */
    int last_batch;      /* sequences in the last step */
    int max_batch;       /* the most in one step */
    long draft_steps;    /* draft steps run (each one draft_block_multi or its blocks one by one) */
    long draft_seq_steps; /* draft blocks in them */
    int max_draft_batch; /* the most draft blocks in one step */
    long unbatched;      /* steps (of any kind) whose requests could share a pass but ran one by one:
                            the backend has no multi call for them or refused them (batch.c) */
} bat_counts;

bat_sched *bat_new(const be_ops *be);
void bat_free(bat_sched *b);
void bat_enter(bat_sched *b);
void bat_leave(bat_sched *b);
/* be->forward(st, batch), batched with the other sequences' forwards of this
 * step; 0, or -1 with the error of this sequence's forward set. */
int bat_forward(bat_sched *b, void *st, const be_batch *batch);
/* be->argmax(st, row, n, out), batched likewise. */
int bat_argmax(bat_sched *b, void *st, int row, int n, int32_t *out);
/* be->draft_block(dst, blk) on draft state dst, batched likewise with the
 * other sequences' draft blocks. */
int bat_draft(bat_sched *b, void *dst, const be_draft_block *blk);
void bat_lock(bat_sched *b);
void bat_unlock(bat_sched *b);
void bat_stats(bat_sched *b, bat_counts *out);

#endif
