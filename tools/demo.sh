#!/bin/sh
# make demo: answer a prompt with the shipped demo pair, plain greedy and
# DFlash, then compare speed and check that the two outputs are identical.
# DEMO_PROMPT and DEMO_TOKENS override the prompt (a maths one: the small demo
# target imitates worked steps but not their arithmetic) and the length.
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${DFLASH_BIN:-./dflash}
T=models/demo/target D=models/demo/draft
PROMPT=${DEMO_PROMPT:-"Solve for x: 3x + 5 = 20."}
N=${DEMO_TOKENS:-128}
if [ ! -f "$T/config.json" ] || [ ! -f "$D/config.json" ]; then
    echo "demo: the demo models are missing ($T, $D)" >&2; exit 1
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "prompt: $PROMPT"
echo "--- DFlash answer ---"
"$BIN" generate -m "$T" --draft "$D" --chat -p "$PROMPT" -n "$N" --stats-json \
    >"$tmp/dflash.txt" 2>"$tmp/dflash.err" || { cat "$tmp/dflash.err" >&2; exit 1; }
cat "$tmp/dflash.txt"; echo
"$BIN" generate -m "$T" --chat -p "$PROMPT" -n "$N" --stats-json \
    >"$tmp/greedy.txt" 2>"$tmp/greedy.err" || { cat "$tmp/greedy.err" >&2; exit 1; }
field() { tail -n 1 "$1" | sed -nE "s/.*\"$2\": ([0-9.]+).*/\1/p"; }
g=$(field "$tmp/greedy.err" decode_tok_s); d=$(field "$tmp/dflash.err" decode_tok_s)
tau=$(field "$tmp/dflash.err" tau)
same=no; cmp -s "$tmp/greedy.txt" "$tmp/dflash.txt" && same=yes
echo "---"
awk -v g="$g" -v d="$d" -v tau="$tau" -v same="$same" 'BEGIN {
    printf "greedy: %.1f tok/s | DFlash: %.1f tok/s | tau %.2f | speed-up %.2fx | identical output: %s\n",
           g, d, tau, (g > 0 ? d / g : 0), same }'
[ "$same" = yes ]
