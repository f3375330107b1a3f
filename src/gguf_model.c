/* gguf_model.c - see gguf_model.h. Names and keys follow llama.cpp's GGUF
 * conventions (gguf-py constants), read from its documentation and files. */
#include "gguf_model.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util.h"

/* Qwen2/Qwen3, Qwen3.5 and Llama-3 pre-tokenizer regexes (tokenizer.json Split
 * patterns; llama.cpp's tokenizer.ggml.pre "qwen2", "qwen35", "llama-bpe").
 * Qwen3.5's differs from Qwen3's in its letter classes: combining marks
 * (\p{M}) join the letters of a word instead of starting a symbol run. */
const char ggm_qwen2_re[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                               "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char ggm_qwen35_re[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
                             "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char ggm_llama3_re[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* gpt-oss's o200k_harmony (llama.cpp's "gpt-4o"): case-split words, digits
 * in threes, no normalizer */
const char ggm_gpt4o_re[] = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
                            "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
                            "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*"
                            "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* NFC as the families' tokenizer.json files normalize (Qwen3.5's as Qwen3's) */
const ggm_pretok ggm_pretoks[] = {
    {"qwen2", ggm_qwen2_re, 1},
    {"qwen35", ggm_qwen35_re, 1},
    {"llama-bpe", ggm_llama3_re, 0},
    {"gpt-4o", ggm_gpt4o_re, 0},
    {NULL, NULL, 0},
};



/* s[0..n) for a message: at most 48 bytes, control characters as '?' */
static const char *shown(const char *s, size_t n, char *buf) {
    size_t k = n > 48 ? 48 : n;
    for (size_t i = 0; i < k; i++) buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    buf[k] = 0;
    return buf;
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* --------------------------------------------------------------- config */

/* The architectures read here (general.architecture) and the Hugging Face
 * class each one's metadata becomes. */
typedef enum {
    GA_QWEN3, GA_LLAMA, GA_DFLASH, GA_QWEN3MOE, GA_QWEN35, GA_QWEN35MOE, GA_QWEN3NEXT, GA_GPTOSS, GA_GEMMA4
} ggm_arch;
static const struct {
    const char *name, *hf;
} ga_names[] = {
    [GA_QWEN3] = {"qwen3", "Qwen3ForCausalLM"},
    [GA_LLAMA] = {"llama", "LlamaForCausalLM"},
    [GA_DFLASH] = {"dflash", "DFlashDraftModel"},
    [GA_QWEN3MOE] = {"qwen3moe", "Qwen3MoeForCausalLM"},
    [GA_QWEN35] = {"qwen35", "Qwen3_5ForCausalLM"},
    [GA_QWEN35MOE] = {"qwen35moe", "Qwen3_5MoeForCausalLM"},
    [GA_QWEN3NEXT] = {"qwen3next", "Qwen3NextForCausalLM"},
    [GA_GPTOSS] = {"gpt-oss", "GptOssForCausalLM"},
    [GA_GEMMA4] = {"gemma4", "Gemma4ForCausalLM"},
};
enum { GA_N = sizeof ga_names / sizeof ga_names[0] };

static int arch_of(const gguf_file *g, char *arch, size_t cap, ggm_arch *ga) {
    const char *s;
    size_t n;
    if (gguf_get_str(g, "general.architecture", &s, &n, 1)) return -1;
    if (n >= cap) n = cap - 1;
    memcpy(arch, s, n);
    arch[n] = 0;
    for (int i = 0; i < GA_N; i++)
        if (!strcmp(arch, ga_names[i].name)) {
            *ga = (ggm_arch)i;
            return 0;
        }
    char b[64];
    dfl_seterr("%s: unsupported architecture '%s' (supported: qwen3, qwen3moe, qwen35, qwen35moe, qwen3next, llama, "
               "gpt-oss, gemma4, dflash)",
               g->path, shown(arch, strlen(arch), b));
    return -1;
}

static int get_akey(const gguf_file *g, const char *arch, const char *k, int64_t *v, int req) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, k);
    return gguf_get_int(g, key, v, req);
}

static int get_afloat(const gguf_file *g, const char *arch, const char *k, double *v, int req) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, k);
    return gguf_get_float(g, key, v, req);
}

/* llama.cpp's end-of-generation token texts (besides the eos/eot/eom ids) */
static const char *const eog_text[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>",
                                       "<|end_of_text|>", "<|end|>"};

static void add_eos(cfg_model *c, int64_t id) {
    if (id < 0 || id > INT32_MAX) return;
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == id) return;
    if (c->n_eos < CFG_MAX_EOS) c->eos_ids[c->n_eos++] = (int)id;
}

/* blk.L.NAME present */
static int has_blk(const gguf_file *g, int l, const char *name) {
    char b[96];
    snprintf(b, sizeof b, "blk.%d.%s", l, name);
    return gguf_find_tensor(g, b) != NULL;
}

/* The expert and Qwen3.5 keys of ARCH into J as config.json writes them.
 * The expert block is llama.cpp's: softmax router, top-k renormalised
 * (its qwen3moe and qwen35moe graphs always renormalise), weights scale 1;
 * a layer without blk.L.ffn_gate_inp is dense (mlp_only_layers). */
static int family_json(cJSON *j, const gguf_file *g, const char *arch, ggm_arch ga, int64_t nl, int64_t nb, int64_t hd,
                       int64_t rd) {
    int shared = ga == GA_QWEN35MOE || ga == GA_QWEN3NEXT;
    if (ga == GA_QWEN3MOE || shared) {
        int64_t ne, nu, mi, si = 0, gating = 1;
        double scale = 1.0;
        if (get_akey(g, arch, "expert_count", &ne, 1) < 0 || get_akey(g, arch, "expert_used_count", &nu, 1) < 0 ||
            get_akey(g, arch, "expert_feed_forward_length", &mi, 1) < 0 ||
            (shared && get_akey(g, arch, "expert_shared_feed_forward_length", &si, 1) < 0) ||
            get_akey(g, arch, "expert_gating_func", &gating, 0) < 0 ||
            get_afloat(g, arch, "expert_weights_scale", &scale, 0) < 0)
            return -1;
        if (gating != 1) {
            dfl_seterr("%s: %s.expert_gating_func %lld is not softmax (1), the only router dflash has", g->path,
                       arch, (long long)gating);
            return -1;
        }
        if (scale != 1.0) {
            dfl_seterr("%s: %s.expert_weights_scale %g is not 1 (not supported)", g->path, arch, scale);
            return -1;
        }
        cJSON_AddNumberToObject(j, "num_experts", (double)ne);
        cJSON_AddNumberToObject(j, "num_experts_per_tok", (double)nu);
        cJSON_AddNumberToObject(j, "moe_intermediate_size", (double)mi);
        if (shared) cJSON_AddNumberToObject(j, "shared_expert_intermediate_size", (double)si);
        if (ga != GA_QWEN35MOE) { /* qwen3moe / qwen3next config.json keys (Qwen3.5-MoE has neither) */
            cJSON_AddBoolToObject(j, "norm_topk_prob", 1);
            cJSON *dense = cJSON_AddArrayToObject(j, "mlp_only_layers");
            for (int64_t l = 0; l < nl && l < CFG_MAX_LAYERS; l++)
                if (!has_blk(g, (int)l, "ffn_gate_inp.weight")) cJSON_AddItemToArray(dense, cJSON_CreateNumber((double)l));
        }
    }
    if (ga != GA_QWEN35 && ga != GA_QWEN35MOE && ga != GA_QWEN3NEXT) return 0;
    /* Qwen3.5: ssm.* are llama.cpp's names for the Gated DeltaNet sizes */
    int64_t conv, dk, nk, nv, inner, iv = 4;
    if (get_akey(g, arch, "ssm.conv_kernel", &conv, 1) < 0 || get_akey(g, arch, "ssm.state_size", &dk, 1) < 0 ||
        get_akey(g, arch, "ssm.group_count", &nk, 1) < 0 || get_akey(g, arch, "ssm.time_step_rank", &nv, 1) < 0 ||
        get_akey(g, arch, "ssm.inner_size", &inner, 1) < 0 || get_akey(g, arch, "full_attention_interval", &iv, 0) < 0)
        return -1;
    if (nv < 1 || inner % nv) {
        dfl_seterr("%s: %s.ssm.inner_size %lld is not a multiple of ssm.time_step_rank %lld (value heads)", g->path,
                   arch, (long long)inner, (long long)nv);
        return -1;
    }
    cJSON_AddNumberToObject(j, "linear_conv_kernel_dim", (double)conv);
    cJSON_AddNumberToObject(j, "linear_key_head_dim", (double)dk);
    cJSON_AddNumberToObject(j, "linear_num_key_heads", (double)nk);
    cJSON_AddNumberToObject(j, "linear_num_value_heads", (double)nv);
    cJSON_AddNumberToObject(j, "linear_value_head_dim", (double)(inner / nv));
    cJSON_AddNumberToObject(j, "full_attention_interval", (double)iv);
    cJSON_AddNumberToObject(j, "partial_rotary_factor", rd < 0 ? 0.25 : (double)rd / (double)hd);
    char key[160];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", arch);
    const gguf_kv *rl = gguf_find_kv(g, key);
    if (rl) {
        if (rl->type != GGUF_ARRAY || rl->atype == GGUF_STRING || rl->atype == GGUF_ARRAY ||
            rl->atype == GGUF_FLOAT32 || rl->atype == GGUF_FLOAT64 || rl->n != (uint64_t)nb) {
            dfl_seterr("%s: key '%s' must be an array of %lld booleans (one per block)", g->path, key, (long long)nb);
            return -1;
        }
        cJSON *lt = cJSON_AddArrayToObject(j, "layer_types");
        for (uint64_t i = 0; i < (uint64_t)nl; i++) /* the decoder's; the nextn blocks' entries are not read */
            cJSON_AddItemToArray(lt, cJSON_CreateString(gguf_arr_int(rl, i) ? "linear_attention" : "full_attention"));
    }
    return 0;
}

/* ---- gpt-oss and Gemma-4: llama.cpp's gpt-oss and gemma4 ------------------
 *
 * What llama.cpp's converter (conversion/gpt_oss.py, conversion/gemma.py
 * Gemma4Model) writes under ARCH., and nothing else: every other ARCH. key
 * is refused naming it (zoo2_keys), so a file that says something dflash
 * would not do fails at load. */
