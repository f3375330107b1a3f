/* attention.c - see attention.h. One job = one query row and one kv head
 * with the group of query heads that share it, so each K/V row is loaded
 * once for the whole group. */
#include "attention.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels.h"
#include "threads.h"

enum { BLK = 64, MAXG = 16, MAXHD = 512 };
/* the SIMD fast paths: rows per job, most query heads per pass over a kv
 * head's keys, most hd */
enum { RB = 8, FG = 4, FHD = 256 };

/* The first key a row with na(t) = na cache keys sees (attention.h: lo(t)),
 * and the row of the Ka/Va buffers key j is at. */
static inline int row_lo(const at_job *J, int na) {
    return J->window && na > J->window ? na - J->window : 0;
}

static inline int key_row(const at_job *J, int j) { return J->ring ? j % J->ring : j; }

/* na(t) of attention.h: the Ka keys row t sees (causal: its own included;
 * a tree row at depth d: na + d + 1) */
static inline int row_na(const at_job *J, int t) {
    if (!J->causal) return J->na;
    return J->na + (J->tree_depth ? J->tree_depth[t] : t) + 1;
}

/* The Ka/Va row of row t's key j (j < row_na): a tree row's keys past the
 * committed ones are its ancestors, then itself (attention.h) */
static inline int row_key(const at_job *J, int t, int j) {
    if (J->tree_anc && j >= J->na) return J->na + J->tree_anc[(size_t)t * J->tree_stride + (j - J->na)];
    return key_row(J, j);
}

/* the scores' multiplier: J->scale, by default 1 / sqrt(hd) */
static inline float score_scale(const at_job *J) { return J->scale != 0 ? J->scale : 1.0f / sqrtf((float)J->hd); }

/* ---- generic: dot products with 16 partial sums in a fixed order --------- */
static float dot_generic(const float *a, const float *b, int n) {
    float p[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) p[l] += a[i + l] * b[i + l];
    for (int l = 0; i < n; i++, l++) p[l] += a[i] * b[i];
    float s = 0;
    for (int l = 0; l < 16; l++) s += p[l];
    return s;
}

