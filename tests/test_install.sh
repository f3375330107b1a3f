#!/bin/sh
# test_install.sh - make install into a staging DESTDIR: the binary, dflash.h,
# libdflash.a, libdflash.so (its soname, links, only the dflash_ API exported)
# and dflash.pc; then programs compiled against the installed tree with
# pkg-config only (no -Iinclude, no build/): examples/simple.c linked to the
# shared library gives build/simple's output on the demo pair, and a small
# program linked statically checks the version macros against dflash_version()
# and `dflash --version`, and the token piece API.
ROOT=${DFLASH_ROOT:-.}
cd "$ROOT" || exit 1
BUILD=${DFLASH_BUILD:-build}
CCX=${CC:-cc}
OPTX=${DFLASH_OPT:-} # the build's flags (sanitizers) for the programs linked to it
T=$(mktemp -d /tmp/dflash-install-XXXXXX)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok - $1"; }
bad() { fail=$((fail + 1)); echo "not ok - $1"; sed 's/^/    /' "$T/log" 2>/dev/null | tail -8; }
check() { if eval "$2" >"$T/log" 2>&1; then ok "$1"; else bad "$1"; fi; }

V=$(sed -n 's/^#define DFLASH_VERSION_STRING "\(.*\)"/\1/p' include/dflash.h)
MAJOR=${V%%.*}
S=$T/stage P=/opt/dflash
L=$S$P/lib
set -- BUILD="$BUILD"
[ -n "$DFLASH_BIN" ] && set -- "$@" BIN="$DFLASH_BIN"
[ -n "$OPTX" ] && set -- "$@" OPT="$OPTX"
# a make of its own (not the jobserver of a make test that runs this)
if env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory "$@" PREFIX=$P DESTDIR="$S" install \
    >"$T/log" 2>&1; then
    ok "make install DESTDIR PREFIX"
else
    bad "make install DESTDIR PREFIX"
    echo "test_install: $pass passed, $fail failed"
    exit 1
fi

missing=""
for f in bin/dflash include/dflash.h lib/libdflash.a lib/libdflash.so.$V lib/libdflash.so.$MAJOR lib/libdflash.so \
    lib/pkgconfig/dflash.pc; do
    [ -e "$S$P/$f" ] || missing="$missing $f"
done
[ -z "$missing" ] && ok "installed files" || { echo "missing:$missing" >"$T/log"; bad "installed files"; }
check "libdflash.so -> libdflash.so.$MAJOR -> libdflash.so.$V" \
    "[ \"\$(readlink $L/libdflash.so)\" = libdflash.so.$MAJOR ] && [ \"\$(readlink $L/libdflash.so.$MAJOR)\" = libdflash.so.$V ]"
check "soname libdflash.so.$MAJOR" "objdump -p $L/libdflash.so.$V | grep -E 'SONAME +libdflash\\.so\\.$MAJOR\$'"
nm -D --defined-only "$L/libdflash.so.$V" 2>"$T/log" | awk '{print $NF}' >"$T/syms"
extra=$(grep -v '^dflash_' "$T/syms" | grep -Ev '^_(init|fini|edata|end|_bss_start)$' | head -5)
[ -s "$T/syms" ] && [ -z "$extra" ] && grep -qx dflash_generate "$T/syms" && grep -qx dflash_token_piece "$T/syms" &&
    ok "the shared library exports the dflash_ API only ($(wc -l <"$T/syms") symbols)" ||
    { echo "exports beyond dflash_*: $extra" >>"$T/log"; bad "the shared library exports the dflash_ API only"; }

export PKG_CONFIG_PATH="$L/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$S"
check "pkg-config --modversion dflash = $V" "[ \"\$(pkg-config --modversion dflash)\" = $V ]"
CF=$(pkg-config --cflags dflash) LIBS=$(pkg-config --libs dflash) SLIBS=$(pkg-config --static --libs dflash)

