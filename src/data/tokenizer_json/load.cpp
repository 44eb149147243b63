// Opening a tokenizer.json (or the folder holding it) with the tokenizer_config.json beside it.
#include <filesystem>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/whole_file.h"
#include "data/tokenizer.h"
#include "data/tokenizer_json/json_tokenizer.h"
#include "data/tokenizer_json/node.h"

namespace mt {

namespace {

namespace fs = std::filesystem;

nlohmann::json parse(const std::string& text, const fs::path& path) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail_data(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

// What tokenizer_config.json says about encoding and decoding; the rest (chat template, padding side, ...)
// is for other readers. Flags that would change the reference's encoding are refused.
void read_config(const fs::path& path, tokjson::Settings* settings) {
  const nlohmann::json json = parse(read_whole_file(path.string()), path);
  const tokjson::Node config(json, path.string(), "");
  if (!json.is_object()) config.fail("expected an object");
  for (const char* flag : {"remove_space", "do_lowercase_and_remove_accent"}) {
    if (config.boolean_or(flag, false)) config.unsupported(flag);
  }
  settings->clean_up_spaces = config.boolean_or("clean_up_tokenization_spaces", true);
  settings->config_file = path.string();
  if (config.has("add_bos_token")) settings->add_bos = config.boolean_or("add_bos_token", false);
  if (config.has("add_eos_token")) settings->add_eos = config.boolean_or("add_eos_token", false);
  if (config.has("eos_token")) {
    const tokjson::Node eos = config.at("eos_token");
    settings->end_of_text = eos.json().is_object() ? eos.string("content") : config.string("eos_token");
  }
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& given) {
  fs::path file = given;
  std::error_code ec;
  if (fs::is_directory(file, ec)) file /= "tokenizer.json";
  const std::string text = read_whole_file(file);
  tokjson::Settings settings;
  settings.name = file.string();
  settings.fingerprint = crc32c(text.data(), text.size(), 0);
  settings.clean_up_spaces = true;  // the reference's default
  const fs::path config = file.parent_path() / "tokenizer_config.json";
  if (fs::is_regular_file(config, ec)) read_config(config, &settings);
  return tokjson::make_json_tokenizer(parse(text, file), file.string(), settings);
}

}  // namespace mt
