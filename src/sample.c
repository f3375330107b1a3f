/* sample.c - see sample.h. */
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "util.h"

static int argmax_generic(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* The SIMD loops below give argmax_generic's answer for every input, NaNs
 * included: a NaN at 0 stays the answer (nothing compares greater); past 0
 * NaNs never win, so the answer is the first index of the maximum of the
 * other values. The maximum is found with max(v, m), which returns m where
 * v is NaN, starting from x[0] (not NaN): no NaN enters m; then the first
 * index equal to it. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f")
#endif
static int argmax_avx512(const float *x, int n) {
    if (n < 64) return argmax_generic(x, n);
    if (isnan(x[0])) return 0;
    __m512 m = _mm512_set1_ps(x[0]);
    int i = 0;
    for (; i + 16 <= n; i += 16) m = _mm512_max_ps(_mm512_loadu_ps(x + i), m);
    float mx = _mm512_reduce_max_ps(m);
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    __m512 vm = _mm512_set1_ps(mx);
    for (i = 0; i + 16 <= n; i += 16) {
        __mmask16 k = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), vm, _CMP_EQ_OQ);
        if (k) return i + __builtin_ctz(k);
    }
    for (; i < n; i++)
        if (x[i] == mx) return i;
    return argmax_generic(x, n); /* not reached: mx is one of the x[i] */
}
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif
static int argmax_avx2(const float *x, int n) {
    if (n < 32) return argmax_generic(x, n);
    if (isnan(x[0])) return 0;
    __m256 m = _mm256_set1_ps(x[0]);
    int i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    float mx = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    __m256 vm = _mm256_set1_ps(mx);
    for (i = 0; i + 8 <= n; i += 8) {
        int k = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
        if (k) return i + __builtin_ctz((unsigned)k);
    }
    for (; i < n; i++)
        if (x[i] == mx) return i;
    return argmax_generic(x, n); /* not reached: mx is one of the x[i] */
}
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#define HAVE_X86_SIMD 1
#endif

#if defined(__aarch64__)
#include <arm_neon.h>
/* As argmax_avx512 with 4 lanes (NEON is architectural on AArch64). */
static int argmax_neon(const float *x, int n) {
    if (n < 16) return argmax_generic(x, n);
    float32x4_t m = vld1q_f32(x);
    int i = 4;
    for (; i + 4 <= n; i += 4) m = vmaxq_f32(m, vld1q_f32(x + i));
    float mx = vmaxvq_f32(m);
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    float32x4_t vm = vdupq_n_f32(mx);
    for (i = 0; i + 4 <= n; i += 4)
        if (vmaxvq_u32(vceqq_f32(vld1q_f32(x + i), vm))) break;
    for (; i < n; i++)
        if (x[i] == mx) return i;
    return argmax_generic(x, n); /* NaNs: fall back to the scalar rule */
}
#define HAVE_NEON 1
#endif

/* ---- the sampler's scan ---------------------------------------------------
 * smp_exp(d) = e^d for d in (-30, 0] (a candidate's weight), in double
 * arithmetic: d = k ln2 + r (k = d / ln2 rounded to nearest by adding
 * 1.5 * 2^52; ln2 in two parts, the first with 11 low zero bits so k * LN2_HI
 * is exact), e^r by Horner's rule on the Taylor series to r^10 (|r| <= 0.35:
 * the series' error < 3e-13), times 2^k built in the exponent's bits, rounded
 * once to float. Only IEEE +, - and * of doubles, never fused (-std=c11 keeps
 * GCC from contracting; the pragma below tells clang): so the scalar loop and
 * every SIMD loop give the same bits on every machine (libm's expf differs
 * between its FMA and SSE2 builds). Within 1 ulp of e^d (test_sample). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
#define EXP_SHIFT 0x1.8p52
#define EXP_SHIFT_BITS 0x4338000000000000ull /* the bits of EXP_SHIFT */
#define EXP_INV_LN2 0x1.71547652b82fep0
#define EXP_LN2_HI 0x1.62e42fefa3800p-1
#define EXP_LN2_LO 0x1.ef35793c76730p-45
/* e^r's Taylor coefficients for Horner's rule, highest first: 1/10!, ..., 1/2!, 1, 1 */
static const double exp_horner[11] = {1.0 / 3628800, 1.0 / 362880, 1.0 / 40320, 1.0 / 5040, 1.0 / 720, 1.0 / 120,
                                      1.0 / 24,      1.0 / 6,      0.5,          1.0,        1.0};

