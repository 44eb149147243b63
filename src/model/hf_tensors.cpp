#include "model/hf_tensors.h"

#include <map>
#include <regex>

#include "model/lora.h"

namespace mt {

int64_t FileTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

// The whole tensor (of which a tensor-parallel rank holds a part), the vocabulary matrices without their
// padding rows.
std::vector<int64_t> unpadded_shape(const ModelSpec& spec, const TensorDesc& t) {
  const std::vector<int64_t>& shape = t.shard ? t.shard->whole : t.shape;
  if (shape.size() == 2 && shape[0] == spec.padded_vocab_size && shape[1] == spec.n_embd &&
      (t.name == "wte.weight" || t.name == "model.embed_tokens.weight" || t.name == "lm_head.weight"))
    return {spec.vocab_size, spec.n_embd};
  return shape;
}

// q, k, v (or gate, up) stacked by rows in one parameter: the file tensors of each part.
void add_stacked(std::vector<FileTensor>& out, int param, const std::string& prefix,
                 const std::vector<std::pair<std::string, int64_t>>& parts, int64_t columns,
                 const std::string& suffix) {
  int64_t offset = 0;
  for (const auto& [part, rows] : parts) {
    std::vector<int64_t> shape = {rows};
    if (columns > 0) shape.push_back(columns);
    out.push_back({prefix + part + suffix, param, offset, shape});
    offset += rows * (columns > 0 ? columns : 1);
  }
}

}  // namespace

std::vector<FileTensor> hf_tensors(const ModelSpec& spec, const ModelGraph& model) {
  std::vector<FileTensor> out;
  const int64_t C = spec.n_embd, KV = spec.kv_dim(), I = spec.intermediate_size;
  for (int id : model.params) {
    const TensorDesc& t = model.graph.table[id];
    if (is_lora_a(t.name) || is_lora_b(t.name)) continue;  // adapters are not the base model's
    const auto fused = [&](const char* fused_name) {
      const size_t at = t.name.find(fused_name);
      return at == std::string::npos ? std::string() : t.name.substr(0, at);
    };
    if (const std::string prefix = fused("self_attn.qkv_proj."); !prefix.empty()) {
      const bool weight = t.name.ends_with(".weight");
      add_stacked(out, id, prefix + "self_attn.", {{"q_proj", C}, {"k_proj", KV}, {"v_proj", KV}},
                  weight ? C : 0, weight ? ".weight" : ".bias");
    } else if (const std::string prefix = fused("mlp.gate_up_proj."); !prefix.empty()) {
      add_stacked(out, id, prefix + "mlp.", {{"gate_proj", I}, {"up_proj", I}}, C, ".weight");
    } else {
      out.push_back({t.name, id, 0, unpadded_shape(spec, t)});
    }
  }
  return out;
}

std::vector<FileTensor> trainable_tensors(const ModelSpec& spec, const ModelGraph& model) {
  const TensorTable& table = model.graph.table;
  std::vector<FileTensor> out;
  for (const FileTensor& f : hf_tensors(spec, model))
    if (table[f.param].category == Category::params) out.push_back(f);
  for (int id : model.params)
    if (is_lora_a(table[id].name) || is_lora_b(table[id].name))
      out.push_back({table[id].name, id, 0, table[id].shape});
  return out;
}

std::vector<FileTensor> held_tensors(const std::vector<FileTensor>& tensors, const ModelGraph& whole,
                                     const ModelGraph& model, int tied_copy) {
  std::map<std::string, int> ids;
  for (int id : model.params)
    if (id != tied_copy) ids[model.graph.table[id].name] = id;
  std::vector<FileTensor> out = tensors;
  for (FileTensor& f : out) {
    const auto it = ids.find(whole.graph.table[f.param].name);
    f.param = it == ids.end() ? -1 : it->second;
  }
  return out;
}

std::optional<std::string> hf_tensor_name(const ModelSpec& spec, const std::string& file_name) {
  if (spec.arch == Arch::llama) {
    if (file_name.ends_with(".rotary_emb.inv_freq")) return std::nullopt;
    if (spec.tied_head && file_name == "lm_head.weight") return std::nullopt;
    return file_name;
  }
  static const std::regex mask_buffer(R"(h\.\d+\.attn\.(bias|masked_bias))");
  const std::string name = file_name.starts_with("transformer.") ? file_name.substr(12) : file_name;
  if (name == "lm_head.weight" || std::regex_match(name, mask_buffer)) return std::nullopt;
  return name;
}

}  // namespace mt