static const char *const zoo2_common[] = {
    "block_count", "context_length", "embedding_length", "feed_forward_length", "attention.head_count",
    "attention.head_count_kv", "rope.freq_base", "attention.layer_norm_rms_epsilon", "attention.key_length",
    "attention.value_length", "attention.sliding_window", "attention.sliding_window_pattern", "rope.dimension_count",
    "rope.freq_base_swa", "vocab_size", NULL};
static const char *const zoo2_gptoss[] = {
    "rope.scaling.type", "rope.scaling.factor", "rope.scaling.original_context_length", "rope.scaling.yarn_beta_fast",
    "rope.scaling.yarn_beta_slow", "expert_count", "expert_used_count", "expert_feed_forward_length",
    "expert_gating_func", "expert_weights_scale", NULL};
static const char *const zoo2_gemma4[] = {
    "final_logit_softcapping", "attention.shared_kv_layers", "embedding_length_per_layer_input",
    "attention.key_length_swa", "attention.value_length_swa", "rope.dimension_count_swa", NULL};

static int in_list(const char *k, const char *const *l) {
    for (; *l; l++)
        if (!strcmp(k, *l)) return 1;
    return 0;
}

static int zoo2_keys(const gguf_file *g, const char *arch, ggm_arch ga) {
    size_t al = strlen(arch);
    for (int i = 0; i < g->n_kv; i++) {
        const char *k = g->kv[i].key;
        if (strncmp(k, arch, al) || k[al] != '.') continue;
        if (in_list(k + al + 1, zoo2_common) || in_list(k + al + 1, ga == GA_GPTOSS ? zoo2_gptoss : zoo2_gemma4))
            continue;
        char b[64];
        dfl_seterr("%s: key '%s' is not supported for %s (dflash does not implement what it says)", g->path,
                   shown(k, strlen(k), b), arch);
        return -1;
    }
    return 0;
}

/* ARCH.K as one integer per layer (a scalar for all, or an array of NL
 * integers) into v[NL]; 1 if present, 0 if absent, -1 on a bad value. */
static int per_layer_ints(const gguf_file *g, const char *arch, const char *k, int64_t nl, int64_t *v) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, k);
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv) return 0;
    if (kv->type != GGUF_ARRAY) {
        int64_t x;
        if (gguf_get_int(g, key, &x, 1)) return -1;
        for (int64_t l = 0; l < nl; l++) v[l] = x;
        return 1;
    }
    if (kv->atype == GGUF_STRING || kv->atype == GGUF_ARRAY || kv->atype == GGUF_FLOAT32 ||
        kv->atype == GGUF_FLOAT64 || kv->atype == GGUF_BOOL || kv->n != (uint64_t)nl) {
        dfl_seterr("%s: key '%s' must be an integer or an array of %lld integers (one per layer)", g->path, key,
                   (long long)nl);
        return -1;
    }
    for (int64_t l = 0; l < nl; l++) v[l] = gguf_arr_int(kv, (uint64_t)l);
    return 1;
}

/* ARCH.attention.sliding_window_pattern as llama.cpp reads it (an array of
 * NL bools: layer l slides when true; or an integer n: layer l slides when
 * l % n < n - 1, 0 meaning every layer), DEF_N when absent, into sw[NL]. */
static int swa_layers(const gguf_file *g, const char *arch, int64_t nl, int64_t def_n, unsigned char *sw) {
    char key[160];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
    const gguf_kv *kv = gguf_find_kv(g, key);
    int64_t n = def_n;
    if (kv && kv->type == GGUF_ARRAY) {
        if (kv->atype != GGUF_BOOL || kv->n != (uint64_t)nl) {
            dfl_seterr("%s: key '%s' must be an array of %lld booleans (one per layer) or an integer", g->path, key,
                       (long long)nl);
            return -1;
        }
        for (int64_t l = 0; l < nl; l++) sw[l] = gguf_arr_int(kv, (uint64_t)l) != 0;
        return 0;
    }
    if (kv && gguf_get_int(g, key, &n, 1)) return -1;
    if (n < 0 || n > CFG_MAX_LAYERS) {
        dfl_seterr("%s: key '%s' %lld is out of range (0..%d)", g->path, key, (long long)n, CFG_MAX_LAYERS);
        return -1;
    }
    for (int64_t l = 0; l < nl; l++) sw[l] = n == 0 || l % n < n - 1;
    return 0;
}

static void put_layer_types(cJSON *j, int64_t nl, const unsigned char *sw) {
    cJSON *lt = cJSON_AddArrayToObject(j, "layer_types");
    for (int64_t l = 0; l < nl; l++)
        cJSON_AddItemToArray(lt, cJSON_CreateString(sw[l] ? "sliding_attention" : "full_attention"));
}

/* gpt-oss's keys as config.json (GptOssConfig) says them. The router is
 * gpt-oss's (llama.cpp's SOFTMAX_WEIGHT: top-k of the logits, softmax over
 * those), swiglu_limit 7 (llama.cpp's SWIGLU_OAI has no key), sliding
 * layers from attention.sliding_window_pattern (default: every other layer
 * from layer 0, as llama.cpp's), YaRN from rope.scaling.* with truncate
 * false (every gpt-oss config.json says so; llama.cpp floors/ceils the
 * ramp's ends instead). */
static int gptoss_json(cJSON *j, const gguf_file *g, const char *arch, int64_t nl, int64_t ff, double theta) {
    int64_t ne, nu, mi, win, gating = 3, orig;
    double scale = 0, factor, bf = 32, bs = 1, tswa = theta;
    const char *st;
    size_t sn;
    char key[160];
    if (get_akey(g, arch, "expert_count", &ne, 1) < 0 || get_akey(g, arch, "expert_used_count", &nu, 1) < 0 ||
        get_akey(g, arch, "expert_feed_forward_length", &mi, 1) < 0 ||
        get_akey(g, arch, "attention.sliding_window", &win, 1) < 0 ||
        get_akey(g, arch, "expert_gating_func", &gating, 0) < 0 ||
        get_afloat(g, arch, "expert_weights_scale", &scale, 0) < 0 ||
        get_afloat(g, arch, "rope.freq_base_swa", &tswa, 0) < 0)
        return -1;
    if (gating != 3) {
        dfl_seterr("%s: %s.expert_gating_func %lld is not gpt-oss's softmax over the top-k logits (3)", g->path, arch,
                   (long long)gating);
        return -1;
    }
    if (scale != 0 && scale != 1) {
        dfl_seterr("%s: %s.expert_weights_scale %g is not 1 (not supported)", g->path, arch, scale);
        return -1;
    }
    if (tswa != theta) {
        dfl_seterr("%s: %s.rope.freq_base_swa %g differs from rope.freq_base %g (not supported)", g->path, arch, tswa,
                   theta);
        return -1;
    }
    if (ff >= 0 && ff != mi) {
        dfl_seterr("%s: %s.feed_forward_length %lld differs from expert_feed_forward_length %lld (gpt-oss has no "
                   "dense MLP)", g->path, arch, (long long)ff, (long long)mi);
        return -1;
    }
    unsigned char sw[CFG_MAX_LAYERS];
    if (nl > CFG_MAX_LAYERS) nl = CFG_MAX_LAYERS; /* cfg_from_json refuses it by name */
    if (swa_layers(g, arch, nl, 2, sw)) return -1;
    cJSON_AddNumberToObject(j, "num_local_experts", (double)ne);
    cJSON_AddNumberToObject(j, "num_experts_per_tok", (double)nu);
    cJSON_AddNumberToObject(j, "intermediate_size", (double)mi);
    cJSON_AddNumberToObject(j, "sliding_window", (double)win);
    cJSON_AddBoolToObject(j, "attention_bias", 1);
    put_layer_types(j, nl, sw);
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (gguf_get_str(g, key, &st, &sn, 0) < 0) return -1;
    if (!gguf_find_kv(g, key) || (sn == 4 && !memcmp(st, "none", 4))) return 0;
    if (!(sn == 4 && !memcmp(st, "yarn", 4))) {
        char b[64];
        dfl_seterr("%s: %s '%s' not supported (yarn or none)", g->path, key, shown(st, sn, b));
        return -1;
    }
    if (get_afloat(g, arch, "rope.scaling.factor", &factor, 1) < 0 ||
        get_akey(g, arch, "rope.scaling.original_context_length", &orig, 1) < 0 ||
        get_afloat(g, arch, "rope.scaling.yarn_beta_fast", &bf, 0) < 0 ||
        get_afloat(g, arch, "rope.scaling.yarn_beta_slow", &bs, 0) < 0)
        return -1;
    cJSON *rp = cJSON_AddObjectToObject(j, "rope_parameters");
    cJSON_AddStringToObject(rp, "rope_type", "yarn");
    cJSON_AddNumberToObject(rp, "factor", factor);
    cJSON_AddNumberToObject(rp, "original_max_position_embeddings", (double)orig);
    cJSON_AddNumberToObject(rp, "beta_fast", bf);
    cJSON_AddNumberToObject(rp, "beta_slow", bs);
    cJSON_AddBoolToObject(rp, "truncate", 0);
    return 0;
}

/* Gemma-4's keys as config.json (Gemma4TextConfig) says them: head_dim and
 * num_key_value_heads those of the sliding layers (key_length_swa), the
 * full layers' head (key_length) and each layer's kv heads (head_count_kv,
 * a scalar or one per layer) in per_layer_config; attention_k_eq_v when the
 * full layers have no attn_v (llama.cpp then uses the keys as values);
 * RoPE per layer type (freq_base_swa / freq_base; the full layers'
 * proportional RoPE from rope_freqs.weight, read by the caller); the PLE
 * width; final logit softcapping. Refused by name: shared KV layers, a
 * per-layer or unequal feed_forward_length, another RoPE width than the
 * head's, a last layer that slides (transformers makes it full). *HD and
 * *NKV become the sliding layers' values. */
