#!/usr/bin/env bash
# Packs a CUDA build of memtrain for the lent GPU machine (bench/README.md, "On a lent GPU"): that machine has
# CUDA 13, PyTorch and a newer glibc but none of Debian 12's libraries, so the two binaries travel with every
# shared library they load except glibc's own, the CUDA driver and the CUDA toolkit's (the machine has those).
#
#   scripts/device_bundle.sh [BUILD_DIR]    (default: $MEMTRAIN_BUILD_DIR, else build)
#
# Writes .device/bundle.tar.xz (git-ignored; the device call carries it), laid out as
#   bin/memtrain  bin/memtrain_cuda_tests  lib/<soname>...  lib-cxx/{libstdc++,libgcc_s}  MANIFEST.txt
# lib-cxx/ is apart: scripts/device_check.sh prefers the machine's newer libstdc++ and falls back to ours.
set -euo pipefail

cd "$(dirname "$0")/.." || exit
build=${1:-${MEMTRAIN_BUILD_DIR:-build}}
out=.device/bundle.tar.xz
max_mib=60
binaries=("$build/memtrain" "$build/tests/cuda/memtrain_cuda_tests")

for b in "${binaries[@]}"; do
  [[ -x $b ]] || { echo "device_bundle: $b is missing: build it first (cmake --build $build)" >&2; exit 1; }
done
# cuBLASLt is loaded on first use (src/backend/cuda/cublaslt_loader.cpp): the binary names it, ldd does not.
if ! grep -qa 'libcublasLt\.so' "${binaries[0]}"; then
  echo "device_bundle: warning: ${binaries[0]} does not name libcublasLt: a build without CUDA?" >&2
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/lib-cxx"
cp "${binaries[@]}" "$stage/bin/"

# ldd lists the whole closure ("soname => path (address)"). Left out: glibc's own libraries and the dynamic
# loader, the CUDA driver and the toolkit's libraries (CUDA 13's are on the machine), the kernel's vdso.
skip='^(linux-vdso|ld-linux|libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv|libanl|libnsl'
skip+='|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libnvidia-[a-z-]*)\.so'
missing=$(ldd "${binaries[@]}" | grep 'not found' || true)
[[ -z $missing ]] || { echo "device_bundle: unresolved libraries:"$'\n'"$missing" >&2; exit 1; }
ldd "${binaries[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r soname path; do
    [[ $soname =~ $skip ]] && continue
    dir=lib
    [[ $soname == libstdc++.so.* || $soname == libgcc_s.so.* ]] && dir=lib-cxx
    cp -L "$path" "$stage/$dir/$soname"  # the file itself (symlinks resolved), named as the loader asks
  done

{
  echo "memtrain device bundle: $(date -u +%FT%TZ), $(git describe --always --dirty 2>/dev/null || echo '?')"
  echo "build: $(cd "$build" && pwd)"
  for b in "${binaries[@]}"; do echo "== ldd $b"; ldd "$b"; done
  echo "== packed"
  (cd "$stage" && find bin lib lib-cxx -type f -printf '%s\t%p\n' | sort -k2)
} >"$stage/MANIFEST.txt"

mkdir -p .device
rm -f "$out"
tar -C "$stage" -cf - bin lib lib-cxx MANIFEST.txt | xz -9 -T2 >"$out.part"
mv "$out.part" "$out"
bytes=$(stat -c %s "$out")
libs=("$stage"/lib/* "$stage"/lib-cxx/*)
echo "device_bundle: $out: $((bytes / 1024 / 1024)) MiB ($bytes bytes), ${#libs[@]} libraries: ${libs[*]##*/}"
if ((bytes > max_mib * 1024 * 1024)); then
  echo "device_bundle: $out is over $max_mib MiB: the device call carries at most 64 MiB with the tree" >&2
  exit 1
fi
