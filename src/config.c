/* config.c - see config.h. */
#include "config.h"

#include <cJSON.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static _Thread_local const char *cur_path; /* for messages during one cfg_load */

/* o's key, into *v: 1 when present, 0 when absent or null, -1 + error when
 * absent and required. */
static int field(const cJSON *o, const char *key, int required, const cJSON **v) {
    *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (*v && !cJSON_IsNull(*v)) return 1;
    if (!required) return 0;
    dfl_seterr("%s: missing field \"%s\"", cur_path, key);
    return -1;
}

static int get_int(const cJSON *o, const char *key, int *out, int required, int def) {
    const cJSON *v;
    int r = field(o, key, required, &v);
    if (r <= 0) {
        if (r == 0) *out = def;
        return r;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble) ||
        fabs(v->valuedouble) > 2e9) {
        dfl_seterr("%s: field \"%s\" must be an integer", cur_path, key);
        return -1;
    }
    *out = (int)v->valuedouble;
    return 0;
}

static int get_num(const cJSON *o, const char *key, double *out, int required, double def) {
    const cJSON *v;
    int r = field(o, key, required, &v);
    if (r <= 0) {
        if (r == 0) *out = def;
        return r;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        dfl_seterr("%s: field \"%s\" must be a finite number", cur_path, key);
        return -1;
    }
    *out = v->valuedouble;
    return 0;
}

static int get_bool(const cJSON *o, const char *key, int *out, int def) {
    const cJSON *v;
    if (field(o, key, 0, &v) == 0) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(v)) {
        dfl_seterr("%s: field \"%s\" must be true or false", cur_path, key);
        return -1;
    }
    *out = cJSON_IsTrue(v);
    return 0;
}

void cfg_default_taps(int nt, int nd, int *ids) {
    if (nd == 1) {
        ids[0] = nt / 2;
        return;
    }
    double start = 1, end = nt - 3;
    for (int i = 0; i < nd; i++) {
        double x = start + i * (end - start) / (nd - 1);
        double r = floor(x + 0.5);
        if (x + 0.5 == r && fmod(r, 2.0) != 0) r -= 1; /* Python round: ties to even */
        ids[i] = (int)r;
    }
}

int cfg_max_q(const cfg_model *c) {
    int m = 0;
    for (int l = 0; l < c->n_layers; l++)
        if (c->n_heads * cfg_head_dim(c, l) > m) m = c->n_heads * cfg_head_dim(c, l);
    return m;
}

int cfg_max_kv(const cfg_model *c) {
    int m = 0;
    for (int l = 0; l < c->n_layers; l++)
        if (cfg_kv_heads(c, l) * cfg_head_dim(c, l) > m) m = cfg_kv_heads(c, l) * cfg_head_dim(c, l);
    return m;
}

/* YaRN's fields as transformers reads them (_compute_yarn_parameters):
 * factor (default max_position_embeddings / original_max_position_embeddings),
 * original_max_position_embeddings (default max_position_embeddings),
 * beta_fast 32, beta_slow 1 (0 also means the default), truncate true, and
 * attention_factor, else mscale(factor, mscale) / mscale(factor,
 * mscale_all_dim) when both are set and nonzero, else mscale(factor), where
 * mscale(s, k) = 0.1 k ln(s) + 1 for s > 1, else 1. */
static double yarn_mscale(double s, double k) { return s <= 1 ? 1.0 : 0.1 * k * log(s) + 1.0; }

static int parse_yarn(cfg_model *c, const cJSON *sc) {
    double f, af, ms, msa;
    c->rope_yarn = 1;
    if (get_int(sc, "original_max_position_embeddings", &c->rope_orig_max_pos, 0, c->max_pos) ||
        get_num(sc, "factor", &f, 0, -1) || get_num(sc, "beta_fast", &c->yarn_beta_fast, 0, 0) ||
        get_num(sc, "beta_slow", &c->yarn_beta_slow, 0, 0) || get_bool(sc, "truncate", &c->yarn_truncate, 1) ||
        get_num(sc, "attention_factor", &af, 0, -1) || get_num(sc, "mscale", &ms, 0, 0) ||
        get_num(sc, "mscale_all_dim", &msa, 0, 0))
        return -1;
    if (c->rope_orig_max_pos <= 0) {
        dfl_seterr("%s: yarn original_max_position_embeddings %d must be positive", cur_path, c->rope_orig_max_pos);
        return -1;
    }
    if (f < 0) f = (double)c->max_pos / c->rope_orig_max_pos;
    if (c->yarn_beta_fast == 0) c->yarn_beta_fast = 32;
    if (c->yarn_beta_slow == 0) c->yarn_beta_slow = 1;
    if (!(f > 0 && f < 1e6) || !(c->yarn_beta_fast > 0) || !(c->yarn_beta_slow > 0)) {
        dfl_seterr("%s: yarn factor %g, beta_fast %g and beta_slow %g must be positive", cur_path, f,
                   c->yarn_beta_fast, c->yarn_beta_slow);
        return -1;
    }
    c->rope_factor = f;
    if (af < 0) af = ms != 0 && msa != 0 ? yarn_mscale(f, ms) / yarn_mscale(f, msa) : yarn_mscale(f, 1);
    if (!(af > 0 && af < 100)) {
        dfl_seterr("%s: yarn attention_factor %g out of range (0, 100)", cur_path, af);
        return -1;
    }
    c->yarn_attn_factor = af;
    return 0;
}

/* rope_theta and rope scaling live at the top level (transformers 4) or in
 * "rope_parameters" (transformers 5). */
static int parse_rope(cfg_model *c, const cJSON *root) {
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (!cJSON_IsObject(rp)) rp = NULL;
    if (!cJSON_IsObject(rs)) rs = NULL;
    double def_theta = 10000.0;
    if (get_num(root, "rope_theta", &c->rope_theta, 0, -1) != 0) return -1;
    if (c->rope_theta < 0 && rp && get_num(rp, "rope_theta", &c->rope_theta, 0, -1) != 0) return -1;
    if (c->rope_theta < 0) c->rope_theta = def_theta;
    if (!(c->rope_theta > 1.0) || !isfinite(c->rope_theta)) {
        dfl_seterr("%s: rope_theta %g must be finite and > 1", cur_path, c->rope_theta);
        return -1;
    }
    const cJSON *sc = rs ? rs : rp;
    if (!sc) return 0;
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(sc, "rope_type");
    if (!ty) ty = cJSON_GetObjectItemCaseSensitive(sc, "type");
    const char *type = cJSON_IsString(ty) ? ty->valuestring : "default";
    if (strcmp(type, "default") == 0) return 0;
    if (strcmp(type, "yarn") == 0) return parse_yarn(c, sc);
    if (strcmp(type, "llama3") != 0) {
        dfl_seterr("%s: unsupported rope scaling type \"%s\" (supported: default, llama3, yarn)", cur_path, type);
        return -1;
    }
    c->rope_llama3 = 1;
    if (get_num(sc, "factor", &c->rope_factor, 1, 0) || get_num(sc, "low_freq_factor", &c->rope_low_freq, 1, 0) ||
        get_num(sc, "high_freq_factor", &c->rope_high_freq, 1, 0) ||
        get_int(sc, "original_max_position_embeddings", &c->rope_orig_max_pos, 1, 0))
        return -1;
    if (c->rope_factor <= 0 || c->rope_low_freq <= 0 || c->rope_high_freq <= c->rope_low_freq ||
        c->rope_orig_max_pos <= 0) {
        dfl_seterr("%s: inconsistent llama3 rope_scaling values", cur_path);
        return -1;
    }
    return 0;
}

