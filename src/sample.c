/* sample.c - see sample.h. */
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int argmax_generic(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f")
#endif
/* The maximum with 16 lanes, then the first index holding it: the same
 * answer as the scalar loop (NaN-free logits). */
static int argmax_avx512(const float *x, int n) {
    if (n < 64) return argmax_generic(x, n);
    __m512 m = _mm512_loadu_ps(x);
    int i = 16;
    for (; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(x + i));
    float mx = _mm512_reduce_max_ps(m);
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    __m512 vm = _mm512_set1_ps(mx);
    for (i = 0; i + 16 <= n; i += 16) {
        __mmask16 k = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), vm, _CMP_EQ_OQ);
        if (k) return i + __builtin_ctz(k);
    }
    for (; i < n; i++)
        if (x[i] == mx) return i;
    return argmax_generic(x, n); /* NaNs: fall back to the scalar rule */
}
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

int smp_argmax(const float *x, int n) {
    static int avx512 = -1;
    if (avx512 < 0) avx512 = __builtin_cpu_supports("avx512f") ? 1 : 0;
    return avx512 ? argmax_avx512(x, n) : argmax_generic(x, n);
}
#else
int smp_argmax(const float *x, int n) { return argmax_generic(x, n); }
#endif

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

size_t smp_work_size(int n) { return (size_t)n * (sizeof(float) + sizeof(int)); }

/* sort candidate ids by logit, descending; ties by id */
static const float *sort_logits;
static int cmp_desc(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (sort_logits[i] != sort_logits[j]) return sort_logits[i] > sort_logits[j] ? -1 : 1;
    return i - j;
}

/* Candidates are the tokens whose probability is within exp(-30) of the
 * best one (the rest carry less than ~1e-13 of the mass each and are
 * dropped), sorted by logit; then top-k, then top-p, then one draw. */
int smp_pick(const smp_params *p, const float *logits, int n, int64_t pos, void *work) {
    if (p->temp <= 0.0f) return smp_argmax(logits, n);
    float *prob = work;
    int *idx = (int *)(prob + n);
    float mx = logits[smp_argmax(logits, n)];
    int k = 0;
    for (int i = 0; i < n; i++)
        if ((logits[i] - mx) / p->temp > -30.0f) idx[k++] = i;
    sort_logits = logits;
    qsort(idx, (size_t)k, sizeof(int), cmp_desc);
    if (p->top_k > 0 && p->top_k < k) k = p->top_k;
    double sum = 0;
    for (int i = 0; i < k; i++) {
        prob[i] = expf((logits[idx[i]] - mx) / p->temp);
        sum += prob[i];
    }
    if (p->top_p > 0.0f && p->top_p < 1.0f) {
        double c = 0;
        for (int i = 0; i < k; i++) {
            c += prob[i] / sum;
            if (c >= p->top_p) {
                k = i + 1;
                break;
            }
        }
        sum = 0;
        for (int i = 0; i < k; i++) sum += prob[i];
    }
    double u = smp_uniform(p->seed, pos) * sum, c = 0;
    for (int i = 0; i < k; i++) {
        c += prob[i];
        if (u < c) return idx[i];
    }
    return idx[k - 1];
}
