// GPT-2 weights in safetensors with Hugging Face names and layouts (Conv1D weights [in, out]).
#pragma once

#include <string>
#include <vector>

#include "memory/allocation.h"
#include "model/gpt2.h"

namespace mt {

// Reads every parameter; a `transformer.` prefix, the causal-mask buffers (h.N.attn.bias / masked_bias) and a
// tied lm_head.weight are accepted and ignored. F32, BF16 and F16 tensors are converted to the run's storage
// (the fp32 master copy, or the weights without one). A missing tensor, a wrong shape or dtype, or an unknown
// tensor is a data error naming the file and the tensor.
void load_gpt2_weights(const std::string& path, const ModelSpec& spec, const Gpt2Graph& model,
                       Allocation& memory);

// The shape a parameter has in a Hugging Face file: the embedding without its padding rows, which follow the
// file's rows in the table tensor (so the file's elements are a prefix of the tensor's).
std::vector<int64_t> gpt2_file_shape(const ModelSpec& spec, const TensorDesc& t);

// Writes every parameter (vocabulary padding removed), atomically: the fp32 master copy when there is one,
// else the weights in their own dtype (also under ZeRO, where the master copy is sharded).
void save_gpt2_weights(const std::string& path, const ModelSpec& spec, const Gpt2Graph& model,
                       const Allocation& memory);

}  // namespace mt