/* A JSON number that is an integer in lo..hi (checked as a double: no cast
 * of an out-of-range value). */
static int int_in(const cJSON *v, double lo, double hi, int *out) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi) ||
        v->valuedouble != floor(v->valuedouble))
        return 0;
    *out = (int)v->valuedouble;
    return 1;
}

static int parse_eos(cfg_model *c, const cJSON *v, const char *path) {
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsNumber(v)) {
        if (!int_in(v, 0, INT_MAX, &c->eos_ids[0])) {
            dfl_seterr("%s: eos_token_id %g is not a token id (an integer in 0..%d)", path, v->valuedouble, INT_MAX);
            return -1;
        }
        c->n_eos = 1;
        return 0;
    }
    if (!cJSON_IsArray(v)) {
        dfl_seterr("%s: eos_token_id must be an integer or a list", path);
        return -1;
    }
    for (const cJSON *e = v->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || c->n_eos == CFG_MAX_EOS) {
            dfl_seterr("%s: eos_token_id list must hold at most %d integers", path, CFG_MAX_EOS);
            return -1;
        }
        if (!int_in(e, 0, INT_MAX, &c->eos_ids[c->n_eos])) {
            dfl_seterr("%s: eos_token_id %g is not a token id (an integer in 0..%d)", path, e->valuedouble, INT_MAX);
            return -1;
        }
        c->n_eos++;
    }
    return 0;
}

/* A family's defaults for the expert fields it leaves out. */
typedef struct {
    int n_experts, n_experts_used, moe_inter, norm_topk;
} moe_defaults;

/* The expert fields of qwen3_moe and qwen3_next, with the family's defaults
 * (transformers' Qwen3MoeConfig: num_experts 128, num_experts_per_tok 8,
 * moe_intermediate_size 768, norm_topk_prob false; Qwen3NextConfig: 512,
 * 10, 512, true; both decoder_sparse_step 1, mlp_only_layers []). Fields
 * only training reads (router_aux_loss_coef, output_router_logits) are
 * ignored; a sliding window is refused. */
static int parse_moe(cfg_model *c, const cJSON *root, const moe_defaults *d) {
    const char *ne = cJSON_GetObjectItemCaseSensitive(root, "num_experts") ? "num_experts" : "num_local_experts";
    if (get_int(root, ne, &c->n_experts, 0, d->n_experts) ||
        get_int(root, "num_experts_per_tok", &c->n_experts_used, 0, d->n_experts_used) ||
        get_int(root, "moe_intermediate_size", &c->moe_inter, 0, d->moe_inter) ||
        get_int(root, "decoder_sparse_step", &c->sparse_step, 0, 1) ||
        get_bool(root, "norm_topk_prob", &c->norm_topk, d->norm_topk))
        return -1;
    if (c->n_experts < 0 || c->n_experts > CFG_MAX_EXPERTS) {
        dfl_seterr("%s: %s %d out of range (0..%d)", cur_path, ne, c->n_experts, CFG_MAX_EXPERTS);
        return -1;
    }
    if (c->sparse_step < 1) {
        dfl_seterr("%s: decoder_sparse_step %d must be >= 1", cur_path, c->sparse_step);
        return -1;
    }
    if (c->n_experts > 0) {
        if (c->n_experts_used < 1 || c->n_experts_used > c->n_experts || c->n_experts_used > CFG_MAX_EXPERTS_USED) {
            dfl_seterr("%s: num_experts_per_tok %d out of range (1..%d, at most %s %d)", cur_path, c->n_experts_used,
                       CFG_MAX_EXPERTS_USED, ne, c->n_experts);
            return -1;
        }
        if (c->moe_inter < 1 || c->moe_inter > CFG_MAX_INTER) {
            dfl_seterr("%s: moe_intermediate_size %d out of range (1..%d)", cur_path, c->moe_inter, CFG_MAX_INTER);
            return -1;
        }
    }
    unsigned char dense[CFG_MAX_LAYERS] = {0}; /* mlp_only_layers */
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers");
    if (mo && !cJSON_IsNull(mo)) {
        if (!cJSON_IsArray(mo)) {
            dfl_seterr("%s: mlp_only_layers must be a list of layer ids", cur_path);
            return -1;
        }
        for (const cJSON *e = mo->child; e; e = e->next) {
            int l;
            if (!int_in(e, 0, c->n_layers - 1, &l)) {
                dfl_seterr("%s: mlp_only_layers must hold layer ids (integers in 0..%d)", cur_path, c->n_layers - 1);
                return -1;
            }
            dense[l] = 1;
        }
    }
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(root, "use_sliding_window");
    if (cJSON_IsTrue(sw)) {
        dfl_seterr("%s: use_sliding_window=true is not supported", cur_path);
        return -1;
    }
    const cJSON *lt = c->arch == CFG_QWEN3_MOE ? cJSON_GetObjectItemCaseSensitive(root, "layer_types") : NULL;
    if (lt && !cJSON_IsNull(lt)) {
        int n = 0, ok = cJSON_IsArray(lt);
        for (const cJSON *e = ok ? lt->child : NULL; e; e = e->next, n++)
            ok &= cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention");
        if (!ok || n != c->n_layers) {
            dfl_seterr("%s: layer_types must list \"full_attention\" for each of the %d layers (other attention "
                       "types are not supported)", cur_path, c->n_layers);
            return -1;
        }
    }
    for (int l = 0; l < c->n_layers; l++) {
        c->moe_layer[l] = c->n_experts > 0 && !dense[l] && (l + 1) % c->sparse_step == 0;
        c->n_moe_layers += c->moe_layer[l];
    }
    return 0;
}

/* layer_types LT (a list of n_layers strings, each "full_attention" or ALT)
 * into flag[l] = (entry l is ALT), *count = how many are; -1 + error naming
 * the entry otherwise. */
