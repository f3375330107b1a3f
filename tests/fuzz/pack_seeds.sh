#!/bin/sh
# tests/fuzz/pack_seeds.sh - move the loose seeds of tests/fuzz/seeds/NAME/
# (make_seeds.c's output, or a seed added by hand) into the committed pack
# tests/fuzz/seeds.tar.xz, merged with what the pack holds (a loose seed
# replaces a packed one of the same name). One file instead of ~600 small
# ones: each small file costs a 4 KiB disk block, and the tree a device call
# carries is limited to 64 MiB. tests/fuzz/run.sh reads the pack and any
# loose seeds left, so packing is tidiness, never a condition for a seed to
# count. Usage: sh tests/fuzz/pack_seeds.sh (from anywhere).
set -eu
cd "$(dirname "$0")/../.."
W=$(mktemp -d "${TMPDIR:-/tmp}/dflash-seeds.XXXXXX")
trap 'rm -rf "$W"' EXIT
[ -f tests/fuzz/seeds.tar.xz ] && xz -dc tests/fuzz/seeds.tar.xz | tar -x -C "$W"
[ -d tests/fuzz/seeds ] && cp -R tests/fuzz/seeds/. "$W/"
# sorted names, fixed times and owners: the same seeds give the same bytes
(cd "$W" && find . -type f | LC_ALL=C sort | tar --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - -T -) |
    xz -9e >tests/fuzz/seeds.tar.xz.new
mv tests/fuzz/seeds.tar.xz.new tests/fuzz/seeds.tar.xz
rm -rf tests/fuzz/seeds
echo "tests/fuzz/seeds.tar.xz: $(xz -dc tests/fuzz/seeds.tar.xz | tar -t | grep -vc '/$') seeds, $(wc -c <tests/fuzz/seeds.tar.xz) bytes"
