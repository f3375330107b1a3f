/* sample.h - choosing a token from logits. Prefix: smp_.
 *
 * Sampling is keyed by position: the uniform number used for the token at
 * absolute position p is a hash of (seed, p), not the next draw of a running
 * generator. So the token chosen for a position depends only on its logits,
 * the settings and (seed, p) - never on how many positions were computed
 * together or rolled back - which makes speculative sampling reproduce plain
 * sampling token for token with the same seed. */
#ifndef DFL_SAMPLE_H
#define DFL_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    float temp;     /* <= 0: greedy argmax */
    int top_k;      /* <= 0: off */
    float top_p;    /* >= 1: off */
    uint64_t seed;
    float min_p;    /* <= 0: off; else keep tokens with p >= min_p * p(best), after top-k and top-p */
} smp_params;

/* The logit transforms applied before sampling (and before log-probabilities
 * are reported), each a function of the logits row and the history of the
 * position only (the tokens before it: prompt + generated), so a verify row
 * gets exactly what plain decoding computes for that position. Order:
 * logit_bias, then the repetition penalty, then frequency / presence (as
 * llama.cpp's sampler chain). */
typedef struct {
    int32_t id;
    float bias;
} smp_bias;

typedef struct {
    const smp_bias *bias;   /* [n_bias]: logits[id] += bias (ids may repeat: they add up) */
    int n_bias;
    float repeat;           /* 1: off; a token in the window: logit > 0 ? logit / repeat : logit * repeat */
    float frequency;        /* 0: off; logit -= frequency * (times the token is in the window) */
    float presence;         /* 0: off; logit -= presence if the token is in the window */
    int last_n;             /* the window: the last last_n tokens of the history; -1 = all of it, 0 = none */
} smp_transform;

/* 1 if t changes any logit (so the logits must come to the host). */
int smp_transform_active(const smp_transform *t);

/* Apply t to logits[0..n) in place for a position whose history is
 * hist[0..n_hist). count: scratch of n ints, all zero on entry and on return
 * (the caller's: reentrant). */
void smp_transform_apply(const smp_transform *t, float *logits, int n, const int32_t *hist, int64_t n_hist,
                         int *count);

/* log-softmax of logits[0..n) at temperature 1, summed in double in id order:
 * *lp = the log-probability of token id; top[0..n_top) (ids) and
 * top_lp[0..n_top) the n_top most likely tokens, logit descending, ties by
 * id ascending (n_top <= n). NaN logits count as -inf. */
void smp_logprobs(const float *logits, int n, int32_t id, float *lp, int n_top, int32_t *top, float *top_lp);

/* First index of the maximum (as torch.argmax). */
int smp_argmax(const float *logits, int n);

/* Token for absolute position pos. work: scratch of smp_work_size(n) bytes
 * (the caller's: reentrant). -1 with a message when temp > 0 and no logit is a
 * finite number (all NaN, or +inf): never a made-up id. */
int smp_pick(const smp_params *p, const float *logits, int n, int64_t pos, void *work);
size_t smp_work_size(int n);

/* e^d for d in (-30, 0] (a candidate's weight at its scaled logit d =
 * (logit - best) / temp), within 1 ulp, and the same bits on every machine
 * and in every SIMD loop of the sampler (sample.c says how). */
float smp_exp(float d);

/* The scan smp_pick starts from at temperature temp > 0: *mx = the largest
 * logit (NaNs skipped), the candidates (ids whose d = (logit - *mx) / temp >
 * -30) into idx[0..k) in id order, their bins (floor(-d * 8)) into bins[0..k),
 * *mass = their smp_exp(d) summed in 8 lanes by id % 8, each in id order,
 * the lanes added as ((0+1)+(2+3))+((4+5)+(6+7)). Returns k, or -1 if no
 * logit is finite. Every SIMD loop gives these bits (tests compare them). */
int smp_scan(const float *logits, int n, float temp, float *mx, int *idx, uint8_t *bins, double *mass);

/* Uniform double in [0, 1) from (seed, pos). */
double smp_uniform(uint64_t seed, int64_t pos);

#endif
