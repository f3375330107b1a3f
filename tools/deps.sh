#!/bin/sh
# Install the Debian -dev packages dflash builds against, if missing.
# As root it runs apt-get; otherwise it prints the command to run.
#   DFLASH_NO_DEPS=1 tools/deps.sh   skip (you installed the libraries yourself)
#   tools/deps.sh clang              also the fuzzing compiler (make fuzz)
# Without dpkg (not Debian) it only checks with pkg-config that the libraries
# are there and says what is missing.
[ "${DFLASH_NO_DEPS:-0}" = 1 ] && exit 0
pkgs="libcjson-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev libedit-dev pkg-config xz-utils"
[ "${1:-}" = clang ] && pkgs="clang"
if ! command -v dpkg >/dev/null 2>&1; then
    [ "${1:-}" = clang ] && { command -v clang >/dev/null 2>&1 && exit 0; echo "deps: clang not found" >&2; exit 1; }
    missing=""
    for m in libcjson libpcre2-8 libutf8proc libmicrohttpd; do
        pkg-config --exists "$m" 2>/dev/null || missing="$missing $m"
    done
    pkg-config --exists libedit 2>/dev/null || echo "deps: libedit not found: chat builds without line editing" >&2
    [ -z "$missing" ] && exit 0
    echo "deps: no dpkg, and pkg-config cannot find:$missing" >&2
    echo "deps: install them (cJSON, PCRE2, utf8proc, libmicrohttpd development files) or set DFLASH_NO_DEPS=1" >&2
    exit 1
fi
need=""
for p in $pkgs; do
    dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
[ -z "$need" ] && exit 0
if [ "$(id -u)" = 0 ]; then
    echo "deps: installing$need" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need) >&2 || {
        echo "deps: apt-get install$need failed" >&2; exit 1; }
else
    echo "deps: missing Debian packages:$need" >&2
    echo "deps: run: sudo apt-get install$need   (or set DFLASH_NO_DEPS=1)" >&2
    exit 1
fi
