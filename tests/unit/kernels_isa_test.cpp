// Every kernel at every ISA level this CPU supports (capped by MEMTRAIN_MAX_ISA) against the generic level,
// on the same inputs: each case runs its kernels and returns their outputs as floats. The levels differ in
// vector width and FMA contraction, so fp32 results agree to rounding, 16-bit ones to a unit of their last
// place; conversions, the embedding's copies and AdamW with 8-bit moments agree bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/activation.h"
#include "backend/cpu/adamw.h"
#include "backend/cpu/adamw_8bit.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/block_quant.h"
#include "backend/cpu/convert.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/cross_entropy.h"
#include "backend/cpu/dynamic_map.h"
#include "backend/cpu/embedding.h"
#include "backend/cpu/layernorm.h"
#include "backend/cpu/lm_head.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/rope.h"
#include "core/error.h"
#include "kernels_test_util.h"

namespace mt::kernels {
namespace {

using testing::random_floats;
using testing::to_float;
using testing::to_storage;

struct IsaCase {
  std::string name;
  double rtol, atol;  // 0, 0: bit for bit
  std::function<std::vector<float>()> run;
};

template <typename T>
std::vector<T> random_stored(int64_t n, uint64_t stream, double stddev = 1.0) {
  return to_storage<T>(random_floats(n, stream, stddev));
}

template <typename T>
void append(std::vector<float>& out, const std::vector<T>& x) {
  const std::vector<float> f = to_float(x);
  out.insert(out.end(), f.begin(), f.end());
}

// 16-bit outputs: a unit in the last place of bf16 (2^-8 relative), twice for results of several roundings.
template <typename T>
double rtol_of() {
  return std::is_same_v<T, float> ? 2e-5 : 2.0 / 256;
}

template <typename T>
IsaCase elementwise_case() {
  return {std::string("elementwise ") + std::string(dtype_name(dtype_of<T>())), rtol_of<T>(), 1e-6, [] {
            const int64_t M = 37, I = 96, n = M * 2 * I;
            const auto x = random_stored<T>(n, 1, 2.0), dy = random_stored<T>(n, 2);
            std::vector<T> y(n), dx(n), s(M * I), ds(n);
            gelu_forward(y.data(), x.data(), n);
            gelu_backward(dx.data(), x.data(), dy.data(), n);
            swiglu_forward(s.data(), x.data(), M, I);
            swiglu_backward(ds.data(), x.data(), dy.data(), M, I);
            std::vector<float> out;
            for (const auto* v : {&y, &dx, &s, &ds}) append(out, *v);
            return out;
          }};
}

template <typename T, typename G>
IsaCase norm_case() {
  return {std::string("norms ") + std::string(dtype_name(dtype_of<T>())), rtol_of<T>(), 1e-5, [] {
            const int64_t N = 29, C = 200;
            const auto x = random_stored<T>(N * C, 3), w = random_stored<T>(C, 4), b = random_stored<T>(C, 5);
            const auto dy = random_stored<T>(N * C, 6);
            std::vector<T> y(N * C), dx(N * C), ry(N * C), rdx(N * C);
            std::vector<G> dw(C), db(C), rdw(C);
            std::vector<float> mean(N), rstd(N), rrstd(N);
            layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
            layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                               rstd.data(), N, C);
            rmsnorm_forward(ry.data(), rrstd.data(), x.data(), w.data(), N, C, 1e-5f);
            rmsnorm_backward(rdx.data(), rdw.data(), dy.data(), x.data(), w.data(), rrstd.data(), N, C);
            std::vector<float> out;
            for (const auto* v : {&y, &dx, &ry, &rdx}) append(out, *v);
            for (const auto* v : {&dw, &db, &rdw}) append(out, *v);
            return out;
          }};
}

template <typename T>
IsaCase attention_case() {
  return {std::string("attention and rope ") + std::string(dtype_name(dtype_of<T>())), rtol_of<T>(), 1e-4,
          [] {
            const int64_t B = 2, T_len = 70, C = 64, NH = 4, NKV = 2;
            const QkvLayout layout(C, NH, NKV);
            auto qkv = random_stored<T>(B * T_len * layout.row(), 7);
            rope_forward(qkv.data(), nullptr, B, T_len, layout, 10000.0f);
            const auto dout = random_stored<T>(B * T_len * C, 8);
            std::vector<T> out(B * T_len * C), dqkv(qkv.size());
            std::vector<float> lse(B * NH * T_len);
            std::vector<float> scratch(attention_scratch_floats(T_len, C / NH, 2, dtype_of<T>()));
            testing::with_threads(2, [&] {
              attention_forward(out.data(), lse.data(), qkv.data(), nullptr, B, T_len, C, NH, NKV,
                                scratch.data());
              attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), nullptr, B,
                                 T_len, C, NH, NKV, scratch.data());
            });
            rope_backward(dqkv.data(), nullptr, B, T_len, layout, 10000.0f);
            std::vector<float> result;
            for (const auto* v : {&qkv, &out, &dqkv}) append(result, *v);
            return result;
          }};
}

