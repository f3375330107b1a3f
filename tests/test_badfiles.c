/* test_badfiles.c - hostile model directories: sizes whose products wrap,
 * counts too large to allocate, JSON numbers outside the range of the C type
 * they end up in, shapes whose element count wraps uint64, non-finite
 * floats, FIFOs and directories where files should be. Each case is made
 * here from the tiny models in tests/models and must fail with a one-line
 * message naming the problem - never a crash, an abort, UB or a hang. Also
 * the library side of the output-directory rules (quantize/synth). */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "check.h"
#include "config.h"
#include "dflash.h"
#include "model.h"
#include "safetensors.h"
#include "synth.h"
#include "tmpdir.h"
#include "util.h"

static int n_dirs;

static void copy(const char *src, const char *dst) {
    size_t n;
    char *b = dfl_read_file(src, &n);
    if (!b) {
        fprintf(stderr, "%s\n", dfl_lasterr());
        exit(1);
    }
    write_file(dst, b, n);
    free(b);
}

/* A fresh copy of tests/models/NAME; returns its path (static buffer). */
static const char *clone(const char *name) {
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/m%d", tmpdir, n_dirs++);
    mkdir(dir, 0777);
    static const char *files[] = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                                  "tokenizer_config.json"};
    for (int i = 0; i < 5; i++) {
        char src[512], dst[600];
        snprintf(src, sizeof src, "tests/models/%s/%s", name, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        if (access(src, R_OK) == 0) copy(src, dst);
    }
    return dir;
}

/* Replace the raw JSON text of KEY's value in DIR/FILE (top level or inside
 * the object OBJ when not NULL). The value is spliced in as text so that
 * numbers such as 1e30 or 1e999 reach the parser exactly as written. */
static void set_raw(const char *dir, const char *file, const char *obj, const char *key, const char *value) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    char *txt = dfl_read_file(p, NULL);
    cJSON *j = txt ? cJSON_Parse(txt) : cJSON_CreateObject();
    free(txt);
    cJSON *o = obj ? cJSON_GetObjectItemCaseSensitive(j, obj) : j;
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    cJSON_AddStringToObject(o, key, "@@VALUE@@");
    char *s = cJSON_PrintUnformatted(j), *at = strstr(s, "\"@@VALUE@@\"");
    cJSON_Delete(j);
    size_t n = strlen(s) + strlen(value) + 1;
    char *out = malloc(n);
    snprintf(out, n, "%.*s%s%s", (int)(at - s), s, value, at + strlen("\"@@VALUE@@\""));
    write_file(p, out, strlen(out));
    free(out);
    free(s);
}

static int err_has(const char *needle) {
    const char *e = dfl_lasterr();
    if (strstr(e, needle) && !strchr(e, '\n')) return 1;
    fprintf(stderr, "  error was: %s\n", e);
    return 0;
}

/* mdl_load of DIR must fail with NEEDLE in the message. */
static int load_fails(const char *dir, const char *needle) {
    mdl_model m;
    dfl_seterr("(none)");
    if (mdl_load(&m, dir) == 0) {
        mdl_free(&m);
        fprintf(stderr, "  %s loaded\n", dir);
        return 0;
    }
    return err_has(needle);
}

#define CFG_CASE(model, file, obj, key, value, needle)                                         \
    do {                                                                                        \
        const char *d_ = clone(model);                                                          \
        set_raw(d_, file, obj, key, value);                                                     \
        CHECK(load_fails(d_, needle), "%s %s = %s", file, key, value);                          \
    } while (0)

TEST(size_products) {
    /* heads * head_dim = 2^32 wrapped to 0 in int before */
    const char *d = clone("tiny-qwen3");
    set_raw(d, "config.json", NULL, "num_attention_heads", "1024");
    set_raw(d, "config.json", NULL, "num_key_value_heads", "1024");
    set_raw(d, "config.json", NULL, "head_dim", "512");
    CHECK(load_fails(d, "num_attention_heads * head_dim"), "heads * head_dim");
    CFG_CASE("tiny-qwen3", "config.json", NULL, "num_attention_heads", "8388608", "num_attention_heads");
    CFG_CASE("tiny-qwen3", "config.json", NULL, "hidden_size", "1073741824", "hidden_size");
    CFG_CASE("tiny-qwen3", "config.json", NULL, "intermediate_size", "2000000000", "intermediate_size");
    CFG_CASE("tiny-qwen3", "config.json", NULL, "vocab_size", "2000000000", "vocab_size");
    /* draft: n_taps * hidden (fc columns) */
    d = clone("tiny-draft");
    set_raw(d, "config.json", NULL, "hidden_size", "65536");
    set_raw(d, "config.json", NULL, "num_attention_heads", "128");
    set_raw(d, "config.json", NULL, "num_key_value_heads", "128");
    set_raw(d, "config.json", NULL, "head_dim", "512");
    set_raw(d, "config.json", "dflash_config", "target_layer_ids",
            "[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31]");
    CHECK(load_fails(d, "features is larger than dflash supports"), "n_taps * hidden");
}

