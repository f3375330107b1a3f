/* quant.c - see quant.h. */
#include "quant.h"

#include <math.h>
#include <string.h>

#include "util.h"

static float store(kn_dtype t, void *arr, int i, float v) {
    if (t == KN_F32) {
        ((float *)arr)[i] = v;
        return v;
    }
    uint16_t h = t == KN_BF16 ? dfl_f32_to_bf16(v) : dfl_f32_to_f16(v);
    ((uint16_t *)arr)[i] = h;
    return t == KN_BF16 ? dfl_bf16_to_f32(h) : dfl_f16_to_f32(h);
}

void qt_row(const float *w, int cols, int bits, int g, kn_dtype st, uint32_t *packed, void *scales, void *biases) {
    int qmax = (1 << bits) - 1;
    memset(packed, 0, sizeof(uint32_t) * (size_t)cols * bits / 32);
    for (int g0 = 0; g0 < cols; g0 += g) {
        float lo = w[g0], hi = w[g0];
        for (int j = g0; j < g0 + g; j++) {
            lo = w[j] < lo ? w[j] : lo;
            hi = w[j] > hi ? w[j] : hi;
        }
        float s = store(st, scales, g0 / g, (hi - lo) / (float)qmax);
        float b = store(st, biases, g0 / g, lo);
        for (int j = g0; j < g0 + g; j++) {
            int q = s > 0 ? (int)lrintf((w[j] - b) / s) : 0;
            q = q < 0 ? 0 : q > qmax ? qmax : q;
            packed[(size_t)j * bits / 32] |= (uint32_t)q << ((j * bits) % 32);
        }
    }
}