template <typename T, typename G>
IsaCase linear_case() {
  return {std::string("linear and lm head ") + std::string(dtype_name(dtype_of<T>())), rtol_of<T>(), 1e-4,
          [] {
            const int64_t M = 67, n_in = 48, n_out = 80, V = 90, Vp = 96;
            const auto x = random_stored<T>(M * n_in, 9), w = random_stored<T>(n_in * n_out, 10, 0.2);
            const auto b = random_stored<T>(n_out, 11), dy = random_stored<T>(M * n_out, 12);
            std::vector<float> scratch(gemm_scratch_floats(dtype_of<T>(), cpu_isa(), omp_get_max_threads()));
            std::vector<T> y(M * n_out), dx(M * n_in);
            std::vector<G> dw(n_in * n_out), db(n_out);
            linear_forward(y.data(), x.data(), w.data(), b.data(), M, n_in, n_out, false, scratch.data());
            linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), M, n_in, n_out,
                            false, scratch.data());
            // The head over the layer's output, as the executor runs it.
            const auto wte = random_stored<T>(Vp * n_out, 13, 0.2);
            std::vector<int32_t> targets(M);
            for (int64_t i = 0; i < M; ++i) targets[i] = static_cast<int32_t>((i * 37) % V);
            std::vector<float> logits(M * Vp), losses(M);
            std::vector<T> dlogits(std::is_same_v<T, float> ? 0 : M * Vp), dh(M * n_out);
            std::vector<G> dwte(Vp * n_out);
            lm_head_loss_chunk<T, G>({y.data(), wte.data(), targets.data(), nullptr, logits.data(),
                                      dlogits.empty() ? nullptr : dlogits.data(), losses.data(), dh.data(),
                                      dwte.data(), scratch.empty() ? nullptr : scratch.data(), M, n_out, V,
                                      Vp, 1.0f / M});
            std::vector<float> out;
            for (const auto* v : {&y, &dx, &dh}) append(out, *v);
            for (const auto* v : {&dw, &db, &dwte}) append(out, *v);
            out.insert(out.end(), losses.begin(), losses.end());
            return out;
          }};
}

template <typename P, typename M>
IsaCase adamw_case() {
  return {std::string("adamw ") + std::string(dtype_name(dtype_of<P>())) + " moments " +
              std::string(dtype_name(dtype_of<M>())),
          rtol_of<M>(), 1e-7, [] {
            const int64_t n = 5000;
            std::vector<float> master = random_floats(n, 14);
            std::vector<P> param = to_storage<P>(master);
            const auto grad = random_floats(n, 15);
            std::vector<M> m = random_stored<M>(n, 16, 0.1), v = to_storage<M>(random_floats(n, 17, 0.1));
            for (M& x : v) x = round_to<M>(std::abs(to_f32(x)));
            const AdamWStep s{
                .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .step = 3};
            adamw_update<P, float, M>(master.data(), param.data(), grad.data(), m.data(), v.data(), n, s, {});
            std::vector<float> out = master;
            for (const auto* x : {&m, &v}) append(out, *x);
            out.push_back(static_cast<float>(sum_of_squares(grad.data(), n)));
            return out;
          }};
}

