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
} smp_params;

/* First index of the maximum (as torch.argmax). */
int smp_argmax(const float *logits, int n);

/* Token for absolute position pos. work: scratch of n floats + n ints (the
 * caller's: reentrant). -1 with a message when temp > 0 and no logit is a
 * finite number (all NaN, or +inf): never a made-up id. */
int smp_pick(const smp_params *p, const float *logits, int n, int64_t pos, void *work);
size_t smp_work_size(int n);

/* Uniform double in [0, 1) from (seed, pos). */
double smp_uniform(uint64_t seed, int64_t pos);

#endif
