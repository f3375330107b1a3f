/* kernels_q8x8.h - the q8 mode (int8 activations against MLX Q8/Q4 weights)
 * on 256-bit vectors, 8 weight rows per vector ("lanes = rows"). A template:
 * included once by kernels_avx2q8.c (AVX2: vpmaddubsw + vpmaddwd; the
 * "avx2" and "avx512" variants) and once by kernels_avxvnni.c (AVX-VNNI:
 * the VEX vpdpbusd; the "avxvnni" variant), each under its own target
 * pragma, with
 *   Q8X8_VNNI   1: vpdpbusd, 0: AVX2 only (must run on Haswell);
 *   Q8X8_FN(n)  the name of exported function n.
 * Not a header of its own: nothing else includes it.
 *
 * Arithmetic: kernels.h (kn_set_act_quant) fixes it and kn_quant_row /
 * generic_rows_q8 (kernels.c) spell it out in C; these kernels give the
 * same bits. The integer sums I of each (output, 32-column block) are
 * exact whatever order they are added in, so only the float chain must be
 * fixed, and it runs with one output per vector lane: a vector holds 8
 * weight rows and its accumulator sees, for each block in ascending order,
 *     acc = fma(cvt(I_k), s * d_k, acc),   then at a group's end
 *     acc = fma(b, X, acc)
 * (Q8 with groups of 16: per group, the half block's I, then its bias).
 * No horizontal float sum exists, so neither T, nor the tiling, nor the
 * thread split can change a bit.
 *
 * Why the integer sums are exact (|xq| <= 127 by kn_quant_row):
 *   VNNI: vpdpbusd adds four u8 x s8 products to an int32 without
 *     saturation; |I| <= 32 * 255 * 127 < 2^31.
 *   AVX2, Q4: vpmaddubsw(q, xq) with q in [0, 15] gives pair sums of at
 *     most 2 * 15 * 127 = 3810 in magnitude; one block of 32 columns adds 8
 *     of them per int16 lane, at most 30480 < 32767, so no step saturates;
 *     vpmaddwd with ones then widens to int32.
 *   AVX2, MXFP4: the codes' integers q = wt_mx4_q[c] lie in [0, 24], so a
 *     pair sum reaches 2 * 24 * 127 = 6096 and 8 of them would not fit; each
 *     4-byte step (the low and the high nibbles: 2 pair sums per int16 lane,
 *     at most 12192 < 32767) is widened by vpmaddwd(ones) into the int32
 *     sum at once, so no step saturates either.
 *   AVX2, Q8: q in [0, 255] against xq would saturate (2 * 255 * 127 >
 *     32767), so the packed weights hold w' = q - 128 in [-128, 127] (the
 *     byte q ^ 0x80) and each product runs as |w'| * (xq * sign(w')):
 *     vpabsb(w') is |w'| in [0, 128] read as unsigned (128 = 0x80 is right
 *     as u8), vpsignb(xq, w') is xq * sign(w') in [-127, 127] (xq is never
 *     -128, so the negation cannot wrap; w' = 0 gives 0). A pair sum is at
 *     most 2 * 128 * 127 = 32512 < 32767: vpmaddubsw never saturates, and
 *     vpmaddwd(ones) widens it. The block sum is then sum (q - 128) * xq =
 *     I - 128 * S_k, so the int32 accumulator starts at 128 * S_k
 *     (S_k = sum of the block's xq, kn_qx.s16) and ends at I exactly.
 *
 * The packed layout (kn_pack, or built per call from the weights as loaded,
 * one K block of a tile at a time, into scratch): tile i = rows 8i..8i+7
 * (rows past the end: zeros). A tile is ng = cols/g group records of
 * gbytes bytes, in column order; a record holds
 *   the weights: Q8 g/4 vectors, Q4 / MXFP4 g/8 vectors of 32 bytes,
 *     vector m = [lane l: bytes 4m..4m+3 of row 8i+l's part of the group]
 *     (Q8: its columns 4m..4m+3, as q - 128 without VNNI; Q4 / MXFP4: the
 *     nibbles of columns 8m..8m+7, an MXFP4 code turned into its integer
 *     wt_mx4_q[c] by vpshufb when the vector is used),
 *   then the 8 rows' scales, then their biases (in the scale dtype);
 *   MXFP4: the 8 rows' e8m0 bytes instead (their scale and bias are made
 *   when the record is read), then 24 bytes of padding.
 * gbytes = 8 * (row bytes of a group) + 16 * (scale size) (MXFP4: + 32),
 * a multiple of 32: a tile is one sequential stream and every vector load
 * is aligned.
 * kn_impl.pack_tile_bytes is per 16 rows, i.e. two tiles.
 *
 * x layout (kn_qx.q): Q8 natural order; Q4 and MXFP4 per 8 columns
 * [0 2 4 6 1 3 5 7] (4 weight bytes = 8 columns: the low nibbles, then the
 * high nibbles). */

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "kernels_impl.h"

