/* backend.c - the backend registry: be_select (backend.h). */
#include <string.h>

#include "backend.h"
#include "util.h"

int be_check_path(const int *rows, int n, int fwd_T, int fwd_len, int len, const int *parent) {
    if (len != fwd_len + fwd_T || n < 1 || n > fwd_T) {
        dfl_seterr("tree_commit: %d rows of a last forward of %d (length %d, was %d before it)", n, fwd_T, len,
                   fwd_len);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        int r = rows[i], want = i ? rows[i - 1] : -1;
        int p = parent ? (r >= 0 && r < fwd_T ? parent[r] : -2) : r - 1;
        if (r < 0 || r >= fwd_T || p != want) {
            dfl_seterr("tree_commit: path entry %d is row %d, not a child of %s %d", i, r, i ? "row" : "the committed",
                       want);
            return -1;
        }
    }
    return 0;
}

int be_check_batch(const be_batch *b, const cfg_model *c, int len, int n_ctx) {
    if (b->T < 1 || b->T > BE_MAX_ROWS || b->n_logits < 0 || b->n_logits > b->T || b->n_taps < 0 ||
        b->n_taps > CFG_MAX_TAPS || (b->n_logits && !b->logits) || !b->tokens) {
        dfl_seterr("forward: bad batch (T=%d of at most %d, n_logits=%d%s, n_taps=%d)", b->T, BE_MAX_ROWS,
                   b->n_logits, b->n_logits && !b->logits ? " without a logits buffer" : "", b->n_taps);
        return -1;
    }
    if (b->keep_rows && b->T > BE_KEEP_ROWS) {
        dfl_seterr("forward: keep_rows with T=%d > %d rows", b->T, BE_KEEP_ROWS);
        return -1;
    }
    if (len + b->T > n_ctx) {
        dfl_seterr("context full: %d positions used + %d new > context size %d", len, b->T, n_ctx);
        return -1;
    }
    for (int t = 0; t < b->T; t++)
        if (b->tokens[t] < 0 || b->tokens[t] >= c->vocab) {
            dfl_seterr("token id %d is outside the model's vocabulary (vocab_size %d)", b->tokens[t], c->vocab);
            return -1;
        }
    if (b->tree_parent) {
        if (b->T > BE_KEEP_ROWS) {
            dfl_seterr("forward: a tree batch of %d rows (at most %d)", b->T, BE_KEEP_ROWS);
            return -1;
        }
        for (int t = 0; t < b->T; t++)
            if (b->tree_parent[t] < -1 || b->tree_parent[t] >= t) {
                dfl_seterr("forward: tree row %d has parent %d (want -1..%d: parents come first)", t,
                           b->tree_parent[t], t - 1);
                return -1;
            }
    }
    for (int i = 0; i < b->n_taps; i++)
        if (b->tap_layers[i] < 0 || b->tap_layers[i] >= c->n_layers) {
            dfl_seterr("hidden tap layer %d out of range (model has %d layers)", b->tap_layers[i], c->n_layers);
            return -1;
        }
    return 0;
}

const be_ops *be_select(const char *name) {
    int is_auto = !name || strcmp(name, "auto") == 0;
    if (name && strcmp(name, "cpu") == 0) return &be_cpu;
    if (!is_auto && strcmp(name, "cuda") != 0) {
        dfl_seterr("unknown backend '%s' (want auto, cpu or cuda)", name);
        return NULL;
    }
#ifdef DFLASH_CUDA
    char why[256] = "";
    if (be_cuda.probe(why, sizeof why)) return &be_cuda;
    if (!is_auto) {
        dfl_seterr("backend cuda: %s", why[0] ? why : "no usable device");
        return NULL;
    }
#else
    if (!is_auto) {
        dfl_seterr("backend cuda: not built in (rebuild with make CUDA=1)");
        return NULL;
    }
#endif
    return &be_cpu;
}