TEST(counts_before_allocation) {
    CFG_CASE("tiny-qwen3", "config.json", NULL, "num_hidden_layers", "2000000000", "num_hidden_layers");
    CFG_CASE("tiny-qwen3", "config.json", NULL, "num_hidden_layers", "-3", "positive");
    CFG_CASE("tiny-qwen3", "config.json", NULL, "max_position_embeddings", "1999999999", "max_position_embeddings");
    CFG_CASE("tiny-draft", "config.json", NULL, "num_target_layers", "1e9", "num_target_layers");
}

TEST(json_numbers_out_of_range) {
    CFG_CASE("tiny-qwen3", "generation_config.json", NULL, "eos_token_id", "1e30", "eos_token_id");
    CFG_CASE("tiny-qwen3", "generation_config.json", NULL, "eos_token_id", "[151645, -1e30]", "eos_token_id");
    CFG_CASE("tiny-qwen3", "generation_config.json", NULL, "eos_token_id", "2.5", "eos_token_id");
    CFG_CASE("tiny-draft", "config.json", "dflash_config", "target_layer_ids", "[1, 1e30]", "target_layer_ids");
    CFG_CASE("tiny-draft", "config.json", "dflash_config", "target_layer_ids", "[-1e30]", "target_layer_ids");
    CFG_CASE("tiny-draft", "config.json", "dflash_config", "mask_token_id", "1e30", "mask_token_id");
    CFG_CASE("tiny-qwen3", "config.json", NULL, "hidden_size", "1e999", "hidden_size");
    CFG_CASE("tiny-qwen3", "config.json", NULL, "rope_theta", "1e999", "rope_theta");
    CFG_CASE("tiny-qwen3", "config.json", NULL, "rope_theta", "-1e999", "rope_theta");
    CFG_CASE("tiny-qwen3", "config.json", NULL, "rms_norm_eps", "1e999", "rms_norm_eps");
}

/* A raw safetensors file with the given header and ndata zero bytes. */
static void raw_st(const char *p, const char *hdr, size_t ndata) {
    size_t h = strlen(hdr);
    uint8_t *b = calloc(1, 8 + h + ndata);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b + 8, hdr, h);
    write_file(p, b, 8 + h + ndata);
    free(b);
}

static int st_fails(const char *hdr, size_t ndata, const char *needle) {
    char *p = path("raw.safetensors", NULL);
    raw_st(p, hdr, ndata);
    st_set s;
    if (st_open_file(&s, p) == 0) {
        st_close(&s);
        fprintf(stderr, "  accepted: %s\n", hdr);
        return 0;
    }
    return err_has(needle);
}

TEST(safetensors_numbers) {
    CHECK(st_fails("{\"a\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,1e20]}}", 16, "beyond"), "end 1e20");
    CHECK(st_fails("{\"a\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,18446744073709551616]}}", 16,
                   "beyond"), "end 2^64");
    CHECK(st_fails("{\"a\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[1e300,1e301]}}", 16, "beyond"),
          "begin 1e300");
    CHECK(st_fails("{\"a\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[-1e30,16]}}", 16, "data_offsets"),
          "begin -1e30");
    CHECK(st_fails("{\"a\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0.5,16]}}", 16, "data_offsets"),
          "begin 0.5");
    CHECK(st_fails("{\"a\":{\"dtype\":\"U8\",\"shape\":[1e30],\"data_offsets\":[0,16]}}", 16, "shape"), "dim 1e30");
    CHECK(st_fails("{\"a\":{\"dtype\":\"U8\",\"shape\":[2.5],\"data_offsets\":[0,16]}}", 16, "shape"), "dim 2.5");
    /* 2^32 * 2^32 * 16 wraps uint64 to 0 = the byte count of an empty range */
    CHECK(st_fails("{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,0]}}", 16,
                   "shape too large"), "wrapping product");
    CHECK(st_fails("{\"a\":{\"dtype\":\"F32\",\"shape\":[65536,65536,65536,65536],\"data_offsets\":[0,0]}}", 16,
                   "shape too large"), "wrapping product 4d");
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "  FAIL: a FIFO in the model directory hung the load\n"
                              "test_badfiles: 0 passed, 1 failed\n";
    write(2, msg, sizeof msg - 1);
    _exit(1);
}

