/* kernels.h - numeric kernels behind one dispatch point. Prefix: kn_.
 *
 * Weights stay in their on-disk dtype (mmap'd) and are converted inside the
 * kernels. Activations are f32; for MLX Q8/Q4 and BF16 weights kn_matmul
 * can round them to int8 / bfloat16 on the fly (see kn_set_act_quant).
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

#include "threads.h"
#include "weight.h"

/* The instruction-set family of a variant: attention.c and sample.c pick
 * their own loops by it, so one choice (kn_init's) rules every SIMD path. */
typedef enum {
    KN_ISA_GENERIC = 0, /* plain C */
    KN_ISA_AVX2,        /* AVX2 + FMA + F16C (256-bit) */
    KN_ISA_AVX512,      /* AVX-512 F/BW/VL/DQ (512-bit) */
    KN_ISA_NEON,        /* arm64 Advanced SIMD (128-bit) */
} kn_isa;

/* Pick the SIMD variant for this CPU and read the environment:
 * DFLASH_KERNELS=NAME (one of kn_variant_name's) forces a path, DFLASH_ACT the
 * activation mode. kn_init_once does it the first time only and may be
 * called from any number of threads at once (the backends; every kernel
 * entry calls it); kn_init redoes it, for single-threaded tests and
 * benchmarks. */
void kn_init_once(void);
void kn_init(void);
const char *kn_variant(void); /* "generic", "avx2", "avxvnni", "avx512vnni", ... */
kn_isa kn_isa_cur(void);      /* the family of kn_variant() */

/* The variants built in (best first), whatever this CPU runs: i < count. */
int kn_variant_count(void);
const char *kn_variant_name(int i);
/* 1 if the variant called name is built in and this CPU can run it. */
int kn_variant_supported(const char *name);
/* The current variant on this CPU: 1 if it has an int8-activation (q8)
 * path for Q8/Q4 weights, a packed layout for it, bfloat16 activations. */
int kn_has_q8(void);
int kn_has_pack(void);
int kn_has_bf16(void);

/* y[T][w->rows] = x[T][w->cols] . W^T, threaded over output columns. */
void kn_matmul(tp_pool *tp, float *y, const float *x, const wt_weight *w, int T);

/* ys[i] = ws[i] . x for n <= KN_MAX_MULTI weights that read the same x
 * (Q/K/V, gate/up): the same bits as n kn_matmul calls, in one parallel
 * region with x quantized once when the weights allow it. */
#define KN_MAX_MULTI 4
void kn_matmul_n(tp_pool *tp, float *const *ys, const float *x, const wt_weight *const *ws, int n, int T);

/* Rows r0..r0+n-1 of w as a weight of its own (the packed copy too), for
 * r0 a multiple of 16; each output row's bits are those of the same row of
 * w. */
wt_weight kn_row_view(const wt_weight *w, int r0, int n);