#define INL static inline __attribute__((always_inline))
#define NL 8   /* lanes: weight rows per vector (one tile) */
#define KB 512 /* columns per K block at T >= 2 (or the group size) */
#define RC1 4  /* tiles per step at T = 1 (RC1 sequential streams) */
#define PRT 4  /* rows of x per register tile, T >= 2 */
#define PRC 2  /* tiles per register tile, T >= 2 */
#define MAXGB (KN_KBLOCK / 16) /* groups per K block, at most (Q8 groups of 16) */

/* ===================================================================== */
/* Quantizing x (kn_quant_row's values, vectorized)                        */
/* ===================================================================== */

INL int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* One block of 32: q[32] natural order, *dk, and the sums of q over each
 * half, as kn_quant_row. Every step is the scalar one: |x| by clearing the
 * sign, the same amax (max is exact), d = amax / 127 and 127 / amax in
 * scalar f32, x * (127 / amax) rounded to f32, then to the nearest integer
 * with ties to even (vcvtps2dq under the default MXCSR = rintf). */
INL void quant_block(const float *x, int8_t *q, float *dk, int32_t *s_lo, int32_t *s_hi) {
    __m256 v[4], a[4];
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        a[i] = _mm256_and_ps(v[i], abs_mask);
        /* !(|x| <= FLT_MAX): Inf or NaN */
        bad |= _mm256_movemask_ps(_mm256_cmp_ps(a[i], _mm256_set1_ps(3.40282347e38f), _CMP_NLE_UQ));
    }
    __m256 m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float amax = _mm_cvtss_f32(m4);
    if (bad || !(amax >= 0x1p-100f)) {
        memset(q, 0, KN_QBLOCK);
        *dk = bad ? NAN : 0.0f;
        *s_lo = *s_hi = 0;
        return;
    }
    __m256 id = _mm256_set1_ps(127.0f / amax);
    __m256i qi[4];
    for (int i = 0; i < 4; i++) qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
    /* packs work per 128-bit lane: bytes come out as dwords
     * [q0 0-3, q1 0-3, q2 0-3, q3 0-3 | q0 4-7, q1 4-7, q2 4-7, q3 4-7] */
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, b);
    *dk = amax / 127.0f;
    *s_lo = hsum_epi32(_mm256_add_epi32(qi[0], qi[1]));
    *s_hi = hsum_epi32(_mm256_add_epi32(qi[2], qi[3]));
}

void Q8X8_FN(quant)(kn_qx *qx, const float *x, int T, const wt_weight *w) {
    int cols = w->cols, g = w->group_size, nb = cols / KN_QBLOCK, per_g = g / KN_QBLOCK, ng = cols / g;
    int q4 = kn_is_nib(w);
    /* in-lane byte shuffle [0 2 4 6 1 3 5 7] per 8 (Q4, MXFP4) */
    const __m256i p8 = _mm256_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15, 0, 2, 4, 6, 1, 3,
                                        5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * cols;
        int8_t *q = qx->q + (size_t)t * qx->ldq;
        float *d = qx->d + (size_t)t * nb, *xs = qx->xs + (size_t)t * ng;
        int32_t *s16 = qx->s16 + (size_t)t * (cols / 16);
        memset(q + cols, 0, qx->ldq - (size_t)cols); /* padding */
        for (int k = 0; k < nb; k++) {
            int8_t *qk = q + (size_t)k * KN_QBLOCK;
            quant_block(xr + (size_t)k * KN_QBLOCK, qk, &d[k], &s16[2 * k], &s16[2 * k + 1]);
            if (q4) _mm256_storeu_si256((__m256i *)qk, _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)qk), p8));
            if (g == 16) { /* kn_quant_row: X = fma(S_half, d_k, 0) per half */
                xs[2 * k] = fmaf((float)s16[2 * k], d[k], 0.0f);
                xs[2 * k + 1] = fmaf((float)s16[2 * k + 1], d[k], 0.0f);
            } else if (k % per_g == per_g - 1) {
                float X = 0;
                for (int i = k - per_g + 1; i <= k; i++) X = fmaf((float)(s16[2 * i] + s16[2 * i + 1]), d[i], X);
                xs[k / per_g] = X;
            }
        }
    }
}

