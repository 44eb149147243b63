// The cost model's prediction for one training configuration, for bench_plan.sh and bench_parallel.sh to
// compare with measured steps: predict_step [--ranks N --zero-stage S --tp T --sequence-parallel 0|1 --pp P]
// PROFILE MODEL B T THREADS ACCUM PRECISION RECOMPUTE, where PRECISION is fp32, bf16 or bf16-o2 (both O2
// flags) and RECOMPUTE none, selective, uniform-N or block-N, B is the micro-batch and ACCUM the
// micro-batches per step (a pipeline's m), and N ranks run data-parallel (default 1), each split over T
// tensor-parallel ranks and P pipeline stages (default 1; mpirun -np N*T*P): the prediction is plan's
// (forecast/config_search.h: evaluate_candidate, the slowest stage's). Prints one JSON object. With
// --measure-ops R (one data-parallel rank) it also allocates each stage's plan (tensor-parallel rank 0's),
// runs R training steps on random tokens and adds "stages": per stage, per op name (layers and micro-batches
// folded into "h.*" and "@mb*"), the predicted and the fastest measured milliseconds of a step, and the
// optimizer's part of it, to show what the model gets wrong. A tensor-parallel graph or a pipeline stage runs
// in this one process as rank 0 among peers that exchange nothing (TimedAlone): its kernels, the exchanges
// left out.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/rng.h"
#include "dist/communicator.h"
#include "exec/executor.h"
#include "forecast/config_search.h"
#include "forecast/cost_model.h"
#include "optim/adamw.h"
#include "parallel/parallel_groups.h"

namespace {

// Rank 0 of `ranks` whose peers add nothing: the sums are this rank's data, a gather gives every peer's slot
// a copy of this rank's part. The kernels see the group's size (the heads and vocabulary rows they split)
// and run as under mpirun, without waiting for anyone.
class TimedAlone final : public mt::Communicator {
 public:
  explicit TimedAlone(int ranks) : ranks_(ranks) {}
  int rank() const override { return 0; }
  int size() const override { return ranks_; }
  std::string backend() const override { return "timed-alone"; }
  void all_reduce_sum(void*, int64_t, mt::DType) override {}
  void all_gather(const void* send, void* recv, int64_t count, mt::DType dtype) override {
    const size_t bytes = static_cast<size_t>(count) * mt::dtype_size(dtype);
    for (int r = 0; r < ranks_; ++r)
      if (static_cast<std::byte*>(recv) + r * bytes != send)
        std::memcpy(static_cast<std::byte*>(recv) + r * bytes, send, bytes);
  }
  void reduce_scatter_sum(const void* send, void* recv, int64_t count, mt::DType dtype) override {
    if (recv != send) std::memcpy(recv, send, static_cast<size_t>(count) * mt::dtype_size(dtype));
  }
  // A pipeline's neighbour that sends zeros.
  void send_recv(const void*, int64_t, void* recv, int64_t recv_count, mt::DType dtype, int) override {
    if (recv) std::memset(recv, 0, static_cast<size_t>(recv_count) * mt::dtype_size(dtype));
  }
  // The ops exchange only by the four above.
  void reduce_sum(const void*, void*, int64_t, mt::DType, int) override { unused("reduce_sum"); }
  void broadcast(void*, int64_t, mt::DType, int) override { unused("broadcast"); }
  void barrier() override { unused("barrier"); }
  int64_t buffer_bytes() const override { return 0; }

 protected:
  std::unique_ptr<mt::Communicator> split_into_group(int, int) override { unused("split"); }

