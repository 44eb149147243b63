// `memtrain tokenize`: each line of a text file as the JSON array of its token ids, one line per line, or
// (--decode) such lines back to text: the first thing to run on one's data with a model's tokenizer.
#include <charconv>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/tokenizer_choice.h"
#include "core/error.h"

namespace mt::cli {

namespace {

struct TokenizeArgs {
  TokenizerChoice tokenizer;
  std::string file;
  bool add_special_tokens = false, decode = false;
};

void write(const std::string& text) {
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size()) fail_data("stdout: write failed");
}

std::string ids_line(const std::vector<int32_t>& ids) {
  std::string line = "[";
  char digits[16];
  for (size_t k = 0; k < ids.size(); ++k) {
    if (k) line += ',';
    line.append(digits, std::to_chars(digits, digits + sizeof(digits), ids[k]).ptr);
  }
  return line + "]\n";
}

// The ids a --decode line lists, or a data error naming the file and line.
std::vector<int32_t> parse_ids(const std::string& line, const std::string& file, int64_t line_no) {
  const nlohmann::json json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  std::vector<int32_t> ids;
  bool ok = json.is_array();
  for (size_t k = 0; ok && k < json.size(); ++k) {
    ok = json[k].is_number_integer() && json[k].get<int64_t>() >= 0 && json[k].get<int64_t>() <= INT32_MAX;
    if (ok) ids.push_back(json[k].get<int32_t>());
  }
  if (!ok) fail_data(file + " line " + std::to_string(line_no) + ": expected a JSON array of token ids");
  return ids;
}

void run_tokenize(const TokenizeArgs& args) {
  const std::unique_ptr<Tokenizer> tokenizer = open_tokenizer(args.tokenizer, stderr);
  std::ifstream in(args.file, std::ios::binary);
  if (!in) fail_data(args.file + ": cannot open");
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (args.decode) {
      write(tokenizer->decode(parse_ids(line, args.file, line_no)) + "\n");
    } else {
      write(ids_line(args.add_special_tokens ? tokenizer->encode_with_special_tokens(line)
                                             : tokenizer->encode(line)));
    }
  }
  if (in.bad()) fail_data(args.file + ": read failed");
  if (std::fflush(stdout) != 0) fail_data("stdout: write failed");
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Print each line of FILE as the JSON array of its token ids (one line per line), or back");
  add_tokenizer_options(cmd, &args->tokenizer);
  cmd->add_option("FILE", args->file, "text file (with --decode: lines of JSON arrays of ids)")->required();
  cmd->add_flag("--add-special-tokens", args->add_special_tokens,
                "put the tokenizer's special tokens (BOS/EOS of its post-processor) around each line, as the "
                "reference's add_special_tokens");
  cmd->add_flag("--decode", args->decode, "read lines of JSON arrays of ids and print each line's text");
  cmd->callback([args] {
    if (args->decode && args->add_special_tokens)
      fail_usage("--add-special-tokens is for encoding, not --decode");
    run_tokenize(*args);
  });
}

}  // namespace mt::cli
