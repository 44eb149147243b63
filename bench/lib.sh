# shellcheck shell=bash
# shellcheck disable=SC2154  # the variables below come from the sourcing script
# Shell functions shared by the bench_*.sh scripts; sourced, not run. The sourcing script sets
#   out       where data, logs and summaries go
#   model     memtrain's --model (default gpt2)
#   torch_script  the PyTorch baseline and its model flags (default bench/torch_gpt2.py)
#   memtrain  the memtrain binary
#   python    a python3 with torch (Debian's /usr/bin/python3)
#   steps, skip, threads, batch, seq   as their STEPS, SKIP, THREADS, B, T
#   torch_env (optional) VAR=value words for every PyTorch run (bench_gpt2.sh's ISA caps)
#   machine   (optional) a JSON object for result.json: the CPU, its FMA peak and the model FLOPs per token
# and runs from the repository root.

die() { echo "bench: $*" >&2; exit 1; }

# The checks both benchmarks make before running anything: known configurations (the caller's `configs` and
# `flags`), more steps than skipped ones, jq, and a built memtrain.
check_inputs() {
  local c
  for c in $configs; do
    [ -n "${flags[$c]+set}" ] || die "unknown configuration '$c' in CONFIGS (known: ${!flags[*]})"
  done
  [ "$steps" -gt "$skip" ] || die "STEPS ($steps) must exceed SKIP ($skip)"
  command -v jq >/dev/null || die "needs jq (apt-get install -y jq)"
  [ -x "$memtrain" ] || die "$memtrain not found, run scripts/setup.sh"
}

load_average() { cut -d' ' -f1-3 /proc/loadavg; }

# Benchmarks of other sessions (memtrain training, any bench/torch_*.py baseline) running now, one "pid command" a
# line.
other_benchmarks() { pgrep -af 'memtrain train|bench/torch_' || true; }

# Waits, up to WAIT_MAX seconds (default 900), while another benchmark runs, so that two never share the
# cores; then prints uptime. Past WAIT_MAX it goes on and says so: that run's steps are suspect.
wait_for_quiet_machine() {
  local waited=0 max="${WAIT_MAX:-900}" others
  while others="$(other_benchmarks)" && [ -n "$others" ]; do
    if [ "$waited" -ge "$max" ]; then
      echo "bench: WARNING: still running after ${max}s of waiting, going on alongside:" >&2
      echo "$others" | cut -c1-150 >&2
      break
    fi
    [ $((waited % 60)) -eq 0 ] && { echo "bench: waiting for another benchmark to end:"; echo "$others" | cut -c1-150; } >&2
    sleep 10
    waited=$((waited + 10))
  done
  echo "bench: uptime: $(uptime)" >&2
}