static void axpy_generic(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

static void scale_generic(float *y, float a, int n) {
    for (int i = 0; i < n; i++) y[i] *= a;
}

/* ---- AVX-512 ------------------------------------------------------------- */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
static _Alignas(64) const float zero_row[FHD]; /* the padding key of the fast paths */

/* The block walk shared by the fast paths (plain C, before any target
 * pragma). fast_reset: rows t0..t1-1, ng heads each (query heads h0..),
 * start at the sink (or empty); returns the most keys any of those rows
 * sees, and in *jlo the first key any of them sees rounded down to a
 * multiple of BLK. fast_gather: kp/vp <- row t's keys among j0..j0+jn-1 (in
 * index order: the cache Ka/Va first, then the block's own Kb/Vb), the key
 * list padded with zero_row to a multiple of pad; returns how many real
 * keys row t has there (0: none in this block). */
static int fast_reset(const at_job *J, int t0, int t1, int h0, int ng, float (*m)[FG], float (*l)[FG],
                      float (*acc)[FG][FHD], int *jlo) {
    int nmax = 0, lo = INT_MAX;
    for (int t = t0; t < t1; t++) {
        int na = row_na(J, t), n = na + J->nb, lt = row_lo(J, na);
        nmax = n > nmax ? n : nmax;
        lo = lt < lo ? lt : lo;
        for (int g = 0; g < ng; g++) {
            m[t - t0][g] = J->sinks ? J->sinks[h0 + g] : -INFINITY;
            l[t - t0][g] = J->sinks ? 1.0f : 0.0f;
            memset(acc[t - t0][g], 0, sizeof(float) * J->hd);
        }
    }
    *jlo = lo == INT_MAX ? 0 : lo / BLK * BLK;
    return nmax;
}

static int fast_gather(const at_job *J, int kh, int t, int j0, int jn, int pad, const float **kp, const float **vp) {
    int na = row_na(J, t), n = na + J->nb, lo = row_lo(J, na);
    int a = j0 > lo ? j0 : lo, e = j0 + jn < n ? j0 + jn : n;
    if (a >= e) return 0;
    int nj = e - a;
    for (int j = 0; j < nj; j++) {
        int jj = a + j;
        size_t ob = kh * J->b_head + (size_t)(jj - na) * J->b_row;
        kp[j] = jj < na ? at_cache_row(J, kh, row_key(J, t, jj), 0) : J->Kb + ob;
        vp[j] = jj < na ? at_cache_row(J, kh, row_key(J, t, jj), 1) : J->Vb + ob;
    }
    for (int j = nj; j < BLK && j % pad; j++) kp[j] = zero_row;
    return nj;
}
/* Every function from here to the matching pop is compiled for AVX-512F
 * (at_run calls them only when the CPU has it): clang takes a target
 * attribute per function, gcc a target pragma. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f")
#endif
static float dot_avx512(const float *a, const float *b, int n) {
    __m512 acc = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

static void axpy_avx512(float *y, float a, const float *x, int n) {
    __m512 va = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

static void scale_avx512(float *y, float a, int n) {
    __m512 va = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(va, _mm512_loadu_ps(y + i)));
    for (; i < n; i++) y[i] *= a;
}

/* e^x for x <= 0 (softmax arguments), about 2 ulp: x = n ln2 + r, |r| <= ln2/2,
 * degree-6 Taylor polynomial for e^r, times 2^n. Lanes below -87 give 0. */
static inline __m512 exp_avx512(__m512 x) {
    const __m512 lim = _mm512_set1_ps(-87.0f);
    __mmask16 tiny = _mm512_cmp_ps_mask(x, lim, _CMP_LT_OQ);
    x = _mm512_max_ps(x, lim);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693145751953125f), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps((__mmask16)~tiny, _mm512_scalef_ps(p, n));
}

/* a[i] = 16 partial sums of key i -> one vector, lane i = the total of a[i]
 * (a fixed tree of shuffles and adds, then the permutation that puts key i
 * in lane i, found once by running the tree on a[i] = i). */
static inline __m512 sum16_tree(__m512 *a) {
    __m512 b[8], c[4], d[2];
    for (int i = 0; i < 8; i++)
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[i], a[i + 8], 0x44), _mm512_shuffle_f32x4(a[i], a[i + 8], 0xEE));
    for (int i = 0; i < 4; i++)
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[i], b[i + 4], 0x88), _mm512_shuffle_f32x4(b[i], b[i + 4], 0xDD));
    for (int i = 0; i < 2; i++)
        d[i] = _mm512_add_ps(_mm512_shuffle_ps(c[i], c[i + 2], 0x44), _mm512_shuffle_ps(c[i], c[i + 2], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xDD));
}

static __m512i tree_perm; /* lane i of the result <- lane tree_perm[i] of the tree's output */

static void tree_init(void) {
    __m512 a[16];
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps((float)i);
    float out[16];
    int idx[16];
    _mm512_storeu_ps(out, sum16_tree(a));
    for (int l = 0; l < 16; l++) idx[(int)(out[l] / 16.0f + 0.5f)] = l;
    tree_perm = _mm512_loadu_si512(idx);
}

/* The same job as rows() below, 16 keys at a time: scores of 16 keys by
 * vertical FMAs over the head dimension and one shuffle tree, exponentials
 * 16 at a time, and the V sum with the output kept in registers per 64
 * dimensions. hd is a multiple of 16, at most MAXHD. */
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#define HAVE_AVX512 1
#endif

/* ---- AVX2 + FMA ---------------------------------------------------------- */
#if defined(__x86_64__) && defined(__GNUC__)
/* Every function from here to the matching pop is compiled for AVX2 and FMA
 * (at_run calls them only when kn_isa_cur() is KN_ISA_AVX2). */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
