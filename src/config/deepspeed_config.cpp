#include "config/deepspeed_config.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "config/run_flag_table.h"
#include "core/error.h"
#include "core/json_text.h"
#include "core/warning.h"

namespace mt {

namespace {

using json = nlohmann::json;
using GivenFlags = std::set<std::string, std::less<>>;

// Keys that change nothing a run computes or holds here, warned about rather than refused, each with why; a
// key below one of them is covered by it. DeepSpeed's ZeRO-3 tuning sizes its own prefetching, which the
// plan here does block by block (memtrain estimate prints it).
struct IgnoredKey {
  std::string_view key, why;
};
constexpr IgnoredKey kIgnoredKeys[] = {
    {"steps_per_print", "logging (--log-interval sets the progress lines)"},
    {"wall_clock_breakdown", "logging"},
    {"dump_state", "logging"},
    {"comms_logger", "logging"},
    {"flops_profiler", "profiling"},
    {"tensorboard", "monitoring"},
    {"wandb", "monitoring"},
    {"csv_monitor", "monitoring"},
    {"zero_allow_untested_optimizer", "the optimizer is always AdamW"},
    {"zero_optimization.contiguous_gradients", "gradients are always one contiguous buffer"},
    {"zero_optimization.reduce_scatter", "exchanges sum in rank order whichever collective moves them"},
    {"zero_optimization.allgather_partitions", "exchanges sum in rank order whichever collective moves them"},
    {"zero_optimization.round_robin_gradients", "gradient exchanges are scheduled block by block"},
    {"zero_optimization.offload_optimizer.pin_memory", "offload I/O tuning (--offload-chunk-mb)"},
    {"zero_optimization.offload_optimizer.buffer_count", "offload I/O tuning (--offload-chunk-mb)"},
    {"zero_optimization.offload_optimizer.fast_init", "offload I/O tuning"},
    {"aio", "offload I/O tuning"},
    {"zero_optimization.sub_group_size", "the optimizer steps window by window"},
    {"zero_optimization.stage3_prefetch_bucket_size", "ZeRO-3 gathers one block ahead"},
    {"zero_optimization.stage3_param_persistence_threshold", "ZeRO-3 gathers one block ahead"},
    {"zero_optimization.stage3_max_live_parameters", "ZeRO-3 gathers one block ahead"},
    {"zero_optimization.stage3_max_reuse_distance", "ZeRO-3 gathers one block ahead"},
    {"zero_optimization.stage3_gather_16bit_weights_on_model_save",
     "checkpoints always hold model.safetensors"},
};

// The keys read besides the run flags' own: each converts into what a flag sets.
constexpr std::string_view kConvertedKeys[] = {
    "bf16",
    "bf16.enabled",
    "fp16",
    "fp16.enabled",
    "fp16.initial_scale_power",
    "zero_optimization.reduce_bucket_size",
    "zero_optimization.allgather_bucket_size",
    "zero_optimization.offload_param.device",
    "optimizer.type",
    "optimizer.params.betas",
    "optimizer.params.adam_w_mode",
};

bool covers(std::string_view prefix, std::string_view key) {
  return key == prefix || (key.starts_with(prefix) && key[prefix.size()] == '.');
}

std::string lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// The values of a file, each under its dotted key ("zero_optimization.stage"); objects are descended into.
void collect_leaves(const json& node, const std::string& prefix, std::map<std::string, const json*>& leaves) {
  for (const auto& [name, value] : node.items()) {
    const std::string key = prefix.empty() ? name : prefix + "." + name;
    if (value.is_object())
      collect_leaves(value, key, leaves);
    else
      leaves[key] = &value;
  }
}

// The flag and its value as one would write it: a float in its shortest form (0.002, not 0.00200000009).
std::string written_flag(const TrainConfig& config, std::string_view name) {
  RunFlagInput input;
  input.config = config;
  const FlagField field = run_flag(name).field(input);
  float* const* value = std::get_if<float*>(&field);
  if (!value) return flag_with_value(config, name);
  char text[32];
  const std::to_chars_result end = std::to_chars(text, text + sizeof text, **value);
  return std::string(name) + " " + std::string(text, end.ptr);
}

std::string expected_type_text(const std::string& label, const json& v, const char* expected) {
  std::string text = label + " must be " + expected + ", got " + v.dump();
  if (v == "auto") text += " (\"auto\" is for the Hugging Face Trainer to fill in: write the value)";
  return text;
}

// An integer, also written as an integral float (5e8, as DeepSpeed's examples write bucket sizes); none for
// a fraction, which is refused rather than truncated, or a value outside int64.
std::optional<int64_t> integer_value(const json& v) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return v.get<int64_t>();
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (!v.is_number_float()) return std::nullopt;
  const double d = v.get<double>();
  if (std::trunc(d) != d || std::abs(d) >= 0x1p63) return std::nullopt;
  return static_cast<int64_t>(d);
}

// v as a T, or a usage error naming `label` and what the value must be.
template <typename T>
T value_of(const json& v, const std::string& label) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) fail_usage(expected_type_text(label, v, "true or false"));
    return v.get<bool>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) fail_usage(expected_type_text(label, v, "a string"));
    return v.get<std::string>();
  } else if constexpr (std::is_integral_v<T>) {
    const std::optional<int64_t> n = integer_value(v);
    if (!n || !std::in_range<T>(*n)) fail_usage(expected_type_text(label, v, "an integer"));
    return static_cast<T>(*n);
  } else {
    if (!v.is_number()) fail_usage(expected_type_text(label, v, "a number"));
    return static_cast<T>(v.get<double>());
  }
}

