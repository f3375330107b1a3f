/* fuzz_gguf.c - the GGUF reader (gguf_open) on arbitrary bytes, then, when
 * the file opens, model binding (mdl_load -> ggm_load, cb_pack) and the
 * tokenizer from its metadata (ggm_tokenizer, one encode, the same as a
 * plain prompt: its ids between at most a BOS and an EOS). Oracle: no crash
 * or sanitizer report; a failure always says why, in one line naming the
 * file; an accepted file's tensors lie inside the mapping, aligned, with
 * byte counts matching their shapes and types; every key and tensor name is
 * findable; a loaded model's sizes are within the config limits. */
#include "config.h"
#include "cpu/cpu_backend.h"
#include "fuzz_common.h"
#include "gguf_model.h"
#include "model.h"
#include "tokenizer.h"

static void check_err(const char *path) {
    const char *e = dfl_lasterr();
    if (!e[0] || strchr(e, '\n') || !strstr(e, path)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fz_file("model.gguf", data, size);
    gguf_file g;
    if (gguf_open(&g, p) != 0) {
        check_err(p);
        return 0;
    }
    const uint8_t *lo = g.map.data, *hi = lo + g.map.size;
    volatile uint8_t sink = 0;
    for (int i = 0; i < g.n_tensors; i++) {
        const gguf_tensor *t = &g.t[i];
        const uint8_t *b = t->data;
        if (b < lo || b + t->nbytes > hi || (size_t)(b - lo - g.data_off) % g.alignment) abort();
        uint64_t numel = 1;
        for (int d = 0; d < 4; d++) numel *= (uint64_t)t->ne[d];
        if (numel / (uint64_t)ggml_blck_size(t->type) * ggml_type_size(t->type) != t->nbytes) abort();
        if (t->nbytes) sink ^= b[0] ^ b[t->nbytes - 1];
        if (gguf_find_tensor(&g, t->name) != t) abort();
    }
    for (int i = 0; i < g.n_kv; i++) {
        const gguf_kv *kv = &g.kv[i];
        if (gguf_find_kv(&g, kv->key) != kv) abort();
        if (kv->type == GGUF_ARRAY && kv->atype == GGUF_STRING && kv->n) {
            size_t n;
            const char *s = gguf_arr_str(kv, kv->n - 1, &n);
            if ((const uint8_t *)s < lo || (const uint8_t *)s + n > hi) abort();
        }
    }
    (void)sink;
    gguf_close(&g);
    mdl_model m;
    if (mdl_load(&m, p) == 0) {
        const cfg_model *c = &m.cfg;
        if (c->hidden > CFG_MAX_HIDDEN || c->n_layers > CFG_MAX_LAYERS || c->vocab > CFG_MAX_VOCAB ||
            (long long)c->n_heads * c->head_dim > CFG_MAX_HIDDEN || c->n_eos > CFG_MAX_EOS)
            abort();
        cb_pack(&m);
        cb_unpack(&m);
        mdl_free(&m);
    } else {
        check_err(p);
    }
    tok_tokenizer *t = ggm_tokenizer(p);
    if (t) {
        int32_t *ids;
        size_t n;
        if (tok_encode(t, "ab cd<|im_end|>", 15, &ids, &n) == 0) {
            /* a plain prompt: the same ids with at most add_bos_token's and add_eos_token's around them */
            int32_t *pids;
            size_t pn;
            if (tok_encode_prompt(t, "ab cd<|im_end|>", 15, &pids, &pn) != 0 || pn < n || pn > n + 2) abort();
            size_t off = 0;
            while (off < pn - n && memcmp(pids + off, ids, n * sizeof *ids)) off++;
            if (memcmp(pids + off, ids, n * sizeof *ids)) abort();
            free(pids);
            free(ids);
        }
        tok_free(t);
    } else {
        check_err(p);
    }
    return 0;
}
