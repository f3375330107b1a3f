/* fuzz_model.c - config.json + generation_config.json + model.safetensors
 * through mdl_load (config validation, tensor binding, MLX layouts) and, when
 * the model loads, cb_pack. The input is three parts separated by NUL
 * bytes: config.json, generation_config.json (absent when empty), then the
 * safetensors bytes. Oracle: no crash or sanitizer report, no abort on a
 * huge allocation; a loaded model's sizes are within the config limits. */
#include "config.h"
#include "cpu/cpu_backend.h"
#include "fuzz_common.h"
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *a = memchr(data, 0, size);
    if (!a) return 0;
    const uint8_t *b = memchr(a + 1, 0, size - (size_t)(a + 1 - data));
    if (!b) return 0;
    fz_file("config.json", data, (size_t)(a - data));
    fz_file("generation_config.json", b > a + 1 ? a + 1 : NULL, (size_t)(b - a - 1));
    fz_file("model.safetensors", b + 1, size - (size_t)(b + 1 - data));
    mdl_model m;
    if (mdl_load(&m, fz_scratch()) != 0) return 0;
    const cfg_model *c = &m.cfg;
    if (c->hidden > CFG_MAX_HIDDEN || c->n_layers > CFG_MAX_LAYERS || c->vocab > CFG_MAX_VOCAB ||
        (long long)c->n_heads * c->head_dim > CFG_MAX_HIDDEN || c->n_eos > CFG_MAX_EOS || c->n_taps > CFG_MAX_TAPS)
        abort();
    cb_pack(&m);
    cb_unpack(&m);
    mdl_free(&m);
    return 0;
}