class DeepSpeedConfig {
 public:
  DeepSpeedConfig(const std::string& path, const json& root, const GivenFlags& given, TrainConfig& config)
      : path_(path), given_(given), flags_(config), config_(config) {
    collect_leaves(root, "", leaves_);
  }

  void apply() {
    account_for_every_key();
    apply_precision();
    check_optimizer();
    for (const RunFlag& flag : run_flag_table())
      if (const json* v = flag.deepspeed.empty() ? nullptr : leaf(flag.deepspeed)) set_flag(flag, *v);
    apply_bucket_size();
    apply_initial_scale_power();
    apply_betas();
    check_offload_param();
  }

 private:
  std::string where(std::string_view key) const {
    return "--deepspeed-config " + path_ + ": " + std::string(key);
  }

  const json* leaf(std::string_view key) const {
    const auto it = leaves_.find(std::string(key));
    return it == leaves_.end() ? nullptr : it->second;
  }

  bool known(std::string_view key) const {
    for (std::string_view converted : kConvertedKeys)
      if (key == converted) return true;
    for (const RunFlag& flag : run_flag_table())
      if (!flag.deepspeed.empty() && key == flag.deepspeed) return true;
    return false;
  }

  // A value where the file should have had an object of known keys ("zero_optimization": 2).
  bool holds_known_keys(std::string_view key) const {
    for (std::string_view converted : kConvertedKeys)
      if (converted.starts_with(std::string(key) + ".")) return true;
    for (const RunFlag& flag : run_flag_table())
      if (flag.deepspeed.starts_with(std::string(key) + ".")) return true;
    return false;
  }

  // Known keys pass; ignored ones are warned about, once per ignored key; anything else is refused. fp16's
  // settings without fp16 are warned about in apply_precision, which knows whether it is on.
  void account_for_every_key() const {
    std::set<std::string_view> warned;
    for (const auto& [key, value] : leaves_) {
      if (known(key)) continue;
      const IgnoredKey* ignored = nullptr;
      for (const IgnoredKey& k : kIgnoredKeys)
        if (covers(k.key, key)) ignored = &k;
      if (ignored) {
        if (warned.insert(ignored->key).second)
          warn(where(ignored->key) + " has no effect here: " + std::string(ignored->why));
        continue;
      }
      if (holds_known_keys(key)) fail_usage(where(key) + " must be a JSON object, got " + value->dump());
      fail_usage(where(key) +
                 " is not a key this engine supports (docs/deepspeed_config.md lists those read)");
    }
  }