/* ===================================================================== */
/* The packed layout                                                       */
/* ===================================================================== */

/* Bytes of a group's weights in one record, and of the whole record. */
INL size_t row_gbytes(const wt_weight *w) { return kn_is_nib(w) ? (size_t)w->group_size / 2 : (size_t)w->group_size; }
INL size_t pk_gdata(const wt_weight *w) { return (size_t)NL * row_gbytes(w); }
INL size_t pk_gbytes(const wt_weight *w) {
    return pk_gdata(w) + (w->dtype == WT_MXFP4 ? 32 : 2 * NL * kn_scale_size(w->scale_dtype));
}

/* v[j] <- column j of the 8 x 8 dword matrix v (v[i] = row i). */
INL void transpose8(__m256i v[8]) {
    __m256i t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    /* u[4h + c], 128-bit half H: dword 4H + c of rows 4h..4h+3 */
    for (int h = 0; h < 2; h++) {
        u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
        u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
        u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
        u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
    }
    for (int c = 0; c < 4; c++) {
        v[c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x20);
        v[4 + c] = _mm256_permute2x128_si256(u[c], u[4 + c], 0x31);
    }
}

/* Records [g0, g1) of the tile of rows rows[l] (data rows p[l]; lanes
 * l >= n are zero rows, the padding of the last tile) into o, gbytes
 * apart. */
static void pack_groups(const wt_weight *w, const uint8_t *const *p, const int *rows, int n, int g0, int g1,
                        uint8_t *o) {
    int ng = w->cols / w->group_size;
    size_t gb = row_gbytes(w), ss = kn_scale_size(w->scale_dtype), gbytes = pk_gbytes(w), gdata = pk_gdata(w);
    const __m256i flip = _mm256_set1_epi8(!Q8X8_VNNI && w->dtype == WT_Q8 ? (char)0x80 : 0);
    /* the rows' bytes of the groups are contiguous (gb >= 16 divides
     * them): 32 at a time (16 at the end), each 4-byte column of the
     * transpose to its group's record */
    size_t len = (size_t)(g1 - g0) * gb, off0 = (size_t)g0 * gb;
    int gsh = __builtin_ctzll(gb);
    for (size_t j = 0; j < len; j += 32) {
        int full = len - j >= 32;
        __m256i v[NL];
        for (int l = 0; l < NL; l++) {
            __m256i z = _mm256_setzero_si256();
            if (l < n) z = full ? _mm256_loadu_si256((const __m256i *)(p[l] + off0 + j))
                                : _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p[l] + off0 + j)));
            v[l] = _mm256_xor_si256(z, flip);
        }
        transpose8(v);
        for (int k = 0; k < (full ? 8 : 4); k++) {
            size_t b = j + 4 * (size_t)k; /* byte of the range: record b / gb (a power of two: wt_check) */
            _mm256_store_si256((__m256i *)(o + (b >> gsh) * gbytes + (b & (gb - 1)) * NL), v[k]);
        }
    }
    /* row by row, its groups' scales and biases (padding rows: zeros), one
     * fixed-size move each; MXFP4: the e8m0 bytes (padding rows: 127, a
     * finite scale) */
    uint8_t *od = o + gdata;
    for (int l = 0; l < NL; l++) {
        size_t at = (size_t)rows[l] * (size_t)ng;
        if (w->dtype == WT_MXFP4) {
            const uint8_t *e = (const uint8_t *)w->scales + at;
            for (int gi = g0; gi < g1; gi++) od[(size_t)(gi - g0) * gbytes + l] = l < n ? e[gi] : 127;
            continue;
        }
        for (int pass = 0; pass < 2; pass++) {
            const uint8_t *src = (const uint8_t *)(pass ? w->biases : w->scales) + at * ss;
            uint8_t *dst = od + (size_t)pass * NL * ss + (size_t)l * ss;
            if (ss == 2)
                for (int gi = g0; gi < g1; gi++) {
                    uint16_t v = 0;
                    if (l < n) memcpy(&v, src + (size_t)gi * 2, 2);
                    memcpy(dst + (size_t)(gi - g0) * gbytes, &v, 2);
                }
            else
                for (int gi = g0; gi < g1; gi++) {
                    uint32_t v = 0;
                    if (l < n) memcpy(&v, src + (size_t)gi * 4, 4);
                    memcpy(dst + (size_t)(gi - g0) * gbytes, &v, 4);
                }
        }
    }
}

