/* kernels.c - kn_ entry points, variant dispatch and the generic C kernels.
 *
 * kn_matmul: y[T][rows] = x[T][cols] . W^T. The output columns (rows of W)
 * are split across the thread pool in tiles of KN_COL_TILE; each chunk runs
 * the selected variant's rows() function, which streams its weight rows once
 * for up to KN_TBLOCK rows of x. See kernels_impl.h for the batch-invariance
 * contract every variant keeps.
 *
 * The generic variant is plain C and defines the reference arithmetic:
 *   w_j = W[r][j] as f32; for Q8/Q4 w_j = s*q_j + b (product rounded, then
 *         the sum rounded - no fused multiply-add);
 *   8 lane accumulators, a[j % 8] += x_j * w_j in ascending j (product and
 *   sum rounded separately);
 *   y = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)).
 * The build uses -std=c11, which keeps GCC from contracting a*b+c into an
 * FMA, so the same source gives the same rounding in every loop.
 *
 * q8 mode (kernels.h, kn_set_act_quant): kn_matmul quantizes x once per
 * call (kn_quant_row's values, in the layout the variant asks for) and runs
 * the variant's rows_q8 (Q8/Q4) or rows_bf16 (BF16). generic_rows_q8 below
 * is the C reference of the int8 arithmetic; the SIMD q8 paths must give
 * its bits exactly (tests/test_kernels.c checks it). */
#include "kernels.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "kernels_impl.h"
#include "threads.h"
#include "util.h"

/* ===================================================================== */
/* Small helpers                                                           */
/* ===================================================================== */

/* ===================================================================== */
/* Generic C variant                                                       */
/* ===================================================================== */

/* out[0..n) = W[r][k0 .. k0+n) as f32; k0 is a multiple of the group size.
 * Returns out, or a pointer into W itself for F32. */
static const float *generic_dequant(const wt_weight *w, int r, int k0, int n, float *out) {
    size_t row = (size_t)r * (size_t)w->cols;
    switch (w->dtype) {
    case WT_F32: return (const float *)w->data + row + k0;
    case WT_F16: {
        const uint16_t *h = (const uint16_t *)w->data + row + k0;
        for (int j = 0; j < n; j++) out[j] = kn_f16_to_f32(h[j]);
        return out;
    }
    case WT_BF16: {
        const uint16_t *h = (const uint16_t *)w->data + row + k0;
        for (int j = 0; j < n; j++) out[j] = kn_bf16_to_f32(h[j]);
        return out;
    }
    case WT_Q8:
    case WT_Q4:
    case WT_MXFP4: wt_dequant(out, w, r, k0, n); return out;
    }
    return out;
}

