// safetensors files (--init-from, --init-adapter): the header, then every tensor it names read back.
#include <vector>

#include "fuzz_file.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mt::fuzz::as_file(data, size, "model.safetensors");
  mt::fuzz::refuse_or_accept([&] {
    const mt::SafetensorsReader reader(path);
    std::vector<uint8_t> bytes;
    for (const mt::TensorEntry& entry : reader.tensors()) {
      bytes.resize(entry.bytes());
      reader.read(entry, bytes.data());
    }
  });
  return 0;
}
