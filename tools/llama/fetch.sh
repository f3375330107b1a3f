#!/bin/sh
# tools/llama/fetch.sh - make .devdeps/llama-src.tar.xz: the llama.cpp source
# shipped in the npm package node-llama-cpp@3.22.1 (llama/gitRelease.bundle,
# release v0.5.0), trimmed to what a CUDA build of llama-bench,
# llama-quantize, llama-simple and llama-speculative-simple and the HF->GGUF
# converter need. Run it here, where npm
# works; the GPU machine has no network, so the call carries .devdeps and
# tools/llama/bench.sh builds from the tarball there.
#   sh tools/llama/fetch.sh [NODE_LLAMA_CPP_TGZ]   (default: npm pack it)
set -eu
PKG=node-llama-cpp@3.22.1
cd "$(dirname "$0")/../.."
R=$(pwd)
OUTF=$R/.devdeps/llama-src.tar.xz
W=$(mktemp -d "${TMPDIR:-/tmp}/llama-fetch.XXXXXX")
trap 'rm -rf "$W"' EXIT
mkdir -p "$R/.devdeps"

if [ $# -ge 1 ]; then
    cp "$1" "$W/pkg.tgz"
else
    (cd "$W" && npm pack --silent "$PKG" > /dev/null && mv node-llama-cpp-*.tgz pkg.tgz)
fi
tar -xzf "$W/pkg.tgz" -C "$W" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
git clone -q "$W/package/llama/gitRelease.bundle" "$W/src" 2>/dev/null
commit=$(git -C "$W/src" rev-parse HEAD)
when=$(git -C "$W/src" log -1 --format=%ct)
tag=$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' "$W/package/llama/llama.cpp.info.json")

# what the build and the converter need; everything else (tests, docs,
# examples, other backends, models/ vocab files, the web UI) stays behind
S=$W/llama.cpp
mkdir -p "$S"
git -C "$W/src" archive HEAD \
    CMakeLists.txt LICENSE cmake include src common \
    ggml/CMakeLists.txt ggml/cmake ggml/include ggml/src \
    vendor/nlohmann vendor/sheredom vendor/cpp-httplib \
    tools/llama-bench tools/quantize examples/simple examples/speculative-simple \
    gguf-py/gguf gguf-py/pyproject.toml gguf-py/LICENSE conversion convert_hf_to_gguf.py |
    tar -x -C "$S"
# other ggml backends: add_subdirectory only runs for enabled ones
for d in blas cann et hexagon hip metal musa opencl openvino rpc sycl virtgpu vulkan webgpu zdnn zendnn; do
    rm -rf "$S/ggml/src/ggml-$d"
done
# the two examples the DFlash race needs (greedy and speculative decoding)
cat > "$S/examples/CMakeLists.txt" <<'EOF'
# trimmed by dflash tools/llama/fetch.sh: llama-simple, llama-speculative-simple
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(simple)
add_subdirectory(speculative-simple)
EOF
mkdir -p "$S/pocs"
echo '# trimmed by dflash tools/llama/fetch.sh: no proofs of concept' > "$S/pocs/CMakeLists.txt"
# the CPU backend's code for other processors (arch/x86 stays) and Arm's KleidiAI
for d in "$S"/ggml/src/ggml-cpu/arch/*; do
    [ "$(basename "$d")" = x86 ] || rm -rf "$d"
done
rm -rf "$S/ggml/src/ggml-cpu/kleidiai" "$S/ggml/src/ggml-cpu/spacemit"
find "$S" \( -name "*.md" -o -name "*.png" -o -name "*.jpg" -o -name "tests.sh" \) -type f -delete
# only the two tools and the vendored libraries they link
cat > "$S/tools/CMakeLists.txt" <<'EOF'
# trimmed by dflash tools/llama/fetch.sh: llama-bench and llama-quantize only
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(llama-bench)
add_subdirectory(quantize)
EOF
cat > "$S/vendor/CMakeLists.txt" <<'EOF'
# trimmed by dflash tools/llama/fetch.sh
add_subdirectory(nlohmann)
add_subdirectory(sheredom)
if (LLAMA_BUILD_COMMON)
    add_subdirectory(cpp-httplib)
endif()
EOF
printf 'llama.cpp %s (commit %s) from npm %s llama/gitRelease.bundle, trimmed by dflash tools/llama/fetch.sh\n' \
    "$tag" "$commit" "$PKG" > "$S/DFLASH-SOURCE"

(cd "$W" && tar --sort=name --mtime="@$when" --owner=0 --group=0 --numeric-owner -cf - llama.cpp) |
    xz -9e -T1 > "$OUTF.tmp"
mv "$OUTF.tmp" "$OUTF"
echo "llama.cpp $tag ($commit): $(du -sh "$S" | cut -f1) unpacked, $(wc -c < "$OUTF") bytes in $OUTF"
