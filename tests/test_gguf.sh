#!/bin/sh
# test_gguf.sh - dflash convert end to end on the demo pair: the demo target
# as a GGUF file (F16, Q8_0) gives the same greedy text as the directory
# (F16: as the 4-bit checkpoint; Q8_0: as --quant q8_0, the engine's own
# Q8_0 path), DFlash with the GGUF target gives its greedy text, the demo
# draft as a GGUF (architecture dflash) drafts for either target, and the
# output-file rules hold (OUT == input refused, existing OUT needs --force,
# a refused convert leaves the input alone). When LLAMA_CPP_BIN names a
# llama.cpp build directory (llama-simple, llama-quantize), also: llama.cpp
# loads the F16 file and continues greedily, llama-quantize's Q8_0 of it
# loads in dflash (reported, not compared: see bench/NOTES.md), and
# llama-speculative-simple --spec-type draft-dflash drafts with the draft
# `dflash convert` wrote (the other direction, dflash with drafts written by
# llama.cpp's converter, is test_gguf.c llama_converter_draft).
. "$(dirname "$0")/lib.sh"
t_init test_gguf.sh
M=models/demo/target D=models/demo/draft
expect "convert f16" 0 "wrote" -- "$BIN" convert "$M" -o "$T/f16.gguf"
expect "convert q8_0" 0 "wrote" -- "$BIN" convert "$M" -o "$T/q8.gguf" --type q8_0
expect "convert q4_0" 0 "wrote" -- "$BIN" convert "$M" -o "$T/q4.gguf" --type q4_0
expect "generate from the Q4_0 file" 0 "MLX 4-bit, group 32" -- "$BIN" generate -m "$T/q4.gguf" --chat -p "Hi" -n 8
expect "convert over an existing file" 1 "pass --force" -- "$BIN" convert "$M" -o "$T/q8.gguf" --type q8_0
expect "convert --force" 0 "wrote" -- "$BIN" convert "$M" -o "$T/q8.gguf" --type q8_0 --force
cp "$M/model.safetensors" "$T/in.st" 2>/dev/null
expect "convert -o the input's weights" 1 "is the input" -- "$BIN" convert "$M" -o "$M/model.safetensors" --force
cmp -s "$M/model.safetensors" "$T/in.st" && ok "input weights intact" || bad "input weights intact"
expect "convert -o a directory" 1 "is a directory" -- "$BIN" convert "$M" -o "$T" --force
expect "convert --type q4_k" 2 "--type must be f16, bf16, q8_0 or q4_0" -- "$BIN" convert "$M" -o "$T/x.gguf" --type q4_k
expect "convert a GGUF" 1 "already a GGUF file" -- "$BIN" convert "$T/f16.gguf" -o "$T/x.gguf"
# the Qwen3.5 family (test_gguf.c convert_qwen35_family checks the tables
# against llama.cpp's files): bf16 files decode as the checkpoints do, and
# an mlx-lm 4-bit conversion converts too
for fam in tiny-qwen35 tiny-qwen35moe tiny-qwen3next; do
    expect "convert $fam bf16" 0 "wrote" -- "$BIN" convert tests/models/$fam -o "$T/$fam.gguf" --type bf16
    "$BIN" generate -m tests/models/$fam -p "Hello, world" -n 16 >"$T/a" 2>/dev/null
    "$BIN" generate -m "$T/$fam.gguf" -p "Hello, world" -n 16 >"$T/b" 2>/dev/null
    [ -s "$T/a" ] && cmp -s "$T/a" "$T/b" && ok "$fam: GGUF = checkpoint" || bad "$fam: GGUF = checkpoint"
done
# gpt-oss and Gemma-4 (test_gguf.c convert_zoo2 checks the files against
# llama.cpp's converter's): bf16 files decode as the checkpoints do
for fam in tiny-gptoss tiny-gemma4 tiny-gemma4-kv; do
    expect "convert $fam bf16" 0 "wrote" -- "$BIN" convert tests/models/$fam -o "$T/$fam.gguf" --type bf16
    "$BIN" generate -m tests/models/$fam -p "Hello, world" -n 16 --ignore-eos >"$T/a" 2>/dev/null
    "$BIN" generate -m "$T/$fam.gguf" -p "Hello, world" -n 16 --ignore-eos >"$T/b" 2>/dev/null
    [ -s "$T/a" ] && cmp -s "$T/a" "$T/b" && ok "$fam: GGUF = checkpoint" || bad "$fam: GGUF = checkpoint"
