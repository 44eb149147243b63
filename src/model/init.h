// Parameter initialisation shared by the models: each parameter starts as a constant or as N(0, stddev) or
// uniform draws that are a pure function of (seed, tensor name hash, element index), in the weights and in
// this rank's part of the fp32 master copy (a frozen weight has none). LoRA's adapters follow PEFT, whatever
// the family's rule: A Kaiming-uniform, B zero.
#pragma once

#include <cstdint>
#include <functional>

#include "memory/allocation.h"
#include "model/graph_builder.h"

namespace mt {

struct InitRule {
  float constant = 0.0f;  // the value when stddev and uniform_bound are 0
  float stddev = 0.0f;
  int64_t drawn = 0;           // elements drawn (the first ones); the rest, vocabulary padding, stay zero
  float uniform_bound = 0.0f;  // > 0: U(-bound, bound) draws instead (LoRA's A)
};

void init_params(const ModelGraph& model, Allocation& memory, uint64_t seed,
                 const std::function<InitRule(const TensorDesc&)>& rule);

// LoRA's adapters alone, for a base loaded from a file.
void init_adapters(const ModelGraph& model, Allocation& memory, uint64_t seed);

// Elements [first, first + n) of parameter t's initial value under `rule`, in fp32: what init_params stores
// before rounding to the weights' dtype.
void initial_values(const TensorDesc& t, const InitRule& rule, uint64_t seed, int64_t first, int64_t n,
                    float* dst);

}  // namespace mt
