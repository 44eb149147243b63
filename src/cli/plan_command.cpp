// `memtrain plan`: the fastest configurations that fit, with their `memtrain train` command lines, at an ISA
// level (--cpu-isa) and on the hardware profile shipped for it or given (--profile); for --device cuda, on
// the card --gpu names, ranked by the rates its peaks give (forecast/gpu_profile.h).
#include <chrono>
#include <cstdio>
#include <optional>

#include "cli/commands.h"
#include "cli/cpu_isa_flag.h"
#include "cli/run_flags.h"
#include "config/check_config.h"
#include "core/error.h"
#include "core/units.h"
#include "devices/devices.h"
#include "forecast/config_search.h"
#include "forecast/gpu_profile.h"
#include "forecast/shipped_profiles.h"
#include "memory/report.h"

namespace mt::cli {

// How often a long search says how far it is.
constexpr std::chrono::seconds kProgressEvery{10};

namespace {

struct PlanFlags {
  std::string device_memory, profile, cpu_isa, gpu;
  int top = 5;
};

// The first lines: the ranks, their memory and the profile the ranking comes from.
void print_header(const SearchRequest& request, const std::optional<GpuProfile>& gpu) {
  const int threads = rank_threads(request.base, request.ranks);
  std::printf("%d rank%s x %s", request.ranks, request.ranks == 1 ? "" : "s",
              human_bytes(request.device_memory).c_str());
  if (gpu)
    std::printf(" on the GPU (%s; its runtime overhead %s: %s for the plan's device bytes)",
                gpu->name.c_str(), human_bytes(request.runtime_overhead).c_str(),
                human_bytes(request.room()).c_str());
  std::printf(" | global batch %lld | %d thread%s per rank at %s\nhardware profile: %s\n",
              static_cast<long long>(request.base.global_batch), threads, threads == 1 ? "" : "s",
              std::string(cpu_isa_name(request.isa)).c_str(),
              gpu ? describe_gpu_rates(*gpu).c_str()
                  : describe_profile(request.profile, request.isa, threads).c_str());
}

void print_candidate(int number, const ConfigCandidate& c, const SearchRequest& request, bool on_gpu) {
  char bubble[48] = "";
  if (c.cost.bubble_fraction > 0)
    std::snprintf(bubble, sizeof bubble, " (pipeline bubble %.1f%%)", 100 * c.cost.bubble_fraction);
  // On a GPU what must fit beside the runtime is what the device commits (the host part is pinned).
  const std::string device = on_gpu ? ", committed on the GPU " + human_bytes(c.device_bytes) + " = " +
                                          std::to_string(c.device_bytes) + " B + runtime overhead"
                                    : "";
  std::printf(
      "\n#%d  %s\n    per rank %s = %lld B (model states %s%s, activations %s, workspace %s, comm %s)%s | "
      "predicted %.0f tokens/s, %.3f s/step%s\n    %s\n",
      number, describe_config(c.config).c_str(), human_bytes(c.rank_bytes).c_str(),
      static_cast<long long>(c.rank_bytes),
      human_bytes(c.bytes[Category::params] + c.bytes[Category::master] + c.bytes[Category::grads] +
                  c.bytes[Category::optim])
          .c_str(),
      c.bytes[Category::frozen] > 0 ? (", frozen " + human_bytes(c.bytes[Category::frozen])).c_str() : "",
      human_bytes(c.bytes[Category::activations]).c_str(), human_bytes(c.bytes[Category::workspace]).c_str(),
      human_bytes(c.bytes[Category::comm]).c_str(), device.c_str(), c.cost.tokens_per_sec, c.cost.step_s,
      bubble, train_command_line(c.config, request.ranks).c_str());
}

void print_plan(const SearchRequest& request, const std::optional<GpuProfile>& gpu,
                const SearchResult& result, int top, double seconds) {
  print_header(request, gpu);
  std::printf("planned %lld configurations (%lld distinct graphs) in %.2f s; %zu fit",
              static_cast<long long>(result.candidates_planned),
              static_cast<long long>(result.graphs_laid_out), seconds, result.fitting.size());
  if (result.groups_skipped > 0)
    std::printf(" (%lld groups skipped: their weights, master weights and moments alone exceed the device)",
                static_cast<long long>(result.groups_skipped));
  std::printf("\n");
  if (result.fitting.empty())
    throw Error(ErrorKind::no_fit, "no configuration fits in " + human_bytes(request.room()) + " per rank; " +
                                       (gpu ? "a larger GPU" : "more ranks or --device-memory"));
  for (int i = 0; i < top && i < static_cast<int>(result.fitting.size()); ++i)
    print_candidate(i + 1, result.fitting[static_cast<size_t>(i)], request, gpu.has_value());
  if (!result.notes.empty()) std::printf("\nadvice:\n");
  for (const std::string& note : result.notes) std::printf("  %s\n", note.c_str());
}

// The card a plan for --device cuda is made for, from --gpu, which a plan for the CPU refuses (as estimate
// does): its memory, overhead and rates.
std::optional<GpuProfile> planned_gpu(const TrainConfig& base, const PlanFlags& flags) {
  const bool on_gpu = device_kind(base.device) == DeviceKind::cuda;
  if (!on_gpu) {
    if (!flags.gpu.empty()) fail_gpu_without_cuda(flags.gpu);
    return std::nullopt;
  }
  if (flags.gpu.empty())
    fail_usage("--device " + base.device + " needs --gpu: " + gpu_profile_names() +
               ", or a file from `memtrain calibrate --device cuda` (the card's memory and rates)");
  if (!flags.profile.empty())
    fail_usage("--profile " + flags.profile + " with --device " + base.device +
               ": a CPU's rates; the GPU's come from --gpu");
  return gpu_profile(flags.gpu, "--gpu");
}

// The memory per rank: --device-memory, else the card's.
int64_t planned_memory(const PlanFlags& flags, const std::optional<GpuProfile>& gpu) {
  if (flags.device_memory.empty()) {
    if (!gpu) fail_usage("--device-memory is required (the memory per rank: 80GiB, 24GB, bytes)");
    return gpu->memory_bytes;
  }
  const std::optional<int64_t> bytes = parse_bytes(flags.device_memory);
  if (!bytes || *bytes <= 0)
    fail_usage("--device-memory " + flags.device_memory + ": expected a size such as 80GiB or 24GB");
  return *bytes;
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto request = std::make_shared<SearchRequest>();
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand("plan",
                                     "search precision, O2, ZeRO, tensor and pipeline parallelism, "
                                     "recompute, micro-batch and offload for the "
                                     "fastest runs that fit");
  // The run flags the search starts from, which its command lines repeat.
  TrainConfig defaults;
  defaults.data = "DATA";
  defaults.train_iters = 1000;
  const auto run =
      add_run_flags(*cmd, defaults,
                    {"--model", "--global-batch-size", "--seq-length", "--offload-path", "--threads",
                     "--device", "--data", "--train-iters", "--lora-rank", "--lora-alpha", "--lora-dropout",
                     "--lora-target", "--lora-train-modules", "--base-quant", "--no-double-quant"});
  cmd->get_option("--model")->required();
  cmd->get_option("--global-batch-size")->required();
  cmd->get_option("--offload-path")->description("also try optimizer offload into this directory");
  cmd->get_option("--threads")
      ->description("OpenMP threads per rank in the command lines (0: train's default)");
  cmd->get_option("--data")->description("--data of the printed command lines")->capture_default_str();
  cmd->get_option("--train-iters")
      ->description("--train-iters of the printed command lines")
      ->capture_default_str();
  cmd->add_option("--ranks", request->ranks,
                  "ranks (MPI processes), split into data-parallel ranks, tensor-parallel ranks and pipeline "
                  "stages")
      ->capture_default_str();
  cmd->add_option("--device-memory", flags->device_memory,
                  "memory per rank: 80GiB, 24GB, bytes (with --gpu: the card's unless given)");
  cmd->add_option("--profile", flags->profile,
                  "hardware profile from `memtrain calibrate` (default: the one shipped for the planned ISA "
                  "level and threads per rank, else the nearest)");
  cmd->add_option(
      "--gpu", flags->gpu,
      "with --device cuda: the card to plan for, a shipped profile (" + gpu_profile_names() +
          ") or the file `memtrain calibrate --device cuda` wrote: its memory, the CUDA runtime's "
          "overhead, and the peak rates the ranking comes from");
  add_cpu_isa_flag(*cmd, flags->cpu_isa);
  cmd->add_option("--top", flags->top, "configurations to print")->capture_default_str();
  cmd->callback([request, flags, run] {
    request->base = run->resolve();
    const std::optional<GpuProfile> gpu = planned_gpu(request->base, *flags);
    request->device_memory = planned_memory(*flags, gpu);
    request->isa = resolve_cpu_isa(flags->cpu_isa);
    request->profile = flags->profile.empty() ? shipped_hardware_profile(
                                                    request->isa, rank_threads(request->base, request->ranks))
                                              : load_hardware_profile(flags->profile);
    if (gpu) {
      request->runtime_overhead = gpu->runtime_overhead_bytes;
      request->profile = hardware_profile_of(*gpu, request->profile);
    }
    const auto start = std::chrono::steady_clock::now();
    // A deep model's configurations take seconds each: a search that runs long says how far it is.
    auto said = start;
    request->on_planned = [start, said](int64_t planned) mutable {
      const auto now = std::chrono::steady_clock::now();
      if (now - said < kProgressEvery) return;
      said = now;
      std::fprintf(stderr, "memtrain plan: %lld configurations planned in %.0f s, searching on\n",
                   static_cast<long long>(planned), std::chrono::duration<double>(now - start).count());
    };
    const SearchResult result = search_configs(*request);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    print_plan(*request, gpu, result, flags->top, seconds);
  });
}

}  // namespace mt::cli