static int layer_types(const cJSON *lt, int n_layers, const char *alt, unsigned char *flag, int *count) {
    int n = 0;
    *count = 0;
    if (!cJSON_IsArray(lt)) {
        dfl_seterr("%s: layer_types must be a list", cur_path);
        return -1;
    }
    for (const cJSON *e = lt->child; e; e = e->next, n++) {
        int is_alt = cJSON_IsString(e) && !strcmp(e->valuestring, alt);
        if (!is_alt && !(cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention"))) {
            dfl_seterr("%s: layer_types[%d] must be \"%s\" or \"full_attention\"", cur_path, n, alt);
            return -1;
        }
        if (n < n_layers) flag[n] = (unsigned char)is_alt, *count += is_alt;
    }
    if (n != n_layers) {
        dfl_seterr("%s: layer_types has %d entries for %d layers (num_hidden_layers)", cur_path, n, n_layers);
        return -1;
    }
    return 0;
}

/* Qwen3-Next's experts: qwen3_moe's fields (parse_moe) with Qwen3NextConfig's
 * defaults, and in every expert layer a shared expert of
 * shared_expert_intermediate_size (default 512) with its sigmoid gate. */
static int parse_next_moe(cfg_model *c, const cJSON *root) {
    static const moe_defaults next = {.n_experts = 512, .n_experts_used = 10, .moe_inter = 512, .norm_topk = 1};
    if (parse_moe(c, root, &next)) return -1;
    if (!c->n_moe_layers) return 0;
    if (get_int(root, "shared_expert_intermediate_size", &c->shared_inter, 0, 512)) return -1;
    if (c->shared_inter < 1 || c->shared_inter > CFG_MAX_INTER) {
        dfl_seterr("%s: shared_expert_intermediate_size %d out of range (1..%d)", cur_path, c->shared_inter,
                   CFG_MAX_INTER);
        return -1;
    }
    /* the dense MLP width sizes the scratch the shared expert also uses */
    if (c->n_moe_layers == c->n_layers) {
        c->inter = c->shared_inter; /* no dense layer: the shared expert is the only dense MLP */
    } else if (c->shared_inter > c->inter) {
        dfl_seterr("%s: shared_expert_intermediate_size %d is wider than intermediate_size %d while some layers "
                   "are dense (mlp_only_layers / decoder_sparse_step): not supported", cur_path, c->shared_inter,
                   c->inter);
        return -1;
    }
    return 0;
}

/* Qwen3.5-MoE's expert fields, with Qwen3_5MoeTextConfig's defaults
 * (num_experts 256, num_experts_per_tok 8, moe_intermediate_size 512,
 * shared_expert_intermediate_size 512): every layer's MLP is the expert
 * block, the top-k weights always renormalised (its router has no
 * norm_topk_prob), plus the shared expert with its sigmoid gate. */
static int parse_qwen35_moe(cfg_model *c, const cJSON *root) {
    if (get_int(root, "num_experts", &c->n_experts, 0, 256) ||
        get_int(root, "num_experts_per_tok", &c->n_experts_used, 0, 8) ||
        get_int(root, "moe_intermediate_size", &c->moe_inter, 0, 512) ||
        get_int(root, "shared_expert_intermediate_size", &c->shared_inter, 0, 512))
        return -1;
    if (c->n_experts < 1 || c->n_experts > CFG_MAX_EXPERTS) {
        dfl_seterr("%s: num_experts %d out of range (1..%d)", cur_path, c->n_experts, CFG_MAX_EXPERTS);
        return -1;
    }
    if (c->n_experts_used < 1 || c->n_experts_used > c->n_experts || c->n_experts_used > CFG_MAX_EXPERTS_USED) {
        dfl_seterr("%s: num_experts_per_tok %d out of range (1..%d, at most num_experts %d)", cur_path,
                   c->n_experts_used, CFG_MAX_EXPERTS_USED, c->n_experts);
        return -1;
    }
    if (c->moe_inter < 1 || c->moe_inter > CFG_MAX_INTER) {
        dfl_seterr("%s: moe_intermediate_size %d out of range (1..%d)", cur_path, c->moe_inter, CFG_MAX_INTER);
        return -1;
    }
    if (c->shared_inter < 1 || c->shared_inter > CFG_MAX_INTER) {
        dfl_seterr("%s: shared_expert_intermediate_size %d out of range (1..%d)", cur_path, c->shared_inter,
                   CFG_MAX_INTER);
        return -1;
    }
    c->norm_topk = 1;
    c->sparse_step = 1;
    c->inter = c->shared_inter; /* the only dense MLP width (scratch) */
    for (int l = 0; l < c->n_layers; l++) c->moe_layer[l] = 1;
    c->n_moe_layers = c->n_layers;
    return 0;
}

/* The Qwen3.5 fields, with Qwen3_5TextConfig's defaults for absent ones
 * (linear heads 16 key / 32 value of 128 dims, conv kernel 4,
 * partial_rotary_factor 0.25, layer_types: every 4th layer full attention,
 * or full_attention_interval). rope_parameters' mrope_section /
 * mrope_interleaved are ignored: text positions are equal in all three
 * sections, which is plain RoPE. */
static int parse_qwen35(cfg_model *c, const cJSON *root) {
    c->attn_gate = 1;
    if (get_int(root, "linear_num_key_heads", &c->lin_k_heads, 0, 16) ||
        get_int(root, "linear_num_value_heads", &c->lin_v_heads, 0, 32) ||
        get_int(root, "linear_key_head_dim", &c->lin_k_dim, 0, 128) ||
        get_int(root, "linear_value_head_dim", &c->lin_v_dim, 0, 128) ||
        get_int(root, "linear_conv_kernel_dim", &c->lin_conv, 0, 4))
        return -1;
    static const struct {
        const char *name;
        size_t off;
        int max;
    } lim[] = {
        {"linear_num_key_heads", offsetof(cfg_model, lin_k_heads), CFG_MAX_HEADS},
        {"linear_num_value_heads", offsetof(cfg_model, lin_v_heads), CFG_MAX_HEADS},
        {"linear_key_head_dim", offsetof(cfg_model, lin_k_dim), 512},
        {"linear_value_head_dim", offsetof(cfg_model, lin_v_dim), 512},
        {"linear_conv_kernel_dim", offsetof(cfg_model, lin_conv), 16},
    };
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++) {
        int v = *(const int *)((const char *)c + lim[i].off);
        if (v < 1 || v > lim[i].max) {
            dfl_seterr("%s: %s %d out of range (1..%d)", cur_path, lim[i].name, v, lim[i].max);
            return -1;
        }
    }
    if (c->lin_v_heads % c->lin_k_heads) {
        dfl_seterr("%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", cur_path,
                   c->lin_v_heads, c->lin_k_heads);
        return -1;
    }
    /* in_proj_qkv rows: 2 * key heads * key dim + value heads * value dim */
    int64_t qkv = 2 * (int64_t)c->lin_k_heads * c->lin_k_dim + (int64_t)c->lin_v_heads * c->lin_v_dim;
    if (qkv > CFG_MAX_INTER || (int64_t)c->lin_v_heads * c->lin_v_dim > CFG_MAX_HIDDEN) {
        dfl_seterr("%s: linear attention widths (2 * linear_num_key_heads * linear_key_head_dim + "
                   "linear_num_value_heads * linear_value_head_dim = %lld) are larger than dflash supports",
                   cur_path, (long long)qkv);
        return -1;
    }
    if (2 * (int64_t)c->n_heads * c->head_dim > CFG_MAX_HIDDEN) {
        dfl_seterr("%s: 2 * num_attention_heads * head_dim = %lld (gated q_proj) is larger than dflash supports (%d)",
                   cur_path, 2 * (long long)c->n_heads * c->head_dim, CFG_MAX_HIDDEN);
        return -1;
    }
    if (c->qwen35_moe && parse_qwen35_moe(c, root)) return -1;
    if (c->qwen3_next && parse_next_moe(c, root)) return -1;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    double prf = -1;
    if (get_num(root, "partial_rotary_factor", &prf, 0, -1)) return -1;
    if (prf < 0 && cJSON_IsObject(rp) && get_num(rp, "partial_rotary_factor", &prf, 0, -1)) return -1;
    if (prf < 0) prf = 0.25;
    double rd = prf * c->head_dim;
    if (!(prf > 0 && prf <= 1) || rd != (double)(int)rd || (int)rd % 2) {
        dfl_seterr("%s: partial_rotary_factor %g must be in (0, 1] and give an even number of rotary dims "
                   "(head_dim %d * %g = %g)", cur_path, prf, c->head_dim, prf, rd);
        return -1;
    }
    c->rot_dim = (int)rd;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (lt && !cJSON_IsNull(lt)) {
        int cnt;
        if (layer_types(lt, c->n_layers, "linear_attention", c->linear_layer, &cnt)) return -1;
    } else {
        int iv;
        if (get_int(root, "full_attention_interval", &iv, 0, 4)) return -1;
        if (iv < 1) {
            dfl_seterr("%s: full_attention_interval %d must be >= 1", cur_path, iv);
            return -1;
        }
        for (int l = 0; l < c->n_layers; l++) c->linear_layer[l] = (l + 1) % iv != 0;
    }
    for (int l = 0; l < c->n_layers; l++) c->n_linear_layers += c->linear_layer[l];
    return 0;
}

