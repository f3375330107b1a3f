/* kernels.h - numeric kernels behind one dispatch point. Prefix: kn_.
 *
 * Weights stay in their on-disk dtype (mmap'd) and are converted inside the
 * kernels. Activations are f32.
 *
 * Batch invariance (the rule that makes DFlash exactly lossless): the value
 * kn_matmul writes for row t of the output depends only on row t of the input
 * and on W - never on T, on the other rows, on the thread count, or on which
 * SIMD path ran for the other rows. Every variant must keep one fixed
 * reduction order per output element, whatever T is. */
#ifndef DFL_KERNELS_H
#define DFL_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    KN_F32 = 0,
    KN_F16,
    KN_BF16,
    KN_Q8, /* MLX affine 8-bit: w = scale * q + bias, q in [0, 255] */
    KN_Q4, /* MLX affine 4-bit: q in [0, 15] */
} kn_dtype;

const char *kn_dtype_name(kn_dtype t);

/* A weight matrix W[rows][cols] (HF layout [out_features, in_features]).
 *   F32/F16/BF16: data = rows*cols elements, row-major.
 *   Q8/Q4 (MLX layout): data = uint32 [rows][cols*bits/32]; element j of a row
 *     lives in word j*bits/32 at bit offset (j*bits)%32 (little end first);
 *     scales, biases = [rows][cols/group_size] of scale_dtype (F32, F16 or BF16);
 *     w[r][j] = scales[r][j/g] * q[r][j] + biases[r][j/g]. */
typedef struct {
    kn_dtype dtype;
    int rows, cols;
    const void *data;
    const void *scales, *biases;
    kn_dtype scale_dtype;
    int group_size, bits;
} kn_weight;

/* Pick the SIMD variant for this CPU (call once; tp_init separately).
 * DFLASH_KERNELS=generic|avx2|avx512 in the environment forces a path. */
void kn_init(void);
const char *kn_variant(void); /* "generic", "avx2", "avx512", ... */

/* y[T][w->rows] = x[T][w->cols] . W^T, threaded over output columns. */
void kn_matmul(float *y, const float *x, const kn_weight *w, int T);

/* out[cols] = W[row] dequantized to f32. */
void kn_get_row(float *out, const kn_weight *w, int row);

/* Bytes of weight data (data + scales + biases) - for bandwidth reports. */
size_t kn_weight_bytes(const kn_weight *w);

/* Validate a weight once at load time (kernels never check): shape, data,
 * bits vs dtype, group_size (a multiple of 32 dividing 1024 and cols),
 * scale dtype. Returns 0, or -1 with dfl_seterr naming `name`. */
int kn_check_weight(const kn_weight *w, const char *name);

/* Tests and benchmarks: use variant `name` ("generic", "avx2", "avx512").
 * Returns -1 (dfl_seterr) if it is unknown or this CPU lacks it. */
int kn_force_variant(const char *name);

#endif
