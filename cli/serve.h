/* serve.h - `dflash serve`: the OpenAI-compatible HTTP server (cli/serve.c). */
#ifndef DFLASH_SERVE_H
#define DFLASH_SERVE_H

/* argv[1] is "serve". Returns the process exit status. */
int cmd_serve(int argc, char **argv);

/* cli/main.c's command-line helpers, shared with serve.c: a usage error
 * ("dflash CMD: MSG ARG", the --help hint, exit status 2), and the integer
 * value v of option flag, which must lie in lo..hi (else a usage error). */
_Noreturn void cli_usage_err(const char *cmd, const char *msg, const char *arg);
long cli_parse_int(const char *cmd, const char *flag, const char *v, long lo, long hi);

/* --draft-vocab's value (generate, chat, bench, serve): dflash_gen.draft_vocab
 * and draft_vocab_rank. */
typedef struct {
    int n;           /* draft_vocab: N ids, -1 full, 0 auto (or every id a rank file lists) */
    char rank[4096]; /* draft_vocab_rank: FILE[:N]'s file or freq:N's vocab_rank.txt; "" = none */
    int freq;        /* freq:N, its file found by cli_find_freq_rank */
} cli_draft_vocab;
/* Parse N | full | freq:N | FILE | FILE:N into *dv (a usage error, exit 2,
 * for anything else or a FILE that is not a regular file). */
void cli_parse_draft_vocab(const char *cmd, const char *flag, const char *v, cli_draft_vocab *dv);
/* freq:N: dv->rank = vocab_rank.txt in the tokenizer's directory, else the
 * model's (exit 2 naming both when neither has one); else nothing. */
void cli_find_freq_rank(const char *cmd, cli_draft_vocab *dv, const char *tokenizer, const char *model);

#endif
