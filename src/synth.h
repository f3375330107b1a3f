/* synth.h - write random-weight checkpoints with real layouts. Prefix: syn_.
 *
 * Used by tests (small models that exercise every loader path) and by
 * `dflash synth` (real shapes for speed measurements: speed does not depend
 * on the values). Weights are deterministic for a given seed. */
#ifndef DFL_SYNTH_H
#define DFL_SYNTH_H

#include <stdint.h>

#include "config.h"
#include "kernels.h"

typedef struct {
    cfg_model c;        /* shapes and options; c.q_bits/q_group select MLX layout */
    kn_dtype dtype;     /* KN_BF16, KN_F16 or KN_F32 for unquantized tensors */
    kn_dtype scale_dtype;
    uint64_t seed;
    int sharded;        /* write N shards + model.safetensors.index.json */
    float layer_scale;  /* decoder-layer matrices' std times this (0 = 1): small makes the
                           layers near identity, so greedy repeats the last token */
    int router_bits;    /* quantized MoE: the routers at these bits, group 64, with
                           per-tensor entries in "quantization" (as mlx-lm); 0 = q_bits */
} syn_spec;

/* A small Qwen3 shape (hidden 64, 2 layers, vocab 512) to start from. */
syn_spec syn_default(void);

/* Write config.json, generation_config.json (targets) and the safetensors
 * into DIR, all or nothing (util.h dfl_stage: a new DIR appears complete;
 * an existing DIR's files are replaced only once every file is written). */
int syn_write(const char *dir, const syn_spec *s);

#endif
