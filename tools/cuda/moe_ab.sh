#!/bin/sh
# tools/cuda/moe_ab.sh - MoE timing variants side by side in one device call:
# dflash bench on the synth Qwen3-30B-A3B 4-bit shape (and MOE_AB_MODELS),
# each variant of MOE_AB_VARIANTS (env settings; "default" = none) in turn,
# MOE_AB_ROUNDS rounds, then the per-kernel durations (gpu.sh nsys step).
# Run after gpu.sh build.
set -u
OUT=${OUT:-/tmp/dflash-gpu}
mkdir -p "$OUT"
m30=/tmp/moe-qwen3-30b-a3b-4
[ -d $m30 ] || ./dflash synth --shape qwen3-30b-a3b --bits 4 -o $m30 2>&1 | tail -1
for round in $(seq 1 ${MOE_AB_ROUNDS:-2}); do
    for m in ${MOE_AB_MODELS:-$m30}; do
        for v in ${MOE_AB_VARIANTS:-default DFLASH_CUDA_MOE_FUSE=0}; do
            vv=$v; [ "$v" = default ] && vv=""
            echo "== round $round $m $v"
            env $vv timeout 120 ./dflash bench -m "$m" --backend cuda --reps ${BENCH_REPS:-10} > /tmp/ab-one.txt 2>&1
            grep -E "decode T=1|^  (2|4|8|16) " /tmp/ab-one.txt
            cat /tmp/ab-one.txt >> "$OUT/moe-ab.txt"
        done
    done
done
