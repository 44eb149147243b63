// The CUDA device against the CPU's (the reference) on the same random inputs: conversions and AdamW (fp32,
// bf16 and 8-bit moments) in every storage combination bit for bit, the sum of squares close to the CPU's and
// bitwise reproducible, staged reads and writes, and the allocators' buffers aligned and zero-filled. Every
// test needing a GPU is skipped where there is none.
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/allocator.cuh"
#include "backend/gpu.h"
#include "core/half.h"
#include "core/moment_format.h"
#include "core/rng.h"
#include "devices/devices.h"

namespace mt {
namespace {

using Bytes = std::vector<uint8_t>;

// A buffer of a device's memory space, given back when it goes.
class Buffer {
 public:
  Buffer(Device& device, int64_t bytes, MemorySpace space = MemorySpace::device)
      : allocator_(&device.allocator(space)), bytes_(bytes), data_(allocator_->allocate(bytes)) {}
  ~Buffer() { allocator_->release(data_, bytes_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }

 private:
  DeviceAllocator* allocator_;
  int64_t bytes_;
  void* data_;
};

std::unique_ptr<Buffer> upload(Device& device, const Bytes& host) {
  auto buffer = std::make_unique<Buffer>(device, static_cast<int64_t>(host.size()));
  device.copy_from_host(buffer->data(), host.data(), buffer->bytes());
  return buffer;
}

Bytes download(Device& device, const Buffer& buffer) {
  Bytes host(static_cast<size_t>(buffer.bytes()));
  device.copy_to_host(host.data(), buffer.data(), buffer.bytes());
  return host;
}

// fp32 values stored as dtype (nearest even).
Bytes encode(const std::vector<float>& values, DType dtype) {
  Bytes bytes(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::f32) {
      std::memcpy(bytes.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t bits =
          dtype == DType::bf16 ? round_to<bf16>(values[i]).bits : round_to<f16>(values[i]).bits;
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    }
  }
  return bytes;
}

// n normal values times `scale`, from stream `stream`.
std::vector<float> normal(int64_t n, uint64_t stream, float scale) {
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    values[static_cast<size_t>(i)] =
        scale * static_cast<float>(random_normal(2024, stream, static_cast<uint64_t>(i)));
  return values;
}

// The first element whose bits differ, or -1.
int64_t first_difference(const Bytes& a, const Bytes& b, size_t element_size) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); i += element_size)
    if (std::memcmp(a.data() + i, b.data() + i, element_size) != 0)
      return static_cast<int64_t>(i / element_size);
  return -1;
}

// As first_difference, but any two NaNs are equal: the GPU's f16 conversions give the canonical NaN (0x7fff,
// 0x7fffffff) where the host's F16C keeps the payload.
bool is_nan(const uint8_t* element, DType dtype) {
  uint32_t bits = 0;
  std::memcpy(&bits, element, dtype_size(dtype));
  if (dtype == DType::f32) return (bits & 0x7fffffffu) > 0x7f800000u;
  return (bits & 0x7fffu) > (dtype == DType::bf16 ? 0x7f80u : 0x7c00u);
}
int64_t first_difference_but_nan(const Bytes& a, const Bytes& b, DType dtype) {
  const size_t size = dtype_size(dtype);
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); i += size)
    if (std::memcmp(a.data() + i, b.data() + i, size) != 0 && !(is_nan(&a[i], dtype) && is_nan(&b[i], dtype)))
      return static_cast<int64_t>(i / size);
  return -1;
}

#define EXPECT_SAME_BITS(a, b, dtype) \
  EXPECT_EQ(first_difference((a), (b), dtype_size(dtype)), -1) << "first element that differs"

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (gpu_count(&why) == 0) GTEST_SKIP() << why;
  }
  static Backend& gpu() {
    static const std::unique_ptr<Backend> backend = make_gpu_backend(open_gpu(0, "test"), ModelStatePolicy{});
    return *backend;
  }
  static Backend& cpu() {
    static const std::unique_ptr<Backend> backend =
        make_backend({.cpu_isa = process_cpu_isa(), .threads = process_threads()}, ModelStatePolicy{});
    return *backend;
  }
};

// The binary does not link cuBLASLt (backend/cuda/cublaslt_loader.cpp): the first call loads it, GPU or not.
TEST(CublasLtLoader, LoadsTheLibraryOnFirstUse) {
  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
}

TEST(CudaAllocatorTest, CommitsWholeGranules) {
  EXPECT_EQ(cuda::committed_bytes(1), cuda::kDeviceGranularity);
  EXPECT_EQ(cuda::committed_bytes(cuda::kDeviceGranularity), cuda::kDeviceGranularity);
  EXPECT_EQ(cuda::committed_bytes(cuda::kDeviceGranularity + 1), 2 * cuda::kDeviceGranularity);
}

