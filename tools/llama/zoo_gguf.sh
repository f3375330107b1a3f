#!/bin/sh
# tools/llama/zoo_gguf.sh - the GGUF fixtures of the MoE and Qwen3.5 families,
# made by llama.cpp's own converter (convert_hf_to_gguf.py of the source in
# .devdeps/llama-src.tar.xz, made by tools/llama/fetch.sh) from the tiny test
# models: tests/models/tiny-qwen3moe, tiny-qwen35, tiny-qwen35moe and tiny-qwen3next as
# bf16, tiny-qwen35moe also as q8_0. Needs python3 with torch and numpy:
# the GPU machine, or here with Debian's packages (python3-torch,
# python3-numpy, python3-tqdm; convert.py stands in for transformers and
# torch's missing float8 types). Run from the repository root:
#   sh tools/llama/zoo_gguf.sh                      (GPU machine)
#   PATH=/usr/bin:$PATH sh tools/llama/zoo_gguf.sh  (Debian's python3 here)
# The committed tests/fixtures/gguf/tiny-{qwen3moe,qwen35,qwen35moe}-*.gguf
# came from the second form (2026-12-03; byte sizes equal to the GPU
# machine's run of 2026-12-02).
# Writes $OUT/zoo-gguf/NAME.gguf and NAME.log (the converter's output) for
# each, flat (10 files). The tiny models' 16384-token vocabulary is a cut of
# the Qwen3 tokenizer that the converter refuses, so they go through
# tools/llama/convert.py, which writes no tokenizer then (the tests compare
# logits, not text); it also names tiny-qwen3moe's dense layer (see there).
# Qwen3.5 conversions take --no-mtp: the tiny models have no MTP block.
# gpt-oss and Gemma-4: tools/llama/zoo_cut.py first cuts tiny-gptoss,
# tiny-gemma4 and tiny-gemma4-kv to 1024 tokens (their GGUF files would be
# 2-4 MB) and encodes tiny-gptoss's experts in MXFP4 as openai ships them;
# the converter writes those as bf16 with MXFP4 experts
# (tiny-gptoss-mxfp4-v1k, tiny-gemma4-v1k, tiny-gemma4-kv-v1k; test_gguf.c
# llama_converter_zoo2 makes the same checkpoints and compares).
# The committed tiny-{gptoss-mxfp4,gemma4,gemma4-kv}-v1k.gguf came from the
# second form (2026-12-06, llama.cpp v0.5.0 de3ff815).
set -u
R=$(pwd)
OUT=${OUT:-/tmp/dflash-gpu}
D=$OUT/zoo-gguf
W=$(mktemp -d "${TMPDIR:-/tmp}/zoo-gguf.XXXXXX")
trap 'rm -rf "$W"' EXIT
mkdir -p "$D"
tar -xJf "$R/.devdeps/llama-src.tar.xz" -C "$W" || { echo "zoo_gguf: no llama.cpp source (sh tools/llama/fetch.sh)"; exit 1; }
L=$W/llama.cpp
head -1 "$L/DFLASH-SOURCE"
python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__)'
rc=0
# conv NAME ARGS...: $D/NAME.gguf from the converter, its log in $D/NAME.log
conv() {
    name=$1
    shift
    if python3 "$R/tools/llama/convert.py" "$L" --outfile "$D/$name.gguf" "$@" > "$D/$name.log" 2>&1; then
        echo "zoo_gguf: $name.gguf $(wc -c < "$D/$name.gguf") bytes"
    else
        echo "zoo_gguf: $name FAILED; the end of its log:"
        tail -n 15 "$D/$name.log"
        rc=1
    fi
}
conv tiny-qwen3moe-bf16 --outtype bf16 tests/models/tiny-qwen3moe
conv tiny-qwen35-bf16 --outtype bf16 --no-mtp tests/models/tiny-qwen35
conv tiny-qwen35moe-bf16 --outtype bf16 --no-mtp tests/models/tiny-qwen35moe
conv tiny-qwen35moe-q8_0 --outtype q8_0 --no-mtp tests/models/tiny-qwen35moe
conv tiny-qwen3next-bf16 --outtype bf16 --no-mtp tests/models/tiny-qwen3next
if python3 "$R/tools/llama/zoo_cut.py" "$W/cut"; then
    conv tiny-gptoss-mxfp4-v1k --outtype bf16 "$W/cut/tiny-gptoss-mxfp4-v1k"
    conv tiny-gemma4-v1k --outtype bf16 "$W/cut/tiny-gemma4-v1k"
    conv tiny-gemma4-kv-v1k --outtype bf16 "$W/cut/tiny-gemma4-kv-v1k"
else
    echo "zoo_gguf: zoo_cut.py FAILED"
    rc=1
fi
ls -l "$D"
exit $rc
