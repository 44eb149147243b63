// A small GPT-2 spec the model tests count by hand: C=64, 4 heads, 64 positions, vocabulary 256 (no padding).
#pragma once

#include <cstdint>
#include <string>

#include "model/spec.h"

namespace mt::testing {

inline ModelSpec small_gpt2_spec(int64_t n_layer) {
  return {.name = "small-gpt2-" + std::to_string(n_layer),
          .n_layer = n_layer,
          .n_head = 4,
          .n_kv_head = 4,
          .n_embd = 64,
          .intermediate_size = 256,
          .n_positions = 64,
          .vocab_size = 256,
          .padded_vocab_size = 256};
}

}  // namespace mt::testing