TEST_F(CudaDeviceTest, AllocationsAreAlignedAndZeroFilled) {
  for (MemorySpace space : {MemorySpace::device, MemorySpace::host}) {
    for (int64_t bytes : {int64_t{1}, int64_t{256}, int64_t{1000}, (int64_t{3} << 20) + 7}) {
      SCOPED_TRACE(std::to_string(bytes) + (space == MemorySpace::host ? " host" : " device"));
      Buffer buffer(gpu(), bytes, space);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % 256, 0u);
      const Bytes host = download(gpu(), buffer);
      EXPECT_EQ(std::count(host.begin(), host.end(), uint8_t{0}), bytes);
    }
  }
}

// What the plan counts for a buffer is what the GPU's free memory drops by.
TEST_F(CudaDeviceTest, FreeMemoryDropsByTheCommittedBytes) {
  const int64_t bytes = (int64_t{5} << 20) + 3;
  DeviceAllocator& device_memory = gpu().allocator(MemorySpace::device);
  EXPECT_EQ(device_memory.committed(bytes), cuda::committed_bytes(bytes));
  const int64_t before = gpu().memory_info()->free_bytes;
  {
    Buffer buffer(gpu(), bytes);
    EXPECT_EQ(before - gpu().memory_info()->free_bytes, device_memory.committed(bytes));
  }
  EXPECT_EQ(gpu().memory_info()->free_bytes, before);
}

TEST_F(CudaDeviceTest, ReadsAndWritesInPiecesOf64Bytes) {
  const int64_t bytes = (int64_t{20} << 20) + 100;  // several staging buffers and a short last piece
  Buffer buffer(gpu(), bytes);
  gpu().write(buffer.data(), bytes, [](char* data, int64_t offset, int64_t piece) {
    EXPECT_EQ(offset % 64, 0);
    for (int64_t i = 0; i < piece; ++i) data[i] = static_cast<char>((offset + i) * 7 % 251);
  });
  int64_t covered = 0;
  gpu().read(buffer.data(), bytes, [&](const char* data, int64_t offset, int64_t piece) {
    EXPECT_EQ(offset, covered);
    for (int64_t i = 0; i < piece; i += 4099) ASSERT_EQ(data[i], static_cast<char>((offset + i) * 7 % 251));
    covered += piece;
  });
  EXPECT_EQ(covered, bytes);
}

TEST_F(CudaDeviceTest, ConvertsAsTheCpuDoes) {
  const int64_t n = 3'000'001;  // more than one pass of the grid-stride loop
  std::vector<float> values = normal(n, 1, 3.0f);
  // Ties, f16's subnormals and overflow, infinities and NaN.
  const float specials[] = {1.0f + 0x1p-8f,
                            1.0f + 0x1p-11f,
                            3e-6f,
                            6e-8f,
                            1e-9f,
                            70000.0f,
                            65520.0f,
                            -65504.0f,
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            -0.0f};
  for (size_t i = 0; i < std::size(specials); ++i) values[i * 1001] = specials[i];
  for (DType from : {DType::f32, DType::bf16, DType::f16}) {
    const Bytes input = encode(values, from);
    const auto gpu_input = upload(gpu(), input);
    const auto cpu_input = upload(cpu(), input);
    for (DType to : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " to " + std::string(dtype_name(to)));
      Buffer gpu_out(gpu(), n * static_cast<int64_t>(dtype_size(to)));
      gpu().convert(gpu_out.data(), to, gpu_input->data(), from, n);
      Bytes expected;
      if (from == DType::f32 || to == DType::f32 || from == to) {
        Buffer cpu_out(cpu(), gpu_out.bytes());
        cpu().convert(cpu_out.data(), to, cpu_input->data(), from, n);
        expected = download(cpu(), cpu_out);
      } else {  // the CPU converts 16-bit types only through fp32: so does the reference
        Buffer wide(cpu(), n * 4), cpu_out(cpu(), gpu_out.bytes());
        cpu().convert(wide.data(), DType::f32, cpu_input->data(), from, n);
        cpu().convert(cpu_out.data(), to, wide.data(), DType::f32, n);
        expected = download(cpu(), cpu_out);
      }
      EXPECT_EQ(first_difference_but_nan(download(gpu(), gpu_out), expected, to), -1)
          << "first element that differs";
    }
  }
}

