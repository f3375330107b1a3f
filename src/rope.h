/* rope.h - rotary position tables, shared by every backend. Prefix: rope_.
 *
 * cos/sin [n_ctx][r/2] for the neox pairing (d with d + r/2) over the first
 * r = rot_dim dims of a head (Qwen3.5's partial rotary; r = head_dim when
 * rot_dim is 0, every other family), with the inverse frequencies computed
 * as Hugging Face does (1 / theta^(2i/r)
 * in float, llama3 or YaRN rope_scaling applied when configured; YaRN's
 * attention factor multiplies cos and sin), so every backend rotates by the
 * same float values. */
#ifndef DFL_ROPE_H
#define DFL_ROPE_H

#include "config.h"

void rope_fill(const cfg_model *c, int n_ctx, float *cos_t, float *sin_t);

/* Gemma-4's full layers ("proportional" RoPE, transformers'
 * _compute_proportional_rope_parameters): cos/sin [n_ctx][hd/2] over the
 * whole head of hd = the full layers' head_dim, neox pairing (d, d + hd/2);
 * pair i < full_rot turns at 1 / full_theta^(2i/hd) / full_factor (in
 * float), the others at frequency 0 (cos 1, sin 0: those dims pass through
 * unchanged, bit for bit). */
void rope_fill_proportional(const cfg_model *c, int hd, int n_ctx, float *cos_t, float *sin_t);

#endif
