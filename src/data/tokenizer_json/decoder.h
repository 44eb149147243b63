// Decoders of a tokenizer.json: ByteLevel, Replace, ByteFallback, Fuse, Strip and Sequence, each turning the
// list of token spellings into the next list, as the reference chains them; the result is joined.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer_json/node.h"

namespace mt::tokjson {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
};

// The "decoder" value (null: none). `is_added` tells an added token's spelling, which ByteLevel passes on
// as written.
std::unique_ptr<Decoder> parse_decoder(const Node& decoder, std::function<bool(const std::string&)> is_added);

}  // namespace mt::tokjson
