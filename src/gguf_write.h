/* gguf_write.h - GGUF output: dflash convert and llama.cpp's Q8_0/Q4_0
 * quantizers. Prefix ggm_ (as gguf_model.h). Depends on model.h and
 * gguf_model.h; model.c and gguf_model.c do not include it. */
#ifndef DFL_GGUF_WRITE_H
#define DFL_GGUF_WRITE_H

#include <stdint.h>

/* Q8_0 blocks of one row x[n] (n % 32 == 0): n/32 * 34 bytes. */
void ggm_quantize_q8_0(const float *x, int n, uint8_t *out);
/* Q4_0 blocks (llama.cpp's rule: d = the largest-magnitude value / -8,
 * q = min(15, (int8)(x/d + 8.5))): n/32 * 18 bytes. */
void ggm_quantize_q4_0(const float *x, int n, uint8_t *out);
/* dflash convert: IN_DIR -> OUT_PATH, type "f16", "bf16", "q8_0" or "q4_0" (NULL = f16);
 * the tokenizer from TOK_DIR (NULL = IN_DIR; a draft takes its target's).
 * A DFlash draft becomes architecture "dflash" as llama.cpp's converter
 * writes it: dflash.block_size, dflash.target_layers (layer ids + 1),
 * tokenizer.ggml.mask_token_id, fc.weight, enc.output_norm.weight. */
int ggm_convert(const char *in_dir, const char *out_path, const char *type, const char *tok_dir);

#endif
