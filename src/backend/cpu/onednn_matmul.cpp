#include "backend/cpu/onednn_matmul.h"

#include <omp.h>

#include <algorithm>
#include <compare>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <type_traits>
#include <unordered_map>

namespace mt::kernels {

namespace {

using dt = dnnl::memory::data_type;

// Everything that defines a primitive. The thread count is part of it because oneDNN sizes its blocking
// for the threads OpenMP offers when the primitive is created.
struct Key {
  int64_t M, N, K, lda, ldb, ldc;
  bool trans_a, trans_b, bias, accumulate;
  dt dst;
  int threads;
  auto operator<=>(const Key&) const = default;
};

struct Entry {
  dnnl::matmul primitive;
  dnnl::memory src, weights, bias, dst;
  uint64_t last_use;
};

// GPT-2 training needs about 20 distinct products; the bound only stops unbounded growth when shapes vary.
constexpr size_t kCapacity = 64;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// op(X)[rows, cols] of a row-major X with row stride ld, as a strided descriptor (no copy for transposes).
dnnl::memory::desc matrix(int64_t rows, int64_t cols, int64_t ld, bool trans, dt type) {
  return {{rows, cols}, type, trans ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1}};
}

Entry make_entry(const Key& k) {
  const dnnl::engine& engine = cpu_engine();
  const auto src = matrix(k.M, k.K, k.lda, k.trans_a, dt::bf16);
  const auto weights = matrix(k.K, k.N, k.ldb, k.trans_b, dt::bf16);
  const auto dst = matrix(k.M, k.N, k.ldc, false, k.dst);
  // The bias broadcasts over rows, so it is {1, N}, not {N}.
  const auto bias = k.bias ? matrix(1, k.N, k.N, false, dt::bf16) : dnnl::memory::desc();
  dnnl::post_ops post_ops;
  if (k.accumulate) post_ops.append_sum(1.0f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(post_ops);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, bias, dst), attr, engine);
  // Buffers are bound per call with set_data_handle; DNNL_MEMORY_NONE allocates nothing here.
  return {dnnl::matmul(pd),
          dnnl::memory(src, engine, DNNL_MEMORY_NONE),
          dnnl::memory(weights, engine, DNNL_MEMORY_NONE),
          dnnl::memory(bias, engine, DNNL_MEMORY_NONE),
          dnnl::memory(dst, engine, DNNL_MEMORY_NONE),
          0};
}

std::map<Key, Entry>& cache() {
  static std::map<Key, Entry> entries;
  return entries;
}

Entry& lookup(const Key& key) {
  static uint64_t clock = 0;
  auto& entries = cache();
  auto it = entries.find(key);
  if (it == entries.end()) {
    if (entries.size() >= kCapacity) {
      entries.erase(std::min_element(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
        return a.second.last_use < b.second.last_use;
      }));
    }
    it = entries.emplace(key, make_entry(key)).first;
  }
  it->second.last_use = ++clock;
  return it->second;
}

}  // namespace

template <typename Out>
void onednn_matmul(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda,
                   const bf16* B, int64_t ldb, const bf16* bias, bool accumulate, Out* C, int64_t ldc) {
  const Key key{M,
                N,
                K,
                lda,
                ldb,
                ldc,
                trans_a,
                trans_b,
                bias != nullptr,
                accumulate,
                std::is_same_v<Out, float> ? dt::f32 : dt::bf16,
                omp_get_max_threads()};
  Entry& e = lookup(key);
  // oneDNN takes non-const handles even for the inputs it only reads.
  e.src.set_data_handle(const_cast<bf16*>(A));
  e.weights.set_data_handle(const_cast<bf16*>(B));
  e.dst.set_data_handle(C);
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, e.src}, {DNNL_ARG_WEIGHTS, e.weights}, {DNNL_ARG_DST, e.dst}};
  if (bias) {
    e.bias.set_data_handle(const_cast<bf16*>(bias));
    args.emplace(DNNL_ARG_BIAS, e.bias);
  }
  static dnnl::stream stream(cpu_engine());
  e.primitive.execute(stream, args);
  stream.wait();
}

int64_t onednn_matmul_cache_size() {
  return static_cast<int64_t>(cache().size());
}

template void onednn_matmul<float>(bool, bool, int64_t, int64_t, int64_t, const bf16*, int64_t, const bf16*,
                                   int64_t, const bf16*, bool, float*, int64_t);
template void onednn_matmul<bf16>(bool, bool, int64_t, int64_t, int64_t, const bf16*, int64_t, const bf16*,
                                  int64_t, const bf16*, bool, bf16*, int64_t);

}  // namespace mt::kernels
