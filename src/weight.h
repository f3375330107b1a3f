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
 *     multiple of 32).
 *   MXFP4 (OCP microscaling FP4: gpt-oss's experts, as openai's checkpoints
 *     and GGML type 39 hold them): data = uint8 [rows][cols/2], element j of
 *     a row in byte j/2, the low nibble for even j (Q4's packing); each
 *     nibble an e2m1 code c of value v(c) = +-{0, .5, 1, 1.5, 2, 3, 4, 6}
 *     (bit 3 the sign); scales = uint8 e8m0 [rows][cols/32], a byte e in
 *     2..252 (the loaders refuse the rest); biases NULL, group_size 32,
 *     bits 4, scale_dtype not read. w[r][j] = 2^(e-127) v(c), which is
 *     s * q + b with q = wt_mx4_q[c] = 2 v + 12 in [0, 24], s = 2^(e-128)
 *     and b = -12 s: every backend computes with these q, s and b, so a
 *     weight gives the bits of its exact MLX 8-bit form of group 32 with
 *     bf16 scales and biases (wt_mx4_to_q8). 4.25 bits a value. */
#ifndef DFL_WEIGHT_H
#define DFL_WEIGHT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    WT_F32 = 0,
    WT_F16,
    WT_BF16,
    WT_Q8, /* MLX affine 8-bit: w = scale * q + bias, q in [0, 255] */
    WT_Q4, /* MLX affine 4-bit: q in [0, 15] */
    WT_MXFP4, /* e2m1 codes with an e8m0 scale per 32 (the header comment) */
} wt_dtype;

/* MXFP4: the integer q = 2 v + 12 of e2m1 code c (0..7: +0 .. +6, 8..15:
 * -0 .. -6), and a block's scale and bias from its e8m0 byte e (2..252):
 * s = 2^(e-128), b = -12 s, exact in f32 and in bfloat16. */
extern const uint8_t wt_mx4_q[16];
static inline float wt_mx4_scale(uint32_t e) {
    uint32_t u = (e - 1u) << 23;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline float wt_mx4_bias(uint32_t e) { return -12.0f * wt_mx4_scale(e); }
/* The bfloat16 bits of the same scale and bias. */
static inline uint16_t wt_mx4_scale_bf16(uint32_t e) { return (uint16_t)((e - 1u) << 7); }
static inline uint16_t wt_mx4_bias_bf16(uint32_t e) { return (uint16_t)(0x8000u | (e + 2u) << 7 | 0x40u); }
/* 1 if e8m0 byte e is one an MXFP4 weight may hold (2..252). */
static inline int wt_mx4_e_ok(uint32_t e) { return e >= 2 && e <= 252; }

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
    /* The CPU backend's packed copy of a Q8/Q4/MXFP4 weight (kn_pack's layout of
     * the q8-mode kernels), or NULL; only the CPU kernels read it. Made and
     * freed by the CPU backend (cpu_backend.h: cb_pack in prepare, cb_unpack
     * in release); copies of the struct share it. */
    const void *packed;
} wt_weight;

/* Bytes of weight data (data + scales + biases) - for bandwidth reports. */
size_t wt_bytes(const wt_weight *w);

/* MXFP4 weight W's exact MLX 8-bit form of group 32 (the header comment):
 * q [rows][cols] bytes, scales and biases [rows][cols/32] bfloat16 bits,
 * buffers the caller owns. The 8-bit layout these weights were loaded into
 * before the 4-bit one: the tests compare the two, CUDA's
 * DFLASH_CUDA_MX=0 uploads it. */
void wt_mx4_to_q8(const wt_weight *w, uint8_t *q, uint16_t *scales, uint16_t *biases);

/* The value of each element, the reference every backend's arithmetic
 * starts from: out[0..n) = W[r][k0 .. k0+n) as f32 (for Q8/Q4, s*q
 * rounded, then + b rounded; no fused multiply-add; MXFP4 as s*q + b,
 * exact), k0 and n multiples of group_size for Q8/Q4/MXFP4. wt_get_row:
 * the whole row. */
void wt_dequant(float *out, const wt_weight *w, int r, int k0, int n);
void wt_get_row(float *out, const wt_weight *w, int row);

/* Validate a weight once at load time: the header comment's invariants
 * (shape, data, bits vs dtype, group_size, scale dtype). Returns 0, or -1
 * with dfl_seterr naming `name` ("weight" if NULL). */
int wt_check(const wt_weight *w, const char *name);

#endif
