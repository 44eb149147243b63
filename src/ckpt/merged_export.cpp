#include "ckpt/merged_export.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "ckpt/adapter_export.h"
#include "ckpt/base_weights.h"
#include "ckpt/flat_states.h"
#include "ckpt/layout.h"
#include "core/error.h"
#include "core/half.h"
#include "model/hf_config.h"
#include "model/hf_tensors.h"
#include "model/model.h"
#include "model/peft_adapter.h"
#include "model/weights.h"

namespace mt::ckpt {

namespace {

constexpr size_t kChecksumChunk = 1 << 20;

void widen_to_f32(const char* raw, DType dtype, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::f32) dst[i] = reinterpret_cast<const float*>(raw)[i];
    if (dtype == DType::bf16) dst[i] = to_f32(reinterpret_cast<const bf16*>(raw)[i]);
    if (dtype == DType::f16) dst[i] = to_f32(reinterpret_cast<const f16*>(raw)[i]);
  }
}

void round_from_f32(const float* src, int64_t n, DType dtype, char* raw) {
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::f32) reinterpret_cast<float*>(raw)[i] = src[i];
    if (dtype == DType::bf16) reinterpret_cast<bf16*>(raw)[i] = round_to<bf16>(src[i]);
    if (dtype == DType::f16) reinterpret_cast<f16*>(raw)[i] = round_to<f16>(src[i]);
  }
}

// W += scale * B @ A, for W [out, in] (nn.Linear) or, with conv1d, W [in, out]; A [r, in], B [out, r].
void add_delta(float* w, const std::vector<float>& a, const std::vector<float>& b, int64_t r, int64_t in,
               int64_t out, float scale, bool conv1d) {
#pragma omp parallel for
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      float delta = 0.0f;
      for (int64_t k = 0; k < r; ++k) delta += b[o * r + k] * a[k * in + i];
      w[conv1d ? i * out + o : o * in + i] += delta * scale;
    }
}

// The model a LoRA checkpoint was trained as, and where its tensors come from.
class MergedModel {
 public:
  // `base`: the base's path when not the recorded --init-from ("").
  MergedModel(const std::string& checkpoint_dir, const CheckpointState& state, const std::string& base);
  // The base's file tensors, grouped as its shard files hold them (one group, "", for a single file).
  std::vector<WeightShard> shards() const;
  // Tensor f as exported, in fp32: the base's or the trained value, plus its module's adapter.
  void value(const FileTensor& f, std::vector<float>& out);

 private:
  const CheckpointTensor& trained(const std::string& name, const std::vector<int64_t>& shape) const;
  void read_trained(const CheckpointTensor& t, std::vector<float>& out);
  void merge_adapter(const FileTensor& f, std::vector<float>& out);
  // A data error unless every adapter of the checkpoint sits on a module weight of the model.
  void check_adapted_modules() const;

  const CheckpointState& state_;
  const std::string where_;
  LoraConfig lora_;
  ModelSpec spec_;
  ModelGraph model_;
  std::unique_ptr<WeightFiles> base_;  // null: the base is drawn from the seed
  bool sharded_ = false;               // the base has several files
  RankFiles files_;
  std::map<std::string, const CheckpointTensor*> trained_;
  std::vector<char> raw_;
  std::vector<float> a_, b_;
};

MergedModel::MergedModel(const std::string& checkpoint_dir, const CheckpointState& state,
                         const std::string& base)
    : state_(state), where_("export " + checkpoint_dir + ": "), files_(checkpoint_dir, state.layout) {
  lora_ = recorded_lora(state, where_);
  spec_ = model_config(state.model, checkpoint_dir + "/" + kStateFile);
  spec_.padded_vocab_size = spec_.vocab_size;  // file tensors hold no padding
  model_ = build_model_graph(spec_, {.lora = lora_, .seed = state.seed});
  for (const CheckpointTensor& t : state.layout.tensors) trained_[t.name] = &t;
  check_adapted_modules();
  const std::string recorded = recorded_init_from(state, where_);
  if (recorded.empty() && !base.empty())
    fail_usage("--init-from " + base + ": " + checkpoint_dir +
               " was trained over a base drawn from the seed, not from files");
  if (recorded.empty()) return;
  // The recorded path is relative to where training ran: from elsewhere the base is named again.
  if (base.empty() && !std::filesystem::exists(recorded))
    fail_data(
        where_ + "its base " + recorded +
        " is missing here (a LoRA checkpoint holds the adapters, not the base): name it with --init-from");
  const std::string init_from = base.empty() ? recorded : base;
  std::vector<char> buffer(kChecksumChunk);
  const std::vector<ManifestFile> current = checksum_base(init_from, where_, buffer);
  check_recorded_base(state, current, init_from, where_);
  base_ = std::make_unique<WeightFiles>(init_from, spec_);
  sharded_ = current.size() > 1;
}

