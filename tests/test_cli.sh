#!/bin/sh
# test_cli.sh - the dflash command line as a user runs it: help, tokenize,
# generate (plain, DFlash, quantized), --stats-json, and bad input giving a
# one-line error with a non-zero exit, never a crash.
. "$(dirname "$0")/lib.sh"
t_init test_cli

expect "main help" 0 "" -- "$BIN" --help
grep -q "generate" "$T/out" && ok "help lists commands" || bad "help lists commands"
for c in generate chat tokenize bench synth quantize; do
    expect "$c --help" 0 "" -- "$BIN" $c --help
done
grep -q -- "--draft-max" "$T/out" || true
expect "unknown command" 2 "unknown command" -- "$BIN" frobnicate
expect "unknown option" 2 "unknown option" -- "$BIN" generate -m x --bogus
expect "bad -n" 2 "expects an integer" -- "$BIN" generate -m x -p hi -n abc
expect "bad --draft-max" 2 "expects an integer" -- "$BIN" generate -m x -p hi --draft-max many
expect "block size 0" 2 "expects an integer in 1..64" -- "$BIN" generate -m x -p hi --block-size 0

# tokenizer only
expect "tokenize" 0 "" -- "$BIN" tokenize -m models/qwen3-tokenizer -p "The quick brown fox"
[ "$(cat "$T/out")" = "785 3974 13876 38835" ] && ok "tokenize ids" || bad "tokenize ids: $(cat "$T/out")"
# --special: a plain prompt's ids (the post_processor's special tokens: Qwen3 none, Gemma 3 <bos> = 2)
expect "tokenize --special" 0 "" -- "$BIN" tokenize -m models/qwen3-tokenizer -p "The quick brown fox" --special
[ "$(cat "$T/out")" = "785 3974 13876 38835" ] && ok "tokenize --special: qwen3 adds none" || bad "tokenize --special qwen3: $(cat "$T/out")"
expect "gemma3 tokenize" 0 "" -- "$BIN" tokenize -m models/gemma3-tokenizer -p "The quick brown fox"
cp "$T/out" "$T/g3ids"
expect "gemma3 tokenize --special" 0 "" -- "$BIN" tokenize -m models/gemma3-tokenizer -p "The quick brown fox" --special
[ "$(cat "$T/out")" = "2 $(cat "$T/g3ids")" ] && ! grep -q '^2 ' "$T/g3ids" && ok "tokenize --special: gemma3 <bos>" ||
    bad "tokenize --special gemma3: $(cat "$T/out") vs $(cat "$T/g3ids")"
"$BIN" tokenize --help | grep -q -- "--special" && ok "tokenize --help: --special" ||
    bad "tokenize --help: --special"
expect "--special is tokenize's" 2 "not used by 'generate'" -- "$BIN" generate -m x -p hi --special
printf 'caf\303\251 \360\237\230\200\n' >"$T/p.txt"
expect "tokenize -f" 0 "" -- "$BIN" tokenize -m models/qwen3-tokenizer -f "$T/p.txt"
printf 'bad \377 byte' >"$T/bad.txt"
expect "invalid UTF-8 prompt" 1 "UTF-8" -- "$BIN" tokenize -m models/qwen3-tokenizer -f "$T/bad.txt"
[ "$(wc -l <"$T/err")" -eq 1 ] && ok "invalid UTF-8: one line" || bad "invalid UTF-8: one line"
expect "missing tokenizer" 1 "tokenizer.json" -- "$BIN" tokenize -m "$T/nowhere" -p hi

# synthetic pair with the real tokenizer
expect "synth target" 0 "" -- "$BIN" synth --shape tiny -o "$T/tgt"
expect "synth draft" 0 "" -- "$BIN" synth --shape tiny --draft -o "$T/drf"
# synth --help says the depth a draft is written with (issue 19 item 11: it said "5-layer")
"$BIN" synth --help | grep -q "5 layers; 2 for the tiny shapes" && grep -q '"num_hidden_layers":[[:space:]]*2,' "$T/drf/config.json" &&
    ok "synth --help: the tiny draft's 2 layers" || bad "synth --help: the tiny draft's 2 layers"
