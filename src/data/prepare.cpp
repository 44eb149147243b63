// `memtrain prepare`: tokenizes text files into one stream (documents separated by the tokenizer's
// end-of-text token), or instruction records with their loss mask, puts the last val_fraction of it in the
// validation split (records whole) and writes both splits as shards, the records' with masks beside them.
#include "data/prepare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/whole_file.h"
#include "data/shard.h"

namespace mt {
namespace {

// The mask of tokens [begin, end), with the record starts marked when the stream is packed.
std::vector<uint8_t> mask_bytes(const TokenStream& stream, int64_t begin, int64_t end, bool packed) {
  std::vector<uint8_t> mask(stream.loss_mask.begin() + begin, stream.loss_mask.begin() + end);
  if (!packed) return mask;
  for (auto it = std::lower_bound(stream.record_starts.begin(), stream.record_starts.end(), begin);
       it != stream.record_starts.end() && *it < end; ++it)
    mask[static_cast<size_t>(*it - begin)] |= kLossMaskRecordStart;
  return mask;
}

// Shard names number their shards in six digits, the order find_shards sorts them in.
constexpr int64_t kMaxShardsPerSplit = 1'000'000;

// Tokens per shard: --shard-tokens, in whole sequences when packed.
int64_t shard_chunk(const PrepareConfig& cfg) {
  const int64_t T = cfg.pack_seq_len;
  return T > 0 ? std::max(T, cfg.shard_tokens / T * T) : cfg.shard_tokens;
}

// Writes tokens [first, last) of the stream as {name}_{split}_000000.bin, ... of at most shard_tokens each,
// each with its loss mask when the stream has one. A packed stream's shards hold whole sequences and the
// token after them (their last target, the next sequence's first token or the closing padding).
void write_split(const PrepareConfig& cfg, const std::string& split, const TokenStream& stream, int64_t first,
                 int64_t last, PrepareResult& result) {
  const int64_t T = cfg.pack_seq_len, overlap = T > 0 ? 1 : 0;
  const int64_t chunk = shard_chunk(cfg);
  for (int64_t start = first, index = 0; start < last; start += chunk, ++index) {
    char suffix[32];
    std::snprintf(suffix, sizeof(suffix), "_%06lld.bin", static_cast<long long>(index));
    const std::string path =
        (std::filesystem::path(cfg.out_dir) / (cfg.name + "_" + split + suffix)).string();
    const int64_t end = std::min(last, start + chunk) + overlap;
    write_shard(path, std::vector<int32_t>(stream.tokens.begin() + start, stream.tokens.begin() + end),
                result.made_by);
    result.files.push_back(path);
    if (stream.loss_mask.empty()) continue;
    const std::string mask = loss_mask_path(path);
    write_loss_mask(mask, mask_bytes(stream, start, end, T > 0), T);
    result.files.push_back(mask);
  }
}

// Both splits: the stream's last val tokens (whole records) to validation; packed, each split's records into
// its own sequences.
void write_splits(const PrepareConfig& cfg, const TokenStream& stream, int64_t val, int32_t pad_token,
                  PrepareResult& result) {
  const int64_t total = static_cast<int64_t>(stream.tokens.size());
  // Checked before any shard is written: the records' tokens bound each split's (packing adds padding).
  if (const int64_t shards = (total + shard_chunk(cfg) - 1) / shard_chunk(cfg); shards > kMaxShardsPerSplit)
    fail_usage("prepare: --shard-tokens " + std::to_string(cfg.shard_tokens) + " would cut the " +
               std::to_string(total) + " tokens into " + std::to_string(shards) + " shards, more than the " +
               std::to_string(kMaxShardsPerSplit) +
               " that shard names number (give a larger --shard-tokens)");
  if (cfg.pack_seq_len == 0) {
    result.train_tokens = total - val;
    result.val_tokens = val;
    write_split(cfg, "train", stream, 0, total - val, result);
    write_split(cfg, "val", stream, total - val, total, result);
    return;
  }
  const auto& starts = stream.record_starts;
  const int64_t records = static_cast<int64_t>(starts.size());
  const int64_t first_val = std::lower_bound(starts.begin(), starts.end(), total - val) - starts.begin();
  for (const auto& [split, first, last] :
       {std::tuple{"train", int64_t{0}, first_val}, std::tuple{"val", first_val, records}}) {
    if (first == last) continue;
    const TokenStream packed =
        pack_records(stream, first, last, cfg.pack_seq_len, pad_token, cfg.jsonl, result.pack);
    const int64_t size = static_cast<int64_t>(packed.tokens.size());
    (std::string(split) == "train" ? result.train_tokens : result.val_tokens) = size;
    write_split(cfg, split, packed, 0, size - 1, result);
  }
}

// Whether `file` is a shard or mask that a prepare named cfg.name writes.
bool named_shard(const PrepareConfig& cfg, const std::string& file) {
  const bool shard = file.ends_with(".bin") || file.ends_with(".mask");
  return shard && (file.starts_with(cfg.name + "_train_") || file.starts_with(cfg.name + "_val_"));
}

// Shards of the same name left by an earlier, larger run would otherwise join this run's splits.
void remove_stale_shards(const PrepareConfig& cfg, const PrepareResult& result) {
  const std::set<std::string> written(result.files.begin(), result.files.end());
  for (const auto& entry : std::filesystem::directory_iterator(cfg.out_dir)) {
    if (named_shard(cfg, entry.path().filename().string()) && !written.count(entry.path().string()))
      std::filesystem::remove(entry.path());
  }
}

// Another prepare's shards of the same name are replaced only when asked: two prepares into one folder would
// otherwise both succeed, one's shards lost.
void refuse_earlier_shards(const PrepareConfig& cfg) {
  if (cfg.overwrite) return;
  std::error_code ec;  // a folder not there yet holds nothing
  for (const auto& entry : std::filesystem::directory_iterator(cfg.out_dir, ec)) {
    const std::string file = entry.path().filename().string();
    if (named_shard(cfg, file))
      fail_data("--out " + cfg.out_dir + " holds " + file + " of an earlier prepare named " + cfg.name +
                ": give another --out or --name, or --overwrite-shards to replace them");
  }
}

// The text files as one stream, documents separated by the tokenizer's end-of-text token when it has one.
TokenStream read_documents(const std::vector<std::string>& inputs, const Tokenizer& tokenizer) {
  TokenStream stream;
  for (size_t d = 0; d < inputs.size(); ++d) {
    if (d > 0 && tokenizer.end_of_text() >= 0) stream.tokens.push_back(tokenizer.end_of_text());
    const std::vector<int32_t> tokens = tokenizer.encode(read_whole_file(inputs[d], "input"));
    // Shards of nothing would only fail later, in train, far from the cause.
    if (tokens.empty()) fail_data("input " + inputs[d] + ": empty, no text to tokenize");
    stream.tokens.insert(stream.tokens.end(), tokens.begin(), tokens.end());
  }
  return stream;
}

// Tokens for validation: round(total * val_fraction), at least min_val_tokens while training keeps as many,
// and for records up to the start of the record that holds the cut, so that records stay whole.
int64_t validation_tokens(const PrepareConfig& cfg, const TokenStream& stream) {
  const int64_t total = static_cast<int64_t>(stream.tokens.size());
  int64_t val = std::llround(static_cast<double>(total) * cfg.val_fraction);
  if (cfg.val_fraction > 0 && val < cfg.min_val_tokens && total - cfg.min_val_tokens >= cfg.min_val_tokens) {
    val = cfg.min_val_tokens;
  }
  if (val == 0 || stream.record_starts.empty()) return val;
  const auto& starts = stream.record_starts;
  const size_t held = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), total - val) -
                                          starts.begin() - 1);  // the record that holds the cut
  const int64_t cut = starts[held];
  if (cut == 0) {
    fail_data("--jsonl " + cfg.jsonl + ": " + std::to_string(stream.record_starts.size()) +
              " records are too few to hold out --val-fraction " + std::to_string(cfg.val_fraction) +
              " of whole records and still train; give more records or --val-fraction 0");
  }
  // Whole records would move a record longer than the split, and all after it, to validation.
  const int64_t length = (held + 1 < starts.size() ? starts[held + 1] : total) - cut;
  if (length > val)
    fail_data("--jsonl " + cfg.jsonl + " line " + std::to_string(stream.record_lines[held]) +
              ": a record of " + std::to_string(length) + " tokens where validation's " +
              std::to_string(val) + " begin: whole records would hold out " + std::to_string(total - cut) +
              " of " + std::to_string(total) +
              " tokens; move it away from the end, or give --val-fraction 0");
  return total - cut;
}

