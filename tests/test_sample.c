/* test_sample.c - the sampler (src/sample.c) against a reference that fully
 * sorts the candidates (the sampler as it was before the partial selection):
 * same token for random logits with and without ties, every top-k / top-p /
 * temperature combination, min_p after them; the logit transforms
 * (logit_bias, repeat / frequency / presence penalties over a window) against
 * their definition; log-probabilities against double arithmetic; reentrant
 * (two threads sampling different logits at once get their single-thread
 * answers); non-finite logits give an error, never an id. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu/kernels.h"
#include "sample.h"
#include "util.h"

/* ---- reference: full qsort of the candidates (single-threaded test use) -- */
static const float *ref_logits;
static int ref_cmp(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (ref_logits[i] != ref_logits[j]) return ref_logits[i] > ref_logits[j] ? -1 : 1;
    return i - j;
}

static int ref_pick(const smp_params *p, const float *logits, int n, int64_t pos) {
    float *prob = malloc(sizeof(float) * (size_t)n);
    int *idx = malloc(sizeof(int) * (size_t)n);
    float mx = logits[0];
    for (int i = 1; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    int k = 0;
    for (int i = 0; i < n; i++)
        if ((logits[i] - mx) / p->temp > -30.0f) idx[k++] = i;
    /* the mass without top-k: 8 lanes by id, each in id order (sample.h) */
    double lane[8] = {0};
    for (int i = 0; i < k; i++) lane[idx[i] & 7] += (double)smp_exp((logits[idx[i]] - mx) / p->temp);
    ref_logits = logits;
    qsort(idx, (size_t)k, sizeof(int), ref_cmp);
    int cut = p->top_k > 0 && p->top_k < k;
    if (cut) k = p->top_k;
    double sum = 0;
    for (int i = 0; i < k; i++) {
        prob[i] = smp_exp((logits[idx[i]] - mx) / p->temp);
        sum += prob[i];
    }
    if (!cut) sum = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
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
    if (p->min_p > 0) { /* prob[0] is the best one's: exp(0) = 1 */
        for (int i = 1; i < k; i++)
            if (prob[i] < p->min_p * prob[0]) {
                k = i;
                break;
            }
        sum = 0;
        for (int i = 0; i < k; i++) sum += prob[i];
    }
    double u = smp_uniform(p->seed, pos) * sum, c = 0;
    int r = idx[k - 1];
    for (int i = 0; i < k; i++) {
        c += prob[i];
        if (u < c) {
            r = idx[i];
            break;
        }
    }
    free(prob);
    free(idx);
    return r;
}

static uint64_t rs = 88172645463325252ull;
static double rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}
static float gauss(void) { return (float)(sqrt(-2 * log(rnd() + 1e-300)) * cos(6.283185307179586 * rnd())); }

/* kind 0: smooth; 1: coarse (many exact ties); 2: a few dominant tokens; 3: flat */
static void fill(float *l, int n, int kind) {
    for (int i = 0; i < n; i++) {
        float g = gauss();
        if (kind == 0) l[i] = 3 * g;
        else if (kind == 1) l[i] = roundf(4 * g) / 2;
        else if (kind == 2) l[i] = g + (rnd() < 0.001 ? 15 : 0);
        else l[i] = 0.01f * g;
    }
}

TEST(matches_full_sort) {
    static const int ns[] = {7, 1000, 151936};
    static const float temps[] = {0.2f, 0.8f, 1.5f};
    static const int topk[] = {0, 1, 3, 40, 1000};
    static const float topp[] = {1.0f, 0.95f, 0.5f, 0.02f};
    int checked = 0, differ = 0;
    for (int a = 0; a < 3; a++) {
        int n = ns[a];
        float *l = malloc(sizeof(float) * (size_t)n);
        void *work = malloc(smp_work_size(n));
        for (int kind = 0; kind < 4; kind++) {
            if (n > 100000 && (kind == 0 || kind == 2)) continue; /* the reference's full sort is slow */
            fill(l, n, kind);
            for (int t = 0; t < 3; t++)
                for (int k = 0; k < 5; k++)
                    for (int q = 0; q < 4; q++) {
                        int reps = n > 100000 ? 1 : 6;
                        for (int r = 0; r < reps; r++) {
                            smp_params p = {.temp = temps[t], .top_k = topk[k], .top_p = topp[q], .seed = 1234 + (uint64_t)r};
                            int64_t pos = 17 * r + k;
                            int got = smp_pick(&p, l, n, pos, work), want = ref_pick(&p, l, n, pos);
                            checked++;
                            if (got != want && differ++ < 5)
                                fprintf(stderr, "  n %d kind %d temp %g top_k %d top_p %g: %d, reference %d\n", n,
                                        kind, temps[t], topk[k], topp[q], got, want);
                        }
                    }
        }
        free(l);
        free(work);
    }
    CHECK(differ == 0, "%d of %d picks differ from the full sort", differ, checked);
    fprintf(stderr, "  %d picks equal to the full-sort reference\n", checked);
}