static int gemma4_json(cJSON *j, const gguf_file *g, const char *arch, int64_t nl, int64_t *hd, int64_t *nkv,
                       int64_t nh) {
    int64_t hd_swa = -1, vd_swa = -1, rd_swa = -1, shared = 0, ple = 0, win, ffv[CFG_MAX_LAYERS],
            kvs[CFG_MAX_LAYERS];
    double cap = 0, tswa;
    if (nl > CFG_MAX_LAYERS) return 0; /* cfg_from_json refuses it by name */
    if (get_akey(g, arch, "attention.key_length_swa", &hd_swa, 1) < 0 ||
        get_akey(g, arch, "attention.value_length_swa", &vd_swa, 0) < 0 ||
        get_akey(g, arch, "rope.dimension_count_swa", &rd_swa, 0) < 0 ||
        get_akey(g, arch, "attention.shared_kv_layers", &shared, 0) < 0 ||
        get_akey(g, arch, "embedding_length_per_layer_input", &ple, 0) < 0 ||
        get_akey(g, arch, "attention.sliding_window", &win, 1) < 0 ||
        get_afloat(g, arch, "final_logit_softcapping", &cap, 0) < 0 ||
        get_afloat(g, arch, "rope.freq_base_swa", &tswa, 1) < 0)
        return -1;
    if (shared != 0) {
        dfl_seterr("%s: %s.attention.shared_kv_layers %lld: shared KV layers are not supported", g->path, arch,
                   (long long)shared);
        return -1;
    }
    if ((vd_swa >= 0 && vd_swa != hd_swa) || (rd_swa >= 0 && rd_swa != hd_swa)) {
        dfl_seterr("%s: %s.attention.value_length_swa %lld and rope.dimension_count_swa %lld must equal "
                   "attention.key_length_swa %lld", g->path, arch, (long long)vd_swa, (long long)rd_swa,
                   (long long)hd_swa);
        return -1;
    }
    int rc = per_layer_ints(g, arch, "feed_forward_length", nl, ffv);
    if (rc < 0) return -1;
    for (int64_t l = 1; rc && l < nl; l++)
        if (ffv[l] != ffv[0]) {
            dfl_seterr("%s: %s.feed_forward_length differs between layers 0 and %lld (not supported)", g->path, arch,
                       (long long)l);
            return -1;
        }
    if (rc) cJSON_AddNumberToObject(j, "intermediate_size", (double)ffv[0]);
    for (int64_t l = 0; l < nl; l++) kvs[l] = nh;
    if (per_layer_ints(g, arch, "attention.head_count_kv", nl, kvs) < 0) return -1;
    unsigned char sw[CFG_MAX_LAYERS];
    char key[160];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
    const gguf_kv *pk = gguf_find_kv(g, key);
    if (!pk || pk->type != GGUF_ARRAY) {
        dfl_seterr("%s: key '%s' must be an array of %lld booleans (one per layer)", g->path, key, (long long)nl);
        return -1;
    }
    if (swa_layers(g, arch, nl, 0, sw)) return -1;
    if (nl > 0 && sw[nl - 1]) {
        dfl_seterr("%s: %s: the last layer is a sliding one (transformers' Gemma-4 makes it full attention)",
                   g->path, key);
        return -1;
    }
    int64_t base_kv = -1;
    for (int64_t l = 0; l < nl; l++)
        if (sw[l] && base_kv < 0) base_kv = kvs[l];
    if (base_kv < 0) base_kv = kvs[0];
    put_layer_types(j, nl, sw);
    cJSON *plc = cJSON_AddObjectToObject(j, "per_layer_config");
    for (int64_t l = 0; l < nl; l++) {
        if (sw[l] && kvs[l] == base_kv) continue;
        char id[24];
        snprintf(id, sizeof id, "%lld", (long long)l);
        cJSON *e = cJSON_AddObjectToObject(plc, id);
        if (!sw[l]) cJSON_AddNumberToObject(e, "head_dim", (double)*hd);
        if (kvs[l] != base_kv) cJSON_AddNumberToObject(e, "num_key_value_heads", (double)kvs[l]);
    }
    /* attention_k_eq_v: every full layer without attn_v, a sliding one always with it */
    int full = 0, no_v = 0;
    for (int64_t l = 0; l < nl; l++) {
        int has = has_blk(g, (int)l, "attn_v.weight");
        if (sw[l] && !has) {
            dfl_seterr("%s: missing tensor 'blk.%lld.attn_v.weight' (a sliding layer has its own values)", g->path,
                       (long long)l);
            return -1;
        }
        if (!sw[l]) full++, no_v += !has;
    }
    if (no_v && no_v != full) {
        dfl_seterr("%s: some full-attention layers have attn_v.weight and others not (attention_k_eq_v is one "
                   "setting for all of them)", g->path);
        return -1;
    }
    cJSON_AddBoolToObject(j, "attention_k_eq_v", full && no_v == full);
    cJSON_AddNumberToObject(j, "sliding_window", (double)win);
    if (cap != 0) cJSON_AddNumberToObject(j, "final_logit_softcapping", cap);
    else cJSON_AddNullToObject(j, "final_logit_softcapping");
    cJSON_AddNumberToObject(j, "hidden_size_per_layer_input", (double)ple);
    cJSON_AddStringToObject(j, "hidden_activation", "gelu_pytorch_tanh");
    /* the full layers' partial rotary factor is put in by the caller from rope_freqs.weight */
    cJSON *rp = cJSON_AddObjectToObject(j, "rope_parameters");
    cJSON *rs = cJSON_AddObjectToObject(rp, "sliding_attention");
    cJSON_AddStringToObject(rs, "rope_type", "default");
    cJSON_AddNumberToObject(rs, "rope_theta", tswa);
    *hd = hd_swa;
    *nkv = base_kv;
    return 0;
}

/* The full layers' proportional RoPE as the converter writes it:
 * rope_freqs.weight [hd/2] F32, 1 for each of the first n frequency pairs
 * (they rotate at freq_base^(-2i/hd)) and 1e30 for the rest (ggml divides
 * their frequency by it: they do not rotate). Returns n (>= 1), or -1
 * naming the tensor for anything else. */
static int gemma4_rope(const gguf_file *g, int64_t hd) {
    const gguf_tensor *t = gguf_find_tensor(g, "rope_freqs.weight");
    if (!t) {
        dfl_seterr("%s: missing tensor 'rope_freqs.weight' (the full-attention layers' proportional RoPE)", g->path);
        return -1;
    }
    if (t->type != GGML_F32 || t->n_dims != 1 || t->ne[0] != hd / 2) {
        dfl_seterr("%s: tensor 'rope_freqs.weight': %s [%lld], expected F32 [%lld] (head_dim / 2)", g->path,
                   ggml_type_name(t->type), (long long)t->ne[0], (long long)(hd / 2));
        return -1;
    }
    int n = 0;
    for (int64_t i = 0; i < hd / 2; i++) {
        float f;
        memcpy(&f, (const uint8_t *)t->data + 4 * i, 4);
        if (f == 1.0f && n == i) n++;
        else if (!(f == 1e30f && n > 0)) {
            dfl_seterr("%s: tensor 'rope_freqs.weight': entry %lld = %g: only 1 (rotating pairs first) then 1e30 "
                       "(not rotating) are supported", g->path, (long long)i, f);
            return -1;
        }
    }
    return n;
}

