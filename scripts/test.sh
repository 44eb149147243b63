#!/usr/bin/env bash
# Sets up, builds and runs every test: the Release build, then the same tests under ASan/UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"

# A warning fails CI: both builds treat warnings as errors.
MEMTRAIN_CMAKE_ARGS="-DMEMTRAIN_WERROR=ON" scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$jobs"

# The sanitized build compiles as a unity build (8 files a unit: each header parsed and each inline function
# compiled once per unit, not per file): it took 13 of CI's 50 minutes file by file. The Release build above
# stays file by file, so CI still compiles every file alone, as users build it.
MEMTRAIN_BUILD_DIR=build-asan \
  MEMTRAIN_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=Debug -DMEMTRAIN_SANITIZE=ON -DMEMTRAIN_WERROR=ON -DMEMTRAIN_CUDA=OFF -DMEMTRAIN_BUILD_BENCH=OFF -DCMAKE_UNITY_BUILD=ON" \
  scripts/setup.sh
# The convergence runs train for minutes; under the sanitizers they would take hours and test nothing new.
# So does calibrate, whose measurements run GPT-2-sized products (its kernels are sanitized in unit.kernels.*).
# The emulated CPUs and the ISA check are about the Release binary users run.
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j "$jobs" \
  -LE "convergence|qemu|isa|calibrate"
