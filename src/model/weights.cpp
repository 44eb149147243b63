#include "model/weights.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/half.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/hf_tensors.h"
#include "model/model.h"

namespace mt {

namespace {

namespace fs = std::filesystem;

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

// Calls fn(first, last, element) for each run of file tensor f's elements that this rank holds: flat
// parameters [first, last) are f's elements from `element` on.
template <class Fn>
void for_each_held_run(const Allocation& memory, const FileTensor& f, Fn fn) {
  const TensorDesc& t = memory.table()[f.param];
  const int64_t base = memory.param_offset(f.param), numel = t.numel();
  for (int64_t local = 0; local < numel;) {
    const ElementRun run = run_at(t, local, numel - local);
    local += run.count;
    const int64_t begin = std::max(run.whole, f.offset),
                  end = std::min(run.whole + run.count, f.offset + f.numel());
    const int64_t flat = base + run.local - run.whole;  // plus a whole index: its flat index
    if (begin < end) fn(flat + begin, flat + end, begin - f.offset);
  }
}

float file_value(const char* bytes, DType dtype, int64_t i) {
  if (dtype == DType::bf16) return to_f32(reinterpret_cast<const bf16*>(bytes)[i]);
  if (dtype == DType::f16) return to_f32(reinterpret_cast<const f16*>(bytes)[i]);
  return reinterpret_cast<const float*>(bytes)[i];
}

// A NaN or infinite weight would surface only as a diverged step; the file is what is wrong. `bytes` holds n
// values of f from element `first` on.
void check_finite(const SafetensorsReader& reader, const FileTensor& f, const char* bytes, DType dtype,
                  int64_t n, int64_t first = 0) {
  for (int64_t i = 0; i < n; ++i)
    if (const float v = file_value(bytes, dtype, i); !std::isfinite(v))
      fail_data(reader.path() + ": bad weights: tensor " + f.name + " holds " + std::to_string(v) +
                " at element " + std::to_string(first + i));
}

// n values value(i) stored as `dtype` (rounded to nearest even) at dst, in the device's memory, a host piece
// at a time.
template <class Value>
void store_values(Device& device, void* dst, DType dtype, int64_t n, const Value& value) {
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  device.write(dst, n * size, [&](char* piece, int64_t offset, int64_t bytes) {
    const int64_t first = offset / size;
    for (int64_t i = 0; i < bytes / size; ++i) {
      const float v = value(first + i);
      if (dtype == DType::f32) reinterpret_cast<float*>(piece)[i] = v;
      if (dtype == DType::bf16) reinterpret_cast<bf16*>(piece)[i] = round_to<bf16>(v);
      if (dtype == DType::f16) reinterpret_cast<f16*>(piece)[i] = round_to<f16>(v);
    }
  });
}

// A quantized frozen weight's file tensor, from its values in fp32, into its part.
void store_quantized(const char* bytes, DType file_dtype, const Allocation& memory, const FileTensor& f) {
  const QuantizedStorage& storage = *memory.table()[f.param].quantized;
  const QuantizedWeight part = storage.views(memory.data(f.param)).at(storage.part_starting_at(f.offset));
  std::vector<float> values(static_cast<size_t>(f.numel()));
  for (int64_t i = 0; i < f.numel(); ++i) values[i] = file_value(bytes, file_dtype, i);
  memory.device().quantize_weight(values.data(), part);
}

// A frozen weight's file values, rounded to its dtype (or quantized), into its place.
void store_frozen(const char* bytes, DType file_dtype, const Allocation& memory, const FileTensor& f) {
  if (memory.table()[f.param].quantized) return store_quantized(bytes, file_dtype, memory, f);
  const DType weights = memory.plan().policy.weights;
  char* const into =
      static_cast<char*>(memory.data(f.param)) + f.offset * static_cast<int64_t>(dtype_size(weights));
  store_values(memory.device(), into, weights, f.numel(),
               [&](int64_t i) { return file_value(bytes, file_dtype, i); });
}

// Stores one tensor read from the file into its part of the weights (rounded to their dtype; under ZeRO-3
// only this rank's shard; under tensor parallelism this rank's part) and of this rank's fp32 master copy. The
// file's bytes pass through one tensor-sized buffer, at load time only.
void store_loaded(const SafetensorsReader& reader, const TensorEntry& e, Allocation& memory,
                  const FileTensor& f) {
  const Plan& plan = memory.plan();
  const DType weights = plan.policy.weights;
  const bool frozen = memory.table()[f.param].category == Category::frozen;
  const bool quantized = memory.table()[f.param].quantized.has_value();
  if (e.dtype == weights && !quantized && !memory.table()[f.param].shard &&
      (frozen || (!plan.policy.master_weights && !plan.sharding.shards_weights()))) {
    // Straight from the file into the weights, a piece at a time.
    char* const into = static_cast<char*>(memory.data(f.param)) + f.offset * dtype_size(weights);
    const int64_t size = static_cast<int64_t>(dtype_size(e.dtype));
    memory.device().write(
        into, static_cast<int64_t>(e.bytes()), [&](char* piece, int64_t offset, int64_t bytes) {
          reader.read_part(e, static_cast<uint64_t>(offset), static_cast<uint64_t>(bytes), piece);
          check_finite(reader, f, piece, e.dtype, bytes / size, offset / size);
        });
    return;
  }
  std::vector<char> bytes(e.bytes());
  reader.read(e, bytes.data());
  check_finite(reader, f, bytes.data(), e.dtype, e.numel());
  if (frozen) {  // held whole, without a master copy
    store_frozen(bytes.data(), e.dtype, memory, f);
    return;
  }
  Device& device = memory.device();
  for_each_held_run(memory, f, [&](int64_t first, int64_t last, int64_t element) {
    const auto value = [&](int64_t g) { return file_value(bytes.data(), e.dtype, element + g - first); };
    const int64_t held = std::max(first, plan.weights_begin()), held_end = std::min(last, plan.weights_end());
    if (held < held_end)
      store_values(device, memory.weights_at(held), weights, held_end - held,
                   [&](int64_t i) { return value(held + i); });
    const int64_t begin = std::max(first, plan.shard_begin), end = std::min(last, plan.shard_end);
    if (!plan.policy.master_weights || begin >= end) return;
    memory.optimizer_state().visit(begin, end, StateAccess::write_master, [&](const StateWindow& w) {
      store_values(device, w.master, DType::f32, w.end - w.begin,
                   [&](int64_t i) { return value(w.begin + i); });
    });
  });
}

// Checks entry e of the file against f's shape and the dtypes a load converts.
void check_entry(const SafetensorsReader& reader, const TensorEntry& e, const FileTensor& f) {
  if (e.shape != f.shape)
    fail_data(reader.path() + ": tensor " + f.name + " has shape " + shape_text(e.shape) + ", expected " +
              shape_text(f.shape));
  if (e.dtype != DType::f32 && e.dtype != DType::bf16 && e.dtype != DType::f16)
    fail_data(reader.path() + ": tensor " + f.name + " has dtype " + std::string(dtype_name(e.dtype)) +
              ", expected F32, BF16 or F16");
}

void load_checked(const SafetensorsReader& reader, const TensorEntry& e, Allocation& memory,
                  const FileTensor& f) {
  check_entry(reader, e, f);
  store_loaded(reader, e, memory, f);  // padding rows (after the file's rows) keep their zeros
}

}  // namespace

std::vector<std::string> weight_files(const std::string& path) {
  std::string file = path;
  if (fs::is_directory(path))
    file = fs::exists(fs::path(path) / "model.safetensors.index.json")
               ? (fs::path(path) / "model.safetensors.index.json").string()
               : (fs::path(path) / "model.safetensors").string();
  if (!file.ends_with(".json")) return {file};
  std::ifstream in(file);
  if (!in) fail_data(file + ": cannot read");
  nlohmann::json index;
  try {
    in >> index;
  } catch (const nlohmann::json::exception& e) {
    fail_data(file + ": not valid JSON (" + e.what() + ")");
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    fail_data(file + ": no \"weight_map\" object");
  std::set<std::string> shards;  // sorted, so the shards open in name order
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) fail_data(file + ": weight_map[\"" + name + "\"] is not a file name");
    // Shards lie beside their index: a path would read (and a LoRA checkpoint record) files outside it.
    const std::string shard_name = shard.get<std::string>();
    if (shard_name.empty() || shard_name == "." || shard_name == ".." ||
        fs::path(shard_name).filename() != shard_name)
      fail_data(file + ": weight_map[\"" + name + "\"] is " + shard.dump() +
                ", expected the name of a file beside the index (no folder)");
    shards.insert(shard_name);
  }
  std::vector<std::string> files;
  for (const std::string& shard : shards) files.push_back((fs::path(file).parent_path() / shard).string());
  return files;
}

