/* backend.h - the interface every compute backend implements. Prefix: be_.
 *
 * A backend instance (open/close) belongs to one dflash_model: the CPU
 * backend sets its kernel mode and worker threads there, the CUDA backend its
 * device and stream. prepare() makes a loaded model resident (CPU: the
 * kernels' packed copies; CUDA: every weight uploaded once); after it the
 * backend owns whatever it attached to mdl_model.be_data, released by
 * release().
 *
 * Sequence states (create) hold the KV cache, scratch activations and the
 * hidden taps of the last forward. Everything a DFlash round needs stays in
 * the backend: forward keeps the taps, draft_feed hands committed rows of
 * them to the draft's context, draft_block returns token ids, argmax returns
 * token ids. Only ids and counts cross to the caller per round; logits(),
 * taps() and draft_ctx_append() move floats and exist for sampling (temp > 0),
 * tests and tools.
 *
 * KV cache rule (stated once, here): the cache holds rows 0..len-1, one per
 * committed position. forward() appends its T rows at positions len..len+T-1
 * (the caller never passes positions; they follow from len). truncate(m),
 * m <= len, forgets rows m..len-1 by moving the length; nothing is copied and
 * the next forward overwrites them. A rolled-back row never influences a
 * later result, so decode after truncate equals a fresh decode bit for bit.
 *
 * Prefix rule (copy_prefix, draft_ctx_copy; stated once, here): the K/V row
 * of position p depends only on the tokens at positions 0..p (and a draft
 * context row only on the target rows 0..p it was fed from), never on which
 * sequence computed it, when, or in what batch (batch invariance, below). So
 * two sequences of one model whose caches hold the same tokens at 0..n-1
 * hold the same rows there bit for bit, and copying rows 0..n-1 from one to
 * the other leaves the destination exactly as a prefill of those tokens
 * would: everything it computes afterwards is what a fresh prefill gives.
 * A recurrent (Gated DeltaNet) state after n rows is one state, not rows,
 * and a sliding-window ring holds only the last positions written: neither
 * can give an arbitrary prefix, so copy_prefix refuses those models.
 *
 * Recurrent state rule (Qwen3.5's Gated DeltaNet layers, beside the KV of
 * its attention layers): truncate(m) returns the length the sequence now
 * has. The state after m rows is restored exactly - bit for bit the state
 * plain decoding has after those m tokens - when m is at or after the last
 * forward's snapshot point (its first row when it had <= 64 rows: every
 * DFlash verify rolls back within them; the CPU also keeps the last 64 rows
 * of a longer forward, the CUDA backend none); for any other
 * m the sequence restarts empty and truncate returns 0, and the caller runs
 * the rows again from there. A model without recurrent layers always keeps
 * m. The CPU design (a snapshot plus a replay of kept per-row inputs) is in
 * deltanet.h.
 *
 * Draft context rule: the draft's context holds one row per target position
 * 0..ctx_len-1, fed from the target's taps (draft_feed) or from host floats
 * (draft_ctx_append). A backend may keep fed rows pending and project them
 * later (before the next draft_block); draft_ctx_length counts them.
 * draft_ctx_truncate(m) forgets rows m.. (pending ones too).
 *
 * Batch invariance: a row's logits, taps and K/V depend only on its token and
 * the committed rows before it, never on T or on the other rows of the batch
 * - nor on the rows of other sequences computed in the same forward_multi.
 *
 * Tree rule (be_batch.tree_parent, be_ops.tree_commit; stated once, here): a
 * tree batch is a token tree below the committed rows, parents before
 * children. Row t sits at position len + depth(t) (depth 0: its parent is the
 * last committed row) and attends to the committed rows and to its
 * ancestors in the batch, itself included - exactly the keys plain decoding
 * of that path sees, in the same order, so its logits, taps and K/V are
 * bit-identical to that decode's (the mask changes which keys are seen,
 * never the reduction order). Its K/V sit at cache row len + t until
 * tree_commit(rows, n) keeps one root-to-node path (rows[0] a root, each
 * next row a child of the one before): the path's K/V move to rows
 * len..len+n-1, its taps and kept rows to rows 0..n-1 (so draft_feed(0, n)
 * and logits/argmax(0, n) read the path), the length becomes len + n and the
 * other rows are forgotten, as truncate forgets them. The CPU and CUDA
 * backends refuse a tree on a model with recurrent (Gated DeltaNet) or
 * sliding-window layers: their state is not a set of rows a mask can
 * select (CUDA also on Gemma-4 and without its chunked attention). A
 * backend without tree_commit refuses tree batches. */
