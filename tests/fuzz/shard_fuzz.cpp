// Token shards and their loss masks (--data): the header of each, the mask checked against the tokens.
#include "data/shard.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The first byte chooses which header the rest is: a shard's or a loss mask's.
  if (size == 0) return 0;
  const std::string path = mt::fuzz::as_file(data + 1, size - 1, "data_train_000000.bin");
  mt::fuzz::refuse_or_accept([&] {
    if (data[0] % 2 == 0)
      mt::open_shard(path);
    else
      mt::check_loss_mask(path, data[0]);
  });
  return 0;
}