 private:
  [[noreturn]] static void unused(const std::string& what) {
    throw std::logic_error("predict_step: the ops called " + what);
  }
  int ranks_;
};

mt::TrainConfig config_from_args(char** args) {
  mt::TrainConfig c;
  c.model = args[1];
  c.micro_batch = std::stoll(args[2]);
  c.seq_len = std::stoll(args[3]);
  c.threads = std::stoi(args[4]);
  c.grad_accum_steps = std::stoll(args[5]);
  c.train_iters = 1;
  c.eval_interval = 0;
  const std::string precision = args[6], recompute = args[7];
  c.precision.precision = mt::parse_precision(precision == "bf16-o2" ? "bf16" : precision);
  c.precision.o2_gradient = precision == "bf16-o2";
  if (c.precision.o2_gradient) c.precision.set_moments(mt::MomentDType::bf16);
  const size_t dash = recompute.find('-');
  c.recompute = dash == std::string::npos
                    ? mt::parse_recompute(recompute == "none" ? "" : recompute, "", 0, false)
                    : mt::parse_recompute("full", recompute.substr(0, dash),
                                          std::stoll(recompute.substr(dash + 1)), false);
  return c;
}

// Random token ids and targets for every micro-batch the graph holds.
void fill_batches(const mt::RunLayout& run, mt::Allocation& memory) {
  const auto random_token = [&](uint64_t stream, int64_t i) {
    return static_cast<int32_t>(mt::random_bits(1, stream, static_cast<uint64_t>(i)) %
                                static_cast<uint64_t>(run.spec.vocab_size));
  };
  uint64_t stream = 0;
  for (const mt::BatchTensors& batch : run.model.batches) {
    const int64_t n = run.model.graph.table[batch.tokens].numel();
    for (int id : {batch.tokens, batch.targets}) {
      int32_t* ids = memory.i32(id);
      for (int64_t i = 0; i < n; ++i) ids[i] = random_token(stream, i);
      ++stream;
    }
  }
}

// Per op name with the layer index and the micro-batch folded ("h.3.mlp.c_fc@mb2" -> "h.*.mlp.c_fc@mb*"):
// predicted and fastest measured seconds, each summed over the ops of that name in one step (the graph's
// passes: one per micro-batch, or one on a pipeline stage, which holds them all).
nlohmann::json measure_ops(const mt::RunLayout& run, const mt::DeviceTarget& device,
                           const mt::HardwareProfile& profile, const mt::TrainConfig& c,
                           double predicted_optimizer_s, int repeats) {
  const mt::Graph& graph = run.model.graph;
  const std::unique_ptr<mt::Backend> backend = mt::make_backend(device, run.plan.policy);
  mt::Allocation memory(graph.table, run.plan, *backend);
  mt::init_model_params(run.spec, run.model, memory, 1);
  fill_batches(run, memory);
  mt::Executor exec(run.spec, graph, memory, *backend);
  // Every target counts: the batches have no loss mask.
  const int64_t counted = static_cast<int64_t>(run.model.batches.size()) * c.micro_batch * run.seq_len;
  TimedAlone tensor_peers(c.tensor_parallel), pipeline_peers(c.pipeline_parallel);
  if (c.tensor_parallel > 1) exec.set_tensor_group(&tensor_peers);
  if (c.pipeline_parallel > 1) exec.set_pipeline(&pipeline_peers);
  using Clock = std::chrono::steady_clock;
  std::vector<double> best(graph.ops.size(), 1e30);
  Clock::time_point last;
  exec.set_op_observer([&](int op) {
    const Clock::time_point now = Clock::now();
    best[op] = std::min(best[op], std::chrono::duration<double>(now - last).count());
    last = now;
  });
  for (int r = 0; r < repeats; ++r) {
    last = Clock::now();
    exec.train_step(1.0f, 0, counted);
  }
  const double passes = static_cast<double>(run.accum) / static_cast<double>(run.model.batches.size());
  const std::regex layer(R"(\.\d+\.)"), micro_batch(R"(@mb\d+)");
  std::map<std::string, std::pair<double, double>> by_name;  // predicted, measured
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    auto& [predicted, measured] =
        by_name[std::regex_replace(std::regex_replace(graph.ops[i].name, layer, ".*."), micro_batch, "@mb*")];
    predicted +=
        mt::predict_op_cost(graph.table, graph.ops[i], run.spec, profile, c.tensor_parallel).seconds * passes;
    measured += best[i] * passes;
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [name, times] : by_name)
    out.push_back({{"op", name}, {"predicted_ms", times.first * 1e3}, {"measured_ms", times.second * 1e3}});
  // The rest of the step as the trainer runs it: the gradients zeroed and the optimizer's update.
  std::vector<mt::ParamGroup> groups;
  for (int id : run.model.params) groups.push_back({id, mt::weight_decays(graph.table[id])});
  mt::AdamW adamw({}, std::move(groups));
  double optimizer = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const Clock::time_point start = Clock::now();
    std::memset(memory.grads(), 0, run.plan.bytes[mt::Category::grads]);
    adamw.step(memory, 1e-4f, 1.0f);
    optimizer = std::min(optimizer, std::chrono::duration<double>(Clock::now() - start).count());
  }
  out.push_back(
      {{"op", "optimizer"}, {"predicted_ms", predicted_optimizer_s * 1e3}, {"measured_ms", optimizer * 1e3}});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, int> options = {{"--measure-ops", 0},       {"--ranks", 1},
                                        {"--zero-stage", 0},        {"--tp", 1},
                                        {"--sequence-parallel", 0}, {"--pp", 1}};
  bool known = true;
  for (; argc > 2 && std::string(argv[1]).starts_with("--"); argc -= 2, argv += 2) {
    const auto option = options.find(argv[1]);
    known = known && option != options.end();
    if (known) option->second = std::stoi(argv[2]);
  }
  const int repeats = options["--measure-ops"], ranks = options["--ranks"];
  if (!known || argc != 9 || (repeats > 0 && ranks > 1)) {
    std::fprintf(stderr,
                 "usage: predict_step [--measure-ops N | --ranks N --zero-stage S] [--tp T] "
                 "[--sequence-parallel 0|1] [--pp P] PROFILE MODEL B T THREADS ACCUM PRECISION RECOMPUTE\n");
    return 2;
  }
  try {
    mt::TrainConfig c = config_from_args(argv + 1);
    c.zero_stage = options["--zero-stage"];
    c.tensor_parallel = options["--tp"];
    c.sequence_parallel = options["--sequence-parallel"] != 0;
    c.pipeline_parallel = options["--pp"];
    const int world = ranks * c.tensor_parallel * c.pipeline_parallel;
    const mt::HardwareProfile profile = mt::load_hardware_profile(argv[1]);
    const mt::StepCost cost = mt::evaluate_candidate(c, world, profile, mt::process_cpu_isa()).cost;
    nlohmann::json out = {{"step_ms", cost.step_s * 1e3},
                          {"tokens_per_sec", cost.tokens_per_sec},
                          {"gflop", cost.flops / 1e9},
                          {"matmul_ms", cost.matmul_s * 1e3},
                          {"attention_ms", cost.attention_s * 1e3},
                          {"elementwise_ms", cost.elementwise_s * 1e3},
                          {"optimizer_ms", cost.optimizer_s * 1e3},
                          {"comm_ms", cost.comm_s * 1e3},
                          {"comm_exposed_ms", cost.comm_exposed_s * 1e3},
                          {"tp_comm_ms", cost.tp_comm_s * 1e3},
                          {"pp_comm_ms", cost.pp_comm_s * 1e3},
                          {"bubble_ms", cost.bubble_s * 1e3},
                          {"bubble_fraction", cost.bubble_fraction}};
    if (repeats > 0) {
      const mt::DeviceTarget device = mt::open_device(c.device, c.threads);
      out["stages"] = nlohmann::json::array();
      for (int stage = 0; stage < c.pipeline_parallel; ++stage) {
        const mt::ParallelRank place = mt::parallel_rank(c, world, stage * c.tensor_parallel);
        const mt::RunLayout run = mt::lay_out_run(c, mt::ParallelRank{.dp = 1, .pp_rank = stage}, device,
                                                  mt::parallel_buffer_bytes(place));
        const double optimizer_s = mt::predict_step_cost(run, c, 1, profile).optimizer_s;
        out["stages"].push_back(measure_ops(run, device, profile, c, optimizer_s, repeats));
      }
    }
    std::printf("%s\n", out.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "predict_step: %s\n", e.what());
    return 2;
  }
  return 0;
}
