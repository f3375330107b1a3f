/* seq_mem.c - resident memory a sequence (dflash_seq_new, a --parallel
 * slot) adds: the model's own sequence generates once, then S sequences are
 * made and each generates a sampled and a greedy reply of N tokens (DFlash
 * on) to the same prompt; VmRSS before and after, per sequence. The KV cache
 * is allocated for the whole context (dflash_info.seq_kv_bytes) but its
 * CPU takes its full-attention part in pages of 16 positions as they are
 * written (dflash_kv_stats), so N decides how much of it counts; then every
 * sequence is reset (dflash_seq_reset gives its pages back) and VmRSS is
 * read again.
 * make bench-seq-mem [SEQMEM_ARGS="S CTX N"] (default 4 1024 64) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dflash.h"

enum { MAX_SEQS = 64 };

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) v = atol(line + 6);
    if (f) fclose(f);
    return v;
}

int main(int argc, char **argv) {
    int S = argc > 1 ? atoi(argv[1]) : 4, ctx = argc > 2 ? atoi(argv[2]) : 1024, N = argc > 3 ? atoi(argv[3]) : 64;
    if (S < 1 || S > MAX_SEQS || ctx < 64 || N < 1 || N > ctx - 32) {
        fprintf(stderr, "usage: seq_mem [S 1..%d] [CTX >= 64] [N 1..CTX-32]\n", MAX_SEQS);
        return 2;
    }
    dflash_params p = dflash_default_params();
    p.n_ctx = ctx;
    dflash_model *m = dflash_load("models/demo/target", "models/demo/draft", &p);
    if (!m) {
        fprintf(stderr, "seq_mem: %s\n", dflash_error());
        return 1;
    }
    dflash_info in;
    dflash_get_info(m, &in);
    const char *text = "Solve for x: 3x + 5 = 20. Then explain each step.";
    int32_t *ids = NULL;
    size_t n = 0;
    if (dflash_tokenize(m, text, strlen(text), &ids, &n) != 0) {
        fprintf(stderr, "seq_mem: %s\n", dflash_error());
        return 1;
    }
    dflash_gen g = dflash_default_gen();
    g.n_predict = N;
    g.ignore_eos = 1;
    g.temp = 0.8f;
    g.seed = 1;
    int rc = dflash_generate(m, ids, n, &g, NULL, NULL, NULL, NULL, NULL);
    long r0 = rss_kib();
    dflash_seq *s[MAX_SEQS] = {NULL};
    for (int i = 0; i < S && rc == 0; i++) {
        s[i] = dflash_seq_new(m);
        rc = s[i] ? dflash_seq_generate(s[i], ids, n, &g, NULL, NULL, NULL, NULL, NULL) : -1;
    }
    g.temp = 0.0f;
    for (int i = 0; i < S && rc == 0; i++) rc = dflash_seq_generate(s[i], ids, n, &g, NULL, NULL, NULL, NULL, NULL);
    long r1 = rss_kib();
    dflash_kv_info kv1, kv2;
    dflash_kv_stats(m, &kv1);
    for (int i = 0; i < S && rc == 0; i++) dflash_seq_reset(s[i]);
    long r2 = rss_kib();
    dflash_kv_stats(m, &kv2);
    if (rc != 0)
        fprintf(stderr, "seq_mem: %s\n", dflash_error());
    else
        printf("demo pair, context %d, %zu prompt + %d tokens: seq_kv_bytes %.1f MiB; resident memory +%.1f MiB per "
               "sequence (%d sequences), KV pages held %.1f MiB; after every sequence's reset: +%.1f MiB per "
               "sequence, KV pages held %.1f MiB\n",
               ctx, n, N, (double)in.seq_kv_bytes / 1048576.0, (double)(r1 - r0) / 1024.0 / S, S,
               kv1.used / 1048576.0, (double)(r2 - r0) / 1024.0 / S, kv2.used / 1048576.0);
    for (int i = 0; i < S; i++) dflash_seq_free(s[i]);
    dflash_free(m);
    free(ids);
    return rc != 0;
}
