// `memtrain train`: the run flags (cli/run_flags.h) onto TrainConfig, the OOM doctor's --memory-limit, the
// tokenizer the data is checked against (--tokenizer), and the run.
#include <optional>

#include "cli/commands.h"
#include "cli/run_flags.h"
#include "cli/tokenizer_choice.h"
#include "core/error.h"
#include "core/units.h"
#include "core/warning.h"
#include "forecast/oom_doctor.h"
#include "train/run.h"

namespace mt::cli {

namespace {

// --tokenizer (or GPT-2's file flags) opened, for the data and the model to be checked against; none given:
// nothing to check but what the shards record.
RunTokenizer run_tokenizer(const CLI::App& cmd, const TokenizerChoice& choice, bool allow_mismatch) {
  const bool given = cmd.count("--tokenizer") + cmd.count("--encoder-json") + cmd.count("--vocab-bpe") > 0;
  if (!given) {
    if (allow_mismatch) fail_usage("--allow-tokenizer-mismatch needs --tokenizer, the tokenizer it allows");
    return {};
  }
  // Every rank of one command line opens the same files: rank 0 says which.
  const std::unique_ptr<Tokenizer> opened =
      open_tokenizer(choice, command_line_reported_by_rank_zero() ? nullptr : stdout);
  return {choice.spec, opened->vocab_size(), opened->fingerprint(), allow_mismatch};
}

struct TrainArgs {
  std::shared_ptr<RunFlags> flags;
  std::string memory_limit;
  TokenizerChoice tokenizer;
  bool allow_tokenizer_mismatch = false;
};

TrainConfig resolve(const CLI::App& cmd, const TrainArgs& args) {
  TrainConfig config = args.flags->resolve();
  config.tokenizer = run_tokenizer(cmd, args.tokenizer, args.allow_tokenizer_mismatch);
  if (!args.memory_limit.empty()) {
    const std::optional<int64_t> bytes = parse_bytes(args.memory_limit);
    if (!bytes || *bytes <= 0)
      fail_usage("--memory-limit " + args.memory_limit + ": expected a size such as 80GiB, 24GB or 4096");
    config.memory_limit = *bytes;
  }
  return config;
}

// Before the communicator exists: the ranks of a job launched with one command line resolve the same flags,
// so a flag's value wrong on one is wrong on all, and rank 0 says so. A file (a tokenizer's) may be missing
// on one host only: each rank says so.
TrainConfig resolve_once_per_job(const CLI::App& cmd, const TrainArgs& args) {
  try {
    return resolve(cmd, args);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::usage && command_line_reported_by_rank_zero())
      throw ReportedElsewhere(e.kind());
    throw;
  }
}

}  // namespace

void add_train_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("train", "train a model on token shards, reporting its memory plan");
  auto args = std::make_shared<TrainArgs>();
  args->flags = add_run_flags(*cmd);
  cmd->get_option("--data")->required();
  cmd->get_option("--train-iters")->required();
  cmd->add_option("--memory-limit", args->memory_limit,
                  "refuse to start when a rank's plan exceeds SIZE (80GiB, 24GB, bytes), naming changes "
                  "that fit; default: the machine's available memory shared by its ranks");
  add_tokenizer_options(cmd, &args->tokenizer);
  cmd->get_option("--tokenizer")->default_str("");  // train checks against none unless given
  cmd->add_flag("--allow-tokenizer-mismatch", args->allow_tokenizer_mismatch,
                "train on shards that record another tokenizer than --tokenizer, with a warning");
  cmd->callback([args, cmd] { train(resolve_once_per_job(*cmd, *args), check_memory_fit); });
}

}  // namespace mt::cli
