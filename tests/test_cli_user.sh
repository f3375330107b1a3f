#!/bin/sh
# test_cli_user.sh - the command line as a llama.cpp user expects it: write
# errors on stdout fail the run, a final newline on a terminal, options of
# other commands rejected, -m FILE explained, --version, random default seed
# (printed, and --seed takes it back), -n -1, and the chat: /help, a long
# line is one turn, a conversation longer than the context keeps answering,
# Ctrl-C stops an answer but not the chat.
. "$(dirname "$0")/lib.sh"
t_init test_cli_user
M="$T/tgt"
"$BIN" synth --shape tiny -o "$M" 2>/dev/null || { echo "synth failed"; exit 1; }

# stdout write errors
expect "generate >/dev/full" 1 "writing to stdout" -- sh -c "\"$BIN\" generate -m \"$M\" -p Hello -n 8 --ignore-eos >/dev/full"
expect "tokenize >/dev/full" 1 "writing to stdout" -- sh -c "\"$BIN\" tokenize -m \"$M\" -p Hello >/dev/full"
expect "--help >/dev/full" 1 "writing to stdout" -- sh -c "\"$BIN\" generate --help >/dev/full"
expect "generate to a pipe" 0 "" -- "$BIN" generate -m "$M" -p Hello -n 4 --ignore-eos

# a terminal gets a final newline (script(1) provides the pty)
if command -v script >/dev/null 2>&1; then
    script -qec "\"$BIN\" generate -m \"$M\" -p Hello -n 6 --ignore-eos 2>/dev/null" /dev/null >"$T/tty" 2>&1
    last=$(tail -c 2 "$T/tty" | od -An -c | tr -d ' ')
    [ "$last" = '\r\n' ] && ok "tty: output ends with a newline" || bad "tty: output ends with a newline (last bytes: $last)"
    "$BIN" generate -m "$M" -p Hello -n 6 --ignore-eos >"$T/pipe" 2>/dev/null
    [ "$(tail -c 1 "$T/pipe" | od -An -c | tr -d ' ')" != '\n' ] && ok "pipe: text unchanged (no newline added)" ||
        echo "ok - pipe: (the text itself ended with a newline)"
    # Ctrl-D at the chat prompt ends the prompt's line (issue 19 item 11): script
    # sends ^D when its stdin ends, here once the prompt "> " is out
    rm -f "$T/tty"
    (i=0; while ! grep -q '> ' "$T/tty" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done; sleep 0.3) |
        timeout 120 script -qec "\"$BIN\" chat -m \"$M\" -n 2" /dev/null >"$T/tty" 2>&1
    rc=$?
    last=$(tail -c 2 "$T/tty" | od -An -c | tr -d ' ')
    [ $rc -eq 0 ] && [ "$last" = '\r\n' ] && ok "chat: Ctrl-D at the prompt ends its line" ||
        bad "chat: Ctrl-D at the prompt ends its line (exit $rc, last bytes: $last)"
fi

# options of other commands, model files
expect "tokenize --temp" 2 "not used by 'tokenize'" -- "$BIN" tokenize -m "$M" -p hi --temp 0.5
expect "generate --prompts" 2 "not used by 'generate'" -- "$BIN" generate -m "$M" -p hi --prompts x.jsonl
expect "bench --chat" 2 "not used by 'bench'" -- "$BIN" bench -m "$M" --chat
expect "chat -p" 2 "not used by 'chat'" -- "$BIN" chat -m "$M" -p hi
expect "a value that looks like an option" 0 "" -- "$BIN" tokenize -m "$M" -p --temp
: >"$T/model.gguf"
expect "-m empty file.gguf" 1 "is not a GGUF file" -- "$BIN" generate -m "$T/model.gguf" -p hi
expect "-m model.safetensors" 1 "pass the model directory" -- "$BIN" generate -m "$M/model.safetensors" -p hi
expect "--draft model.safetensors" 1 "pass the model directory" -- "$BIN" generate -m "$M" --draft "$M/config.json" -p hi
expect "--version" 0 "" -- "$BIN" --version
grep -q "^dflash [0-9]" "$T/out" && ok "--version prints the version" || bad "--version prints the version"

# seeds and -n -1
expect "random seed" 0 "seed: " -- "$BIN" generate -m "$M" -p Hello -n 12 --temp 0.9 --ignore-eos
cp "$T/out" "$T/s1"
seed=$(sed -n 's/^seed: \([0-9]*\).*/\1/p' "$T/err")
expect "--seed takes the printed seed back" 0 "" -- "$BIN" generate -m "$M" -p Hello -n 12 --temp 0.9 --ignore-eos --seed "$seed"
cmp -s "$T/out" "$T/s1" && ok "same seed, same text" || bad "same seed, same text"
grep -q "seed:" "$T/err" && bad "an explicit seed is not announced" || ok "an explicit seed is not announced"
expect "--seed -1" 0 "seed: " -- "$BIN" generate -m "$M" -p Hello -n 4 --temp 0.9 --seed -1
expect "greedy run" 0 "" -- "$BIN" generate -m "$M" -p Hello -n 4
grep -q "seed:" "$T/err" && bad "greedy: no seed line" || ok "greedy: no seed line"
expect "-n -1 runs to the end of the context" 0 "stopped: context full" -- "$BIN" generate -m "$M" -c 48 -p Hello -n -1 --ignore-eos
expect "-n -2" 2 "expects an integer" -- "$BIN" generate -m "$M" -p Hello -n -2

