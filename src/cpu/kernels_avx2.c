/* kernels_avx2.c - the "avx2" variant: AVX2 with FMA and F16C, compiled for
 * that target here (no -march flag needed). Same structure as
 * kernels_avx512.c with 8-lane vectors; see there for the two loop shapes.
 *
 * Arithmetic of one output y[t][r] (fixed for every T, tiling and thread
 * split):
 *   w_j = W[r][j] as f32: F16/BF16 converted exactly; Q8 and Q4
 *         w = fma(q, s, b); MXFP4 likewise with q = wt_mx4_q[code] (its
 *         codes turned into bytes first, mx4_expand), in natural order as Q8;
 *   8 lane accumulators, a = fma(x_v, w_v, a) over 8-column vectors in
 *   ascending order (a zero-filled vector for a cols tail);
 *   Q4 walks each 16-column block as [even columns, odd columns] (x is
 *   permuted to match by kn_matmul, q4_perm = 16);
 *   y = the fixed tree sum of hsum8(). */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>
#include <string.h>

#include "cpu.h"
#include "kernels_impl.h"
#include "kernels_mx4_x86.h"

#define V 8   /* floats per vector */
#define RT 4  /* rows of x per register tile */
#define RC 2  /* weight rows per register tile, tiled path (16 ymm registers) */
#define RCF 4 /* weight rows per step, fused path */
#define INL static inline __attribute__((always_inline))

/* Fixed-order horizontal sum: halves, then pairs. */
INL float hsum8(__m256 a) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

INL __m256 ld_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
INL __m256 ld_bf16(const uint16_t *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
INL __m256 ld_half(const uint16_t *p, int bf) { return bf ? ld_bf16(p) : ld_f16(p); }
/* 8 bytes -> 8 int32 lanes (zero-extended). */
INL __m256i ld_u8x8(const uint8_t *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }

/* Tails (n < 8 elements): copy into a zeroed vector's worth. */
INL __m256 ld_f32_tail(const float *p, int n) {
    float t[V] = {0};
    memcpy(t, p, sizeof(float) * (size_t)n);
    return _mm256_loadu_ps(t);
}
INL __m256 ld_half_tail(const uint16_t *p, int n, int bf) {
    uint16_t t[V] = {0};
    memcpy(t, p, sizeof(uint16_t) * (size_t)n);
    return ld_half(t, bf);
}

#define MAXG (KN_KBLOCK / 16) /* groups per K block, at most (Q8 groups of 16) */

/* Scales and biases of the tile rows r + c*rs (c < rc <= RCF) for the
 * groups of [k0, k0+kn). */
typedef struct {
    float s[RCF][MAXG], b[RCF][MAXG];
} kn_sb;

INL void load_sb(kn_sb *sb, const wt_weight *w, int r, int rs, int rc, int k0, int kn) {
    int g = w->group_size, per_row = w->cols / g;
    for (int c = 0; c < rc; c++) {
        size_t i0 = (size_t)(r + c * rs) * per_row + (size_t)(k0 / g);
        for (int i = 0; i < kn / g; i++) kn_group_sb(w, i0 + i, &sb->s[c][i], &sb->b[c][i]);
    }
}

/* mx4_expand: kernels_mx4_x86.h */

/* 8 Q4 columns from 4 bytes' worth of a zero-extended lane vector z:
 * low nibbles (hi = 0) or high nibbles (hi = 1), dequantized. */
INL __m256 q4_half(__m256i z, int hi, __m256 s, __m256 b) {
    __m256i v = hi ? _mm256_srli_epi32(z, 4) : _mm256_and_si256(z, _mm256_set1_epi32(15));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), s, b);
}

/* Register tiles of N rows taken N streams apart (see kernels_avx512.c). */
#define FOR_TILES(r0, r1, N, TILE)                             \
    do {                                                       \
        int n_ = (r1) - (r0), q_ = n_ / (N);                   \
        for (int i_ = 0; i_ < q_; i_++) TILE((r0) + i_, q_, N); \
        if (n_ % (N)) TILE((r0) + (N) * q_, 1, n_ % (N));      \
    } while (0)

#define RC_CASES(rc, call)  \
    switch (rc) {           \
    case 4: call(4); break; \
    case 3: call(3); break; \
    case 2: call(2); break; \
    default: call(1); break;\
    }