static int gguf_config(cfg_model *c, const gguf_file *g) {
    char arch[32], where[1200];
    ggm_arch ga;
    if (arch_of(g, arch, sizeof arch, &ga)) return -1;
    int q35 = ga == GA_QWEN35 || ga == GA_QWEN35MOE || ga == GA_QWEN3NEXT, gemma4 = ga == GA_GEMMA4;
    if ((ga == GA_GPTOSS || gemma4) && zoo2_keys(g, arch, ga)) return -1;
    int64_t nl, nb, nextn = 0, H, ff = -1, nh, nkv = -1, hd = -1, vd = -1, ctx = 4096, rd = -1;
    double eps, theta = 10000.0;
    /* Gemma-4's feed_forward_length and head_count_kv may be per layer: gemma4_json reads them */
    if (get_akey(g, arch, "block_count", &nb, 1) < 0 || get_akey(g, arch, "nextn_predict_layers", &nextn, 0) < 0 ||
        get_akey(g, arch, "embedding_length", &H, 1) < 0 ||
        (!gemma4 && get_akey(g, arch, "feed_forward_length", &ff,
                             ga != GA_QWEN35MOE && ga != GA_QWEN3NEXT && ga != GA_GPTOSS) < 0) ||
        get_akey(g, arch, "attention.head_count", &nh, 1) < 0 ||
        (!gemma4 && get_akey(g, arch, "attention.head_count_kv", &nkv, 0) < 0) ||
        get_akey(g, arch, "attention.key_length", &hd, 0) < 0 ||
        get_akey(g, arch, "attention.value_length", &vd, 0) < 0 ||
        get_akey(g, arch, "context_length", &ctx, 0) < 0 || get_akey(g, arch, "rope.dimension_count", &rd, 0) < 0 ||
        get_afloat(g, arch, "attention.layer_norm_rms_epsilon", &eps, 1) < 0 ||
        get_afloat(g, arch, "rope.freq_base", &theta, 0) < 0)
        return -1;
    /* llama.cpp's converter appends the checkpoint's multi-token-prediction
     * blocks (Qwen3.5's mtp.*) after the decoder and counts them in
     * block_count: they are a draft of its own, not decoder layers, and
     * dflash does not read them */
    if (nextn < 0 || nextn >= nb) {
        dfl_seterr("%s: %s.nextn_predict_layers %lld is out of range (0..block_count - 1 = %lld)", g->path, arch,
                   (long long)nextn, (long long)nb - 1);
        return -1;
    }
    nl = nb - nextn;
    if (nkv < 0) nkv = nh;
    if (hd < 0 && nh > 0) hd = H / nh;
    if (vd >= 0 && vd != hd) {
        dfl_seterr("%s: %s.attention.value_length %lld differs from key_length %lld (not supported)", g->path, arch,
                   (long long)vd, (long long)hd);
        return -1;
    }
    if (rd >= 0 && rd != hd && !q35) {
        dfl_seterr("%s: %s.rope.dimension_count %lld differs from the head size %lld (partial RoPE not supported)",
                   g->path, arch, (long long)rd, (long long)hd);
        return -1;
    }
    char key[160];
    const char *st;
    size_t sn;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (ga != GA_GPTOSS && gguf_get_str(g, key, &st, &sn, 0) == 0 && !(sn == 4 && !memcmp(st, "none", 4))) {
        char b[64];
        dfl_seterr("%s: %s '%s' not supported", g->path, key, shown(st, sn, b));
        return -1;
    }
    int draft = ga == GA_DFLASH;
    int64_t vocab = 151936;
    cJSON *j = cJSON_CreateObject();
    if (!draft) {
        const gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight");
        if (!emb) {
            dfl_seterr("%s: missing tensor 'token_embd.weight'", g->path);
            cJSON_Delete(j);
            return -1;
        }
        if (emb->n_dims != 2) {
            dfl_seterr("%s: tensor 'token_embd.weight' has %d dimensions, expected 2", g->path, emb->n_dims);
            cJSON_Delete(j);
            return -1;
        }
        vocab = emb->ne[1];
    } else { /* a DFlash draft: block size, target layers (stored +1), mask token; no embedding */
        int64_t bs, mask;
        const gguf_kv *tl = gguf_find_kv(g, "dflash.target_layers");
        const gguf_kv *tk = gguf_find_kv(g, "tokenizer.ggml.tokens");
        if (get_akey(g, arch, "block_size", &bs, 1) < 0 || gguf_get_int(g, "tokenizer.ggml.mask_token_id", &mask, 1) < 0 ||
            get_akey(g, arch, "vocab_size", &vocab, 0) < 0) {
            cJSON_Delete(j);
            return -1;
        }
        if (!gguf_find_kv(g, "dflash.vocab_size") && tk && tk->type == GGUF_ARRAY) vocab = (int64_t)tk->n;
        if (!tl || tl->type != GGUF_ARRAY || tl->atype == GGUF_STRING || tl->atype == GGUF_FLOAT32 ||
            tl->atype == GGUF_FLOAT64 || tl->n < 1 || tl->n > CFG_MAX_TAPS) {
            dfl_seterr("%s: key 'dflash.target_layers' must be an array of 1..%d integers", g->path, CFG_MAX_TAPS);
            cJSON_Delete(j);
            return -1;
        }
        cJSON_AddNumberToObject(j, "block_size", (double)bs);
        cJSON *dc = cJSON_AddObjectToObject(j, "dflash_config");
        cJSON_AddNumberToObject(dc, "mask_token_id", (double)mask);
        cJSON *ids = cJSON_AddArrayToObject(dc, "target_layer_ids");
        for (uint64_t i = 0; i < tl->n; i++) /* out-of-range ids fail in cfg_from_json */
            cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)gguf_arr_int(tl, i) - 1));
    }
    cJSON *a = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString(ga_names[ga].hf));
    if (family_json(j, g, arch, ga, nl, nb, hd, rd)) {
        cJSON_Delete(j);
        return -1;
    }
    int full_rot = 0;
    if (ga == GA_GPTOSS) {
        if (gptoss_json(j, g, arch, nl, ff, theta)) {
            cJSON_Delete(j);
            return -1;
        }
        ff = -1; /* written as intermediate_size there */
    } else if (gemma4) {
        int64_t hd_full = hd;
        if (gemma4_json(j, g, arch, nl, &hd, &nkv, nh) || (full_rot = gemma4_rope(g, hd_full)) < 0) {
            cJSON_Delete(j);
            return -1;
        }
        cJSON *fa = cJSON_AddObjectToObject(cJSON_GetObjectItemCaseSensitive(j, "rope_parameters"), "full_attention");
        cJSON_AddStringToObject(fa, "rope_type", "proportional");
        cJSON_AddNumberToObject(fa, "rope_theta", theta);
        cJSON_AddNumberToObject(fa, "partial_rotary_factor", 2.0 * full_rot / (double)hd_full);
        cJSON_AddNumberToObject(j, "vocab_size_per_layer_input", (double)vocab);
    }
    cJSON_AddNumberToObject(j, "hidden_size", (double)H);
    if (ff >= 0) cJSON_AddNumberToObject(j, "intermediate_size", (double)ff);
    cJSON_AddNumberToObject(j, "num_hidden_layers", (double)nl);
    cJSON_AddNumberToObject(j, "num_attention_heads", (double)nh);
    cJSON_AddNumberToObject(j, "num_key_value_heads", (double)nkv);
    cJSON_AddNumberToObject(j, "head_dim", (double)hd);
    cJSON_AddNumberToObject(j, "vocab_size", (double)vocab);
    cJSON_AddNumberToObject(j, "max_position_embeddings", (double)ctx);
    cJSON_AddNumberToObject(j, "rms_norm_eps", eps);
    cJSON_AddNumberToObject(j, "rope_theta", theta);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", !draft && gguf_find_tensor(g, "output.weight") == NULL);
    snprintf(where, sizeof where, "%s (metadata as config.json)", g->path);
    int rc = cfg_from_json(c, j, where);
    cJSON_Delete(j);
    if (rc) return -1;
    snprintf(c->arch_name, sizeof c->arch_name, "%s (gguf)", arch);
    if (gemma4) c->full_rot = full_rot; /* exactly the pairs rope_freqs.weight rotates */
    /* llama.cpp's converter tiles Qwen3.5's value heads (config.h), not
     * Qwen3-Next's */
    c->lin_v_tiled = (ga == GA_QWEN35 || ga == GA_QWEN35MOE) && c->lin_v_heads > c->lin_k_heads;
    /* stop tokens: eos, eot, eom and llama.cpp's end-of-generation texts */
    static const char *const ids[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                      "tokenizer.ggml.eom_token_id"};
    for (int i = 0; i < 3; i++) {
        int64_t v;
        if (gguf_get_int(g, ids[i], &v, 0) < 0) return -1;
        if (gguf_find_kv(g, ids[i])) add_eos(c, v);
    }
    const gguf_kv *tk = gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (tk && tk->type == GGUF_ARRAY && tk->atype == GGUF_STRING)
        for (uint64_t i = 0; i < tk->n; i++) {
            size_t n;
            const char *s = gguf_arr_str(tk, i, &n);
            for (size_t k = 0; k < sizeof eog_text / sizeof eog_text[0]; k++)
                if (n == strlen(eog_text[k]) && !memcmp(s, eog_text[k], n)) add_eos(c, (int64_t)i);
        }
    return 0;
}

/* -------------------------------------------------------------- weights */

/* Permutation of Q/K rows: HF row r (head h, half s, index j) comes from
 * GGUF row h*hd + 2j + s (llama.cpp interleaves the two rotary halves). */
int *ggm_unpermute(int rows, int hd) {
    int *p = dfl_malloc(sizeof(int) * (size_t)rows), half = hd / 2;
    for (int r = 0; r < rows; r++) {
        int h = r / hd, s = (r % hd) / half, j = r % half;
        p[r] = h * hd + 2 * j + s;
    }
    return p;
}

/* Finish a converted weight as MLX bits-bit with groups of `group`: data
 * (owned by m), and the n scales/biases as F16 when every one is exactly an
 * f16, else F32. Takes sc and bi (dfl_malloc'ed) and frees them. */
static void put_mlx(mdl_model *m, wt_weight *w, int bits, int group, void *data, float *sc, float *bi, size_t n) {
    w->dtype = bits == 8 ? WT_Q8 : WT_Q4;
    w->bits = bits;
    w->group_size = group;
    w->data = data;
    int f16 = 1;
    for (size_t i = 0; i < n && f16; i++) {
        uint16_t h = dfl_f32_to_f16(bi[i]);
        f16 = dfl_f16_to_f32(h) == bi[i] || (isnan(bi[i]) && isnan(dfl_f16_to_f32(h)));
        h = dfl_f32_to_f16(sc[i]);
        f16 = f16 && (dfl_f16_to_f32(h) == sc[i] || isnan(sc[i]));
    }
    if (f16) {
        uint16_t *s = mdl_own(m, 2 * n), *b = mdl_own(m, 2 * n);
        for (size_t i = 0; i < n; i++) {
            s[i] = dfl_f32_to_f16(sc[i]);
            b[i] = dfl_f32_to_f16(bi[i]);
        }
        w->scales = s;
        w->biases = b;
        w->scale_dtype = WT_F16;
    } else {
        float *s = mdl_own(m, 4 * n), *b = mdl_own(m, 4 * n);
        memcpy(s, sc, 4 * n);
        memcpy(b, bi, 4 * n);
        w->scales = s;
        w->biases = b;
        w->scale_dtype = WT_F32;
    }
    free(sc);
    free(bi);
}

int ggm_q8_0_weight(mdl_model *m, const uint8_t *src, int rows, int cols, const int *perm, wt_weight *w) {
    size_t nb = (size_t)cols / 32, n = nb * (size_t)rows;
    uint8_t *q = mdl_own(m, (size_t)rows * (size_t)cols);
    float *sc = dfl_malloc(4 * n), *bi = dfl_malloc(4 * n);
    for (int r = 0; r < rows; r++) {
        const uint8_t *row = src + (size_t)(perm ? perm[r] : r) * nb * 34;
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = row + b * 34;
            float d = dfl_f16_to_f32(rd16(blk));
            sc[r * nb + b] = d;
            bi[r * nb + b] = -128.0f * d;
            uint8_t *o = q + (size_t)r * (size_t)cols + b * 32;
            for (int i = 0; i < 32; i++) o[i] = (uint8_t)(blk[2 + i] ^ 0x80); /* int8 q -> q + 128 */
        }
    }
    put_mlx(m, w, 8, 32, q, sc, bi, n);
    return 0;
}


/* K-quant 6-bit scale and min j of a 12-byte scales array (ggml's layout:
 * j < 4 in the low 6 bits of bytes j / j+4, else split over bytes j+4 and
 * the top 2 bits of bytes j-4 / j). */
