/* gguf_model.h - models and tokenizers from GGUF files, and GGUF output.
 * Prefix: ggm_.
 *
 * Reading (architectures qwen3, llama and DFlash drafts "dflash", as
 * llama.cpp's converter writes them): the metadata becomes a config.json object checked by cfg_from_json,
 * the tokenizer.ggml.* arrays a tokenizer.json object for tok_from_json, and
 * the tensors are bound to the model's matrices:
 *   F32, F16, BF16       used in place (mapped);
 *   Q8_0                 (f16 d, 32 x int8 q; w = d*q) becomes the MLX 8-bit
 *                        layout with group 32: q+128, scale d, bias -128*d;
 *   Q4_0                 (f16 d, 16 bytes of nibbles; w = d*(q-8)) becomes MLX
 *                        4-bit, group 32: q, scale d, bias -8*d;
 *   Q4_1                 (f16 d, f16 m; w = d*q + m): scale d, bias m;
 *   Q5_0, Q5_1           5-bit codes as MLX 8-bit (codes 0..31), group 32;
 *   Q4_K                 (256-blocks, 6-bit sub-block scales/mins) as MLX
 *                        4-bit, group 32: scale d*sc, bias -dmin*m;
 *   Q5_K                 the same as MLX 8-bit (codes 0..31);
 *   Q6_K                 (256-blocks of 16-weight sub-blocks, int8 scale sc
 *                        each, f16 d; w = d*sc*(q-32)) as MLX 8-bit with
 *                        group 16 (one group per sub-block): code q
 *                        (0..63), scale d*sc, bias -32*d*sc.
 * Each conversion is exact: every weight the kernels see equals ggml's
 * dequantized weight (as a number; a zero may be +0 where ggml has -0),
 * scales/biases in F16 when every one is an f16, else F32. Tested against
 * values from ggml itself (tests/fixtures/gguf/quants-ggml.bin). llama's Q and K rows, which llama.cpp's converter
 * permutes for its interleaved RoPE, are put back in Hugging Face order.
 *
 * Writing (dflash convert, gguf_write.h): a Hugging Face / MLX directory to a qwen3 or
 * llama GGUF with llama.cpp's tensor names and metadata keys, F16, Q8_0 or
 * Q4_0 (quantized as llama.cpp does: Q8_0 d = amax/127, q = round(x/d)
 * away from zero, d stored as f16; Q4_0 below). */
#ifndef DFL_GGUF_MODEL_H
#define DFL_GGUF_MODEL_H

#include <stdint.h>

#include "gguf.h"
#include "model.h"
#include "tokenizer.h"

/* Load PATH (a GGUF file) into m: config, weights, m->gguf. */
int ggm_load(mdl_model *m, const char *path);
tok_tokenizer *ggm_tokenizer(const char *path);

/* Rows of Q8_0 blocks ([rows][cols/32] blocks, row i taken from src row
 * perm ? perm[i] : i) as an MLX Q8 group-32 wt_weight whose buffers are
 * appended to m->owned. */
int ggm_q8_0_weight(mdl_model *m, const uint8_t *src, int rows, int cols, const int *perm, wt_weight *w);

/* The same for Q4_0 (q41 = 0: f16 d + 16 bytes) or Q4_1 (f16 d, f16 m + 16
 * bytes) blocks as MLX Q4 group 32. */
void ggm_q4_weight(mdl_model *m, const uint8_t *src, int rows, int cols, const int *perm, int q41, wt_weight *w);

/* Rows of TYPE blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) as
 * the wt_weight a GGUF load makes (tests). */
void ggm_dequant_weight(mdl_model *m, int type, const uint8_t *src, int rows, int cols, wt_weight *w);

/* Shared with gguf_write.c: the Qwen2/Qwen3, Qwen3.5, Llama-3 and gpt-oss
 * (o200k_harmony) pre-tokenizer regexes and the table of llama.cpp's tokenizer.ggml.pre names
 * for them (read: name -> regex; written: regex -> name; ends at name NULL),
 * llama.cpp's token types, and the Q/K row permutation (HF row r comes from
 * GGUF row perm[r]; dfl_malloc'ed). */
extern const char ggm_qwen2_re[], ggm_qwen35_re[], ggm_llama3_re[], ggm_gpt4o_re[];
typedef struct {
    const char *name, *re;
    int nfc;
} ggm_pretok;
extern const ggm_pretok ggm_pretoks[];
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };
int *ggm_unpermute(int rows, int hd);

#endif
