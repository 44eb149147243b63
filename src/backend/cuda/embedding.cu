// Token and position embeddings on the GPU, mirroring src/backend/cpu/embedding.cpp.
//
// Backward without atomics or scratch memory: a gradient row must be summed in (b,t) order, in fp32 from its
// stored value, and stored once (the CPU's sums, to the same bits). Each block owns an interleaved set of
// rows (rows r, r + owners, r + 2 owners, ... of one table) over one tile of columns, keeps up to `slots` of
// them as fp32 rows in shared memory, and walks all B*T tokens in order, compacting those that fall on its
// rows (a ballot per chunk of tokens, which keeps their order) and adding their dout rows. Every thread only
// touches its own columns of the shared rows, so the sums need no synchronisation. Interleaving spreads the
// frequent tokens (low ids in BPE vocabularies) over the blocks.
#include <algorithm>
#include <limits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/embedding.cuh"
#include "backend/cuda/vec_io.cuh"

namespace mt::cuda {

namespace {

constexpr int kThreads = 256;  // also the tokens per chunk: an entry keeps its token's offset in 8 bits
constexpr int kWarps = kThreads / 32;
constexpr int kTileCols = 1024;        // backward: columns per block
constexpr int kAccFloats = 11 * 1024;  // backward: fp32 row slices in shared memory (44 KiB)
constexpr int kColsPerThread = kTileCols / kThreads;
constexpr int kBatch = 4;              // backward: entries whose dout loads are issued together
constexpr int kMaxSlots = 32;          // rows a block holds at once: the bits of its `touched` mask
constexpr int64_t kMaxOwners = 32768;  // blocks per column tile and table; more rows take several windows
constexpr int64_t kNoWindow = std::numeric_limits<int64_t>::max();

// dst[k] = src[k] for k < kVec, bit for bit (zeros when src is null).
template <int kVec, typename T>
__device__ inline void copy_values(T* dst, const T* src) {
  if constexpr (kVec == kWide<T>) {
    __stwb(reinterpret_cast<uint4*>(dst),
           src ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0));
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) dst[k] = src ? src[k] : T{};
  }
}

// Row blockIdx.x of out, kVec columns per thread; with kVec > 1, C is a multiple of kVec.
template <int kVec, typename T>
__global__ void __launch_bounds__(kThreads)
    embedding_forward_kernel(T* __restrict__ out, const int32_t* __restrict__ tokens,
                             const int32_t* __restrict__ positions, const T* __restrict__ wte,
                             const T* __restrict__ wpe, int64_t T_len, int64_t C, int64_t vocab_begin,
                             int64_t vocab_count) {
  const int64_t bt = blockIdx.x, j = (blockIdx.y * int64_t{kThreads} + threadIdx.x) * kVec;
  if (j >= C) return;
  const int64_t token = tokens[bt];
  const bool held = token >= vocab_begin && token - vocab_begin < vocab_count;
  const T* tok = held ? wte + (token - vocab_begin) * C + j : nullptr;
  const T* pos = wpe ? wpe + (positions ? positions[bt] : bt % T_len) * C + j : nullptr;
  T* y = out + bt * C + j;
  if (!tok || !pos) return copy_values<kVec>(y, tok ? tok : pos);
  float a[kVec], b[kVec];
  load_f32<kVec>(a, tok);
  load_f32<kVec>(b, pos);
#pragma unroll
  for (int k = 0; k < kVec; ++k) a[k] += b[k];
  store_f32<kVec>(y, a);
}

// One gradient table of the backward and how a token finds its row there.
template <typename G>
struct GradTable {
  G* rows;
  const int32_t* ids;    // the row of token bt is ids[bt] - begin; null: bt % T_len
  int64_t begin, count;  // rows [0, count) are held (count < 2^31)
  int64_t owners;        // blocks per column tile: block r owns rows r, r + owners, ...
};

// dwte and dwpe in one launch: blocks [0, first_owners) take table[0], the rest table[1].
template <typename G>
struct GradTables {
  GradTable<G> table[2];
  int64_t first_owners;
};

template <typename G>
__device__ inline int64_t row_of(const GradTable<G>& t, int64_t bt, int64_t T_len) {
  if (!t.ids) return bt % T_len;
  const int64_t row = int64_t{t.ids[bt]} - t.begin;
  return row >= 0 && row < t.count ? row : -1;
}

// This block's row of token bt (-1: none): a row it owns, whatever the window.
template <typename G>
__device__ inline int64_t owned_row(const GradTable<G>& t, int64_t owner, int64_t bt, int64_t BT,
                                    int64_t T_len) {
  if (bt >= BT) return -1;
  const int64_t row = row_of(t, bt, T_len);
  return row >= 0 && static_cast<uint32_t>(row) % static_cast<uint32_t>(t.owners) == owner ? row : -1;
}

