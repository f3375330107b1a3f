#!/bin/sh
# tools/llama/gguf_race.sh - issue 11's benchmark: dflash and llama.cpp on the
# same GGUF files, every file made by llama.cpp's own converter
# (convert_hf_to_gguf.py) and quantizer (llama-quantize). Run from the
# repository root after `sh tools/llama/bench.sh build` (same LLAMA_WORK):
#   sh tools/llama/gguf_race.sh files  GGUF files in $GG (needs python3 with
#                                      torch and transformers: the GPU machine)
#   sh tools/llama/gguf_race.sh speed  Qwen3-0.6B shape as Q8_0 and Q4_K_M:
#                                      decode tok/s, cost of a 16-token forward
#                                      over one step, 512-token prefill
#   sh tools/llama/gguf_race.sh race   the demo pair: llama.cpp's
#                                      --spec-type draft-dflash against
#                                      dflash's DFlash, each against its own
#                                      greedy output
# The two engines alternate, run by run, so load drifts hit both.
# Environment: LLAMA_WORK (/tmp/llama: build/bin has the llama.cpp tools),
# GG ($LLAMA_WORK/gguf-race: the files), OUT (results in $OUT/gguf-race/),
# LLAMA_CUDA (1: GPU, -ngl 99 and dflash --backend cuda; 0: CPU),
# THREADS (CPU threads; default: the cores), REPS (3), RACE_N (tokens, 128),
# RACE_K (prompts per domain, 4), RACE_TYPES (target files raced: q8_0),
# SPEED_TYPES (q8_0 q4_k_m), DFLASH_BIN (./dflash), FILES (what `files`
# makes: demo tiny s06b).
set -u
R=$(pwd)
LW=${LLAMA_WORK:-/tmp/llama}
B=$LW/build/bin
GG=${GG:-$LW/gguf-race}
OUT=${OUT:-/tmp/dflash-gpu}
RES=$OUT/gguf-race
BIN=${DFLASH_BIN:-$R/dflash}
REPS=${REPS:-3}
N=${RACE_N:-128}
K=${RACE_K:-4}
THREADS=${THREADS:-$(nproc)}
mkdir -p "$GG" "$RES"
if [ "${LLAMA_CUDA:-1}" = 0 ]; then
    NGL=0; DEV=""; BACKEND=cpu
else
    NGL=99; DEV=""; BACKEND=cuda
fi
log() { echo "### gguf_race: $* ($(date +%T))"; }
conv() { python3 "$LW/llama.cpp/convert_hf_to_gguf.py" "$@"; }

