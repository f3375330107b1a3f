#!/bin/sh
# test_serve.sh - `dflash serve` on a free loopback port with the demo pair,
# driven by the official openai npm client and raw HTTP (tests/serve/api.js):
# chat, streaming, stop strings, seeds, usage, DFlash == plain, prompt-cache
# reuse, metrics, every error case with its status and type, the queue limit,
# tools, tool calls, reasoning and /props /slots (tests/serve/tools.js), tools
# in the harmony and Gemma 4 formats (tests/serve/tools_formats.js),
# clients that go away; then SIGTERM must give a clean exit 0 (under ASan: no
# leaks). Also: the command line's own errors, and --draft-vocab.
. "$(dirname "$0")/serve/lib.sh"

expect_exit() { # NAME STATUS NEEDLE -- command...
    name=$1 want=$2 needle=$3; shift 4
    "$@" >"$T/out" 2>"$T/err"; rc=$?
    if [ "$rc" -eq "$want" ] && grep -qF -- "$needle" "$T/err" "$T/out"; then ok "$name"
    else bad "$name (exit $rc, want $want; '$needle')"; head -3 "$T/err"; fi
}
expect_exit "serve --help" 0 "--api-key" -- "$BIN" serve --help
# the length of a request without max_tokens, said in --help (issue 19 item 6)
expect_exit "serve --help: the default reply length" 0 "until a stop token or the context is full" -- "$BIN" serve --help
expect_exit "serve without -m" 2 "missing -m" -- "$BIN" serve
expect_exit "serve --parallel 65" 2 "--parallel expects an integer in 1..64" -- "$BIN" serve -m models/demo/target --parallel 65
expect_exit "serve bad --port" 2 "expects an integer" -- "$BIN" serve -m models/demo/target --port 70000
expect_exit "serve bad --host" 1 "cannot resolve" -- "$BIN" serve -m models/demo/target --host no.such.host.invalid
expect_exit "serve missing model" 1 "error" -- "$BIN" serve -m "$T/nowhere" --port 0
echo hello >"$T/file.txt"
expect_exit "serve -m a text file" 1 "is a file; pass the model directory" -- "$BIN" serve -m "$T/file.txt" --port 0
expect_exit "serve bad --reasoning-effort" 2 "--reasoning-effort: reasoning_effort must be" -- "$BIN" serve -m models/demo/target --reasoning-effort max
expect_exit "serve bad --chat-date" 2 "--chat-date: date must be YYYY-MM-DD" -- "$BIN" serve -m models/demo/target --chat-date 7.12.2026
expect_exit "serve --chat-date on a Qwen3 model" 1 "--chat-date is an option of gpt-oss's harmony template" -- \
    "$BIN" serve -m models/demo/target --chat-date 2026-12-07 --port 0

if ! need_node; then
    bad "node, npm and the npm packages ($NODE_PKGS) are available"
    echo "test_serve: $pass passed, $fail failed"; exit 1
