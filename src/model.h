/* model.h - a checkpoint's weights bound to the config. Prefix: mdl_.
 *
 * mdl_load() maps the safetensors files and checks every tensor the
 * architecture needs - presence, dtype, shape (and for MLX-quantized weights
 * the packed/scales/biases shapes) - before anything runs. Weight matrices
 * stay in the mapping in their stored dtype; small vectors (norm weights) are
 * copied to f32. A model is immutable after load and can be shared by any
 * number of sessions. */
#ifndef DFL_MODEL_H
#define DFL_MODEL_H

#include "config.h"
#include "weight.h"
#include "gguf.h"
#include "safetensors.h"

/* One expert of an expert block: views into the mapping (never copied,
 * never packed: a 30B-A3B checkpoint's experts are most of its bytes). */
typedef struct {
    wt_weight wg, wu, wd;        /* [moe_inter, H] x2, [H, moe_inter] */
    const float *bg, *bu, *bd;   /* gpt-oss: their biases [moe_inter] x2, [H]; else NULL */
} mdl_expert;

typedef struct {
    wt_weight wq, wk, wv, wo;    /* [nh*hd, H], [nkv*hd, H] x2, [H, nh*hd]; wv absent (rows 0) in a Gemma-4
                                    k_eq_v full layer: v = Wk xn */
    wt_weight wg, wu, wd;        /* [I, H] x2, [H, I]; absent (rows 0) in an expert layer */
    float *in_norm, *post_norm;  /* [H] */
    float *q_norm, *k_norm;      /* [hd], NULL without qk-norm */
    /* expert block (cfg.moe_layer[l]), else router.rows = 0, experts NULL.
     * On disk: model.layers.L.mlp.gate.weight and either HF's per-expert
     * mlp.experts.E.{gate,up,down}_proj.weight, mlx-lm's stacked
     * mlp.switch_mlp.{gate,up,down}_proj.weight [E, rows, cols] (MLX
     * quantized or not), or transformers 5's fused mlp.experts.gate_up_proj
     * [E, 2*moe_inter, H] + mlp.experts.down_proj [E, H, moe_inter]. */
    wt_weight router;            /* [n_experts, H] */
    mdl_expert *experts;         /* [n_experts] */
    /* gpt-oss (CFG_GPT_OSS), else NULL. On disk under layers.L.:
     * self_attn.{q,k,v,o}_proj.bias, self_attn.sinks [nh], mlp.router.weight
     * + .bias [E], and the experts as transformers stores them: input-major
     * mlp.experts.gate_up_proj [E, H, 2*I] (gate and up interleaved: output
     * column 2i is gate row i, 2i+1 up row i) + gate_up_proj_bias [E, 2*I],
     * mlp.experts.down_proj [E, I, H] + down_proj_bias [E, H]; the loader
     * makes output-major copies (wg, wu, wd as every other family's). Or
     * MXFP4 (openai's checkpoints): gate_up_proj_blocks [E, 2*I, H/32, 16]
     * + _scales [E, 2*I, H/32], output-major with gate / up rows
     * interleaved, down_proj_blocks [E, H, I/32, 16] + _scales, bound as
     * WT_MXFP4 matrices (weight.h; model.c mxfp4_rows: gate / up rows
     * copied, down in place) */
    float *bq, *bk, *bv, *bo;    /* [nh*hd], [nkv*hd] x2, [H] */
    float *sinks;                /* [nh] */
    float *router_bias;          /* [n_experts] */
    /* Qwen3.5-MoE's shared expert beside the routed ones (cfg.shared_inter),
     * layers.L.mlp.shared_expert.{gate,up,down}_proj and
     * mlp.shared_expert_gate.weight [1, H]; else rows 0 / NULL */
    wt_weight sh_wg, sh_wu, sh_wd; /* [S, H] x2, [H, S] */
    float *sh_gate;              /* [H]: the expert's share is sigmoid(sh_gate . n) */
    /* Qwen3.5 gated full attention (cfg.attn_gate): wq is q_proj as stored,
     * [nh*2*hd, H], each head's rows its query (hd) then its output gate
     * (hd). q_norm, k_norm, in_norm, post_norm (and the final norm) hold
     * 1 + weight: Qwen3.5 stores its RMSNorm weights zero-centred. */
    /* Qwen3.5 Gated DeltaNet (cfg.linear_layer[l]; wq..wo absent then), on
     * disk under layers.L.linear_attn.: C = 2*nk*dk + nv*dv channels */
    wt_weight lin_qkv;           /* in_proj_qkv [C, H]: q [nk*dk], k [nk*dk], v [nv*dv] */
    wt_weight lin_z;             /* in_proj_z [nv*dv, H]: output gate */
    wt_weight lin_b, lin_a;      /* in_proj_b, in_proj_a [nv, H]: write strength, decay step */
    wt_weight lin_out;           /* out_proj [H, nv*dv] */
    float *conv_w;               /* conv1d.weight [C][K] (stored [C, 1, K]), f32 */
    float *dt_bias;              /* [nv] */
    float *neg_a;                /* [nv] = -exp(A_log) */
    float *lin_norm;             /* norm.weight [dv] (plain weight: the gated norm is not zero-centred) */
    /* Gemma-4 (CFG_GEMMA4), else NULL / rows 0 / 0. Its layers' heads are
     * cfg_head_dim(l) wide with cfg_kv_heads(l) kv heads (wq..wo, q_norm,
     * k_norm sized so); in_norm = input_layernorm, post_norm =
     * pre_feedforward_layernorm (the MLP's input norm, as in every family);
     * the sandwich norms on the block outputs: */
    float *attn_out_norm;        /* post_attention_layernorm [H]: on Wo att before the residual add */
    float *ffn_out_norm;         /* post_feedforward_layernorm [H]: on the MLP's output likewise */
    /* per-layer input (cfg.ple = P > 0): x += ple_norm(Wp (gelu(Wgate x) * in_l)) */
    wt_weight ple_gate;          /* per_layer_input_gate [P, H] */
    wt_weight ple_proj;          /* per_layer_projection [H, P] */
    float *ple_norm;             /* post_per_layer_input_norm [H] */
    float layer_scalar;          /* layer_scalar [1]: the layer's output times it */
    /* Gemma-4's MoE block (cfg.g4_moe: every layer), else NULL. The layer
     * keeps its dense MLP (wg, wu, wd, input norm post_norm) and adds the
     * expert block beside it, on disk under layers.L.: router.proj.weight
     * [E, H] (bound as router), router.scale [H], router.per_expert_scale
     * [E], experts.gate_up_proj [E, 2*moe_inter, H] (output-major: rows
     * 0..I-1 the gate, I..2I-1 the up; each expert's wg / wu bound in place
     * as rows of it) and experts.down_proj [E, H, moe_inter] (wd in place).
     * With r = x after attention:
     *   h1 = ffn_out_norm1(Wd(gelu_tanh(Wg n) * (Wu n))), n = post_norm(r);
     *   z = rmsnorm_noweight(r) * router_scale * H^-0.5; p = softmax(Wr z);
     *   the top k of p, renormalised to sum 1, each times router_pes[e];
     *   h2 = ffn_out_norm2(sum_k w_k Wd_e(gelu_tanh(Wg_e n2) * (Wu_e n2))),
     *   n2 = moe_in_norm(r);
     *   x = r + ffn_out_norm(h1 + h2). */
    float *router_scale;         /* router.scale [H] */
    float *router_pes;           /* router.per_expert_scale [E] */
    float *moe_in_norm;          /* pre_feedforward_layernorm_2 [H] */
    float *ffn_out_norm1;        /* post_feedforward_layernorm_1 [H]: on the dense MLP's output */
    float *ffn_out_norm2;        /* post_feedforward_layernorm_2 [H]: on the experts' sum */
} mdl_layer;

