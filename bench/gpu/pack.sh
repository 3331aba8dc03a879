#!/usr/bin/env bash
# pack.sh DIR [BIN...]: builds what a device call carries and packs it as DIR/m.tar.xz. The build
# is a release build in build-carry with CUDA arch 90-real (the H100's and the H200's), made on
# the development machine, since the device has no Criterion and a cold build there costs device
# time. The archive holds bin/memra, bin/memra-gate, the libraries, ktrace's injection library,
# plugins.d, and each BIN named (e.g. memra_cuda_check_moe memra_cuda_wofuse_bench). It is about
# 30 MB, within a call's 64 MiB. The build takes about 10 minutes on 2 cores from cold. On the
# device, unpack it and point the scripts at it:
#   mkdir -p /tmp/m && tar -xJf DIR/m.tar.xz -C /tmp/m && CARRY=/tmp/m bash bench/gpu/checks.sh small
# DIR should be git-ignored (.carry-*), so that the call carries it only when named in carry.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: bench/gpu/pack.sh DIR [BIN...]" >&2; exit 2; }
D=$(realpath -m "$1"); shift
cd "$(dirname "$0")/../.."
cmake -S . -B build-carry -DCMAKE_BUILD_TYPE=Release -DMEMRA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real > /dev/null
# A misspelt BIN fails here, in seconds, not after the build (a dry run of its target).
for b in "$@"; do
  cmake --build build-carry --target "$b" -- -n > /dev/null 2>&1 || { echo "pack.sh: no build target $b (or its dry run failed)" >&2; exit 2; }
done
cmake --build build-carry -j"$(nproc)"
cd build-carry
files=(bin/memra bin/memra-gate lib/libmemra.so* lib/libmemra-model.so* lib/libmemra-text.so*
  lib/libmemra_ktrace.so lib/memra-build-tree plugins.d)
for b in "$@"; do [ -f "bin/$b" ] || { echo "pack.sh: no build-carry/bin/$b" >&2; exit 2; }; files+=("bin/$b"); done
mkdir -p "$D"
tar -cJf "$D/m.tar.xz.tmp" "${files[@]}"
mv "$D/m.tar.xz.tmp" "$D/m.tar.xz"
cd ..
echo "pack.sh: $D/m.tar.xz ($(du -h "$D/m.tar.xz" | cut -f1)) of $(git rev-parse --short HEAD)$([ -z "$(git status --porcelain -- . ':!bench/RESULTS.md' ':!bench/gpu/NOTES.md')" ] || echo ' with uncommitted or untracked changes')"
