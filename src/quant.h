/* quant.h - MLX affine quantization of weight rows. Prefix: qt_.
 *
 * Layout (as mlx-community checkpoints): for a [rows, cols] matrix with
 * group size g and b bits, packed uint32 [rows, cols*b/32] (element j at bit
 * (j*b)%32 of word j*b/32), scales and biases [rows, cols/g]; a weight is
 * scale*q + bias. Scales and biases are rounded to their storage dtype
 * first and q is chosen against the rounded values. */
#ifndef DFL_QUANT_H
#define DFL_QUANT_H

#include <stdint.h>

#include "kernels.h"

/* Quantize one row w[cols]. packed: cols*bits/32 words; scales, biases:
 * cols/g elements of scale_dtype (KN_F32, KN_F16 or KN_BF16). */
void qt_row(const float *w, int cols, int bits, int g, kn_dtype scale_dtype, uint32_t *packed, void *scales,
            void *biases);

#endif
