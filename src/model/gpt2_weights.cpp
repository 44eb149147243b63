#include "model/gpt2_weights.h"

#include <map>
#include <regex>

#include "core/error.h"
#include "core/half.h"
#include "io/safetensors.h"

namespace mt {

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Save writes the fp32 master copy when this rank holds all of it, else the weights in their own dtype (a
// ZeRO-sharded master is spread over the ranks).
bool saves_master(const Plan& plan) {
  return plan.policy.master_weights && !plan.sharding.shards_optimizer();
}

float file_value(const char* bytes, DType dtype, int64_t i) {
  if (dtype == DType::bf16) return to_f32(reinterpret_cast<const bf16*>(bytes)[i]);
  if (dtype == DType::f16) return to_f32(reinterpret_cast<const f16*>(bytes)[i]);
  return reinterpret_cast<const float*>(bytes)[i];
}

// Stores one tensor read from the file into the weights (rounded to their dtype) and this rank's part of the
// fp32 master copy. The file's bytes pass through one tensor-sized buffer, at load time only.
void store_loaded(const SafetensorsReader& reader, const TensorEntry& e, Allocation& memory, int id) {
  const Plan& plan = memory.plan();
  const DType weights = plan.policy.weights;
  if (e.dtype == weights && !plan.policy.master_weights && !plan.sharding.shards_weights()) {
    reader.read(e, memory.data(id));
    return;
  }
  std::vector<char> bytes(e.bytes());
  reader.read(e, bytes.data());
  const int64_t n = e.numel(), offset = memory.param_offset(id);
  // This rank's part of the weights: all of the tensor, or its shard under ZeRO-3.
  const int64_t first = std::max(offset, plan.weights_begin()),
                last = std::min(offset + n, plan.weights_end());
  for (int64_t g = first; g < last; ++g) {
    const float v = file_value(bytes.data(), e.dtype, g - offset);
    if (weights == DType::f32) *memory.weights_from<float>(g) = v;
    if (weights == DType::bf16) *memory.weights_from<bf16>(g) = round_to<bf16>(v);
    if (weights == DType::f16) *memory.weights_from<f16>(g) = round_to<f16>(v);
  }
  if (!plan.policy.master_weights) return;
  const int64_t begin = std::max(offset, plan.shard_begin), end = std::min(offset + n, plan.shard_end);
  memory.optimizer_state().visit(begin, end, StateAccess::write_master, [&](const StateWindow& w) {
    for (int64_t g = w.begin; g < w.end; ++g)
      w.master[g - w.begin] = file_value(bytes.data(), e.dtype, g - offset);
  });
}

bool ignored_name(const std::string& name) {
  static const std::regex mask_buffer(R"(h\.\d+\.attn\.(bias|masked_bias))");
  return name == "lm_head.weight" || std::regex_match(name, mask_buffer);
}

}  // namespace

std::vector<int64_t> gpt2_file_shape(const ModelSpec& spec, const TensorDesc& t) {
  if (t.name == "wte.weight") return {spec.vocab_size, spec.n_embd};
  return t.shape;
}

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
    const std::vector<int64_t> expected = gpt2_file_shape(spec, t);
    if (e.shape != expected)
      fail_data(path + ": tensor " + t.name + " has shape " + shape_text(e.shape) + ", expected " +
                shape_text(expected));
    if (e.dtype != DType::f32 && e.dtype != DType::bf16 && e.dtype != DType::f16)
      fail_data(path + ": tensor " + t.name + " has dtype " + std::string(dtype_name(e.dtype)) +
                ", expected F32, BF16 or F16");
    store_loaded(reader, e, memory, id);  // padding rows (after the file's rows) keep their zeros
    by_name.erase(it);
  }
  if (!by_name.empty())
    fail_data(path + ": unexpected tensor " + by_name.begin()->first + " for a GPT-2 model");
}

void save_gpt2_weights(const std::string& path, const ModelSpec& spec, const Gpt2Graph& model,
                       const Allocation& memory) {
  const bool master = saves_master(memory.plan());
  std::vector<SafetensorsWriter::Item> items;
  for (int id : model.params) {
    const TensorDesc& t = model.graph.table[id];
    items.push_back({t.name, master ? DType::f32 : t.dtype, gpt2_file_shape(spec, t)});
  }
  SafetensorsWriter writer(path, items, {{"format", "pt"}});
  for (size_t i = 0; i < items.size(); ++i) {
    int64_t numel = 1;
    for (int64_t d : items[i].shape) numel *= d;
    const int id = model.params[i];
    // The file's rows are the tensor's first ones (the padding rows come last): a prefix of the tensor.
    if (master) {
      const int64_t offset = memory.param_offset(id);
      memory.optimizer_state().visit(
          offset, offset + numel, StateAccess::read_master, [&](const StateWindow& w) {
            writer.write_part(w.master, static_cast<uint64_t>(w.end - w.begin) * 4);
          });
    } else {
      writer.write_next(memory.data(id), static_cast<uint64_t>(numel) * dtype_size(items[i].dtype));
    }
  }
  writer.finish();
}

}  // namespace mt
