#include "forecast/oom_doctor.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>

#include "config/check_config.h"
#include "config/run_flag_table.h"
#include "core/error.h"
#include "devices/devices.h"
#include "forecast/config_search.h"
#include "forecast/cost_model.h"
#include "forecast/shipped_profiles.h"
#include "memory/arena_pack_cache.h"
#include "memory/report.h"
#include "parallel/parallel_groups.h"

namespace mt {

int64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

namespace {

// One change of flags: what it does to the configuration, returning what the user adds to the command line.
using Change = std::function<std::string(TrainConfig&)>;

// A change said as `verb` and the arguments of `flags` in the changed configuration.
Change flag_change(std::string verb, std::vector<std::string_view> flags,
                   std::function<void(TrainConfig&)> apply) {
  return [verb = std::move(verb), flags = std::move(flags), apply = std::move(apply)](TrainConfig& t) {
    apply(t);
    return verb + command_line_args(t, flags);
  };
}

// bf16 and its O2 savings, each step of the usual order (O2 optimizer first) on top of the ones before; then
// 8-bit moments, which cost AdamW time: at the run's own precision (any), and as the further step of that
// order, replacing bf16 moments.
void add_precision_changes(const PrecisionConfig& p, std::vector<Change>& changes) {
  std::vector<std::string_view> added;
  const bool bf16_able = p.precision == Precision::fp32 || p.precision == Precision::bf16;
  if (p.precision == Precision::fp32) {
    added.push_back("--precision");
    changes.push_back(
        flag_change("add", added, [](TrainConfig& t) { t.precision.precision = Precision::bf16; }));
  }
  if (bf16_able && p.moments() == MomentDType::fp32) {
    added.push_back("--exp-avg-dtype");
    changes.push_back(flag_change("add", added, [](TrainConfig& t) {
      t.precision.precision = Precision::bf16;
      t.precision.set_moments(MomentDType::bf16);
    }));
  }
  if (bf16_able && !p.o2_gradient) {
    added.push_back("--main-grads-dtype");
    changes.push_back(flag_change("add", added, [](TrainConfig& t) {
      t.precision.precision = Precision::bf16;
      t.precision.set_moments(MomentDType::bf16);
      t.precision.o2_gradient = true;
    }));
  }
  if (std::find(added.begin(), added.end(), "--exp-avg-dtype") == added.end())
    added.push_back("--exp-avg-dtype");
  for (MomentDType eight_bit : {MomentDType::int8, MomentDType::fp8}) {
    if (p.moments() == eight_bit) continue;
    changes.push_back(flag_change("use", {"--exp-avg-dtype"},
                                  [eight_bit](TrainConfig& t) { t.precision.set_moments(eight_bit); }));
    if (bf16_able && !p.o2_gradient)
      changes.push_back(flag_change("add", added, [eight_bit](TrainConfig& t) {
        t.precision.precision = Precision::bf16;
        t.precision.set_moments(eight_bit);
        t.precision.o2_gradient = true;
      }));
  }
}

// Block recompute comes last: in a pair it is applied after the other change, and bisects for the fewest
// layers with which that changed configuration fits.
std::vector<Change> candidate_changes(const TrainConfig& c, int world, int64_t n_layer,
                                      const std::function<bool(const TrainConfig&)>& fits) {
  std::vector<Change> changes;
  add_precision_changes(c.precision, changes);
  const int dp = world / (c.tensor_parallel * c.pipeline_parallel);
  for (int stage = c.zero_stage + 1; dp > 1 && stage <= 3; ++stage)
    changes.push_back(
        flag_change("use", {"--zero-stage"}, [stage](TrainConfig& t) { t.zero_stage = stage; }));
  if (c.recompute.granularity == RecomputeGranularity::none)
    changes.push_back(flag_change("use", {"--recompute-granularity"}, [](TrainConfig& t) {
      t.recompute = {.granularity = RecomputeGranularity::selective};
    }));
  changes.push_back(flag_change("use", {"--recompute-granularity"}, [](TrainConfig& t) {
    t.recompute = full_recompute(RecomputeMethod::uniform, 1);
  }));
  // A smaller micro-batch with the same sequences per step: more accumulation, said the way the run said it.
  const int64_t per_rank =
      c.global_batch > 0 ? c.global_batch / dp : c.micro_batch * std::max<int64_t>(c.grad_accum_steps, 1);
  const std::string_view batch_flag = c.global_batch > 0 ? "--global-batch-size" : "--grad-accum-steps";
  for (int64_t micro = c.micro_batch / 2; micro >= 1; micro /= 2) {
    if (per_rank % micro != 0) continue;
    changes.push_back([micro, per_rank, batch_flag, global = c.global_batch](TrainConfig& t) {
      t.micro_batch = micro;
      if (global == 0) t.grad_accum_steps = per_rank / micro;
      return "use " + flag_with_value(t, "--micro-batch-size") + " " + flag_with_value(t, batch_flag);
    });
  }
  // More tensor-parallel ranks or pipeline stages of the same world: each holds less of every layer, or fewer
  // layers.
  for (int tp = c.tensor_parallel + 1; tp <= world; ++tp)
    if (world % (tp * c.pipeline_parallel) == 0)
      changes.push_back(flag_change("use", {"--tensor-model-parallel-size"},
                                    [tp](TrainConfig& t) { t.tensor_parallel = tp; }));
  for (int pp = c.pipeline_parallel + 1; pp <= world; ++pp)
    if (world % (c.tensor_parallel * pp) == 0)
      changes.push_back(flag_change("use", {"--pipeline-model-parallel-size"},
                                    [pp](TrainConfig& t) { t.pipeline_parallel = pp; }));
  // The update in the backward keeps only the blocks' gradients in flight (refused where it does not run:
  // accumulation, model parallelism); Adam-mini keeps one second moment per block.
  if (!c.optimizer_in_backward)
    changes.push_back(flag_change("add", {"--optimizer-in-backward"},
                                  [](TrainConfig& t) { t.optimizer_in_backward = true; }));
  if (c.optimizer != OptimizerKind::adam_mini)
    changes.push_back(
        flag_change("use", {"--optimizer"}, [](TrainConfig& t) { t.optimizer = OptimizerKind::adam_mini; }));
  if (c.offload_optimizer != OffloadOptimizer::nvme) {
    const std::string path = c.offload_path.empty() ? "DIR" : c.offload_path;
    changes.push_back(flag_change("use", {"--offload-optimizer"}, [path](TrainConfig& t) {
      t.offload_optimizer = OffloadOptimizer::nvme;
      t.offload_path = path;
    }));
  }
  changes.push_back([n_layer, fits](TrainConfig& t) {
    const int64_t layers = fewest_block_layers(t, n_layer, fits);
    t.recompute = full_recompute(RecomputeMethod::block, layers > 0 ? layers : n_layer);
    return "use " + flag_args(t, "--recompute-granularity");
  });
  return changes;
}

// The changed configurations run in this process too: at its ISA level, and its thread count per rank.
const HardwareProfile& doctor_profile(const TrainConfig& config, int world) {
  return shipped_hardware_profile(process_cpu_isa(), rank_threads(config, world));
}

// One process on one GPU: what its plan's device buffers commit against the GPU's free memory now (its total
// less what the runtime and any other process hold), or --memory-limit. The changes that would fit are the
// CPU's search; on a GPU the plan is printed with the shortfall.
void check_gpu_memory_fit(const TrainConfig& config) {
  const DeviceTarget target = plan_target(config.device, process_cpu_isa(), rank_threads(config, 1));
  const std::optional<DeviceMemoryInfo> info = device_memory_info(target);
  const int64_t limit = config.memory_limit > 0 ? config.memory_limit : info ? info->free_bytes : 0;
  if (limit <= 0) return;
  const ParallelRank place = parallel_rank(config, 1, 0);
  const RunLayout run = lay_out_run(config, place, target, parallel_buffer_bytes(place));
  const CategoryBytes committed = committed_device_bytes(run.model.graph.table, run.plan);
  const int64_t need = committed.total();
  if (need <= limit) return;
  const std::string source = config.memory_limit > 0
                                 ? std::string("--memory-limit")
                                 : "the GPU's free memory (" + human_bytes(info->total_bytes) + " less " +
                                       human_bytes(info->total_bytes - info->free_bytes) +
                                       " the runtime and other processes hold)";
  std::printf("memory plan on the GPU, as its buffers commit it: %s, over %s (%s)\n",
              human_bytes(need).c_str(), human_bytes(limit).c_str(), source.c_str());
  for (Category c : kAllCategories) {
    const int64_t bytes = committed[c];
    std::printf("  %-18s %14lld  %11s  %5.1f%%\n", std::string(category_title(c)).c_str(),
                static_cast<long long>(bytes), human_bytes(bytes).c_str(),
                100.0 * static_cast<double>(bytes) / static_cast<double>(need));
  }
  throw Error(ErrorKind::no_fit, "the plan needs " + human_bytes(need) + " of the GPU's memory, over " +
                                     source + " (" + human_bytes(limit) + "); `memtrain estimate --device " +
                                     config.device + "` shows the plan");
}

// "+12%", "-30%": a change's predicted step time against the refused run's.
std::string step_change(double changed_s, double refused_s) {
  char text[32];
  std::snprintf(text, sizeof text, "%+.0f%%", 100 * (changed_s / refused_s - 1));
  return text;
}

}  // namespace

std::vector<FitChange> changes_that_fit(const TrainConfig& config, int world, int64_t limit) {
  const CpuIsa isa = process_cpu_isa();
  const HardwareProfile& profile = doctor_profile(config, world);
  const ModelSpec spec = resolve_model(config.model, config.pad_vocab_multiple);
  // A configuration this run's flags do not allow (a micro-batch the batch does not divide into, say) fits
  // nowhere. Changes of the moments, gradients or optimizer alone keep the graph: it is laid out once.
  GraphCache graphs(profile);
  const auto planned = [&](const TrainConfig& changed) -> std::optional<ConfigCandidate> {
    // What cannot fit by its model states alone is not planned.
    if (model_states_floor(changed, spec.padded_num_parameters(), world) > static_cast<double>(limit))
      return std::nullopt;
    try {
      check_config(changed);  // the combinations refused by name (Adam-mini with offload, say)
      return evaluate_candidate(changed, world, isa, graphs);
    } catch (const Error&) {
      return std::nullopt;
    }
  };
  const auto fits = [&](const TrainConfig& changed) {
    const std::optional<ConfigCandidate> c = planned(changed);
    return c && c->rank_bytes <= limit;
  };
  const std::vector<Change> changes = candidate_changes(config, world, spec.n_layer, fits);
  std::vector<FitChange> fitting;
  const auto consider = [&](const std::string& flags, const TrainConfig& changed) {
    const std::optional<ConfigCandidate> c = planned(changed);
    if (c && c->rank_bytes <= limit) fitting.push_back({flags, c->rank_bytes, c->cost.step_s});
  };
  for (const Change& change : changes) {
    TrainConfig changed = config;
    const std::string flags = change(changed);
    consider(flags, changed);
  }
  const bool one_suffices = !fitting.empty();
  for (size_t i = 0; !one_suffices && i < changes.size(); ++i)
    for (size_t j = i + 1; j < changes.size(); ++j) {
      TrainConfig changed = config;
      const std::string first = changes[i](changed);
      const std::string second = changes[j](changed);
      consider(first + " and " + second, changed);
    }
  std::stable_sort(fitting.begin(), fitting.end(),
                   [](const FitChange& a, const FitChange& b) { return a.step_s < b.step_s; });
  return fitting;
}

void check_memory_fit(const TrainConfig& config, int world) {
  if (device_kind(config.device) == DeviceKind::cuda) return check_gpu_memory_fit(config);
  const int64_t available = available_memory_bytes();
  const int64_t limit = config.memory_limit > 0 ? config.memory_limit : available / std::max(world, 1);
  if (limit <= 0) return;  // unknown: nothing to compare with
  const ConfigCandidate run =
      evaluate_candidate(config, world, doctor_profile(config, world), process_cpu_isa());
  const int64_t total = run.rank_bytes;
  if (total <= limit) return;
  const std::string source = config.memory_limit > 0 ? "--memory-limit" : "this machine's available memory";
  std::printf("memory plan per rank: %s, over %s (%s)\n", human_bytes(total).c_str(),
              human_bytes(limit).c_str(), source.c_str());
  for (Category c : kAllCategories)
    std::printf("  %-18s %14lld  %11s  %5.1f%%\n", std::string(category_title(c)).c_str(),
                static_cast<long long>(run.bytes[c]), human_bytes(run.bytes[c]).c_str(),
                100.0 * static_cast<double>(run.bytes[c]) / static_cast<double>(total));
  std::printf("  %-18s %14lld  %11s\n", "total", static_cast<long long>(total), human_bytes(total).c_str());
  const std::vector<FitChange> changes = changes_that_fit(config, world, limit);
  const double refused_s = run.cost.step_s;
  std::ostringstream advice;
  for (size_t i = 0; i < changes.size() && i < 3; ++i)
    advice << (i == 0 ? "" : "; or ") << changes[i].flags << ": -" << human_bytes(total - changes[i].bytes)
           << ", step " << step_change(changes[i].step_s, refused_s);
  if (changes.empty())
    std::printf("no change of one or two flag groups fits; `memtrain plan` searches them all\n");
  else
    std::printf("changes that fit, fastest first: %s\n", advice.str().c_str());
  throw Error(ErrorKind::no_fit,
              "the plan needs " + human_bytes(total) + " per rank, over " + source + " (" +
                  human_bytes(limit) + ")" +
                  (changes.empty() ? "" : ": " + advice.str().substr(0, advice.str().find(';'))));
}

}  // namespace mt
