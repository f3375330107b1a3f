/* spec.h - the decoding loop: plain and DFlash speculative, one path.
 * Prefix: spec_.
 *
 * Each round verifies [anchor, d_1..d_k] with one target forward (k = 0 is
 * plain decoding), accepts the longest prefix where d_i equals the target's
 * own choice for that position, and emits the accepted drafts plus the
 * target's token at the first mismatch (the bonus), which becomes the next
 * anchor. Since the target's choice for a position depends only on the
 * committed prefix (batch-invariant kernels, position-keyed sampling), the
 * emitted sequence equals plain decoding token for token, whatever k is.
 *
 * A tree round (spec_params.tree) verifies a token tree instead of a chain:
 * starting at the anchor, the loop follows the child whose token equals the
 * target's own choice at the node (greedy: its argmax; sampling: the token
 * drawn with the position's key), as far as such a child exists, and emits
 * that path plus the target's token at its end. The target's choice at a
 * node depends only on the node's prefix, so the output is again plain
 * decoding's, whatever the tree.
 *
 * The loop sees the models only through spec_iface, so tests can script them. */
#ifndef DFL_SPEC_H
#define DFL_SPEC_H

#include <stdint.h>

enum { SPEC_MAX_BLOCK = 64 };
/* Tree auto's options: the chain (with its own length control), trees of
 * 8, 16 and 32 verify rows. */
enum { SPEC_TREE_OPTS = 4 };
#define SPEC_TREE_OPTIONS {0, 8, 16, 32}

typedef struct {
    void *ud;
    /* Target forward on tok[0..T) at the next T positions (committed length
     * len before the call), without the vocabulary projection. */
    int (*verify)(void *ud, const int32_t *tok, int T);
    /* pred[j] = the target's token for position len + i + j + 1, j < n, from
     * rows i..i+n-1 of the last verify. The loop asks in increasing i and
     * stops at the first rejected draft: later rows are never projected.
     * A negative token in a row the loop uses is an error (message set, as
     * smp_pick does for non-finite logits): spec_run returns -1. */
    int (*predict)(void *ud, int i, int n, int32_t *pred);
    /* Keep the first `keep` rows of the last verify as committed (rollback the
     * rest) and hand their hidden taps to the draft. */
    int (*accept)(void *ud, int keep);
    /* k draft tokens for the k positions after the anchor (NULL: no draft). */
    int (*draft)(void *ud, int32_t anchor, int k, int32_t *out);
    /* Optional (NULL: keep all): how many of the drafts d[0..k) to verify,
     * 0..k. Only drafts the target can never choose may be cut (a grammar's
     * refused tokens): a cut draft would have been rejected at verify, so
     * the output is unchanged and the verify is narrower. */
    int (*trim)(void *ud, const int32_t *d, int k);
    /* Tree rounds (spec_params.tree > 0; NULL: chain rounds only). A token
     * tree below the anchor: tok[0] = anchor, parent[0] = -1, nodes
     * 1..n-1 with parent[i] < i and depth(i) <= max_depth (the anchor at
     * depth 0), n <= budget; returns n, or -1 on error. */
    int (*draft_tree)(void *ud, int32_t anchor, int budget, int max_depth, int32_t *tok, int *parent);
    /* Target forward of the tree (the tree rule, backend.h): row r at the
     * position after its parent's. predict() then reads its rows: pred[j] =
     * the target's token for the position after row i + j's. The loop asks
     * for rows in increasing order along the path it follows. */
    int (*verify_tree)(void *ud, const int32_t *tok, const int *parent, int n);
    /* Keep the path rows[0..n) of the last tree verify (rows[0] = 0, the
     * anchor; each next row a child of the one before), roll back the rest,
     * hand the path's taps to the draft. */
    int (*accept_path)(void *ud, const int *rows, int n);
} spec_iface;

