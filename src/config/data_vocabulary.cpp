#include "config/data_vocabulary.h"

#include <optional>
#include <string>
#include <vector>

#include "config/run_flag_table.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/warning.h"
#include "data/shard.h"
#include "model/spec.h"

namespace mt {

namespace {

std::string tokenizer_text(int64_t vocab_size, uint32_t fingerprint) {
  return std::to_string(vocab_size) + " ids, fingerprint crc32c " + crc32c_hex(fingerprint);
}

// "--model NAME's vocabulary of V": the ids the model has embedding rows for (those past it pad the rows).
std::string model_vocabulary(const TrainConfig& cfg, const ModelSpec& spec) {
  return flag_source_with_value(cfg, "--model") + "'s vocabulary of " + std::to_string(spec.vocab_size) +
         " (its embedding's rows, padding aside)";
}

// The shards' recorded tokenizers against --tokenizer: the first shard of another one fails, or warns when
// allowed; the first that records none warns. A line each, not one a shard: a prepare's shards say the same.
void check_against_run_tokenizer(const RunTokenizer& run, const std::optional<ShardInfo>& other,
                                 const std::optional<ShardInfo>& unrecorded) {
  const std::string given =
      "--tokenizer " + run.name + " (" + tokenizer_text(run.vocab_size, run.fingerprint) + ")";
  if (other) {
    const std::string what = "shard " + other->path + " was prepared by a tokenizer of " +
                             tokenizer_text(other->made_by.vocab_size, other->made_by.fingerprint) +
                             ", not by " + given;
    if (!run.allow_mismatch)
      fail_data(what + ": prepare the data with the run's tokenizer, or give --allow-tokenizer-mismatch");
    warn(what + "; training on it as --allow-tokenizer-mismatch says");
  }
  if (unrecorded)
    warn("shard " + unrecorded->path +
         " does not record the tokenizer that made it (not recorded: prepared " +
         "before shards recorded it, or by another tool), so " + given + " is not checked against it");
}

}  // namespace

void check_data_vocabulary(const TrainConfig& cfg) {
  const ModelSpec spec = resolve_model(cfg.model, cfg.pad_vocab_multiple);
  const RunTokenizer& run = cfg.tokenizer;
  if (!run.name.empty() && run.vocab_size > spec.vocab_size)
    fail_usage("--tokenizer " + run.name + " has " + std::to_string(run.vocab_size) +
               " ids (added tokens included), more than " + model_vocabulary(cfg, spec) +
               ": give the model's own tokenizer, or a model of a larger vocabulary");
  std::vector<std::string> paths = find_shards(cfg.data, "train");
  if (cfg.eval_interval > 0) {
    const std::vector<std::string> val = find_shards(cfg.data, "val");
    paths.insert(paths.end(), val.begin(), val.end());
  }
  std::optional<ShardInfo> other, unrecorded;
  for (const std::string& path : paths) {
    const ShardInfo shard = open_shard(path);
    if (shard.made_by.vocab_size > spec.vocab_size)
      fail_usage("shard " + path + " was prepared by a tokenizer of " +
                 std::to_string(shard.made_by.vocab_size) + " ids, more than " + model_vocabulary(cfg, spec) +
                 ": train the model whose tokenizer prepared it, or prepare the data with the model's own");
    if (!shard.made_by.recorded() && !unrecorded) unrecorded = shard;
    if (shard.made_by.recorded() && shard.made_by != ShardTokenizer{run.vocab_size, run.fingerprint} &&
        !other)
      other = shard;
  }
  if (!run.name.empty()) check_against_run_tokenizer(run, other, unrecorded);
}

}  // namespace mt
