/* make_seeds.c - writes the seed corpora into tests/fuzz/seeds/ (then
 * tests/fuzz/pack_seeds.sh moves them into the committed tests/fuzz/seeds.tar.xz; run
 * once from the repository root: cc ... tests/fuzz/make_seeds.c
 * build/libdflash.a; see docs/reliability.md). Small synthetic models in
 * every loader path (BF16, F32, MLX 4/8-bit, sharded index aside, Llama,
 * draft; the qwen3moe / qwen35 / qwen35moe / gpt-oss GGUF fixtures with
 * their embeddings cut to 64 rows; a GGUF with a gemma4 tokenizer),
 * tokenizer texts and chat message lists. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf.h"
#include "gguf_model.h"
#include "gguf_write.h"
#include "synth.h"
#include "util.h"

static void put(const char *dir, const char *name, const void *a, size_t na, const void *b, size_t nb,
                const void *c, size_t nc) {
    char p[512];
    snprintf(p, sizeof p, "tests/fuzz/seeds/%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) {
        perror(p);
        exit(1);
    }
    fwrite(a, 1, na, f);
    if (b) fwrite(b, 1, nb, f);
    if (c) fwrite(c, 1, nc, f);
    fclose(f);
}

static void model(const char *name, syn_spec s) {
    char d[256];
    snprintf(d, sizeof d, "/tmp/dflash-seed-%s", name);
    if (syn_write(d, &s) != 0) {
        fprintf(stderr, "%s\n", dfl_lasterr());
        exit(1);
    }
    size_t nc, ng = 0, nst;
    char *cp = dfl_path_join(d, "config.json"), *gp = dfl_path_join(d, "generation_config.json"),
         *sp = dfl_path_join(d, "model.safetensors");
    char *cfg = dfl_read_file(cp, &nc), *gen = dfl_file_exists(gp) ? dfl_read_file(gp, &ng) : NULL,
         *st = dfl_read_file(sp, &nst);
    static const char nul = 0;
    char both[600];
    snprintf(both, sizeof both, "%s", name);
    put("safetensors", name, st, nst, NULL, 0, NULL, 0);
    /* model: config \0 generation_config \0 safetensors */
    char *joined = dfl_malloc(nc + ng + nst + 2);
    memcpy(joined, cfg, nc);
    joined[nc] = nul;
    if (gen) memcpy(joined + nc + 1, gen, ng);
    joined[nc + 1 + ng] = nul;
    memcpy(joined + nc + 2 + ng, st, nst);
    put("model", both, joined, nc + ng + nst + 2, NULL, 0, NULL, 0);
    free(joined);
    free(cfg);
    free(gen);
    free(st);
    free(cp);
    free(gp);
    free(sp);
}

static syn_spec small(void) {
    syn_spec s = syn_default();
    s.c.hidden = 32;
    s.c.inter = 32;
    s.c.n_layers = 1;
    s.c.n_heads = 2;
    s.c.n_kv_heads = 1;
    s.c.head_dim = 16;
    s.c.vocab = 24;
    s.c.max_pos = 64;
    s.c.n_eos = 1;
    s.c.eos_ids[0] = 3;
    return s;
}

/* small()'s DFlash draft: block 4, mask id 5, taps layer 1 of a 4-layer target */
static syn_spec small_draft(void) {
    syn_spec s = small();
    s.c.is_draft = 1;
    s.c.block_size = 4;
    s.c.mask_token_id = 5;
    s.c.n_target_layers = 4;
    s.c.n_taps = 1;
    s.c.tap_layers[0] = 1;
    s.c.tie_embeddings = 0;
    return s;
}

/* A tokenizer.json small enough for a seed (Qwen's pre-tokenizer, 24 ids) */
static const char mini_tok[] =
    "{\"normalizer\": {\"type\": \"NFC\"}, \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
    "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?"
    "\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, "
    "\"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
    "\"use_regex\": false}]}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"d\": 3, "
    "\"e\": 4, \"f\": 5, \"g\": 6, \"h\": 7, \"i\": 8, \"j\": 9, \"k\": 10, \"l\": 11, \"m\": 12, \"n\": 13, "
    "\"o\": 14, \"p\": 15, \"q\": 16, \"r\": 17, \"s\": 18, \"\\u0120\": 19, \"ab\": 20, \"cd\": 21}, "
    "\"merges\": [[\"a\", \"b\"], [\"c\", \"d\"]]}, \"added_tokens\": [{\"id\": 22, \"content\": \"<|im_end|>\", "
    "\"special\": true}, {\"id\": 23, \"content\": \"<think>\", \"special\": false}]}";