# examples/simple.c against the shared library
# shellcheck disable=SC2086
if $CCX $OPTX $CF examples/simple.c $LIBS -Wl,-rpath,"$L" -o "$T/simple" >"$T/log" 2>&1; then
    ok "examples/simple.c builds with pkg-config --cflags --libs dflash"
    check "it runs on the installed libdflash.so.$MAJOR" "ldd $T/simple | grep -F '$L/libdflash.so.$MAJOR'"
    q="Evaluate 44 * 9 - 30."
    "$T/simple" models/demo/target models/demo/draft "$q" >"$T/out" 2>"$T/log"
    rc=$?
    if [ -x "${DFLASH_EXAMPLE:-}" ]; then
        "$DFLASH_EXAMPLE" models/demo/target models/demo/draft "$q" >"$T/want" 2>/dev/null
        [ "$rc" -eq 0 ] && [ -s "$T/out" ] && cmp -s "$T/out" "$T/want" &&
            ok "its output on the demo pair equals build/simple's" ||
            bad "its output on the demo pair equals build/simple's (exit $rc)"
    else
        [ "$rc" -eq 0 ] && [ -s "$T/out" ] && ok "it generates on the demo pair" || bad "it generates on the demo pair"
    fi
else
    bad "examples/simple.c builds with pkg-config --cflags --libs dflash"
fi

# a static program: version macros, dflash_version, the piece API
cat >"$T/ver.c" <<'EOF'
#include <dflash.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    char v[64];
    snprintf(v, sizeof v, "%d.%d.%d", DFLASH_VERSION_MAJOR, DFLASH_VERSION_MINOR, DFLASH_VERSION_PATCH);
#if DFLASH_VERSION_NUMBER < DFLASH_MAKE_VERSION(0, 1, 0)
#error "DFLASH_VERSION_NUMBER"
#endif
    if (strcmp(v, DFLASH_VERSION_STRING) != 0 || strcmp(dflash_version(), DFLASH_VERSION_STRING) != 0) {
        fprintf(stderr, "versions disagree: %s, %s, %s\n", v, DFLASH_VERSION_STRING, dflash_version());
        return 1;
    }
    printf("%s\n", dflash_version());
    dflash_model *m = dflash_load_tokenizer(argv[1]);
    if (!m) {
        fprintf(stderr, "%s\n", dflash_error());
        return 1;
    }
    const char *text = argv[2];
    int32_t *ids;
    size_t n, k = 0;
    char out[4096], piece[256];
    int rc = 0;
    if (dflash_tokenize(m, text, strlen(text), &ids, &n) != 0) return 1;
    for (size_t i = 0; i < n; i++) {
        int len = dflash_token_piece(m, ids[i], piece, sizeof piece);
        if (len < 0 || len >= (int)sizeof piece || piece[len] != 0 || k + (size_t)len >= sizeof out) rc = 1;
        else memcpy(out + k, piece, (size_t)len), k += (size_t)len;
    }
    if (rc || k != strlen(text) || memcmp(out, text, k) != 0) {
        fprintf(stderr, "pieces of %zu tokens do not give the text back\n", n);
        rc = 1;
    }
    /* a short buffer: the length comes back, size bytes written, no NUL */
    char two[3] = {'x', 'x', 'x'};
    int full = dflash_token_piece(m, ids[0], NULL, 0);
    if (full < 3 || dflash_token_piece(m, ids[0], two, 2) != full || two[2] != 'x' || memcmp(two, text, 2) != 0) {
        fprintf(stderr, "short buffer: %d\n", full);
        rc = 1;
    }
    if (dflash_token_piece(m, -1, piece, sizeof piece) != -1 || !strstr(dflash_error(), "outside the vocabulary")) {
        fprintf(stderr, "id -1: no error\n");
        rc = 1;
    }
    free(ids);
    dflash_free(m);
    return rc;
}
EOF
# shellcheck disable=SC2086
if $CCX $OPTX $CF "$T/ver.c" $(echo "$SLIBS" | sed 's/-ldflash/-Wl,-Bstatic -ldflash -Wl,-Bdynamic/') \
    -o "$T/ver" >"$T/log" 2>&1; then
    ok "a program links the static library with pkg-config --static --libs dflash"
    check "it does not load libdflash.so" "! ldd $T/ver | grep -q libdflash"
    check "version macros = dflash_version(); token pieces give the text back" \
        "$T/ver models/qwen3-tokenizer 'Hello, wörld! 你好 tokens' >$T/v"
    check "dflash --version prints the header's version" \
        "[ \"\$($S$P/bin/dflash --version | cut -d' ' -f1-2)\" = \"dflash $V\" ] && [ \"\$(cat $T/v)\" = $V ]"
else
    bad "a program links the static library with pkg-config --static --libs dflash"
fi

echo "test_install: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