/* lanes [0, r) set, 0 < r <= 8: the masked tail of a row */
static inline __m256i tail_avx2(int r) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* sum of the 8 lanes, in one fixed order: (l + h), then pairs, then the two */
static inline float hsum_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

static inline float hmax_avx2(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

static float dot_avx2(const float *a, const float *b, int n) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    if (i < n) {
        __m256i m = tail_avx2(n - i);
        acc = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), acc);
    }
    return hsum_avx2(acc);
}

static void axpy_avx2(float *y, float a, const float *x, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    if (i < n) {
        __m256i m = tail_avx2(n - i);
        _mm256_maskstore_ps(y + i, m, _mm256_fmadd_ps(va, _mm256_maskload_ps(x + i, m), _mm256_maskload_ps(y + i, m)));
    }
}

static void scale_avx2(float *y, float a, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] *= a;
}

/* e^x for x <= 0, as exp_avx512 (same reduction and polynomial); 2^n built
 * in the exponent field (n >= -126 after the clamp: a normal number). Lanes
 * below -87 give 0. */
static inline __m256 exp_avx2(__m256 x) {
    const __m256 lim = _mm256_set1_ps(-87.0f);
    __m256 tiny = _mm256_cmp_ps(x, lim, _CMP_LT_OQ);
    x = _mm256_max_ps(x, lim);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693145751953125f), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-1.428606765330187045e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* a[i] = 8 partial sums of key i -> one vector, lane i = the total of a[i]:
 * a fixed tree (pairs within a[i], then pairs of pairs, then the two
 * 128-bit halves) that already leaves key i in lane i. */
static inline __m256 sum8_tree(const __m256 *a) {
    __m256 h0 = _mm256_hadd_ps(a[0], a[1]), h1 = _mm256_hadd_ps(a[2], a[3]);
    __m256 h2 = _mm256_hadd_ps(a[4], a[5]), h3 = _mm256_hadd_ps(a[6], a[7]);
    /* x0 = [k0 k1 k2 k3 (dims 0-3) | k0 k1 k2 k3 (dims 4-7)], x1 for k4..k7 */
    __m256 x0 = _mm256_hadd_ps(h0, h1), x1 = _mm256_hadd_ps(h2, h3);
    return _mm256_add_ps(_mm256_permute2f128_ps(x0, x1, 0x20), _mm256_permute2f128_ps(x0, x1, 0x31));
}
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#define HAVE_AVX2 1
#endif

/* ---- arm64 NEON (architectural on AArch64: no target needed) ------------- */
#if defined(__aarch64__)
#include <arm_neon.h>
#define HAVE_NEON 1
/* 16 lanes (4 vectors) with fma, a zero-filled tail, then a fixed tree. */
static float dot_neon(const float *a, const float *b, int n) {
    float32x4_t p[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 4; l++) p[l] = vfmaq_f32(p[l], vld1q_f32(a + i + 4 * l), vld1q_f32(b + i + 4 * l));
    if (i < n) {
        float ta[16] = {0}, tb[16] = {0};
        memcpy(ta, a + i, sizeof(float) * (size_t)(n - i));
        memcpy(tb, b + i, sizeof(float) * (size_t)(n - i));
        for (int l = 0; l < 4; l++) p[l] = vfmaq_f32(p[l], vld1q_f32(ta + 4 * l), vld1q_f32(tb + 4 * l));
    }
    return vaddvq_f32(vaddq_f32(vaddq_f32(p[0], p[1]), vaddq_f32(p[2], p[3])));
}

static void axpy_neon(float *y, float a, const float *x, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), a));
    for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

static void scale_neon(float *y, float a, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_n_f32(vld1q_f32(y + i), a));
    for (; i < n; i++) y[i] *= a;
}
#endif

typedef struct {
    float (*dot)(const float *, const float *, int);
    void (*axpy)(float *, float, const float *, int);
    void (*scale)(float *, float, int);
} vec_ops;