# ---------------------------------------------------------------- files
do_files() {
    set -e
    want=" ${FILES:-demo tiny s06b} "
    case $want in *" demo "*) ;; *) no_demo=1 ;; esac
    # the demo weights are committed as .xz (Makefile: UNPACKED)
    [ -n "${no_demo:-}" ] || make -s unpack
    # the demo target is MLX 4-bit, which the converter cannot read: F32 first
    [ -n "${no_demo:-}" ] || [ -f "$GG/demo-target-hf/model.safetensors" ] ||
        python3 tools/llama/dequant.py models/demo/target "$GG/demo-target-hf"
    [ -n "${no_demo:-}" ] || [ -s "$GG/demo-target-f16.gguf" ] ||
        conv --outtype f16 --outfile "$GG/demo-target-f16.gguf" "$GG/demo-target-hf" > "$GG/conv-target.log" 2>&1
    [ -n "${no_demo:-}" ] || [ -s "$GG/demo-draft-bf16.gguf" ] ||
        conv --outtype bf16 --target-model-dir "$GG/demo-target-hf" --outfile "$GG/demo-draft-bf16.gguf" \
            models/demo/draft > "$GG/conv-draft.log" 2>&1
    # the test fixture: the tiny draft (the tiny models' 16384-token vocabulary
    # is a cut of the Qwen3 tokenizer the converter refuses, so it goes
    # through tools/llama/convert.py, which writes no tokenizer then)
    case $want in *" tiny "*) no_tiny= ;; *) no_tiny=1 ;; esac
    [ -n "$no_tiny" ] || [ -s "$GG/tiny-draft-llama.gguf" ] ||
        python3 tools/llama/convert.py "$LW/llama.cpp" --outtype bf16 --target-model-dir tests/models/tiny-qwen3 \
            --outfile "$GG/tiny-draft-llama.gguf" tests/models/tiny-draft > "$GG/conv-tiny.log" 2>&1
    # the Qwen3-0.6B shape (random weights, real tokenizer)
    [ -d "$GG/s06b" ] || "$BIN" synth --shape qwen3-0.6b -o "$GG/s06b" > /dev/null
    [ -s "$GG/s06b-bf16.gguf" ] ||
        conv --outtype bf16 --outfile "$GG/s06b-bf16.gguf" "$GG/s06b" > "$GG/conv-s06b.log" 2>&1
    # llama-quantize: wait for a build started in the background (bench.sh build)
    t=0
    while [ ! -x "$B/llama-quantize" ] || [ ! -f "$LW/build.done" ]; do
        [ -f "$LW/build.failed" ] || [ $t -ge 900 ] && { echo "gguf_race: no llama.cpp build"; exit 1; }
        sleep 2; t=$((t + 2))
    done
    for ty in q8_0 q4_k_m; do
        up=$(echo $ty | tr a-z A-Z)
        [ -n "${no_demo:-}" ] || [ -s "$GG/demo-target-$ty.gguf" ] ||
            "$B/llama-quantize" "$GG/demo-target-f16.gguf" "$GG/demo-target-$ty.gguf" "$up" > "$GG/q-demo-$ty.log" 2>&1
        [ -s "$GG/s06b-$ty.gguf" ] ||
            "$B/llama-quantize" "$GG/s06b-bf16.gguf" "$GG/s06b-$ty.gguf" "$up" > "$GG/q-s06b-$ty.log" 2>&1
    done
    set +e
    ls -l "$GG"/*.gguf
}

# ---------------------------------------------------------------- speed
# 512 tokens of prompt for dflash's prefill (llama-bench's pp512 uses 512 random ids)
prompt512() {
    i=0; : > "$GG/p512"
    while [ $i -lt 512 ]; do printf ' the' >> "$GG/p512"; i=$((i + 1)); done
}

do_speed() {
    prompt512
    : > "$RES/speed.jsonl"
    for ty in ${SPEED_TYPES:-q8_0 q4_k_m}; do
        f=$GG/s06b-$ty.gguf
        [ -s "$f" ] || { echo "no $f"; continue; }
        r=1
        while [ $r -le "$REPS" ]; do
            # llama.cpp: pp1 and pp16 (one forward of 1 / 16 tokens), pp512, tg128
            # shellcheck disable=SC2086 # $DEV is empty or two words
            "$B/llama-bench" -m "$f" -ngl $NGL $DEV -t "$THREADS" -p 1,16,512 -n 128 -r 1 -fa 1 -o jsonl 2> "$GG/lb.err" |
                sed "s/^{/{\"engine\": \"llama.cpp\", \"file\": \"$ty\", \"rep\": $r, /" >> "$RES/speed.jsonl" ||
                tail -3 "$GG/lb.err"
            # dflash: forward costs T = 1..16 at depth 0, decode of 128, prefill of 512
            "$BIN" bench -m "$f" --backend $BACKEND -t "$THREADS" --reps 3 --depth 0 --json 2> "$GG/db.err" |
                sed "s/^{/{\"engine\": \"dflash\", \"file\": \"$ty\", \"rep\": $r, /" >> "$RES/speed.jsonl" ||
                tail -3 "$GG/db.err"
            dec=$("$BIN" generate -m "$f" --backend $BACKEND -t "$THREADS" -p "Once upon a time" -n 128 --ignore-eos 2>&1 >/dev/null |
                sed -n 's/^decode: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p')
            pre=$("$BIN" generate -m "$f" --backend $BACKEND -t "$THREADS" -f "$GG/p512" -n 1 -c 2048 2>&1 >/dev/null |
                sed -n 's/^prompt: \([0-9]*\) tokens.*, \([0-9.]*\) tok\/s.*/\1 \2/p')
            pre=${pre:-null null}
            echo "{\"engine\": \"dflash-gen\", \"file\": \"$ty\", \"rep\": $r, \"decode_tok_s\": ${dec:-null}, \"prefill_tokens\": ${pre%% *}, \"prefill_tok_s\": ${pre##* }}" >> "$RES/speed.jsonl"
            echo "speed $ty rep $r done ($(date +%T))"
            r=$((r + 1))
        done
    done
    python3 tools/llama/gguf_race_table.py speed "$RES/speed.jsonl" | tee "$RES/speed.md"
}

