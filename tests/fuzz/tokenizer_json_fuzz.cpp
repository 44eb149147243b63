// tokenizer.json (--tokenizer PATH): any bytes are refused as a data error, or make a tokenizer that encodes
// and decodes a fixed text (invalid UTF-8, an added token's text, digits, spaces) without a crash.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/tokenizer_json/json_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json json = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  try {
    const auto tokenizer = mt::tokjson::make_json_tokenizer(json, "fuzz.json", {});
    tokenizer->decode(tokenizer->encode_with_special_tokens("Hello w\xC3\xB6rld 12345 \xFF <s> a-b--c  \n"));
  } catch (const mt::Error&) {
  }
  return 0;
}
