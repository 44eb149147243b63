// Every flag of a training run, declared once: its names, the field it sets, how its value parses, whether
// it changes memory (estimate plans it) or the trajectory (a resume must repeat it), and how it prints back
// as a command-line argument. `memtrain train` and `estimate` declare their flags from this table, the
// planner and the OOM doctor print command lines with it, and checkpoints record the run's settings with it.
// Defaults are TrainConfig's member initialisers.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "config/train_config.h"

namespace mt {

// What the flags write, before resolve_run_flags folds the aliases (--bf16, --use-distributed-optimizer,
// --recompute-activations, a DeepSpeed config) into the TrainConfig.
struct RunFlagInput {
  TrainConfig config;
  std::string precision;  // --precision; empty: not given
  bool bf16 = false, fp16 = false;
  bool o2_optimizer = false;                        // MindSpeed's name of bf16 moments
  std::string main_grads_dtype, main_params_dtype;  // empty: not given
  std::string recompute_granularity, recompute_method;
  int64_t recompute_num_layers = 0;
  bool recompute_activations = false;
  std::string deepspeed_config;
  bool distributed_optimizer = false;
  // The flags given on the command line, by first name (RunFlag::name): what a DeepSpeed key must not
  // contradict, and where a 0 that stands for "not given" is refused.
  std::set<std::string, std::less<>> given;
};

// Where a flag's value goes. A mode (an enum) parses with its name table.
using FlagField =
    std::variant<std::string*, int64_t*, int*, uint64_t*, float*, double*, bool*, DecayStyle*, DistBackend*,
                 OffloadOptimizer*, ResumeMode*, MomentDType*, BaseQuant*, OptimizerKind*>;

enum class FlagKind {
  value,           // --name VALUE
  optional_value,  // --name [FILE]
  switch_on,       // --name sets true (a "!--no-name" alias sets false)
  switch_off,      // !--no-name: sets false
};

// value > low (open) or value >= low, and value <= high (so never NaN, nor infinite unless high is); the
// usage error is the flag's name and `text`.
struct FlagBound {
  double low = 0;
  bool open = false;
  double high = 1e300;
  std::string_view text = {};
};

struct RunFlag {
  std::string_view names;  // CLI11's spelling: the Megatron/DeepSpeed name first, aliases after; "!" negates
  std::string_view help;
  FlagField (*field)(RunFlagInput&);
  // The key of a DeepSpeed config that sets the same field ("zero_optimization.stage"); empty: none.
  std::string_view deepspeed = {};
  FlagKind kind = FlagKind::value;
  bool show_default = false;  // --help shows the default
  bool memory = false;        // changes the memory plan: `estimate` reads it
  bool trajectory = false;    // changes the losses: a checkpoint records it and a resume must repeat it
  // May differ between the ranks of one job (a host's cores); every other flag must match on every rank,
  // which the ranks check before step 1 (train/job_agreement.h).
  bool per_rank = false;
  // The arguments that give `config`'s value, empty for the default or when another flag's arguments carry
  // it; null: the field's value after the flag's name.
  std::string (*print)(const TrainConfig& config) = nullptr;
  // What a checkpoint records (trajectory flags); null: the field's value (switch_off: the flag's own sense).
  nlohmann::json (*setting)(const TrainConfig& config) = nullptr;
  // The values a numeric flag takes on its own, checked by check_flag_bounds; empty `text`: any value.
  // Checks that read several flags, or the model, stay with the checks of config/check_config.h.
  FlagBound bound = {};
  // Set for a flag whose 0 in TrainConfig means "not given": what applies then ("the model's positions").
  // Giving 0 explicitly is then its bound's error saying so, rather than a silent default.
  std::string_view when_absent = {};

  // The first name, without a negation's "!": the flag's key in run_settings and in the printers.
  std::string_view name() const {
    const std::string_view first = names.substr(0, names.find(','));
    return first.starts_with('!') ? first.substr(1) : first;
  }
};

// In --help order.
std::span<const RunFlag> run_flag_table();
// By its first name; std::logic_error for a name not in the table.
const RunFlag& run_flag(std::string_view name);

// How errors name flag `name` in `config`: the flag, or the file key that set it (TrainConfig::set_by).
std::string flag_source(const TrainConfig& config, std::string_view name);
// flag_source with the value ("--micro-batch-size 4", "--deepspeed-config ds.json: train_batch_size 8").
std::string flag_source_with_value(const TrainConfig& config, std::string_view name);
// A usage error for the first of `names` whose value in `config` is outside its table bound.
void check_flag_bounds(const TrainConfig& config, std::initializer_list<std::string_view> names);
// The checks of a value given explicitly as `label` (a flag, or a DeepSpeed key): its bound, if it has one,
// and a 0 where 0 means "not given" (RunFlag::when_absent).
void check_given_value(const RunFlag& flag, const TrainConfig& config, std::string_view label);

// The configuration the flags mean; usage errors for contradictions.
TrainConfig resolve_run_flags(const RunFlagInput& input);

// The arguments of flag `name` that reproduce `config`'s value ("--zero-stage 2"), empty for the default.
std::string flag_args(const TrainConfig& config, std::string_view name);
// A value flag with its value, default or not ("--micro-batch-size 4").
std::string flag_with_value(const TrainConfig& config, std::string_view name);
// `names`' arguments for `config`, each after a space, skipping those that print nothing.
std::string command_line_args(const TrainConfig& config, const std::vector<std::string_view>& names);

// Every flag the ranks of one job must share (all but the per_rank ones), with its arguments in `config`
// (flag_args: empty for the default).
std::vector<std::pair<std::string_view, std::string>> job_wide_args(const TrainConfig& config);

// The settings that shape the trajectory, keyed by flag, with the sequence length and the global batch as
// the run resolved them. Left out: --train-iters (a resume may extend the run), the world size, ZeRO stage
// and recompute (the same trajectory either way), --initial-loss-scale (the checkpoint holds the scaler's
// state), paths and logging.
nlohmann::json run_settings(const TrainConfig& config, int64_t seq_len, int64_t samples_per_step);

// The modes' parsers: a usage error naming `flag` (or the mode's own flag) for an unknown name.
void parse_flag_value(std::string_view flag, const std::string& text, DecayStyle& out);
void parse_flag_value(std::string_view flag, const std::string& text, DistBackend& out);
void parse_flag_value(std::string_view flag, const std::string& text, OffloadOptimizer& out);
void parse_flag_value(std::string_view flag, const std::string& text, ResumeMode& out);
void parse_flag_value(std::string_view flag, const std::string& text, MomentDType& out);
void parse_flag_value(std::string_view flag, const std::string& text, BaseQuant& out);
void parse_flag_value(std::string_view flag, const std::string& text, OptimizerKind& out);
OffloadOptimizer parse_offload_optimizer(const std::string& name);

std::string_view mode_name(DecayStyle mode);
std::string_view mode_name(OptimizerKind mode);
std::string_view mode_name(DistBackend mode);
std::string_view mode_name(OffloadOptimizer mode);
std::string_view mode_name(ResumeMode mode);
std::string_view mode_name(MomentDType mode);
std::string_view mode_name(BaseQuant mode);

}  // namespace mt