/* ===================================================================== */
/* Tiled path (T >= 2)                                                     */
/* ===================================================================== */

/* out[c][0..kn) = W[r + c*rs][k0 .. k0+kn) as f32 (Q4 permuted), rows
 * interleaved vector by vector; out rows are KN_KBLOCK floats apart. */
INL void dequant_tile(const int rc, const wt_weight *w, int r, int rs, int k0, int kn, const kn_sb *sb,
                      float *out) {
    size_t cols = (size_t)w->cols, rstep = (size_t)rs * cols;
    size_t base = (size_t)r * cols + (size_t)k0;
    int g = w->group_size;
    switch (w->dtype) {
    case WT_F32: { /* a copy: aligned loads for the RT-fold reuse */
        const float *f = (const float *)w->data + base;
        int j = 0;
        for (; j + V <= kn; j += V)
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) _mm256_store_ps(out + c * KN_KBLOCK + j, _mm256_loadu_ps(f + c * rstep + j));
        if (j < kn)
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) _mm256_store_ps(out + c * KN_KBLOCK + j, ld_f32_tail(f + c * rstep + j, kn - j));
        break;
    }
    case WT_F16:
    case WT_BF16: {
        const uint16_t *h = (const uint16_t *)w->data + base;
        int bf = w->dtype == WT_BF16, j = 0;
        for (; j + V <= kn; j += V)
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) _mm256_store_ps(out + c * KN_KBLOCK + j, ld_half(h + c * rstep + j, bf));
        if (j < kn)
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++)
                _mm256_store_ps(out + c * KN_KBLOCK + j, ld_half_tail(h + c * rstep + j, kn - j, bf));
        break;
    }
    case WT_Q8:
    case WT_MXFP4: {
        _Alignas(32) uint8_t mq[RC][KN_KBLOCK]; /* MXFP4: the rows' codes as bytes */
        const uint8_t *q = mq[0];
        if (w->dtype == WT_MXFP4) {
            mx4_expand(rc, mq[0], (const uint8_t *)w->data + base / 2, rstep / 2, kn);
            rstep = KN_KBLOCK;
        } else {
            q = (const uint8_t *)w->data + base;
        }
        for (int j = 0, gi = 0; j < kn; j += g, gi++) {
            __m256 s[RC], b[RC];
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) {
                s[c] = _mm256_set1_ps(sb->s[c][gi]);
                b[c] = _mm256_set1_ps(sb->b[c][gi]);
            }
            for (int i = j; i < j + g; i += V)
#pragma GCC unroll 4
                for (int c = 0; c < rc; c++) {
                    __m256 qf = _mm256_cvtepi32_ps(ld_u8x8(q + c * rstep + i));
                    _mm256_store_ps(out + c * KN_KBLOCK + i, _mm256_fmadd_ps(qf, s[c], b[c]));
                }
        }
        break;
    }
    case WT_Q4: {
        const uint8_t *q = (const uint8_t *)w->data + base / 2;
        for (int j = 0, gi = 0; j < kn; j += g, gi++) {
            __m256 s[RC], b[RC];
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) {
                s[c] = _mm256_set1_ps(sb->s[c][gi]);
                b[c] = _mm256_set1_ps(sb->b[c][gi]);
            }
            for (int i = j; i < j + g; i += 2 * V)
#pragma GCC unroll 4
                for (int c = 0; c < rc; c++) {
                    __m256i z = ld_u8x8(q + c * rstep / 2 + i / 2); /* byte k: columns i+2k, i+2k+1 */
                    _mm256_store_ps(out + c * KN_KBLOCK + i, q4_half(z, 0, s[c], b[c]));
                    _mm256_store_ps(out + c * KN_KBLOCK + i + V, q4_half(z, 1, s[c], b[c]));
                }
        }
        break;
    }
    }
}

