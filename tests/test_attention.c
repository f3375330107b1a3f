/* test_attention.c - at_run against a double-precision softmax, and a row's
 * bits independent of the other rows in the call (T), in every variant this
 * CPU has (one per instruction-set family): head dims on and off the fast
 * paths (AVX-512: multiples of 16 up to 256; AVX2: multiples of 8 up to 256),
 * GQA groups of 1..8 heads, depths across the 64-key blocks and the 8- and
 * 16-key steps, causal target rows and non-causal draft blocks (context +
 * block keys), T of 9, 16, 17 (row blocks of 8 and a row alone), at 1, 2
 * and 3 threads; and gpt-oss's sliding windows with sink logits, from a flat
 * and from a ring cache (the same bits), draft blocks over a windowed
 * context, and Gemma-4's unscaled scores (at_job.scale 1). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/attention.h"
#include "check.h"
#include "cpu/kernels.h"
#include "cpu/threads.h"
#include "util.h"

/* The pool at_run uses (NULL: the calling thread). */
static tp_pool *pool;

static uint32_t rng = 2463534242u;
static float rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return (float)(rng >> 8) / 8388608.0f - 1.0f;
}

typedef struct {
    int nh, nkv, hd, na, nb, causal, T;
    float *q, *Ka, *Va, *Kb, *Vb;
    int window;   /* causal rows see their last `window` keys; 0: all */
    float *sinks; /* [nh] sink logits, or NULL */
    float scale;  /* the scores' multiplier; 0: 1/sqrt(hd) */
} setup;

static float case_scale; /* at_job.scale of the cases made now (Gemma-4: 1) */

static void fill(float *p, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) p[i] = rnd() * scale;
}

static void make(setup *s, int nh, int nkv, int hd, int na, int nb, int causal, int T) {
    *s = (setup){nh, nkv, hd, na, nb, causal, T, NULL, NULL, NULL, NULL, NULL, 0, NULL, case_scale};
    int kvd = nkv * hd, rows_a = na + (causal ? T : 0);
    s->q = dfl_malloc64(sizeof(float) * (size_t)T * nh * hd);
    s->Ka = dfl_malloc64(sizeof(float) * (size_t)(rows_a + 1) * kvd);
    s->Va = dfl_malloc64(sizeof(float) * (size_t)(rows_a + 1) * kvd);
    s->Kb = dfl_malloc64(sizeof(float) * (size_t)(nb + 1) * kvd);
    s->Vb = dfl_malloc64(sizeof(float) * (size_t)(nb + 1) * kvd);
    /* scores up to ~|hd|/sqrt(hd): peaked and flat rows (unscaled cases: q
     * smaller by sqrt(hd), the same spread of scores) */
    fill(s->q, (size_t)T * nh * hd, case_scale != 0 ? 2.0f / sqrtf((float)hd) : 2.0f);
    fill(s->Ka, (size_t)rows_a * kvd, 1.0f);
    fill(s->Va, (size_t)rows_a * kvd, 1.0f);
    fill(s->Kb, (size_t)nb * kvd, 1.0f);
    fill(s->Vb, (size_t)nb * kvd, 1.0f);
}

static void drop(setup *s) {
    free(s->q);
    free(s->Ka);
    free(s->Va);
    free(s->Kb);
    free(s->Vb);
    free(s->sinks);
}

/* rows [t0, t0 + T) of the setup, as one call */
static void run_rows(const setup *s, int t0, int T, float *out) {
    /* context keys as a cache [nkv][rows][hd], block keys as rows [nb][nkv*hd] */
    size_t rows_a = (size_t)s->na + (s->causal ? s->T : 0);
    at_job J = {.out = out, .q = s->q + (size_t)t0 * s->nh * s->hd, .Ka = s->Ka, .Va = s->Va,
                .Kb = s->nb ? s->Kb : NULL, .Vb = s->nb ? s->Vb : NULL, .na = s->causal ? s->na + t0 : s->na,
                .nb = s->nb, .causal = s->causal, .nh = s->nh, .nkv = s->nkv, .hd = s->hd, .a_head = rows_a * s->hd,
                .a_row = (size_t)s->hd, .b_head = (size_t)s->hd, .b_row = (size_t)s->nkv * s->hd, .sinks = s->sinks,
                .window = s->window, .scale = s->scale};
    at_run(pool, &J, T);
}

/* The same call with the context keys in a ring of R rows (key j at row
 * j % R, later keys over earlier ones, as a sliding layer's cache holds
 * them): R = window + T keeps every key the rows see. */