// 8-bit moments round each block to codes, so a difference in the last bit of an fp32 step could move a
// code: every level must compute the same fp32 bits, and these cases compare bit for bit (bytes as floats).
template <typename P>
IsaCase adamw_8bit_case(MomentFormat f) {
  return {std::string("adamw 8-bit ") + std::string(dtype_name(dtype_of<P>())) +
              (f == MomentFormat::int8 ? " int8" : " fp8"),
          0, 0, [f] {
            const int64_t n = 2 * kInt8MomentBlock + 1001;
            const MomentCodec mc = first_moment_codec(f), vc = second_moment_codec(f);
            std::vector<float> master = random_floats(n, 14), m = random_floats(n, 16, 1e-3), v(n);
            for (int64_t i = 0; i < n; ++i) v[i] = m[(i * 7) % n] * m[(i * 7) % n];
            std::vector<P> param = to_storage<P>(master);
            const auto grad = random_stored<bf16>(n, 15, 1e-2);
            std::vector<uint8_t> m_codes(n), v_codes(n);
            std::vector<float> m_scales(moment_block_count(mc, n)), v_scales(moment_block_count(vc, n));
            quantize_blocks(mc, m.data(), n, m_codes.data(), m_scales.data());
            quantize_blocks(vc, v.data(), n, v_codes.data(), v_scales.data());
            const std::vector<DecayRun> runs = {{0, true}, {2100, false}, {2200, true}};
            for (int64_t t = 1; t <= 3; ++t) {
              const AdamWStep s{
                  .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .step = t};
              adamw_update_8bit<P, bf16>(
                  master.data(), param.data(), grad.data(),
                  {f, m_codes.data(), m_scales.data(), v_codes.data(), v_scales.data()}, n, s, runs, {});
            }
            std::vector<float> out = master;
            append(out, param);
            for (const auto* codes : {&m_codes, &v_codes})
              for (uint8_t c : *codes) out.push_back(c);
            out.insert(out.end(), m_scales.begin(), m_scales.end());
            out.insert(out.end(), v_scales.begin(), v_scales.end());
            return out;
          }};
}

// The 8-bit codes' edges, which random moments rarely hit: every threshold of the map and the floats either
// side of it, both signs, zeros and subnormals (block 0, whose absmax 1 makes each quotient the value
// itself); a block with an infinity, whose quotients are NaN or zero (block 1); and every byte read back.
IsaCase moment_codes_case(MomentCodec c) {
  return {std::string("moment codes ") + std::to_string(static_cast<int>(c)), 0, 0, [c] {
            const int64_t block = moment_block_size(c), n = 2 * kInt8MomentBlock + 300;
            std::vector<float> x = random_floats(n, 19, 0.3);
            std::vector<float> edges = {1.0f, 0.0f, -0.0f, 1e-45f, -1e-45f, 3e-8f, -3e-8f};
            const auto& map =
                c == MomentCodec::dynamic_signed ? signed_dynamic_map() : unsigned_dynamic_map();
            for (float t : map.threshold)
              for (float e : {t, std::nextafter(t, -2.0f), std::nextafter(t, 2.0f)})
                edges.insert(edges.end(), {e, -e});
            std::copy(edges.begin(), edges.end(), x.begin());  // 1.0 first: the first block's absmax
            x[kInt8MomentBlock + 5] = std::numeric_limits<float>::infinity();
            x[kInt8MomentBlock + 6] = -std::numeric_limits<float>::infinity();
            std::vector<uint8_t> codes(n);
            std::vector<float> scales(moment_block_count(c, n));
            quantize_blocks(c, x.data(), n, codes.data(), scales.data());
            std::vector<uint8_t> every_byte(n);
            for (int64_t i = 0; i < n; ++i) every_byte[i] = static_cast<uint8_t>(i * 7);
            std::vector<float> back(n), scales_back(scales.size());
            for (size_t b = 0; b < scales.size(); ++b) scales_back[b] = 0.37f + static_cast<float>(b % block);
            dequantize_blocks(c, every_byte.data(), scales_back.data(), n, back.data());
            std::vector<float> out(codes.begin(), codes.end());
            out.insert(out.end(), scales.begin(), scales.end());
            out.insert(out.end(), back.begin(), back.end());
            return out;
          }};
}

