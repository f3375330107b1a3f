/* rope.c - see rope.h. */
#include "rope.h"

#include <math.h>
#include <stdlib.h>

#include "util.h"

void rope_fill(const cfg_model *c, int n_ctx, float *cos_t, float *sin_t) {
    int hd = c->rot_dim ? c->rot_dim : c->head_dim, half = hd / 2; /* rotary dims (Qwen3.5: partial) */
    float *inv = dfl_malloc(sizeof(float) * half);
    for (int i = 0; i < half; i++) {
        inv[i] = 1.0f / powf((float)c->rope_theta, (float)(2 * i) / (float)hd);
        if (c->rope_llama3) {
            const double pi = 3.14159265358979323846;
            double lo_wl = c->rope_orig_max_pos / c->rope_low_freq;
            double hi_wl = c->rope_orig_max_pos / c->rope_high_freq;
            double wl = 2 * pi / inv[i];
            float f = inv[i];
            if (wl > lo_wl) {
                f = (float)(inv[i] / c->rope_factor);
            } else if (wl >= hi_wl) { /* medium band: smooth interpolation */
                double s = (c->rope_orig_max_pos / wl - c->rope_low_freq) / (c->rope_high_freq - c->rope_low_freq);
                f = (float)((1 - s) * inv[i] / c->rope_factor + s * inv[i]);
            }
            inv[i] = f;
        }
        if (c->n_rope_div) inv[i] = inv[i] / c->rope_div[i]; /* llama.cpp's freq_factors */
    }
    float scale = 1.0f;
    if (c->rope_yarn) {
        /* the ramp over dims [lo, hi] (HF: find_correction_range in double,
         * the blend in float) between extrapolated (inv) and interpolated
         * (inv / factor) frequencies */
        const double pi = 3.14159265358979323846;
        double lo = hd * log(c->rope_orig_max_pos / (c->yarn_beta_fast * 2 * pi)) / (2 * log(c->rope_theta));
        double hi = hd * log(c->rope_orig_max_pos / (c->yarn_beta_slow * 2 * pi)) / (2 * log(c->rope_theta));
        if (c->yarn_truncate) lo = floor(lo), hi = ceil(hi);
        if (lo < 0) lo = 0;
        if (hi > hd - 1) hi = hd - 1;
        if (lo == hi) hi += 0.001;
        for (int i = 0; i < half; i++) {
            float pf = powf((float)c->rope_theta, (float)(2 * i) / (float)hd);
            float extra = 1.0f / pf, inter = 1.0f / ((float)c->rope_factor * pf);
            float ramp = ((float)i - (float)lo) / (float)(hi - lo);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            float ef = 1.0f - ramp; /* the extrapolation share */
            inv[i] = inter * (1.0f - ef) + extra * ef;
        }
        scale = (float)c->yarn_attn_factor;
    }
    for (int p = 0; p < n_ctx; p++)
        for (int i = 0; i < half; i++) {
            float a = (float)p * inv[i];
            cos_t[(size_t)p * half + i] = cosf(a) * scale;
            sin_t[(size_t)p * half + i] = sinf(a) * scale;
        }
    free(inv);
}

void rope_fill_proportional(const cfg_model *c, int hd, int n_ctx, float *cos_t, float *sin_t) {
    int half = hd / 2;
    float *inv = dfl_malloc(sizeof(float) * half);
    for (int i = 0; i < half; i++)
        inv[i] = i < c->full_rot ? 1.0f / powf((float)c->full_theta, (float)(2 * i) / (float)hd) / (float)c->full_factor
                                 : 0.0f;
    for (int p = 0; p < n_ctx; p++)
        for (int i = 0; i < half; i++) {
            float a = (float)p * inv[i];
            cos_t[(size_t)p * half + i] = cosf(a);
            sin_t[(size_t)p * half + i] = sinf(a);
        }
    free(inv);
}