TEST(fifo_and_directories) {
    signal(SIGALRM, on_alarm);
    alarm(120); /* a hang guard for the old behaviour, not a timing check */
    const char *files[] = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"};
    for (int i = 0; i < 4; i++) {
        const char *d = clone("tiny-qwen3");
        char p[600];
        snprintf(p, sizeof p, "%s/%s", d, files[i]);
        unlink(p);
        CHECK(mkfifo(p, 0666) == 0, "mkfifo %s", p);
        dfl_seterr("(none)");
        dflash_model *m = i == 3 ? dflash_load_tokenizer(d) : dflash_load(d, NULL, NULL);
        CHECK(!m && err_has("a FIFO"), "FIFO %s", files[i]);
        if (m) dflash_free(m);
        d = clone("tiny-qwen3");
        snprintf(p, sizeof p, "%s/%s", d, files[i]);
        unlink(p);
        mkdir(p, 0777);
        dfl_seterr("(none)");
        m = i == 3 ? dflash_load_tokenizer(d) : dflash_load(d, NULL, NULL);
        CHECK(!m && err_has("a directory"), "directory %s", files[i]);
        if (m) dflash_free(m);
    }
    alarm(0);
}

/* Edit DIR/model.safetensors in place: tensor NAME renamed to NEW_NAME
 * (not NULL), its shape set to SHAPE (a JSON list, not NULL; the element
 * count must stay), and/or NB bytes at its data start replaced by BYTES. */
static void st_patch(const char *dir, const char *name, const char *new_name, const char *shape, const void *bytes,
                     size_t nb) {
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    size_t n;
    char *b = dfl_read_file(p, &n);
    uint64_t hl;
    memcpy(&hl, b, 8);
    cJSON *h = cJSON_ParseWithLength(b + 8, (size_t)hl);
    cJSON *t = cJSON_DetachItemFromObjectCaseSensitive(h, name);
    if (!t) {
        fprintf(stderr, "st_patch: no tensor %s in %s\n", name, p);
        exit(1);
    }
    if (shape) cJSON_ReplaceItemInObjectCaseSensitive(t, "shape", cJSON_Parse(shape));
    if (bytes) {
        double off = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(t, "data_offsets"), 0)->valuedouble;
        memcpy(b + 8 + hl + (size_t)off, bytes, nb);
    }
    cJSON_AddItemToObject(h, new_name ? new_name : name, t);
    char *js = cJSON_PrintUnformatted(h);
    size_t jl = strlen(js), pad = (8 - jl % 8) % 8;
    uint64_t nl = jl + pad;
    FILE *f = fopen(p, "wb");
    fwrite(&nl, 8, 1, f);
    fwrite(js, 1, jl, f);
    for (size_t i = 0; i < pad; i++) fputc(' ', f);
    fwrite(b + 8 + hl, 1, n - 8 - hl, f);
    fclose(f);
    free(js);
    cJSON_Delete(h);
    free(b);
}

/* Qwen3.5 checkpoints with one tensor wrong: each fails at load, naming it. */
TEST(qwen35_bad_tensors) {
    const char *L0 = "model.layers.0.linear_attn.", *d;
    char a[200], b2[200];
#define T35(field) (snprintf(a, sizeof a, "%s%s", L0, field), a)
    d = clone("tiny-qwen35");
    snprintf(b2, sizeof b2, "%sin_proj_zz.weight", L0);
    st_patch(d, T35("in_proj_z.weight"), b2, NULL, NULL, 0);
    CHECK(load_fails(d, "missing tensor 'model.layers.0.linear_attn.in_proj_z.weight'"), "missing in_proj_z");
    d = clone("tiny-qwen35");
    st_patch(d, T35("conv1d.weight"), NULL, "[128, 4, 1]", NULL, 0);
    /* layer 0 in mlx-lm's conv1d layout, layer 2 not: half converted */
    CHECK(load_fails(d, "tensor 'model.layers.2.linear_attn.conv1d.weight': shape [128, 1, 4] (Hugging Face's "
                        "layout), but the first linear-attention layer's conv1d.weight has mlx-lm's"),
          "MLX conv layout in layer 0 only");
    d = clone("tiny-qwen35");
    st_patch(d, T35("conv1d.weight"), NULL, "[64, 1, 8]", NULL, 0);
    CHECK(load_fails(d, "conv1d.weight': shape [64, 1, 8], expected [128, 1, 4]"), "conv shape");
    d = clone("tiny-qwen35");
    st_patch(d, "model.layers.1.self_attn.q_proj.weight", NULL, "[64, 64]", NULL, 0);
    CHECK(load_fails(d, "q_proj.weight': shape [64, 64], expected [128, 32]"), "q_proj not doubled");
    d = clone("tiny-qwen35");
    st_patch(d, T35("in_proj_qkv.weight"), NULL, "[64, 64]", NULL, 0);
    CHECK(load_fails(d, "in_proj_qkv.weight': shape [64, 64], expected [128, 32]"), "in_proj_qkv shape");
    d = clone("tiny-qwen35");
    const uint16_t inf_bf16 = 0x7f80;
    st_patch(d, T35("A_log"), NULL, NULL, &inf_bf16, 2);
    CHECK(load_fails(d, "A_log': value inf at head 0 is out of range"), "A_log inf");
    d = clone("tiny-qwen35moe");
    st_patch(d, "model.layers.2.mlp.shared_expert_gate.weight", "model.layers.2.mlp.shared_gate.weight", NULL, NULL, 0);
    CHECK(load_fails(d, "missing tensor 'model.layers.2.mlp.shared_expert_gate.weight'"), "missing shared gate");
    d = clone("tiny-qwen35moe");
    st_patch(d, "model.layers.0.mlp.experts.gate_up_proj", NULL, "[8, 32, 64]", NULL, 0);
    CHECK(load_fails(d, "gate_up_proj': shape [8, 32, 64], expected [8, 64, 32]"), "fused experts shape");
    /* the config: an expert count the tensors do not have */
    d = clone("tiny-qwen35moe");
    set_raw(d, "config.json", NULL, "num_experts", "4");
    CHECK(load_fails(d, "mlp.gate.weight': shape [8, 32], expected [4, 32]"), "num_experts 4 vs 8 in the file");
#undef T35
}