static void k4_scale_min(int j, const uint8_t *q, int *sc, int *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Group g (32 weights) of one block of TYPE: unsigned codes q[32] with
 * w = scale * q + bias (exactly the value ggml's dequantize computes). */
static void decode_group(int type, const uint8_t *blk, int g, uint8_t *q, float *scale, float *bias) {
    switch (type) {
    case GGML_Q4_0:
    case GGML_Q4_1:
    case GGML_Q5_0:
    case GGML_Q5_1: {
        int has_m = type == GGML_Q4_1 || type == GGML_Q5_1, five = type == GGML_Q5_0 || type == GGML_Q5_1;
        float d = dfl_f16_to_f32(rd16(blk));
        const uint8_t *p = blk + (has_m ? 4 : 2);
        uint32_t qh = 0;
        if (five) {
            qh = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            p += 4;
        }
        for (int i = 0; i < 16; i++) {
            q[i] = (uint8_t)((p[i] & 15) | (five ? ((qh >> i) & 1) << 4 : 0));
            q[i + 16] = (uint8_t)((p[i] >> 4) | (five ? ((qh >> (i + 16)) & 1) << 4 : 0));
        }
        *scale = d;
        *bias = has_m ? dfl_f16_to_f32(rd16(blk + 2)) : (five ? -16.0f : -8.0f) * d;
        return;
    }
    case GGML_Q4_K:
    case GGML_Q5_K: { /* 8 groups per 256-block; a 64-chunk: low nibbles, then high nibbles */
        float d = dfl_f16_to_f32(rd16(blk)), dmin = dfl_f16_to_f32(rd16(blk + 2));
        int sc, mn;
        k4_scale_min(g, blk + 4, &sc, &mn);
        int five = type == GGML_Q5_K;
        const uint8_t *qh = blk + 16, *qs = blk + 16 + (five ? 32 : 0) + 32 * (g / 2);
        for (int l = 0; l < 32; l++) {
            int v = g % 2 ? qs[l] >> 4 : qs[l] & 15;
            if (five && (qh[l] >> g & 1)) v += 16;
            q[l] = (uint8_t)v;
        }
        *scale = d * (float)sc;
        *bias = -(dmin * (float)mn);
        return;
    }
    default: return;
    }
}

static int group_bits(int type) { return type == GGML_Q4_0 || type == GGML_Q4_1 || type == GGML_Q4_K ? 4 : 8; }

/* Q4_0/Q4_1/Q4_K -> MLX Q4, Q5_0/Q5_1/Q5_K -> MLX Q8 (codes 0..31), group 32 */
static void blocks_weight(mdl_model *m, int type, const uint8_t *src, int rows, int cols, const int *perm,
                          wt_weight *w) {
    int blck = ggml_blck_size(type), bits = group_bits(type);
    size_t bsz = ggml_type_size(type), nbr = (size_t)cols / (size_t)blck, ng = (size_t)cols / 32;
    size_t n = ng * (size_t)rows;
    uint8_t *out = mdl_own(m, (size_t)rows * (size_t)cols * (size_t)bits / 8);
    float *sc = dfl_malloc(4 * n), *bi = dfl_malloc(4 * n);
    uint8_t q[32];
    for (int r = 0; r < rows; r++) {
        const uint8_t *row = src + (size_t)(perm ? perm[r] : r) * nbr * bsz;
        for (size_t gi = 0; gi < ng; gi++) {
            size_t e0 = gi * 32;
            decode_group(type, row + e0 / (size_t)blck * bsz, (int)(e0 % (size_t)blck) / 32, q, &sc[r * ng + gi],
                         &bi[r * ng + gi]);
            uint8_t *o = out + ((size_t)r * (size_t)cols + e0) * (size_t)bits / 8;
            if (bits == 8) memcpy(o, q, 32);
            else
                for (int i = 0; i < 16; i++) o[i] = (uint8_t)(q[2 * i] | q[2 * i + 1] << 4);
        }
    }
    put_mlx(m, w, bits, 32, out, sc, bi, n);
}

/* Q6_K -> MLX Q8 with group 16, one group per sub-block: code q (6 bits,
 * 0..63) as a byte, scale d*sc (an f16 times an int8: exact in f32), bias
 * -32*(d*sc). wt_get_row's s*q + b is then exactly ggml's d*sc*(q-32):
 * s has at most 18 significant bits, so s*q (q < 64) and s*(q-32) are
 * exact and so is their difference's rounding. Bit layout of a 210-byte
 * block (ggml's): ql[128] low nibbles, qh[64] high 2 bits, int8 sc[16],
 * f16 d; each half n of 128 weights takes ql[64n..], qh[32n..], sc[8n..]. */
static void q6k_weight(mdl_model *m, const uint8_t *src, int rows, int cols, const int *perm, wt_weight *w) {
    size_t nbr = (size_t)cols / 256, ng = (size_t)cols / 16, n = ng * (size_t)rows;
    uint8_t *out = mdl_own(m, (size_t)rows * (size_t)cols);
    float *sc = dfl_malloc(4 * n), *bi = dfl_malloc(4 * n);
    for (int r = 0; r < rows; r++) {
        const uint8_t *row = src + (size_t)(perm ? perm[r] : r) * nbr * 210;
        for (size_t b = 0; b < nbr; b++) {
            const uint8_t *ql = row + b * 210, *qh = ql + 128;
            const int8_t *scs = (const int8_t *)(ql + 192);
            float d = dfl_f16_to_f32(rd16(ql + 208));
            uint8_t *y = out + (size_t)r * (size_t)cols + b * 256;
            for (int i = 0; i < 16; i++) { /* sub-block i = weights 16i .. 16i+15 */
                size_t gi = (size_t)r * ng + b * 16 + (size_t)i;
                sc[gi] = d * (float)scs[i];
                bi[gi] = -32.0f * sc[gi];
            }
            for (int h = 0; h < 2; h++) {
                const uint8_t *l0 = ql + 64 * h, *hb = qh + 32 * h;
                uint8_t *yh = y + 128 * h;
                for (int l = 0; l < 32; l++) {
                    yh[l] = (uint8_t)((l0[l] & 0xF) | ((hb[l] >> 0 & 3) << 4));
                    yh[l + 32] = (uint8_t)((l0[l + 32] & 0xF) | ((hb[l] >> 2 & 3) << 4));
                    yh[l + 64] = (uint8_t)((l0[l] >> 4) | ((hb[l] >> 4 & 3) << 4));
                    yh[l + 96] = (uint8_t)((l0[l + 32] >> 4) | ((hb[l] >> 6 & 3) << 4));
                }
            }
        }
    }
    put_mlx(m, w, 8, 16, out, sc, bi, n);
}

void ggm_q4_weight(mdl_model *m, const uint8_t *src, int rows, int cols, const int *perm, int q41, wt_weight *w) {
    blocks_weight(m, q41 ? GGML_Q4_1 : GGML_Q4_0, src, rows, cols, perm, w);
}

void ggm_dequant_weight(mdl_model *m, int type, const uint8_t *src, int rows, int cols, wt_weight *w) {
    memset(w, 0, sizeof *w);
    w->rows = rows;
    w->cols = cols;
    if (type == GGML_Q8_0) ggm_q8_0_weight(m, src, rows, cols, NULL, w);
    else if (type == GGML_Q6_K) q6k_weight(m, src, rows, cols, NULL, w);
    else blocks_weight(m, type, src, rows, cols, NULL, w);
}

/* ggml MXFP4 rows (blocks of 17 bytes: e8m0 scale, 16 bytes of nibbles,
 * element j low and j + 16 high) as a WT_MXFP4 weight (weight.h: element
 * 2k low and 2k + 1 high, the scales apart), copies owned by m; a scale
 * byte outside 2..252 is refused naming NAME. */
static int mxfp4_weight(mdl_model *m, const char *name, const uint8_t *src, int rows, int cols, wt_weight *w) {
    size_t nb = (size_t)cols / 32, n = nb * (size_t)rows;
    uint8_t *q = mdl_own(m, 16 * n), *sc = mdl_own(m, n);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *blk = src + 17 * i;
        if (!wt_mx4_e_ok(blk[0])) {
            dfl_seterr("%s: tensor '%s': MXFP4 scale byte %d (2^%d) at row %zu is outside the range supported "
                       "(2..252)", m->gguf->path, name, blk[0], blk[0] - 127, i / nb);
            return -1;
        }
        sc[i] = blk[0];
        for (int k = 0; k < 16; k++) { /* elements 2k, 2k + 1: nibbles of bytes (2k) % 16, (2k + 1) % 16 */
            int a = blk[1 + (2 * k) % 16] >> (k < 8 ? 0 : 4), b = blk[1 + (2 * k + 1) % 16] >> (k < 8 ? 0 : 4);
            q[16 * i + k] = (uint8_t)((a & 15) | (b & 15) << 4);
        }
    }
    *w = (wt_weight){.dtype = WT_MXFP4, .rows = rows, .cols = cols, .data = q, .scales = sc, .group_size = 32,
                     .bits = 4};
    return 0;
}

static const gguf_tensor *need_t(const mdl_model *m, const char *name) {
    const gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    if (!t) dfl_seterr("%s: missing tensor '%s'", m->gguf->path, name);
    return t;
}

/* One [rows, cols] matrix of type TYPE at SRC (nbytes) as W: float types
 * are views into the mapping, block types are converted (owned by m);
 * permute_hd > 0 puts llama Q/K rows back in HF order. NAME for messages. */
static int bind_data(mdl_model *m, const char *name, int type, const uint8_t *src, size_t nbytes, int rows, int cols,
                     int permute_hd, wt_weight *w) {
    memset(w, 0, sizeof *w);
    w->rows = rows;
    w->cols = cols;
    int *perm = permute_hd > 0 ? ggm_unpermute(rows, permute_hd) : NULL;
    size_t rb = nbytes / (size_t)rows;
    switch (type) {
    case GGML_F32:
    case GGML_F16:
    case GGML_BF16:
        w->dtype = type == GGML_F32 ? WT_F32 : type == GGML_F16 ? WT_F16 : WT_BF16;
        if (perm) {
            uint8_t *c = mdl_own(m, nbytes);
            for (int r = 0; r < rows; r++) memcpy(c + (size_t)r * rb, src + (size_t)perm[r] * rb, rb);
            src = c;
        }
        w->data = src;
        break;
    case GGML_Q8_0: ggm_q8_0_weight(m, src, rows, cols, perm, w); break;
    case GGML_Q4_0:
    case GGML_Q4_1:
    case GGML_Q5_0:
    case GGML_Q5_1:
    case GGML_Q4_K:
    case GGML_Q5_K: blocks_weight(m, type, src, rows, cols, perm, w); break;
    case GGML_Q6_K: q6k_weight(m, src, rows, cols, perm, w); break;
    case GGML_MXFP4:
        if (perm) { /* no permuted (llama Q/K) matrix is MXFP4 in any converter's file */
            free(perm);
            dfl_seterr("%s: tensor '%s': MXFP4 for a llama Q/K matrix is not supported", m->gguf->path, name);
            return -1;
        }
        if (mxfp4_weight(m, name, src, rows, cols, w)) return -1;
        break;
    default:
        free(perm);
        dfl_seterr("%s: tensor '%s': type %s not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, "
                   "Q5_K, Q6_K, MXFP4)", m->gguf->path, name, ggml_type_name(type));
        return -1;
    }
    free(perm);
    m->weight_bytes += wt_bytes(w);
    char full[300];
    snprintf(full, sizeof full, "%s: tensor '%s'", m->gguf->path, name);
    return wt_check(w, full);
}

/* Bind NAME as a [rows, cols] matrix (GGUF ne = [cols, rows]). */
static int bind_mat(mdl_model *m, const char *name, int rows, int cols, int permute_hd, wt_weight *w) {
    const gguf_tensor *t = need_t(m, name);
    if (!t) return -1;
    if (t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows) {
        dfl_seterr("%s: tensor '%s': shape [%lld, %lld] (%d dims), expected [%d, %d] (ne0 = columns) from the metadata",
                   m->gguf->path, name, (long long)t->ne[0], (long long)t->ne[1], t->n_dims, cols, rows);
        return -1;
    }
    return bind_data(m, name, t->type, t->data, t->nbytes, rows, cols, permute_hd, w);
}

/* Bind NAME, llama.cpp's stacked experts (ne = [cols, rows, E]), as E
 * matrices [rows, cols]: views of the mapping for float types, converted
 * per expert for block types. */
static int bind_stack(mdl_model *m, const char *name, int E, int rows, int cols, wt_weight *w) {
    const gguf_tensor *t = need_t(m, name);
    if (!t) return -1;
    if (t->n_dims != 3 || t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != E) {
        dfl_seterr("%s: tensor '%s': shape [%lld, %lld, %lld] (%d dims), expected [%d, %d, %d] (ne0 = columns, "
                   "ne2 = experts) from the metadata", m->gguf->path, name, (long long)t->ne[0], (long long)t->ne[1],
                   (long long)t->ne[2], t->n_dims, cols, rows, E);
        return -1;
    }
    size_t per = t->nbytes / (size_t)E;
    for (int e = 0; e < E; e++)
        if (bind_data(m, name, t->type, (const uint8_t *)t->data + per * (size_t)e, per, rows, cols, 0, &w[e]))
            return -1;
    return 0;
}

/* Copy NAME, a float tensor of ne = [ne0] (ne1 = 0) or [ne0, ne1], to a new
 * f32 array (row-major [ne1][ne0]). */
static float *bind_arr(mdl_model *m, const char *name, int ne0, int ne1) {
    const gguf_tensor *t = need_t(m, name);
    if (!t) return NULL;
    if (t->n_dims != (ne1 ? 2 : 1) || t->ne[0] != ne0 || (ne1 && t->ne[1] != ne1)) {
        if (ne1)
            dfl_seterr("%s: tensor '%s': shape [%lld, %lld] (%d dims), expected [%d, %d]", m->gguf->path, name,
                       (long long)t->ne[0], (long long)(t->n_dims > 1 ? t->ne[1] : 1), t->n_dims, ne0, ne1);
        else
            dfl_seterr("%s: tensor '%s': shape [%lld] (%d dims), expected [%d]", m->gguf->path, name,
                       (long long)t->ne[0], t->n_dims, ne0);
        return NULL;
    }
    if (t->type != GGML_F32 && t->type != GGML_F16 && t->type != GGML_BF16) {
        dfl_seterr("%s: tensor '%s': type %s not supported for a vector (F32, F16, BF16)", m->gguf->path, name,
                   ggml_type_name(t->type));
        return NULL;
    }
    size_t n = (size_t)ne0 * (size_t)(ne1 ? ne1 : 1);
    float *v = dfl_malloc(sizeof(float) * n);
    const uint8_t *p = t->data;
    for (size_t i = 0; i < n; i++) {
        if (t->type == GGML_F32) memcpy(&v[i], p + 4 * i, 4);
        else if (t->type == GGML_F16) v[i] = dfl_f16_to_f32(rd16(p + 2 * i));
        else v[i] = dfl_bf16_to_f32(rd16(p + 2 * i));
    }
    m->weight_bytes += t->nbytes;
    return v;
}

static float *bind_vec(mdl_model *m, const char *name, int n) { return bind_arr(m, name, n, 0); }

int ggm_load(mdl_model *m, const char *path) {
    memset(m, 0, sizeof *m);
    m->gguf = dfl_calloc(1, sizeof(gguf_file));
    if (gguf_open(m->gguf, path) != 0) {
        free(m->gguf);
        m->gguf = NULL;
        return -1;
    }
    const cfg_model *c = &m->cfg;
    if (gguf_config(&m->cfg, m->gguf) != 0) goto fail;
    int H = c->hidden, hd0 = c->head_dim;
    int llama = c->arch == CFG_LLAMA, q35 = c->arch == CFG_QWEN3_5, gptoss = c->arch == CFG_GPT_OSS,
        gemma4 = c->arch == CFG_GEMMA4;
    int E = c->n_experts, MI = c->moe_inter, nv = c->lin_v_heads, vd = nv * c->lin_v_dim;
    int C = 2 * c->lin_k_heads * c->lin_k_dim + vd;
    m->layers = dfl_calloc((size_t)c->n_layers, sizeof(mdl_layer));
    if (c->is_draft) {
        if (bind_mat(m, "fc.weight", H, c->n_taps * H, 0, &m->fc)) goto fail;
        if (!(m->hidden_norm = bind_vec(m, "enc.output_norm.weight", H))) goto fail;
    } else {
        if (bind_mat(m, "token_embd.weight", c->vocab, H, 0, &m->embed)) goto fail;
        if (c->tie_embeddings) m->lm_head = m->embed;
        else if (bind_mat(m, "output.weight", c->vocab, H, 0, &m->lm_head)) goto fail;
    }
    if (!(m->final_norm = bind_vec(m, "output_norm.weight", H))) goto fail;
    if (c->ple) { /* Gemma-4's per-layer inputs */
        int LP = c->n_layers * c->ple;
        if (bind_mat(m, "per_layer_token_embd.weight", c->vocab, LP, 0, &m->ple_embed) ||
            bind_mat(m, "per_layer_model_proj.weight", LP, H, 0, &m->ple_model_proj) ||
            !(m->ple_proj_norm = bind_vec(m, "per_layer_proj_norm.weight", c->ple)))
            goto fail;
    }
    /* llama3 scaling as per-frequency divisors (Gemma-4's proportional RoPE: gguf_config) */
    if (c->arch != CFG_GEMMA4 && gguf_find_tensor(m->gguf, "rope_freqs.weight")) {
        float *f = bind_vec(m, "rope_freqs.weight", hd0 / 2);
        if (!f) goto fail;
        for (int i = 0; i < hd0 / 2; i++)
            if (!(f[i] > 0 && f[i] < 1e30f)) {
                dfl_seterr("%s: tensor 'rope_freqs.weight': entry %d = %g is not a positive factor", path, i, f[i]);
                free(f);
                goto fail;
            }
        memcpy(m->cfg.rope_div, f, sizeof(float) * (size_t)(hd0 / 2));
        m->cfg.n_rope_div = hd0 / 2;
        free(f);
    }
    for (int l = 0; l < c->n_layers; l++) {
        mdl_layer *L = &m->layers[l];
        /* this layer's head (Gemma-4's full layers are wider) */
        int hd = cfg_head_dim(c, l), q = c->n_heads * hd, kv = cfg_kv_heads(c, l) * hd;
        char b[96];
#define MAT(field, sub, r, cc, ph)                                                                                  \
    snprintf(b, sizeof b, "blk.%d.%s.weight", l, sub);                                                             \
    if (bind_mat(m, b, r, cc, ph, &L->field)) goto fail;
#define VEC(field, sub, n)                                                                                          \
    snprintf(b, sizeof b, "blk.%d.%s.weight", l, sub);                                                             \
    if (!(L->field = bind_vec(m, b, n))) goto fail;
        /* Qwen3.5 norms hold 1 + weight already (the converter adds it);
         * its post-attention norm is post_attention_norm, not ffn_norm, as
         * gpt-oss's; Gemma-4's sandwich: post_attention_norm after the
         * attention, ffn_norm before the MLP, post_ffw_norm after it */
        VEC(in_norm, "attn_norm", H);
        VEC(post_norm, q35 || gptoss ? "post_attention_norm" : "ffn_norm", H);
        if (gemma4) {
            VEC(attn_out_norm, "post_attention_norm", H);
            VEC(ffn_out_norm, "post_ffw_norm", H);
            L->layer_scalar = 1.0f; /* llama.cpp: layer_output_scale is optional */
            snprintf(b, sizeof b, "blk.%d.layer_output_scale.weight", l);
            if (gguf_find_tensor(m->gguf, b)) {
                float *sc = bind_vec(m, b, 1);
                if (!sc) goto fail;
                L->layer_scalar = sc[0];
                free(sc);
            }
            if (c->ple) {
                MAT(ple_gate, "inp_gate", c->ple, H, 0);
                MAT(ple_proj, "proj", H, c->ple, 0);
                VEC(ple_norm, "post_norm", H);
            }
        }
        if (gptoss) { /* sinks, biases, the router with its bias, the experts with theirs */
            VEC(sinks, "attn_sinks", c->n_heads);
#define BIAS(field, sub, n)                                                                                         \
    snprintf(b, sizeof b, "blk.%d.%s.bias", l, sub);                                                               \
    if (!(L->field = bind_vec(m, b, n))) goto fail;
            BIAS(bq, "attn_q", q);
            BIAS(bk, "attn_k", kv);
            BIAS(bv, "attn_v", kv);
            BIAS(bo, "attn_output", H);
            BIAS(router_bias, "ffn_gate_inp", E);
#undef BIAS
            static const char *const eb[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
            /* [E][I] gate, [E][I] up, [E][H] down, owned by the model (as model.c's) */
            float *own = mdl_own(m, sizeof(float) * (size_t)E * (2 * (size_t)MI + H)), *at = own;
            for (int p = 0; p < 3; p++) {
                int n = p == 2 ? H : MI;
                snprintf(b, sizeof b, "blk.%d.%s.bias", l, eb[p]);
                float *v = bind_arr(m, b, n, E);
                if (!v) goto fail;
                memcpy(at, v, sizeof(float) * (size_t)E * n);
                free(v);
                at += (size_t)E * n;
            }
            L->experts = dfl_calloc((size_t)E, sizeof(mdl_expert));
            for (int e = 0; e < E; e++) {
                L->experts[e].bg = own + (size_t)e * MI;
                L->experts[e].bu = own + (size_t)(E + e) * MI;
                L->experts[e].bd = own + 2 * (size_t)E * MI + (size_t)e * H;
            }
        }
        if (q35 && c->linear_layer[l]) { /* Gated DeltaNet: llama.cpp's ssm_* names */
            MAT(lin_qkv, "attn_qkv", C, H, 0);
            MAT(lin_z, "attn_gate", vd, H, 0);
            if (c->qwen3_next) { /* one ssm_ba: per key head [b | a] (in_proj_ba as it is) */
                wt_weight ba;
                snprintf(b, sizeof b, "blk.%d.ssm_ba.weight", l);
                if (bind_mat(m, b, 2 * nv, H, 0, &ba)) goto fail;
                mdl_split_ba(m, &ba, c->lin_k_heads, nv / c->lin_k_heads, &L->lin_b, &L->lin_a);
            } else {
                MAT(lin_b, "ssm_beta", nv, H, 0);
                MAT(lin_a, "ssm_alpha", nv, H, 0);
            }
            MAT(lin_out, "ssm_out", H, vd, 0);
            snprintf(b, sizeof b, "blk.%d.ssm_conv1d.weight", l);
            if (!(L->conv_w = bind_arr(m, b, c->lin_conv, C))) goto fail;
            snprintf(b, sizeof b, "blk.%d.ssm_dt.bias", l);
            if (!(L->dt_bias = bind_vec(m, b, nv))) goto fail;
            snprintf(b, sizeof b, "blk.%d.ssm_a", l); /* -exp(A_log), as the converter stores it */
            if (!(L->neg_a = bind_vec(m, b, nv))) goto fail;
            for (int h = 0; h < nv; h++)
                if (!(L->neg_a[h] <= 0.0f) || !isfinite(L->neg_a[h])) {
                    dfl_seterr("%s: tensor '%s': value %g at head %d is not a decay rate (-exp(A_log) <= 0)", path,
                               b, L->neg_a[h], h);
                    goto fail;
                }
            VEC(lin_norm, "ssm_norm", c->lin_v_dim);
        } else {
            MAT(wq, "attn_q", c->attn_gate ? 2 * q : q, H, llama ? hd : 0);
            MAT(wk, "attn_k", kv, H, llama ? hd : 0);
            if (!(c->k_eq_v && !c->sliding_layer[l])) { /* Gemma-4 k_eq_v: a full layer's values are its keys */
                MAT(wv, "attn_v", kv, H, 0);
            }
            MAT(wo, "attn_output", H, q, 0);
            if (c->qk_norm) {
                VEC(q_norm, "attn_q_norm", hd);
                VEC(k_norm, "attn_k_norm", hd);
            }
        }
        if (c->moe_layer[l]) { /* the expert block: router, stacked experts, shared expert */
            snprintf(b, sizeof b, "blk.%d.ffn_gate_inp.weight", l);
            if (bind_mat(m, b, E, H, 0, &L->router)) goto fail;
            if (!L->experts) L->experts = dfl_calloc((size_t)E, sizeof(mdl_expert));
            wt_weight *tmp = dfl_malloc(sizeof(wt_weight) * (size_t)E);
            static const char *const stk[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
            for (int p = 0; p < 3; p++) {
                snprintf(b, sizeof b, "blk.%d.%s.weight", l, stk[p]);
                if (bind_stack(m, b, E, p == 2 ? H : MI, p == 2 ? MI : H, tmp)) {
                    free(tmp);
                    goto fail;
                }
                for (int e = 0; e < E; e++)
                    *(p == 0 ? &L->experts[e].wg : p == 1 ? &L->experts[e].wu : &L->experts[e].wd) = tmp[e];
            }
            free(tmp);
            if (c->shared_inter) {
                MAT(sh_wg, "ffn_gate_shexp", c->shared_inter, H, 0);
                MAT(sh_wu, "ffn_up_shexp", c->shared_inter, H, 0);
                MAT(sh_wd, "ffn_down_shexp", H, c->shared_inter, 0);
                snprintf(b, sizeof b, "blk.%d.ffn_gate_inp_shexp.weight", l);
                if (!(L->sh_gate = bind_arr(m, b, H, 1))) goto fail;
            }
        } else {
            MAT(wg, "ffn_gate", c->inter, H, 0);
            MAT(wu, "ffn_up", c->inter, H, 0);
            MAT(wd, "ffn_down", H, c->inter, 0);
        }
#undef MAT
#undef VEC
    }
    return 0;
fail:
    mdl_free(m);
    return -1;
}

/* ------------------------------------------------------------ tokenizer */

static char *cstr(const char *s, size_t n) {
    char *c = dfl_malloc(n + 1);
    memcpy(c, s, n);
    c[n] = 0;
    return c;
}

static const gguf_kv *str_array(const gguf_file *g, const char *key, int required) {
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv) {
        if (required) dfl_seterr("%s: missing key '%s'", g->path, key);
        return NULL;
    }
    if (kv->type != GGUF_ARRAY || kv->atype != GGUF_STRING) {
        dfl_seterr("%s: key '%s' is not an array of strings", g->path, key);
        return NULL;
    }
    return kv;
}

/* The special tokens of a plain prompt (tok_encode_prompt), as llama.cpp
 * adds them (llama-vocab.cpp): tokenizer.ggml.bos_token_id before the text
 * when tokenizer.ggml.add_bos_token is true, tokenizer.ggml.eos_token_id
 * after it when add_eos_token is; put into ROOT as the TemplateProcessing
 * post_processor a tokenizer.json would hold. A key that is absent takes
 * llama.cpp's default for a "gpt2" (byte-level BPE) vocabulary: add_bos
 * true for the Llama-3 pre-tokenizers ("llama-bpe", "llama3") and Gemma's
 * (tokenizer.ggml.model "gemma4", passed as PRE "gemma4"), false for
 * the others read here (qwen2, qwen35, gpt2, default); add_eos false.
 * Where the default asks for a BOS the file has no id for, none is added
 * (llama.cpp would fall back to id 11, its gpt2 default). Errors naming the
 * key: a flag that is not a bool, a flag set true whose id is missing or
 * outside the vocabulary (an unused bad id is ignored, as llama.cpp does). A chat prompt is not affected: its
 * template writes its own special tokens (tok_encode). */
static int prompt_specials(const gguf_file *g, cJSON *root, const char *pre, int64_t eos, uint64_t n_tok) {
    int64_t bos = -1;
    if (gguf_get_int(g, "tokenizer.ggml.bos_token_id", &bos, 0) < 0) return -1;
    int add_bos = !strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3") || !strcmp(pre, "gemma4"), add_eos = 0;
    int rb = gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos, 0);
    int re = gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &add_eos, 0);
    if (rb < 0 || re < 0) return -1;
    /* an id that is no token matters only where it would be added (llama.cpp
     * warns and loads such a file) */
    if (add_bos && (bos < -1 || bos >= (int64_t)n_tok)) {
        dfl_seterr("%s: tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id %lld is not a token",
                   g->path, (long long)bos);
        return -1;
    }
    if (add_bos && bos < 0) {
        if (rb == 0) {
            dfl_seterr("%s: tokenizer.ggml.add_bos_token is true but there is no tokenizer.ggml.bos_token_id",
                       g->path);
            return -1;
        }
        add_bos = 0;
    }
    if (add_eos && eos < 0) {
        dfl_seterr("%s: tokenizer.ggml.add_eos_token is true but there is no tokenizer.ggml.eos_token_id", g->path);
        return -1;
    }
    if (!add_bos && !add_eos) return 0;
    cJSON *pp = cJSON_AddObjectToObject(root, "post_processor");
    cJSON_AddStringToObject(pp, "type", "TemplateProcessing");
    cJSON *single = cJSON_AddArrayToObject(pp, "single");
    cJSON *sp = cJSON_AddObjectToObject(pp, "special_tokens");
    for (int k = 0; k < 3; k++) {
        if ((k == 0 && !add_bos) || (k == 2 && !add_eos)) continue;
        const char *name = k == 0 ? "tokenizer.ggml.bos_token_id" : "tokenizer.ggml.eos_token_id";
        cJSON *item = cJSON_CreateObject(), *ref = cJSON_AddObjectToObject(item, k == 1 ? "Sequence" : "SpecialToken");
        cJSON_AddStringToObject(ref, "id", k == 1 ? "A" : name);
        cJSON_AddItemToArray(single, item);
        if (k == 1) continue;
        cJSON *tok = cJSON_AddObjectToObject(sp, name);
        cJSON_AddItemToArray(cJSON_AddArrayToObject(tok, "ids"), cJSON_CreateNumber((double)(k == 0 ? bos : eos)));
    }
    return 0;
}

