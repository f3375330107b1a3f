/* test_kernels.c - kn_matmul / wt_get_row for every dtype and every SIMD
 * variant this CPU has (the tp_ pools themselves: test_threads.c).
 *
 * Accuracy: each output is compared with a double-precision reference
 * ref = sum_j x_j * w_j (w_j dequantized exactly in double). The tolerance
 * is a rounding-error bound for a float dot product split over lane
 * accumulators:   |y - ref| <= (cols/8 + 10) * 2^-24 * mag,
 * mag = sum_j |x_j| * (|s*q_j| + |b|)   (|x_j*w_j| for F32/F16/BF16).
 * (Each lane chain is at most cols/8 long; +10 covers the dequantization,
 * the product and the horizontal reduction.) One wrong or dropped element
 * costs about mag/cols, far above the bound for the shapes used here.
 *
 * Batch invariance is checked bit for bit: row t of a T-row call equals the
 * same row computed alone (T = 1), for T = 1..17 and 32, with NaN/Inf garbage in
 * the other rows, and with 1, 2 and 3 threads - in f32 mode and in q8 mode
 * (int8 activations, kn_set_act_quant) for every variant that has it.
 *
 * q8 mode accuracy (check_q8): the test quantizes x itself by the rule in
 * kernels.h and checks two things per output:
 *   (a) against the exact (double) W . xdeq, xdeq = d_k * xq: within the f32
 *       rounding of the stated chain, (2*nb + 2*ng + g/32 + 4) * 2^-24 * mag
 *       (nb blocks, ng groups, mag = sum |s d_k I_k| + sum |b| |d_k S_k|,
 *       I_k and S_k per half block for Q8 with groups of 16) -
 *       the integer sums must be exact and no block may be lost;
 *   (b) against the exact W . x: the same plus the int8 rounding bound
 *       sum_j |w_j| * amax_k * (1/254 + 2e-7) (|xdeq_j - x_j| <= d_k/2 plus
 *       the rounding of d_k and of x_j * 127/amax_k).
 * The q8 path of each SIMD variant must also give the same bits as the
 * generic C reference of the q8 mode.
 *
 * q8 mode on BF16 weights (bfloat16 activations, check_bf16): against the
 * exact W . bf16(x) within the f32 bound above (cols/16 lane steps), and
 * against W . x within that plus 2^-8 * sum |w_j x_j|.
 *
 * MXFP4 weights (e2m1 codes, e8m0 scales; weight.h) are checked as the
 * others, their values read here from the e2m1 table of the OCP spec, and
 * against their 8-bit form (wt_mx4_to_q8) bit for bit in every variant,
 * both modes, packed and not, T = 1..17, 32, 150 (mxfp4_equals_8bit). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "cpu/cpu.h"
#include "cpu/kernels.h"
#include "cpu/kernels_impl.h"
#include "cpu/threads.h"
#include "util.h"

/* ---- random numbers ---------------------------------------------------- */

