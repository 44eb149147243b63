// `memtrain train`: the run flags (cli/run_flags.h) onto TrainConfig, the OOM doctor's --memory-limit, and
// the run.
#include <optional>

#include "cli/commands.h"
#include "cli/run_flags.h"
#include "core/error.h"
#include "core/units.h"
#include "core/warning.h"
#include "forecast/oom_doctor.h"
#include "train/run.h"

namespace mt::cli {

namespace {

TrainConfig resolve(const RunFlags& flags, const std::string& memory_limit) {
  TrainConfig config = flags.resolve();
  if (!memory_limit.empty()) {
    const std::optional<int64_t> bytes = parse_bytes(memory_limit);
    if (!bytes || *bytes <= 0)
      fail_usage("--memory-limit " + memory_limit + ": expected a size such as 80GiB, 24GB or 4096");
    config.memory_limit = *bytes;
  }
  return config;
}

// Before the communicator exists: the ranks of a job launched with one command line resolve the same flags,
// so a value wrong on one is wrong on all, and rank 0 says so.
TrainConfig resolve_once_per_job(const RunFlags& flags, const std::string& memory_limit) {
  try {
    return resolve(flags, memory_limit);
  } catch (const Error& e) {
    if (command_line_reported_by_rank_zero()) throw ReportedElsewhere(e.kind());
    throw;
  }
}

}  // namespace

void add_train_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("train", "train a model on token shards, reporting its memory plan");
  std::shared_ptr<RunFlags> flags = add_run_flags(*cmd);
  cmd->get_option("--data")->required();
  cmd->get_option("--train-iters")->required();
  auto memory_limit = std::make_shared<std::string>();
  cmd->add_option("--memory-limit", *memory_limit,
                  "refuse to start when a rank's plan exceeds SIZE (80GiB, 24GB, bytes), naming changes "
                  "that fit; default: the machine's available memory shared by its ranks");
  cmd->callback(
      [flags, memory_limit] { train(resolve_once_per_job(*flags, *memory_limit), check_memory_fit); });
}

}  // namespace mt::cli