static void run_rows_ring(const setup *s, int t0, int T, float *out) {
    int R = s->window + s->T, kvd = s->nkv * s->hd, rows_a = s->na + s->T;
    float *Kr = dfl_malloc64(sizeof(float) * (size_t)R * kvd), *Vr = dfl_malloc64(sizeof(float) * (size_t)R * kvd);
    for (int h = 0; h < s->nkv; h++)
        for (int j = 0; j < rows_a; j++) {
            size_t src = ((size_t)h * rows_a + j) * s->hd, dst = ((size_t)h * R + j % R) * s->hd;
            memcpy(Kr + dst, s->Ka + src, sizeof(float) * s->hd);
            memcpy(Vr + dst, s->Va + src, sizeof(float) * s->hd);
        }
    at_job J = {.out = out, .q = s->q + (size_t)t0 * s->nh * s->hd, .Ka = Kr, .Va = Vr, .na = s->na + t0, .causal = 1,
                .nh = s->nh, .nkv = s->nkv, .hd = s->hd, .a_head = (size_t)R * s->hd, .a_row = (size_t)s->hd,
                .sinks = s->sinks, .window = s->window, .ring = R, .scale = s->scale};
    at_run(pool, &J, T);
    free(Kr);
    free(Vr);
}

/* double-precision reference of row t, head h */
static double ref_err(const setup *s, int t, const float *out) {
    int hd = s->hd, kvd = s->nkv * hd, grp = s->nh / s->nkv;
    int na = s->causal ? s->na + t + 1 : s->na, n = na + s->nb;
    double worst = 0, *w = dfl_malloc(sizeof(double) * (size_t)n);
    for (int h = 0; h < s->nh; h++) {
        const float *q = s->q + ((size_t)t * s->nh + h) * hd;
        int kh = h / grp;
        double mx = s->sinks ? s->sinks[h] : -INFINITY, sum = 0;
        size_t rows_a = (size_t)s->na + (s->causal ? s->T : 0);
        int lo = s->window && na > s->window ? na - s->window : 0;
        for (int j = 0; j < lo; j++) w[j] = -INFINITY;
        for (int j = lo; j < n; j++) {
            const float *k = j < na ? s->Ka + (kh * rows_a + j) * hd : s->Kb + (size_t)(j - na) * kvd + (size_t)kh * hd;
            double d = 0;
            for (int i = 0; i < hd; i++) d += (double)q[i] * k[i];
            w[j] = s->scale != 0 ? d * s->scale : d / sqrt((double)hd);
            mx = w[j] > mx ? w[j] : mx;
        }
        for (int j = 0; j < n; j++) sum += (w[j] = exp(w[j] - mx));
        if (s->sinks) sum += exp(s->sinks[h] - mx);
        for (int i = 0; i < hd; i++) {
            double o = 0;
            for (int j = 0; j < n; j++) {
                const float *v = j < na ? s->Va + (kh * rows_a + j) * hd : s->Vb + (size_t)(j - na) * kvd + (size_t)kh * hd;
                o += w[j] / sum * v[i];
            }
            double e = fabs(o - out[(size_t)h * hd + i]);
            worst = e > worst ? e : worst;
        }
    }
    free(w);
    return worst;
}

static double worst_err; /* the largest |out - ref| of the variant under test */

/* window > 0: causal rows with a sliding window and sinks, also run from a
 * ring cache (same bits) */
static void check_case_w(int nh, int nkv, int hd, int na, int nb, int causal, int T, int window) {
    setup s;
    make(&s, nh, nkv, hd, na, nb, causal, T);
    if (window) {
        s.window = window;
        s.sinks = dfl_malloc(sizeof(float) * (size_t)nh);
        fill(s.sinks, (size_t)nh, 3.0f);
    }
    size_t row = (size_t)nh * hd;
    float *all = dfl_malloc64(sizeof(float) * T * row), *one = dfl_malloc64(sizeof(float) * row);
    run_rows(&s, 0, T, all);
    if (window && causal) {
        float *rg = dfl_malloc64(sizeof(float) * T * row);
        run_rows_ring(&s, 0, T, rg);
        CHECK(memcmp(rg, all, sizeof(float) * T * row) == 0,
              "%s nh %d nkv %d hd %d na %d window %d T %d: the ring cache changes bits", kn_variant(), nh, nkv, hd,
              na, window, T);
        free(rg);
    }
    for (int t = 0; t < T; t++) {
        double e = ref_err(&s, t, all + t * row);
        worst_err = e > worst_err ? e : worst_err;
        CHECK(e < 2e-6, /* every variant measured below 3e-7 (a wrong exp polynomial term: 1.7e-5) */ "%s nh %d nkv %d hd %d na %d nb %d causal %d T %d row %d: |out - ref| %.2e", kn_variant(), nh,
              nkv, hd, na, nb, causal, T, t, e);
        run_rows(&s, t, 1, one); /* the same row alone: same bits */
        CHECK(memcmp(one, all + t * row, sizeof(float) * row) == 0,
              "%s nh %d nkv %d hd %d na %d nb %d causal %d: row %d of T=%d differs from T=1", kn_variant(), nh, nkv,
              hd, na, nb, causal, t, T);
    }
    free(all);
    free(one);
    drop(&s);
}

