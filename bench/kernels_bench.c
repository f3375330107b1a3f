/* kernels_bench.c - kn_matmul timings per dtype, T and thread count, against
 * the machine's read bandwidth. Built and run by `make bench-kernels`.
 *
 *   kernels_bench [hot] [quant]   (DFLASH_KERNELS=generic|avx2|avx512 forces a path)
 *   kernels_bench model           (the Qwen3-0.6B matmuls, see model_bench)
 *   kernels_bench q6k             (GGUF Q6_K as loaded, MLX Q8 group 16 with F32
 *                                  scales, against the F32 it used to become)
 *   kernels_bench mxfp4           (gpt-oss-20b's expert matrix 2880x2880, cold:
 *                                  MXFP4 against its exact 8-bit form, MLX Q8
 *                                  group 32 with BF16 scales, not packed as
 *                                  experts run)
 *
 * Q8/Q4 run in both activation modes where the variant has the q8 one
 * (kn_set_act_quant): "f32 act" and "q8 act" rows, and "q8 act packed"
 * with kn_pack'ed weights; BF16 likewise "f32 act" and "bf16 act". "quant" measures only the Q8/Q4 weights (and
 * their LM heads).
 *
 * Cold (default): every call uses the next of several copies of the matrix,
 * together more than COLD_BYTES (3 GiB), so the weights come from DRAM as in real
 * decoding (a model is larger than the last-level cache). "hot" reuses one
 * copy (cache-resident). Each figure is the best of ROUNDS rounds of the
 * mean time per call, which filters out noise from other processes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu.h"
#include "cpu/kernels.h"
#include "cpu/threads.h"
#include "util.h"

/* The pool the timed calls run on (NULL: the calling thread only). */
static tp_pool *pool;
static void bench_threads(int n) {
    tp_destroy(pool);
    pool = n == 1 ? NULL : tp_create(n);
}

#define COLD_BYTES (3072.0 * 1024 * 1024)
#define ROUNDS 5
#define ROUND_SECONDS 0.05

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) { return (float)(rnd32() & 0xffffff) / 8388608.0f - 1.0f; }

/* ---- peak read bandwidth ------------------------------------------------ */

typedef struct {
    const uint64_t *buf;
    size_t words_per_item;
    uint64_t sink[64];
} read_ctx;

/* Sums a thread's range as NS sequential streams read side by side with
 * 32-byte loads (one stream per core leaves bandwidth unused, as it does
 * for matmul tiles). */
#define NS 8
#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t read_avx2(const uint64_t *p, size_t q) {
    typedef long long v4 __attribute__((vector_size(32)));
    typedef long long v4u __attribute__((vector_size(32), aligned(8))); /* unaligned loads */
    v4 a[NS] = {{0}};
    for (size_t i = 0; i < q; i += 4)
#pragma GCC unroll 8
        for (int s = 0; s < NS; s++) a[s] += *(const v4u *)(p + s * q + i);
    v4 t = a[0];
    for (int s = 1; s < NS; s++) t ^= a[s];
    return (uint64_t)(t[0] ^ t[1] ^ t[2] ^ t[3]);
}
#endif
static uint64_t read_plain(const uint64_t *p, size_t q) {
    uint64_t a[NS] = {0};
    for (size_t i = 0; i < q; i += 4)
        for (int s = 0; s < NS; s++)
            for (int k = 0; k < 4; k++) a[s] += p[s * q + i + k];
    uint64_t t = 0;
    for (int s = 0; s < NS; s++) t ^= a[s];
    return t;
}

static void read_chunk(void *ctx, int start, int end) {
    read_ctx *c = ctx;
    size_t n = (size_t)(end - start) * c->words_per_item;
    const uint64_t *p = c->buf + (size_t)start * c->words_per_item;
#if defined(__x86_64__)
    if (cpu_has(CPU_AVX2)) {
        c->sink[start % 64] += read_avx2(p, n / NS);
        return;
    }
#endif
    c->sink[start % 64] += read_plain(p, n / NS);
}

/* GB/s of a parallel sum over a 2 GiB buffer with the current pool. */
static double read_bandwidth(const uint64_t *buf, size_t bytes) {
    read_ctx c = {buf, bytes / 8 / 1024, {0}};
    double best = 0;
    for (int r = 0; r < ROUNDS; r++) {
        double t = dfl_now();
        tp_for(pool, 1024, read_chunk, &c);
        t = dfl_now() - t;
        if (bytes / t / 1e9 > best) best = bytes / t / 1e9;
    }
    return best;
}

