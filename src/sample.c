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

size_t smp_work_size(int n) { return (size_t)n * (sizeof(float) + sizeof(int)); }

/* Candidate order: logit descending, ties by id ascending - a strict total
 * order on the (NaN-free) candidates, so a partial selection puts exactly
 * the ids a full sort would put in each place. The logits travel as an
 * argument: no shared state, two models may sample at once. */
static inline int before(const float *l, int i, int j) { return l[i] > l[j] || (l[i] == l[j] && i < j); }

static void swap_int(int *a, int *b) {
    int t = *a;
    *a = *b;
    *b = t;
}

static void insertion_sort(const float *l, int *v, int n) {
    for (int i = 1; i < n; i++) {
        int x = v[i], j = i;
        for (; j > 0 && before(l, x, v[j - 1]); j--) v[j] = v[j - 1];
        v[j] = x;
    }
}

/* Median of three as the pivot; moves it to v[hi]. Lomuto partition:
 * returns p with v[lo..p) before v[p] before v[p+1..hi]. */
static int partition(const float *l, int *v, int lo, int hi) {
    int mid = lo + (hi - lo) / 2;
    if (before(l, v[mid], v[lo])) swap_int(&v[mid], &v[lo]);
    if (before(l, v[hi], v[lo])) swap_int(&v[hi], &v[lo]);
    if (before(l, v[mid], v[hi])) swap_int(&v[mid], &v[hi]);
    int pv = v[hi], p = lo;
    for (int i = lo; i < hi; i++)
        if (before(l, v[i], pv)) swap_int(&v[i], &v[p++]);
    swap_int(&v[p], &v[hi]);
    return p;
}

static void sort_ids(const float *l, int *v, int n) {
    while (n > 16) {
        int p = partition(l, v, 0, n - 1);
        if (p < n - 1 - p) { /* recurse into the smaller side */
            sort_ids(l, v, p);
            v += p + 1;
            n -= p + 1;
        } else {
            sort_ids(l, v + p + 1, n - p - 1);
            n = p;
        }
    }
    insertion_sort(l, v, n);
}

/* Rearrange v[0..n) so that v[0..m) are the m first in candidate order (in
 * any order among themselves). */
static void select_first(const float *l, int *v, int n, int m) {
    int lo = 0, hi = n - 1;
    while (m > lo && m <= hi && hi - lo > 16) {
        int p = partition(l, v, lo, hi);
        if (p < m) lo = p + 1;
        else hi = p - 1;
    }
    if (m > lo && m <= hi) insertion_sort(l, v + lo, hi - lo + 1);
}

/* The sorted prefix idx[0..done) grows to idx[0..want) (want <= k) and
 * prob[] gets the new positions' weights. idx[done..lim) holds every
 * candidate that comes before any of idx[lim..k) (the bins below): a
 * selection that stays inside it looks at those only. */
typedef struct {
    const float *logits;
    int *idx;
    float *prob;
    int k, done, lim;
    float mx, temp;
} order;

static void grow(order *o, int want) {
    if (want > o->k) want = o->k;
    if (want <= o->done) return;
    if (o->lim > o->k || want > o->lim) o->lim = o->k; /* past the front: select among all the rest */
    select_first(o->logits, o->idx + o->done, o->lim - o->done, want - o->done);
    sort_ids(o->logits, o->idx + o->done, want - o->done);
    for (int i = o->done; i < want; i++) o->prob[i] = expf((o->logits[o->idx[i]] - o->mx) / o->temp);
    o->done = want;
}

/* Where a walk's next grow goes: the sorted prefix doubled (+ 64), but not
 * past the front while it lasts. */
static int next_chunk(const order *o) {
    int want = 2 * o->done + 64;
    return o->done < o->lim && want > o->lim ? o->lim : want;
}

/* Bins of a candidate's scaled logit d = (logit - best) / temp, in (-30, 0]:
 * bin_of(d) = floor(-d * SMP_BINS / 30), SMP_BINS of them over the 30 nats.
 * It is monotone in the logit (a larger logit never gets a later bin), so
 * every candidate of bins 0..B comes before every candidate of a later bin
 * in the candidate order. Counted (and weighed) while the candidates are
 * found, the bins tell how far into the order a cut or a draw reaches before
 * anything is sorted: front() then moves the candidates of the bins it
 * reaches to the front and the selections stay among them. Which token is
 * picked does not depend on them: a selection that needs more than the
 * front (a draw landing past the estimate by rounding) takes the rest. */
