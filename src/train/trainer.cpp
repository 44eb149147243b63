#include "train/trainer.h"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "core/error.h"
#include "data/loader.h"
#include "dist/async_communicator.h"
#include "kernels/matmul.h"
#include "memory/allocation.h"
#include "memory/plan.h"
#include "memory/report.h"
#include "memory/timeline.h"
#include "model/executor.h"
#include "model/gpt2.h"
#include "model/gpt2_weights.h"
#include "model/zero_schedule.h"
#include "optim/schedule.h"
#include "train/metrics.h"
#include "train/zero_sync.h"

namespace mt {

namespace {

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// Micro-batches per optimizer step, from --global-batch-size or --grad-accum-steps (they must agree).
int64_t accumulation_steps(const TrainConfig& c, int64_t data_parallel) {
  if (c.grad_accum_steps < 0) fail_usage("--grad-accum-steps must be positive");
  if (c.global_batch < 0) fail_usage("--global-batch-size must be positive");
  const int64_t per_step = c.micro_batch * data_parallel;
  if (c.global_batch == 0) return std::max<int64_t>(c.grad_accum_steps, 1);
  if (c.global_batch % per_step != 0)
    fail_usage("--global-batch-size " + std::to_string(c.global_batch) + " is not divisible by micro-batch " +
               std::to_string(c.micro_batch) + " x data-parallel size " + std::to_string(data_parallel));
  const int64_t k = c.global_batch / per_step;
  if (c.grad_accum_steps != 0 && c.grad_accum_steps != k)
    fail_usage("--grad-accum-steps " + std::to_string(c.grad_accum_steps) +
               " disagrees with --global-batch-size " + std::to_string(c.global_batch) + " (" +
               std::to_string(k) + " micro-batches of " + std::to_string(c.micro_batch) + ")");
  return k;
}

// The parallel features this build runs; the rest are explicit errors rather than silent fallbacks.
void check_parallel_flags(const TrainConfig& c) {
  if (c.zero_stage < 0 || c.zero_stage > 3) fail_usage("--zero-stage must be 0, 1, 2 or 3");
  if (!(c.bucket_size_mb > 0)) fail_usage("--bucket-size-mb must be positive");
  if (c.zero_stage == 3 && !c.save_weights.empty())
    fail_usage(
        "--save-weights with --zero-stage 3: no rank holds whole weights to write; train with --zero-stage 2 "
        "to save them");
  if (c.offload_optimizer == "cpu")
    fail_usage(
        "--offload-optimizer cpu means host memory on a GPU build; this CPU build already keeps the "
        "optimizer in host memory (use none)");
  if (c.offload_optimizer != "none" && c.offload_optimizer != "nvme")
    fail_usage("--offload-optimizer must be none or nvme, got " + c.offload_optimizer);
  if (c.offload_optimizer == "nvme" && c.offload_path.empty())
    fail_usage("--offload-optimizer nvme needs --offload-path DIR");
  if (!(c.offload_chunk_mb > 0)) fail_usage("--offload-chunk-mb must be positive");
}

void check_flags(const TrainConfig& c, const ModelSpec& spec, int64_t seq_len) {
  if (c.train_iters <= 0) fail_usage("--train-iters must be a positive number of steps");
  if (c.micro_batch <= 0) fail_usage("--micro-batch-size must be positive");
  check_precision(c.precision);
  if (c.static_loss_scale != 0 && c.precision.precision != Precision::fp16)
    fail_usage("--loss-scale needs --fp16 (bf16 and fp32 train without loss scaling)");
  if (c.static_loss_scale < 0) fail_usage("--loss-scale must be positive");
  const LossScalerConfig& s = c.loss_scaler;
  if (!(s.min_scale > 0)) fail_usage("--min-loss-scale must be positive");
  if (!(s.initial_scale >= s.min_scale) || !std::isfinite(s.initial_scale))
    fail_usage("--initial-loss-scale must be finite and at least --min-loss-scale");
  if (s.window <= 0) fail_usage("--loss-scale-window must be positive");
  if (s.hysteresis <= 0) fail_usage("--hysteresis must be positive");
  if (seq_len <= 0) fail_usage("--seq-length must be positive");
  if (seq_len > spec.n_positions)
    fail_usage("--seq-length " + std::to_string(seq_len) + " exceeds the model's " +
               std::to_string(spec.n_positions) + " positions (n_positions)");
  if (c.log_interval <= 0) fail_usage("--log-interval must be positive");
  if (c.eval_interval < 0) fail_usage("--eval-interval must be 0 (off) or positive");
  if (c.eval_interval > 0 && c.eval_iters <= 0) fail_usage("--eval-iters must be positive when evaluating");
  if (c.threads < 0) fail_usage("--threads must be 0 (all cores) or positive");
  if (c.lr < 0 || c.min_lr < 0 || c.min_lr > c.lr)
    fail_usage("--lr and --min-lr must satisfy 0 <= min-lr <= lr");
  if (c.warmup_iters < 0) fail_usage("--lr-warmup-iters must not be negative");
  if (c.adam.beta1 < 0 || c.adam.beta1 >= 1 || c.adam.beta2 < 0 || c.adam.beta2 >= 1)
    fail_usage("--adam-beta1 and --adam-beta2 must be in [0, 1)");
  if (c.adam.eps <= 0) fail_usage("--adam-eps must be positive");
  if (c.adam.clip_grad < 0) fail_usage("--clip-grad must be 0 (off) or positive");
}

double evaluate(Executor& exec, Loader& val, const Gpt2Graph& model, Allocation& memory, int64_t iters) {
  val.reset();  // the same validation windows every time, so evaluations compare
  double sum = 0;
  for (int64_t i = 0; i < iters; ++i) {
    val.next_batch(memory.i32(model.tokens), memory.i32(model.targets));
    sum += exec.eval_step().loss;
  }
  return sum / static_cast<double>(iters);
}

// The timeline goes where `memtrain report OUT` looks, and to the flag's own path unless that is the same
// file.
void save_memory_timeline(const MemoryTimeline& timeline, const TrainConfig& cfg) {
  const std::string json = memory_timeline_json(timeline);
  const std::string run_copy = cfg.out + "/memory_timeline.json";
  write_file_atomically(run_copy, json);
  std::error_code ec;
  std::string written = run_copy;
  if (!std::filesystem::equivalent(cfg.memory_timeline, run_copy, ec)) {
    write_file_atomically(cfg.memory_timeline,
                          cfg.memory_timeline.ends_with(".csv") ? memory_timeline_csv(timeline) : json);
    written = cfg.memory_timeline + " and " + run_copy;
  }
  const TimelinePoint& peak = timeline.points[timeline.peak_point()];
  std::printf("memory timeline: %zu ops, peak %s during %s -> %s\n", timeline.points.size(),
              human_bytes(peak.live.total()).c_str(), peak.name.c_str(), written.c_str());
}

}  // namespace

void train(const TrainConfig& cfg) {
  check_parallel_flags(cfg);
  // Collectives run on a worker thread, overlapping the kernels (dist/async_communicator.h).
  AsyncCommunicator comm(make_communicator(cfg.dist_backend));
  const int world = comm.size(), rank = comm.rank();
  // Rank 0 logs; the other ranks' progress lines would only repeat it. Errors still reach stderr from all.
  if (rank != 0 && !std::freopen("/dev/null", "w", stdout))
    fail_data("cannot silence rank " + std::to_string(rank));
  // Ranks share the machine's cores: one thread each unless --threads says otherwise.
  if (cfg.threads > 0 || world > 1) omp_set_num_threads(cfg.threads > 0 ? cfg.threads : 1);
  const int threads = omp_get_max_threads();
  const ModelSpec spec = resolve_model(cfg.model, cfg.pad_vocab_multiple);
  const int64_t B = cfg.micro_batch, T = cfg.seq_len != 0 ? cfg.seq_len : spec.n_positions;
  check_flags(cfg, spec, T);
  const int64_t accum = accumulation_steps(cfg, world);
  const bool fp16 = cfg.precision.precision == Precision::fp16;
  LossScalerConfig scaler_config = cfg.loss_scaler;
  if (cfg.static_loss_scale > 0) scaler_config = {.initial_scale = cfg.static_loss_scale, .dynamic = false};
  std::unique_ptr<LossScaler> scaler = fp16 ? std::make_unique<LossScaler>(scaler_config) : nullptr;
  const LrSchedule schedule{cfg.lr, cfg.min_lr, cfg.warmup_iters, cfg.train_iters,
                            parse_decay_style(cfg.decay_style)};
  const bool evaluating = cfg.eval_interval > 0;
  const std::vector<std::string> train_shards = find_shards(cfg.data, "train");
  const std::vector<std::string> val_shards =
      evaluating ? find_shards(cfg.data, "val") : std::vector<std::string>{};

  // The table: the model's tensors plus the loaders' window buffers; then the one Plan everything follows.
  const ModelStatePolicy policy = model_state_policy(cfg.precision);
  Gpt2Graph model = build_gpt2_graph(
      spec,
      {.batch = B, .seq_len = T, .threads = threads, .dtype = policy.weights, .recompute = cfg.recompute});
  const LoaderConfig train_data{B, T, cfg.shuffle, cfg.seed, static_cast<int32_t>(spec.vocab_size)};
  const LoaderConfig val_data{B, T, false, cfg.seed, static_cast<int32_t>(spec.vocab_size)};
  TensorTable& table = model.graph.table;
  const int train_window =
      table.add({"loader.train.window", {Loader::window_tokens(train_data)}, DType::u16});
  const int val_window =
      evaluating ? table.add({"loader.val.window", {Loader::window_tokens(val_data)}, DType::u16}) : -1;
  const ZeroSchedule zero_schedule =
      add_zero_schedule(model.graph, world > 1 ? cfg.zero_stage : 0, policy.grads);
  const Sharding sharding{.world = world,
                          .rank = rank,
                          .stage = cfg.zero_stage,
                          .bucket_elems = static_cast<int64_t>(cfg.bucket_size_mb * (1 << 20) / 4),
                          .comm_internal_bytes = comm.buffer_bytes()};
  const OptimizerOffload offload{
      .enabled = cfg.offload_optimizer == "nvme",
      .path = cfg.offload_path,
      .chunk_elems = std::max<int64_t>(1, static_cast<int64_t>(cfg.offload_chunk_mb * (1 << 20) / 4))};
  const Plan plan = make_plan(table, policy, sharding, offload);

  std::printf("model %s: %s parameters (%s allocated, vocabulary padded %lld -> %lld)\n", spec.name.c_str(),
              with_commas(spec.num_parameters()).c_str(), with_commas(plan.num_params).c_str(),
              static_cast<long long>(spec.vocab_size), static_cast<long long>(spec.padded_vocab_size));
  std::printf("L=%lld H=%lld C=%lld | B=%lld T=%lld | %d threads | matmul %s | %zu train shards\n",
              static_cast<long long>(spec.n_layer), static_cast<long long>(spec.n_head),
              static_cast<long long>(spec.n_embd), static_cast<long long>(B), static_cast<long long>(T),
              threads, std::string(kernels::gemm_backend_name(kernels::gemm_backend())).c_str(),
              train_shards.size());
  std::printf(
      "precision %s | weights %s%s, grads %s, moments %s: %g bytes/parameter | %lld micro-batch%s/step\n",
      precision_name(cfg.precision.precision).c_str(), std::string(dtype_name(policy.weights)).c_str(),
      policy.master_weights ? " + F32 master" : "", std::string(dtype_name(policy.grads)).c_str(),
      std::string(dtype_name(policy.moments)).c_str(),
      model_state_bytes_per_param(plan.bytes, plan.num_params), static_cast<long long>(accum),
      accum == 1 ? "" : "es");
  std::printf("activation recompute: %s | activation arena %s packed from %s of tensors\n",
              recompute_name(cfg.recompute).c_str(), human_bytes(plan.activations.size).c_str(),
              human_bytes(plan.activations.sum_of_tensors).c_str());
  if (plan.offload.enabled)
    std::printf("optimizer offload: %s of master weights and moments in %s, in chunks of %s elements\n",
                human_bytes(plan.offloaded_bytes).c_str(), cfg.offload_path.c_str(),
                with_commas(plan.offload.chunk_elems).c_str());
  if (cfg.memory_report) {
    MemoryReport planned{plan.bytes, plan.bytes,      plan.activations.size, plan.activations.sum_of_tensors,
                         0,          plan.num_params, plan.offloaded_bytes};
    std::printf("memory plan:\n%s", format_memory_report(planned).c_str());
    std::vector<std::string> op_names;
    for (const Op& op : model.graph.ops) op_names.push_back(op.name);
    std::printf("%s",
                format_largest_tensors(table, plan.activations, Category::activations, 10, op_names).c_str());
  }

  Allocation memory(table, plan);
  if (cfg.init_from.empty())
    init_gpt2_params(spec, model, memory, cfg.seed);
  else
    load_gpt2_weights(cfg.init_from, spec, model, memory);
  Loader train_loader(train_shards, train_data, static_cast<uint16_t*>(memory.data(train_window)));
  std::unique_ptr<Loader> val_loader;
  if (evaluating)
    val_loader =
        std::make_unique<Loader>(val_shards, val_data, static_cast<uint16_t*>(memory.data(val_window)));

  std::vector<ParamGroup> groups;
  for (int id : model.params) groups.push_back({id, gpt2_decays(table[id])});
  AdamWConfig adam = cfg.adam;
  adam.stochastic_moments = cfg.precision.o2_stochastic_rounding;
  adam.seed = cfg.seed;
  AdamW optimizer(adam, std::move(groups));
  Executor exec(spec, model.graph, memory);
  // Only now, with every input read and checked, does the run write anything.
  std::error_code ec;
  std::filesystem::create_directories(cfg.out, ec);
  if (ec) fail_data("--out " + cfg.out + ": cannot create directory: " + ec.message());
  std::unique_ptr<MetricsLog> metrics =
      rank == 0 ? std::make_unique<MetricsLog>(cfg.out + "/metrics.jsonl") : nullptr;
  ZeroSync sync(comm, memory, zero_schedule, cfg.overlap_comm);
  if (world > 1) exec.set_op_hooks(&sync);
  MemoryTimeline timeline{.run = spec.name + " | B=" + std::to_string(B) + " T=" + std::to_string(T) + " | " +
                                 precision_name(cfg.precision.precision),
                          .loss_op = model.graph.loss_op,
                          .planned = plan.bytes,
                          .points = {}};

  for (int64_t step = 1; step <= cfg.train_iters; ++step) {
    const auto start = std::chrono::steady_clock::now();
    std::memset(memory.grads(), 0, plan.bytes[Category::grads]);
    // k micro-batches, each loss scaled by 1/k: the gradients sum to those of one batch of k*B.
    const float loss_scale = scaler ? scaler->scale() : 1.0f;
    double loss = 0;
    for (int64_t micro = 0; micro < accum; ++micro) {
      // Ranks take turns through one sample order: rank r reads every world-th batch, so the samples of a
      // step do not depend on how many ranks share them.
      for (int r = 0; r < world; ++r) {
        if (r == rank)
          train_loader.next_batch(memory.i32(model.tokens), memory.i32(model.targets));
        else
          train_loader.skip_batch();
      }
      // Every micro-batch runs the same ops on the same plan: the first one of step 1 stands for all.
      const bool record = !cfg.memory_timeline.empty() && step == 1 && micro == 0 && rank == 0;
      if (record)
        exec.set_op_observer([&](int op) {
          timeline.points.push_back({op, model.graph.ops[op].name, memory.live()});
        });
      sync.set_final_micro_batch(micro == accum - 1);
      loss += exec.train_step(loss_scale / static_cast<float>(accum * world)).loss;
      if (record) {
        exec.set_op_observer({});
        save_memory_timeline(timeline, cfg);
      }
    }
    sync.reduce_gradients();
    loss = (world > 1 ? sync.sum(loss) : loss) / static_cast<double>(accum * world);
    const float lr = schedule.at(step);
    const OptimizerStepResult update =
        sharding.shards_optimizer()
            ? optimizer.step(table, memory, lr, loss_scale, [&](double local) { return sync.sum(local); })
            : optimizer.step(table, memory, lr, loss_scale);
    if (!update.skipped) sync.gather_weights();
    if (update.skipped && !scaler)
      fail_data("training diverged: the gradient norm is " + std::to_string(update.grad_norm) + " at step " +
                std::to_string(step) + " (no loss scaler in " + precision_name(cfg.precision.precision) +
                "; try a lower --lr)");
    if (scaler) scaler->update(update.skipped);
    const double step_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    const double exposed_comm_seconds = sync.take_exposed_seconds();
    const double busy_comm_seconds = comm.take_busy_seconds();
    const double tokens_per_sec = static_cast<double>(accum * world * B * T) / (step_ms / 1000.0);

    const bool eval_now = evaluating && (step % cfg.eval_interval == 0 || step == cfg.train_iters);
    const bool log_now =
        step % cfg.log_interval == 0 || step == cfg.train_iters || eval_now || update.skipped;
    if (!log_now) continue;
    nlohmann::json record = {
        {"step", step},
        {"loss", loss},
        {"lr", lr},
        {"grad_norm", update.skipped ? nlohmann::json(nullptr) : nlohmann::json(update.grad_norm)},
        {"step_ms", step_ms},
        {"tokens_per_sec", tokens_per_sec}};
    if (world > 1) {
      // The exchanges' time on the worker, and the part of it the step waited for (not hidden by kernels).
      record["comm_ms"] = busy_comm_seconds * 1000.0;
      record["comm_exposed_ms"] = exposed_comm_seconds * 1000.0;
    }
    if (scaler) {
      record["loss_scale"] = scaler->scale();
      record["skipped"] = update.skipped;
    }
    std::printf("step %5lld/%lld | loss %.4f | lr %.2e | grad norm %.4f | %7.1f ms | %7.0f tok/s | rss %s",
                static_cast<long long>(step), static_cast<long long>(cfg.train_iters), loss, lr,
                update.grad_norm, step_ms, tokens_per_sec, human_bytes(peak_rss_bytes()).c_str());
    if (scaler)
      std::printf(" | scale %g%s", scaler->scale(), update.skipped ? " (overflow: step skipped)" : "");
    if (eval_now) {
      const double val_loss = evaluate(exec, *val_loader, model, memory, cfg.eval_iters);
      sync.take_exposed_seconds();  // evaluation's gathers are not the next step's
      comm.take_busy_seconds();
      record["val_loss"] = val_loss;
      std::printf(" | val loss %.4f", val_loss);
    }
    std::printf("\n");
    std::fflush(stdout);
    if (metrics) metrics->write(record);
  }

  // After the last gather every rank holds the same weights: one file is enough.
  if (!cfg.save_weights.empty() && rank == 0) save_gpt2_weights(cfg.save_weights, spec, model, memory);
  CategoryBytes measured = memory.measured();
  measured[Category::comm] += comm.buffer_bytes();  // the communicator's own receive buffer
  const MemoryReport report{plan.bytes,
                            measured,
                            memory.activations().high_water(),
                            plan.activations.sum_of_tensors,
                            peak_rss_bytes(),
                            plan.num_params,
                            plan.offloaded_bytes};
  std::printf("%s", format_memory_report(report).c_str());
  // Every rank reports its own plan: under ZeRO the ranks hold different shards.
  const std::string memory_json =
      cfg.out + (world > 1 ? "/memory.rank" + std::to_string(rank) + ".json" : std::string("/memory.json"));
  write_file_atomically(memory_json, memory_report_json(report).dump(2) + "\n");
  if (report.planned.bytes != report.measured.bytes)
    throw std::logic_error("measured memory differs from the plan (see " + memory_json + ")");
}

}  // namespace mt
