/* kernels_avx512.c - the "avx512" variant: AVX-512 F/BW/VL/DQ with FMA and
 * F16C, compiled for that target here (no -march flag needed); kernels.c
 * only calls it when kn_impl_avx512.supported() says the CPU has it.
 *
 * Arithmetic of one output y[t][r] (the invariant this file keeps for every
 * T, tiling and thread split):
 *   w_j = W[r][j] as f32: F16/BF16 converted exactly; Q8 w = fma(q, s, b);
 *         Q4 w = table[q] with table[k] = fma(k, s, b) (the same value);
 *         MXFP4 as Q8 with q = wt_mx4_q[code] (its codes turned into
 *         bytes first, mx4_expand), in natural order;
 *   16 lane accumulators, a = fma(x_v, w_v, a) over 16-column vectors in
 *   ascending order (a masked, zero-filled vector for a cols tail);
 *   Q4 walks each 32-column block as [even columns, odd columns] (x is
 *   permuted to match by kn_matmul, q4_perm = 32);
 *   y = the fixed tree sum of hsum16().
 *
 * Two loop shapes compute exactly that:
 *   T == 1: fused - weights are converted in registers and consumed at once
 *           (decode is memory bound; nothing is written back);
 *   T >= 2: tiled - a tile of RC weight rows x KN_KBLOCK columns is converted
 *           once into an f32 buffer (L1), then swept by RT x RC register
 *           tiles for every group of RT rows of x, so each weight byte is
 *           read from memory once per KN_TBLOCK rows of x. */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c,avx2"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c,avx2")
#endif

#include <immintrin.h>
#include <string.h>

#include "cpu.h"
#include "kernels_impl.h"
#include "kernels_mx4_x86.h"

#define V 16 /* floats per vector */
#define RT 4 /* rows of x per register tile */
#define RC 4 /* weight rows (output columns) per register tile */
#define INL static inline __attribute__((always_inline))

/* Fixed-order horizontal sum: halves, then quarters, then pairs. */
INL float hsum16(__m512 a) {
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

INL __mmask16 tail_mask(int n) { return (__mmask16)((1u << n) - 1); }

/* 16 halves / bfloat16s -> f32 (exact). */
INL __m512 ld_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
INL __m512 ld_f16_m(const uint16_t *p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
INL __m512 bf16_widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
INL __m512 ld_bf16(const uint16_t *p) { return bf16_widen(_mm256_loadu_si256((const __m256i *)p)); }
INL __m512 ld_bf16_m(const uint16_t *p, __mmask16 m) { return bf16_widen(_mm256_maskz_loadu_epi16(m, p)); }

/* 16 bytes -> 16 int32 lanes (zero-extended). */
INL __m512i ld_u8x16(const uint8_t *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)); }

/* out[0..n) = scales/biases p[i0 .. i0+n) as f32; out has room for n
 * rounded up to 16. */
INL void cvt_scales(const void *p, wt_dtype t, size_t i0, int n, float *out) {
    for (int i = 0; i < n; i += V) {
        __mmask16 m = tail_mask(n - i < V ? n - i : V);
        __m512 v;
        if (t == WT_F32) v = _mm512_maskz_loadu_ps(m, (const float *)p + i0 + i);
        else if (t == WT_F16) v = ld_f16_m((const uint16_t *)p + i0 + i, m);
        else v = ld_bf16_m((const uint16_t *)p + i0 + i, m);
        _mm512_storeu_ps(out + i, v);
    }
}

/* groups per K block, at most (Q8 groups of 16), rounded up to whole
 * vectors (cvt_scales writes 16 at a time) */
#define MAXG ((KN_KBLOCK / 16 + 15) / 16 * 16)

/* Scales and biases of the tile rows r + c*rs (c < rc) for the groups of
 * columns [k0, k0+kn), as f32: s[c][i], b[c][i]. */
typedef struct {
    float s[RC][MAXG], b[RC][MAXG];
} kn_sb;

INL void load_sb(kn_sb *sb, const wt_weight *w, int r, int rs, int rc, int k0, int kn) {
    int g = w->group_size, per_row = w->cols / g;
    for (int c = 0; c < rc; c++) {
        size_t i0 = (size_t)(r + c * rs) * per_row + (size_t)(k0 / g);
        if (w->dtype == WT_MXFP4) {
            for (int i = 0; i < kn / g; i++) kn_group_sb(w, i0 + i, &sb->s[c][i], &sb->b[c][i]);
            continue;
        }
        cvt_scales(w->scales, w->scale_dtype, i0, kn / g, sb->s[c]);
        cvt_scales(w->biases, w->scale_dtype, i0, kn / g, sb->b[c]);
    }
}

