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

#include "weight.h"

/* Quantize one row w[cols]. packed: cols*bits/32 words; scales, biases:
 * cols/g elements of scale_dtype (WT_F32, WT_F16 or WT_BF16). */
void qt_row(const float *w, int cols, int bits, int g, wt_dtype scale_dtype, uint32_t *packed, void *scales,
            void *biases);

/* ---- whole models --------------------------------------------------------- */
#include "model.h"

/* QT_Q8_0: llama.cpp's Q8_0 (gguf_model.h: d = amax/127 as f16, q =
 * round(x/d)) held in the MLX 8-bit group-32 layout, exactly as a Q8_0 GGUF
 * loads (the group size argument is ignored). */
typedef enum { QT_KEEP = 0, QT_BF16, QT_Q8, QT_Q4, QT_Q8_0 } qt_kind;

/* Parse "bf16", "q8", "q4", "q8_0" (NULL or "" -> QT_KEEP); -1 + error otherwise. */
int qt_parse(const char *s, qt_kind *k);

/* Convert every weight matrix of a loaded model (layers, embedding, lm_head,
 * fc) to `k` in memory at load time. group: 32, 64 or 128 (quantized kinds;
 * QT_Q8 also 16, the layout GGUF Q6_K loads into).
 * Matrices whose columns do not divide by the group stay as they are. The
 * new buffers are owned by the model (freed by mdl_free). */
int qt_model(mdl_model *m, qt_kind k, int group);

/* Write DIR_IN's checkpoint to DIR_OUT in the MLX affine layout (bits 4 or 8):
 * quantized weights, other tensors copied, config.json with "quantization",
 * tokenizer and generation files copied. */
int qt_checkpoint(const char *dir_in, const char *dir_out, int bits, int group);

#endif
