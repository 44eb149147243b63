// `memtrain train`: Megatron-style flags onto TrainConfig.
#include "cli/commands.h"
#include "train/trainer.h"

namespace mt::cli {

void add_train_command(CLI::App& app) {
  auto config = std::make_shared<TrainConfig>();
  CLI::App* cmd = app.add_subcommand("train", "train a model on token shards, reporting its memory plan");
  TrainConfig& c = *config;
  cmd->add_option("--model", c.model, "preset name or config.json (Hugging Face GPT-2 keys)")->required();
  cmd->add_option("--data", c.data, "directory of token shards (*_train_*.bin, *_val_*.bin) or a glob")
      ->required();
  cmd->add_option("--make-vocab-size-divisible-by", c.pad_vocab_multiple, "pad the vocabulary to a multiple")
      ->capture_default_str();
  cmd->add_option("--seq-length", c.seq_len, "sequence length T (default: the model's positions)");
  cmd->add_option("--micro-batch-size", c.micro_batch, "sequences per step B")->capture_default_str();
  cmd->add_option("--train-iters", c.train_iters, "optimizer steps")->required();
  cmd->add_option("--lr", c.lr, "peak learning rate")->capture_default_str();
  cmd->add_option("--min-lr", c.min_lr, "learning rate at the end of decay")->capture_default_str();
  cmd->add_option("--lr-warmup-iters", c.warmup_iters, "linear warmup steps")->capture_default_str();
  cmd->add_option("--lr-decay-style", c.decay_style, "cosine, linear or constant")->capture_default_str();
  cmd->add_option("--weight-decay", c.adam.weight_decay, "AdamW decoupled weight decay")
      ->capture_default_str();
  cmd->add_option("--adam-beta1", c.adam.beta1)->capture_default_str();
  cmd->add_option("--adam-beta2", c.adam.beta2)->capture_default_str();
  cmd->add_option("--adam-eps", c.adam.eps)->capture_default_str();
  cmd->add_option("--clip-grad", c.adam.clip_grad, "global gradient-norm clip, 0 = off")
      ->capture_default_str();
  cmd->add_option("--seed", c.seed, "initialisation and data-order seed")->capture_default_str();
  cmd->add_flag("!--no-shuffle", c.shuffle, "read windows in order instead of a seeded permutation");
  cmd->add_option("--log-interval", c.log_interval, "steps between progress lines")->capture_default_str();
  cmd->add_option("--eval-interval", c.eval_interval, "steps between validations, 0 = off")
      ->capture_default_str();
  cmd->add_option("--eval-iters", c.eval_iters, "validation batches per evaluation")->capture_default_str();
  cmd->add_option("--init-from", c.init_from, "start from these safetensors weights");
  cmd->add_option("--save-weights", c.save_weights, "write the final weights as safetensors");
  cmd->add_option("--out", c.out, "directory for metrics.jsonl and memory.json")->capture_default_str();
  cmd->add_option("--threads", c.threads, "OpenMP threads, 0 = all cores")->capture_default_str();
  cmd->add_flag("--memory-report", c.memory_report, "print the memory plan before training");
  cmd->callback([config] { train(*config); });
}

}  // namespace mt::cli