/* gpt-oss's fields with GptOssConfig's defaults (num_local_experts 128,
 * num_experts_per_tok 4, sliding_window 128, attention_bias true,
 * swiglu_limit 7, layer_types alternating from a sliding layer 0): every
 * layer's MLP is the expert block, intermediate_size wide. */
static int parse_gpt_oss(cfg_model *c, const cJSON *root) {
    double lim;
    if (get_int(root, "num_local_experts", &c->n_experts, 0, 128) ||
        get_int(root, "num_experts_per_tok", &c->n_experts_used, 0, 4) ||
        get_int(root, "sliding_window", &c->window, 0, 128) || get_bool(root, "attention_bias", &c->attn_bias, 1) ||
        get_num(root, "swiglu_limit", &lim, 0, 7.0))
        return -1;
    if (c->n_experts < 1 || c->n_experts > CFG_MAX_EXPERTS) {
        dfl_seterr("%s: num_local_experts %d out of range (1..%d)", cur_path, c->n_experts, CFG_MAX_EXPERTS);
        return -1;
    }
    if (c->n_experts_used < 1 || c->n_experts_used > c->n_experts || c->n_experts_used > CFG_MAX_EXPERTS_USED) {
        dfl_seterr("%s: num_experts_per_tok %d out of range (1..%d, at most num_local_experts %d)", cur_path,
                   c->n_experts_used, CFG_MAX_EXPERTS_USED, c->n_experts);
        return -1;
    }
    if (c->window < 1 || c->window > CFG_MAX_POS) {
        dfl_seterr("%s: sliding_window %d out of range (1..%d)", cur_path, c->window, CFG_MAX_POS);
        return -1;
    }
    if (!(lim > 0 && lim < 1e6)) {
        dfl_seterr("%s: swiglu_limit %g must be positive", cur_path, lim);
        return -1;
    }
    c->swiglu_limit = (float)lim;
    c->attn_sinks = 1;
    c->moe_inter = c->inter;
    c->sparse_step = 1;
    for (int l = 0; l < c->n_layers; l++) c->moe_layer[l] = 1;
    c->n_moe_layers = c->n_layers;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (lt && !cJSON_IsNull(lt)) return layer_types(lt, c->n_layers, "sliding_attention", c->sliding_layer,
                                                    &c->n_sliding_layers);
    for (int l = 0; l < c->n_layers; l++) c->sliding_layer[l] = l % 2 == 0;
    for (int l = 0; l < c->n_layers; l++) c->n_sliding_layers += c->sliding_layer[l];
    return 0;
}

/* Gemma-4's rope_parameters: an object per layer type present, sliding
 * layers' {"rope_type": "default", "rope_theta"}, full layers'
 * {"rope_type": "proportional", "rope_theta", "partial_rotary_factor"
 * (default 1), "factor" (default 1)}; absent: Gemma4TextConfig's defaults
 * (theta 1e4; proportional, 0.25, theta 1e6). hd_full: the full layers'
 * head width (proportional RoPE counts its pairs from it). */
static int parse_gemma4_rope(cfg_model *c, const cJSON *root, int hd_full) {
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    double prf = 0.25;
    c->rope_theta = 10000.0, c->full_theta = 1e6, c->full_factor = 1.0;
    if (rp && !cJSON_IsNull(rp)) {
        if (!cJSON_IsObject(rp)) {
            dfl_seterr("%s: rope_parameters must be an object with one entry per layer type", cur_path);
            return -1;
        }
        static const char *types[2] = {"sliding_attention", "full_attention"};
        for (int k = 0; k < 2; k++) {
            if (k == 0 && !c->n_sliding_layers) continue; /* only the types present are read */
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(rp, types[k]);
            if (!cJSON_IsObject(e)) {
                dfl_seterr("%s: rope_parameters.%s must be an object (the layers of that type need it)", cur_path,
                           types[k]);
                return -1;
            }
            const cJSON *ty = cJSON_GetObjectItemCaseSensitive(e, "rope_type");
            const char *want = k ? "proportional" : "default";
            if (!cJSON_IsString(ty) || strcmp(ty->valuestring, want)) {
                dfl_seterr("%s: rope_parameters.%s.rope_type %s%s%s is not supported (only \"%s\")", cur_path,
                           types[k], cJSON_IsString(ty) ? "\"" : "", cJSON_IsString(ty) ? ty->valuestring : "missing",
                           cJSON_IsString(ty) ? "\"" : "", want);
                return -1;
            }
            if (get_num(e, "rope_theta", k ? &c->full_theta : &c->rope_theta, 1, 0)) return -1;
            if (k && (get_num(e, "partial_rotary_factor", &prf, 0, 1.0) || get_num(e, "factor", &c->full_factor, 0, 1.0)))
                return -1;
        }
    }
    if (!(c->rope_theta > 1.0) || !(c->full_theta > 1.0)) {
        dfl_seterr("%s: rope_theta %g / %g (sliding / full layers) must be > 1", cur_path, c->rope_theta,
                   c->full_theta);
        return -1;
    }
    if (!(prf > 0 && prf <= 1) || !(c->full_factor > 0 && c->full_factor < 1e6)) {
        dfl_seterr("%s: rope_parameters.full_attention: partial_rotary_factor %g must be in (0, 1] and factor %g "
                   "positive", cur_path, prf, c->full_factor);
        return -1;
    }
    c->full_rot = (int)(prf * hd_full / 2); /* transformers: int(factor * head_dim // 2) */
    return 0;
}

/* per_layer_config: {"L": {"head_dim": d, "num_key_value_heads": k}, ...}
 * (layer ids as decimal strings, zero-padded or not): the layers whose
 * attention is wider or has other kv heads. Any other override is refused
 * by name. */
