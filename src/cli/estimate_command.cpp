// `memtrain estimate`: the run flags of `train` (cli/run_flags.h) plus the parallel layout and a device size;
// prints what each rank would hold at an ISA level (--cpu-isa), without allocating the model, reading data or
// writing a file.
#include <cstdio>
#include <optional>

#include "cli/commands.h"
#include "cli/cpu_isa_flag.h"
#include "cli/run_flags.h"
#include "core/error.h"
#include "core/units.h"
#include "core/warning.h"
#include "forecast/estimate.h"
#include "forecast/formulas.h"
#include "forecast/gpu_profile.h"
#include "train/run.h"

namespace mt::cli {

namespace {

struct EstimateFlags {
  int dp = 1, tp = 1, pp = 1;
  std::string device_memory, cpu_isa, gpu;
  bool json = false, explain = false;
};

// A model-parallel size by estimate's short flag or train's long one (1 when neither is given); given both,
// they must agree.
int model_parallel_size(const std::string& short_flag, int short_value, const std::string& long_flag,
                        int long_value) {
  if (short_value < 1) fail_usage(short_flag + " must be at least 1");
  if (short_value != 1 && long_value != 1 && short_value != long_value)
    fail_usage(short_flag + " " + std::to_string(short_value) + " disagrees with " + long_flag + " " +
               std::to_string(long_value));
  return short_value != 1 ? short_value : long_value;
}

void estimate(TrainConfig config, const EstimateFlags& f) {
  std::optional<int64_t> device;
  if (!f.device_memory.empty()) {
    device = parse_bytes(f.device_memory);
    if (!device) fail_usage("--device-memory " + f.device_memory + ": expected a size such as 80GiB or 24GB");
  }
  // Only --verify-resume's check reads the step count; the memory of a step does not depend on it.
  if (config.train_iters == 0) config.train_iters = 1;
  config.tensor_parallel =
      model_parallel_size("--tp", f.tp, "--tensor-model-parallel-size", config.tensor_parallel);
  config.pipeline_parallel =
      model_parallel_size("--pp", f.pp, "--pipeline-model-parallel-size", config.pipeline_parallel);
  std::optional<GpuProfile> gpu;
  if (!f.gpu.empty()) gpu = gpu_profile(f.gpu, "--gpu");
  const Estimate e = estimate_run(config, f.dp, device, resolve_cpu_isa(f.cpu_isa), gpu ? &*gpu : nullptr);
  std::vector<FormulaComparison> comparisons;
  const ModelStateLayout layout = model_state_layout(e);
  if (f.explain)
    for (const PublishedFormula& formula : published_formulas(config.precision, layout.stage))
      comparisons.push_back(compare_with_formula(formula, layout));
  if (f.json) {
    nlohmann::ordered_json json = estimate_json(e);
    if (f.explain) json["explain"] = explanation_json(comparisons);
    std::printf("%s\n", json.dump(2).c_str());
    return;
  }
  std::printf("%s", format_estimate(e).c_str());
  if (f.explain)
    std::printf("%s%s", format_explanation(comparisons, layout).c_str(),
                format_gradient_lifetimes(e.largest()).c_str());
}

// Command lines copied from `plan` carry a placeholder --data: without shards there, the estimate is of plain
// token data, and says so.
void estimate_data_shape(TrainConfig& config) {
  try {
    read_data_shape(config);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::data) throw;
    warn(std::string(e.what()) + ": estimating plain token shards (no loss mask, no packed records)");
  }
}

}  // namespace

void add_estimate_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "estimate",
      "print what each rank of a `train` run would hold, per category, exactly, without allocating it "
      "(train's flags; those that do not change memory, such as --lr, are accepted and ignored; --data, when "
      "given, says whether the shards carry loss masks or packed records, which the plan holds)");
  std::shared_ptr<RunFlags> flags = add_run_flags(*cmd);
  auto f = std::make_shared<EstimateFlags>();
  cmd->add_option("--dp", f->dp, "data-parallel ranks (MPI processes: dp x tp x pp)")->capture_default_str();
  cmd->add_option("--tp", f->tp, "tensor-parallel ranks, as train's --tensor-model-parallel-size")
      ->capture_default_str();
  cmd->add_option("--pp", f->pp, "pipeline stages (1F1B), as train's --pipeline-model-parallel-size")
      ->capture_default_str();
  cmd->add_option(
      "--device-memory", f->device_memory,
      "memory of one rank's device, e.g. 80GiB (2^30 bytes) or 24GB (10^9 bytes): fits, headroom");
  cmd->add_option("--gpu", f->gpu,
                  "with --device cuda: the card to fit, a shipped profile (" + gpu_profile_names() +
                      ") or the file `memtrain calibrate --device cuda` wrote: its memory and the CUDA "
                      "runtime's own overhead, planned on any machine");
  add_cpu_isa_flag(*cmd, f->cpu_isa);
  cmd->add_flag("--json", f->json, "print the estimate as JSON, every category in bytes");
  cmd->add_flag(
      "--explain", f->explain,
      "compare the model states with the published formulas (ZeRO, Megatron-LM, MindSpeed O2), term "
      "by term");
  cmd->callback([flags, f] {
    TrainConfig config = flags->resolve();
    if (!config.data.empty()) estimate_data_shape(config);
    estimate(config, *f);
  });
}

}  // namespace mt::cli
