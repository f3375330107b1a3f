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

#endif
