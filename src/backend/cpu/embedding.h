// Token embedding, plus a learned position embedding (GPT-2) when wpe is given (LLaMA has none: null).
#pragma once

#include <cstdint>
#include <limits>

#include "core/half.h"
#include "exec/op_shapes.h"

namespace mt::kernels {

// out[B,T,C] = wte[tokens[b,t]] + wpe[p], p = positions[b,t] (packed sequences: the position in the token's
// record) or, with positions null, t. A token whose row wte does not hold (`vocab`) contributes zeros.
// T is the storage type of weights and activations (float, bf16 or f16), G that of gradients (float or bf16).
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const int32_t* positions, const T* wte, const T* wpe,
                       int64_t B, int64_t T_len, int64_t C, VocabRows vocab = {});

// dwte[tokens[b,t]] += dout[b,t] (the rows `vocab` holds); dwpe[p] += dout[b,t]. Deterministic: repeated
// tokens are summed in (b,t) order whatever the thread count. fp32 gradients accumulate in place. A bf16
// gradient row is accumulated in fp32, starting from its stored value, and rounded once per call; finding a
// token's rows for that scans the B*T tokens once per distinct token.
template <typename T, typename G>
void embedding_backward(G* dwte, G* dwpe, const T* dout, const int32_t* tokens, const int32_t* positions,
                        int64_t B, int64_t T_len, int64_t C, VocabRows vocab = {});

}  // namespace mt::kernels