/* gpt-oss checkpoints with one thing wrong: its own tensors (sinks, biases,
 * the input-major experts), its config fields, and quantization methods
 * other than MXFP4 (which only gpt-oss may name; test_mxfp4.c loads it). */
TEST(gptoss_bad_files) {
    const char *d;
    d = clone("tiny-gptoss");
    st_patch(d, "model.layers.1.self_attn.sinks", "model.layers.1.self_attn.sink", NULL, NULL, 0);
    CHECK(load_fails(d, "missing tensor 'model.layers.1.self_attn.sinks'"), "no sinks");
    d = clone("tiny-gptoss");
    st_patch(d, "model.layers.0.self_attn.k_proj.bias", NULL, "[2, 16]", NULL, 0);
    CHECK(load_fails(d, "k_proj.bias': shape [2, 16], expected [32]"), "k bias shape");
    d = clone("tiny-gptoss");
    st_patch(d, "model.layers.2.mlp.experts.gate_up_proj", NULL, "[4, 256, 64]", NULL, 0);
    CHECK(load_fails(d, "gate_up_proj': shape [4, 256, 64], expected [4, 64, 256]"), "experts output-major");
    d = clone("tiny-gptoss");
    st_patch(d, "model.layers.3.mlp.router.bias", "model.layers.3.mlp.router.b", NULL, NULL, 0);
    CHECK(load_fails(d, "missing tensor 'model.layers.3.mlp.router.bias'"), "no router bias");
    d = clone("tiny-gptoss");
    set_raw(d, "config.json", NULL, "layer_types", "[\"sliding_attention\", \"full_attention\", \"chunked_attention\", \"full_attention\"]");
    CHECK(load_fails(d, "layer_types[2] must be \"sliding_attention\" or \"full_attention\""), "layer type");
    d = clone("tiny-gptoss");
    set_raw(d, "config.json", NULL, "sliding_window", "0");
    CHECK(load_fails(d, "sliding_window 0 out of range"), "window 0");
    d = clone("tiny-gptoss");
    set_raw(d, "config.json", NULL, "num_experts_per_tok", "5");
    CHECK(load_fails(d, "num_experts_per_tok 5 out of range"), "top k > experts");
    d = clone("tiny-gptoss");
    set_raw(d, "config.json", "rope_parameters", "beta_fast", "-1");
    CHECK(load_fails(d, "yarn factor 32, beta_fast -1 and beta_slow 1 must be positive"), "beta_fast");
    d = clone("tiny-gptoss");
    set_raw(d, "config.json", NULL, "quantization_config", "{\"quant_method\": \"fp8\"}");
    CHECK(load_fails(d, "quant_method \"fp8\" is not supported"), "fp8");
    d = clone("tiny-qwen3");
    set_raw(d, "config.json", NULL, "quantization_config", "{\"quant_method\": \"mxfp4\"}");
    CHECK(load_fails(d, "quant_method \"mxfp4\" is not supported"), "mxfp4 on qwen3");
}

/* Gemma-4 MoE (tiny-gemma4-moe) with one thing wrong: the expert fields
 * (each named), the router's and the experts' tensors, an expert layout
 * other than transformers' (MLX-quantized: refused by name). */