/* The tile's rows: 8i .. 8i+7 of w, *n of them real. */
static void tile_rows(const wt_weight *w, int i, const uint8_t **p, int *rows, int *n) {
    size_t rb = row_gbytes(w) * (size_t)(w->cols / w->group_size);
    *n = w->rows - i * NL < NL ? w->rows - i * NL : NL;
    for (int l = 0; l < NL; l++) {
        rows[l] = i * NL + (l < *n ? l : 0);
        p[l] = (const uint8_t *)w->data + (size_t)rows[l] * rb; /* not read for l >= n */
    }
}

size_t Q8X8_FN(pack_tile_bytes)(const wt_weight *w) {
    return 2 * (size_t)(w->cols / w->group_size) * pk_gbytes(w); /* two tiles of 8 rows */
}

void *Q8X8_FN(pack)(const wt_weight *w) {
    int ng = w->cols / w->group_size, nt = (w->rows + NL - 1) / NL;
    size_t tbytes = (size_t)ng * pk_gbytes(w);
    uint8_t *out = aligned_alloc(64, ((size_t)nt * tbytes + 63) & ~(size_t)63);
    if (!out) return NULL;
    for (int i = 0; i < nt; i++) {
        const uint8_t *p[NL];
        int r[NL], n;
        tile_rows(w, i, p, r, &n);
        pack_groups(w, p, r, n, 0, ng, out + (size_t)i * tbytes);
    }
    return out;
}

/* ===================================================================== */
/* The loop over packed records                                            */
/* ===================================================================== */

/* The 4 x bytes at p in every dword lane. */
INL __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* 8 scales of dtype t at p (32-byte aligned for F32, 16 for the rest). */
INL __m256 ld_scales8(const uint8_t *p, wt_dtype t) {
    if (t == WT_F32) return _mm256_load_ps((const float *)p);
    __m128i h = _mm_load_si128((const __m128i *)p);
    if (t == WT_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* One 4-column step of the integer sum: acc += the dot of each lane's 4
 * weight bytes wv with the 4 x bytes xb (aw = |wv| without VNNI; see the
 * header comment for why nothing saturates). Q8. */
INL __m256i dot4_q8(__m256i acc, __m256i wv, __m256i aw, __m256i xb) {
#if Q8X8_VNNI
    (void)aw;
    return _mm256_dpbusd_avx_epi32(acc, wv, xb);
#else
    __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xb, wv));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
#endif
}

/* The int32 start of a Q8 block's (or half block's) sum: 0, or 128 * S
 * without VNNI (the weights are q - 128 there). */
INL __m256i q8_init(const int32_t *s16, int k16, int halves) {
#if Q8X8_VNNI
    (void)s16, (void)k16, (void)halves;
    return _mm256_setzero_si256();
#else
    int32_t S = halves == 2 ? s16[k16] + s16[k16 + 1] : s16[k16];
    return _mm256_set1_epi32(S * 128);
#endif
}

/* acc[t][c] (t < rt) += x rows t0.. against packed tiles (c < rc) for the
 * groups [g0, g1); pt[c] points at tile c's record g0. q4: 0 Q8, 1 Q4
 * nibbles, 2 MXFP4 codes (each nibble through the table wt_mx4_q). */