expect "synth q4" 0 "" -- "$BIN" synth --shape tiny --bits 4 -o "$T/tq4"
expect "synth q8" 0 "" -- "$BIN" synth --shape tiny --bits 8 -o "$T/tq8"
# gpt-oss --bits 4: MXFP4 experts as openai ships them (loaded at 4 bits as WT_MXFP4)
expect "synth gpt-oss mxfp4" 0 "MXFP4 experts" -- "$BIN" synth --shape tiny-gptoss --bits 4 -o "$T/oss4"
grep -q '"quant_method":[[:space:]]*"mxfp4"' "$T/oss4/config.json" &&
    grep -q 'mlp.experts.gate_up_proj_blocks' "$T/oss4/model.safetensors" &&
    grep -q 'mlp.experts.down_proj_scales' "$T/oss4/model.safetensors" &&
    ok "synth gpt-oss mxfp4: config and *_blocks / *_scales" || bad "synth gpt-oss mxfp4: config and tensors"
expect "synth gpt-oss mxfp4 loads" 0 "decode:" -- "$BIN" generate -m "$T/oss4" -p "Hello" -n 4 --ignore-eos
expect "synth gpt-oss --bits 8" 1 "--bits 8 is not supported" -- "$BIN" synth --shape tiny-gptoss --bits 8 -o "$T/oss8"
expect "generate" 0 "decode:" -- "$BIN" generate -m "$T/tgt" -p "Hello there" -n 12 --ignore-eos
cp "$T/out" "$T/greedy.txt"
[ -s "$T/greedy.txt" ] && ok "generate wrote text" || bad "generate wrote text"
grep -q "decode:" "$T/out" && bad "stdout carries only text" || ok "stdout carries only text"
expect "generate --draft" 0 "tau" -- "$BIN" generate -m "$T/tgt" --draft "$T/drf" -p "Hello there" -n 12 --ignore-eos
cmp -s "$T/out" "$T/greedy.txt" && ok "DFlash text equals greedy" || bad "DFlash text equals greedy"
expect "generate -md --draft-max 3" 0 "" -- "$BIN" generate -m "$T/tgt" -md "$T/drf" -p "Hello there" -n 12 --ignore-eos --draft-max 3
cmp -s "$T/out" "$T/greedy.txt" && ok "draft-max 3 equals greedy" || bad "draft-max 3 equals greedy"
expect "stats json" 0 "" -- "$BIN" generate -m "$T/tgt" -md "$T/drf" -p "Hi" -n 7 --ignore-eos --stats-json
last=$(tail -n 1 "$T/err")
for k in n_tokens rounds tau accept_per_pos draft_ms verify_ms decode_tok_s; do
    echo "$last" | grep -q "\"$k\"" || bad "stats json has $k"
done
echo "$last" | grep -q '"n_tokens": 7,' && ok "-n 7 is exact" || bad "-n 7 is exact: $last"
expect "generate --chat" 0 "" -- "$BIN" generate -m "$T/tgt" -md "$T/drf" --chat --system "Be brief." -p "Hi" -n 6 --ignore-eos
expect "generate --chat --think" 0 "" -- "$BIN" generate -m "$T/tgt" --chat --think -p "Hi" -n 4 --ignore-eos
expect "generate q4" 0 "MLX 4-bit" -- "$BIN" generate -m "$T/tq4" -p "Hello" -n 6 --ignore-eos
expect "generate q8" 0 "MLX 8-bit" -- "$BIN" generate -m "$T/tq8" -p "Hello" -n 6 --ignore-eos
expect "sampling" 0 "" -- "$BIN" generate -m "$T/tgt" -md "$T/drf" -p "Hello" -n 10 --temp 0.8 --seed 3 --ignore-eos
cp "$T/out" "$T/s1"
expect "sampling plain" 0 "" -- "$BIN" generate -m "$T/tgt" -p "Hello" -n 10 --temp 0.8 --seed 3 --ignore-eos
cmp -s "$T/out" "$T/s1" && ok "DFlash sampling equals plain sampling (seed 3)" || bad "DFlash sampling equals plain sampling"

