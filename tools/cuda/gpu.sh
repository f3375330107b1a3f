#!/bin/sh
# tools/cuda/gpu.sh - the whole GPU cycle in one device call: build the CUDA
# backend, run the GPU tests and a compute-sanitizer pass, then benchmark.
#   sh tools/cuda/gpu.sh [STEP...]   steps: build test sanitize demo synth bench moe zoo2 zoo2gguf nsys controls depth variants attcheck nographs curvegraphs profile prefill llama gguf serveload multi tree cpu
#   (default: build test sanitize demo synth bench). Logs and results go to $OUT.
# depth: decode and T=16/T=1 at context depths $DEPTHS (256 4096 16384
# 32768) for /tmp/s4b-$DEPTH_BITS (0 4), each with the attention variants
# $DEPTH_VARIANTS (default, DFLASH_CUDA_ATT_SPLIT=0 = the one-block-per-row
# kernels), or the runs DEPTH_PLAN lists ("bits,depth,variant ..."); a table
# at the end, logs in $OUT/depth.txt.
# zoo2: issue 22's shapes (ZOO2_SHAPES, default "gpt-oss-20b:4 gemma-4-31b:4":
# SHAPE:BITS, gpt-oss's 4 = MXFP4 experts as openai ships them), each with a
# synthesized draft (ZOO2_DRAFT_WINDOW, default 2048 as z-lab's gemma-4
# drafts: the draft's sliding window), dflash bench at ZOO2_DEPTHS (256
# 16384); the checkpoints are made on the CPUs while the tests run when the
# build step is asked for too (zoo2synth), with the family's tokenizer.
# zoo2gguf: the same benches on the GGUF file llama.cpp's converter made of
# LLAMA_MODEL=/tmp/zoo2-SHAPE-BITS for the llama step (LLAMA_TYPES=bf16).
# llama: llama.cpp side by side (tools/llama/bench.sh; the call carries .devdeps
# with llama-src.tar.xz from tools/llama/fetch.sh). When it is asked for, its
# CPU work (build, GGUF conversion, quantization) starts at once in the
# background, nice'd, unless LLAMA_BG=0; the step itself, best put last, runs
# llama-bench on the GPU once that work is done.
# gguf: issue 11's race on GGUF files made by llama.cpp's converter and
# quantizer (tools/llama/gguf_race.sh files, race, speed); the llama.cpp
# build starts in the background too; the results come back as
# $OUT/gguf-race.tar and the files (xz) that fit in GGUF_RETURN_MB (56).
# serveload: issue 24 on the GPU - dflash serve --parallel 1 / 16 on the
# 4B shape under load from bench/serve_load.c, every reply against its solo
# reply, then llama-server --parallel 16 on its GGUF (with the llama step).
# tree: issue 23 on the GPU: test_cuda's tree tests (DFLASH_TEST=tree), the
# verify cost curve chain vs tree for T = 1..64 on the demo target
# (bench/verify_curve.c; CURVE_DEPTH, CURVE_REPS), then chain vs tree rounds
# on the demo pair (bench/tree_bench.c; TREE_BENCH_ARGS "n_predict reps
# max_per_domain", default 128 2 10); logs in $OUT.
# The GPU machine has no package registry: tools/cuda/fetch_deps.sh puts the
# Debian libraries in .devdeps/root here, and the call carries that folder.
set -u
OUT=${OUT:-/tmp/dflash-gpu}
mkdir -p "$OUT"
R=$(pwd)
steps=${*:-build test sanitize demo synth bench}
log() { echo "### $* ($(date +%T))"; }
if [ -d .devdeps/root ]; then
    D=$R/.devdeps/root
    L=$D/usr/lib/x86_64-linux-gnu
    export C_INCLUDE_PATH=$D/usr/include LIBRARY_PATH=$L LD_LIBRARY_PATH=$L DFLASH_NO_DEPS=1
    mkdir -p /tmp/pcshim
    # a pkg-config for the carried libraries only (libedit is not carried:
    # chat builds without line editing there)
    cat > /tmp/pcshim/pkg-config <<EOF
#!/bin/sh
fl=""; libs=""
for a in "\$@"; do case \$a in
  --*) fl="\$fl \$a" ;;
  libcjson) libs="\$libs -lcjson" ;;
  libpcre2-8) libs="\$libs -lpcre2-8" ;;
  libutf8proc) libs="\$libs -lutf8proc" ;;
  libmicrohttpd) libs="\$libs -lmicrohttpd" ;;
  *) exit 1 ;;
