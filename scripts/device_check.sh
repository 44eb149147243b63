#!/usr/bin/env bash
# The CUDA backend's first checks on a lent GPU (bench/README.md, "On a lent GPU"). Here, first:
#   scripts/device_bundle.sh            (packs build/'s binaries and their libraries into .device/)
# then the device tool's run with command `bash scripts/device_check.sh`, carry [".device"], timeout_s 480.
#
# Writes under $OUT (default ./device-out), the 8 files the tool brings back at most:
#   0-machine.txt  the card, driver, nvcc, torch, glibc and where CUDA's libraries are
#   1-unpack.txt   the bundle unpacked into /tmp/mt, its library path, ldd, `memtrain --help`
#   2-tests.txt    memtrain_cuda_tests, compute-sanitizer memcheck of *AgainstTheCpu*, tests/cli/test_cuda.py
#   3-memory.txt   GPT-2 124M bf16 B=16 T=1024 for 12 steps on the GPU (3-memory.json: its memory.json)
#   4-speed.txt    its tokens/s and MFU, a bf16 8192^3 product through torch, torch's own log (stage 5)
#   5-torch.json   bench/torch_gpt2.py --device cuda on the same card, data and batch
#   summary.txt    one line per stage: ok / failed (rc) / skipped, with the numbers
# Every stage runs under `timeout`, within a budget for the whole script (DEVICE_CHECK_BUDGET, 420 s), keeping
# time back for the later stages: a stage that fails or hangs costs only its own lines.
set -uo pipefail  # no -e: a failing stage is recorded and the next one runs

cd "$(dirname "$0")/.." || exit
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
budget=${DEVICE_CHECK_BUDGET:-420}
bundle=.device/bundle.tar.xz
mt=/tmp/mt              # the unpacked bundle
data=/tmp/mt-data       # the token shards
run=/tmp/mt-run         # memtrain's --out
logs=/tmp/mt-logs       # each command's own output, for the counts
rm -rf "$run" "$logs" "$OUT"/[0-5]-* && mkdir -p "$logs"  # nothing left from an earlier run on this machine
: >"$OUT/summary.txt"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)

# Seconds a command may run: `want`, less what the later stages keep back (`keep`); 0 when under 10 are left.
allow() {
  local want=$1 keep=$2
  local left=$((budget - SECONDS - keep))
  ((left > want)) && left=$want
  ((left < 10)) && left=0
  echo "$left"
}
# capture NAME SECONDS COMMAND...: runs it under timeout into the stage's log and $logs/NAME; returns its rc.
capture() {
  local name=$1 secs=$2
  shift 2
  echo "+ [$name, at most ${secs}s] $*"
  if ((secs == 0)); then
    echo "skipped: no time left" | tee "$logs/$name"
    return 125
  fi
  timeout -k 10 "$secs" "$@" 2>&1 | tee "$logs/$name"
  local rc=${PIPESTATUS[0]}
  echo "+ [$name] rc=$rc after ${SECONDS}s"
  return "$rc"
}
summary() { echo "$*" >>"$OUT/summary.txt"; }
status() { case $1 in 0) echo ok ;; 125) echo skipped ;; *) echo "failed ($1)" ;; esac; }
py() { python3 - "$@"; }  # python3 here is the image's, with torch

# (0) The machine, and where CUDA's libraries are (cuda_libs: one line each, /usr/local/cuda first).
stage_machine() {
  date -u
  uname -srm
  grep -m1 PRETTY /etc/os-release
  echo "cores: $(nproc)"
  free -g | head -2
  nvidia-smi -L
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.sm,clocks.max.sm,power.limit \
    --format=csv
  (nvcc --version || /usr/local/cuda/bin/nvcc --version) | tail -2
  timeout 60 python3 -c 'import sys, torch; p = torch.cuda.get_device_properties(0)
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "cudnn", torch.backends.cudnn.version()); print("torch sees", p.name, p.total_memory, "bytes,",
      p.multi_processor_count, "SMs, capability", f"{p.major}.{p.minor}")'
  gcc --version | head -1
  ldd --version | head -1
  ldconfig -p | grep -E 'libstdc\+\+\.so|libgomp\.so' | head -4
  "$sanitizer" --version | tail -1
  timeout 60 find /usr/local /usr/lib /usr/lib64 /opt \( -name 'libcublas*.so*' -o -name 'libcudart.so*' \
    -o -name 'libcudnn*.so*' -o -name 'libnccl.so*' -o -name 'libcuda.so*' \) 2>/dev/null |
    sort >"$logs/libs.all"
  { grep '^/usr/local/cuda' "$logs/libs.all"; grep -v '^/usr/local/cuda' "$logs/libs.all"; } >"$logs/cuda_libs"
  echo "== CUDA libraries found"
  cat "$logs/cuda_libs"
}
stage_machine >"$OUT/0-machine.txt" 2>&1
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
torch_line=$(grep -m1 '^python' "$OUT/0-machine.txt")
summary "0 machine: $( [[ -n $gpu ]] && echo ok || echo 'failed (no nvidia-smi)') | ${gpu:-no GPU} |" \
  "$(grep -o 'release [0-9.]*' "$OUT/0-machine.txt" | head -1) | ${torch_line:-no torch} |" \
  "$(ldd --version | head -1 | grep -o '[0-9.]*$' | sed 's/^/glibc /')"

