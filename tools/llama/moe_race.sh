#!/bin/sh
# tools/llama/moe_race.sh - one device call: dflash and llama.cpp on the synth
# Qwen3-30B-A3B shape. llama.cpp's converter needs a bf16 checkpoint (61 GB,
# over the machine's disk beside the GGUF), so the GGUF is written by
# `dflash convert --type q4_0` from the MLX 4-bit synth (llama.cpp's qwen3moe
# layout: tools' test_gguf convert_qwen3moe checks it against llama.cpp's own
# converter on the tiny checkpoint). Builds dflash (gpu.sh build) and, in the
# background, llama.cpp (tools/llama/bench.sh build; the call carries
# .devdeps); then llama-bench on the Q4_0 file and `dflash bench --backend
# cuda` on the MLX directory (with a synth draft) and on the same Q4_0 file.
# Results in $OUT; every stage prints its start time in seconds.
#   OUT=$OUT sh tools/llama/moe_race.sh
set -u
T0=$(date +%s)
at() { echo "=== $* ($(( $(date +%s) - T0 )) s)"; }
LW=${LLAMA_WORK:-/tmp/llama}; mkdir -p "$LW" "$OUT/llama"
(nice -n 10 sh tools/llama/bench.sh build > "$LW/build-bg.log" 2>&1 &)
sh tools/cuda/gpu.sh build > "$OUT/build.txt" 2>&1 || { tail -20 "$OUT/build.txt"; exit 1; }
D=$PWD/.devdeps/root; L=$D/usr/lib/x86_64-linux-gnu; export LD_LIBRARY_PATH=$L
M=/tmp/m30 G=/tmp/m30-q4_0.gguf
at synth
[ -f $M/config.json ] || ./dflash synth --shape qwen3-30b-a3b --bits 4 -o $M 2>&1 | tail -1
[ -f $M-draft/config.json ] || ./dflash synth --shape qwen3-30b-a3b --draft -o $M-draft 2>&1 | tail -1
at convert
[ -s $G ] || /usr/bin/time -v ./dflash convert $M -o $G --type q4_0 > "$OUT/convert.txt" 2>&1
grep -E "wrote|error|Maximum resident|Elapsed" "$OUT/convert.txt"; ls -la $G
at llama build wait
t=0; while [ ! -f "$LW/build.done" ] && [ ! -f "$LW/build.failed" ] && [ $t -lt 300 ]; do sleep 2; t=$((t + 2)); done
tail -3 "$LW/build-bg.log"
if [ -f "$LW/build.done" ]; then
  at llama-bench
  timeout 150 "$LW/build/bin/llama-bench" -m $G -ngl 99 -fa 1 -p 1,2,4,8,16 -n 128 -r ${LLAMA_REPS:-3} -o md \
      > "$OUT/llama/llama-bench-moe.md" 2> "$OUT/llama/llama-bench-moe.err"
  cat "$OUT/llama/llama-bench-moe.md"; tail -3 "$OUT/llama/llama-bench-moe.err"
fi
at dflash bench mlx
timeout 120 ./dflash bench -m $M -md $M-draft --backend cuda --reps ${BENCH_REPS:-5} > "$OUT/dflash-mlx.txt" 2>&1
grep -vE "^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$" "$OUT/dflash-mlx.txt" | tail -12
grep -E "^ +(1|2|4|8|16) +[0-9.]+ " "$OUT/dflash-mlx.txt" | head -6
at dflash bench gguf
/usr/bin/time -v timeout 150 ./dflash bench -m $G --backend cuda --reps ${BENCH_REPS:-5} > "$OUT/dflash-gguf.txt" 2>&1
grep -vE "^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$" "$OUT/dflash-gguf.txt" | grep -vE "^\s+(Page|Volun|Invol|Swaps|File|Socket|Signals|Average|Exit|Minor|Major|Percent|System|User|Command)" | tail -14
grep -E "^ +(1|2|4|8|16) +[0-9.]+ " "$OUT/dflash-gguf.txt" | head -6
at done