/* The pool the matmuls run on (NULL: the calling thread only). */
static tp_pool *pool;
static void use_threads(int n) {
    tp_destroy(pool);
    pool = n > 1 ? tp_create(n) : NULL;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_u64(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float rng_unit(void) { return (float)(rng_u64() >> 40) / 16777216.0f * 2.0f - 1.0f; }

/* ---- test weights ------------------------------------------------------ */

typedef struct {
    wt_weight w;
    void *data, *scales, *biases;
} tweight;

static uint16_t store_scale(wt_dtype t, float v) {
    return t == WT_F16 ? dfl_f32_to_f16(v) : dfl_f32_to_bf16(v);
}

/* Random W[rows][cols] of the given dtype. Q: group g, scales of dtype sd. */
static tweight make_weight(wt_dtype dt, int rows, int cols, int g, wt_dtype sd) {
    tweight tw;
    memset(&tw, 0, sizeof tw);
    wt_weight *w = &tw.w;
    w->dtype = dt;
    w->rows = rows;
    w->cols = cols;
    size_t n = (size_t)rows * cols;
    if (dt == WT_F32) {
        float *d = dfl_malloc(n * 4);
        for (size_t i = 0; i < n; i++) d[i] = rng_unit();
        tw.data = d;
    } else if (dt == WT_F16 || dt == WT_BF16) {
        uint16_t *d = dfl_malloc(n * 2);
        for (size_t i = 0; i < n; i++) {
            float v = rng_unit();
            if (dt == WT_F16 && i % 97 == 5) v *= 1e-6f; /* f16 subnormals */
            if (i % 101 == 7) v = 0.0f;
            d[i] = dt == WT_F16 ? dfl_f32_to_f16(v) : dfl_f32_to_bf16(v);
        }
        tw.data = d;
    } else if (dt == WT_MXFP4) { /* every code, scale bytes 2^-8 .. 2^3 */
        uint8_t *d = dfl_malloc(n / 2), *e = dfl_malloc(n / 32);
        for (size_t i = 0; i < n / 2; i++) d[i] = (uint8_t)rng_u64();
        for (size_t i = 0; i < n / 32; i++) e[i] = (uint8_t)(119 + rng_u64() % 12);
        tw.data = d;
        tw.scales = e;
        w->scales = e;
        w->group_size = 32;
        w->bits = 4;
    } else {
        int bits = dt == WT_Q8 ? 8 : 4;
        size_t words = n * bits / 32, ng = (size_t)rows * (cols / g);
        uint32_t *d = dfl_malloc(words * 4);
        for (size_t i = 0; i < words; i++) d[i] = (uint32_t)rng_u64();
        size_t ss = sd == WT_F32 ? 4 : 2;
        tw.scales = dfl_malloc(ng * ss);
        tw.biases = dfl_malloc(ng * ss);
        for (size_t i = 0; i < ng; i++) {
            float s = (0.5f + 0.5f * (rng_unit() + 1.0f)) / (float)((1 << bits) - 1);
            float b = -0.5f * (1.0f + 0.3f * rng_unit());
            if (sd == WT_F32) {
                ((float *)tw.scales)[i] = s;
                ((float *)tw.biases)[i] = b;
            } else {
                ((uint16_t *)tw.scales)[i] = store_scale(sd, s);
                ((uint16_t *)tw.biases)[i] = store_scale(sd, b);
            }
        }
        tw.data = d;
        w->scales = tw.scales;
        w->biases = tw.biases;
        w->scale_dtype = sd;
        w->group_size = g;
        w->bits = bits;
    }
    w->data = tw.data;
    return tw;
}

static void free_weight(tweight *tw) {
    kn_unpack(&tw->w);
    free(tw->data);
    free(tw->scales);
    free(tw->biases);
}

static double scale_val(const wt_weight *w, const void *p, size_t i) {
    if (w->scale_dtype == WT_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return w->scale_dtype == WT_F16 ? dfl_f16_to_f32(h) : dfl_bf16_to_f32(h);
}

/* e2m1 (OCP MX FP4): code c's value, bit 3 the sign */
static const double e2m1[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};

/* W[r][j] split as s*q + b (s = 1, b = 0 for float dtypes) - exact. MXFP4:
 * q = 2 v + 12 (the integer the int8 paths multiply), s = 2^(e-128),
 * b = -12 s, so that s*q + b = v * 2^(e-127). */
static void elem(const wt_weight *w, int r, int j, double *s, double *q, double *b) {
    size_t i = (size_t)r * w->cols + j;
    *s = 1, *b = 0;
    switch (w->dtype) {
    case WT_MXFP4: {
        int c = ((const uint8_t *)w->data)[i / 2] >> (4 * (i % 2)) & 15;
        *q = 2 * e2m1[c] + 12;
        *s = ldexp(1.0, ((const uint8_t *)w->scales)[i / 32] - 128);
        *b = -12 * *s;
        return;
    }
    case WT_F32: *q = ((const float *)w->data)[i]; return;
    case WT_F16: *q = dfl_f16_to_f32(((const uint16_t *)w->data)[i]); return;
    case WT_BF16: *q = dfl_bf16_to_f32(((const uint16_t *)w->data)[i]); return;
    default: {
        int bits = w->bits, per = 32 / bits;
        uint32_t word = ((const uint32_t *)w->data)[i / per];
        *q = (double)((word >> ((i % per) * bits)) & ((1u << bits) - 1));
        size_t gi = (size_t)r * (w->cols / w->group_size) + j / w->group_size;
        *s = scale_val(w, w->scales, gi);
        *b = scale_val(w, w->biases, gi);
    }
    }
}

/* Check y[T][rows] against the double reference; returns #failures. */
static int check_against_ref(const float *y, const float *x, const wt_weight *w, int T, const char *what) {
    int bad = 0;
    for (int t = 0; t < T; t++)
        for (int r = 0; r < w->rows; r++) {
            double ref = 0, mag = 0, s, q, b;
            for (int j = 0; j < w->cols; j++) {
                elem(w, r, j, &s, &q, &b);
                double xv = x[(size_t)t * w->cols + j];
                ref += xv * (s * q + b);
                mag += fabs(xv) * (fabs(s * q) + fabs(b));
            }
            double tol = (w->cols / 8 + 10) * ldexp(1.0, -24) * mag;
            double got = y[(size_t)t * w->rows + r];
            if (!(fabs(got - ref) <= tol)) {
                if (bad < 3)
                    CHECK(0, "%s: y[%d][%d] = %.9g, ref %.9g, err %.3g > tol %.3g", what, t, r, got,
                          ref, fabs(got - ref), tol);
                bad++;
            }
        }
    return bad;
}

/* Every variant built in (kn_variant_name), run where this CPU can. */
static const char *variants[16];
static int N_VARIANTS;

/* What each variant is meant to have, stated here independently of the
 * library: a q8 (int8-activation) mode, on by default or not, a packed
 * layout, bfloat16 activations (when the CPU has AVX512_BF16). */
static const struct {
    const char *name;
    int q8, q8_default, pack, bf16;
} expect[] = {
    {"generic", 1, 0, 0, 0},
    {"avx2", 1, 1, 1, 0},
    {"avxvnni", 1, 1, 1, 0},
    {"avx512", 1, 1, 1, 0},
    {"avx512vnni", 1, 1, 1, 1},
    {"neon", 1, 1, 0, 0},
    {"neon-dotprod", 1, 1, 0, 0},
    {"neon-i8mm", 1, 1, 0, 0},
};

static int lookup(const char *v) {
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++)
        if (strcmp(expect[i].name, v) == 0) return (int)i;
    return -1;
}
static int has_q8(const char *v) { return lookup(v) >= 0 && expect[lookup(v)].q8; }
static int q8_default(const char *v) { return lookup(v) >= 0 && expect[lookup(v)].q8_default; }
static int has_q8_pack(const char *v) { return lookup(v) >= 0 && expect[lookup(v)].pack; }
static int has_bf16(const char *v) { return lookup(v) >= 0 && expect[lookup(v)].bf16 && cpu_has(CPU_AVX512BF16); }

static void describe(char *buf, size_t n, const char *var, const wt_weight *w, int T) {
    if (w->dtype == WT_MXFP4)
        snprintf(buf, n, "%s MXFP4 [%d x %d]", var, w->rows, w->cols);
    else if (w->dtype == WT_Q8 || w->dtype == WT_Q4)
        snprintf(buf, n, "%s %s g%d %s-scales [%d x %d]", var, wt_dtype_name(w->dtype),
                 w->group_size, wt_dtype_name(w->scale_dtype), w->rows, w->cols);
    else
        snprintf(buf, n, "%s %s [%d x %d]", var, wt_dtype_name(w->dtype), w->rows, w->cols);
    if (T > 0) snprintf(buf + strlen(buf), n - strlen(buf), " T=%d", T);
    if ((w->dtype == WT_Q8 || w->dtype == WT_Q4 || w->dtype == WT_MXFP4) && kn_act_quant())
        snprintf(buf + strlen(buf), n - strlen(buf), " (q8 mode%s)", w->packed ? ", packed" : "");
    if (w->dtype == WT_BF16 && kn_act_bf16()) snprintf(buf + strlen(buf), n - strlen(buf), " (bf16 activations)");
}

/* Weight configurations: dtype, group size, scale dtype. */
typedef struct {
    wt_dtype dt;
    int g;
    wt_dtype sd;
} wconf;

static int all_confs(wconf *c) {
    int n = 0;
    c[n++] = (wconf){WT_F32, 0, WT_F32};
    c[n++] = (wconf){WT_F16, 0, WT_F32};
    c[n++] = (wconf){WT_BF16, 0, WT_F32};
    wt_dtype qs[2] = {WT_Q8, WT_Q4}, sds[3] = {WT_F32, WT_F16, WT_BF16};
    int gs[3] = {32, 64, 128};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
            for (int d = 0; d < 3; d++) c[n++] = (wconf){qs[a], gs[b], sds[d]};
    for (int d = 0; d < 3; d++) c[n++] = (wconf){WT_Q8, 16, sds[d]}; /* GGUF Q6_K's groups */
    c[n++] = (wconf){WT_MXFP4, 32, WT_F32}; /* scale_dtype not read */
    return n;
}

/* ---- tests ------------------------------------------------------------- */

TEST(names_and_bytes) {
    CHECK(strcmp(wt_dtype_name(WT_BF16), "BF16") == 0, "%s", wt_dtype_name(WT_BF16));
    CHECK(strcmp(wt_dtype_name(WT_Q4), "Q4") == 0, "%s", wt_dtype_name(WT_Q4));
    tweight a = make_weight(WT_BF16, 3, 64, 0, WT_F32);
    CHECK(wt_bytes(&a.w) == 3 * 64 * 2, "%zu", wt_bytes(&a.w));
    tweight b = make_weight(WT_Q4, 3, 256, 64, WT_F16);
    /* 3*256/2 bytes of nibbles + 3*4 groups * 2 arrays * 2 bytes */
    CHECK(wt_bytes(&b.w) == 384 + 48, "%zu", wt_bytes(&b.w));
    CHECK(wt_check(&b.w, "b") == 0, "%s", dfl_lasterr());
    b.w.group_size = 48;
    CHECK(wt_check(&b.w, "blk.0.q") == -1 && strstr(dfl_lasterr(), "blk.0.q"), "%s",
          dfl_lasterr());
    b.w.group_size = 16;
    CHECK(wt_check(&b.w, "b") == -1, "Q4 with group 16 accepted");
    b.w.group_size = 64;
    b.w.bits = 8;
    CHECK(wt_check(&b.w, "b") == -1, "bits mismatch accepted");
    tweight c = make_weight(WT_Q8, 3, 96, 16, WT_F32);
    CHECK(wt_check(&c.w, "c") == 0, "Q8 group 16: %s", dfl_lasterr());
    c.w.cols = 80; /* a multiple of 16, not of 32 */
    CHECK(wt_check(&c.w, "c") == -1, "Q8 group 16 with 80 columns accepted");
    c.w.cols = 96;
    c.w.group_size = 8;
    CHECK(wt_check(&c.w, "c") == -1, "Q8 group 8 accepted");
    free_weight(&c);
    /* MXFP4: 4.25 bits a value (nibbles + one e8m0 byte per 32); group 32,
     * scales and no biases */
    tweight x = make_weight(WT_MXFP4, 3, 256, 32, WT_F32);
    CHECK(strcmp(wt_dtype_name(WT_MXFP4), "MXFP4") == 0, "%s", wt_dtype_name(WT_MXFP4));
    CHECK(wt_bytes(&x.w) == 3 * 128 + 3 * 8, "MXFP4 bytes %zu", wt_bytes(&x.w));
    CHECK(wt_check(&x.w, "x") == 0, "MXFP4: %s", dfl_lasterr());
    x.w.group_size = 64;
    CHECK(wt_check(&x.w, "x") == -1, "MXFP4 group 64 accepted");
    x.w.group_size = 32;
    x.w.biases = x.w.scales;
    CHECK(wt_check(&x.w, "x") == -1, "MXFP4 with biases accepted");
    x.w.biases = NULL;
    x.w.cols = 240;
    CHECK(wt_check(&x.w, "x") == -1, "MXFP4 with 240 columns accepted");
    x.w.cols = 256;
    free_weight(&x);
    free_weight(&a);
    free_weight(&b);
}

TEST(variants) {
    kn_init();
    const char *v = kn_variant();
    int found = 0;
    for (int i = 0; i < N_VARIANTS; i++) found |= strcmp(v, variants[i]) == 0;
    CHECK(found, "kn_variant() = %s", v);
    CHECK(kn_force_variant("generic") == 0, "%s", dfl_lasterr());
    CHECK(strcmp(kn_variant(), "generic") == 0, "%s", kn_variant());
    CHECK(kn_force_variant("sse9") == -1, "bogus variant accepted");
    for (int i = 0; i < N_VARIANTS; i++) CHECK(lookup(variants[i]) >= 0, "variant %s: no expectations", variants[i]);
    for (int i = 0; i < N_VARIANTS; i++)
        fprintf(stderr, "  variant %-8s %s\n", variants[i],
                kn_force_variant(variants[i]) == 0 ? "available" : "not on this CPU (skipped)");
}

TEST(get_row_exact) {
    wconf c[32];
    int nc = all_confs(c);
    for (int k = 0; k < nc; k++) {
        int cols = c[k].dt == WT_F32 || c[k].dt == WT_F16 || c[k].dt == WT_BF16 ? 1100 : 1152;
        tweight tw = make_weight(c[k].dt, 5, cols, c[k].g, c[k].sd);
        float *out = dfl_malloc(sizeof(float) * cols);
        int bad = 0;
        for (int r = 0; r < 5; r++) {
            wt_get_row(out, &tw.w, r);
            for (int j = 0; j < cols; j++) {
                double s, q, b;
                elem(&tw.w, r, j, &s, &q, &b);
                /* documented rounding: (float)(s*q) then + b, in float */
                float want = (float)((float)s * (float)q) + (float)b;
                if (tw.w.dtype == WT_F32 || tw.w.dtype == WT_F16 || tw.w.dtype == WT_BF16)
                    want = (float)q;
                if (tw.w.dtype == WT_MXFP4) /* v * 2^(e-127) from the e2m1 table, exact */
                    want = (float)(s * q + b);
                if (memcmp(&out[j], &want, 4) != 0) bad++;
            }
        }
        char d[128];
        describe(d, sizeof d, "get_row", &tw.w, 1);
        CHECK(bad == 0, "%s: %d elements differ", d, bad);
        free(out);
        free_weight(&tw);
    }
}

TEST(matmul_accuracy) {
    wconf c[32];
    int nc = all_confs(c);
    int shapes_f[][2] = {{1, 1}, {5, 7}, {17, 33}, {37, 100}, {3, 1030}};
    int shapes_q[][2] = {{1, 128}, {5, 32}, {17, 96}, {37, 384}, {3, 1152}};
    int Ts[] = {1, 3, 17};
    kn_set_act_quant(0);
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        if (kn_force_variant(variants[vi]) != 0) continue;
        for (int k = 0; k < nc; k++) {
            int isq = c[k].dt == WT_Q8 || c[k].dt == WT_Q4 || c[k].dt == WT_MXFP4;
            for (int si = 0; si < 5; si++) {
                int rows = isq ? shapes_q[si][0] : shapes_f[si][0];
                int cols = isq ? shapes_q[si][1] : shapes_f[si][1];
                if (isq && cols % c[k].g) continue;
                tweight tw = make_weight(c[k].dt, rows, cols, c[k].g, c[k].sd);
                for (int ti = 0; ti < 3; ti++) {
                    int T = Ts[ti];
                    float *x = dfl_malloc(sizeof(float) * T * cols);
                    float *y = dfl_malloc(sizeof(float) * T * rows);
                    for (int i = 0; i < T * cols; i++) x[i] = rng_unit();
                    kn_matmul(pool, y, x, &tw.w, T);
                    char d[128];
                    describe(d, sizeof d, variants[vi], &tw.w, T);
                    check_against_ref(y, x, &tw.w, T, d);
                    free(x);
                    free(y);
                }
                free_weight(&tw);
            }
        }
    }
    kn_set_act_quant(-1);
    kn_init();
}

/* Row t of every T-row call equals the T=1 result for that row, bit for
 * bit; y_solo[t][rows] is the T=1 result. Returns #mismatching rows. */
static int count_diff_rows(const float *y, const float *y_solo, int T, int rows, const int *only) {
    int bad = 0;
    for (int t = 0; t < T; t++) {
        if (only && !only[t]) continue;
        if (memcmp(y + (size_t)t * rows, y_solo + (size_t)t * rows, sizeof(float) * rows) != 0) bad++;
    }
    return bad;
}

static void invariance_case(const char *var, const wconf *c, int rows, int cols, int threads_list, int pack) {
    enum { TMAX = 32 };
    tweight tw = make_weight(c->dt, rows, cols, c->g, c->sd);
    if (pack) CHECK(kn_pack(&tw.w) == 0 && tw.w.packed, "kn_pack: %s", dfl_lasterr());
    float *x = dfl_malloc(sizeof(float) * TMAX * cols);
    float *xg = dfl_malloc(sizeof(float) * TMAX * cols);
    float *solo = dfl_malloc(sizeof(float) * TMAX * rows);
    float *y = dfl_malloc(sizeof(float) * TMAX * rows);
    for (int i = 0; i < TMAX * cols; i++) x[i] = rng_unit();
    char d[128];
    describe(d, sizeof d, var, &tw.w, 0);

    use_threads(1);
    for (int t = 0; t < TMAX; t++) kn_matmul(pool, solo + (size_t)t * rows, x + (size_t)t * cols, &tw.w, 1);

    /* T = 1..17 and 32 on one thread */
    for (int T = 1; T <= TMAX; T = T < 17 ? T + 1 : TMAX + (T == TMAX)) {
        kn_matmul(pool, y, x, &tw.w, T);
        int bad = count_diff_rows(y, solo, T, rows, NULL);
        CHECK(bad == 0, "%s: T=%d: %d rows differ from T=1", d, T, bad);
    }
    /* garbage (NaN, Inf, huge) in the other rows of a T=16 call */
    for (int t = 0; t < 16; t += 5) {
        for (int i = 0; i < 16 * cols; i++) {
            uint64_t u = rng_u64() % 4;
            xg[i] = u == 0 ? NAN : u == 1 ? INFINITY : u == 2 ? -3e38f : rng_unit() * 1e30f;
        }
        memcpy(xg + (size_t)t * cols, x + (size_t)t * cols, sizeof(float) * cols);
        kn_matmul(pool, y, xg, &tw.w, 16);
        int only[16] = {0};
        only[t] = 1;
        int bad = count_diff_rows(y, solo, 16, rows, only);
        CHECK(bad == 0, "%s: row %d of a T=16 call with garbage rows differs", d, t);
    }
    /* thread counts */
    for (int nt = 2; nt <= 3 && threads_list; nt++) {
        use_threads(nt);
        for (int T = 1; T <= 16; T += 15) {
            kn_matmul(pool, y, x, &tw.w, T);
            int bad = count_diff_rows(y, solo, T, rows, NULL);
            CHECK(bad == 0, "%s: T=%d with %d threads: %d rows differ", d, T, nt, bad);
        }
    }
    use_threads(1);
    free(x);
    free(xg);
    free(solo);
    free(y);
    free_weight(&tw);
}

TEST(batch_invariance) {
    /* every dtype; Q in a few group/scale combinations; two K blocks
     * (cols > 1024) and a row count that is not a multiple of the tiles */
    wconf c[] = {
        {WT_F32, 0, WT_F32},   {WT_F16, 0, WT_F32},    {WT_BF16, 0, WT_F32},
        {WT_Q8, 32, WT_F16},   {WT_Q8, 64, WT_BF16},   {WT_Q8, 128, WT_F32},
        {WT_Q4, 32, WT_BF16},  {WT_Q4, 64, WT_F16},    {WT_Q4, 128, WT_F32},
        {WT_Q8, 16, WT_F32},   {WT_Q8, 16, WT_F16},    {WT_MXFP4, 32, WT_F32},
    };
    for (int q8 = 0; q8 < 2; q8++) {
        kn_set_act_quant(q8);
        for (int vi = 0; vi < N_VARIANTS; vi++) {
            if (kn_force_variant(variants[vi]) != 0 || (q8 && !kn_act_quant())) continue;
            for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
                int isq = c[k].dt == WT_Q8 || c[k].dt == WT_Q4 || c[k].dt == WT_MXFP4;
                if (q8 && !isq && !(c[k].dt == WT_BF16 && kn_act_bf16())) continue;
                invariance_case(variants[vi], &c[k], 70, isq ? 1152 : 1100, 1, 0);
                if (q8 && isq && has_q8_pack(variants[vi])) invariance_case(variants[vi], &c[k], 70, 1152, 1, 1);
            }
        }
    }
    /* q8: more shapes - column tails of 32/64/96 past a 128-column chunk,
     * row counts around the 16- and 32-row tiles */
    kn_set_act_quant(1);
    int shapes[][2] = {{33, 96}, {5, 160}, {47, 224}, {64, 1056}};
    wconf cq[] = {{WT_Q8, 32, WT_BF16}, {WT_Q4, 32, WT_F16}, {WT_Q8, 16, WT_F32}, {WT_MXFP4, 32, WT_F32}};
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        if (kn_force_variant(variants[vi]) != 0 || !kn_act_quant()) continue;
        for (int si = 0; si < 4; si++)
            for (int k = 0; k < 4; k++)
                for (int pack = 0; pack <= has_q8_pack(variants[vi]); pack++)
                    invariance_case(variants[vi], &cq[k], shapes[si][0], shapes[si][1], si == 0, pack);
    }
    kn_set_act_quant(-1);
    kn_init();
}