/* mx4_expand: kernels_mx4_x86.h */

static const float iota16[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

/* Register tiles over output columns. A thread's rows [r0, r1) are cut into
 * RC equal runs and tile i takes row i of each run: rows r0 + i + c*q,
 * q = (r1 - r0) / RC; the rows left over form one last short tile. A tile
 * then reads RC long sequential streams, which the hardware prefetchers
 * follow far better than RC short rows interleaved inside one page. Which
 * rows share a tile does not change any row's arithmetic. */
#define FOR_TILES(r0, r1, TILE)                                 \
    do {                                                        \
        int n_ = (r1) - (r0), q_ = n_ / RC;                     \
        for (int i_ = 0; i_ < q_; i_++) TILE((r0) + i_, q_, RC); \
        if (n_ % RC) TILE((r0) + RC * q_, 1, n_ % RC);          \
    } while (0)

#define RC_CASES(rc, call)  \
    switch (rc) {           \
    case 4: call(4); break; \
    case 3: call(3); break; \
    case 2: call(2); break; \
    default: call(1); break;\
    }

/* ===================================================================== */
/* Tiled path (T >= 2): f32 register tiles over a converted weight tile   */
/* ===================================================================== */

/* out[c][0..kn) = W[r + c*rs][k0 .. k0+kn) as f32 (Q4: in the permuted
 * order), the rc rows interleaved vector by vector so they stream
 * together. out rows are KN_KBLOCK floats apart. */
INL void dequant_tile(const int rc, const wt_weight *w, int r, int rs, int k0, int kn, const kn_sb *sb,
                      float *out) {
    size_t cols = (size_t)w->cols, rstep = (size_t)rs * cols;
    size_t base = (size_t)r * cols + (size_t)k0; /* element offset of row 0 */
    int g = w->group_size;
    switch (w->dtype) {
    case WT_F32: { /* a copy: aligned loads for the RT-fold reuse */
        const float *f = (const float *)w->data + base;
        int j = 0;
        for (; j + V <= kn; j += V)
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) _mm512_store_ps(out + c * KN_KBLOCK + j, _mm512_loadu_ps(f + c * rstep + j));
        if (j < kn)
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++)
                _mm512_store_ps(out + c * KN_KBLOCK + j, _mm512_maskz_loadu_ps(tail_mask(kn - j), f + c * rstep + j));
        break;
    }
    case WT_F16:
    case WT_BF16: {
        const uint16_t *h = (const uint16_t *)w->data + base;
        int bf = w->dtype == WT_BF16, j = 0;
        for (; j + V <= kn; j += V)
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) {
                const uint16_t *p = h + c * rstep + j;
                _mm512_store_ps(out + c * KN_KBLOCK + j, bf ? ld_bf16(p) : ld_f16(p));
            }
        if (j < kn) {
            __mmask16 m = tail_mask(kn - j);
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) {
                const uint16_t *p = h + c * rstep + j;
                _mm512_store_ps(out + c * KN_KBLOCK + j, bf ? ld_bf16_m(p, m) : ld_f16_m(p, m));
            }
        }
        break;
    }
    case WT_Q8:
    case WT_MXFP4: {
        _Alignas(64) uint8_t mq[RC][KN_KBLOCK]; /* MXFP4: the rows' codes as bytes */
        const uint8_t *q = mq[0];
        if (w->dtype == WT_MXFP4) {
            mx4_expand(rc, mq[0], (const uint8_t *)w->data + base / 2, rstep / 2, kn);
            rstep = KN_KBLOCK;
        } else {
            q = (const uint8_t *)w->data + base;
        }
        for (int j = 0, gi = 0; j < kn; j += g, gi++) {
            __m512 s[RC], b[RC];
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) {
                s[c] = _mm512_set1_ps(sb->s[c][gi]);
                b[c] = _mm512_set1_ps(sb->b[c][gi]);
            }
            for (int i = j; i < j + g; i += V)
#pragma GCC unroll 4
                for (int c = 0; c < rc; c++) {
                    __m512 qf = _mm512_cvtepi32_ps(ld_u8x16(q + c * rstep + i));
                    _mm512_store_ps(out + c * KN_KBLOCK + i, _mm512_fmadd_ps(qf, s[c], b[c]));
                }
        }
        break;
    }
    case WT_Q4: {
        const uint8_t *q = (const uint8_t *)w->data + base / 2;
        __m512 iota = _mm512_loadu_ps(iota16);
        for (int j = 0, gi = 0; j < kn; j += g, gi++) {
            __m512 tab[RC];
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++)
                tab[c] = _mm512_fmadd_ps(iota, _mm512_set1_ps(sb->s[c][gi]), _mm512_set1_ps(sb->b[c][gi]));
            for (int i = j; i < j + g; i += 2 * V)
#pragma GCC unroll 4
                for (int c = 0; c < rc; c++) {
                    /* byte k = columns i+2k (low nibble), i+2k+1 (high) */
                    __m512i z = ld_u8x16(q + c * rstep / 2 + i / 2);
                    float *o = out + c * KN_KBLOCK + i;
                    _mm512_store_ps(o, _mm512_permutexvar_ps(z, tab[c])); /* low 4 bits index */
                    _mm512_store_ps(o + V, _mm512_permutexvar_ps(_mm512_srli_epi32(z, 4), tab[c]));
                }
        }
        break;
    }
    }
}

