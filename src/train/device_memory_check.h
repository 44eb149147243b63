// On a device with memory of its own (a GPU), what the driver says against what the run allocated: the
// proof that the plan is what the device holds. (a) is the memory report's planned == measured; this adds
// (b) the drop in free memory across the allocation equals what the plan says the device commits for its
// buffers (each rounded to the device's granularity), and what the allocator says it committed, (c) free
// memory is the same at the end of every step from step 2 on (nothing allocated during a step), and (d) the
// runtime's own overhead (context, kernel images, library handles), measured before the allocation, printed
// as its own line beside the profile's figure. On the CPU it records nothing.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "memory/device.h"

namespace mt {

class DeviceMemoryCheck {
 public:
  // Before the plan's first buffer: the runtime's overhead is what is in use.
  void before_allocation(Device& device);
  // After every planned buffer: `planned` is what the plan says the device commits for them
  // (committed_device_bytes), `committed` what the allocator says it committed.
  void after_allocation(Device& device, int64_t planned, int64_t committed);
  // After step `step` (1-based) has run to its end on the device.
  void after_step(Device& device, int64_t step);

  bool active() const { return before_.has_value(); }
  // "runtime overhead 512 MiB measured (CUDA context, kernel images, library handles)..." and the checks.
  std::string format() const;
  // memory.json's "device_memory": every figure in bytes, and whether (b) and (c) held.
  nlohmann::json json() const;
  // What failed of (b) and (c), one line each; empty when both held.
  std::string failures() const;

 private:
  std::optional<DeviceMemoryInfo> before_, after_allocation_;
  int64_t planned_ = 0, committed_ = 0;
  // Free memory at the end of step 2, and the step at which it last differed (0: never).
  std::optional<int64_t> steady_free_;
  int64_t steps_checked_ = 0, first_changed_step_ = 0, changed_free_ = 0;
};

}  // namespace mt
