#!/usr/bin/env bash
# Sets up, builds and runs every test: the Release build, then the same tests under ASan/UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"

# A warning fails CI: both builds treat warnings as errors. Both compile as unity builds (8 files a unit: each
# header parsed and each inline function compiled once a unit, not once a file): file by file they took 22 of
# CI's 50 minutes on 2 cores, as unity builds 14. The default build (scripts/setup.sh alone, as the README and
# every local edit build it) stays file by file, so a file that compiles only beside another is seen there.
unity="-DCMAKE_UNITY_BUILD=ON"
MEMTRAIN_CMAKE_ARGS="-DMEMTRAIN_WERROR=ON $unity" scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$jobs"

MEMTRAIN_BUILD_DIR=build-asan \
  MEMTRAIN_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=Debug -DMEMTRAIN_SANITIZE=ON -DMEMTRAIN_WERROR=ON -DMEMTRAIN_CUDA=OFF -DMEMTRAIN_BUILD_BENCH=OFF $unity" \
  scripts/setup.sh
# The convergence runs train for minutes; under the sanitizers they would take hours and test nothing new.
# So does calibrate, whose measurements run GPT-2-sized products (its kernels are sanitized in unit.kernels.*).
# The emulated CPUs and the ISA check are about the Release binary users run.
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j "$jobs" \
  -LE "convergence|qemu|isa|calibrate"
