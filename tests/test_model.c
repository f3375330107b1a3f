/* test_model.c - loading, validation of bad input, batch invariance and KV
 * rollback, on small checkpoints this test writes itself (src/synth.c) in
 * every supported weight format. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "config.h"
#include "dflash.h"
#include "cpu/kernels.h"
#include "model.h"
#include "sample.h"
#include "safetensors.h"
#include "synth.h"
#include "cpu/threads.h"
#include "tmpdir.h"
#include "util.h"

static void *bi; /* the CPU backend instance (main) */

/* A raw safetensors file with the given header text and n data bytes. */
static void raw_st(const char *p, const char *hdr, size_t ndata, uint64_t hlen_override) {
    size_t h = strlen(hdr);
    uint8_t *b = calloc(1, 8 + h + ndata);
    uint64_t L = hlen_override ? hlen_override : h;
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(L >> (8 * i));
    memcpy(b + 8, hdr, h);
    write_file(p, b, 8 + h + ndata);
    free(b);
}

static int err_has(const char *needle) {
    const char *e = dfl_lasterr();
    if (strstr(e, needle)) return 1;
    fprintf(stderr, "  error was: %s\n", e);
    return 0;
}

static int st_fails_with(const char *file, const char *needle) {
    st_set s;
    int rc = st_open_file(&s, file);
    if (rc == 0) {
        st_close(&s);
        return 0;
    }
    return err_has(needle);
}

