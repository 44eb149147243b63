// Shared by the planner's and the cost model's tests.
#pragma once

#include "forecast/shipped_profiles.h"

namespace mt::testing {

// The profile they price with, whatever machine runs them: the shipped avx512_bf16 one at 2 threads, whose
// bf16 products run at about twice fp32's rate.
inline const HardwareProfile& tested_profile() {
  return shipped_hardware_profile(CpuIsa::avx512_bf16, 2);
}

}  // namespace mt::testing