# constrained output: --grammar, --json-schema, --json-object (DFlash = plain, the text in the language)
printf 'root ::= "n" [0-9]{1,4} ("," [a-z]{1,3})?\n' >"$T/g.gbnf"
expect "generate --grammar" 0 "" -- "$BIN" generate -m "$T/tgt" -p "Hello" -n 12 --grammar "$T/g.gbnf"
cp "$T/out" "$T/g1"
grep -qE '^n[0-9]{1,4}(,[a-z]{0,3})?$' "$T/g1" && ok "--grammar output in the language" || bad "--grammar output in the language: $(cat "$T/g1")"
expect "generate --grammar -md" 0 "" -- "$BIN" generate -m "$T/tgt" -md "$T/drf" -p "Hello" -n 12 --grammar "$T/g.gbnf"
cmp -s "$T/out" "$T/g1" && ok "--grammar: DFlash equals plain" || bad "--grammar: DFlash equals plain"
printf '{"type":"object","properties":{"a":{"type":"boolean"}},"required":["a"]}' >"$T/s.json"
expect "generate --json-schema" 0 "" -- "$BIN" generate -m "$T/tgt" -md "$T/drf" -p "Hello" -n 16 --json-schema "$T/s.json" --temp 0.8 --seed 5
grep -qE '^[{]' "$T/out" && ok "--json-schema output starts an object" || bad "--json-schema output: $(cat "$T/out")"
expect "generate --json-object" 0 "" -- "$BIN" generate -m "$T/tgt" -p "Hello" -n 8 --json-object
printf 'root ::= item\n' >"$T/bad.gbnf"
expect "bad --grammar" 1 "rule 'item' is used but not defined" -- "$BIN" generate -m "$T/tgt" -p "Hello" --grammar "$T/bad.gbnf"
printf '{"type":"string","pattern":"x"}' >"$T/bad.json"
expect "bad --json-schema" 1 "unsupported keyword 'pattern'" -- "$BIN" generate -m "$T/tgt" -p "Hello" --json-schema "$T/bad.json"
expect "--grammar and --json-object" 2 "give one of" -- "$BIN" generate -m "$T/tgt" -p "Hello" --grammar "$T/g.gbnf" --json-object
expect "--grammar missing file" 1 "cannot open" -- "$BIN" generate -m "$T/tgt" -p "Hello" --grammar "$T/none.gbnf"

# quantize ahead of time == quantize at load
expect "quantize --bits 4" 0 "" -- "$BIN" quantize -m "$T/tgt" --bits 4 --group-size 64 -o "$T/qz"
expect "generate quantized dir" 0 "MLX 4-bit, group 64" -- "$BIN" generate -m "$T/qz" -p "Hello" -n 8 --ignore-eos
cp "$T/out" "$T/qz.txt"
expect "generate --quant q4" 0 "" -- "$BIN" generate -m "$T/tgt" -p "Hello" -n 8 --ignore-eos --quant q4
cmp -s "$T/out" "$T/qz.txt" && ok "quantize file equals --quant at load" || bad "quantize file equals --quant at load"
expect "quantize --bits 6" 1 "--bits must be 4 or 8, not 6" -- "$BIN" quantize -m "$T/tgt" --bits 6 -o "$T/qz6"
expect "quantize a quantized model" 1 "already quantized" -- "$BIN" quantize -m "$T/qz" --bits 8 -o "$T/qz2"
expect "bad --quant" 1 "unknown quantization 'q3'" -- "$BIN" generate -m "$T/tgt" -p hi --quant q3

# bad input at run time and load time
expect "prompt longer than the context" 1 "does not fit the context" -- "$BIN" generate -m "$T/tgt" -c 8 -p "one two three four five six seven eight nine ten"
[ "$(wc -l <"$T/err")" -eq 1 ] && ok "context error: one line" || bad "context error: one line"
expect "invalid UTF-8 generate" 1 "UTF-8" -- "$BIN" generate -m "$T/tgt" -f "$T/bad.txt"
expect "missing model" 1 "config.json" -- "$BIN" generate -m "$T/nowhere" -p hi
expect "block size above the draft's" 1 "block size 32 out of range" -- "$BIN" generate -m "$T/tgt" -md "$T/drf" -p hi --block-size 32
expect "draft as target" 1 "is a DFlash draft" -- "$BIN" generate -m "$T/drf" -p hi
expect "ctx beyond max positions" 1 "exceeds the model's max_position_embeddings" -- "$BIN" generate -m "$T/tgt" -c 100000 -p hi
head -c 100 "$T/tgt/model.safetensors" >"$T/trunc.st"
mkdir -p "$T/trunc" && cp "$T/tgt/config.json" "$T/tgt/tokenizer.json" "$T/trunc/" 2>/dev/null
cp "$T/trunc.st" "$T/trunc/model.safetensors"
expect "truncated weights" 1 "model.safetensors" -- "$BIN" generate -m "$T/trunc" -p hi
[ "$(wc -l <"$T/err")" -eq 1 ] && ok "truncated: one line" || bad "truncated: one line"