template <typename T>
IsaCase convert_case() {
  return {std::string("convert and embedding ") + std::string(dtype_name(dtype_of<T>())), 0, 0, [] {
            const int64_t B = 3, T_len = 50, C = 40, V = 64;
            std::vector<float> x = random_floats(V * C, 18, 3.0);
            x[5] = 1e-40f;  // fp32 subnormals among normal values, which the bf16 instructions flush
            x[77] = -3e-39f;
            std::vector<T> wte(x.size());
            convert(wte.data(), x.data(), static_cast<int64_t>(x.size()));
            std::vector<float> back(x.size());
            convert(back.data(), wte.data(), static_cast<int64_t>(x.size()));
            std::vector<int32_t> tokens(B * T_len);
            for (int64_t i = 0; i < B * T_len; ++i) tokens[i] = static_cast<int32_t>((i * 11) % V);
            std::vector<T> emb(B * T_len * C);
            embedding_forward<T>(emb.data(), tokens.data(), nullptr, wte.data(), nullptr, B, T_len, C);
            std::vector<float> out = back;
            append(out, emb);
            return out;
          }};
}

std::vector<IsaCase> all_cases() {
  std::vector<IsaCase> cases = {
      elementwise_case<float>(),   elementwise_case<bf16>(),  elementwise_case<f16>(),
      norm_case<float, float>(),   norm_case<bf16, bf16>(),   norm_case<f16, float>(),
      attention_case<float>(),     attention_case<bf16>(),    attention_case<f16>(),
      linear_case<float, float>(), linear_case<bf16, bf16>(), linear_case<f16, float>(),
      adamw_case<float, float>(),  adamw_case<bf16, bf16>(),  convert_case<bf16>(),
      convert_case<f16>(),         convert_case<float>()};
  for (MomentCodec c : {MomentCodec::dynamic_signed, MomentCodec::dynamic_unsigned, MomentCodec::e4m3})
    cases.push_back(moment_codes_case(c));
  for (MomentFormat f : {MomentFormat::int8, MomentFormat::fp8}) {
    cases.push_back(adamw_8bit_case<float>(f));
    cases.push_back(adamw_8bit_case<bf16>(f));
  }
  return cases;
}

// The levels to compare: every one from generic up to the active level.
std::vector<CpuIsa> levels_to_test() {
  std::vector<CpuIsa> levels;
  for (int i = 0; i <= static_cast<int>(cpu_isa()); ++i) levels.push_back(static_cast<CpuIsa>(i));
  return levels;
}

// Runs f with the kernels at `isa`, then restores the level.
std::vector<float> at_level(CpuIsa isa, const std::function<std::vector<float>()>& f) {
  const CpuIsa saved = cpu_isa();
  set_cpu_isa(isa);
  std::vector<float> out = f();
  set_cpu_isa(saved);
  return out;
}

TEST(KernelIsa, EveryLevelMatchesGeneric) {
  for (const IsaCase& c : all_cases()) {
    const std::vector<float> generic = at_level(CpuIsa::generic, c.run);
    for (CpuIsa isa : levels_to_test()) {
      SCOPED_TRACE(c.name + " at " + std::string(cpu_isa_name(isa)));
      const std::vector<float> actual = at_level(isa, c.run);
      ASSERT_EQ(actual.size(), generic.size());
      for (size_t i = 0; i < actual.size(); ++i) {
        if (std::isnan(generic[i])) {
          ASSERT_TRUE(std::isnan(actual[i])) << "at " << i;
        } else if (c.rtol == 0 && c.atol == 0) {
          ASSERT_EQ(std::bit_cast<uint32_t>(actual[i]), std::bit_cast<uint32_t>(generic[i])) << "at " << i;
        } else {
          ASSERT_NEAR(actual[i], generic[i], c.atol + c.rtol * std::abs(generic[i])) << "at " << i;
        }
      }
    }
  }
}

TEST(KernelIsa, CapAndLevelsAreConsistent) {
  EXPECT_LE(cpu_isa(), cpu_isa_supported());
  for (int i = 0; i < kNumCpuIsas; ++i) {
    const CpuIsa isa = static_cast<CpuIsa>(i);
    EXPECT_EQ(parse_cpu_isa(cpu_isa_name(isa)), isa);
  }
  EXPECT_FALSE(parse_cpu_isa("avx"));
  // Set where the CPU is known, as under qemu-user's emulated CPUs (tests/CMakeLists.txt).
  if (const char* expected = std::getenv("MEMTRAIN_EXPECT_ISA")) {
    EXPECT_EQ(cpu_isa_name(cpu_isa_supported()), expected);
  }
  if (cpu_isa_supported() < CpuIsa::avx512_bf16) {
    EXPECT_THROW(set_cpu_isa(CpuIsa::avx512_bf16), Error);
  }
}

}  // namespace
}  // namespace mt::kernels
