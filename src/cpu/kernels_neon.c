/* kernels_neon.c - the arm64 variants "neon", "neon-dotprod" and
 * "neon-i8mm" (Advanced SIMD, 128-bit). Base NEON is architectural on
 * AArch64, so the f32 paths and the plain int8 path need no target; the
 * sdot and usdot loops are compiled for +dotprod / +i8mm here (target
 * pragmas, no -march flag), and kernels.c runs them only when cpu.h says the
 * CPU has the feature (getauxval / sysctl).
 *
 * f32 mode (every dtype; the same code in all three variants):
 *   w_j = W[r][j] as f32: F16 (vcvt) and BF16 (shift) converted exactly;
 *         Q8 and Q4 w = fma(q, s, b) (vfmaq_f32); MXFP4 likewise with
 *         q = wt_mx4_q[code] (vqtbl1q_u8);
 *   8 lane accumulators (two float32x4), a[j % 8] = fma(x_j, w_j, a[j % 8])
 *   in ascending j; a cols tail meets zeros in both x and w;
 *   y = vaddvq(a[0..3] + a[4..7]) = ((a0+a4) + (a1+a5)) + ((a2+a6) + (a3+a7)).
 * Each weight row is dequantized into an L1 buffer one K block at a time
 * (F32 is read in place) and every row of x runs over that same buffer, so
 * the sequence of operations on one accumulator is the same for every T.
 *
 * q8 mode (Q8/Q4 weights, int8 activations): the bits of generic_rows_q8
 * (kernels.h, kn_set_act_quant). The integer sums I of a block are exact in
 * any order; the float chain runs with lanes = rows (a float32x4 holds 4
 * weight rows' accumulators), acc = fma((float)I_k, s * d_k, acc) per block,
 * acc = fma(b, X, acc) per group, so no horizontal float sum exists. The
 * integer products, per 16 columns, by variant:
 *   neon:          vmull_s8 + vmlal_high_s8 (two products, |sum| <= 32512,
 *                  fit int16) then vpadalq_s16;
 *   neon-dotprod:  sdot;
 *   neon-i8mm:     usdot (u8 weights x s8 activations, no correction).
 * Q8 weights are unsigned (0..255): neon and neon-dotprod use q - 128 (the
 * top bit flipped) as s8 and add 128 * S back, S = sum of the block's xq
 * (exact integers). Q4 nibbles (0..15) are s8 as they are, MXFP4 codes
 * become their integers wt_mx4_q[c] (0..24, vqtbl1q_u8; for neon's
 * vmull_s8 a product is at most 24 * 127, the pair sums far from int16's
 * limit); for both x is laid out per 32 columns as [16 even columns, 16 odd
 * ones] (the low and high nibbles of the 16 weight bytes), Q8's x in
 * natural order. */
#if defined(__aarch64__)

#include <arm_neon.h>
#include <string.h>

#include "cpu.h"
#include "kernels_impl.h"

#define INL static inline __attribute__((always_inline))
#define RC 4  /* weight rows per tile */
#define RT 2  /* rows of x per register tile (f32 mode) */
#define MAXG (KN_KBLOCK / 16) /* groups per K block, at most (Q8 groups of 16) */

/* ===================================================================== */
/* f32 mode                                                                */
/* ===================================================================== */

/* 16 u8 -> 4 x float32x4 (exact). */
INL void u8_to_f32(uint8x16_t b, float32x4_t f[4]) {
    uint16x8_t lo = vmovl_u8(vget_low_u8(b)), hi = vmovl_high_u8(b);
    f[0] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo)));
    f[1] = vcvtq_f32_u32(vmovl_high_u16(lo));
    f[2] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi)));
    f[3] = vcvtq_f32_u32(vmovl_high_u16(hi));
}

/* out[0..kn) = W[r][k0 .. k0+kn) as f32, zeros up to the next multiple of
 * 8; for F32 a pointer into W (and the tail copied into tail[8]). */
