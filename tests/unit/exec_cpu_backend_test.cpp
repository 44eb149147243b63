// The CPU backend exists for exactly the model-state layouts the precision policy produces.
#include <gtest/gtest.h>

#include <stdexcept>

#include "exec/cpu_backend.h"

namespace mt {
namespace {

ModelStatePolicy layout(DType weights, DType grads) {
  ModelStatePolicy p;
  p.weights = weights;
  p.grads = grads;
  return p;
}

TEST(CpuBackend, ServesEveryPrecisionsLayout) {
  for (const auto& [weights, grads] :
       {std::pair{DType::f32, DType::f32}, std::pair{DType::bf16, DType::f32},
        std::pair{DType::bf16, DType::bf16}, std::pair{DType::f16, DType::f32}})
    EXPECT_EQ(make_cpu_backend(layout(weights, grads))->name(), "cpu");
}

TEST(CpuBackend, RefusesALayoutWithoutKernels) {
  EXPECT_THROW(make_cpu_backend(layout(DType::f16, DType::f16)), std::logic_error);
  EXPECT_THROW(make_cpu_backend(layout(DType::f32, DType::bf16)), std::logic_error);
}

}  // namespace
}  // namespace mt
