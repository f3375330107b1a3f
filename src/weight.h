/* weight.h - what a weight matrix is, for every backend. Prefix: wt_.
 *
 * The ground floor of the weight types: the loaders (model.c,
 * gguf_model.c), the converters (quant.c, gguf_write.c, synth.c) and every
 * backend (the CPU one in src/cpu/, CUDA's in src/cuda/) share this
 * description; how a backend computes with a weight, and any copy it makes
 * for that, is its own (src/cpu/kernels.h, src/cuda/cu_kernels.cuh).
 *
 * Weights stay in their on-disk dtype (mmap'd, or the load's converted
 * copies owned by the model) and are converted by the backends' kernels.
 *
 * Layout invariants (wt_check validates them once at load; kernels never
 * check): a weight W[rows][cols] is in HF layout [out_features,
 * in_features], rows, cols > 0, data set;
 *   F32/F16/BF16: data = rows*cols elements, row-major.
 *   Q8/Q4 (MLX layout): data = uint32 [rows][cols*bits/32]; element j of a row
 *     lives in word j*bits/32 at bit offset (j*bits)%32 (little end first);
 *     bits = 8 for Q8, 4 for Q4;
 *     scales, biases = [rows][cols/group_size] of scale_dtype (F32, F16 or BF16);
 *     w[r][j] = scales[r][j/g] * q[r][j] + biases[r][j/g].
 *     g = group_size: a multiple of 32 dividing WT_GROUP_MAX (1024) and
 *     cols, or, for Q8 only, 16 (GGUF Q6_K's sub-blocks; cols still a
 *     multiple of 32). */
#ifndef DFL_WEIGHT_H
#define DFL_WEIGHT_H

#include <stddef.h>

typedef enum {
    WT_F32 = 0,
    WT_F16,
    WT_BF16,
    WT_Q8, /* MLX affine 8-bit: w = scale * q + bias, q in [0, 255] */
    WT_Q4, /* MLX affine 4-bit: q in [0, 15] */
} wt_dtype;

/* Every accepted group size (but Q8's 16) divides this: a backend's K
 * blocks of a multiple of it hold whole groups. */
#define WT_GROUP_MAX 1024

const char *wt_dtype_name(wt_dtype t);

/* A weight matrix (the header comment gives the layout). */
typedef struct {
    wt_dtype dtype;
    int rows, cols;
    const void *data;
    const void *scales, *biases;
    wt_dtype scale_dtype;
    int group_size, bits;
    /* The CPU backend's packed copy of a Q8/Q4 weight (kn_pack's layout of
     * the q8-mode kernels), or NULL; only the CPU kernels read it. Made and
     * freed by the CPU backend (cpu_backend.h: cb_pack in prepare, cb_unpack
     * in release); copies of the struct share it. */
    const void *packed;
} wt_weight;

/* Bytes of weight data (data + scales + biases) - for bandwidth reports. */
size_t wt_bytes(const wt_weight *w);

/* The value of each element, the reference every backend's arithmetic
 * starts from: out[0..n) = W[r][k0 .. k0+n) as f32 (for Q8/Q4, s*q
 * rounded, then + b rounded; no fused multiply-add), k0 and n multiples
 * of group_size for Q8/Q4. wt_get_row: the whole row. */
void wt_dequant(float *out, const wt_weight *w, int r, int k0, int n);
void wt_get_row(float *out, const wt_weight *w, int row);

/* Validate a weight once at load time: the header comment's invariants
 * (shape, data, bits vs dtype, group_size, scale dtype). Returns 0, or -1
 * with dfl_seterr naming `name` ("weight" if NULL). */
int wt_check(const wt_weight *w, const char *name);

#endif