#ifndef DFL_BACKEND_H
#define DFL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

enum {
    BE_MAX_ROWS = 256,  /* most rows of one forward() */
    BE_KEEP_ROWS = 64,  /* most rows a forward may keep for logits/argmax */
    BE_DN_KEEP = 64,    /* rows of its last forward a recurrent (Gated DeltaNet) state
                         * rolls back into exactly (>= the widest verify) */
    BE_DRAFT_TOPK = 16, /* most candidates per slot a draft block ranks */
    BE_MAX_SEQS = 64,   /* most sequences of one forward_multi */
};

typedef struct {
    int n_threads;    /* CPU worker threads; 0 = physical cores */
    int device;       /* GPU ordinal (CUDA) */
    size_t kv_budget; /* bytes of target KV cache all the instance's sequences may
                         hold together (a backend with trim); 0: no limit */
} be_options;

typedef struct {
    int T;                  /* number of new tokens, 1..BE_MAX_ROWS */
    const int32_t *tokens;  /* [T], each < vocab */
    int n_logits;           /* copy logits of the last n_logits rows to the host, 0..T */
    float *logits;          /* [n_logits][vocab] (host) */
    int n_taps;             /* hidden taps to keep, 0..CFG_MAX_TAPS */
    const int *tap_layers;  /* [n_taps] target layer ids, 0..n_layers-1: the
                               taps of row t are the outputs of these layers
                               (residual stream, before the final norm), kept
                               in the sequence state until the next forward */
    int keep_rows;          /* keep all T rows' final-normed hidden states for
                               logits()/argmax() below (T <= BE_KEEP_ROWS) */
    const int *tree_parent; /* [T] a tree batch (the tree rule above): row t's
                               parent row, -1 = the last committed row; each
                               parent < t; T <= BE_KEEP_ROWS. NULL: a chain */
} be_batch;

/* DFlash draft block on the draft model: the block (anchor + masks) runs at
 * positions ctx_len..; it attends, without mask, to the whole context and the
 * block; block K/V are never stored. Proposes one id per slot 1..n_slots: the
 * first maximum of the slot's logits over ids 0..n_vocab-1, replaced by an
 * extra id whose logit is strictly greater (extras in order). A draft only
 * proposes, so scoring fewer ids costs acceptance, never correctness. */
typedef struct {
    int B;                  /* block length, >= 2 */
    const int32_t *tokens;  /* [B]: anchor, then mask ids */
    int n_slots;            /* slots 1..n_slots are proposed (0: all B-1): the
                               block runs at the trained length while fewer
                               drafts are verified */
    int n_vocab;            /* score lm_head rows 0..n_vocab-1 (0 = all) */
    const int32_t *ids;     /* NULL, or score rows ids[0..n_vocab) instead
                               (ascending, distinct; be_ops.draft_ids): each
                               logit bit-identical to the full head's for the
                               same id, "first maximum" in ascending id order;
                               logits, out, top_ids as if these were the ids
                               0..n_vocab-1 (logits by index, ids mapped) */
    const int32_t *extra;   /* and these ids beyond n_vocab (stop tokens) */
    int n_extra;
    int32_t *out;           /* [n_slots] proposed ids (may be NULL) */
    float *logits;          /* optional (tests): [n_slots][n_vocab] */
    float *extra_logits;    /* optional (tests): [n_slots][n_extra] */
    int top_k;              /* > 0 (<= BE_DRAFT_TOPK): also the top_k candidates
                               of each slot among the scored ids (ids 0..n_vocab-1,
                               then the extras), best first (ties: the order
                               above, so top_ids[i][0] = out[i]) */
    int32_t *top_ids;       /* [n_slots][top_k] */
    float *top_logp;        /* [n_slots][top_k] their log-probabilities under the
                               softmax over the scored ids */
} be_draft_block;