TEST(gemma4_moe_bad_files) {
    static const struct {
        const char *key, *value, *needle;
    } cfg[] = {
        {"num_experts", "null", "enable_moe_block is true but \"num_experts\" is null"},
        {"top_k_experts", "5", "top_k_experts 5 out of range (1..64, at most num_experts 4)"},
        {"top_k_experts", "0", "top_k_experts 0 out of range"},
        {"num_experts", "0", "num_experts 0 out of range"},
        {"moe_intermediate_size", "0", "moe_intermediate_size 0 out of range"},
        {"moe_intermediate_size", "2.5", "field \"moe_intermediate_size\" must be an integer"},
        {"num_kv_shared_layers", "2", "num_kv_shared_layers > 0 is not supported"},
    };
    const char *d;
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        d = clone("tiny-gemma4-moe");
        set_raw(d, "config.json", NULL, cfg[i].key, cfg[i].value);
        CHECK(load_fails(d, cfg[i].needle), "config %s = %s", cfg[i].key, cfg[i].value);
    }
    d = clone("tiny-gemma4-moe");
    st_patch(d, "model.layers.2.router.per_expert_scale", "model.layers.2.router.pes", NULL, NULL, 0);
    CHECK(load_fails(d, "missing tensor 'model.layers.2.router.per_expert_scale'"), "no per_expert_scale");
    d = clone("tiny-gemma4-moe");
    st_patch(d, "model.layers.1.experts.gate_up_proj", NULL, "[4, 32, 128]", NULL, 0);
    CHECK(load_fails(d, "gate_up_proj': shape [4, 32, 128], expected [4, 64, 64]"), "gate_up_proj shape");
    d = clone("tiny-gemma4-moe");
    st_patch(d, "model.layers.4.experts.down_proj", NULL, "[4, 32, 64]", NULL, 0);
    CHECK(load_fails(d, "down_proj': shape [4, 32, 64], expected [4, 64, 32]"), "down_proj shape");
    d = clone("tiny-gemma4-moe");
    st_patch(d, "model.layers.0.pre_feedforward_layernorm_2.weight", "model.layers.0.pre_ffn_2.weight", NULL, NULL, 0);
    CHECK(load_fails(d, "missing tensor 'model.layers.0.pre_feedforward_layernorm_2.weight'"), "no norm 2");
    d = clone("tiny-gemma4-moe");
    st_patch(d, "model.layers.3.post_feedforward_layernorm_1.weight", "model.layers.3.experts.gate_up_proj.scales",
             NULL, NULL, 0);
    CHECK(load_fails(d, "tensor 'model.layers.3.experts.gate_up_proj': MLX-quantized; Gemma-4's experts"),
          "MLX experts refused");
    d = clone("tiny-gemma4-moe");
    st_patch(d, "model.layers.5.experts.down_proj", "model.layers.5.experts.down", NULL, NULL, 0);
    CHECK(load_fails(d, "tensor 'model.layers.5.experts.down_proj': missing; Gemma-4's experts"), "no down_proj");
}

/* Gemma-4 checkpoints with one thing wrong: its own tensors (layer_scalar,
 * the full layer's wider head, the per-layer inputs) and config fields
 * (those refused by name, out-of-range values); and the multimodal
 * checkpoint layout (text_config, model.language_model.*) loads as the text
 * model it holds. */
