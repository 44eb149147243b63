#include "cli/cpu_isa_flag.h"

#include <optional>

#include "core/error.h"
#include "devices/devices.h"

namespace mt::cli {

void add_cpu_isa_flag(CLI::App& cmd, std::string& level) {
  cmd.add_option(
      "--cpu-isa", level,
      "ISA level to plan for: " + cpu_isa_choices() +
          " (default: this machine's, capped by MEMTRAIN_MAX_ISA); bf16 products below avx512_bf16 "
          "need fp32 conversion tiles");
}

CpuIsa resolve_cpu_isa(const std::string& level) {
  if (level.empty()) return process_cpu_isa();
  const std::optional<CpuIsa> isa = parse_cpu_isa(level);
  if (!isa) fail_usage("--cpu-isa " + level + ": expected " + cpu_isa_choices());
  return *isa;
}

}  // namespace mt::cli
