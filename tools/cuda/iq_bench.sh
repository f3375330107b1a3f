#!/bin/sh
# tools/cuda/iq_bench.sh - the Q4 GEMM kernels side by side in one device
# call: the integer-MMA kernel (default) and the dequantizing one
# (DFLASH_CUDA_GEMM_DQ=1) and the integer one with unroll 4 past one column
# tile (DFLASH_CUDA_GEMM_IQU=4; the default is 2), alternating (IQ_VARIANTS), on the synth Qwen3-4B 4-bit shape
# and the Qwen3-30B-A3B 4-bit MoE shape (IQ_MODELS), 8-bit as a control.
# Run after gpu.sh build (and its synth step); prints decode and T=16 lines.
set -u
OUT=${OUT:-/tmp/dflash-gpu}
mkdir -p "$OUT"
[ -d /tmp/s4b-4 ] || ./dflash synth --shape qwen3-4b --bits 4 -o /tmp/s4b-4 2>&1 | tail -1
[ -d /tmp/s4b-8 ] || ./dflash synth --shape qwen3-4b --bits 8 -o /tmp/s4b-8 2>&1 | tail -1
[ -d /tmp/moe-qwen3-30b-a3b-4 ] || ./dflash synth --shape qwen3-30b-a3b --bits 4 -o /tmp/moe-qwen3-30b-a3b-4 2>&1 | tail -1
for round in 1 2; do
    for m in ${IQ_MODELS:-/tmp/s4b-4 /tmp/moe-qwen3-30b-a3b-4 /tmp/s4b-8}; do
        for v in ${IQ_VARIANTS:-DFLASH_CUDA_GEMM_DQ=2 DFLASH_CUDA_GEMM_IQU=4 DFLASH_CUDA_GEMM_DQ=1}; do
            echo "== round $round $m $v"
            env $v timeout 120 ./dflash bench -m "$m" --backend cuda --reps ${BENCH_REPS:-10} > /tmp/iq-one.txt 2>&1
            grep -E "decode T=1|^  (2|4|8|16) " /tmp/iq-one.txt
            cat /tmp/iq-one.txt >> "$OUT/iq-bench.txt"
        done
    done
done
