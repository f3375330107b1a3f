/* weight.c - the weight description's helpers (weight.h). */
#include "weight.h"

#include <stdint.h>
#include <string.h>

#include "util.h"

const char *wt_dtype_name(wt_dtype t) {
    switch (t) {
    case WT_F32: return "F32";
    case WT_F16: return "F16";
    case WT_BF16: return "BF16";
    case WT_Q8: return "Q8";
    case WT_Q4: return "Q4";
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
    }
    return 0;
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
    }
}

void wt_get_row(float *out, const wt_weight *w, int row) { wt_dequant(out, w, row, 0, w->cols); }