# --backend: cpu by name, an unknown name or an absent CUDA a one-line error
for c in generate chat bench; do
    "$BIN" $c --help | grep -q -- "--backend auto|cpu|cuda" && ok "$c --help lists --backend" || bad "$c --help lists --backend"
done
expect "generate --backend cpu" 0 "backend cpu (" -- "$BIN" generate -m "$T/tgt" -p "Hello there" -n 12 --ignore-eos --backend cpu
cmp -s "$T/out" "$T/greedy.txt" && ok "--backend cpu equals the default" || bad "--backend cpu equals the default"
expect "unknown backend" 1 "unknown backend 'tpu'" -- "$BIN" generate -m "$T/tgt" -p hi --backend tpu
[ "$(wc -l <"$T/err")" -eq 1 ] && ok "unknown backend: one line" || bad "unknown backend: one line"
"$BIN" generate -m "$T/tgt" -p hi -n 2 --backend cuda >"$T/out" 2>"$T/err"; rc=$?
if [ "$rc" -eq 0 ] || { [ "$rc" -eq 1 ] && grep -q "error: backend cuda: " "$T/err"; }; then ok "--backend cuda: runs or says why"
else bad "--backend cuda: runs or says why (exit $rc)"; fi
# the logit controls: DFlash text = plain text with them on, they change the
# text, --logprobs prints one line per token; bad values are usage errors
ctl="--repeat-penalty 1.5 --frequency-penalty -1 --presence-penalty 0.5 --logit-bias 13=-100 --logit-bias=7=2.5"
for s in "" "--temp 0.8 --seed 5 --min-p 0.1"; do
    expect "generate with controls $s" 0 "" -- "$BIN" generate -m "$T/tgt" -p "Hello there" -n 16 --ignore-eos $ctl $s
    cp "$T/out" "$T/ctl.txt"
    expect "generate --draft with controls $s" 0 "tau" -- "$BIN" generate -m "$T/tgt" --draft "$T/drf" -p "Hello there" \
        -n 16 --ignore-eos --draft-max 7 $ctl $s
    cmp -s "$T/out" "$T/ctl.txt" && ok "controls $s: DFlash text equals plain" || bad "controls $s: DFlash text equals plain"
done
expect "generate with controls, greedy" 0 "" -- "$BIN" generate -m "$T/tgt" -p "Hello there" -n 12 --ignore-eos $ctl
! cmp -s "$T/out" "$T/greedy.txt" && ok "the controls change the text" || bad "the controls change the text"
expect "--logprobs 2" 0 "logprobs (the target's" -- "$BIN" generate -m "$T/tgt" -md "$T/drf" -p "Hello there" -n 6 --ignore-eos --logprobs 2
[ "$(grep -cE '^[0-9]+	[0-9]+	-?[0-9.]+	.*	top: [0-9]+:.* [0-9]+:' "$T/err")" -eq 6 ] && ok "--logprobs: a line per token, 2 alternatives" ||
    bad "--logprobs: a line per token ($(tail -3 "$T/err"))"
expect "bad --logit-bias" 2 "--logit-bias expects ID=BIAS" -- "$BIN" generate -m x -p hi --logit-bias 5=200
expect "bad --logit-bias form" 2 "--logit-bias expects ID=BIAS" -- "$BIN" generate -m x -p hi --logit-bias five
expect "bad --min-p" 2 "--min-p expects a number in 0..1" -- "$BIN" generate -m x -p hi --min-p 2
expect "bad --repeat-last-n" 2 "--repeat-last-n expects an integer in -1.." -- "$BIN" generate -m x -p hi --repeat-last-n -5
expect "--logprobs is generate's" 2 "not used by 'chat'" -- "$BIN" chat -m x --logprobs 2
expect "logit bias id beyond the vocabulary" 1 "outside the vocabulary" -- "$BIN" generate -m "$T/tgt" -p hi --logit-bias 99999999=1
expect "bench" 0 "" -- "$BIN" bench -m "$T/tgt" --reps 1 --depth 8
grep -q "CPU read bandwidth (parallel read): " "$T/out" && ok "bench names what its bandwidth measured" || bad "bench bandwidth label"

