#!/bin/sh
# make test-isa: a named subset of the tests (ISA_TESTS: kernels, attention,
# sampling, batch invariance and rollback, DFlash = greedy on the demo pair,
# GGUF load) under qemu-user's x86-64 CPU models, so every x86 kernel path
# runs whatever the host has:
#   Nehalem  no AVX at all          -> the generic C variant
#   Haswell  AVX2 + FMA + F16C      -> the avx2 variant
# (QEMU 7.2's TCG has no AVX-512 nor AVX-VNNI: those variants are tested on
# hosts that have them, by make test.) A variant this host runs itself has
# had every test natively (make test reruns them per variant): under its
# model only ISA_TESTS_NATIVE runs (the dispatch check, test_kernels and the
# CLI demo-pair check, which meet every kernel family once); the whole
# ISA_TESTS set runs under the models whose variant the host lacks (Haswell
# on a host without AVX2, or, to catch an instruction of a wider set inside
# the avx2 files, on an AVX-512 host: the host's pick is then not avx2).
# ISA_FULL=1: the whole set under every model. Before each model's tests,
# build/variants -c must print the variant expected there: that checks the
# CPUID + XGETBV dispatch (src/cpu/cpu.c) itself, and an instruction the model
# lacks kills the test (SIGILL), so a wrong dispatch fails here.
#
# Usage: tests/isa.sh BUILD_DIR (the programs BUILD/test_* of ISA_TESTS and
# BUILD/variants built). Installs Debian's qemu-user when qemu-x86_64 is
# missing (as root). Environment:
#   ISA_CPUS="Nehalem:generic Haswell:avx2"  MODEL:VARIANT pairs to run
#   ISA_TESTS="test_kernels ..."            the programs (then the CLI demo-pair check)
#   ISA_TESTS_NATIVE="test_kernels"         those under a model whose variant is the host's own
#   DFLASH_FAST=1 (the default here; DFLASH_FAST= for the full sizes): the
#   smaller prompt sets and one variant per program (test_dflash,
#   test_attention, test_kernels); qemu runs SIMD code 10-20x slower.
# Ends with one "N passed, N failed" line.
BUILD=${1:-build}
cd "$(dirname "$0")/.." || exit 1
ISA_CPUS=${ISA_CPUS:-"Nehalem:generic Haswell:avx2"}
ISA_TESTS=${ISA_TESTS:-"test_kernels test_attention test_sample test_model test_dflash test_gguf"}
ISA_TESTS_NATIVE=${ISA_TESTS_NATIVE-"test_kernels"}
QEMU=${QEMU_X86_64:-qemu-x86_64}
[ "${DFLASH_FAST+set}" ] || export DFLASH_FAST=1
[ -n "$DFLASH_FAST" ] || unset DFLASH_FAST

case "$(uname -m)" in
x86_64 | amd64) ;;
*)
    echo "test-isa: runs x86-64 binaries under qemu-x86_64 on an x86-64 host (this is $(uname -m))" >&2
    echo "0 passed, 1 failed"
    exit 1
    ;;
esac
if ! command -v "$QEMU" >/dev/null 2>&1; then
    echo "test-isa: $QEMU missing: installing qemu-user"
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        export DEBIAN_FRONTEND=noninteractive
        { apt-get update -qq && apt-get install -y -qq qemu-user; } >/dev/null 2>&1
    fi
    if ! command -v "$QEMU" >/dev/null 2>&1; then
        echo "test-isa: could not install qemu-user (needs root and apt-get; or set QEMU_X86_64=PATH)" >&2
        echo "0 passed, 1 failed"
        exit 1
    fi
fi
echo "test-isa: $("$QEMU" --version | head -n 1); DFLASH_FAST=${DFLASH_FAST-}"

ulimit -c 0 2>/dev/null # no qemu core files from a test that crashes
# the variant the host itself picks: make test has run every test with it
# (and with generic, which every x86-64 host runs: DFLASH_KERNELS=generic)
host=$("$BUILD/variants" -c 2>/dev/null)
echo "test-isa: this host picks $host"
pass=0 fail=0 start=$(date +%s)
for pair in $ISA_CPUS; do
    cpu=${pair%%:*} want=${pair#*:}
    echo "=== qemu-x86_64 -cpu $cpu (expect variant $want)"
    got=$("$QEMU" -cpu "$cpu" "$BUILD/variants" -c 2>/dev/null)
    "$QEMU" -cpu "$cpu" "$BUILD/variants" -a 2>/dev/null | sed 's/^/   /'
    if [ "$got" = "$want" ]; then
        echo "ok - $cpu dispatches to $got"
        pass=$((pass + 1))
    else
        echo "not ok - $cpu dispatches to '$got', want $want"
        fail=$((fail + 1))
    fi
    tests=$ISA_TESTS
    if [ -z "${ISA_FULL:-}" ] && { [ "$want" = generic ] || [ "$want" = "$host" ]; }; then
        tests=$ISA_TESTS_NATIVE
        echo "   ($want: tested natively by make test; here: $tests and the demo pair)"
    fi
    only=""
    for t in $tests; do only="$only $BUILD/$t"; done
    out=$(mktemp)
    DFLASH_WRAP="$QEMU -cpu $cpu" DFLASH_ONLY="$only" DFLASH_VARIANTS=none sh tests/run.sh "$BUILD" 2>&1 | tee "$out"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -n 1)
    rm -f "$out"
    if [ -z "$line" ]; then
        fail=$((fail + 1))
        continue
    fi
    set -- $(echo "$line" | sed -E 's/([0-9]+) passed, ([0-9]+) failed/\1 \2/')
    pass=$((pass + $1)) fail=$((fail + $2))
    echo "=== $cpu: $line"
    # DFlash = greedy on the shipped demo pair, through the CLI, one prompt
    # per domain (bench/prompts), 48 tokens each
    if [ -x "${DFLASH_BIN:-}" ]; then
        for d in math chat code; do
            p=$(head -n 1 "bench/prompts/$d.jsonl" | sed -n 's/.*"prompt": *"\(.*\)".*/\1/p')
            g=$("$QEMU" -cpu "$cpu" "$DFLASH_BIN" generate -m models/demo/target --chat -p "$p" -n 48 -t 2 2>/dev/null)
            rc1=$?
            f=$("$QEMU" -cpu "$cpu" "$DFLASH_BIN" generate -m models/demo/target -md models/demo/draft --chat -p "$p" \
                -n 48 -t 2 2>/dev/null)
            rc2=$?
            if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ -n "$g" ] && [ "$g" = "$f" ]; then
                echo "ok - $cpu: demo pair, $d prompt: DFlash output = greedy output (${#g} bytes)"
                pass=$((pass + 1))
            else
                echo "not ok - $cpu: demo pair, $d prompt: exit $rc1/$rc2, outputs differ or empty"
                fail=$((fail + 1))
            fi
        done
    fi
done
echo "test-isa: $(( $(date +%s) - start )) s"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
