/* tree_bench.c - chain vs tree rounds on one model pair, interleaved per
 * prompt so that load from other processes hits every setting alike.
 *
 *   make bench-tree TREE_TARGET=models/demo/target TREE_DRAFT=models/demo/draft
 *   build/tree_bench TARGET DRAFT PROMPTS.jsonl [n_predict] [reps] [max_per_domain]
 *
 * For each prompt (chat template applied) every setting runs reps times in
 * turn; a setting's time for the prompt is its fastest rep (the least
 * disturbed). Per domain: tokens / summed time, tau (tokens committed per
 * drafting round), speed-up over greedy and over the chain (auto); every
 * output is checked against greedy's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dflash.h"

typedef struct {
    const char *name;
    int use_draft, draft_max, tree;
} setting;

static const setting settings[] = {
    {"greedy", 0, -1, 0},      {"chain auto", 1, -1, 0}, {"chain 15", 1, 15, 0}, {"tree 4", 1, -1, 4},
    {"tree 8", 1, -1, 8},      {"tree 16", 1, -1, 16},   {"tree 32", 1, -1, 32}, {"tree 64", 1, -1, 64},
    {"tree auto", 1, -1, -1},
};
enum { NS = sizeof settings / sizeof settings[0], MAXD = 8 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* the value of "key": "..." in a JSON line (no escapes but \" and \n kept as is) */
static char *field(const char *line, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": \"", key);
    const char *p = strstr(line, pat);
    if (!p) return NULL;
    p += strlen(pat);
    const char *e = p;
    while (*e && !(*e == '"' && e[-1] != '\\')) e++;
    char *s = malloc((size_t)(e - p) + 1);
    size_t k = 0;
    for (const char *c = p; c < e; c++) {
        if (*c == '\\' && c + 1 < e) {
            c++;
            s[k++] = *c == 'n' ? '\n' : *c;
        } else {
            s[k++] = *c;
        }
    }
    s[k] = 0;
    return s;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s TARGET DRAFT PROMPTS.jsonl [n_predict] [reps] [max_per_domain]\n", argv[0]);
        return 2;
    }
    int n_predict = argc > 4 ? atoi(argv[4]) : 128, reps = argc > 5 ? atoi(argv[5]) : 2;
    int max_per = argc > 6 ? atoi(argv[6]) : 1000;
    dflash_params pp = dflash_default_params();
    pp.n_ctx = 2048;
    dflash_model *m = dflash_load(argv[1], argv[2], &pp);
    if (!m) {
        fprintf(stderr, "load: %s\n", dflash_error());
        return 1;
    }
    dflash_info in;
    dflash_get_info(m, &in);
    printf("backend %s (%s)\n", in.backend, in.kernels);
    FILE *f = fopen(argv[3], "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", argv[3]);
        return 1;
    }
    char *domains[MAXD] = {0};
    int nd = 0, count[MAXD] = {0}, mism = 0;
    double secs[MAXD][NS] = {{0}}, toks[MAXD][NS] = {{0}}, tau_sum[MAXD][NS] = {{0}};
    int tau_n[MAXD][NS] = {{0}};
    long drafted[MAXD][NS] = {{0}}, rounds[MAXD][NS] = {{0}}, plain[MAXD][NS] = {{0}}; /* first reps' */
    static char line[1 << 16];
    while (fgets(line, sizeof line, f)) {
        char *dom = field(line, "domain"), *pr = field(line, "prompt");
        if (!dom || !pr) {
            free(dom);
            free(pr);
            continue;
        }
        int d = 0;
        while (d < nd && strcmp(domains[d], dom)) d++;
        if (d == nd && nd < MAXD) domains[nd++] = strdup(dom);
        free(dom);
        if (d == MAXD || count[d] >= max_per) {
            free(pr);
            continue;
        }
        count[d]++;
        dflash_message msg = {"user", pr};
        char *chat = dflash_chat_prompt(m, &msg, 1, 1, 0);
        int32_t *ids;
        size_t n;
        if (!chat || dflash_tokenize(m, chat, strlen(chat), &ids, &n) != 0) {
            fprintf(stderr, "prompt: %s\n", dflash_error());
            return 1;
        }
        int32_t *ref = NULL;
        size_t nref = 0;
        for (int s = 0; s < NS; s++) {
            double best = 1e30;
            for (int r = 0; r < reps; r++) {
                dflash_gen g = dflash_default_gen();
                g.n_predict = n_predict;
                g.use_draft = settings[s].use_draft;
                g.draft_max = settings[s].draft_max;
                g.tree = settings[s].tree;
                dflash_stats st;
                int32_t *out;
                size_t nout;
                dflash_reset(m);
                double t0 = now();
                if (dflash_generate(m, ids, n, &g, NULL, NULL, &out, &nout, &st) != 0) {
                    fprintf(stderr, "%s: %s\n", settings[s].name, dflash_error());
                    return 1;
                }
                double dt = now() - t0 - st.prompt_s; /* decode only */
                best = dt < best ? dt : best;
                if (r == 0) {
                    toks[d][s] += (double)nout;
                    if (st.rounds) tau_sum[d][s] += st.tau, tau_n[d][s]++;
                    drafted[d][s] += st.n_drafted, rounds[d][s] += st.rounds, plain[d][s] += st.plain_steps;
                    if (s == 0) {
                        ref = out;
                        nref = nout;
                        continue;
                    }
                    mism += nout != nref || memcmp(out, ref, sizeof(int32_t) * nout);
                }
                free(out);
            }
            secs[d][s] += best;
        }
        free(ref);
        free(ids);
        free(chat);
        free(pr);
    }
    fclose(f);
    /* k: drafts a drafting round (trees: the nodes past the anchor); plain: rounds that drafted nothing */
    printf("%-8s %-11s %7s %9s %6s %9s %9s %6s %6s\n", "domain", "setting", "prompts", "tok/s", "tau", "x greedy",
           "x chain", "k", "plain");
    for (int d = 0; d < nd; d++)
        for (int s = 0; s < NS; s++) {
            double rate = toks[d][s] / secs[d][s], g = toks[d][0] / secs[d][0], c = toks[d][1] / secs[d][1];
            printf("%-8s %-11s %7d %9.1f %6.2f %8.2fx %8.2fx %6.2f %6ld\n", domains[d], settings[s].name, count[d],
                   rate, tau_n[d][s] ? tau_sum[d][s] / tau_n[d][s] : 1.0, rate / g, rate / c,
                   rounds[d][s] ? (double)drafted[d][s] / rounds[d][s] : 0.0, plain[d][s]);
        }
    printf("outputs differing from greedy: %d\n", mism);
    dflash_free(m);
    return mism != 0;
}
