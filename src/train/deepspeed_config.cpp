#include "train/deepspeed_config.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string_view>
#include <type_traits>

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

// The flag field at dotted `key` ("zero_optimization.stage"); a mode reads its name and parses it.
void read_key(const json& j, std::string_view key, FlagField field, const std::string& path) {
  const size_t dot = key.rfind('.');
  const std::string prefix(dot == std::string_view::npos ? "" : key.substr(0, dot + 1));
  const json* node = &j;
  for (size_t begin = 0, end; (end = key.find('.', begin)) != std::string_view::npos; begin = end + 1) {
    const std::string part(key.substr(begin, end - begin));
    if (!node->is_object() || !node->contains(part)) return;
    node = &(*node)[part];
  }
  const std::string last(key.substr(prefix.size()));
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_enum_v<T>) {
          std::string name(mode_name(*p));
          read(*node, last.c_str(), name, path, prefix);
          parse_flag_value(name, *p);
        } else {
          read(*node, last.c_str(), *p, path, prefix);
        }
      },
      field);
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
  RunFlagInput flags;
  flags.config = c;
  for (const RunFlag& flag : run_flag_table())
    if (!flag.deepspeed.empty()) read_key(j, flag.deepspeed, flag.field(flags), path);
  c = flags.config;
  if (j.contains("zero_optimization")) {
    int64_t bucket_elems = 0;
    read(j["zero_optimization"], "reduce_bucket_size", bucket_elems, path, "zero_optimization.");
    if (bucket_elems > 0) c.bucket_size_mb = static_cast<double>(bucket_elems) * 4 / (1 << 20);
  }
  bool bf16 = false, fp16 = false;
  if (j.contains("bf16")) read(j["bf16"], "enabled", bf16, path, "bf16.");
  if (j.contains("fp16")) {
    const json& f = j["fp16"];
    read(f, "enabled", fp16, path, "fp16.");
    int power = 0;
    read(f, "initial_scale_power", power, path, "fp16.");
    if (power > 0) c.loss_scaler.initial_scale = std::ldexp(1.0f, power);
  }
  if (bf16 && fp16) fail_data(path + ": bf16.enabled and fp16.enabled exclude each other");
  if (bf16) c.precision.precision = Precision::bf16;
  if (fp16) c.precision.precision = Precision::fp16;
}

}  // namespace mt
