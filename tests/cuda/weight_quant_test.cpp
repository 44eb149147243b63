// QLoRA's quantized base on the GPU against the CPU: the device's quantizer stores the CPU's bytes, and the
// GPU's dequantized tiles (backend/cuda/weight_quant.cuh) are the CPU's bit for bit, in nf4 and int8, with
// and without double quantization, into fp32, bf16 and f16, for tiles that start mid-block, cross a part's
// end and hold an odd number of columns. The products over those tiles are the backend-ops test's. Skipped
// where no GPU is found.
#include "backend/cpu/weight_quant.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/weight_quant.cuh"
#include "backend/gpu.h"
#include "core/half.h"
#include "core/rng.h"
#include "devices/devices.h"
#include "memory/tensor_table.h"

namespace mt {
namespace {

// Two parts of whole rows of 1031 (none a whole number of blocks; the second's 323 blocks need two
// double-quantization groups).
constexpr int64_t kRowLength = 1031;
const std::vector<int64_t> kPartRows = {13, 20};
constexpr int64_t kRows = 33;

// A buffer of the device's memory, given back when it goes.
using DeviceBuffer = std::unique_ptr<void, std::function<void(void*)>>;
DeviceBuffer allocate(Device& device, int64_t bytes) {
  DeviceAllocator& memory = device.allocator(MemorySpace::device);
  return {memory.allocate(bytes), [&memory, bytes](void* p) { memory.release(p, bytes); }};
}

std::vector<uint8_t> download(const void* device, int64_t bytes) {
  std::vector<uint8_t> host(static_cast<size_t>(bytes));
  EXPECT_EQ(cudaMemcpy(host.data(), device, host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

// The values' parts quantized by `device` into `buffer`, as loading does; their views.
std::vector<QuantizedWeight> quantize(Device& device, const QuantizedStorage& storage, const float* values,
                                      void* buffer) {
  std::vector<QuantizedWeight> parts = storage.views(buffer);
  for (const QuantizedWeight& part : parts) {
    device.quantize_weight(values, part);
    values += part.n;
  }
  return parts;
}

struct Tile {
  int64_t row0, rows, col0, cols;
};

// The GPU's tile against the CPU's, bit for bit.
template <typename T>
void expect_tile_of_the_cpu(const std::vector<QuantizedWeight>& gpu, const std::vector<QuantizedWeight>& cpu,
                            Device& device, const Tile& t) {
  const int64_t bytes = t.rows * t.cols * static_cast<int64_t>(sizeof(T));
  std::vector<T> want(static_cast<size_t>(t.rows * t.cols));
  kernels::dequantize_matrix_tile(QuantizedMatrix(cpu), kRowLength, t.row0, t.rows, t.col0, t.cols,
                                  want.data());
  const DeviceBuffer out = allocate(device, bytes);
  cuda::dequantize_matrix_tile(QuantizedMatrix(gpu), kRowLength, t.row0, t.rows, t.col0, t.cols,
                               static_cast<T*>(out.get()), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint8_t> got = download(out.get(), bytes);
  for (int64_t e = 0; e < t.rows * t.cols; ++e) {
    if (std::memcmp(got.data() + e * sizeof(T), &want[static_cast<size_t>(e)], sizeof(T)) != 0) {
      ADD_FAILURE() << "tile element " << e << " (row " << t.row0 + e / t.cols << ", column "
                    << t.col0 + e % t.cols << ") is not the CPU's";
      return;
    }
  }
}

TEST(CudaWeightQuant, StoresAndDequantizesTheCpusBits) {
  std::string why;
  if (gpu_count(&why) == 0) GTEST_SKIP() << why;
  const std::unique_ptr<Backend> gpu = make_gpu_backend(open_gpu(0, "test"), ModelStatePolicy{});
  const std::unique_ptr<Backend> cpu =
      make_backend({.cpu_isa = process_cpu_isa(), .threads = process_threads()}, ModelStatePolicy{});
  std::vector<float> values(static_cast<size_t>(kRows * kRowLength));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = 0.02f * static_cast<float>(random_normal(7, 1, i)) + (i % 997 == 0 ? 0.5f : 0.0f);
  for (const WeightFormat format : {WeightFormat::nf4, WeightFormat::int8}) {
    for (const bool double_quant : {true, false}) {
      SCOPED_TRACE(std::string(format == WeightFormat::nf4 ? "nf4" : "int8") +
                   (double_quant ? ", double quantization" : ", fp32 absmaxes"));
      QuantizedStorage storage{.format = format, .double_quant = double_quant, .parts = {}};
      for (const int64_t rows : kPartRows) storage.parts.push_back(rows * kRowLength);
      std::vector<uint8_t> host(static_cast<size_t>(storage.bytes()));
      const DeviceBuffer device = allocate(*gpu, storage.bytes());
      const std::vector<QuantizedWeight> on_cpu = quantize(*cpu, storage, values.data(), host.data());
      const std::vector<QuantizedWeight> on_gpu = quantize(*gpu, storage, values.data(), device.get());
      ASSERT_EQ(download(device.get(), storage.bytes()), host) << "the stored bytes are not the CPU's";
      for (const Tile& t : {Tile{0, kRows, 0, kRowLength}, Tile{7, 20, 5, 1001}, Tile{12, 2, 63, 1}}) {
        SCOPED_TRACE("rows " + std::to_string(t.row0) + "+" + std::to_string(t.rows) + ", columns " +
                     std::to_string(t.col0) + "+" + std::to_string(t.cols));
        expect_tile_of_the_cpu<float>(on_gpu, on_cpu, *gpu, t);
        expect_tile_of_the_cpu<bf16>(on_gpu, on_cpu, *gpu, t);
        expect_tile_of_the_cpu<f16>(on_gpu, on_cpu, *gpu, t);
      }
    }
  }
}

}  // namespace
}  // namespace mt
