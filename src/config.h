/* config.h - model configuration from config.json (+ generation_config.json).
 * Prefix: cfg_.
 *
 * cfg_load() fails with a message naming the missing or bad field; a model
 * whose architecture we do not implement fails with "unsupported
 * architecture X". After a successful load every field is consistent
 * (positive sizes, head_dim even, heads divisible by kv heads, ...). */
#ifndef DFL_CONFIG_H
#define DFL_CONFIG_H

enum { CFG_MAX_TAPS = 32, CFG_MAX_EOS = 8 };

/* Limits checked at load, far above real models (Llama-3.1-405B: hidden
 * 16384, intermediate 53248, 126 layers, 128 heads; vocabularies ~256k), so
 * that size products fit an int and a bad config.json fails before any
 * allocation. n_heads * head_dim <= CFG_MAX_HIDDEN; n_taps * hidden <=
 * CFG_MAX_INTER. */
enum {
    CFG_MAX_HIDDEN = 1 << 16,
    CFG_MAX_INTER = 1 << 20,
    CFG_MAX_LAYERS = 1024,
    CFG_MAX_HEADS = 1024,
    CFG_MAX_VOCAB = 1 << 22,
    CFG_MAX_POS = 1 << 30,
    CFG_MAX_EXPERTS = 4096,    /* num_experts (Qwen3-Next: 512) */
    CFG_MAX_EXPERTS_USED = 64, /* num_experts_per_tok (Qwen3-30B-A3B: 8) */
};

/* CFG_QWEN3_MOE: Qwen3MoeForCausalLM / model_type qwen3_moe - Qwen3's
 * attention (qk-norm) with the expert block as the MLP of the layers
 * moe_layer[] marks; the other layers have a dense MLP of intermediate_size. */
/* CFG_QWEN3_5: Qwen3.5 text model (model_type qwen3_5_text or
 * qwen3_5_moe_text, or the text_config of a multimodal qwen3_5 /
 * qwen3_5_moe checkpoint, vision ignored; also Qwen3-Next): layers of
 * Gated DeltaNet ("linear_attention") and gated full attention
 * ("full_attention", q_proj doubled into query + sigmoid output gate, RoPE on
 * the first rot_dim dims of each head); the MoE variant's MLPs are expert
 * blocks with a gated shared expert. */
/* CFG_GPT_OSS: GptOssForCausalLM / model_type gpt_oss - every layer's MLP
 * the expert block (moe_inter = intermediate_size), attention with biases
 * and a learned sink logit per head, the layers sliding_layer[] marks
 * attending to the last `window` positions only, YaRN RoPE. Its router and
 * experts differ from Qwen's: router logits Wr n + br, the n_experts_used
 * largest (ties: lower index), softmax over those k values; expert e's
 * gate/up rows carry biases, act = clamp(g, max L) * sigmoid(1.702 *
 * clamp(g, max L)) * (clamp(u, -L, L) + 1), L = swiglu_limit, then
 * Wd act + bd. */
/* CFG_GEMMA4: Gemma4ForCausalLM / model_type gemma4_text, or the
 * text_config of a multimodal Gemma4ForConditionalGeneration / gemma4
 * checkpoint (vision and audio ignored). Sliding layers (sliding_layer[],
 * window) and full layers, a full layer's head of its own width and kv
 * heads (layer_hd[] / layer_kv[], from per_layer_config or global_head_dim);
 * RoPE per layer type (sliding: default, rope_theta; full: "proportional",
 * the first full_rot of the head's hd/2 frequency pairs rotating at
 * full_theta^(-2i/hd) / full_factor, the rest not at all); q/k norms with
 * weight, v norm without; attention scores not scaled (scaling 1.0);
 * sandwich norms (attn_out_norm, ffn_out_norm: mdl_layer); GeGLU MLP
 * (gelu_pytorch_tanh); embeddings times sqrt(hidden); per-layer inputs of
 * width ple (hidden_size_per_layer_input; 0: none); each layer's output
 * times its layer_scalar; logits softcapped (softcap: c tanh(l / c); 0:
 * none). RMSNorm weights are plain w (not 1 + w). */
typedef enum { CFG_QWEN3 = 0, CFG_LLAMA, CFG_QWEN3_MOE, CFG_QWEN3_5, CFG_GPT_OSS, CFG_GEMMA4 } cfg_arch;

