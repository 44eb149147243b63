// `memtrain train`: the run flags (cli/run_flags.h) onto TrainConfig, and the run.
#include "cli/commands.h"
#include "cli/run_flags.h"
#include "train/trainer.h"

namespace mt::cli {

void add_train_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("train", "train a model on token shards, reporting its memory plan");
  std::shared_ptr<RunFlags> flags = add_run_flags(*cmd);
  cmd->get_option("--data")->required();
  cmd->get_option("--train-iters")->required();
  cmd->callback([flags] { train(flags->resolve()); });
}

}  // namespace mt::cli