static const float *dequant_row(const wt_weight *w, int r, int k0, int kn, float *out) {
    size_t base = (size_t)r * (size_t)w->cols + (size_t)k0;
    int j = 0;
    switch (w->dtype) {
    case WT_F32: return (const float *)w->data + base;
    case WT_F16: {
        const uint16_t *h = (const uint16_t *)w->data + base;
        for (; j + 4 <= kn; j += 4) vst1q_f32(out + j, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h + j))));
        for (; j < kn; j++) out[j] = kn_f16_to_f32(h[j]);
        break;
    }
    case WT_BF16: {
        const uint16_t *h = (const uint16_t *)w->data + base;
        for (; j + 4 <= kn; j += 4) vst1q_f32(out + j, vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(h + j), 16)));
        for (; j < kn; j++) out[j] = kn_bf16_to_f32(h[j]);
        break;
    }
    case WT_Q8:
    case WT_Q4:
    case WT_MXFP4: {
        /* cols, k0 and kn are multiples of 32 here (wt_check) */
        int g = w->group_size, q4 = kn_is_nib(w), mx = w->dtype == WT_MXFP4;
        size_t gi0 = (size_t)r * (size_t)(w->cols / g) + (size_t)(k0 / g);
        const uint8_t *q = (const uint8_t *)w->data + (q4 ? base / 2 : base);
        const uint8x16_t lut = vld1q_u8(wt_mx4_q);
        for (; j < kn; j += 32) {
            /* a run of 32 columns lies in one group, or (g = 16) two */
            float32x4_t f[8];
            if (q4) {
                uint8x16_t b = vld1q_u8(q + j / 2);
                uint8x16_t lo = vandq_u8(b, vdupq_n_u8(15)), hi = vshrq_n_u8(b, 4);
                if (mx) lo = vqtbl1q_u8(lut, lo), hi = vqtbl1q_u8(lut, hi);
                u8_to_f32(vzip1q_u8(lo, hi), f);
                u8_to_f32(vzip2q_u8(lo, hi), f + 4);
            } else {
                u8_to_f32(vld1q_u8(q + j), f);
                u8_to_f32(vld1q_u8(q + j + 16), f + 4);
            }
            for (int h = 0; h < 2; h++) {
                float sf, bf;
                kn_group_sb(w, gi0 + (size_t)((j + 16 * h) / g), &sf, &bf);
                float32x4_t s = vdupq_n_f32(sf), b = vdupq_n_f32(bf);
                for (int i = 0; i < 4; i++) vst1q_f32(out + j + 16 * h + 4 * i, vfmaq_f32(b, f[4 * h + i], s));
            }
        }
        break;
    }
    }
    for (; j % 8; j++) out[j] = 0;
    return out;
}

/* Tail of n < 8 floats into a zeroed vector pair. */
INL void ld_tail(const float *p, int n, float32x4_t v[2]) {
    float t[8] = {0};
    memcpy(t, p, sizeof(float) * (size_t)n);
    v[0] = vld1q_f32(t);
    v[1] = vld1q_f32(t + 4);
}

/* acc[t][c][0..8) += x rows t < rt against weight rows c < rc over n
 * columns (wrow[c] holds them; zero-padded to a multiple of 8 unless
 * w_f32, the rows of an F32 weight in place). */
INL void tile_f32(const int rt, const int rc, float (*acc)[RC][8], const float *x, size_t ldx,
                  const float *const *wrow, int w_f32, int n) {
    float32x4_t a[RT][RC][2];
#pragma GCC unroll 4
    for (int t = 0; t < rt; t++)
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) a[t][c][0] = vld1q_f32(acc[t][c]), a[t][c][1] = vld1q_f32(acc[t][c] + 4);
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        float32x4_t wv[RC][2];
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) wv[c][0] = vld1q_f32(wrow[c] + j), wv[c][1] = vld1q_f32(wrow[c] + j + 4);
#pragma GCC unroll 4
        for (int t = 0; t < rt; t++) {
            float32x4_t x0 = vld1q_f32(x + t * ldx + j), x1 = vld1q_f32(x + t * ldx + j + 4);
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) {
                a[t][c][0] = vfmaq_f32(a[t][c][0], x0, wv[c][0]);
                a[t][c][1] = vfmaq_f32(a[t][c][1], x1, wv[c][1]);
            }
        }
    }
    if (j < n) {
        float32x4_t wv[RC][2];
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) {
            if (w_f32) ld_tail(wrow[c] + j, n - j, wv[c]);
            else wv[c][0] = vld1q_f32(wrow[c] + j), wv[c][1] = vld1q_f32(wrow[c] + j + 4);
        }
