/* kernels_vnni.c - the q8 mode of the "avx512" variant: int8 activations
 * against MLX Q8/Q4 weights with AVX512_VNNI (vpdpbusd: u8 x s8 -> s32,
 * the weight as the unsigned operand). Compiled for that target here;
 * kernels.c only calls it when kn_vnni_supported() says the CPU has it.
 *
 * Arithmetic: kernels.h (kn_set_act_quant) fixes it for every output, and
 * kn_quant_row / generic_rows_q8 in kernels.c spell it out in C; this file
 * must give the same bits. The integer sums I of each (output, 32-column
 * block) are exact whatever order they are added in, so the only thing that
 * has to stay fixed is the float chain, and it runs with one output per
 * vector lane: a vector holds 16 weight rows ("lanes = rows") and its
 * accumulator sees, for each block in ascending order,
 *     acc = fma(cvt(I_k), s * d_k, acc),   then at a group's end
 *     acc = fma(b, X, acc).
 * No horizontal float sum exists, so no lane layout can change a bit.
 * Q8 with groups of 16 (GGUF Q6_K) has one I per group, the half of a
 * block: acc = fma(cvt(I_half), s * d_k, acc), acc = fma(b, X_half, acc)
 * per group (fstep16, ptile16).
 *
 * Two loop shapes produce the I vectors:
 *   "fused" (T == 1, weights as loaded): each of 16 rows is multiplied in
 *     its natural layout (vpdpbusd of 64 weight bytes with 64 x bytes, 4
 *     columns per lane), then a transpose-and-add tree turns the 16 row
 *     vectors into one vector per block (per 16 columns for groups of 16)
 *     with one row per lane. One pass.
 *   "tiles" (every T on kn_pack'ed weights; T >= 2 otherwise): the packed
 *     layout (below, at kn_vnni_pack) holds, per 16 rows, vectors whose
 *     lane l has 4 bytes of row l, so vpdpbusd(acc, vector, broadcast of 4 x
 *     bytes) adds 4 columns to 16 outputs at once; PRT rows of x share each
 *     weight vector. Unpacked weights are put in that layout per call, one
 *     K block at a time, and every weight byte is still read from memory
 *     once per KN_TBLOCK rows of x.
 *
 * MXFP4 weights (weight.h) run as Q4 does, each nibble (an e2m1 code c)
 * turned into its integer wt_mx4_q[c] in [0, 24] by vpshufb (the table in
 * every 128-bit lane) where Q4 takes the nibble as it is, and the e8m0
 * byte into its scale and bias (f32 in the fused loop, bfloat16 in the
 * records); vpdpbusd's sums are exact for any u8, so the integers I and
 * then every bit are those of the weight's 8-bit form.
 *
 * x layouts (kn_qx.q), chosen by the quantizer for the loop that reads it:
 *   Q8: natural order (Q4 and MXFP4 as below);
 *   Q4, fused: per 128 columns [the 64 even columns, the 64 odd ones], so
 *     that the low / high nibbles of 64 weight bytes meet them in place;
 *   Q4, tiles: per 8 columns [0 2 4 6 1 3 5 7] (4 weight bytes = 8 columns:
 *     the low nibbles, then the high nibbles). */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,avx2"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,avx2")
#endif

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "kernels_impl.h"

#define INL static inline __attribute__((always_inline))
#define NL 16    /* lanes: weight rows per vector */
#define KB 512   /* columns per K block at T >= 2 (or the group size) */
#define MAXGB (KN_KBLOCK / 16) /* groups per K block, at most (Q8 groups of 16) */

/* ===================================================================== */
/* Quantizing x (kn_quant_row's values, vectorized)                        */
/* ===================================================================== */

/* One block of 32: q[32] natural order, *dk, *sk as kn_quant_row. */
INL void quant_block(const float *x, int8_t *q, float *dk, int32_t *sk) {
    __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
    /* 0x99: QNaN | +Inf | -Inf | SNaN */
    __mmask16 bad = _mm512_fpclass_ps_mask(a, 0x99) | _mm512_fpclass_ps_mask(b, 0x99);
    float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
    if (bad || !(amax >= 0x1p-100f)) {
        memset(q, 0, KN_QBLOCK);
        *dk = bad ? NAN : 0.0f;
        *sk = 0;
        return;
    }
    __m512 id = _mm512_set1_ps(127.0f / amax);
    __m512i qa = _mm512_cvt_roundps_epi32(_mm512_mul_ps(a, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512i qb = _mm512_cvt_roundps_epi32(_mm512_mul_ps(b, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128((__m128i *)q, _mm512_cvtepi32_epi8(qa));
    _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtepi32_epi8(qb));
    *dk = amax / 127.0f;
    *sk = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
}

void kn_vnni_quant(kn_qx *qx, const float *x, int T, const wt_weight *w) {
    int cols = w->cols, g = w->group_size, nb = cols / KN_QBLOCK, per_g = g / KN_QBLOCK, ng = cols / g;
    int layout = w->dtype == WT_Q8 ? 0 : T == 1 && !w->packed ? 1 : 2;
    /* in-lane byte shuffles: [0 2 4 6 1 3 5 7] per 8 (layout 2), and
     * [8 evens, 8 odds] per 16 (layout 1, then qwords 0 2 1 3) */
    const __m256i p8 = _mm256_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15, 0, 2, 4, 6, 1, 3,
                                        5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
    const __m256i p16 = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8,
                                         10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * cols;
        int8_t *q = qx->q + (size_t)t * qx->ldq;
        float *d = qx->d + (size_t)t * nb, *xs = qx->xs + (size_t)t * ng;
        memset(q + (cols & ~127), 0, qx->ldq - (size_t)(cols & ~127)); /* tail chunk, padding */
        int32_t sum[MAXGB];
        for (int k = 0; k < nb; k++) {
            _Alignas(32) int8_t nat[KN_QBLOCK];
            quant_block(xr + (size_t)k * KN_QBLOCK, nat, &d[k], &sum[per_g ? k % per_g : 0]);
            __m256i v = _mm256_load_si256((const __m256i *)nat);
            if (layout == 0) {
                _mm256_storeu_si256((__m256i *)(q + k * KN_QBLOCK), v);
            } else if (layout == 2) {
                _mm256_storeu_si256((__m256i *)(q + k * KN_QBLOCK), _mm256_shuffle_epi8(v, p8));
            } else { /* block kk of a 128-column chunk: evens at 16kk, odds at 64 + 16kk */
                v = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, p16), 0xD8);
                int8_t *c = q + (k / 4) * 128 + (k % 4) * 16;
                _mm_storeu_si128((__m128i *)c, _mm256_castsi256_si128(v));
                _mm_storeu_si128((__m128i *)(c + 64), _mm256_extracti128_si256(v, 1));
            }
            if (g == 16) { /* kn_quant_row: X = fma(S_half, d_k, 0) per half */
                int32_t lo = 0;
                for (int j = 0; j < 16; j++) lo += nat[j];
                xs[2 * k] = fmaf((float)lo, d[k], 0.0f);
                xs[2 * k + 1] = fmaf((float)(sum[0] - lo), d[k], 0.0f);
            } else if (k % per_g == per_g - 1) {
                float X = 0;
                for (int i = 0; i < per_g; i++) X = fmaf((float)sum[i], d[k - per_g + 1 + i], X);
                xs[k / per_g] = X;
            }
        }
    }
}

