/* kernels_impl.h - what kernels.c shares with the per-ISA kernel files
 * (kernels_avx2.c, kernels_avx512.c, ...). Not part of the public interface.
 *
 * Every variant implements one function, rows(job, r0, r1), that writes
 * y[t][r] for all t < T and r0 <= r < r1. kn_matmul splits the output
 * columns across threads in tiles of KN_COL_TILE and calls it per chunk.
 *
 * The batch-invariance contract each variant keeps (see kernels.h): the
 * arithmetic for one output y[t][r] is a fixed function of x[t], W[r] and the
 * variant - one dequantized value per weight, one lane accumulator per
 * (vector lane), weights visited in ascending column order (or the variant's
 * fixed Q4 order), then one fixed horizontal reduction. Tiling over rows of x
 * or over output columns, K blocking, and the choice between a fused T=1
 * loop and a dequantize-to-buffer loop only change which values sit in
 * registers at the same time, never the sequence of operations on one
 * accumulator. */
#ifndef DFL_KERNELS_IMPL_H
#define DFL_KERNELS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

#define KN_COL_TILE 16  /* output columns per thread-split unit */
#ifndef KN_KBLOCK
#define KN_KBLOCK 1024  /* columns of W per K block: a multiple of every vector
                         * width and of every accepted group size */
#endif
/* accepted group sizes divide WT_GROUP_MAX (wt_check): K blocks hold whole groups */
_Static_assert(KN_KBLOCK % WT_GROUP_MAX == 0, "KN_KBLOCK must be a multiple of WT_GROUP_MAX");
#define KN_TBLOCK 64    /* rows of x per pass over a weight tile */

#define KN_QBLOCK 32 /* columns per int8 activation block (q8 mode) */

/* x of a q8-mode call, quantized once per row (kernels.h, kn_set_act_quant).
 * The values are fixed by the reference quantizer kn_quant_row; only the
 * order of the int8 columns inside a row (the layout) is the variant's. */
typedef struct {
    int8_t *q;  /* [T][ldq], 64-byte aligned rows, in the variant's layout */
    float *d;   /* [T][cols / KN_QBLOCK] block scales */
    float *xs;  /* [T][cols / group_size] group sums X of the dequantized x */
    int32_t *s16; /* [T][cols / 16] sums of xq over each 16 columns (S_k of a
                   * block = the two of its halves); filled by the quantizers
                   * whose rows_q8 read it (kernels_q8x8.h), else left as is */
    size_t ldq; /* bytes per row of q: a multiple of 128 */
} kn_qx;

/* One kn_matmul call as the variants see it. */
typedef struct {
    float *y;           /* [T][w->rows] */
    const float *x;     /* [T][w->cols], 64-byte aligned (kn_matmul copies
                         * it when needed); Q4 with a q4_perm variant: permuted.
                         * NULL in q8 mode */
    const wt_weight *w; /* validated by wt_check */
    int T;
    const kn_qx *qx;    /* q8 mode (Q8/Q4 weights): the quantized x; else NULL */
    const uint16_t *xb; /* q8 mode, BF16 weights: x as bfloat16, [T][ldb], rows
                         * 64-byte aligned and zero-padded; else NULL */
    size_t ldb;
} kn_job;