/* The loops of kn_isa_cur() (kernels.c made the one CPU check); families
 * without loops of their own here run the generic ones. */
static vec_ops pick(void) {
    vec_ops v = {dot_generic, axpy_generic, scale_generic};
#ifdef HAVE_AVX512
    if (kn_isa_cur() == KN_ISA_AVX512) v = (vec_ops){dot_avx512, axpy_avx512, scale_avx512};
#endif
#ifdef HAVE_AVX2
    if (kn_isa_cur() == KN_ISA_AVX2) v = (vec_ops){dot_avx2, axpy_avx2, scale_avx2};
#endif
#ifdef HAVE_NEON
    if (kn_isa_cur() == KN_ISA_NEON) v = (vec_ops){dot_neon, axpy_neon, scale_neon};
#endif
    return v;
}

typedef struct {
    const at_job *J;
    vec_ops v;
    int T;
} ctx;

static void rows(void *p, int start, int end) {
    const ctx *C = p;
    const at_job *J = C->J;
    const vec_ops *v = &C->v;
    int hd = J->hd, grp = J->nh / J->nkv;
    float scale = score_scale(J);
    float s[MAXG][BLK], m[MAXG], l[MAXG];
    float acc[MAXG][MAXHD];
    for (int job = start; job < end; job++) {
        int t = job / J->nkv, kh = job % J->nkv;
        int na = row_na(J, t), n = na + J->nb, lo = row_lo(J, na);
        for (int g0 = 0; g0 < grp; g0 += MAXG) { /* query heads sharing kv head kh */
            int ng = grp - g0 < MAXG ? grp - g0 : MAXG;
            const float *q0 = J->q + (size_t)t * J->nh * hd + (size_t)(kh * grp + g0) * hd;
            for (int g = 0; g < ng; g++) {
                m[g] = J->sinks ? J->sinks[kh * grp + g0 + g] : -INFINITY;
                l[g] = J->sinks ? 1.0f : 0.0f;
                memset(acc[g], 0, sizeof(float) * hd);
            }
            for (int j0 = lo, j1; j0 < n; j0 = j1) { /* blocks end at multiples of BLK */
                j1 = (j0 / BLK + 1) * BLK < n ? (j0 / BLK + 1) * BLK : n;
                for (int j = j0; j < j1; j++) {
                    const float *k = j < na ? at_cache_row(J, kh, row_key(J, t, j), 0)
                                            : J->Kb + kh * J->b_head + (size_t)(j - na) * J->b_row;
                    for (int g = 0; g < ng; g++) s[g][j - j0] = v->dot(q0 + (size_t)g * hd, k, hd) * scale;
                }
                for (int g = 0; g < ng; g++) {
                    float bm = -INFINITY;
                    for (int j = 0; j < j1 - j0; j++) bm = s[g][j] > bm ? s[g][j] : bm;
                    if (bm > m[g]) {
                        float c = expf(m[g] - bm); /* 0 on the first block (no sink) */
                        l[g] *= c;
                        v->scale(acc[g], c, hd);
                        m[g] = bm;
                    }
                    for (int j = 0; j < j1 - j0; j++) {
                        s[g][j] = expf(s[g][j] - m[g]);
                        l[g] += s[g][j];
                    }
                }
                for (int j = j0; j < j1; j++) {
                    const float *vv = j < na ? at_cache_row(J, kh, row_key(J, t, j), 1)
                                             : J->Vb + kh * J->b_head + (size_t)(j - na) * J->b_row;
                    for (int g = 0; g < ng; g++) v->axpy(acc[g], s[g][j - j0], vv, hd);
                }
            }
            for (int g = 0; g < ng; g++) {
                float *o = J->out + (size_t)t * J->nh * hd + (size_t)(kh * grp + g0 + g) * hd;
                float inv = 1.0f / l[g];
                for (int d = 0; d < hd; d++) o[d] = acc[g][d] * inv;
            }
        }
    }
}