/* ---- test matrices ------------------------------------------------------ */

typedef struct {
    wt_weight w[1];    /* template (data of copy 0) */
    uint8_t *arena;    /* n_copies * stride bytes */
    size_t stride;     /* bytes per copy: data, then scales, then biases */
    int n_copies;
    void **packed;     /* bmat_pack: n_copies packed copies (kn_pack), or NULL */
} bmat;

static size_t round_up(size_t n) { return (n + 4095) & ~(size_t)4095; }

/* Q weights: group and scale dtype (MLX's usual; "q6k" changes them). */
static int q_group = 64;
static wt_dtype q_sd = WT_BF16;
static size_t sc_size(wt_dtype t) { return t == WT_F32 ? 4 : 2; }

/* Weight of dtype dt, Q with group q_group and q_sd scales. */
static void bmat_init(bmat *m, wt_dtype dt, int rows, int cols, int hot) {
    memset(m, 0, sizeof *m);
    wt_weight *w = m->w;
    w->dtype = dt;
    w->rows = rows;
    w->cols = cols;
    size_t n = (size_t)rows * cols, data_b, sc_b = 0;
    if (dt == WT_MXFP4) { /* codes, then the e8m0 bytes (2^-8 .. 2^-1), no biases */
        w->bits = 4;
        w->group_size = 32;
        data_b = n / 2;
        sc_b = n / 32;
    } else if (dt == WT_Q8 || dt == WT_Q4) {
        w->bits = dt == WT_Q8 ? 8 : 4;
        w->group_size = q_group;
        w->scale_dtype = q_sd;
        data_b = n * w->bits / 8;
        sc_b = n / (size_t)q_group * sc_size(q_sd);
    } else {
        data_b = n * (dt == WT_F32 ? 4 : 2);
    }
    m->stride = round_up(data_b) + 2 * round_up(sc_b);
    m->n_copies = hot ? 1 : (int)(COLD_BYTES / m->stride) + 1;
    if (m->n_copies > 1 && (double)m->stride > COLD_BYTES) m->n_copies = 1;
    m->arena = dfl_malloc(m->stride * m->n_copies);
    uint8_t *d = m->arena;
    if (dt == WT_F32) {
        for (size_t i = 0; i < n; i++) ((float *)d)[i] = rndf();
    } else if (dt == WT_F16 || dt == WT_BF16) {
        for (size_t i = 0; i < n; i++)
            ((uint16_t *)d)[i] = dt == WT_F16 ? dfl_f32_to_f16(rndf()) : dfl_f32_to_bf16(rndf());
    } else if (dt == WT_MXFP4) {
        for (size_t i = 0; i < data_b / 4; i++) ((uint32_t *)d)[i] = rnd32();
        for (size_t i = 0; i < sc_b; i++) d[round_up(data_b) + i] = (uint8_t)(119 + rnd32() % 8);
    } else {
        for (size_t i = 0; i < data_b / 4; i++) ((uint32_t *)d)[i] = rnd32();
        uint8_t *s = d + round_up(data_b), *b = d + round_up(data_b) + round_up(sc_b);
        for (size_t i = 0; i < sc_b / sc_size(q_sd); i++) {
            float sv = 0.01f * (1.5f + rndf()), bv = -0.1f * (1.5f + rndf());
            if (q_sd == WT_F32) {
                ((float *)s)[i] = sv;
                ((float *)b)[i] = bv;
            } else {
                ((uint16_t *)s)[i] = q_sd == WT_F16 ? dfl_f32_to_f16(sv) : dfl_f32_to_bf16(sv);
                ((uint16_t *)b)[i] = q_sd == WT_F16 ? dfl_f32_to_f16(bv) : dfl_f32_to_bf16(bv);
            }
        }
    }
    for (int k = 1; k < m->n_copies; k++) memcpy(m->arena + k * m->stride, m->arena, m->stride);
}