TEST(safetensors_bad_files) {
    char *p = path("bad.safetensors", NULL);
    write_file(p, "abc", 3);
    CHECK(st_fails_with(p, "truncated"), "3-byte file");
    raw_st(p, "{}", 0, 1000);
    CHECK(st_fails_with(p, "beyond the end"), "header length beyond the file");
    raw_st(p, "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 8, 0);
    CHECK(st_fails_with(p, "beyond the data section"), "offsets out of range");
    raw_st(p, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
              "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 16, 0);
    CHECK(st_fails_with(p, "overlap"), "overlapping tensors");
    raw_st(p, "{\"a\": {\"dtype\": \"Q7\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8, 0);
    CHECK(st_fails_with(p, "unknown dtype 'Q7'"), "unknown dtype");
    raw_st(p, "{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 8, 0);
    CHECK(st_fails_with(p, "8 bytes for shape"), "size mismatch");
    raw_st(p, "{\"a\": ", 8, 0);
    CHECK(st_fails_with(p, "not a JSON object"), "garbled JSON");
    raw_st(p, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
              "\"b\": {\"dtype\": \"BF16\", \"shape\": [2, 2], \"data_offsets\": [8, 16]}}", 16, 0);
    st_set s;
    CHECK(st_open_file(&s, p) == 0, "valid file rejected: %s", dfl_lasterr());
    const st_tensor *t = st_find(&s, "b");
    CHECK(t && t->dtype == ST_BF16 && t->ndim == 2 && t->nbytes == 8, "tensor b");
    CHECK(st_find(&s, "c") == NULL, "found a missing tensor");
    st_close(&s);
}

static syn_spec small(void) {
    syn_spec s = syn_default();
    s.c.n_eos = 1;
    s.c.eos_ids[0] = 7;
    return s;
}

static int load_fails_with(const char *dir, const char *needle) {
    mdl_model m;
    if (mdl_load(&m, dir) == 0) {
        mdl_free(&m);
        fprintf(stderr, "  %s loaded\n", dir);
        return 0;
    }
    return err_has(needle);
}

static void set_config(const char *dir, const char *from, const char *to) {
    char *p = dfl_path_join(dir, "config.json");
    char *txt = dfl_read_file(p, NULL);
    char *at = strstr(txt, from);
    if (!at) {
        fprintf(stderr, "config has no %s\n", from);
        exit(1);
    }
    FILE *f = fopen(p, "w");
    fwrite(txt, 1, (size_t)(at - txt), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    fclose(f);
    free(txt);
    free(p);
}

TEST(model_bad_checkpoints) {
    syn_spec s = small();
    char *d = path("m_ok", NULL);
    CHECK(syn_write(d, &s) == 0, "synth: %s", dfl_lasterr());
    mdl_model m;
    CHECK(mdl_load(&m, d) == 0, "valid model rejected: %s", dfl_lasterr());
    if (m.layers) mdl_free(&m);

    d = path("m_missing", NULL);
    syn_write(d, &s);
    set_config(d, "\"num_hidden_layers\":\t2", "\"num_hidden_layers\":\t3");
    CHECK(load_fails_with(d, "missing tensor 'model.layers.2."), "missing tensor");

    d = path("m_shape", NULL);
    syn_write(d, &s);
    set_config(d, "\"intermediate_size\":\t128", "\"intermediate_size\":\t96");
    CHECK(load_fails_with(d, "expected [96, 64]"), "wrong shape");

    d = path("m_field", NULL);
    syn_write(d, &s);
    set_config(d, "\"hidden_size\":", "\"hidden_sizeX\":");
    CHECK(load_fails_with(d, "missing field \"hidden_size\""), "missing field");

    d = path("m_arch", NULL);
    syn_write(d, &s);
    set_config(d, "Qwen3ForCausalLM", "MambaForCausalLM");
    CHECK(load_fails_with(d, "unsupported architecture MambaForCausalLM"), "unsupported arch");

    d = path("m_nofile", NULL);
    syn_write(d, &s);
    unlink(path("m_nofile", "model.safetensors"));
    CHECK(load_fails_with(d, "no model.safetensors"), "no weights");

    d = path("m_trunc", NULL);
    syn_write(d, &s);
    CHECK(truncate(path("m_trunc", "model.safetensors"), 5000) == 0, "truncate");
    CHECK(load_fails_with(d, "beyond the data section"), "truncated weights");

    d = path("m_q3", NULL);
    s.c.q_bits = 4;
    s.c.q_group = 32;
    syn_write(d, &s);
    set_config(d, "\"bits\":\t4", "\"bits\":\t3");
    CHECK(load_fails_with(d, "bits 3 not supported"), "3-bit");
}

/* ---- forward: batch invariance and rollback ------------------------------ */

/* A forward; with n_taps, the taps it kept are read back into tapbuf
 * ([T][n_taps][H]). */
static int fwd(const be_ops *be, void *st, const int32_t *tok, int T, float *logits, int n_logits, const int *taps,
               int n_taps, float *tapbuf) {
    be_batch b = {.T = T, .tokens = tok, .n_logits = n_logits, .logits = logits, .n_taps = n_taps, .tap_layers = taps};
    if (be->forward(st, &b) != 0) return -1;
    return n_taps ? be->taps(st, 0, T, tapbuf) : 0;
}

static void check_invariance(const char *name, syn_spec s) {
    char *d = path(name, NULL);
    CHECK(syn_write(d, &s) == 0, "%s: synth: %s", name, dfl_lasterr());
    mdl_model m;
    if (mdl_load(&m, d) != 0) {
        CHECK(0, "%s: load: %s", name, dfl_lasterr());
        return;
    }
    const be_ops *be = &be_cpu;
    int V = m.cfg.vocab, H = m.cfg.hidden, L = m.cfg.n_layers;
    enum { N = 40 };
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 37 + 11) % V);
    int taps[2] = {0, L - 1};
    float *ref_l = malloc(sizeof(float) * N * V), *ref_t = malloc(sizeof(float) * N * 2 * H);
    float *got_l = malloc(sizeof(float) * N * V), *got_t = malloc(sizeof(float) * N * 2 * H);
    /* reference: one token at a time */
    void *st = be->create(bi, &m, 64);
    for (int i = 0; i < N; i++) fwd(be, st, tok + i, 1, ref_l + (size_t)i * V, 1, taps, 2, ref_t + (size_t)i * 2 * H);
    int finite = 1;
    for (size_t i = 0; i < (size_t)N * V; i++) finite &= isfinite(ref_l[i]) != 0;
    CHECK(finite, "%s: non-finite logits", name);
    /* batches of widths 2..16 at various offsets, after truncation */
    int widths[] = {2, 3, 5, 16, 7, 4, 3};
    be->truncate(st, 0);
    int pos = 0, ok = 1;
    for (int w = 0; pos < N; w++) {
        int T = widths[w % 7];
        if (pos + T > N) T = N - pos;
        fwd(be, st, tok + pos, T, got_l + (size_t)pos * V, T, taps, 2, got_t + (size_t)pos * 2 * H);
        pos += T;
    }
    ok = memcmp(ref_l, got_l, sizeof(float) * N * V) == 0 && memcmp(ref_t, got_t, sizeof(float) * N * 2 * H) == 0;
    CHECK(ok, "%s: batched rows differ from single-row results", name);
    /* rollback: run junk after position 20, truncate, redo: bit-identical */
    be->truncate(st, 20);
    int32_t junk[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    float *junk_l = malloc(sizeof(float) * 9 * V);
    fwd(be, st, junk, 9, junk_l, 9, NULL, 0, NULL);
    free(junk_l);
    be->truncate(st, 20);
    CHECK(be->length(st) == 20, "%s: length after truncate", name);
    fwd(be, st, tok + 20, 20, got_l + (size_t)20 * V, 20, taps, 2, got_t + (size_t)20 * 2 * H);
    ok = memcmp(ref_l, got_l, sizeof(float) * N * V) == 0 && memcmp(ref_t, got_t, sizeof(float) * N * 2 * H) == 0;
    CHECK(ok, "%s: decode after rollback differs from a fresh decode", name);
    /* threads: 1 vs 2 vs 3 */
    for (int th = 1; th <= 3; th++) {
        be_options o = {.n_threads = th};
        void *bt = be->open(&o), *stt = be->create(bt, &m, 64);
        CHECK(be->n_threads(bt) == th && be->n_threads(bi) == 2, "%s: instance threads %d, main %d", name,
              be->n_threads(bt), be->n_threads(bi));
        fwd(be, stt, tok, N, got_l, N, taps, 2, got_t);
        CHECK(memcmp(ref_l, got_l, sizeof(float) * N * V) == 0, "%s: %d threads change logits", name, th);
        be->destroy(stt);
        be->close(bt);
    }
    /* context full and bad token are errors, not crashes */
    be->truncate(st, 0);
    fwd(be, st, tok, N, got_l, 1, NULL, 0, NULL);
    fwd(be, st, tok, 20, got_l, 1, NULL, 0, NULL); /* 60 of 64 positions used */
    CHECK(fwd(be, st, tok, 5, got_l, 1, NULL, 0, NULL) != 0 && err_has("context full"), "%s: overflow", name);
    be->truncate(st, 0);
    int32_t bad = V;
    CHECK(fwd(be, st, &bad, 1, got_l, 1, NULL, 0, NULL) != 0 && err_has("outside the model's vocabulary"),
          "%s: bad token", name);
    /* the shared batch checks (be_check_batch): logits asked for, no buffer */
    CHECK(fwd(be, st, tok, 2, NULL, 1, NULL, 0, NULL) != 0 && err_has("without a logits buffer"),
          "%s: n_logits without logits accepted", name);
    CHECK(fwd(be, st, tok, 2, got_l, 3, NULL, 0, NULL) != 0 && err_has("bad batch"), "%s: n_logits > T", name);
    CHECK(be->length(st) == 0, "%s: a refused batch moved the sequence to %d", name, be->length(st));
    be->destroy(st);
    free(ref_l);
    free(ref_t);
    free(got_l);
    free(got_t);
    mdl_free(&m);
}

TEST(batch_invariance_and_rollback) {
    syn_spec s = small();
    check_invariance("inv_bf16", s);
    s.dtype = WT_F16;
    check_invariance("inv_f16", s);
    s.dtype = WT_F32;
    s.c.tie_embeddings = 0;
    s.sharded = 1;
    check_invariance("inv_f32_untied_sharded", s);
    s = small();
    s.c.q_bits = 8;
    s.c.q_group = 64;
    s.scale_dtype = WT_F16;
    check_invariance("inv_q8", s);
    s.c.q_bits = 4;
    s.c.q_group = 32;
    s.scale_dtype = WT_BF16;
    check_invariance("inv_q4", s);
    s = small();
    s.c.arch = CFG_LLAMA;
    s.c.qk_norm = 0;
    s.c.rope_llama3 = 0;
    check_invariance("inv_llama", s);
}

/* ---- mixture of experts (qwen3_moe) ---------------------------------------- */

/* small() with 3 layers, 8 experts, top 3; layer 1 dense (mlp_only_layers). */
static syn_spec moe_spec(void) {
    syn_spec s = small();
    s.c.arch = CFG_QWEN3_MOE;
    s.c.n_layers = 3;
    s.c.n_experts = 8;
    s.c.n_experts_used = 3;
    s.c.moe_inter = 64;
    s.c.norm_topk = 1;
    s.c.sparse_step = 1;
    s.c.moe_layer[0] = s.c.moe_layer[2] = 1;
    s.c.n_moe_layers = 2;
    return s;
}

/* Every verify width T = 1..17 at one position gives the single-row bits. */
static void check_moe_widths(const char *name, syn_spec s) {
    char *d = path(name, NULL);
    CHECK(syn_write(d, &s) == 0, "%s: synth: %s", name, dfl_lasterr());
    mdl_model m;
    if (mdl_load(&m, d) != 0) {
        CHECK(0, "%s: load: %s", name, dfl_lasterr());
        return;
    }
    const be_ops *be = &be_cpu;
    int V = m.cfg.vocab, H = m.cfg.hidden;
    enum { P0 = 5, N = P0 + 17 };
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 53 + 7) % V);
    int taps[1] = {1};
    float *ref_l = malloc(sizeof(float) * N * V), *ref_t = malloc(sizeof(float) * N * H);
    float *got_l = malloc(sizeof(float) * N * V), *got_t = malloc(sizeof(float) * N * H);
    void *st = be->create(bi, &m, 64);
    for (int i = 0; i < N; i++) fwd(be, st, tok + i, 1, ref_l + (size_t)i * V, 1, taps, 1, ref_t + (size_t)i * H);
    int bad = 0;
    for (int T = 1; T <= 17; T++) {
        be->truncate(st, P0);
        fwd(be, st, tok + P0, T, got_l, T, taps, 1, got_t);
        if (memcmp(got_l, ref_l + (size_t)P0 * V, sizeof(float) * T * V) ||
            memcmp(got_t, ref_t + (size_t)P0 * H, sizeof(float) * T * H)) {
            fprintf(stderr, "  %s: T = %d differs from decode\n", name, T);
            bad++;
        }
    }
    CHECK(bad == 0, "%s: %d verify widths differ from decode rows", name, bad);
    be->destroy(st);
    free(ref_l);
    free(ref_t);
    free(got_l);
    free(got_t);
    mdl_free(&m);
}

TEST(moe_batch_invariance_and_rollback) {
    syn_spec s = moe_spec();
    check_invariance("moe_bf16", s);
    check_moe_widths("moe_w_bf16", s);
    s.c.norm_topk = 0;
    s.c.sparse_step = 2; /* layer 1 only */
    s.c.moe_layer[0] = s.c.moe_layer[2] = 0;
    s.c.moe_layer[1] = 1;
    s.c.n_moe_layers = 1;
    s.c.tie_embeddings = 0;
    s.sharded = 1;
    check_invariance("moe_f32_step2_untied", s);
    s = moe_spec();
    s.c.q_bits = 4;
    s.c.q_group = 32;
    check_invariance("moe_q4", s);
    check_moe_widths("moe_w_q4", s);
    s.c.q_bits = 8;
    s.c.q_group = 64;
    s.scale_dtype = WT_F16;
    check_moe_widths("moe_w_q8", s);
    /* mlx-lm's mixed layout: 4-bit group 32, routers 8-bit group 64 with
     * per-tensor entries in "quantization" */
    s = moe_spec();
    s.c.q_bits = 4;
    s.c.q_group = 32;
    s.router_bits = 8;
    check_invariance("moe_q4_router8", s);
    mdl_model m;
    if (mdl_load(&m, path("moe_q4_router8", NULL)) == 0) {
        CHECK(m.cfg.q_mixed && m.layers[0].router.bits == 8 && m.layers[0].router.group_size == 64 &&
                  m.layers[0].experts[0].wg.bits == 4 && m.layers[0].experts[0].wg.group_size == 32,
              "mixed quantization: router %d bits g%d, expert %d bits", m.layers[0].router.bits,
              m.layers[0].router.group_size, m.layers[0].experts[0].wg.bits);
        mdl_free(&m);
    } else {
        CHECK(0, "moe_q4_router8: %s", dfl_lasterr());
    }
    /* a per-tensor entry dflash does not support is named */
    set_config(path("moe_q4_router8", NULL), "\"bits\":\t8", "\"bits\":\t3");
    CHECK(load_fails_with(path("moe_q4_router8", NULL),
                          "quantization of \"model.layers.0.mlp.gate\": 3 bits, group_size 64 not supported"),
          "bad per-tensor quantization entry");
}

TEST(moe_bad_checkpoints) {
    syn_spec s = moe_spec();
    char *d = path("moe_ok", NULL);
    CHECK(syn_write(d, &s) == 0, "synth: %s", dfl_lasterr());
    mdl_model m;
    if (mdl_load(&m, d) == 0) {
        CHECK(m.cfg.arch == CFG_QWEN3_MOE && m.cfg.n_experts == 8 && m.cfg.n_experts_used == 3 &&
                  m.cfg.moe_inter == 64 && m.cfg.norm_topk && m.cfg.n_moe_layers == 2 && m.cfg.moe_layer[0] &&
                  !m.cfg.moe_layer[1] && m.cfg.moe_layer[2] && m.layers[0].experts && !m.layers[1].experts &&
                  m.layers[1].wg.rows == 128 && m.layers[2].experts[7].wd.cols == 64,
              "moe config / layers not as written");
        mdl_free(&m);
    } else {
        CHECK(0, "valid moe model rejected: %s", dfl_lasterr());
    }
    static const struct {
        const char *from, *to, *err;
    } cases[] = {
        {"\"num_experts_per_tok\":\t3", "\"num_experts_per_tok\":\t9", "num_experts_per_tok 9 out of range"},
        {"\"num_experts_per_tok\":\t3", "\"num_experts_per_tok\":\t0", "num_experts_per_tok 0 out of range"},
        {"\"num_experts\":\t8", "\"num_experts\":\t-1", "num_experts -1 out of range"},
        {"\"moe_intermediate_size\":\t64", "\"moe_intermediate_size\":\t0", "moe_intermediate_size 0 out of range"},
        {"\"decoder_sparse_step\":\t1", "\"decoder_sparse_step\":\t0", "decoder_sparse_step 0 must be >= 1"},
        {"\"mlp_only_layers\":\t[1]", "\"mlp_only_layers\":\t[3]", "mlp_only_layers must hold layer ids (integers in 0..2)"},
        {"\"mlp_only_layers\":\t[1]", "\"mlp_only_layers\":\t7", "mlp_only_layers must be a list"},
        {"\"norm_topk_prob\":\ttrue", "\"norm_topk_prob\":\t1", "\"norm_topk_prob\" must be true or false"},
        {"\"use_sliding_window\":\tfalse", "\"use_sliding_window\":\ttrue", "use_sliding_window=true is not supported"},
        {"\"use_sliding_window\":\tfalse", "\"layer_types\": [\"full_attention\", \"sliding_attention\", \"full_attention\"]",
         "layer_types must list \"full_attention\""},
        /* the tensors against the config */
        {"\"moe_intermediate_size\":\t64", "\"moe_intermediate_size\":\t32", "mlp.experts.0.gate_proj.weight': shape [64, 64], expected [32, 64]"},
        {"\"num_experts\":\t8", "\"num_experts\":\t9", "'model.layers.0.mlp.gate.weight': shape [8, 64], expected [9, 64]"},
        {"\"mlp_only_layers\":\t[1]", "\"mlp_only_layers\":\t[]", "missing tensor 'model.layers.1.mlp.gate.weight'"},
        {"\"mlp_only_layers\":\t[1]", "\"mlp_only_layers\":\t[0, 1]", "missing tensor 'model.layers.0.mlp.gate_proj.weight'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "moe_bad%zu", i);
        d = path(nm, NULL);
        syn_write(d, &s);
        set_config(d, cases[i].from, cases[i].to);
        CHECK(load_fails_with(d, cases[i].err), "case %zu (%s): error '%s' expected", i, cases[i].to, cases[i].err);
    }
}

/* ---- Qwen3.5 config (parsed and checked; the model is refused) ---------- */

/* A Qwen3.5 text config.json with FIELDS spliced in (each field of the
 * base is written once, so a test may override it by writing it first:
 * cJSON's lookup takes the first key). */
static char *q35_dir(const char *name, const char *fields, int multimodal) {
    char *d = path(name, NULL);
    mkdir(d, 0755);
    static const char base[] =
        "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 4, "
        "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 256, \"vocab_size\": 512, "
        "\"rms_norm_eps\": 1e-6, \"linear_num_key_heads\": 2, \"linear_num_value_heads\": 4, "
        "\"linear_key_head_dim\": 16, \"linear_value_head_dim\": 32, \"linear_conv_kernel_dim\": 4, "
        "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000000, \"partial_rotary_factor\": 0.25, "
        "\"mrope_section\": [11, 11, 10], \"mrope_interleaved\": true}, "
        "\"layer_types\": [\"linear_attention\", \"linear_attention\", \"linear_attention\", \"full_attention\"]";
    char buf[4096];
    if (multimodal)
        snprintf(buf, sizeof buf,
                 "{\"architectures\": [\"Qwen3_5ForConditionalGeneration\"], \"model_type\": \"qwen3_5\", "
                 "\"vision_config\": {\"depth\": 2}, \"text_config\": {%s\"model_type\": \"qwen3_5_text\", %s}}",
                 fields, base);
    else
        snprintf(buf, sizeof buf, "{%s\"model_type\": \"qwen3_5_text\", %s}", fields, base);
    write_file(path(name, "config.json"), buf, strlen(buf));
    return d;
}

TEST(qwen35_config) {
    cfg_model c;
    memset(&c, 0, sizeof c);
    CHECK(cfg_load(&c, q35_dir("q35_ok", "", 0)) == 0, "qwen3_5_text config rejected: %s", dfl_lasterr());
    CHECK(c.arch == CFG_QWEN3_5 && !c.vision_ignored && c.attn_gate && c.qk_norm && c.head_dim == 256 &&
              c.rot_dim == 64 && c.n_linear_layers == 3 && c.linear_layer[0] && c.linear_layer[2] &&
              !c.linear_layer[3] && c.lin_k_heads == 2 && c.lin_v_heads == 4 && c.lin_k_dim == 16 &&
              c.lin_v_dim == 32 && c.lin_conv == 4 && c.rope_theta == 1e7,
          "qwen3_5_text fields not as written (arch %d rot %d linear %d)", (int)c.arch, c.rot_dim, c.n_linear_layers);
    memset(&c, 0, sizeof c);
    CHECK(cfg_load(&c, q35_dir("q35_mm", "", 1)) == 0, "multimodal qwen3_5 config rejected: %s", dfl_lasterr());
    CHECK(c.arch == CFG_QWEN3_5 && c.vision_ignored && c.hidden == 64 && c.n_linear_layers == 3,
          "multimodal qwen3_5: text_config not loaded");
    /* layer_types absent: every full_attention_interval-th layer is full */
    memset(&c, 0, sizeof c);
    CHECK(cfg_load(&c, q35_dir("q35_iv", "\"layer_types\": null, \"full_attention_interval\": 2, ", 0)) == 0,
          "interval config rejected: %s", dfl_lasterr());
    CHECK(c.n_linear_layers == 2 && c.linear_layer[0] && !c.linear_layer[1] && c.linear_layer[2] && !c.linear_layer[3],
          "full_attention_interval 2 not applied");
    /* the config alone loads as far as the weights, which are missing */
    CHECK(load_fails_with(q35_dir("q35_run", "", 1), "safetensors"), "qwen3_5 without weights: %s", dfl_lasterr());
    static const struct {
        const char *fields, *err;
    } cases[] = {
        {"\"linear_num_key_heads\": 0, ", "linear_num_key_heads 0 out of range (1..1024)"},
        {"\"linear_num_value_heads\": 3, ", "linear_num_value_heads 3 is not a multiple of linear_num_key_heads 2"},
        {"\"linear_key_head_dim\": 1024, ", "linear_key_head_dim 1024 out of range (1..512)"},
        {"\"linear_value_head_dim\": -1, ", "linear_value_head_dim -1 out of range"},
        {"\"linear_conv_kernel_dim\": 0, ", "linear_conv_kernel_dim 0 out of range (1..16)"},
        {"\"partial_rotary_factor\": 1.5, ", "partial_rotary_factor 1.5 must be in (0, 1]"},
        {"\"partial_rotary_factor\": 0.1, ", "head_dim 256 * 0.1 = 25.6"},
        {"\"layer_types\": [\"linear_attention\", \"full_attention\"], ", "layer_types has 2 entries for 4 layers"},
        {"\"layer_types\": [\"linear_attention\", \"sliding_attention\", \"full_attention\", \"full_attention\"], ",
         "layer_types[1] must be \"linear_attention\" or \"full_attention\""},
        {"\"layer_types\": 3, ", "layer_types must be a list"},
        {"\"layer_types\": null, \"full_attention_interval\": 0, ", "full_attention_interval 0 must be >= 1"},
        {"\"attention_bias\": true, ", "attention_bias=true is not supported"},
        {"\"head_dim\": 1024, ", "head_dim 1024 must be even and in 2..512"},
        {"\"num_attention_heads\": 129, \"num_key_value_heads\": 129, ",
         "2 * num_attention_heads * head_dim = 66048 (gated q_proj)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "q35_bad%zu", i);
        memset(&c, 0, sizeof c);
        int rc = cfg_load(&c, q35_dir(nm, cases[i].fields, (int)(i % 2)));
        CHECK(rc != 0 && err_has(cases[i].err), "case %zu (%s): error '%s' expected, got '%s'", i, cases[i].fields,
              cases[i].err, rc ? dfl_lasterr() : "(loaded)");
    }
}

/* ---- Qwen3.5 checkpoints written by synth --------------------------------- */

/* small() as a Qwen3.5 text model: 4 layers, full attention at layer 3 only
 * (the 3:1 pattern), gated q_proj, 4 rotary dims of 16, Gated DeltaNet 2 key
 * / 4 value heads of 16, conv kernel 4. */
static syn_spec q35_spec(void) {
    syn_spec s = small();
    cfg_model *c = &s.c;
    c->arch = CFG_QWEN3_5;
    c->n_layers = 4;
    c->attn_gate = 1;
    c->rot_dim = 4;
    c->rope_theta = 1e7;
    c->lin_k_heads = 2;
    c->lin_v_heads = 4;
    c->lin_k_dim = 16;
    c->lin_v_dim = 16;
    c->lin_conv = 4;
    for (int l = 0; l < c->n_layers; l++) {
        c->linear_layer[l] = (l + 1) % 4 != 0;
        c->n_linear_layers += c->linear_layer[l];
    }
    return s;
}

/* DIR loads as the Qwen3.5 model WANT describes, every layer bound as its
 * kind; a forward of 9 tokens gives finite, not constant, logits, the same
 * bits as 9 forwards of one token. */
static void check_q35_dir(const char *name, const char *dir, const cfg_model *want) {
    mdl_model m;
    if (mdl_load(&m, dir) != 0) {
        CHECK(0, "%s: load: %s", name, dfl_lasterr());
        return;
    }
    const cfg_model *c = &m.cfg;
    int q = c->n_heads * c->head_dim, vd = c->lin_v_heads * c->lin_v_dim;
    int C = 2 * c->lin_k_heads * c->lin_k_dim + vd;
    CHECK(c->arch == CFG_QWEN3_5 && c->attn_gate && c->qk_norm && c->hidden == want->hidden &&
              c->n_layers == want->n_layers && c->vocab == want->vocab && c->rot_dim == want->rot_dim &&
              c->n_linear_layers == want->n_linear_layers && c->lin_k_heads == want->lin_k_heads &&
              c->lin_v_heads == want->lin_v_heads && c->lin_k_dim == want->lin_k_dim &&
              c->lin_v_dim == want->lin_v_dim && c->lin_conv == want->lin_conv && c->q_bits == want->q_bits &&
              c->tie_embeddings == want->tie_embeddings && c->rope_theta == want->rope_theta,
          "%s: config not as written (arch %d, rot %d, linear %d, bits %d)", name, (int)c->arch, c->rot_dim,
          c->n_linear_layers, c->q_bits);
    int bound = 1;
    for (int l = 0; l < c->n_layers; l++) {
        const mdl_layer *L = &m.layers[l];
        if (c->linear_layer[l] != want->linear_layer[l]) bound = 0;
        else if (c->linear_layer[l])
            bound &= L->lin_qkv.rows == C && L->lin_z.rows == vd && L->lin_b.rows == c->lin_v_heads &&
                     L->lin_a.rows == c->lin_v_heads && L->lin_out.cols == vd && L->conv_w && L->dt_bias &&
                     L->neg_a && L->lin_norm && !L->wq.rows && !L->q_norm &&
                     (c->q_bits ? L->lin_qkv.bits == c->q_bits : !L->lin_qkv.bits);
        else
            bound &= L->wq.rows == 2 * q && L->wo.cols == q && L->q_norm && L->k_norm && !L->lin_qkv.rows &&
                     (c->q_bits ? L->wq.bits == c->q_bits : !L->wq.bits);
        for (int h = 0; c->linear_layer[l] && L->neg_a && h < c->lin_v_heads; h++)
            bound &= L->neg_a[h] <= -0.49f && L->neg_a[h] >= -4.01f; /* -exp(A_log), A in 0.5..4 */
    }
    CHECK(bound, "%s: layers not bound as their kinds", name);
    const be_ops *be = &be_cpu;
    enum { T = 9 };
    int32_t tok[T];
    for (int i = 0; i < T; i++) tok[i] = (int32_t)((i * 37 + 11) % c->vocab);
    float *lg = malloc(sizeof(float) * T * (size_t)c->vocab);
    void *st = be->create(bi, &m, 64);
    CHECK(fwd(be, st, tok, T, lg, T, NULL, 0, NULL) == 0, "%s: forward: %s", name, dfl_lasterr());
    int finite = 1;
    float lo = lg[0], hi = lg[0];
    for (size_t i = 0; i < (size_t)T * c->vocab; i++) {
        finite &= isfinite(lg[i]) != 0;
        lo = lg[i] < lo ? lg[i] : lo;
        hi = lg[i] > hi ? lg[i] : hi;
    }
    CHECK(finite && hi > lo, "%s: logits not finite or constant (%g..%g)", name, lo, hi);
    /* one token per forward gives the same bits (batch invariance) */
    float *one = malloc(sizeof(float) * (size_t)c->vocab);
    void *s1 = be->create(bi, &m, 64);
    int same = 1;
    for (int i = 0; i < T; i++) {
        fwd(be, s1, tok + i, 1, one, 1, NULL, 0, NULL);
        same &= memcmp(one, lg + (size_t)i * c->vocab, sizeof(float) * (size_t)c->vocab) == 0;
    }
    CHECK(same, "%s: one-token forwards differ from the batched forward", name);
    be->destroy(s1);
    free(one);
    be->destroy(st);
    free(lg);
    mdl_free(&m);
}

TEST(synth_qwen35) {
    syn_spec s = q35_spec();
    static const struct {
        const char *name;
        wt_dtype dtype, scale;
        int bits, group, untied, sharded;
    } v[] = {
        {"q35s_bf16", WT_BF16, WT_BF16, 0, 0, 0, 0},
        {"q35s_f32_untied_sharded", WT_F32, WT_BF16, 0, 0, 1, 1},
        {"q35s_q4", WT_BF16, WT_BF16, 4, 32, 0, 0},
        {"q35s_q8", WT_BF16, WT_F16, 8, 64, 1, 0},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        s = q35_spec();
        s.dtype = v[i].dtype;
        s.scale_dtype = v[i].scale;
        s.c.q_bits = v[i].bits;
        s.c.q_group = v[i].group;
        s.c.tie_embeddings = !v[i].untied;
        s.sharded = v[i].sharded;
        char *d = path(v[i].name, NULL);
        CHECK(syn_write(d, &s) == 0, "%s: synth: %s", v[i].name, dfl_lasterr());
        check_q35_dir(v[i].name, d, &s.c);
    }
    /* dflash synth's tiny-qwen35 shape (4-bit) and its draft */
    char *d = path("q35s_tiny", NULL);
    CHECK(dflash_synth("tiny-qwen35", 0, 4, NULL, d) == 0, "synth tiny-qwen35: %s", dflash_error());
    s = q35_spec();
    s.c.vocab = 248320;
    s.c.q_bits = 4;
    check_q35_dir("q35s_tiny", d, &s.c);
    char *dd = path("q35s_tiny_draft", NULL);
    CHECK(dflash_synth("tiny-qwen35", 1, 0, NULL, dd) == 0, "synth tiny-qwen35 --draft: %s", dflash_error());
    mdl_model m;
    if (mdl_load(&m, dd) == 0) {
        CHECK(m.cfg.is_draft && m.cfg.arch == CFG_QWEN3 && m.cfg.hidden == 64 && m.cfg.n_target_layers == 4 &&
                  m.cfg.mask_token_id == 248319,
              "tiny-qwen35 draft config (draft %d, arch %d, target layers %d, mask %d)", m.cfg.is_draft,
              (int)m.cfg.arch, m.cfg.n_target_layers, m.cfg.mask_token_id);
        mdl_free(&m);
    } else {
        CHECK(0, "tiny-qwen35 draft: load: %s", dfl_lasterr());
    }
    CHECK(dflash_synth("qwen3.5-1b", 0, 0, NULL, path("q35s_none", NULL)) != 0 &&
              strstr(dflash_error(), "qwen3.5-0.8b, qwen3.5-4b, qwen3.5-9b") && strstr(dflash_error(), "tiny-qwen35"),
          "unknown shape: %s", dflash_error());
}

/* ---- Qwen3.5-MoE checkpoints written by synth ----------------------------- */

/* q35_spec() as a Qwen3.5-MoE text model (tiny-qwen35moe's widths): every
 * layer 8 experts of 32, top 2, plus a shared expert of 48. */
static syn_spec q35moe_spec(void) {
    syn_spec s = q35_spec();
    cfg_model *c = &s.c;
    c->qwen35_moe = 1;
    c->n_experts = 8;
    c->n_experts_used = 2;
    c->moe_inter = 32;
    c->shared_inter = 48;
    c->inter = 48;
    c->norm_topk = 1;
    c->sparse_step = 1;
    for (int l = 0; l < c->n_layers; l++) c->moe_layer[l] = 1;
    c->n_moe_layers = c->n_layers;
    return s;
}

/* DIR loads as the Qwen3.5-MoE model WANT describes: its expert fields, no
 * intermediate_size in config.json, every layer's router, experts and shared
 * expert bound (a matrix whose columns the group does not divide stored
 * float), then check_q35_dir's checks (9-token forward = 9 one-token ones). */
static void check_q35moe_dir(const char *name, const char *dir, const cfg_model *want) {
    char *cp = dfl_path_join(dir, "config.json");
    char *txt = dfl_read_file(cp, NULL);
    CHECK(txt && strstr(txt, "\"Qwen3_5MoeForCausalLM\"") && strstr(txt, "\"qwen3_5_moe_text\"") &&
              strstr(txt, "\"shared_expert_intermediate_size\"") && !strstr(txt, "\"intermediate_size\""),
          "%s: config.json not a Qwen3.5-MoE text config", name);
    free(txt);
    free(cp);
    mdl_model m;
    if (mdl_load(&m, dir) != 0) {
        CHECK(0, "%s: load: %s", name, dfl_lasterr());
        return;
    }
    const cfg_model *c = &m.cfg;
    int E = want->n_experts, H = c->hidden, I = want->moe_inter, S = want->shared_inter;
    CHECK(c->arch == CFG_QWEN3_5 && c->qwen35_moe && c->n_experts == E && c->n_experts_used == want->n_experts_used &&
              c->moe_inter == I && c->shared_inter == S && c->inter == S && c->norm_topk &&
              c->n_moe_layers == c->n_layers,
          "%s: MoE config not as written (moe %d, experts %d top %d, inter %d/%d/%d, moe layers %d)", name,
          c->qwen35_moe, c->n_experts, c->n_experts_used, c->moe_inter, c->shared_inter, c->inter, c->n_moe_layers);
    int bound = 1, qb = c->q_bits, g = c->q_group;
#define QB(w, cols) ((w).bits == (qb && (cols) % g == 0 ? qb : 0))
    for (int l = 0; l < c->n_layers; l++) {
        const mdl_layer *L = &m.layers[l];
        bound &= c->moe_layer[l] && L->experts && L->router.rows == E && L->router.cols == H && QB(L->router, H) &&
                 !L->wg.rows && L->sh_wg.rows == S && L->sh_wg.cols == H && L->sh_wu.rows == S &&
                 L->sh_wd.rows == H && L->sh_wd.cols == S && QB(L->sh_wg, H) && QB(L->sh_wu, H) &&
                 QB(L->sh_wd, S) && L->sh_gate;
        for (int e = 0; L->experts && e < E; e++)
            bound &= L->experts[e].wg.rows == I && L->experts[e].wu.rows == I && L->experts[e].wd.cols == I &&
                     QB(L->experts[e].wg, H) && QB(L->experts[e].wd, I);
    }
#undef QB
    CHECK(bound, "%s: experts / shared expert not bound in every layer", name);
    mdl_free(&m);
    check_q35_dir(name, dir, want);
}

TEST(synth_qwen35moe) {
    static const struct {
        const char *name;
        wt_dtype dtype, scale;
        int bits, group, untied;
    } v[] = {
        {"q35ms_bf16", WT_BF16, WT_BF16, 0, 0, 0},
        {"q35ms_q4_untied", WT_BF16, WT_BF16, 4, 32, 1},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        syn_spec s = q35moe_spec();
        s.dtype = v[i].dtype;
        s.scale_dtype = v[i].scale;
        s.c.q_bits = v[i].bits;
        s.c.q_group = v[i].group;
        s.c.tie_embeddings = !v[i].untied;
        char *d = path(v[i].name, NULL);
        CHECK(syn_write(d, &s) == 0, "%s: synth: %s", v[i].name, dfl_lasterr());
        check_q35moe_dir(v[i].name, d, &s.c);
    }
    /* dflash synth's tiny-qwen35moe shape (4-bit, group 64: the 32- and
     * 48-column down_proj stay bf16) and its draft */
    char *d = path("q35ms_tiny", NULL);
    CHECK(dflash_synth("tiny-qwen35moe", 0, 4, NULL, d) == 0, "synth tiny-qwen35moe: %s", dflash_error());
    syn_spec s = q35moe_spec();
    s.c.vocab = 248320;
    s.c.q_bits = 4;
    s.c.q_group = 64;
    check_q35moe_dir("q35ms_tiny", d, &s.c);
    char *dd = path("q35ms_tiny_draft", NULL);
    CHECK(dflash_synth("tiny-qwen35moe", 1, 0, NULL, dd) == 0, "synth tiny-qwen35moe --draft: %s", dflash_error());
    mdl_model m;
    if (mdl_load(&m, dd) == 0) {
        CHECK(m.cfg.is_draft && m.cfg.arch == CFG_QWEN3 && m.cfg.hidden == 64 && m.cfg.n_target_layers == 4 &&
                  m.cfg.mask_token_id == 248319 && !m.cfg.n_experts,
              "tiny-qwen35moe draft config (draft %d, arch %d, target layers %d, mask %d)", m.cfg.is_draft,
              (int)m.cfg.arch, m.cfg.n_target_layers, m.cfg.mask_token_id);
        mdl_free(&m);
    } else {
        CHECK(0, "tiny-qwen35moe draft: load: %s", dfl_lasterr());
    }
    CHECK(dflash_synth("qwen3.5-36b", 0, 0, NULL, path("q35ms_none", NULL)) != 0 &&
              strstr(dflash_error(), "qwen3.5-35b-a3b") && strstr(dflash_error(), "tiny-qwen35moe"),
          "unknown shape: %s", dflash_error());
}

/* dflash synth's tiny-gptoss: what it writes loads back as the gpt-oss it
 * describes (window, sliding layers, YaRN, experts, biases and sinks bound),
 * its draft is a dense Qwen3 draft of the target's hidden size, and
 * --bits is refused (3-D experts have no MLX layout here). */
TEST(synth_gptoss_round_trip) {
    char *d = path("oss_tiny", NULL);
    CHECK(dflash_synth("tiny-gptoss", 0, 0, NULL, d) == 0, "synth tiny-gptoss: %s", dflash_error());
    mdl_model m;
    if (mdl_load(&m, d) == 0) {
        const cfg_model *c = &m.cfg;
        CHECK(c->arch == CFG_GPT_OSS && c->window == 8 && c->n_sliding_layers == 2 && c->sliding_layer[0] &&
                  !c->sliding_layer[1] && c->rope_yarn && c->rope_factor == 32 && c->rope_orig_max_pos == 4096 &&
                  !c->yarn_truncate && c->n_experts == 4 && c->n_experts_used == 2 && c->moe_inter == 128 &&
                  c->n_moe_layers == 4 && c->attn_bias && c->attn_sinks && c->swiglu_limit == 7.0f &&
                  !c->tie_embeddings && c->vocab == 201088,
              "tiny-gptoss config read back wrong");
        CHECK(fabs(c->yarn_attn_factor - (0.1 * log(32.0) + 1)) < 1e-12, "attention factor %g", c->yarn_attn_factor);
        const mdl_layer *L = &m.layers[3];
        CHECK(L->sinks && L->bq && L->bo && L->router_bias && L->experts && L->experts[3].bg && L->experts[3].bd &&
                  L->experts[3].wg.rows == 128 && L->experts[3].wg.cols == 64 && L->experts[3].wd.rows == 64,
              "tiny-gptoss layer 3 not bound as gpt-oss");
        mdl_free(&m);
    } else {
        CHECK(0, "tiny-gptoss: load: %s", dfl_lasterr());
    }
    char *dd = path("oss_tiny_draft", NULL);
    CHECK(dflash_synth("tiny-gptoss", 1, 0, NULL, dd) == 0, "synth tiny-gptoss --draft: %s", dflash_error());
    if (mdl_load(&m, dd) == 0) {
        CHECK(m.cfg.is_draft && m.cfg.arch == CFG_QWEN3 && m.cfg.hidden == 64 && m.cfg.n_target_layers == 4,
              "tiny-gptoss draft config");
        mdl_free(&m);
    } else {
        CHECK(0, "tiny-gptoss draft: load: %s", dfl_lasterr());
    }
    /* --bits 4: MXFP4 experts as openai ships them (they load as WT_MXFP4
     * matrices, model.c mxfp4_rows), the rest BF16; --bits 8
     * has no gpt-oss layout and is refused naming the flag */
    char *dq = path("oss_q4", NULL);
    CHECK(dflash_synth("tiny-gptoss", 0, 4, NULL, dq) == 0, "synth tiny-gptoss --bits 4: %s", dflash_error());
    if (mdl_load(&m, dq) == 0) {
        const mdl_layer *L = &m.layers[1];
        CHECK(L->experts && L->experts[2].wg.dtype == WT_MXFP4 && L->experts[2].wg.group_size == 32 &&
                  L->experts[2].wd.dtype == WT_MXFP4 && L->experts[2].wd.rows == 64 && L->wq.dtype == WT_BF16,
              "tiny-gptoss --bits 4: experts not MXFP4 beside BF16 attention");
        mdl_free(&m);
    } else {
        CHECK(0, "tiny-gptoss --bits 4: load: %s", dfl_lasterr());
    }
    CHECK(dflash_synth("tiny-gptoss", 0, 8, NULL, path("oss_q8", NULL)) != 0 && strstr(dflash_error(), "--bits 8"),
          "synth gpt-oss --bits 8: %s", dflash_error());
}

/* dflash synth's tiny-gemma4: what it writes loads back as the Gemma-4 of
 * tests/models/tiny-gemma4 (transformers' own config: the same layer types,
 * window, full-layer head, RoPE, softcapping, per-layer inputs), every
 * Gemma tensor bound; its draft is a dense Qwen3 draft with Gemma's <mask>
 * id; a k_eq_v model has no v_proj in its full layers. */
TEST(synth_gemma4_round_trip) {
    char *d = path("g4_tiny", NULL);
    CHECK(dflash_synth("tiny-gemma4", 0, 0, NULL, d) == 0, "synth tiny-gemma4: %s", dflash_error());
    mdl_model m, f;
    const char *root = getenv("DFLASH_ROOT");
    char fdir[4096];
    snprintf(fdir, sizeof fdir, "%s/tests/models/tiny-gemma4", root ? root : ".");
    if (mdl_load(&m, d) != 0 || mdl_load(&f, fdir)) {
        CHECK(0, "tiny-gemma4: load: %s", dfl_lasterr());
        return;
    }
    const cfg_model *c = &m.cfg, *r = &f.cfg;
    int same = c->arch == CFG_GEMMA4 && r->arch == CFG_GEMMA4 && c->window == r->window &&
               c->n_sliding_layers == r->n_sliding_layers && c->ple == r->ple && c->softcap == r->softcap &&
               c->full_rot == r->full_rot && c->rope_theta == r->rope_theta && c->full_theta == r->full_theta &&
               c->attn_scale == 1.0f && c->v_norm && c->geglu && c->tie_embeddings && !c->k_eq_v;
    for (int l = 0; l < c->n_layers; l++)
        same &= c->sliding_layer[l] == r->sliding_layer[l] && cfg_head_dim(c, l) == cfg_head_dim(r, l) &&
                cfg_kv_heads(c, l) == cfg_kv_heads(r, l);
    CHECK(same && c->n_sliding_layers == 5 && cfg_head_dim(c, 5) == 32 && c->full_rot == 4,
          "tiny-gemma4 synth config differs from transformers' tiny-gemma4");
    const mdl_layer *L = &m.layers[5];
    CHECK(L->wq.rows == 128 && L->wk.rows == 64 && L->wv.rows == 64 && L->wo.cols == 128 && L->attn_out_norm &&
              L->ffn_out_norm && L->ple_norm && L->ple_gate.rows == 8 && L->ple_proj.cols == 8 &&
              m.ple_embed.cols == 48 && m.ple_model_proj.rows == 48 && m.ple_proj_norm,
          "tiny-gemma4 layer 5 not bound as Gemma-4");
    mdl_free(&m);
    mdl_free(&f);
    char *dd = path("g4_tiny_draft", NULL);
    CHECK(dflash_synth("tiny-gemma4", 1, 0, NULL, dd) == 0, "synth tiny-gemma4 --draft: %s", dflash_error());
    if (mdl_load(&m, dd) == 0) {
        CHECK(m.cfg.is_draft && m.cfg.arch == CFG_QWEN3 && m.cfg.hidden == 64 && m.cfg.n_target_layers == 6 &&
                  m.cfg.mask_token_id == 4,
              "tiny-gemma4 draft config");
        mdl_free(&m);
    } else {
        CHECK(0, "tiny-gemma4 draft: load: %s", dfl_lasterr());
    }
    /* attention_k_eq_v with 1 kv head of 32 in the full layer */
    syn_spec s = syn_default();
    s.c.n_layers = 6;
    syn_gemma4(&s.c, 8, 32, 1, 1, 0);
    char *k = path("g4_keqv", NULL);
    CHECK(syn_write(k, &s) == 0, "synth k_eq_v: %s", dfl_lasterr());
    if (mdl_load(&m, k) == 0) {
        CHECK(m.cfg.k_eq_v && cfg_kv_heads(&m.cfg, 5) == 1 && cfg_head_dim(&m.cfg, 5) == 32 && !m.layers[5].wv.rows &&
                  m.layers[4].wv.rows == 32 && m.layers[5].wk.rows == 32 && !m.cfg.ple && !m.ple_embed.rows,
              "k_eq_v model bound wrong");
        mdl_free(&m);
    } else {
        CHECK(0, "k_eq_v: load: %s", dfl_lasterr());
    }
}

/* dflash synth's tiny-gemma4-moe loads back as tests/models/tiny-gemma4-moe
 * (transformers' config: the same layers as tiny-gemma4, and the MoE block:
 * experts, top k, their width, beside the dense MLP), every expert tensor
 * bound; and the gemma-4-26b-a4b shape (not written: 50 GB) has the
 * parameters Google's model card states, 25.2B of which 3.8B active (a
 * token reads the 8 routed experts of 128, the dense MLP and attention,
 * the tied embedding as lm_head), its config as its config.json says. */
TEST(synth_gemma4_moe) {
    char *d = path("g4_moe", NULL);
    CHECK(dflash_synth("tiny-gemma4-moe", 0, 0, NULL, d) == 0, "synth tiny-gemma4-moe: %s", dflash_error());
    CHECK(dflash_synth("tiny-gemma4-moe", 0, 4, NULL, path("g4_moe_q4", NULL)) != 0 &&
              strstr(dflash_error(), "--bits 4 is not supported for Gemma-4's experts"),
          "tiny-gemma4-moe --bits 4: %s", dflash_error());
    mdl_model m, f;
    const char *root = getenv("DFLASH_ROOT");
    char fdir[4096];
    snprintf(fdir, sizeof fdir, "%s/tests/models/tiny-gemma4-moe", root ? root : ".");
    if (mdl_load(&m, d) != 0 || mdl_load(&f, fdir)) {
        CHECK(0, "tiny-gemma4-moe: load: %s", dfl_lasterr());
        return;
    }
    const cfg_model *c = &m.cfg, *r = &f.cfg;
    int same = c->arch == CFG_GEMMA4 && r->arch == CFG_GEMMA4 && c->g4_moe && r->g4_moe &&
               c->n_experts == r->n_experts && c->n_experts_used == r->n_experts_used &&
               c->moe_inter == r->moe_inter && c->inter == r->inter && c->hidden == r->hidden &&
               c->n_layers == r->n_layers && c->n_moe_layers == r->n_moe_layers && c->norm_topk == r->norm_topk &&
               c->window == r->window && c->n_sliding_layers == r->n_sliding_layers && c->ple == r->ple &&
               c->softcap == r->softcap && c->full_rot == r->full_rot && c->k_eq_v == r->k_eq_v;
    for (int l = 0; l < c->n_layers; l++)
        same &= c->sliding_layer[l] == r->sliding_layer[l] && c->moe_layer[l] == r->moe_layer[l] &&
                cfg_head_dim(c, l) == cfg_head_dim(r, l) && cfg_kv_heads(c, l) == cfg_kv_heads(r, l);
    CHECK(same && c->n_experts == 4 && c->n_experts_used == 2 && c->moe_inter == 32 && c->n_moe_layers == 6,
          "tiny-gemma4-moe synth config differs from transformers' tiny-gemma4-moe");
    int bound = 1;
    for (int l = 0; l < c->n_layers; l++) {
        const mdl_layer *L = &m.layers[l];
        bound &= L->wg.rows == 128 && L->router.rows == 4 && L->router_scale && L->router_pes && L->experts &&
                 L->moe_in_norm && L->ffn_out_norm1 && L->ffn_out_norm2;
        for (int e = 0; L->experts && e < 4; e++)
            bound &= L->experts[e].wg.rows == 32 && L->experts[e].wu.rows == 32 && L->experts[e].wd.rows == 64 &&
                     L->experts[e].wd.cols == 32;
    }
    CHECK(bound, "tiny-gemma4-moe: experts not bound as Gemma-4's");
    mdl_free(&m);
    mdl_free(&f);
    syn_spec s;
    CHECK(syn_shape("gemma-4-26b-a4b", 0, 0, &s) == 0, "shape: %s", dfl_lasterr());
    c = &s.c;
    CHECK(c->arch == CFG_GEMMA4 && c->g4_moe && c->hidden == 2816 && c->inter == 2112 && c->n_layers == 30 &&
              c->n_heads == 16 && c->n_kv_heads == 8 && c->head_dim == 256 && c->window == 1024 &&
              c->n_sliding_layers == 25 && cfg_head_dim(c, 5) == 512 && cfg_kv_heads(c, 5) == 2 && c->k_eq_v &&
              c->n_experts == 128 && c->n_experts_used == 8 && c->moe_inter == 704 && !c->ple &&
              c->vocab == 262144 && c->tie_embeddings && c->softcap == 30.0f,
          "gemma-4-26b-a4b config");
    double p, a;
    syn_count(c, &p, &a);
    fprintf(stderr, "  gemma-4-26b-a4b: %.3fB parameters, %.3fB read per token\n", p / 1e9, a / 1e9);
    CHECK(fabs(p - 25.2e9) < 0.05e9 && fabs(a - 3.8e9) < 0.05e9, "gemma-4-26b-a4b: %.3fB / %.3fB", p / 1e9,
          a / 1e9);
    CHECK(syn_shape("gemma-4-26b-a4b", 0, 8, &s) != 0, "gemma-4-26b-a4b --bits 8 accepted");
}

/* ---- draft validation ----------------------------------------------------- */

/* The small target (2 layers, hidden 64, vocab 512) and a draft tapping its
 * layers 0 and 1 (block 8, mask id 500). 0, or -1 with a failed CHECK. */
static int draft_pair(mdl_model *tm, mdl_model *dm) {
    syn_spec t = small();
    char *td = path("d_target", NULL);
    syn_write(td, &t);
    syn_spec d = small();
    d.c.is_draft = 1;
    d.c.block_size = 8;
    d.c.mask_token_id = 500;
    d.c.n_target_layers = 2;
    d.c.n_taps = 2;
    d.c.tap_layers[0] = 0;
    d.c.tap_layers[1] = 1;
    d.seed = 9;
    char *dd = path("d_draft", NULL);
    CHECK(syn_write(dd, &d) == 0, "synth draft: %s", dfl_lasterr());
    if (mdl_load(tm, td) != 0) {
        CHECK(0, "load: %s", dfl_lasterr());
        return -1;
    }
    if (mdl_load(dm, dd) != 0) {
        CHECK(0, "load: %s", dfl_lasterr());
        mdl_free(tm);
        return -1;
    }
    return 0;
}

TEST(draft_forward_cached_equals_uncached) {
    mdl_model tm, dm;
    if (draft_pair(&tm, &dm) != 0) return;
    const be_ops *be = &be_cpu;
    int H = 64, V = 512;
    enum { N = 20 };
    float *feats = malloc(sizeof(float) * N * 2 * H), *l1 = malloc(sizeof(float) * 7 * V),
          *l2 = malloc(sizeof(float) * 7 * V);
    for (int i = 0; i < N * 2 * H; i++) feats[i] = sinf((float)i * 0.37f);
    int32_t blk[8] = {5, 500, 500, 500, 500, 500, 500, 500};
    /* context pushed in one go vs in pieces (the persistent cache path) */
    void *a = be->draft_create(bi, &dm, &tm, 64), *b = be->draft_create(bi, &dm, &tm, 64);
    be->draft_ctx_append(a, feats, N);
    be->draft_ctx_append(b, feats, 3);
    be->draft_ctx_append(b, feats + 3 * 2 * H, 1);
    be->draft_ctx_append(b, feats + 4 * 2 * H, N - 4);
    be_draft_block q = {.B = 8, .tokens = blk, .logits = l1};
    CHECK(be->draft_block(a, &q) == 0, "block a");
    q.logits = l2;
    CHECK(be->draft_block(b, &q) == 0, "block b");
    CHECK(memcmp(l1, l2, sizeof(float) * 7 * V) == 0, "cached pieces differ from one append");
    /* block rows are not persisted: running the block again gives the same */
    CHECK(be->draft_ctx_length(b) == N, "block changed the context length");
    be->draft_block(b, &q);
    CHECK(memcmp(l1, l2, sizeof(float) * 7 * V) == 0, "second block run differs");
    /* rollback of the draft context */
    be->draft_ctx_truncate(b, 10);
    be->draft_ctx_append(b, feats + 10 * 2 * H, N - 10);
    be->draft_block(b, &q);
    CHECK(memcmp(l1, l2, sizeof(float) * 7 * V) == 0, "draft rollback differs");
    /* projecting only the first slots of the block: the same rows, bit for
     * bit; a reduced vocabulary plus extra ids: the same values */
    for (int ns = 1; ns < 7; ns++) {
        be_draft_block r = {.B = 8, .tokens = blk, .n_slots = ns, .logits = l2};
        memset(l2, 0, sizeof(float) * 7 * V);
        CHECK(be->draft_block(b, &r) == 0, "block, %d slots", ns);
        CHECK(memcmp(l1, l2, sizeof(float) * ns * V) == 0, "%d projected slots differ from the full block", ns);
    }
    int32_t extra[2] = {300, 511};
    float xl[7 * 2];
    be_draft_block r = {.B = 8, .tokens = blk, .n_slots = 4, .n_vocab = 256, .extra = extra, .n_extra = 2, .logits = l2,
                        .extra_logits = xl};
    CHECK(be->draft_block(b, &r) == 0, "block with a reduced vocabulary");
    int same = 1;
    for (int i = 0; i < 4; i++) {
        same &= memcmp(l1 + (size_t)i * V, l2 + (size_t)i * 256, sizeof(float) * 256) == 0;
        for (int e = 0; e < 2; e++) same &= fabsf(xl[i * 2 + e] - l1[(size_t)i * V + extra[e]]) <= 1e-3f * (1 + fabsf(l1[(size_t)i * V + extra[e]]));
    }
    CHECK(same, "reduced vocabulary logits differ from the full projection");
    be->draft_destroy(a);
    be->draft_destroy(b);
    free(feats);
    free(l1);
    free(l2);
    mdl_free(&tm);
    mdl_free(&dm);
}

/* A draft block's proposals and logits (all 7 slots, full vocabulary). */
static void block_of(void *ds, int32_t anchor, int32_t *ids, float *logits) {
    int32_t blk[8] = {anchor, 500, 500, 500, 500, 500, 500, 500};
    be_draft_block q = {.B = 8, .tokens = blk, .out = ids, .logits = logits};
    CHECK(be_cpu.draft_block(ds, &q) == 0, "draft block: %s", dfl_lasterr());
}

/* draft_feed (taps that never leave the backend, kept pending) gives the
 * draft context the same bits as draft_ctx_append of the same rows read
 * out with taps(): prefill, a verify with rollback, pieces, and more rows
 * than the pending buffer holds. */
TEST(draft_feed_equals_ctx_append) {
    mdl_model tm, dm;
    if (draft_pair(&tm, &dm) != 0) return;
    const be_ops *be = &be_cpu;
    int H = 64, V = 512, K = 2;
    enum { N = 300, CTX = 640 };
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 53 + 7) % V);
    void *st = be->create(bi, &tm, CTX);
    void *fa = be->draft_create(bi, &dm, &tm, CTX), *ap = be->draft_create(bi, &dm, &tm, CTX);
    float *taps = malloc(sizeof(float) * BE_MAX_ROWS * K * H);
    float *l1 = malloc(sizeof(float) * 7 * V), *l2 = malloc(sizeof(float) * 7 * V);
    int32_t i1[7], i2[7];
    /* prefill in two forwards of 200 and 100 rows: fed as 3 + 197 rows, then 100 */
    int ok = 1, at = 0, widths[2] = {200, 100};
    for (int w = 0; w < 2; w++) {
        be_batch b = {.T = widths[w], .tokens = tok + at, .n_taps = K, .tap_layers = dm.cfg.tap_layers};
        ok &= be->forward(st, &b) == 0 && be->taps(st, 0, widths[w], taps) == 0;
        if (w == 0) ok &= be->draft_feed(fa, st, 0, 3) == 0 && be->draft_feed(fa, st, 3, 197) == 0;
        else ok &= be->draft_feed(fa, st, 0, 100) == 0;
        ok &= be->draft_ctx_append(ap, taps, widths[w]) == 0;
        at += widths[w];
    }
    CHECK(ok, "prefill: %s", dfl_lasterr());
    CHECK(be->draft_ctx_length(fa) == N && be->draft_ctx_length(ap) == N, "context lengths %d, %d",
          be->draft_ctx_length(fa), be->draft_ctx_length(ap));
    block_of(fa, 5, i1, l1);
    block_of(ap, 5, i2, l2);
    CHECK(memcmp(i1, i2, sizeof i1) == 0 && memcmp(l1, l2, sizeof(float) * 7 * V) == 0,
          "fed context differs from the appended one");
    /* a verify round: 6 rows, 4 accepted */
    int32_t vt[6] = {5, i1[0], i1[1], i1[2], i1[3], i1[4]};
    be_batch vb = {.T = 6, .tokens = vt, .n_taps = K, .tap_layers = dm.cfg.tap_layers, .keep_rows = 1};
    CHECK(be->forward(st, &vb) == 0 && be->taps(st, 0, 6, taps) == 0, "verify: %s", dfl_lasterr());
    be->truncate(st, N + 4);
    CHECK(be->draft_feed(fa, st, 0, 4) == 0, "feed after verify: %s", dfl_lasterr());
    CHECK(be->draft_ctx_append(ap, taps, 4) == 0, "append after verify");
    CHECK(be->draft_ctx_length(fa) == N + 4, "pending rows count: %d", be->draft_ctx_length(fa));
    block_of(fa, 9, i1, l1);
    block_of(ap, 9, i2, l2);
    CHECK(memcmp(i1, i2, sizeof i1) == 0 && memcmp(l1, l2, sizeof(float) * 7 * V) == 0,
          "after a verify: fed context differs from the appended one");
    /* refused: rows the last forward did not produce, and a forward without taps */
    CHECK(be->draft_feed(fa, st, 4, 3) != 0 && err_has("not tapped"), "feed past the tapped rows");
    CHECK(be->taps(st, 6, 1, taps) != 0, "taps past the last forward's rows");
    be_batch nb = {.T = 1, .tokens = tok};
    be->forward(st, &nb);
    CHECK(be->draft_feed(fa, st, 0, 1) != 0 && err_has("draft_feed"), "feed after a forward without taps");
    CHECK(be->draft_ctx_length(fa) == N + 4, "a refused feed changed the context");
    free(taps);
    free(l1);
    free(l2);
    be->draft_destroy(fa);
    be->draft_destroy(ap);
    be->destroy(st);
    mdl_free(&tm);
    mdl_free(&dm);
}

/* draft_ctx_truncate forgets pending rows, projected rows, or both: the
 * result equals a context that only ever had the kept rows. */
TEST(draft_truncate_with_pending_rows) {
    mdl_model tm, dm;
    if (draft_pair(&tm, &dm) != 0) return;
    const be_ops *be = &be_cpu;
    int H = 64, V = 512, K = 2;
    enum { N = 24 };
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 29 + 3) % V);
    void *st = be->create(bi, &tm, 64), *ds = be->draft_create(bi, &dm, &tm, 64);
    float *taps = malloc(sizeof(float) * N * K * H);
    float *l1 = malloc(sizeof(float) * 7 * V), *l2 = malloc(sizeof(float) * 7 * V);
    int32_t i1[7], i2[7];
    be_batch b = {.T = N, .tokens = tok, .n_taps = K, .tap_layers = dm.cfg.tap_layers};
    CHECK(be->forward(st, &b) == 0 && be->taps(st, 0, N, taps) == 0, "forward: %s", dfl_lasterr());
    /* cases: {rows projected (fed, then a block), rows pending on top, keep} */
    int cases[4][3] = {{0, 20, 17}, {12, 8, 15}, {12, 8, 7}, {12, 8, 12}};
    for (int c = 0; c < 4; c++) {
        int proj = cases[c][0], pend = cases[c][1], keep = cases[c][2];
        void *ref = be->draft_create(bi, &dm, &tm, 64);
        be->draft_ctx_truncate(ds, 0);
        CHECK(be->draft_ctx_length(ds) == 0, "case %d: truncate to 0", c);
        if (proj) {
            be->draft_feed(ds, st, 0, proj);
            block_of(ds, 5, i1, l1); /* projects the pending rows */
        }
        be->draft_feed(ds, st, proj, pend);
        CHECK(be->draft_ctx_length(ds) == proj + pend, "case %d: length %d with pending rows", c,
              be->draft_ctx_length(ds));
        be->draft_ctx_truncate(ds, keep);
        CHECK(be->draft_ctx_length(ds) == keep, "case %d: length %d after truncate to %d", c,
              be->draft_ctx_length(ds), keep);
        be->draft_ctx_append(ref, taps, keep);
        block_of(ds, 11, i1, l1);
        block_of(ref, 11, i2, l2);
        CHECK(memcmp(i1, i2, sizeof i1) == 0 && memcmp(l1, l2, sizeof(float) * 7 * V) == 0,
              "case %d (%d projected + %d pending, keep %d): differs from a fresh context", c, proj, pend, keep);
        /* growing again after the truncate: the rows land at the right positions */
        be->draft_feed(ds, st, keep, N - keep);
        be->draft_ctx_append(ref, taps + (size_t)keep * K * H, N - keep);
        block_of(ds, 13, i1, l1);
        block_of(ref, 13, i2, l2);
        CHECK(memcmp(l1, l2, sizeof(float) * 7 * V) == 0, "case %d: refilled context differs", c);
        be->draft_destroy(ref);
    }
    be->draft_ctx_truncate(ds, N + 5); /* beyond the length: nothing happens */
    CHECK(be->draft_ctx_length(ds) == N, "truncate beyond the length changed it");
    free(taps);
    free(l1);
    free(l2);
    be->draft_destroy(ds);
    be->destroy(st);
    mdl_free(&tm);
    mdl_free(&dm);
}

