// What tests that plan, allocate and run need of the device: this process's CPU, its traits for a step, its
// backend for a plan's model-state layout, and one training step with the batch's counted targets and its
// loss read back, as the trainer does it.
#pragma once

#include <omp.h>

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "devices/devices.h"
#include "exec/executor.h"
#include "memory/allocation.h"
#include "model/graph_builder.h"
#include "model/spec.h"

namespace mt::testing {

// The CPU's alignment, for tests that pack arenas by hand.
constexpr int64_t kAlignment = kCpuAlignment;

// This process's CPU with `threads` OpenMP threads.
inline DeviceTarget cpu_target(int threads = omp_get_max_threads()) {
  return {.cpu_isa = process_cpu_isa(), .threads = threads};
}

// `step` with the CPU's traits for its dtype and T, and spec's head size.
inline StepConfig on_cpu(const ModelSpec& spec, StepConfig step, int threads = omp_get_max_threads()) {
  step.device = device_traits(cpu_target(threads), step.dtype, step.seq_len, spec.head_dim());
  return step;
}

// The CPU backend for a model-state layout (weights and gradients), one per layout for the whole test binary:
// allocations and executors of a test share it.
inline Backend& cpu_backend(const ModelStatePolicy& policy = {}) {
  static std::map<std::tuple<DType, DType>, std::unique_ptr<Backend>> backends;
  std::unique_ptr<Backend>& backend = backends[{policy.weights, policy.grads}];
  if (!backend) backend = make_backend(cpu_target(), policy);
  return *backend;
}

// The targets the loss counts in all of the graph's batches together, as the loader counts them.
inline int64_t counted_targets(const ModelGraph& model, const Allocation& memory) {
  int64_t counted = 0;
  for (const BatchTensors& batch : model.batches) {
    const int64_t n = model.graph.table[batch.targets].numel();
    const uint8_t* mask = batch.loss_mask < 0 ? nullptr : memory.u8(batch.loss_mask);
    counted += mask ? std::count(mask, mask + n, uint8_t{1}) : n;
  }
  return counted;
}

// One training pass of the graph's batches as loaded; returns its loss.
inline double train_step(Executor& exec, const ModelGraph& model, const Allocation& memory,
                         float grad_scale) {
  exec.clear_loss();
  exec.train_step(grad_scale, 0, counted_targets(model, memory));
  return exec.loss();
}

}  // namespace mt::testing