WeightFiles::WeightFiles(const std::string& path, const ModelSpec& spec) : path_(path) {
  for (const std::string& file : weight_files(path))
    readers_.push_back(std::make_unique<SafetensorsReader>(file));
  for (const auto& reader : readers_)
    for (const TensorEntry& e : reader->tensors())
      if (const std::optional<std::string> name = hf_tensor_name(spec, e.name))
        by_name_[*name] = {reader.get(), &e};
}

const WeightFiles::Found& WeightFiles::at(const std::string& name) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) fail_data(path_ + ": missing tensor " + name);
  return it->second;
}

void WeightFiles::read_f32(const FileTensor& f, float* dst) const {
  const Found& found = at(f.name);
  check_entry(*found.reader, *found.entry, f);
  std::vector<char> bytes(found.entry->bytes());
  found.reader->read(*found.entry, bytes.data());
  check_finite(*found.reader, f, bytes.data(), found.entry->dtype, f.numel());
  for (int64_t i = 0; i < f.numel(); ++i) dst[i] = file_value(bytes.data(), found.entry->dtype, i);
}

void write_weight_index(const std::string& path, const std::vector<WeightShard>& shards,
                        uint64_t total_bytes) {
  nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}},
                          {"weight_map", nlohmann::json::object()}};
  for (const WeightShard& shard : shards)
    for (const FileTensor& f : shard.tensors) index["weight_map"][f.name] = shard.file;
  write_file_atomically(path, index.dump(2) + "\n");
}

