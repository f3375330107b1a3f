#!/bin/sh
# test_build.sh - the build's dependency step: with make -j the compiles wait
# for tools/deps.sh (a slow stand-in here; a compiler wrapper fails if it runs
# first); DFLASH_NO_DEPS=1 skips the step; without dpkg the script checks the
# libraries with pkg-config instead.
ROOT=${DFLASH_ROOT:-.}
cd "$ROOT" || exit 1
T=$(mktemp -d /tmp/dflash-build-XXXXXX)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok - $1"; }
bad() { fail=$((fail + 1)); echo "not ok - $1"; sed 's/^/    /' "$T/log" 2>/dev/null | tail -5; }

cat >"$T/deps.sh" <<EOS
sleep 1
touch "$T/deps-done"
EOS
cat >"$T/cc.sh" <<EOS
[ -f "$T/deps-done" ] || { echo "compiled before the dependency step finished" >&2; exit 1; }
exec ${CC:-cc} "\$@"
EOS
if make --no-print-directory -j2 BUILD="$T/b" DEPS_SH="sh $T/deps.sh" CC="sh $T/cc.sh" deps "$T/b/util.o" \
    "$T/b/chat.o" >"$T/log" 2>&1; then
    ok "make -j2: compiles wait for the dependency step"
else
    bad "make -j2: compiles wait for the dependency step"
fi

DFLASH_NO_DEPS=1 PATH=/nonexistent /bin/sh tools/deps.sh >"$T/log" 2>&1 && ok "DFLASH_NO_DEPS=1 skips" ||
    bad "DFLASH_NO_DEPS=1 skips"

# no dpkg on PATH: pkg-config decides
mkdir "$T/bin"
for c in pkg-config id; do p=$(command -v $c) && ln -s "$p" "$T/bin/$c"; done
PATH="$T/bin" /bin/sh tools/deps.sh >"$T/log" 2>&1 && ok "no dpkg: libraries found by pkg-config" ||
    bad "no dpkg: libraries found by pkg-config"
PKG_CONFIG_LIBDIR=/nonexistent PKG_CONFIG_PATH= PATH="$T/bin" /bin/sh tools/deps.sh >"$T/log" 2>&1
rc=$?
[ "$rc" -ne 0 ] && grep -q "pkg-config cannot find" "$T/log" && ok "no dpkg, no libraries: says what is missing" ||
    bad "no dpkg, no libraries: says what is missing (exit $rc)"

echo "test_build: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
