#!/bin/sh
# test_outdir.sh - synth and quantize never destroy data: OUT == IN (also
# through a symlink or a relative path) is refused, an existing non-empty OUT
# needs --force, and files are written under a temporary name and renamed,
# so a symlink in OUT pointing at the input is replaced, never written through.
. "$(dirname "$0")/lib.sh"
t_init test_outdir
same() { cmp -s "$1" "$2" && ok "$3" || bad "$3"; }

expect "synth" 0 "" -- "$BIN" synth --shape tiny -o "$T/a"
cp "$T/a/model.safetensors" "$T/a.st"
cp "$T/a/config.json" "$T/a.cfg"
expect "synth into an existing model" 1 "pass --force" -- "$BIN" synth --shape tiny --bits 8 -o "$T/a"
same "$T/a/model.safetensors" "$T/a.st" "refused synth left the model alone"
expect "quantize -o IN" 1 "is the input directory" -- "$BIN" quantize -m "$T/a" --bits 8 -o "$T/a"
expect "quantize -o IN --force" 1 "is the input directory" -- "$BIN" quantize -m "$T/a" --bits 8 -o "$T/a" --force
ln -s "$T/a" "$T/link"
expect "quantize -o symlink to IN" 1 "is the input directory" -- "$BIN" quantize -m "$T/a" --bits 8 -o "$T/link" --force
mkdir "$T/sub"
(cd "$T/sub" && "$BIN" quantize -m ../a --bits 4 -o "../sub/../a/" --force >"$T/out" 2>"$T/err"); rc=$?
[ "$rc" -eq 1 ] && grep -q "is the input directory" "$T/err" && ok "quantize -o relative path to IN" ||
    bad "quantize -o relative path to IN (exit $rc)"
same "$T/a/model.safetensors" "$T/a.st" "input weights intact"
same "$T/a/config.json" "$T/a.cfg" "input config intact"
expect "input still loads" 0 "" -- "$BIN" generate -m "$T/a" -p "Hello" -n 3 --ignore-eos

# --force into a directory whose files are symlinks to the input's
mkdir "$T/o"
ln -s "$T/a/model.safetensors" "$T/o/model.safetensors"
ln -s "$T/a/config.json" "$T/o/config.json"
expect "quantize into non-empty OUT" 1 "pass --force" -- "$BIN" quantize -m "$T/a" --bits 8 -o "$T/o"
expect "quantize --force over symlinks" 0 "" -- "$BIN" quantize -m "$T/a" --bits 8 -o "$T/o" --force
same "$T/a/model.safetensors" "$T/a.st" "input weights intact after --force"
same "$T/a/config.json" "$T/a.cfg" "input config intact after --force"
[ ! -L "$T/o/model.safetensors" ] && ok "symlink replaced by the new file" || bad "symlink replaced by the new file"
expect "quantized output loads" 0 "MLX 8-bit" -- "$BIN" generate -m "$T/o" -p "Hello" -n 3 --ignore-eos
ls "$T/o" | grep -q tmp-dflash && bad "no temporary files left" || ok "no temporary files left"
expect "synth --force" 0 "" -- "$BIN" synth --shape tiny --bits 4 -o "$T/a" --force
expect "synth --force output loads" 0 "MLX 4-bit" -- "$BIN" generate -m "$T/a" -p "Hello" -n 3 --ignore-eos

# synth -o the tokenizer directory it links from
mkdir "$T/tok" && cp models/qwen3-tokenizer/tokenizer*.json "$T/tok/"
cp "$T/tok/tokenizer.json" "$T/tok.json"
expect "synth -o the tokenizer dir" 1 "choose another -o" -- "$BIN" synth --shape tiny --tokenizer "$T/tok" -o "$T/tok" --force
same "$T/tok/tokenizer.json" "$T/tok.json" "tokenizer intact"
: >"$T/file"
expect "synth -o a file" 1 "not a directory" -- "$BIN" synth --shape tiny -o "$T/file"
expect "synth into an empty dir" 0 "" -- "$BIN" synth --shape tiny --draft -o "$T/sub"

t_done
