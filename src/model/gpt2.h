// GPT-2 as a Graph: its parameters (Hugging Face names), the activations it keeps for backward, the workspace
// of its kernels, and the ops of one training step: forward, fused LM head + loss, backward.
#pragma once

#include <cstdint>
#include <vector>

#include "memory/allocation.h"
#include "model/graph.h"
#include "model/recompute.h"
#include "model/spec.h"

namespace mt {

// How one training step runs: the micro-batch shape, the threads kernels size their scratch for, the storage
// dtype and the recompute policy.
struct StepConfig {
  int64_t batch = 1;         // B, sequences per micro-batch
  int64_t seq_len = 1;       // T
  int threads = 0;           // OpenMP threads the kernels' scratch is sized for; 0: omp_get_max_threads()
  DType dtype = DType::f32;  // storage of weights and activations; statistics, logits and losses stay fp32
  RecomputeConfig recompute = {};
};

// Rows of logits computed at once by the LM head: the [rows, Vp] logits buffer is workspace, never [B*T, Vp].
constexpr int64_t kLogitsChunkRows = 256;

struct Gpt2Graph {
  Graph graph;
  int tokens = -1, targets = -1;  // the batch's token ids (category other)
  std::vector<int> params;        // parameter ids in Hugging Face order
};

Gpt2Graph build_gpt2_graph(const ModelSpec& spec, const StepConfig& step);

// Parameters that get weight decay: matrices and embeddings, never biases or LayerNorm parameters.
bool gpt2_decays(const TensorDesc& param);

// GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weights 1.
// A pure function of (seed, tensor name hash, element index). Padded vocabulary rows stay zero.
void init_gpt2_params(const ModelSpec& spec, const Gpt2Graph& model, Allocation& memory, uint64_t seed);

}  // namespace mt
