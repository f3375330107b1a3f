/* attention.h - softmax attention of query rows over a key/value cache.
 * Prefix: at_.
 *
 * For query row t and head h (GQA: kv head h / (nh/nkv)):
 *   out = softmax(scale * q . K^T) V over keys Ka[lo(t) .. na(t)) then Kb[0 .. nb),
 *   na(t) = na + t + 1 when causal (the row's own key is already in Ka), else na;
 *   lo(t) = max(0, na(t) - window) for a sliding-window layer, else 0 (causal:
 *   the row at position p sees positions p - window + 1 .. p; a draft block:
 *   every row sees the last `window` context keys and the whole block);
 *   with sinks, one more logit sinks[h] joins each softmax (it has no value:
 *   it only takes probability away from the keys; gpt-oss).
 * Keys are visited in index order in blocks that end at multiples of 64
 * (the first starts at lo(t)) with a running maximum (online softmax, started
 * at the sink). A row's result depends only on its own query and keys,
 * never on T or the thread count: the same loop runs for every row. The SIMD
 * loops follow kn_isa_cur() (the one CPU-feature choice, made in kn_init).
 *
 * A ring cache (ring > 0) keeps key j of Ka at row j % ring: the caller
 * guarantees that rows lo(t) .. na(t) - 1 are all still there (ring >= the
 * window plus the rows stored since the oldest of them).
 *
 * A paged cache (pages != NULL, no ring; the CPU backend's target KV,
 * cpu_backend.c): key j of kv head h is at pages[j >> page_shift] + page_k
 * + h * a_head + (j & (2^page_shift - 1)) * a_row (values at page_v), Ka and
 * Va unused. Where a key lives never changes which keys a row sees or their
 * order.
 *
 * A tree batch (tree_depth != NULL, causal, no ring): row t sits at depth
 * tree_depth[t] below the committed keys 0..na-1, and sees those plus its
 * ancestors: key na + i (i = 0..depth) is the one at Ka row
 * na + tree_anc[t * tree_stride + i] (the batch row of its ancestor at depth
 * i, itself at i = depth). Keys keep their logical index j, so the blocks and
 * the order are those of plain decoding of the same prefix: the mask changes
 * which keys are seen, never the reduction order of what is seen. */
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
                           /* contiguous); rows [nb][nkv*hd]: b_head = hd, b_row = nkv*hd */
    const float *sinks;    /* [nh] sink logits, or NULL */
    int window;            /* Ka keys per row (causal: the row's own included); 0: all */
    int ring;              /* rows of the Ka/Va ring (key j at row j % ring); 0: key j at row j */
    float scale;           /* the scores' multiplier; 0: 1 / sqrt(hd) (Gemma-4: 1) */
    float *const *pages;   /* a paged Ka/Va (above), or NULL */
    size_t page_k, page_v; /* floats from a page's start to this layer's K, V */
    int page_shift;        /* log2 of the rows of a page */
    const int *tree_depth; /* [T] a tree batch's row depths (above), or NULL */
    const int *tree_anc;   /* [T][tree_stride] ancestor batch rows by depth */
    int tree_stride;
} at_job;

/* Key (val 0) or value (val 1) buffer row `row` (a ring's row, not the key
 * index) of kv head kh in J's cache Ka/Va, contiguous or paged: the one
 * place the cache's layout is spelled out, for attention and for the
 * backend that stores and moves the rows (the buffers are its own, so the
 * pointer is writable there). */
static inline float *at_cache_row(const at_job *J, int kh, int row, int val) {
    if (J->pages) {
        float *pg = J->pages[row >> J->page_shift] + (val ? J->page_v : J->page_k);
        return pg + kh * J->a_head + (size_t)(row & ((1 << J->page_shift) - 1)) * J->a_row;
    }
    return (float *)(val ? J->Va : J->Ka) + kh * J->a_head + (size_t)row * J->a_row;
}

/* Threaded over (row, kv head) jobs on tp (NULL: the calling thread). */
void at_run(tp_pool *tp, const at_job *J, int T);

#endif
