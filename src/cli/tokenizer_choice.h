// Which tokenizer a command uses (`--tokenizer` and GPT-2's file flags), and opening it: one place for
// `prepare` and every other command that needs the tokenizer.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace mt::cli {

struct TokenizerChoice {
  std::string spec = "gpt2";            // gpt2, byte, or a tokenizer.json / the folder holding it
  std::string encoder_json, vocab_bpe;  // empty: found beside the binary or in the source tree
};

void add_tokenizer_options(CLI::App* cmd, TokenizerChoice* choice);

// The tokenizer chosen, saying on `say` (unless null) which files it was read from; a bad --tokenizer is a
// usage error, a missing or malformed file a data error naming it. The folder of a --tokenizer PATH's files
// (PATH, or the folder of the tokenizer.json it names); empty for a tokenizer named gpt2 or byte.
std::string tokenizer_folder(const TokenizerChoice& choice);

std::unique_ptr<Tokenizer> open_tokenizer(const TokenizerChoice& choice, std::FILE* say = stdout);

}  // namespace mt::cli