INL void tile_f32(const int rt, const int rc, float *acc, const float *x, size_t ldx, const float *w,
                  size_t ldw, int n) {
    __m256 a[RT][RC];
#pragma GCC unroll 4
    for (int t = 0; t < rt; t++)
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) a[t][c] = _mm256_load_ps(acc + (t * RC + c) * V);
    int j = 0;
    for (; j + V <= n; j += V) {
        __m256 wv[RC];
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) wv[c] = _mm256_loadu_ps(w + c * ldw + j);
#pragma GCC unroll 4
        for (int t = 0; t < rt; t++) {
            __m256 xv = _mm256_loadu_ps(x + t * ldx + j);
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) a[t][c] = _mm256_fmadd_ps(xv, wv[c], a[t][c]);
        }
    }
    if (j < n) {
        __m256 wv[RC];
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) wv[c] = ld_f32_tail(w + c * ldw + j, n - j);
#pragma GCC unroll 4
        for (int t = 0; t < rt; t++) {
            __m256 xv = ld_f32_tail(x + t * ldx + j, n - j);
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) a[t][c] = _mm256_fmadd_ps(xv, wv[c], a[t][c]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < rt; t++)
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) _mm256_store_ps(acc + (t * RC + c) * V, a[t][c]);
}

#define TILE_CASE(RT_, RC_) \
    case RT_ * 8 + RC_: tile_f32(RT_, RC_, acc, x, ldx, w, ldw, n); break
static void tile_any(int rt, int rc, float *acc, const float *x, size_t ldx, const float *w, size_t ldw, int n) {
    switch (rt * 8 + rc) {
        TILE_CASE(1, 1); TILE_CASE(1, 2);
        TILE_CASE(2, 1); TILE_CASE(2, 2);
        TILE_CASE(3, 1); TILE_CASE(3, 2);
        TILE_CASE(4, 1); TILE_CASE(4, 2);
    }
}

typedef struct {
    _Alignas(32) float wbuf[RC][KN_KBLOCK];
    _Alignas(32) float acc[KN_TBLOCK][RC][V];
    kn_sb sb;
} tiled_scratch;

static void tiled_tile(const kn_job *job, tiled_scratch *ts, int t0, int tn, int r, int rs, int rc) {
    const wt_weight *w = job->w;
    int cols = w->cols;
    const float *x0 = job->x + (size_t)t0 * cols;
    memset(ts->acc, 0, sizeof ts->acc[0] * (size_t)tn);
    for (int k0 = 0; k0 < cols; k0 += KN_KBLOCK) {
        int kn = cols - k0 < KN_KBLOCK ? cols - k0 : KN_KBLOCK;
        const float *wp;
        size_t ldw;
        if (w->dtype == WT_F32 && job->T == 1) { /* read once: no copy */
            wp = (const float *)w->data + (size_t)r * cols + k0;
            ldw = (size_t)rs * cols;
        } else {
            if (kn_is_q(w)) load_sb(&ts->sb, w, r, rs, rc, k0, kn);
            if (rc == 2) dequant_tile(2, w, r, rs, k0, kn, &ts->sb, ts->wbuf[0]);
            else dequant_tile(1, w, r, rs, k0, kn, &ts->sb, ts->wbuf[0]);
            wp = ts->wbuf[0];
            ldw = KN_KBLOCK;
        }
        for (int t = 0; t < tn; t += RT) {
            int rt = tn - t < RT ? tn - t : RT;
            tile_any(rt, rc, ts->acc[t][0], x0 + (size_t)t * cols + k0, (size_t)cols, wp, ldw, kn);
        }
    }
    for (int t = 0; t < tn; t++)
        for (int c = 0; c < rc; c++)
            job->y[(size_t)(t0 + t) * w->rows + r + c * rs] = hsum8(_mm256_load_ps(ts->acc[t][c]));
}

static void rows_tiled(const kn_job *job, int r0, int r1) {
    tiled_scratch ts;
    for (int t0 = 0; t0 < job->T; t0 += KN_TBLOCK) {
        int tn = job->T - t0 < KN_TBLOCK ? job->T - t0 : KN_TBLOCK;
#define TILED_TILE(r, rs, rc) tiled_tile(job, &ts, t0, tn, r, rs, rc)
        FOR_TILES(r0, r1, RC, TILED_TILE);
    }
}

/* ===================================================================== */
/* Fused path (T == 1)                                                     */
/* ===================================================================== */