enum { SMP_BINS = 240 };
static inline int bin_of(float d) {
    int b = (int)(-d * (SMP_BINS / 30.0f));
    return b < SMP_BINS - 1 ? b : SMP_BINS - 1;
}

/* idx[0..k): the candidates of bins 0..B first (lim = their count); done = 0. */
static void front(order *o, int B) {
    int m = 0;
    for (int i = 0; i < o->k; i++)
        if (bin_of((o->logits[o->idx[i]] - o->mx) / o->temp) <= B) swap_int(&o->idx[i], &o->idx[m++]);
    o->lim = m;
}

/* The first bin by which the bins' weights add up to at least w (a hair more,
 * for the rounding of a sum in another order); the last bin if they never do. */
static int bin_reaching(const double *mass, double w) {
    double c = 0, want = w * (1 + 1e-9);
    for (int b = 0; b < SMP_BINS; b++) {
        c += mass[b];
        if (c >= want) return b;
    }
    return SMP_BINS - 1;
}

/* Candidates are the tokens whose probability is within exp(-30) of the
 * best one (the rest carry less than ~1e-13 of the mass each and are
 * dropped), in order of logit; then top-k, then top-p, then min-p (as
 * llama.cpp and vLLM order them), then one draw that
 * walks the candidates in that order. Only the part of the order a draw
 * needs is sorted: the candidates of the bins it reaches (bin_of), in a
 * partial selection growing in doubling chunks, so the results are the
 * full sort's (tests/test_sample.c). The one difference: without top-k the
 * total mass is summed in id order rather than logit order (rounding of the
 * last bits of a double). */
int smp_pick(const smp_params *p, const float *logits, int n, int64_t pos, void *work) {
    if (!(p->temp > 0.0f)) return smp_argmax(logits, n);
    order o = {logits, (int *)((float *)work + n), work, 0, 0, 0, -INFINITY, p->temp};
    for (int i = 0; i < n; i++) /* NaNs never compare greater: the largest number */
        if (logits[i] > o.mx) o.mx = logits[i];
    if (!isfinite(o.mx)) {
        dfl_seterr("sampling at position %lld: the logits are %s, not finite numbers (the model's activations "
                   "overflowed)", (long long)pos, o.mx > 0 ? "infinite" : "all NaN or -inf");
        return -1;
    }
    for (int i = 0; i < n; i++)
        if ((logits[i] - o.mx) / p->temp > -30.0f) o.idx[o.k++] = i;
    o.lim = o.k;
    double sum = 0, u0 = smp_uniform(p->seed, pos);
    if (p->top_k > 0 && p->top_k < o.k) {
        int count[SMP_BINS] = {0}, B = 0;
        for (int i = 0; i < o.k; i++) count[bin_of((logits[o.idx[i]] - o.mx) / p->temp)]++;
        for (int c = count[0]; c < p->top_k; c += count[++B]) {}
        front(&o, B);
        grow(&o, p->top_k);
        o.k = p->top_k;
        for (int i = 0; i < o.k; i++) sum += o.prob[i];
    } else {
        double mass[SMP_BINS] = {0};
        for (int i = 0; i < o.k; i++) { /* in id order */
            float d = (logits[o.idx[i]] - o.mx) / p->temp, e = expf(d);
            sum += e;
            mass[bin_of(d)] += e;
        }
        /* how far the first walk reaches: top-p's (its share of the mass),
         * else min-p's (the bin of p(best) * min_p, and one more for the
         * first token below it), else the draw's (u of all the mass) */
        double dm = p->min_p > 0.0f ? -log((double)p->min_p) * (SMP_BINS / 30.0) + 1 : 0;
        int B = p->top_p > 0.0f && p->top_p < 1.0f ? bin_reaching(mass, p->top_p * sum)
                : p->min_p > 0.0f                 ? (dm < SMP_BINS - 1 ? (int)dm : SMP_BINS - 1)
                                                  : bin_reaching(mass, u0 * sum);
        front(&o, B);
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
