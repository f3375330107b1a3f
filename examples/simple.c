/* simple.c - embedding libdflash: load a target (and optionally a DFlash
 * draft), render a chat prompt, stream the answer, print the statistics.
 *
 *   cc examples/simple.c $(pkg-config --cflags --libs dflash) -o simple     (after make install)
 *   cc -Iinclude examples/simple.c build/libdflash.a $(pkg-config --libs libcjson libpcre2-8) -lutf8proc -lm -pthread
 *   ./simple MODEL_DIR [DRAFT_DIR] "question"
 */
#include <stdio.h>
#include <stdlib.h>

#include "dflash.h"

static int on_token(void *ud, int32_t id, const char *text, size_t len) {
    (void)ud;
    (void)id;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0; /* non-zero would stop generation */
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL_DIR [DRAFT_DIR] QUESTION\n", argv[0]);
        return 2;
    }
    const char *draft = argc > 3 ? argv[2] : NULL, *question = argv[argc - 1];
    dflash_params p = dflash_default_params();
    dflash_model *m = dflash_load(argv[1], draft, &p);
    if (!m) {
        fprintf(stderr, "error: %s\n", dflash_error());
        return 1;
    }
    dflash_message msg = {"user", question};
    char *prompt = dflash_chat_prompt(m, &msg, 1, 1, 0); /* thinking off */
    if (!prompt) {
        fprintf(stderr, "error: %s\n", dflash_error());
        dflash_free(m);
        return 1;
    }
    dflash_gen g = dflash_default_gen();
    g.n_predict = 64;
    dflash_stats st;
    int rc = dflash_generate_text(m, prompt, &g, on_token, NULL, &st);
    free(prompt);
    if (rc != 0) fprintf(stderr, "error: %s\n", dflash_error());
    else
        fprintf(stderr, "\n%d tokens, %.1f tok/s, tau %.2f over %d rounds\n", st.n_tokens,
                st.decode_s > 0 ? st.n_tokens / st.decode_s : 0, st.tau, st.rounds);
    dflash_free(m);
    return rc ? 1 : 0;
}