static float generic_reduce(const float a[8]) {
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

static void generic_rows(const kn_job *job, int r0, int r1) {
    const wt_weight *w = job->w;
    int cols = w->cols, T = job->T;
    float wbuf[KN_KBLOCK];
    float acc[KN_TBLOCK][8]; /* [row of x][lane] */
    for (int t0 = 0; t0 < T; t0 += KN_TBLOCK) {
        int tn = T - t0 < KN_TBLOCK ? T - t0 : KN_TBLOCK;
        for (int r = r0; r < r1; r++) {
            memset(acc, 0, sizeof acc[0] * (size_t)tn);
            for (int k0 = 0; k0 < cols; k0 += KN_KBLOCK) {
                /* k0 is a multiple of 8, so lane j%8 is the same globally */
                int kn = cols - k0 < KN_KBLOCK ? cols - k0 : KN_KBLOCK;
                const float *wk = generic_dequant(w, r, k0, kn, wbuf);
                for (int t = 0; t < tn; t++) {
                    const float *xk = job->x + (size_t)(t0 + t) * cols + k0;
                    float *a = acc[t];
                    int j = 0;
                    for (; j + 8 <= kn; j += 8)
                        for (int l = 0; l < 8; l++) a[l] += xk[j + l] * wk[j + l];
                    for (int l = 0; j + l < kn; l++) a[l] += xk[j + l] * wk[j + l];
                }
            }
            for (int t = 0; t < tn; t++)
                job->y[(size_t)(t0 + t) * w->rows + r] = generic_reduce(acc[t]);
        }
    }
}

/* ---- q8 mode: the reference quantizer and matmul ---------------------- */

void kn_quant_row(const float *x, int cols, int g, int8_t *xq, float *d, float *xs) {
    int nb = cols / KN_QBLOCK, per_g = g / KN_QBLOCK; /* 0 for g = 16 */
    int32_t sum[KN_KBLOCK / KN_QBLOCK]; /* S_k of the blocks of one group */
    for (int k = 0; k < nb; k++) {
        const float *xb = x + (size_t)k * KN_QBLOCK;
        float amax = 0;
        int bad = 0;
        for (int j = 0; j < KN_QBLOCK; j++) {
            float a = fabsf(xb[j]);
            if (!(a <= FLT_MAX)) bad = 1; /* Inf or NaN */
            else if (a > amax) amax = a;
        }
        float dk = 0, id = 0;
        if (bad) dk = NAN;
        else if (amax >= 0x1p-100f) dk = amax / 127.0f, id = 127.0f / amax;
        int32_t s = 0;
        for (int j = 0; j < KN_QBLOCK; j++) {
            /* |x_j * id| <= 127 * (1 + 2^-23), so rint stays in [-127, 127] */
            int q = id != 0 ? (int)rintf(xb[j] * id) : 0;
            xq[(size_t)k * KN_QBLOCK + j] = (int8_t)q;
            s += q;
        }
        d[k] = dk;
        if (g == 16) { /* two groups per block: X = fma(S_half, d_k, 0) each */
            int32_t lo = 0;
            for (int j = 0; j < 16; j++) lo += xq[(size_t)k * KN_QBLOCK + j];
            xs[2 * k] = fmaf((float)lo, dk, 0.0f);
            xs[2 * k + 1] = fmaf((float)(s - lo), dk, 0.0f);
            continue;
        }
        sum[k % per_g] = s;
        if (k % per_g == per_g - 1) {
            float X = 0;
            for (int i = 0; i < per_g; i++) X = fmaf((float)sum[i], d[k - per_g + 1 + i], X);
            xs[k / per_g] = X;
        }
    }
}

/* Natural layout: row t of qx->q is kn_quant_row's xq. */
static void generic_quant(kn_qx *qx, const float *x, int T, const wt_weight *w) {
    int cols = w->cols, nb = cols / KN_QBLOCK, ng = cols / w->group_size;
    for (int t = 0; t < T; t++)
        kn_quant_row(x + (size_t)t * cols, cols, w->group_size, qx->q + (size_t)t * qx->ldq,
                     qx->d + (size_t)t * nb, qx->xs + (size_t)t * ng);
}

/* The q8-mode arithmetic of kernels.h, one output at a time (MXFP4: the
 * integer of each code is wt_mx4_q's, the scale and bias its byte's). */
static void generic_rows_q8(const kn_job *job, int r0, int r1) {
    const wt_weight *w = job->w;
    const kn_qx *qx = job->qx;
    int cols = w->cols, g = w->group_size, bits = w->bits, per_word = 32 / bits, mx = w->dtype == WT_MXFP4;
    int nb = cols / KN_QBLOCK, ng = cols / g;
    uint32_t mask = (1u << bits) - 1;
    for (int r = r0; r < r1; r++) {
        const uint32_t *qw = (const uint32_t *)w->data + (size_t)r * (size_t)(cols / per_word);
        size_t grow = (size_t)r * (size_t)ng;
        for (int t = 0; t < job->T; t++) {
            const int8_t *xq = qx->q + (size_t)t * qx->ldq;
            const float *d = qx->d + (size_t)t * nb, *xs = qx->xs + (size_t)t * ng;
            float acc = 0;
            for (int gi = 0; gi < ng; gi++) {
                float s, b;
                kn_group_sb(w, grow + (size_t)gi, &s, &b);
                /* the group's pieces: its blocks of 32, or for g = 16 the
                 * half of block gi/2 it covers; each one I, then the bias */
                int step = g < KN_QBLOCK ? g : KN_QBLOCK;
                for (int j0 = gi * g; j0 < (gi + 1) * g; j0 += step) {
                    int32_t I = 0;
                    for (int j = j0; j < j0 + step; j++) {
                        uint32_t q = (qw[j / per_word] >> ((j % per_word) * bits)) & mask;
                        I += (int32_t)(mx ? wt_mx4_q[q] : q) * xq[j];
                    }
                    float sd = s * d[j0 / KN_QBLOCK];
                    acc = fmaf((float)I, sd, acc);
                }
                acc = fmaf(b, xs[gi], acc);
            }
            job->y[(size_t)t * w->rows + r] = acc;
        }
    }
}

static int generic_supported(void) { return 1; }

/* q8 mode here is the portable reference, not a fast path: off by default */
const kn_impl kn_impl_generic = {
    .name = "generic",
    .isa = KN_ISA_GENERIC,
    .supported = generic_supported,
    .rows = generic_rows,
    .q8_supported = generic_supported,
    .q8_default = 0,
    .quant = generic_quant,
    .rows_q8 = generic_rows_q8,
};

/* ===================================================================== */
/* Dispatch                                                                */
/* ===================================================================== */

/* Every variant built into this binary, best first: kn_init takes the first
 * one whose supported() says yes (cpu.h asks the CPU), unless
 * DFLASH_KERNELS names another. This is the one SIMD dispatch point:
 * attention.c and sample.c follow kn_isa() of the variant chosen here. */
static const kn_impl *const kn_impls[] = {
#if defined(__x86_64__)
    &kn_impl_avx512vnni,
    &kn_impl_avx512,
    &kn_impl_avxvnni,
    &kn_impl_avx2,
#endif
#if defined(__aarch64__)
#ifdef KN_NEON_I8MM
    &kn_impl_neon_i8mm,
#endif
#ifdef KN_NEON_DOTPROD
    &kn_impl_neon_dotprod,
#endif
    &kn_impl_neon,
#endif
    &kn_impl_generic,
};
#define KN_N_IMPLS (int)(sizeof kn_impls / sizeof kn_impls[0])

static const kn_impl *kn_cur; /* NULL until kn_init */
/* 1 once kn_cur is set (release): kn_init_once's fast path. kn_init and
 * kn_force_variant rewrite the globals and are for one thread only (tests,
 * benchmarks); library code calls kn_init_once, which several models on
 * several threads may call at once. */
static atomic_int kn_ready;
static pthread_mutex_t kn_init_mu = PTHREAD_MUTEX_INITIALIZER;

/* q8 mode (kernels.h): the request of kn_set_act_quant (-1: none), the
 * environment's DFLASH_ACT (-1: unset); whether the variant has it on this
 * CPU for Q8/Q4 and for BF16 weights, and whether it is on by default. */
static int act_req = -1, act_env = -1, act_q8, act_bf16, act_default;

static void set_cur(const kn_impl *impl) {
    kn_cur = impl;
    act_q8 = impl->q8_supported && impl->q8_supported();
    act_bf16 = impl->bf16_supported && impl->bf16_supported();
    act_default = act_q8 && impl->q8_default;
    atomic_store_explicit(&kn_ready, 1, memory_order_release);
}

void kn_init_once(void) {
    if (atomic_load_explicit(&kn_ready, memory_order_acquire)) return;
    pthread_mutex_lock(&kn_init_mu);
    if (!atomic_load_explicit(&kn_ready, memory_order_relaxed)) kn_init();
    pthread_mutex_unlock(&kn_init_mu);
}

int kn_force_variant(const char *name) {
    for (int i = 0; i < KN_N_IMPLS; i++) {
        if (strcmp(kn_impls[i]->name, name) != 0) continue;
        if (!kn_impls[i]->supported()) {
            dfl_seterr("kernels: variant %s not supported by this CPU", name);
            return -1;
        }
        set_cur(kn_impls[i]);
        return 0;
    }
    char all[128] = "";
    for (int i = 0; i < KN_N_IMPLS; i++)
        snprintf(all + strlen(all), sizeof all - strlen(all), "%s%s", i ? ", " : "", kn_impls[i]->name);
    dfl_seterr("kernels: unknown variant '%s' (this build has: %s)", name, all);
    return -1;
}

void kn_init(void) {
    const char *act = getenv("DFLASH_ACT");
    act_env = -1;
    if (act && *act) {
        if (strcmp(act, "f32") == 0) act_env = 0;
        else if (strcmp(act, "q8") == 0) act_env = 1;
        else fprintf(stderr, "dflash: warning: DFLASH_ACT=%s: want f32 or q8; using the default\n", act);
    }
    const char *env = getenv("DFLASH_KERNELS");
    if (env && *env) {
        if (kn_force_variant(env) == 0) return;
        fprintf(stderr, "dflash: warning: DFLASH_KERNELS: %s; picking automatically\n", dfl_lasterr());
    }
    for (int i = 0; i < KN_N_IMPLS; i++) {
        if (kn_impls[i]->supported()) {
            set_cur(kn_impls[i]);
            return;
        }
    }
}

void kn_set_act_quant(int on) { act_req = on < 0 ? -1 : on != 0; }

static int act_on(void) {
    int m = act_req >= 0 ? act_req : act_env;
    return m >= 0 ? m : act_default;
}

int kn_act_quant(void) {
    kn_init_once();
    return act_q8 && act_on();
}

/* bfloat16 activations only on request: on this project's Intel host
 * vdpbf16ps gained nothing over the f32 FMA path at T = 16 (bench/NOTES.md) */
int kn_act_bf16(void) {
    kn_init_once();
    return act_bf16 && (act_req >= 0 ? act_req : act_env) == 1;
}

const char *kn_variant(void) {
    kn_init_once();
    return kn_cur->name;
}

kn_isa kn_isa_cur(void) {
    kn_init_once();
    return kn_cur->isa;
}

int kn_variant_count(void) { return KN_N_IMPLS; }

const char *kn_variant_name(int i) { return i >= 0 && i < KN_N_IMPLS ? kn_impls[i]->name : NULL; }

int kn_variant_supported(const char *name) {
    for (int i = 0; i < KN_N_IMPLS; i++)
        if (strcmp(kn_impls[i]->name, name) == 0) return kn_impls[i]->supported();
    return 0;
}

int kn_has_q8(void) { kn_init_once(); return act_q8; }
int kn_has_pack(void) { kn_init_once(); return act_q8 && kn_cur->pack != NULL; }
int kn_has_bf16(void) { kn_init_once(); return act_bf16; }

/* ===================================================================== */
/* Entry points                                                            */
/* ===================================================================== */

static void kn_matmul_chunk(void *ctx, int start, int end) {
    const kn_job *job = ctx;
    int r1 = end * KN_COL_TILE;
    if (r1 > job->w->rows) r1 = job->w->rows;
    if (job->qx) kn_cur->rows_q8(job, start * KN_COL_TILE, r1);
    else if (job->xb) kn_cur->rows_bf16(job, start * KN_COL_TILE, r1);
    else kn_cur->rows(job, start * KN_COL_TILE, r1);
}

/* Below this many multiply-adds a call runs on the calling thread only:
 * waking the pool would cost more than it saves. */
#define KN_MIN_PARALLEL (1 << 16)

/* xp[0..n) = x[0..n) with every block of P as [even elements, odd ones]. */
static void permute_q4_scalar(float *xp, const float *x, size_t n, int P) {
    for (size_t b = 0; b < n; b += (size_t)P)
        for (int i = 0; i < P / 2; i++) {
            xp[b + i] = x[b + 2 * i];
            xp[b + P / 2 + i] = x[b + 2 * i + 1];
        }
}

static void *alloc64(size_t n) {
    void *p = aligned_alloc(64, (n + 63) & ~(size_t)63);
    return p ? p : dfl_malloc(n); /* still correct, just slower */
}

/* Several weights against one x in one parallel region: the union of their
 * tiles, cut by the pool as one range. Each weight's tiles run exactly as in
 * a call of its own, so the outputs are the same bits. */
typedef struct {
    kn_job jobs[KN_MAX_MULTI];
    int first[KN_MAX_MULTI + 1]; /* tile range of weight i: [first[i], first[i+1]) */
    int n;
} kn_multi;

static void kn_multi_chunk(void *ctx, int start, int end) {
    kn_multi *m = ctx;
    for (int i = 0; i < m->n; i++) {
        int a = start > m->first[i] ? start : m->first[i], b = end < m->first[i + 1] ? end : m->first[i + 1];
        if (a < b) kn_matmul_chunk(&m->jobs[i], a - m->first[i], b - m->first[i]);
    }
}

/* q8 mode: quantize x once ([T][cols] -> qx, laid out for ws[0]; the
 * caller checked that every weight shares dtype, cols, group size and
 * packing), then the variant's rows_q8 for each weight. */
static void matmul_q8(tp_pool *tp, float *const *ys, const float *x, const wt_weight *const *ws, int n, int T) {
    const wt_weight *w = ws[0];
    size_t nb = (size_t)w->cols / KN_QBLOCK, ng = (size_t)(w->cols / w->group_size);
    kn_qx qx;
    qx.ldq = ((size_t)w->cols + 127) & ~(size_t)127;
    size_t qb = ((size_t)T * qx.ldq + 63) & ~(size_t)63, db = ((size_t)T * nb * sizeof(float) + 63) & ~(size_t)63;
    size_t xb = ((size_t)T * ng * sizeof(float) + 63) & ~(size_t)63;
    char *buf = alloc64(qb + db + xb + (size_t)T * (size_t)(w->cols / 16) * sizeof(int32_t));
    qx.q = (int8_t *)buf;
    qx.d = (float *)(buf + qb);
    qx.xs = (float *)(buf + qb + db);
    qx.s16 = (int32_t *)(buf + qb + db + xb);
    kn_cur->quant(&qx, x, T, w);
    kn_multi m;
    double macs = 0;
    m.n = n;
    m.first[0] = 0;
    for (int i = 0; i < n; i++) {
        m.jobs[i] = (kn_job){ys[i], NULL, ws[i], T, &qx, NULL, 0};
        m.first[i + 1] = m.first[i] + (ws[i]->rows + KN_COL_TILE - 1) / KN_COL_TILE;
        macs += (double)ws[i]->rows * ws[i]->cols * T;
    }
    if (macs < KN_MIN_PARALLEL) kn_multi_chunk(&m, 0, m.first[n]);
    else tp_for(tp, m.first[n], kn_multi_chunk, &m);
    free(buf);
}

/* q8 mode, BF16 weights: x rounded to bfloat16 once, then rows_bf16. */
static void matmul_bf16(tp_pool *tp, kn_job *job, const float *x) {
    const wt_weight *w = job->w;
    job->ldb = ((size_t)w->cols + 31) & ~(size_t)31;
    uint16_t *xb = alloc64((size_t)job->T * job->ldb * sizeof *xb);
    kn_cur->quant_bf16(xb, job->ldb, x, job->T, w->cols);
    job->xb = xb;
    int tiles = (w->rows + KN_COL_TILE - 1) / KN_COL_TILE;
    if ((double)w->rows * w->cols * job->T < KN_MIN_PARALLEL) kn_matmul_chunk(job, 0, tiles);
    else tp_for(tp, tiles, kn_matmul_chunk, job);
    free(xb);
}

void kn_matmul(tp_pool *tp, float *y, const float *x, const wt_weight *w, int T) {
    if (T <= 0) return;
    kn_init_once();
    kn_job job = {y, x, w, T, NULL, NULL, 0};
    if (kn_is_q(w) && kn_act_quant()) {
        matmul_q8(tp, &y, x, &w, 1, T);
        return;
    }
    if (w->dtype == WT_BF16 && kn_act_bf16()) {
        job.x = NULL;
        matmul_bf16(tp, &job, x);
        return;
    }
    /* The variants read x with 64-byte vector loads; a misaligned x costs
     * the tiled (T >= 2) loop about a third of its speed, so x is copied to
     * an aligned buffer unless it is aligned already (copying is about 1%
     * of a matmul). Q4 variants also want it permuted (kernels_impl.h);
     * MXFP4 in f32 mode walks the columns in natural order, as Q8. */
    float *xp = NULL;
    size_t n = (size_t)T * (size_t)w->cols;
    int P = w->dtype == WT_Q4 ? kn_cur->q4_perm : 0;
    if (P > 0 || ((uintptr_t)x & 63) != 0) {
        xp = aligned_alloc(64, (n * sizeof *xp + 63) & ~(size_t)63);
        if (!xp) xp = dfl_malloc(n * sizeof *xp); /* still correct, just slower */
        if (P == 0) memcpy(xp, x, n * sizeof *xp);
        else if (kn_cur->permute_q4) kn_cur->permute_q4(xp, x, n);
        else permute_q4_scalar(xp, x, n, P);
        job.x = xp;
    }
    int tiles = (w->rows + KN_COL_TILE - 1) / KN_COL_TILE;
    if ((double)w->rows * w->cols * T < KN_MIN_PARALLEL) kn_matmul_chunk(&job, 0, tiles);
    else tp_for(tp, tiles, kn_matmul_chunk, &job);
    free(xp);
}

void kn_matmul_n(tp_pool *tp, float *const *ys, const float *x, const wt_weight *const *ws, int n, int T) {
    if (T <= 0 || n <= 0) return;
    kn_init_once();
    int one_call = n <= KN_MAX_MULTI && kn_act_quant() && kn_is_q(ws[0]);
    for (int i = 1; i < n && one_call; i++)
        one_call = ws[i]->dtype == ws[0]->dtype && ws[i]->cols == ws[0]->cols &&
                   ws[i]->group_size == ws[0]->group_size && !ws[i]->packed == !ws[0]->packed;
    if (one_call) {
        matmul_q8(tp, ys, x, ws, n, T);
        return;
    }
    for (int i = 0; i < n; i++) kn_matmul(tp, ys[i], x, ws[i], T);
}

int kn_pack(wt_weight *w) {
    kn_init_once();
    if (w->packed || !kn_is_q(w) || !kn_act_quant() || !kn_cur->pack) return 0;
    w->packed = kn_cur->pack(w);
    if (!w->packed) {
        dfl_seterr("kernels: out of memory packing a %s weight [%d, %d]", wt_dtype_name(w->dtype), w->rows, w->cols);
        return -1;
    }
    return 0;
}

void kn_unpack(wt_weight *w) {
    free((void *)w->packed);
    w->packed = NULL;
}

wt_weight kn_row_view(const wt_weight *w, int r0, int n) {
    wt_weight v = *w;
    size_t elem = w->dtype == WT_F32 ? 4 : w->dtype == WT_F16 || w->dtype == WT_BF16 ? 2 : 0;
    v.rows = n;
    if (elem) {
        v.data = (const char *)w->data + (size_t)r0 * w->cols * elem;
    } else if (w->dtype == WT_MXFP4) {
        v.data = (const char *)w->data + (size_t)r0 * w->cols / 2;
        v.scales = (const char *)w->scales + (size_t)r0 * (w->cols / 32);
    } else {
        size_t sg = (size_t)(w->cols / w->group_size) * kn_scale_size(w->scale_dtype);
        v.data = (const char *)w->data + (size_t)r0 * w->cols * w->bits / 8;
        v.scales = (const char *)w->scales + (size_t)r0 * sg;
        v.biases = (const char *)w->biases + (size_t)r0 * sg;
    }
    if (w->packed) v.packed = (const char *)w->packed + (size_t)(r0 / KN_COL_TILE) * kn_cur->pack_tile_bytes(w);
    return v;
}

