#!/bin/sh
# Install the Debian -dev packages dflash builds against, if missing.
# As root it runs apt-get; otherwise it prints the command to run.
need=""
for p in libcjson-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev pkg-config; do
    dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
[ -z "$need" ] && exit 0
if [ "$(id -u)" = 0 ]; then
    echo "deps: installing$need" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need) >&2 || {
        echo "deps: apt-get install$need failed" >&2; exit 1; }
else
    echo "deps: missing Debian packages:$need" >&2
    echo "deps: run: sudo apt-get install$need" >&2
    exit 1
fi