float smp_exp(float d) {
    double x = d, z = x * EXP_INV_LN2, t = z + EXP_SHIFT, kd = t - EXP_SHIFT;
    double r = (x - kd * EXP_LN2_HI) - kd * EXP_LN2_LO;
    double q = exp_horner[0];
    for (int j = 1; j < 11; j++) q = q * r + exp_horner[j];
    uint64_t tb, sb;
    memcpy(&tb, &t, sizeof tb);
    sb = (tb - EXP_SHIFT_BITS + 1023) << 52; /* 2^k */
    double sc;
    memcpy(&sc, &sb, sizeof sc);
    return (float)(q * sc);
}

/* The scan of a row of logits for smp_pick, one loop per instruction-set
 * family, every one giving scan_generic's result bit for bit:
 * - max_*: the largest logit, NaNs skipped (-inf if there is none);
 * - scan_*: the candidates - ids whose d = (logit - mx) / temp > -30 - into
 *   idx[0..k) in id order (k returned) with scan_bin(d) in bins[0..k); with
 *   lane (not NULL), lane[j] = the sum, in id order, of smp_exp(d) of the
 *   candidates with id % 8 == j, in double. scan_mass adds the lanes in a
 *   fixed tree. SCAN_BINS_K scales -d to a bin. */
#define SCAN_BINS 240
#define SCAN_BINS_K ((float)SCAN_BINS / 30.0f)
static inline int scan_bin(float d) {
    int b = (int)(-d * SCAN_BINS_K);
    return b < SCAN_BINS - 1 ? b : SCAN_BINS - 1;
}

static float max_generic(const float *l, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) /* NaNs never compare greater */
        if (l[i] > mx) mx = l[i];
    return mx;
}

static int scan_tail(const float *l, int i, int n, float mx, float temp, int *idx, uint8_t *bins, double *lane,
                     int k) {
    for (; i < n; i++) {
        float d = (l[i] - mx) / temp;
        if (d > -30.0f) {
            idx[k] = i;
            bins[k++] = (uint8_t)scan_bin(d);
            if (lane) lane[i & 7] += (double)smp_exp(d);
        }
    }
    return k;
}

static int scan_generic(const float *l, int n, float mx, float temp, int *idx, uint8_t *bins, double *lane) {
    return scan_tail(l, 0, n, mx, temp, idx, bins, lane, 0);
}

static double scan_mass(const double *lane) {
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

#ifdef HAVE_X86_SIMD
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")
#endif
/* smp_exp of 8 doubles (each a float's value): the same operations. */
static inline __m512d exp8_avx512(__m512d x) {
    __m512d t = _mm512_add_pd(_mm512_mul_pd(x, _mm512_set1_pd(EXP_INV_LN2)), _mm512_set1_pd(EXP_SHIFT));
    __m512d kd = _mm512_sub_pd(t, _mm512_set1_pd(EXP_SHIFT));
    __m512d r = _mm512_sub_pd(_mm512_sub_pd(x, _mm512_mul_pd(kd, _mm512_set1_pd(EXP_LN2_HI))),
                              _mm512_mul_pd(kd, _mm512_set1_pd(EXP_LN2_LO)));
    __m512d q = _mm512_set1_pd(exp_horner[0]);
    for (int j = 1; j < 11; j++) q = _mm512_add_pd(_mm512_mul_pd(q, r), _mm512_set1_pd(exp_horner[j]));
    __m512i sb = _mm512_slli_epi64(
        _mm512_add_epi64(_mm512_sub_epi64(_mm512_castpd_si512(t), _mm512_set1_epi64((long long)EXP_SHIFT_BITS)),
                         _mm512_set1_epi64(1023)),
        52);
    /* rounded to float and back, as smp_exp's result is added */
    return _mm512_cvtps_pd(_mm512_cvtpd_ps(_mm512_mul_pd(q, _mm512_castsi512_pd(sb))));
}

static float max_avx512(const float *l, int n) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 16 <= n; i += 16) m = _mm512_max_ps(_mm512_loadu_ps(l + i), m); /* a NaN in l: m */
    float mx = _mm512_reduce_max_ps(m);
    for (; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    return mx;
}