/* min_p after top-k and top-p: the full-sort reference with the same cut. */
TEST(min_p_matches_full_sort) {
    static const float minp[] = {0.001f, 0.05f, 0.3f, 0.9f, 1.0f};
    static const int topk[] = {0, 40};
    static const float topp[] = {1.0f, 0.9f};
    enum { N = 5000 };
    float *l = malloc(sizeof(float) * N);
    void *work = malloc(smp_work_size(N));
    int checked = 0, differ = 0, cut = 0;
    for (int kind = 0; kind < 4; kind++) {
        fill(l, N, kind);
        for (int m = 0; m < 5; m++)
            for (int k = 0; k < 2; k++)
                for (int q = 0; q < 2; q++)
                    for (int r = 0; r < 8; r++) {
                        smp_params p = {.temp = 1.0f, .top_k = topk[k], .top_p = topp[q], .seed = 99 + (uint64_t)r,
                                        .min_p = minp[m]};
                        smp_params off = p;
                        off.min_p = 0;
                        int got = smp_pick(&p, l, N, r, work), want = ref_pick(&p, l, N, r);
                        cut += got != smp_pick(&off, l, N, r, work);
                        checked++;
                        differ += got != want;
                    }
    }
    CHECK(differ == 0, "%d of %d min_p picks differ from the full sort", differ, checked);
    CHECK(cut > 0, "min_p never changed a pick (of %d)", checked);
    /* min_p 1 keeps only the best token (no ties in kind 0): the argmax */
    fill(l, N, 0);
    smp_params p1 = {.temp = 1.5f, .top_p = 1.0f, .seed = 3, .min_p = 1.0f};
    int bad = 0;
    for (int r = 0; r < 50; r++) bad += smp_pick(&p1, l, N, r, work) != smp_argmax(l, N);
    CHECK(bad == 0, "min_p 1: %d of 50 picks are not the argmax", bad);
    free(l);
    free(work);
}

/* The transforms against a direct reading of their definition: per vocab
 * id, its count in the window, then bias, repeat, frequency, presence. */
static void ref_transform(const smp_transform *t, float *l, int n, const int32_t *hist, int n_hist) {
    for (int i = 0; i < t->n_bias; i++) l[t->bias[i].id] += t->bias[i].bias;
    int from = t->last_n < 0 ? 0 : n_hist - t->last_n < 0 ? 0 : n_hist - t->last_n;
    if (t->last_n == 0) from = n_hist;
    for (int id = 0; id < n; id++) {
        int c = 0;
        for (int h = from; h < n_hist; h++) c += hist[h] == id;
        if (!c) continue;
        float z = l[id];
        if (t->repeat != 1.0f) z = z > 0 ? z / t->repeat : z * t->repeat;
        z -= (float)c * t->frequency + t->presence;
        l[id] = z;
    }
}

TEST(transforms) {
    enum { N = 700, H = 90 };
    float l[N], a[N], b[N];
    int32_t hist[H];
    int *count = calloc(N, sizeof(int));
    for (int i = 0; i < H; i++) hist[i] = (int32_t)(rnd() * 40) * 7; /* repeats */
    smp_bias bias[3] = {{.id = 5, .bias = 3.5f}, {.id = 7, .bias = -100}, {.id = 5, .bias = 1.0f}};
    static const int windows[] = {-1, 0, 1, 10, 64, 500};
    static const float reps[] = {1.0f, 1.3f, 0.7f};
    int bad = 0, changed = 0, zero = 1;
    fill(l, N, 0);
    for (int w = 0; w < 6; w++)
        for (int r = 0; r < 3; r++)
            for (int fp = 0; fp < 3; fp++) {
                smp_transform t = {.bias = bias, .n_bias = fp == 1 ? 3 : 0, .repeat = reps[r],
                                   .frequency = fp == 2 ? 0.4f : fp == 1 ? -0.2f : 0, .presence = fp ? 0.6f : 0,
                                   .last_n = windows[w]};
                memcpy(a, l, sizeof l);
                memcpy(b, l, sizeof l);
                smp_transform_apply(&t, a, N, hist, H, count);
                ref_transform(&t, b, N, hist, H);
                bad += memcmp(a, b, sizeof a) != 0;
                changed += memcmp(a, l, sizeof a) != 0;
                CHECK(smp_transform_active(&t) == (memcmp(a, l, sizeof a) != 0),
                      "active %d but the logits %s (window %d, repeat %g)", smp_transform_active(&t),
                      memcmp(a, l, sizeof a) ? "changed" : "did not change", windows[w], reps[r]);
                for (int i = 0; i < N; i++) zero &= count[i] == 0;
            }
    CHECK(bad == 0, "%d transforms differ from the reference", bad);
    CHECK(changed > 20, "only %d of 54 settings changed the logits", changed);
    CHECK(zero, "the count scratch is not all zero afterwards");
    smp_transform t = {.bias = bias, .n_bias = 3, .repeat = 1, .last_n = 64};
    memcpy(a, l, sizeof l);
    smp_transform_apply(&t, a, N, hist, H, count);
    CHECK(a[5] == l[5] + 3.5f + 1.0f && a[7] == l[7] - 100, "biases add up: %g -> %g", l[5], a[5]);
    free(count);
}