static wt_weight bmat_copy(const bmat *m, int k) {
    wt_weight w = m->w[0];
    if (m->packed) { /* the original of copy 0 (never read), packed copy k */
        w.packed = m->packed[k];
        k = 0;
    }
    const uint8_t *base = m->arena + (size_t)k * m->stride;
    size_t n = (size_t)w.rows * w.cols;
    size_t data_b = w.dtype == WT_Q8 || w.dtype == WT_Q4 ? n * w.bits / 8 : 0;
    w.data = base;
    if (w.dtype == WT_MXFP4) w.scales = base + round_up(n / 2);
    if (data_b) {
        w.scales = base + round_up(data_b);
        w.biases = base + round_up(data_b) + round_up(n / (size_t)w.group_size * sc_size(w.scale_dtype));
    }
    return w;
}

/* Switch m to packed copies (q8 mode, kn_pack): the originals are freed
 * except copy 0, and as many packed copies take their place, so memory
 * stays at about COLD_BYTES. Returns 0, or -1 if the variant packs nothing. */
static int bmat_pack(bmat *m) {
    wt_weight w = bmat_copy(m, 0);
    if (kn_pack(&w) != 0 || !w.packed) return -1;
    int n = m->n_copies;
    uint8_t *c0 = dfl_malloc(m->stride);
    memcpy(c0, m->arena, m->stride);
    free(m->arena);
    m->arena = c0;
    /* the packed size: rows padded to 16, each as many bytes as before */
    size_t pb = ((size_t)w.rows + 15) / 16 * 16 * (wt_bytes(&w) / (size_t)w.rows);
    m->packed = dfl_malloc(sizeof(void *) * (size_t)n);
    m->packed[0] = (void *)w.packed;
    for (int k = 1; k < n; k++) {
        m->packed[k] = aligned_alloc(64, (pb + 63) & ~(size_t)63);
        memcpy(m->packed[k], w.packed, pb);
    }
    return 0;
}

static void bmat_free(bmat *m) {
    if (m->packed)
        for (int k = 0; k < m->n_copies; k++) free(m->packed[k]);
    free(m->packed);
    free(m->arena);
}

/* Activation modes to measure for dtype dt: 1 (f32), 2 (+ q8 / bf16), 3
 * (+ q8 packed); and the label of mode a. */
static int n_modes(wt_dtype dt, int has_q8, int has_bf16) {
    if (dt == WT_Q8 || dt == WT_Q4) return has_q8 ? 3 : 1;
    return dt == WT_BF16 && has_bf16 ? 2 : 1;
}
static const char *mode_name(wt_dtype dt, int a) {
    if (dt == WT_Q8 || dt == WT_Q4) return a == 2 ? " q8 act packed" : a ? " q8 act" : " f32 act";
    if (dt == WT_BF16) return a ? " bf16 act" : " f32 act";
    return "";
}

/* ms per kn_matmul call: best over ROUNDS of the mean over >= ROUND_SECONDS. */
static double time_matmul(const bmat *m, float *y, const float *x, int T) {
    wt_weight w0 = bmat_copy(m, 0);
    kn_matmul(pool, y, x, &w0, T); /* warm up: pool, page faults of y */
    double best = 1e30;
    int k = 0;
    for (int r = 0; r < ROUNDS; r++) {
        int calls = 0;
        double t0 = dfl_now(), t;
        do {
            wt_weight w = bmat_copy(m, k);
            k = (k + 1) % m->n_copies;
            kn_matmul(pool, y, x, &w, T);
            calls++;
            t = dfl_now() - t0;
        } while (t < ROUND_SECONDS || calls < 3);
        if (t / calls < best) best = t / calls;
    }
    return best * 1e3;
}

/* ---- gpt-oss's experts: MXFP4 against its 8-bit form --------------------- */

/* One expert matrix of gpt-oss-20b (2880x2880), cold, as the MoE block runs
 * it (not packed): the 8-bit form MXFP4 experts were loaded into before
 * (Q8 group 32, BF16 scales and biases: 9 bits a value) against MXFP4 kept
 * at 4.25 bits; the same bits, so only the time differs. */