#ifdef HAVE_AVX512

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f")
#endif
/* acc[g] += sum_j w[g][j] v_j over the block, 64 dimensions at a time (a
 * tail of 16), keys in order: one chain per accumulator vector, and the NG
 * heads' chains side by side so every V load feeds NG FMAs. */
static inline __attribute__((always_inline)) void vsum_avx512(const int NG, int nc, int nj, const float *const *vp,
                                                              float (*w)[BLK], float (*acc)[FHD]) {
    int c0 = 0;
    for (; c0 + 4 <= nc; c0 += 4) {
        __m512 o[FG][4];
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++)
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) o[g][k] = _mm512_load_ps(acc[g] + 16 * (c0 + k));
        for (int j = 0; j < nj; j++) {
            const float *v = vp[j] + 16 * c0;
            __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + 16), v2 = _mm512_loadu_ps(v + 32),
                   v3 = _mm512_loadu_ps(v + 48);
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) {
                __m512 wg = _mm512_set1_ps(w[g][j]);
                o[g][0] = _mm512_fmadd_ps(wg, v0, o[g][0]);
                o[g][1] = _mm512_fmadd_ps(wg, v1, o[g][1]);
                o[g][2] = _mm512_fmadd_ps(wg, v2, o[g][2]);
                o[g][3] = _mm512_fmadd_ps(wg, v3, o[g][3]);
            }
        }
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++)
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) _mm512_store_ps(acc[g] + 16 * (c0 + k), o[g][k]);
    }
    for (; c0 < nc; c0++) {
        __m512 o[FG];
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++) o[g] = _mm512_load_ps(acc[g] + 16 * c0);
        for (int j = 0; j < nj; j++) {
            __m512 v = _mm512_loadu_ps(vp[j] + 16 * c0);
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) o[g] = _mm512_fmadd_ps(_mm512_set1_ps(w[g][j]), v, o[g]);
        }
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++) _mm512_store_ps(acc[g] + 16 * c0, o[g]);
    }
}

/* One row t, query heads q0[g*hd] (g < ng), keys [j0, j0 + nj) of the block
 * (pointers kp/vp, padded to 16 with zero_row): scores, online-softmax
 * update of m, l, acc. The same steps whatever other rows share the block. */
static void block_avx512(const float *q0, int ng, int hd, float mul, int nj, const float *const *kp,
                         const float *const *vp,
                         float *m, float *l, float (*acc)[FHD]) {
    int nc = hd / 16;
    const __m512 scale = _mm512_set1_ps(mul);
    _Alignas(64) float s[FG][BLK];
    for (int g = 0; g < ng; g++) {
        const float *qg = q0 + (size_t)g * hd;
        __m512 bmv = _mm512_set1_ps(-INFINITY);
        for (int j = 0; j < nj; j += 16) {
            int nk = nj - j < 16 ? nj - j : 16;
            __m512 a[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
            for (int c = 0; c < nc; c++) { /* key i: sum over c in order, lanes = dimensions */
                __m512 qv = _mm512_loadu_ps(qg + 16 * c);
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(kp[j + i] + 16 * c), a[i]);
            }
            __mmask16 mk = (__mmask16)((1u << nk) - 1);
            __m512 sc = _mm512_mul_ps(_mm512_permutexvar_ps(tree_perm, sum16_tree(a)), scale);
            _mm512_store_ps(s[g] + j, sc);
            bmv = _mm512_mask_max_ps(bmv, mk, bmv, sc);
        }
        float bm = _mm512_reduce_max_ps(bmv);
        if (bm > m[g]) {
            float c = _mm512_cvtss_f32(exp_avx512(_mm512_set1_ps(m[g] - bm))); /* 0 on the first block (no sink) */
            l[g] *= c;
            scale_avx512(acc[g], c, hd);
            m[g] = bm;
        }
        __m512 mv = _mm512_set1_ps(m[g]), lv = _mm512_setzero_ps();
        for (int j = 0; j < nj; j += 16) {
            __mmask16 mk = (__mmask16)(nj - j < 16 ? (1u << (nj - j)) - 1 : 0xFFFFu);
            __m512 e = _mm512_maskz_mov_ps(mk, exp_avx512(_mm512_sub_ps(_mm512_load_ps(s[g] + j), mv)));
            _mm512_store_ps(s[g] + j, e);
            lv = _mm512_add_ps(lv, e);
        }
        l[g] += _mm512_reduce_add_ps(lv);
    }
    switch (ng) { /* acc += sum_j w_j v_j: each V row loaded once for the group */
    case 1: vsum_avx512(1, nc, nj, vp, s, acc); break;
    case 2: vsum_avx512(2, nc, nj, vp, s, acc); break;
    case 3: vsum_avx512(3, nc, nj, vp, s, acc); break;
    default: vsum_avx512(4, nc, nj, vp, s, acc); break;
    }
}