/* ===================================================================== */
/* Shared pieces                                                           */
/* ===================================================================== */

/* v[j] <- column j of the 16 x 16 dword matrix v (v[i] = row i). */
INL void transpose16(__m512i v[16]) {
    __m512i a[16], c[16];
    #pragma GCC unroll 16
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    /* c[4k+m], 128-bit lane L: dword 4L+m of rows 4k..4k+3 */
    #pragma GCC unroll 16
    for (int k = 0; k < 4; k++) {
        c[4 * k + 0] = _mm512_unpacklo_epi64(a[4 * k], a[4 * k + 2]);
        c[4 * k + 1] = _mm512_unpackhi_epi64(a[4 * k], a[4 * k + 2]);
        c[4 * k + 2] = _mm512_unpacklo_epi64(a[4 * k + 1], a[4 * k + 3]);
        c[4 * k + 3] = _mm512_unpackhi_epi64(a[4 * k + 1], a[4 * k + 3]);
    }
    /* for each m, a 4 x 4 transpose of 128-bit lanes across k */
    #pragma GCC unroll 16
    for (int m = 0; m < 4; m++) {
        __m512i t0 = _mm512_shuffle_i32x4(c[m], c[4 + m], 0x44), t1 = _mm512_shuffle_i32x4(c[m], c[4 + m], 0xEE);
        __m512i t2 = _mm512_shuffle_i32x4(c[8 + m], c[12 + m], 0x44);
        __m512i t3 = _mm512_shuffle_i32x4(c[8 + m], c[12 + m], 0xEE);
        v[m] = _mm512_shuffle_i32x4(t0, t2, 0x88);
        v[4 + m] = _mm512_shuffle_i32x4(t0, t2, 0xDD);
        v[8 + m] = _mm512_shuffle_i32x4(t1, t3, 0x88);
        v[12 + m] = _mm512_shuffle_i32x4(t1, t3, 0xDD);
    }
}

/* 16 bf16 / f16 / f32 scales from p + i0 (n <= 16 of them) as f32. */
INL __m512 ld_scales(const void *p, wt_dtype t, size_t i0, int n) {
    __mmask16 m = (__mmask16)((1u << n) - 1);
    if (t == WT_F32) return _mm512_maskz_loadu_ps(m, (const float *)p + i0);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i0);
    if (t == WT_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* 16 MXFP4 groups' scales (bias 0) or biases (bias 1) from their e8m0
 * bytes at p (n <= 16 of them), as f32 (wt_mx4_scale, wt_mx4_bias). */
INL __m512 ld_mx4_sb(const uint8_t *p, int n, int bias) {
    __m512i e = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8((__mmask16)((1u << n) - 1), p));
    __m512 s = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23));
    return bias ? _mm512_mul_ps(s, _mm512_set1_ps(-12.0f)) : s;
}

/* sT[i][l], bT[i][l] = scale, bias of row rows[l], group gi0 + i, i < n. */
static void load_sbT(const wt_weight *w, const int *rows, int gi0, int n, float *sT, float *bT) {
    size_t per_row = (size_t)(w->cols / w->group_size);
    for (int i0 = 0; i0 < n; i0 += 16) {
        int m = n - i0 < 16 ? n - i0 : 16;
        for (int pass = 0; pass < 2; pass++) {
            const void *src = pass ? w->biases : w->scales;
            float *dst = (pass ? bT : sT) + (size_t)i0 * NL;
            __m512i v[16];
            #pragma GCC unroll 16
            for (int l = 0; l < NL; l++) {
                size_t at = (size_t)rows[l] * per_row + (size_t)(gi0 + i0);
                v[l] = _mm512_castps_si512(w->dtype == WT_MXFP4 ? ld_mx4_sb((const uint8_t *)w->scales + at, m, pass)
                                                                : ld_scales(src, w->scale_dtype, at, m));
            }
            transpose16(v);
            for (int i = 0; i < m; i++) _mm512_store_si512((__m512i *)(dst + (size_t)i * NL), v[i]);
        }
    }
}

/* The rows of tile i of [r0, r1) cut into nl runs: lane l gets row
 * r0 + i + l*q (q = (r1-r0)/nl), so a tile reads nl long sequential streams
 * (see FOR_TILES in kernels_avx512.c); tile q holds the n % nl rows left,
 * consecutive. Lanes past *valid repeat the last row (computed, never
 * stored). Returns the number of tiles. */
static int tile_count(int r0, int r1, int nl) { return (r1 - r0) / nl + ((r1 - r0) % nl != 0); }
static void tile_rows(int r0, int r1, int nl, int i, int *rows, int *valid) {
    int n = r1 - r0, q = n / nl;
    if (i < q) {
        for (int l = 0; l < nl; l++) rows[l] = r0 + i + l * q;
        *valid = nl;
    } else {
        int v = n % nl;
        for (int l = 0; l < nl; l++) rows[l] = r0 + nl * q + (l < v ? l : v - 1);
        *valid = v;
    }
}

/* The float step of block k (global) for one vector of 16 outputs; sT, bT
 * hold the groups from gi0 on; g = 1 << gsh (a power of two). */