/* draft_block's ids: per slot the first maximum over ids < n_vocab, replaced
 * by an extra id whose logit is strictly greater - the rule applied to the
 * logits it returns; the same ids without logits requested. */
TEST(draft_block_ids_follow_the_rule) {
    mdl_model tm, dm;
    if (draft_pair(&tm, &dm) != 0) return;
    const be_ops *be = &be_cpu;
    int V = 512, K = 2;
    enum { N = 12, NV = 16 };
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 31 + 1) % V);
    void *st = be->create(bi, &tm, 64), *ds = be->draft_create(bi, &dm, &tm, 64);
    be_batch b = {.T = N, .tokens = tok, .n_taps = K, .tap_layers = dm.cfg.tap_layers};
    CHECK(be->forward(st, &b) == 0 && be->draft_feed(ds, st, 0, N) == 0, "prefill: %s", dfl_lasterr());
    float *full = malloc(sizeof(float) * 7 * V), lg[7 * NV], xl[7 * 3];
    int32_t ids[7], blk[8] = {5, 500, 500, 500, 500, 500, 500, 500};
    block_of(ds, 5, ids, full);
    for (int i = 0; i < 7; i++) /* the full vocabulary: plain argmax */
        CHECK(ids[i] == smp_argmax(full + (size_t)i * V, V), "slot %d: %d is not the argmax", i + 1, ids[i]);
    /* extras: the best id >= NV of slots 1 and 2 (so they win there) and one
     * that loses */
    int32_t extra[3];
    for (int e = 0; e < 2; e++) extra[e] = NV + smp_argmax(full + (size_t)e * V + NV, V - NV);
    extra[2] = extra[0] == V - 1 ? V - 2 : V - 1;
    for (int ns = 1; ns <= 7; ns += 3) {
        int32_t got[7], again[7];
        be_draft_block q = {.B = 8, .tokens = blk, .n_slots = ns, .n_vocab = NV, .extra = extra, .n_extra = 3,
                            .out = got, .logits = lg, .extra_logits = xl};
        CHECK(be->draft_block(ds, &q) == 0, "block: %s", dfl_lasterr());
        int extras_won = 0;
        for (int i = 0; i < ns; i++) {
            int32_t want = smp_argmax(lg + (size_t)i * NV, NV);
            float best = lg[(size_t)i * NV + want];
            for (int e = 0; e < 3; e++)
                if (xl[i * 3 + e] > best) best = xl[i * 3 + e], want = extra[e];
            CHECK(got[i] == want, "%d slots: slot %d proposed %d, the rule says %d", ns, i + 1, got[i], want);
            extras_won += want >= NV;
        }
        CHECK(extras_won >= 1, "%d slots: no extra id won (the test's extras should)", ns);
        q.logits = NULL;
        q.extra_logits = NULL;
        q.out = again;
        CHECK(be->draft_block(ds, &q) == 0 && memcmp(got, again, sizeof(int32_t) * ns) == 0,
              "%d slots: ids differ without logits requested", ns);
    }
    free(full);
    be->draft_destroy(ds);
    be->destroy(st);
    mdl_free(&tm);
    mdl_free(&dm);
}