  // The given flag that sets `name`'s field ("--zero-stage 1", "--use-distributed-optimizer"), if any.
  std::optional<std::string> given_flag(std::string_view name) const {
    if (name == "--precision") {  // the flag's field is its text; the mode it resolved to is the config's
      if (given_.contains(name)) return "--precision " + precision_name(flags_.precision.precision);
      for (const char* alias : {"--bf16", "--fp16"})
        if (given_.contains(alias)) return alias;
      return std::nullopt;
    }
    if (given_.contains(name)) return written_flag(flags_, name);
    if (name == "--zero-stage" && given_.contains("--use-distributed-optimizer"))
      return "--use-distributed-optimizer";
    return std::nullopt;
  }

  // A usage error when `set` (the key's text) changed flag `name`'s value from what a given flag made it.
  void settle(std::string_view name, const TrainConfig& set, const std::string& key_text) const {
    const std::optional<std::string> flag = given_flag(name);
    if (flag && flag_with_value(flags_, name) != flag_with_value(set, name))
      fail_usage(where(key_text) + " conflicts with " + *flag);
  }

  void set_flag(const RunFlag& flag, const json& v) {
    const std::string key(flag.deepspeed), label = where(key);
    if (key.starts_with("fp16.") && config_.precision.precision != Precision::fp16) return;
    RunFlagInput input;
    input.config = config_;
    std::visit(
        [&](auto* field) {
          using T = std::remove_pointer_t<decltype(field)>;
          if constexpr (std::is_enum_v<T>) {
            const std::string name = value_of<std::string>(v, label);
            try {
              parse_flag_value(key, name, *field);
            } catch (const Error& e) {
              fail_usage(label + ": " + e.what());
            }
          } else {
            *field = value_of<T>(v, label);
          }
        },
        flag.field(input));
    check_given_value(flag, input.config, label);
    settle(flag.name(), input.config, key + " " + v.dump());
    config_ = input.config;
    config_.set_by.emplace(flag.name(), label);
  }

  // "bf16": true, or "bf16": {"enabled": true}; the same for fp16. fp16's other settings count only under
  // fp16, as in DeepSpeed.
  void apply_precision() {
    std::optional<Precision> chosen;
    for (const auto& [section, precision] : {std::pair{"bf16", Precision::bf16}, {"fp16", Precision::fp16}}) {
      const std::string key = leaf(section) ? section : std::string(section) + ".enabled";
      const json* v = leaf(key);
      if (!v) continue;
      const bool enabled = value_of<bool>(*v, where(key));
      if (enabled && chosen) fail_usage(where("bf16.enabled and fp16.enabled") + " exclude each other");
      if (enabled) chosen = precision;
      const std::optional<std::string> flag = given_flag("--precision");
      if (flag && enabled != (flags_.precision.precision == precision))
        fail_usage(where(key + " " + v->dump()) + " conflicts with " + *flag);
    }
    if (chosen) config_.precision.precision = *chosen;
    if (config_.precision.precision == Precision::fp16) return;
    for (const auto& [key, value] : leaves_)
      if (key.starts_with("fp16.") && key != "fp16.enabled")
        warn(where(key) + " has no effect here: fp16 is not enabled");
  }

  // optimizer.params count only under a type that trains as AdamW (DeepSpeed runs "Adam" as AdamW unless
  // adam_w_mode is false).
  void check_optimizer() const {
    bool any = false;
    for (const auto& [key, value] : leaves_) any = any || key.starts_with("optimizer.");
    if (!any) return;
    const json* type = leaf("optimizer.type");
    if (!type) fail_usage(where("optimizer") + " has no type: expected AdamW or Adam");
    const std::string name = value_of<std::string>(*type, where("optimizer.type"));
    if (lowercase(name) != "adamw" && lowercase(name) != "adam")
      fail_usage(where("optimizer.type") + " " + name +
                 ": only AdamW (or Adam, which DeepSpeed runs as AdamW) "
                 "trains here");
    if (config_.optimizer == OptimizerKind::adam_mini)
      fail_usage(where("optimizer.type") + " " + name +
                 " contradicts --optimizer adam-mini; drop one of them");
    if (const json* mode = leaf("optimizer.params.adam_w_mode");
        mode && !value_of<bool>(*mode, where("optimizer.params.adam_w_mode")))
      fail_usage(where("optimizer.params.adam_w_mode") +
                 " false: Adam with L2 regularisation is not supported, only AdamW's decoupled weight decay");
  }