/* log-softmax against double arithmetic over the whole row, the top ids
 * against the full sort */
TEST(logprobs) {
    enum { N = 151936 };
    float *l = malloc(sizeof(float) * N);
    int *idx = malloc(sizeof(int) * N);
    for (int kind = 0; kind < 4; kind++) {
        fill(l, N, kind);
        if (kind == 1) l[77] = NAN;
        double mx = -INFINITY, sum = 0;
        for (int i = 0; i < N; i++)
            if (l[i] > mx) mx = l[i];
        for (int i = 0; i < N; i++)
            if (!isnan(l[i])) sum += exp(l[i] - mx);
        double lse = mx + log(sum);
        int32_t top[20];
        float top_lp[20], lp;
        int k = 0;
        for (int i = 0; i < N; i++)
            if (!isnan(l[i])) idx[k++] = i;
        ref_logits = l;
        qsort(idx, (size_t)k, sizeof(int), ref_cmp);
        double worst = 0;
        for (int id = 0; id < N; id += 997) {
            smp_logprobs(l, N, id, &lp, 20, top, top_lp);
            double want = l[id] - lse, d = fabs(lp - want);
            if (d > worst) worst = d;
        }
        CHECK(worst < 1e-4, "kind %d: log-softmax off by %g", kind, worst);
        smp_logprobs(l, N, 3, &lp, 20, top, top_lp);
        int same = 1;
        for (int i = 0; i < 20; i++) same &= top[i] == idx[i] && fabs(top_lp[i] - (l[idx[i]] - lse)) < 1e-4;
        CHECK(same, "kind %d: the top 20 differ from the full sort (first %d vs %d)", kind, top[0], idx[0]);
        smp_logprobs(l, N, 77, &lp, 0, top, top_lp);
        if (kind == 1) CHECK(lp == -INFINITY, "a NaN logit's logprob is -inf, got %g", lp);
    }
    free(l);
    free(idx);
}

TEST(greedy_unchanged) {
    float l[300];
    fill(l, 300, 1);
    void *work = malloc(smp_work_size(300));
    smp_params p = {.temp = 0, .top_p = 1};
    CHECK(smp_pick(&p, l, 300, 5, work) == smp_argmax(l, 300), "temp 0 is argmax");
    free(work);
}

TEST(non_finite_logits) {
    enum { N = 4096 };
    float *l = malloc(sizeof(float) * N);
    void *work = malloc(smp_work_size(N));
    smp_params p = {.temp = 0.8f, .top_p = 0.9f, .seed = 7};
    for (int i = 0; i < N; i++) l[i] = NAN;
    dfl_seterr("(none)");
    CHECK(smp_pick(&p, l, N, 3, work) == -1 && strstr(dfl_lasterr(), "not finite"), "all NaN: %s", dfl_lasterr());
    for (int i = 0; i < N; i++) l[i] = i == 9 ? INFINITY : 0.5f;
    CHECK(smp_pick(&p, l, N, 3, work) == -1, "+inf");
    for (int i = 0; i < N; i++) l[i] = -INFINITY;
    CHECK(smp_pick(&p, l, N, 3, work) == -1, "all -inf");
    p.top_k = 40;
    for (int i = 0; i < N; i++) l[i] = NAN;
    CHECK(smp_pick(&p, l, N, 3, work) == -1, "all NaN, top-k");
    /* some NaNs, the rest finite: a finite token */
    for (int i = 0; i < N; i++) l[i] = i % 3 ? (float)(i % 17) : NAN;
    for (int pos = 0; pos < 50; pos++) {
        int id = smp_pick(&p, l, N, pos, work);
        CHECK(id >= 0 && id < N && !isnan(l[id]), "partial NaN: id %d", id);
    }
    for (int i = 0; i < N; i++) l[i] = i == 1234 ? 1.0f : -INFINITY;
    p.top_k = 0;
    CHECK(smp_pick(&p, l, N, 3, work) == 1234, "one finite logit");
    free(l);
    free(work);
}