fi
export API_KEY=test-key-123
if start_server -m models/demo/target --draft models/demo/draft --api-key "$API_KEY" --queue 1 --ctx-size 1024; then
    run_node 300 tests/serve/api.js
    run_node 300 tests/serve/tools.js
    run_node 300 tests/serve/sampling.js
    run_node 300 tests/serve/grammar.js
    # the README's curl examples
    command -v curl >/dev/null 2>&1 || apt_install curl
    if curl -sS "$BASE/v1/chat/completions" -H "Authorization: Bearer $API_KEY" -H 'Content-Type: application/json' \
        -d '{"messages": [{"role": "user", "content": "Solve for x: 3x + 5 = 20."}], "max_tokens": 64}' \
        -o "$T/curl.json" -w '%{http_code}' >"$T/curl.code" 2>"$T/err" && [ "$(cat "$T/curl.code")" = 200 ] &&
        grep -q '"finish_reason"' "$T/curl.json"; then ok "curl: chat completion"; else bad "curl: chat completion"; fi
    if curl -sSN "$BASE/v1/chat/completions" -H "Authorization: Bearer $API_KEY" \
        -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16, "stream": true}' >"$T/curl.sse" 2>"$T/err" &&
        [ "$(grep -c '^data: ' "$T/curl.sse")" -ge 3 ] && tail -n 2 "$T/curl.sse" | grep -qx 'data: \[DONE\]'; then
        ok "curl -N: streamed events ending with [DONE]"; else bad "curl -N: streamed events"; fi
    # one rule for every field (issue 19 item 7): read, accepted at its off
    # value, or refused naming it; no silent truncation at a NUL
    post() { curl -sS "$BASE/v1/chat/completions" -H "Authorization: Bearer $API_KEY" -d "$1" -o "$T/f.json" -w '%{http_code}'; }
    for f in '"mirostat": 2' '"dry_multiplier": 0.8' '"post_sampling_probs": true'; do
        name=${f%%\":*}; name=${name#\"}
        code=$(post '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, '"$f"'}')
        [ "$code" = 400 ] && grep -q '"code":"unsupported_parameter"' "$T/f.json" && grep -q "\"param\":\"$name\"" "$T/f.json" &&
            ok "field $name: 400 naming it" || bad "field $name: 400 naming it (got $code: $(cat "$T/f.json"))"
    done
    # the fields that were a 400 (frequency_penalty, presence_penalty, logprobs,
    # top_logprobs, logit_bias) or silently ignored (min_p, repeat_penalty) are
    # read now: 200, and each one changes the reply (tests/serve/sampling.js
    # checks what they do)
    base='"messages": [{"role": "user", "content": "Solve for x: 3x + 5 = 20."}], "max_tokens": 24'
    content() { sed 's/.*"content":"\([^"]*\)".*/\1/' "$1"; }
    for f in '"frequency_penalty": 1.5' '"presence_penalty": 2' '"logit_bias": {"3136": -100}' '"repeat_penalty": 1.8' \
        '"min_p": 0.5' '"logprobs": true, "top_logprobs": 2'; do
        name=${f%%\":*}; name=${name#\"}
        off='"temperature": 1.5, "seed": 3' # min_p matters when sampling: the same seed without it
        [ "$name" = min_p ] || off='"temperature": 0'
        post "{$base, $off}" >/dev/null; content "$T/f.json" >"$T/off.txt"
        code=$(post "{$base, $off, $f}")
        if [ "$name" = logprobs ]; then grep -q '"top_logprobs":\[{' "$T/f.json"; else ! content "$T/f.json" | cmp -s - "$T/off.txt"; fi
        [ $? = 0 ] && [ "$code" = 200 ] && ok "field $name: read and applied (200, the reply changes)" ||
            bad "field $name: read and applied (got $code: $(cut -c1-300 "$T/f.json"))"
    done
    code=$(post '{"messages": [{"role": "user", "content": "a\u0000b"}], "max_tokens": 4}')
    [ "$code" = 400 ] && grep -q 'NUL' "$T/f.json" && ok "a NUL in a string: 400, not truncated" ||
        bad "a NUL in a string: 400, not truncated (got $code: $(cat "$T/f.json"))"
    code=$(post '{"messages": [{"role": "user", "content": "a\\u0000b"}], "max_tokens": 2}')
    [ "$code" = 200 ] && ok "an escaped backslash before u0000 is text" || bad "an escaped backslash before u0000 is text (got $code)"
    code=$(post '{"messages": [{"role": "user", "content": "Count to twenty."}], "n_predict": 3, "ignore_eos": true, "user": "u1", "cache_prompt": true}')
    [ "$code" = 200 ] && grep -q '"completion_tokens":3' "$T/f.json" && ok "n_predict (llama-server) = max_tokens; user, cache_prompt accepted" ||
        bad "n_predict (llama-server) = max_tokens (got $code: $(cut -c1-300 "$T/f.json"))"
    # the port is taken: a second server must fail cleanly
    expect_exit "port in use" 1 "cannot listen" -- "$BIN" serve -m models/demo/target --port "$PORT"
    stop_server
    # api.js aborted streams: the job line says "client gone", and no
    # libmicrohttpd "application error" line repeats it (issue 19 item 11)
    grep -q "client gone" "$T/server.log" && ! grep -q "application error" "$T/server.log" &&
        ok "server log: a client that went away is one line" ||
        bad "server log: a client that went away is one line ($(grep 'application error' "$T/server.log" | head -2))"
fi
# tools in gpt-oss's harmony format and Gemma 4's (tests/serve/tools_formats.js): the demo
# pair with the Qwen3 tokenizer and each format's chat template (gpt-oss's file; for Gemma 4
# a line with its later template's markers, as tests/test_cli.sh writes it)
if need_node; then
    mkdir -p "$T/htok" "$T/g4tok"
    cp models/qwen3-tokenizer/tokenizer.json models/qwen3-tokenizer/tokenizer_config.json "$T/htok/"
    cp models/qwen3-tokenizer/tokenizer.json models/qwen3-tokenizer/tokenizer_config.json "$T/g4tok/"
    cp models/gptoss-tokenizer/chat_template.jinja "$T/htok/"
    printf "{{- bos_token -}}{%%- if enable_thinking -%%}{{- '<|think|>\\\\n' -}}{%%- endif -%%}{{- '<|turn>' -}}{{- '<turn|>' -}}\n" \
        >"$T/g4tok/chat_template.jinja"
    for fmt in harmony gemma4; do
        dir=$T/htok
        [ "$fmt" = gemma4 ] && dir=$T/g4tok
        date_opt=
        [ "$fmt" = harmony ] && date_opt="--chat-date 2026-12-04" # the fixtures' date
        if start_server -m models/demo/target --draft models/demo/draft --tokenizer "$dir" --ctx-size 4096 $date_opt; then
            CHAT_DATE=${date_opt#--chat-date } FORMAT=$fmt run_node 600 tests/serve/tools_formats.js
            stop_server
        fi
    done
fi
# --draft-vocab, parsed as generate parses it: a bad value and freq:N
# without a ranking are usage errors, a ranking for another vocabulary stops
# the start; a server (two slots) whose draft may propose only id 151000
# (ranked alone; the replies never hold it) and the stop tokens drafts, has
# nothing accepted but what a stop token gives, and replies as plain decoding
expect_exit "serve --draft-vocab: not a rank file" 2 "is not a rank file" -- "$BIN" serve -m models/demo/target --draft-vocab "$T/none.txt"
expect_exit "serve --draft-vocab freq:N: no ranking" 2 "no vocab_rank.txt" -- "$BIN" serve -m "$T" --draft-vocab freq:100
printf 'dflash-vocab-rank 1 1000\n5 1\n' >"$T/small.rank"
expect_exit "serve --draft-vocab: a ranking of another vocabulary" 1 "error: --draft-vocab" -- \
    "$BIN" serve -m models/demo/target --draft models/demo/draft --draft-vocab "$T/small.rank" --port 0
printf 'dflash-vocab-rank 1 151936\n151000 1\n' >"$T/one.rank"
if start_server -m models/demo/target --draft models/demo/draft --parallel 2 --ctx-size 1024 --draft-vocab "$T/one.rank:1"; then
    ask() {
        curl -sS "$BASE/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "Solve for x: 3x + 5 = 20."}],
            "max_tokens": 24'"$1"'}' | sed 's/.*"content":"\([^"]*\)".*/\1/'
    }
    plain=$(ask ', "draft_max": 0') drafted=$(ask '')
    curl -sS "$BASE/metrics" -o "$T/metrics.txt"
    drafts=$(sed -n 's/^dflash:spec_decode_num_draft_tokens_total //p' "$T/metrics.txt")
    acc=$(sed -n 's/^dflash:spec_decode_num_accepted_tokens_total //p' "$T/metrics.txt")
    [ -n "$plain" ] && [ "$plain" = "$drafted" ] && [ "${drafts:-0}" -gt 0 ] && [ "${acc:-9}" -le 1 ] &&
        ok "serve --draft-vocab FILE:1: drafted ($drafts tokens), $acc accepted, the reply plain decoding's" ||
        bad "serve --draft-vocab FILE:1: drafted (${drafts:-?}), accepted ${acc:-?} <= 1, '$drafted' = '$plain'"
    stop_server
