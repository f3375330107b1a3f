#!/bin/sh
# tools/cuda/bin_ab.sh - this tree's ./dflash against an older version in the
# same device call: dflash bench on the 4B-shape synth models (gpu.sh synth)
# at the context depths of AB_RUNS ("bits,depth ..."), each run of the new
# binary followed by the same run of the old one. The old one is built here
# from a copy of this tree with AB_PATCH (a file of `git diff OLD` output)
# applied in reverse, with gpu.sh's build environment (the call's size limit
# leaves no room to carry a second binary). Run after `gpu.sh build`; one
# line per run, logs in $OUT/bin-ab.txt. AB_PREFIX (default /tmp/s4b-) names
# the models: AB_PREFIX + bits; a prefix other than the default is made by
# `dflash synth --shape $AB_SHAPE --bits B`. AB_PREFILL (bytes of README
# text, e.g. "2000 32000"): prompt processing of each bits of AB_RUNS, new
# then old, two runs each.
set -u
OUT=${OUT:-/tmp/dflash-gpu}
mkdir -p "$OUT"
R=$(pwd) D=$(pwd)/.devdeps/root
L=$D/usr/lib/x86_64-linux-gnu
export C_INCLUDE_PATH=$D/usr/include LIBRARY_PATH=$L LD_LIBRARY_PATH=$L DFLASH_NO_DEPS=1 PATH=/tmp/pcshim:$PATH
[ -f "${AB_PATCH:-}" ] || { echo "bin_ab: AB_PATCH must name a diff file" >&2; exit 1; }
# AB_REUSE=1: keep an old binary built by an earlier run (or AB_BUILD_ONLY=1)
if [ "${AB_REUSE:-0}" != 1 ] || [ ! -x /tmp/ab-old/dflash ]; then
    rm -rf /tmp/ab-old && mkdir /tmp/ab-old
    tar cf - --exclude=./build --exclude=./build-cuda --exclude=./dflash . | tar xf - -C /tmp/ab-old
    (cd /tmp/ab-old && patch -s -R -p1 < "$R/$AB_PATCH" && make -s -j"$(nproc)" CUDA=1 dflash > "$OUT/ab-old-build.log" 2>&1) &
fi
P=${AB_PREFIX:-/tmp/s4b-}
if [ "$P" = /tmp/s4b- ]; then
    [ -f /tmp/synth.done ] || sh tools/cuda/gpu.sh synth > "$OUT/synth.log" 2>&1
else
    for run in ${AB_RUNS:-4,256}; do
        b=${run%,*}
        [ -d "$P$b" ] || ./dflash synth --shape "${AB_SHAPE:?AB_SHAPE names the shape of $P}" --bits "$b" -o "$P$b" 2>&1 | tail -1
    done
fi
wait
[ -x /tmp/ab-old/dflash ] || { echo "bin_ab: the old build failed"; tail -20 "$OUT/ab-old-build.log"; exit 1; }
[ "${AB_BUILD_ONLY:-0}" = 1 ] && exit 0
for run in ${AB_RUNS:-4,256 4,4096}; do
    b=${run%,*} dp=${run#*,}
    for v in new old; do
        bin=./dflash; [ $v = old ] && bin=/tmp/ab-old/dflash
        timeout ${AB_TIMEOUT:-100} $bin bench -m $P$b --backend cuda --depth "$dp" --reps ${AB_REPS:-10} \
            > /tmp/bin-ab-one.txt 2>&1
        cat /tmp/bin-ab-one.txt >> "$OUT/bin-ab.txt"
        echo "bits $b depth $dp $v: $(grep -o 'decode T=1: [0-9.]* ms, [0-9.]* tok/s' /tmp/bin-ab-one.txt)" \
             "| T=16 ms, T16/T1: $(awk '$1 == "16" && NF == 4 {print $2, $3}' /tmp/bin-ab-one.txt)"
    done
done
for b in $(for run in ${AB_RUNS:-4,256 4,4096}; do echo ${run%,*}; done | sort -u); do
    for nb in ${AB_PREFILL:-}; do
        head -c "$nb" README.md > /tmp/ab-prompt.txt
        for v in new old new old; do
            bin=./dflash; [ $v = old ] && bin=/tmp/ab-old/dflash
            timeout ${AB_TIMEOUT:-100} $bin generate -m $P$b --backend cuda --tokenizer models/qwen3-tokenizer -c 16384 \
                -f /tmp/ab-prompt.txt -n 1 > /dev/null 2> /tmp/ab-err.txt
            echo "prefill $P$b $nb bytes $v: $(grep '^prompt:' /tmp/ab-err.txt)"
        done
    done
done