INL __m512 fstep(__m512 acc, __m512i I, int k, int gsh, int gi0, const float *sT, const float *bT, const float *d,
                 const float *xs) {
    int gi = (k * KN_QBLOCK) >> gsh;
    const float *sv = sT + (size_t)(gi - gi0) * NL;
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(_mm512_load_ps(sv), _mm512_set1_ps(d[k])), acc);
    if ((((k + 1) * KN_QBLOCK) & ((1 << gsh) - 1)) == 0)
        acc = _mm512_fmadd_ps(_mm512_load_ps(bT + (size_t)(gi - gi0) * NL), _mm512_set1_ps(xs[gi]), acc);
    return acc;
}

/* The float steps of Q8 group gi (global; group size 16, kernels.h): the
 * group's half of block gi / 2, then its bias. */
INL __m512 fstep16(__m512 acc, __m512i I, int gi, int gi0, const float *sT, const float *bT, const float *d,
                   const float *xs) {
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(_mm512_load_ps(sT + (size_t)(gi - gi0) * NL),
                                                                _mm512_set1_ps(d[gi >> 1])), acc);
    return _mm512_fmadd_ps(_mm512_load_ps(bT + (size_t)(gi - gi0) * NL), _mm512_set1_ps(xs[gi]), acc);
}

/* Lane l's weight row: p0 + l*S (a full tile: 16 rows S bytes apart, with
 * few registers for the addresses), or tab[l] (a partial tile). */
#define ROWP(l) (tab ? tab[l] : p0 + (size_t)(l) * S)

/* ===================================================================== */
/* Fused path (T == 1)                                                     */
/* ===================================================================== */

/* Sum the 16 row vectors v[i] within each 128-bit lane: W[k] lane L dword m
 * = the sum of 128-bit lane L of v[4k+m]. */
INL void reduce_lanes(const __m512i v[16], __m512i W[4]) {
    __m512i s[8];
#pragma GCC unroll 16
    for (int i = 0; i < 8; i++)
        s[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                                _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
#pragma GCC unroll 16
    for (int k = 0; k < 4; k++)
        W[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(s[2 * k], s[2 * k + 1]),
                                _mm512_unpackhi_epi64(s[2 * k], s[2 * k + 1]));
}

/* I[i] = the vector with lane l = 128-bit lane i of W[l / 4], dword l % 4
 * (a 4 x 4 transpose of 128-bit lanes): after reduce_lanes, the sums over
 * the i-th 16 bytes of the 16 rows. */
INL void lanes_to_vectors(const __m512i W[4], __m512i I[4]) {
    __m512i t0 = _mm512_shuffle_i32x4(W[0], W[1], 0x44), t1 = _mm512_shuffle_i32x4(W[0], W[1], 0xEE);
    __m512i t2 = _mm512_shuffle_i32x4(W[2], W[3], 0x44), t3 = _mm512_shuffle_i32x4(W[2], W[3], 0xEE);
    I[0] = _mm512_shuffle_i32x4(t0, t2, 0x88);
    I[1] = _mm512_shuffle_i32x4(t0, t2, 0xDD);
    I[2] = _mm512_shuffle_i32x4(t1, t3, 0x88);
    I[3] = _mm512_shuffle_i32x4(t1, t3, 0xDD);
}

/* W (reduce_lanes) of Q8 columns [j, j+64) against x: W[k] lane L dword m
 * = the integer dot of row 4k+m's columns j+16L .. j+16L+15; m masks the
 * bytes that exist. */
INL void q8_sums(const uint8_t *const *tab, const uint8_t *p0, size_t S, int j, __mmask64 m, const int8_t *xq,
                 __m512i W[4]) {
    __m512i x = _mm512_loadu_si512((const void *)(xq + j)), v[NL];
#pragma GCC unroll 16
    for (int l = 0; l < NL; l++) {
        const uint8_t *r = ROWP(l) + j;
        __m512i wv;
        if (m == ~(__mmask64)0) memcpy(&wv, r, 64);
        else wv = _mm512_maskz_loadu_epi8(m, r);
        v[l] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, x);
    }
    reduce_lanes(v, W);
}

/* I vectors (lanes = rows) of the 4 groups of 16 Q8 columns [j, j+64)
 * (group size 16). */
INL void q8_chunk16(const uint8_t *const *tab, const uint8_t *p0, size_t S, int j, __mmask64 m, const int8_t *xq,
                    __m512i I[4]) {
    __m512i W[4];
    q8_sums(tab, p0, S, j, m, xq, W);
    lanes_to_vectors(W, I);
}

/* I vectors (lanes = rows) of the 2 blocks of Q8 columns [j, j+64); m
 * masks the bytes that exist. */
INL void q8_chunk(const uint8_t *const *tab, const uint8_t *p0, size_t S, int j, __mmask64 m, const int8_t *xq,
                  __m512i I[2]) {
    __m512i W[4];
    q8_sums(tab, p0, S, j, m, xq, W);
    /* blocks: 128-bit lanes 0,1 = the first, 2,3 = the second */
    __m512i y0 = _mm512_add_epi32(_mm512_shuffle_i32x4(W[0], W[1], 0x88), _mm512_shuffle_i32x4(W[0], W[1], 0xDD));
    __m512i y1 = _mm512_add_epi32(_mm512_shuffle_i32x4(W[2], W[3], 0x88), _mm512_shuffle_i32x4(W[2], W[3], 0xDD));
    I[0] = _mm512_shuffle_i32x4(y0, y1, 0x88);
    I[1] = _mm512_shuffle_i32x4(y0, y1, 0xDD);
}

/* The table wt_mx4_q in every 128-bit lane (vpshufb's). */
INL __m512i mx4_lut(void) { return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)wt_mx4_q)); }

/* I vectors of the 4 blocks of Q4 columns [j, j+128) (bytes j/2 ..); mx:
 * MXFP4 codes, each through the table. */
