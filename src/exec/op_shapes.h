// The shapes of the graph's ops as every backend's kernels take them, resolved once from the tensor table and
// the model's sizes (exec/operands.h), so that a second backend reads the same numbers instead of working
// them out again.
#pragma once

#include <cstdint>
#include <limits>

namespace mt {

// How a linear op's weight is stored: [in, out] (GPT-2's Conv1D) or [out, in] (torch.nn.Linear).
enum class WeightLayout { in_out, out_in };

// A linear op: out[M, out] = inp[M, in] @ weight.
struct LinearShape {
  int64_t M, in, out;
  WeightLayout layout;
};

// Where a head's q, k and v start in a row of qkv.
struct QkvLayout {
  int64_t C, NH, NKV, hs;
  QkvLayout(int64_t C_, int64_t NH_, int64_t NKV_) : C(C_), NH(NH_), NKV(NKV_), hs(C_ / NH_) {}
  int64_t row() const { return C + 2 * NKV * hs; }
  int64_t kv_head(int64_t h) const { return h / (NH / NKV); }
  int64_t q(int64_t h) const { return h * hs; }
  int64_t k(int64_t h) const { return C + kv_head(h) * hs; }
  int64_t v(int64_t h) const { return C + (NKV + kv_head(h)) * hs; }
};

// The vocabulary rows a tensor-parallel rank's wte holds: tokens [begin, begin + count) at rows 0, 1, ...
struct VocabRows {
  int64_t begin = 0;
  int64_t count = std::numeric_limits<int64_t>::max();
  bool holds(int32_t token) const { return token >= begin && token - begin < count; }
};

// A LoRA adapter on a linear op's output columns.
struct LoraShape {
  int64_t M = 0;           // rows (B * T)
  int64_t in = 0;          // the base op's input width
  int64_t rank = 0;        // r
  int64_t width = 0;       // the adapter's output columns
  int64_t out_stride = 0;  // the base op's output width (a fused projection's whole row)
  int64_t column = 0;      // the adapter's first output column
  float scale = 1.0f;      // alpha / r
};

// Dropout on the adapter's input [samples, ...] (p > 0): element i is kept, times 1 / (1 - p), when the
// counter-based uniform of (seed, stream, first_sample * n / samples + i) is at least p: each sample's
// elements are keyed by its global number, so the masks follow the samples however a step is split. The same
// bits in the forward and the backward.
struct DropoutMask {
  float p = 0.0f;
  uint64_t seed = 0, stream = 0, first_sample = 0;
  int64_t samples = 1;
};

}  // namespace mt