/* All N bytes of S are '\n'. */
static int all_newlines(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != '\n') return 0;
    return n > 0;
}

/* tokenizer.ggml.model "gemma4": llama.cpp's converter (Gemma4Model.set_vocab)
 * writes Gemma's SentencePiece-style BPE as tokens [n] (literal UTF-8, U+2581
 * for the space, <0x00>..<0xFF> typed BYTE), token_type [n], scores [n]
 * (not used: BPE goes by the merges' order), merges, the special ids and
 * add_bos_token true; llama.cpp reads it with pre-tokenizer "gemma4"
 * whatever tokenizer.ggml.pre says (spaces to U+2581, runs of newlines cut
 * from the rest, merges over characters, byte fallback). Rebuilt here as the
 * tokenizer.json it came from (models/gemma3-tokenizer's layout): every
 * token in model.vocab; CONTROL ones as special added tokens, USER_DEFINED
 * ones as the other added tokens (both split out of the text before the
 * BPE, as HF and llama.cpp do), and so are the NORMAL tokens that are runs
 * of newlines (llama.cpp's "[^\n]+|[\n]+" split with a run that is a token
 * kept whole: llama.cpp's converter types Gemma's added "\n" runs NORMAL).
 * A plain prompt gets <bos> unless add_bos_token is false (llama.cpp forces
 * it for this vocabulary). Errors name the key. */
