// Tokenizers: byte-level (V=256), Hugging Face's tokenizer.json (src/data/tokenizer_json/), and GPT-2's
// byte-pair encoding from its encoder.json + vocab.bpe, run as a tokenizer.json. Text that is not UTF-8 is
// read as the reference does (JavaScript strings): each ill-formed sequence is U+FFFD (data/utf8.h).
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
  // The text's ids as the reference's encode with add_special_tokens=false: added tokens are found, no
  // BOS/EOS is added.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // With add_special_tokens=true: encode() between the post-processor's special tokens (BOS, EOS).
  virtual std::vector<int32_t> encode_with_special_tokens(std::string_view text) const {
    return encode(text);
  }
  virtual std::string decode(const std::vector<int32_t>& tokens) const = 0;
  // Ids are below this (added tokens counted).
  virtual int32_t vocab_size() const = 0;
  // The token that separates documents in a shard (GPT-2's <|endoftext|>, a tokenizer.json's EOS; none (-1)
  // for bytes).
  virtual int32_t end_of_text() const = 0;
  virtual std::string name() const = 0;
  // CRC-32C of the files that define the tokenizer (0 for bytes, which no file defines): shards record it,
  // so that a run can tell which tokenizer made its data.
  virtual uint32_t fingerprint() const = 0;
};

std::unique_ptr<Tokenizer> make_byte_tokenizer();

// Reads the two files GPT-2 ships; a missing or malformed file is a data error naming it.
std::unique_ptr<Tokenizer> load_gpt2_tokenizer(const std::string& encoder_json, const std::string& vocab_bpe);

// A tokenizer.json, or a folder holding one. tokenizer_config.json beside it, when there is one, gives the
// end of text (its eos_token; without one there is none, -1) and whether decoding cleans up spaces before
// punctuation (clean_up_tokenization_spaces, true unless it says false, as the reference). Anything either
// file asks for that memtrain does not implement is a data error naming the key and value.
std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path);

}  // namespace mt
