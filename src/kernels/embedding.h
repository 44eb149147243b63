// Token + learned position embedding.
#pragma once

#include <cstdint>

namespace mt::kernels {

// out[B,T,C] = wte[tokens[b,t]] + wpe[t].
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B,
                       int64_t T, int64_t C);

// dwte[tokens[b,t]] += dout[b,t]; dwpe[t] += dout[b,t]. Deterministic: repeated tokens are summed in (b,t)
// order whatever the thread count.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                        int64_t T, int64_t C);

}  // namespace mt::kernels