INL void q4_chunk(const int mx, const uint8_t *const *tab, const uint8_t *p0, size_t S, int j, __mmask64 m,
                  const int8_t *xq, __m512i I[4]) {
    const __m512i lo4 = _mm512_set1_epi8(0x0F), lut = mx4_lut();
    __m512i xe = _mm512_loadu_si512((const void *)(xq + j));
    __m512i xo = _mm512_loadu_si512((const void *)(xq + j + 64)), v[NL], W[4];
#pragma GCC unroll 16
    for (int l = 0; l < NL; l++) {
        const uint8_t *r = ROWP(l) + j / 2;
        __m512i z = m == ~(__mmask64)0 ? _mm512_loadu_epi8(r) : _mm512_maskz_loadu_epi8(m, r);
        __m512i lo = _mm512_and_si512(z, lo4), hi = _mm512_and_si512(_mm512_srli_epi16(z, 4), lo4);
        if (mx) {
            lo = _mm512_shuffle_epi8(lut, lo);
            hi = _mm512_shuffle_epi8(lut, hi);
        }
        v[l] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xe), hi, xo);
    }
    reduce_lanes(v, W);
    lanes_to_vectors(W, I); /* block i = 128-bit lane i */
}

/* One tile of 16 rows (rows[l]; their data at ROWP(l)), all columns; mx:
 * the weight is MXFP4. */
INL void fused_tile(const int mx, const kn_job *job, const int *rows, int valid, const uint8_t *const *tab,
                    const uint8_t *p0, size_t S) {
    const wt_weight *w = job->w;
    const kn_qx *qx = job->qx;
    int cols = w->cols, g = w->group_size, gsh = __builtin_ctz((unsigned)g);
    _Alignas(64) float sT[MAXGB * NL], bT[MAXGB * NL];
    __m512 acc = _mm512_setzero_ps();
    for (int k0 = 0; k0 < cols; k0 += KN_KBLOCK) {
        int kn = cols - k0 < KN_KBLOCK ? cols - k0 : KN_KBLOCK, gi0 = k0 >> gsh, end = k0 + kn;
        load_sbT(w, rows, gi0, kn >> gsh, sT, bT);
        if (w->dtype == WT_Q8 && g == 16) { /* 4 groups per 64 columns; a tail of 32: 2 */
            for (int j = k0; j < end; j += 64) {
                int n16 = end - j < 64 ? 2 : 4;
                __m512i I[4];
                q8_chunk16(tab, p0, S, j, n16 == 4 ? ~(__mmask64)0 : ((__mmask64)1 << 32) - 1, qx->q, I);
#pragma GCC unroll 4
                for (int i = 0; i < n16; i++) acc = fstep16(acc, I[i], j / 16 + i, gi0, sT, bT, qx->d, qx->xs);
            }
        } else if (w->dtype == WT_Q8) {
            int j = k0;
            for (; j + 64 <= end; j += 64) {
                __m512i I[2];
                q8_chunk(tab, p0, S, j, ~(__mmask64)0, qx->q, I);
                acc = fstep(acc, I[0], j / KN_QBLOCK, gsh, gi0, sT, bT, qx->d, qx->xs);
                acc = fstep(acc, I[1], j / KN_QBLOCK + 1, gsh, gi0, sT, bT, qx->d, qx->xs);
            }
            if (j < end) { /* one block of 32 left */
                __m512i I[2];
                q8_chunk(tab, p0, S, j, ((__mmask64)1 << 32) - 1, qx->q, I);
                acc = fstep(acc, I[0], j / KN_QBLOCK, gsh, gi0, sT, bT, qx->d, qx->xs);
            }
        } else {
            int j = k0;
            for (; j + 128 <= end; j += 128) {
                __m512i I[4];
                q4_chunk(mx, tab, p0, S, j, ~(__mmask64)0, qx->q, I);
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++) acc = fstep(acc, I[i], j / KN_QBLOCK + i, gsh, gi0, sT, bT, qx->d, qx->xs);
            }
            if (j < end) { /* 1 to 3 blocks left */
                int nblk = (end - j) / KN_QBLOCK;
                __m512i I[4];
                q4_chunk(mx, tab, p0, S, j, ((__mmask64)1 << (16 * nblk)) - 1, qx->q, I);
                for (int i = 0; i < nblk; i++) acc = fstep(acc, I[i], j / KN_QBLOCK + i, gsh, gi0, sT, bT, qx->d, qx->xs);
            }
        }
    }
    _Alignas(64) float out[NL];
    _mm512_store_ps(out, acc);
    for (int l = 0; l < valid; l++) job->y[rows[l]] = out[l];
}

static void fused_strided(const kn_job *job, const int *rows, const uint8_t *p0, size_t S) {
    if (job->w->dtype == WT_MXFP4) fused_tile(1, job, rows, NL, NULL, p0, S);
    else fused_tile(0, job, rows, NL, NULL, p0, S);
}

static void fused_table(const kn_job *job, const int *rows, int valid, const uint8_t *const *tab) {
    if (job->w->dtype == WT_MXFP4) fused_tile(1, job, rows, valid, tab, NULL, 0);
    else fused_tile(0, job, rows, valid, tab, NULL, 0);
}

static void fused_rows(const kn_job *job, int r0, int r1) {
    const wt_weight *w = job->w;
    size_t rbytes = kn_is_nib(w) ? (size_t)w->cols / 2 : (size_t)w->cols;
    int n = tile_count(r0, r1, NL), q = (r1 - r0) / NL;
    for (int i = 0; i < n; i++) {
        int rows[NL], valid;
        tile_rows(r0, r1, NL, i, rows, &valid);
        if (valid == NL && (i < q)) {
            fused_strided(job, rows, (const uint8_t *)w->data + (size_t)rows[0] * rbytes, (size_t)q * rbytes);
        } else {
            const uint8_t *tab[NL];
            for (int l = 0; l < NL; l++) tab[l] = (const uint8_t *)w->data + (size_t)rows[l] * rbytes;
            fused_table(job, rows, valid, tab);
        }
    }
}

/* ===================================================================== */
/* The packed layout (kn_pack) and the loop over it (T >= 2, and T = 1 on */
/* packed weights)                                                         */
/* ===================================================================== */