static int scan_avx512(const float *l, int n, float mx, float temp, int *idx, uint8_t *bins, double *lane) {
    const __m512 vmx = _mm512_set1_ps(mx), vt = _mm512_set1_ps(temp), lim = _mm512_set1_ps(-30.0f);
    const __m512 bk = _mm512_set1_ps(-SCAN_BINS_K);
    const __m512i top = _mm512_set1_epi32(SCAN_BINS - 1), step = _mm512_set1_epi32(16);
    __m512i ids = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512d acc = _mm512_setzero_pd();
    int k = 0, i = 0;
    /* k <= i: the full-width stores at idx + k, bins + k stay inside [0, n) */
    for (; i + 16 <= n; i += 16, ids = _mm512_add_epi32(ids, step)) {
        __m512 d = _mm512_div_ps(_mm512_sub_ps(_mm512_loadu_ps(l + i), vmx), vt);
        __mmask16 m = _mm512_cmp_ps_mask(d, lim, _CMP_GT_OQ);
        if (!m) continue;
        /* -d * K: the sign flipped exactly, as scan_bin's -d */
        __m512i b = _mm512_min_epi32(_mm512_cvttps_epi32(_mm512_mul_ps(d, bk)), top);
        _mm512_storeu_si512((void *)(idx + k), _mm512_maskz_compress_epi32(m, ids));
        _mm_storeu_si128((__m128i *)(bins + k), _mm512_cvtepi32_epi8(_mm512_maskz_compress_epi32(m, b)));
        k += __builtin_popcount(m);
        if (lane) {
            __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(d));
            __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(d), 1)));
            acc = _mm512_add_pd(acc, _mm512_maskz_mov_pd((__mmask8)(m & 0xFF), exp8_avx512(lo)));
            acc = _mm512_add_pd(acc, _mm512_maskz_mov_pd((__mmask8)(m >> 8), exp8_avx512(hi)));
        }
    }
    if (lane) _mm512_storeu_pd(lane, acc);
    return scan_tail(l, i, n, mx, temp, idx, bins, lane, k);
}
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif
static inline __m256d exp4_avx2(__m256d x) {
    __m256d t = _mm256_add_pd(_mm256_mul_pd(x, _mm256_set1_pd(EXP_INV_LN2)), _mm256_set1_pd(EXP_SHIFT));
    __m256d kd = _mm256_sub_pd(t, _mm256_set1_pd(EXP_SHIFT));
    __m256d r = _mm256_sub_pd(_mm256_sub_pd(x, _mm256_mul_pd(kd, _mm256_set1_pd(EXP_LN2_HI))),
                              _mm256_mul_pd(kd, _mm256_set1_pd(EXP_LN2_LO)));
    __m256d q = _mm256_set1_pd(exp_horner[0]);
    for (int j = 1; j < 11; j++) q = _mm256_add_pd(_mm256_mul_pd(q, r), _mm256_set1_pd(exp_horner[j]));
    __m256i sb = _mm256_slli_epi64(
        _mm256_add_epi64(_mm256_sub_epi64(_mm256_castpd_si256(t), _mm256_set1_epi64x((long long)EXP_SHIFT_BITS)),
                         _mm256_set1_epi64x(1023)),
        52);
    return _mm256_cvtps_pd(_mm256_cvtpd_ps(_mm256_mul_pd(q, _mm256_castsi256_pd(sb))));
}

static float max_avx2(const float *l, int n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(l + i), m);
    _Alignas(32) float v[8];
    _mm256_store_ps(v, m);
    float mx = -INFINITY;
    for (int j = 0; j < 8; j++) mx = v[j] > mx ? v[j] : mx;
    for (; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    return mx;
}

