#!/bin/sh
# serve_parallel.sh - aggregate output tok/s of `dflash serve` with the demo
# pair at concurrency CONCS (default 1 4 8), --parallel 1 against --parallel
# PAR (default 8), for each draft_max of MODES (default "auto 0": DFlash
# with auto draft length, plain decoding; a number: that fixed draft_max).
# REQS requests a measurement (default 24); TEMP: sampled at that
# temperature (seeded per request; default greedy). Both servers run
# side by side (idle one sleeping) and each measurement of one is followed
# by the same measurement of the other, REPS times over (default 2), so the
# baseline shares the machine's state (bench/serve_parallel.js; the openai
# npm package from tests/serve/lib.sh's build/node). Prints one markdown
# row per measurement pair: aggregate output tok/s (wall clock) and the
# server's CPU time per 1000 output tokens (user + system, /proc/PID/stat:
# the work, less sensitive than the wall clock to other load on the machine).
# BEFORE_BIN=PATH adds a third server, that binary with --parallel PAR (an
# earlier build), measured right after the other two: two more columns.
# Usage: sh bench/serve_parallel.sh [PAR [REPS]]
cd "$(dirname "$0")/.." || exit 1
PAR=${1:-8} REPS=${2:-2}
CONCS=${CONCS:-1 4 8} MODES=${MODES:-auto 0}
BIN=${DFLASH_BIN:-./dflash}
export NODE_PATH=${DFLASH_NODE_DIR:-$PWD/build/node}/node_modules
start() { # NP [BIN] -> sets port, pid
    log=$(mktemp)
    "${2:-$BIN}" serve -m models/demo/target --draft models/demo/draft --port 0 --parallel "$1" --ctx-size 1024 >"$log" 2>&1 &
    pid=$!
    port=""
    for _ in $(seq 300); do
        port=$(sed -nE 's/.*listening on http:\/\/[^:]+:([0-9]+).*/\1/p' "$log")
        [ -n "$port" ] && break
        sleep 0.1
    done
    rm -f "$log"
}
start 1; port1=$port pid1=$pid
start "$PAR"; portn=$port pidn=$pid
pidb=""
if [ -n "${BEFORE_BIN:-}" ]; then start "$PAR" "$BEFORE_BIN"; portb=$port pidb=$pid; fi
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
tps() { # PORT PID CONC DRAFT_MAX(auto|N) -> "tok/s cpu-ms-per-1000-tokens"
    t0=$(cpu_ticks "$2")
    if [ "$4" = auto ]; then r=$(BASE="http://127.0.0.1:$1" CONC=$3 node bench/serve_parallel.js)
    else r=$(BASE="http://127.0.0.1:$1" CONC=$3 DRAFT_MAX=$4 node bench/serve_parallel.js); fi
    t1=$(cpu_ticks "$2")
    tok=$(echo "$r" | sed -nE 's/.*"tokens":([0-9]+).*/\1/p')
    echo "$(echo "$r" | sed -nE 's/.*"tok_per_s":([0-9.]+).*/\1/p') $(awk "BEGIN{printf \"%.0f\", ($t1 - $t0) * 1e6 / $hz / $tok}")"
}
if [ -n "$pidb" ]; then
    echo "| rep | decoding | concurrency | --parallel 1 tok/s | --parallel $PAR tok/s | ratio | CPU ms / 1000 tok, --parallel 1 | --parallel $PAR | before: --parallel $PAR tok/s | before: CPU ms / 1000 tok |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
else
    echo "| rep | decoding | concurrency | --parallel 1 tok/s | --parallel $PAR tok/s | ratio | CPU ms / 1000 tok, --parallel 1 | --parallel $PAR |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
fi
for rep in $(seq "$REPS"); do
    for dm in $MODES; do
        for c in $CONCS; do
            set -- $(tps "$port1" "$pid1" "$c" "$dm") $(tps "$portn" "$pidn" "$c" "$dm")
            name=$(case "$dm" in 0) echo plain ;; auto) echo "DFlash auto" ;; *) echo "DFlash $dm" ;; esac)
            row="| $rep | $name | $c | $1 | $3 | $(awk "BEGIN{printf \"%.2fx\", $3 / $1}") | $2 | $4 |"
            if [ -n "$pidb" ]; then set -- $(tps "$portb" "$pidb" "$c" "$dm"); row="$row $1 | $2 |"; fi
            echo "$row"
        done
    done
done
kill -TERM "$pid1" "$pidn" $pidb
wait "$pid1" "$pidn" $pidb