/* ---- q8 mode ----------------------------------------------------------- */

/* The block rule of kernels.h, restated: xq[32], d (NaN for a non-finite
 * block); returns amax. */
static float q8_block_ref(const float *x, int8_t *xq, float *d) {
    float amax = 0;
    int bad = 0;
    for (int j = 0; j < 32; j++) {
        float a = fabsf(x[j]);
        if (isnan(a) || isinf(a)) bad = 1;
        else if (a > amax) amax = a;
    }
    memset(xq, 0, 32);
    *d = bad ? NAN : 0.0f;
    if (bad || amax < 0x1p-100f) return amax;
    float id = 127.0f / amax;
    *d = amax / 127.0f;
    for (int j = 0; j < 32; j++) xq[j] = (int8_t)rintf(x[j] * id);
    return amax;
}

/* Check a q8-mode y[T][rows] as the header says; returns #failures and the
 * largest |y - W.x| / (int8 bound) seen in *worst (if not NULL). */
static int check_q8(const float *y, const float *x, const wt_weight *w, int T, const char *what, double *worst) {
    int bad = 0, cols = w->cols, g = w->group_size, nb = cols / 32, ng = cols / g;
    double tmul = (2.0 * nb + 2.0 * ng + g / 32 + 4) * ldexp(1.0, -24);
    int piece = g < 32 ? g : 32; /* columns of one I: a block, or a group of 16 */
    for (int t = 0; t < T; t++)
        for (int r = 0; r < w->rows; r++) {
            double ref_deq = 0, ref_x = 0, mag = 0, tol_x = 0, s, q, b;
            for (int k = 0; k < nb; k++) {
                const float *xb = x + (size_t)t * cols + k * 32;
                int8_t xq[32];
                float d;
                double amax = q8_block_ref(xb, xq, &d);
                for (int j0 = 0; j0 < 32; j0 += piece) {
                    long I = 0, S = 0;
                    for (int j = j0; j < j0 + piece; j++) {
                        elem(w, r, k * 32 + j, &s, &q, &b);
                        I += (long)q * xq[j];
                        S += xq[j];
                        ref_x += (s * q + b) * xb[j];
                        /* a block under 2^-100 is zeroed: |xdeq - x| <= amax */
                        tol_x += fabs(s * q + b) * amax * (amax < 0x1p-100 ? 1.0 : 1.0 / 254 + 2e-7);
                    }
                    ref_deq += s * d * (double)I + b * d * (double)S;
                    mag += fabs(s * d * (double)I) + fabs(b * d * (double)S);
                }
            }
            double got = y[(size_t)t * w->rows + r], tol = tmul * mag;
            if (!(fabs(got - ref_deq) <= tol)) {
                if (bad < 3)
                    CHECK(0, "%s: y[%d][%d] = %.9g, W.xdeq %.9g, err %.3g > tol %.3g", what, t, r, got, ref_deq,
                          fabs(got - ref_deq), tol);
                bad++;
            } else if (!(fabs(got - ref_x) <= tol + tol_x)) {
                if (bad < 3)
                    CHECK(0, "%s: y[%d][%d] = %.9g, W.x %.9g, err %.3g > int8 bound %.3g", what, t, r, got, ref_x,
                          fabs(got - ref_x), tol + tol_x);
                bad++;
            }
            if (worst && tol_x > 0 && fabs(got - ref_x) / tol_x > *worst) *worst = fabs(got - ref_x) / tol_x;
        }
    return bad;
}