/* Draft length control state (--draft-max auto). Running costs of a verify
 * forward of each width, of a predict call of each row count and of a draft
 * of each length, and acceptance counts per draft position. Kept by the
 * caller across generations: costs are a property of the machine and model,
 * acceptance of the model pair. */
typedef struct {
    double verify[SPEC_MAX_BLOCK + 1]; /* seconds per verify forward of width w; 0 = unknown */
    double predict[SPEC_MAX_BLOCK + 1]; /* seconds per predict call of n rows */
    double draft[SPEC_MAX_BLOCK + 1];  /* seconds per draft of k tokens */
    double acc[SPEC_MAX_BLOCK + 1];    /* decayed counts: position i accepted */
    double tot[SPEC_MAX_BLOCK + 1];    /* ... and tried */
    int plain_run;                     /* consecutive rounds that chose k = 0 */
    int probe_gap;                     /* plain rounds between probes (4..256) */
    int probing;                       /* the current round is a probe */
    int probed;                        /* the last round was a probe (its result not yet weighed) */
    /* tree auto (spec_params.tree = -1): the options of SPEC_TREE_OPTIONS,
     * each one's measured throughput over the rounds it ran that were weighed
     * (spec_tree_record) */
    double opt_tok[SPEC_TREE_OPTS];    /* decayed tokens emitted by its weighed rounds */
    double opt_s[SPEC_TREE_OPTS];      /* ... and their seconds (draft + verify + commit), each at most
                                          SPEC_TREE_CLAMP x the option's mean before it */
    double opt_w[SPEC_TREE_OPTS];      /* ... and their decayed count */
    int opt_n[SPEC_TREE_OPTS];         /* rounds it ran, weighed or not */
    int opt_wait[SPEC_TREE_OPTS];      /* rounds since a losing option last ran */
    int opt_gap[SPEC_TREE_OPTS];       /* rounds between its probes (8..256) */
} spec_auto;

/* What one chain round of a sequence asks of the backend if it drafts k -
 * the input of a batch's cost model (spec_batch_cost). The round's
 * predict calls take `rows` verify rows each (0: all k + 1 at once): call c
 * starts at row r0 = c * rows and is made only when drafts 1..r0 were all
 * accepted, with the probability reach[r0] of the array that comes with the
 * plan (reach[0] = 1, reach[i] = p_1 ... p_i). */
typedef struct {
    int k;              /* drafts: a draft block projecting k slots (0: no block), a verify of k + 1 rows */
    int rows;           /* verify rows per predict call (0: all at once) */
    int shared;         /* the predict calls are steps shared with the batch (greedy argmaxes) */
    double tokens;      /* tokens the round is expected to emit (from the acceptance so far) */
    double own_s;       /* seconds the round spends in predict calls that are this sequence's own
                           (spec_batch_cost.predict_own: its timings), reach-weighted; else 0 */
} spec_round;

/* The predict calls of plan r: *n_calls calls, call c of rows[c] rows made
 * with probability reach_of[c] (from the plan's reach array). */
static inline int spec_round_calls(const spec_round *r, const double *reach, int *rows, double *reach_of) {
    int R = r->rows <= 0 || r->rows > r->k + 1 ? r->k + 1 : r->rows, n = 0;
    for (int r0 = 0; r0 <= r->k; r0 += R, n++) {
        rows[n] = r->k + 1 - r0 < R ? r->k + 1 - r0 : R;
        reach_of[n] = reach[r0];
    }
    return n;
}

/* The cost model of --draft-max auto for a sequence that shares the
 * backend's steps with others (continuous batching): instead of timing its
 * own calls - whose wall time includes the other sequences' work in a
 * shared step and the waits for them - the loop asks for the cost of a
 * round of the whole batch under each plan and picks the plan with the most
 * tokens per second for the batch: (others' tokens + its own) / cost. */
