#!/bin/sh
# make demo: answer a prompt with the shipped demo pair, plain greedy and
# DFlash, then compare speed and check that the two outputs are identical.
# DEMO_PROMPT and DEMO_TOKENS override the prompt (a maths one: the small demo
# target imitates worked steps but not their arithmetic) and the length,
# DEMO_REPS the runs per mode (default 3; the speeds shown are medians).
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
# each mode runs REPS times, alternating (a short answer takes ~0.1 s, so one
# run is at the mercy of whatever else the machine does); medians are shown
REPS=${DEMO_REPS:-3}
field() { tail -n 1 "$1" | sed -nE "s/.*\"$2\": ([0-9.]+).*/\1/p"; }
same=yes
for r in $(seq "$REPS"); do
    "$BIN" generate -m "$T" --draft "$D" --chat -p "$PROMPT" -n "$N" --stats-json \
        >"$tmp/dflash.txt" 2>"$tmp/dflash.err" || { cat "$tmp/dflash.err" >&2; exit 1; }
    "$BIN" generate -m "$T" --chat -p "$PROMPT" -n "$N" --stats-json \
        >"$tmp/greedy.txt" 2>"$tmp/greedy.err" || { cat "$tmp/greedy.err" >&2; exit 1; }
    [ "$r" = 1 ] && { cat "$tmp/dflash.txt"; echo; }
    cmp -s "$tmp/greedy.txt" "$tmp/dflash.txt" || same=no
    field "$tmp/greedy.err" decode_tok_s >>"$tmp/g.list"
    field "$tmp/dflash.err" decode_tok_s >>"$tmp/d.list"
done
median() { sort -n "$1" | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
g=$(median "$tmp/g.list"); d=$(median "$tmp/d.list")
tau=$(field "$tmp/dflash.err" tau)
echo "---"
awk -v g="$g" -v d="$d" -v tau="$tau" -v same="$same" -v n="$REPS" 'BEGIN {
    printf "greedy: %.1f tok/s | DFlash: %.1f tok/s (medians of %d runs) | tau %.2f | speed-up %.2fx | identical output: %s\n",
           g, d, n, tau, (g > 0 ? d / g : 0), same }'
[ "$same" = yes ]
