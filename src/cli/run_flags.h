// The flags that describe a training run (model, batch, precision, recompute, parallelism, checkpoints,
// outputs), declared from the one table of config/run_flag_table.h: `memtrain train` runs them, `memtrain
// estimate` plans them without running.
#pragma once

#include <CLI/CLI.hpp>
#include <initializer_list>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "config/run_flag_table.h"
#include "config/train_config.h"

namespace mt::cli {

struct RunFlags {
  RunFlagInput input;
  // Each table flag's option, by its first name: which ones the command line gave.
  std::vector<std::pair<std::string_view, CLI::Option*>> options;

  // Declares the table's `flag` on `cmd`, bound to `input`.
  void declare(CLI::App& cmd, const RunFlag& flag);
  // The configuration the flags mean; usage errors for contradictions.
  TrainConfig resolve() const;
};

// Declares every run flag on `cmd` (--model required, nothing else); the flags live as long as the command.
std::shared_ptr<RunFlags> add_run_flags(CLI::App& cmd);

// Declares the run flags named (by their first name) on `cmd`, starting from `defaults`: for a command that
// takes a few of them, as `plan` does for its printed command lines.
std::shared_ptr<RunFlags> add_run_flags(CLI::App& cmd, const TrainConfig& defaults,
                                        std::initializer_list<std::string_view> names);

}  // namespace mt::cli
