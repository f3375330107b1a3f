#!/bin/sh
# gguf_vs_llamacpp.sh - greedy continuations of dflash and llama.cpp on the
# same GGUF files: the demo target converted by `dflash convert` (F16, Q8_0)
# and llama-quantize's Q8_0 / Q4_K_M of the F16 file. For each file and
# prompt (chat-rendered, thinking off), both engines generate N tokens
# greedily from the same prompt ids; prints "same" or the first differing
# byte. Usage: bench/gguf_vs_llamacpp.sh LLAMA_BIN_DIR [N] [PROMPTS_PER_DOMAIN]
L=$1 N=${2:-64} K=${3:-4}
BIN=${DFLASH_BIN:-./dflash}
[ -x "$L/llama-simple" ] || { echo "usage: $0 LLAMA_BIN_DIR [N] [K] (llama-simple, llama-quantize there)" >&2; exit 2; }
T=$(mktemp -d /tmp/dflash-vs-llama-XXXXXX)
trap 'rm -rf "$T"' EXIT
"$BIN" convert models/demo/target -o "$T/f16.gguf" 2>/dev/null || exit 1
"$BIN" convert models/demo/target -o "$T/q8_0.gguf" --type q8_0 2>/dev/null || exit 1
"$L/llama-quantize" "$T/f16.gguf" "$T/llama-q8_0.gguf" Q8_0 >/dev/null 2>&1 || exit 1
"$L/llama-quantize" "$T/f16.gguf" "$T/llama-q4_k_m.gguf" Q4_K_M >/dev/null 2>&1 || exit 1
for d in math chat code; do head -n "$K" "bench/prompts/$d.jsonl"; done |
    sed -e 's/^.*"prompt": "//' -e 's/"}$//' >"$T/prompts"
total=0 same=0
for f in f16 q8_0 llama-q8_0 llama-q4_k_m; do
    i=0
    while IFS= read -r line; do
        i=$((i + 1))
        user=$(printf '%b' "$(printf '%s' "$line" | sed 's/\\"/"/g')")
        # ends at </think>: a shell argument cannot end in newlines; both engines then generate them
        printf '<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>' "$user" >"$T/p"
        "$BIN" generate -m "$T/$f.gguf" -f "$T/p" -n "$N" >"$T/d" 2>/dev/null
        "$L/llama-simple" -m "$T/$f.gguf" -n "$N" "$(cat "$T/p")" >"$T/l0" 2>/dev/null
        # llama-simple echoes the prompt, then the continuation, then a newline
        tail -c +"$(($(wc -c <"$T/p") + 1))" "$T/l0" | head -c -1 >"$T/l"
        total=$((total + 1))
        if cmp -s "$T/d" "$T/l"; then same=$((same + 1)); r=same
        else r="differ at byte $(cmp "$T/d" "$T/l" 2>/dev/null | sed 's/.*byte \([0-9]*\).*/\1/')"; fi
        echo "$f prompt $i: $r"
    done <"$T/prompts"
done
echo "identical: $same of $total"