TEST(gemma4_bad_files) {
    const char *d;
    d = clone("tiny-gemma4");
    st_patch(d, "model.layers.2.layer_scalar", "model.layers.2.scalar", NULL, NULL, 0);
    CHECK(load_fails(d, "missing tensor 'model.layers.2.layer_scalar'"), "no layer_scalar");
    d = clone("tiny-gemma4");
    st_patch(d, "model.layers.5.self_attn.k_proj.weight", NULL, "[32, 128]", NULL, 0);
    CHECK(load_fails(d, "k_proj.weight': shape [32, 128], expected [64, 64]"), "full layer k_proj");
    d = clone("tiny-gemma4");
    st_patch(d, "model.layers.5.self_attn.q_norm.weight", NULL, "[2, 16]", NULL, 0);
    CHECK(load_fails(d, "q_norm.weight': shape [2, 16], expected [32]"), "full layer q_norm");
    d = clone("tiny-gemma4");
    st_patch(d, "model.per_layer_model_projection.weight", "model.per_layer_projection.weight", NULL, NULL, 0);
    CHECK(load_fails(d, "missing tensor 'model.per_layer_model_projection.weight'"), "no per-layer projection");
    d = clone("tiny-gemma4");
    st_patch(d, "model.layers.1.per_layer_input_gate.weight", NULL, "[16, 32]", NULL, 0);
    CHECK(load_fails(d, "per_layer_input_gate.weight': shape [16, 32], expected [8, 64]"), "per-layer gate");
    static const struct {
        const char *obj, *key, *value, *needle;
    } cfg[] = {
        {NULL, "num_kv_shared_layers", "2", "num_kv_shared_layers > 0 is not supported"},
        {NULL, "enable_moe_block", "true", "enable_moe_block is true but \"num_experts\" is null"},
        {NULL, "hidden_activation", "\"gelu\"", "hidden_activation \"gelu\" is not supported"},
        {NULL, "use_bidirectional_attention", "\"all\"", "use_bidirectional_attention all is not supported"},
        {NULL, "per_layer_config", "{\"7\": {\"head_dim\": 32}}", "per_layer_config key \"7\" must be a layer id"},
        {NULL, "per_layer_config", "{\"5\": {\"num_attention_heads\": 8}}",
         "per_layer_config[\"5\"].num_attention_heads is not supported"},
        {NULL, "per_layer_config", "{\"5\": {\"head_dim\": 33}}", "per_layer_config[\"5\"].head_dim must be"},
        {NULL, "per_layer_config", "{\"4\": {\"head_dim\": 32}}", "layer 4's head_dim 32 differs"},
        {"rope_parameters", "full_attention", "{\"rope_type\": \"yarn\", \"rope_theta\": 1e6}",
         "rope_parameters.full_attention.rope_type \"yarn\" is not supported"},
        {"rope_parameters", "sliding_attention", "{\"rope_type\": \"default\"}", "missing field \"rope_theta\""},
        {NULL, "vocab_size_per_layer_input", "100", "vocab_size_per_layer_input 100 differs"},
        {NULL, "final_logit_softcapping", "-1", "final_logit_softcapping -1 must be positive"},
        {NULL, "sliding_window", "0", "sliding_window 0 out of range"},
        {NULL, "layer_types", "[\"sliding_attention\"]", "layer_types has 1 entries for 6 layers"},
    };
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        d = clone("tiny-gemma4");
        set_raw(d, "config.json", cfg[i].obj, cfg[i].key, cfg[i].value);
        CHECK(load_fails(d, cfg[i].needle), "config %s = %s", cfg[i].key, cfg[i].value);
    }
    /* the hub's older layout: no per_layer_config, global_head_dim (transformers
     * converts it; default 512) */
    d = clone("tiny-gemma4");
    set_raw(d, "config.json", NULL, "per_layer_config", "null");
    set_raw(d, "config.json", NULL, "global_head_dim", "32");
    mdl_model g;
    if (mdl_load(&g, d) == 0) {
        CHECK(cfg_head_dim(&g.cfg, 5) == 32 && cfg_head_dim(&g.cfg, 4) == 16 && cfg_kv_heads(&g.cfg, 5) == 2,
              "global_head_dim 32 read wrong");
        mdl_free(&g);
    } else {
        CHECK(0, "global_head_dim 32: %s", dfl_lasterr());
    }
    set_raw(d, "config.json", NULL, "global_head_dim", "null");
    CHECK(load_fails(d, "q_proj.weight': shape [128, 64], expected [2048, 64]"), "global_head_dim default 512");
    /* the multimodal layout: config.json's text_config, tensors under model.language_model. */
    d = clone("tiny-gemma4");
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", d);
    char *txt = dfl_read_file(p, NULL);
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"architectures\": [\"Gemma4ForConditionalGeneration\"], \"model_type\": \"gemma4\", "
               "\"vision_config\": {\"hidden_size\": 768}, \"audio_config\": null, \"text_config\": %s}", txt);
    fclose(f);
    free(txt);
    st_set ss;
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    CHECK(st_open_file(&ss, p) == 0, "%s", dfl_lasterr());
    int nt = ss.n;
    char **names = malloc(sizeof(char *) * (size_t)nt);
    for (int i = 0; i < nt; i++) names[i] = strdup(ss.t[i].name);
    st_close(&ss);
    for (int i = 0; i < nt; i++) {
        char nn[300];
        snprintf(nn, sizeof nn, "model.language_model.%s", names[i] + strlen("model."));
        st_patch(d, names[i], nn, NULL, NULL, 0);
        free(names[i]);
    }
    free(names);
    mdl_model a, b;
    if (mdl_load(&a, d) == 0) {
        if (mdl_load(&b, "tests/models/tiny-gemma4") == 0) {
            CHECK(a.cfg.arch == CFG_GEMMA4 && a.cfg.gemma_mm && cfg_head_dim(&a.cfg, 5) == 32 && a.cfg.ple == 8 &&
                      a.cfg.tie_embeddings && a.cfg.n_sliding_layers == 5 &&
                      !memcmp(a.layers[5].wq.data, b.layers[5].wq.data, 128 * 64 * 2) &&
                      !memcmp(a.ple_embed.data, b.ple_embed.data, 16384 * 48 * 2),
                  "multimodal gemma4 read differently from its text model");
            mdl_free(&b);
        }
        mdl_free(&a);
    } else {
        CHECK(0, "multimodal gemma4: %s", dfl_lasterr());
    }
    set_raw(d, "config.json", NULL, "text_config", "null");
    CHECK(load_fails(d, "Gemma4ForConditionalGeneration without a \"text_config\" object"), "no text_config");
}

