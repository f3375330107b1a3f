#!/bin/sh
# test_serve_load.sh - a bounded load test of `dflash serve` on loopback
# (tests/serve/load.js): 200 requests, 8 at a time, streaming and whole,
# DFlash and plain, greedy and seeded sampling, some clients aborting
# mid-stream; every completed reply must equal the same request's reply
# alone. Then SIGTERM during a stream: it finishes, the server exits 0
# (under ASan: with no leak). LOAD_N / LOAD_C change the size.
. "$(dirname "$0")/serve/lib.sh"

if ! need_node; then
    bad "node, npm and the npm packages ($NODE_PKGS) are available"
    echo "test_serve_load: $pass passed, $fail failed"; exit 1
fi
if start_server -m models/demo/target --draft models/demo/draft; then
    export SV_PID; LOAD_OUT="$T/load.json" run_node 580 tests/serve/load.js
    stop_server
fi
echo "test_serve_load: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