/* Rows of x for q8 tests: uniform, plus rows with outliers, a zero block
 * and tiny values, so that block scales vary a lot. */
static void fill_x_q8(float *x, int T, int cols) {
    for (int i = 0; i < T * cols; i++) x[i] = rng_unit();
    for (int t = 1; t < T; t += 2) {
        float *xr = x + (size_t)t * cols;
        xr[(t * 7) % cols] = 40.0f * rng_unit();         /* an outlier */
        for (int j = 0; j < 32 && j < cols; j++) xr[j] = t % 4 == 1 ? 0.0f : xr[j] * 1e-3f;
        if (cols >= 64)
            for (int j = 32; j < 64; j++) xr[j] *= 1e-32f; /* amax < 2^-100: quantized to 0 */
    }
}

TEST(q8_accuracy_and_reference_bits) {
    wconf c[32];
    int nc = all_confs(c);
    int shapes[][2] = {{1, 128}, {5, 32}, {17, 96}, {37, 384}, {3, 1152}, {40, 160}};
    int Ts[] = {1, 3, 17};
    double worst = 0;
    kn_set_act_quant(1);
    for (int k = 0; k < nc; k++) {
        if (c[k].dt != WT_Q8 && c[k].dt != WT_Q4 && c[k].dt != WT_MXFP4) continue;
        for (int si = 0; si < 6; si++) {
            int rows = shapes[si][0], cols = shapes[si][1];
            if (cols % c[k].g) continue;
            tweight tw = make_weight(c[k].dt, rows, cols, c[k].g, c[k].sd);
            for (int ti = 0; ti < 3; ti++) {
                int T = Ts[ti];
                float *x = dfl_malloc(sizeof(float) * T * cols);
                float *y0 = dfl_malloc(sizeof(float) * T * rows), *y = dfl_malloc(sizeof(float) * T * rows);
                fill_x_q8(x, T, cols);
                char d[160];
                CHECK(kn_force_variant("generic") == 0 && kn_act_quant(), "generic has no q8 mode");
                kn_matmul(pool, y0, x, &tw.w, T);
                describe(d, sizeof d, "generic", &tw.w, T);
                check_q8(y0, x, &tw.w, T, d, &worst);
                for (int vi = 1; vi < N_VARIANTS; vi++) {
                    if (kn_force_variant(variants[vi]) != 0 || !kn_act_quant()) continue;
                    for (int pack = 0; pack <= has_q8_pack(variants[vi]); pack++) {
                        if (pack) CHECK(kn_pack(&tw.w) == 0 && tw.w.packed, "kn_pack: %s", dfl_lasterr());
                        kn_matmul(pool, y, x, &tw.w, T);
                        describe(d, sizeof d, variants[vi], &tw.w, T);
                        int diff = 0;
                        for (int i = 0; i < T * rows; i++) diff += memcmp(&y[i], &y0[i], 4) != 0;
                        CHECK(diff == 0, "%s: %d outputs differ from the generic q8 reference", d, diff);
                        kn_unpack(&tw.w);
                    }
                }
                free(x);
                free(y0);
                free(y);
            }
            free_weight(&tw);
        }
    }
    fprintf(stderr, "  q8 mode: largest |y - W.x| = %.3f of the int8 rounding bound\n", worst);
    kn_set_act_quant(-1);
    kn_init();
}

