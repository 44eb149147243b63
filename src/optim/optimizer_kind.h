// Which optimizer a run steps with (--optimizer): AdamW, or Adam-mini (Zhang et al. 2024), AdamW's update
// with one second moment per block of parameters (model/adam_mini_blocks.h). docs/optimizer_states.md.
#pragma once

#include "core/names.h"

namespace mt {

enum class OptimizerKind { adamw, adam_mini };
inline constexpr auto kOptimizerNames = names_in_order<OptimizerKind>("adamw", "adam-mini");

}  // namespace mt
