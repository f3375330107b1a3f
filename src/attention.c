/* attention.c - see attention.h. One job = one query row and one kv head
 * with the group of query heads that share it, so each K/V row is loaded
 * once for the whole group. */
#include "attention.h"

#include <math.h>
#include <string.h>

#include "kernels.h"
#include "threads.h"

enum { BLK = 64, MAXG = 16, MAXHD = 512 };

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
#pragma GCC push_options
#pragma GCC target("avx512f")
#include <immintrin.h>
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
#pragma GCC pop_options
#define HAVE_AVX512 1
#endif

typedef struct {
    float (*dot)(const float *, const float *, int);
    void (*axpy)(float *, float, const float *, int);
    void (*scale)(float *, float, int);
} vec_ops;

static vec_ops pick(void) {
    vec_ops v = {dot_generic, axpy_generic, scale_generic};
#ifdef HAVE_AVX512
    if (strcmp(kn_variant(), "avx512") == 0) v = (vec_ops){dot_avx512, axpy_avx512, scale_avx512};
#endif
    return v;
}

typedef struct {
    const at_job *J;
    vec_ops v;
} ctx;

static void rows(void *p, int start, int end) {
    const ctx *C = p;
    const at_job *J = C->J;
    const vec_ops *v = &C->v;
    int hd = J->hd, kvd = J->nkv * hd, grp = J->nh / J->nkv;
    float scale = 1.0f / sqrtf((float)hd);
    float s[MAXG][BLK], m[MAXG], l[MAXG];
    float acc[MAXG][MAXHD];
    for (int job = start; job < end; job++) {
        int t = job / J->nkv, kh = job % J->nkv;
        int na = J->causal ? J->na + t + 1 : J->na, n = na + J->nb;
        for (int g0 = 0; g0 < grp; g0 += MAXG) { /* query heads sharing kv head kh */
            int ng = grp - g0 < MAXG ? grp - g0 : MAXG;
            const float *q0 = J->q + (size_t)t * J->nh * hd + (size_t)(kh * grp + g0) * hd;
            for (int g = 0; g < ng; g++) {
                m[g] = -INFINITY;
                l[g] = 0;
                memset(acc[g], 0, sizeof(float) * hd);
            }
            for (int j0 = 0; j0 < n; j0 += BLK) {
                int j1 = j0 + BLK < n ? j0 + BLK : n;
                for (int j = j0; j < j1; j++) {
                    const float *k = (j < na ? J->Ka + (size_t)j * kvd : J->Kb + (size_t)(j - na) * kvd) + (size_t)kh * hd;
                    for (int g = 0; g < ng; g++) s[g][j - j0] = v->dot(q0 + (size_t)g * hd, k, hd) * scale;
                }
                for (int g = 0; g < ng; g++) {
                    float bm = -INFINITY;
                    for (int j = 0; j < j1 - j0; j++) bm = s[g][j] > bm ? s[g][j] : bm;
                    if (bm > m[g]) {
                        float c = expf(m[g] - bm); /* 0 on the first block */
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
                    const float *vv = (j < na ? J->Va + (size_t)j * kvd : J->Vb + (size_t)(j - na) * kvd) + (size_t)kh * hd;
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

void at_run(const at_job *J, int T) {
    ctx C = {J, pick()};
    int keys = J->na + J->nb + (J->causal ? T : 0);
    if ((long)T * J->nh * keys * J->hd < (1L << 16)) rows(&C, 0, T * J->nkv);
    else tp_for(T * J->nkv, rows, &C);
}