/* acc[t][c] (16 floats each, t stride RC) += x[t] . w[c] over n columns,
 * for t < rt, c < rc. x rows are ldx apart, w rows ldw apart. */
INL void tile_f32(const int rt, const int rc, float *acc, const float *x, size_t ldx, const float *w,
                  size_t ldw, int n) {
    __m512 a[RT][RC];
#pragma GCC unroll 4
    for (int t = 0; t < rt; t++)
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) a[t][c] = _mm512_load_ps(acc + (t * RC + c) * V);
    int j = 0;
    for (; j + V <= n; j += V) {
        __m512 wv[RC];
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) wv[c] = _mm512_loadu_ps(w + c * ldw + j);
#pragma GCC unroll 4
        for (int t = 0; t < rt; t++) {
            __m512 xv = _mm512_loadu_ps(x + t * ldx + j);
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) a[t][c] = _mm512_fmadd_ps(xv, wv[c], a[t][c]);
        }
    }
    if (j < n) { /* cols tail: zero-filled lanes */
        __mmask16 m = tail_mask(n - j);
        __m512 wv[RC];
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) wv[c] = _mm512_maskz_loadu_ps(m, w + c * ldw + j);
#pragma GCC unroll 4
        for (int t = 0; t < rt; t++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + t * ldx + j);
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) a[t][c] = _mm512_fmadd_ps(xv, wv[c], a[t][c]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < rt; t++)
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) _mm512_store_ps(acc + (t * RC + c) * V, a[t][c]);
}

#define TILE_CASE(RT_, RC_) \
    case RT_ * 8 + RC_: tile_f32(RT_, RC_, acc, x, ldx, w, ldw, n); break
static void tile_any(int rt, int rc, float *acc, const float *x, size_t ldx, const float *w, size_t ldw, int n) {
    switch (rt * 8 + rc) {
        TILE_CASE(1, 1); TILE_CASE(1, 2); TILE_CASE(1, 3); TILE_CASE(1, 4);
        TILE_CASE(2, 1); TILE_CASE(2, 2); TILE_CASE(2, 3); TILE_CASE(2, 4);
        TILE_CASE(3, 1); TILE_CASE(3, 2); TILE_CASE(3, 3); TILE_CASE(3, 4);
        TILE_CASE(4, 1); TILE_CASE(4, 2); TILE_CASE(4, 3); TILE_CASE(4, 4);
    }
}

/* Scratch of one tiled call (on the stack: 33 KB). */
typedef struct {
    _Alignas(64) float wbuf[RC][KN_KBLOCK];   /* converted weight tile */
    _Alignas(64) float acc[KN_TBLOCK][RC][V]; /* lane accumulators */
    kn_sb sb;
} tiled_scratch;

/* Rows t0..t0+tn-1 of x against the weight rows r + c*rs, c < rc. */
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
#define CALL_DQ(n) dequant_tile(n, w, r, rs, k0, kn, &ts->sb, ts->wbuf[0])
            RC_CASES(rc, CALL_DQ);
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
            job->y[(size_t)(t0 + t) * w->rows + r + c * rs] = hsum16(_mm512_load_ps(ts->acc[t][c]));
}

