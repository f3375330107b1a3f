#!/bin/sh
# tools/llama/q35_race.sh - one device call: dflash and llama.cpp on the same
# GGUF files (llama.cpp's converter + llama-quantize: BF16, Q4_K_M) of the
# synth Qwen3.5-4B shape. Builds dflash (gpu.sh build) and llama.cpp
# (tools/llama/bench.sh; the call carries .devdeps), then llama-bench and
# `dflash bench --backend cuda` on each file. About 5 minutes on a fresh
# H200 machine (llama.cpp's build 2 of them). Results in $OUT.
#   OUT=$OUT sh tools/llama/q35_race.sh
set -u
T0=$(date +%s)
sh tools/cuda/gpu.sh build > "$OUT/build.txt" 2>&1 || { tail -20 "$OUT/build.txt"; exit 1; }
D=$PWD/.devdeps/root; L=$D/usr/lib/x86_64-linux-gnu; export LD_LIBRARY_PATH=$L
export LLAMA_MODEL=/tmp/q35 LLAMA_TYPES="bf16 q4_k_m" LLAMA_REPS=3
rm -f /tmp/llama/prep.done /tmp/llama/models.done
[ -f /tmp/q35/config.json ] || ./dflash synth --shape qwen3.5-4b -o /tmp/q35 > /tmp/synth.log 2>&1; tail -2 /tmp/synth.log
echo "synth done at $(( $(date +%s) - T0 )) s"
LLAMA_WAIT=420 sh tools/llama/bench.sh run 2>&1 | tail -30
echo "llama done at $(( $(date +%s) - T0 )) s"
cat "$OUT/llama/llama-bench.md" 2>/dev/null | tail -12
for ty in bf16 q4_k_m; do
  f=/tmp/llama/gguf/s4b-$ty.gguf
  [ -s "$f" ] || { echo "no $f"; continue; }
  echo "=== dflash bench $ty ($(( $(date +%s) - T0 )) s)"
  timeout 150 ./dflash bench -m "$f" --tokenizer /tmp/q35 --backend cuda --reps 3 > "$OUT/dflash-$ty.txt" 2>&1
  grep -vE "^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$" "$OUT/dflash-$ty.txt" | tail -16
  grep -E "^ +(1|2|4|8|16) +[0-9.]+ " "$OUT/dflash-$ty.txt" | head -6
done
echo "all done at $(( $(date +%s) - T0 )) s"