static void gguf_seed(const char *name, syn_spec s, const char *type) {
    char d[256], p[300], out[300];
    snprintf(d, sizeof d, "/tmp/dflash-seed-gguf-%s", name);
    if (syn_write(d, &s) != 0) {
        fprintf(stderr, "%s\n", dfl_lasterr());
        exit(1);
    }
    snprintf(p, sizeof p, "%s/tokenizer.json", d);
    FILE *f = fopen(p, "w");
    if (!f || fputs(mini_tok, f) < 0 || fclose(f)) exit(1);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", d);
    f = fopen(p, "w");
    if (!f || fputs("{\"eos_token\": \"<|im_end|>\", \"chat_template\": \"<|im_start|>{{ x }}\"}", f) < 0 || fclose(f))
        exit(1);
    snprintf(out, sizeof out, "tests/fuzz/seeds/gguf/%s", name);
    if (ggm_convert(d, out, type, NULL) != 0) {
        fprintf(stderr, "%s\n", dfl_lasterr());
        exit(1);
    }
}

/* A GGUF whose tokenizer is Gemma's SentencePiece-style BPE
 * (tokenizer.ggml.model gemma4, as dflash convert writes it): a small model
 * with a 267-token Gemma-layout tokenizer.json (specials, the 256 <0xNN>
 * byte tokens, U+2581, newline runs as added tokens, three merges). */
static void gemma_tok_seed(void) {
    syn_spec s = small();
    s.c.vocab = 272;
    char d[] = "/tmp/dflash-seed-gguf-gemma4tok", p[300];
    if (syn_write(d, &s) != 0) {
        fprintf(stderr, "%s\n", dfl_lasterr());
        exit(1);
    }
    dfl_buf b = {0};
    dfl_buf_str(&b, "{\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": "
                    "\"\\u2581\"}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, "
                    "\"behavior\": \"MergedWithPrevious\", \"invert\": false}, \"decoder\": {\"type\": \"Sequence\", "
                    "\"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\\u2581\"}, \"content\": \" \"}, "
                    "{\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}]}, \"post_processor\": {\"type\": "
                    "\"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<bos>\"}}, {\"Sequence\": "
                    "{\"id\": \"A\"}}], \"special_tokens\": {\"<bos>\": {\"ids\": [2]}}}, \"model\": {\"type\": \"BPE\", "
                    "\"byte_fallback\": true, \"fuse_unk\": true, \"unk_token\": \"<unk>\", \"vocab\": {\"<pad>\": 0, "
                    "\"<eos>\": 1, \"<bos>\": 2, \"<unk>\": 3");
    for (int i = 0; i < 256; i++) {
        char t[32];
        snprintf(t, sizeof t, ", \"<0x%02X>\": %d", i, 4 + i);
        dfl_buf_str(&b, t);
    }
    dfl_buf_str(&b, ", \"\\u2581\": 260, \"a\": 261, \"b\": 262, \"ab\": 263, \"\\n\": 264, \"\\n\\n\": 265, "
                    "\"\\u2581a\": 266}, \"merges\": [[\"a\", \"b\"], [\"\\u2581\", \"a\"], [\"\\n\", \"\\n\"]]}, "
                    "\"added_tokens\": [{\"id\": 0, \"content\": \"<pad>\", \"special\": true}, {\"id\": 1, "
                    "\"content\": \"<eos>\", \"special\": true}, {\"id\": 2, \"content\": \"<bos>\", \"special\": true}, "
                    "{\"id\": 3, \"content\": \"<unk>\", \"special\": true}, {\"id\": 264, \"content\": \"\\n\", "
                    "\"special\": false}, {\"id\": 265, \"content\": \"\\n\\n\", \"special\": false}]}");
    snprintf(p, sizeof p, "%s/tokenizer.json", d);
    FILE *f = fopen(p, "w");
    if (!f || fwrite(b.s, 1, b.n, f) != b.n || fclose(f)) exit(1);
    dfl_buf_free(&b);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", d);
    f = fopen(p, "w");
    if (!f || fputs("{\"eos_token\": \"<eos>\"}", f) < 0 || fclose(f)) exit(1);
    if (ggm_convert(d, "tests/fuzz/seeds/gguf/gemma4-tok", "f16", NULL) != 0) {
        fprintf(stderr, "%s\n", dfl_lasterr());
        exit(1);
    }
}

/* A llama.cpp-converted family file (tests/fixtures/gguf/SRC.gguf) with its
 * embedding (and output, per-layer embedding) cut to 64 rows: the seed for
 * the qwen3moe / qwen35 / qwen35moe / gpt-oss (MXFP4) binding paths, small
 * enough to fuzz (a gemma4 one would be 0.5 MB: its layers are not cut). */