static int parse_per_layer_config(cfg_model *c, const cJSON *plc) {
    if (!cJSON_IsObject(plc)) {
        dfl_seterr("%s: per_layer_config must be an object of layer ids", cur_path);
        return -1;
    }
    for (const cJSON *e = plc->child; e; e = e->next) {
        char *end;
        long l = strtol(e->string, &end, 10);
        if (!e->string[0] || *end || l < 0 || l >= c->n_layers || !cJSON_IsObject(e)) {
            dfl_seterr("%s: per_layer_config key \"%s\" must be a layer id (0..%d) with an object", cur_path,
                       e->string, c->n_layers - 1);
            return -1;
        }
        for (const cJSON *f = e->child; f; f = f->next) {
            int v, max = !strcmp(f->string, "head_dim") ? 512 : CFG_MAX_HEADS;
            if (strcmp(f->string, "head_dim") && strcmp(f->string, "num_key_value_heads")) {
                dfl_seterr("%s: per_layer_config[\"%s\"].%s is not supported (head_dim and num_key_value_heads "
                           "only)", cur_path, e->string, f->string);
                return -1;
            }
            if (!int_in(f, 1, max, &v) || (max == 512 && v % 2)) {
                dfl_seterr("%s: per_layer_config[\"%s\"].%s must be an integer in 1..%d%s", cur_path, e->string,
                           f->string, max, max == 512 ? " and even" : "");
                return -1;
            }
            if (max == 512) c->layer_hd[l] = (unsigned short)v;
            else c->layer_kv[l] = (unsigned short)v;
        }
    }
    return 0;
}

/* Gemma-4's MoE block (enable_moe_block, gemma-4-26B-A4B): every layer has
 * the expert block beside its dense MLP (model.h). num_experts,
 * top_k_experts, moe_intermediate_size are required (Gemma4TextConfig's
 * defaults are null); the router renormalises its top k (norm_topk). */
static int parse_gemma4_moe(cfg_model *c, const cJSON *root) {
    static const char *keys[3] = {"num_experts", "top_k_experts", "moe_intermediate_size"};
    int *vals[3] = {&c->n_experts, &c->n_experts_used, &c->moe_inter};
    for (int i = 0; i < 3; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, keys[i]);
        if (!v || cJSON_IsNull(v)) {
            dfl_seterr("%s: enable_moe_block is true but \"%s\" is %s", cur_path, keys[i], v ? "null" : "missing");
            return -1;
        }
        if (get_int(root, keys[i], vals[i], 1, 0)) return -1;
    }
    if (c->n_experts < 1 || c->n_experts > CFG_MAX_EXPERTS) {
        dfl_seterr("%s: num_experts %d out of range (1..%d)", cur_path, c->n_experts, CFG_MAX_EXPERTS);
        return -1;
    }
    if (c->n_experts_used < 1 || c->n_experts_used > c->n_experts || c->n_experts_used > CFG_MAX_EXPERTS_USED) {
        dfl_seterr("%s: top_k_experts %d out of range (1..%d, at most num_experts %d)", cur_path, c->n_experts_used,
                   CFG_MAX_EXPERTS_USED, c->n_experts);
        return -1;
    }
    if (c->moe_inter < 1 || c->moe_inter > CFG_MAX_INTER) {
        dfl_seterr("%s: moe_intermediate_size %d out of range (1..%d)", cur_path, c->moe_inter, CFG_MAX_INTER);
        return -1;
    }
    c->norm_topk = 1;
    c->g4_moe = 1;
    for (int l = 0; l < c->n_layers; l++) c->moe_layer[l] = 1;
    c->n_moe_layers = c->n_layers;
    return 0;
}

/* Gemma-4's fields (Gemma4TextConfig, transformers 5.17), with its defaults
 * for absent ones. Implemented: layer_types (absent: every 6th layer full;
 * the last layer is made full as transformers does), sliding_window (512),
 * the full layers' head (per_layer_config, or global_head_dim, default 512),
 * rope_parameters per layer type, hidden_activation gelu_pytorch_tanh,
 * final_logit_softcapping, hidden_size_per_layer_input (256) with
 * vocab_size_per_layer_input equal to vocab_size, use_bidirectional_attention
 * null or "vision" (text tokens attend causally), attention_k_eq_v (full
 * layers have no v_proj: their values are the k_proj output, RMS-normed
 * without weight; read from the reference's code, no fixture checks it
 * yet), enable_moe_block (parse_gemma4_moe). Refused by name, no reference
 * to check them against yet: num_kv_shared_layers > 0,
 * use_bidirectional_attention "all".
 * use_double_wide_mlp widens only KV-shared layers' MLPs: with none it
 * changes nothing. */