void MergedModel::check_adapted_modules() const {
  std::set<std::string> weights;
  for (const FileTensor& f : hf_tensors(spec_, model_)) weights.insert(f.name);
  for (const auto& [name, t] : trained_) {
    if (!is_lora_a(name)) continue;
    const std::string module = name.substr(0, name.size() - lora_a_name("").size());
    if (!weights.contains(module + ".weight") || !trained_.contains(lora_b_name(module)))
      fail_data(where_ + "adapter " + name + " has no module weight " + module +
                ".weight or no lora_B in the model its settings describe");
  }
}

std::vector<WeightShard> MergedModel::shards() const {
  std::vector<WeightShard> shards;
  for (const FileTensor& f : hf_tensors(spec_, model_)) {
    const std::string file =
        sharded_ ? std::filesystem::path(base_->at(f.name).reader->path()).filename().string() : "";
    auto it = std::ranges::find(shards, file, &WeightShard::file);
    if (it == shards.end()) it = shards.insert(shards.end(), {file, {}});
    it->tensors.push_back(f);
  }
  return shards;
}

const CheckpointTensor& MergedModel::trained(const std::string& name,
                                             const std::vector<int64_t>& shape) const {
  const auto found = trained_.find(name);
  if (found == trained_.end()) fail_data(where_ + "it holds no tensor " + name);
  const CheckpointTensor& t = *found->second;
  if (t.shape != shape) fail_data(where_ + "tensor " + name + " has the wrong shape for its module");
  return t;
}

void MergedModel::read_trained(const CheckpointTensor& t, std::vector<float>& out) {
  const DType dtype = export_dtype(state_.layout);
  raw_.resize(static_cast<size_t>(t.numel()) * dtype_size(dtype));
  files_.read({state_.layout.master ? "master" : kWeightsTensor, dtype, nullptr},
              {t.offset, t.offset + t.numel()}, raw_.data());
  out.resize(static_cast<size_t>(t.numel()));
  widen_to_f32(raw_.data(), dtype, t.numel(), out.data());
}

void MergedModel::value(const FileTensor& f, std::vector<float>& out) {
  const TensorDesc& param = model_.graph.table[f.param];
  out.resize(static_cast<size_t>(f.numel()));
  if (trained_.contains(f.name))
    read_trained(trained(f.name, f.shape), out);
  else if (base_)
    base_->read_f32(f, out.data());
  else
    initial_values(param, init_rule(spec_, param), state_.seed, f.offset, f.numel(), out.data());
  if (f.name.ends_with(".weight")) merge_adapter(f, out);
}

void MergedModel::merge_adapter(const FileTensor& f, std::vector<float>& out) {
  const std::string module = f.name.substr(0, f.name.size() - std::string(".weight").size());
  const auto a = trained_.find(lora_a_name(module));
  if (a == trained_.end() || f.shape.size() != 2) return;
  const bool conv1d = peft_fan_in_fan_out(spec_);
  const int64_t in = conv1d ? f.shape[0] : f.shape[1], out_features = conv1d ? f.shape[1] : f.shape[0];
  read_trained(trained(a->first, {lora_.rank, in}), a_);
  read_trained(trained(lora_b_name(module), {out_features, lora_.rank}), b_);
  add_delta(out.data(), a_, b_, lora_.rank, in, out_features, lora_.scaling(), conv1d);
}

}  // namespace

DType export_dtype(const CheckpointLayout& layout) {
  return layout.master ? DType::f32 : layout.weights;
}

void create_export_dir(const std::string& out_dir) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) fail_data("--out " + out_dir + ": cannot create directory: " + ec.message());
}

void export_merged(const std::string& checkpoint_dir, const CheckpointState& state,
                   const std::string& out_dir, const std::string& base) {
  MergedModel model(checkpoint_dir, state,
                    base);  // checks the settings and the base before anything is written
  create_export_dir(out_dir);
  const DType dtype = export_dtype(state.layout);
  std::vector<WeightShard> shards = model.shards();
  std::vector<float> value;
  std::vector<char> bytes;
  uint64_t total = 0;
  for (WeightShard& shard : shards) {
    std::vector<SafetensorsWriter::Item> items;
    for (const FileTensor& f : shard.tensors) items.push_back({f.name, dtype, f.shape});
    const bool single = shard.file.empty();
    SafetensorsWriter writer(out_dir + "/" + (single ? kModelFile : shard.file), items, {{"format", "pt"}});
    for (const FileTensor& f : shard.tensors) {
      model.value(f, value);
      bytes.resize(value.size() * dtype_size(dtype));
      round_from_f32(value.data(), f.numel(), dtype, bytes.data());
      writer.write_next(bytes.data(), bytes.size());
      total += bytes.size();
    }
    writer.finish();
  }
  if (!shards.front().file.empty())
    write_weight_index(out_dir + "/model.safetensors.index.json", shards, total);
  write_synced(out_dir, "config.json", state.model.dump(2) + "\n");
}

}  // namespace mt::ckpt
