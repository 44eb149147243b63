// Hugging Face tensor naming: how a model's parameters appear in a Hugging Face checkpoint (model.safetensors
// and its shards, which memtrain's checkpoints also write): the tensor names, their shapes, and which
// elements of which parameter each one is (a fused parameter is several file tensors; the vocabulary's
// padding rows are in none).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/graph_builder.h"
#include "model/spec.h"

namespace mt {

struct FileTensor {
  std::string name;
  int param = -1;      // the parameter's table id (-1: another pipeline stage's, held_tensors)
  int64_t offset = 0;  // its first element within the whole parameter (a tensor-parallel rank holds a part)
  std::vector<int64_t> shape;  // the whole file tensor's
  int64_t numel() const;
};

// Every tensor the family's checkpoint holds, in Hugging Face order (LoRA adapters are in none).
std::vector<FileTensor> hf_tensors(const ModelSpec& spec, const ModelGraph& model);

// The tensors the optimizer trains, each a range of one parameter: all of hf_tensors without LoRA;
// under LoRA its trainable ones (--lora-train-modules) and the adapters, under their own names and shapes.
std::vector<FileTensor> trainable_tensors(const ModelSpec& spec, const ModelGraph& model);

// The file tensors `tensors` of the whole model `whole` (whole_model) as a rank's graph `model` holds them,
// in the same order: each with the id of model's parameter of the same name, or -1 where model holds none
// (another pipeline stage's tensor) and for `tied_copy` (the last stage's copy of a tied embedding, which the
// first stage writes; -1: none).
std::vector<FileTensor> held_tensors(const std::vector<FileTensor>& tensors, const ModelGraph& whole,
                                     const ModelGraph& model, int tied_copy = -1);

// The name a file tensor is known by in hf_tensors, or nothing for tensors a checkpoint may carry
// and memtrain ignores (GPT-2's causal-mask buffers, a tied lm_head.weight, LLaMA's rotary_emb.inv_freq).
std::optional<std::string> hf_tensor_name(const ModelSpec& spec, const std::string& file_name);

}  // namespace mt
