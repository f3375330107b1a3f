/* kernels_bf16.c - the reduced-precision activation mode of the "avx512"
 * variant for BF16 weights (kn_set_act_quant: on): x rounded to bfloat16,
 * products accumulated in f32 by AVX512_BF16 vdpbf16ps. Compiled for that
 * target here; kernels.c only calls it when kn_bf16_supported() says so.
 *
 * Arithmetic of one output y[t][r] (fixed for every T, tiling and thread
 * split):
 *   xb_j = x_j rounded to bfloat16 by vcvtne2ps2bf16 (to nearest even;
 *          the instruction's own handling of denormals);
 *   16 lane accumulators; lane i of each 32-column step gets
 *          a = vdpbf16ps(a, xb[2i, 2i+1], w[2i, 2i+1]) in ascending steps
 *          (a masked, zero-filled step for a cols tail);
 *   y = hsum16(a), the fixed tree of kernels_avx512.c.
 * The products of two bfloat16s are exact in f32; how the CPU rounds the
 * two additions of one vdpbf16ps lane is its own (Intel and AMD may differ),
 * but it is the same instruction for every T, so rows stay invariant.
 * Error versus f32: |xb_j - x_j| <= 2^-8 |x_j|.
 *
 * Loops: T == 1 streams RC rows from RC separate runs, weights straight
 * from memory (decode is memory bound). T >= 2 uses RT x RC register tiles
 * over a K block of the RC rows (in L1), each weight vector loaded once for
 * RT rows of x; accumulators live in memory between K blocks. */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2")
#endif

#include <immintrin.h>
#include <string.h>

#include "cpu.h"
#include "kernels_impl.h"

#define INL static inline __attribute__((always_inline))
#define V 32  /* columns per step (16 lanes x 2) */
#define RT 4  /* rows of x per register tile, T >= 2 */
#define RC 4  /* weight rows per register tile */
#define KB 1024 /* columns per K block, T >= 2 */

/* Fixed-order horizontal sum (as kernels_avx512.c). */
INL float hsum16(__m512 a) {
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

void kn_bf16_quant(uint16_t *xb, size_t ldb, const float *x, int T, int cols) {
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * cols;
        uint16_t *o = xb + (size_t)t * ldb;
        for (int j = 0; j < cols; j += V) {
            int n = cols - j < V ? cols - j : V;
            __mmask16 m0 = (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1);
            __mmask16 m1 = (__mmask16)(n <= 16 ? 0 : n >= 32 ? 0xFFFF : (1u << (n - 16)) - 1);
            __m512 a = _mm512_maskz_loadu_ps(m0, xr + j), b = _mm512_maskz_loadu_ps(m1, xr + j + 16);
            /* cvtne2ps: the second operand fills the low half */
            _mm512_store_si512((__m512i *)(o + j), (__m512i)_mm512_cvtne2ps_pbh(b, a));
        }
    }
}

INL __m512bh ldw(const uint16_t *p, int n) {
    if (n >= V) return (__m512bh)_mm512_loadu_si512((const void *)p);
    return (__m512bh)_mm512_maskz_loadu_epi16(n <= 0 ? 0 : (__mmask32)(((uint64_t)1 << n) - 1), p);
}

/* acc[t][c] (t < rt, c < rc) += x rows t0.. . w rows p[c] over columns
 * [k0, k0+kn); kn a multiple of V except at the end of a row. */
INL void tile(const int rt, const int rc, const kn_job *job, const uint16_t *const *p, int t0, int k0, int kn,
              float (*acc)[RC][16]) {
    __m512 a[RT][RC];
#pragma GCC unroll 4
    for (int t = 0; t < rt; t++)
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) a[t][c] = _mm512_load_ps(acc[t][c]);
    for (int j = 0; j < kn; j += V) {
        __m512bh wv[RC];
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) wv[c] = ldw(p[c] + k0 + j, kn - j);
#pragma GCC unroll 4
        for (int t = 0; t < rt; t++) {
            __m512bh xv = (__m512bh)_mm512_load_si512((const void *)(job->xb + (size_t)(t0 + t) * job->ldb + k0 + j));
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) a[t][c] = _mm512_dpbf16_ps(a[t][c], xv, wv[c]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < rt; t++)
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) _mm512_store_ps(acc[t][c], a[t][c]);
}

#define TB_CASE(RT_, RC_) \
    case RT_ * 8 + RC_: tile(RT_, RC_, job, p, t0, k0, kn, acc); break
static void tile_any(int rt, int rc, const kn_job *job, const uint16_t *const *p, int t0, int k0, int kn,
                     float (*acc)[RC][16]) {
    switch (rt * 8 + rc) {
        TB_CASE(1, 1); TB_CASE(1, 2); TB_CASE(1, 3); TB_CASE(1, 4);
        TB_CASE(2, 1); TB_CASE(2, 2); TB_CASE(2, 3); TB_CASE(2, 4);
        TB_CASE(3, 1); TB_CASE(3, 2); TB_CASE(3, 3); TB_CASE(3, 4);
        TB_CASE(4, 1); TB_CASE(4, 2); TB_CASE(4, 3); TB_CASE(4, 4);
    }
}

/* Rows r + c*rs (c < rc) for every row of x. */
static void rows_tile(const kn_job *job, int r, int rs, int rc, float (*acc)[RC][16]) {
    const wt_weight *w = job->w;
    int cols = w->cols, T = job->T, kb = T == 1 ? cols : KB;
    const uint16_t *p[RC];
    for (int c = 0; c < rc; c++) p[c] = (const uint16_t *)w->data + (size_t)(r + c * rs) * cols;
    for (int t0 = 0; t0 < T; t0 += KN_TBLOCK) {
        int tn = T - t0 < KN_TBLOCK ? T - t0 : KN_TBLOCK;
        memset(acc, 0, sizeof acc[0] * (size_t)tn);
        for (int k0 = 0; k0 < cols; k0 += kb) {
            int kn = cols - k0 < kb ? cols - k0 : kb;
            for (int t = 0; t < tn; t += RT) tile_any(tn - t < RT ? tn - t : RT, rc, job, p, t0 + t, k0, kn, acc + t);
        }
        for (int t = 0; t < tn; t++)
            for (int c = 0; c < rc; c++) job->y[(size_t)(t0 + t) * w->rows + r + c * rs] = hsum16(_mm512_load_ps(acc[t][c]));
    }
}

/* Tiles of RC rows from RC separate runs of [r0, r1) (see FOR_TILES in
 * kernels_avx512.c); the rows left over form one short tile. */
void kn_bf16_rows(const kn_job *job, int r0, int r1) {
    _Alignas(64) float acc[KN_TBLOCK][RC][16];
    int n = r1 - r0, q = n / RC;
    for (int i = 0; i < q; i++) rows_tile(job, r0 + i, q, RC, acc);
    if (n % RC) rows_tile(job, r0 + RC * q, 1, n % RC, acc);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

int kn_bf16_supported(void) { return cpu_has(CPU_AVX512BF16); }

#else
typedef int kn_bf16_unused; /* ISO C wants a declaration in every file */
#endif
