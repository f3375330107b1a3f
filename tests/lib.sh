# shellcheck shell=sh disable=SC2034
# tests/lib.sh - what the shell tests share. Sourced (not run: tests/run.sh
# runs tests/test_*.sh only) as
#     . "$(dirname "$0")/lib.sh"; t_init NAME
# which sets BIN (DFLASH_BIN, default ./dflash), changes to DFLASH_ROOT
# (default .), makes the scratch directory $T (removed at exit) and zeroes the
# counts. Then:
#     ok NAME / bad NAME      count a pass / a failure (bad shows $T/err)
#     expect NAME STATUS NEEDLE -- COMMAND...
#                             COMMAND exits with STATUS, its stderr holds NEEDLE
#                             (empty: anything) and no crash or sanitizer report
#     t_done                  the "NAME: N passed, N failed" line; the status
BIN=${DFLASH_BIN:-./dflash}

t_init() {
    t_name=$1
    cd "${DFLASH_ROOT:-.}" || exit 1
    T=$(mktemp -d "/tmp/dflash-$1-XXXXXX")
    trap 'rm -rf "$T"' EXIT
    pass=0 fail=0
}

ok() { pass=$((pass + 1)); echo "ok - $1"; }
bad() { fail=$((fail + 1)); echo "not ok - $1"; [ -f "$T/err" ] && sed 's/^/    stderr: /' "$T/err" | head -5; }

expect() {
    name=$1 want=$2 needle=$3; shift 4
    "$@" >"$T/out" 2>"$T/err"; rc=$?
    if [ "$rc" -ne "$want" ]; then bad "$name (exit $rc, want $want)"; return; fi
    if [ -n "$needle" ] && ! grep -qF -- "$needle" "$T/err"; then bad "$name (no '$needle' on stderr)"; return; fi
    if grep -qiE 'AddressSanitizer|runtime error|Segmentation|Bus error' "$T/err"; then bad "$name (crash)"; return; fi
    ok "$name"
}

t_done() {
    echo "$t_name: $pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}