INL void ptile(const int rt, const int rc, const int q4, const kn_job *job, const uint8_t *const *pt, int t0,
               int g0, int g1, float (*acc)[RC1][NL]) {
    const wt_weight *w = job->w;
    const kn_qx *qx = job->qx;
    int g = w->group_size, bpg = g / KN_QBLOCK, nb = w->cols / KN_QBLOCK, ng = w->cols / g, n16 = w->cols / 16;
    size_t gbytes = pk_gbytes(w), gdata = pk_gdata(w), ss = kn_scale_size(w->scale_dtype);
    const __m256i lo4 = _mm256_set1_epi8(0x0F);
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)wt_mx4_q));
    for (int gi = g0; gi < g1; gi++) {
        __m256 sv[RC1], bv[RC1];
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) {
            const uint8_t *sp = pt[c] + (size_t)(gi - g0) * gbytes + gdata;
            if (q4 == 2) { /* MXFP4: s = 2^(e-128) (f32 bits (e - 1) << 23), b = -12 s */
                __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)sp));
                sv[c] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23));
                bv[c] = _mm256_mul_ps(sv[c], _mm256_set1_ps(-12.0f));
                continue;
            }
            sv[c] = ld_scales8(sp, w->scale_dtype);
            bv[c] = ld_scales8(sp + NL * ss, w->scale_dtype);
        }
        for (int kb = 0; kb < bpg; kb++) {
            int k = gi * bpg + kb;
            __m256i ia[4][RC1];
            if (!q4) {
#pragma GCC unroll 4
                for (int t = 0; t < rt; t++) {
                    __m256i i0 = q8_init(qx->s16 + (size_t)(t0 + t) * n16, 2 * k, 2);
#pragma GCC unroll 4
                    for (int c = 0; c < rc; c++) ia[t][c] = i0;
                }
#pragma GCC unroll 1
                for (int m = 0; m < 8; m++) {
                    __m256i wv[RC1], aw[RC1];
#pragma GCC unroll 4
                    for (int c = 0; c < rc; c++) {
                        wv[c] = _mm256_load_si256((const __m256i *)(pt[c] + (size_t)(gi - g0) * gbytes + (size_t)(kb * 8 + m) * 32));
                        aw[c] = Q8X8_VNNI ? wv[c] : _mm256_abs_epi8(wv[c]);
                    }
#pragma GCC unroll 4
                    for (int t = 0; t < rt; t++) {
                        __m256i xb = bcast4(qx->q + (size_t)(t0 + t) * qx->ldq + k * KN_QBLOCK + 4 * m);
#pragma GCC unroll 4
                        for (int c = 0; c < rc; c++) ia[t][c] = dot4_q8(ia[t][c], wv[c], aw[c], xb);
                    }
                }
            } else {
#pragma GCC unroll 4
                for (int t = 0; t < rt; t++)
#pragma GCC unroll 4
                    for (int c = 0; c < rc; c++) ia[t][c] = _mm256_setzero_si256();
#pragma GCC unroll 4
                for (int m = 0; m < 4; m++) {
                    __m256i lo[RC1], hi[RC1];
#pragma GCC unroll 4
                    for (int c = 0; c < rc; c++) {
                        __m256i z = _mm256_load_si256((const __m256i *)(pt[c] + (size_t)(gi - g0) * gbytes + (size_t)(kb * 4 + m) * 32));
                        lo[c] = _mm256_and_si256(z, lo4);
                        hi[c] = _mm256_and_si256(_mm256_srli_epi16(z, 4), lo4);
                        if (q4 == 2) { /* MXFP4: the codes' integers */
                            lo[c] = _mm256_shuffle_epi8(lut, lo[c]);
                            hi[c] = _mm256_shuffle_epi8(lut, hi[c]);
                        }
                    }
#pragma GCC unroll 4
                    for (int t = 0; t < rt; t++) {
                        const int8_t *xp = qx->q + (size_t)(t0 + t) * qx->ldq + k * KN_QBLOCK + 8 * m;
                        __m256i xe = bcast4(xp), xo = bcast4(xp + 4);
#pragma GCC unroll 4
                        for (int c = 0; c < rc; c++) {
#if Q8X8_VNNI
                            ia[t][c] = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(ia[t][c], lo[c], xe), hi[c], xo);
#else
                            __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo[c], xe), _mm256_maddubs_epi16(hi[c], xo));
                            if (q4 == 2) /* MXFP4: 2 pair sums of at most 6096, widened at once */
                                ia[t][c] = _mm256_add_epi32(ia[t][c], _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
                            else /* Q4: int16 lanes, at most 8 pair sums of 3810 per block */
                                ia[t][c] = _mm256_add_epi16(ia[t][c], p);
#endif
                        }
                    }
                }
#if !Q8X8_VNNI
                if (q4 == 1)
#pragma GCC unroll 4
                    for (int t = 0; t < rt; t++)
#pragma GCC unroll 4
                        for (int c = 0; c < rc; c++) ia[t][c] = _mm256_madd_epi16(ia[t][c], _mm256_set1_epi16(1));