/* The layout kn_vnni_pack writes. Tile i = rows 16i..16i+15 (rows past the
 * end are zeros). A tile is ng = cols/g group records of gbytes bytes, in
 * column order; a record holds
 *   the weights: Q8 g/4 vectors, Q4 / MXFP4 g/8 vectors of 64 bytes,
 *     vector m = [lane l: bytes 4m..4m+3 of row 16i+l's part of the group]
 *     (Q8: its columns 4m..4m+3; Q4 / MXFP4: the nibbles of columns
 *     8m..8m+7),
 *   then the 16 rows' scales, then their biases (in the scale dtype;
 *   MXFP4's as bfloat16 from the e8m0 byte, kn_rec_sdt).
 * gbytes = 16 * (row bytes of a group) + 32 * (scale size), a multiple of
 * 64, so a tile is one sequential stream and every vector is aligned.
 * Without kn_pack, T >= 2 builds the records of a K block per call. */
/* Bytes of weights and of a whole record; nib: Q4 / MXFP4 nibbles kept as
 * they are (kn_pack), else one byte per column (Q8, and Q4 / MXFP4
 * unpacked per call). */
INL size_t pk_gdata(const wt_weight *w, int nib) { return (size_t)NL * (nib ? w->group_size / 2 : w->group_size); }
INL size_t pk_gbytes(const wt_weight *w, int nib) { return pk_gdata(w, nib) + 2 * NL * kn_scale_size(kn_rec_sdt(w)); }

/* Records [g0, g1) of the 16 rows rows[l] (data rows p[l]; lanes l >= n
 * are zero rows, the padding of the last tile) into o, gbytes apart. Q4
 * with nib == 0: each 4-byte vector becomes two of one byte per column,
 * the low nibbles (even columns), then the high ones (odd columns); MXFP4
 * likewise, each code as its integer wt_mx4_q[c]. */
static void pack_groups(const wt_weight *w, const uint8_t *const *p, const int *rows, int n, int g0, int g1,
                        int nib, int pf, uint8_t *o) {
    int ng = w->cols / w->group_size, split = kn_is_nib(w) && !nib, mx = w->dtype == WT_MXFP4;
    size_t gb = (kn_is_nib(w) ? (size_t)w->group_size / 2 : (size_t)w->group_size); /* row bytes of a group */
    size_t ss = kn_scale_size(kn_rec_sdt(w)), gbytes = pk_gbytes(w, nib), gdata = pk_gdata(w, nib);
    const __m512i lo4 = _mm512_set1_epi8(0x0F), lut = mx4_lut();
    /* the rows' bytes of the groups are contiguous: 64 at a time, each
     * 4-byte column of the transpose to its group's record */
    size_t len = (size_t)(g1 - g0) * gb, off0 = (size_t)g0 * gb;
    int gsh = __builtin_ctzll(gb);
    for (size_t j = 0; j < len; j += 64) {
        size_t nb = len - j < 64 ? len - j : 64;
        __mmask64 m = nb == 64 ? ~(__mmask64)0 : ((__mmask64)1 << nb) - 1;
        __m512i v[16];
#pragma GCC unroll 16
        for (int l = 0; l < NL; l++) v[l] = _mm512_maskz_loadu_epi8(l < n ? m : 0, p[l] + off0 + j);
        if (pf) /* the same bytes of the next K block, for the next call */
#pragma GCC unroll 16
            for (int l = 0; l < NL; l++) _mm_prefetch((const char *)p[l] + off0 + len + j, _MM_HINT_T0);
        transpose16(v);
        /* byte b of the range (gb is a power of two) goes to record b / gb */
#define PK_AT(k) (o + ((j + 4 * (k)) >> gsh) * gbytes + ((j + 4 * (k)) & (gb - 1)) * (16 << split))
#define PK_STORE(k)                                                                                \
    do {                                                                                           \
        if (!split) {                                                                              \
            _mm512_store_si512((__m512i *)PK_AT(k), v[k]);                                         \
        } else {                                                                                   \
            __m512i lo_ = _mm512_and_si512(v[k], lo4), hi_ = _mm512_and_si512(_mm512_srli_epi16(v[k], 4), lo4); \
            if (mx) lo_ = _mm512_shuffle_epi8(lut, lo_), hi_ = _mm512_shuffle_epi8(lut, hi_);        \
            _mm512_store_si512((__m512i *)PK_AT(k), lo_);                                          \
            _mm512_store_si512((__m512i *)(PK_AT(k) + 64), hi_);                                   \
        }                                                                                          \
    } while (0)
        if (nb == 64) {
#pragma GCC unroll 16
            for (int k = 0; k < 16; k++) PK_STORE(k);
        } else {
#pragma GCC unroll 16
            for (int k = 0; k < 16; k++)
                if ((size_t)k < nb / 4) PK_STORE(k);
        }
#undef PK_STORE
#undef PK_AT
    }
    /* scales and biases, 16 groups at a time: a 16 x 16 transpose of
     * (row, group) widened to dwords, narrowed back for 2-byte dtypes */
    for (int gs = g0; gs < g1; gs += 16) {
        int m = g1 - gs < 16 ? g1 - gs : 16;
        for (int pass = 0; pass < 2; pass++) {
            const uint8_t *src = pass ? w->biases : w->scales;
            __m512i v[16];
#pragma GCC unroll 16
            for (int l = 0; l < NL; l++) {
                __mmask16 k = l < n ? (__mmask16)((1u << m) - 1) : 0;
                if (mx) { /* bfloat16 bits from the e8m0 bytes (wt_mx4_scale_bf16, wt_mx4_bias_bf16) */
                    const uint8_t *ep = (const uint8_t *)w->scales + (size_t)rows[l] * (size_t)ng + (size_t)gs;
                    __m512i e = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, ep));
                    v[l] = pass ? _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(2)), 7),
                                                  _mm512_set1_epi32(0x8040))
                                : _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 7);
                    v[l] = _mm512_maskz_mov_epi32(k, v[l]);
                    continue;
                }
                const uint8_t *sp = src + ((size_t)rows[l] * (size_t)ng + (size_t)gs) * ss;
                v[l] = ss == 4 ? _mm512_maskz_loadu_epi32(k, sp) : _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, sp));
            }
            transpose16(v);
            for (int i = 0; i < m; i++) {
                uint8_t *d = o + (size_t)(gs + i - g0) * gbytes + gdata + (size_t)pass * NL * ss;
                if (ss == 4) _mm512_store_si512((__m512i *)d, v[i]);
                else _mm256_store_si256((__m256i *)d, _mm512_cvtepi32_epi16(v[i]));
            }
        }
    }
}

