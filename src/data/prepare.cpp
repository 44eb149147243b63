// `memtrain prepare`: tokenizes text files into one stream (documents separated by the tokenizer's
// end-of-text token), puts the last val_fraction of it in the validation split and writes both splits as
// shards.
#include "data/prepare.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "data/shard.h"

namespace mt {
namespace {

std::string read_document(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_data("input " + path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail_data("input " + path + ": read failed");
  return text.str();
}

// Writes tokens [first, last) of the stream as {name}_{split}_000000.bin, ... of at most shard_tokens each.
void write_split(const PrepareConfig& cfg, const std::string& split, const std::vector<uint16_t>& stream,
                 int64_t first, int64_t last, PrepareResult& result) {
  for (int64_t start = first, index = 0; start < last; start += cfg.shard_tokens, ++index) {
    char suffix[32];
    std::snprintf(suffix, sizeof(suffix), "_%06lld.bin", static_cast<long long>(index));
    const std::string path =
        (std::filesystem::path(cfg.out_dir) / (cfg.name + "_" + split + suffix)).string();
    write_shard(path, std::vector<uint16_t>(stream.begin() + start,
                                            stream.begin() + std::min(last, start + cfg.shard_tokens)));
    result.files.push_back(path);
  }
}

// Shards of the same name left by an earlier, larger run would otherwise join this run's splits.
void remove_stale_shards(const PrepareConfig& cfg, const PrepareResult& result) {
  const std::set<std::string> written(result.files.begin(), result.files.end());
  for (const char* split : {"train", "val"}) {
    const std::string prefix = cfg.name + "_" + split + "_";
    for (const auto& entry : std::filesystem::directory_iterator(cfg.out_dir)) {
      const std::string file = entry.path().filename().string();
      if (file.starts_with(prefix) && file.ends_with(".bin") && !written.count(entry.path().string())) {
        std::filesystem::remove(entry.path());
      }
    }
  }
}

}  // namespace

PrepareResult prepare_shards(const PrepareConfig& cfg, const Tokenizer& tokenizer) {
  if (cfg.inputs.empty()) fail_usage("prepare: no input files");
  if (!(cfg.val_fraction >= 0.0 && cfg.val_fraction < 1.0)) {
    fail_usage("prepare: val_fraction " + std::to_string(cfg.val_fraction) + " must be in [0, 1)");
  }
  if (cfg.shard_tokens < 1 || cfg.min_val_tokens < 0) {
    fail_usage("prepare: shard_tokens must be positive and min_val_tokens non-negative");
  }
  if (tokenizer.vocab_size() > 65536) {
    fail_usage("prepare: tokenizer " + tokenizer.name() + " has " + std::to_string(tokenizer.vocab_size()) +
               " tokens; shard tokens are uint16 (at most 65536)");
  }
  std::vector<uint16_t> stream;
  for (size_t d = 0; d < cfg.inputs.size(); ++d) {
    if (d > 0 && tokenizer.end_of_text() >= 0)
      stream.push_back(static_cast<uint16_t>(tokenizer.end_of_text()));
    const std::vector<int32_t> tokens = tokenizer.encode(read_document(cfg.inputs[d]));
    // Shards of nothing would only fail later, in train, far from the cause.
    if (tokens.empty()) fail_data("input " + cfg.inputs[d] + ": empty, no text to tokenize");
    for (int32_t t : tokens) stream.push_back(static_cast<uint16_t>(t));
  }
  const int64_t total = static_cast<int64_t>(stream.size());
  int64_t val = std::llround(static_cast<double>(total) * cfg.val_fraction);
  if (cfg.val_fraction > 0 && val < cfg.min_val_tokens && total - cfg.min_val_tokens >= cfg.min_val_tokens) {
    val = cfg.min_val_tokens;
  }
  std::error_code ec;
  std::filesystem::create_directories(cfg.out_dir, ec);
  if (ec) fail_data("output directory " + cfg.out_dir + ": cannot create: " + ec.message());
  PrepareResult result;
  result.train_tokens = total - val;
  result.val_tokens = val;
  write_split(cfg, "train", stream, 0, total - val, result);
  write_split(cfg, "val", stream, total - val, total, result);
  remove_stale_shards(cfg, result);
  return result;
}

}  // namespace mt
