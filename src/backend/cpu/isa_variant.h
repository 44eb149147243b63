// How a kernel is built once per ISA level and picked at run time. Every kernel source file is compiled
// once per level of backend/cpu/cpu_isa.h, with that level's -march and MEMTRAIN_ISA set to its name (CMake);
// each build puts its implementation in its own namespace, MT_ISA (isa_generic, isa_avx2, ...), so the
// levels never share a symbol, and enrols it at start-up as its level's variant of the public entry point.
// The public entry points (the kernels/*.h declarations) are defined once, in the generic build
// (MEMTRAIN_KERNEL_ENTRY_POINTS), and call the variant of the active level, or of the highest level below
// it that has one.
//
// A kernel file reads:
//   namespace mt::kernels {
//   namespace MT_ISA {
//   template <typename T> void gelu_forward(T* out, const T* inp, int64_t n) { ... }
//   }  // namespace MT_ISA
//   #ifdef MEMTRAIN_KERNEL_ENTRY_POINTS
//   template <typename T> void gelu_forward(T* out, const T* inp, int64_t n) {
//     dispatch<&gelu_forward<T>>(out, inp, n);
//   }
//   #endif
//   namespace MT_ISA {
//   namespace {
//   const bool enrolled = enroll<&kernels::gelu_forward<float>>(gelu_forward) && ...;
//   }
//   }
// Every name a file defines for its enrolment is in an anonymous namespace: a helper of the same name in two
// files, or two levels, would otherwise be one symbol with two bodies, and the linker would keep one.
//   }  // namespace mt::kernels
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "backend/cpu/cpu_isa.h"

// Outside the per-level builds (a test of an internal header) a file sees the baseline, generic.
#ifndef MEMTRAIN_ISA
#define MEMTRAIN_ISA generic
#endif
#define MT_ISA_JOIN2(a, b) a##b
#define MT_ISA_JOIN(a, b) MT_ISA_JOIN2(a, b)
#define MT_ISA MT_ISA_JOIN(isa_, MEMTRAIN_ISA)

namespace mt::kernels {

// The level this translation unit is built for.
constexpr CpuIsa kBuildIsa = CpuIsa::MEMTRAIN_ISA;

// The variants of public entry point Api, by level; null where a level's build has none (on processors
// other than x86-64 only generic is built). No initializer: static storage starts zeroed, while an
// initializer may be run (as a debug build does) after another file's enrolment, wiping it.
template <auto Api>
struct Variants {
  static inline decltype(Api) at[kNumCpuIsas];
};

namespace MT_ISA {
// Makes impl this build's variant of Api. Taking the overload set (a template's name) lets the pointer type
// pick the instantiation: enroll<&kernels::f<float>>(f). In the level's namespace, as everything that
// differs between the builds must be: one name for all would leave the linker one copy, one level's.
template <auto Api>
bool enroll(decltype(Api) impl) {
  Variants<Api>::at[static_cast<int>(kBuildIsa)] = impl;
  return true;
}
}  // namespace MT_ISA

// Calls the variant of Api for the active level (kernels::cpu_isa()), or the nearest level below it.
template <auto Api, typename... Args>
decltype(auto) dispatch(Args&&... args) {
  const auto& at = Variants<Api>::at;
  for (int level = static_cast<int>(cpu_isa()); level >= 0; --level)
    if (at[level]) return at[level](std::forward<Args>(args)...);
  throw std::logic_error("kernel entry point without a generic variant");
}

}  // namespace mt::kernels
