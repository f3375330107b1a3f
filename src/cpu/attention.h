/* attention.h - softmax attention of query rows over a key/value cache.
 * Prefix: at_.
 *
 * For query row t and head h (GQA: kv head h / (nh/nkv)):
 *   out = softmax(q . K^T / sqrt(hd)) V over keys Ka[0 .. na(t)) then Kb[0 .. nb),
 *   na(t) = na + t + 1 when causal (the row's own key is already in Ka), else na.
 * Keys are visited in index order in blocks of 64 with a running maximum
 * (online softmax). A row's result depends only on its own query and keys,
 * never on T or the thread count: the same loop runs for every row. The SIMD
 * loops follow kn_isa_cur() (the one CPU-feature choice, made in kn_init). */
#ifndef DFL_ATTENTION_H
#define DFL_ATTENTION_H

#include <stddef.h>

#include "threads.h"

typedef struct {
    float *out;            /* [T][nh*hd] */
    const float *q;        /* [T][nh*hd] */
    const float *Ka, *Va;  /* key j, kv head h, dim d at [h * a_head + j * a_row + d] */
    const float *Kb, *Vb;  /* likewise with b_head, b_row; NULL when nb = 0 */
    int na, nb, causal;
    int nh, nkv, hd;       /* hd <= 512 */
    size_t a_head, a_row;  /* strides in floats: a cache laid out [nkv][n_ctx][hd] */
    size_t b_head, b_row;  /* has a_head = n_ctx * hd, a_row = hd (each head's keys */
} at_job;                  /* contiguous); rows [nb][nkv*hd]: b_head = hd, b_row = nkv*hd */

/* Threaded over (row, kv head) jobs on tp (NULL: the calling thread). */
void at_run(tp_pool *tp, const at_job *J, int T);

#endif
