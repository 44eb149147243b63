// What a plan needs to know of the device it is made for, as numbers: the graph builder sizes its workspace
// tensors from them, stages the batch when the host cannot write the device's memory, and the plan aligns
// every packed tensor to `alignment`. A device gives them for a run's shapes (devices/devices.h), so no room
// below it knows an ISA, a thread count or an SM.
#pragma once

#include <cstdint>

namespace mt {

struct DeviceTraits {
  int64_t alignment = 0;                 // bytes every packed tensor starts on
  bool host_memory = true;               // its memory is the host's: the host writes the batch in place
  int64_t matmul_scratch_floats = 0;     // a matrix product's conversion tiles (0: it needs none)
  int64_t attention_scratch_floats = 0;  // an attention op's (forward or backward) scratch
  int64_t dequant_tile_columns = 0;      // columns of a quantized weight dequantized at once
  // Its allocator commits whole multiples of this for each buffer in its own memory (a GPU's 2 MiB pages);
  // 0: the bytes asked for.
  int64_t commit_granularity = 0;
};

}  // namespace mt
