#!/bin/sh
# tools/llama/bench.sh - llama.cpp side by side with dflash on the GPU machine.
# Builds llama.cpp (CUDA) from .devdeps/llama-src.tar.xz (made here by
# tools/llama/fetch.sh), converts the dflash synth Qwen3-4B-shaped checkpoint
# to GGUF, quantizes it and runs llama-bench. Run from the repository root:
#   sh tools/llama/bench.sh build   untar, configure, build llama-bench and llama-quantize
#   sh tools/llama/bench.sh prep    build, then GGUF bf16 + Q8_0/Q4_K_M/Q4_0 of $LLAMA_MODEL
#   sh tools/llama/bench.sh run     wait for a prep started earlier (or do it), then llama-bench
#   sh tools/llama/bench.sh all     prep and run in the foreground
# tools/cuda/gpu.sh starts `prep` in the background at the start of a call
# (nice'd, CPU only) and runs `run` as its step `llama`.
# Environment: OUT (results: $OUT/llama/llama-bench.md and .jsonl, the only
# two files), LLAMA_WORK (/tmp/llama: source, build, GGUF files, logs),
# LLAMA_MODEL (/tmp/s4b-0), LLAMA_TYPES (bf16 q8_0 q4_k_m q4_0), LLAMA_REPS (5),
# LLAMA_CUDA (1; 0 for a CPU-only build), LLAMA_ARCH (90), LLAMA_JOBS (nproc),
# LLAMA_WAIT (seconds to wait for the build, the checkpoint or the prep: 600),
# LLAMA_DEPTHS (e.g. "256,4096,16384,32768": instead of the T sweep, FA on,
# pp1, pp16 and tg128 at each context depth, llama-bench -d).
set -u
R=$(pwd)
OUT=${OUT:-/tmp/dflash-gpu}
LW=${LLAMA_WORK:-/tmp/llama}
SRC=${LLAMA_SRC:-$R/.devdeps/llama-src.tar.xz}
MODEL=${LLAMA_MODEL:-/tmp/s4b-0}
TYPES=${LLAMA_TYPES:-bf16 q8_0 q4_k_m q4_0}
REPS=${LLAMA_REPS:-5}
JOBS=${LLAMA_JOBS:-$(nproc)}
WAIT=${LLAMA_WAIT:-600}
# a Qwen3.5 checkpoint without an MTP block (dflash synth's) needs --no-mtp
CONVERT_ARGS=
grep -q '"model_type":[[:space:]]*"qwen3_5' "$MODEL/config.json" 2>/dev/null && CONVERT_ARGS=--no-mtp
RES=$OUT/llama
B=$LW/build/bin
G=$LW/gguf
mkdir -p "$LW" "$RES" "$G"

now() { date +%s; }
log() { echo "### llama: $* ($(date +%T))"; }

# wait_for FILE FAILFILE WHAT: 0 once FILE exists, 1 on FAILFILE or after $WAIT s
wait_for() {
    t=0
    while [ ! -f "$1" ]; do
        [ -n "$2" ] && [ -f "$2" ] && { echo "llama: $3 failed"; return 1; }
        [ "$t" -ge "$WAIT" ] && { echo "llama: gave up waiting ${WAIT}s for $3"; return 1; }
        sleep 2; t=$((t + 2))
    done
}

