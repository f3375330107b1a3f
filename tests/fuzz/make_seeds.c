/* make_seeds.c - writes the committed seed corpora of tests/fuzz/seeds/ (run
 * once from the repository root: cc ... tests/fuzz/make_seeds.c
 * build/libdflash.a; see docs/reliability.md). Small synthetic models in
 * every loader path (BF16, F32, MLX 4/8-bit, sharded index aside, Llama,
 * draft), tokenizer texts and chat message lists. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

int main(void) {
    const char *dirs[] = {"safetensors", "model", "tokenizer", "chat"};
    mkdir("tests/fuzz/seeds", 0777);
    for (int i = 0; i < 4; i++) {
        char p[256];
        snprintf(p, sizeof p, "tests/fuzz/seeds/%s", dirs[i]);
        mkdir(p, 0777);
    }
    syn_spec s = small();
    model("bf16", s);
    s.dtype = KN_F32;
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
    s.c.is_draft = 1;
    s.c.block_size = 4;
    s.c.mask_token_id = 5;
    s.c.n_target_layers = 4;
    s.c.n_taps = 1;
    s.c.tap_layers[0] = 1;
    s.c.tie_embeddings = 0;
    model("draft", s);
    put("safetensors", "empty", "\x02\0\0\0\0\0\0\0{}", 10, NULL, 0, NULL, 0);

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
    return 0;
}