esac; done
case "\$fl" in *--cflags*) echo "-I$D/usr/include/cjson" ;; *--libs*) echo "\$libs" ;; esac
exit 0
EOF
    chmod +x /tmp/pcshim/pkg-config
    export PATH=/tmp/pcshim:$PATH
fi
J=$(nproc)
# bench/serve_load.c, the C load client of the serveload and multi steps
load_client() {
    mkdir -p build && cc -O2 $(pkg-config --cflags libcjson) bench/serve_load.c $(pkg-config --libs libcjson) -pthread \
        -o build/serve_load
}
# the tokenizer and the demo weights travel as .xz (Makefile: UNPACKED); unpacked
# before any step, the background llama.cpp work included (same stamp as build)
make -s CUDA=1 unpack || exit 1
case " $steps " in *" llama "*|*" gguf "*)
    if [ "${LLAMA_BG:-1}" != 0 ]; then
        mkdir -p "${LLAMA_WORK:-/tmp/llama}"
        what=prep; case " $steps " in *" llama "*) ;; *) what=build ;; esac
        (nice -n 19 sh tools/llama/bench.sh $what > "${LLAMA_WORK:-/tmp/llama}/prep.log" 2>&1 &)
    fi ;;
esac
for s in $steps; do
    case $s in
    build)
        log build
        nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv
        nvcc --version | tail -2
        make -j"$J" CUDA=1 dflash build-cuda/cuda_test_cuda 2>&1 | grep -E "error|warning|Error"
        # the 4B-shape checkpoints for the benchmarks, made on the CPUs meanwhile
        case " $steps " in *" bench "*|*" llama "*|*" depth "*) (sh "$0" synth > "$OUT/synth.log" 2>&1 &) ;; esac
        case " $steps " in *" zoo2 "*) (sh "$0" zoo2synth > "$OUT/zoo2synth.log" 2>&1 &) ;; esac ;;
    test)
        log test-cuda
        timeout ${TEST_TIMEOUT:-300} make CUDA=1 test-cuda > "$OUT/test-cuda.log" 2>&1
        echo "test-cuda exit $?"
        tail -30 "$OUT/test-cuda.log" ;;
    sanitize)
        log compute-sanitizer
        DFLASH_CUDA_TREE=1 DFLASH_CUDA_QUICK=1 DFLASH_ROOT=$R timeout ${SAN_TIMEOUT:-150} compute-sanitizer --tool memcheck --leak-check full \
            --error-exitcode 9 build-cuda/cuda_test_cuda > "$OUT/sanitizer.log" 2>&1
        echo "compute-sanitizer exit $?"
        tail -8 "$OUT/sanitizer.log" ;;
    demo)
        log demo pair
        cat bench/prompts/*.jsonl > /tmp/all.jsonl
        timeout ${DEMO_TIMEOUT:-200} ./dflash bench -m models/demo/target -md models/demo/draft --backend cuda \
            --prompts /tmp/all.jsonl -n 128 --reps ${DEMO_REPS:-3} > "$OUT/bench-demo.txt" 2>&1
        cat "$OUT/bench-demo.txt" ;;
    synth)
        log synth 4B shapes
        mkdir /tmp/synth.lock 2>/dev/null || { while [ ! -f /tmp/synth.done ]; do sleep 2; done; continue; }
        [ -d /tmp/s4b-0 ] || ./dflash synth --shape qwen3-4b -o /tmp/s4b-0 2>&1 | tail -1
        for b in 8 4; do
            [ -d /tmp/s4b-$b ] || ./dflash synth --shape qwen3-4b --bits $b -o /tmp/s4b-$b 2>&1 | tail -1
        done
        [ -d /tmp/s4b-draft ] || ./dflash synth --shape qwen3-4b --draft -o /tmp/s4b-draft 2>&1 | tail -1
        touch /tmp/synth.done ;;
    bench)
        log bench 4B shapes
        [ -f /tmp/synth.done ] || { echo "waiting for synth"; sh "$0" synth; }
        cat "$OUT/synth.log" 2>/dev/null
        for b in 0 8 4; do
            timeout 120 ./dflash bench -m /tmp/s4b-$b -md /tmp/s4b-draft --backend cuda --reps ${BENCH_REPS:-20} \
                > "$OUT/bench-4b-$b.txt" 2>&1
            cat "$OUT/bench-4b-$b.txt"
        done ;;
    moe)
        # mixture-of-experts shapes (MOE_SHAPES, MOE_BITS: 4), random weights,
        # each with a synthesised draft: dflash bench on the GPU
        log mixture-of-experts shapes
        for sh in ${MOE_SHAPES:-qwen3-30b-a3b}; do
            d=/tmp/moe-$sh-${MOE_BITS:-4}
            t0=$(date +%s)
            [ -d "$d" ] || ./dflash synth --shape "$sh" --bits "${MOE_BITS:-4}" -o "$d" 2>&1 | tail -1
            [ -d "/tmp/moe-$sh-draft" ] || ./dflash synth --shape "$sh" --draft -o "/tmp/moe-$sh-draft" 2>&1 | tail -1
            echo "synth $sh: $(($(date +%s) - t0)) s, $(du -sh "$d" | cut -f1)"
            timeout ${MOE_TIMEOUT:-300} ./dflash bench -m "$d" -md "/tmp/moe-$sh-draft" --backend cuda \
                --reps ${BENCH_REPS:-20} > "$OUT/bench-moe-$sh.txt" 2>&1
            cat "$OUT/bench-moe-$sh.txt"
        done ;;
    zoo2synth)
        mkdir /tmp/zoo2.lock 2>/dev/null || { while [ ! -f /tmp/zoo2.done ]; do sleep 2; done; continue; }
        for spec in ${ZOO2_SHAPES:-gpt-oss-20b:4 gemma-4-31b:4}; do
            sh=${spec%%:*}; b=${spec#*:}; t0=$(date +%s)
            tk=models/qwen3-tokenizer
            case $sh in gpt-oss*) tk=models/gptoss-tokenizer ;; gemma*) tk=models/gemma3-tokenizer ;; esac
            [ -d "/tmp/zoo2-$sh-$b" ] || ./dflash synth --shape "$sh" --bits "$b" --tokenizer $tk -o "/tmp/zoo2-$sh-$b" 2>&1 | tail -1
            [ -d "/tmp/zoo2-$sh-draft" ] || ./dflash synth --shape "$sh" --draft -o "/tmp/zoo2-$sh-draft" 2>&1 | tail -1
            echo "synth $sh bits $b: $(($(date +%s) - t0)) s, $(du -sh "/tmp/zoo2-$sh-$b" | cut -f1)"
        done
        touch /tmp/zoo2.done ;;
    zoo2)
        log issue 22 shapes
        [ -f /tmp/zoo2.done ] || sh "$0" zoo2synth
        cat "$OUT/zoo2synth.log" 2>/dev/null
        for spec in ${ZOO2_SHAPES:-gpt-oss-20b:4 gemma-4-31b:4}; do
            sh=${spec%%:*}; b=${spec#*:}
            for dp in ${ZOO2_DEPTHS:-256 16384}; do
                echo "== $sh bits $b depth $dp ($(date +%T))"
                timeout ${ZOO2_TIMEOUT:-200} ./dflash bench -m "/tmp/zoo2-$sh-$b" -md "/tmp/zoo2-$sh-draft" \
                    --draft-window ${ZOO2_DRAFT_WINDOW:-2048} --backend cuda --depth "$dp" --reps ${BENCH_REPS:-10} \
                    > "$OUT/bench-zoo2-$sh-$b-$dp.txt" 2>&1
                cat "$OUT/bench-zoo2-$sh-$b-$dp.txt"
            done
        done ;;
    zoo2gguf)
        # dflash on the GGUF file llama.cpp's converter made for the llama step (LLAMA_MODEL = a zoo2 checkpoint)
        f=${LLAMA_WORK:-/tmp/llama}/gguf/s4b-bf16.gguf
        log "dflash on llama.cpp's GGUF of ${LLAMA_MODEL:-?}"
        [ -s "$f" ] || { echo "no $f"; continue; }
        sh=$(basename "${LLAMA_MODEL:-x}" | sed 's/^zoo2-//; s/-[0-9]*$//')
        for dp in ${ZOO2_DEPTHS:-256 16384}; do
            echo "== $f ($sh) depth $dp ($(date +%T))"
            timeout ${ZOO2_TIMEOUT:-200} ./dflash bench -m "$f" -md "/tmp/zoo2-$sh-draft" --draft-window ${ZOO2_DRAFT_WINDOW:-2048} \
                --backend cuda --depth "$dp" --reps ${BENCH_REPS:-10} > "$OUT/bench-zoo2gguf-$sh-$dp.txt" 2>&1
            cat "$OUT/bench-zoo2gguf-$sh-$dp.txt"
        done ;;
    depth)
        log decode at context depths
        [ -f /tmp/synth.done ] || sh "$0" synth > /dev/null
        tab=/tmp/depth-table.txt
        printf "%-6s %-7s %-26s %10s %9s %8s\n" bits depth variant "decode t/s" "T=16 ms" "T16/T1" > $tab
        plan=${DEPTH_PLAN:-}
        if [ -z "$plan" ]; then
            for b in ${DEPTH_BITS:-0 4}; do for dp in ${DEPTHS:-256 4096 16384 32768}; do
                for v in ${DEPTH_VARIANTS:-default DFLASH_CUDA_ATT_SPLIT=0}; do plan="$plan $b,$dp,$v"; done
            done; done
        fi
        for run in $plan; do
            b=${run%%,*}; rest=${run#*,}; dp=${rest%%,*}; v=${rest#*,}
            vv=$v; [ "$v" = default ] && vv=""
            echo "== /tmp/s4b-$b depth $dp $v ($(date +%T))" >> "$OUT/depth.txt"
            env $vv timeout ${DEPTH_TIMEOUT:-200} ./dflash bench -m /tmp/s4b-$b --backend cuda --depth $dp --reps ${DEPTH_REPS:-10} \
                > /tmp/depth-one.txt 2>&1
            cat /tmp/depth-one.txt >> "$OUT/depth.txt"
            awk -v b=$b -v d=$dp -v v="$v" '/decode T=1:/ { for (i = 1; i <= NF; i++) if ($i == "tok/s,") ts = $(i - 1) }
                $1 == "16" && NF == 4 { t16 = $2; r = $3 }
                END { printf "%-6s %-7s %-26s %10s %9s %8s\n", b, d, v, ts, t16, r }' /tmp/depth-one.txt | tee -a $tab
        done
        cat $tab >> "$OUT/depth.txt"; echo "### depth table"; cat $tab ;;
    profile)
        log profile: time per kernel
        [ -f /tmp/synth.done ] || sh "$0" synth > /dev/null
        for mdl in ${PROFILE_MODELS:-models/demo/target /tmp/s4b-0 /tmp/s4b-4}; do
            [ -d $mdl ] || continue
            dr=models/demo/draft; [ $mdl = models/demo/target ] || dr=/tmp/s4b-draft
            echo "== $mdl, plain greedy, 64 tokens"
            DFLASH_CUDA_PROFILE=1 timeout 60 ./dflash generate -m $mdl --backend cuda -p "The history of" -n 64 --temp 0 2>&1 >/dev/null | tail -24
            echo "== $mdl + draft, DFlash, 64 tokens"
            DFLASH_CUDA_PROFILE=1 timeout 60 ./dflash generate -m $mdl -md $dr --backend cuda -p "The history of" -n 64 --temp 0 2>&1 >/dev/null | tail -45
            echo "== $mdl, verify forwards of 16 rows (bench)"
            DFLASH_CUDA_PROFILE=1 DFLASH_CUDA_PROFILE_T=16 timeout 60 ./dflash bench -m $mdl --backend cuda --reps 3 2>&1 | sed -n '/cuda profile/,$p'
        done ;;
    variants)
        # timing knobs that leave every sum unchanged (cuda_backend.cu:
        # tuning_init, pdl_init): programmatic dependent launch;
        # and the same without CUDA graphs
        log variants: PDL, graphs
        [ -f /tmp/synth.done ] || sh "$0" synth > /dev/null
        for b in ${VARIANT_BITS:-0 8}; do
            for v in "" ${VARIANTS:-DFLASH_CUDA_PDL=0 DFLASH_CUDA_GRAPHS=0}; do
                echo "== /tmp/s4b-$b ${v:-default}"
                env $v timeout 90 ./dflash bench -m /tmp/s4b-$b --backend cuda --reps ${BENCH_REPS:-10} 2>&1 | grep -E "decode T=1|^  16 " | head -3
            done
        done ;;
    attcheck)
        # the 4B shape's grouped (4 query heads per K/V head, head_dim 128)
        # and per-head attention kernels must give the same text
        log attention kernels: same output
        [ -f /tmp/synth.done ] || sh "$0" synth > /dev/null
        for a in head gqa; do
            DFLASH_CUDA_ATT=$a timeout 60 ./dflash generate -m /tmp/s4b-0 --backend cuda -p "The history of" -n 200 --temp 0 --ignore-eos 2>/dev/null > /tmp/att-$a.txt
        done
        if cmp -s /tmp/att-head.txt /tmp/att-gqa.txt && [ -s /tmp/att-head.txt ]; then echo "attcheck: identical ($(wc -c < /tmp/att-head.txt) bytes)"; else echo "attcheck: DIFFERENT"; fi ;;
    nographs)
        log without CUDA graphs
        for mdl in models/demo/target /tmp/s4b-0; do
            [ -d $mdl ] && DFLASH_CUDA_GRAPHS=0 timeout 60 ./dflash bench -m $mdl --backend cuda --reps 10 2>&1 | sed -n 1,8p
        done ;;
    curvegraphs)
        # the chain verify's cost at T = 1..24 on the demo target with and
        # without CUDA graphs (graphs stop at 16 rows; on an H100, 2026-12-07
        # night: T=16 0.47 ms with graphs, 0.52 without, T=17 0.64)
        log verify curve with and without graphs
        make -s -j"$J" CUDA=1 build-cuda/verify_curve 2>&1 | grep -E "error|warning"
        for g in 1 0; do
            echo "DFLASH_CUDA_GRAPHS=$g:"
            DFLASH_CUDA_GRAPHS=$g timeout 60 build-cuda/verify_curve models/demo/target - cuda 256 10 2>&1 | sed -n 1,26p
        done ;;
    nsys)
        # the kernels' own durations in graph mode (no events between them,
        # unlike profile): Nsight Systems, or Nsight Compute's per-kernel
        # time when nsys is absent. NSYS_MODELS (default: the MoE shape).
        log kernel durations, graph mode
        NS=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
        for mdl in ${NSYS_MODELS:-/tmp/moe-qwen3-30b-a3b-4}; do
            [ -d "$mdl" ] || { echo "nsys: no $mdl (run the moe step first)"; continue; }
            nm=$(basename "$mdl")
            timeout 60 ./dflash bench -m "$mdl" --backend cuda --reps 5 2>&1 | grep -E "decode T=1|^  16 "
            if [ -n "$NS" ]; then
                timeout 200 "$NS" profile --cuda-graph-trace=node -t cuda -o "/tmp/ns-$nm" -f true \
                    ./dflash generate -m "$mdl" --backend cuda -p "The history of" -n ${NSYS_TOKENS:-64} --temp 0 --ignore-eos \
                    > /tmp/ns-$nm.log 2>&1; tail -3 /tmp/ns-$nm.log
                "$NS" stats -r cuda_gpu_kern_sum -f csv -o "$OUT/nsys-$nm" "/tmp/ns-$nm.nsys-rep" > /dev/null 2>&1
                f=$(ls "$OUT"/nsys-$nm*.csv 2>/dev/null | head -1)
                [ -n "$f" ] && python3 tools/cuda/kern_sum.py "$f" ${NSYS_TOKENS:-64}
            elif command -v ncu > /dev/null; then
                # each kernel (graph nodes too) timed alone: NCU_SKIP launches
                # (prefill, graph capture) then NCU_COUNT (several tokens)
                # (the upload kernels k_tile, k_iq_order, k_interleave8 are not counted)
                timeout ${NCU_TIMEOUT:-240} ncu --csv --metrics gpu__time_duration.sum \
                    --kernel-name regex:'^k_(gemm|moe|rmsnorm|norm_rope|att|argmax|split_gate|gate_att|embed|dn_|extra|pick|to_bf16)' \
                    --launch-skip ${NCU_SKIP:-1500} --launch-count ${NCU_COUNT:-2500} ./dflash generate -m "$mdl" --backend cuda -p "The history of" \
                    -n ${NCU_TOKENS:-16} --temp 0 --ignore-eos > "$OUT/ncu-$nm.csv" 2> /tmp/ncu-$nm.err
                echo "ncu exit $?"; tail -2 /tmp/ncu-$nm.err
                python3 tools/cuda/ncu_sum.py "$OUT/ncu-$nm.csv" k_argmax_merge
            else
                echo "nsys, ncu: not found"
            fi
        done ;;
    controls)
        # the logit controls, logprobs and grammars on the GPU: DFlash output (and the
        # logprob lines) identical to plain decoding for each setting
        # (CTL_BACKEND=cpu: the same check on the CPU)
        log logit controls: DFlash = plain on the GPU
        bad=0
        for ctl in "--repeat-penalty 1.3" "--presence-penalty 0.8 --frequency-penalty 0.5" \
                   "--min-p 0.2 --temp 0.8 --seed 3" "--logit-bias 13=4 --logit-bias 264=-3" \
                   "--repeat-penalty 1.2 --temp 0.8 --seed 5 --logprobs 2" \
                   "--json-object" "--json-object --temp 0.8 --seed 7 --logprobs 1" \
                   "--grammar tests/fixtures/grammar/arith.gbnf"; do
            for d in "" "-md models/demo/draft"; do
                timeout 60 ./dflash generate -m models/demo/target $d --backend ${CTL_BACKEND:-cuda} -p "Evaluate 44 * 9 - 30, step by step." \
                    -n 96 --ignore-eos $ctl > /tmp/ctl-out${d:+-d}.txt 2> /tmp/ctl-err${d:+-d}.txt
                grep -E "^[0-9]+$(printf '\t')|^logprobs" /tmp/ctl-err${d:+-d}.txt > /tmp/ctl-lp${d:+-d}.txt
            done
            if [ -s /tmp/ctl-out.txt ] && cmp -s /tmp/ctl-out.txt /tmp/ctl-out-d.txt && cmp -s /tmp/ctl-lp.txt /tmp/ctl-lp-d.txt; then
                echo "controls: identical ($ctl; $(wc -c < /tmp/ctl-out.txt) bytes, $(wc -l < /tmp/ctl-lp.txt) logprob lines)"
            else echo "controls: DIFFERENT ($ctl)"; bad=1; tail -n 3 /tmp/ctl-err.txt /tmp/ctl-err-d.txt; fi
        done
        echo "controls exit $bad" ;;
    prefill)
        # prompt processing of a Qwen3.5 shape (its DeltaNet layers run the
        # recurrent form row by row) against the Qwen3 shape of the same
        # size, 4-bit, random weights, prompts of ~PREFILL_BYTES bytes of
        # README text; the last run per model with the per-kernel profile
        log prefill: Qwen3.5-4B and Qwen3-4B shapes
        [ -d /tmp/p35-4 ] || ./dflash synth --shape qwen3.5-4b --bits 4 -o /tmp/p35-4 2>&1 | tail -1
        [ -d /tmp/s4b-4 ] || ./dflash synth --shape qwen3-4b --bits 4 -o /tmp/s4b-4 2>&1 | tail -1
        for mdl in /tmp/p35-4 /tmp/s4b-4; do
            for nb in ${PREFILL_BYTES:-2000 16000 32000}; do
                head -c "$nb" README.md > /tmp/prefill-prompt.txt
                for rep in 1 2; do
                    timeout 120 ./dflash generate -m $mdl --backend cuda --tokenizer models/qwen3-tokenizer -c 16384 \
                        -f /tmp/prefill-prompt.txt -n 1 > /dev/null 2> /tmp/prefill-err.txt
                    echo "$mdl $nb bytes (run $rep): $(grep '^prompt:' /tmp/prefill-err.txt)"
                done
            done
            DFLASH_CUDA_PROFILE=1 timeout 120 ./dflash generate -m $mdl --backend cuda --tokenizer models/qwen3-tokenizer \
                -c 16384 -f /tmp/prefill-prompt.txt -n 1 > /dev/null 2> "$OUT/prefill-profile-$(basename $mdl).txt"
            grep -E 'deltanet|attention|gemm|total' "$OUT/prefill-profile-$(basename $mdl).txt" | head -12
        done ;;
    llama)
        log llama.cpp side by side
        [ -f /tmp/synth.done ] || sh "$0" synth > /dev/null 2>&1
        sh tools/llama/bench.sh run ;;
    gguf)
        log GGUF race
        GG=${LLAMA_WORK:-/tmp/llama}/gguf-race
        sh tools/llama/gguf_race.sh files 2>&1 | tail -12
        sh tools/llama/gguf_race.sh race
        sh tools/llama/gguf_race.sh speed
        cp "$GG"/*.log "$OUT/gguf-race/" 2>/dev/null
        tar -cf "$OUT/gguf-race.tar" -C "$OUT" gguf-race && rm -rf "$OUT/gguf-race"
        left=$((${GGUF_RETURN_MB:-56} * 1048576))
        for f in ${GGUF_RETURN:-tiny-draft-llama demo-draft-bf16 demo-target-q8_0 demo-target-q4_k_m}; do
            [ -s "$GG/$f.gguf" ] || continue
            if command -v xz > /dev/null; then xz -T0 -6 -c "$GG/$f.gguf" > "/tmp/$f.gguf.xz"
            else python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(open(sys.argv[1], "rb"), lzma.open(sys.argv[2], "wb", preset=3))' "$GG/$f.gguf" "/tmp/$f.gguf.xz"; fi
            sz=$(wc -c < "/tmp/$f.gguf.xz")
            if [ "$sz" -le "$left" ]; then mv "/tmp/$f.gguf.xz" "$OUT/"; left=$((left - sz)); echo "gguf: returns $f.gguf.xz ($sz bytes)"
            else echo "gguf: $f.gguf.xz ($sz bytes) does not fit"; fi
        done ;;
    serveload)
        # issue 24 on the GPU: `dflash serve --parallel 1 / SL_PARS` (16) on the 4B
        # shape (SL_BITS: 0 = BF16) with its synth draft, the C load client
        # (bench/serve_load.c) at concurrency 1 4 16 32, greedy, DFlash auto and
        # plain: aggregate tok/s, every reply against its solo reply; then
        # llama-server --parallel 16 on the same checkpoint's GGUF (the llama
        # step's build, when asked for too) with the same client
        log serve under load
        [ -f /tmp/synth.done ] || sh "$0" synth > /dev/null 2>&1
        load_client || { echo "serveload: the client does not build"; continue; }
        METRICS=1 MODEL=/tmp/s4b-${SL_BITS:-0} DRAFT=/tmp/s4b-draft BACKEND=cuda CTX=${SL_CTX:-2048} \
            PARS="1 ${SL_PARS:-16}" CONCS="${SL_CONCS:-1 4 16 32}" TEMPS="${SL_TEMPS:-0}" MODES="auto 0" \
            REQS=${SL_REQS:-32} MAXTOK=${SL_MAXTOK:-64} timeout ${SL_TIMEOUT:-300} sh bench/serve_load.sh \
            2>&1 | tee "$OUT/serveload.txt"
        ls=${LLAMA_WORK:-/tmp/llama}/build/bin/llama-server gg=${LLAMA_WORK:-/tmp/llama}/gguf/s4b-bf16.gguf
        if [ -x "$ls" ] && [ -f "$gg" ]; then
            echo "llama-server --parallel ${SL_PARS:-16} on $gg:"
            "$ls" -m "$gg" --parallel "${SL_PARS:-16}" -c $(( ${SL_PARS:-16} * ${SL_CTX:-2048} )) -ngl 99 -fa on \
                --port 18181 > "$OUT/llama-server.log" 2>&1 &
            lp=$!
            for _ in $(seq 600); do
                curl -sf http://127.0.0.1:18181/health > /dev/null 2>&1 && break
                kill -0 $lp 2>/dev/null || { tail -5 "$OUT/llama-server.log"; break; }
                sleep 0.5
            done
            for c in ${SL_CONCS:-1 4 16 32}; do
                echo "llama-server concurrency $c: $(timeout 120 build/serve_load 18181 "$c" "${SL_REQS:-32}" "${SL_MAXTOK:-64}" 0)"
            done 2>&1 | tee -a "$OUT/serveload.txt"
            kill $lp; wait $lp 2>/dev/null
        else
            echo "serveload: no llama-server build or GGUF (ask for the llama step too)"
        fi ;;
    multi)
        # issue 24 on the GPU: forward_multi / predict_multi against forward /
        # argmax (test_cuda's multi test: the demo target and the tiny
        # families, bit for bit), under compute-sanitizer on the quick set,
        # then the demo pair served with --parallel 4 (the batched calls are the default):
        # every reply under load against its solo reply (bench/serve_load.c)
        log forward_multi on the GPU
        DFLASH_TEST=multi DFLASH_ROOT=$R timeout ${MULTI_TIMEOUT:-200} build-cuda/cuda_test_cuda > "$OUT/test-multi.log" 2>&1 # multi and draft_multi
        echo "test_cuda multi exit $?"
        grep -E "^ok|^not ok|FAIL|test_cuda:" "$OUT/test-multi.log" | tail -30
        # the other way for the stacked steps' attention: DFLASH_CUDA_SEGS (1: cu_segd tables, one launch
        # for all sequences; 0: a launch per sequence), the one the call did not set
        DFLASH_CUDA_SEGS=$([ "${DFLASH_CUDA_SEGS:-1}" = 0 ] && echo 1 || echo 0) DFLASH_TEST=multi DFLASH_ROOT=$R timeout ${MULTI_TIMEOUT:-200} build-cuda/cuda_test_cuda \
            > "$OUT/test-multi-segs0.log" 2>&1
        echo "test_cuda multi, the other DFLASH_CUDA_SEGS, exit $?"
        grep -E "^not ok|FAIL|test_cuda:" "$OUT/test-multi-segs0.log" | tail -10
        DFLASH_TEST=multi DFLASH_CUDA_QUICK=1 DFLASH_ROOT=$R timeout ${SAN_TIMEOUT:-150} compute-sanitizer --tool memcheck \
            --error-exitcode 9 build-cuda/cuda_test_cuda > "$OUT/sanitizer-multi.log" 2>&1
        echo "compute-sanitizer (multi) exit $?"
        tail -4 "$OUT/sanitizer-multi.log"
        load_client || { echo "multi: the load client does not build"; continue; }
        BACKEND=cuda PARS="1 4" CONCS="1 4 8" TEMPS="0 0.8" REQS=16 MAXTOK=48 \
            timeout ${SL_TIMEOUT:-300} sh bench/serve_load.sh 2>&1 | tee "$OUT/multi-serve.txt" ;;
    tree)
        log tree verification
        export DFLASH_CUDA_TREE=1 # the default since these tests passed on an H100 (cuda_backend.cu: tree_default)
        DFLASH_TEST=tree DFLASH_ROOT=$R timeout ${TREE_TEST_TIMEOUT:-200} build-cuda/cuda_test_cuda > "$OUT/test-tree.log" 2>&1
        echo "test_cuda tree tests exit $?"
        grep -E "^ok|^not ok|FAIL|test_cuda:|exact|identical|top-k" "$OUT/test-tree.log" | tail -60
        make -s -j"$J" CUDA=1 build-cuda/verify_curve build-cuda/tree_bench 2>&1 | grep -E "error|warning"
        log verify cost curve
        timeout ${CURVE_TIMEOUT:-100} build-cuda/verify_curve models/demo/target models/demo/draft cuda ${CURVE_DEPTH:-256} \
            ${CURVE_REPS:-10} > "$OUT/verify-curve.txt" 2>&1
        cat "$OUT/verify-curve.txt"
        log chain vs tree rounds, demo pair
        cat bench/prompts/chat.jsonl bench/prompts/code.jsonl bench/prompts/math.jsonl > /tmp/tree_prompts.jsonl
        timeout ${TREE_BENCH_TIMEOUT:-150} build-cuda/tree_bench models/demo/target models/demo/draft /tmp/tree_prompts.jsonl \
            ${TREE_BENCH_ARGS:-128 2 10} > "$OUT/tree-bench.txt" 2>&1
        echo "tree_bench exit $?"
        cat "$OUT/tree-bench.txt" ;;
    cpu)
        # the CPU kernels on this machine's CPU (the GPU hosts have AVX-512 VNNI, which
        # qemu 7.2 cannot emulate): CPU_TESTS (default test_kernels and test_mxfp4, each
        # looping over every variant this CPU runs)
        log "CPU tests on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
        grep -o -w 'avx512f\|avx512_vnni\|avx512_bf16\|avx_vnni' /proc/cpuinfo | sort | uniq -c
        make -s -j"$J" ${CPU_TESTS:-build/test_kernels build/test_mxfp4} 2>&1 | grep -E "error|warning"
        for t in ${CPU_TESTS:-build/test_kernels build/test_mxfp4}; do
            DFLASH_ROOT=$R timeout ${CPU_TIMEOUT:-120} $t > "$OUT/$(basename $t).log" 2>&1
            echo "$t exit $?"
            grep -E "passed|not ok|FAIL|variant" "$OUT/$(basename $t).log" | tail -8
        done ;;
    *) echo "unknown step $s" ;;
    esac
done
