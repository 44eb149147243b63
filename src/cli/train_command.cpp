// `memtrain train`: the run flags (cli/run_flags.h) onto TrainConfig, the OOM doctor's --memory-limit, the
// tokenizer the data is checked against (--tokenizer), and the run.
#include <optional>

#include "cli/commands.h"
#include "cli/run_flags.h"
#include "cli/tokenizer_choice.h"
#include "core/error.h"
#include "core/units.h"
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
  const std::unique_ptr<Tokenizer> opened = open_tokenizer(choice);
  return {choice.spec, opened->vocab_size(), opened->fingerprint(), allow_mismatch};
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
  auto tokenizer = std::make_shared<TokenizerChoice>();
  add_tokenizer_options(cmd, tokenizer.get());
  cmd->get_option("--tokenizer")->default_str("");  // train checks against none unless given
  auto allow_mismatch = std::make_shared<bool>(false);
  cmd->add_flag("--allow-tokenizer-mismatch", *allow_mismatch,
                "train on shards that record another tokenizer than --tokenizer, with a warning");
  cmd->callback([flags, memory_limit, tokenizer, allow_mismatch, cmd] {
    TrainConfig config = flags->resolve();
    config.tokenizer = run_tokenizer(*cmd, *tokenizer, *allow_mismatch);
    if (!memory_limit->empty()) {
      const std::optional<int64_t> bytes = parse_bytes(*memory_limit);
      if (!bytes || *bytes <= 0)
        fail_usage("--memory-limit " + *memory_limit + ": expected a size such as 80GiB, 24GB or 4096");
      config.memory_limit = *bytes;
    }
    train(config, check_memory_fit);
  });
}

}  // namespace mt::cli
