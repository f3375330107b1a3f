/* synth.h - write random-weight checkpoints with real layouts. Prefix: syn_.
 *
 * Used by tests (small models that exercise every loader path) and by
 * `dflash synth` (real shapes for speed measurements: speed does not depend
 * on the values): Qwen3 0.6B/1.7B/4B, Qwen3-30B-A3B (qwen3_moe), Qwen3.5
 * 0.8B/4B/9B (qwen3_5_text), Qwen3.5-35B-A3B (qwen3_5_moe_text), and tiny
 * versions of the four families. Weights are deterministic for a given seed.
 *
 * Qwen3.5 (c.arch CFG_QWEN3_5; attn_gate, rot_dim, linear_layer[],
 * n_linear_layers and the lin_* fields set): the layers linear_layer[] marks
 * are Gated DeltaNet (linear_attn.in_proj_qkv/z/b/a and out_proj as matrices,
 * quantized with the others; conv1d.weight [C, 1, K], dt_bias, A_log with
 * exp(A_log) in 0.5..4, and the gated norm.weight near 1 as float vectors),
 * the others gated full attention (q_proj [2 * heads * head_dim, hidden]);
 * the other norms are stored zero-centred (near 0: the model scales by
 * 1 + w). config.json has layer_types and rope_parameters (rope_theta,
 * partial_rotary_factor = rot_dim / head_dim).
 *
 * Qwen3.5-MoE (also c.qwen35_moe, n_experts, n_experts_used, moe_inter and
 * shared_inter set, every moe_layer[] 1): config.json says
 * Qwen3_5MoeForCausalLM / qwen3_5_moe_text with num_experts,
 * num_experts_per_tok, moe_intermediate_size and
 * shared_expert_intermediate_size (no intermediate_size); each layer has the
 * router mlp.gate, the experts as qwen3_moe's (mlp.experts.E.*_proj), the
 * shared expert mlp.shared_expert.{gate,up,down}_proj (matrices, quantized
 * with the others) and mlp.shared_expert_gate.weight [1, hidden] (float). */
/* gpt-oss (c.arch CFG_GPT_OSS; syn_gptoss sets every field): config.json as
 * GptOssConfig writes it (num_local_experts, sliding_window, layer_types,
 * swiglu_limit, rope_parameters with YaRN), and per layer the attention
 * biases and sinks, mlp.router.weight + .bias and the stacked input-major
 * experts mlp.experts.gate_up_proj [E, H, 2I] / down_proj [E, I, H] with
 * their biases (float; the attention matrices MLX-quantized when q_bits). */
/* Gemma-4 (c.arch CFG_GEMMA4; syn_gemma4 sets every field): config.json as
 * Gemma4TextConfig writes it (transformers 5.17: layer_types,
 * sliding_window, per_layer_config for the full layers' head, rope_parameters
 * per layer type, final_logit_softcapping, hidden_size_per_layer_input,
 * attention_k_eq_v; enable_moe_block with num_experts, top_k_experts,
 * moe_intermediate_size when c.g4_moe), and per layer q/k/v/o at the layer's width (no v_proj
 * in a k_eq_v full layer), q_norm / k_norm, the four sandwich norms,
 * layer_scalar [1] and with per-layer inputs per_layer_input_gate /
 * per_layer_projection / post_per_layer_input_norm; embed_tokens_per_layer,
 * per_layer_model_projection, per_layer_projection_norm at the top; with
 * g4_moe beside the dense MLP router.proj, router.scale,
 * router.per_expert_scale, experts.gate_up_proj [E, 2I, H] and
 * experts.down_proj [E, H, I] (float: model.c refuses MLX-quantized ones)
 * and the norms pre_feedforward_layernorm_2, post_feedforward_layernorm_1
 * and _2. With
 * layer_scale the output norms (post_attention, post_feedforward,
 * post_per_layer_input) are scaled by it: they, not the matrices, set the
 * size of a Gemma layer's contributions. */
#ifndef DFL_SYNTH_H
#define DFL_SYNTH_H

#include <stdint.h>

#include "config.h"
#include "weight.h"

typedef struct {
    cfg_model c;        /* shapes and options; c.q_bits/q_group select MLX layout */
    wt_dtype dtype;     /* WT_BF16, WT_F16 or WT_F32 for unquantized tensors */
    wt_dtype scale_dtype;
    uint64_t seed;
    int sharded;        /* write N shards + model.safetensors.index.json */
    float layer_scale;  /* decoder-layer matrices' std times this (0 = 1): small makes the
                           layers near identity, so greedy repeats the last token */
    int router_bits;    /* quantized MoE: the routers at these bits, group 64, with
                           per-tensor entries in "quantization" (as mlx-lm); 0 = q_bits */
    int mxfp4;          /* gpt-oss: the experts as MXFP4 *_blocks / *_scales (U8) with
                           quantization_config.quant_method "mxfp4", as openai ships
                           them; every other tensor in dtype (c.q_bits must be 0) */
} syn_spec;

/* A small Qwen3 shape (hidden 64, 2 layers, vocab 512) to start from. */
syn_spec syn_default(void);

/* c (its sizes set, n_layers included) as gpt-oss with the released
 * models' settings: YaRN factor 32 from 4096 at theta 150000, swiglu_limit
 * 7, sliding window WINDOW on the even layers, every MLP the expert block
 * (moe_inter = inter; 4 experts top 2 unless n_experts is set). */
void syn_gptoss(cfg_model *c, int window);

/* c (its sizes set) as Gemma-4 with the released models' settings: every
 * 6th layer and the last full attention, the rest sliding with WINDOW;
 * full layers with heads of HD_FULL and KV_FULL kv heads (0: n_kv_heads),
 * their keys as values when K_EQ_V; RoPE theta 1e4 (sliding) and
 * proportional 0.25 at 1e6 (full); softcapping 30; per-layer inputs of PLE
 * (0: none). */
void syn_gemma4(cfg_model *c, int window, int hd_full, int kv_full, int k_eq_v, int ple);

/* The spec dflash_synth writes for SHAPE (a --shape name; DRAFT: its
 * DFlash draft; BITS 0, 4 or 8) into *OUT, nothing written; -1 with the
 * error set for an unknown shape or a bits it cannot take. */
int syn_shape(const char *shape, int draft, int bits, syn_spec *out);

/* C's parameter count (matrices and embeddings; norms and other vectors
 * left out) and the part one decoded token reads: the routed experts only
 * (n_experts_used of n_experts), one row of an input embedding that is not
 * the lm_head, one row of each per-layer table. */
void syn_count(const cfg_model *c, double *params, double *active);

/* Write config.json, generation_config.json (targets) and the safetensors
 * into DIR, all or nothing (util.h dfl_stage: a new DIR appears complete;
 * an existing DIR's files are replaced only once every file is written). */
int syn_write(const char *dir, const syn_spec *s);

#endif