# the embedding example (examples/simple.c) through the public API
if [ -n "${DFLASH_EXAMPLE:-}" ]; then
    expect "examples/simple" 0 "tokens" -- "$DFLASH_EXAMPLE" "$T/tgt" "$T/drf" "What is 2+2?"
fi

# gpt-oss's harmony format: its chat_template.jinja beside the Qwen3 tokenizer (whose
# vocabulary spells the harmony tags as text), a grammar makes the model write both
# channels; stdout gets the final channel only, --think puts the analysis on stderr
mkdir -p "$T/htok" && cp models/qwen3-tokenizer/tokenizer.json models/qwen3-tokenizer/tokenizer_config.json \
    models/gptoss-tokenizer/chat_template.jinja "$T/htok/"
printf 'root ::= "<|channel|>analysis<|message|>Think " [a-z] "<|end|><|start|>assistant<|channel|>final<|message|>Answer " [a-z]\n' >"$T/h.gbnf"
expect "harmony: generate --chat" 0 "" -- "$BIN" generate -m "$T/tgt" --tokenizer "$T/htok" --chat -p Hello --grammar "$T/h.gbnf" -n 300 --think
grep -q '^Answer [a-z]$' "$T/out" && [ "$(wc -l <"$T/out")" -le 1 ] && ok "harmony: stdout is the final channel" ||
    bad "harmony: stdout is the final channel: $(head -c 200 "$T/out")"
grep -q '^Think [a-z]$' "$T/err" && ! grep -q 'channel' "$T/err" && ok "harmony: --think shows the analysis on stderr" ||
    bad "harmony: --think shows the analysis on stderr: $(head -c 200 "$T/err")"
expect "harmony: without --think" 0 "" -- "$BIN" generate -m "$T/tgt" --tokenizer "$T/htok" --chat -p Hello --grammar "$T/h.gbnf" -n 300
grep -q '^Answer [a-z]$' "$T/out" && ! grep -q 'Think' "$T/err" && ok "harmony: no analysis without --think" ||
    bad "harmony: no analysis without --think"
# harmony's options (--reasoning-effort, --chat-date) reach the system message; other
# templates and bad values are refused by name
expect "harmony: --reasoning-effort / --chat-date" 0 "" -- "$BIN" generate -m "$T/tgt" --tokenizer "$T/htok" --chat -p Hello \
    --grammar "$T/h.gbnf" -n 300 --reasoning-effort high --chat-date 1999-12-31 --verbose-prompt
grep -q '^Current date: 1999-12-31$' "$T/err" && grep -q '^Reasoning: high$' "$T/err" && grep -q '^Answer [a-z]$' "$T/out" &&
    ok "harmony: the effort and date in the prompt" || bad "harmony: the effort and date in the prompt: $(head -c 300 "$T/err")"
expect "harmony: default effort, today" 0 "" -- "$BIN" generate -m "$T/tgt" --tokenizer "$T/htok" --chat -p Hello \
    --grammar "$T/h.gbnf" -n 300 --verbose-prompt
grep -q "^Current date: $(date +%Y-%m-%d)\$" "$T/err" && grep -q '^Reasoning: medium$' "$T/err" &&
    ok "harmony: medium and today by default" || bad "harmony: medium and today by default: $(head -c 300 "$T/err")"
expect "bad --reasoning-effort" 2 "--reasoning-effort: reasoning_effort must be" -- "$BIN" generate -m x -p hi --chat --reasoning-effort max
expect "bad --chat-date" 2 "--chat-date: date must be YYYY-MM-DD" -- "$BIN" generate -m x -p hi --chat --chat-date 2026-13-01
expect "--reasoning-effort needs --chat" 2 "--reasoning-effort needs --chat" -- "$BIN" generate -m x -p hi --reasoning-effort low
expect "--reasoning-effort on a Qwen3 template" 1 "reasoning_effort is an option of gpt-oss's harmony template" -- \
    "$BIN" generate -m "$T/tgt" --chat -p hi --reasoning-effort low -n 1