static void check_case(int nh, int nkv, int hd, int na, int nb, int causal, int T) {
    check_case_w(nh, nkv, hd, na, nb, causal, T, 0);
}

static void all_cases(void) {
    /* 24, 72: the AVX2 fast path only (multiples of 8, not of 16); 320: past
     * every fast path */
    int hds[] = {16, 64, 128, 80, 24, 72, 256, 320};
    /* GQA groups of 1, 2, 3, 4, 5 (AVX2: passes of 4 + 1) and 8 heads */
    int groups[][2] = {{2, 2}, {4, 2}, {6, 2}, {8, 2}, {10, 2}, {16, 2}, {4, 4}};
    int depths[] = {0, 1, 63, 64, 65, 200};
    int nhd = (int)(sizeof hds / sizeof hds[0]), ng = (int)(sizeof groups / sizeof groups[0]);
    for (int h = 0; h < nhd; h++)
        for (int g = 0; g < ng; g++)
            for (int d = 0; d < 6; d++) {
                if ((hds[h] >= 256 || hds[h] < 64) && (d + g) % 2) continue; /* keep the run short */
                /* T = 17: two full blocks of 8 rows and a row alone */
                int T = d % 3 == 0 ? 17 : d % 3 == 1 ? 9 : 16;
                check_case(groups[g][0], groups[g][1], hds[h], depths[d], 0, 1, T);
                if (depths[d] > 0) check_case(groups[g][0], groups[g][1], hds[h], depths[d], 16, 0, d % 2 ? 16 : 17);
            }
    /* sliding windows with sinks (gpt-oss): windows shorter than a row
     * block, across the 64-key block edges, and longer than the depth */
    int windows[] = {1, 8, 63, 64, 65, 128, 300};
    for (int h = 0; h < nhd; h++)
        for (int w = 0; w < 7; w++) {
            int g = (h + w) % ng, d = (h + 2 * w) % 6;
            check_case_w(groups[g][0], groups[g][1], hds[h], depths[d] + 70, 0, 1, w % 2 ? 17 : 9, windows[w]);
            /* a draft block over a windowed context (--draft-window) */
            check_case_w(groups[g][0], groups[g][1], hds[h], depths[d] + 70, 16, 0, w % 2 ? 16 : 17, windows[w]);
        }
    /* unscaled scores (Gemma-4: q and k RMS-normed instead of 1/sqrt(hd)),
     * its sliding window of 8 from a ring and flat, and full layers */
    case_scale = 1.0f;
    for (int h = 0; h < nhd; h++) {
        int g = h % ng, d = (3 * h) % 6;
        check_case_w(groups[g][0], groups[g][1], hds[h], depths[d] + 70, 0, 1, h % 2 ? 17 : 9, 8);
        check_case(groups[g][0], groups[g][1], hds[h], depths[d], 0, 1, 17);
    }
    case_scale = 0;
}

/* Every instruction-set family this CPU runs (at_run follows kn_isa_cur():
 * variants of one family share its loops, so each family runs once), at 1,
 * 2 and 3 threads; with DFLASH_FAST set (tests/isa.sh under qemu) the one
 * in use only. */
TEST(attention_every_variant) {
    kn_isa done[16];
    int n_done = 0, tested = 0, fast = getenv("DFLASH_FAST") != NULL;
    kn_init();
    const char *cur = kn_variant();
    for (int v = 0; v < kn_variant_count(); v++) {
        const char *name = kn_variant_name(v);
        if ((fast && strcmp(name, cur) != 0) || kn_force_variant(name) != 0) continue;
        int seen = 0;
        for (int i = 0; i < n_done; i++) seen |= done[i] == kn_isa_cur();
        if (seen || n_done == 16) continue;
        done[n_done++] = kn_isa_cur();
        tested++;
        fprintf(stderr, "  variant %s\n", name);
        for (int th = 1; th <= 3; th++) {
            pool = th > 1 ? tp_create(th) : NULL;
            all_cases();
            tp_destroy(pool);
            pool = NULL;
        }
        fprintf(stderr, "  attention: %s, largest |out - ref| %.2e\n", kn_variant(), worst_err);
        worst_err = 0;
    }
    CHECK(tested >= 1, "no variant ran");
    kn_init();
}

int main(void) {
    kn_init();
    RUN(attention_every_variant);
    CHECK_DONE("test_attention");
}