TEST_F(CudaDeviceTest, SumsSquaresInAFixedOrder) {
  // Empty, one element, a partial chunk, and more than one launch of the reduction (4096 * 8192 elements).
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{4097}, int64_t{33'570'001}}) {
    const std::vector<float> values = normal(n, 2, 0.01f);
    for (DType dtype : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::to_string(n) + " " + std::string(dtype_name(dtype)));
      const Bytes input = encode(values, dtype);
      const auto on_gpu = upload(gpu(), input);
      const auto on_cpu = upload(cpu(), input);
      const double first = gpu().sum_of_squares(on_gpu->data(), dtype, n);
      const double second = gpu().sum_of_squares(on_gpu->data(), dtype, n);
      EXPECT_EQ(std::memcmp(&first, &second, sizeof(double)), 0) << first << " then " << second;
      const double reference = cpu().sum_of_squares(on_cpu->data(), dtype, n);
      EXPECT_NEAR(first, reference, 1e-12 * reference);
    }
  }
}

TEST_F(CudaDeviceTest, SumOfSquaresIsNonFiniteWithANonFiniteElement) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> values = normal(100'000, 3, 1.0f);
    values[77'777] = bad;
    for (DType dtype : {DType::f32, DType::bf16}) {
      const auto on_gpu = upload(gpu(), encode(values, dtype));
      EXPECT_FALSE(std::isfinite(gpu().sum_of_squares(on_gpu->data(), dtype, 100'000)));
    }
  }
}

// One AdamW configuration: the operands' storage, master or not, how bf16 values are rounded.
struct AdamWCase {
  DType weights, grads, moments;
  bool master, stochastic_moments;
  std::string name() const {
    return std::string(dtype_name(weights)) + " weights, " + std::string(dtype_name(grads)) + " grads, " +
           std::string(dtype_name(moments)) + " moments" + (master ? ", master" : "") +
           (stochastic_moments ? ", stochastic moments" : "");
  }
};

// The state of one update on one device.
struct AdamWState {
  std::unique_ptr<Buffer> master, weights, grads, m, v;
};

// The inputs of every configuration, made once: weights, gradients, m, and v (non-negative).
struct AdamWInputs {
  explicit AdamWInputs(int64_t n)
      : weights(normal(n, 10, 0.5f)),
        grads(normal(n, 11, 2.0f)),
        m(normal(n, 13, 0.02f)),
        v(normal(n, 14, 1e-3f)) {
    for (float& x : v) x = x * x;
  }
  std::vector<float> weights, grads, m, v;
};

AdamWState adamw_state(Device& device, const AdamWCase& c, const AdamWInputs& in) {
  return {.master = c.master ? upload(device, encode(in.weights, DType::f32)) : nullptr,
          .weights = upload(device, encode(in.weights, c.weights)),
          .grads = upload(device, encode(in.grads, c.grads)),
          .m = upload(device, encode(in.m, c.moments)),
          .v = upload(device, encode(in.v, c.moments))};
}

// Two steps (the second reads the first's rounded moments) with decay, unscaling and a tensor offset.
void adamw_steps(Device& device, const AdamWCase& c, const AdamWState& s, int64_t n) {
  const AdamWOperands operands{.master = s.master ? static_cast<float*>(s.master->data()) : nullptr,
                               .weights = s.weights->data(),
                               .weights_dtype = c.weights,
                               .grads = s.grads->data(),
                               .grads_dtype = c.grads,
                               .n = n};
  const AdamWRounding rounding{.stochastic_moments = c.stochastic_moments, .seed = 0x5eed, .index = 123'457};
  for (int64_t step = 1; step <= 2; ++step) {
    const AdamWStep adamw{.lr = 3e-3f,
                          .beta1 = 0.9f,
                          .beta2 = 0.95f,
                          .eps = 1e-8f,
                          .weight_decay = 0.1f,
                          .step = step,
                          .grad_multiplier = 0.25f};
    device.adamw_update(operands, s.m->data(), s.v->data(), c.moments, adamw, rounding);
  }
}

TEST_F(CudaDeviceTest, AdamWIsTheCpusBitForBit) {
  const int64_t n = 2'100'003;  // more than one pass of the grid-stride loop, odd
  const AdamWInputs inputs(n);
  for (DType weights : {DType::f32, DType::bf16, DType::f16})
    for (DType grads : {DType::f32, DType::bf16})
      for (DType moments : {DType::f32, DType::bf16})
        for (bool master : {true, false})
          for (bool stochastic_moments : {false, true}) {
            if (!master && weights == DType::f16) continue;  // not a mode: below
            if (stochastic_moments && moments != DType::bf16) continue;
            const AdamWCase c{weights, grads, moments, master, stochastic_moments};
            SCOPED_TRACE(c.name());
            const AdamWState on_gpu = adamw_state(gpu(), c, inputs), on_cpu = adamw_state(cpu(), c, inputs);
            adamw_steps(gpu(), c, on_gpu, n);
            adamw_steps(cpu(), c, on_cpu, n);
            EXPECT_SAME_BITS(download(gpu(), *on_gpu.weights), download(cpu(), *on_cpu.weights), weights);
            EXPECT_SAME_BITS(download(gpu(), *on_gpu.m), download(cpu(), *on_cpu.m), moments);
            EXPECT_SAME_BITS(download(gpu(), *on_gpu.v), download(cpu(), *on_cpu.v), moments);
            if (master) {
              EXPECT_SAME_BITS(download(gpu(), *on_gpu.master), download(cpu(), *on_cpu.master), DType::f32);
            }
          }
}

// 8-bit moments on one device: codes and scales, zero-filled (every scale 0: they read back as zeros).
struct BlockedMoments {
  BlockedMoments(Device& device, MomentFormat format, int64_t n)
      : format(format),
        blocks((n + moment_block_size(format) - 1) / moment_block_size(format)),
        m(device, n),
        v(device, n),
        m_scales(device, blocks * 4),
        v_scales(device, blocks * 4) {}
  QuantizedMoments operands() const {
    return {format, static_cast<uint8_t*>(m.data()), static_cast<float*>(m_scales.data()),
            static_cast<uint8_t*>(v.data()), static_cast<float*>(v_scales.data())};
  }
  MomentFormat format;
  int64_t blocks;
  Buffer m, v, m_scales, v_scales;
};

TEST_F(CudaDeviceTest, AdamW8BitIsTheCpusBitForBit) {
  const int64_t n = 100'003;  // a short last block in either format
  const AdamWInputs inputs(n);
  // Runs of decay starting inside blocks, on block boundaries, and a short one.
  const std::vector<DecayRun> runs = {{0, true}, {1000, false}, {4096, true}, {4100, false}, {50'000, true}};
  for (MomentFormat format : {MomentFormat::int8, MomentFormat::fp8})
    for (DType weights : {DType::f32, DType::bf16, DType::f16})
      for (DType grads : {DType::f32, DType::bf16})
        for (bool master : {true, false}) {
          if (!master && weights == DType::f16) continue;
          const AdamWCase c{weights, grads, DType::f32, master, false};
          SCOPED_TRACE(c.name() + (format == MomentFormat::int8 ? ", int8" : ", fp8"));
          const AdamWState on_gpu = adamw_state(gpu(), c, inputs), on_cpu = adamw_state(cpu(), c, inputs);
          BlockedMoments gpu_moments(gpu(), format, n), cpu_moments(cpu(), format, n);
          for (int64_t step = 1; step <= 3; ++step) {
            const AdamWStep adamw{.lr = 3e-3f,
                                  .beta1 = 0.9f,
                                  .beta2 = 0.95f,
                                  .eps = 1e-8f,
                                  .weight_decay = 0.1f,
                                  .step = step,
                                  .grad_multiplier = 0.25f};
            const AdamWRounding rounding{.seed = 0x5eed, .index = 777};
            for (auto [device, state, moments] :
                 {std::tuple{&gpu(), &on_gpu, &gpu_moments}, std::tuple{&cpu(), &on_cpu, &cpu_moments}}) {
              const AdamWOperands operands{
                  .master = state->master ? static_cast<float*>(state->master->data()) : nullptr,
                  .weights = state->weights->data(),
                  .weights_dtype = weights,
                  .grads = state->grads->data(),
                  .grads_dtype = grads,
                  .n = n};
              device->adamw_update_blocked(operands, moments->operands(), adamw, runs, rounding);
            }
          }
          EXPECT_SAME_BITS(download(gpu(), *on_gpu.weights), download(cpu(), *on_cpu.weights), weights);
          EXPECT_SAME_BITS(download(gpu(), gpu_moments.m), download(cpu(), cpu_moments.m), DType::u8);
          EXPECT_SAME_BITS(download(gpu(), gpu_moments.v), download(cpu(), cpu_moments.v), DType::u8);
          EXPECT_SAME_BITS(download(gpu(), gpu_moments.m_scales), download(cpu(), cpu_moments.m_scales),
                           DType::f32);
          EXPECT_SAME_BITS(download(gpu(), gpu_moments.v_scales), download(cpu(), cpu_moments.v_scales),
                           DType::f32);
        }
}

TEST_F(CudaDeviceTest, AdamWRefusesF16WeightsWithoutAMaster) {
  const AdamWCase c{DType::f16, DType::f32, DType::f32, false, false};
  const AdamWState state = adamw_state(gpu(), c, AdamWInputs(1000));
  EXPECT_THROW(adamw_steps(gpu(), c, state, 1000), std::invalid_argument);
}

}  // namespace
}  // namespace mt