  // Buckets in fp32 elements; one bucket size serves both exchanges here.
  void apply_bucket_size() {
    std::optional<int64_t> elements;
    std::string from;
    for (const char* key :
         {"zero_optimization.reduce_bucket_size", "zero_optimization.allgather_bucket_size"}) {
      const json* v = leaf(key);
      if (!v) continue;
      const int64_t n = value_of<int64_t>(*v, where(key));
      if (n <= 0) fail_usage(where(key) + " must be a positive number of elements, got " + v->dump());
      if (elements && *elements != n)
        fail_usage(where(from + " and " + key) +
                   " differ: one bucket size (--bucket-size-mb) serves both here");
      elements = n;
      from = key;
    }
    if (!elements) return;
    TrainConfig set = config_;
    set.bucket_size_mb = static_cast<double>(*elements) * 4 / (1 << 20);
    settle("--bucket-size-mb", set, from + " " + std::to_string(*elements));
    config_ = set;
    config_.set_by.emplace("--bucket-size-mb", where(from));
  }

  void apply_initial_scale_power() {
    const json* v = leaf("fp16.initial_scale_power");
    if (!v || config_.precision.precision != Precision::fp16) return;
    const int power = value_of<int>(*v, where("fp16.initial_scale_power"));
    if (power < 0 || power > 127)
      fail_usage(where("fp16.initial_scale_power") + " must be an integer from 0 to 127, got " + v->dump());
    TrainConfig set = config_;
    set.loss_scaler.initial_scale = std::ldexp(1.0f, power);
    settle("--initial-loss-scale", set, "fp16.initial_scale_power " + v->dump());
    config_ = set;
  }

  void apply_betas() {
    const json* v = leaf("optimizer.params.betas");
    if (!v) return;
    const std::string label = where("optimizer.params.betas");
    if (!v->is_array() || v->size() != 2) fail_usage(expected_type_text(label, *v, "[beta1, beta2]"));
    TrainConfig set = config_;
    set.adam.beta1 = value_of<float>((*v)[0], label);
    set.adam.beta2 = value_of<float>((*v)[1], label);
    for (const float beta : {set.adam.beta1, set.adam.beta2})
      if (!(beta >= 0 && beta < 1)) fail_usage(label + " must both be in [0, 1), got " + v->dump());
    settle("--adam-beta1", set, "optimizer.params.betas " + v->dump());
    settle("--adam-beta2", set, "optimizer.params.betas " + v->dump());
    config_ = set;
  }

  // "none" is what happens here; anything else would move the weights.
  void check_offload_param() const {
    const std::string key = "zero_optimization.offload_param.device";
    const json* device = leaf(key);
    if (device && value_of<std::string>(*device, where(key)) != "none")
      fail_usage(where(key) + " " + device->dump() +
                 ": parameter offload is not supported (offload_optimizer moves the optimizer states)");
  }

  const std::string& path_;
  const GivenFlags& given_;
  const TrainConfig flags_;  // what the flags made, for conflicts
  TrainConfig& config_;
  std::map<std::string, const json*> leaves_;
};

}  // namespace

void apply_deepspeed_config(const std::string& path, const GivenFlags& given_flags, TrainConfig& config) {
  std::ifstream in(path);
  if (!in) fail_usage("--deepspeed-config " + path + ": cannot open the file");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const json root = parse_json_text(text, "--deepspeed-config " + path, /*usage=*/true);
  if (!root.is_object()) fail_usage("--deepspeed-config " + path + ": expected a JSON object");
  DeepSpeedConfig(path, root, given_flags, config).apply();
}

}  // namespace mt