#pragma GCC unroll 4
        for (int t = 0; t < rt; t++) {
            float32x4_t xv[2];
            ld_tail(x + t * ldx + j, n - j, xv);
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) {
                a[t][c][0] = vfmaq_f32(a[t][c][0], xv[0], wv[c][0]);
                a[t][c][1] = vfmaq_f32(a[t][c][1], xv[1], wv[c][1]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < rt; t++)
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) vst1q_f32(acc[t][c], a[t][c][0]), vst1q_f32(acc[t][c] + 4, a[t][c][1]);
}

#define TILE_CASE(RT_, RC_) \
    case RT_ * 8 + RC_: tile_f32(RT_, RC_, acc, x, ldx, wrow, w_f32, n); break
static void tile_any(int rt, int rc, float (*acc)[RC][8], const float *x, size_t ldx, const float *const *wrow,
                     int w_f32, int n) {
    switch (rt * 8 + rc) {
        TILE_CASE(1, 1); TILE_CASE(1, 2); TILE_CASE(1, 3); TILE_CASE(1, 4);
        TILE_CASE(2, 1); TILE_CASE(2, 2); TILE_CASE(2, 3); TILE_CASE(2, 4);
    }
}

static void neon_rows(const kn_job *job, int r0, int r1) {
    const wt_weight *w = job->w;
    int cols = w->cols, T = job->T, w_f32 = w->dtype == WT_F32;
    _Alignas(16) float wbuf[RC][KN_KBLOCK];
    _Alignas(16) float acc[KN_TBLOCK][RC][8];
    for (int t0 = 0; t0 < T; t0 += KN_TBLOCK) {
        int tn = T - t0 < KN_TBLOCK ? T - t0 : KN_TBLOCK;
        for (int r = r0; r < r1; r += RC) {
            int rc = r1 - r < RC ? r1 - r : RC;
            memset(acc, 0, sizeof acc[0] * (size_t)tn);
            for (int k0 = 0; k0 < cols; k0 += KN_KBLOCK) {
                int kn = cols - k0 < KN_KBLOCK ? cols - k0 : KN_KBLOCK;
                const float *wrow[RC];
                for (int c = 0; c < rc; c++) wrow[c] = dequant_row(w, r + c, k0, kn, wbuf[c]);
                for (int t = 0; t < tn; t += RT) {
                    int rt = tn - t < RT ? tn - t : RT;
                    tile_any(rt, rc, acc + t, job->x + (size_t)(t0 + t) * cols + k0, (size_t)cols, wrow, w_f32, kn);
                }
            }
            for (int t = 0; t < tn; t++)
                for (int c = 0; c < rc; c++)
                    job->y[(size_t)(t0 + t) * w->rows + r + c] =
                        vaddvq_f32(vaddq_f32(vld1q_f32(acc[t][c]), vld1q_f32(acc[t][c] + 4)));
        }
    }
}

/* ===================================================================== */
/* q8 mode: quantizing x                                                   */
/* ===================================================================== */

/* kn_quant_row's values; Q4 and MXFP4: each block of 32 as [16 even, 16 odd]. */
static void neon_quant(kn_qx *qx, const float *x, int T, const wt_weight *w) {
    int cols = w->cols, nb = cols / KN_QBLOCK, ng = cols / w->group_size;
    for (int t = 0; t < T; t++) {
        int8_t *q = qx->q + (size_t)t * qx->ldq;
        kn_quant_row(x + (size_t)t * cols, cols, w->group_size, q, qx->d + (size_t)t * nb, qx->xs + (size_t)t * ng);
        if (kn_is_nib(w))
            for (int k = 0; k < nb; k++) {
                int8x16x2_t v = vld2q_s8(q + (size_t)k * KN_QBLOCK); /* val[0]: even columns */
                vst1q_s8(q + (size_t)k * KN_QBLOCK, v.val[0]);
                vst1q_s8(q + (size_t)k * KN_QBLOCK + 16, v.val[1]);
            }
    }
}

/* ===================================================================== */
/* q8 mode: the row loop, one copy per integer-dot flavour                 */
/* ===================================================================== */

