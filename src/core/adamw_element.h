// AdamW's arithmetic for one element, and the random streams of its stochastic rounding: the part of the
// optimizer step that the CPU's kernels (backend/cpu/adamw_math.h) and the GPU's (backend/cuda/adamw.cu) must
// compute bit for bit alike. MT_HOST_DEVICE, so that nvcc builds it for both sides; every FMA is written out
// (nvcc runs with --fmad=false, and GCC contracts nothing here: see lerp), division and sqrt are IEEE-rounded
// on both.
//
// No namespace and no include guard of its own: include this file inside a namespace that belongs to the
// build compiling it, once per translation unit: the CPU's per-ISA-level namespace mt::kernels::MT_ISA
// (adamw_math.h), the GPU's mt::cuda. Inline functions compiled with different -march flags (or by nvcc) must
// never be one symbol, or the linker would keep one level's body for all (backend/cpu/isa_variant.h).
// Include first, outside the namespace: <cmath>, <cstdint>, core/adamw_step.h, core/half.h, core/rng.h.

// The random stream of master-less bf16 weights' stochastic rounding, and of bf16 moments rounded
// stochastically (one stream each, so that m, v and the weight of an element round independently). Changing
// them changes every run that rounds stochastically.
constexpr uint64_t kStreamWeight = ::mt::hash_name("adamw.weight");
constexpr uint64_t kStreamFirstMoment = ::mt::hash_name("adamw.m");
constexpr uint64_t kStreamSecondMoment = ::mt::hash_name("adamw.v");

// std::fma and std::sqrt on the host (what the CPU's kernels always called: the vectorizer knows them),
// their float functions on the GPU; all four are correctly rounded.
MT_HOST_DEVICE inline float fused_multiply_add(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return fmaf(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
MT_HOST_DEVICE inline float square_root(float x) {
#if defined(__CUDA_ARCH__)
  return sqrtf(x);
#else
  return std::sqrt(x);
#endif
}

// The fused multiply-adds are written out as GCC contracted them in the scalar loop that set the fp32
// results. Left implicit, a vectorized body and its scalar remainder may contract differently, and which
// elements fall in the remainder depends on the thread count.

// torch's lerp: the form with the smaller weight keeps the rounding error small.
MT_HOST_DEVICE inline float lerp(float self, float end, float weight) {
  return weight < 0.5f ? fused_multiply_add(weight, end - self, self)
                       : fused_multiply_add(-(end - self), 1.0f - weight, end);
}

// The per-step scalars. They are Python floats (doubles) in torch, rounded to float where they meet a tensor.
// Computed on the host (the GPU's kernels receive them by value). No contraction can change them: lr and
// weight_decay are floats, so their product is exact in double, and nothing else multiplies into a sum.
struct Coefficients {
  explicit Coefficients(const ::mt::AdamWStep& s) {
    const double lr = s.lr, beta1 = s.beta1, beta2 = s.beta2;
    const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(s.step));
    const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(s.step));
    decay = static_cast<float>(1.0 - lr * s.weight_decay);
    m_weight = static_cast<float>(1.0 - beta1);
    v_keep = s.beta2;
    v_weight = static_cast<float>(1.0 - beta2);
    neg_step_size = static_cast<float>(-(lr / bias_correction1));
    bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
    eps = s.eps;
    grad_multiplier = s.grad_multiplier;
  }
  float decay, m_weight, v_keep, v_weight, neg_step_size, bias_correction2_sqrt, eps, grad_multiplier;
};

// One element's step: the new moments (before any rounding for storage: the step uses these) and weight.
struct ElementStep {
  float m, v, weight;
};
// The step from the new second moment vi (the element's own, or its Adam-mini block's) and the unscaled g.
MT_HOST_DEVICE inline ElementStep adam_element(float weight, float g, float m, float vi,
                                               const Coefficients& c) {
  const float p = weight * c.decay;
  const float mi = lerp(m, g, c.m_weight);
  const float denom = square_root(vi) / c.bias_correction2_sqrt + c.eps;
  return {mi, vi, fused_multiply_add(c.neg_step_size, mi / denom, p)};
}
MT_HOST_DEVICE inline ElementStep adamw_element(float weight, float grad, float m, float v,
                                                const Coefficients& c) {
  const float g = grad * c.grad_multiplier;
  return adam_element(weight, g, m, fused_multiply_add(v, c.v_keep, c.v_weight * g * g), c);
}

// x rounded to bf16 stochastically with the bits of element `at` (its index in the whole parameter buffer)
// of `stream`: a function of the element, never of the thread that handles it.
MT_HOST_DEVICE inline ::mt::bf16 round_stochastically(float x, uint64_t seed, uint64_t stream, uint64_t at) {
  return ::mt::stochastic_round(x, static_cast<uint32_t>(::mt::random_bits(seed, stream, at)));
}

// A 16-bit or fp32 moment stored: nearest even, or (bf16 only) stochastically.
template <bool kStochastic, typename M>
MT_HOST_DEVICE inline M round_moment(float x, uint64_t seed, uint64_t stream, uint64_t at) {
  if constexpr (kStochastic) {
    return round_stochastically(x, seed, stream, at);
  } else {
    return ::mt::round_to<M>(x);
  }
}

// Where the updated weight comes from and goes to.
enum class Weights {
  in_place,    // fp32 param, read and written
  master,      // read from the fp32 master; written to it and, rounded to nearest, to param
  stochastic,  // bf16 param, read and written with stochastic rounding (no master copy)
};

template <Weights kWeights, typename P>
MT_HOST_DEVICE inline float load_weight(const float* master, const P* param, int64_t i) {
  return kWeights == Weights::master ? master[i] : ::mt::to_f32(param[i]);
}

// `at` is the element's index in the whole parameter buffer: the stochastic rounding's bits follow it.
template <Weights kWeights, typename P>
MT_HOST_DEVICE inline void store_weight(float* master, P* param, int64_t i, float w, uint64_t seed,
                                        uint64_t at) {
  if constexpr (kWeights == Weights::master) {
    master[i] = w;
    param[i] = ::mt::round_to<P>(w);
  } else if constexpr (kWeights == Weights::stochastic) {
    param[i] = round_stochastically(w, seed, kStreamWeight, at);
  } else {
    param[i] = w;
  }
}