# The fortune texts tokenized once into OUT/data; sets shard to the training shard every run reads in order.
prepare_data() {
  local data="$out/data" texts=() f
  if ! compgen -G "$data/fortunes_train_*.bin" >/dev/null; then
    # The fortune texts, without their .dat indexes and .u8 duplicates.
    for f in /usr/share/games/fortunes/*; do
      case "$f" in *.dat | *.u8) ;; *) texts+=("$f") ;; esac
    done
    mkdir -p "$data"
    "$memtrain" prepare "${texts[@]}" --out "$data" --name fortunes >&2
  fi
  shard="$(compgen -G "$data/fortunes_train_*.bin" | head -n1)"
}

# Reads {steps: [tokens/s of each timed step], ...} on stdin and adds the median and the fastest step.
# Other jobs only ever slow a step down, so the fastest step is the least disturbed estimate; a median
# more than 10% below it says that other jobs slowed most steps, and the run should be repeated.
summarize() {
  jq '.steps as $s | ($s | sort) as $o | . + {
        tokens_per_sec: (if ($o | length) % 2 == 1 then $o[($o | length) / 2 | floor]
                         else ($o[($o | length) / 2 - 1] + $o[($o | length) / 2]) / 2 end),
        best_step_tokens_per_sec: ($o | max)}
      | . + {steady: (.tokens_per_sec >= 0.9 * .best_step_tokens_per_sec)}'
}

# run_memtrain NAME [FLAG...]: trains STEPS steps with the extra memtrain train flags into OUT/NAME and
# writes the summary OUT/NAME.json; with RANKS=N in its environment, data-parallel under mpirun -np N (rank 0's
# memory report).
run_memtrain() {
  local name="$1" dir="$out/$1" load
  shift
  wait_for_quiet_machine
  load="$(load_average)"
  echo "bench: load average $load; $name: memtrain train ${*:-(no flags)}, $steps steps" >&2
  rm -rf "$dir"
  local launcher=() memory="$dir/memory.json"
  if [ "${RANKS:-1}" -gt 1 ]; then
    launcher=(mpirun --allow-run-as-root --oversubscribe -np "$RANKS")
    memory="$dir/memory.rank0.json"
  fi
  if ! "${launcher[@]}" "$memtrain" train --model "${model:-gpt2}" --data "$out/data" --seq-length "$seq" --micro-batch-size "$batch" \
      --threads "$threads" --train-iters "$steps" --eval-interval 0 --no-shuffle --out "$dir" "$@" \
      > "$dir.log" 2>&1; then
    tail -n 5 "$dir.log" >&2
    die "$name failed, log in $dir.log"
  fi
  jq -s --arg name "$name" --arg flags "$*" --arg load "$load" --arg load_end "$(load_average)" \
    --argjson skip "$skip" --slurpfile memory "$memory" \
    '{name: $name, engine: "memtrain", flags: $flags, load_average: $load, load_average_end: $load_end,
      # The ISA level its kernels ran at (backend/cpu/cpu_isa.h); builds before runtime dispatch do not say.
      cpu_isa: ($memory[0].cpu_isa // "unknown"),
      steps: [.[] | select(.step > $skip) | .tokens_per_sec],
      step_ms: [.[] | select(.step > $skip) | .step_ms],
      losses: [.[] | .loss],
      peak_rss_bytes: $memory[0].peak_rss_bytes,
      # The packed activation arena the plan reserves, and the sum of its tensors without lifetime packing.
      activations_bytes: $memory[0].planned.activations,
      activations_unpacked_bytes: $memory[0].activations_unpacked_bytes,
      # {planned, measured}: the measured value, the bytes the run actually held.
      model_state_bytes_per_param: ($memory[0].model_state_bytes_per_param
                                    | if type == "object" then .measured else . end),
      # Weights (frozen ones too), master weights, gradients and optimizer states, as the plan holds them.
      model_state_bytes: ($memory[0].measured | .params + (.frozen // 0) + .master + .grads + .optim)}' \
    "$dir/metrics.jsonl" | summarize > "$dir.json"
}

# launch_torch NAME COMMAND...: after a quiet machine, runs COMMAND (a launcher, if any, then a torch script
# and its own flags) with the shared flags (shard, batch shape, threads, SKIP warmup and STEPS-SKIP timed
# steps) appended; its JSON in OUT/NAME.raw.json, its log in OUT/NAME.log. Sets load to the load average at
# its start. OpenBLAS, torch's fp32 products here, runs on THREADS threads too: torch.set_num_threads does not
# reach it, and it would take every core.
launch_torch() {
  local name="$1" dir="$out/$1"
  shift
  wait_for_quiet_machine
  load="$(load_average)"
  echo "bench: load average $load; $name: ${torch_env:+$torch_env }$*, $skip warmup + $((steps - skip)) timed steps" >&2
  # shellcheck disable=SC2086  # torch_env is words
  if ! env OPENBLAS_NUM_THREADS="$threads" ${torch_env:-} "$@" --shard "$shard" --batch "$batch" --seq "$seq" --threads "$threads" \
      --warmup "$skip" --steps "$((steps - skip))" > "$dir.raw.json" 2> "$dir.log"; then
    tail -n 5 "$dir.log" >&2
    die "$name failed, log in $dir.log"
  fi
}

# run_torch NAME [FLAG...]: the PyTorch baseline (torch_script) with the extra flags; summary in OUT/NAME.json.
run_torch() {
  local name="$1" load
  shift
  # shellcheck disable=SC2086  # the script's model flags are words
  launch_torch "$name" "$python" ${torch_script:-bench/torch_gpt2.py} "$@"
  jq --arg name "$name" --arg flags "$*" --arg load "$load" --arg load_end "$(load_average)" \
    '{name: $name, engine: ("PyTorch " + .torch_version), flags: $flags, load_average: $load,
      load_average_end: $load_end, cpu_capability, openblas_core,
      steps: [.batch * .seq / .step_ms[] * 1000], step_ms, losses, peak_rss_bytes,
      forward_rss_growth_bytes, model_state_bytes_per_param, model_state_bytes}' \
    "$out/$name.raw.json" | summarize > "$out/$name.json"
}

# OUT/result.json: the settings, the caller's `machine` (a JSON object, when it sets one), every configuration's
# summary, and the caller's `targets` (a jq array of {name, num[, den], op, target[, goal][, cost][, rss][, mfu]}),
# each a ratio of two configurations' values: tokens/s, or peak RSS with rss; "cost" is 1 - num/den; with mfu,
# num's MFU alone. A target whose configurations are not in CONFIGS is left out; one whose configuration was
# skipped names it in "skipped". When machine has flops_per_token and fma_peak.gflops, every run that ran gets
# its MFU: the model FLOPs it did per second over the peak of its products (best_step_mfu: at its fastest step):
# fma_peak.bf16_gflops for a bf16 configuration (its name says bf16) where fma_peak measured one (native bf16
# dot products), else the fp32 FMA peak.
write_result() {
  local files=()
  for c in $configs; do files+=("$out/$c.json"); done
  jq -s --argjson steps "$steps" --argjson skip "$skip" --argjson threads "$threads" \
    --argjson batch "$batch" --argjson seq "$seq" --arg model "${model:-gpt2}" \
    --argjson machine "${machine:-null}" '
    ($machine.flops_per_token // null) as $flops | ($machine.fma_peak // {}) as $peaks
    | map(if $flops and $peaks.gflops and (.skipped | not)
          then (if (.name | test("bf16")) then $peaks.bf16_gflops // $peaks.gflops else $peaks.gflops end) as $peak
          | . + {peak_gflops: $peak, mfu: (.tokens_per_sec * $flops / ($peak * 1e9)),
                 best_step_mfu: (.best_step_tokens_per_sec * $flops / ($peak * 1e9))}
          else . end)
    | (map({(.name): .}) | add) as $c
    | def value(f; $r): ($c[$r.num] | f) / ($c[$r.den] | f) | if $r.cost then 1 - . else . end;
      def pass($r; $v): if $r.op == ">=" then $v >= $r.target elif $r.op == "<" then $v < $r.target
                        else $v <= $r.target end;
    {settings: {model: $model, batch: $batch, seq: $seq, threads: $threads, steps: $steps,
                warmup_steps: $skip}}
    + (if $machine then {machine: $machine} else {} end)
    + {configs: $c,
       targets: '"$targets"'
       | map(select($c[.num] and (if .mfu then $c[.num].mfu or $c[.num].skipped else $c[.den] end))
             | . as $r
             | ([$c[.num], $c[.den // .num]] | map(select(.skipped) | .name) | .[0]) as $skipped
             | if $skipped then . + {skipped: $skipped}
               else (if .rss then . + {value: value(.peak_rss_bytes; $r)}
                     elif .mfu then . + {value: $c[.num].mfu, best_step_value: $c[.num].best_step_mfu}
                     else . + {value: value(.tokens_per_sec; $r),
                               best_step_value: value(.best_step_tokens_per_sec; $r)} end)
                    | . + {pass: pass($r; .value),
                           steady: (.rss or ($c[$r.num].steady and $c[$r.den // $r.num].steady))} end)}' \
    "${files[@]}" > "$out/result.json"
}

# The lines above the tables when the caller set `machine`: the CPU, the ISA levels the runs chose, the cap, the
# FMA peak behind MFU, and the configurations skipped here and why.
print_machine() {
  jq -r 'def levels(f): [.configs[] | f // empty] | unique | if . == [] then "-" else join(", ") end;
    .machine as $m | select($m)
    | "CPU: \($m.cpu_model), \(.settings.threads) threads",
      "ISA: memtrain ran at \(levels(select(.engine == "memtrain") | .cpu_isa)); PyTorch ATen at \(levels(
        select(.engine // "" | startswith("PyTorch")) | .cpu_capability)), OpenBLAS core \(levels(.openblas_core))",
      "cap: \($m.cap // "none")",
      "FMA peak: \($m.fma_peak.gflops * 10 | round / 10) GFLOP/s at \($m.fma_peak.isa), \($m.fma_peak.threads) threads"
        + if $m.fma_peak.bf16_gflops then "; bf16 dot products \($m.fma_peak.bf16_gflops * 10 | round / 10)"
            + " GFLOP/s, the bf16 rows'"'"' MFU peak" else "" end,
      ([.configs[] | select(.engine == "memtrain") | .cpu_isa | select(. != "unknown" and . != $m.fma_peak.isa)]
       | if . != [] then "WARNING: memtrain ran at \(unique | join(", ")), not the peak'"'"'s level" else empty end),
      (select($m.cap and any(.configs[]; .engine == "memtrain" and .cpu_isa == "unknown"))
       | "WARNING: memtrain did not say its ISA level (a build before runtime dispatch), so the cap may not hold it"),
      (.configs[] | select(.skipped) | "skipped \(.name): \(.skipped)"),
      ""' "$1"
}

print_table() {
  local r="$out/result.json" mfu
  mfu="$(jq '.machine.fma_peak.gflops != null' "$r")"
  echo
  print_machine "$r"
  { printf 'config\tflags\tload avg\ttokens/s\tbest-step tokens/s\t%ssteady\tpeak RSS (GiB)\tstate B/param\tstate MiB\tloss first -> last\n' \
      "$([ "$mfu" = true ] && printf 'MFU\t')"
    jq -r --argjson mfu "$mfu" '.configs[] | [.name, (if .flags == "" then "-" else .flags end)]
      + if .skipped then ["-", "skipped"] + [range(if $mfu then 7 else 6 end) | "-"]
        else [.load_average, (.tokens_per_sec * 10 | round / 10), (.best_step_tokens_per_sec * 10 | round / 10)]
          + (if $mfu then ["\(.mfu * 1000 | round / 10)%"] else [] end)
          + [(if .steady then "yes" else "NO" end),
             (.peak_rss_bytes / 1073741824 * 100 | round / 100),
             (.model_state_bytes_per_param // "?" | if type == "number" then . * 100 | round / 100 else . end),
             (.model_state_bytes // "?" | if type == "number" then . / 1048576 * 10 | round / 10 else . end),
             "\(.losses[0] * 100 | round / 100) -> \(.losses[-1] * 100 | round / 100)"] end | @tsv' "$r"
  } | column -t -s $'\t'
  echo
  if [ "$(jq '.targets | length' "$r")" -eq 0 ]; then
    echo "(no target has both of its configurations in CONFIGS)"
    return
  fi
  { printf 'target\tmedian\tbest-step\ttarget\tresult\n'
    jq -r 'def r: if type == "number" then . * 1000 | round / 1000 else "-" end;
      .targets[] | [.name, (.value | r), (.best_step_value | r),
        "\(.op) \(.target)\(if .goal then " (goal \(.goal))" else "" end)",
        if .skipped then "skipped (\(.skipped) did not run)"
        else (if .pass then "PASS" else "MISS" end) + (if .steady then "" else " (unsteady)" end) end] | @tsv' "$r"
  } | column -t -s $'\t'
  echo
  echo "(tokens/s: median of steps $((skip + 1))-$steps; best-step: the fastest of them; steady: the median"
  echo " within 10% of the best step, else other jobs slowed most steps and the run should be repeated;"
  echo " PASS/MISS judged on the medians, (unsteady) when a configuration behind it was not steady;"
  if [ "$mfu" = true ]; then
    jq -r '.machine | " MFU: tokens/s x \(.flops_per_token / 1e6 * 10 | round / 10) MFLOP per token (\(.flops_formula))"
      + " / the peak;"' "$r"
  fi
  echo " details in $out)"
}

# Why configuration $1 cannot run on this machine, or nothing when it can; a caller that skips some redefines it.
skip_reason() { :; }

# Runs every configuration of CONFIGS (memtrain-* through run_memtrain, torch-* through run_torch, with their
# `flags`) that skip_reason lets run, then writes OUT/result.json and prints the tables.
run_configs() {
  mkdir -p "$out"
  prepare_data
  local reason
  for c in $configs; do
    reason="$(skip_reason "$c")"
    if [ -n "$reason" ]; then
      echo "bench: skipping $c: $reason" >&2
      jq -n --arg name "$c" --arg flags "${flags[$c]}" --arg reason "$reason" \
        '{name: $name, flags: $flags, skipped: $reason}' > "$out/$c.json"
      continue
    fi
    # shellcheck disable=SC2086  # the flags are words
    case "$c" in
      memtrain-*) run_memtrain "$c" ${flags[$c]} ;;
      torch-*) run_torch "$c" ${flags[$c]} ;;
    esac
  done
  write_result
  print_table
}