// Writes to entries, in token order, the chunk's tokens (row: this thread's token's owned_row) that fall on
// the window [window, window + slots) of this block's slots, as offset | slot << 8, and returns how many;
// lowers `next` to the first later slot a token needs.
template <typename G>
__device__ int gather_entries(const GradTable<G>& t, int64_t row, int64_t window, int slots, int* entries,
                              int* warp_counts, int64_t& next) {
  int entry = -1;
  if (row >= 0) {
    const int64_t slot = static_cast<uint32_t>(row) / static_cast<uint32_t>(t.owners) - window;
    if (slot >= 0 && slot < slots) entry = static_cast<int>(threadIdx.x) | static_cast<int>(slot) << 8;
    if (slot >= slots) next = std::min(next, window + slot);
  }
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned found = __ballot_sync(0xffffffffu, entry >= 0);
  if (lane == 0) warp_counts[warp] = __popc(found);
  __syncthreads();
  int before = __popc(found & ((1u << lane) - 1u)), total = 0;
  for (unsigned w = 0; w < kWarps; ++w) {
    if (w < warp) before += warp_counts[w];
    total += warp_counts[w];
  }
  if (entry >= 0) entries[before] = entry;
  __syncthreads();
  return total;
}

// acc[slot] += dout rows of the entries, in order, over this thread's columns (c = threadIdx.x + q kThreads);
// a slot's first entry starts it from the stored gradient row. The dout values of kBatch entries are loaded
// before any is added, so that their loads overlap.
template <typename T, typename G>
__device__ void accumulate_entries(const GradTable<G>& t, int64_t owner, int64_t window, const int* entries,
                                   int n, int64_t b0, const T* __restrict__ dout, int64_t C, int64_t c0,
                                   int tile_cols, int n_cols, float* acc, uint32_t& touched) {
  for (int e0 = 0; e0 < n; e0 += kBatch) {
    const int batch = n - e0 < kBatch ? n - e0 : kBatch;
    float dy[kBatch][kColsPerThread];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const T* dout_row = dout + (b0 + (entries[e0 + std::min(b, batch - 1)] & 0xff)) * C + c0;
#pragma unroll
      for (int q = 0; q < kColsPerThread; ++q) {
        const int c = threadIdx.x + q * kThreads;
        dy[b][q] = b < batch && c < n_cols ? to_f32(dout_row[c]) : 0.0f;
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (b == batch) break;
      const int slot = entries[e0 + b] >> 8;
      float* a = acc + slot * tile_cols;
      if (!(touched >> slot & 1u)) {
        touched |= 1u << slot;
        const G* stored = t.rows + ((window + slot) * t.owners + owner) * C + c0;
        for (int c = threadIdx.x; c < n_cols; c += kThreads) a[c] = to_f32(stored[c]);
      }
#pragma unroll
      for (int q = 0; q < kColsPerThread; ++q) {
        const int c = threadIdx.x + q * kThreads;
        if (c < n_cols) a[c] += dy[b][q];
      }
    }
  }
}

// The least v over the block, in every thread.
__device__ int64_t block_min(int64_t v, int64_t* warp_min) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = std::min(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (threadIdx.x % 32 == 0) warp_min[threadIdx.x / 32] = v;
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) v = std::min(v, warp_min[w]);
  __syncthreads();  // warp_min is written again by the next call
  return v;
}

