// Only products of the public gemm (which picks its own ISA level) and elementwise passes (scaling, dropout):
// nothing here differs between the levels, so the generic build alone defines these entry points.
#include "backend/cpu/lora.h"

#include "backend/cpu/matmul.h"
#include "core/rng.h"

namespace mt::kernels {

#ifdef MEMTRAIN_KERNEL_ENTRY_POINTS
namespace {

// The scaling rounds once more in 16-bit storage; fp32 runs are exact up to fp32's own rounding.
template <typename T>
void scale_in_place(T* x, int64_t n, float scale) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) x[i] = round_to<T>(to_f32(x[i]) * scale);
}

// dst = dropout(src) under the mask (src may be dst).
template <typename T>
void apply_dropout(T* dst, const T* src, int64_t n, const DropoutMask& m) {
  const float keep_scale = 1.0f / (1.0f - m.p);
  const uint64_t first = m.first_sample * static_cast<uint64_t>(n / m.samples);
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = random_uniform(m.seed, m.stream, first + static_cast<uint64_t>(i)) >= m.p;
    dst[i] = round_to<T>(keep ? to_f32(src[i]) * keep_scale : 0.0f);
  }
}

template <typename T>
void add_into(T* dst, const T* src, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) dst[i] = round_to<T>(to_f32(dst[i]) + to_f32(src[i]));
}

}  // namespace

template <typename T>
void lora_forward(T* out, T* hidden, const T* inp, const T* a, const T* b, const LoraShape& s,
                  const DropoutMask& mask, T* dropped, float* scratch) {
  const T* x = inp;
  if (mask.p > 0) {
    apply_dropout(dropped, inp, s.M * s.in, mask);
    x = dropped;
  }
  gemm(false, true, s.M, s.rank, s.in, x, s.in, a, s.in, 0.0f, hidden, s.rank, scratch);
  scale_in_place(hidden, s.M * s.rank, s.scale);
  gemm(false, true, s.M, s.width, s.rank, hidden, s.rank, b, s.rank, 1.0f, out + s.column, s.out_stride,
       scratch);
}

template <typename T, typename G>
void lora_backward(T* dinp, G* da, G* db, T* grad_hidden, const T* dout, const T* inp, const T* hidden,
                   const T* a, const T* b, const LoraShape& s, const DropoutMask& mask, T* dropped,
                   float* scratch) {
  const T* dy = dout + s.column;
  const int64_t n = s.M * s.in;
  gemm(true, false, s.width, s.rank, s.M, dy, s.out_stride, hidden, s.rank, 1.0f, db, s.rank, scratch);
  gemm(false, false, s.M, s.rank, s.width, dy, s.out_stride, b, s.rank, 0.0f, grad_hidden, s.rank, scratch);
  scale_in_place(grad_hidden, s.M * s.rank, s.scale);
  if (mask.p <= 0) {
    gemm(true, false, s.rank, s.in, s.M, grad_hidden, s.rank, inp, s.in, 1.0f, da, s.in, scratch);
    gemm(false, false, s.M, s.in, s.rank, grad_hidden, s.rank, a, s.in, 1.0f, dinp, s.in, scratch);
    return;
  }
  apply_dropout(dropped, inp, n, mask);
  gemm(true, false, s.rank, s.in, s.M, grad_hidden, s.rank, dropped, s.in, 1.0f, da, s.in, scratch);
  gemm(false, false, s.M, s.in, s.rank, grad_hidden, s.rank, a, s.in, 0.0f, dropped, s.in, scratch);
  apply_dropout(dropped, dropped, n, mask);  // the input's gradient passes the kept elements, scaled
  add_into(dinp, dropped, n);
}

template void lora_forward<float>(float*, float*, const float*, const float*, const float*, const LoraShape&,
                                  const DropoutMask&, float*, float*);
template void lora_forward<bf16>(bf16*, bf16*, const bf16*, const bf16*, const bf16*, const LoraShape&,
                                 const DropoutMask&, bf16*, float*);
template void lora_forward<f16>(f16*, f16*, const f16*, const f16*, const f16*, const LoraShape&,
                                const DropoutMask&, f16*, float*);
template void lora_backward<float, float>(float*, float*, float*, float*, const float*, const float*,
                                          const float*, const float*, const float*, const LoraShape&,
                                          const DropoutMask&, float*, float*);
template void lora_backward<bf16, float>(bf16*, float*, float*, bf16*, const bf16*, const bf16*, const bf16*,
                                         const bf16*, const bf16*, const LoraShape&, const DropoutMask&,
                                         bf16*, float*);
template void lora_backward<bf16, bf16>(bf16*, bf16*, bf16*, bf16*, const bf16*, const bf16*, const bf16*,
                                        const bf16*, const bf16*, const LoraShape&, const DropoutMask&, bf16*,
                                        float*);
template void lora_backward<f16, float>(f16*, float*, float*, f16*, const f16*, const f16*, const f16*,
                                        const f16*, const f16*, const LoraShape&, const DropoutMask&, f16*,
                                        float*);
#endif

}  // namespace mt::kernels
