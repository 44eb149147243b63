// The one summation every communicator uses, so that its order is fixed in a single place, and the checks of
// their arguments.
#pragma once

#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace mt {

// Throws std::invalid_argument unless dtype is one the communicators sum (f32, bf16, f16, f64), naming the
// operation.
void check_sum_dtype(DType dtype, const char* operation);
// Throws std::invalid_argument for a negative element count, naming the operation.
void check_count(int64_t count, const char* operation);

// out[i] = ((parts[0][i] + parts[1][i]) + parts[2][i]) + ... in fp32 (f64 in double), for i < count; bf16
// and f16 parts are upcast and the sum rounded to nearest even once. out may be one of the parts (the same
// pointer). parts must not be empty.
void sum_in_rank_order(std::span<const void* const> parts, void* out, int64_t count, DType dtype);

}  // namespace mt
