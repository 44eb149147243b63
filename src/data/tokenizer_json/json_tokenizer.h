// A tokenizer built from a parsed tokenizer.json: GPT-2's files become one (data/gpt2_tokenizer.cpp) as a
// tokenizer.json file does (tokenizer_json/load.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "data/tokenizer.h"

namespace mt::tokjson {

struct Settings {
  std::string name;  // what name() says
  uint32_t fingerprint = 0;
  std::string end_of_text;       // the token's spelling; empty: none
  bool clean_up_spaces = false;  // the reference's clean_up_tokenization_spaces, after decoding
  // tokenizer_config.json's add_bos_token / add_eos_token when it sets them: they must agree with the
  // post-processor, which is what adds the tokens (as in the reference).
  std::optional<bool> add_bos, add_eos;
  std::string config_file;  // names tokenizer_config.json when they disagree
};

// `file` names the source in errors.
std::unique_ptr<Tokenizer> make_json_tokenizer(const nlohmann::json& tokenizer, const std::string& file,
                                               const Settings& settings);

}  // namespace mt::tokjson