static int scan_avx2(const float *l, int n, float mx, float temp, int *idx, uint8_t *bins, double *lane) {
    const __m256 vmx = _mm256_set1_ps(mx), vt = _mm256_set1_ps(temp), lim = _mm256_set1_ps(-30.0f);
    const __m256 bk = _mm256_set1_ps(-SCAN_BINS_K);
    const __m256d limd = _mm256_set1_pd(-30.0);
    __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
    int k = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 d = _mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(l + i), vmx), vt);
        unsigned m = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(d, lim, _CMP_GT_OQ));
        if (!m) continue;
        _Alignas(32) int32_t b[8];
        _mm256_store_si256((__m256i *)b, _mm256_cvttps_epi32(_mm256_mul_ps(d, bk)));
        for (unsigned mm = m; mm; mm &= mm - 1) {
            int j = __builtin_ctz(mm);
            idx[k] = i + j;
            bins[k++] = (uint8_t)(b[j] < SCAN_BINS - 1 ? b[j] : SCAN_BINS - 1);
        }
        if (lane) { /* a double is a candidate exactly when its float is: -30 is exact in both */
            __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(d)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(d, 1));
            acc0 = _mm256_add_pd(acc0, _mm256_and_pd(_mm256_cmp_pd(lo, limd, _CMP_GT_OQ), exp4_avx2(lo)));
            acc1 = _mm256_add_pd(acc1, _mm256_and_pd(_mm256_cmp_pd(hi, limd, _CMP_GT_OQ), exp4_avx2(hi)));
        }
    }
    if (lane) {
        _mm256_storeu_pd(lane, acc0);
        _mm256_storeu_pd(lane + 4, acc1);
    }
    return scan_tail(l, i, n, mx, temp, idx, bins, lane, k);
}
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif /* HAVE_X86_SIMD */

#ifdef HAVE_NEON
static inline float64x2_t exp2_neon(float64x2_t x) {
    float64x2_t t = vaddq_f64(vmulq_f64(x, vdupq_n_f64(EXP_INV_LN2)), vdupq_n_f64(EXP_SHIFT));
    float64x2_t kd = vsubq_f64(t, vdupq_n_f64(EXP_SHIFT));
    float64x2_t r = vsubq_f64(vsubq_f64(x, vmulq_f64(kd, vdupq_n_f64(EXP_LN2_HI))),
                              vmulq_f64(kd, vdupq_n_f64(EXP_LN2_LO)));
    float64x2_t q = vdupq_n_f64(exp_horner[0]);
    for (int j = 1; j < 11; j++) q = vaddq_f64(vmulq_f64(q, r), vdupq_n_f64(exp_horner[j]));
    int64x2_t sb = vshlq_n_s64(vaddq_s64(vsubq_s64(vreinterpretq_s64_f64(t), vdupq_n_s64((int64_t)EXP_SHIFT_BITS)),
                                         vdupq_n_s64(1023)),
                               52);
    return vcvt_f64_f32(vcvt_f32_f64(vmulq_f64(q, vreinterpretq_f64_s64(sb))));
}

static float max_neon(const float *l, int n) {
    float mx = -INFINITY;
    int i = 0;
    if (n >= 4) { /* vmaxnm: the number where one side is NaN (the first 4 may all be NaN: -inf then) */
        float32x4_t m = vdupq_n_f32(-INFINITY);
        for (; i + 4 <= n; i += 4) m = vmaxnmq_f32(m, vld1q_f32(l + i));
        mx = vmaxnmvq_f32(m);
        if (isnan(mx)) mx = -INFINITY;
    }
    for (; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    return mx;
}

static int scan_neon(const float *l, int n, float mx, float temp, int *idx, uint8_t *bins, double *lane) {
    const float32x4_t vmx = vdupq_n_f32(mx), vt = vdupq_n_f32(temp), lim = vdupq_n_f32(-30.0f);
    const float32x4_t bk = vdupq_n_f32(-SCAN_BINS_K);
    const float64x2_t limd = vdupq_n_f64(-30.0);
    float64x2_t acc[4] = {vdupq_n_f64(0), vdupq_n_f64(0), vdupq_n_f64(0), vdupq_n_f64(0)};
    int k = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        float32x4_t d[2] = {vdivq_f32(vsubq_f32(vld1q_f32(l + i), vmx), vt),
                            vdivq_f32(vsubq_f32(vld1q_f32(l + i + 4), vmx), vt)};
        uint32x4_t c0 = vcgtq_f32(d[0], lim), c1 = vcgtq_f32(d[1], lim);
        if (!vmaxvq_u32(vorrq_u32(c0, c1))) continue;
        uint32_t cm[8];
        int32_t b[8];
        vst1q_u32(cm, c0);
        vst1q_u32(cm + 4, c1);
        vst1q_s32(b, vcvtq_s32_f32(vmulq_f32(d[0], bk)));
        vst1q_s32(b + 4, vcvtq_s32_f32(vmulq_f32(d[1], bk)));
        for (int j = 0; j < 8; j++)
            if (cm[j]) {
                idx[k] = i + j;
                bins[k++] = (uint8_t)(b[j] < SCAN_BINS - 1 ? b[j] : SCAN_BINS - 1);
            }
        if (lane)
            for (int h = 0; h < 2; h++) {
                float64x2_t lo = vcvt_f64_f32(vget_low_f32(d[h])), hi = vcvt_high_f64_f32(d[h]);
                acc[2 * h] = vaddq_f64(acc[2 * h], vreinterpretq_f64_u64(vandq_u64(
                                 vcgtq_f64(lo, limd), vreinterpretq_u64_f64(exp2_neon(lo)))));
                acc[2 * h + 1] = vaddq_f64(acc[2 * h + 1], vreinterpretq_f64_u64(vandq_u64(
                                     vcgtq_f64(hi, limd), vreinterpretq_u64_f64(exp2_neon(hi)))));
            }
    }
    if (lane)
        for (int j = 0; j < 4; j++) vst1q_f64(lane + 2 * j, acc[j]);
    return scan_tail(l, i, n, mx, temp, idx, bins, lane, k);
}
#endif /* HAVE_NEON */