static int parse_gemma4(cfg_model *c, const cJSON *root) {
    int shared, moe, vp;
    double cap;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_activation");
    if (act && !cJSON_IsNull(act) && !(cJSON_IsString(act) && !strcmp(act->valuestring, "gelu_pytorch_tanh"))) {
        dfl_seterr("%s: hidden_activation %s%s%s is not supported (gelu_pytorch_tanh)", cur_path,
                   cJSON_IsString(act) ? "\"" : "", cJSON_IsString(act) ? act->valuestring : "(not a string)",
                   cJSON_IsString(act) ? "\"" : "");
        return -1;
    }
    const cJSON *bi = cJSON_GetObjectItemCaseSensitive(root, "use_bidirectional_attention");
    if (bi && !cJSON_IsNull(bi) && !(cJSON_IsString(bi) && !strcmp(bi->valuestring, "vision"))) {
        dfl_seterr("%s: use_bidirectional_attention %s is not supported (null, or \"vision\": text attends causally)",
                   cur_path, cJSON_IsString(bi) ? bi->valuestring : "(not a string)");
        return -1;
    }
    if (get_bool(root, "attention_k_eq_v", &c->k_eq_v, 0) || get_int(root, "num_kv_shared_layers", &shared, 0, 0) ||
        get_bool(root, "enable_moe_block", &moe, 0))
        return -1;
    if (shared) {
        dfl_seterr("%s: num_kv_shared_layers > 0 is not supported for Gemma-4 yet (no reference checks it)",
                   cur_path);
        return -1;
    }
    if (moe && parse_gemma4_moe(c, root)) return -1;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (lt && !cJSON_IsNull(lt)) {
        if (layer_types(lt, c->n_layers, "sliding_attention", c->sliding_layer, &c->n_sliding_layers)) return -1;
    } else {
        for (int l = 0; l < c->n_layers; l++) c->sliding_layer[l] = (l + 1) % 6 != 0;
    }
    int last = c->n_layers - 1; /* 0..CFG_MAX_LAYERS-1 (from_json checked) */
    if (last >= 0 && last < CFG_MAX_LAYERS) c->sliding_layer[last] = 0; /* transformers: "Last layer must use full_attention" */
    c->n_sliding_layers = 0;
    for (int l = 0; l < c->n_layers; l++) c->n_sliding_layers += c->sliding_layer[l];
    if (get_int(root, "sliding_window", &c->window, 0, 512)) return -1;
    if (c->window < 1 || c->window > CFG_MAX_POS) {
        dfl_seterr("%s: sliding_window %d out of range (1..%d)", cur_path, c->window, CFG_MAX_POS);
        return -1;
    }
    if (!c->n_sliding_layers) c->window = 0;
    /* the full layers' head: per_layer_config, else global_head_dim (512) */
    const cJSON *plc = cJSON_GetObjectItemCaseSensitive(root, "per_layer_config");
    if (plc && !cJSON_IsNull(plc)) {
        if (parse_per_layer_config(c, plc)) return -1;
    } else { /* transformers' own conversion: global_head_dim, and with attention_k_eq_v num_global_key_value_heads */
        int ghd, gkv;
        if (get_int(root, "global_head_dim", &ghd, 0, 512) || get_int(root, "num_global_key_value_heads", &gkv, 0, 0))
            return -1;
        if (ghd < 2 || ghd > 512 || ghd % 2 || gkv < 0 || gkv > CFG_MAX_HEADS) {
            dfl_seterr("%s: global_head_dim %d must be even and in 2..512, num_global_key_value_heads %d in 1..%d",
                       cur_path, ghd, gkv, CFG_MAX_HEADS);
            return -1;
        }
        for (int l = 0; l < c->n_layers; l++)
            if (!c->sliding_layer[l]) {
                c->layer_hd[l] = (unsigned short)ghd;
                if (c->k_eq_v && gkv) c->layer_kv[l] = (unsigned short)gkv;
            }
    }
    /* one head width per layer type (RoPE is made per type); kv heads divide the heads */
    int hd_type[2] = {0, 0};
    for (int l = 0; l < c->n_layers; l++) {
        int hd = cfg_head_dim(c, l), nkv = cfg_kv_heads(c, l), k = !c->sliding_layer[l];
        if (c->layer_hd[l] == c->head_dim) c->layer_hd[l] = 0;
        if (c->layer_kv[l] == c->n_kv_heads) c->layer_kv[l] = 0;
        if (hd_type[k] && hd_type[k] != hd) {
            dfl_seterr("%s: layer %d's head_dim %d differs from another %s layer's %d (one width per layer type)",
                       cur_path, l, hd, k ? "full_attention" : "sliding_attention", hd_type[k]);
            return -1;
        }
        hd_type[k] = hd;
        if (c->n_heads % nkv) {
            dfl_seterr("%s: layer %d: num_attention_heads %d is not a multiple of its num_key_value_heads %d",
                       cur_path, l, c->n_heads, nkv);
            return -1;
        }
        if ((int64_t)c->n_heads * hd > CFG_MAX_HIDDEN) {
            dfl_seterr("%s: layer %d: num_attention_heads * head_dim = %lld is larger than dflash supports (%d)",
                       cur_path, l, (long long)c->n_heads * hd, CFG_MAX_HIDDEN);
            return -1;
        }
    }
    if (parse_gemma4_rope(c, root, hd_type[1])) return -1;
    if (get_num(root, "final_logit_softcapping", &cap, 0, 0)) return -1;
    if (!(cap >= 0 && cap < 1e6)) {
        dfl_seterr("%s: final_logit_softcapping %g must be positive (or null)", cur_path, cap);
        return -1;
    }
    c->softcap = (float)cap;
    if (get_int(root, "hidden_size_per_layer_input", &c->ple, 0, 256) ||
        get_int(root, "vocab_size_per_layer_input", &vp, 0, 262144))
        return -1;
    if (c->ple < 0 || (int64_t)c->ple * c->n_layers > CFG_MAX_INTER) {
        dfl_seterr("%s: hidden_size_per_layer_input %d out of range (0..%d per layer)", cur_path, c->ple,
                   CFG_MAX_INTER / c->n_layers);
        return -1;
    }
    if (c->ple && vp != c->vocab) {
        dfl_seterr("%s: vocab_size_per_layer_input %d differs from vocab_size %d: not supported", cur_path, vp,
                   c->vocab);
        return -1;
    }
    c->attn_scale = 1.0f;
    c->v_norm = 1;
    c->geglu = 1;
    return 0;
}

/* A DFlash draft's sliding-window layers (newer z-lab drafts):
 * layer_types entries "sliding_attention" with sliding_window W; such a
 * layer's block rows see the last W context positions (and the block). A
 * draft only proposes, so this changes acceptance and speed, never the
 * output. Without layer_types (or with every layer full) the draft attends
 * to the whole context. */
static int parse_draft_window(cfg_model *c, const cJSON *root) {
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (!lt || cJSON_IsNull(lt)) return 0;
    if (layer_types(lt, c->n_layers, "sliding_attention", c->sliding_layer, &c->n_sliding_layers)) return -1;
    if (!c->n_sliding_layers) return 0;
    if (get_int(root, "sliding_window", &c->window, 1, 0)) return -1;
    if (c->window < 1 || c->window > CFG_MAX_POS) {
        dfl_seterr("%s: sliding_window %d out of range (1..%d)", cur_path, c->window, CFG_MAX_POS);
        return -1;
    }
    return 0;
}