/* ---- two threads at once ------------------------------------------------ */
enum { TN = 30000, TPICKS = 300 };
typedef struct {
    float *l;
    int want[TPICKS], got[TPICKS];
} job;

static void *sampler(void *arg) {
    job *j = arg;
    void *work = malloc(smp_work_size(TN));
    smp_params p = {.temp = 1.0f, .top_p = 1.0f, .seed = 99};
    for (int r = 0; r < TPICKS; r++) j->got[r] = smp_pick(&p, j->l, TN, r, work);
    free(work);
    return NULL;
}

TEST(reentrant) {
    job jobs[2];
    void *work = malloc(smp_work_size(TN));
    smp_params p = {.temp = 1.0f, .top_p = 1.0f, .seed = 99};
    for (int t = 0; t < 2; t++) {
        jobs[t].l = malloc(sizeof(float) * TN);
        fill(jobs[t].l, TN, t ? 1 : 3); /* coarse vs flat: a shared order would mix them up */
        for (int r = 0; r < TPICKS; r++) jobs[t].want[r] = smp_pick(&p, jobs[t].l, TN, r, work);
    }
    pthread_t th[2];
    for (int t = 0; t < 2; t++) pthread_create(&th[t], NULL, sampler, &jobs[t]);
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    int bad = 0;
    for (int t = 0; t < 2; t++)
        for (int r = 0; r < TPICKS; r++) bad += jobs[t].got[r] != jobs[t].want[r];
    CHECK(bad == 0, "%d of %d concurrent picks differ from the single-thread ones", bad, 2 * TPICKS);
    for (int t = 0; t < 2; t++) free(jobs[t].l);
    free(work);
}