static float scan_max(const float *l, int n) {
#ifdef HAVE_X86_SIMD
    switch (kn_isa_cur()) {
    case KN_ISA_AVX512: return max_avx512(l, n);
    case KN_ISA_AVX2: return max_avx2(l, n);
    default: break;
    }
#endif
#ifdef HAVE_NEON
    if (kn_isa_cur() == KN_ISA_NEON) return max_neon(l, n);
#endif
    return max_generic(l, n);
}

static int scan(const float *l, int n, float mx, float temp, int *idx, uint8_t *bins, double *lane) {
    if (lane)
        for (int j = 0; j < 8; j++) lane[j] = 0;
#ifdef HAVE_X86_SIMD
    switch (kn_isa_cur()) {
    case KN_ISA_AVX512: return scan_avx512(l, n, mx, temp, idx, bins, lane);
    case KN_ISA_AVX2: return scan_avx2(l, n, mx, temp, idx, bins, lane);
    default: break;
    }
#endif
#ifdef HAVE_NEON
    if (kn_isa_cur() == KN_ISA_NEON) return scan_neon(l, n, mx, temp, idx, bins, lane);
#endif
    return scan_generic(l, n, mx, temp, idx, bins, lane);
}

int smp_scan(const float *logits, int n, float temp, float *mx, int *idx, uint8_t *bins, double *mass) {
    *mx = scan_max(logits, n);
    if (!isfinite(*mx)) return -1;
    double lane[8];
    int k = scan(logits, n, *mx, temp, idx, bins, lane);
    *mass = scan_mass(lane);
    return k;
}

/* The loop of the family kernels.c chose (the one CPU check); every loop
 * gives the scalar loop's answer: the first index of the maximum. */
