/* cuda_backend.h - test hooks of the CUDA backend (the backend itself is
 * be_cuda in backend.h). */
#ifndef DFL_CUDA_BACKEND_H
#define DFL_CUDA_BACKEND_H

#include <stdint.h>

#include "backend.h"

/* k[nkv*hd], v[nkv*hd] = the cached K/V of committed position pos in layer
 * `layer` of a CUDA target sequence (be_cuda.create). */
int cu_read_kv(void *seq, int layer, int pos, float *k, float *v);

/* GEMM launches enqueued (or captured into a graph) with a tail since the
 * process started: row kernels folded into a GEMM's last blocks
 * (DFLASH_CUDA_FUSE, cu_kernels.cuh cu_tail). */
long cu_tail_launches(void);

/* The draft's top-k kernel (be_draft_block.top_k) on host logits: lg
 * [ns][nv], xl [ns][nx] the extra ids' logits, K <= 16; top_ids / top_lp
 * [ns][K] as draft_block returns them. 0, or -1 + error. */
int cu_topk(const float *lg, int ns, int nv, const float *xl, int nx, const int32_t *extra, int K, int32_t *top_ids,
            float *top_lp);

/* be_cuda with forward_multi, predict_multi and draft_block_multi whatever
 * DFLASH_CUDA_MULTI says (=0 takes them out of be_cuda): the tests check
 * them against forward / argmax / draft_block. */
be_ops cu_ops_with_multi(void);

#endif