# (1) The bundle, and the library path that loads it: ours, the dirs of CUDA's libraries the binaries ask for,
# then the machine's libstdc++ (newer than Debian 12's), else the bundle's own (lib-cxx/). Only memtrain's
# commands get it (mt_env): python3 and torch keep the machine's own path.
loaded='' mt_env=(env)
untar=(tar -xJf "$bundle" -C "$mt")  # without xz on the machine, Python's tarfile
command -v xz >/dev/null ||
  untar=(python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="tar")'
    "$bundle" "$mt")
stage_unpack() {
  [[ -f $bundle ]] || { echo "no $bundle: run scripts/device_bundle.sh first and carry .device"; return 1; }
  rm -rf "$mt" && mkdir -p "$mt"
  capture unpack "$(allow 90 200)" "${untar[@]}" || return
  head -2 "$mt/MANIFEST.txt"
  local libpath=$mt/lib soname dir
  for soname in libcublasLt.so.13 $(ldd "$mt"/bin/* | awk '/not found/ {print $1}' | sort -u); do
    dir=$(grep -m1 "/$soname\$" "$logs/cuda_libs" | xargs -r dirname)
    [[ -n $dir && :$libpath: != *:$dir:* ]] && libpath+=:$dir
  done
  mt_env=(env "LD_LIBRARY_PATH=$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  if ! timeout 60 "${mt_env[@]}" "$mt/bin/memtrain" --help >/dev/null 2>&1; then
    echo "memtrain does not load with the machine's libstdc++: the bundle's lib-cxx/ too"
    mt_env=(env "LD_LIBRARY_PATH=$mt/lib-cxx:$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  fi
  echo "${mt_env[1]}"
  for b in "$mt"/bin/*; do echo "== ldd $b" && "${mt_env[@]}" ldd "$b"; done
  capture help 60 "${mt_env[@]}" "$mt/bin/memtrain" --help || return
  capture list 60 "${mt_env[@]}" "$mt/bin/memtrain_cuda_tests" --gtest_list_tests || return
  echo "$(grep -c '^  ' "$logs/list") CUDA tests listed"
  loaded=yes
}
stage_unpack >"$OUT/1-unpack.txt" 2>&1
rc=$?
if [[ -n $loaded ]]; then
  libstdcxx=$([[ ${mt_env[1]} == *lib-cxx* ]] && echo "the bundle's" || echo "the machine's")
  summary "1 unpack: ok | memtrain loads (libstdc++: $libstdcxx), $(tail -1 "$OUT/1-unpack.txt")"
else
  summary "1 unpack: $(status $rc) | $(grep -E '^(\+ \[[a-z]+\] rc=|no )' "$OUT/1-unpack.txt" | tail -1)"
fi

# The data of stages 3 and 5: llm.c shards (256 int32 header: magic, version 1, token count; uint16 tokens) of
# random GPT-2 ids, named as find_shards looks for them (*_train_*.bin, *_val_*.bin).
py "$data" <<'EOF' >"$logs/data" 2>&1
import os, random, struct, sys
from array import array
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = random.Random(1234)
for split, count in (("train", 1 << 20), ("val", 1 << 16)):
    tokens = array("H", (rng.randrange(50257) for _ in range(count)))
    header = struct.pack("<3i", 20240520, 1, count) + bytes(4 * 253)
    with open(f"{out}/random_{split}_000000.bin", "wb") as f:
        f.write(header + tokens.tobytes())
print("shards:", sorted(os.listdir(out)))
EOF
shard=$data/random_train_000000.bin

# (2) The tests: the backend's ops against the CPU, memcheck of them, the command line against the CPU.
gtest_counts() {  # a run that did not finish has no "[==========] ... ran." line: its counts show as ?
  local f=$logs/$1 none=0 kind
  grep -q '^\[==========\] .* ran\.' "$f" 2>/dev/null || none='?'
  for kind in PASSED FAILED SKIPPED; do
    printf '%s %s ' "${kind,,}" "$(grep -oP "^\\[  $kind *\\] \\K[0-9]+(?= tests?[.,])" "$f" | tail -1 | grep . ||
      echo "$none")"
  done
}
unittest_result() {  # "Ran N tests in Ts: OK (skipped=1)", or why none ran
  local f=$logs/$1
  if grep -q '^Ran ' "$f" 2>/dev/null; then
    echo "$(grep -h '^Ran ' "$f" | tail -1): $(grep -hE '^(OK|FAILED)' "$f" | tail -1)"
  else
    grep -v '^+ ' "$f" 2>/dev/null | tail -1
  fi
}
stage_tests() {
  [[ -n $loaded ]] || { echo "skipped: the bundle does not load"; return 125; }
  local rc=0 r bin=$mt/bin/memtrain_cuda_tests
  # The stage fails on any command's failure; 77 (test_cuda.py: no GPU) and 125 (no time) are skips.
  failed() { (($1 == 77 || $1 == 125)) || rc=$1; }
  capture gtest "$(allow 150 210)" "${mt_env[@]}" "$bin" --gtest_brief=1 || failed $?
  capture cli "$(allow 240 150)" "${mt_env[@]}" MEMTRAIN_BIN="$mt/bin/memtrain" PYTHONUNBUFFERED=1 \
    python3 tests/cli/test_cuda.py -v || failed $?
  # memcheck runs when time allows: running out of it (124) is no failure.
  capture memcheck "$(allow 120 180)" "${mt_env[@]}" "$sanitizer" --tool memcheck --error-exitcode 99 \
    --print-limit 20 "$bin" --gtest_brief=1 --gtest_filter='*AgainstTheCpu*' || { r=$?; ((r == 124)) || failed $r; }
  return "$rc"
}
stage_tests >"$OUT/2-tests.txt" 2>&1
rc=$?
if [[ -n $loaded ]]; then
  summary "2 tests: $(status $rc) | gtest rc=$(grep -oP '^\+ \[gtest\] rc=\K[0-9]+' "$OUT/2-tests.txt"):" \
    "$(gtest_counts gtest)| test_cuda.py rc=$(grep -oP '^\+ \[cli\] rc=\K[0-9]+' "$OUT/2-tests.txt"):" \
    "$(unittest_result cli) |" \
    "memcheck rc=$(grep -oP '^\+ \[memcheck\] rc=\K[0-9]+' "$OUT/2-tests.txt"):" \
    "$(grep -ohE 'ERROR SUMMARY: [0-9]+ errors?' "$logs/memcheck" | tail -1), $(gtest_counts memcheck)"
else
  summary "2 tests: skipped (the bundle does not load)"
fi

# (3) The memory proof on GPT-2 124M, bf16, B=16, T=1024: planned == measured, and the driver's view.
stage_memory() {
  [[ -n $loaded ]] || { echo "skipped: the bundle does not load"; return 125; }
  cat "$logs/data"
  rm -rf "$run"
  capture train "$(allow 150 80)" "${mt_env[@]}" "$mt/bin/memtrain" train --model gpt2 --bf16 --device cuda \
    --micro-batch-size 16 --seq-length 1024 --train-iters 12 --eval-interval 0 --log-interval 1 \
    --data "$data" --out "$run"
  local rc=$?
  cp "$run/memory.json" "$OUT/3-memory.json" 2>/dev/null
  return "$rc"
}
stage_memory >"$OUT/3-memory.txt" 2>&1
rc=$?
memory_line=$(py "$run/memory.json" <<'EOF' 2>&1 | tail -1
import json, sys
try:
    m = json.load(open(sys.argv[1]))
except OSError:
    sys.exit("no memory.json")
d = m.get("device_memory") or {}
gib = lambda b: f"{b / 2**30:.2f} GiB" if isinstance(b, (int, float)) else "?"
print(f"planned == measured: {m.get('planned') == m.get('measured')} ({gib(m.get('planned_total_bytes'))}) |",
      f"allocation_matches_commit: {d.get('allocation_matches_commit')} | free_steady: {d.get('free_steady')}",
      f"({d.get('steps_checked')} steps) | allocation took {gib(d.get('allocation_drop_bytes'))},",
      f"runtime overhead {gib(d.get('runtime_overhead_bytes'))} | num_params {m.get('num_params')}")
EOF
)
summary "3 memory: $(status $rc) | $memory_line"

# (4) Speed: memtrain's median tokens/s over steps 3..12, MFU by llm.c's count (6N + 6LCT flops per token)
# against 989 TFLOP/s (H100/H200 dense bf16) and against this card's bf16 8192^3 product through torch.
stage_speed() {
  capture matmul "$(allow 60 60)" python3 -c 'import torch
n = 8192
a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
for _ in range(3): a @ b
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(10): a @ b
end.record(); torch.cuda.synchronize()
print(f"matmul: bf16 {n}^3: {2 * n**3 * 10 / (start.elapsed_time(end) / 1e3) / 1e12:.0f} TFLOP/s")'
  [[ -f $run/metrics.jsonl ]] || { echo "skipped: stage 3 left no $run/metrics.jsonl"; return 125; }
  echo "== $run/metrics.jsonl"
  cat "$run/metrics.jsonl"
  py "$run/metrics.jsonl" "$OUT/3-memory.json" "$logs/matmul" <<'EOF'
import json, re, statistics, sys
metrics, memory, matmul = sys.argv[1:]
steps = [json.loads(line) for line in open(metrics) if line.strip()]
timed = [s for s in steps if 3 <= s["step"] <= 12]
tok_s = statistics.median(s["tokens_per_sec"] for s in timed)
step_ms = statistics.median(s["step_ms"] for s in timed)
n = json.load(open(memory))["num_params"]
flops = (6 * n + 6 * 12 * 768 * 1024) * tok_s
line = f"memtrain {tok_s:.0f} tok/s ({step_ms:.1f} ms/step, {len(timed)} steps), MFU {flops / 989e12:.1%}"
line += " of 989 TFLOP/s"
found = re.search(r"([0-9.]+) TFLOP/s", open(matmul).read())
if found:
    line += f", {flops / float(found[1]) / 1e12:.1%} of the measured {found[1]} TFLOP/s"
print("speed:", line)
EOF
}
stage_speed >"$OUT/4-speed.txt" 2>&1
rc=$?
summary "4 speed: $(status $rc) | $(grep -h '^speed: ' "$OUT/4-speed.txt" | cut -c8-)" \
  "$(grep -h '^matmul: ' "$logs/matmul" 2>/dev/null)"

# (5) PyTorch on the same card, data and batch: 2 warmup steps and 10 timed, bf16 autocast, fused attention.
stage_torch() {
  echo "== stage 5: bench/torch_gpt2.py --device cuda (its JSON: 5-torch.json)"
  [[ -f $shard ]] || { echo "no shard: $(cat "$logs/data")"; return 1; }
  capture torch "$(allow 150 0)" env PYTHONUNBUFFERED=1 python3 bench/torch_gpt2.py --device cuda --autocast bf16 \
    --shard "$shard" --batch 16 --seq 1024 --warmup 2 --steps 10 --threads 8
  local rc=$?
  grep '^{' "$logs/torch" | tail -1 >"$OUT/5-torch.json"
  return "$rc"
}
stage_torch >>"$OUT/4-speed.txt" 2>&1
rc=$?
torch_line=$(py "$OUT/5-torch.json" "$OUT/3-memory.json" "$OUT/4-speed.txt" <<'EOF' 2>&1 | tail -1
import json, re, sys
try:
    t = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit("no torch JSON")
gib = lambda b: f"{b / 2**30:.2f} GiB"
flops = (6 * t["num_params"] + 6 * 12 * 768 * 1024) * t["tokens_per_sec"]
line = (f"torch {t['tokens_per_sec']:.0f} tok/s (MFU {flops / 989e12:.1%}), max allocated "
        f"{gib(t['max_memory_allocated_bytes'])}, reserved {gib(t['max_memory_reserved_bytes'])}, "
        f"device used {gib(t['device_used_bytes'])}")
ours = re.search(r"^speed: memtrain ([0-9]+) tok/s", open(sys.argv[3]).read(), re.M)
if ours:
    line += f" | memtrain/torch speed {float(ours[1]) / t['tokens_per_sec']:.2f}"
try:
    d = json.load(open(sys.argv[2]))["device_memory"]
    line += (f" | memtrain device: allocation {gib(d['allocation_drop_bytes'])} + runtime "
             f"{gib(d['runtime_overhead_bytes'])} vs torch device used {gib(t['device_used_bytes'])}")
except (OSError, ValueError, KeyError, TypeError):
    pass
print(line)
EOF
)
summary "5 torch: $(status $rc) | $torch_line"

# Nothing over the tool's 16 MiB a file: a runaway log keeps its first and last 7 MiB.
for f in "$OUT"/*; do
  if (($(stat -c %s "$f") > 15 * 1024 * 1024)); then
    { head -c 7M "$f" && printf '\n[... cut ...]\n' && tail -c 7M "$f"; } >"$f.cut" && mv "$f.cut" "$f"
  fi
done
echo "device_check: ${SECONDS}s of $budget"
cat "$OUT/summary.txt"