/* Sum of the 4 lanes of each of v[0..3] as one vector (exact integers). */
INL int32x4_t hsum4(const int32x4_t v[4]) { return vpaddq_s32(vpaddq_s32(v[0], v[1]), vpaddq_s32(v[2], v[3])); }

/* Scales and biases of the tile rows for the groups of one K block:
 * sT[i] lane c = scale of row rows[c], group gi0 + i. */
static void load_sbT(const wt_weight *w, const int *rows, int gi0, int n, float32x4_t *sT, float32x4_t *bT) {
    size_t per_row = (size_t)(w->cols / w->group_size);
    for (int i = 0; i < n; i++) {
        float s[RC], b[RC];
        for (int c = 0; c < RC; c++) kn_group_sb(w, (size_t)rows[c] * per_row + (size_t)(gi0 + i), &s[c], &b[c]);
        sT[i] = vld1q_f32(s);
        bT[i] = vld1q_f32(b);
    }
}

/* rows_q8 of each flavour: kernels_neon_q8.h included once per target. */
#define Q8_NAME neon_rows_q8
#define DOT16(acc, a, b) vpadalq_s16((acc), vmlal_high_s8(vmull_s8(vget_low_s8(a), vget_low_s8(b)), (a), (b)))
#define WQ4(v) vreinterpretq_s8_u8(v)
#define WQ8(p) vreinterpretq_s8_u8(veorq_u8(vld1q_u8(p), vdupq_n_u8(0x80)))
#define Q8_CORR 1
#include "kernels_neon_q8.h"

#ifdef KN_NEON_DOTPROD
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("dotprod"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
#endif
#define Q8_NAME dotprod_rows_q8
#define DOT16(acc, a, b) vdotq_s32((acc), (a), (b))
#define WQ4(v) vreinterpretq_s8_u8(v)
#define WQ8(p) vreinterpretq_s8_u8(veorq_u8(vld1q_u8(p), vdupq_n_u8(0x80)))
#define Q8_CORR 1
#include "kernels_neon_q8.h"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif

#ifdef KN_NEON_I8MM
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("dotprod,i8mm"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod+i8mm")
#endif
#define Q8_NAME i8mm_rows_q8
#define DOT16(acc, a, b) vusdotq_s32((acc), (a), (b))
#define WQ4(v) (v)
#define WQ8(p) vld1q_u8(p)
#define Q8_CORR 0
#include "kernels_neon_q8.h"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif

/* ===================================================================== */
/* The variants                                                            */
/* ===================================================================== */

static int neon_supported(void) { return cpu_has(CPU_NEON); }
#ifdef KN_NEON_DOTPROD
static int dotprod_supported(void) { return cpu_has(CPU_NEON) && cpu_has(CPU_DOTPROD); }
#endif
#ifdef KN_NEON_I8MM
static int i8mm_supported(void) { return cpu_has(CPU_NEON) && cpu_has(CPU_DOTPROD) && cpu_has(CPU_I8MM); }
#endif

/* The f32 mode is the same in all three; they differ in the integer dot of
 * the q8 mode, which is on by default (int8 activations, as llama.cpp's
 * Q8_0 on arm64: 16 columns per 1-3 integer instructions against about 8
 * float ones per 4 columns for dequantize-and-fma). BF16 weights run f32. */
#define NEON_VARIANT(VAR, NAME, SUPPORTED, ROWS_Q8) \
    const kn_impl VAR = {                           \
        .name = NAME,                               \
        .isa = KN_ISA_NEON,                         \
        .supported = SUPPORTED,                     \
        .rows = neon_rows,                          \
        .q8_supported = SUPPORTED,                  \
        .q8_default = 1,                            \
        .quant = neon_quant,                        \
        .rows_q8 = ROWS_Q8,                         \
    }
#ifdef KN_NEON_I8MM
NEON_VARIANT(kn_impl_neon_i8mm, "neon-i8mm", i8mm_supported, i8mm_rows_q8);
#endif
#ifdef KN_NEON_DOTPROD
NEON_VARIANT(kn_impl_neon_dotprod, "neon-dotprod", dotprod_supported, dotprod_rows_q8);
#endif
NEON_VARIANT(kn_impl_neon, "neon", neon_supported, neon_rows_q8);

#else
typedef int kn_neon_unused; /* ISO C wants a declaration in every file */
#endif