/* Job = one kv head and up to RB query rows: the rows walk the keys together
 * block by block, so a block of K/V is loaded from memory once for all of
 * them; each row still visits its own keys in index order in blocks of 64
 * (starting at key 0), so its result does not depend on the other rows. */
static void rows_avx512(void *p, int start, int end) {
    const ctx *C = p;
    const at_job *J = C->J;
    int hd = J->hd, ng = J->nh / J->nkv;
    _Alignas(64) float acc[RB][FG][FHD];
    float m[RB][FG], l[RB][FG];
    const float *kp[BLK], *vp[BLK];
    for (int job = start; job < end; job++) {
        int kh = job % J->nkv, t0 = job / J->nkv * RB, t1 = t0 + RB < C->T ? t0 + RB : C->T, jlo;
        int nmax = fast_reset(J, t0, t1, kh * ng, ng, m, l, acc, &jlo);
        for (int j0 = jlo; j0 < nmax; j0 += BLK) {
            int jn = nmax - j0 < BLK ? nmax - j0 : BLK;
            for (int t = t0; t < t1; t++) {
                int nj = fast_gather(J, kh, t, j0, jn, 16, kp, vp); /* padded to 16 keys */
                if (!nj) continue;
                const float *q0 = J->q + (size_t)t * J->nh * hd + (size_t)kh * ng * hd;
                block_avx512(q0, ng, hd, score_scale(J), nj, kp, vp, m[t - t0], l[t - t0],
                             acc[t - t0]);
            }
        }
        for (int t = t0; t < t1; t++)
            for (int g = 0; g < ng; g++) {
                float *o = J->out + (size_t)t * J->nh * hd + (size_t)(kh * ng + g) * hd;
                __m512 inv = _mm512_set1_ps(1.0f / l[t - t0][g]);
                for (int c = 0; c < hd / 16; c++)
                    _mm512_storeu_ps(o + 16 * c, _mm512_mul_ps(_mm512_load_ps(acc[t - t0][g] + 16 * c), inv));
            }
    }
}
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

#ifdef HAVE_AVX2
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
/* acc[g] += sum_j w[g][j] v_j over the block, CW vectors of 8 dimensions at
 * a time (then a tail of one), keys in order: one chain per accumulator
 * vector, the NG heads' chains side by side so every V load feeds NG FMAs.
 * NG * CW accumulators + CW V rows + NG weights fit the 16 registers. */