ElementRun run_at(const TensorDesc& t, int64_t local, int64_t limit) {
  if (!t.shard) return {local, local, limit};
  const TensorShard& s = *t.shard;
  int64_t inner = 1, part_width = 0;
  for (size_t d = static_cast<size_t>(s.dim) + 1; d < s.whole.size(); ++d) inner *= s.whole[d];
  for (const auto& range : s.ranges) part_width += range.second;
  const int64_t rest = local % (part_width * inner);
  int64_t j = rest / inner;  // along the split dimension, within the part
  for (const auto& range : s.ranges) {
    if (j < range.second)
      return {local, s.whole_index(local), std::min(limit, (range.second - j) * inner - rest % inner)};
    j -= range.second;
  }
  throw std::logic_error("tensor shard: element " + std::to_string(local) + " outside the part");
}

void create_laid_out_file(const std::string& path, const SafetensorsLayout& file) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_data(path + ": cannot create: " + std::strerror(errno));
  const bool ok =
      pwrite(fd, file.header.data(), file.header.size(), 0) == static_cast<ssize_t>(file.header.size()) &&
      ftruncate(fd, static_cast<off_t>(file.file_size)) == 0;
  const int err = errno;
  close(fd);
  if (!ok) fail_data(path + ": cannot write its header: " + std::strerror(err));
}

void write_tensor_parts(const std::string& path, const SafetensorsLayout& file,
                        const std::vector<FileTensor>& tensors, const Allocation& memory, bool writes_whole,
                        int64_t first, int64_t last, uint64_t element_bytes, const FlatSource& source) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) fail_data(path + ": cannot open: " + std::strerror(errno));
  bool ok = true;
  off_t at = 0;
  const auto sink = [&](const char* bytes, uint64_t left) {
    while (left > 0 && ok) {
      const ssize_t n = pwrite(fd, bytes, left, at);
      if (n < 0 && errno == EINTR) continue;
      ok = n > 0;
      if (ok) bytes += n, left -= static_cast<uint64_t>(n), at += n;
    }
  };
  for (size_t i = 0; i < tensors.size() && ok; ++i) {
    if (tensors[i].param < 0 || (!memory.table()[tensors[i].param].shard && !writes_whole)) continue;
    for_each_held_run(memory, tensors[i], [&](int64_t begin, int64_t end, int64_t element) {
      const int64_t from = std::max(begin, first), to = std::min(end, last);
      if (from >= to || !ok) return;
      at = static_cast<off_t>(file.tensor_offset[i] +
                              static_cast<uint64_t>(element + from - begin) * element_bytes);
      source(from, to, sink);
    });
  }
  ok = ok && fsync(fd) == 0;
  const int err = errno;
  close(fd);
  if (!ok) fail_data(path + ": cannot write weights: " + std::strerror(err));
}

FlatSource weight_values(const Allocation& memory) {
  return [&memory](int64_t first, int64_t last, const std::function<void(const char*, uint64_t)>& sink) {
    const Plan& plan = memory.plan();
    const uint64_t size = dtype_size(plan.policy.weights);
    if (first < plan.weights_begin() || last > plan.weights_end())
      throw std::logic_error("weights: this rank does not hold flat parameters " + std::to_string(first) +
                             "-" + std::to_string(last));
    memory.device().read(
        memory.weights_at(first), static_cast<int64_t>(static_cast<uint64_t>(last - first) * size),
        [&](const char* piece, int64_t, int64_t bytes) { sink(piece, static_cast<uint64_t>(bytes)); });
  };
}

FlatSource master_values(const Allocation& memory) {
  return [&memory](int64_t first, int64_t last, const std::function<void(const char*, uint64_t)>& sink) {
    memory.optimizer_state().visit(first, last, StateAccess::read_master, [&](const StateWindow& w) {
      memory.device().read(w.master, (w.end - w.begin) * 4, [&](const char* piece, int64_t, int64_t bytes) {
        sink(piece, static_cast<uint64_t>(bytes));
      });
    });
  };
}

