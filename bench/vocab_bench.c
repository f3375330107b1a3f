/* vocab_bench.c - the draft block's cost for each draft vocabulary
 * (--draft-vocab; issue 23 item 5), interleaved so that load from other
 * processes hits every choice alike.
 *
 *   make bench-vocab
 *   build/vocab_bench TARGET DRAFT RANK_FILE [rounds] [depth]
 *
 * Each round times one draft block (all slots, the draft's block size, over
 * a context of `depth` target rows; dflash_time_draft_gen, median of 5)
 * for every choice in turn. Printed per choice: the median and the fastest
 * round (the least disturbed), and the median over rounds of the ratio to
 * the default's time in the same round. */
#include <stdio.h>
#include <stdlib.h>

#include "dflash.h"

typedef struct {
    const char *name;
    int draft_vocab, by_rank;
} choice;

static const choice choices[] = {
    {"default (ids < 32768)", 0, 0}, {"ids < 16384", 16384, 0}, {"freq:16384", 16384, 1},
    {"freq:32768", 32768, 1},        {"freq:65536", 65536, 1},  {"full", -1, 0},
};
enum { NC = sizeof choices / sizeof choices[0], MAX_ROUNDS = 200 };

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s TARGET DRAFT RANK_FILE [rounds] [depth]\n", argv[0]);
        return 2;
    }
    int rounds = argc > 4 ? atoi(argv[4]) : 15, depth = argc > 5 ? atoi(argv[5]) : 256;
    if (rounds < 1 || rounds > MAX_ROUNDS || depth < 1) {
        fprintf(stderr, "rounds 1..%d, depth >= 1\n", MAX_ROUNDS);
        return 2;
    }
    dflash_params p = dflash_default_params();
    dflash_model *m = dflash_load(argv[1], argv[2], &p);
    if (!m) {
        fprintf(stderr, "load: %s\n", dflash_error());
        return 1;
    }
    static double t[NC][MAX_ROUNDS], ratio[NC][MAX_ROUNDS];
    for (int r = 0; r < rounds; r++)
        for (int c = 0; c < NC; c++) {
            dflash_gen g = dflash_default_gen();
            g.draft_vocab = choices[c].draft_vocab;
            g.draft_vocab_rank = choices[c].by_rank ? argv[3] : NULL;
            if (dflash_time_draft_gen(m, &g, depth, 5, &t[c][r]) != 0) {
                fprintf(stderr, "%s: %s\n", choices[c].name, dflash_error());
                return 1;
            }
        }
    for (int c = 0; c < NC; c++)
        for (int r = 0; r < rounds; r++) ratio[c][r] = t[c][r] / t[0][r];
    dflash_info in;
    dflash_get_info(m, &in);
    printf("draft block (B=%d, all slots) at depth %d, %d interleaved rounds, %d threads, %s\n", in.block_size, depth,
           rounds, in.n_threads, in.kernels);
    printf("%-22s  median ms  fastest ms  x default (median of per-round ratios)\n", "--draft-vocab");
    for (int c = 0; c < NC; c++) {
        qsort(t[c], (size_t)rounds, sizeof(double), cmp_double);
        qsort(ratio[c], (size_t)rounds, sizeof(double), cmp_double);
        printf("%-22s  %9.2f  %10.2f  %6.2fx\n", choices[c].name, 1e3 * t[c][rounds / 2], 1e3 * t[c][0],
               ratio[c][rounds / 2]);
    }
    dflash_free(m);
    return 0;
}