typedef struct {
    cfg_arch arch;
    char arch_name[64];  /* architectures[0] (or model_type) as written */
    int hidden;          /* hidden_size */
    int inter;           /* intermediate_size */
    int n_layers;        /* num_hidden_layers */
    int n_heads;         /* num_attention_heads */
    int n_kv_heads;      /* num_key_value_heads */
    int head_dim;        /* head_dim (default hidden / heads) */
    int vocab;           /* vocab_size: rows of the embedding and lm_head */
    float eps;           /* rms_norm_eps */
    double rope_theta;
    int rope_llama3;     /* rope_scaling.rope_type == "llama3" */
    double rope_factor, rope_low_freq, rope_high_freq;
    int rope_orig_max_pos;
    /* YaRN (rope_type "yarn", gpt-oss): frequencies blended between
     * theta^(-2i/d) and theta^(-2i/d) / rope_factor by a linear ramp over
     * dims [low, high] from beta_fast / beta_slow rotations at
     * rope_orig_max_pos (floored / ceiled when yarn_truncate), and cos/sin
     * scaled by yarn_attn_factor (attention_factor, default 0.1 ln(factor) + 1) */
    int rope_yarn, yarn_truncate;
    double yarn_beta_fast, yarn_beta_slow, yarn_attn_factor;
    /* GGUF llama3 scaling (tensor rope_freqs.weight): frequency i is divided
     * by rope_div[i], i < head_dim / 2; n_rope_div = 0 when absent */
    int n_rope_div;
    float rope_div[256];
    int qk_norm;         /* Qwen3: per-head RMSNorm on q and k before RoPE */
    int tie_embeddings;  /* lm_head shares the embedding matrix */
    int max_pos;         /* max_position_embeddings */
    int q_bits, q_group; /* MLX quantization; 0 when absent */
    /* the quantization object also has per-tensor entries ("PATH": {bits,
     * group_size}, as mlx-lm writes for 8-bit MoE routers); each one's
     * bits / group_size is checked here, and a tensor's own layout is then
     * read from its shapes (model.c) */
    int q_mixed;

    /* Mixture of experts (CFG_QWEN3_MOE; all 0 otherwise). Layer l's MLP is
     * the expert block when moe_layer[l] (HF's rule: n_experts > 0, l not in
     * mlp_only_layers, (l + 1) % decoder_sparse_step == 0): router logits
     * [n_experts] = Wr n, softmax, the n_experts_used largest (ties: lower
     * index), renormalised to sum 1 when norm_topk, and the sum of those
     * experts' SwiGLU MLPs (moe_inter wide) weighted by them. */
    int n_experts;       /* num_experts (or num_local_experts); 0: every layer dense */
    int n_experts_used;  /* num_experts_per_tok (top k) */
    int moe_inter;       /* moe_intermediate_size */
    int norm_topk;       /* norm_topk_prob */
    int sparse_step;     /* decoder_sparse_step */
    int n_moe_layers;    /* layers with moe_layer[l] = 1 */
    unsigned char moe_layer[CFG_MAX_LAYERS];

    /* Qwen3.5 hybrid (CFG_QWEN3_5; all 0 otherwise) */
    int qwen35_moe;      /* Qwen3.5-MoE (qwen3_5_moe_text): every layer's MLP the expert block
                            (norm_topk always), plus a shared expert */
    /* Qwen3-Next (Qwen3NextForCausalLM / qwen3_next, Qwen3-Coder-Next): the
     * Qwen3.5 layers, expert layers chosen as qwen3_moe chooses them
     * (mlp_only_layers, decoder_sparse_step, norm_topk_prob) with a gated
     * shared expert in each, and the linear layers' input projections fused
     * per key head g: in_proj_qkvz rows [q_g dk | k_g dk | v_g r*dv | z_g r*dv]
     * and in_proj_ba rows [b_g r | a_g r] (r = lin_v_heads / lin_k_heads);
     * the loader regroups them into lin_qkv / lin_z / lin_b / lin_a */
    int qwen3_next;
    int shared_inter;    /* shared_expert_intermediate_size; 0: no shared expert */
    int vision_ignored;  /* the file was a multimodal qwen3_5 config: its text_config was loaded */
    int attn_gate;       /* full attention: q_proj rows 2 * n_heads * head_dim (query, gate per head) */
    int rot_dim;         /* RoPE on dims 0..rot_dim-1 of a head (head_dim * partial_rotary_factor); else head_dim */
    int n_linear_layers; /* layers with linear_layer[l] = 1 */
    unsigned char linear_layer[CFG_MAX_LAYERS]; /* layer_types[l] == "linear_attention" */
    int lin_k_heads, lin_v_heads; /* linear_num_key_heads, linear_num_value_heads (v a multiple of k) */
    int lin_k_dim, lin_v_dim;     /* linear_key_head_dim, linear_value_head_dim */
    int lin_conv;                 /* linear_conv_kernel_dim */
    /* the order of the value heads: 0 (Hugging Face's) groups them by key
     * head, value head h reading key head h / (lin_v_heads / lin_k_heads);
     * 1 (llama.cpp's converter, GGUF files, when lin_v_heads > lin_k_heads)
     * tiles them, value head h reading key head h % lin_k_heads. Every
     * value-indexed tensor is in the one order, so only this mapping differs. */
    int lin_v_tiled;

    /* gpt-oss (CFG_GPT_OSS; all 0 otherwise) */
    int attn_bias;       /* attention_bias: q/k/v/o_proj have a bias vector */
    int attn_sinks;      /* self_attn.sinks [n_heads]: one more logit per head in the softmax, no value */
    int window;          /* sliding_window: a sliding layer's row at position p sees keys max(0, p-window+1)..p */
    int n_sliding_layers; /* layers with sliding_layer[l] = 1 */
    unsigned char sliding_layer[CFG_MAX_LAYERS]; /* layer_types[l] == "sliding_attention" */
    float swiglu_limit;  /* the experts' clamp L (7 in every released checkpoint) */

    /* Gemma-4 (CFG_GEMMA4; all 0 otherwise; config.h's CFG_GEMMA4 note) */
    float attn_scale;    /* attention score multiplier; 0: 1/sqrt(head_dim) (every other family) */
    int v_norm;          /* values RMS-normed per head, no weight */
    int k_eq_v;          /* attention_k_eq_v: full layers' values are their keys before k_norm/RoPE (no v_proj) */
    int geglu;           /* MLP act: gelu_pytorch_tanh(g) * u instead of silu(g) * u */
    int ple;             /* hidden_size_per_layer_input: per-layer input width; 0: none */
    float softcap;       /* final_logit_softcapping; 0: none */
    double full_theta, full_factor; /* full layers' proportional RoPE: theta, factor */
    int full_rot;        /* frequency pairs that rotate in a full layer (the rest: frequency 0) */
    int g4_moe;          /* Gemma-4 enable_moe_block: every layer (moe_layer[] all 1) has the expert block
                            beside its dense MLP (intermediate_size), outputs summed (model.h) */
    int gemma_mm;        /* a multimodal gemma4 config: its text_config was loaded, vision/audio ignored */
    /* a layer's head width and kv heads where they differ from head_dim /
     * n_kv_heads (Gemma-4's full layers), else 0: read them with
     * cfg_head_dim / cfg_kv_heads */
    unsigned short layer_hd[CFG_MAX_LAYERS], layer_kv[CFG_MAX_LAYERS];

    /* DFlash draft (architectures[0] == "DFlashDraftModel") */
    int is_draft;
    int block_size;
    int mask_token_id;
    int n_target_layers;
    int n_taps;
    int tap_layers[CFG_MAX_TAPS]; /* target layer ids whose outputs feed the draft */

    /* generation_config.json (optional) */
    int n_eos;
    int eos_ids[CFG_MAX_EOS];
} cfg_model;

int cfg_load(cfg_model *c, const char *dir);
/* Layer l's head width and kv heads (Gemma-4's full layers differ). */
static inline int cfg_head_dim(const cfg_model *c, int l) { return c->layer_hd[l] ? c->layer_hd[l] : c->head_dim; }
static inline int cfg_kv_heads(const cfg_model *c, int l) { return c->layer_kv[l] ? c->layer_kv[l] : c->n_kv_heads; }
/* The widest layer's n_heads * head_dim (q rows) and kv heads * head_dim. */
int cfg_max_q(const cfg_model *c);
int cfg_max_kv(const cfg_model *c);
/* The same checks on a config.json object built elsewhere (GGUF metadata);
 * PATH names it in messages. eos_token_id is read from ROOT. */
struct cJSON;
int cfg_from_json(cfg_model *c, const struct cJSON *root, const char *path);

/* The default target_layer_ids when a draft's config has none (z-lab's
 * DFlash rule): nd ids spread evenly over target layers 1..nt-3, rounded as
 * Python rounds (ties to even); one draft layer taps layer nt/2. */
void cfg_default_taps(int n_target_layers, int n_draft_layers, int *ids);

#endif
