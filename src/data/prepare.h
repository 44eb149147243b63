// `memtrain prepare`: text files, or a JSON Lines file of instruction records, -> token shards (train and
// validation) in llm.c's format, the records' with loss masks beside them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/instruction.h"
#include "data/pack.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace mt {

struct PrepareConfig {
  std::vector<std::string> inputs = {};  // text files, read whole, each one a document
  std::string jsonl = {};  // or instruction records (data/instruction.h); exactly one of the two
  InstructionKeys keys = {};
  // With jsonl: the model's chat template for chat records (data/chat_template.h); null: the plain one.
  std::shared_ptr<const ChatTemplate> chat_template = nullptr;
  std::string out_dir;
  std::string name = "data";   // shards are named {name}_{train|val}_{NNNNNN}.bin
  double val_fraction = 0.05;  // the last fraction of the token stream goes to validation (whole records)
  int64_t shard_tokens = 100'000'000;
  // When val_fraction > 0, validation gets at least this many tokens (one loader window, B*T+1) if the
  // training split keeps at least as many.
  int64_t min_val_tokens = 1025;
  // With jsonl: pack records whole into sequences of this many tokens (data/pack.h); 0: one stream.
  int64_t pack_seq_len = 0;
  // Replace shards named `name` that out_dir already holds; otherwise they are refused (a data error).
  bool overwrite = false;
};

struct PrepareResult {
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  int64_t records = 0, record_tokens = 0,
          counted_tokens = 0;   // instruction records, their tokens, those counted
  int64_t uncounted_turns = 0;  // assistant turns a chat template left uncounted (chat_template.h)
  PackStats pack = {};          // with pack_seq_len
  ShardTokenizer made_by;       // what every shard records: the tokenizer's vocabulary and fingerprint
  std::vector<std::string> files;
};

// Refuses shards of cfg.name in out_dir unless cfg.overwrite, before reading the input; creates out_dir.
PrepareResult prepare_shards(const PrepareConfig& cfg, const Tokenizer& tokenizer);

}  // namespace mt
