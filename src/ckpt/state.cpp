#include "ckpt/state.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>

#include "ckpt/layout.h"
#include "core/crc32c.h"
#include "core/error.h"

namespace mt::ckpt {

namespace {

DType dtype_named(const std::string& name, const std::string& path) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::u8, DType::f8_e4m3})
    if (dtype_name(t) == name) return t;
  fail_data(path + ": unknown dtype " + name);
}

}  // namespace

int64_t CheckpointTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

nlohmann::json to_json(const CheckpointState& s) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const CheckpointTensor& t : s.layout.tensors)
    tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"offset", t.offset}});
  nlohmann::json j = {
      {"step", s.step},
      {"run_id", s.run_id},
      {"optimizer", {{"updates_taken", s.optimizer_updates}}},
      {"lr_schedule", {{"step", s.step}, {"lr", s.metrics.value("lr", 0.0)}}},
      {"data", {{"consumed_samples", s.consumed_samples.value_or(0)}, {"shuffle_seed", s.seed}}},
      // Every stream is counter-based: a pure function of the seed and a position, so nothing
      // but the seed, the step and the cursor above is state.
      {"rng",
       {{"seed", s.seed},
        {"init", "counter-based (seed, tensor name, element)"},
        {"data_order", "counter-based (seed, epoch, shard, sample): consumed_samples restores it"},
        {"stochastic_rounding",
         "counter-based (seed, optimizer updates_taken, flat element): no other state"}}},
      {"run", s.run},
      {"model", s.model},
      {"model_name", s.model_name},
      {"metrics", s.metrics},
      {"layout",
       {{"num_params", s.layout.num_params},
        {"world", s.layout.world},
        {"tp", s.layout.tp},
        {"pp", s.layout.pp()},
        {"padded_vocab", s.layout.padded_vocab},
        {"weights", dtype_name(s.layout.weights)},
        {"master", s.layout.master},
        {"moments", dtype_name(s.layout.moments)},
        {"moment_block", s.layout.moment_block},
        {"tensors", tensors}}}};
  if (s.data_crc32c) j["data"]["crc32c"] = crc32c_hex(*s.data_crc32c);
  if (s.base_files) {
    j["base"] = {{"files", nlohmann::json::array()}};
    for (const ManifestFile& f : *s.base_files)
      j["base"]["files"].push_back({{"path", f.name}, {"bytes", f.bytes}, {"crc32c", crc32c_hex(f.crc32c)}});
  }
  if (s.loss_scaler)
    j["loss_scaler"] = {{"scale", s.loss_scaler->scale},
                        {"good_steps", s.loss_scaler->good_steps},
                        {"hysteresis_left", s.loss_scaler->hysteresis_left}};
  return j;
}

CheckpointState state_from_json(const nlohmann::json& j, const std::string& path) {
  CheckpointState s;
  try {
    s.step = j.at("step").get<int64_t>();
    s.run_id = j.value("run_id", std::string());
    s.optimizer_updates = j.at("optimizer").at("updates_taken").get<int64_t>();
    if (j.contains("loss_scaler")) {
      const nlohmann::json& l = j.at("loss_scaler");
      s.loss_scaler = LossScaler::State{l.at("scale").get<float>(), l.at("good_steps").get<int64_t>(),
                                        l.at("hysteresis_left").get<int>()};
    }
    if (const nlohmann::json& d = j.at("data"); d.contains("consumed_samples")) {
      s.consumed_samples = d.at("consumed_samples").get<int64_t>();
      if (*s.consumed_samples < 0) fail_data(path + ": data.consumed_samples is negative");
    }
    if (j.at("data").contains("crc32c"))
      s.data_crc32c =
          static_cast<uint32_t>(std::stoul(j.at("data").at("crc32c").get<std::string>(), nullptr, 16));
    s.seed = j.at("rng").at("seed").get<uint64_t>();
    s.run = j.at("run");
    s.model = j.at("model");
    s.model_name = j.value("model_name", std::string());
    s.metrics = j.at("metrics");
    const nlohmann::json& l = j.at("layout");
    // One number in checkpoints saved before pipeline parallelism.
    const nlohmann::json& counts = l.at("num_params");
    s.layout.num_params =
        counts.is_array() ? counts.get<std::vector<int64_t>>() : std::vector<int64_t>{counts.get<int64_t>()};
    s.layout.world = l.at("world").get<int>();
    s.layout.tp = l.value("tp", 1);
    if (const int pp = l.value("pp", 1); pp != s.layout.pp())
      fail_data(path + ": layout.pp is " + std::to_string(pp) + " but num_params counts " +
                std::to_string(s.layout.pp()) + " stages");
    s.layout.padded_vocab = l.value("padded_vocab", int64_t{0});
    s.layout.weights = dtype_named(l.at("weights").get<std::string>(), path);
    s.layout.master = l.at("master").get<bool>();
    s.layout.moments = dtype_named(l.at("moments").get<std::string>(), path);
    s.layout.moment_block = l.value("moment_block", int64_t{0});
    for (const nlohmann::json& t : l.at("tensors"))
      s.layout.tensors.push_back({t.at("name").get<std::string>(), t.at("shape").get<std::vector<int64_t>>(),
                                  t.at("offset").get<int64_t>()});
    if (j.contains("base")) {
      s.base_files.emplace();
      for (const nlohmann::json& f : j.at("base").at("files"))
        s.base_files->push_back(
            {f.at("path").get<std::string>(), f.at("bytes").get<uint64_t>(),
             static_cast<uint32_t>(std::stoul(f.at("crc32c").get<std::string>(), nullptr, 16))});
    }
  } catch (const nlohmann::json::exception& e) {
    fail_data(path + ": malformed: " + e.what());
  } catch (const std::logic_error& e) {  // stoul
    fail_data(path + ": malformed checksum (base or data): " + e.what());
  }
  const std::vector<int64_t>& counts = s.layout.num_params;
  if (s.step < 0 || s.optimizer_updates < 0 || s.optimizer_updates > s.step || s.layout.world < 1 ||
      s.layout.tp < 1 || counts.empty() || s.layout.world % s.layout.parts() != 0 ||
      std::ranges::any_of(counts, [](int64_t n) { return n < 0; }) || s.layout.moment_block < 0)
    fail_data(path +
              ": step, optimizer updates, world, tensor-parallel ranks, stages, parameter count or moment "
              "block out of range");
  // A stage's tensor-parallel ranks hold at least 1/tp of its whole parameters each.
  int64_t whole_bound = 0;
  for (int64_t n : counts) whole_bound += n * s.layout.tp;
  for (const CheckpointTensor& t : s.layout.tensors)
    if (t.offset < 0 || t.numel() < 0 || t.offset + t.numel() > whole_bound)
      fail_data(path + ": tensor " + t.name + " lies outside the " + std::to_string(whole_bound) +
                " flat parameters");
  return s;
}

CheckpointState read_state(const std::string& checkpoint_dir) {
  const std::string path = checkpoint_dir + "/" + kStateFile;
  std::ifstream in(path);
  if (!in) fail_data(path + ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail_data(path + ": not valid JSON: " + e.what());
  }
  return state_from_json(j, path);
}

std::string new_run_id() {
  std::random_device entropy;
  const uint64_t id = (static_cast<uint64_t>(entropy()) << 32) | entropy();
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(id));
  return text;
}

std::string checkpoint_run_id(const std::string& checkpoint_dir) {
  try {
    return read_state(checkpoint_dir).run_id;
  } catch (const Error&) {
    return "";  // unreadable: of no known lineage, so never pruned
  }
}

}  // namespace mt::ckpt