static inline __attribute__((always_inline)) void vsum_avx2(const int NG, const int CW, int nc, int nj,
                                                            const float *const *vp, float (*w)[BLK],
                                                            float (*acc)[FHD]) {
    int c0 = 0;
    for (; c0 + CW <= nc; c0 += CW) {
        __m256 o[FG][8];
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++)
#pragma GCC unroll 8
            for (int k = 0; k < CW; k++) o[g][k] = _mm256_load_ps(acc[g] + 8 * (c0 + k));
        for (int j = 0; j < nj; j++) {
            const float *v = vp[j] + 8 * c0;
            __m256 vv[8];
#pragma GCC unroll 8
            for (int k = 0; k < CW; k++) vv[k] = _mm256_loadu_ps(v + 8 * k);
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) {
                __m256 wg = _mm256_set1_ps(w[g][j]);
#pragma GCC unroll 8
                for (int k = 0; k < CW; k++) o[g][k] = _mm256_fmadd_ps(wg, vv[k], o[g][k]);
            }
        }
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++)
#pragma GCC unroll 8
            for (int k = 0; k < CW; k++) _mm256_store_ps(acc[g] + 8 * (c0 + k), o[g][k]);
    }
    for (; c0 < nc; c0++) {
        __m256 o[FG];
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++) o[g] = _mm256_load_ps(acc[g] + 8 * c0);
        for (int j = 0; j < nj; j++) {
            __m256 v = _mm256_loadu_ps(vp[j] + 8 * c0);
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) o[g] = _mm256_fmadd_ps(_mm256_set1_ps(w[g][j]), v, o[g]);
        }
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++) _mm256_store_ps(acc[g] + 8 * c0, o[g]);
    }
}

/* block_avx512 with 8 keys at a time: one row t, query heads q0[g*hd]
 * (g < ng <= FG), keys [j0, j0 + nj) of the block (pointers kp/vp, kp padded
 * to 8 with zero_row): scores by vertical FMAs over the head dimension and
 * sum8_tree, online-softmax update of m, l, acc. The same steps whatever
 * other rows share the block. */
static void block_avx2(const float *q0, int ng, int hd, float mul, int nj, const float *const *kp,
                       const float *const *vp,
                       float *m, float *l, float (*acc)[FHD]) {
    int nc = hd / 8;
    const __m256 scale = _mm256_set1_ps(mul), ninf = _mm256_set1_ps(-INFINITY);
    _Alignas(32) float s[FG][BLK];
    for (int g = 0; g < ng; g++) {
        const float *qg = q0 + (size_t)g * hd;
        __m256 bmv = ninf;
        for (int j = 0; j < nj; j += 8) {
            __m256 a[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();
            for (int c = 0; c < nc; c++) { /* key i: sum over c in order, lanes = dimensions */
                __m256 qv = _mm256_loadu_ps(qg + 8 * c);
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++) a[i] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp[j + i] + 8 * c), a[i]);
            }
            __m256 sc = _mm256_mul_ps(sum8_tree(a), scale);
            _mm256_store_ps(s[g] + j, sc);
            __m256 mk = _mm256_castsi256_ps(tail_avx2(nj - j < 8 ? nj - j : 8));
            bmv = _mm256_blendv_ps(bmv, _mm256_max_ps(bmv, sc), mk);
        }
        float bm = hmax_avx2(bmv);
        if (bm > m[g]) {
            float c = _mm256_cvtss_f32(exp_avx2(_mm256_set1_ps(m[g] - bm))); /* 0 on the first block (no sink) */
            l[g] *= c;
            scale_avx2(acc[g], c, hd);
            m[g] = bm;
        }
        __m256 mv = _mm256_set1_ps(m[g]), lv = _mm256_setzero_ps();
        for (int j = 0; j < nj; j += 8) {
            __m256 mk = _mm256_castsi256_ps(tail_avx2(nj - j < 8 ? nj - j : 8));
            __m256 e = _mm256_and_ps(mk, exp_avx2(_mm256_sub_ps(_mm256_load_ps(s[g] + j), mv)));
            _mm256_store_ps(s[g] + j, e);
            lv = _mm256_add_ps(lv, e);
        }
        l[g] += hsum_avx2(lv);
    }
    switch (ng) { /* acc += sum_j w_j v_j: each V row loaded once for the group */
    case 1: vsum_avx2(1, 8, nc, nj, vp, s, acc); break;
    case 2: vsum_avx2(2, 4, nc, nj, vp, s, acc); break;
    case 3: vsum_avx2(3, 3, nc, nj, vp, s, acc); break;
    default: vsum_avx2(4, 2, nc, nj, vp, s, acc); break;
    }
}