size_t kn_vnni_pack_tile_bytes(const wt_weight *w) {
    return (size_t)(w->cols / w->group_size) * pk_gbytes(w, kn_is_nib(w));
}

void *kn_vnni_pack(const wt_weight *w) {
    int rows = w->rows, ng = w->cols / w->group_size, nt = (rows + NL - 1) / NL;
    size_t rb = kn_is_nib(w) ? (size_t)w->cols / 2 : (size_t)w->cols;
    size_t gbytes = pk_gbytes(w, kn_is_nib(w)), tbytes = (size_t)ng * gbytes;
    uint8_t *out = aligned_alloc(64, (size_t)nt * tbytes);
    if (!out) return NULL;
    for (int i = 0; i < nt; i++) {
        const uint8_t *p[NL];
        int r[NL], n = rows - i * NL < NL ? rows - i * NL : NL; /* real rows in the tile */
        for (int l = 0; l < NL; l++) {
            r[l] = i * NL + (l < n ? l : 0);
            p[l] = (const uint8_t *)w->data + (size_t)r[l] * rb; /* not read for l >= n */
        }
        pack_groups(w, p, r, n, 0, ng, kn_is_nib(w), 0, out + (size_t)i * tbytes);
    }
    return out;
}

/* The 4 x bytes at p in every dword lane. */
INL __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* 16 scales of dtype t at p (64-byte aligned for F32, 32 for the rest). */
INL __m512 ld_scales16(const uint8_t *p, wt_dtype t) {
    if (t == WT_F32) return _mm512_load_ps((const float *)p);
    __m256i h = _mm256_load_si256((const __m256i *)p);
    if (t == WT_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

#define RC1 4 /* tiles per step at T = 1 (RC1 streams) */
#define PRT 4 /* rows of x per register tile, T >= 2 (8 x 1 and 6 x 2 measured slower) */
#define PRC 3 /* tiles per register tile, T >= 2 (3: 9% faster than 2 on the 0.6B Q8 LM head at T=16, Zen 4) */

/* The start of group i (counted from the tile's first) in ptile and
 * ptile16: with pf > 0, fetch the record pf groups ahead (the next K block)
 * into L1 while this one is computed (the prefetchers alone left T >= 2
 * waiting for memory between K blocks); then load the group's scales and
 * biases of each of the rc tiles. */
INL void pt_group(const int rc, const wt_weight *w, const uint8_t *const *pt, int i, int pf, size_t gbytes,
                  size_t gdata, size_t ss, __m512 *sv, __m512 *bv) {
#ifndef NO_PF
    if (pf)
        for (int c = 0; c < rc; c++)
            for (size_t o = 0; o < gbytes; o += 64)
                _mm_prefetch((const char *)pt[c] + (size_t)(i + pf) * gbytes + o, _MM_HINT_T0);
#else
    (void)pf;
#endif
#pragma GCC unroll 4
    for (int c = 0; c < rc; c++) {
        const uint8_t *sp = pt[c] + (size_t)i * gbytes + gdata;
        sv[c] = ld_scales16(sp, kn_rec_sdt(w));
        bv[c] = ld_scales16(sp + NL * ss, kn_rec_sdt(w));
    }
}

/* acc[t][c] (t < rt) += x rows t0.. against packed tiles (c < rc) for the
 * groups [g0, g1); pt[c] points at tile c's record g0. q4: 1 Q4 nibble
 * records, 2 MXFP4 ones (each code through the table); 0: one byte per
 * column (Q8, or Q4 / MXFP4 unpacked: x in layout 2 then meets the even /
 * odd vectors in turn). At rt == 1 each
 * tile gets two integer accumulators (more independent chains); they are
 * added before the float step, which cannot change an exact integer.
 * The K block starting at group 0 starts the sums from zero in registers
 * (acc is not read: its callers need not clear it); later blocks add to
 * acc. */
INL void ptile(const int rt, const int rc, const int q4, const kn_job *job, const uint8_t *const *pt, int t0,
               int g0, int g1, int pf, float (*acc)[RC1][NL]) {
    const wt_weight *w = job->w;
    const kn_qx *qx = job->qx;
    int g = w->group_size, bpg = g / KN_QBLOCK, nb = w->cols / KN_QBLOCK, ng = w->cols / g;
    size_t gbytes = pk_gbytes(w, q4 != 0), gdata = pk_gdata(w, q4 != 0), ss = kn_scale_size(kn_rec_sdt(w));
    const __m512i lo4 = _mm512_set1_epi8(0x0F), lut = mx4_lut();
    __m512 fa[PRT][RC1];
#pragma GCC unroll 4
    for (int t = 0; t < rt; t++)
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) fa[t][c] = g0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(acc[t][c]);
    for (int gi = g0; gi < g1; gi++) {
        __m512 sv[RC1], bv[RC1];
        pt_group(rc, w, pt, gi - g0, pf, gbytes, gdata, ss, sv, bv);
        for (int kb = 0; kb < bpg; kb++) {
            int k = gi * bpg + kb;
            __m512i ia[PRT][RC1][2];
#pragma GCC unroll 4
            for (int t = 0; t < rt; t++)
#pragma GCC unroll 4
                for (int c = 0; c < rc; c++) ia[t][c][0] = ia[t][c][1] = _mm512_setzero_si512();
            if (!q4) {
#pragma GCC unroll 8
                for (int m = 0; m < 8; m++) {
                    __m512i wv[RC1];
#pragma GCC unroll 4
                    for (int c = 0; c < rc; c++)
                        wv[c] = _mm512_load_si512((const __m512i *)(pt[c] + (size_t)(gi - g0) * gbytes + (size_t)(kb * 8 + m) * 64));
#pragma GCC unroll 4
                    for (int t = 0; t < rt; t++) {
                        __m512i xb = bcast4(qx->q + (size_t)(t0 + t) * qx->ldq + k * KN_QBLOCK + 4 * m);
#pragma GCC unroll 4
                        for (int c = 0; c < rc; c++) {
                            int h = rt == 1 ? m & 1 : 0;
                            ia[t][c][h] = _mm512_dpbusd_epi32(ia[t][c][h], wv[c], xb);
                        }
                    }
                }
            } else {
#pragma GCC unroll 4
                for (int m = 0; m < 4; m++) {
                    __m512i lo[RC1], hi[RC1];
#pragma GCC unroll 4
                    for (int c = 0; c < rc; c++) {
                        __m512i z = _mm512_load_si512((const __m512i *)(pt[c] + (size_t)(gi - g0) * gbytes + (size_t)(kb * 4 + m) * 64));
                        lo[c] = _mm512_and_si512(z, lo4);
                        hi[c] = _mm512_and_si512(_mm512_srli_epi16(z, 4), lo4);
                        if (q4 == 2) {
                            lo[c] = _mm512_shuffle_epi8(lut, lo[c]);
                            hi[c] = _mm512_shuffle_epi8(lut, hi[c]);
                        }
                    }
#pragma GCC unroll 4
                    for (int t = 0; t < rt; t++) {
                        const int8_t *xp = qx->q + (size_t)(t0 + t) * qx->ldq + k * KN_QBLOCK + 8 * m;
                        __m512i xe = bcast4(xp), xo = bcast4(xp + 4);
#pragma GCC unroll 4
                        for (int c = 0; c < rc; c++) {
                            ia[t][c][0] = _mm512_dpbusd_epi32(ia[t][c][0], lo[c], xe);
                            ia[t][c][rt == 1] = _mm512_dpbusd_epi32(ia[t][c][rt == 1], hi[c], xo);
                        }
                    }
                }
            }
#pragma GCC unroll 4
            for (int t = 0; t < rt; t++) {
                __m512 dv = _mm512_set1_ps(qx->d[(size_t)(t0 + t) * nb + k]);
#pragma GCC unroll 4
                for (int c = 0; c < rc; c++) {
                    __m512i I = rt == 1 ? _mm512_add_epi32(ia[t][c][0], ia[t][c][1]) : ia[t][c][0];
                    fa[t][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(sv[c], dv), fa[t][c]);
                }
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < rt; t++) {
            __m512 xv = _mm512_set1_ps(qx->xs[(size_t)(t0 + t) * ng + gi]);
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) fa[t][c] = _mm512_fmadd_ps(bv[c], xv, fa[t][c]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < rt; t++)
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) _mm512_store_ps(acc[t][c], fa[t][c]);
}

/* ptile for Q8 weights with groups of 16 (kernels.h gives the order): a
 * record is 4 weight vectors (16 columns, the half of x block gi / 2), and
 * each group takes one I per (row of x, tile), then its two float steps. */
INL void ptile16(const int rt, const int rc, const kn_job *job, const uint8_t *const *pt, int t0, int g0, int g1,
                 int pf, float (*acc)[RC1][NL]) {
    const wt_weight *w = job->w;
    const kn_qx *qx = job->qx;
    int nb = w->cols / KN_QBLOCK, ng = w->cols / 16;
    size_t gbytes = pk_gbytes(w, 0), gdata = pk_gdata(w, 0), ss = kn_scale_size(w->scale_dtype);
    __m512 fa[PRT][RC1];
#pragma GCC unroll 4
    for (int t = 0; t < rt; t++)
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) fa[t][c] = g0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(acc[t][c]);
    for (int gi = g0; gi < g1; gi++) {
        __m512 sv[RC1], bv[RC1];
        __m512i ia[PRT][RC1][2];
        pt_group(rc, w, pt, gi - g0, pf, gbytes, gdata, ss, sv, bv);
#pragma GCC unroll 4
        for (int t = 0; t < rt; t++)
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) ia[t][c][0] = ia[t][c][1] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) {
            __m512i wv[RC1];
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++)
                wv[c] = _mm512_load_si512((const __m512i *)(pt[c] + (size_t)(gi - g0) * gbytes + (size_t)m * 64));
#pragma GCC unroll 4
            for (int t = 0; t < rt; t++) {
                __m512i xb = bcast4(qx->q + (size_t)(t0 + t) * qx->ldq + gi * 16 + 4 * m);
#pragma GCC unroll 4
                for (int c = 0; c < rc; c++) {
                    int h = rt == 1 ? m & 1 : 0;
                    ia[t][c][h] = _mm512_dpbusd_epi32(ia[t][c][h], wv[c], xb);
                }
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < rt; t++) {
            __m512 dv = _mm512_set1_ps(qx->d[(size_t)(t0 + t) * nb + gi / 2]);
            __m512 xv = _mm512_set1_ps(qx->xs[(size_t)(t0 + t) * ng + gi]);
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) {
                __m512i I = rt == 1 ? _mm512_add_epi32(ia[t][c][0], ia[t][c][1]) : ia[t][c][0];
                fa[t][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(sv[c], dv), fa[t][c]);
                fa[t][c] = _mm512_fmadd_ps(bv[c], xv, fa[t][c]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < rt; t++)
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) _mm512_store_ps(acc[t][c], fa[t][c]);
}