/* Activation quantization ("q8" mode): int8 activations for Q8/Q4 weights,
 * bfloat16 ones for BF16 weights. F32/F16 weights always run in f32.
 *
 * Off ("f32"): x is used as given; the result is the f32 reference
 * arithmetic of the variant (kernels.c).
 * On ("q8"): kn_matmul rounds each row of x, once per call, to int8 per
 * block of 32 columns, like llama.cpp's Q8_0 activations:
 *   amax = max |x_j| over the block, d = amax / 127 (f32),
 *   xq_j = rint(x_j * (127 / amax)) in [-127, 127]   (ties to even);
 *   a block with amax < 2^-100 quantizes to d = 0, xq = 0; a block holding
 *   an Inf or NaN to d = NaN (so the row's outputs are NaN, as in f32 mode).
 * Integer dot products I = sum_j q_j * xq_j over each block are exact
 * (AVX-512 VNNI or AVX-VNNI vpdpbusd, weights as the unsigned operand; on
 * plain AVX2 vpmaddubsw / vpmaddwd with no step able to saturate,
 * kernels_q8x8.h says why); the float part
 * of one output, in this fixed order, is
 *   acc = 0
 *   for each group of the weight row (ascending):
 *       for each block k of the group (ascending):
 *           acc = fma((float)I_k, s * d_k, acc)     (s * d_k rounded first)
 *       acc = fma(b, X, acc),  X = sum over the group's blocks of
 *             d_k * S_k, S_k = sum_j xq_j (the dequantized x, f32 chain
 *             X = fma(S_k, d_k, X) from 0)
 *   y = acc.
 * Q8 with group_size 16: a block of 32 covers two groups, so a group's one
 * piece is the half of its block, and for each group of 16 (ascending)
 *       acc = fma((float)I_half, s * d_k, acc)      (s * d_k rounded first)
 *       acc = fma(b, X_half, acc),  X_half = fma(S_half, d_k, 0)
 * with I_half = sum of q_j * xq_j and S_half = sum of xq_j over the group's
 * 16 columns, d_k the scale of the block holding them.
 * So y is W . xdeq (xdeq_j = d_k * xq_j) up to f32 rounding of that chain;
 * the bias term uses the dequantized x, not the original, which keeps the
 * result that of one consistent input (MLX groups are centred, w = s*(q-z):
 * with the original sums the rounding error of x would meet |b| ~ z*s).
 * Error versus f32: |x_j - xdeq_j| <= d_k / 2 = amax_k / 254 per element.
 * BF16 weights: x rounded to bfloat16 (|error| <= 2^-8 |x_j|), products
 * summed in f32 by AVX512_BF16 vdpbf16ps (kernels_bf16.c gives the order).
 * MXFP4 weights (weight.h) run both modes as their exact 8-bit form would
 * (wt_mx4_to_q8: MLX Q8, group 32): the q8 mode with I over the integers
 * q = wt_mx4_q[code] in [0, 24], s = 2^(e-128), b = -12 s; the f32 mode in
 * each variant's Q8 order (natural columns; w = s*q + b is exact). So a
 * model's outputs are the same bits with its experts at 4 or at 8 bits.
 * Batch invariance holds in both modes; the two modes give different bits.
 *
 * on: 1 = q8, 0 = f32, -1 = the default. The default is the environment's
 * DFLASH_ACT=f32|q8 if set, else q8 for Q8/Q4 weights when the selected
 * variant has a fast int8 path (avx512vnni, avx512, avxvnni, avx2: every
 * SIMD variant on x86-64), else f32. BF16 weights take bfloat16
 * activations (avx512vnni on a CPU with AVX512_BF16) only when q8 is asked
 * for explicitly (here or by DFLASH_ACT), never by default; elsewhere
 * (avx2, avxvnni, avx512, or no AVX512_BF16) they run f32. "generic" has
 * the portable reference of the int8 path (off by default) and none for
 * BF16. */
void kn_set_act_quant(int on);
/* 1 if kn_matmul on Q8/Q4/MXFP4 weights uses int8 activations now. */
int kn_act_quant(void);
/* 1 if kn_matmul on BF16 weights uses bfloat16 activations now. */
int kn_act_bf16(void);

/* Q8/Q4/MXFP4 weights in q8 mode: copy w once (at load) into the layout the int8
 * kernels stream - 16-row tiles (8-row ones on the ymm variants: avx2,
 * avxvnni, avx512), 4-byte column runs interleaved, scales
 * next to their group - so no call has to transpose the weights (one
 * sequential stream per 16 rows; about 3x fewer instructions per weight at
 * T = 1, and no per-call repacking for T >= 2). Results are bit-identical
 * with and without it. Does nothing (returns 0) unless the weight is Q8/Q4/MXFP4,
 * q8 mode is on and the variant has a packed layout; -1 (dfl_seterr) if
 * out of memory. The copy is as large as the weight data + scales. The
 * original stays in use for wt_get_row, for f32 mode and other variants. */
int kn_pack(wt_weight *w);
void kn_unpack(wt_weight *w); /* free w->packed (NULL is fine) */

/* Tests and benchmarks: use variant `name` (one of kn_variant_name's).
 * Returns -1 (dfl_seterr) if it is unknown or this CPU lacks it. */
int kn_force_variant(const char *name);

#endif