typedef struct {
    const char *name;       /* DFLASH_KERNELS's name for it */
    kn_isa isa;             /* the family attention and sampling follow */
    int (*supported)(void); /* 1 if this CPU (and OS) can run it (cpu.h) */
    /* For Q4 the variant reads x with every block of q4_perm consecutive
     * elements reordered as [the even ones, the odd ones]: it unpacks the
     * low nibbles of a run of bytes into one vector and the high nibbles
     * into the next. 0: x in natural order. */
    int q4_perm;
    /* dst[0..n) = src permuted as above (n a multiple of q4_perm); NULL:
     * kn_matmul's scalar loop. Moves data only. */
    void (*permute_q4)(float *dst, const float *src, size_t n);
    void (*rows)(const kn_job *job, int r0, int r1);
    /* q8 mode. q8_supported: NULL if the variant has none, else 1 if this
     * CPU can run it; q8_default: the mode is on unless asked otherwise
     * (the variant's reduced-precision paths are fast ones).
     * quant(qx, x, T, w) fills qx (buffers sized by kn_matmul) in the
     * layout rows_q8 reads for this T, with exactly kn_quant_row's values;
     * rows_q8 is rows() for a job with qx set. */
    int (*q8_supported)(void);
    int q8_default;
    void (*quant)(kn_qx *qx, const float *x, int T, const wt_weight *w);
    void (*rows_q8)(const kn_job *job, int r0, int r1);
    /* kn_pack: the variant's packed copy of a Q8/Q4 weight (malloc'd,
     * released with free), NULL if out of memory; NULL pointer: the
     * variant has no packed layout. rows_q8 reads w->packed when set. */
    void *(*pack)(const wt_weight *w);
    /* q8 mode for BF16 weights (bfloat16 activations); NULL: none.
     * quant_bf16 fills xb [T][ldb] from x [T][cols]. */
    int (*bf16_supported)(void);
    void (*quant_bf16)(uint16_t *xb, size_t ldb, const float *x, int T, int cols);
    void (*rows_bf16)(const kn_job *job, int r0, int r1);
    /* Bytes of pack's copy per 16 rows (one 16-row tile, two 8-row ones), so a view of rows
     * 16i.. starts i tiles in; NULL with pack. */
    size_t (*pack_tile_bytes)(const wt_weight *w);
} kn_impl;

/* The reference quantizer of one row (kernels.h gives the rule): xq[cols]
 * in natural order, d[cols/KN_QBLOCK], xs[cols/g]. */
void kn_quant_row(const float *x, int cols, int g, int8_t *xq, float *d, float *xs);

extern const kn_impl kn_impl_generic;
#if defined(__x86_64__)
extern const kn_impl kn_impl_avx2, kn_impl_avxvnni, kn_impl_avx512, kn_impl_avx512vnni;
/* kernels_avx2q8.c / kernels_avxvnni.c: the q8 mode on 8-row tiles of ymm
 * vectors (kernels_q8x8.h), AVX2 only (the avx2 and avx512 variants) and
 * with AVX-VNNI (the avxvnni variant) */
int kn_avx2q8_supported(void);
void kn_avx2q8_quant(kn_qx *qx, const float *x, int T, const wt_weight *w);
void kn_avx2q8_rows(const kn_job *job, int r0, int r1);
void *kn_avx2q8_pack(const wt_weight *w);
size_t kn_avx2q8_pack_tile_bytes(const wt_weight *w);
int kn_avxvnni_supported(void);
void kn_avxvnni_quant(kn_qx *qx, const float *x, int T, const wt_weight *w);
void kn_avxvnni_rows(const kn_job *job, int r0, int r1);
void *kn_avxvnni_pack(const wt_weight *w);
size_t kn_avxvnni_pack_tile_bytes(const wt_weight *w);
/* kernels_vnni.c: the q8 mode of the avx512 variant (AVX512_VNNI) */
int kn_vnni_supported(void);
void kn_vnni_quant(kn_qx *qx, const float *x, int T, const wt_weight *w);
void kn_vnni_rows(const kn_job *job, int r0, int r1);
void *kn_vnni_pack(const wt_weight *w);
size_t kn_vnni_pack_tile_bytes(const wt_weight *w);
/* kernels_bf16.c: the q8 mode of the avx512 variant for BF16 weights */
int kn_bf16_supported(void);
void kn_bf16_quant(uint16_t *xb, size_t ldb, const float *x, int T, int cols);
void kn_bf16_rows(const kn_job *job, int r0, int r1);
#endif