int smp_argmax(const float *x, int n) {
#ifdef HAVE_X86_SIMD
    switch (kn_isa_cur()) {
    case KN_ISA_AVX512: return argmax_avx512(x, n);
    case KN_ISA_AVX2: return argmax_avx2(x, n);
    default: break;
    }
#endif
#ifdef HAVE_NEON
    if (kn_isa_cur() == KN_ISA_NEON) return argmax_neon(x, n);
#endif
    return argmax_generic(x, n);
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

double smp_uniform(uint64_t seed, int64_t pos) {
    uint64_t h = splitmix64(splitmix64(seed) ^ (uint64_t)pos);
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

/* work: keys [n] (8-byte aligned first), prob [n] floats, idx [n] ints, bins [n] bytes */
size_t smp_work_size(int n) { return (size_t)n * (sizeof(uint64_t) + sizeof(float) + sizeof(int) + 1); }

static void swap_int(int *a, int *b) {
    int t = *a;
    *a = *b;
    *b = t;
}

/* Candidate order: logit descending, ties by id ascending - a strict total
 * order on the (finite) candidates, so a partial selection puts exactly the
 * ids a full sort would put in each place. cand_key makes it one unsigned
 * compare: the logit's bits mapped to an integer in the float order (-0 as
 * +0, which compare equal), inverted, above the id; the sort and selection
 * then touch only the keys (no lookups of the logits). */
static inline uint64_t cand_key(const float *l, int i) {
    float f = l[i] == 0 ? 0.0f : l[i];
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = u & 0x80000000u ? ~u : u | 0x80000000u; /* ascending as the float */
    return (uint64_t)~u << 32 | (uint32_t)i;
}

static inline void swap_key(uint64_t *a, uint64_t *b) {
    uint64_t t = *a;
    *a = *b;
    *b = t;
}

static void insertion_sort(uint64_t *v, int n) {
    for (int i = 1; i < n; i++) {
        uint64_t x = v[i];
        int j = i;
        for (; j > 0 && x < v[j - 1]; j--) v[j] = v[j - 1];
        v[j] = x;
    }
}

/* Median of three as the pivot; moves it to v[hi]. Lomuto partition:
 * returns p with v[lo..p) < v[p] < v[p+1..hi] (keys are distinct). */
static int partition(uint64_t *v, int lo, int hi) {
    int mid = lo + (hi - lo) / 2;
    if (v[mid] < v[lo]) swap_key(&v[mid], &v[lo]);
    if (v[hi] < v[lo]) swap_key(&v[hi], &v[lo]);
    if (v[mid] < v[hi]) swap_key(&v[mid], &v[hi]);
    uint64_t pv = v[hi];
    int p = lo;
    for (int i = lo; i < hi; i++) { /* branch-free: v[lo..p) < pv <= v[p..i) */
        uint64_t x = v[i];
        v[i] = v[p];
        v[p] = x;
        p += x < pv;
    }
    swap_key(&v[p], &v[hi]);
    return p;
}

static void sort_keys(uint64_t *v, int n) {
    while (n > 16) {
        int p = partition(v, 0, n - 1);
        if (p < n - 1 - p) { /* recurse into the smaller side */
            sort_keys(v, p);
            v += p + 1;
            n -= p + 1;
        } else {
            sort_keys(v + p + 1, n - p - 1);
            n = p;
        }
    }
    insertion_sort(v, n);
}

/* Rearrange v[0..n) so that v[0..m) are the m smallest (in any order
 * among themselves). */
static void select_first(uint64_t *v, int n, int m) {
    int lo = 0, hi = n - 1;
    while (m > lo && m <= hi && hi - lo > 16) {
        int p = partition(v, lo, hi);
        if (p < m) lo = p + 1;
        else hi = p - 1;
    }
    if (m > lo && m <= hi) insertion_sort(v + lo, hi - lo + 1);
}

/* The sorted prefix idx[0..done) grows to idx[0..want) (want <= k) and
 * prob[] gets the new positions' weights. key[done..lim) are the keys of
 * every candidate that comes before any of idx[lim..k) (the bins below): a
 * selection that stays inside them looks at those only; past them the rest
 * get their keys (from idx[lim..k), untouched until then). */
typedef struct {
    const float *logits;
    int *idx;
    float *prob;
    uint64_t *key;
    int k, done, lim;
    float mx, temp;
} order;

static void grow(order *o, int want) {
    if (want > o->k) want = o->k;
    if (want <= o->done) return;
    if (o->lim > o->k) o->lim = o->k;
    if (want > o->lim) { /* past the front: select among all the rest */
        for (int j = o->lim; j < o->k; j++) o->key[j] = cand_key(o->logits, o->idx[j]);
        o->lim = o->k;
    }
    select_first(o->key + o->done, o->lim - o->done, want - o->done);
    sort_keys(o->key + o->done, want - o->done);
    for (int i = o->done; i < want; i++) {
        o->idx[i] = (int)(uint32_t)o->key[i];
        o->prob[i] = smp_exp((o->logits[o->idx[i]] - o->mx) / o->temp);
    }
    o->done = want;
}

/* Where a walk's next grow goes: the sorted prefix doubled (+ 64), but not
 * past the front while it lasts. */
static int next_chunk(const order *o) {
    int want = 2 * o->done + 64;
    return o->done < o->lim && want > o->lim ? o->lim : want;
}

/* Bins of a candidate's scaled logit d = (logit - best) / temp, in (-30, 0]:
 * scan_bin(d) = floor(-d * SCAN_BINS / 30), SCAN_BINS of them over the 30
 * nats. It is monotone in the logit (a larger logit never gets a later bin),
 * so every candidate of bins 0..B comes before every candidate of a later
 * bin in the candidate order. Counted when the candidates are found, the
 * bins tell how far into the order a cut or a draw reaches before anything
 * is sorted: front() then moves the candidates of the bins it reaches to the
 * front and the selections stay among them. Which token is picked does not
 * depend on them: a selection that needs more than the front takes the rest. */

/* idx[0..k): the candidates of bins 0..B first (lim = their count); done = 0.
 * bins[j]: the bin of idx[j] (read once each, in order). */
static void front(order *o, const uint8_t *bins, int B) {
    int m = 0;
    for (int j = 0; j < o->k; j++)
        if (bins[j] <= B) {
            o->key[m] = cand_key(o->logits, o->idx[j]);
            swap_int(&o->idx[j], &o->idx[m++]);
        }
    o->lim = m;
}

/* The first bin by which the candidates' weights surely add up to w: each
 * bin's weight taken as its count times the least weight a candidate of it
 * can have (e^(-(b+1) * 30 / SCAN_BINS)), so the true sum is no smaller; the
 * last bin if they never do. */
static int bin_reaching(const int *count, double w) {
    double c = 0, least = 1, step = exp(-30.0 / SCAN_BINS);
    for (int b = 0; b < SCAN_BINS; b++) {
        least *= step;
        c += count[b] * least;
        if (c >= w) return b;
    }
    return SCAN_BINS - 1;
}

/* Candidates are the tokens whose probability is within exp(-30) of the
 * best one (the rest carry less than ~1e-13 of the mass each and are
 * dropped), in order of logit; then top-k, then top-p, then min-p (as
 * llama.cpp and vLLM order them), then one draw that
 * walks the candidates in that order. Only the part of the order a draw
 * needs is sorted: the candidates of the bins it reaches (scan_bin), in a
 * partial selection growing in doubling chunks, so the results are the
 * full sort's (tests/test_sample.c). A candidate's weight is smp_exp(d).
 * The one difference from a walk over a full sort: without top-k the total
 * mass is summed in 8 lanes by id (scan_mass) rather than in logit order
 * (rounding of the last bits of a double), the same on every machine. */
int smp_pick(const smp_params *p, const float *logits, int n, int64_t pos, void *work) {
    if (!(p->temp > 0.0f)) return smp_argmax(logits, n);
    /* work (smp_work_size): keys, prob, idx, bins */
    uint64_t *key = work;
    float *prob = (float *)(key + n);
    order o = {logits, (int *)(prob + n), prob, key, 0, 0, 0, scan_max(logits, n), p->temp};
    uint8_t *bins = (uint8_t *)(o.idx + n);
    if (!isfinite(o.mx)) {
        dfl_seterr("sampling at position %lld: the logits are %s, not finite numbers (the model's activations "
                   "overflowed)", (long long)pos, o.mx > 0 ? "infinite" : "all NaN or -inf");
        return -1;
    }
    int use_k = p->top_k > 0, count[SCAN_BINS] = {0};
    double lane[8], sum = 0, u0 = smp_uniform(p->seed, pos);
    o.k = scan(logits, n, o.mx, p->temp, o.idx, bins, use_k ? NULL : lane);
    o.lim = o.k;
    for (int j = 0; j < o.k; j++) count[bins[j]]++;
    if (use_k && p->top_k < o.k) {
        int B = 0;
        for (int c = count[0]; c < p->top_k; c += count[++B]) {}
        front(&o, bins, B);
        grow(&o, p->top_k);
        o.k = p->top_k;
        for (int i = 0; i < o.k; i++) sum += o.prob[i];
    } else {
        if (use_k) { /* top-k at least the candidates: the mass after all */
            for (int j = 0; j < 8; j++) lane[j] = 0;
            for (int j = 0; j < o.k; j++) lane[o.idx[j] & 7] += (double)smp_exp((logits[o.idx[j]] - o.mx) / p->temp);
        }
        sum = scan_mass(lane);
        /* how far the first walk reaches: top-p's (its share of the mass),
         * else min-p's (the bin of p(best) * min_p, and one more for the
         * first token below it), else the draw's (u of all the mass) */
        double dm = p->min_p > 0.0f ? -log((double)p->min_p) * (SCAN_BINS / 30.0) + 1 : 0;
        int B = p->top_p > 0.0f && p->top_p < 1.0f ? bin_reaching(count, p->top_p * sum)
                : p->min_p > 0.0f                 ? (dm < SCAN_BINS - 1 ? (int)dm : SCAN_BINS - 1)
                                                  : bin_reaching(count, u0 * sum);
        front(&o, bins, B);
    }
    if (p->top_p > 0.0f && p->top_p < 1.0f) {
        double c = 0;
        for (int i = 0; i < o.k; i++) {
            if (i == o.done) grow(&o, next_chunk(&o));
            c += o.prob[i] / sum;
            if (c >= p->top_p) {
                o.k = i + 1;
                break;
            }
        }
        grow(&o, o.k);
        sum = 0;
        for (int i = 0; i < o.k; i++) sum += o.prob[i];
    }
    if (p->min_p > 0.0f) { /* prob[i] = p_i / p(best): the candidates are in order, cut at the first below */
        for (int i = 0; i < o.k; i++) {
            if (i == o.done) grow(&o, next_chunk(&o));
            if (o.prob[i] < p->min_p && i > 0) {
                o.k = i;
                break;
            }
        }
        grow(&o, o.k);
        sum = 0;
        for (int i = 0; i < o.k; i++) sum += o.prob[i];
    }
    double u = u0 * sum, c = 0;
    for (int i = 0; i < o.k; i++) {
        if (i == o.done) grow(&o, next_chunk(&o));
        c += o.prob[i];
        if (u < c) return o.idx[i];
    }
    grow(&o, o.k);
    return o.idx[o.k - 1];
}

int smp_transform_active(const smp_transform *t) {
    return t->n_bias > 0 || (t->last_n != 0 && (t->repeat != 1.0f || t->frequency != 0.0f || t->presence != 0.0f));
}

void smp_transform_apply(const smp_transform *t, float *logits, int n, const int32_t *hist, int64_t n_hist,
                         int *count) {
    (void)n;
    for (int i = 0; i < t->n_bias; i++) logits[t->bias[i].id] += t->bias[i].bias;
    if (t->last_n == 0 || (t->repeat == 1.0f && t->frequency == 0.0f && t->presence == 0.0f)) return;
    int64_t from = t->last_n < 0 || t->last_n >= n_hist ? 0 : n_hist - t->last_n;
    for (int64_t h = from; h < n_hist; h++) count[hist[h]]++;
    for (int64_t h = from; h < n_hist; h++) { /* each distinct token once; count[] back to zero */
        int32_t id = hist[h];
        int c = count[id];
        if (!c) continue;
        float z = logits[id];
        if (t->repeat != 1.0f) z = z > 0 ? z / t->repeat : z * t->repeat;
        z -= (float)c * t->frequency + t->presence;
        logits[id] = z;
        count[id] = 0;
    }
}

void smp_logprobs(const float *logits, int n, int32_t id, float *lp, int n_top, int32_t *top, float *top_lp) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) /* NaNs never compare greater */
        if (logits[i] > mx) mx = logits[i];
    double lse;
    if (isfinite(mx)) {
        double sum = 0;
        for (int i = 0; i < n; i++)
            if (logits[i] > -INFINITY) sum += exp((double)logits[i] - (double)mx);
        lse = (double)mx + log(sum);
    } else { /* +inf: the infinite ones share the mass; all -inf / NaN: nothing has any */
        lse = mx;
    }
#define SMP_LP(v) (isnan(v) || (v) == -INFINITY ? -INFINITY : isinf(lse) ? ((v) == mx ? 0.0f : -INFINITY) \
                                                                     : (float)((double)(v) - lse))
    *lp = SMP_LP(logits[id]);
    int have = 0; /* top[0..have): logit descending, ties by id ascending (ids arrive ascending) */
    for (int i = 0; i < n && n_top > 0; i++) {
        float v = isnan(logits[i]) ? -INFINITY : logits[i];
        if (have == n_top && !(v > (isnan(logits[top[have - 1]]) ? -INFINITY : logits[top[have - 1]]))) continue;
        int j = have < n_top ? have++ : have - 1;
        while (j > 0 && v > (isnan(logits[top[j - 1]]) ? -INFINITY : logits[top[j - 1]])) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = i;
    }
    for (int i = 0; i < have; i++) top_lp[i] = SMP_LP(logits[top[i]]);
#undef SMP_LP
}
