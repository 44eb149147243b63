// The GPU memory proof's bookkeeping (train/device_memory_check.h) against a device whose driver reports
// what the test says: the allocation's drop in free memory against what was committed, and free memory
// that must not move from step 2 on. The CPU reports nothing, so nothing is checked there.
#include <gtest/gtest.h>

#include <deque>

#include "backend_ops.h"
#include "tests/device_test_util.h"
#include "train/device_memory_check.h"

namespace mt {
namespace {

// The CPU backend whose memory_info() answers from a queue, as a GPU's driver would.
class ReportingDevice final : public backend_ops::ForwardingBackend {
 public:
  ReportingDevice() : ForwardingBackend(testing::cpu_backend()) {}
  std::optional<DeviceMemoryInfo> memory_info() override {
    const int64_t free = frees.front();
    frees.pop_front();
    return DeviceMemoryInfo{.free_bytes = free, .total_bytes = 1000};
  }
  std::deque<int64_t> frees;
};

TEST(DeviceMemoryCheck, AnAllocationOfWhatWasCommittedAndSteadyStepsPass) {
  ReportingDevice gpu;
  gpu.frees = {900, 500, 480, 480, 480};  // overhead 100; the plan commits 400; step 1 loads a kernel image
  DeviceMemoryCheck check;
  check.before_allocation(gpu);
  check.after_allocation(gpu, 400, 400);
  for (int64_t step = 1; step <= 4; ++step) check.after_step(gpu, step);
  EXPECT_TRUE(check.active());
  EXPECT_EQ(check.failures(), "");
  const nlohmann::json json = check.json();
  EXPECT_EQ(json["runtime_overhead_bytes"], 100);
  EXPECT_EQ(json["allocation_drop_bytes"], 400);
  EXPECT_EQ(json["planned_committed_bytes"], 400);
  EXPECT_EQ(json["committed_bytes"], 400);
  EXPECT_EQ(json["steps_checked"], 3);
  EXPECT_EQ(json["free_after_steps_bytes"], 480);
  EXPECT_TRUE(json["allocation_matches_commit"]);
  EXPECT_TRUE(json["free_steady"]);
  EXPECT_NE(check.format().find("runtime overhead 100 B"), std::string::npos) << check.format();
}

TEST(DeviceMemoryCheck, AnAllocationOutsideThePlanIsNamed) {
  ReportingDevice gpu;
  gpu.frees = {900, 500};
  DeviceMemoryCheck check;
  check.before_allocation(gpu);
  check.after_allocation(gpu, 300, 300);
  EXPECT_NE(check.failures().find("dropped by 400 bytes"), std::string::npos) << check.failures();
  EXPECT_FALSE(check.json()["allocation_matches_commit"]);
}

TEST(DeviceMemoryCheck, AnAllocatorCommittingOtherThanThePlanSaysIsNamed) {
  ReportingDevice gpu;
  gpu.frees = {900, 500};
  DeviceMemoryCheck check;
  check.before_allocation(gpu);
  check.after_allocation(gpu, 400, 512);
  EXPECT_NE(check.failures().find("the allocator committed 512 bytes"), std::string::npos)
      << check.failures();
  EXPECT_FALSE(check.json()["allocation_matches_commit"]);
}

TEST(DeviceMemoryCheck, MemoryTakenDuringAStepIsNamedWithTheStep) {
  ReportingDevice gpu;
  gpu.frees = {900, 500, 500, 500, 436, 500};
  DeviceMemoryCheck check;
  check.before_allocation(gpu);
  check.after_allocation(gpu, 400, 400);
  for (int64_t step = 2; step <= 5; ++step) check.after_step(gpu, step);
  EXPECT_NE(check.failures().find("during step 4"), std::string::npos) << check.failures();
  EXPECT_FALSE(check.json()["free_steady"]);
}

TEST(DeviceMemoryCheck, TheCpuReportsNothingAndNothingIsChecked) {
  Backend& cpu = testing::cpu_backend();
  DeviceMemoryCheck check;
  check.before_allocation(cpu);
  check.after_allocation(cpu, 123, 123);
  check.after_step(cpu, 2);
  EXPECT_FALSE(check.active());
  EXPECT_EQ(check.failures(), "");
  EXPECT_EQ(check.format(), "");
}

}  // namespace
}  // namespace mt