do_build() {
    rm -f "$LW/build.done" "$LW/build.failed"
    t0=$(now)
    if [ -x "$B/llama-bench" ] && [ -x "$B/llama-quantize" ] && [ -x "$B/llama-speculative-simple" ] && [ "${LLAMA_REBUILD:-0}" = 0 ]; then
        echo "llama: already built in $LW/build"; echo 0 > "$LW/build.done"; return 0
    fi
    [ -f "$SRC" ] || { echo "llama: no $SRC (run sh tools/llama/fetch.sh here and carry .devdeps)"; touch "$LW/build.failed"; return 1; }
    rm -rf "$LW/llama.cpp"
    if ! tar -xJf "$SRC" -C "$LW" 2>/dev/null; then
        # no xz on the machine: Python's lzma reads it
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$SRC" "$LW" ||
            { echo "llama: cannot unpack $SRC"; touch "$LW/build.failed"; return 1; }
    fi
    cat "$LW/llama.cpp/DFLASH-SOURCE"
    commit=$(sed -n 's/.*(commit \([0-9a-f]\{8\}\).*/\1/p' "$LW/llama.cpp/DFLASH-SOURCE")
    gen=""; command -v ninja > /dev/null 2>&1 && gen="-G Ninja"
    cuda="-DGGML_CUDA=OFF"
    if [ "${LLAMA_CUDA:-1}" != 0 ]; then
        cuda="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=${LLAMA_ARCH:-90} -DGGML_CUDA_NCCL=OFF"
        if ! command -v nvcc > /dev/null 2>&1 && [ -z "${CUDACXX:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
            export CUDACXX=/usr/local/cuda/bin/nvcc
        fi
    fi
    # LLAMA_CPU_ISA=avx2: the CPU code for AVX2+FMA+F16C only (no AVX-512,
    # no AVX-VNNI), for races forced to AVX2 on an AVX-512 host; default:
    # the host's own instruction sets (GGML_NATIVE)
    isa="-DGGML_NATIVE=ON"
    [ "${LLAMA_CPU_ISA:-native}" = avx2 ] &&
        isa="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF"
    # shellcheck disable=SC2086 # $gen, $cuda and $isa are lists of words
    if cmake -S "$LW/llama.cpp" -B "$LW/build" $gen $cuda -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_COMMIT="${commit:-unknown}" \
        $isa -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMON=ON \
        > "$LW/configure.log" 2>&1 &&
       cmake --build "$LW/build" --target llama-bench llama-quantize llama-simple llama-speculative-simple llama-server -j "$JOBS" > "$LW/build.log" 2>&1; then
        grep -E "CUDA compiler identification|Using CMAKE_CUDA_ARCHITECTURES" "$LW/configure.log"
        echo $(($(now) - t0)) > "$LW/build.done"
        echo "llama: built llama-bench, -quantize, -simple, -speculative-simple in $(cat "$LW/build.done") s ($JOBS jobs)"
    else
        echo "llama: build FAILED after $(($(now) - t0)) s; the end of the logs:"
        tail -5 "$LW/configure.log"; grep -E "error|Error" "$LW/build.log" | head -20; tail -5 "$LW/build.log"
        touch "$LW/build.failed"
        return 1
    fi
}

gguf_name() { echo "$G/s4b-$1.gguf"; }

# GGUF bf16 from the HF checkpoint, then the quantized types from it
do_models() {
    rm -f "$LW/models.done"
    # gpu.sh's synth step touches synth.done once every checkpoint is whole
    if [ "$MODEL" = /tmp/s4b-0 ]; then
        wait_for /tmp/synth.done "" "gpu.sh synth" || return 1
    fi
    case $MODEL in /tmp/zoo2-*) wait_for /tmp/zoo2.done "" "gpu.sh zoo2synth" || return 1 ;; esac
    [ -f "$MODEL/config.json" ] || { echo "llama: no checkpoint $MODEL"; return 1; }
    base=$(gguf_name bf16)
    if [ ! -s "$base" ]; then
        t0=$(now)
        if CUDA_VISIBLE_DEVICES='' PYTHONUNBUFFERED=1 python3 "$R/tools/llama/convert.py" "$LW/llama.cpp" --outtype bf16 \
            $CONVERT_ARGS --outfile "$base.tmp" "$MODEL" > "$LW/convert.log" 2>&1; then
            grep "dflash:" "$LW/convert.log"
            mv "$base.tmp" "$base"
            echo "llama: converted $MODEL to GGUF bf16 in $(($(now) - t0)) s ($(du -h "$base" | cut -f1))"
        else
            echo "llama: convert_hf_to_gguf FAILED after $(($(now) - t0)) s:"; tail -15 "$LW/convert.log"
            rm -f "$base.tmp"; return 1
        fi
    fi
    wait_for "$LW/build.done" "$LW/build.failed" "the build" || return 1
    for ty in $TYPES; do
        [ "$ty" = bf16 ] && continue
        f=$(gguf_name "$ty")
        [ -s "$f" ] && continue
        t0=$(now)
        up=$(echo "$ty" | tr "[:lower:]" "[:upper:]")
        if CUDA_VISIBLE_DEVICES='' "$B/llama-quantize" "$base" "$f.tmp" "$up" "$JOBS" > "$LW/quantize-$ty.log" 2>&1; then
            mv "$f.tmp" "$f"
            echo "llama: quantized to $up in $(($(now) - t0)) s ($(du -h "$f" | cut -f1))"
        else
            echo "llama: llama-quantize $up FAILED:"; tail -5 "$LW/quantize-$ty.log"; rm -f "$f.tmp"
        fi
    done
    touch "$LW/models.done"
}

do_prep() {
    rm -f "$LW/prep.done"
    do_build
    do_models
    touch "$LW/prep.done"
}

# one llama-bench run: markdown to llama-bench.md, one JSON object a line to
# llama-bench.jsonl; a failing run is reported and the next one runs
lbench() {
    label=$1; shift
    t0=$(now)
    echo "#### $label" >> "$RES/llama-bench.md"
    "$B/llama-bench" "$@" -r "$REPS" -o md -oe jsonl > "$LW/lb.out" 2> "$LW/lb.err"
    rc=$?
    cat "$LW/lb.out" >> "$RES/llama-bench.md"
    grep '^{' "$LW/lb.err" >> "$RES/llama-bench.jsonl"
    if [ $rc -ne 0 ]; then
        echo "llama-bench exit $rc:" >> "$RES/llama-bench.md"
        grep -v '^{' "$LW/lb.err" | tail -8 | tee -a "$RES/llama-bench.md"
    fi
    echo >> "$RES/llama-bench.md"
    echo "llama: $label: exit $rc, $(($(now) - t0)) s"
}