/* Everything config.json says (not generation_config.json), checked. */
static int from_json(cfg_model *c, const cJSON *root, const char *path) {
    cur_path = path;
    int rc = -1;
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    const char *arch = NULL;
    if (cJSON_IsArray(archs) && cJSON_IsString(archs->child)) arch = archs->child->valuestring;
    else if (cJSON_IsString(mt)) arch = mt->valuestring;
    if (!arch) {
        dfl_seterr("%s: missing field \"architectures\" (and no \"model_type\")", path);
        goto out;
    }
    /* a multimodal Qwen3.5 checkpoint: its text model, vision ignored */
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    int top_tie = 0; /* a multimodal file's top-level tie_word_embeddings, the text config's default */
    const cJSON *top = root; /* mlx-lm writes "quantization" here, beside text_config */
    int mm35 = !strcmp(arch, "Qwen3_5ForConditionalGeneration") || !strcmp(arch, "qwen3_5");
    int mm35moe = !strcmp(arch, "Qwen3_5MoeForConditionalGeneration") || !strcmp(arch, "qwen3_5_moe");
    int moe35 = mm35moe || !strcmp(arch, "Qwen3_5MoeForCausalLM") || !strcmp(arch, "qwen3_5_moe_text");
    /* a multimodal Gemma-4 checkpoint: its text model, vision and audio ignored */
    int mmg4 = !strcmp(arch, "Gemma4ForConditionalGeneration") || !strcmp(arch, "gemma4");
    int gemma4 = mmg4 || !strcmp(arch, "Gemma4ForCausalLM") || !strcmp(arch, "gemma4_text");
    if (mmg4 && !cJSON_IsObject(tc)) {
        dfl_seterr("%s: %s without a \"text_config\" object", path, arch);
        goto out;
    }
    if (gemma4) top_tie = 1; /* Gemma4Config / Gemma4TextConfig: tie_word_embeddings true */
    if ((mm35 || mm35moe || mmg4) && cJSON_IsObject(tc)) {
        const char *want = mmg4 ? "gemma4_text" : mm35moe ? "qwen3_5_moe_text" : "qwen3_5_text";
        const cJSON *tmt = cJSON_GetObjectItemCaseSensitive(tc, "model_type");
        if (cJSON_IsString(tmt) && strcmp(tmt->valuestring, want)) {
            dfl_seterr("%s: text_config.model_type \"%s\" is not %s", path, tmt->valuestring, want);
            goto out;
        }
        /* the top level says whether the lm_head is tied */
        const cJSON *tie = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings");
        if (cJSON_IsBool(tie)) top_tie = cJSON_IsTrue(tie);
        root = tc;
        if (mmg4) c->gemma_mm = 1;
        else c->vision_ignored = 1;
    }
    snprintf(c->arch_name, sizeof c->arch_name, "%s", arch);
    if (gemma4) {
        c->arch = CFG_GEMMA4;
    } else if (c->vision_ignored || moe35 || !strcmp(arch, "Qwen3_5ForCausalLM") || !strcmp(arch, "qwen3_5_text")) {
        c->arch = CFG_QWEN3_5;
        c->qwen35_moe = moe35;
    } else if (!strcmp(arch, "Qwen3NextForCausalLM") || !strcmp(arch, "qwen3_next")) {
        c->arch = CFG_QWEN3_5;
        c->qwen3_next = 1;
    } else if (!strcmp(arch, "Qwen3ForCausalLM") || !strcmp(arch, "qwen3")) {
        c->arch = CFG_QWEN3;
    } else if (!strcmp(arch, "LlamaForCausalLM") || !strcmp(arch, "llama")) {
        c->arch = CFG_LLAMA;
    } else if (!strcmp(arch, "Qwen3MoeForCausalLM") || !strcmp(arch, "qwen3_moe")) {
        c->arch = CFG_QWEN3_MOE;
    } else if (!strcmp(arch, "GptOssForCausalLM") || !strcmp(arch, "gpt_oss")) {
        c->arch = CFG_GPT_OSS;
    } else if (!strcmp(arch, "DFlashDraftModel")) {
        c->arch = CFG_QWEN3;
        c->is_draft = 1;
    } else {
        dfl_seterr("%s: unsupported architecture %s (supported: Qwen3ForCausalLM, Qwen3MoeForCausalLM, "
                   "Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3NextForCausalLM, LlamaForCausalLM, "
                   "GptOssForCausalLM, Gemma4ForCausalLM, Gemma4ForConditionalGeneration, DFlashDraftModel)", path,
                   arch);
        goto out;
    }
    c->qk_norm = c->arch != CFG_LLAMA && c->arch != CFG_GPT_OSS;
    if (get_int(root, "hidden_size", &c->hidden, 1, 0) || get_int(root, "intermediate_size", &c->inter, !c->qwen35_moe && !c->qwen3_next,
                                                             c->qwen3_next ? 5632 : 1) ||
        get_int(root, "num_hidden_layers", &c->n_layers, 1, 0) ||
        get_int(root, "num_attention_heads", &c->n_heads, 1, 0) ||
        get_int(root, "vocab_size", &c->vocab, !c->is_draft, 151936) ||
        get_int(root, "num_key_value_heads", &c->n_kv_heads, 0, c->arch == CFG_GEMMA4 ? 4 : c->n_heads) ||
        get_int(root, "max_position_embeddings", &c->max_pos, 0, c->arch == CFG_GEMMA4 ? 131072 : 4096))
        goto out;
    if (c->hidden <= 0 || c->inter <= 0 || c->n_layers <= 0 || c->n_heads <= 0 || c->vocab <= 0 ||
        c->n_kv_heads <= 0 || c->max_pos <= 0) {
        dfl_seterr("%s: sizes must be positive (hidden_size, intermediate_size, num_hidden_layers, "
                   "num_attention_heads, num_key_value_heads, vocab_size, max_position_embeddings)", path);
        goto out;
    }
    /* Upper bounds well above any real model, so that every size product
     * below fits an int and no bad file makes us allocate before the tensors
     * are checked against the file's size. */
    static const struct {
        const char *name;
        size_t off;
        int max;
    } lim[] = {
        {"hidden_size", offsetof(cfg_model, hidden), CFG_MAX_HIDDEN},
        {"intermediate_size", offsetof(cfg_model, inter), CFG_MAX_INTER},
        {"num_hidden_layers", offsetof(cfg_model, n_layers), CFG_MAX_LAYERS},
        {"num_attention_heads", offsetof(cfg_model, n_heads), CFG_MAX_HEADS},
        {"num_key_value_heads", offsetof(cfg_model, n_kv_heads), CFG_MAX_HEADS},
        {"vocab_size", offsetof(cfg_model, vocab), CFG_MAX_VOCAB},
        {"max_position_embeddings", offsetof(cfg_model, max_pos), CFG_MAX_POS},
    };
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++) {
        int v = *(const int *)((const char *)c + lim[i].off);
        if (v > lim[i].max) {
            dfl_seterr("%s: %s %d is larger than dflash supports (%d)", path, lim[i].name, v, lim[i].max);
            goto out;
        }
    }
    if (get_int(root, "head_dim", &c->head_dim, 0, c->arch == CFG_GEMMA4 ? 256 : c->hidden / c->n_heads)) goto out;
    if (c->head_dim <= 0 || c->head_dim % 2 || c->head_dim > 512) {
        dfl_seterr("%s: head_dim %d must be even and in 2..512", path, c->head_dim);
        goto out;
    }
    if ((int64_t)c->n_heads * c->head_dim > CFG_MAX_HIDDEN) { /* rows of q_proj, columns of o_proj */
        dfl_seterr("%s: num_attention_heads * head_dim = %lld is larger than dflash supports (%d)", path,
                   (long long)c->n_heads * c->head_dim, CFG_MAX_HIDDEN);
        goto out;
    }
    if (c->n_heads % c->n_kv_heads) {
        dfl_seterr("%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", path,
                   c->n_heads, c->n_kv_heads);
        goto out;
    }
    double eps;
    if (get_num(root, "rms_norm_eps", &eps, c->arch != CFG_GEMMA4, 1e-6)) goto out;
    if (!(eps > 0 && eps < 1)) {
        dfl_seterr("%s: rms_norm_eps %g out of range", path, eps);
        goto out;
    }
    c->eps = (float)eps;
    if (c->arch != CFG_GEMMA4 && parse_rope(c, root)) goto out; /* Gemma-4's: per layer type (parse_gemma4) */
    if (get_bool(root, "tie_word_embeddings", &c->tie_embeddings, top_tie)) goto out;
    static const moe_defaults qwen3_moe = {.n_experts = 128, .n_experts_used = 8, .moe_inter = 768, .norm_topk = 0};
    if (c->arch == CFG_QWEN3_MOE && parse_moe(c, root, &qwen3_moe)) goto out;
    if (c->arch == CFG_QWEN3_5 && parse_qwen35(c, root)) goto out;
    if (c->arch == CFG_GPT_OSS && parse_gpt_oss(c, root)) goto out;
    if (c->arch == CFG_GEMMA4 && parse_gemma4(c, root)) goto out;
    const cJSON *hb = cJSON_GetObjectItemCaseSensitive(root, "attention_bias");
    if (c->arch != CFG_GPT_OSS && cJSON_IsTrue(hb)) {
        dfl_seterr("%s: attention_bias=true is not supported", path);
        goto out;
    }
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (cJSON_IsString(act) && strcmp(act->valuestring, "silu") != 0) {
        dfl_seterr("%s: hidden_act \"%s\" is not supported (only silu)", path, act->valuestring);
        goto out;
    }
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "quantization");
    if (!q) q = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    if (!q && top != root) q = cJSON_GetObjectItemCaseSensitive(top, "quantization");
    if (!q && top != root) q = cJSON_GetObjectItemCaseSensitive(top, "quantization_config");
    if (q && !cJSON_IsNull(q)) {
        const cJSON *qm = cJSON_IsObject(q) ? cJSON_GetObjectItemCaseSensitive(q, "quant_method") : NULL;
        if (c->arch == CFG_GPT_OSS && cJSON_IsString(qm) && !strcmp(qm->valuestring, "mxfp4")) {
            q = NULL; /* the experts' *_blocks / *_scales (model.c); every other tensor is float */
        } else if (cJSON_IsString(qm) && strcmp(qm->valuestring, "mlx")) {
            dfl_seterr("%s: quantization_config.quant_method \"%s\" is not supported (MLX affine 4/8-bit only; "
                       "MXFP4 for gpt-oss only)", path, qm->valuestring);
            goto out;
        }
    }
    if (q && !cJSON_IsNull(q)) {
        if (!cJSON_IsObject(q) || get_int(q, "group_size", &c->q_group, 1, 0) ||
            get_int(q, "bits", &c->q_bits, 1, 0)) {
            if (!cJSON_IsObject(q)) dfl_seterr("%s: \"quantization\" must be an object", path);
            goto out;
        }
        if (c->q_bits != 4 && c->q_bits != 8) {
            dfl_seterr("%s: quantization bits %d not supported (4 or 8)", path, c->q_bits);
            goto out;
        }
        if (c->q_group != 32 && c->q_group != 64 && c->q_group != 128) {
            dfl_seterr("%s: quantization group_size %d not supported (32, 64 or 128)", path, c->q_group);
            goto out;
        }
        for (const cJSON *e = q->child; e; e = e->next) {
            if (!cJSON_IsObject(e)) continue; /* "bits", "group_size", "mode", or PATH: false (not quantized) */
            int b, g;
            if (get_int(e, "bits", &b, 1, 0) || get_int(e, "group_size", &g, 1, 0)) goto out;
            if ((b != 4 && b != 8) || (g != 32 && g != 64 && g != 128)) {
                dfl_seterr("%s: quantization of \"%s\": %d bits, group_size %d not supported (4 or 8 bits; 32, 64 "
                           "or 128)", path, e->string, b, g);
                goto out;
            }
            c->q_mixed = 1;
        }
        const cJSON *mode = cJSON_GetObjectItemCaseSensitive(q, "mode");
        if (mode && !(cJSON_IsString(mode) && !strcmp(mode->valuestring, "affine"))) {
            dfl_seterr("%s: quantization mode %s not supported (affine)", path,
                       cJSON_IsString(mode) ? mode->valuestring : "(not a string)");
            goto out;
        }
    }
    if (c->arch != CFG_GPT_OSS && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "use_sliding_window")) &&
        !c->is_draft) {
        dfl_seterr("%s: use_sliding_window=true is not supported for %s", path, arch);
        goto out;
    }
    if (c->is_draft && parse_draft_window(c, root)) goto out;
    if (c->is_draft) {
        const cJSON *dc = cJSON_GetObjectItemCaseSensitive(root, "dflash_config");
        if (!cJSON_IsObject(dc)) {
            dfl_seterr("%s: DFlash draft without a \"dflash_config\" object", path);
            goto out;
        }
        if (get_int(root, "block_size", &c->block_size, 1, 0) ||
            get_int(dc, "mask_token_id", &c->mask_token_id, 1, 0) ||
            get_int(root, "num_target_layers", &c->n_target_layers, 0, 0))
            goto out;
        if (c->mask_token_id < 0 || c->n_target_layers < 0 || c->n_target_layers > CFG_MAX_LAYERS) {
            dfl_seterr("%s: mask_token_id %d / num_target_layers %d out of range", path, c->mask_token_id,
                       c->n_target_layers);
            goto out;
        }
        if (c->block_size < 2 || c->block_size > 64) {
            dfl_seterr("%s: block_size %d must be in 2..64", path, c->block_size);
            goto out;
        }
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(dc, "target_layer_ids");
        if (ids && !cJSON_IsNull(ids)) {
            if (!cJSON_IsArray(ids) || cJSON_GetArraySize(ids) < 1 || cJSON_GetArraySize(ids) > CFG_MAX_TAPS) {
                dfl_seterr("%s: dflash_config.target_layer_ids must be a list of 1..%d layer ids", path,
                           CFG_MAX_TAPS);
                goto out;
            }
            for (const cJSON *e = ids->child; e; e = e->next) {
                if (!int_in(e, 0, CFG_MAX_LAYERS - 1, &c->tap_layers[c->n_taps])) {
                    dfl_seterr("%s: dflash_config.target_layer_ids must hold layer ids (integers in 0..%d)", path,
                               CFG_MAX_LAYERS - 1);
                    goto out;
                }
                c->n_taps++;
            }
        } else {
            if (c->n_target_layers <= 0) {
                dfl_seterr("%s: need dflash_config.target_layer_ids or num_target_layers", path);
                goto out;
            }
            if (c->n_layers > CFG_MAX_TAPS) {
                dfl_seterr("%s: too many draft layers (%d)", path, c->n_layers);
                goto out;
            }
            c->n_taps = c->n_layers;
            cfg_default_taps(c->n_target_layers, c->n_layers, c->tap_layers);
        }
        if ((int64_t)c->n_taps * c->hidden > CFG_MAX_INTER) { /* columns of fc */
            dfl_seterr("%s: %d target layers * hidden_size %d = %lld features is larger than dflash supports (%d)",
                       path, c->n_taps, c->hidden, (long long)c->n_taps * c->hidden, CFG_MAX_INTER);
            goto out;
        }
    }
    rc = 0;
