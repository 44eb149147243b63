// Counter-based random numbers: every draw is a pure function of (seed, stream, index), so results never
// depend on thread count, rank or the order in which draws are made (see DESIGN.md, Determinism).
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "core/host_device.h"

namespace mt {

// SplitMix64 finalizer: a bijective 64-bit mix with good avalanche.
MT_HOST_DEVICE constexpr uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

MT_HOST_DEVICE constexpr uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  return mix64(mix64(mix64(seed) ^ stream) ^ index);
}

// FNV-1a of a name, to derive a stream from a tensor's name (stable across compilers, unlike std::hash).
constexpr uint64_t hash_name(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

// Uniform in (0, 1), never 0 so that log() is safe.
inline double random_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return (static_cast<double>(random_bits(seed, stream, index) >> 11) + 0.5) * 0x1.0p-53;
}

// Standard normal by Box-Muller from two independent uniforms of the same counter.
inline double random_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const double u1 = random_uniform(seed, stream, 2 * index);
  const double u2 = random_uniform(seed, stream, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// Uniform integer in [0, n) (n > 0); the modulo bias is below 2^-40 for any n under 2^24.
inline uint64_t random_below(uint64_t seed, uint64_t stream, uint64_t index, uint64_t n) {
  return random_bits(seed, stream, index) % n;
}

}  // namespace mt
