#!/usr/bin/env bash
# Trains GPT-2 124M in several precisions with memtrain and with PyTorch, one configuration after the
# other on the same tokens, and prints their throughput, MFU (model FLOPs over the machine's FMA peak, which it
# measures first with build/bench/fma_peak), peak RSS and the ratios the mixed-precision and ISA targets name.
# Run from anywhere after scripts/setup.sh.
#   CONFIGS   which runs, in order (default: all five below, space- or comma-separated)
#               memtrain-fp32     memtrain train
#               memtrain-bf16     memtrain train --bf16
#               memtrain-bf16-o2  memtrain train --bf16 --o2-optimizer --o2-gradient
#               torch-fp32        torch_gpt2.py (plain fp32)
#               torch-bf16        torch_gpt2.py --autocast bf16 (torch.autocast(device_type="cpu", dtype=bfloat16));
#                                 skipped below avx512_bf16 (no native bf16 products)
#   STEPS     steps per run; the first SKIP are warmup, left out of the medians (default 6)
#   SKIP      leading steps left out of the medians (default 2)
#   THREADS   threads for all runs (default 2)
#   B, T      micro-batch size and sequence length (default 4, 256)
#   OUT       where data, logs and results go (default: outside the tree, under TMPDIR)
#   MEMTRAIN  the memtrain binary (default build/memtrain; fma_peak from the same build, bench/fma_peak)
#   ISA       cap both engines at this level, so that one machine stands in for a smaller one: generic, avx2,
#             avx512 or avx512_bf16 (default: none, each picks its own). memtrain: MEMTRAIN_MAX_ISA; PyTorch:
#             oneDNN, ATen and OpenBLAS (below); the FMA peak is measured at the capped level too
set -euo pipefail
cd "$(dirname "$0")/.."

configs="${CONFIGS:-memtrain-fp32 memtrain-bf16 memtrain-bf16-o2 torch-fp32 torch-bf16}"
configs="${configs//,/ }"
steps="${STEPS:-6}"
skip="${SKIP:-2}"
threads="${THREADS:-2}"
batch="${B:-4}"
seq="${T:-256}"
out="${OUT:-${TMPDIR:-/tmp}/memtrain-bench-gpt2}"
memtrain="${MEMTRAIN:-build/memtrain}"
fma_peak="$(dirname "$memtrain")/bench/fma_peak"
isa_cap="${ISA:-}"
# The pyenv python3 first on PATH has no torch; Debian's has 1.13.
python=/usr/bin/python3

# Each configuration's engine-specific flags.
declare -A flags=(
  [memtrain-fp32]=""
  [memtrain-bf16]="--bf16"
  [memtrain-bf16-o2]="--bf16 --o2-optimizer --o2-gradient"
  [torch-fp32]="--autocast off"
  [torch-bf16]="--autocast bf16"
)

# shellcheck source=bench/lib.sh
source bench/lib.sh

check_inputs
[ -x "$fma_peak" ] || die "$fma_peak not found, run scripts/setup.sh"

# The cap for PyTorch's three libraries: oneDNN (bf16 products) by ONEDNN_MAX_CPU_ISA (DNNL_ before oneDNN 2.5);
# ATen's own kernels by ATEN_CPU_CAPABILITY; OpenBLAS, which Debian's torch calls for fp32 products (sgemm_ of
# libblas.so.3), by OPENBLAS_CORETYPE, read when it loads. ATen and OpenBLAS have nothing above AVX-512 to cap,
# so at the AVX-512 levels they keep their own choice (here ATen picks AVX2 and OpenBLAS Haswell anyway).
cap=""
if [ -n "$isa_cap" ]; then
  case "$isa_cap" in
    generic) onednn=SSE41 aten=default openblas=Nehalem ;;
    avx2) onednn=AVX2 aten=avx2 openblas=Haswell ;;
    avx512) onednn=AVX512_CORE aten="" openblas="" ;;
    avx512_bf16) onednn=AVX512_CORE_BF16 aten="" openblas="" ;;
    *) die "ISA: expected generic, avx2, avx512 or avx512_bf16, got '$isa_cap'" ;;
  esac
  # memtrain and fma_peak read it.
  export MEMTRAIN_MAX_ISA="$isa_cap"
  torch_env="ONEDNN_MAX_CPU_ISA=$onednn DNNL_MAX_CPU_ISA=$onednn${aten:+ ATEN_CPU_CAPABILITY=$aten}"
  torch_env+="${openblas:+ OPENBLAS_CORETYPE=$openblas}"
  cap="ISA=$isa_cap: memtrain MEMTRAIN_MAX_ISA=$isa_cap; PyTorch $torch_env"
