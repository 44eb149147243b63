// What the run flags' values mean and how they print: bounds, resolving the aliases, command lines, a
// checkpoint's run settings, and the modes' names. The flags themselves are kRunFlags (run_flag_table.cpp).
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <type_traits>

#include "config/check_config.h"
#include "config/deepspeed_config.h"
#include "config/run_flag_table.h"
#include "core/error.h"

namespace mt {

namespace {

// --precision NAME, or Megatron's --bf16 / --fp16; they must not contradict each other.
Precision resolve_precision(const RunFlagInput& f) {
  if (f.bf16 && f.fp16) fail_usage("--bf16 and --fp16 exclude each other");
  const std::string alias = f.bf16 ? "bf16" : f.fp16 ? "fp16" : "";
  if (!alias.empty() && !f.precision.empty() && f.precision != alias)
    fail_usage("--precision " + f.precision + " contradicts --" + alias);
  return parse_precision(!alias.empty() ? alias : f.precision.empty() ? "fp32" : f.precision);
}

// The moments' and main states' dtypes, from Megatron's flags and the MindSpeed/O2 aliases, which must not
// contradict them.
void resolve_state_dtypes(const RunFlagInput& f, PrecisionConfig& p) {
  if (f.o2_optimizer) {
    for (const auto& [flag, dtype] :
         {std::pair{"--exp-avg-dtype", p.exp_avg}, {"--exp-avg-sq-dtype", p.exp_avg_sq}})
      if (f.given.contains(flag) && dtype != MomentDType::bf16)
        fail_usage("--o2-optimizer (bf16 moments) contradicts " + std::string(flag) + " " +
                   moment_dtype_name(dtype));
    p.set_moments(MomentDType::bf16);
  }
  if (!f.main_grads_dtype.empty()) {
    const bool bf16 = kMainGradsDTypeNames.parse_or_fail("--main-grads-dtype", f.main_grads_dtype);
    if (p.o2_gradient && !bf16)
      fail_usage("--o2-gradient (bf16 gradients) contradicts --main-grads-dtype fp32");
    p.o2_gradient = bf16;
  }
  if (!f.main_params_dtype.empty()) {
    const bool master = kMainParamsDTypeNames.parse_or_fail("--main-params-dtype", f.main_params_dtype);
    if (!p.master_weights && master) fail_usage("--no-master-weights contradicts --main-params-dtype fp32");
    p.master_weights = master;
  }
}

std::string number_text(double value, int digits) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*g", digits, value);
  return text;
}

// The value as the flag takes it; enough digits that it parses back to the same bits.
std::string value_text(FlagField field) {
  return std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::string>)
          return *p;
        else if constexpr (std::is_same_v<T, bool>)
          return *p ? "true" : "false";
        else if constexpr (std::is_same_v<T, float>)
          return number_text(*p, 9);
        else if constexpr (std::is_same_v<T, double>)
          return number_text(*p, 17);
        else if constexpr (std::is_enum_v<T>)
          return std::string(mode_name(*p));
        else
          return std::to_string(*p);
      },
      field);
}

// `config` as the flags would have written it, the aliases at their defaults.
RunFlagInput input_of(const TrainConfig& config) {
  RunFlagInput input;
  input.config = config;
  return input;
}

bool is_default(const RunFlag& flag, const TrainConfig& config) {
  RunFlagInput given = input_of(config), defaults;
  const FlagField theirs = flag.field(defaults);
  return std::visit([&](auto* p) { return *p == *std::get<decltype(p)>(theirs); }, flag.field(given));
}

// A switch's name that sets `value`: the first plain one for true, the "!" one for false.
std::string switch_name(const RunFlag& flag, bool value) {
  std::string_view rest = flag.names;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view name = rest.substr(0, comma);
    if (name.starts_with('!') != value) return std::string(name.substr(name.starts_with('!') ? 1 : 0));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
  }
  throw std::logic_error("flag " + std::string(flag.names) + " has no name that sets it to " +
                         (value ? "true" : "false"));
}

