#!/bin/sh
# test_writers.sh - every command that writes files (quantize, synth,
# convert, bench --plot) against bad input: a missing input, a file of the wrong kind, a
# GGUF where a directory is read, a truncated or corrupt input, an unreadable
# input file, an output that cannot be written (a write failing half-way:
# ulimit -f), an existing output with and without --force, the output inside
# the input. After each failure the output that was there is byte-identical
# (every file, link and directory under it), a new output does not appear, and
# no temporary file is left anywhere under the scratch directory.
. "$(dirname "$0")/lib.sh"
t_init test_writers

# snapshot PATH: every entry under it, with the checksum of each file and the
# target of each link (a directory or a file)
snap() {
    if [ -d "$1" ]; then
        (cd "$1" && find . | LC_ALL=C sort | while read -r f; do
            if [ -L "$f" ]; then echo "$f -> $(readlink "$f")"
            elif [ -f "$f" ]; then echo "$f $(cksum <"$f")"
            else echo "$f/"; fi
        done)
    elif [ -e "$1" ]; then cksum <"$1"
    else echo "(none)"; fi
}
# orig PATH: remember PATH (PATH.snap, and a copy PATH.orig to restore)
orig() { snap "$1" >"$1.snap"; rm -rf "$1.orig"; cp -a "$1" "$1.orig"; }
# kept NAME PATH: PATH is as orig saw it (else it is restored, so that the
# next case starts from the same state), no temporary file anywhere
kept() {
    snap "$2" >"$T/now"
    if cmp -s "$T/now" "$2.snap"; then ok "$1: output unchanged"; else
        bad "$1: output unchanged"; diff "$2.snap" "$T/now" | head -5
        rm -rf "$2"; cp -a "$2.orig" "$2"
    fi
    left=$(find "$T" -name '*tmp-dflash*' | head -3)
    [ -z "$left" ] && ok "$1: no temporary files" || bad "$1: no temporary files ($left)"
    rm -rf $left
}
# absent NAME PATH: a failed command made no PATH (removed for the next case)
absent() { if [ ! -e "$2" ]; then ok "$1: no new output"; else bad "$1: no new output ($2 exists)"; rm -rf "$2"; fi; }
# a command whose writes fail past 2000 blocks (1 MB at least): SIGXFSZ
# ignored, so write() fails with EFBIG and the command cleans up
small_disk() { sh -c 'trap "" XFSZ; ulimit -f 2000; exec "$@"' sh "$@"; }
tiny_disk() { sh -c 'trap "" XFSZ; ulimit -f 1; exec "$@"' sh "$@"; } # 512 bytes at least

# inputs: a bf16 target, a quantized output of it, a GGUF of it, a text file
"$BIN" synth --shape tiny -o "$T/in" 2>/dev/null || { echo "synth failed"; exit 1; }
"$BIN" quantize -m "$T/in" --bits 8 -o "$T/good" 2>/dev/null || { echo "quantize failed"; exit 1; }
"$BIN" convert "$T/in" -o "$T/good.gguf" 2>/dev/null || { echo "convert failed"; exit 1; }
cp "$T/good.gguf" "$T/in.gguf"
"$BIN" quantize -m "$T/in" --bits 4 -o "$T/qin" 2>/dev/null || { echo "quantize failed"; exit 1; }
echo "hello" >"$T/file.txt"
mkdir "$T/notokdir" && cp "$T/in/config.json" "$T/in/generation_config.json" "$T/in/model.safetensors" "$T/notokdir/"
mkdir "$T/trunc" && cp "$T/in/config.json" "$T/in/generation_config.json" "$T/trunc/" &&
    head -c 100000 "$T/in/model.safetensors" >"$T/trunc/model.safetensors"
mkdir "$T/badcfg" && cp "$T/in/model.safetensors" "$T/badcfg/" && echo '{"hidden_size": ' >"$T/badcfg/config.json"
mkdir "$T/badtok" && cp "$T/in/config.json" "$T/in/model.safetensors" "$T/badtok/" && mkdir "$T/badtok/tokenizer.json"
orig "$T/in"
orig "$T/good"
orig "$T/good.gguf"
orig "$T/file.txt"

