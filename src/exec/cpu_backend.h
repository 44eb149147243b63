// The CPU backend: the kernels of backend/cpu/ behind exec/backend.h.
#pragma once

#include <memory>

#include "exec/backend.h"
#include "memory/plan.h"

namespace mt {

// The backend for a run whose model states are laid out as `policy` says (weights fp32, bf16 or f16;
// gradients fp32 or bf16); a logic error for a pair that has no kernels.
std::unique_ptr<Backend> make_cpu_backend(const ModelStatePolicy& policy);

}  // namespace mt
