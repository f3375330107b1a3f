#!/bin/sh
# test_serve_parallel.sh - continuous batching: `dflash serve --parallel 4`
# on loopback with the demo pair, driven by the official openai client
# (tests/serve/parallel.js): every reply under concurrent load (greedy /
# sampled with a seed, DFlash on and off, logprobs, a grammar, streamed and
# whole, aborting clients, more requests than slots) equals the same request
# sent alone; /metrics and /slots report the slots and the shared steps.
# Then prompt prefixes across slots (tests/serve/prefix.js): requests
# sharing a long system prompt with a request running on another slot
# copy its prefix (cached_tokens > 0, /metrics' copied tokens) and still
# give their replies alone.
# Then --kv-budget (tests/serve/kv_budget.js): the budget in /metrics,
# requests whose reservation passes it refused by name, two that do not
# fit together run one after the other with their replies alone.
# SIGTERM then gives a clean exit 0 (under ASan: no leak). Then a bounded
# load on `--parallel 16` (tests/serve/parallel_load.js): 16 and 32 clients
# at a time, every reply equal to its reply alone.
. "$(dirname "$0")/serve/lib.sh"

if ! need_node; then
    bad "node, npm and the npm packages ($NODE_PKGS) are available"
    echo "test_serve_parallel: $pass passed, $fail failed"; exit 1
fi
if start_server -m models/demo/target --draft models/demo/draft --parallel 4 --ctx-size 1024; then
    if grep -q "4 slots (--parallel), each a KV cache of" "$T/server.log"; then ok "the start line names the slots and their KV cache"
    else bad "the start line names the slots and their KV cache"; head -3 "$T/server.log"; fi
    # DFLASH_FAST (CI's ASan pass): one round of 8 requests instead of two of 12
    if [ -n "${DFLASH_FAST:-}" ]; then export PAR_ROUNDS=1 PAR_PER_SLOT=2; fi
    SLOTS=4 run_node 500 tests/serve/parallel.js
    run_node 300 tests/serve/prefix.js
    if grep -qE "copied from slot [0-9]" "$T/server.log"; then ok "server log: a prompt prefix copied from another slot"
    else bad "server log: a prompt prefix copied from another slot"; fi
    stop_server
fi
if start_server -m models/demo/target --draft models/demo/draft --parallel 16 --ctx-size 512; then
    # DFLASH_FAST: one request per client, shorter replies
    if [ -n "${DFLASH_FAST:-}" ]; then export LOAD_PER_CLIENT=1 LOAD_MAX_TOKENS=12; fi
    SLOTS=16 LOAD_CONCS="16 32" run_node 580 tests/serve/parallel_load.js
    stop_server
fi
if start_server -m models/demo/target --draft models/demo/draft --parallel 2 --ctx-size 1024 --kv-budget 2; then
    if grep -q "2 MiB for all (--kv-budget).*whole context, 12.0 MiB: 0 at once, so such requests are refused" "$T/server.log"; then
        ok "the start line names the KV budget and what a request without max_tokens reserves"
    else bad "the start line names the KV budget and what a request without max_tokens reserves"; head -3 "$T/server.log"; fi
    run_node 200 tests/serve/kv_budget.js
    stop_server
fi
echo "test_serve_parallel: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
