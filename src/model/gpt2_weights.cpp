#include "model/gpt2_weights.h"

#include <map>
#include <regex>

#include "core/error.h"
#include "core/half.h"
#include "io/safetensors.h"
#include "model/model_states.h"

namespace mt {

namespace {

// The shape a parameter has in the file: the embedding without its padding rows.
std::vector<int64_t> file_shape(const ModelSpec& spec, const TensorDesc& t) {
  if (t.name == "wte.weight") return {spec.vocab_size, spec.n_embd};
  return t.shape;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Where a parameter's authoritative values live: the fp32 master copy when there is one, else the weights.
struct WeightStorage {
  void* data;
  DType dtype;
};
WeightStorage storage(const Allocation& memory, int id) {
  if (float* master = memory.master(id)) return {master, DType::f32};
  return {memory.data(id), memory.plan().policy.weights};
}

// Reads a tensor stored in the file as another float type, converting through fp32 (load time only).
void read_converted(const SafetensorsReader& reader, const TensorEntry& e, WeightStorage dst) {
  std::vector<char> bytes(e.bytes());
  reader.read(e, bytes.data());
  const int64_t n = e.numel();
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) {
    if (e.dtype == DType::f32) values[i] = reinterpret_cast<const float*>(bytes.data())[i];
    if (e.dtype == DType::bf16) values[i] = to_f32(reinterpret_cast<const bf16*>(bytes.data())[i]);
    if (e.dtype == DType::f16) values[i] = to_f32(reinterpret_cast<const f16*>(bytes.data())[i]);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (dst.dtype == DType::f32) static_cast<float*>(dst.data)[i] = values[i];
    if (dst.dtype == DType::bf16) static_cast<bf16*>(dst.data)[i] = round_to<bf16>(values[i]);
    if (dst.dtype == DType::f16) static_cast<f16*>(dst.data)[i] = round_to<f16>(values[i]);
  }
}

bool ignored_name(const std::string& name) {
  static const std::regex mask_buffer(R"(h\.\d+\.attn\.(bias|masked_bias))");
  return name == "lm_head.weight" || std::regex_match(name, mask_buffer);
}

}  // namespace

void load_gpt2_weights(const std::string& path, const ModelSpec& spec, const Gpt2Graph& model,
                       Allocation& memory) {
  const SafetensorsReader reader(path);
  std::map<std::string, const TensorEntry*> by_name;
  for (const TensorEntry& e : reader.tensors()) {
    const std::string name = e.name.starts_with("transformer.") ? e.name.substr(12) : e.name;
    if (ignored_name(name)) continue;
    by_name[name] = &e;
  }
  for (int id : model.params) {
    const TensorDesc& t = model.graph.table[id];
    const auto it = by_name.find(t.name);
    if (it == by_name.end()) fail_data(path + ": missing tensor " + t.name);
    const TensorEntry& e = *it->second;
    const std::vector<int64_t> expected = file_shape(spec, t);
    if (e.shape != expected)
      fail_data(path + ": tensor " + t.name + " has shape " + shape_text(e.shape) + ", expected " +
                shape_text(expected));
    if (e.dtype != DType::f32 && e.dtype != DType::bf16 && e.dtype != DType::f16)
      fail_data(path + ": tensor " + t.name + " has dtype " + std::string(dtype_name(e.dtype)) +
                ", expected F32, BF16 or F16");
    // Padding rows (after the file's rows) keep their zeros.
    const WeightStorage dst = storage(memory, id);
    if (e.dtype == dst.dtype)
      reader.read(e, dst.data);
    else
      read_converted(reader, e, dst);
    by_name.erase(it);
  }
  if (!by_name.empty())
    fail_data(path + ": unexpected tensor " + by_name.begin()->first + " for a GPT-2 model");
  round_master_into_weights(memory);
}

void save_gpt2_weights(const std::string& path, const ModelSpec& spec, const Gpt2Graph& model,
                       const Allocation& memory) {
  std::vector<SafetensorsWriter::Item> items;
  for (int id : model.params) {
    const TensorDesc& t = model.graph.table[id];
    items.push_back({t.name, storage(memory, id).dtype, file_shape(spec, t)});
  }
  SafetensorsWriter writer(path, items, {{"format", "pt"}});
  for (size_t i = 0; i < items.size(); ++i) {
    int64_t numel = 1;
    for (int64_t d : items[i].shape) numel *= d;
    writer.write_next(storage(memory, model.params[i]).data,
                      static_cast<uint64_t>(numel) * dtype_size(items[i].dtype));
  }
  writer.finish();
}

}  // namespace mt
