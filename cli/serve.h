/* serve.h - `dflash serve`: the OpenAI-compatible HTTP server (cli/serve.c). */
#ifndef DFLASH_SERVE_H
#define DFLASH_SERVE_H

/* argv[1] is "serve". Returns the process exit status. */
int cmd_serve(int argc, char **argv);

#endif