# chat
printf '/help\nHello\n/exit\n' | "$BIN" chat -m "$M" -n 4 -v >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 0 ] && grep -q "/reset" "$T/err" && ok "chat /help" || bad "chat /help (exit $rc)"
[ "$(grep -c '^decode:' "$T/err")" -eq 1 ] && ok "chat: /help is not a turn" || bad "chat: /help is not a turn"
# a 70000-byte line is one message (fgets split it into two turns of 64 KB)
awk 'BEGIN { for (i = 0; i < 7000; i++) printf "0123456789"; printf "\n" }' >"$T/long.txt"
"$BIN" chat -m "$M" -n 2 -v <"$T/long.txt" >"$T/out" 2>"$T/err"
n_err=$(grep -c "error" "$T/err")
[ "$n_err" -eq 1 ] && grep -q "the message is" "$T/err" && ok "chat: a 70 KB line is one message" ||
    bad "chat: a 70 KB line is one message ($n_err errors)"
# a message too long for the context is refused and the conversation kept:
# the next turn's prompt still holds the first exchange (more tokens than the
# same message as the first turn; it was as many when the history was lost)
awk 'BEGIN { for (i = 0; i < 300; i++) printf "word%d ", i; printf "\n" }' >"$T/longmsg.txt"
{ echo "Hello there, how are you today"; cat "$T/longmsg.txt"; echo "Hi again"; } >"$T/refused.txt"
"$BIN" chat -m "$M" -c 256 -n 8 -v <"$T/refused.txt" >"$T/out" 2>"$T/err"
rc=$?
sed -nE 's/^prompt: ([0-9]+) tokens.*/\1/p' "$T/err" >"$T/prompts"
echo "Hi again" | "$BIN" chat -m "$M" -c 256 -n 8 -v 2>&1 >/dev/null | sed -nE 's/^prompt: ([0-9]+) tokens.*/\1/p' >"$T/alone"
n3=$(sed -n 2p "$T/prompts") alone=$(cat "$T/alone")
[ $rc -eq 0 ] && [ "$(grep -c 'shorten it' "$T/err")" -eq 1 ] && [ "$(wc -l <"$T/prompts")" -eq 2 ] &&
    ok "chat: a too-long message is refused, the others answered" ||
    bad "chat: a too-long message is refused, the others answered (exit $rc)"
[ -n "$n3" ] && [ -n "$alone" ] && [ "$n3" -gt "$alone" ] &&
    ok "chat: after a refused message the conversation is kept (next prompt $n3 tokens, alone $alone)" ||
    bad "chat: after a refused message the conversation is kept (next prompt $n3 tokens, alone $alone)"
grep -q "dropped" "$T/err" && bad "chat: a refused message drops nothing" || ok "chat: a refused message drops nothing"
# more turns than the context holds: old turns are dropped, every turn answers
for i in 1 2 3 4 5 6 7 8; do echo "Tell me about the number $i and its friends"; done >"$T/turns.txt"
"$BIN" chat -m "$M" -c 96 -n 8 -v <"$T/turns.txt" >"$T/out" 2>"$T/err"
rc=$?
answers=$(grep -c '^decode:' "$T/err")
[ $rc -eq 0 ] && [ "$answers" -eq 8 ] && ok "chat past the context: 8 of 8 turns answered" ||
    bad "chat past the context: $answers of 8 turns answered (exit $rc)"
grep -qE "dropped the [0-9]+ oldest exchanges? \(a message and its answer\), [0-9]+ kept" "$T/err" &&
    ok "chat says how many old turns it dropped" || bad "chat says how many old turns it dropped"
grep -q "error" "$T/err" && bad "chat past the context: no errors" || ok "chat past the context: no errors"