/* be_select: the registry's names and its errors. */
TEST(backend_select) {
    CHECK(be_select(NULL) != NULL && be_select("auto") != NULL, "auto: %s", dfl_lasterr());
#ifndef DFLASH_CUDA
    CHECK(be_select(NULL) == &be_cpu && be_select("auto") == &be_cpu, "auto without CUDA must be cpu");
    CHECK(be_select("cuda") == NULL && err_has("backend cuda: not built in (rebuild with make CUDA=1)"),
          "cuda without CUDA");
#else
    const be_ops *cu = be_select("cuda");
    CHECK(cu == &be_cuda || err_has("backend cuda"), "cuda: neither the backend nor a reason");
    if (cu) CHECK(be_select(NULL) == &be_cuda, "auto with a usable GPU must be cuda");
#endif
    CHECK(be_select("cpu") == &be_cpu, "cpu");
    CHECK(be_select("nonsense") == NULL && err_has("unknown backend 'nonsense'"), "an unknown name");
    CHECK(be_select("") == NULL && err_has("unknown backend ''"), "an empty name");
    CHECK(be_cpu.predict_rows == 4, "the CPU verify projects 4 rows per call");
}

/* backend.argmax (vocabulary slices, no logits written) = argmax of
 * backend.logits, on the shipped demo target (151,936 rows: ten slices, the
 * last one partial), for kept rows taken one and several at a time. */