#if defined(__aarch64__)
/* kernels_neon.c: NEON, + sdot, + usdot (the q8 mode's integer dot). GCC
 * (10 and later) declares the sdot / usdot intrinsics for any function
 * compiled for the feature, so both variants are always built; clang 14's
 * arm_neon.h declares them only when the whole compilation targets the
 * feature (-march, or a default CPU such as Apple's), so with clang a
 * variant is built only then. */
#if !defined(__clang__) || defined(__ARM_FEATURE_DOTPROD)
#define KN_NEON_DOTPROD 1
#endif
#if !defined(__clang__) || (defined(__ARM_FEATURE_DOTPROD) && defined(__ARM_FEATURE_MATMUL_INT8))
#define KN_NEON_I8MM 1
#endif
extern const kn_impl kn_impl_neon, kn_impl_neon_dotprod, kn_impl_neon_i8mm;
#endif

/* IEEE half -> float, exact (subnormals, inf, nan included). */
static inline float kn_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu, u;
    if (em >= 0x7c00u) { /* inf / nan */
        u = sign | 0x7f800000u | ((em & 0x3ffu) << 13);
    } else if (em >= 0x0400u) { /* normal */
        u = sign | ((em << 13) + ((127u - 15u) << 23));
    } else { /* zero / subnormal: em * 2^-24, exact in float */
        union { float f; uint32_t u; } v = {.f = (float)em * (1.0f / 16777216.0f)};
        u = sign | v.u;
    }
    union { uint32_t u; float f; } v = {.u = u};
    return v.f;
}

static inline float kn_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
    return v.f;
}

/* Element i of a scales/biases array of dtype t (F32, F16 or BF16). */
static inline float kn_scale_at(const void *p, wt_dtype t, size_t i) {
    if (t == WT_F32) return ((const float *)p)[i];
    if (t == WT_F16) return kn_f16_to_f32(((const uint16_t *)p)[i]);
    return kn_bf16_to_f32(((const uint16_t *)p)[i]);
}

/* Bytes per scale / bias element. */
static inline size_t kn_scale_size(wt_dtype t) { return t == WT_F32 ? 4 : 2; }

/* The weights the q8 mode serves (int8 activations): Q8, Q4 and MXFP4. */
static inline int kn_is_q(const wt_weight *w) {
    return w->dtype == WT_Q8 || w->dtype == WT_Q4 || w->dtype == WT_MXFP4;
}
/* Two columns a byte (Q4 nibbles, MXFP4 codes): the variants' Q4 layouts
 * of x and of their packed records serve both; an MXFP4 code c becomes the
 * integer wt_mx4_q[c] where a Q4 nibble is taken as it is. */
static inline int kn_is_nib(const wt_weight *w) { return w->dtype == WT_Q4 || w->dtype == WT_MXFP4; }

/* Scale and bias of group gi (counted over the whole weight: row * groups
 * per row + group) as f32: for MXFP4 from its e8m0 byte (weight.h). */
static inline void kn_group_sb(const wt_weight *w, size_t gi, float *s, float *b) {
    if (w->dtype == WT_MXFP4) {
        uint8_t e = ((const uint8_t *)w->scales)[gi];
        *s = wt_mx4_scale(e);
        *b = wt_mx4_bias(e);
        return;
    }
    *s = kn_scale_at(w->scales, w->scale_dtype, gi);
    *b = kn_scale_at(w->biases, w->scale_dtype, gi);
}

/* The dtype of the scales and biases in kernels_vnni.c's records: an MXFP4
 * group's become bfloat16 (exact, wt_mx4_scale_bf16), the rest stay as
 * stored (kernels_q8x8.h's records keep MXFP4's e8m0 bytes instead). */
static inline wt_dtype kn_rec_sdt(const wt_weight *w) { return w->dtype == WT_MXFP4 ? WT_BF16 : w->scale_dtype; }

#endif
