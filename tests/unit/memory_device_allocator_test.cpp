// Every TrackedBuffer takes its bytes from its tracker's DeviceAllocator and gives them back to it, so an
// accelerator's allocator sees every buffer an Arena or Allocation holds; an Allocation takes each buffer
// from its device's allocator of the tensor's memory space, and stages what the host fills where it must.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>

#include "backend/cpu/cpu_device.h"
#include "memory/allocation.h"
#include "memory/device_allocator.h"
#include "memory/plan.h"
#include "memory/tracked.h"
#include "model/model.h"
#include "model_test_util.h"
#include "tests/device_test_util.h"

namespace mt {
namespace {

// Host memory, with the blocks it has handed out and not yet been given back.
class CountingAllocator final : public DeviceAllocator {
 public:
  std::string_view name() const override { return "counting"; }
  void* allocate(int64_t bytes) override {
    void* data = cpu_allocator().allocate(bytes);
    live[data] = bytes;
    return data;
  }
  void release(void* data, int64_t bytes) override {
    EXPECT_EQ(live.at(data), bytes);
    live.erase(data);
    cpu_allocator().release(data, bytes);
  }
  // As a GPU's: each buffer commits whole granules (0: its bytes).
  int64_t committed(int64_t bytes) const override { return granule > 0 ? round_up(bytes, granule) : bytes; }
  std::map<void*, int64_t> live;
  int64_t granule = 0;
};

TEST(DeviceAllocator, TrackedBuffersComeFromTheirTrackersAllocator) {
  CountingAllocator allocator;
  MemoryTracker tracker(allocator);
  {
    TrackedBuffer a(tracker, Category::activations, 100);
    TrackedBuffer b(tracker, Category::workspace, 4096);
    ASSERT_EQ(allocator.live.size(), 2u);
    EXPECT_EQ(allocator.live.at(a.as<void>()), 100);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.as<void>()) % testing::kAlignment, 0u);
    for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(a.as<unsigned char>()[i], 0);
    TrackedBuffer moved = std::move(b);
    EXPECT_EQ(allocator.live.size(), 2u);
    EXPECT_EQ(tracker.held()[Category::workspace], 4096);
  }
  EXPECT_TRUE(allocator.live.empty());
  EXPECT_EQ(tracker.held()[Category::activations], 0);
  EXPECT_EQ(tracker.peak()[Category::workspace], 4096);
}

// The CPU with a counting allocator per memory space.
class CountingDevice final : public CpuDevice {
 public:
  CountingDevice() : CpuDevice({.isa = process_cpu_isa(), .threads = omp_get_max_threads()}) {}
  DeviceAllocator& allocator(MemorySpace space) override {
    return space == MemorySpace::host ? host : device;
  }
  void run(const Op&, const OpRun&) override { FAIL() << "no op runs here"; }
  void logits(const Op&, const OpRun&, float*) override { FAIL() << "no op runs here"; }
  CountingAllocator device, host;
};

int64_t sum(const std::map<void*, int64_t>& blocks) {
  int64_t bytes = 0;
  for (const auto& [data, n] : blocks) bytes += n;
  return bytes;
}

TEST(DeviceAllocator, AnAllocationTakesEachBufferFromItsSpacesAllocator) {
  TensorTable t;
  t.add({"w", {10}, DType::f32, Category::params});
  t.add({"act", {16}, DType::f32, Category::activations, 0, 0});
  t.add({.name = "window", .shape = {100}, .dtype = DType::u16, .space = MemorySpace::host});
  const Plan plan = make_plan(t, testing::kAlignment, ModelStatePolicy{});
  EXPECT_EQ(plan.host[Category::other], 200);
  CountingDevice device;
  {
    Allocation memory(t, plan, device);
    EXPECT_EQ(sum(device.host.live), 200);
    EXPECT_EQ(sum(device.device.live), plan.bytes.total() - 200);
    EXPECT_EQ(memory.measured_host().bytes, plan.host.bytes);
  }
  EXPECT_TRUE(device.host.live.empty());
  EXPECT_TRUE(device.device.live.empty());
}

// On a device whose memory the host cannot write, the batch has host twins: planned in host memory, filled
// by the host, copied in by upload(). On the CPU the host writes the batch in place.
TEST(DeviceAllocator, TheBatchIsStagedWhereTheHostCannotWriteTheDevicesMemory) {
  const ModelSpec spec = testing::small_gpt2_spec(1);
  StepConfig step = testing::on_cpu(spec, {.batch = 2, .seq_len = 8});
  const ModelGraph in_place = build_model_graph(spec, step);
  EXPECT_EQ(in_place.graph.table[in_place.batch().tokens].staging, -1);
  step.device.host_memory = false;
  const ModelGraph staged = build_model_graph(spec, step);
  const TensorTable& table = staged.graph.table;
  const int tokens = staged.batch().tokens, twin = table[tokens].staging;
  ASSERT_GE(twin, 0);
  EXPECT_EQ(table[twin].space, MemorySpace::host);
  EXPECT_EQ(table[twin].bytes(), table[tokens].bytes());
  const Plan plan = make_plan(table, testing::kAlignment, ModelStatePolicy{});
  EXPECT_EQ(plan.host[Category::other], 2 * table[tokens].bytes());  // tokens' and targets' twins
  CountingDevice device;
  Allocation memory(table, plan, device);
  int32_t* host = static_cast<int32_t*>(memory.staged(tokens));
  EXPECT_EQ(host, memory.data(twin));
  for (int i = 0; i < 16; ++i) host[i] = 3 * i;
  EXPECT_NE(memory.i32(tokens)[5], 15);
  memory.upload(tokens);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(memory.i32(tokens)[i], 3 * i);
  EXPECT_EQ(memory.measured_host().bytes, plan.host.bytes);
}

// The plan states what a device that commits whole granules takes for each of its buffers before any is
// made, and the allocation commits exactly that: the model states', the arenas' and each buffer's own.
TEST(DeviceAllocator, ThePlanStatesWhatTheDeviceCommits) {
  const ModelSpec spec = testing::small_gpt2_spec(2);
  StepConfig step = testing::on_cpu(spec, {.batch = 2, .seq_len = 8});
  step.device.host_memory = false;
  const ModelGraph model = build_model_graph(spec, step);
  const TensorTable& table = model.graph.table;
  ModelStatePolicy policy;
  policy.moments = DType::u8;
  policy.moment_block = 256;
  Plan plan = make_plan(table, testing::kAlignment, policy);
  CategoryBytes device_part;
  for (Category c : kAllCategories) device_part[c] = plan.bytes[c] - plan.host[c];
  EXPECT_EQ(committed_device_bytes(table, plan).bytes, device_part.bytes);  // no granularity: as planned
  plan.commit_granularity = 4096;
  const CategoryBytes committed = committed_device_bytes(table, plan);
  CountingDevice device;
  device.device.granule = plan.commit_granularity;
  Allocation memory(table, plan, device);
  EXPECT_EQ(sum(device.device.live), device_part.total());
  EXPECT_EQ(memory.committed_device(), committed.total());
  EXPECT_GT(committed.total(), device_part.total());
  for (Category c : kAllCategories) {
    EXPECT_GE(committed[c], device_part[c]) << category_key(c);
    EXPECT_EQ(committed[c] % plan.commit_granularity, 0) << category_key(c);
  }
}

}  // namespace
}  // namespace mt