fi
# a stream cut by shutdown says so (issue 19 item 4): SIGTERM starts the
# drain, a second one cancels what still runs; the cut stream must end with
# an error event (code server_shutdown), without finish_reason "stop" or
# [DONE], and the log must not call it "client gone"
if start_server -m models/demo/target --ctx-size 4096 -n 5; then
    # -n N: the max_tokens of a request that gives none (issue 19 item 6)
    curl -sS "$BASE/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "Count to a million."}],
        "ignore_eos": true}' -o "$T/n.json" 2>"$T/err" && grep -q '"completion_tokens":5' "$T/n.json" &&
        grep -q '"finish_reason":"length"' "$T/n.json" && ok "serve -n 5: a request without max_tokens gets 5 tokens" ||
        bad "serve -n 5: a request without max_tokens gets 5 tokens ($(cut -c1-300 "$T/n.json" 2>&1) curl: $(cat "$T/err"); server: $(tail -n 3 "$T/server.log"))"
    # /props without a draft (tools.js checks it with one)
    curl -sS "$BASE/props" -o "$T/props.json" 2>"$T/err" && grep -q '"draft":{"loaded":false,"block_size":0' "$T/props.json" &&
        grep -q '"speculative":false' "$T/props.json" && ok "/props without a draft: loaded false, block_size 0" ||
        bad "/props without a draft: loaded false, block_size 0 ($(cut -c1-300 "$T/props.json" 2>&1) curl: $(cat "$T/err"))"
    curl -sSN "$BASE/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "Count to a million."}],
        "max_tokens": 4000, "ignore_eos": true, "stream": true}' >"$T/cut.sse" 2>"$T/err" &
    cpid=$!
    i=0
    while [ "$(grep -c '^data: ' "$T/cut.sse" 2>/dev/null)" -lt 5 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
    kill -TERM "$SV_PID"; sleep 0.3; kill -TERM "$SV_PID"
    wait $cpid
    stop_server
    last=$(grep '^data: ' "$T/cut.sse" | tail -n 1)
    case $last in *'"code":"server_shutdown"'*) ok "a stream cut by shutdown ends with an error event" ;;
        *) bad "a stream cut by shutdown ends with an error event (last: $(echo "$last" | cut -c1-200))" ;; esac
    grep -qE '"finish_reason":"stop"|\[DONE\]' "$T/cut.sse" && bad "a cut stream has no finish_reason stop, no [DONE]" ||
        ok "a cut stream has no finish_reason stop, no [DONE]"
    grep -q ": cut: the server is shutting down: the reply was cut after" "$T/server.log" &&
        ! grep -q "client gone" "$T/server.log" && ok "server log: the reply was cut by the shutdown" ||
        bad "server log: the reply was cut by the shutdown ($(grep -E 'cut|gone' "$T/server.log" | head -2))"
fi
echo "test_serve: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