#define PT_CASE(RT_, RC_)                                                       \
    case RT_ * 8 + RC_:                                                         \
        if (q4 == 2) ptile(RT_, RC_, 2, job, pt, t0, g0, g1, pf, acc);          \
        else if (q4) ptile(RT_, RC_, 1, job, pt, t0, g0, g1, pf, acc);          \
        else if (g16) ptile16(RT_, RC_, job, pt, t0, g0, g1, pf, acc);          \
        else ptile(RT_, RC_, 0, job, pt, t0, g0, g1, pf, acc);                  \
        break
static void ptile_any(int rt, int rc, int q4, const kn_job *job, const uint8_t *const *pt, int t0, int g0, int g1, int pf,
                      float (*acc)[RC1][NL]) {
    int g16 = job->w->group_size == 16; /* Q8 only (wt_check) */
    switch (rt * 8 + rc) { /* rt <= PRT, rc <= PRC (or RC1 at rt = 1) */
        PT_CASE(1, 1); PT_CASE(1, 2); PT_CASE(1, 3); PT_CASE(1, 4);
        PT_CASE(2, 1); PT_CASE(3, 1); PT_CASE(4, 1);
        PT_CASE(2, 2); PT_CASE(3, 2); PT_CASE(4, 2);
        PT_CASE(2, 3); PT_CASE(3, 3); PT_CASE(4, 3);
    }
}