#endif
            }
#pragma GCC unroll 4
            for (int t = 0; t < rt; t++) {
                __m256 dv = _mm256_set1_ps(qx->d[(size_t)(t0 + t) * nb + k]);
#pragma GCC unroll 4
                for (int c = 0; c < rc; c++)
                    _mm256_store_ps(acc[t][c], _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[t][c]), _mm256_mul_ps(sv[c], dv),
                                                               _mm256_load_ps(acc[t][c])));
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < rt; t++) {
            __m256 xv = _mm256_set1_ps(qx->xs[(size_t)(t0 + t) * ng + gi]);
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) _mm256_store_ps(acc[t][c], _mm256_fmadd_ps(bv[c], xv, _mm256_load_ps(acc[t][c])));
        }
    }
}

/* ptile for Q8 weights with groups of 16 (kernels.h gives the order): a
 * record is 4 weight vectors (16 columns, the half of x block gi / 2), and
 * each group takes one I per (row of x, tile), then its two float steps. */
INL void ptile16(const int rt, const int rc, const kn_job *job, const uint8_t *const *pt, int t0, int g0, int g1,
                 float (*acc)[RC1][NL]) {
    const wt_weight *w = job->w;
    const kn_qx *qx = job->qx;
    int nb = w->cols / KN_QBLOCK, ng = w->cols / 16;
    size_t gbytes = pk_gbytes(w), gdata = pk_gdata(w), ss = kn_scale_size(w->scale_dtype);
    __m256 fa[4][RC1]; /* rt <= 4 (PT_CASE) */
#pragma GCC unroll 4
    for (int t = 0; t < rt; t++)
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) fa[t][c] = _mm256_load_ps(acc[t][c]);
    for (int gi = g0; gi < g1; gi++) {
        __m256 sv[RC1], bv[RC1];
        __m256i ia[4][RC1];
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) {
            const uint8_t *sp = pt[c] + (size_t)(gi - g0) * gbytes + gdata;
            sv[c] = ld_scales8(sp, w->scale_dtype);
            bv[c] = ld_scales8(sp + NL * ss, w->scale_dtype);
        }
#pragma GCC unroll 4
        for (int t = 0; t < rt; t++) {
            __m256i i0 = q8_init(qx->s16 + (size_t)(t0 + t) * ng, gi, 1);
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) ia[t][c] = i0;
        }
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) {
            __m256i wv[RC1], aw[RC1];
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) {
                wv[c] = _mm256_load_si256((const __m256i *)(pt[c] + (size_t)(gi - g0) * gbytes + (size_t)m * 32));
                aw[c] = Q8X8_VNNI ? wv[c] : _mm256_abs_epi8(wv[c]);
            }
#pragma GCC unroll 4
            for (int t = 0; t < rt; t++) {
                __m256i xb = bcast4(qx->q + (size_t)(t0 + t) * qx->ldq + gi * 16 + 4 * m);
#pragma GCC unroll 4
                for (int c = 0; c < rc; c++) ia[t][c] = dot4_q8(ia[t][c], wv[c], aw[c], xb);
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < rt; t++) {
            __m256 dv = _mm256_set1_ps(qx->d[(size_t)(t0 + t) * nb + gi / 2]);
            __m256 xv = _mm256_set1_ps(qx->xs[(size_t)(t0 + t) * ng + gi]);
#pragma GCC unroll 4
            for (int c = 0; c < rc; c++) {
                fa[t][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[t][c]), _mm256_mul_ps(sv[c], dv), fa[t][c]);
                fa[t][c] = _mm256_fmadd_ps(bv[c], xv, fa[t][c]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < rt; t++)
#pragma GCC unroll 4
        for (int c = 0; c < rc; c++) _mm256_store_ps(acc[t][c], fa[t][c]);
}

#define PT_CASE(RT_, RC_)                                                 \
    case RT_ * 8 + RC_:                                                   \
        if (mx) ptile(RT_, RC_, 2, job, pt, t0, g0, g1, acc);             \
        else if (q4) ptile(RT_, RC_, 1, job, pt, t0, g0, g1, acc);        \
        else if (g16) ptile16(RT_, RC_, job, pt, t0, g0, g1, acc);        \
        else ptile(RT_, RC_, 0, job, pt, t0, g0, g1, acc);                \
        break
