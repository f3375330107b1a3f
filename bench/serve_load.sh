#!/bin/sh
# serve_load.sh - aggregate output tok/s of `dflash serve` under load, and
# every reply under load against the same request sent alone, with the C
# client bench/serve_load.c (no node: it runs on the GPU machine too).
# For each --parallel P of PARS (default "1 16") one server (MODEL, DRAFT,
# BACKEND, CTX), and on it for each temperature of TEMPS (default "0 0.8"),
# draft_max of MODES (default "auto 0": DFlash auto, plain decoding) and
# concurrency C of CONCS no larger than 2P (default "1 4 16 32"): REQS
# requests (default 32) of MAXTOK tokens (default 64). Prints a markdown
# row per run: tok/s, the ratio to concurrency 1 on the first server with the
# same temperature and mode, the ratio of DFlash auto to plain at the same
# point, and the replies that differ from their solo ones (must be 0).
# METRICS=1: each server's batch counters from /metrics after its runs
# (steps, rows, seconds in forward / argmax / draft steps: where a step's
# time goes under load).
# Usage: sh bench/serve_load.sh   (BIN, default ./dflash; CLIENT, default
# build/serve_load, built by `make bench-serve-load`)
cd "$(dirname "$0")/.." || exit 1
BIN=${BIN:-./dflash} CLIENT=${CLIENT:-build/serve_load}
MODEL=${MODEL:-models/demo/target} DRAFT=${DRAFT:-models/demo/draft} BACKEND=${BACKEND:-cpu} CTX=${CTX:-1024}
PARS=${PARS:-1 16} TEMPS=${TEMPS:-0 0.8} MODES=${MODES:-auto 0} CONCS=${CONCS:-1 4 16 32}
REQS=${REQS:-32} MAXTOK=${MAXTOK:-64}
res=$(mktemp)
echo "| --parallel | temp | decoding | concurrency | tok/s | vs concurrency 1, first server | auto / plain | replies unlike solo |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
bad=0
for par in $PARS; do
    log=$(mktemp)
    "$BIN" serve -m "$MODEL" --draft "$DRAFT" --backend "$BACKEND" --port 0 --parallel "$par" --ctx-size "$CTX" \
        --queue 256 >"$log" 2>&1 &
    pid=$!
    port=""
    for _ in $(seq 1200); do
        port=$(sed -nE 's/.*listening on http:\/\/[^:]+:([0-9]+).*/\1/p' "$log")
        [ -n "$port" ] && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$port" ]; then echo "serve_load: the server did not start:"; tail -5 "$log"; rm -f "$log"; exit 1; fi
    for t in $TEMPS; do
        for dm in $MODES; do
            for c in $CONCS; do
                [ "$c" -le $((2 * par)) ] || continue
                r=$("$CLIENT" "$port" "$c" "$REQS" "$MAXTOK" "$t" "$dm") || bad=1
                tps=$(echo "$r" | sed -nE 's/.*"tok_per_s":([0-9.]+).*/\1/p')
                dif=$(echo "$r" | sed -nE 's/.*"differ":([0-9]+),"failed":([0-9]+).*/\1 differ, \2 failed/p')
                echo "$par $t $dm $c ${tps:-0}" >> "$res"
                base=$(awk -v t="$t" -v m="$dm" '$2 == t && $3 == m && $4 == 1 {print $5; exit}' "$res")
                plain=$(awk -v p="$par" -v t="$t" -v c="$c" '$1 == p && $2 == t && $3 == 0 && $4 == c {print $5; exit}' "$res")
                auto=$(awk -v p="$par" -v t="$t" -v c="$c" '$1 == p && $2 == t && $3 == "auto" && $4 == c {print $5; exit}' "$res")
                name=$(case "$dm" in 0) echo plain ;; auto) echo "DFlash auto" ;; *) echo "DFlash $dm" ;; esac)
                vs=$([ -n "$base" ] && awk "BEGIN{printf \"%.2fx\", ${tps:-0} / $base}")
                ap=$([ -n "$plain" ] && [ -n "$auto" ] && awk "BEGIN{printf \"%.2fx\", $auto / $plain}")
                echo "| $par | $t | $name | $c | ${tps:-failed} | ${vs:--} | ${ap:--} | ${dif:-$r} |"
            done
        done
    done
    if [ "${METRICS:-0}" = 1 ]; then
        echo "--parallel $par, batch counters:"
        curl -s "http://127.0.0.1:$port/metrics" | grep -E '^dflash:batch_[a-z_]*(total|seconds)' | sed 's/^/    /'
    fi
    kill $pid 2>/dev/null
    wait $pid 2>/dev/null
    rm -f "$log"
done
rm -f "$res"
exit $bad