/* rows_avx512 with 8-key steps. Job = one kv head, one pass of up to FG of
 * its query heads (a larger GQA group takes several passes; a head's result
 * does not depend on the others in its pass) and up to RB query rows walking
 * the keys together block by block; each row visits its own keys in index
 * order in blocks of 64 from key 0, so its result does not depend on the
 * other rows, on T or on the thread count. hd is a multiple of 8, <= FHD. */
static void rows_avx2(void *p, int start, int end) {
    const ctx *C = p;
    const at_job *J = C->J;
    int hd = J->hd, grp = J->nh / J->nkv, npass = (grp + FG - 1) / FG;
    _Alignas(32) float acc[RB][FG][FHD];
    float m[RB][FG], l[RB][FG];
    const float *kp[BLK], *vp[BLK];
    for (int job = start; job < end; job++) {
        int pass = job % npass, kh = job / npass % J->nkv, t0 = job / npass / J->nkv * RB;
        int t1 = t0 + RB < C->T ? t0 + RB : C->T;
        int g0 = pass * FG, ng = grp - g0 < FG ? grp - g0 : FG, jlo;
        int nmax = fast_reset(J, t0, t1, kh * grp + g0, ng, m, l, acc, &jlo);
        for (int j0 = jlo; j0 < nmax; j0 += BLK) {
            int jn = nmax - j0 < BLK ? nmax - j0 : BLK;
            for (int t = t0; t < t1; t++) {
                int nj = fast_gather(J, kh, t, j0, jn, 8, kp, vp); /* padded to 8 keys */
                if (!nj) continue;
                const float *q0 = J->q + (size_t)t * J->nh * hd + (size_t)(kh * grp + g0) * hd;
                block_avx2(q0, ng, hd, score_scale(J), nj, kp, vp, m[t - t0], l[t - t0], acc[t - t0]);
            }
        }
        for (int t = t0; t < t1; t++)
            for (int g = 0; g < ng; g++) {
                float *o = J->out + (size_t)t * J->nh * hd + (size_t)(kh * grp + g0 + g) * hd;
                __m256 inv = _mm256_set1_ps(1.0f / l[t - t0][g]);
                for (int c = 0; c < hd / 8; c++)
                    _mm256_storeu_ps(o + 8 * c, _mm256_mul_ps(_mm256_load_ps(acc[t - t0][g] + 8 * c), inv));
            }
    }
}
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

void at_run(tp_pool *tp, const at_job *J, int T) {
    ctx C = {J, pick(), T};
    tp_fn fn = rows;
    int jobs = T * J->nkv;
#ifdef HAVE_AVX512
    if (C.v.dot == dot_avx512 && J->hd % 16 == 0 && J->hd <= FHD && J->nh / J->nkv <= FG) {
        /* AVX-512 code, so only here, after pick() found the CPU has it;
         * before any worker of this call reads tree_perm */
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        pthread_once(&once, tree_init);
        fn = rows_avx512;
        jobs = (T + RB - 1) / RB * J->nkv;
    }
#endif
#ifdef HAVE_AVX2
    if (C.v.dot == dot_avx2 && J->hd % 8 == 0 && J->hd <= FHD) { /* AVX2 code: pick() found KN_ISA_AVX2 */
        fn = rows_avx2;
        jobs = (T + RB - 1) / RB * J->nkv * ((J->nh / J->nkv + FG - 1) / FG);
    }
#endif
    int keys = J->na + J->nb + (J->causal ? T : 0);
    if (J->window && keys > J->window + T + J->nb) keys = J->window + T + J->nb;
    if ((long)T * J->nh * keys * J->hd < (1L << 16)) fn(&C, 0, jobs);
    else tp_for(tp, jobs, fn, &C);
}