// Reads the input and writes both splits into the claimed folder.
PrepareResult write_prepared(const PrepareConfig& cfg, const Tokenizer& tokenizer) {
  int64_t uncounted_turns = 0;
  const TokenStream stream = cfg.jsonl.empty()
                                 ? read_documents(cfg.inputs, tokenizer)
                                 : read_instruction_records(cfg.jsonl, cfg.keys, tokenizer,
                                                            cfg.chat_template.get(), &uncounted_turns);
  // Best-fit packing fills each sequence but the last more than half, so what it writes stays within a
  // few times the records' tokens, unless a sequence is longer than all of them.
  if (cfg.pack_seq_len > static_cast<int64_t>(stream.tokens.size()))
    fail_usage("prepare: --seq-length " + std::to_string(cfg.pack_seq_len) + " is more than the " +
               std::to_string(stream.tokens.size()) + " tokens of all --jsonl " + cfg.jsonl +
               " records: --pack's sequences would be padding");
  const int64_t val = validation_tokens(cfg, stream);
  std::error_code ec;
  std::filesystem::create_directories(cfg.out_dir, ec);
  if (ec) fail_data("--out " + cfg.out_dir + ": cannot create directory: " + ec.message());
  PrepareResult result;
  result.made_by = {tokenizer.vocab_size(), tokenizer.fingerprint()};
  result.records = static_cast<int64_t>(stream.record_starts.size());
  result.uncounted_turns = uncounted_turns;
  result.record_tokens = static_cast<int64_t>(stream.tokens.size());
  result.counted_tokens = std::count(stream.loss_mask.begin(), stream.loss_mask.end(), uint8_t{1});
  write_splits(cfg, stream, val, record_end_token(tokenizer), result);
  remove_stale_shards(cfg, result);
  return result;
}

}  // namespace

PrepareResult prepare_shards(const PrepareConfig& cfg, const Tokenizer& tokenizer) {
  if (cfg.inputs.empty() == cfg.jsonl.empty())
    fail_usage("prepare: give text files or --jsonl FILE (one of the two)");
  if (!(cfg.val_fraction >= 0.0 && cfg.val_fraction < 1.0)) {
    fail_usage("prepare: val_fraction " + std::to_string(cfg.val_fraction) + " must be in [0, 1)");
  }
  if (cfg.pack_seq_len < 0 || (cfg.pack_seq_len > 0 && cfg.jsonl.empty()))
    fail_usage("prepare: --pack needs --jsonl records and a positive --seq-length");
  if (cfg.shard_tokens < 1 || cfg.min_val_tokens < 0) {
    fail_usage("prepare: shard_tokens must be positive and min_val_tokens non-negative");
  }
  refuse_earlier_shards(cfg);  // before the input is read: a refusal costs nothing
  return write_prepared(cfg, tokenizer);
}

}  // namespace mt
