#!/bin/sh
# make test-arm64: a named subset of the tests, cross-built (make cross-arm64)
# and run under qemu-aarch64 once per CPU model, so that each NEON variant is
# the one picked at least once and test_kernels meets all of them:
#   cortex-a72   NEON only            -> "neon"
#   cortex-a76   + dotprod            -> "neon-dotprod"
#   max          + dotprod + i8mm     -> "neon-i8mm"
# Per model: the programs of ARM64_TESTS_EACH (test_kernels: every variant
# the model has, accuracy, bit-exactness against the C q8 reference, batch
# invariance T = 1..17 and 32), then the CLI on the demo pair: the variant
# named in the load line, and DFlash output identical to greedy output.
# Under the last model, which has every feature (so those programs meet every
# variant), also ARM64_TESTS (attention and sampling for every variant; the
# model's forward against its oracle; GGUF load) and ARM64_TESTS_ONCE, none
# by default (ARM64_TESTS_ONCE=test_dflash: DFlash == greedy on the random,
# tiny and demo pairs, greedy and sampled; 20+ CPU minutes under qemu).
# Prints "N passed, N failed" (tests/run.sh's convention) and the time.
#   ARM64_CPUS="cortex-a72 ..."      the models (default: the three above)
#   ARM64_TESTS_EACH="test_kernels"  the programs (build-arm64/NAME) per model
#   ARM64_TESTS="test_attention ..." the programs run under the last model
#   ARM64_TESTS_ONCE="test_dflash"   the same (default: none)
# Nothing is timed for speed under qemu: the times are the emulator's.
cd "$(dirname "$0")/../.." || exit 1
# DFLASH_FAST: test_dflash with fewer prompts on the big pairs (as under the
# sanitizers); the demo, tiny and random pairs all still run
export DFLASH_ROOT="$PWD" DFLASH_FAST=${DFLASH_FAST:-1}
RUN="sh tools/arm64/run"
CPUS=${ARM64_CPUS:-"cortex-a72 cortex-a76 max"}
EACH=${ARM64_TESTS_EACH-"test_kernels"}
TESTS=${ARM64_TESTS-"test_attention test_sample test_model test_gguf"}
# none by default: test_dflash costs 20+ CPU minutes under qemu, DFLASH_FAST
# or not, and the CLI check below runs DFlash == greedy on the demo pair under
# every model, so with every variant
ONCE=${ARM64_TESTS_ONCE-}
last_cpu=$(echo $CPUS | awk '{print $NF}')
pass=0 fail=0 broken=""
log=$(mktemp) out=$(mktemp -d)
trap 'rm -rf "$log" "$out"' EXIT
t_all=$(date +%s)
want_variant() {
    case "$1" in
    cortex-a72|cortex-a53|cortex-a57|cortex-a35) echo neon ;;
    cortex-a76|neoverse-n1) echo neon-dotprod ;;
    max) echo neon-i8mm ;;
    *) echo "" ;;
    esac
}
# CPU seconds (user + system) of the finished children so far: with other
# jobs on the machine, wall times say little
# (times runs in this shell, not in a command substitution's subshell)
cpu_now() { times >"$out/times"; CPU=$(awk 'NR == 2 { s = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); s += a[1] * 60 + a[2] } printf "%.0f", s }' "$out/times"); }
count() { # NAME OK: one check of this script
    if [ "$2" = 1 ]; then pass=$((pass + 1)); echo "ok - $1"; else fail=$((fail + 1)); echo "not ok - $1"; fi
}
for cpu in $CPUS; do
    export QEMU_CPU=$cpu
    tests=$EACH
    [ "$cpu" = "$last_cpu" ] && tests="$EACH $TESTS $ONCE"
    for t in $tests; do
        echo "== $cpu $t"
        start=$(date +%s); cpu_now; c0=$CPU
        $RUN "build-arm64/$t" >"$log" 2>&1
        rc=$?
        cat "$log"
        line=$(grep -E '^[A-Za-z0-9_./-]+: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
        if [ -z "$line" ]; then
            echo "   $cpu $t exited $rc without a summary line: counted as 1 failure"
            fail=$((fail + 1)); broken="$broken $cpu:$t"; continue
        fi
        p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')
        f=$(echo "$line" | sed -E 's/.*passed, ([0-9]+) failed/\1/')
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; broken="$broken $cpu:$t"; fi
        pass=$((pass + p)); fail=$((fail + f))
        cpu_now; echo "   ($(( $(date +%s) - start )) s, $((CPU - c0)) s of CPU)"
    done
    # the CLI on the demo pair: DFlash and plain greedy give the same text
    echo "== $cpu dflash generate (demo pair)"
    start=$(date +%s); cpu_now; c0=$CPU
    $RUN generate -m models/demo/target -md models/demo/draft --chat -p "Solve for x: 3x + 5 = 20." -n 40 -t 2 \
        >"$out/dflash.txt" 2>"$out/dflash.err"
    rc_d=$?
    $RUN generate -m models/demo/target --chat -p "Solve for x: 3x + 5 = 20." -n 40 -t 2 \
        >"$out/greedy.txt" 2>"$out/greedy.err"
    rc_g=$?
    sed 's/^/    /' "$out/dflash.err" | grep -E 'load:|decode:|dflash:' | head -4
    count "$cpu: generate exits 0 (dflash $rc_d, greedy $rc_g)" "$([ $rc_d = 0 ] && [ $rc_g = 0 ] && echo 1)"
    want=$(want_variant "$cpu")
    if [ -n "$want" ]; then
        count "$cpu: kernels variant $want picked" "$(grep -qE "backend cpu \($want[)+]" "$out/greedy.err" && echo 1)"
    fi
    count "$cpu: DFlash output == greedy output ($(wc -c <"$out/greedy.txt") bytes)" \
        "$([ -s "$out/greedy.txt" ] && cmp -s "$out/greedy.txt" "$out/dflash.txt" && echo 1)"
    cpu_now; echo "   ($(( $(date +%s) - start )) s, $((CPU - c0)) s of CPU)"
done
[ -n "$broken" ] && echo "crashed or unsummarised:$broken"
cpu_now; echo "test-arm64: $(( $(date +%s) - t_all )) s, $CPU s of CPU, under qemu-aarch64 ($CPUS)"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