# ---- quantize: each bad input, into an existing model (--force) and into a new OUT
q_bad() { # NAME NEEDLE IN
    expect "quantize $1 --force" 1 "$2" -- "$BIN" quantize -m "$3" --bits 4 -o "$T/good" --force
    kept "quantize $1" "$T/good"
    expect "quantize $1 -o NEW" 1 "$2" -- "$BIN" quantize -m "$3" --bits 8 -o "$T/new"
    absent "quantize $1" "$T/new"
}
q_bad "missing input" "nowhere" "$T/nowhere"
q_bad "a text file" "is a file" "$T/file.txt"
q_bad "a GGUF" "is a GGUF file" "$T/in.gguf"
q_bad "truncated safetensors" "model.safetensors" "$T/trunc"
q_bad "corrupt config.json" "config.json" "$T/badcfg"
q_bad "unreadable tokenizer.json" "tokenizer.json" "$T/badtok"
q_bad "already quantized" "already quantized" "$T/qin"
# the output cannot be written: the write fails half-way, or OUT's parent is a file
expect "quantize, write fails, --force" 1 "" -- small_disk "$BIN" quantize -m "$T/in" --bits 8 -o "$T/good" --force
kept "quantize, write fails" "$T/good"
expect "quantize, write fails, -o NEW" 1 "" -- small_disk "$BIN" quantize -m "$T/in" --bits 8 -o "$T/new"
absent "quantize, write fails" "$T/new"
expect "quantize -o FILE/sub" 1 "$T/file.txt/sub" -- "$BIN" quantize -m "$T/in" --bits 8 -o "$T/file.txt/sub"
kept "quantize -o FILE/sub" "$T/file.txt"
if [ "$(id -u)" != 0 ]; then # root writes anywhere
    mkdir "$T/ro" && chmod 555 "$T/ro"
    expect "quantize -o read-only/sub" 1 "cannot create" -- "$BIN" quantize -m "$T/in" --bits 8 -o "$T/ro/sub"
    chmod 755 "$T/ro"
fi
# existing output: refused without --force, replaced with it
expect "quantize into a model without --force" 1 "pass --force" -- "$BIN" quantize -m "$T/in" --bits 4 -o "$T/good"
kept "quantize without --force" "$T/good"
expect "quantize --force" 0 "" -- "$BIN" quantize -m "$T/in" --bits 4 -o "$T/good" --force
snap "$T/good" >"$T/now"
cmp -s "$T/now" "$T/good.snap" && bad "quantize --force replaced the model" || ok "quantize --force replaced the model"
expect "quantize --force output loads" 0 "MLX 4-bit" -- "$BIN" generate -m "$T/good" -p Hello -n 2 --ignore-eos
[ -z "$(find "$T" -name '*tmp-dflash*')" ] && ok "quantize --force: no temporary files" ||
    bad "quantize --force: no temporary files"
# the output inside the input, and the output the input
expect "quantize -o IN/sub" 0 "" -- "$BIN" quantize -m "$T/in" --bits 8 -o "$T/in/q8"
expect "quantize -o IN/sub loads" 0 "MLX 8-bit" -- "$BIN" generate -m "$T/in/q8" -p Hello -n 2 --ignore-eos
rm -rf "$T/in/q8"
kept "quantize -o IN/sub: the input" "$T/in"
expect "quantize -o IN --force" 1 "is the input directory" -- "$BIN" quantize -m "$T/in" --bits 8 -o "$T/in" --force
kept "quantize -o IN" "$T/in"

# ---- synth
orig "$T/good"
s_bad() { # NAME NEEDLE ARGS...
    s_name=$1 s_needle=$2; shift 2
    expect "synth $s_name --force" 1 "$s_needle" -- "$BIN" synth "$@" -o "$T/good" --force
    kept "synth $s_name" "$T/good"
    expect "synth $s_name -o NEW" 1 "$s_needle" -- "$BIN" synth "$@" -o "$T/new"
    absent "synth $s_name" "$T/new"
}
mkdir "$T/notok"
s_bad "--tokenizer MISSING" "nowhere" --shape tiny --tokenizer "$T/nowhere"
s_bad "--tokenizer without tokenizer.json" "no tokenizer.json" --shape tiny --tokenizer "$T/notok"
s_bad "unknown shape" "unknown shape" --shape qwen9
expect "synth, write fails, --force" 1 "" -- small_disk "$BIN" synth --shape tiny -o "$T/good" --force
kept "synth, write fails" "$T/good"
expect "synth, write fails, -o NEW" 1 "" -- small_disk "$BIN" synth --shape tiny -o "$T/new"
absent "synth, write fails" "$T/new"
expect "synth into a model without --force" 1 "pass --force" -- "$BIN" synth --shape tiny -o "$T/good"
kept "synth without --force" "$T/good"
expect "synth -o a file" 1 "not a directory" -- "$BIN" synth --shape tiny -o "$T/file.txt"
expect "synth -o FILE/sub" 1 "$T/file.txt/sub" -- "$BIN" synth --shape tiny -o "$T/file.txt/sub"
expect "synth --force" 0 "" -- "$BIN" synth --shape tiny --bits 8 -o "$T/good" --force
expect "synth --force output loads" 0 "MLX 8-bit" -- "$BIN" generate -m "$T/good" -p Hello -n 2 --ignore-eos
[ -z "$(find "$T" -name '*tmp-dflash*')" ] && ok "synth --force: no temporary files" ||
    bad "synth --force: no temporary files"