# Gemma 4's format: a chat_template.jinja with its later template's markers (the tags and
# the think switch; tests/fixtures/chat/gemma4/README) beside the Qwen3 tokenizer (which
# spells the tags as text), a grammar makes the model write a thought channel and an
# answer; stdout gets the answer, --think puts the thought on stderr
mkdir -p "$T/g4tok" && cp models/qwen3-tokenizer/tokenizer.json models/qwen3-tokenizer/tokenizer_config.json "$T/g4tok/" &&
    printf "{{- bos_token -}}{%%- if enable_thinking -%%}{{- '<|think|>\\\\n' -}}{%%- endif -%%}{{- '<|turn>' -}}{{- '<turn|>' -}}\n" \
        >"$T/g4tok/chat_template.jinja"
printf 'root ::= "<|channel>thought\\nThink " [a-z] "<channel|>Answer " [a-z]\n' >"$T/g4.gbnf"
expect "gemma4: generate --chat --think" 0 "" -- "$BIN" generate -m "$T/tgt" --tokenizer "$T/g4tok" --chat -p Hello --grammar "$T/g4.gbnf" -n 300 --think
grep -q '^Answer [a-z]$' "$T/out" && [ "$(wc -l <"$T/out")" -le 1 ] && ok "gemma4: stdout is the answer" ||
    bad "gemma4: stdout is the answer: $(head -c 200 "$T/out")"
grep -q '^Think [a-z]$' "$T/err" && ! grep -q 'channel' "$T/err" && ok "gemma4: --think shows the thought channel on stderr" ||
    bad "gemma4: --think shows the thought channel on stderr: $(head -c 200 "$T/err")"
expect "gemma4: without --think" 0 "" -- "$BIN" generate -m "$T/tgt" --tokenizer "$T/g4tok" --chat -p Hello --grammar "$T/g4.gbnf" -n 300
grep -q '^Answer [a-z]$' "$T/out" && ! grep -q 'Think' "$T/err" && ok "gemma4: no thought without --think" ||
    bad "gemma4: no thought without --think"
printf 'Hello\nHi again\n' | "$BIN" chat -m "$T/tgt" --tokenizer "$T/g4tok" -n 5 >"$T/out" 2>"$T/err"
[ $? -eq 0 ] && ok "gemma4: chat runs two turns" || bad "gemma4: chat runs two turns: $(head -c 300 "$T/err")"

# the draft's vocabulary (--draft-vocab N|full|freq:N|FILE[:N]) and dflash vocab-rank
for v in "" "freq:0" "freq:x" "freq:" "-3" "0"; do
    expect "--draft-vocab '$v' refused" 2 "--draft-vocab" -- "$BIN" generate -m "$T/tgt" -md "$T/drf" -p hi --draft-vocab "$v"
done
expect "--draft-vocab missing file" 2 "$T/none.txt is not a rank file" -- "$BIN" generate -m "$T/tgt" -md "$T/drf" -p hi --draft-vocab "$T/none.txt:12"
expect "--draft-vocab freq:N without vocab_rank.txt" 2 "no vocab_rank.txt" -- "$BIN" generate -m "$T/tgt" -md "$T/drf" -p hi --draft-vocab freq:100
expect "vocab-rank --help" 0 "" -- "$BIN" vocab-rank --help
expect "vocab-rank without -o" 2 "missing -o" -- "$BIN" vocab-rank -m "$T/tgt" "$T/p.txt"
expect "vocab-rank without text" 2 "no TEXT" -- "$BIN" vocab-rank -m "$T/tgt" -o "$T/r.txt"
expect "vocab-rank unknown option" 2 "unknown option" -- "$BIN" vocab-rank -m "$T/tgt" -o "$T/r.txt" --frob x
expect "vocab-rank without config.json" 1 "vocab_size" -- "$BIN" vocab-rank -m models/qwen3-tokenizer -o "$T/r.txt" "$T/p.txt"
expect "vocab-rank missing text" 1 "cannot open" -- "$BIN" vocab-rank -m "$T/tgt" -o "$T/r.txt" "$T/nothing.txt"
"$BIN" --help >"$T/vr.txt" && "$BIN" generate --help >>"$T/vr.txt" && "$BIN" bench --help >>"$T/vr.txt"
expect "vocab-rank" 0 "distinct ids of 151936" -- "$BIN" vocab-rank -m "$T/tgt" -o "$T/r.txt" "$T/vr.txt"
head -n 1 "$T/r.txt" | grep -qx "dflash-vocab-rank 1 151936" && [ "$(wc -l <"$T/r.txt")" -gt 100 ] &&
    ok "vocab-rank: header and ids" || bad "vocab-rank: header and ids"
