// Shared pieces of the kernel tests: random inputs, comparisons against double references, and running a
// kernel under a chosen OpenMP thread count.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/half.h"
#include "core/rng.h"

namespace mt::kernels::testing {

// n values from N(0, stddev^2), reproducible per stream.
inline std::vector<float> random_floats(int64_t n, uint64_t stream, double stddev = 1.0) {
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(stddev * random_normal(2024, stream, i));
  return x;
}

// x rounded to the storage type T, and back: to_float(to_storage<T>(x)) is what an fp32 kernel sees of it.
template <typename T>
std::vector<T> to_storage(const std::vector<float>& x) {
  std::vector<T> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = round_to<T>(x[i]);
  return y;
}

template <typename T>
std::vector<float> to_float(const std::vector<T>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = to_f32(x[i]);
  return y;
}

inline std::vector<double> to_double(const std::vector<float>& x) {
  return {x.begin(), x.end()};
}

// Every element within atol + rtol * |expected|.
inline void expect_close(const std::vector<float>& actual, const std::vector<double>& expected, double rtol,
                         double atol) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], atol + rtol * std::abs(expected[i])) << "at index " << i;
  }
}

template <typename T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  // memcmp may not be given an empty vector's null data.
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Runs f with `threads` OpenMP threads, then restores the previous count.
template <typename F>
void with_threads(int threads, const F& f) {
  const int previous = omp_get_max_threads();
  omp_set_num_threads(threads);
  f();
  omp_set_num_threads(previous);
}

// Central finite difference of a double function of x with respect to x[i].
template <typename F>
double finite_difference(std::vector<double>& x, size_t i, const F& f, double h = 1e-6) {
  const double saved = x[i];
  x[i] = saved + h;
  const double up = f(x);
  x[i] = saved - h;
  const double down = f(x);
  x[i] = saved;
  return (up - down) / (2 * h);
}

}  // namespace mt::kernels::testing
