// --cpu-isa of `estimate` and `plan`: the ISA level to plan for, by default this process's (the CPU's,
// capped by MEMTRAIN_MAX_ISA). `train` has no such flag: it runs at the process's level.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "core/cpu_isa.h"

namespace mt::cli {

void add_cpu_isa_flag(CLI::App& cmd, std::string& level);

// The level named, or this process's (process_cpu_isa) when empty; a usage error naming --cpu-isa and the
// choices.
CpuIsa resolve_cpu_isa(const std::string& level);

}  // namespace mt::cli
