// `memtrain prepare`: text files, or a JSON Lines file of instruction records, -> train/val token shards.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/tokenizer_choice.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "data/prepare.h"
#include "io/dir_lock.h"
#include "io/output_path.h"

namespace mt::cli {

namespace {

namespace fs = std::filesystem;

struct PrepareArgs {
  PrepareConfig config;
  bool pack = false;
  TokenizerChoice tokenizer;
  std::string chat_template;  // empty: the --tokenizer folder's template, else the built-in one
};

// Validation got more than --val-fraction asked: one evaluation window, so that evaluating works at all.
void explain_validation_share(const PrepareConfig& config, const PrepareResult& r) {
  const int64_t total = r.train_tokens + r.val_tokens;
  if (r.val_tokens <= std::llround(static_cast<double>(total) * config.val_fraction)) return;
  std::printf(
      "validation holds %lld of %lld tokens (%.0f%%), more than --val-fraction %g asks: --min-val-tokens "
      "%lld (one evaluation window, micro-batch x sequence length + 1) while training keeps as many; "
      "--min-val-tokens 0 keeps the fraction\n",
      static_cast<long long>(r.val_tokens), static_cast<long long>(total),
      100.0 * static_cast<double>(r.val_tokens) / static_cast<double>(total), config.val_fraction,
      static_cast<long long>(config.min_val_tokens));
}

// What packing saved: the padding of one record per sequence against the packed sequences'.
void print_packing(const PackStats& p) {
  const auto share = [&](int64_t padding, int64_t sequences) {
    return 100.0 * static_cast<double>(padding) /
           static_cast<double>(std::max<int64_t>(1, sequences * p.seq_len));
  };
  std::printf(
      "packed %lld records into %lld sequences of %lld tokens: %lld padding tokens (%.1f%%), against %lld "
      "(%.1f%%) with one record per sequence; %lld fewer tokens to train on\n",
      static_cast<long long>(p.records), static_cast<long long>(p.sequences),
      static_cast<long long>(p.seq_len), static_cast<long long>(p.padding()), share(p.padding(), p.sequences),
      static_cast<long long>(p.unpacked_padding()), share(p.unpacked_padding(), p.records),
      static_cast<long long>(p.unpacked_padding() - p.padding()));
}

// --out claimed before the input is read: created when missing, checked writable, and locked, so that a
// second prepare into it is refused rather than interleaved. A prepare that fails removes the folder it
// created while nothing is in it.
PrepareResult prepare_in_claimed_folder(const PrepareConfig& config, const Tokenizer& tokenizer) {
  const bool created = make_output_dir("--out", config.out_dir);
  DirectoryLock lock("--out", config.out_dir);
  try {
    return prepare_shards(config, tokenizer);
  } catch (...) {
    if (created) {
      std::error_code ec;
      lock.remove_file();
      fs::remove(config.out_dir, ec);  // only while empty: written shards stay
    }
    throw;
  }
}

// --chat-template: the built-in plain template by its name, else a model's from a file (--jsonl only). Not
// given: the template of the model whose tokenizer --tokenizer PATH names, else the built-in one.
std::shared_ptr<const ChatTemplate> chosen_chat_template(const PrepareArgs& a) {
  if (a.chat_template.empty()) {
    const std::string folder = tokenizer_folder(a.tokenizer);
    if (a.config.jsonl.empty() || folder.empty()) return nullptr;
    std::optional<ChatTemplate> model = model_chat_template(folder);
    if (!model) {
      std::printf("chat template: %s (the tokenizer's folder %s has none)\n", kBuiltinChatTemplate,
                  folder.c_str());
      return nullptr;
    }
    std::printf("chat template: the model's, from %s (--chat-template %s: the plain one)\n",
                model->origin.c_str(), kBuiltinChatTemplate);
    return std::make_shared<const ChatTemplate>(std::move(*model));
  }
  if (a.chat_template == kBuiltinChatTemplate) return nullptr;
  if (a.config.jsonl.empty())
    fail_usage("--chat-template " + a.chat_template + " renders --jsonl records; text files have no chats");
  return std::make_shared<const ChatTemplate>(load_chat_template(a.chat_template));
}

void print_record_counts(const PrepareConfig& config, const PrepareResult& r) {
  std::printf("%lld records; the loss counts %lld of their %lld tokens (%s)\n",
              static_cast<long long>(r.records), static_cast<long long>(r.counted_tokens),
              static_cast<long long>(r.record_tokens),
              config.chat_template ? "the completions and the assistant turns the chat template renders"
                                   : "the completions and each record's end");
  if (r.uncounted_turns > 0)
    std::printf(
        "%lld assistant turns not counted: chat template %s renders them differently once later turns follow "
        "(docs/data.md: how the assistant turns are found)\n",
        static_cast<long long>(r.uncounted_turns), config.chat_template->origin.c_str());
}

void run_prepare(const PrepareArgs& args) {
  PrepareArgs a = args;
  if (a.pack != (a.config.pack_seq_len > 0))
    fail_usage(
        "--pack and --seq-length go together: --pack --seq-length N packs records into sequences of N");
  for (const auto& [flag, key] : {std::pair{"--prompt-key", &a.config.keys.prompt},
                                  std::pair{"--completion-key", &a.config.keys.completion},
                                  std::pair{"--messages-key", &a.config.keys.messages}}) {
    if (key->empty()) fail_usage(std::string(flag) + " must not be empty");
  }
  if (a.config.val_fraction < 0 || a.config.val_fraction >= 1) fail_usage("--val-fraction must be in [0, 1)");
  if (a.config.shard_tokens <= 0) fail_usage("--shard-tokens must be positive");
  if (a.config.min_val_tokens < 0) fail_usage("--min-val-tokens must not be negative");
  a.config.chat_template = chosen_chat_template(a);
  const std::unique_ptr<Tokenizer> tokenizer = open_tokenizer(a.tokenizer);
  const PrepareResult r = prepare_in_claimed_folder(a.config, *tokenizer);
  // What the shards record of their tokenizer, for `train --tokenizer` to check against.
  std::printf(
      "prepared %lld train and %lld validation tokens (%s, vocabulary %d, fingerprint crc32c %s, %d-bit "
      "ids) into %s:\n",
      static_cast<long long>(r.train_tokens), static_cast<long long>(r.val_tokens), tokenizer->name().c_str(),
      r.made_by.vocab_size, crc32c_hex(r.made_by.fingerprint).c_str(),
      static_cast<int>(8 * shard_token_bytes(r.made_by)), a.config.out_dir.c_str());
  for (const std::string& f : r.files) std::printf("  %s\n", f.c_str());
  if (!a.config.jsonl.empty()) print_record_counts(a.config, r);
  if (a.pack) print_packing(r.pack);
  explain_validation_share(a.config, r);
}

}  // namespace

void add_prepare_command(CLI::App& app) {
  auto args = std::make_shared<PrepareArgs>();
  CLI::App* cmd = app.add_subcommand(
      "prepare",
      "tokenize text files, or instruction records with a loss mask, into token shards (llm.c format)");
  cmd->add_option("inputs", args->config.inputs, "text files")->check(CLI::ExistingFile);
  cmd->add_option(
         "--jsonl", args->config.jsonl,
         "instruction records instead of text, one JSON object a line: a prompt and a completion, or "
         "chat messages; the loss counts the completions only (docs/data.md: the template)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--prompt-key", args->config.keys.prompt, "--jsonl: the prompt's key")
      ->capture_default_str();
  cmd->add_option("--completion-key", args->config.keys.completion, "--jsonl: the completion's key")
      ->capture_default_str();
  cmd->add_flag("--pack", args->pack,
                "--jsonl: pack whole records into sequences of --seq-length tokens, each attending only to "
                "itself (document-masked attention, positions restarting per record)");
  cmd->add_option("--seq-length", args->config.pack_seq_len,
                  "--pack: the sequence length, the same as train's --seq-length")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--messages-key", args->config.keys.messages,
                  "--jsonl: the key of a chat's list of {role, content} (system, user, assistant)")
      ->capture_default_str();
  cmd->add_option("--chat-template", args->chat_template,
                  std::string("--jsonl: how chats are rendered: ") + kBuiltinChatTemplate +
                      " (the plain template, docs/data.md), or a model's own: a .jinja file, a "
                      "tokenizer_config.json or the folder holding it (its chat_template, bos_token, "
                      "eos_token); the loss counts the assistant turns. Default: the template of the model "
                      "whose tokenizer --tokenizer PATH names, else " +
                      kBuiltinChatTemplate);
  cmd->add_option("--out", args->config.out_dir, "output directory")->required();
  cmd->add_option("--name", args->config.name, "shard name prefix")->capture_default_str();
  cmd->add_flag("--overwrite-shards", args->config.overwrite,
                "replace the shards of --name that --out already holds (refused otherwise)");
  add_tokenizer_options(cmd, &args->tokenizer);
  cmd->add_option("--val-fraction", args->config.val_fraction, "share of tokens for validation")
      ->capture_default_str();
  cmd->add_option("--shard-tokens", args->config.shard_tokens, "tokens per shard")->capture_default_str();
  cmd->add_option(
         "--min-val-tokens", args->config.min_val_tokens,
         "validation's least size when --val-fraction is not 0: one evaluation window of micro-batch x "
         "sequence length + 1 (while training keeps as many)")
      ->capture_default_str();
  cmd->callback([args] { run_prepare(*args); });
}

}  // namespace mt::cli