/* The extremes of the integer sums: Q8 weights of 0 and 255 against xq of
 * +-127 (every pair of products at 2 * 255 * 127, past int16: a kernel
 * that lets vpmaddubsw saturate, or that negates q - 128 = -128, gives
 * other bits), Q4 weights of 0 and 15; each variant against the generic
 * reference, packed and not, T = 1 and 5. */
TEST(q8_extreme_products) {
    int rows = 24, cols = 256;
    for (int bits = 4; bits <= 8; bits += 4) {
        for (int g = bits == 8 ? 16 : 32; g <= 64; g *= 2) {
            tweight tw = make_weight(bits == 8 ? WT_Q8 : WT_Q4, rows, cols, g, WT_F32);
            uint8_t *qb = tw.data;
            size_t rb = (size_t)cols * bits / 8;
            for (int r = 0; r < rows; r++)
                for (size_t j = 0; j < rb; j++) /* rows of all-max, all-zero, and mixed runs */
                    qb[r * rb + j] = r % 3 == 0 ? 0xFF : r % 3 == 1 ? 0x00 : (j / 4) % 2 ? 0xFF : 0x00;
            for (int T = 1; T <= 5; T += 4) {
                float *x = dfl_malloc(sizeof(float) * T * cols);
                float *y0 = dfl_malloc(sizeof(float) * T * rows), *y = dfl_malloc(sizeof(float) * T * rows);
                for (int t = 0; t < T; t++)
                    for (int j = 0; j < cols; j++) /* +-1 in every block: xq = +-127 */
                        x[t * cols + j] = t % 3 == 0 ? 1.0f : t % 3 == 1 ? -1.0f : (j / 2) % 2 ? 1.0f : -1.0f;
                kn_set_act_quant(1);
                CHECK(kn_force_variant("generic") == 0 && kn_act_quant(), "generic has no q8 mode");
                kn_matmul(pool, y0, x, &tw.w, T);
                for (int vi = 1; vi < N_VARIANTS; vi++) {
                    if (kn_force_variant(variants[vi]) != 0 || !kn_act_quant()) continue;
                    for (int pack = 0; pack <= has_q8_pack(variants[vi]); pack++) {
                        if (pack) CHECK(kn_pack(&tw.w) == 0 && tw.w.packed, "kn_pack: %s", dfl_lasterr());
                        kn_matmul(pool, y, x, &tw.w, T);
                        char d[160];
                        describe(d, sizeof d, variants[vi], &tw.w, T);
                        int diff = 0;
                        for (int i = 0; i < T * rows; i++) diff += memcmp(&y[i], &y0[i], 4) != 0;
                        CHECK(diff == 0, "%s: %d outputs differ from the generic q8 reference (extremes)", d, diff);
                        kn_unpack(&tw.w);
                    }
                }
                free(x);
                free(y0);
                free(y);
            }
            free_weight(&tw);
            if (bits == 4) break;
        }
    }
    kn_set_act_quant(-1);
    kn_init();
}

