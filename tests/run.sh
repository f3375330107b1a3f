#!/bin/sh
# Run every test program (build/test_*) and shell test (tests/test_*.sh) from
# the repository root and print the total as "N passed, N failed".
# Usage: tests/run.sh [BUILD_DIR]; DFLASH_ONLY="PROG ..." runs only those.
BUILD=${1:-build}
cd "$(dirname "$0")/.." || exit 1
export DFLASH_ROOT="$PWD" DFLASH_BIN="${DFLASH_BIN:-$PWD/dflash}"
pass=0 fail=0 broken=""
log=$(mktemp)
export DFLASH_EXAMPLE="${DFLASH_EXAMPLE:-$PWD/$BUILD/simple}"
for t in ${DFLASH_ONLY:-"$BUILD"/test_* tests/test_*.sh}; do
    [ -f "$t" ] || continue
    case "$t" in *.c|*.o|*.d) continue ;; esac
    echo "== $t"
    start=$(date +%s)
    if [ "${t%.sh}" != "$t" ]; then sh "$t" >"$log" 2>&1; else "$t" >"$log" 2>&1; fi
    rc=$?
    cat "$log"
    line=$(grep -E '^[A-Za-z0-9_./-]+: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "   $t exited $rc without a summary line: counted as 1 failure"
        fail=$((fail + 1)); broken="$broken $t"; continue
    fi
    p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.*passed, ([0-9]+) failed/\1/')
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; broken="$broken $t"; fi
    pass=$((pass + p)); fail=$((fail + f))
    echo "   ($(( $(date +%s) - start )) s)"
done
rm -f "$log"
[ -n "$broken" ] && echo "crashed or unsummarised:$broken"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
