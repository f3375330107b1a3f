#!/bin/sh
# The quantized GEMM's dequantization kernels side by side (bench/NOTES.md,
# "PRMT dequantization"): build, test-cuda, then the 4B-shape MLX 8-bit and
# 4-bit decode with DFLASH_CUDA_GEMM_DQ=0 (shift/mask) and =1 (PRMT),
# alternated. Run by the device tool
# from the repository root: sh tools/cuda/dq_bench.sh [test] (logs in $OUT).
set -u
OUT=${OUT:-/tmp/dflash-gpu}
mkdir -p "$OUT"
REPS=${BENCH_REPS:-20}
sh tools/cuda/gpu.sh build > "$OUT/build.log" 2>&1
D=$(pwd)/.devdeps/root
[ -d "$D" ] && export LD_LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu
( for b in 8 4; do [ -d /tmp/s4b-$b ] || ./dflash synth --shape qwen3-4b --bits $b -o /tmp/s4b-$b 2>&1 | tail -1; done
  touch /tmp/dq-synth.done ) > "$OUT/synth.log" 2>&1 &
case " $* " in *" test "*) sh tools/cuda/gpu.sh test > "$OUT/test.log" 2>&1 ;; esac
wait
CO=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null)
[ -n "$CO" ] && $CO -sass build-cuda/cuda_cuda_backend.o | awk '/Function : /{f=$3} /^ +\/\*[0-9a-f]+\*\//{n[f]++} END{for(k in n) print n[k], k}' | grep k_gemm | sort -k2 > "$OUT/sass-count.txt"
for b in 8 4; do
    for v in "DFLASH_CUDA_GEMM_DQ=0" "DFLASH_CUDA_GEMM_DQ=1" "DFLASH_CUDA_GEMM_DQ=0" "DFLASH_CUDA_GEMM_DQ=1"; do
        echo "== /tmp/s4b-$b $v ($(date +%T))"
        env $v timeout 120 ./dflash bench -m /tmp/s4b-$b --backend cuda --reps $REPS 2>&1
    done
done > "$OUT/bench.txt"
grep -E "^==|decode T=1|^ +(1|16) " "$OUT/bench.txt"
