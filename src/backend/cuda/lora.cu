// LoRA on the GPU: the CPU's sequence of products and element-wise passes (backend/cpu/lora.cpp), with the
// same roundings: the scaling rounds the product once more in 16-bit storage, and the input gradient's
// dropout is rounded to T before it is added (the CPU's apply_dropout then add_into, fused here into one
// pass that leaves `dropped` holding g @ a). Element-wise kernels move 16 bytes at a time when the operands
// are 16-byte aligned.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/lora.cuh"
#include "backend/cuda/matmul.cuh"
#include "core/rng.h"

namespace mt::cuda {

namespace {

// core/rng.h's random_uniform (a host-only function) with the same math: the same double for the same
// counter, so the GPU keeps exactly the elements the CPU keeps.
__device__ inline double random_uniform_device(uint64_t seed, uint64_t stream, uint64_t index) {
  return (static_cast<double>(random_bits(seed, stream, index) >> 11) + 0.5) * 0x1.0p-53;
}

// The CPU's apply_dropout for element e of an n-element tensor: kept when its uniform is at least p.
struct KeepRule {
  float p, keep_scale;
  uint64_t seed, stream, first;
  __device__ float apply(int64_t e, float x) const {
    const bool keep = random_uniform_device(seed, stream, first + static_cast<uint64_t>(e)) >= p;
    return keep ? x * keep_scale : 0.0f;
  }
};

KeepRule keep_rule(const DropoutMask& m, int64_t n) {
  return {.p = m.p,
          .keep_scale = 1.0f / (1.0f - m.p),
          .seed = m.seed,
          .stream = m.stream,
          .first = m.first_sample * static_cast<uint64_t>(n / m.samples)};
}

// x * scale, rounded to T.
template <typename T>
struct Scale {
  float scale;
  __device__ T operator()(int64_t, T, T x) const { return round_to<T>(to_f32(x) * scale); }
};
// dropout(x), rounded to T.
template <typename T>
struct Dropout {
  KeepRule rule;
  __device__ T operator()(int64_t e, T, T x) const { return round_to<T>(rule.apply(e, to_f32(x))); }
};
// dst + dropout(g), the dropout rounded to T first (as the CPU stores it before adding).
template <typename T>
struct AddDropout {
  KeepRule rule;
  __device__ T operator()(int64_t e, T dst, T g) const {
    return round_to<T>(to_f32(dst) + to_f32(round_to<T>(rule.apply(e, to_f32(g)))));
  }
};

template <typename T, int kWidth>
struct alignas(sizeof(T) * kWidth) Pack {
  T v[kWidth];
};

// dst[e] = op(e, dst[e], src[e]) for e < n, kWidth elements at a time, then the tail. dst may be src.
template <bool kReadDst, int kWidth, typename T, typename Op>
__global__ void elementwise_kernel(T* dst, const T* src, int64_t n, Op op) {
  using V = Pack<T, kWidth>;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x,
                first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t packs = n / kWidth;
  for (int64_t k = first; k < packs; k += stride) {
    const V s = reinterpret_cast<const V*>(src)[k];
    V d = s;
    if constexpr (kReadDst) d = reinterpret_cast<const V*>(dst)[k];
#pragma unroll
    for (int c = 0; c < kWidth; ++c) d.v[c] = op(k * kWidth + c, d.v[c], s.v[c]);
    reinterpret_cast<V*>(dst)[k] = d;
  }
  for (int64_t e = packs * kWidth + first; e < n; e += stride)
    dst[e] = op(e, kReadDst ? dst[e] : src[e], src[e]);
}

template <bool kReadDst, typename T, typename Op>
void elementwise(T* dst, const T* src, int64_t n, Op op, cudaStream_t stream, const char* what) {
  if (n == 0) return;
  constexpr int threads = 256, width = 16 / sizeof(T);
  const bool aligned =
      reinterpret_cast<uintptr_t>(dst) % 16 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0;
  const int64_t items = aligned ? (n + width - 1) / width : n;
  const int blocks = static_cast<int>(std::clamp<int64_t>((items + threads - 1) / threads, 1, 8192));
  if (aligned)
    elementwise_kernel<kReadDst, width><<<blocks, threads, 0, stream>>>(dst, src, n, op);
  else
    elementwise_kernel<kReadDst, 1><<<blocks, threads, 0, stream>>>(dst, src, n, op);
  check_launch(what);
}

template <typename T>
void require_dropped(const T* dropped, const DropoutMask& mask, const char* what) {
  if (mask.p > 0 && !dropped)
    throw std::logic_error(std::string("cuda backend: ") + what + ": dropout without its `dropped` buffer");
}

}  // namespace

template <typename T>
void lora_forward(cublasLtHandle_t lt, T* out, T* hidden, const T* inp, const T* a, const T* b,
                  const LoraShape& s, const DropoutMask& mask, T* dropped, float* workspace,
                  int64_t workspace_bytes, cudaStream_t stream) {
  require_dropped(dropped, mask, "lora_forward");
  const T* x = inp;
  if (mask.p > 0) {
    const int64_t n = s.M * s.in;
    elementwise<false>(dropped, inp, n, Dropout<T>{keep_rule(mask, n)}, stream, "lora_forward: dropout");
    x = dropped;
  }
  gemm(lt, false, true, s.M, s.rank, s.in, x, s.in, a, s.in, 0.0f, hidden, s.rank, workspace, workspace_bytes,
       stream);
  elementwise<false>(hidden, hidden, s.M * s.rank, Scale<T>{s.scale}, stream, "lora_forward: scale");
  gemm(lt, false, true, s.M, s.width, s.rank, hidden, s.rank, b, s.rank, 1.0f, out + s.column, s.out_stride,
       workspace, workspace_bytes, stream);
}

template <typename T, typename G>
void lora_backward(cublasLtHandle_t lt, T* dinp, G* da, G* db, T* grad_hidden, const T* dout, const T* inp,
                   const T* hidden, const T* a, const T* b, const LoraShape& s, const DropoutMask& mask,
                   T* dropped, float* workspace, int64_t workspace_bytes, cudaStream_t stream) {
  require_dropped(dropped, mask, "lora_backward");
  const T* dy = dout + s.column;
  const int64_t n = s.M * s.in;
  if (db)
    gemm(lt, true, false, s.width, s.rank, s.M, dy, s.out_stride, hidden, s.rank, 1.0f, db, s.rank, workspace,
         workspace_bytes, stream);
  gemm(lt, false, false, s.M, s.rank, s.width, dy, s.out_stride, b, s.rank, 0.0f, grad_hidden, s.rank,
       workspace, workspace_bytes, stream);
  elementwise<false>(grad_hidden, grad_hidden, s.M * s.rank, Scale<T>{s.scale}, stream,
                     "lora_backward: scale");
  if (mask.p <= 0) {
    if (da)
      gemm(lt, true, false, s.rank, s.in, s.M, grad_hidden, s.rank, inp, s.in, 1.0f, da, s.in, workspace,
           workspace_bytes, stream);
    gemm(lt, false, false, s.M, s.in, s.rank, grad_hidden, s.rank, a, s.in, 1.0f, dinp, s.in, workspace,
         workspace_bytes, stream);
    return;
  }
  const KeepRule rule = keep_rule(mask, n);
  elementwise<false>(dropped, inp, n, Dropout<T>{rule}, stream, "lora_backward: dropout");
  if (da)
    gemm(lt, true, false, s.rank, s.in, s.M, grad_hidden, s.rank, dropped, s.in, 1.0f, da, s.in, workspace,
         workspace_bytes, stream);
  gemm(lt, false, false, s.M, s.in, s.rank, grad_hidden, s.rank, a, s.in, 0.0f, dropped, s.in, workspace,
       workspace_bytes, stream);
  // The input's gradient passes the kept elements, scaled.
  elementwise<true>(dinp, static_cast<const T*>(dropped), n, AddDropout<T>{rule}, stream,
                    "lora_backward: dropout");
}

#define MT_LORA_FORWARD(T)                                                                                \
  template void lora_forward<T>(cublasLtHandle_t, T*, T*, const T*, const T*, const T*, const LoraShape&, \
                                const DropoutMask&, T*, float*, int64_t, cudaStream_t);
MT_LORA_FORWARD(float)
MT_LORA_FORWARD(bf16)
MT_LORA_FORWARD(f16)
#undef MT_LORA_FORWARD

#define MT_LORA_BACKWARD(T, G)                                                                            \
  template void lora_backward<T, G>(cublasLtHandle_t, T*, G*, G*, T*, const T*, const T*, const T*,       \
                                    const T*, const T*, const LoraShape&, const DropoutMask&, T*, float*, \
                                    int64_t, cudaStream_t);
MT_LORA_BACKWARD(float, float)
MT_LORA_BACKWARD(bf16, float)
MT_LORA_BACKWARD(bf16, bf16)
MT_LORA_BACKWARD(f16, float)
#undef MT_LORA_BACKWARD

}  // namespace mt::cuda