/* What every GGUF tokenizer ends with: the end-of-sequence id, the specials
 * a plain prompt gets (PRE: the pre-tokenizer's name), the chat template,
 * and the tokenizer built from ROOT (tokenizer.json's form; not freed here). */
static tok_tokenizer *finish_tokenizer(const gguf_file *g, cJSON *root, const char *pre, uint64_t n_tokens,
                                       const char *path) {
    int64_t eos = -1;
    if (gguf_get_int(g, "tokenizer.ggml.eos_token_id", &eos, 0) < 0) return NULL;
    if (eos < -1 || eos >= (int64_t)n_tokens) {
        dfl_seterr("%s: tokenizer.ggml.eos_token_id %lld is not a token", path, (long long)eos);
        return NULL;
    }
    if (prompt_specials(g, root, pre, eos, n_tokens) != 0) return NULL;
    const char *s;
    size_t n;
    char *tmpl = NULL;
    int rc = gguf_get_str(g, "tokenizer.chat_template", &s, &n, 0);
    if (rc < 0) return NULL;
    if (rc == 0) {
        if (memchr(s, 0, n)) {
            dfl_seterr("%s: tokenizer.chat_template holds a NUL byte", path);
            return NULL;
        }
        tmpl = cstr(s, n);
    }
    tok_tokenizer *t = tok_from_json(root, tmpl, (int)eos, path);
    free(tmpl);
    return t;
}