/* ---- argmax: every variant = the scalar loop ---------------------------- */
static int argmax_ref(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* pattern p of length n in x (values on a coarse grid: many exact ties) */
static void argmax_input(float *x, int n, int p) {
    for (int i = 0; i < n; i++) x[i] = (float)(int)(gauss() * 4) * 0.5f;
    int a = (int)(rnd() * n), b = (int)(rnd() * n);
    switch (p) {
    case 0: break;
    case 1: for (int i = 0; i < n; i += 1 + n / 5) x[i] = 100.0f; break; /* ties of the maximum */
    case 2: x[a] = x[b] = 100.0f; break;
    case 3: x[0] = NAN; break; /* the scalar loop keeps index 0 */
    case 4: /* NaNs past 0, one right after the maximum in the same SIMD lane */
        x[a] = 100.0f;
        if (a + 8 < n) x[a + 8] = NAN;
        if (a + 16 < n) x[a + 16] = NAN;
        x[b] = NAN;
        break;
    case 5: for (int i = 1; i < n; i++) x[i] = NAN; break; /* x[0] is the answer */
    case 6: for (int i = 0; i < n; i++) x[i] = NAN; break;
    case 7: for (int i = 0; i < n; i++) x[i] = -INFINITY; break;
    case 8: for (int i = 0; i < n; i++) x[i] = i % 3 ? 0.0f : -0.0f; break; /* +0 = -0: index 0 */
    case 9: x[a] = INFINITY; x[b] = INFINITY; x[(a + b) / 2] = NAN; break;
    case 10: x[n - 1] = 100.0f; break; /* in the scalar tail */
    }
}

/* smp_exp against exp in double: within 1 ulp of the float nearest e^d over
 * a dense sweep of (-30, 0]; exactly 1 at 0 (the best candidate's weight). */
TEST(exp_accuracy) {
    int n = 0, bad = 0, exact = 0;
    double worst = 0;
    CHECK(smp_exp(0.0f) == 1.0f && smp_exp(-0.0f) == 1.0f, "smp_exp(0) = %a", (double)smp_exp(0.0f));
    for (int i = 0; i < 2000000 + 150; i++) { /* an even sweep, then tiny values */
        float d = i < 2000000 ? -(float)(29.99999 * i / 2000000) : -ldexpf(1.0f, 1 - (i - 2000000));
        double want = exp((double)d);
        float got = smp_exp(d), near = (float)want;
        double ulp = nextafterf(near, INFINITY) - near, err = fabs((double)got - want) / ulp;
        if (err > worst) worst = err;
        exact += got == near;
        if (err > 1.0 && bad++ < 5) fprintf(stderr, "  d %a: %a, e^d %a (%.2f ulp)\n", (double)d, (double)got, want, err);
        n++;
    }
    CHECK(bad == 0, "%d of %d values beyond 1 ulp", bad, n);
    fprintf(stderr, "  %d values: worst %.3f ulp, %.4f%% the float nearest e^d\n", n, worst, 100.0 * exact / n);
}

/* kind 0: gauss * 3; 1: coarse (ties); 2: flat; 3: NaN, -inf, +-0 mixed in;
 * 4: a single finite logit among NaNs; 5: spread past the 30 nats */
static void scan_input(float *l, int n, int kind) {
    for (int i = 0; i < n; i++) {
        float g = gauss();
        l[i] = kind == 1 ? roundf(4 * g) / 2 : kind == 2 ? 0.01f * g : kind == 5 ? 40 * g : 3 * g;
        if (kind == 3) {
            double u = rnd();
            if (u < 0.05) l[i] = NAN;
            else if (u < 0.1) l[i] = -INFINITY;
            else if (u < 0.15) l[i] = u < 0.125 ? 0.0f : -0.0f;
        }
        if (kind == 4) l[i] = NAN;
    }
    if (kind == 4) l[n / 2] = 1.5f;
}

/* Every SIMD loop's scan equals the scalar loop's: the maximum, the
 * candidates, their bins and the mass's bits (sizes around the vector
 * widths and their tails). */
TEST(scan_every_variant) {
    static float l[151936];
    static int idx[151936], idx0[151936];
    static uint8_t bins[151936], bins0[151936];
    static const int sizes[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1000, 4099, 151936};
    static const float temps[] = {0.2f, 0.8f, 1.5f};
    int nvar = 0, checked = 0;
    for (int kind = 0; kind < 6; kind++)
        for (int si = 0; si < (int)(sizeof sizes / sizeof sizes[0]); si++)
            for (int t = 0; t < 3; t++) {
                int n = sizes[si];
                scan_input(l, n, kind);
                CHECK(kn_force_variant("generic") == 0, "the generic variant");
                float mx0, mx;
                double mass0, mass;
                int k0 = smp_scan(l, n, temps[t], &mx0, idx0, bins0, &mass0);
                for (int v = 0; v < kn_variant_count(); v++) {
                    if (kn_force_variant(kn_variant_name(v)) != 0) continue;
                    if (kind == 0 && si == 0 && t == 0) nvar++;
                    int k = smp_scan(l, n, temps[t], &mx, idx, bins, &mass);
                    checked++;
                    CHECK(k == k0 && (k < 0 || (mx == mx0 && memcmp(&mass, &mass0, sizeof mass) == 0 &&
                                                !memcmp(idx, idx0, sizeof(int) * (size_t)k) &&
                                                !memcmp(bins, bins0, (size_t)k))),
                          "%s kind %d n %d temp %g: k %d (scalar %d), mass %a (scalar %a)", kn_variant(), kind, n,
                          temps[t], k, k0, mass, mass0);
                }
            }
    CHECK(nvar >= 1, "no variant ran");
    fprintf(stderr, "  %d scans of %d variants equal to the scalar loop's\n", checked, nvar);
    kn_init();
}

TEST(argmax_every_variant) {
    static float x[151936];
    int sizes[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000, 4099, 151936};
    int nvar = 0;
    for (int v = 0; v < kn_variant_count(); v++) {
        if (kn_force_variant(kn_variant_name(v)) != 0) continue;
        nvar++;
        for (int si = 0; si < (int)(sizeof sizes / sizeof sizes[0]); si++)
            for (int p = 0; p <= 10; p++)
                for (int rep = 0; rep < 4; rep++) {
                    int n = sizes[si];
                    argmax_input(x, n, p);
                    int want = argmax_ref(x, n), got = smp_argmax(x, n);
                    CHECK(got == want, "%s n %d pattern %d rep %d: %d, the scalar loop %d", kn_variant(), n, p, rep,
                          got, want);
                }
    }
    CHECK(nvar >= 1, "no variant ran");
    kn_init();
}

int main(void) {
    RUN(argmax_every_variant);
    RUN(exp_accuracy);
    RUN(scan_every_variant);
    RUN(matches_full_sort);
    RUN(min_p_matches_full_sort);
    RUN(transforms);
    RUN(logprobs);
    RUN(greedy_unchanged);
    RUN(non_finite_logits);
    RUN(reentrant);
    CHECK_DONE("test_sample");
}
