// The run's vocabulary against its data and its model, checked before anything runs (train calls it beside
// check_data_bounds): ids the model has no embedding for, or shards tokenized by another tokenizer than the
// run's, would otherwise train without a word, or fail only when the loader meets the first such id.
#pragma once

#include "config/train_config.h"

namespace mt {

// With --tokenizer (cfg.tokenizer): more ids than the model's vocabulary (the embedding's rows, padding
// aside) is a usage error naming both numbers; a shard that records another tokenizer (its vocabulary size or
// fingerprint, data/shard.h) is a data error naming the shard and both fingerprints, a warning with
// --allow-tokenizer-mismatch; shards that record none ("not recorded") get one warning. With or without it,
// a shard that records a tokenizer of more ids than the model's vocabulary is a usage error naming both
// numbers. Reads the headers of the training shards, and the validation shards' when the run evaluates.
void check_data_vocabulary(const TrainConfig& cfg);

}  // namespace mt
