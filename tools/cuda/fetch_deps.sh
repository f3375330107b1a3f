#!/bin/sh
# Fetch the Debian libraries dflash builds against into .devdeps/root (run
# here, where apt works): the GPU machine has no package registry, so
# tools/cuda/gpu.sh builds against this tree (carried with the call).
set -e
cd "$(dirname "$0")/../.."
grep -qx '/.devdeps/' .git/info/exclude 2>/dev/null || echo '/.devdeps/' >> .git/info/exclude
mkdir -p .devdeps/debs
(cd .devdeps/debs && apt-get download libcjson-dev libcjson1 libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2 libmicrohttpd-dev libmicrohttpd12)
for f in .devdeps/debs/*.deb; do dpkg -x "$f" .devdeps/root; done
rm -rf .devdeps/debs
find .devdeps/root -name "*.a" -delete; rm -rf .devdeps/root/usr/share
du -sh .devdeps/root