INL void fused_half(const int rc, int bf, const kn_job *job, int r, int rs) {
    const wt_weight *w = job->w;
    int cols = w->cols;
    size_t rstep = (size_t)rs * cols;
    const uint16_t *h = (const uint16_t *)w->data + (size_t)r * cols;
    const float *x = job->x;
    __m256 a[RCF];
#pragma GCC unroll 4
    for (int c = 0; c < rc; c++) a[c] = _mm256_setzero_ps();
    int j = 0;
    for (; j + V <= cols; j += V) {
        __m256 xv = _mm256_loadu_ps(x + j);
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) a[c] = _mm256_fmadd_ps(xv, ld_half(h + c * rstep + j, bf), a[c]);
    }
    if (j < cols) {
        __m256 xv = ld_f32_tail(x + j, cols - j);
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++)
            a[c] = _mm256_fmadd_ps(xv, ld_half_tail(h + c * rstep + j, cols - j, bf), a[c]);
    }
#pragma GCC unroll 4
    for (int c = 0; c < rc; c++) job->y[r + c * rs] = hsum8(a[c]);
}

/* Q8 rows r + c*rs, c < rc; mx: MXFP4 ones, each K block's codes turned
 * into bytes first (the same values, the same order). */
INL void fused_q8(const int rc, const int mx, const kn_job *job, int r, int rs) {
    const wt_weight *w = job->w;
    int cols = w->cols, g = w->group_size;
    size_t rstep = (size_t)rs * cols;
    _Alignas(32) uint8_t mq[RCF][KN_KBLOCK];
    __m256 a[RCF];
    kn_sb sb;
#pragma GCC unroll 4
    for (int c = 0; c < rc; c++) a[c] = _mm256_setzero_ps();
    if (mx) rstep = KN_KBLOCK;
    for (int k0 = 0; k0 < cols; k0 += KN_KBLOCK) {
        int kn = cols - k0 < KN_KBLOCK ? cols - k0 : KN_KBLOCK;
        load_sb(&sb, w, r, rs, rc, k0, kn);
        const uint8_t *qk = mq[0]; /* column k0 of row r */
        if (mx) mx4_expand(rc, mq[0], (const uint8_t *)w->data + ((size_t)r * cols + k0) / 2, (size_t)rs * cols / 2, kn);
        else qk = (const uint8_t *)w->data + (size_t)r * cols + k0;
        for (int j = k0, gi = 0; j < k0 + kn; j += g, gi++) {
            __m256 s[RCF], b[RCF];
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) {
                s[c] = _mm256_set1_ps(sb.s[c][gi]);
                b[c] = _mm256_set1_ps(sb.b[c][gi]);
            }
            for (int i = j; i < j + g; i += V) {
                __m256 xv = _mm256_loadu_ps(job->x + i);
#pragma GCC unroll 4
                for (int c = 0; c < rc; c++) {
                    __m256 qf = _mm256_cvtepi32_ps(ld_u8x8(qk + c * rstep + (i - k0)));
                    a[c] = _mm256_fmadd_ps(xv, _mm256_fmadd_ps(qf, s[c], b[c]), a[c]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < rc; c++) job->y[r + c * rs] = hsum8(a[c]);
}

INL void fused_q4(const int rc, const kn_job *job, int r, int rs) {
    const wt_weight *w = job->w;
    int cols = w->cols, g = w->group_size;
    size_t rbytes = (size_t)cols / 2, rstep = (size_t)rs * rbytes;
    const uint8_t *q = (const uint8_t *)w->data + (size_t)r * rbytes;
    __m256 a[RCF];
    kn_sb sb;
#pragma GCC unroll 4
    for (int c = 0; c < rc; c++) a[c] = _mm256_setzero_ps();
    for (int k0 = 0; k0 < cols; k0 += KN_KBLOCK) {
        int kn = cols - k0 < KN_KBLOCK ? cols - k0 : KN_KBLOCK;
        load_sb(&sb, w, r, rs, rc, k0, kn);
        for (int j = k0, gi = 0; j < k0 + kn; j += g, gi++) {
            __m256 s[RCF], b[RCF];
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) {
                s[c] = _mm256_set1_ps(sb.s[c][gi]);
                b[c] = _mm256_set1_ps(sb.b[c][gi]);
            }
            for (int i = j; i < j + g; i += 2 * V) {
                __m256 xlo = _mm256_loadu_ps(job->x + i), xhi = _mm256_loadu_ps(job->x + i + V);
#pragma GCC unroll 4
                for (int c = 0; c < rc; c++) {
                    __m256i z = ld_u8x8(q + c * rstep + i / 2);
                    a[c] = _mm256_fmadd_ps(xlo, q4_half(z, 0, s[c], b[c]), a[c]);
                    a[c] = _mm256_fmadd_ps(xhi, q4_half(z, 1, s[c], b[c]), a[c]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < rc; c++) job->y[r + c * rs] = hsum8(a[c]);
}

static void fused_tile(const kn_job *job, int r, int rs, int rc) {
#define CALL_F16(n) fused_half(n, 0, job, r, rs)
#define CALL_BF16(n) fused_half(n, 1, job, r, rs)
#define CALL_Q8(n) fused_q8(n, 0, job, r, rs)
#define CALL_MX(n) fused_q8(n, 1, job, r, rs)
#define CALL_Q4(n) fused_q4(n, job, r, rs)
    switch (job->w->dtype) {
    case WT_F16: RC_CASES(rc, CALL_F16); break;
    case WT_BF16: RC_CASES(rc, CALL_BF16); break;
    case WT_Q8: RC_CASES(rc, CALL_Q8); break;
    case WT_Q4: RC_CASES(rc, CALL_Q4); break;
    case WT_MXFP4: RC_CASES(rc, CALL_MX); break;
    case WT_F32: break; /* tiled path */
    }
}

/* Q4 x order: each 16 floats as [8 even, 8 odd]. */
static void avx2_permute_q4(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i += 2 * V) {
        __m256 a = _mm256_loadu_ps(src + i), b = _mm256_loadu_ps(src + i + V);
        /* shuffle_ps works per 128-bit half: [a0 a2 b0 b2 | a4 a6 b4 b6];
         * permute4x64 (0xD8) then orders the 64-bit pairs 0, 2, 1, 3 */
        __m256d ev = _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88));
        __m256d od = _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD));
        _mm256_storeu_ps(dst + i, _mm256_castpd_ps(_mm256_permute4x64_pd(ev, 0xD8)));
        _mm256_storeu_ps(dst + i + V, _mm256_castpd_ps(_mm256_permute4x64_pd(od, 0xD8)));
    }
}

static void avx2_rows(const kn_job *job, int r0, int r1) {
    if (job->T == 1 && job->w->dtype != WT_F32) {
#define FUSED_TILE(r, rs, rc) fused_tile(job, r, rs, rc)
        FOR_TILES(r0, r1, RCF, FUSED_TILE);
    } else {
        rows_tiled(job, r0, r1);
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

static int avx2_supported(void) { return cpu_has(CPU_AVX2) && cpu_has(CPU_FMA) && cpu_has(CPU_F16C); }

/* q8 mode: vpmaddubsw / vpmaddwd on 8-row tiles (kernels_avx2q8.c), on
 * by default; BF16 weights run f32 */
const kn_impl kn_impl_avx2 = {
    .name = "avx2",
    .isa = KN_ISA_AVX2,
    .supported = avx2_supported,
    .q4_perm = 16,
    .permute_q4 = avx2_permute_q4,
    .rows = avx2_rows,
    .q8_supported = kn_avx2q8_supported,
    .q8_default = 1,
    .quant = kn_avx2q8_quant,
    .rows_q8 = kn_avx2q8_rows,
    .pack = kn_avx2q8_pack,
    .pack_tile_bytes = kn_avx2q8_pack_tile_bytes,
};

static int avxvnni_supported(void) { return avx2_supported() && kn_avxvnni_supported(); }

/* The same f32 kernels; q8 mode with the AVX-VNNI vpdpbusd
 * (kernels_avxvnni.c), on by default */
const kn_impl kn_impl_avxvnni = {
    .name = "avxvnni",
    .isa = KN_ISA_AVX2,
    .supported = avxvnni_supported,
    .q4_perm = 16,
    .permute_q4 = avx2_permute_q4,
    .rows = avx2_rows,
    .q8_supported = kn_avxvnni_supported,
    .q8_default = 1,
    .quant = kn_avxvnni_quant,
    .rows_q8 = kn_avxvnni_rows,
    .pack = kn_avxvnni_pack,
    .pack_tile_bytes = kn_avxvnni_pack_tile_bytes,
};

#else
typedef int kn_avx2_unused; /* ISO C wants a declaration in every file */
#endif
