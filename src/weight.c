/* weight.c - the weight description's helpers (weight.h). */
#include "weight.h"

#include <stdint.h>
#include <string.h>

#include "util.h"

const uint8_t wt_mx4_q[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

const char *wt_dtype_name(wt_dtype t) {
    switch (t) {
    case WT_F32: return "F32";
    case WT_F16: return "F16";
    case WT_BF16: return "BF16";
    case WT_Q8: return "Q8";
    case WT_Q4: return "Q4";
    case WT_MXFP4: return "MXFP4";
    }
    return "?";
}

size_t wt_bytes(const wt_weight *w) {
    size_t n = (size_t)w->rows * (size_t)w->cols;
    switch (w->dtype) {
    case WT_F32: return n * 4;
    case WT_F16:
    case WT_BF16: return n * 2;
    case WT_Q8:
    case WT_Q4: {
        size_t groups = (size_t)w->rows * (size_t)(w->cols / w->group_size);
        return n * (size_t)w->bits / 8 + 2 * groups * (size_t)(w->scale_dtype == WT_F32 ? 4 : 2);
    }
    case WT_MXFP4: return n / 2 + n / 32; /* 4.25 bits a value */
    }
    return 0;
}

void wt_mx4_to_q8(const wt_weight *w, uint8_t *q, uint16_t *scales, uint16_t *biases) {
    const uint8_t *nib = w->data, *e = w->scales;
    size_t n = (size_t)w->rows * (size_t)w->cols;
    for (size_t i = 0; i < n; i += 2) {
        q[i] = wt_mx4_q[nib[i / 2] & 15];
        q[i + 1] = wt_mx4_q[nib[i / 2] >> 4];
    }
    for (size_t i = 0; i < n / 32; i++) {
        scales[i] = wt_mx4_scale_bf16(e[i]);
        biases[i] = wt_mx4_bias_bf16(e[i]);
    }
}

int wt_check(const wt_weight *w, const char *name) {
    if (!name) name = "weight";
    if (w->rows <= 0 || w->cols <= 0) {
        dfl_seterr("%s: bad shape [%d, %d]", name, w->rows, w->cols);
        return -1;
    }
    if (!w->data) {
        dfl_seterr("%s: no data", name);
        return -1;
    }
    switch (w->dtype) {
    case WT_F32:
    case WT_F16:
    case WT_BF16: return 0;
    case WT_Q8:
    case WT_Q4: break;
    case WT_MXFP4:
        if (w->bits != 4 || w->group_size != 32 || w->cols % 32 != 0 || !w->scales || w->biases) {
            dfl_seterr("%s: MXFP4 needs bits 4, group 32, cols a multiple of 32 (%d), e8m0 scales and no biases",
                       name, w->cols);
            return -1;
        }
        return 0;
    default:
        dfl_seterr("%s: unknown dtype %d", name, (int)w->dtype);
        return -1;
    }
    int want_bits = w->dtype == WT_Q8 ? 8 : 4;
    if (w->bits != want_bits) {
        dfl_seterr("%s: %s with bits=%d (want %d)", name, wt_dtype_name(w->dtype), w->bits, want_bits);
        return -1;
    }
    /* group_size must divide WT_GROUP_MAX so a backend's K blocks hold
     * whole groups, and be a multiple of 32 so Q4 groups fill whole 16-byte
     * runs; Q8 may also have groups of 16 (GGUF Q6_K), with cols still a
     * multiple of 32 (the CPU's q8 mode quantizes x per 32 columns) */
    int g = w->group_size;
    int g16 = w->dtype == WT_Q8 && g == 16 && w->cols % 32 == 0;
    if (!g16 && (g <= 0 || g % 32 != 0 || WT_GROUP_MAX % g != 0 || w->cols % g != 0)) {
        dfl_seterr("%s: group_size %d unsupported for %d columns (need 32, 64, 128, ... 1024 dividing cols, "
                   "or 16 for Q8 with cols a multiple of 32)",
                   name, g, w->cols);
        return -1;
    }
    if (w->scale_dtype != WT_F32 && w->scale_dtype != WT_F16 && w->scale_dtype != WT_BF16) {
        dfl_seterr("%s: scales of dtype %s unsupported", name, wt_dtype_name(w->scale_dtype));
        return -1;
    }
    if (!w->scales || !w->biases) {
        dfl_seterr("%s: quantized without scales or biases", name);
        return -1;
    }
    return 0;
}

static float scale_at(const void *p, wt_dtype t, size_t i) {
    if (t == WT_F32) return ((const float *)p)[i];
    if (t == WT_F16) return dfl_f16_to_f32(((const uint16_t *)p)[i]);
    return dfl_bf16_to_f32(((const uint16_t *)p)[i]);
}

void wt_dequant(float *out, const wt_weight *w, int r, int k0, int n) {
    size_t row = (size_t)r * (size_t)w->cols;
    switch (w->dtype) {
    case WT_F32:
        memcpy(out, (const float *)w->data + row + k0, sizeof(float) * (size_t)n);
        return;
    case WT_F16:
    case WT_BF16: {
        const uint16_t *h = (const uint16_t *)w->data + row + k0;
        for (int j = 0; j < n; j++) out[j] = w->dtype == WT_F16 ? dfl_f16_to_f32(h[j]) : dfl_bf16_to_f32(h[j]);
        return;
    }
    case WT_Q8:
    case WT_Q4: {
        int bits = w->bits, per_word = 32 / bits, g = w->group_size;
        uint32_t mask = (1u << bits) - 1;
        /* element j of the row: word j/per_word, bits (j%per_word)*bits */
        const uint32_t *q = (const uint32_t *)w->data + row / (size_t)per_word;
        size_t grow = (size_t)r * (size_t)(w->cols / g);
        for (int j = 0; j < n; j += g) {
            int jj = k0 + j;
            float s = scale_at(w->scales, w->scale_dtype, grow + (size_t)(jj / g));
            float b = scale_at(w->biases, w->scale_dtype, grow + (size_t)(jj / g));
            for (int i = 0; i < g; i++) {
                int e = jj + i;
                uint32_t v = (q[e / per_word] >> ((e % per_word) * bits)) & mask;
                float p = s * (float)v;
                out[j + i] = p + b;
            }
        }
        return;
    }
    case WT_MXFP4: {
        const uint8_t *q = (const uint8_t *)w->data + row / 2, *e = (const uint8_t *)w->scales + row / 32;
        for (int j = k0; j < k0 + n; j++) {
            float s = wt_mx4_scale(e[j / 32]), p = s * (float)wt_mx4_q[(q[j / 2] >> (4 * (j % 2))) & 15];
            out[j - k0] = p + wt_mx4_bias(e[j / 32]);
        }
        return;
    }
    }
}

void wt_get_row(float *out, const wt_weight *w, int row) { wt_dequant(out, w, row, 0, w->cols); }
