#include "model/graph_builder.h"

#include <omp.h>

#include <algorithm>

#include "kernels/matmul.h"

namespace mt {

GraphBuilder::GraphBuilder(ModelGraph& model, const StepConfig& step) : m_(model), step_(step) {
  if (step_.threads <= 0) step_.threads = omp_get_max_threads();
  m_.graph.threads = step_.threads;
  // Matrix products whose inputs the library cannot take directly get conversion tiles (f16 on most CPUs,
  // bf16 without AVX512-BF16).
  const int64_t matmul_floats = kernels::gemm_scratch_floats(step_.dtype, step_.isa, step_.threads);
  if (matmul_floats > 0) mm_ = scratch("matmul.scratch", matmul_floats);
  m_.tokens = tensor("batch.tokens", {step_.batch, step_.seq_len}, Category::other, DType::i32);
  m_.targets = tensor("batch.targets", {step_.batch, step_.seq_len}, Category::other, DType::i32);
}

int GraphBuilder::param(const std::string& name, std::vector<int64_t> shape) {
  const int id = m_.graph.table.add({.name = name,
                                     .shape = std::move(shape),
                                     .dtype = step_.dtype,
                                     .category = Category::params,
                                     .block = block_});
  m_.params.push_back(id);
  return id;
}

int GraphBuilder::tensor(const std::string& name, std::vector<int64_t> shape, Category c, DType dtype) {
  return m_.graph.table.add({name, std::move(shape), dtype, c});
}

int GraphBuilder::act(const std::string& name, std::vector<int64_t> shape) {
  return tensor(name, std::move(shape), Category::activations, step_.dtype);
}

int GraphBuilder::stat(const std::string& name, std::vector<int64_t> shape) {
  return tensor(name, std::move(shape), Category::activations, DType::f32);
}

int GraphBuilder::scratch(const std::string& name, int64_t floats) {
  return tensor(name, {floats}, Category::workspace, DType::f32);
}

void GraphBuilder::op(Op o) {
  m_.graph.ops.push_back(std::move(o));
}

void GraphBuilder::linear(const std::string& name, int inp, int out, int residual, int w, int bias,
                          bool out_in) {
  op({.kind = OpKind::linear,
      .name = name,
      .inp = inp,
      .out = out,
      .residual = residual,
      .weight = w,
      .bias = bias,
      .matmul_scratch = mm_,
      .weight_out_in = out_in});
}

void GraphBuilder::linear_backward(const std::string& name, int inp, int w, int bias, int dinp, int dout,
                                   bool out_in) {
  op({.kind = OpKind::linear_backward,
      .name = name,
      .inp = inp,
      .weight = w,
      .bias = bias,
      .dinp = dinp,
      .dout = dout,
      .matmul_scratch = mm_,
      .weight_out_in = out_in});
}

int GraphBuilder::lm_head_loss(int inp, int weight, int64_t C, int64_t Vp) {
  const int64_t B = step_.batch, T = step_.seq_len;
  const int dinp = act(m_.graph.table[inp].name + ".grad", C);
  const int64_t chunk = std::min(B * T, kLogitsChunkRows) * Vp;
  m_.graph.loss_op = static_cast<int>(m_.graph.ops.size());
  op({.kind = OpKind::lm_head_loss,
      .name = "lm_head",
      .inp = inp,
      .weight = weight,
      .stat0 = scratch("lm_head.losses", B * T),
      .dinp = dinp,
      .scratch = scratch("lm_head.logits", chunk),
      .dscratch = step_.dtype == DType::f32
                      ? -1
                      : tensor("lm_head.logits.grad", {chunk}, Category::workspace, step_.dtype),
      .matmul_scratch = mm_,
      .labels = m_.targets});
  return dinp;
}

void GraphBuilder::finish() {
  assign_lifetimes(m_.graph);
}

int emit_layers_forward(BlockEmitter& blocks, int64_t n_layer, int inp, std::vector<int>& inputs) {
  inputs.assign(n_layer, -1);
  for (int64_t l = 0; l < n_layer; ++l) {
    inputs[l] = inp;
    inp = blocks.forward(l, inp, "");
  }
  return inp;
}

void emit_layers_backward(BlockEmitter& blocks, const StepConfig& step, int64_t n_layer,
                          const std::vector<int>& inputs, int dres) {
  const std::vector<int64_t> group = full_recompute_groups(step.recompute, n_layer);
  const bool selective = step.recompute.granularity == RecomputeGranularity::selective;
  for (int64_t l = n_layer - 1; l >= 0; --l) {
    // Entering a recompute group from its top: rerun the group's forward from the input it kept.
    if (group[l] >= 0 && (l == n_layer - 1 || group[l + 1] != group[l])) {
      int inp = inputs[group[l]];
      for (int64_t r = group[l]; r <= l; ++r) inp = blocks.forward(r, inp, ".recomputed");
    }
    blocks.backward(l, dres, selective);
  }
}

}  // namespace mt
