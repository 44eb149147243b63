#include "train/device_memory_check.h"

#include <sstream>

#include "memory/report.h"

namespace mt {

void DeviceMemoryCheck::before_allocation(Device& device) {
  before_ = device.memory_info();
}

void DeviceMemoryCheck::after_allocation(Device& device, int64_t planned, int64_t committed) {
  if (!before_) return;
  after_allocation_ = device.memory_info();
  planned_ = planned;
  committed_ = committed;
}

void DeviceMemoryCheck::after_step(Device& device, int64_t step) {
  // Step 1 may still load what the runtime loads lazily (kernel images on first launch); from step 2 on
  // nothing may change.
  if (!before_ || step < 2) return;
  const std::optional<DeviceMemoryInfo> now = device.memory_info();
  if (!now) return;
  ++steps_checked_;
  if (!steady_free_) {
    steady_free_ = now->free_bytes;
  } else if (now->free_bytes != *steady_free_ && first_changed_step_ == 0) {
    first_changed_step_ = step;
    changed_free_ = now->free_bytes;
  }
}

std::string DeviceMemoryCheck::failures() const {
  if (!before_ || !after_allocation_) return "";
  std::ostringstream out;
  const int64_t dropped = before_->free_bytes - after_allocation_->free_bytes;
  if (dropped != planned_)
    out << "the device's free memory dropped by " << with_commas(dropped) << " bytes across the allocation, "
        << "but the plan's buffers commit " << with_commas(planned_) << "\n";
  if (committed_ != planned_)
    out << "the allocator committed " << with_commas(committed_) << " bytes for the plan's buffers, but the "
        << "plan says " << with_commas(planned_) << ": the plan's granularity is not the device's\n";
  if (first_changed_step_ > 0)
    out << "the device's free memory changed during step " << first_changed_step_ << " (from "
        << with_commas(*steady_free_) << " to " << with_commas(changed_free_)
        << " bytes): something allocated outside the plan\n";
  return out.str();
}

std::string DeviceMemoryCheck::format() const {
  if (!before_ || !after_allocation_) return "";
  std::ostringstream out;
  out << "device memory (the driver's view): runtime overhead "
      << human_bytes(before_->total_bytes - before_->free_bytes)
      << " in use before the plan's allocation (CUDA context, kernel images, library handles; no plan holds "
         "them) | the allocation took "
      << human_bytes(before_->free_bytes - after_allocation_->free_bytes) << ", the plan's buffers commit "
      << human_bytes(planned_) << " (the allocator: " << human_bytes(committed_)
      << ") | free at the end of steps 2 and on: "
      << (steps_checked_ == 0        ? std::string("not checked (fewer than 2 steps)")
          : first_changed_step_ == 0 ? "the same in " + std::to_string(steps_checked_) + " steps"
                                     : "changed in step " + std::to_string(first_changed_step_))
      << "\n";
  return out.str();
}

nlohmann::json DeviceMemoryCheck::json() const {
  if (!before_ || !after_allocation_) return nullptr;
  nlohmann::json j = {{"total_bytes", before_->total_bytes},
                      {"runtime_overhead_bytes", before_->total_bytes - before_->free_bytes},
                      {"free_before_allocation_bytes", before_->free_bytes},
                      {"free_after_allocation_bytes", after_allocation_->free_bytes},
                      {"allocation_drop_bytes", before_->free_bytes - after_allocation_->free_bytes},
                      {"planned_committed_bytes", planned_},
                      {"committed_bytes", committed_},
                      {"steps_checked", steps_checked_},
                      {"free_steady", first_changed_step_ == 0}};
  if (steady_free_) j["free_after_steps_bytes"] = *steady_free_;
  j["allocation_matches_commit"] =
      before_->free_bytes - after_allocation_->free_bytes == planned_ && committed_ == planned_;
  return j;
}

}  // namespace mt