/* Zero rows give 0, non-finite x gives NaN in its own row only, and the
 * two modes really differ. */
TEST(q8_special_rows) {
    int rows = 35, cols = 256, T = 4;
    tweight tw = make_weight(WT_Q8, rows, cols, 64, WT_BF16);
    float *x = dfl_malloc(sizeof(float) * T * cols), *y = dfl_malloc(sizeof(float) * T * rows);
    float *yf = dfl_malloc(sizeof(float) * T * rows);
    for (int mode = 0; mode < 2 * N_VARIANTS; mode++) {
        int vi = mode % N_VARIANTS, pack = mode >= N_VARIANTS;
        kn_set_act_quant(1);
        if (kn_force_variant(variants[vi]) != 0 || !kn_act_quant() || (pack && !has_q8_pack(variants[vi]))) continue;
        kn_unpack(&tw.w);
        if (pack) CHECK(kn_pack(&tw.w) == 0 && tw.w.packed, "kn_pack: %s", dfl_lasterr());
        for (int i = 0; i < T * cols; i++) x[i] = rng_unit();
        memset(x, 0, sizeof(float) * cols);  /* row 0: zeros */
        x[1 * cols + 200] = INFINITY;        /* row 1: an Inf */
        x[2 * cols + 5] = NAN;               /* row 2: a NaN */
        for (int t = 1; t <= 2; t++) { /* the T = 1 loop too */
            kn_matmul(pool, y, x + (size_t)t * cols, &tw.w, 1);
            CHECK(isnan(y[0]) && isnan(y[rows - 1]), "%s T=1: non-finite x row %d gives %g", variants[vi], t, y[0]);
        }
        for (int T1 = 1; T1 <= T; T1 += T - 1) {
            kn_matmul(pool, y, x, &tw.w, T1);
            int zero = 1, nan1 = 1, nan2 = 1, fin3 = 1;
            for (int r = 0; r < rows; r++) {
                zero &= y[r] == 0.0f;
                if (T1 > 1) {
                    nan1 &= isnan(y[rows + r]);
                    nan2 &= isnan(y[2 * rows + r]);
                    fin3 &= isfinite(y[3 * rows + r]);
                }
            }
            CHECK(zero && nan1 && nan2 && fin3, "%s T=%d: zero row %d, Inf row NaN %d, NaN row NaN %d, clean row %d",
                  variants[vi], T1, zero, nan1, nan2, fin3);
        }
        kn_set_act_quant(0);
        kn_matmul(pool, yf, x, &tw.w, T);
        CHECK(kn_act_quant() == 0 && memcmp(yf + 3 * rows, y + 3 * rows, sizeof(float) * rows) != 0,
              "%s: f32 and q8 modes give the same bits", variants[vi]);
    }
    free(x);
    free(y);
    free(yf);
    free_weight(&tw);
    kn_set_act_quant(-1);
    kn_init();
}

TEST(act_quant_mode) {
    unsetenv("DFLASH_ACT");
    kn_set_act_quant(-1);
    kn_init();
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        if (kn_force_variant(variants[vi]) != 0) continue;
        CHECK(kn_act_quant() == q8_default(variants[vi]), "%s: default q8 mode %d", variants[vi], kn_act_quant());
        CHECK(kn_act_bf16() == 0, "%s: bf16 activations by default", variants[vi]);
        kn_set_act_quant(1);
        CHECK(kn_act_quant() == has_q8(variants[vi]), "%s: q8 requested: %d", variants[vi], kn_act_quant());
        CHECK(kn_act_bf16() == has_bf16(variants[vi]), "%s: q8 requested, bf16: %d", variants[vi], kn_act_bf16());
        kn_set_act_quant(0);
        CHECK(kn_act_quant() == 0 && kn_act_bf16() == 0, "%s: f32 requested: %d %d", variants[vi], kn_act_quant(),
              kn_act_bf16());
        kn_set_act_quant(-1);
    }
    /* DFLASH_ACT, read by kn_init; an explicit request wins over it */
    setenv("DFLASH_ACT", "f32", 1);
    kn_init();
    CHECK(kn_act_quant() == 0, "DFLASH_ACT=f32: %d", kn_act_quant());
    kn_set_act_quant(1);
    kn_init();
    CHECK(kn_act_quant() == has_q8(kn_variant()), "request after DFLASH_ACT=f32: %d", kn_act_quant());
    kn_set_act_quant(-1);
    setenv("DFLASH_ACT", "q8", 1);
    kn_init();
    CHECK(kn_act_bf16() == has_bf16(kn_variant()), "DFLASH_ACT=q8 on %s: bf16 activations %d", kn_variant(),
          kn_act_bf16());
    CHECK(kn_force_variant("generic") == 0 && kn_act_quant() == 1, "DFLASH_ACT=q8 on generic: %d", kn_act_quant());
    unsetenv("DFLASH_ACT");
    /* kn_pack packs only Q8/Q4, in q8 mode, for a variant with a layout */
    tweight q = make_weight(WT_Q4, 20, 128, 32, WT_F16), b = make_weight(WT_BF16, 20, 128, 0, WT_F32);
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        if (kn_force_variant(variants[vi]) != 0) continue;
        for (int on = 0; on < 2; on++) {
            kn_set_act_quant(on);
            CHECK(kn_pack(&q.w) == 0 && kn_pack(&b.w) == 0, "%s", dfl_lasterr());
            CHECK(!b.w.packed && (q.w.packed != NULL) == (on && has_q8_pack(variants[vi])), "%s q8=%d: packed %p",
                  variants[vi], on, q.w.packed);
            kn_unpack(&q.w);
            kn_unpack(&q.w); /* twice is fine */
        }
    }
    free_weight(&q);
    free_weight(&b);
    kn_set_act_quant(-1);
    kn_init();
}

