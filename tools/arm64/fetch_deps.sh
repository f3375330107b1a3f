#!/bin/sh
# Everything `make cross-arm64` and `make test-arm64` need on a Debian 12
# (amd64) host, fetched once:
#   - the cross compiler and qemu (gcc-aarch64-linux-gnu, qemu-user), installed
#     with apt-get as root if missing;
#   - the arm64 builds of the libraries dflash links (cJSON, PCRE2, utf8proc,
#     libmicrohttpd, libedit and what they pull in), downloaded as .deb files
#     and unpacked with dpkg -x into .arm64/root (a sysroot for -I/-L and for
#     qemu's -L), as tools/cuda/fetch_deps.sh does for the GPU machine.
# The host's apt state is not touched for the arm64 packages: the arm64
# package lists live in .arm64/apt (APT::Architecture=arm64 there only), so
# no `dpkg --add-architecture` is needed.
#   tools/arm64/fetch_deps.sh          fetch what is missing (.arm64/root/.ok marks done)
#   tools/arm64/fetch_deps.sh -f       fetch again
set -e
cd "$(dirname "$0")/../.."
ROOT=.arm64/root
[ "${1:-}" = -f ] && rm -rf .arm64
need=""
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need="$need gcc-aarch64-linux-gnu libc6-dev-arm64-cross"
command -v qemu-aarch64 >/dev/null 2>&1 || need="$need qemu-user"
if [ -n "$need" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "arm64: missing:$need; run: sudo apt-get install$need" >&2
        exit 1
    fi
    echo "arm64: installing$need" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >&2
fi
[ -f $ROOT/.ok ] && exit 0

# the host's sources (deb.debian.org carries arm64 too), lists of our own
A=$(pwd)/.arm64/apt
rm -rf "$A" $ROOT
mkdir -p "$A/lists/partial" "$A/cache/archives/partial" "$A/debs" $ROOT
: >"$A/status"
opts="-o APT::Architecture=arm64 -o APT::Architectures::=arm64 -o Dir::State::Lists=$A/lists \
 -o Dir::State::status=$A/status -o Dir::Cache=$A/cache -o Debug::NoLocking=1 -q"
apt-get $opts update >&2
pkgs="libcjson-dev libcjson1 libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2
      libmicrohttpd-dev libmicrohttpd12 libgnutls30 libp11-kit0 libidn2-0 libunistring2
      libtasn1-6 libnettle8 libhogweed6 libgmp10 libffi8
      libedit-dev libedit2 libbsd0 libmd0 libtinfo6 libncurses-dev libncurses6"
(cd "$A/debs" && apt-get $opts download $pkgs >&2)
for f in "$A"/debs/*.deb; do dpkg -x "$f" $ROOT; done
# the -dev symlinks of the .so files point at absolute paths (/lib/...):
# make them relative (ln -r) so the linker finds them inside the sysroot
find $ROOT -type l | while read -r l; do
    t=$(readlink "$l")
    case "$t" in /*) ln -sfr "$ROOT$t" "$l" ;; esac
done
find $ROOT -name "*.a" -delete
rm -rf $ROOT/usr/share "$A/debs" "$A/cache"
touch $ROOT/.ok
du -sh $ROOT >&2