out:
    cur_path = NULL;
    return rc;
}

int cfg_from_json(cfg_model *c, const cJSON *root, const char *path) {
    memset(c, 0, sizeof *c);
    if (from_json(c, root, path)) return -1;
    return parse_eos(c, cJSON_GetObjectItemCaseSensitive(root, "eos_token_id"), path);
}

int cfg_load(cfg_model *c, const char *dir) {
    memset(c, 0, sizeof *c);
    char *path = dfl_path_join(dir, "config.json");
    int rc = -1;
    char *txt = dfl_read_file(path, NULL);
    cJSON *root = NULL, *gen = NULL;
    if (!txt) goto out;
    root = cJSON_Parse(txt);
    if (!cJSON_IsObject(root)) {
        dfl_seterr("%s: not a valid JSON object", path);
        goto out;
    }
    if (from_json(c, root, path)) goto out;
    /* generation_config.json: stop tokens (optional file) */
    char *gpath = dfl_path_join(dir, "generation_config.json");
    if (dfl_file_exists(gpath)) {
        char *gt = dfl_read_file(gpath, NULL);
        if (!gt) { /* the read error says why */
            free(gpath);
            goto out;
        }
        gen = cJSON_Parse(gt);
        free(gt);
        if (!cJSON_IsObject(gen)) {
            dfl_seterr("%s: not a valid JSON object", gpath);
            free(gpath);
            goto out;
        }
        if (parse_eos(c, cJSON_GetObjectItemCaseSensitive(gen, "eos_token_id"), gpath)) {
            free(gpath);
            goto out;
        }
    }
    free(gpath);
    if (c->n_eos == 0 && parse_eos(c, cJSON_GetObjectItemCaseSensitive(root, "eos_token_id"), path)) goto out;
    rc = 0;
out:
    cJSON_Delete(root);
    cJSON_Delete(gen);
    free(txt);
    free(path);
    return rc;
}
