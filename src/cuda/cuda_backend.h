/* cuda_backend.h - test hooks of the CUDA backend (the backend itself is
 * be_cuda in backend.h). */
#ifndef DFL_CUDA_BACKEND_H
#define DFL_CUDA_BACKEND_H

/* k[nkv*hd], v[nkv*hd] = the cached K/V of committed position pos in layer
 * `layer` of a CUDA target sequence (be_cuda.create). */
int cu_read_kv(void *seq, int layer, int pos, float *k, float *v);

/* GEMM launches enqueued (or captured into a graph) with a tail since the
 * process started: row kernels folded into a GEMM's last blocks
 * (DFLASH_CUDA_FUSE, cu_kernels.cuh cu_tail). */
long cu_tail_launches(void);

#endif
