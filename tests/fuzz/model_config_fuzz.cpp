// config.json (--model FILE): Hugging Face GPT-2 and LLaMA configurations.
#include "fuzz_file.h"
#include "model/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mt::fuzz::as_file(data, size, "config.json");
  mt::fuzz::refuse_or_accept([&] { mt::resolve_model(path, 64); });
  return 0;
}