# ---- convert
c_bad() { # NAME NEEDLE IN [ARGS...]
    c_name=$1 c_needle=$2 c_in=$3; shift 3
    expect "convert $c_name --force" 1 "$c_needle" -- "$BIN" convert "$c_in" -o "$T/good.gguf" --force "$@"
    kept "convert $c_name" "$T/good.gguf"
    expect "convert $c_name -o NEW" 1 "$c_needle" -- "$BIN" convert "$c_in" -o "$T/new.gguf" "$@"
    absent "convert $c_name" "$T/new.gguf"
}
c_bad "missing input" "nowhere" "$T/nowhere"
c_bad "a text file" "is a file" "$T/file.txt"
c_bad "a GGUF" "already a GGUF file" "$T/in.gguf"
c_bad "truncated safetensors" "model.safetensors" "$T/trunc"
c_bad "corrupt config.json" "config.json" "$T/badcfg"
c_bad "no tokenizer.json" "has no tokenizer.json" "$T/notokdir"
c_bad "--target MISSING" "tokenizer.json" "$T/in" --target "$T/nowhere"
expect "convert, write fails, --force" 1 "" -- small_disk "$BIN" convert "$T/in" -o "$T/good.gguf" --force
kept "convert, write fails" "$T/good.gguf"
expect "convert, write fails, -o NEW" 1 "" -- small_disk "$BIN" convert "$T/in" -o "$T/new.gguf"
absent "convert, write fails" "$T/new.gguf"
expect "convert -o FILE/x.gguf" 1 "$T/file.txt/x.gguf" -- "$BIN" convert "$T/in" -o "$T/file.txt/x.gguf"
expect "convert without --force" 1 "pass --force" -- "$BIN" convert "$T/in" -o "$T/good.gguf" --type q8_0
kept "convert without --force" "$T/good.gguf"
expect "convert -o IN's weights" 1 "is the input" -- "$BIN" convert "$T/in" -o "$T/in/model.safetensors" --force
kept "convert -o IN's weights" "$T/in"
expect "convert -o IN/x.gguf" 0 "" -- "$BIN" convert "$T/in" -o "$T/in/x.gguf" --type q8_0
expect "convert -o IN/x.gguf loads" 0 "" -- "$BIN" generate -m "$T/in/x.gguf" -p Hello -n 2 --ignore-eos
rm -f "$T/in/x.gguf"
kept "convert -o IN/x.gguf: the input" "$T/in"

# ---- bench --plot: checked before the benchmark, written through a temporary
expect "bench --plot DIR/missing/x.svg" 1 "cannot write" -- "$BIN" bench -m "$T/in" --plot "$T/nowhere/x.svg"
grep -q "decode" "$T/out" && bad "bench --plot MISSING fails before the benchmark" ||
    ok "bench --plot MISSING fails before the benchmark"
expect "bench --plot a directory" 1 "is a directory" -- "$BIN" bench -m "$T/in" --plot "$T"
echo "<svg/>" >"$T/plot.svg"
orig "$T/plot.svg"
expect "bench --plot, write fails" 1 "left as it was" -- tiny_disk "$BIN" bench -m "$T/in" --reps 1 --depth 8 --plot "$T/plot.svg"
kept "bench --plot, write fails" "$T/plot.svg"
expect "bench --plot" 0 "" -- "$BIN" bench -m "$T/in" --reps 1 --depth 8 --plot "$T/plot.svg"
grep -q "</svg>" "$T/plot.svg" && ok "bench --plot wrote the plot" || bad "bench --plot wrote the plot"

t_done
