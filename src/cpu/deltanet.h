/* deltanet.h - Qwen3.5's Gated DeltaNet token mixer on the CPU, its
 * recurrent state, and the rule that makes a rollback exact. Prefix: dn_.
 *
 * One linear-attention layer on rows t (xn = the layer's input norm):
 *   mix = Wqkv xn [C], z = Wz xn [nv*dv], b = Wb xn [nv], a = Wa xn [nv]
 *   cv = silu(causal depthwise conv over the last K rows of mix per channel)
 *   q, k [nk][dk], v [nv][dv] = split(cv); q, k L2-normalised, q / sqrt(dk)
 *   per value head h (key head h / (nv / nk)):
 *     beta = sigmoid(b_h), decay = exp(-exp(A_log_h) * softplus(a_h + dt_bias_h))
 *     S_h = decay * S_h;  S_h += k (x) beta (v_h - S_h^T k);  o_h = S_h^T q
 *     core_h = rmsnorm(o_h) * norm_w * silu(z_h)
 *   out = Wout core [H]
 * This is the recurrent form, row by row, for every T: a row's result and
 * the state after it depend on the state before it and its own inputs only,
 * in one order of operations, so decode (T = 1) and any verify or prefill
 * width give the same bits. (A chunked form for long prefills is not built:
 * it would change the reduction order, so it must never feed a state a
 * decode continues from without being bit-identical.)
 *
 * State per sequence and linear layer (lifetime: the sequence): the conv
 * state (the last K-1 mix rows) and the recurrent state S [nv][dk][dv].
 *
 * Rollback rule. Unlike the KV cache, the state cannot forget rows by moving
 * a length. A forward of T rows keeps a snapshot of every layer's state at
 * row s0 = max(0, T - DN_KEEP) of the batch (T <= DN_KEEP: the state before
 * the forward) and the raw inputs (mix, a, b) of rows s0.. . Taking the
 * snapshot copies no S: the buffer that holds S becomes the snapshot, and
 * the next row's update reads it and writes the other buffer (the conv
 * state, small, is copied). dn_rollback(m),
 * for m at or past the snapshot and within the kept rows, restores the
 * snapshot and replays rows up to m through the same conv and delta code the
 * forward ran: the state is then, bit for bit, the state plain decoding has
 * after m rows. Any other m resets the state to empty (length 0): the caller
 * re-runs the rows from there. A DFlash verify (<= 64 rows) always rolls back
 * within its own rows. */
#ifndef DFL_DELTANET_H
#define DFL_DELTANET_H

#include "backend.h"
#include "model.h"
#include "threads.h"

enum { DN_KEEP = BE_DN_KEEP }; /* rows a forward keeps for replay (backend.h) */

typedef struct {
    int n_lin, rows;       /* linear layers; scratch rows per dn_mixer call */
    int H, C, K, nk, nv, dk, dv;
    int v_tiled;                 /* cfg.lin_v_tiled: value head h reads key head h % nk, else h / (nv / nk) */
    float eps;
    int *lin_of;           /* [n_layers] linear-layer index of layer l, or -1 */
    float *conv;           /* [n_lin][K-1][C] the last K-1 mix rows, oldest first */
    float *rec_mem[2];     /* two [n_lin][nv][dk][dv] buffers: */
    float **rec;           /* [n_lin] layer li's state S [nv][dk][dv], in one of them */
    float *snap_conv;      /* [n_lin][K-1][C] the conv state at length snap_len */
    float **snap_rec;      /* [n_lin] layer li's S at length snap_len, in the other buffer */
    unsigned char *in_snap; /* [n_lin] 1: layer li's state is snap_rec[li] (rec[li] is free;
                               the next update reads the snapshot, writes rec) */
    int snap_len;          /* -1: no snapshot (the state moved past it) */
    float *keep_mix;       /* [n_lin][DN_KEEP][C] mix rows of positions snap_len.. */
    float *keep_ab;        /* [n_lin][DN_KEEP][2][nv] their a and b rows */
    int n_keep;            /* rows kept since the snapshot */
    /* scratch, [rows][..] */
    float *mix, *z, *ab, *cv, *core;
} dn_state;

void dn_init(dn_state *s, const cfg_model *c, int rows);
void dn_free(dn_state *s);
/* Empty state (a fresh sequence), no snapshot. */
void dn_reset(dn_state *s);
/* Snapshot the state, which is at sequence length len; rows of later
 * dn_mixer calls are kept for replay (dn_advance counts them). */
void dn_snapshot(dn_state *s, int len);
/* Stop keeping rows (the forward moves the state past what a snapshot
 * taken later in it would cover). */
void dn_forget(dn_state *s);
/* Linear layer l on T <= rows rows: out [T][H] = the mixer's output for
 * input xn [T][H] (out may alias xn). Keeps the rows when recording. */
void dn_mixer(tp_pool *tp, dn_state *s, const mdl_layer *L, int l, const float *xn, float *out, int T);
/* After every linear layer ran on T rows: count them as kept. */
void dn_advance(dn_state *s, int T);
/* The rollback rule above: the length the state now has (len or 0). */
int dn_rollback(tp_pool *tp, dn_state *s, const mdl_model *m, int len);

#endif
