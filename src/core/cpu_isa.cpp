#include "core/cpu_isa.h"

#include <array>

#include "core/word_list.h"

namespace mt {

namespace {

constexpr std::array<std::string_view, kNumCpuIsas> kNames = {"generic", "avx2", "avx512", "avx512_bf16"};

}  // namespace

std::string_view cpu_isa_name(CpuIsa isa) {
  return kNames[static_cast<int>(isa)];
}

std::optional<CpuIsa> parse_cpu_isa(std::string_view name) {
  for (int i = 0; i < kNumCpuIsas; ++i)
    if (kNames[i] == name) return static_cast<CpuIsa>(i);
  return std::nullopt;
}

std::string cpu_isa_choices() {
  return word_list({kNames.begin(), kNames.end()}, " or ");
}

}  // namespace mt
