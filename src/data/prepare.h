// `memtrain prepare`: text files -> token shards (train and validation) in llm.c's format.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace mt {

struct PrepareConfig {
  std::vector<std::string> inputs;  // text files, read whole, each one a document
  std::string out_dir;
  std::string name = "data";   // shards are named {name}_{train|val}_{NNNNNN}.bin
  double val_fraction = 0.05;  // the last fraction of the token stream goes to validation
  int64_t shard_tokens = 100'000'000;
};

struct PrepareResult {
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  std::vector<std::string> files;
};

PrepareResult prepare_shards(const PrepareConfig& cfg, const Tokenizer& tokenizer);

}  // namespace mt