typedef struct {
    void *ud;
    /* cost[i]: predicted seconds of one round of every running sequence if
     * this one runs plan r[i] (i < n; reach: the plans' acceptance, for k up
     * to the largest of them) and the others theirs; *others_tokens: the
     * tokens the others' rounds are expected to emit. 0, or -1 when the
     * model cannot predict yet (too few steps measured): the loop then
     * times its own calls as when alone. */
    int (*round_costs)(void *ud, const double *reach, const spec_round *r, int n, double *cost,
                       double *others_tokens);
    /* the plan this sequence runs this round (called every chain round,
     * whatever chose it), for the others' predictions */
    void (*plan)(void *ud, const double *reach, const spec_round *r);
    int predict_own;    /* predict calls run on this sequence's own time (logits to the host, sampling),
                           not in shared steps: plans carry their cost in own_s */
} spec_batch_cost;

typedef struct {
    int n_predict;      /* tokens to emit at most, counting the first one */
    int block_size;     /* widest verify: 1 + most drafts per round; 1 = plain */
    int draft_max;      /* most drafts per round; -1 = auto (cost model) */
    int room;           /* positions left in the context after the prompt */
    const int32_t *stop;
    int n_stop;
    spec_auto *ctl;     /* auto state to use and update; NULL: a fresh one */
    const spec_batch_cost *batch; /* auto's cost model when the backend's steps are shared; NULL: own timings */
    int predict_rows;   /* rows per predict call (0: the whole verify at once) */
    int predict_rows_auto; /* with batch (shared predicts): each chain round's rows per predict call is the
                              batch model's choice among 1, 2, 4 and all (predict_rows while it cannot
                              predict) */
    int tree;           /* > 1: tree rounds of at most this many verify rows
                           (the anchor included; draft_max then only caps the
                           depth); 0: the chain; -1: auto, each round the
                           option of SPEC_TREE_OPTIONS with the best measured
                           tokens per second (ctl), the others probed now and
                           then */
} spec_params;

typedef struct {
    int n_emitted;
    int rounds;                         /* rounds that drafted (k > 0) */
    int plain_steps;                    /* rounds with k = 0 */
    int tree_rounds;                    /* drafting rounds that verified a tree */
    long committed_in_rounds;           /* sum of a + 1 over drafting rounds */
    long predicted_rows;                /* verify rows that were projected to logits */
    int tried[SPEC_MAX_BLOCK];          /* draft position i was verified */
    int accepted[SPEC_MAX_BLOCK];       /* ... and accepted */
    int width_hist[SPEC_MAX_BLOCK + 1]; /* verify widths used (tree rounds: nodes) */
    int accept_hist[SPEC_MAX_BLOCK];    /* drafting rounds that accepted exactly a drafts */
    double draft_s, verify_s, other_s;
    int stopped_by;                     /* 0 budget, 1 stop token, 2 context full, 3 caller */
} spec_stats;

/* Emit callback: return non-zero to stop. */
typedef int (*spec_emit_fn)(void *ud, int32_t tok);

/* Tree auto's choice, exposed for the tests. spec_tree_pick: the option
 * (index into SPEC_TREE_OPTIONS) of the next round. spec_tree_record: that
 * round emitted `tokens` in `seconds`; weigh = 0 for a round that does not
 * show the option's rate (cut short by the tokens left or the context): it
 * counts as run but is not weighed. An option's first round is never
 * weighed (a warm-up: CUDA graphs captured, caches cold), and a weighed
 * round's seconds count at most SPEC_TREE_CLAMP times the option's mean, so
 * one slow round (another process, a graph captured for a new width) does
 * not keep an option out for the hundreds of rounds before its next probe. */
#define SPEC_TREE_CLAMP 2.0
int spec_tree_pick(spec_auto *c);
void spec_tree_record(spec_auto *c, int opt, int tokens, double seconds, int weigh);

/* first: the token the prefill chose (the first anchor; negative = the
 * sampler failed, message set). Returns 0 or -1 on a model error (message
 * set). */
int spec_run(const spec_iface *it, const spec_params *p, int32_t first, spec_emit_fn emit, void *emit_ud,
             spec_stats *st);

#endif