// The value of a numeric flag's field, for its bound.
double numeric_value(const FlagField& field) {
  return std::visit(
      [](auto* value) -> double {
        using V = std::remove_pointer_t<decltype(value)>;
        if constexpr (std::is_arithmetic_v<V> && !std::is_same_v<V, bool>)
          return static_cast<double>(*value);
        else
          throw std::logic_error("run flag table: a bound on a flag that holds no number");
      },
      field);
}

void check_bound(const RunFlag& flag, const TrainConfig& config, std::string_view label) {
  RunFlagInput input = input_of(config);
  const FlagBound& b = flag.bound;
  const double v = numeric_value(flag.field(input));
  if (!std::isfinite(v))
    fail_usage(std::string(label) + " " + value_text(flag.field(input)) + ": expected a finite number");
  if (!(b.open ? v > b.low : v >= b.low) || !(v <= b.high))
    fail_usage(std::string(label) + " " + std::string(b.text));
}

}  // namespace

std::string flag_source(const TrainConfig& config, std::string_view name) {
  const auto it = config.set_by.find(name);
  return it == config.set_by.end() ? std::string(name) : it->second;
}

std::string flag_source_with_value(const TrainConfig& config, std::string_view name) {
  RunFlagInput given = input_of(config);
  return flag_source(config, name) + " " + value_text(run_flag(name).field(given));
}

void check_flag_bounds(const TrainConfig& config, std::initializer_list<std::string_view> names) {
  for (std::string_view name : names) {
    const RunFlag& flag = run_flag(name);
    if (flag.bound.text.empty())
      throw std::logic_error("run flag table: " + std::string(name) + " has no bound");
    check_bound(flag, config, flag_source(config, name));
  }
}

void check_given_value(const RunFlag& flag, const TrainConfig& config, std::string_view label) {
  if (flag.bound.text.empty()) return;
  RunFlagInput input = input_of(config);
  if (!flag.when_absent.empty() && numeric_value(flag.field(input)) == 0)
    fail_usage(std::string(label) + " " + std::string(flag.bound.text) + " (leave it out for " +
               std::string(flag.when_absent) + ")");
  check_bound(flag, config, label);
}

TrainConfig resolve_run_flags(const RunFlagInput& input) {
  for (const RunFlag& flag : run_flag_table())
    if (!flag.when_absent.empty() && input.given.contains(flag.name()))
      check_given_value(flag, input.config, flag.name());
  TrainConfig c = input.config;
  c.precision.precision = resolve_precision(input);
  resolve_state_dtypes(input, c.precision);
  if (input.distributed_optimizer) {
    if (c.zero_stage > 1) fail_usage("--use-distributed-optimizer (ZeRO stage 1) contradicts --zero-stage");
    c.zero_stage = 1;
  }
  if (!input.deepspeed_config.empty()) apply_deepspeed_config(input.deepspeed_config, input.given, c);
  c.recompute = parse_recompute(input.recompute_granularity, input.recompute_method,
                                input.recompute_num_layers, input.recompute_activations);
  check_lora_flags(c, input.given);
  if (input.given.contains("--memory-timeline") && c.memory_timeline.empty())
    c.memory_timeline = c.out + "/memory_timeline.json";
  return c;
}

std::string flag_args(const TrainConfig& config, std::string_view name) {
  const RunFlag& flag = run_flag(name);
  if (flag.print) return flag.print(config);
  if (is_default(flag, config)) return "";
  RunFlagInput given = input_of(config);
  const FlagField field = flag.field(given);
  if (bool* const* on = std::get_if<bool*>(&field)) return switch_name(flag, **on);
  return std::string(flag.name()) + " " + value_text(field);
}

std::string flag_with_value(const TrainConfig& config, std::string_view name) {
  RunFlagInput given = input_of(config);
  return std::string(name) + " " + value_text(run_flag(name).field(given));
}

