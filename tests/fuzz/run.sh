#!/bin/sh
# Run each libFuzzer harness for a bounded time: corpus in BUILD/corpus/NAME
# (grows across runs) plus the committed seeds: tests/fuzz/seeds.tar.xz
# (tests/fuzz/pack_seeds.sh), unpacked into BUILD/seeds/NAME when it is newer
# than the last unpacking, and any loose ones in tests/fuzz/seeds/NAME;
# crashes, leaks and hangs (> 10 s on one input) are written to
# BUILD/artifacts/. Prints executions per harness and "fuzz: N passed,
# N failed" (a harness passes when it ran its time without a finding).
# Usage: tests/fuzz/run.sh BUILD SECONDS NAME...
BUILD=$1 SECONDS_EACH=$2
shift 2
cd "$(dirname "$0")/../.." || exit 1
export DFLASH_ROOT="$PWD"
pass=0 fail=0
mkdir -p "$BUILD/artifacts"
if [ -f tests/fuzz/seeds.tar.xz ] && { [ ! -f "$BUILD/seeds/.unpacked" ] || [ tests/fuzz/seeds.tar.xz -nt "$BUILD/seeds/.unpacked" ]; }; then
    rm -rf "$BUILD/seeds" && mkdir -p "$BUILD/seeds" &&
        xz -dc tests/fuzz/seeds.tar.xz | tar -x -C "$BUILD/seeds" && touch "$BUILD/seeds/.unpacked" ||
        { echo "fuzz: cannot unpack tests/fuzz/seeds.tar.xz"; echo "fuzz: 0 passed, 1 failed"; exit 1; }
fi
for h in "$@"; do
    mkdir -p "$BUILD/corpus/$h"
    seeds=""
    for d in "$BUILD/seeds/$h" "tests/fuzz/seeds/$h"; do [ -d "$d" ] && seeds="$seeds $d"; done
    log="$BUILD/fuzz_$h.log"
    "$BUILD/fuzz_$h" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
        -artifact_prefix="$BUILD/artifacts/$h-" "$BUILD/corpus/$h" $seeds >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    corpus=$(ls "$BUILD/corpus/$h" | wc -l)
    if [ "$rc" -eq 0 ]; then
        pass=$((pass + 1))
        echo "ok - fuzz_$h: ${execs:-?} executions in ${SECONDS_EACH} s, corpus $corpus"
    else
        fail=$((fail + 1))
        echo "not ok - fuzz_$h: exit $rc after ${execs:-?} executions; log $log"
        grep -E 'ERROR|SUMMARY|Test unit written|^    #[0-9]+ .* in ' "$log" | head -20 | sed 's/^/    /'
    fi
done
echo "fuzz: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