fi

# The peak MFU is measured against, at the level memtrain runs at (fma_peak decides it as memtrain does).
wait_for_quiet_machine
peak="$("$fma_peak" --threads "$threads")" || die "$fma_peak failed"
level="$(jq -r .isa <<<"$peak")"
echo "bench: FMA peak $(jq '.gflops | round' <<<"$peak") GFLOP/s at $level, $threads threads" >&2

# Model FLOPs per token, 6N + 12 L T C (PaLM's appendix B): N counts every parameter of GPT-2 124M as both engines
# train it, with the vocabulary padded to 50304: wte (also the tied LM head), wpe, per layer 12 C^2 + 13 C
# (weights, biases, two LayerNorms) and ln_f; memtrain's num_params in memory.json, 124,475,904.
layers=12 channels=768
params=$((50304 * channels + 1024 * channels + layers * (12 * channels * channels + 13 * channels) + 2 * channels))
machine="$(jq -n --arg cpu "$(lscpu | sed -n 's/^Model name: *//p' | head -n1)" --arg cap "$cap" \
  --argjson peak "$peak" --argjson params "$params" --argjson flops "$((6 * params + 12 * layers * seq * channels))" \
  --arg formula "6 x $params + 12 x $layers x $seq x $channels" \
  '{cpu_model: $cpu, cap: (if $cap == "" then null else $cap end), fma_peak: $peak, params: $params,
    flops_per_token: $flops, flops_formula: $formula}')"

# PyTorch 1.13 multiplies bf16 through oneDNN only where cpuinfo reports AVX-512 (BW, VL, DQ); below that it falls
# back to its reference bf16 gemm, and under an AVX2 cap oneDNN cannot create a bf16 matmul at all. With AVX-512
# but no bf16 instructions oneDNN emulates them: not the native bf16 the comparison is about.
skip_reason() {
  [ "$1" = torch-bf16 ] || return 0
  case "$level" in
    generic | avx2)
      echo "no bf16 products at $level: PyTorch falls back to its reference bf16 gemm (many minutes a step)" ;;
    avx512) echo "no native bf16 instructions (avx512_bf16 or AMX) at $level: oneDNN would emulate them" ;;
  esac
}

# The targets, each a ratio of two configurations' values or one's MFU (write_result in lib.sh). Other jobs do
# not move peak RSS, so the RSS ratio is steady whatever the steps did.
if [ "$level" = generic ] || [ "$level" = avx2 ]; then
  # The ISA issue's, for CPUs without AVX-512: PyTorch's best there is fp32 (bf16 autocast is skipped), and
  # memtrain's bf16 products run as fp32 sgemm on converted tiles, so the fp32 FMA peak bounds both precisions.
  targets='[
  {name: "memtrain fp32 / PyTorch fp32 tokens/s", num: "memtrain-fp32", den: "torch-fp32", op: ">=", target: 1.1},
  {name: "memtrain bf16 / PyTorch fp32 tokens/s", num: "memtrain-bf16", den: "torch-fp32", op: ">=", target: 1.1},
  {name: "memtrain fp32 MFU", num: "memtrain-fp32", mfu: true, op: ">=", target: 0.88},
  {name: "memtrain bf16 MFU", num: "memtrain-bf16", mfu: true, op: ">=", target: 0.88},
  {name: "memtrain bf16 / memtrain fp32 tokens/s", num: "memtrain-bf16", den: "memtrain-fp32",
   op: ">=", target: 1}]'
else
  # The mixed-precision issue's.
  targets='[
  {name: "memtrain bf16 / PyTorch bf16 tokens/s", num: "memtrain-bf16", den: "torch-bf16",
   op: ">=", target: 1.6, goal: 2.0},
  {name: "memtrain bf16 / memtrain fp32 tokens/s", num: "memtrain-bf16", den: "memtrain-fp32",
   op: ">=", target: 1.6},
  {name: "O2 cost = 1 - bf16+O2 / bf16 tokens/s", num: "memtrain-bf16-o2", den: "memtrain-bf16",
   cost: true, op: "<", target: 0.03},
  {name: "peak RSS memtrain bf16 / PyTorch bf16", num: "memtrain-bf16", den: "torch-bf16",
   rss: true, op: "<=", target: 0.7}]'
fi

run_configs
