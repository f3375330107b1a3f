#!/bin/bash
# Regenerate tests/fixtures/*.ref.safetensors on the GPU machine (the reference
# runs in float32 on its CPU; transformers, tokenizers and safetensors are there).
# Run from the repository root, through the device tool:
#     run: bash tools/reference/regen.sh
# Results land under $OUT: fixtures.tar (tests/fixtures/*.safetensors),
# fixtures.log, make_tiny.log, models.diff (empty when make_tiny.py reproduces
# the committed tests/models bit for bit on that machine).
set -euo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/regen-out}
mkdir -p "$OUT"
python3 -c 'import torch, transformers, tokenizers, safetensors, numpy as np
print("torch", torch.__version__, "transformers", transformers.__version__, "tokenizers",
      tokenizers.__version__, "safetensors", safetensors.__version__, "numpy", np.__version__)'

# 1. the models are committed; check that make_tiny.py reproduces them here
rm -rf /tmp/regen-models
python3 tools/reference/make_tiny.py --out /tmp/regen-models > "$OUT/make_tiny.log" 2>&1
sums() { (cd "$1" && find . -type f | sort | xargs sha256sum); }
diff <(sums tests/models) <(sums /tmp/regen-models) > "$OUT/models.diff" \
    && echo "make_tiny.py reproduces tests/models bit for bit" \
    || echo "make_tiny.py output DIFFERS from tests/models (see models.diff)"

# 2. fixtures (HF float32 on CPU; cross-checked by ref_model in float32/float64)
python3 tools/reference/make_fixtures.py --models tests/models --out tests/fixtures \
    2>&1 | tee "$OUT/fixtures.log"
# 3. the MoE and Qwen3.5 families: their models and fixtures from their own scripts
#    (compare the models with tests/models: they must come out bit for bit)
for g in make_tiny_moe make_tiny_qwen35; do
    rm -rf /tmp/regen-$g
    python3 tools/reference/$g.py --out /tmp/regen-$g > "$OUT/$g.log" 2>&1 || echo "$g FAILED (see $g.log)"
    for f in /tmp/regen-$g/models/*/model.safetensors; do
        m=${f#/tmp/regen-$g/models/}
        cmp -s "$f" "tests/models/$m" && echo "$g: $m reproduced" || echo "$g: $m DIFFERS"
    done
    cp /tmp/regen-$g/fixtures/*.safetensors tests/fixtures/
done
tar cf "$OUT/fixtures.tar" tests/fixtures/*.safetensors