typedef struct {
    cfg_model cfg;
    st_set st;
    gguf_file *gguf;    /* the mapped GGUF file when loaded from one (st unused) */
    mdl_layer *layers;  /* [n_layers] */
    wt_weight embed;    /* [vocab, H]; absent (rows 0) in a draft */
    wt_weight lm_head;  /* [vocab, H]; == embed when tied; absent in a draft */
    float *final_norm;  /* [H] */
    /* Gemma-4 per-layer inputs (cfg.ple = P > 0), else rows 0 / NULL: row t's
     * inputs in_l [P] for layer l = ((ple_norm(ple_model_proj(e) / sqrt(H)))_l
     * + sqrt(P) ple_embed[tok]_l) / sqrt(2), e = the scaled embedding */
    wt_weight ple_embed;        /* embed_tokens_per_layer [vocab, L*P] */
    wt_weight ple_model_proj;   /* per_layer_model_projection [L*P, H] */
    float *ple_proj_norm;       /* per_layer_projection_norm [P] */
    /* DFlash draft only */
    wt_weight fc;        /* [H, n_taps*H] */
    float *hidden_norm;  /* [H] */
    size_t weight_bytes; /* bytes of all weight data, for bandwidth figures */
    /* Qwen3.5 / Qwen3-Next as mlx-lm converts them (conv1d.weight [C, K, 1]):
     * the zero-centred norms are stored as 1 + w already, read as they are */
    int mlx_norms;
    void **owned;        /* buffers made at load (mdl_own), freed with the model */
    int n_owned;
    void *be_data;       /* a backend's resident copy of the model (backend.h:
                            set by prepare, freed by release); NULL on the CPU */
} mdl_model;

/* 0 when PATH is a directory, a GGUF file or missing (the load then names
 * the missing file); -1 + an error saying what to pass for any other file. */
int mdl_check_path(const char *path);
/* DIR: a Hugging Face / MLX directory, or a GGUF file (gguf_model.h). */
int mdl_load(mdl_model *m, const char *dir);
void mdl_free(mdl_model *m);
/* A new buffer of N bytes that lives as long as M (freed by mdl_free): the
 * load's converted and regrouped copies of weights. */
void *mdl_own(mdl_model *m, size_t n);
/* Qwen3-Next's fused beta/alpha projection BA (in_proj_ba, GGUF ssm_ba:
 * per key head g of NK the rows [b_g (R rows) | a_g (R rows)]) split into B
 * and A, NK * R rows each (copies owned by m; float or MLX rows). */
void mdl_split_ba(mdl_model *m, const wt_weight *ba, int nk, int r, wt_weight *b, wt_weight *a);

#endif