/* Groups per K block at T >= 2: about KB columns of RC tiles stay in L1
 * while every row of x passes over them. */
INL int kblock_groups(const wt_weight *w) { return KB / w->group_size > 0 ? KB / w->group_size : 1; }

/* y rows t0..t0+tn-1, the 16 outputs of each tile in one (masked) store. */
static void store_tiles(const kn_job *job, float (*acc)[RC1][NL], const int *tiles, int rc, int t0, int tn, int r1) {
    int rows = job->w->rows;
    for (int c = 0; c < rc; c++) {
        int r = tiles[c] * NL, n = r1 - r < NL ? r1 - r : NL;
        __mmask16 mk = (__mmask16)(n >= NL ? 0xFFFFu : (1u << n) - 1);
        for (int t = 0; t < tn; t++)
            _mm512_mask_storeu_ps(job->y + (size_t)(t0 + t) * rows + r, mk, _mm512_load_ps(acc[t][c]));
    }
}

/* Rows [r0, r1) from the packed copy (r0 is a multiple of KN_COL_TILE = NL,
 * so the thread's tiles are whole). */
static void packed_rows(const kn_job *job, int r0, int r1) {
    const wt_weight *w = job->w;
    int q4 = w->dtype == WT_MXFP4 ? 2 : w->dtype == WT_Q4, ng = w->cols / w->group_size, T = job->T;
    size_t gbytes = pk_gbytes(w, q4 != 0), tbytes = (size_t)ng * gbytes;
    const uint8_t *base = w->packed;
    int i0 = r0 / NL, nt = (r1 - r0 + NL - 1) / NL;
    int rcmax = T == 1 ? RC1 : PRC, gk = T == 1 ? ng : kblock_groups(w);
    _Alignas(64) float acc[KN_TBLOCK][RC1][NL];
    /* groups of rcmax tiles from rcmax separate runs of tiles (FOR_TILES) */
    int q = nt / rcmax, ngrp = q + (nt % rcmax != 0);
    for (int t0 = 0; t0 < T; t0 += KN_TBLOCK) {
        int tn = T - t0 < KN_TBLOCK ? T - t0 : KN_TBLOCK;
        for (int j = 0; j < ngrp; j++) {
            int tiles[RC1], rc = j < q ? rcmax : nt % rcmax;
            for (int c = 0; c < rc; c++) tiles[c] = i0 + (j < q ? j + c * q : rcmax * q + c);
            for (int g0 = 0; g0 < ng; g0 += gk) {
                int g1 = g0 + gk < ng ? g0 + gk : ng;
                const uint8_t *pt[RC1];
                for (int c = 0; c < rc; c++) pt[c] = base + (size_t)tiles[c] * tbytes + (size_t)g0 * gbytes;
                for (int t = 0; t < tn; t += PRT)
                    ptile_any(tn - t < PRT ? tn - t : PRT, rc, q4, job, pt, t0 + t, g0, g1,
                              T > 1 && t == 0 ? (g1 < ng ? g1 - g0 : ng - g0) : 0, acc + t);
            }
            store_tiles(job, acc, tiles, rc, t0, tn, r1);
        }
    }
}

/* Rows [r0, r1) at T >= 2 without kn_pack: per tile and K block, the
 * records are built into scratch (L1) once for all rows of x, Q4 unpacked
 * to a byte per column (the nibbles are split once, not once per PRT rows
 * of x). Tiles take their 16 rows from 16 separate runs (tile_rows). */
static void tiled_rows(const kn_job *job, int r0, int r1) {
    const wt_weight *w = job->w;
    int ng = w->cols / w->group_size, T = job->T, gk = kblock_groups(w);
    size_t rb = kn_is_nib(w) ? (size_t)w->cols / 2 : (size_t)w->cols;
    /* a K block: at most KN_KBLOCK columns (KB, or one group of up to 1024) */
    _Alignas(64) uint8_t buf[PRC][KN_KBLOCK * NL + KN_KBLOCK / KN_QBLOCK * 2 * NL * 4];
    _Alignas(64) float acc[KN_TBLOCK][RC1][NL];
    int ntl = tile_count(r0, r1, PRC * NL);
    for (int t0 = 0; t0 < T; t0 += KN_TBLOCK) {
        int tn = T - t0 < KN_TBLOCK ? T - t0 : KN_TBLOCK;
        for (int i = 0; i < ntl; i++) {
            int rows[PRC * NL], valid;
            tile_rows(r0, r1, PRC * NL, i, rows, &valid);
            int rc = (valid + NL - 1) / NL;
            const uint8_t *p[PRC][NL];
            for (int c = 0; c < rc; c++)
                for (int l = 0; l < NL; l++) p[c][l] = (const uint8_t *)w->data + (size_t)rows[c * NL + l] * rb;
            for (int g0 = 0; g0 < ng; g0 += gk) {
                int g1 = g0 + gk < ng ? g0 + gk : ng;
                const uint8_t *pt[RC1];
                for (int c = 0; c < rc; c++) {
                    pack_groups(w, p[c], rows + c * NL, NL, g0, g1, 0, g1 + (g1 - g0) <= ng, buf[c]);
                    pt[c] = buf[c];
                }
                for (int t = 0; t < tn; t += PRT)
                    ptile_any(tn - t < PRT ? tn - t : PRT, rc, 0, job, pt, t0 + t, g0, g1, 0, acc + t);
            }
            for (int t = 0; t < tn; t++)
                for (int j = 0; j < valid; j++)
                    job->y[(size_t)(t0 + t) * w->rows + rows[j]] = acc[t][j / NL][j % NL];
        }
    }
}

/* ===================================================================== */

void kn_vnni_rows(const kn_job *job, int r0, int r1) {
    if (job->w->packed) packed_rows(job, r0, r1);
    else if (job->T == 1) fused_rows(job, r0, r1);
    else tiled_rows(job, r0, r1);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

int kn_vnni_supported(void) {
    return cpu_has(CPU_AVX512VNNI) && cpu_has(CPU_FMA) && cpu_has(CPU_F16C);
}


#else
typedef int kn_vnni_unused; /* ISO C wants a declaration in every file */
#endif