static void rows_tiled(const kn_job *job, int r0, int r1) {
    tiled_scratch ts;
    for (int t0 = 0; t0 < job->T; t0 += KN_TBLOCK) {
        int tn = job->T - t0 < KN_TBLOCK ? job->T - t0 : KN_TBLOCK;
#define TILED_TILE(r, rs, rc) tiled_tile(job, &ts, t0, tn, r, rs, rc)
        FOR_TILES(r0, r1, TILED_TILE);
    }
}

/* ===================================================================== */
/* Fused path (T == 1): convert in registers, one pass over the weights   */
/* ===================================================================== */

/* F16 / BF16 rows r + c*rs, c < rc. */
INL void fused_half(const int rc, int bf, const kn_job *job, int r, int rs) {
    const wt_weight *w = job->w;
    int cols = w->cols;
    size_t rstep = (size_t)rs * cols;
    const uint16_t *h = (const uint16_t *)w->data + (size_t)r * cols;
    const float *x = job->x;
    __m512 a[RC];
#pragma GCC unroll 4
    for (int c = 0; c < rc; c++) a[c] = _mm512_setzero_ps();
    int j = 0;
    for (; j + V <= cols; j += V) {
        __m512 xv = _mm512_loadu_ps(x + j);
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) {
            const uint16_t *p = h + c * rstep + j;
            a[c] = _mm512_fmadd_ps(xv, bf ? ld_bf16(p) : ld_f16(p), a[c]);
        }
    }
    if (j < cols) {
        __mmask16 m = tail_mask(cols - j);
        __m512 xv = _mm512_maskz_loadu_ps(m, x + j);
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) {
            const uint16_t *p = h + c * rstep + j;
            a[c] = _mm512_fmadd_ps(xv, bf ? ld_bf16_m(p, m) : ld_f16_m(p, m), a[c]);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < rc; c++) job->y[r + c * rs] = hsum16(a[c]);
}

/* Q8 rows r + c*rs, c < rc; mx: MXFP4 ones, each K block's codes turned
 * into bytes first (the same values, the same order). */
