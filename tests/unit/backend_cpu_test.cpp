// The CPU backend exists for exactly the model-state layouts the precision policy produces, at the level its
// kernels run at.
#include <gtest/gtest.h>

#include <stdexcept>

#include "backend/cpu/cpu_backend.h"
#include "tests/device_test_util.h"

namespace mt {
namespace {

ModelStatePolicy layout(DType weights, DType grads) {
  ModelStatePolicy p;
  p.weights = weights;
  p.grads = grads;
  return p;
}

CpuTarget this_cpu() {
  return {.isa = process_cpu_isa(), .threads = 1};
}

TEST(CpuBackend, ServesEveryPrecisionsLayout) {
  for (const auto& [weights, grads] :
       {std::pair{DType::f32, DType::f32}, std::pair{DType::bf16, DType::f32},
        std::pair{DType::bf16, DType::bf16}, std::pair{DType::f16, DType::f32}})
    EXPECT_EQ(make_cpu_backend(this_cpu(), layout(weights, grads))->description().name, "cpu");
}

TEST(CpuBackend, RefusesALayoutWithoutKernels) {
  EXPECT_THROW(make_cpu_backend(this_cpu(), layout(DType::f16, DType::f16)), std::logic_error);
  EXPECT_THROW(make_cpu_backend(this_cpu(), layout(DType::f32, DType::bf16)), std::logic_error);
}

// A plan's workspace is sized for one level: a backend at another would run kernels the plan did not size.
TEST(CpuBackend, RefusesAPlanMadeForAnotherLevel) {
  const CpuIsa other = process_cpu_isa() == CpuIsa::generic ? CpuIsa::avx2 : CpuIsa::generic;
  EXPECT_THROW(make_cpu_backend({.isa = other, .threads = 1}, {}), std::logic_error);
}

TEST(CpuBackend, DescribesItsLevelForMemoryJsonAndMetrics) {
  const DeviceDescription d = make_cpu_backend(this_cpu(), {})->description();
  ASSERT_EQ(d.fields.size(), 1u);
  EXPECT_EQ(d.fields[0].first, "cpu_isa");
  EXPECT_EQ(d.fields[0].second, cpu_isa_name(process_cpu_isa()));
  EXPECT_NE(d.banner.find("1 threads | cpu " + std::string(cpu_isa_name(process_cpu_isa()))),
            std::string::npos);
}

}  // namespace
}  // namespace mt