static void ptile_any(int rt, int rc, const kn_job *job, const uint8_t *const *pt, int t0, int g0, int g1,
                      float (*acc)[RC1][NL]) {
    int q4 = job->w->dtype == WT_Q4, mx = job->w->dtype == WT_MXFP4;
    int g16 = job->w->group_size == 16; /* g16: Q8 only (wt_check) */
    switch (rt * 8 + rc) { /* rt <= PRT, rc <= PRC (or RC1 at rt = 1) */
        PT_CASE(1, 1); PT_CASE(1, 2); PT_CASE(1, 3); PT_CASE(1, 4);
        PT_CASE(2, 1); PT_CASE(3, 1); PT_CASE(4, 1);
        PT_CASE(2, 2); PT_CASE(3, 2); PT_CASE(4, 2);
    }
}

/* Groups per K block at T >= 2: about KB columns of the PRC tiles stay in
 * L1 while every row of x passes over them. */
INL int kblock_groups(const wt_weight *w) { return KB / w->group_size > 0 ? KB / w->group_size : 1; }

/* y rows t0..t0+tn-1 of tiles[c] (c < rc), rows below r1 only. */
static void store_tiles(const kn_job *job, float (*acc)[RC1][NL], const int *tiles, int rc, int t0, int tn, int r1) {
    int rows = job->w->rows;
    for (int c = 0; c < rc; c++) {
        int r = tiles[c] * NL, n = r1 - r < NL ? r1 - r : NL;
        for (int t = 0; t < tn; t++) {
            float *y = job->y + (size_t)(t0 + t) * rows + r;
            if (n == NL) _mm256_storeu_ps(y, _mm256_load_ps(acc[t][c]));
            else memcpy(y, acc[t][c], sizeof(float) * (size_t)n);
        }
    }
}

/* Rows [r0, r1) (r0 a multiple of KN_COL_TILE, so the thread's tiles are
 * whole): from the packed copy, or - without one - from records built per
 * tile and K block into scratch (L1), once for all rows of x. Groups of rc
 * tiles come from rc separate runs of tiles (long sequential streams). */
void Q8X8_FN(rows)(const kn_job *job, int r0, int r1) {
    const wt_weight *w = job->w;
    int ng = w->cols / w->group_size, T = job->T;
    size_t gbytes = pk_gbytes(w), tbytes = (size_t)ng * gbytes;
    const uint8_t *base = w->packed;
    int i0 = r0 / NL, nt = (r1 - r0 + NL - 1) / NL;
    int rcmax = T == 1 && base ? RC1 : PRC, gk = T == 1 && base ? ng : kblock_groups(w);
    _Alignas(32) float acc[KN_TBLOCK][RC1][NL];
    /* scratch for unpacked weights: a K block holds at most KN_KBLOCK
     * columns (KB, or one group of up to 1024) */
    _Alignas(32) uint8_t buf[PRC][KN_KBLOCK * NL + MAXGB * 2 * NL * 4];
    int q = nt / rcmax, ngrp = q + (nt % rcmax != 0);
    for (int t0 = 0; t0 < T; t0 += KN_TBLOCK) {
        int tn = T - t0 < KN_TBLOCK ? T - t0 : KN_TBLOCK;
        for (int j = 0; j < ngrp; j++) {
            int tiles[RC1], rc = j < q ? rcmax : nt % rcmax;
            for (int c = 0; c < rc; c++) tiles[c] = i0 + (j < q ? j + c * q : rcmax * q + c);
            memset(acc, 0, sizeof acc[0] * (size_t)tn);
            for (int g0 = 0; g0 < ng; g0 += gk) {
                int g1 = g0 + gk < ng ? g0 + gk : ng;
                const uint8_t *pt[RC1];
                for (int c = 0; c < rc; c++) {
                    if (base) {
                        pt[c] = base + (size_t)tiles[c] * tbytes + (size_t)g0 * gbytes;
                    } else {
                        const uint8_t *p[NL];
                        int rows[NL], n;
                        tile_rows(w, tiles[c], p, rows, &n);
                        pack_groups(w, p, rows, n, g0, g1, buf[c]);
                        pt[c] = buf[c];
                    }
                }
                for (int t = 0; t < tn; t += PRT)
                    ptile_any(tn - t < PRT ? tn - t : PRT, rc, job, pt, t0 + t, g0, g1, acc + t);
            }
            store_tiles(job, acc, tiles, rc, t0, tn, r1);
        }
    }
}