/* Qwen3-Next checkpoints with one thing wrong: the fused projections, and
 * the expert fields only this family combines. */
TEST(qwen3next_bad_files) {
    const char *d;
    d = clone("tiny-qwen3next");
    st_patch(d, "model.layers.2.linear_attn.in_proj_qkvz.weight", NULL, "[96, 64]", NULL, 0);
    CHECK(load_fails(d, "in_proj_qkvz.weight': shape [96, 64], expected [192, 32]"), "qkvz shape");
    d = clone("tiny-qwen3next");
    st_patch(d, "model.layers.0.linear_attn.in_proj_ba.weight", "model.layers.0.linear_attn.in_proj_b.weight",
             NULL, NULL, 0);
    CHECK(load_fails(d, "missing tensor 'model.layers.0.linear_attn.in_proj_ba.weight'"), "no in_proj_ba");
    d = clone("tiny-qwen3next");
    st_patch(d, "model.layers.3.linear_attn.in_proj_ba.weight", NULL, "[16, 16]", NULL, 0);
    CHECK(load_fails(d, "in_proj_ba.weight': shape [16, 16], expected [8, 32]"), "ba shape");
    /* a dense layer narrower than the shared expert (one scratch width) */
    d = clone("tiny-qwen3next");
    set_raw(d, "config.json", NULL, "mlp_only_layers", "[1]");
    set_raw(d, "config.json", NULL, "intermediate_size", "16");
    CHECK(load_fails(d, "shared_expert_intermediate_size 48 is wider than intermediate_size 16"), "shared > dense");
    /* a dense layer where the file has experts: its MLP tensors are missing */
    d = clone("tiny-qwen3next");
    set_raw(d, "config.json", NULL, "mlp_only_layers", "[1]");
    CHECK(load_fails(d, "missing tensor 'model.layers.1.mlp.gate_proj.weight'"), "dense layer without tensors");
    d = clone("tiny-qwen3next");
    set_raw(d, "config.json", NULL, "shared_expert_intermediate_size", "0");
    CHECK(load_fails(d, "shared_expert_intermediate_size 0 out of range"), "no shared width");
    d = clone("tiny-qwen3next");
    set_raw(d, "config.json", NULL, "layer_types", "[\"linear_attention\", \"full_attention\", \"mamba\", \"linear_attention\"]");
    CHECK(load_fails(d, "layer_types[2] must be \"linear_attention\" or \"full_attention\""), "layer type");
    d = clone("tiny-qwen3next");
    set_raw(d, "config.json", NULL, "num_experts_per_tok", "9");
    CHECK(load_fails(d, "num_experts_per_tok 9 out of range"), "top k > experts");
    /* without layer_types: full_attention_interval (default 4) decides, so
     * layer 1 is linear and its attention tensors are not what it needs */
    d = clone("tiny-qwen3next");
    set_raw(d, "config.json", NULL, "layer_types", "null");
    CHECK(load_fails(d, "missing tensor 'model.layers.1.linear_attn.in_proj_qkvz.weight'"), "interval default");
    d = clone("tiny-qwen3next");
    set_raw(d, "config.json", NULL, "layer_types", "null");
    set_raw(d, "config.json", NULL, "full_attention_interval", "2");
    CHECK(load_fails(d, "missing tensor 'model.layers.3.self_attn.q_proj.weight'"), "interval 2");
}

TEST(good_models_still_load) {
    mdl_model m;
    CHECK(mdl_load(&m, "tests/models/tiny-qwen3") == 0, "%s", dfl_lasterr());
    mdl_free(&m);
    CHECK(mdl_load(&m, "tests/models/tiny-draft") == 0, "%s", dfl_lasterr());
    mdl_free(&m);
    const char *d = clone("tiny-qwen3");
    set_raw(d, "generation_config.json", NULL, "eos_token_id", "[151645, 151643]");
    CHECK(mdl_load(&m, d) == 0, "%s", dfl_lasterr());
    CHECK(m.cfg.n_eos == 2 && m.cfg.eos_ids[1] == 151643, "eos");
    mdl_free(&m);
}