done
# Gemma's tokenizer in the GGUF (tokenizer.ggml.model gemma4): tiny-gemma4
# with models/gemma3-tokenizer converts, and the file alone tokenizes as the
# tokenizer.json does (test_tokenizer.c: all 450 corpus documents) and
# generates without --tokenizer
mkdir -p "$T/g4tok"
for f in config.json model.safetensors; do ln -s "$PWD/tests/models/tiny-gemma4/$f" "$T/g4tok/$f"; done
for f in tokenizer.json tokenizer_config.json; do ln -s "$PWD/models/gemma3-tokenizer/$f" "$T/g4tok/$f"; done
expect "convert tiny-gemma4 with Gemma's tokenizer" 0 "wrote" -- "$BIN" convert "$T/g4tok" -o "$T/g4tok.gguf"
txt=$(printf 'Hello world\n\n\tx <table>\t\ty</table>  \342\226\201\342\226\201 <start_of_turn>user\n\360\237\253\240')
"$BIN" tokenize -m models/gemma3-tokenizer -p "$txt" --special >"$T/a" 2>/dev/null
"$BIN" tokenize -m "$T/g4tok.gguf" -p "$txt" --special >"$T/b" 2>/dev/null
[ -s "$T/a" ] && cmp -s "$T/a" "$T/b" && ok "gemma4 GGUF tokenizer = tokenizer.json" || bad "gemma4 GGUF tokenizer = tokenizer.json"
expect "generate from it without --tokenizer" 0 "gemma4 (gguf)" -- "$BIN" generate -m "$T/g4tok.gguf" -p "Hi" -n 4
expect "convert the mlx-lm q4 Qwen3.5" 0 "wrote" -- \
    "$BIN" convert tests/models/tiny-qwen35-mlx-q4 -o "$T/mlx.gguf" --type q8_0
