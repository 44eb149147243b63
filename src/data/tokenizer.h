// Tokenizers: byte-level (V=256) and GPT-2 byte-pair encoding from the standard encoder.json + vocab.bpe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mt {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& tokens) const = 0;
  virtual int32_t vocab_size() const = 0;
  // The token that separates documents in a shard (GPT-2's <|endoftext|>; none (-1) for bytes).
  virtual int32_t end_of_text() const = 0;
  virtual std::string name() const = 0;
  // CRC-32C of the files that define the tokenizer (0 for bytes, which no file defines): shards record it,
  // so that a run can tell which tokenizer made its data.
  virtual uint32_t fingerprint() const = 0;
};

std::unique_ptr<Tokenizer> make_byte_tokenizer();

// Reads the two files GPT-2 ships; a missing or malformed file is a data error naming it.
std::unique_ptr<Tokenizer> load_gpt2_tokenizer(const std::string& encoder_json, const std::string& vocab_bpe);

// GPT-2's pre-tokenizer: the pieces its regex matches, in order (they concatenate back to the text). Letters
// and numbers are classified exactly in the Unicode blocks listed in pretokenize.cpp; bytes that are not
// valid UTF-8 are single "other" characters.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

}  // namespace mt
