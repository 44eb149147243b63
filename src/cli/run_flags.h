// The flags that describe a training run (model, batch, precision, recompute, parallelism, checkpoints,
// outputs), declared once: `memtrain train` runs them, `memtrain estimate` plans them without running.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "train/train_config.h"

namespace mt::cli {

// Flags as given, before the aliases (--bf16, --use-distributed-optimizer, --recompute-activations, a
// DeepSpeed config) are folded into the TrainConfig.
struct RunFlags {
  TrainConfig config;
  std::string precision;  // --precision; empty: not given
  bool bf16 = false, fp16 = false;
  std::string recompute_granularity, recompute_method;
  int64_t recompute_num_layers = 0;
  bool recompute_activations = false;
  std::string deepspeed_config;
  bool distributed_optimizer = false;
  CLI::Option* memory_timeline = nullptr;

  // The configuration the flags mean; usage errors for contradictions.
  TrainConfig resolve() const;
};

// Declares every run flag on `cmd` (--model required, nothing else); the flags live as long as the command.
std::shared_ptr<RunFlags> add_run_flags(CLI::App& cmd);

}  // namespace mt::cli
