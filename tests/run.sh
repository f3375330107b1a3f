#!/bin/sh
# Run every test program (build/test_*) and shell test (tests/test_*.sh) from
# the repository root and print the total as "N passed, N failed".
# Usage: tests/run.sh [BUILD_DIR]; DFLASH_ONLY="PROG ..." runs only those.
#
# Every SIMD kernel variant this CPU runs: the first pass runs with the
# variant the library picks (or DFLASH_KERNELS, if set); then the programs of
# DFLASH_VARIANT_TESTS that are in the run run again once for each other
# variant the CPU supports, forced with DFLASH_KERNELS=NAME (the list comes
# from the library through BUILD/variants, so a new variant needs no change
# here). Before each of those passes BUILD/variants -c checks that the
# library really uses the forced variant (one check counted). The reruns set
# DFLASH_FAST=1 (smaller prompt sets) unless DFLASH_FAST is already set.
#   DFLASH_VARIANTS="avx2 generic"  rerun for these variants only;
#   DFLASH_VARIANTS=none            no reruns.
# DFLASH_WRAP="CMD ARGS" runs each test program as CMD ARGS PROG (e.g. under
# qemu-x86_64 -cpu Haswell: tests/isa.sh); shell tests run as they are.
BUILD=${1:-build}
cd "$(dirname "$0")/.." || exit 1
export DFLASH_ROOT="$PWD" DFLASH_BIN="${DFLASH_BIN:-$PWD/dflash}"
pass=0 fail=0 broken=""
log=$(mktemp)
export DFLASH_EXAMPLE="${DFLASH_EXAMPLE:-$PWD/$BUILD/simple}"
WRAP=${DFLASH_WRAP:-}
# the programs whose result depends on the kernel variant beyond what they
# loop over themselves (test_kernels and test_attention force every variant
# in turn; the rest use the library's choice)
DFLASH_VARIANT_TESTS=${DFLASH_VARIANT_TESTS:-"test_sample test_model test_dflash test_gguf test_reference test_kernels_q8ref test_qwen35 test_tree test_vocab"}

# count one result: $1 = label, $2 = the program's exit status; the summary
# line is read from $log
count() {
    line=$(grep -E '^[A-Za-z0-9_./-]+: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "   $1 exited $2 without a summary line: counted as 1 failure"
        fail=$((fail + 1)); broken="$broken $1"; return
    fi
    p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.*passed, ([0-9]+) failed/\1/')
    if [ "$2" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; broken="$broken $1"; fi
    pass=$((pass + p)); fail=$((fail + f))
}

# run one test: $1 = path, $2 = label
run_one() {
    echo "== $2"
    start=$(date +%s)
    if [ "${1%.sh}" != "$1" ]; then sh "$1" >"$log" 2>&1; else $WRAP "$1" >"$log" 2>&1; fi
    rc=$?
    # qemu-user names the CPU model's features TCG lacks at every start
    grep -v "^qemu-[a-z0-9_]*: warning: TCG doesn't support requested feature" "$log"
    count "$2" "$rc"
    echo "   ($(( $(date +%s) - start )) s)"
}

list=${DFLASH_ONLY:-"$BUILD/test_* tests/test_*.sh"}
for t in $list; do
    [ -f "$t" ] || continue
    case "$t" in *.c|*.o|*.d) continue ;; esac
    run_one "$t" "$t"
done

# ---- the other kernel variants ---------------------------------------------
reruns=""
for t in $list; do
    [ -f "$t" ] || continue
    for n in $DFLASH_VARIANT_TESTS; do [ "${t##*/}" = "$n" ] && reruns="$reruns $t"; done
done
variants=${DFLASH_VARIANTS:-auto}
if [ -n "$reruns" ] && [ "$variants" != none ]; then
    tool="$BUILD/variants"
    if [ ! -x "$tool" ]; then
        echo "== variants: $tool missing (make $tool): counted as 1 failure"
        fail=$((fail + 1)); broken="$broken $tool"; variants=""
    else
        first=$($WRAP "$tool" -c 2>/dev/null)
        [ "$variants" = auto ] && variants=$($WRAP "$tool" | grep -vx "$first")
        echo "== kernel variants: first pass $first; again with:" $variants
    fi
    kset=${DFLASH_KERNELS+set} k0=${DFLASH_KERNELS-} fset=${DFLASH_FAST+set}
    [ -n "$fset" ] || export DFLASH_FAST=1
    for v in $variants; do
        export DFLASH_KERNELS="$v"
        echo "== [$v] $tool -c"
        if $WRAP "$tool" -c >"$log" 2>&1; then ok=1; else ok=0; fi
        echo "$tool: $ok passed, $((1 - ok)) failed" >>"$log"
        cat "$log"
        count "[$v] $tool" 0
        [ "$ok" -eq 1 ] || { echo "   (variant $v not in use: its reruns skipped)"; continue; }
        for t in $reruns; do run_one "$t" "[$v] $t"; done
    done
    if [ -n "$kset" ]; then export DFLASH_KERNELS="$k0"; else unset DFLASH_KERNELS; fi
    [ -n "$fset" ] || unset DFLASH_FAST
fi
rm -f "$log"
[ -n "$broken" ] && echo "crashed or unsummarised:$broken"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