summary() {
    python3 - "$RES/llama-bench.jsonl" "$REPS" <<'EOF'
import json, sys
rows = []
for line in open(sys.argv[1]):
    try: rows.append(json.loads(line))
    except ValueError: pass
def fa(r):
    v = r.get("flash_attn")
    return {True: "on", False: "off", 1: "on", 0: "off"}.get(v, str(v))
def key(r):
    return (r.get("type_k", ""), r.get("model_type", ""), r.get("model_filename", ""))
if rows:
    r0 = rows[0]
    print("llama.cpp %s, %s %s, %d reps; time per call in ms" % (r0.get("build_commit", "?"), r0.get("backends", "?"), r0.get("gpu_info") or r0.get("cpu_info", ""), int(sys.argv[2])))
else:
    print("no llama-bench results")
depths = sorted(set(int(r.get("n_depth", 0)) for r in rows))
if len(depths) > 1:
    print("%-20s %6s %10s %9s %9s %8s" % ("model", "depth", "tg128 t/s", "pp1 ms", "pp16 ms", "pp16/pp1"))
    for m in dict.fromkeys(r.get("model_filename", "?") for r in rows):
        for d in depths:
            rs = [r for r in rows if r.get("model_filename") == m and int(r.get("n_depth", 0)) == d]
            tg = [r for r in rs if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0]
            pp = {r["n_prompt"]: r["avg_ns"] / 1e6 for r in rs if r.get("n_gen", 0) == 0}
            ts = tg[0]["avg_ts"] if tg else float("nan")
            p1, p16 = pp.get(1, float("nan")), pp.get(16, float("nan"))
            print("%-20s %6d %10.1f %9.3f %9.3f %8.2f" % (m.split("/")[-1], d, ts, p1, p16, p16 / p1 if p1 == p1 and p1 else float("nan")))
    sys.exit(0)
seen = []
for r in rows:
    m = r.get("model_filename", "?")
    if m not in seen: seen.append(m)
print("%-20s %-3s %10s %9s %9s %8s %8s" % ("model", "fa", "tg128 t/s", "ms/token", "pp1 ms", "pp16 ms", "pp16/pp1"))
for m in seen:
    for f in ("off", "on"):
        rs = [r for r in rows if r.get("model_filename") == m and fa(r) == f]
        tg = [r for r in rs if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0]
        pp = {r["n_prompt"]: r for r in rs if r.get("n_gen", 0) == 0}
        if not tg and not pp: continue
        ts = tg[0]["avg_ts"] if tg else float("nan")
        ms = lambda r: r["avg_ns"] / 1e6
        p1 = ms(pp[1]) if 1 in pp else float("nan")
        p16 = ms(pp[16]) if 16 in pp else float("nan")
        print("%-20s %-3s %10.1f %9.3f %9.3f %8.3f %8.2f" % (m.split("/")[-1], f, ts, 1000.0 / ts if ts == ts and ts else float("nan"), p1, p16, p16 / p1 if p1 == p1 and p1 else float("nan")))
        if pp:
            print("    pp T: ms per call " + "  ".join("%d:%.3f" % (t, ms(pp[t])) for t in sorted(pp)))
EOF
}

do_run() {
    if [ ! -f "$LW/prep.done" ]; then
        if [ -f "$LW/prep.started" ] && kill -0 "$(cat "$LW/prep.started")" 2> /dev/null; then
            log "waiting for the background prep (see $LW/prep.log)"
            wait_for "$LW/prep.done" "" "the prep" || { tail -20 "$LW/prep.log"; return 1; }
        else
            do_prep
        fi
    fi
    [ -f "$LW/prep.log" ] && cat "$LW/prep.log"
    [ -f "$LW/build.done" ] || { echo "llama: no build, no llama-bench"; return 1; }
    : > "$RES/llama-bench.md"; : > "$RES/llama-bench.jsonl"
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null
    ngl=99; [ "${LLAMA_CUDA:-1}" = 0 ] && ngl=0
    for ty in $TYPES; do
        f=$(gguf_name "$ty")
        [ -s "$f" ] || { echo "llama: no $f, skipped"; continue; }
        if [ -n "${LLAMA_DEPTHS:-}" ]; then
            lbench "$ty: decode and T=1, 16 at depths $LLAMA_DEPTHS" -m "$f" -ngl $ngl -p 1,16 -n 128 -fa 1 -d "$LLAMA_DEPTHS"
            continue
        fi
        # one load: pp1..pp16 (a forward over T tokens) and tg128 (decode), FA off and on
        lbench "$ty: decode and T=1..16 forwards" -m "$f" -ngl $ngl -p 1,2,4,8,16 -n 128 -fa 0,1
    done
    log summary
    summary | tee -a "$RES/llama-bench.md"
}

cmd=${1:-all}
case $cmd in
build) log build; do_build ;;
prep) log prep; echo $$ > "$LW/prep.started"; do_prep ;;
run) log run; do_run ;;
all) log all; do_prep; do_run ;;
summary) summary ;;
*) echo "usage: sh tools/llama/bench.sh build|prep|run|all|summary"; exit 2 ;;
esac
