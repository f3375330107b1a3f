/* cuda_backend.h - test hooks of the CUDA backend (the backend itself is
 * be_cuda in backend.h). */
#ifndef DFL_CUDA_BACKEND_H
#define DFL_CUDA_BACKEND_H

/* k[nkv*hd], v[nkv*hd] = the cached K/V of committed position pos in layer
 * `layer` of a CUDA target sequence (be_cuda.create). */
int cu_read_kv(void *seq, int layer, int pos, float *k, float *v);

#endif
