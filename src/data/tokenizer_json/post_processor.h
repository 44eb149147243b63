// The post-processor of a tokenizer.json: the special tokens (BOS/EOS) that TemplateProcessing puts around a
// single sequence when special tokens are added. ByteLevel's post-processor changes offsets only.
#pragma once

#include <cstdint>
#include <vector>

#include "data/tokenizer_json/node.h"

namespace mt::tokjson {

struct PostProcessor {
  std::vector<int32_t> before, after;  // ids around the text's
};

// The "post_processor" value (null: nothing added). Pairs of sequences are never encoded, so "pair" is
// not read.
PostProcessor parse_post_processor(const Node& post_processor);

}  // namespace mt::tokjson