TEST(argmax_equals_logits_argmax) {
    const char *root = getenv("DFLASH_ROOT");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models/demo/target", root ? root : ".");
    mdl_model m;
    const be_ops *be = &be_cpu;
    if (mdl_load(&m, dir) != 0 || be->prepare(bi, &m) != 0) {
        CHECK(0, "load %s: %s", dir, dfl_lasterr());
        return;
    }
    void *st = be->create(bi, &m, 128);
    int V = m.cfg.vocab;
    enum { T = 7 };
    int32_t tok[T] = {151644, 872, 198, 3838, 374, 220, 17}, got[T], one;
    float *lg = malloc(sizeof(float) * T * (size_t)V);
    be_batch b = {.T = T, .tokens = tok, .keep_rows = 1};
    CHECK(be->forward(st, &b) == 0, "forward: %s", dfl_lasterr());
    CHECK(be->logits(st, 0, T, lg) == 0, "logits: %s", dfl_lasterr());
    CHECK(be->argmax(st, 0, T, got) == 0, "argmax: %s", dfl_lasterr());
    for (int t = 0; t < T; t++) {
        CHECK(got[t] == smp_argmax(lg + (size_t)t * V, V), "row %d: argmax %d, logits say %d", t, got[t],
              smp_argmax(lg + (size_t)t * V, V));
        CHECK(be->argmax(st, t, 1, &one) == 0 && one == got[t], "row %d alone: %d vs %d", t, one, got[t]);
    }
    CHECK(be->argmax(st, 5, 3, got) != 0, "rows past the kept ones must be refused");
    free(lg);
    be->destroy(st);
    be->release(bi, &m);
    mdl_free(&m);
}

int main(void) {
    if (tmpdir_make("test-model") != 0) return 1;
    be_options bo = {.n_threads = 2};
    bi = be_cpu.open(&bo); /* kn_init_once, a pool of 2 threads */
    RUN(safetensors_bad_files);
    RUN(model_bad_checkpoints);
    RUN(batch_invariance_and_rollback);
    RUN(moe_batch_invariance_and_rollback);
    RUN(moe_bad_checkpoints);
    RUN(qwen35_config);
    RUN(synth_qwen35);
    RUN(synth_qwen35moe);
    RUN(draft_forward_cached_equals_uncached);
    RUN(draft_feed_equals_ctx_append);
    RUN(draft_truncate_with_pending_rows);
    RUN(draft_block_ids_follow_the_rule);
    RUN(argmax_equals_logits_argmax);
    RUN(backend_select);
    RUN(synth_gptoss_round_trip);
    RUN(synth_gemma4_round_trip);
    RUN(synth_gemma4_moe);
    be_cpu.close(bi);
    tmpdir_remove();
    CHECK_DONE("test_model");
}
