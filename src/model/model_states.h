// Operations over the whole model-state buffers that do not depend on the architecture.
#pragma once

#include "memory/allocation.h"

namespace mt {

// With master weights, rounds every fp32 master value into the compute-dtype weights (nearest even), as after
// initialisation or loading; without them there is nothing to do.
void round_master_into_weights(const Allocation& memory);

}  // namespace mt