// From the master copy (streamed in the optimizer state's windows, which may be offloaded) or from the
// weights.
void write_weight_file(const std::string& path, const std::vector<FileTensor>& from, const Allocation& memory,
                       const WeightWriters& writers) {
  const bool master = saves_master(memory.plan());
  const DType dtype = master ? DType::f32 : memory.plan().policy.weights;
  std::vector<SafetensorsWriter::Item> items;
  for (const FileTensor& f : from) items.push_back({f.name, dtype, f.shape});
  const FlatSource source = master ? master_values(memory) : weight_values(memory);
  if (Communicator* group = writers.group; group && group->size() > 1) {
    // The writers put their parts into a temporary file that the group's rank 0 lays out and renames.
    const SafetensorsLayout file = safetensors_layout(path, items, {{"format", "pt"}});
    const std::string parts = path + ".parts.tmp";
    const bool first = group->rank() == 0;
    if (first) create_laid_out_file(parts, file);
    group->barrier();
    if (writers.writes)
      write_tensor_parts(parts, file, from, memory, writers.writes_whole, 0, memory.num_params(),
                         dtype_size(dtype), source);
    group->barrier();
    std::error_code ec;
    if (first) fs::rename(parts, path, ec);
    if (ec) fail_data(path + ": cannot rename from " + parts + ": " + ec.message());
    return;
  }
  SafetensorsWriter writer(path, items, {{"format", "pt"}});
  // A file tensor is a contiguous range of its parameter (padding rows, when any, come after it).
  for (const FileTensor& f : from) {
    const int64_t offset = memory.param_offset(f.param) + f.offset;
    source(offset, offset + f.numel(),
           [&](const char* bytes, uint64_t size) { writer.write_part(bytes, size); });
  }
  writer.finish();
}

void load_weight_file(const std::string& path, const std::vector<FileTensor>& into, Allocation& memory) {
  const SafetensorsReader reader(path);
  for (const FileTensor& f : into) {
    const TensorEntry* e = reader.find(f.name);
    if (!e) fail_data(path + ": missing tensor " + f.name);
    load_checked(reader, *e, memory, f);
  }
  for (const TensorEntry& e : reader.tensors())
    if (std::none_of(into.begin(), into.end(), [&](const FileTensor& f) { return f.name == e.name; }))
      fail_data(path + ": unexpected tensor " + e.name);
}

void load_weights(const std::string& path, const ModelSpec& spec, const ModelGraph& model,
                  Allocation& memory) {
  const WeightFiles files(path, spec);
  std::set<std::string> unread;
  for (const auto& [name, found] : files.tensors()) unread.insert(name);
  // Every tensor of the whole model must be there, also those another pipeline stage loads.
  for (const FileTensor& f : hf_tensors(spec, whole_model(spec))) {
    files.at(f.name);  // a data error when missing
    unread.erase(f.name);
  }
  if (!unread.empty())
    fail_data(path + ": unexpected tensor " + *unread.begin() + " for this " +
              (spec.arch == Arch::llama ? "LLaMA" : "GPT-2") + " model");
  for (const FileTensor& f : hf_tensors(spec, model)) {
    const WeightFiles::Found& found = files.at(f.name);
    load_checked(*found.reader, *found.entry, memory, f);
  }
}

void save_weights(const std::string& path, const ModelSpec& spec, const ModelGraph& model,
                  const Allocation& memory, uint64_t max_shard_bytes, const WeightWriters& writers) {
  const ModelGraph whole = whole_model(spec);
  const std::vector<FileTensor> tensors =
      held_tensors(hf_tensors(spec, whole), whole, model, writers.tied_copy);
  if (!path.ends_with(".index.json")) {
    write_weight_file(path, tensors, memory, writers);
    return;
  }
  // Shards in checkpoint order, a new one when the next tensor would overflow the current one.
  std::vector<WeightShard> shards;
  uint64_t shard_bytes = 0, total = 0;
  for (const FileTensor& f : tensors) {
    const uint64_t bytes = static_cast<uint64_t>(f.numel()) *
                           (saves_master(memory.plan()) ? 4 : dtype_size(memory.plan().policy.weights));
    if (shards.empty() || (shard_bytes > 0 && shard_bytes + bytes > max_shard_bytes)) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().tensors.push_back(f);
    shard_bytes += bytes;
    total += bytes;
  }
  const fs::path folder = fs::path(path).parent_path();
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    shards[s].file = name;
    write_weight_file((folder / name).string(), shards[s].tensors, memory, writers);
  }
  if (!writers.group || writers.group->rank() == 0) write_weight_index(path, shards, total);
}

}  // namespace mt