for v in "$T/r.txt:100" "$T/r.txt" 1000 full; do
    expect "generate --draft-vocab $v" 0 "" -- "$BIN" generate -m "$T/tgt" -md "$T/drf" -p "Hello there" -n 12 --ignore-eos --draft-vocab "$v"
    cmp -s "$T/out" "$T/greedy.txt" && ok "--draft-vocab $v: output = greedy" || bad "--draft-vocab $v: output = greedy"
done
cp models/qwen3-tokenizer/vocab_rank.txt "$T/tgt/vocab_rank.txt"
expect "generate --draft-vocab freq:32768 --tree 8" 0 "" -- "$BIN" generate -m "$T/tgt" -md "$T/drf" -p "Hello there" -n 12 --ignore-eos --draft-vocab freq:32768 --tree 8
cmp -s "$T/out" "$T/greedy.txt" && ok "--draft-vocab freq:32768 --tree 8: output = greedy" || bad "--draft-vocab freq:32768 --tree 8: output = greedy"
rm -f "$T/tgt/vocab_rank.txt"
sed '3s/ [0-9]*$/ x/' "$T/r.txt" >"$T/r_bad.txt"
expect "corrupt rank file" 1 "r_bad.txt line 3" -- "$BIN" generate -m "$T/tgt" -md "$T/drf" -p hi -n 4 --draft-vocab "$T/r_bad.txt:10"
expect "rank file and more ids than the model" 1 "only 151936" -- "$BIN" generate -m "$T/tgt" -md "$T/drf" -p hi -n 4 --draft-vocab "$T/r.txt:200000"
# the round statistics (issue 23 item 6)
expect "--stats-json: histogram" 0 "" -- "$BIN" generate -m "$T/tgt" -md "$T/drf" -p "Hello there" -n 12 --ignore-eos --stats-json --draft-max 3
tail -n 1 "$T/err" | grep -q '"accept_hist": \[[0-9]' && tail -n 1 "$T/err" | grep -q '"verified_rows": [1-9]' &&
    ok "--stats-json: accept_hist and verified_rows" || bad "--stats-json: accept_hist and verified_rows: $(tail -n 1 "$T/err")"
expect "stats text: histogram" 0 "rounds by drafts accepted" -- "$BIN" generate -m "$T/tgt" -md "$T/drf" -p "Hello there" -n 12 --ignore-eos --draft-max 3

# bench --tree N: the chain and the tree per domain, from the same run (issue 23 item 6)
printf '{"domain": "a", "prompt": "Hello there"}\n{"domain": "b", "prompt": "Count to ten"}\n' >"$T/bp.jsonl"
expect "bench --tree 8" 0 "" -- "$BIN" bench -m "$T/tgt" -md "$T/drf" --prompts "$T/bp.jsonl" -n 8 --reps 1 --depth 8 --tree 8 --draft-vocab "$T/r.txt:500"
grep -q "^rounds (first rep)" "$T/out" && grep -qE "^a +tree 8 +tau" "$T/out" && grep -qE "^b +chain +tau" "$T/out" &&
    grep -q "tree 8 vs the chain (same run)" "$T/out" && ok "bench --tree 8: chain and tree per domain" ||
    bad "bench --tree 8: chain and tree per domain: $(cat "$T/out")"
expect "bench --tree 8 --json" 0 "" -- "$BIN" bench -m "$T/tgt" -md "$T/drf" --prompts "$T/bp.jsonl" -n 8 --reps 1 --depth 8 --tree 8 --json
grep -q '"chain": {"tau"' "$T/out" && grep -q '"tree": {"tau"' "$T/out" && grep -q '"accept_hist": \[' "$T/out" &&
    ok "bench --tree 8 --json: chain and tree" || bad "bench --tree 8 --json: $(cat "$T/out")"
expect "bench with a bad rank file" 1 "r_bad.txt line 3" -- "$BIN" bench -m "$T/tgt" -md "$T/drf" --reps 1 --depth 8 --draft-vocab "$T/r_bad.txt"

# chat: two turns through stdin
printf 'Hello\n/reset\nHi again\n' | "$BIN" chat -m "$T/tgt" -md "$T/drf" -n 5 >"$T/out" 2>"$T/err"
[ $? -eq 0 ] && ok "chat runs" || bad "chat runs"

t_done