TEST(output_dirs) {
    const char *in = clone("tiny-qwen3");
    char inp[600];
    snprintf(inp, sizeof inp, "%s", in);
    char *st = dfl_path_join(inp, "model.safetensors");
    size_t n0, n1;
    char *before = dfl_read_file(st, &n0);
    dfl_seterr("(none)");
    CHECK(dflash_quantize(inp, inp, 8, 64) != 0 && err_has("is the input directory"), "quantize IN IN");
    char rel[700];
    snprintf(rel, sizeof rel, "%s/../%s", inp, strrchr(inp, '/') + 1);
    CHECK(dflash_quantize(inp, rel, 4, 64) != 0 && err_has("is the input directory"), "quantize IN IN/../IN");
    char *after = dfl_read_file(st, &n1);
    CHECK(after && n0 == n1 && !memcmp(before, after, n0), "input unchanged");
    free(before);
    free(after);
    free(st);
    /* a stale sharded model in OUT must not shadow the new single file */
    syn_spec s = syn_default();
    s.sharded = 1;
    char *out = path("stale", NULL);
    CHECK(syn_write(out, &s) == 0, "synth: %s", dfl_lasterr());
    CHECK(dflash_quantize(inp, out, 8, 32) == 0, "%s", dfl_lasterr());
    mdl_model m;
    CHECK(mdl_load(&m, out) == 0, "quantized output: %s", dfl_lasterr());
    CHECK(m.cfg.q_bits == 8 && m.layers && m.layers[0].wq.dtype == WT_Q8, "quantized output: bits %d",
          m.cfg.q_bits);
    mdl_free(&m);
    /* synth -o the tokenizer directory would unlink the tokenizer */
    dfl_seterr("(none)");
    CHECK(dflash_synth("tiny", 0, 0, inp, inp) != 0 && err_has("tokenizer directory"), "synth -o tokenizer dir");
    CHECK(dfl_file_exists(path(strrchr(inp, '/') + 1, "tokenizer.json")), "tokenizer kept");
    /* refused before anything is written: no new OUT, no staging directory left */
    char *fresh = path("fresh", NULL);
    dfl_seterr("(none)");
    CHECK(dflash_quantize("tests/fixtures/gguf/tiny-draft-llama.gguf", fresh, 8, 64) != 0 &&
              err_has("is a GGUF file"), "quantize a GGUF");
    CHECK(!dfl_file_exists(fresh), "quantize a GGUF: no %s", fresh);
    dfl_seterr("(none)");
    CHECK(dflash_synth("tiny", 0, 0, path("nowhere", NULL), fresh) != 0 && err_has("nowhere"),
          "synth, missing tokenizer");
    CHECK(!dfl_file_exists(fresh), "synth, missing tokenizer: no %s", fresh);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -q tmp-dflash", tmpdir);
    CHECK(system(cmd) != 0, "no staging directory left in %s", tmpdir);
}

static int on_text(void *ud, int32_t id, const char *text, size_t len) {
    (void)id;
    (void)text;
    *(size_t *)ud += len;
    return 0;
}

/* A model whose final norm is NaN: sampling must fail with a message, not
 * emit an id made of a float's bits. */
TEST(nan_logits_generate) {
    const char *d = clone("tiny-qwen3");
    char dir[600], p[700];
    snprintf(dir, sizeof dir, "%s", d);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    st_set s;
    CHECK(st_open_file(&s, p) == 0, "%s", dfl_lasterr());
    const st_tensor *t = st_find(&s, "model.norm.weight");
    CHECK(t && t->dtype == ST_BF16, "model.norm.weight");
    long off = t ? (long)((const uint8_t *)t->data - s.maps[0].data) : 0;
    size_t nb = t ? t->nbytes : 0;
    st_close(&s);
    FILE *f = fopen(p, "r+b");
    CHECK(f && fseek(f, off, SEEK_SET) == 0, "open");
    for (size_t i = 0; f && i < nb / 2; i++) fwrite("\xc0\x7f", 1, 2, f); /* bf16 NaN */
    if (f) fclose(f);
    dflash_model *m = dflash_load(dir, NULL, NULL);
    CHECK(m != NULL, "%s", dflash_error());
    if (!m) return;
    dflash_gen g = dflash_default_gen();
    g.temp = 0.8f;
    g.n_predict = 4;
    size_t got = 0;
    dflash_stats st;
    int rc = dflash_generate_text(m, "Hello", &g, on_text, &got, &st);
    CHECK(rc != 0 && strstr(dflash_error(), "not finite"), "rc %d, %zu bytes out: %s", rc, got, dflash_error());
    CHECK(got == 0, "%zu bytes of text from NaN logits", got);
    dflash_free(m);
}

int main(void) {
    if (tmpdir_make("badfiles") != 0) return 1;
    RUN(size_products);
    RUN(counts_before_allocation);
    RUN(json_numbers_out_of_range);
    RUN(safetensors_numbers);
    RUN(fifo_and_directories);
    RUN(qwen35_bad_tensors);
    RUN(qwen3next_bad_files);
    RUN(gptoss_bad_files);
    RUN(gemma4_bad_files);
    RUN(gemma4_moe_bad_files);
    RUN(good_models_still_load);
    RUN(output_dirs);
    RUN(nan_logits_generate);
    tmpdir_remove();
    CHECK_DONE("test_badfiles");
}