/* Check a bf16-activation y[T][rows] as the header says; returns #failures. */
static int check_bf16(const float *y, const float *x, const wt_weight *w, int T, const char *what) {
    int bad = 0;
    for (int t = 0; t < T; t++)
        for (int r = 0; r < w->rows; r++) {
            double ref_b = 0, ref_x = 0, mag = 0, s, q, b;
            for (int j = 0; j < w->cols; j++) {
                elem(w, r, j, &s, &q, &b);
                float xv = x[(size_t)t * w->cols + j];
                ref_b += q * dfl_bf16_to_f32(dfl_f32_to_bf16(xv));
                ref_x += q * xv;
                mag += fabs(q * xv);
            }
            double tol = (w->cols / 16 + 10) * ldexp(1.0, -24) * mag * 1.01, got = y[(size_t)t * w->rows + r];
            if (!(fabs(got - ref_b) <= tol) || !(fabs(got - ref_x) <= tol + ldexp(1.0, -8) * mag)) {
                if (bad < 3)
                    CHECK(0, "%s: y[%d][%d] = %.9g, W.bf16(x) %.9g (tol %.3g), W.x %.9g", what, t, r, got, ref_b, tol,
                          ref_x);
                bad++;
            }
        }
    return bad;
}

TEST(bf16_activations) {
    int shapes[][2] = {{1, 1}, {5, 7}, {17, 33}, {37, 100}, {3, 1030}, {20, 2100}};
    int Ts[] = {1, 3, 17};
    kn_set_act_quant(1);
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        if (kn_force_variant(variants[vi]) != 0 || !kn_act_bf16()) continue;
        for (int si = 0; si < 6; si++) {
            int rows = shapes[si][0], cols = shapes[si][1];
            tweight tw = make_weight(WT_BF16, rows, cols, 0, WT_F32);
            for (int ti = 0; ti < 3; ti++) {
                int T = Ts[ti];
                float *x = dfl_malloc(sizeof(float) * T * cols), *y = dfl_malloc(sizeof(float) * T * rows);
                float *yf = dfl_malloc(sizeof(float) * T * rows);
                for (int i = 0; i < T * cols; i++) x[i] = rng_unit();
                kn_matmul(pool, y, x, &tw.w, T);
                char d[160];
                describe(d, sizeof d, variants[vi], &tw.w, T);
                check_bf16(y, x, &tw.w, T, d);
                if (cols >= 100) { /* the mode is really on */
                    kn_set_act_quant(0);
                    kn_matmul(pool, yf, x, &tw.w, T);
                    kn_set_act_quant(1);
                    CHECK(memcmp(y, yf, sizeof(float) * T * rows) != 0, "%s: same bits as f32 mode", d);
                }
                free(x);
                free(y);
                free(yf);
            }
            free_weight(&tw);
        }
    }
    kn_set_act_quant(-1);
    kn_init();
}

/* A large T (several KN_TBLOCK passes) against T=1, one dtype per kind. */
TEST(large_T) {
    int T = 150, rows = 20, cols = 256;
    for (int mode = 0; mode < 3 * N_VARIANTS; mode++) {
        int vi = mode % N_VARIANTS, q8 = mode / N_VARIANTS > 0, pack = mode / N_VARIANTS == 2;
        kn_set_act_quant(q8);
        if (kn_force_variant(variants[vi]) != 0 || (q8 && !kn_act_quant()) || (pack && !has_q8_pack(variants[vi])))
            continue;
        for (int k = q8 && !kn_act_bf16(); k < 4; k++) {
            wt_dtype dt = k == 0 ? WT_BF16 : k == 2 ? WT_Q4 : WT_Q8;
            if (pack && dt == WT_BF16) continue;
            tweight tw = make_weight(dt, rows, cols, k == 3 ? 16 : 64, k == 3 ? WT_F32 : WT_BF16);
            if (pack) CHECK(kn_pack(&tw.w) == 0 && tw.w.packed, "kn_pack: %s", dfl_lasterr());
            float *x = dfl_malloc(sizeof(float) * T * cols);
            float *y = dfl_malloc(sizeof(float) * T * rows);
            float *y1 = dfl_malloc(sizeof(float) * rows);
            for (int i = 0; i < T * cols; i++) x[i] = rng_unit();
            kn_matmul(pool, y, x, &tw.w, T);
            int bad = 0;
            for (int t = 0; t < T; t++) {
                kn_matmul(pool, y1, x + (size_t)t * cols, &tw.w, 1);
                bad += memcmp(y1, y + (size_t)t * rows, sizeof(float) * rows) != 0;
            }
            char d[128];
            describe(d, sizeof d, variants[vi], &tw.w, T);
            CHECK(bad == 0, "%s: %d rows differ from T=1", d, bad);
            if (q8 && dt == WT_BF16) check_bf16(y, x, &tw.w, T, d);
            else if (q8) check_q8(y, x, &tw.w, T, d, NULL);
            else check_against_ref(y, x, &tw.w, T, d);
            free(x);
            free(y);
            free(y1);
            free_weight(&tw);
        }
    }
    kn_set_act_quant(-1);
    kn_init();
}

/* The result does not depend on where x lives (kn_matmul copies a
 * misaligned x to an aligned buffer, and uses an aligned one in place). */
TEST(x_alignment) {
    int T = 5, rows = 40, cols = 256;
    float *buf = aligned_alloc(64, sizeof(float) * (T * cols + 16));
    float *y0 = dfl_malloc(sizeof(float) * T * rows), *y1 = dfl_malloc(sizeof(float) * T * rows);
    for (int mode = 0; mode < 2 * N_VARIANTS; mode++) {
        int vi = mode % N_VARIANTS, q8 = mode / N_VARIANTS;
        kn_set_act_quant(q8);
        if (kn_force_variant(variants[vi]) != 0 || (q8 && !kn_act_quant())) continue;
        for (int k = q8 ? 3 : 0; k < 5; k++) {
            wt_dtype dt = (wt_dtype)k;
            tweight tw = make_weight(dt, rows, cols, 64, WT_F16);
            for (int i = 0; i < T * cols; i++) buf[i] = rng_unit();
            kn_matmul(pool, y0, buf, &tw.w, T);
            memmove(buf + 3, buf, sizeof(float) * T * cols);
            kn_matmul(pool, y1, buf + 3, &tw.w, T);
            char d[128];
            describe(d, sizeof d, variants[vi], &tw.w, T);
            CHECK(memcmp(y0, y1, sizeof(float) * T * rows) == 0, "%s: x at +12 bytes gives other bits", d);
            free_weight(&tw);
        }
    }
    free(buf);
    free(y0);
    free(y1);
    kn_set_act_quant(-1);
    kn_init();
}

/* kn_matmul_n = separate kn_matmul calls, bit for bit: in both activation
 * modes, packed and not, Q8/Q4/BF16, with rows that are not multiples of
 * the tile, and with weights it cannot share x between (other cols). */
