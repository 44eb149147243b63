#include "backend/cpu/lm_head.h"

#include <type_traits>

#include "backend/cpu/convert.h"
#include "backend/cpu/cross_entropy.h"
#include "backend/cpu/isa_variant.h"
#include "backend/cpu/matmul.h"
#include "core/half.h"

namespace mt::kernels {

namespace MT_ISA {

template <typename T, typename G>
void lm_head_loss_chunk(const LmHeadChunk<T, G>& c) {
  const bool training = c.dx != nullptr;
  gemm(false, true, c.rows, c.Vp, c.C, c.x, c.C, c.wte, c.C, 0.0f, c.logits, c.Vp, c.matmul_scratch);
  if (c.split)
    softmax_cross_entropy_split(c.logits, c.losses, c.targets, c.loss_mask, c.rows, c.V, c.Vp, training,
                                c.grad_scale, *c.split);
  else
    softmax_cross_entropy(c.logits, c.losses, c.targets, c.loss_mask, c.rows, c.V, c.Vp, training,
                          c.grad_scale);
  if (!training) return;
  const T* dlogits;
  if constexpr (std::is_same_v<T, float>) {
    dlogits = c.logits;
  } else {
    convert(c.dlogits, c.logits, c.rows * c.Vp);
    dlogits = c.dlogits;
  }
  gemm(false, false, c.rows, c.C, c.Vp, dlogits, c.Vp, c.wte, c.C, 0.0f, c.dx, c.C, c.matmul_scratch);
  if (c.dwte)
    gemm(true, false, c.Vp, c.C, c.rows, dlogits, c.Vp, c.x, c.C, 1.0f, c.dwte, c.C, c.matmul_scratch);
}

}  // namespace MT_ISA

#ifdef MEMTRAIN_KERNEL_ENTRY_POINTS
template <typename T, typename G>
void lm_head_loss_chunk(const LmHeadChunk<T, G>& c) {
  dispatch<&lm_head_loss_chunk<T, G>>(c);
}

template void lm_head_loss_chunk<float, float>(const LmHeadChunk<float, float>&);
template void lm_head_loss_chunk<bf16, float>(const LmHeadChunk<bf16, float>&);
template void lm_head_loss_chunk<bf16, bf16>(const LmHeadChunk<bf16, bf16>&);
template void lm_head_loss_chunk<f16, float>(const LmHeadChunk<f16, float>&);
#endif

namespace MT_ISA {
// Enrolled at start-up; the helpers are this file's own (other files have their namesakes).
namespace {
const bool enrolled = enroll<&kernels::lm_head_loss_chunk<float, float>>(lm_head_loss_chunk) &&
                      enroll<&kernels::lm_head_loss_chunk<bf16, float>>(lm_head_loss_chunk) &&
                      enroll<&kernels::lm_head_loss_chunk<bf16, bf16>>(lm_head_loss_chunk) &&
                      enroll<&kernels::lm_head_loss_chunk<f16, float>>(lm_head_loss_chunk);
}  // namespace
}  // namespace MT_ISA

}  // namespace mt::kernels
