// The operands of one AdamW update that every device runs with the same arithmetic (torch.optim.AdamW:
// bias correction, eps outside the sqrt, decoupled weight decay): the step's scalars, how 16-bit values are
// rounded, and, for 8-bit moments, their buffers and the runs of weight decay a block may hold. The CPU's
// kernels are backend/cpu/adamw.h and adamw_8bit.h.
#pragma once

#include <cstdint>
#include <vector>

#include "core/moment_format.h"

namespace mt {

struct AdamWStep {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;  // 0 for tensors without decay (biases, LayerNorm)
  int64_t step;        // 1-based, for the bias corrections
  // Multiplies every gradient before use: 1 / loss scale, times the clipping coefficient.
  float grad_multiplier = 1.0f;
};

// How 16-bit moments and master-less weights are rounded; stochastic rounding draws its bits from
// random_bits(seed, stream, index + i) with a distinct stream for m, v and the weights, so it is reproducible
// and independent of the thread count, and a tensor updated in pieces (index advanced by each piece's
// offset) gets the same bits as in one call.
struct AdamWRounding {
  bool stochastic_moments = false;  // bf16 moments: stochastic, not nearest even (fp32 moments ignore it)
  uint64_t seed = 0;                // callers mix the run seed and the step into it
  int64_t index = 0;                // element offset of this tensor in the whole parameter buffer
};

// A range's moments: one byte per element, one scale per block, m with first_moment_codec(format) and v with
// second_moment_codec(format). Element 0 is the first of a block (a range is cut on block boundaries; the
// last block may be shorter).
struct QuantizedMoments {
  MomentFormat format;
  uint8_t* m;
  float* m_scales;
  uint8_t* v;
  float* v_scales;
};

// A run of elements with one weight decay: from `begin` (relative to the range) to the next run's begin or
// the range's end, with s.weight_decay when `decay`, none otherwise. A block may hold elements of several
// parameter tensors, so one call updates every tensor of its range: the runs start at 0, in increasing order.
struct DecayRun {
  int64_t begin;
  bool decay;
};

// One tensor's Adam-mini blocks (model/adam_mini_blocks.h) as a kernel reads them: the tensor as a row-major
// [rows, cols] matrix whose line i (a row, or a column when by_column) belongs to block block_of[i] of
// `count`, each with one fp32 second moment.
struct MiniBlockLayout {
  int64_t rows, cols;
  bool by_column;
  const int32_t* block_of;
  int64_t count;
};

// One parameter tensor's Adam-mini blocks, as model/adam_mini_blocks.h partitions them: line i of the
// tensor's [rows, cols] belongs to block first + block_of[i] of the run's second moments, and the tensor's
// blocks are [first, first + count).
struct MiniBlocks {
  int param = -1;
  int64_t rows = 1, cols = 1;
  bool by_column = false;
  int64_t first = 0, count = 0;
  std::vector<int32_t> block_of;

  MiniBlockLayout layout() const { return {rows, cols, by_column, block_of.data(), count}; }
};

// One parameter tensor of a range that Adam-mini updates with block-quantized first moments: its elements
// from `begin` (relative to the range) on, blocks.rows * blocks.cols of them, whose second moments are
// v[0, blocks.count), with s.weight_decay when `decay` and none otherwise. A quantization block may hold
// elements of several tensors, so one call updates every tensor with an element in its range.
struct MiniTensor {
  int64_t begin;
  MiniBlockLayout blocks;
  float* v;
  bool decay;
};

// The number of second moments: the blocks of all of them (numbered in order).
inline int64_t adam_mini_block_count(const std::vector<MiniBlocks>& blocks) {
  return blocks.empty() ? 0 : blocks.back().first + blocks.back().count;
}

}  // namespace mt