static void family_seed(const char *src, const char *name) {
    char in[300], out[300];
    snprintf(in, sizeof in, "tests/fixtures/gguf/%s.gguf", src);
    snprintf(out, sizeof out, "tests/fuzz/seeds/gguf/%s", name);
    gguf_file g;
    if (gguf_open(&g, in) != 0) {
        fprintf(stderr, "%s\n", dfl_lasterr());
        exit(1);
    }
    gguf_writer *w = gguf_w_new();
    for (int i = 0; i < g.n_kv; i++) gguf_w_copy_kv(w, &g.kv[i]);
    for (int i = 0; i < g.n_tensors; i++) {
        const gguf_tensor *t = &g.t[i];
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (!strcmp(t->name, "token_embd.weight") || !strcmp(t->name, "output.weight") ||
            !strcmp(t->name, "per_layer_token_embd.weight"))
            ne[1] = 64; /* the first 64 rows */
        gguf_w_tensor(w, t->name, t->type, t->n_dims, ne, t->data);
    }
    if (gguf_w_write(w, out) != 0) {
        fprintf(stderr, "%s\n", dfl_lasterr());
        exit(1);
    }
    gguf_w_free(w);
    gguf_close(&g);
}

int main(void) {
    const char *dirs[] = {"safetensors", "model", "tokenizer", "chat", "gguf"};
    mkdir("tests/fuzz/seeds", 0777);
    for (int i = 0; i < 5; i++) {
        char p[256];
        snprintf(p, sizeof p, "tests/fuzz/seeds/%s", dirs[i]);
        mkdir(p, 0777);
    }
    syn_spec s = small();
    model("bf16", s);
    s.dtype = WT_F32;
    s.c.tie_embeddings = 0;
    model("f32-untied", s);
    s = small();
    s.c.q_bits = 4;
    s.c.q_group = 32;
    model("q4", s);
    s.c.q_bits = 8;
    model("q8", s);
    s = small();
    s.c.arch = CFG_LLAMA;
    s.c.qk_norm = 0;
    model("llama", s);
    s = small();
    s.c.n_layers = 2;
    syn_gptoss(&s.c, 4);
    s.c.tie_embeddings = 0;
    model("gptoss", s);
    s = small_draft();
    model("draft", s);
    put("safetensors", "empty", "\x02\0\0\0\0\0\0\0{}", 10, NULL, 0, NULL, 0);
    s = small();
    gguf_seed("qwen3-f16", s, "f16");
    gguf_seed("qwen3-q8_0", s, "q8_0");
    s.c.arch = CFG_LLAMA;
    s.c.qk_norm = 0;
    s.c.tie_embeddings = 0;
    gguf_seed("llama-f16", s, "f16");
    s = small_draft();
    gguf_seed("draft-f16", s, "f16");
    gemma_tok_seed();
    family_seed("tiny-qwen3moe-bf16", "qwen3moe-bf16");
    family_seed("tiny-qwen35-bf16", "qwen35-bf16");
    family_seed("tiny-qwen35moe-q8_0", "qwen35moe-q8_0");
    family_seed("tiny-gptoss-mxfp4-v1k", "gptoss-mxfp4");
    {
        gguf_writer *w = gguf_w_new();
        gguf_w_str(w, "general.architecture", "qwen3");
        gguf_w_u32(w, "general.alignment", 64);
        const char *strs[] = {"x", "", "y z"};
        gguf_w_arr_str(w, "a.strs", strs, 3);
        int32_t iv[2] = {1, -2};
        gguf_w_arr_i32(w, "a.i32s", iv, 2);
        gguf_w_f32(w, "a.f32", 0.5f);
        gguf_w_bool(w, "a.bool", 1);
        static uint8_t q[2 * 34];
        int64_t ne[2] = {32, 2};
        gguf_w_tensor(w, "t.q8_0", GGML_Q8_0, 2, ne, q);
        if (gguf_w_write(w, "tests/fuzz/seeds/gguf/kinds") != 0) exit(1);
        gguf_w_free(w);
    }

    static const char *texts[] = {
        "Hello world! How are you today?",
        "def f(x):\n    return x * 2  # double\n\n\n",
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
        "caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd",
        "e\xcc\x81 a\xcc\x81\xcc\x96\xd6\xb0\xcc\xb4 \xea\xb0\x80\xe1\x84\x80\xe1\x85\xa1 \xe2\x84\xab",
        "   leading and trailing   \t\r\n",
        "1234567890 3.14159 -42 1e10 0x1F",
        "\xd8\xa7\xd9\x84\xd8\xb3\xd9\x84\xd8\xa7\xd9\x85 \xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d \xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "text%zu", i);
        put("tokenizer", name, "\0", 1, texts[i], strlen(texts[i]), NULL, 0);
    }
    int32_t ids[] = {9707, 1879, 0, 151643, 151645, 151668, -1, 200000, 127, 94, 220, 198};
    put("tokenizer", "ids", "\1", 1, ids, sizeof ids, NULL, 0);
    static const char chat0[] = "\x02\x01Hello\x1e\x02Hi there!\x1e\x01How are you?";
    static const char chat1[] = "\x06\x00You are helpful.\x1e\x01What is 2+2?\x1e\x02<think>\nadd\n</think>\n\n4"
                                "\x1e\x01Thanks";
    static const char chat2[] = "\x03\x00" "Be brief.\x1e\x01Hi\x1e\x02Hello\x1f" "reasoning here";
    static const char chat3[] = "\x0a\x01" "Call the tool\x1e\x02\x1e\x03{\"result\": 42}\x1e\x01ok";
    put("chat", "chat0", chat0, sizeof chat0 - 1, NULL, 0, NULL, 0);
    put("chat", "chat1", chat1, sizeof chat1 - 1, NULL, 0, NULL, 0);
    put("chat", "chat2", chat2, sizeof chat2 - 1, NULL, 0, NULL, 0);
    put("chat", "chat3", chat3, sizeof chat3 - 1, NULL, 0, NULL, 0);
    /* harmony (bit 7): system, user, assistant with reasoning, user, generation prompt */
    static const char chat4[] = "\x82\x00" "Be brief.\x1e\x01What is 2+2?\x1e\x02" "4.\x1f" "Add them.\x1e\x01" "And 3+3?";
    put("chat", "harmony0", chat4, sizeof chat4 - 1, NULL, 0, NULL, 0);
    /* Gemma 3 (bits 7 and 6): system, user, assistant, user, generation prompt */
    static const char chat5[] = "\xc2\x00" "Be brief.\x1e\x01 What is 2+2? \x1e\x02" "4.\x1e\x01" "And 3+3?";
    put("chat", "gemma0", chat5, sizeof chat5 - 1, NULL, 0, NULL, 0);
    /* Gemma 4 (0xc3: bits 7, 6 and 0; gen; 0xe3 also bit 5: the early template, thinking on) */
    static const char chat6[] = "\xc3\x00" "Be brief.\x1e\x01 What is 2+2? \x1e\x02<|channel>thought\nadd<channel|>4.\x1e\x01"
                                "And 3+3?";
    put("chat", "gemma4_0", chat6, sizeof chat6 - 1, NULL, 0, NULL, 0);
    static const char chat7[] = "\xe3\x01Hi\x1e\x02" "a<|channel>x<channel|>b\x1e\x01q";
    put("chat", "gemma4_1", chat7, sizeof chat7 - 1, NULL, 0, NULL, 0);
    /* a tool round (0x1D: a call, 0x1C: its arguments) with the fixed tools (bit 4):
     * harmony, Gemma 4, its early template */
    static const char chat8[] = "\x92\x01Weather in Paris?\x1e\x02\x1dget_weather\x1c{\"city\": \"Paris\"}\x1e\x03{\"temp\": 21}";
    static const char chat9[] = "\xd3\x01Weather in Paris?\x1e\x02\x1dget_weather\x1c{\"city\": \"Paris\"}\x1e\x03{\"temp\": 21}"
                                "\x1e\x02It is 21 C.";
    static const char chat10[] = "\xf3\x01Weather in Paris?\x1e\x02\x1dget_weather\x1c{\"city\": \"Paris\"}\x1e\x03{\"temp\": 21}";
    put("chat", "harmony_tools", chat8, sizeof chat8 - 1, NULL, 0, NULL, 0);
    put("chat", "gemma4_tools", chat9, sizeof chat9 - 1, NULL, 0, NULL, 0);
    put("chat", "gemma4e_tools", chat10, sizeof chat10 - 1, NULL, 0, NULL, 0);
    /* Gemma 3's tokenizer (bit 1): spaces and U+2581, tab and newline runs, HTML tags, turn
     * tokens, a character outside the vocab (U+10FFFD: byte fallback); ids incl. <0xNN> */
    static const char gtext[] = "<start_of_turn>user\n  Hi\t\tthere \xe2\x96\x81\xe2\x96\x81x\n\n\n<b>bold</b> "
                                "\xf4\x8f\xbf\xbd\xe6\x97\xa5\xe6\x9c\xac<end_of_turn>\n";
    put("tokenizer", "gemma_text", "\2", 1, gtext, sizeof gtext - 1, NULL, 0);
    int32_t gids[] = {2, 105, 2364, 107, 482, 381, 429, 427, 236781, 482, 138, 255968, 262144, 262145, -1};
    put("tokenizer", "gemma_ids", "\3", 1, gids, sizeof gids, NULL, 0);
    return 0;
}
