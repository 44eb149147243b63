#include "train/deepspeed_config.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/run_flag_table.h"

namespace mt {

namespace {

using json = nlohmann::json;

// Sets out from j[key] when present; a value of another type is a data error naming the file and the key.
template <typename T>
void read(const json& j, const char* key, T& out, const std::string& path, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) return;
  try {
    out = j.at(key).get<T>();
  } catch (const json::exception&) {
    fail_data(path + ": " + where + key + " has the wrong type (" + j.at(key).dump() + ")");
  }
}

}  // namespace

void apply_deepspeed_config(const std::string& path, TrainConfig& c) {
  std::ifstream in(path);
  if (!in) fail_data("--deepspeed-config " + path + ": cannot open the file");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    fail_data(path + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) fail_data(path + ": expected a JSON object");
  read(j, "train_micro_batch_size_per_gpu", c.micro_batch, path, "");
  read(j, "gradient_accumulation_steps", c.grad_accum_steps, path, "");
  read(j, "train_batch_size", c.global_batch, path, "");
  if (j.contains("zero_optimization")) {
    const json& z = j["zero_optimization"];
    read(z, "stage", c.zero_stage, path, "zero_optimization.");
    read(z, "overlap_comm", c.overlap_comm, path, "zero_optimization.");
    int64_t bucket_elems = 0;
    read(z, "reduce_bucket_size", bucket_elems, path, "zero_optimization.");
    if (bucket_elems > 0) c.bucket_size_mb = static_cast<double>(bucket_elems) * 4 / (1 << 20);
    if (z.contains("offload_optimizer")) {
      std::string device(kOffloadOptimizerNames.name(c.offload_optimizer));
      read(z["offload_optimizer"], "device", device, path, "zero_optimization.offload_optimizer.");
      c.offload_optimizer = parse_offload_optimizer(device);
      read(z["offload_optimizer"], "nvme_path", c.offload_path, path, "zero_optimization.offload_optimizer.");
    }
  }
  bool bf16 = false, fp16 = false;
  if (j.contains("bf16")) read(j["bf16"], "enabled", bf16, path, "bf16.");
  if (j.contains("fp16")) {
    const json& f = j["fp16"];
    read(f, "enabled", fp16, path, "fp16.");
    read(f, "loss_scale", c.static_loss_scale, path, "fp16.");
    int power = 0;
    read(f, "initial_scale_power", power, path, "fp16.");
    if (power > 0) c.loss_scaler.initial_scale = std::ldexp(1.0f, power);
    read(f, "loss_scale_window", c.loss_scaler.window, path, "fp16.");
    read(f, "hysteresis", c.loss_scaler.hysteresis, path, "fp16.");
    read(f, "min_loss_scale", c.loss_scaler.min_scale, path, "fp16.");
  }
  if (bf16 && fp16) fail_data(path + ": bf16.enabled and fp16.enabled exclude each other");
  if (bf16) c.precision.precision = Precision::bf16;
  if (fp16) c.precision.precision = Precision::fp16;
}

}  // namespace mt