INL void fused_q8(const int rc, const int mx, const kn_job *job, int r, int rs) {
    const wt_weight *w = job->w;
    int cols = w->cols, g = w->group_size;
    size_t rstep = (size_t)rs * cols;
    _Alignas(64) uint8_t mq[RC][KN_KBLOCK];
    __m512 a[RC];
    kn_sb sb;
#pragma GCC unroll 4
    for (int c = 0; c < rc; c++) a[c] = _mm512_setzero_ps();
    if (mx) rstep = KN_KBLOCK;
    for (int k0 = 0; k0 < cols; k0 += KN_KBLOCK) {
        int kn = cols - k0 < KN_KBLOCK ? cols - k0 : KN_KBLOCK;
        load_sb(&sb, w, r, rs, rc, k0, kn);
        const uint8_t *qk = mq[0]; /* column k0 of row r */
        if (mx) mx4_expand(rc, mq[0], (const uint8_t *)w->data + ((size_t)r * cols + k0) / 2, (size_t)rs * cols / 2, kn);
        else qk = (const uint8_t *)w->data + (size_t)r * cols + k0;
        for (int j = k0, gi = 0; j < k0 + kn; j += g, gi++) {
            __m512 s[RC], b[RC];
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) {
                s[c] = _mm512_set1_ps(sb.s[c][gi]);
                b[c] = _mm512_set1_ps(sb.b[c][gi]);
            }
            for (int i = j; i < j + g; i += V) {
                __m512 xv = _mm512_loadu_ps(job->x + i);
#pragma GCC unroll 4
                for (int c = 0; c < rc; c++) {
                    __m512 qf = _mm512_cvtepi32_ps(ld_u8x16(qk + c * rstep + (i - k0)));
                    a[c] = _mm512_fmadd_ps(xv, _mm512_fmadd_ps(qf, s[c], b[c]), a[c]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < rc; c++) job->y[r + c * rs] = hsum16(a[c]);
}

/* Q4 rows r + c*rs, c < rc; job->x is permuted in blocks of 32. */
INL void fused_q4(const int rc, const kn_job *job, int r, int rs) {
    const wt_weight *w = job->w;
    int cols = w->cols, g = w->group_size;
    size_t rbytes = (size_t)cols / 2, rstep = (size_t)rs * rbytes;
    const uint8_t *q = (const uint8_t *)w->data + (size_t)r * rbytes;
    __m512 iota = _mm512_loadu_ps(iota16);
    __m512 a[RC];
    kn_sb sb;
#pragma GCC unroll 4
    for (int c = 0; c < rc; c++) a[c] = _mm512_setzero_ps();
    for (int k0 = 0; k0 < cols; k0 += KN_KBLOCK) {
        int kn = cols - k0 < KN_KBLOCK ? cols - k0 : KN_KBLOCK;
        load_sb(&sb, w, r, rs, rc, k0, kn);
        for (int j = k0, gi = 0; j < k0 + kn; j += g, gi++) {
            __m512 tab[RC];
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++)
                tab[c] = _mm512_fmadd_ps(iota, _mm512_set1_ps(sb.s[c][gi]), _mm512_set1_ps(sb.b[c][gi]));
            for (int i = j; i < j + g; i += 2 * V) {
                __m512 xlo = _mm512_loadu_ps(job->x + i), xhi = _mm512_loadu_ps(job->x + i + V);
#pragma GCC unroll 4
                for (int c = 0; c < rc; c++) {
                    __m512i z = ld_u8x16(q + c * rstep + i / 2);
                    a[c] = _mm512_fmadd_ps(xlo, _mm512_permutexvar_ps(z, tab[c]), a[c]);
                    a[c] = _mm512_fmadd_ps(xhi, _mm512_permutexvar_ps(_mm512_srli_epi32(z, 4), tab[c]), a[c]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < rc; c++) job->y[r + c * rs] = hsum16(a[c]);
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

/* Q4 x order: each 32 floats as [16 even, 16 odd]. */
static void avx512_permute_q4(float *dst, const float *src, size_t n) {
    __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    for (size_t i = 0; i < n; i += 2 * V) {
        __m512 a = _mm512_loadu_ps(src + i), b = _mm512_loadu_ps(src + i + V);
        _mm512_storeu_ps(dst + i, _mm512_permutex2var_ps(a, ev, b));
        _mm512_storeu_ps(dst + i + V, _mm512_permutex2var_ps(a, od, b));
    }
}

static void avx512_rows(const kn_job *job, int r0, int r1) {
    if (job->T == 1 && job->w->dtype != WT_F32) {
#define FUSED_TILE(r, rs, rc) fused_tile(job, r, rs, rc)
        FOR_TILES(r0, r1, FUSED_TILE);
    } else {
        rows_tiled(job, r0, r1); /* F32 needs no conversion: one loop serves T = 1 too */
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

static int avx512_supported(void) { return cpu_has(CPU_AVX512) && cpu_has(CPU_FMA) && cpu_has(CPU_F16C); }
static int avx512vnni_supported(void) { return avx512_supported() && kn_vnni_supported(); }

/* AVX-512 without VNNI (Skylake-SP, Cascade Lake without it): q8 mode
 * for Q8/Q4 weights on the AVX2 int8 kernels (kernels_avx2q8.c, ymm code
 * runs on any AVX-512 CPU), on by default; BF16 weights run f32 */
const kn_impl kn_impl_avx512 = {
    .name = "avx512",
    .isa = KN_ISA_AVX512,
    .supported = avx512_supported,
    .q4_perm = 32,
    .permute_q4 = avx512_permute_q4,
    .rows = avx512_rows,
    .q8_supported = kn_avx2q8_supported,
    .q8_default = 1,
    .quant = kn_avx2q8_quant,
    .rows_q8 = kn_avx2q8_rows,
    .pack = kn_avx2q8_pack,
    .pack_tile_bytes = kn_avx2q8_pack_tile_bytes,
};

/* The same f32 kernels, plus int8 activations on VNNI (kernels_vnni.c)
 * and bfloat16 ones where the CPU has AVX512_BF16 (kernels_bf16.c) */
const kn_impl kn_impl_avx512vnni = {
    .name = "avx512vnni",
    .isa = KN_ISA_AVX512,
    .supported = avx512vnni_supported,
    .q4_perm = 32,
    .permute_q4 = avx512_permute_q4,
    .rows = avx512_rows,
    .q8_supported = kn_vnni_supported,
    .q8_default = 1,
    .quant = kn_vnni_quant,
    .rows_q8 = kn_vnni_rows,
    .pack = kn_vnni_pack,
    .pack_tile_bytes = kn_vnni_pack_tile_bytes,
    .bf16_supported = kn_bf16_supported,
    .quant_bf16 = kn_bf16_quant,
    .rows_bf16 = kn_bf16_rows,
};

#else
typedef int kn_avx512_unused; /* ISO C wants a declaration in every file */
#endif