std::string command_line_args(const TrainConfig& config, const std::vector<std::string_view>& names) {
  std::string s;
  for (std::string_view name : names)
    if (const std::string args = flag_args(config, name); !args.empty()) s += " " + args;
  return s;
}

std::vector<std::pair<std::string_view, std::string>> job_wide_args(const TrainConfig& config) {
  std::vector<std::pair<std::string_view, std::string>> args;
  for (const RunFlag& flag : run_flag_table())
    if (!flag.per_rank) args.emplace_back(flag.name(), flag_args(config, flag.name()));
  return args;
}

nlohmann::json run_settings(const TrainConfig& config, int64_t seq_len, int64_t samples_per_step) {
  RunFlagInput resolved = input_of(config);
  resolved.config.seq_len = seq_len;
  resolved.config.global_batch = samples_per_step;
  nlohmann::json settings = nlohmann::json::object();
  for (const RunFlag& flag : run_flag_table()) {
    if (!flag.trajectory) continue;
    if (flag.setting) {
      settings[std::string(flag.name())] = flag.setting(resolved.config);
      continue;
    }
    settings[std::string(flag.name())] = std::visit(
        [&](auto* p) -> nlohmann::json {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_enum_v<T>)
            return std::string(mode_name(*p));
          else if constexpr (std::is_same_v<T, bool>)
            return flag.kind == FlagKind::switch_off ? !*p : *p;
          else
            return *p;
        },
        flag.field(resolved));
  }
  // A checkpoint holds LoRA's adapters but not the frozen base: a resume must start from the same one.
  if (config.lora.enabled()) settings["--init-from"] = config.init_from;
  return settings;
}

void parse_flag_value(std::string_view, const std::string& text, DecayStyle& out) {
  out = parse_decay_style(text);
}
void parse_flag_value(std::string_view, const std::string& text, DistBackend& out) {
  out = parse_dist_backend(text);
}
void parse_flag_value(std::string_view, const std::string& text, OffloadOptimizer& out) {
  out = parse_offload_optimizer(text);
}
void parse_flag_value(std::string_view flag, const std::string& text, MomentDType& out) {
  out = kMomentDTypeNames.parse_or_fail(flag, text);
}
void parse_flag_value(std::string_view flag, const std::string& text, BaseQuant& out) {
  out = kBaseQuantNames.parse_or_fail(flag, text);
}
void parse_flag_value(std::string_view flag, const std::string& text, OptimizerKind& out) {
  out = kOptimizerNames.parse_or_fail(flag, text);
}
void parse_flag_value(std::string_view, const std::string& text, ResumeMode& out) {
  if (text.empty()) {
    out = ResumeMode::off;
    return;
  }
  const std::optional<ResumeMode> mode = kResumeModeNames.parse(text);
  if (!mode) fail_usage("--resume " + text + ": only auto is known (or --load DIR for a given checkpoint)");
  out = *mode;
}

OffloadOptimizer parse_offload_optimizer(const std::string& name) {
  if (name == "cpu")
    fail_usage(
        "--offload-optimizer cpu means host memory on a GPU build; this CPU build already keeps the "
        "optimizer in host memory (use none)");
  return kOffloadOptimizerNames.parse_or_fail("--offload-optimizer", name);
}

std::string_view mode_name(DecayStyle mode) {
  return kDecayStyleNames.name(mode);
}
std::string_view mode_name(OptimizerKind mode) {
  return kOptimizerNames.name(mode);
}
std::string_view mode_name(DistBackend mode) {
  return kDistBackendNames.name(mode);
}
std::string_view mode_name(OffloadOptimizer mode) {
  return kOffloadOptimizerNames.name(mode);
}
std::string_view mode_name(ResumeMode mode) {
  return kResumeModeNames.name(mode);
}
std::string_view mode_name(MomentDType mode) {
  return kMomentDTypeNames.name(mode);
}
std::string_view mode_name(BaseQuant mode) {
  return kBaseQuantNames.name(mode);
}

}  // namespace mt