TEST(matmul_n_equals_separate_calls) {
    wt_dtype dts[] = {WT_Q8, WT_Q4, WT_BF16, WT_Q8, WT_MXFP4};
    int gss[] = {64, 64, 64, 16, 32}; /* Q8 with groups of 16; MXFP4 (gpt-oss's gate / up) */
    int rows[3] = {256, 128, 40}, Ts[] = {1, 3, 16};
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        if (kn_force_variant(variants[vi]) != 0) continue;
        for (int mode = 0; mode < 2; mode++)
            for (int pack = 0; pack < 2; pack++)
                for (int di = 0; di < 5; di++) {
                    kn_set_act_quant(mode);
                    tweight tw[4];
                    for (int i = 0; i < 3; i++) tw[i] = make_weight(dts[di], rows[i], 256, gss[di], WT_BF16);
                    tw[3] = make_weight(dts[di], 64, 128, gss[di], WT_BF16); /* other cols: separate calls */
                    if (pack)
                        for (int i = 0; i < 4; i++) CHECK(kn_pack(&tw[i].w) == 0, "pack");
                    for (int ti = 0; ti < 3; ti++) {
                        int T = Ts[ti];
                        float *x = dfl_malloc64(sizeof(float) * T * 256), *ya[4], *yb[4];
                        for (int i = 0; i < T * 256; i++) x[i] = rng_unit();
                        const wt_weight *ws[4];
                        for (int i = 0; i < 4; i++) {
                            ws[i] = &tw[i].w;
                            ya[i] = dfl_malloc(sizeof(float) * T * ws[i]->rows);
                            yb[i] = dfl_malloc(sizeof(float) * T * ws[i]->rows);
                        }
                        kn_matmul_n(pool, ya, x, ws, 3, T);
                        for (int i = 0; i < 3; i++) kn_matmul(pool, yb[i], x, ws[i], T);
                        int same = 1;
                        for (int i = 0; i < 3; i++) same &= memcmp(ya[i], yb[i], sizeof(float) * T * ws[i]->rows) == 0;
                        CHECK(same, "%s mode %d pack %d %s g%d T=%d: kn_matmul_n differs", variants[vi], mode, pack,
                              wt_dtype_name(dts[di]), gss[di], T);
                        const wt_weight *mixed[2] = {ws[0], ws[3]};
                        float *ym[2] = {ya[0], ya[3]};
                        kn_matmul_n(pool, ym, x, mixed, 2, T);
                        kn_matmul(pool, yb[3], x, ws[3], T);
                        CHECK(memcmp(ya[3], yb[3], sizeof(float) * T * 64) == 0 &&
                                  memcmp(ya[0], yb[0], sizeof(float) * T * 256) == 0,
                              "%s mode %d: mixed shapes differ", variants[vi], mode);
                        for (int i = 0; i < 4; i++) {
                            free(ya[i]);
                            free(yb[i]);
                        }
                        free(x);
                    }
                    for (int i = 0; i < 4; i++) free_weight(&tw[i]);
                }
    }
    kn_set_act_quant(-1);
    kn_init();
}

/* MXFP4 against its exact 8-bit form (wt_mx4_to_q8: q = 2 v + 12, bf16
 * scale 2^(e-128) and bias -12 s, group 32: the layout gpt-oss's experts
 * were loaded into before they stayed at 4 bits): the same bits in every
 * variant, in both activation modes, packed and not, for T = 1..17, 32 and
 * 150, on shapes with row and column tails and K blocks past 1024 columns,
 * with rows that drive the integer sums to their extremes (every code 7 =
 * +6, q = 24, or 15 = -6, q = 0) against x rows of +-1 (xq = +-127): an
 * AVX2 int16 lane that held 8 pair sums of 2 * 24 * 127 would saturate. */
TEST(mxfp4_equals_8bit) {
    static const int shapes[][2] = {{1, 32}, {16, 96}, {33, 160}, {70, 1152}, {24, 2880}};
    enum { TMAX = 150 };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int rows = shapes[si][0], cols = shapes[si][1];
        tweight mx = make_weight(WT_MXFP4, rows, cols, 32, WT_F32);
        uint8_t *nib = mx.data;
        for (int r = 1; r < rows; r += 4) memset(nib + (size_t)r * cols / 2, 0x77, (size_t)cols / 2);
        for (int r = 2; r < rows; r += 4) memset(nib + (size_t)r * cols / 2, 0xFF, (size_t)cols / 2);
        tweight q8 = make_weight(WT_Q8, rows, cols, 32, WT_BF16);
        wt_mx4_to_q8(&mx.w, q8.data, q8.scales, q8.biases);
        float *x = dfl_malloc(sizeof(float) * TMAX * cols);
        float *ya = dfl_malloc(sizeof(float) * TMAX * rows), *yb = dfl_malloc(sizeof(float) * TMAX * rows);
        fill_x_q8(x, TMAX, cols);
        for (int t = 4; t < TMAX; t += 5)
            for (int j = 0; j < cols; j++) x[(size_t)t * cols + j] = t % 2 ? -1.0f : (j / 3) % 2 ? 1.0f : -1.0f;
        for (int vi = 0; vi < N_VARIANTS; vi++)
            for (int mode = 0; mode < 2; mode++) {
                kn_set_act_quant(mode);
                if (kn_force_variant(variants[vi]) != 0 || (mode && !kn_act_quant())) continue;
                for (int pack = 0; pack <= (mode && has_q8_pack(variants[vi])); pack++) {
                    if (pack)
                        CHECK(kn_pack(&mx.w) == 0 && mx.w.packed && kn_pack(&q8.w) == 0 && q8.w.packed, "kn_pack: %s",
                              dfl_lasterr());
                    int bad = 0, worst_T = 0;
                    for (int T = 1; T <= TMAX; T = T < 17 ? T + 1 : T == 17 ? 32 : T == 32 ? TMAX : TMAX + 1) {
                        kn_matmul(pool, ya, x, &mx.w, T);
                        kn_matmul(pool, yb, x, &q8.w, T);
                        int d = 0;
                        for (int i = 0; i < T * rows; i++) d += memcmp(&ya[i], &yb[i], 4) != 0;
                        if (d > bad) bad = d, worst_T = T;
                    }
                    char dsc[160];
                    describe(dsc, sizeof dsc, variants[vi], &mx.w, worst_T);
                    CHECK(bad == 0, "%s: %d outputs differ from the 8-bit form's", dsc, bad);
                    kn_unpack(&mx.w);
                    kn_unpack(&q8.w);
                }
            }
        free(x);
        free(ya);
        free(yb);
        free_weight(&mx);
        free_weight(&q8);
    }
    kn_set_act_quant(-1);
    kn_init();
}

int main(void) {
    for (int i = 0; i < kn_variant_count() && i < 16; i++) variants[N_VARIANTS++] = kn_variant_name(i);
    fprintf(stderr, "cpu features: %s\n", cpu_features());
    RUN(names_and_bytes);
    RUN(variants);
    RUN(get_row_exact);
    RUN(matmul_accuracy);
    RUN(act_quant_mode);
    RUN(q8_accuracy_and_reference_bits);
    RUN(q8_extreme_products);
    RUN(q8_special_rows);
    RUN(bf16_activations);
    RUN(batch_invariance);
    RUN(large_T);
    RUN(x_alignment);
    RUN(matmul_n_equals_separate_calls);
    RUN(mxfp4_equals_8bit);
    CHECK_DONE("test_kernels");
}
