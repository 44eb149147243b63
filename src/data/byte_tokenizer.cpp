// The byte tokenizer: each byte of the text is one token (V=256), so any text round-trips and nothing is
// unknown.
#include <string>

#include "core/error.h"
#include "data/tokenizer.h"

namespace mt {
namespace {

class ByteTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> tokens(text.size());
    for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<uint8_t>(text[i]);
    return tokens;
  }

  std::string decode(const std::vector<int32_t>& tokens) const override {
    std::string text(tokens.size(), '\0');
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] < 0 || tokens[i] >= 256) {
        fail_data("byte tokenizer: token " + std::to_string(tokens[i]) + " is outside [0, 256)");
      }
      text[i] = static_cast<char>(tokens[i]);
    }
    return text;
  }

  int32_t vocab_size() const override { return 256; }
  int32_t end_of_text() const override { return -1; }
  std::string name() const override { return "bytes"; }
  uint32_t fingerprint() const override { return 0; }
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() {
  return std::make_unique<ByteTokenizer>();
}

}  // namespace mt
