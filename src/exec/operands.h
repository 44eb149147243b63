// An op's operands and shapes, resolved device-neutrally from the op, the tensor table and the model's sizes:
// every backend's op runner reads them here rather than working them out again.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/backend.h"
#include "exec/op_shapes.h"
#include "memory/allocation.h"
#include "model/graph.h"
#include "model/spec.h"

namespace mt::operands {

// A tensor of an optional operand (a bias, the conversion tiles): null when left out.
template <typename T>
T* optional(const Allocation& m, int id) {
  return id >= 0 ? m.as<T>(id) : nullptr;
}

// The tokens' positions in their records (packed sequences), or null: their indices in the row.
inline const int32_t* positions(const Allocation& m, int id) {
  return id >= 0 ? m.i32(id) : nullptr;
}

inline bool frozen(const Allocation& m, int param) {
  return m.table()[param].category == Category::frozen;
}

// A parameter's weights and gradient as the op names them: in its window's buffers under ZeRO-2/3
// (Op::window), else in the model states. Null for an optional parameter left out, and no gradient for a
// frozen one, whose weights every rank holds whole.
template <typename T>
T* weights(const Allocation& m, const Op& op, int param) {
  if (param < 0) return nullptr;
  const WindowBuffers& w = op.window;
  return w.weights >= 0 && !frozen(m, param) ? m.in_block<T>(w.weights, w.first_param, param)
                                             : m.as<T>(param);
}

template <typename G>
G* grad(const Allocation& m, const Op& op, int param) {
  if (param < 0 || frozen(m, param)) return nullptr;
  const WindowBuffers& w = op.window;
  return w.grads >= 0 ? m.in_block<G>(w.grads, w.first_param, param) : m.grad<G>(param);
}

// A quantized frozen weight (--base-quant), one view per part.
inline std::vector<QuantizedWeight> quantized_weight(const Allocation& m, int param) {
  return m.table()[param].quantized->views(m.data(param));
}

inline LinearShape linear_shape(const TensorTable& table, int inp, int weight, bool weight_out_in) {
  const TensorDesc& w = table[weight];
  const int64_t in = w.shape[weight_out_in ? 1 : 0], out = w.shape[weight_out_in ? 0 : 1];
  return {table[inp].numel() / in, in, out, weight_out_in ? WeightLayout::out_in : WeightLayout::in_out};
}

// This rank's heads: 1/tp of them under tensor parallelism.
inline QkvLayout qkv_layout(const ModelSpec& spec, int tp) {
  return {spec.n_embd / tp, spec.n_head / tp, spec.n_kv_head / tp};
}

// The rows of the vocabulary an embedding or head weight holds (all of them without tensor parallelism).
inline VocabRows vocab_rows(const TensorTable& table, int weight, int64_t vocab_begin) {
  return {vocab_begin, table[weight].shape[0]};
}

inline LoraShape lora_shape(const TensorTable& table, int inp, int out, int a, int b, int64_t column,
                            float scale) {
  const int64_t in = table[a].shape[1];
  return {.M = table[inp].numel() / in,
          .in = in,
          .rank = table[a].shape[0],
          .width = table[b].shape[0],
          .out_stride = table[out].shape.back(),
          .column = column,
          .scale = scale};
}

// Dropout runs in training only; `inp` is the adapter's input, whose first dimension is the samples.
inline DropoutMask dropout_mask(const ops::LoraDropout& d, int inp, const OpRun& r) {
  return {.p = r.training ? d.p : 0.0f,
          .seed = d.seed,
          .stream = d.stream,
          .first_sample = r.first_sample,
          .samples = r.graph.table[inp].shape.at(0)};
}

}  // namespace mt::operands
