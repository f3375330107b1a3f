#!/bin/sh
# tools/cuda/fuse_ab.sh - the GEMM tails (DFLASH_CUDA_FUSE) against the
# separate row kernels in one device call: dflash bench on the synth
# Qwen3-4B shapes /tmp/s4b-$b for b in FUSE_AB_BITS (0 8 4), each variant of
# FUSE_AB_VARIANTS (DFLASH_CUDA_FUSE=1 = every tail, =0 = the separate
# kernels, =norm / =rope one kind of tail; "default" = the backend's, no
# tails until they are measured) in turn, FUSE_AB_ROUNDS rounds; decode
# T=1 and the T=16 row of each, and a table at the end (the whole T = 1..16
# table of each run is in $OUT/fuse-ab.txt). Run after gpu.sh build (waits for gpu.sh synth's
# /tmp/synth.done when another process makes the checkpoints).
set -u
OUT=${OUT:-/tmp/dflash-gpu}
mkdir -p "$OUT"
[ -f /tmp/synth.done ] || sh tools/cuda/gpu.sh synth > /dev/null 2>&1
tab=/tmp/fuse-ab-table.txt
printf "%-5s %-6s %-20s %12s %10s %9s\n" round bits variant "T=1 ms" "T=16 ms" "T16/T1" > $tab
for round in $(seq 1 ${FUSE_AB_ROUNDS:-1}); do
    for b in ${FUSE_AB_BITS:-0 8 4}; do
        for v in ${FUSE_AB_VARIANTS:-DFLASH_CUDA_FUSE=1 DFLASH_CUDA_FUSE=0 DFLASH_CUDA_FUSE=norm DFLASH_CUDA_FUSE=rope}; do
            vv=$v; [ "$v" = default ] && vv=""
            echo "== round $round /tmp/s4b-$b $v ($(date +%T))" >> "$OUT/fuse-ab.txt"
            env $vv timeout 90 ./dflash bench -m /tmp/s4b-$b --backend cuda --reps ${BENCH_REPS:-5} > /tmp/fuse-ab-one.txt 2>&1
            cat /tmp/fuse-ab-one.txt >> "$OUT/fuse-ab.txt"
            awk -v r=$round -v b=$b -v v="$v" '/decode T=1:/ { for (i = 1; i <= NF; i++) if ($i == "ms,") t1 = $(i - 1) }
                $1 == "16" && NF == 4 { t16 = $2; q = $3 }
                END { printf "%-5s %-6s %-20s %12s %10s %9s\n", r, b, v, t1, t16, q }' /tmp/fuse-ab-one.txt | tee -a $tab
        done
    done
done
cat $tab >> "$OUT/fuse-ab.txt"
echo "### fuse table"; cat $tab