# command-line consistency (issue 19 item 9)
expect "--n-predict=4 (--option=VALUE)" 0 "" -- "$BIN" generate -m "$M" -p Hello --n-predict=4 --ignore-eos
expect "--chat=yes: a flag takes no value" 2 "unknown option yes" -- "$BIN" generate -m "$M" -p Hello --chat=yes
expect "generate --system without --chat" 2 "--system needs --chat" -- "$BIN" generate -m "$M" -p Hi --system x
expect "generate --think without --chat" 2 "need --chat" -- "$BIN" generate -m "$M" -p Hi --think
expect "serve --backend" 1 "error" -- "$BIN" serve -m "$T/nowhere" --backend cpu --port 0
expect "serve --backend=nonsense" 1 "nonsense" -- "$BIN" serve -m "$M" --backend=nonsense --port 0
printf '/frobnicate\n//etc/hosts\n/exit\n' | "$BIN" chat -m "$M" -n 2 -v >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 0 ] && grep -q "unknown command /frobnicate" "$T/err" && [ "$(grep -c '^decode:' "$T/err")" -eq 1 ] &&
    ok "chat: an unknown /command is refused, //x is sent as /x" ||
    bad "chat: an unknown /command is refused, //x is sent as /x (exit $rc, $(grep -c '^decode:' "$T/err") answers)"

# a one-token reply has no decode rate (was 41,797 tok/s: the emit time alone)
expect "generate -n 1: no decode rate" 0 "decode: 1 tokens, 0.00 tok/s" -- "$BIN" generate -m "$M" -p Hello -n 1 --ignore-eos

# late checks (issue 19 item 10): a missing prompt file is named before the
# model loads or anything is measured
"$BIN" bench -m "$M" --prompts "$T/missing.jsonl" >"$T/out" 2>"$T/err"
rc=$?
[ $rc -ne 0 ] && grep -q "cannot open prompt file" "$T/err" && ! grep -q "decode T=1" "$T/out" &&
    ok "bench --prompts MISSING fails before the benchmark" || bad "bench --prompts MISSING fails before the benchmark (exit $rc)"

# prompt reuse across turns (issue 19 item 3): each turn extends the tokens
# of the last prompt and its answer, so the next prompt reuses all of them
# (the answer's last token and its stop token may be re-read: -1). The demo
# pair answers in a few tokens and stops on <|im_end|> as a real chat does.
printf 'What is 2+2?\nAnd 3+3?\nThanks, and 4+4?\n' |
    "$BIN" chat -m models/demo/target --draft models/demo/draft -n 48 -v >"$T/out" 2>"$T/err"
rc=$?
sed -nE 's/^prompt: ([0-9]+) tokens \(([0-9]+) reused\).*/\1 \2/p; s/^decode: ([0-9]+) tokens.*/\1/p' "$T/err" |
    tr '\n' ' ' >"$T/reuse"
read -r p1 r1 d1 p2 r2 d2 p3 r3 d3 <"$T/reuse"
[ $rc -eq 0 ] && [ -n "$d3" ] && [ "$r1" -eq 0 ] && [ "$r2" -ge $((p1 + d1 - 1)) ] && [ "$r3" -ge $((p2 + d2 - 1)) ] &&
    [ "$p3" -gt "$r3" ] && ok "chat reuses the whole conversation (turns: $(cat "$T/reuse"))" ||
    bad "chat reuses the whole conversation (exit $rc; prompt, reused, answer per turn: $(cat "$T/reuse"))"
printf 'What is 2+2?\nAnd 3+3?\n' |
    "$BIN" chat -m models/demo/target -n 48 --think -v >"$T/out" 2>"$T/err"
[ $? -eq 0 ] && [ "$(grep -c '^decode:' "$T/err")" -eq 2 ] && ok "chat --think: two turns (history re-rendered)" ||
    bad "chat --think: two turns"

# Ctrl-C during an answer: the answer stops (its statistics are printed, so
# the chat handled it), the chat goes on and quits normally at /exit. stdout
# is a FIFO the test does not read until the signal is sent, so the answer
# cannot run ahead more than a pipe buffer (no timing involved).
mkfifo "$T/in" "$T/outp"
sh -c 'echo $$ >"$1"; shift; exec "$@"' sh "$T/pid" "$BIN" chat -m "$M" -c 40000 -n -1 -v \
    <"$T/in" >"$T/outp" 2>"$T/err" &
exec 7>"$T/in" 8<"$T/outp"
echo "Hello" >&7
dd bs=1 count=1 <&8 >/dev/null 2>&1 # the answer has started
kill -INT "$(cat "$T/pid")"
cat <&8 >"$T/out" 7>&- &
printf '/help\n/exit\n' >&7
exec 7>&-
wait %1
rc=$?
exec 8<&-
[ $rc -eq 0 ] && ok "chat survives Ctrl-C" || bad "chat survives Ctrl-C (exit $rc)"
grep -q "(answer stopped)" "$T/err" && ok "Ctrl-C stops the answer" || bad "Ctrl-C stops the answer"
grep -q "stopped: callback" "$T/err" && ok "the stopped answer is accounted" || bad "the stopped answer is accounted"
grep -q "/reset" "$T/err" && ok "the chat reads on after Ctrl-C (/help)" || bad "the chat reads on after Ctrl-C (/help)"

t_done
