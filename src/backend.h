/* backend.h - the interface every compute backend implements. Prefix: be_.
 *
 * A backend owns a sequence state: the KV cache, scratch activations and any
 * device copies of the weights. The engine and the DFlash loop only talk to
 * a backend through be_ops, so a CUDA backend slots in beside the CPU one.
 *
 * KV cache rule (stated once, here): the cache holds rows 0..len-1, one per
 * committed position. forward() appends its T rows at positions len..len+T-1
 * (the caller never passes positions; they follow from len). truncate(m),
 * m <= len, forgets rows m..len-1 by moving the length; nothing is copied and
 * the next forward overwrites them. A rolled-back row never influences a
 * later result, so decode after truncate equals a fresh decode bit for bit. */
#ifndef DFL_BACKEND_H
#define DFL_BACKEND_H

#include <stdint.h>

#include "model.h"

typedef struct {
    int T;                  /* number of new tokens */
    const int32_t *tokens;  /* [T], each < vocab */
    int n_logits;           /* compute logits for the last n_logits rows, 0..T */
    float *logits;          /* [n_logits][vocab] */
    int n_taps;             /* number of hidden taps, 0..CFG_MAX_TAPS */
    const int *tap_layers;  /* [n_taps] target layer ids, 0..n_layers-1 */
    float *taps;            /* [T][n_taps][hidden]: output of layer tap_layers[i]
                               (residual stream, before the final norm) */
    int keep_rows;          /* keep all T rows' final-normed hidden states for
                               logits() below (T <= BE_KEEP_ROWS) */
} be_batch;

enum { BE_KEEP_ROWS = 64 };

/* DFlash draft work, all on the draft model:
 *   ctx_append: project n rows of target features to context K/V and append
 *               them to the draft's persistent context cache.
 *   block:      run the block (anchor + masks) at positions ctx_len..; it
 *               attends, without mask, to the whole context cache and the block;
 *               block K/V are never stored. Outputs logits for slots 1..B-1,
 *               optionally over a reduced vocabulary: a draft only proposes, so
 *               scoring fewer tokens costs acceptance, never correctness. */
typedef struct {
    int B;                  /* block length, >= 2 */
    const int32_t *tokens;  /* [B]: anchor, then mask ids */
    int n_slots;            /* project slots 1..n_slots only (0: all B-1): the
                               block can run at the trained length while fewer
                               drafts are verified */
    int n_vocab;            /* score lm_head rows 0..n_vocab-1 (0 = all) */
    const int32_t *extra;   /* and these ids beyond n_vocab (stop tokens) */
    int n_extra;
    float *logits;          /* [n_slots][n_vocab] for slots 1..n_slots */
    float *extra_logits;    /* [n_slots][n_extra] */
} be_draft_block;

typedef struct be_ops {
    const char *name;
    /* Sequence state for model m with room for n_ctx positions. */
    void *(*create)(const mdl_model *m, int n_ctx);
    void (*destroy)(void *st);
    int (*forward)(void *st, const be_batch *b); /* -1 + error if len+T > n_ctx */
    int (*length)(void *st);
    void (*truncate)(void *st, int len);

    /* Draft state: the draft model plus the target it reads its embedding and
     * lm_head from. */
    void *(*draft_create)(const mdl_model *draft, const mdl_model *target, int n_ctx);
    void (*draft_destroy)(void *st);
    /* feats: [n][n_taps*hidden] as produced by forward's taps. */
    int (*draft_ctx_append)(void *st, const float *feats, int n);
    int (*draft_ctx_length)(void *st);
    void (*draft_ctx_truncate)(void *st, int len);
    int (*draft_block)(void *st, const be_draft_block *b);

    /* out[n][vocab] = lm_head logits of rows row..row+n-1 of the last forward,
     * which must have set keep_rows; bit-identical to asking forward() for
     * those rows' logits. Valid until the next forward. A verify asks for its
     * rows a few at a time and stops at the first rejected draft, so the rows
     * after it never pay for the vocabulary projection. */
    int (*logits)(void *st, int row, int n, float *out);
    /* out[j] = the first index of the maximum of the logits of kept row
     * row+j: smp_argmax of logits() exactly, without writing the
     * [n][vocab] logits (greedy decoding needs only the winner). */
    int (*argmax)(void *st, int row, int n, int32_t *out);
} be_ops;

extern const be_ops be_cpu;

#endif