typedef struct be_ops {
    const char *name;
    int draft_ids;    /* 1: draft_block takes be_draft_block.ids (a gathered LM head) */
    int predict_rows; /* verify rows projected per predict call; 0 = all at once
                         (the engine's default: fewer rows waste less work past
                         the first rejected draft, more share each pass over
                         the lm_head) */
    /* 1 if the backend can run here, else 0 with a reason in why. */
    int (*probe)(char *why, size_t n);
    void *(*open)(const be_options *o);    /* NULL + error on failure */
    void (*close)(void *be);
    /* One line for the info line: kernel variant, device name. */
    const char *(*describe)(void *be);
    /* Host threads the instance computes with (its own worker pool; NULL:
     * 1). Models never share or change each other's. */
    int (*n_threads)(void *be);
    /* 1 if a float draft should become q8 at load (the kernels are faster on
     * it); only speed and acceptance depend on it. */
    int (*draft_q8)(void *be);
    /* Make a loaded model resident (after any conversion at load). */
    int (*prepare)(void *be, mdl_model *m);
    void (*release)(void *be, mdl_model *m);
    /* Memory bandwidth the backend's weights stream from, GB/s, measured now
     * (CPU: parallel read; CUDA: device-to-device copy, read + write bytes). */
    double (*bandwidth)(void *be);
    /* Optional (NULL: the host's wt_bytes): the bytes of layer l's routed
     * experts as the backend holds them after prepare (CUDA uploads
     * MXFP4 experts as 4-bit codes: half the host's 8-bit matrices), for
     * the bytes-a-token figure; 0 if the layer has none. */
    size_t (*expert_bytes)(void *be, const mdl_model *m, int l);

    /* ---- target sequence ---- */
    void *(*create)(void *be, const mdl_model *m, int n_ctx);
    void (*destroy)(void *st);
    int (*forward)(void *st, const be_batch *b); /* -1 + error if len+T > n_ctx */
    /* Optional (NULL: the engine runs the batches one forward() at a time).
     * The batches bs[i] of n (1..BE_MAX_SEQS) distinct sequences sts[i] of
     * one model in one pass: the weights read once for all their rows, each
     * sequence's rows at its own positions over its own cache. Every
     * sequence ends exactly as forward(sts[i], &bs[i]) alone leaves it, bit
     * for bit (batch invariance, below). -1 + error and nothing run when the
     * backend cannot batch them (the CPU: a model with recurrent layers, a
     * tree batch) or a batch is refused: the engine then runs them one by
     * one, so each gets its own answer. */
    int (*forward_multi)(void *const *sts, const be_batch *bs, int n);
    /* Optional (NULL: forward returns when its work is done, as the CPU's
     * does): wait until the work forward and forward_multi enqueued for
     * st's backend has run (the CUDA backend's forwards return once
     * enqueued). The batch scheduler calls it to time a forward step by its
     * own work: otherwise the step that next waits for the device (an
     * argmax) would carry the forward's time in the cost model. */
    void (*finish)(void *st);
    int (*length)(void *st);
    int (*truncate)(void *st, int len); /* the length kept (rules above) */
    /* Optional (NULL: a sequence's KV cache is allocated whole at create):
     * give back the KV memory past positions 0..max(length, rows)-1. The CPU keeps a target's
     * full-attention K/V in pages of 16 positions (cpu_backend.c's page
     * rule): a forward gets the pages its rows need - refused with an error
     * naming be_options.kv_budget, nothing run, when they would pass it -
     * and truncate keeps them for the rows that follow a rollback. */
    void (*trim)(void *st, int rows);
    /* Optional with trim: the KV bytes all sequences of the instance hold
     * now; *budget (0: none) and *peak (the most held at once) if not NULL. */
    size_t (*kv_usage)(void *be, size_t *budget, size_t *peak);
    /* Optional with trim: the bytes the sequence would take beyond those it
     * holds to hold positions 0..rows-1 (0: held already). */
    size_t (*kv_need)(void *st, int rows);
    /* Optional with trim: the bytes positions 0..rows-1 of the sequence
     * take, whatever it holds now. */
    size_t (*kv_bytes)(void *st, int rows);
    /* out[n][vocab] (host) = lm_head logits of kept rows row..row+n-1 of the
     * last forward; bit-identical to asking forward() for those rows. */
    int (*logits)(void *st, int row, int n, float *out);
    /* out[j] = the first index of the maximum of the logits of kept row
     * row+j: smp_argmax of logits() exactly, without the logits crossing. */
    int (*argmax)(void *st, int row, int n, int32_t *out);
    /* Optional (NULL: argmax() or logits() per sequence). For kept rows
     * row[i]..row[i]+n[i]-1 of sequences sts[i] (i < ns <= BE_MAX_SEQS, one
     * model): their logits into logits[i][n[i]][vocab] where logits[i] is
     * not NULL (exactly what logits() gives), else their argmaxes into
     * ids[i][0..n[i]) (exactly what argmax() gives), in one pass over the
     * lm_head for all. -1 + error, nothing written, if a sequence's rows
     * are not kept. */
    int (*predict_multi)(void *const *sts, const int *row, const int *n, int32_t *const *ids, float *const *logits,
                         int ns);
    /* out[n][n_taps][hidden] (host) = taps of rows row..row+n-1 of the last
     * forward (tests and tools). */
    int (*taps)(void *st, int row, int n, float *out);
    /* Keep the path rows[0..n) of the last forward (a tree batch, or a chain:
     * rows 0..n-1) and forget the rest: the tree rule above. NULL: the
     * backend has no tree verification (tree batches refused). */
    int (*tree_commit)(void *st, const int *rows, int n);
    /* Optional (NULL: no copying; the engine prefills instead). The prefix
     * rule above: dst (a target state of the same model and context as src,
     * not src itself) gets src's K/V rows 0..n-1 of every attention layer
     * (n <= src's length), its length becomes n and its last forward is
     * forgotten (nothing kept for logits/argmax/taps/tree_commit). src is
     * only read. -1 + error with dst unchanged where it cannot be exact: a
     * model with recurrent (Gated DeltaNet) layers or sliding-window rings
     * (CPU: only full-length caches), different shapes, n out of range.
     * length() only reads the state's own counter (host memory): like this
     * and draft_ctx_length() it touches nothing another sequence's step uses. */
    int (*copy_prefix)(void *dst, const void *src, int n);

    /* ---- DFlash draft: the draft model plus the target it reads its
     * embedding and lm_head from ---- */
    void *(*draft_create)(void *be, const mdl_model *draft, const mdl_model *target, int n_ctx);
    void (*draft_destroy)(void *st);
    /* Append taps rows row..row+n-1 of target sequence `seq`'s last forward
     * to the draft context (the rows the target committed). */
    int (*draft_feed)(void *st, void *seq, int row, int n);
    /* feats: host [n][n_taps*hidden], as taps() gives them. */
    int (*draft_ctx_append)(void *st, const float *feats, int n);
    int (*draft_ctx_length)(void *st);
    void (*draft_ctx_truncate)(void *st, int len);
    int (*draft_block)(void *st, const be_draft_block *b);
    /* Optional (NULL: no copying). The prefix rule above for the draft's
     * context: dst (a draft state of the same draft and context, not src)
     * holds src's context rows 0..n-1 (n <= src's draft_ctx_length, pending
     * rows included) and nothing after them; src is only read. -1 + error
     * with dst unchanged if it cannot. */
    int (*draft_ctx_copy)(void *dst, const void *src, int n);
    /* Optional (NULL: the engine runs draft_block() one at a time). The
     * blocks bs[i] of n (1..BE_MAX_SEQS) distinct draft states sts[i] of one
     * draft model in one pass: the draft's weights (and each shared LM head)
     * read once for all their rows, each block over its own context at its
     * own positions. Every block's out, logits and top candidates are
     * exactly what draft_block(sts[i], &bs[i]) alone gives, bit for bit.
     * -1 + error and nothing proposed when a block is refused (as
     * draft_block refuses it) or the states are of different models: the
     * engine then runs them one by one, so each gets its own answer. */
    int (*draft_block_multi)(void *const *sts, const be_draft_block *bs, int n);
} be_ops;

