#include "model/gpt2_weights.h"

#include <map>
#include <regex>

#include "core/error.h"
#include "io/safetensors.h"

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
    if (e.dtype != DType::f32)
      fail_data(path + ": tensor " + t.name + " has dtype " + std::string(dtype_name(e.dtype)) +
                ", expected F32");
    reader.read(e, memory.f32(id));  // padding rows (after the file's rows) keep their zeros
    by_name.erase(it);
  }
  if (!by_name.empty())
    fail_data(path + ": unexpected tensor " + by_name.begin()->first + " for a GPT-2 model");
}

void save_gpt2_weights(const std::string& path, const ModelSpec& spec, const Gpt2Graph& model,
                       const Allocation& memory) {
  std::vector<SafetensorsWriter::Item> items;
  for (int id : model.params) {
    const TensorDesc& t = model.graph.table[id];
    items.push_back({t.name, DType::f32, file_shape(spec, t)});
  }
  SafetensorsWriter writer(path, items, {{"format", "pt"}});
  for (size_t i = 0; i < items.size(); ++i) {
    int64_t numel = 1;
    for (int64_t d : items[i].shape) numel *= d;
    writer.write_next(memory.f32(model.params[i]), static_cast<uint64_t>(numel) * 4);
  }
  writer.finish();
}

}  // namespace mt