# ---------------------------------------------------------------- race
do_race() {
    for d in math chat code; do head -n "$K" "bench/prompts/$d.jsonl"; done > "$GG/prompts.jsonl"
    : > "$RES/race.jsonl"
    for ty in ${RACE_TYPES:-q8_0}; do
        tgt=$GG/demo-target-$ty.gguf dft=$GG/demo-draft-bf16.gguf
        # llama.cpp's greedy speed: llama-bench tgN (llama-simple, which
        # gives the greedy text, takes no thread count)
        # shellcheck disable=SC2086
        "$B/llama-bench" -m "$tgt" -ngl $NGL $DEV -t "$THREADS" -p 0 -n "$N" -r "$REPS" -fa 1 -o jsonl 2> "$GG/lb.err" |
            sed "s/^{/{\"type\": \"$ty\", \"llama_bench\": 1, /" >> "$RES/race.jsonl" || tail -3 "$GG/lb.err"
        i=0
        while IFS= read -r line; do
            i=$((i + 1))
            dom=$(printf '%s' "$line" | sed 's/.*"domain": "\([a-z]*\)".*/\1/')
            user=$(printf '%b' "$(printf '%s' "$line" | sed -e 's/^.*"prompt": "//' -e 's/"}$//' -e 's/\\"/"/g')")
            # chat-rendered, thinking off; ends at </think> (a shell argument
            # cannot end in newlines; both engines generate them)
            printf '<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>' "$user" > "$GG/p"
            plen=$(wc -c < "$GG/p")
            # llama.cpp greedy text (llama-simple echoes the prompt, then a newline at the end)
            "$B/llama-simple" -m "$tgt" -ngl $NGL -n "$N" "$(cat "$GG/p")" > "$GG/lg0" 2> "$GG/lg.err"
            tail -c +"$((plen + 1))" "$GG/lg0" | head -c -1 > "$GG/lg"
            # llama.cpp DFlash (prints two newlines, the prompt, the text, two newlines)
            # shellcheck disable=SC2086
            "$B/llama-speculative-simple" -m "$tgt" -md "$dft" --spec-type draft-dflash --spec-draft-n-max 15 \
                -ngl $NGL -ngld $NGL $DEV -t "$THREADS" -c 4096 -fa on --temp 0 -n "$N" -p "$(cat "$GG/p")" \
                > "$GG/ls0" 2> "$GG/ls.err"
            tail -c +"$((plen + 3))" "$GG/ls0" | head -c -2 > "$GG/ls"
            lsp=$(sed -n 's/.*decoded *\([0-9]*\) tokens in *\([0-9.]*\) seconds.*/\1 \2/p' "$GG/ls.err")
            lacc=$(sed -n 's/.*n_accept *= *\([0-9]*\).*/\1/p' "$GG/ls.err")
            # dflash greedy and DFlash
            "$BIN" generate -m "$tgt" --backend $BACKEND -t "$THREADS" -f "$GG/p" -n "$N" > "$GG/dg" 2> "$GG/dg.err"
            "$BIN" generate -m "$tgt" -md "$dft" --backend $BACKEND -t "$THREADS" -f "$GG/p" -n "$N" > "$GG/ds" 2> "$GG/ds.err"
            dgs=$(sed -n 's/^decode: \([0-9]*\) tokens, \([0-9.]*\) tok\/s.*/\1 \2/p' "$GG/dg.err")
            dss=$(sed -n 's/^decode: \([0-9]*\) tokens, \([0-9.]*\) tok\/s.*/\1 \2/p' "$GG/ds.err")
            tau=$(sed -n 's/^dflash: .*tau \([0-9.]*\),.*/\1/p' "$GG/ds.err")
            python3 tools/llama/gguf_race_table.py one "$ty" "$dom" "$i" "$GG" "${lsp:-0 0}" "${lacc:-0}" \
                "${dgs:-0 0}" "${dss:-0 0}" "${tau:-0}" >> "$RES/race.jsonl"
            tail -1 "$RES/race.jsonl"
        done < "$GG/prompts.jsonl"
    done
    python3 tools/llama/gguf_race_table.py race "$RES/race.jsonl" | tee "$RES/race.md"
}

cmd=${1:-}
case $cmd in
files) log files; do_files ;;
speed) log speed; do_speed ;;
race) log race; do_race ;;
*) echo "usage: sh tools/llama/gguf_race.sh files|speed|race"; exit 2 ;;
esac