expect "generate from it" 0 "qwen35 (gguf)" -- "$BIN" generate -m "$T/mlx.gguf" -p "Hi" -n 4
ls "$T"/*.tmp-dflash >/dev/null 2>&1 && bad "no temporary files left" || ok "no temporary files left"

for p in "Solve for x: 3x + 5 = 20." "Evaluate 44 * 9 - 30." "Write a Python function that reverses a string."; do
    "$BIN" generate -m "$M" --chat -p "$p" -n 48 >"$T/hf" 2>/dev/null
    "$BIN" generate -m "$T/f16.gguf" --chat -p "$p" -n 48 >"$T/g16" 2>"$T/err"
    "$BIN" generate -m "$T/f16.gguf" --draft "$D" --chat -p "$p" -n 48 >"$T/g16d" 2>/dev/null
    "$BIN" generate -m "$M" --quant q8_0 --chat -p "$p" -n 48 >"$T/hq8" 2>/dev/null
    "$BIN" generate -m "$T/q8.gguf" --chat -p "$p" -n 48 >"$T/g8" 2>/dev/null
    "$BIN" generate -m "$T/q8.gguf" --draft "$D" --chat -p "$p" -n 48 >"$T/g8d" 2>/dev/null
    [ -s "$T/hf" ] && cmp -s "$T/hf" "$T/g16" && ok "F16 GGUF = directory: $p" || bad "F16 GGUF = directory: $p"
    cmp -s "$T/g16" "$T/g16d" && ok "DFlash on the F16 GGUF = its greedy: $p" || bad "DFlash F16: $p"
    [ -s "$T/hq8" ] && cmp -s "$T/hq8" "$T/g8" && ok "Q8_0 GGUF = --quant q8_0: $p" || bad "Q8_0 GGUF = --quant q8_0: $p"
    cmp -s "$T/g8" "$T/g8d" && ok "DFlash on the Q8_0 GGUF = its greedy: $p" || bad "DFlash Q8_0: $p"
done
# the demo draft as a GGUF file (architecture dflash, llama.cpp's keys), with and without a GGUF target
expect "convert a draft without --target" 1 "--target TARGET_DIR" -- "$BIN" convert "$D" -o "$T/d.gguf"
expect "convert the draft" 0 "wrote" -- "$BIN" convert "$D" -o "$T/d.gguf" --target "$M"
expect "convert the draft q8_0" 0 "wrote" -- "$BIN" convert "$D" -o "$T/d8.gguf" --target "$M" --type q8_0
for p in "Solve for x: 3x + 5 = 20." "Evaluate 44 * 9 - 30."; do
    "$BIN" generate -m "$M" --chat -p "$p" -n 48 >"$T/hf" 2>/dev/null
    "$BIN" generate -m "$T/f16.gguf" --draft "$T/d.gguf" --chat -p "$p" -n 48 >"$T/gd" 2>"$T/err"
    "$BIN" generate -m "$M" --draft "$T/d8.gguf" --chat -p "$p" -n 48 >"$T/gd8" 2>/dev/null
    [ -s "$T/hf" ] && cmp -s "$T/hf" "$T/gd" && grep -q "tau" "$T/err" && ok "GGUF target + GGUF draft = greedy: $p" ||
        bad "GGUF target + GGUF draft = greedy: $p"
    cmp -s "$T/hf" "$T/gd8" && ok "directory target + Q8_0 GGUF draft = greedy: $p" || bad "Q8_0 GGUF draft: $p"
done
expect "a draft GGUF as the target" 1 "is a DFlash draft" -- "$BIN" generate -m "$T/d.gguf" -p hi
expect "tokenize from the GGUF" 0 "" -- "$BIN" tokenize -m "$T/f16.gguf" -p "Hello world"
grep -qx "9707 1879" "$T/out" && ok "GGUF token ids" || bad "GGUF token ids: $(cat "$T/out")"

# llama.cpp-converted family files without a tokenizer: refused by name,
# then --tokenizer DIR (the checkpoint's) gives the checkpoint's greedy text,
# plain and with its draft
G=tests/fixtures/gguf
expect "GGUF without a tokenizer" 1 "has no usable tokenizer (pass one with --tokenizer DIR)" -- \
    "$BIN" generate -m "$G/tiny-qwen35-bf16.gguf" -p "Hello" -n 4
expect "--tokenizer a missing path" 1 "/nonexistent" -- \
    "$BIN" generate -m "$G/tiny-qwen35-bf16.gguf" --tokenizer /nonexistent -p "Hello" -n 4
for fam in qwen35 qwen3moe qwen35moe; do
    "$BIN" generate -m "tests/models/tiny-$fam" -p "The quick brown" -n 24 --ignore-eos >"$T/fh" 2>/dev/null
    "$BIN" generate -m "$G/tiny-$fam-bf16.gguf" --tokenizer "tests/models/tiny-$fam" -p "The quick brown" -n 24 \
        --ignore-eos >"$T/fg" 2>/dev/null
    [ -s "$T/fh" ] && cmp -s "$T/fh" "$T/fg" && ok "$fam GGUF + --tokenizer = directory" || bad "$fam GGUF + --tokenizer"
done
for fam in qwen35 qwen3moe; do
    "$BIN" generate -m "$G/tiny-$fam-bf16.gguf" --tokenizer "tests/models/tiny-$fam" --draft "tests/models/tiny-$fam-draft" \
        -p "The quick brown" -n 24 --ignore-eos >"$T/fd" 2>/dev/null
    "$BIN" generate -m "$G/tiny-$fam-bf16.gguf" --tokenizer "tests/models/tiny-$fam" -p "The quick brown" -n 24 \
        --ignore-eos >"$T/fg" 2>/dev/null
    [ -s "$T/fg" ] && cmp -s "$T/fd" "$T/fg" && ok "$fam GGUF DFlash = its greedy" || bad "$fam GGUF DFlash = its greedy"
done

# a qwen3_moe checkpoint written by dflash convert (llama.cpp's qwen3moe
# layout): the directory's greedy text, and DFlash with its draft = greedy
expect "convert qwen3moe q8_0" 0 "wrote" -- "$BIN" convert tests/models/tiny-qwen3moe -o "$T/moe8.gguf" --type q8_0
expect "convert qwen3moe f16" 0 "wrote" -- "$BIN" convert tests/models/tiny-qwen3moe -o "$T/moe.gguf"
"$BIN" generate -m tests/models/tiny-qwen3moe -p "The quick brown" -n 24 --ignore-eos >"$T/fh" 2>/dev/null
"$BIN" generate -m "$T/moe.gguf" -p "The quick brown" -n 24 --ignore-eos >"$T/fg" 2>/dev/null
[ -s "$T/fh" ] && cmp -s "$T/fh" "$T/fg" && ok "qwen3moe f16 GGUF = directory" || bad "qwen3moe f16 GGUF = directory"
"$BIN" generate -m "$T/moe8.gguf" -p "The quick brown" -n 24 --ignore-eos >"$T/fg" 2>/dev/null
"$BIN" generate -m "$T/moe8.gguf" --draft tests/models/tiny-qwen3moe-draft -p "The quick brown" -n 24 --ignore-eos \
    >"$T/fd" 2>/dev/null
[ -s "$T/fg" ] && cmp -s "$T/fd" "$T/fg" && ok "qwen3moe q8_0 GGUF DFlash = its greedy" || bad "qwen3moe q8_0 DFlash"
expect "convert norm_topk_prob=false" 1 "norm_topk_prob=false cannot be written" -- \
    "$BIN" convert tests/models/tiny-qwen3moe-q4 -o "$T/moe4.gguf"

if [ -n "$LLAMA_CPP_BIN" ] && [ -x "$LLAMA_CPP_BIN/llama-simple" ]; then
    expect "llama.cpp loads the F16 file" 0 "" -- "$LLAMA_CPP_BIN/llama-simple" -m "$T/f16.gguf" -n 16 "The answer is"
    expect "llama-quantize Q8_0" 0 "" -- "$LLAMA_CPP_BIN/llama-quantize" "$T/f16.gguf" "$T/lq8.gguf" Q8_0
    expect "llama-quantize's Q8_0 loads in dflash" 0 "" -- "$BIN" generate -m "$T/lq8.gguf" -p "The answer is" -n 16
    if [ -x "$LLAMA_CPP_BIN/llama-speculative-simple" ]; then
        # llama.cpp's own DFlash (--spec-type draft-dflash) drafts with the draft dflash convert wrote
        expect "llama.cpp DFlash with dflash's draft" 0 "n_drafted" -- "$LLAMA_CPP_BIN/llama-speculative-simple" \
            -m "$T/lq8.gguf" -md "$T/d.gguf" --spec-type draft-dflash --spec-draft-n-max 15 --temp 0 -t 2 -n 32 \
            -p "The answer is"
        grep -q "n_drafted *= *[1-9]" "$T/err" && ok "llama.cpp drafted tokens with it" || bad "llama.cpp drafted no tokens"
    fi
fi

t_done