static tok_tokenizer *gemma4_tokenizer(const gguf_file *g, const char *path) {
    tok_tokenizer *t = NULL;
    const char *s;
    size_t n;
    const gguf_kv *tk = str_array(g, "tokenizer.ggml.tokens", 1), *mg, *ty;
    if (!tk || !(mg = str_array(g, "tokenizer.ggml.merges", 1))) return NULL;
    ty = gguf_find_kv(g, "tokenizer.ggml.token_type");
    if (ty && (ty->type != GGUF_ARRAY || ty->atype == GGUF_STRING || ty->atype == GGUF_FLOAT32 ||
               ty->atype == GGUF_FLOAT64 || ty->n != tk->n)) {
        dfl_seterr("%s: tokenizer.ggml.token_type must be an integer array as long as tokenizer.ggml.tokens", path);
        return NULL;
    }
    if (tk->n > (1u << 24)) {
        dfl_seterr("%s: %llu tokens is more than dflash supports", path, (unsigned long long)tk->n);
        return NULL;
    }
    cJSON *root = cJSON_Parse("{\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, "
                              "\"content\": \"\u2581\"}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": "
                              "{\"String\": \" \"}, \"behavior\": \"MergedWithPrevious\", \"invert\": false}, "
                              "\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", "
                              "\"pattern\": {\"String\": \"\u2581\"}, \"content\": \" \"}, {\"type\": "
                              "\"ByteFallback\"}, {\"type\": \"Fuse\"}]}}");
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddBoolToObject(model, "byte_fallback", 1);
    cJSON_AddBoolToObject(model, "fuse_unk", 1);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    for (uint64_t i = 0; i < tk->n; i++) {
        s = gguf_arr_str(tk, i, &n);
        int64_t type = ty ? gguf_arr_int(ty, i) : TT_NORMAL;
        if (type == TT_UNUSED) continue;
        if (type < TT_NORMAL || type > TT_BYTE) {
            dfl_seterr("%s: tokenizer.ggml.token_type of token %llu is %lld (1..6)", path, (unsigned long long)i,
                       (long long)type);
            goto out;
        }
        if (n == 0 || memchr(s, 0, n)) {
            dfl_seterr("%s: tokenizer.ggml.tokens: token %llu is empty or holds a NUL byte", path,
                       (unsigned long long)i);
            goto out;
        }
        char *c = cstr(s, n);
        cJSON_AddItemToObject(vocab, c, cJSON_CreateNumber((double)i));
        if (type == TT_CONTROL || type == TT_USER || (type == TT_NORMAL && all_newlines(s, n))) {
            cJSON *a = cJSON_CreateObject();
            cJSON_AddNumberToObject(a, "id", (double)i);
            cJSON_AddStringToObject(a, "content", c);
            cJSON_AddBoolToObject(a, "special", type == TT_CONTROL);
            cJSON_AddItemToArray(added, a);
        }
        free(c);
    }
    for (uint64_t i = 0; i < mg->n; i++) {
        s = gguf_arr_str(mg, i, &n);
        /* "A B", cut at the first space after the first byte (llama.cpp's
         * rule); stored as the pair ["A", "B"] */
        const char *sp = n > 2 ? memchr(s + 1, ' ', n - 2) : NULL;
        if (!sp || memchr(s, 0, n)) {
            char b[64];
            dfl_seterr("%s: tokenizer.ggml.merges: merge %llu '%s' is not two tokens with a space between", path,
                       (unsigned long long)i, shown(s, n, b));
            goto out;
        }
        char *a = cstr(s, (size_t)(sp - s)), *b = cstr(sp + 1, (size_t)(s + n - sp - 1));
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateString(a));
        cJSON_AddItemToArray(pair, cJSON_CreateString(b));
        cJSON_AddItemToArray(merges, pair);
        free(a);
        free(b);
    }
    t = finish_tokenizer(g, root, "gemma4", tk->n, path);
out:
    cJSON_Delete(root);
    return t;
}

tok_tokenizer *ggm_tokenizer(const char *path) {
    gguf_file g;
    if (gguf_open(&g, path) != 0) return NULL;
    tok_tokenizer *t = NULL;
    cJSON *root = NULL;
    char *pre = NULL;
    const char *s;
    size_t n;
    if (gguf_get_str(&g, "tokenizer.ggml.model", &s, &n, 1)) goto out;
    if (n == 6 && !memcmp(s, "gemma4", 6)) {
        t = gemma4_tokenizer(&g, path);
        goto out;
    }
    if (!(n == 4 && !memcmp(s, "gpt2", 4))) {
        char b[64];
        dfl_seterr("%s: tokenizer.ggml.model '%s' not supported (gpt2: byte-level BPE; gemma4: Gemma's "
                   "SentencePiece-style BPE)", path, shown(s, n, b));
        goto out;
    }
    const char *re = NULL;
    int nfc = 0;
    if (gguf_get_str(&g, "tokenizer.ggml.pre", &s, &n, 0) < 0) goto out;
    pre = gguf_find_kv(&g, "tokenizer.ggml.pre") ? cstr(s, n) : dfl_strdup("default");
    for (const ggm_pretok *pt = ggm_pretoks; pt->name; pt++)
        if (!strcmp(pre, pt->name) || (!strcmp(pre, "llama3") && !strcmp(pt->name, "llama-bpe")))
            re = pt->re, nfc = pt->nfc;
    if (!re && strcmp(pre, "default") && strcmp(pre, "gpt2")) {
        char b[64];
        dfl_seterr("%s: tokenizer.ggml.pre '%s' not supported (qwen2, qwen35, llama-bpe, gpt-4o, gpt2)", path,
                   shown(pre, strlen(pre), b));
        goto out;
    }
    const gguf_kv *tk = str_array(&g, "tokenizer.ggml.tokens", 1), *mg, *ty = NULL;
    if (!tk) goto out;
    if (!(mg = str_array(&g, "tokenizer.ggml.merges", 1))) goto out;
    ty = gguf_find_kv(&g, "tokenizer.ggml.token_type");
    if (ty && (ty->type != GGUF_ARRAY || ty->atype == GGUF_STRING || ty->atype == GGUF_FLOAT32 ||
               ty->atype == GGUF_FLOAT64 || ty->n != tk->n)) {
        dfl_seterr("%s: tokenizer.ggml.token_type must be an integer array as long as tokenizer.ggml.tokens", path);
        goto out;
    }
    if (tk->n > (1u << 24)) {
        dfl_seterr("%s: %llu tokens is more than dflash supports", path, (unsigned long long)tk->n);
        goto out;
    }
    root = cJSON_CreateObject();
    if (nfc) cJSON_AddItemToObject(root, "normalizer", cJSON_Parse("{\"type\": \"NFC\"}"));
    cJSON *pt = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pt, "type", "Sequence");
    cJSON *pl = cJSON_AddArrayToObject(pt, "pretokenizers");
    if (re) {
        cJSON *sp = cJSON_CreateObject();
        cJSON_AddStringToObject(sp, "type", "Split");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(sp, "pattern"), "Regex", re);
        cJSON_AddStringToObject(sp, "behavior", "Isolated");
        cJSON_AddBoolToObject(sp, "invert", 0);
        cJSON_AddItemToArray(pl, sp);
    }
    cJSON *bl = cJSON_CreateObject();
    cJSON_AddStringToObject(bl, "type", "ByteLevel");
    cJSON_AddBoolToObject(bl, "add_prefix_space", 0);
    cJSON_AddBoolToObject(bl, "use_regex", re == NULL);
    cJSON_AddItemToArray(pl, bl);
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    for (uint64_t i = 0; i < tk->n; i++) {
        s = gguf_arr_str(tk, i, &n);
        int64_t type = ty ? gguf_arr_int(ty, i) : TT_NORMAL;
        if (type == TT_UNUSED) continue;
        if (n == 0 || memchr(s, 0, n)) {
            dfl_seterr("%s: token %llu is empty or holds a NUL byte", path, (unsigned long long)i);
            goto out;
        }
        char *c = cstr(s, n);
        if (type == TT_CONTROL || type == TT_USER) {
            cJSON *a = cJSON_CreateObject();
            cJSON_AddNumberToObject(a, "id", (double)i);
            cJSON_AddStringToObject(a, "content", c);
            cJSON_AddBoolToObject(a, "special", type == TT_CONTROL);
            cJSON_AddItemToArray(added, a);
        } else if (type == TT_NORMAL || type == TT_UNKNOWN) {
            cJSON_AddItemToObject(vocab, c, cJSON_CreateNumber((double)i));
        } else {
            free(c);
            dfl_seterr("%s: token %llu has type %lld (byte tokens are not byte-level BPE)", path,
                       (unsigned long long)i, (long long)type);
            goto out;
        }
        free(c);
    }
    for (uint64_t i = 0; i < mg->n; i++) {
        s = gguf_arr_str(mg, i, &n);
        if (memchr(s, 0, n)) {
            dfl_seterr("%s: merge %llu holds a NUL byte", path, (unsigned long long)i);
            goto out;
        }
        char *c = cstr(s, n);
        cJSON_AddItemToArray(merges, cJSON_CreateString(c));
        free(c);
    }
    t = finish_tokenizer(&g, root, pre, tk->n, path);
out:
    cJSON_Delete(root);
    free(pre);
    gguf_close(&g);
    return t;
}