// Block (owner, column tile): for each window of its rows that some token falls on, sums those rows over
// all tokens in order, then stores each row it touched once.
template <typename T, typename G>
__global__ void __launch_bounds__(kThreads)
    embedding_backward_kernel(GradTables<G> tables, const T* __restrict__ dout, int64_t BT, int64_t T_len,
                              int64_t C, int tile_cols, int slots) {
  __shared__ float acc[kAccFloats];
  __shared__ int entries[kThreads];
  __shared__ int warp_counts[kWarps];
  __shared__ int64_t warp_min[kWarps];
  const bool second = blockIdx.x >= tables.first_owners;
  const GradTable<G> t = second ? tables.table[1] : tables.table[0];
  const int64_t owner = blockIdx.x - (second ? tables.first_owners : 0);
  const int64_t c0 = blockIdx.y * int64_t{tile_cols};
  const int n_cols = static_cast<int>(std::min<int64_t>(tile_cols, C - c0));
  for (int64_t window = 0; window != kNoWindow;) {
    uint32_t touched = 0;  // the same in every thread: all walk the same entries
    int64_t next = kNoWindow;
    int64_t row = owned_row(t, owner, threadIdx.x, BT, T_len);
    for (int64_t b0 = 0; b0 < BT; b0 += kThreads) {
      const int n = gather_entries(t, row, window, slots, entries, warp_counts, next);
      row = owned_row(t, owner, b0 + kThreads + threadIdx.x, BT, T_len);  // the next chunk's, early
      accumulate_entries(t, owner, window, entries, n, b0, dout, C, c0, tile_cols, n_cols, acc, touched);
      __syncthreads();  // entries are written again for the next chunk
    }
    for (uint32_t left = touched; left; left &= left - 1) {
      const int slot = __ffs(static_cast<int>(left)) - 1;
      G* grad_row = t.rows + ((window + slot) * t.owners + owner) * C + c0;
      const float* a = acc + slot * tile_cols;
      for (int c = threadIdx.x; c < n_cols; c += kThreads) grad_row[c] = round_to<G>(a[c]);
    }
    window = block_min(next, warp_min);
  }
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const int32_t* positions, const T* wte, const T* wpe,
                       int64_t B, int64_t T_len, int64_t C, VocabRows vocab, cudaStream_t stream) {
  const int64_t BT = B * T_len;
  if (BT <= 0 || C <= 0) return;
  // Rows stay 16-byte aligned when C is a multiple of the pack (every tensor starts on 256 bytes).
  const int vec = C % kWide<T> == 0 ? kWide<T> : 1;
  const dim3 grid(static_cast<unsigned>(BT), static_cast<unsigned>(ceil_div(C, int64_t{kThreads} * vec)));
  if (vec > 1)
    embedding_forward_kernel<kWide<T>>
        <<<grid, kThreads, 0, stream>>>(out, tokens, positions, wte, wpe, T_len, C, vocab.begin, vocab.count);
  else
    embedding_forward_kernel<1>
        <<<grid, kThreads, 0, stream>>>(out, tokens, positions, wte, wpe, T_len, C, vocab.begin, vocab.count);
  check_launch("embedding_forward");
}

template <typename T, typename G>
void embedding_backward(G* dwte, G* dwpe, const T* dout, const int32_t* tokens, const int32_t* positions,
                        int64_t B, int64_t T_len, int64_t C, VocabRows vocab, cudaStream_t stream) {
  const int64_t BT = B * T_len;
  if (BT <= 0 || C <= 0) return;
  const int tile_cols = static_cast<int>(std::min<int64_t>(C, kTileCols));
  const int slots = std::min(kMaxSlots, kAccFloats / tile_cols);
  GradTables<G> tables{};
  int n = 0;
  const auto add = [&](G* rows, const int32_t* ids, int64_t begin, int64_t count) {
    count = std::min(count, int64_t{1} << 31);  // a row is an int32 token less a non-negative begin
    if (rows && count > 0)
      tables.table[n++] = {rows, ids, begin, count, std::min(ceil_div(count, slots), kMaxOwners)};
  };
  add(dwte, tokens, vocab.begin, vocab.count);
  add(dwpe, positions, 0, T_len);  // positions past T_len: none (the CPU's 16-bit path sums t < T_len)
  if (n == 0) return;
  tables.first_owners = tables.table[0].owners;
  const dim3 grid(static_cast<unsigned>(tables.table[0].owners + tables.table[1].owners),
                  static_cast<unsigned>(ceil_div(C, tile_cols)));
  embedding_backward_kernel<<<grid, kThreads, 0, stream>>>(tables, dout, BT, T_len, C, tile_cols, slots);
  check_launch("embedding_backward");
}

template void embedding_forward<float>(float*, const int32_t*, const int32_t*, const float*, const float*,
                                       int64_t, int64_t, int64_t, VocabRows, cudaStream_t);
template void embedding_forward<bf16>(bf16*, const int32_t*, const int32_t*, const bf16*, const bf16*,
                                      int64_t, int64_t, int64_t, VocabRows, cudaStream_t);
template void embedding_forward<f16>(f16*, const int32_t*, const int32_t*, const f16*, const f16*, int64_t,
                                     int64_t, int64_t, VocabRows, cudaStream_t);
#define MT_EMBEDDING_BACKWARD(T, G)                                                                          \
  template void embedding_backward<T, G>(G*, G*, const T*, const int32_t*, const int32_t*, int64_t, int64_t, \
                                         int64_t, VocabRows, cudaStream_t);
MT_EMBEDDING_BACKWARD(float, float)
MT_EMBEDDING_BACKWARD(bf16, float)
MT_EMBEDDING_BACKWARD(bf16, bf16)
MT_EMBEDDING_BACKWARD(f16, float)
#undef MT_EMBEDDING_BACKWARD

}  // namespace mt::cuda