static void mx_bench(void) {
    int Ts[5] = {1, 2, 4, 8, 16}, rows = 2880, cols = 2880;
    float *x = dfl_malloc(sizeof(float) * 16 * cols), *y = dfl_malloc(sizeof(float) * 16 * rows);
    for (int i = 0; i < 16 * cols; i++) x[i] = rndf();
    printf("\n| 2880x2880 expert | activations | thr | T=1 ms | T=2 | T=4 | T=8 | T=16 | T=1 GB/s | T16/T1 |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    int q_group0 = q_group;
    wt_dtype q_sd0 = q_sd;
    q_group = 32, q_sd = WT_BF16;
    wt_dtype dts[2] = {WT_Q8, WT_MXFP4};
    for (int d = 0; d < 2; d++) {
        bmat m;
        bmat_init(&m, dts[d], rows, cols, 0);
        double gb = wt_bytes(m.w) / 1e9;
        for (int act = 0; act < 2; act++) {
            kn_set_act_quant(act);
            if (act && !kn_act_quant()) break;
            for (int nt = 1; nt <= 2; nt++) {
                bench_threads(nt);
                double ms[5];
                for (int i = 0; i < 5; i++) ms[i] = time_matmul(&m, y, x, Ts[i]);
                printf("| %s | %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.1f | %.2f |\n",
                       dts[d] == WT_Q8 ? "Q8 g32 (8-bit form)" : "MXFP4", act ? "q8" : "f32", nt, ms[0], ms[1], ms[2],
                       ms[3], ms[4], gb / (ms[0] * 1e-3), ms[4] / ms[0]);
                fflush(stdout);
            }
        }
        kn_set_act_quant(-1);
        bmat_free(&m);
    }
    q_group = q_group0, q_sd = q_sd0;
    free(x);
    free(y);
}

/* ---- the matmuls of one Qwen3-0.6B forward ------------------------------ */

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Every matmul of a Qwen3-0.6B-shaped forward (28 layers of q, k, v, o,
 * gate, up, down and the 151936-row LM head; MLX 8/4-bit, group 64, BF16
 * scales: 0.63 / 0.34 GB, larger than the caches) on ONE thread, timed by
 * the thread's CPU time: on a shared host that leaves out the time other
 * jobs hold the core (wall clock there varied by 2x between runs). Best of
 * 3 passes per T. Activation modes as above; "packed" = kn_pack. */
static void model_bench(void) {
    enum { NL = 28, NW = NL * 7 + 1 };
    int shp[7][2] = {{2048, 1024}, {1024, 1024}, {1024, 1024}, {1024, 2048}, {3072, 1024}, {3072, 1024}, {1024, 3072}};
    int Ts[5] = {1, 2, 4, 8, 16};
    float *x = dfl_malloc(sizeof(float) * 16 * 3072), *y = dfl_malloc(sizeof(float) * 16 * 151936);
    for (int i = 0; i < 16 * 3072; i++) x[i] = rndf();
    bench_threads(1);
    printf("\nQwen3-0.6B matmuls, 1 thread, thread CPU time (ms per forward)\n\n");
    printf("| weights | activations | T=1 | T=2 | T=4 | T=8 | T=16 | T=1 GB/s | T16/T1 |\n|---|---|---|---|---|---|---|---|---|\n");
    for (int bits = 8; bits >= 4; bits -= 4) {
        bmat *m = dfl_malloc(sizeof(bmat) * NW);
        double gb = 0;
        for (int i = 0; i < NW; i++) {
            int rows = i == NW - 1 ? 151936 : shp[i % 7][0], cols = i == NW - 1 ? 1024 : shp[i % 7][1];
            bmat_init(&m[i], bits == 8 ? WT_Q8 : WT_Q4, rows, cols, 1);
            gb += wt_bytes(m[i].w) / 1e9;
        }
        kn_set_act_quant(1);
        int nmode = kn_act_quant() ? 3 : 1;
        for (int mode = 0; mode < nmode; mode++) {
            kn_set_act_quant(mode > 0);
            void **pk = NULL;
            if (mode == 2) { /* packed copies, the originals stay */
                pk = dfl_malloc(sizeof(void *) * NW);
                for (int i = 0; i < NW; i++) {
                    wt_weight w = bmat_copy(&m[i], 0);
                    if (kn_pack(&w) != 0) {
                        printf("kn_pack: %s\n", dfl_lasterr());
                        return;
                    }
                    pk[i] = (void *)w.packed;
                }
            }
            double ms[5];
            for (int k = 0; k < 5; k++) {
                ms[k] = 1e30;
                for (int pass = 0; pass < 3; pass++) {
                    double t0 = cpu_now();
                    for (int i = 0; i < NW; i++) {
                        wt_weight w = bmat_copy(&m[i], 0);
                        if (pk) w.packed = pk[i];
                        kn_matmul(pool, y, x, &w, Ts[k]);
                    }
                    double t = (cpu_now() - t0) * 1e3;
                    if (t < ms[k]) ms[k] = t;
                }
            }
            printf("| Q%d g64 | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f |\n", bits,
                   mode == 2 ? "q8, packed" : mode ? "q8" : "f32", ms[0], ms[1], ms[2], ms[3], ms[4],
                   gb / (ms[0] * 1e-3), ms[4] / ms[0]);
            fflush(stdout);
            if (pk)
                for (int i = 0; i < NW; i++) free(pk[i]);
            free(pk);
        }
        kn_set_act_quant(-1);
        for (int i = 0; i < NW; i++) bmat_free(&m[i]);
        free(m);
    }
    free(x);
    free(y);
}

/* GGUF Q6_K as the loader makes it (MLX Q8, group 16, F32 scales: 1.5
 * bytes per weight) against F32 (4 bytes; what Q6_K loaded as before):
 * a 3072x1024 matrix (cold: rotating copies) and a 151936x1024 LM head
 * (one copy, larger than the caches), T = 1 and 16, 1 and 2 threads. */
static void q6k_bench(void) {
    int shapes[2][2] = {{3072, 1024}, {151936, 1024}};
    float *x = dfl_malloc(sizeof(float) * 16 * 1024), *y = dfl_malloc(sizeof(float) * 16 * 151936);
    for (int i = 0; i < 16 * 1024; i++) x[i] = rndf();
    q_group = 16;
    q_sd = WT_F32;
    kn_set_act_quant(1);
    int has_q8 = kn_act_quant();
    kn_set_act_quant(-1);
    printf("\n| matrix (out x in) | weights | thr | T=1 ms | T=16 ms | T=1 GB/s | T=1 vs F32 |\n|---|---|---|---|---|---|---|\n");
    for (int s = 0; s < 2; s++) {
        double f32_ms[3] = {0};
        for (int d = 0; d < 2; d++) {
            wt_dtype dt = d ? WT_Q8 : WT_F32;
            bmat m;
            bmat_init(&m, dt, shapes[s][0], shapes[s][1], s == 1);
            double gb = wt_bytes(m.w) / 1e9;
            for (int act = 0; act < n_modes(dt, has_q8, 0); act++) {
                kn_set_act_quant(act > 0);
                if (act == 2 && bmat_pack(&m) != 0) break;
                for (int nt = 1; nt <= 2; nt++) {
                    bench_threads(nt);
                    double t1 = time_matmul(&m, y, x, 1), t16 = time_matmul(&m, y, x, 16);
                    if (!d) f32_ms[nt] = t1;
                    printf("| %dx%d | %s%s | %d | %.3f | %.3f | %.1f | %.2fx |\n", shapes[s][0], shapes[s][1],
                           d ? "Q8 g16 F32-scales" : "F32", mode_name(dt, act), nt, t1, t16, gb / (t1 * 1e-3),
                           f32_ms[nt] / t1);
                    fflush(stdout);
                }
            }
            kn_set_act_quant(-1);
            bmat_free(&m);
        }
    }
    q_group = 64;
    q_sd = WT_BF16;
    free(x);
    free(y);
}

int main(int argc, char **argv) {
    int hot = 0, quant_only = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "hot") == 0) hot = 1;
        else if (strcmp(argv[i], "quant") == 0) quant_only = 1;
        else if (strcmp(argv[i], "model") == 0) {
            kn_init();
            printf("kernels_bench: variant %s\n", kn_variant());
            model_bench();
            bench_threads(1);
            return 0;
        } else if (strcmp(argv[i], "mxfp4") == 0) {
            kn_init();
            printf("kernels_bench: variant %s\n", kn_variant());
            mx_bench();
            bench_threads(1);
            return 0;
        } else if (strcmp(argv[i], "q6k") == 0) {
            kn_init();
            printf("kernels_bench: variant %s\n", kn_variant());
            q6k_bench();
            bench_threads(1);
            return 0;
        } else {
            fprintf(stderr, "usage: kernels_bench [hot] [quant] | kernels_bench model | kernels_bench q6k | "
                            "kernels_bench mxfp4\n");
            return 2;
        }
    }
    kn_init();
    kn_set_act_quant(1);
    int has_q8 = kn_act_quant(), has_bf16 = kn_act_bf16();
    kn_set_act_quant(-1);
    printf("kernels_bench: variant %s, %s weights (%s), physical cores %d\n", kn_variant(),
           hot ? "hot" : "cold", hot ? "one copy, cache-resident" : "rotating copies > 3 GiB",
           tp_physical_cores());

    size_t rb = (size_t)2 << 30;
    uint64_t *buf = dfl_malloc(rb);
    for (size_t i = 0; i < rb / 8; i++) buf[i] = i * 0x9e3779b97f4a7c15ull;
    double peak[3] = {0};
    for (int nt = 1; nt <= 2; nt++) {
        bench_threads(nt);
        peak[nt] = read_bandwidth(buf, rb);
        printf("peak read bandwidth, %d thread%s: %.1f GB/s\n", nt, nt > 1 ? "s" : "", peak[nt]);
    }
    free(buf);

    int shapes[2][2] = {{1024, 3072}, {3072, 1024}}; /* rows (out) x cols (in) */
    wt_dtype dts[5] = {WT_F32, WT_F16, WT_BF16, WT_Q8, WT_Q4};
    int Ts[5] = {1, 2, 4, 8, 16};
    float *x = dfl_malloc(sizeof(float) * 16 * 3072), *y = dfl_malloc(sizeof(float) * 16 * 3072);
    for (int i = 0; i < 16 * 3072; i++) x[i] = rndf();

    printf("\n| matrix (out x in) | dtype | thr | T=1 ms | T=2 | T=4 | T=8 | T=16 | T=1 GB/s | %% of peak | T16/T1 |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int s = 0; s < 2; s++)
        for (int d = quant_only ? 3 : 0; d < 5; d++) {
            int isq = dts[d] == WT_Q8 || dts[d] == WT_Q4;
            bmat m;
            bmat_init(&m, dts[d], shapes[s][0], shapes[s][1], hot);
            double gb = wt_bytes(m.w) / 1e9;
            for (int act = 0; act < n_modes(dts[d], has_q8, has_bf16); act++) {
                kn_set_act_quant(act > 0);
                if (act == 2 && bmat_pack(&m) != 0) break;
                for (int nt = 1; nt <= 2; nt++) {
                    bench_threads(nt);
                    double ms[5];
                    for (int i = 0; i < 5; i++) ms[i] = time_matmul(&m, y, x, Ts[i]);
                    printf("| %dx%d | %s%s%s | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.1f | %.0f%% | %.2f |\n",
                           shapes[s][0], shapes[s][1], wt_dtype_name(dts[d]),
                           isq ? " g64" : "", mode_name(dts[d], act), nt,
                           ms[0], ms[1], ms[2], ms[3],
                           ms[4], gb / (ms[0] * 1e-3), 100 * gb / (ms[0] * 1e-3) / peak[nt], ms[4] / ms[0]);
                    fflush(stdout);
                }
            }
            kn_set_act_quant(-1);
            bmat_free(&m);
        }

    /* the LM head of a Qwen3-0.6B-sized model: one copy is already > LLC */
    printf("\n| LM head 151936x1024 | dtype | thr | T=1 ms | T=16 ms | T=1 GB/s | T16/T1 |\n|---|---|---|---|---|---|---|\n");
    wt_dtype lm[3] = {WT_BF16, WT_Q8, WT_Q4};
    for (int d = quant_only ? 1 : 0; d < 3; d++) {
        bmat m;
        bmat_init(&m, lm[d], 151936, 1024, 1);
        float *yl = dfl_malloc(sizeof(float) * 16 * 151936);
        double gb = wt_bytes(m.w) / 1e9;
        for (int act = 0; act < n_modes(lm[d], has_q8, has_bf16); act++) {
            kn_set_act_quant(act > 0);
            if (act == 2 && bmat_pack(&m) != 0) break;
            for (int nt = 1; nt <= 2; nt++) {
                bench_threads(nt);
                double t1 = time_matmul(&m, yl, x, 1), t16 = time_matmul(&m, yl, x, 16);
                printf("| | %s%s | %d | %.2f | %.2f | %.1f | %.2f |\n", wt_dtype_name(lm[d]),
                       mode_name(lm[d], act), nt, t1, t16,
                       gb / (t1 * 1e-3), t16 / t1);
                fflush(stdout);
            }
        }
        kn_set_act_quant(-1);
        free(yl);
        bmat_free(&m);
    }
    bench_threads(1);
    free(x);
    free(y);
    return 0;
}