extern const be_ops be_cpu;
#ifdef DFLASH_CUDA
extern const be_ops be_cuda;
#endif

/* "auto" (or NULL): CUDA when built in and a device is present, else CPU;
 * "cpu"; "cuda". NULL + error naming the choice otherwise. */
const be_ops *be_select(const char *name);

/* The checks every backend's forward makes before it computes anything
 * (one copy, here, so the backends cannot drift): T in 1..BE_MAX_ROWS,
 * n_logits in 0..T with a logits buffer when > 0, n_taps and tap layers in
 * range, keep_rows only for T <= BE_KEEP_ROWS, len + T <= n_ctx, every token
 * in the vocabulary. 0, or -1 with dfl_seterr naming what is wrong. */
int be_check_batch(const be_batch *b, const cfg_model *c, int len, int n_ctx);

/* The checks every backend's tree_commit makes (the tree rule above): the
 * last forward (fwd_T rows from length fwd_len; parent[] its tree rows'
 * parents, NULL for a chain) is the sequence's last step (len = fwd_len +
 * fwd_T), 1 <= n <= fwd_T, and rows[0..n) is a path from the committed
 * prefix: rows[0]'s parent is -1, each next row a child of the one before.
 * 0, or -1 with dfl_seterr naming the culprit. */
int be_check_path(const int *rows, int n, int fwd_T, int fwd_len, int len, const int *parent);

#endif
