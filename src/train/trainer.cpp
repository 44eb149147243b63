#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "ckpt/writer.h"
#include "core/error.h"
#include "memory/report.h"
#include "model/init.h"
#include "model/model.h"
#include "model/peft_adapter.h"
#include "model/pipeline_schedule.h"
#include "model/weights.h"
#include "parallel/gradient_sums.h"
#include "train/signals.h"

namespace mt {

namespace {

std::unique_ptr<LossScaler> make_loss_scaler(const TrainConfig& cfg) {
  if (cfg.precision.precision != Precision::fp16) return nullptr;
  LossScalerConfig scaler_config = cfg.loss_scaler;
  if (cfg.static_loss_scale > 0) scaler_config = {.initial_scale = cfg.static_loss_scale, .dynamic = false};
  return std::make_unique<LossScaler>(scaler_config);
}

}  // namespace

Trainer::Trainer(const TrainConfig& cfg, AsyncCommunicator& comm, const DeviceTarget& device)
    : cfg_(cfg),
      comm_(comm),
      world_(comm.size()),
      rank_(comm.rank()),
      groups_(cfg, comm),
      run_(lay_out_run(cfg, place_, device, groups_.buffer_bytes())),
      whole_(whole_model(run_.spec, cfg.lora)),
      backend_(make_backend(device, run_.plan.policy)),
      scaler_(make_loss_scaler(cfg)),
      schedule_{cfg.lr, cfg.min_lr, cfg.warmup_iters, cfg.decay_iters(), cfg.decay_style},
      evaluating_(cfg.eval_interval > 0),
      run_id_(ckpt::new_run_id()) {
  const std::vector<std::string> train_shards = find_shards(cfg.data, "train");
  const std::vector<std::string> val_shards =
      evaluating_ ? find_shards(cfg.data, "val") : std::vector<std::string>{};
  print_banner(train_shards.size());
  device_memory_.before_allocation(*backend_);
  allocate(train_shards, val_shards);
}

void Trainer::print_banner(size_t train_shards) const {
  const TrainConfig& cfg = cfg_;
  const int64_t B = cfg.micro_batch, T = seq_len_;
  const ModelStatePolicy& policy = plan_.policy;
  std::printf("model %s: %s parameters (%s allocated, vocabulary padded %lld -> %lld)\n", spec_.name.c_str(),
              with_commas(spec_.num_parameters()).c_str(),
              with_commas(plan_.num_params + model_.graph.table.numel(Category::frozen)).c_str(),
              static_cast<long long>(spec_.vocab_size), static_cast<long long>(spec_.padded_vocab_size));
  if (const int64_t frozen = model_.graph.table.numel(Category::frozen); frozen > 0)
    std::printf("LoRA rank %lld | %s%s\n", static_cast<long long>(cfg.lora.rank),
                format_trainable(plan_.num_params, plan_.num_params + frozen).c_str(),
                cfg.base_quant.enabled() ? (" | " + base_quant_text(cfg.base_quant)).c_str() : "");
  std::printf("L=%lld H=%lld C=%lld | B=%lld T=%lld | %s | %zu train shards\n",
              static_cast<long long>(spec_.n_layer), static_cast<long long>(spec_.n_head),
              static_cast<long long>(spec_.n_embd), static_cast<long long>(B), static_cast<long long>(T),
              backend_->description().banner.c_str(), train_shards);
  std::printf("precision %s | %s: %g bytes/parameter | %lld micro-batch%s/step\n",
              precision_name(cfg.precision.precision).c_str(), model_states_text(policy).c_str(),
              model_state_bytes_per_param(plan_.bytes, plan_.num_params), static_cast<long long>(accum_),
              accum_ == 1 ? "" : "es");
  if (world_ > 1)
    std::printf("world %d ranks = tensor %d x pipeline %d x data %d%s | ZeRO stage %d\n", world_, place_.tp,
                place_.pp, place_.dp, cfg.sequence_parallel ? " (sequence parallel)" : "", cfg.zero_stage);
  if (place_.pp > 1) {
    const int64_t layers = spec_.n_layer / place_.pp, first = place_.pp_rank * layers;
    std::printf(
        "pipeline stage %d of %d: layers %lld-%lld | 1F1B over %lld micro-batches, at most %lld in "
        "flight | bubble %.0f%% of the step\n",
        place_.pp_rank, place_.pp, static_cast<long long>(first), static_cast<long long>(first + layers - 1),
        static_cast<long long>(accum_),
        static_cast<long long>(micro_batches_in_flight(place_.pp, place_.pp_rank, accum_)),
        100.0 * pipeline_bubble_fraction(place_.pp, accum_));
  }
  std::printf("activation recompute: %s | activation arena %s packed from %s of tensors\n",
              recompute_name(cfg.recompute).c_str(), human_bytes(plan_.activations.size).c_str(),
              human_bytes(plan_.activations.sum_of_tensors).c_str());
  if (plan_.offload.enabled)
    std::printf("optimizer offload: %s of master weights and moments in %s, in chunks of %s elements\n",
                human_bytes(plan_.offloaded_bytes).c_str(), cfg.offload_path.c_str(),
                with_commas(plan_.offload.chunk_elems).c_str());
  if (cfg.memory_report) {
    MemoryReport planned{
        plan_.bytes, plan_.bytes,      plan_.activations.size, plan_.activations.sum_of_tensors,
        0,           plan_.num_params, plan_.offloaded_bytes,  plan_.host,
        plan_.host};
    std::printf("memory plan:\n%s", format_memory_report(planned).c_str());
    std::vector<std::string> op_names;
    for (const Op& op : model_.graph.ops) op_names.push_back(op.name);
    std::printf("%s", format_largest_tensors(model_.graph.table, plan_.activations, Category::activations, 10,
                                             op_names)
                          .c_str());
  }
}

void Trainer::allocate(const std::vector<std::string>& train_shards,
                       const std::vector<std::string>& val_shards) {
  const TrainConfig& cfg = cfg_;
  const int64_t B = cfg.micro_batch, T = seq_len_;
  const TensorTable& table = model_.graph.table;
  memory_ = std::make_unique<Allocation>(table, plan_, *backend_);
  device_memory_.after_allocation(*backend_, committed_device_bytes(table, plan_).total(),
                                  memory_->committed_device());
  Allocation& memory = *memory_;
  if (cfg.init_from.empty()) {
    init_model_params(spec_, model_, memory, cfg.seed);
  } else {
    load_weights(cfg.init_from, spec_, model_, memory);
    init_adapters(model_, memory, cfg.seed);  // the file holds the base only
    // Checksummed now, close to the load, rather than at the first save, after the file may have changed.
    if (cfg.lora.enabled() && !cfg.save.empty()) base_files();
  }
  if (!cfg.init_adapter.empty()) load_peft_adapter(cfg.init_adapter, spec_, model_, memory, cfg.lora);
  train_loader_ = std::make_unique<Loader>(train_shards, run_.train_data, memory.data(run_.train_window));
  if (evaluating_)
    val_loader_ = std::make_unique<Loader>(val_shards, run_.val_data, memory.data(run_.val_window));

  std::vector<ParamGroup> groups;
  // A parameter every tensor-parallel rank holds whole counts once in the gradient's norm: on the first; a
  // tied embedding the first and last stage both hold, on the first.
  for (int id : model_.params)
    if (table[id].category == Category::params)
      groups.push_back({id, weight_decays(table[id]),
                        (table[id].shard || place_.tp_rank == 0) &&
                            (id != model_.tied_embedding || place_.first_stage())});
  AdamWConfig adam = cfg.adam;
  adam.stochastic_moments = cfg.precision.o2_stochastic_rounding;
  adam.seed = cfg.seed;
  optimizer_ = std::make_unique<AdamW>(adam, std::move(groups), run_.mini_blocks);
  exec_ = std::make_unique<Executor>(spec_, model_.graph, memory, *backend_);
  sync_ = std::make_unique<ZeroSync>(groups_.data(), memory, zero_schedule_, cfg.overlap_comm);
  // Pipeline stages reduce their gradients after the step (step()): a tied embedding sums its stages' first.
  if (place_.dp > 1 && place_.pp == 1) exec_->set_op_hooks(sync_.get());
  if (cfg.optimizer_in_backward) {  // its hook sums the blocks' gradients over data-parallel ranks itself
    // Under ZeRO-3 the ops still read their block's weights gathered per window: those hooks run around it.
    OpHooks* gathers = place_.dp > 1 && cfg.zero_stage >= 3 ? sync_.get() : nullptr;
    backward_update_ = std::make_unique<BackwardUpdate>(*optimizer_, memory, run_.backward_updates,
                                                        static_cast<int>(model_.graph.ops.size()),
                                                        place_.dp > 1 ? &groups_.data() : nullptr, gathers);
    exec_->set_op_hooks(backward_update_.get());
  }
  exec_->set_tensor_group(groups_.tensor());
  exec_->set_pipeline(groups_.pipeline());
  timeline_ = {.run = spec_.name + " | B=" + std::to_string(B) + " T=" + std::to_string(T) + " | " +
                      precision_name(cfg.precision.precision),
               .loss_op = model_.graph.loss_op,
               .planned = plan_.bytes,
               .points = {}};
}

void Trainer::open_outputs(int64_t resumed_step) {
  if (rank_ == 0) metrics_ = std::make_unique<MetricsLog>(cfg_.out + "/metrics.jsonl", resumed_step);
}

StepOutcome Trainer::step(int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  // The step reads the next global batch of samples: micro-batch m of data-parallel rank r takes the b
  // samples from (m x dp + r) x b. Its loss is one mean over all their counted targets, counted first, so
  // the gradients sum to those of one batch of k x dp x b however the step is split.
  const float loss_scale = scaler_ ? scaler_->scale() : 1.0f;
  const int64_t step_targets = train_loader_->count_targets(consumed_samples_, step_samples());
  StepOutcome out;
  out.lr = schedule_.at(step);
  out.update = backward_update_ ? update_in_backward(step, out.lr, loss_scale, step_targets)
                                : accumulate_and_update(step, out.lr, loss_scale, step_targets);
  consumed_samples_ += step_samples();
  if (!out.update.skipped) sync_->gather_weights();
  if (out.update.skipped && !scaler_)
    fail_data("training diverged: the gradient norm is " + std::to_string(out.update.grad_norm) +
              " at step " + std::to_string(step) + " (no loss scaler in " +
              precision_name(cfg_.precision.precision) +
              "; the weights and optimizer state it started from were finite: try a lower --lr)");
  if (scaler_) scaler_->update(out.update.skipped);
  out.loss = step_loss(groups_, *sync_, exec_->loss());  // the loss scalar read once a step
  out.step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // The tensor group's and the pipeline's exchanges sit between kernels that wait for them: all exposed.
  out.comm_exposed_ms =
      (sync_->take_exposed_seconds() + groups_.take_model_parallel_blocked_seconds()) * 1000.0;
  out.comm_busy_ms = comm_.take_busy_seconds() * 1000.0;
  out.tokens_per_sec =
      static_cast<double>(accum_ * place_.dp * cfg_.micro_batch * seq_len_) / (out.step_ms / 1000.0);
  device_memory_.after_step(*backend_, step);
  return out;
}

void Trainer::run_micro_batches(int64_t step, float loss_scale, int64_t step_targets, bool record) {
  Allocation& memory = *memory_;
  exec_->clear_loss();
  // A pass of the graph runs one micro-batch, or a pipeline stage's all of them.
  const int64_t per_pass = static_cast<int64_t>(model_.batches.size()), passes = accum_ / per_pass;
  const int dp = place_.dp;
  const int64_t first = consumed_samples_, b = cfg_.micro_batch;
  for (int64_t pass = 0; pass < passes; ++pass) {
    report_step_progress(step, pass * per_pass + 1, accum_);
    for (int64_t i = 0; i < per_pass; ++i)
      load_batch(*train_loader_, model_.batches[static_cast<size_t>(i)],
                 first + ((pass * per_pass + i) * dp + place_.dp_rank) * b);
    // Every pass runs the same ops on the same plan: the first one of step 1 stands for all.
    const bool recording = record && !cfg_.memory_timeline.empty() && step == 1 && pass == 0 && rank_ == 0;
    if (recording)
      exec_->set_op_observer([&](int op) {
        timeline_.points.push_back({op, model_.graph.ops[op].name, memory.live()});
      });
    sync_->set_final_micro_batch(pass == passes - 1);
    const auto first_sample = static_cast<uint64_t>(first + (pass * per_pass * dp + place_.dp_rank) * b);
    exec_->train_step(loss_scale, first_sample, step_targets);
    if (recording) {
      exec_->set_op_observer({});
      save_memory_timeline();
    }
  }
}

OptimizerStepResult Trainer::accumulate_and_update(int64_t step, float lr, float loss_scale,
                                                   int64_t step_targets) {
  Allocation& memory = *memory_;
  memory.device().zero(memory.grads(), memory.grads_bytes());
  run_micro_batches(step, loss_scale, step_targets, /*record=*/true);
  if (place_.pp > 1) {
    sum_tied_embedding_grads(groups_, memory, model_);
    if (place_.dp > 1) sync_->start_block_reductions();
  }
  sync_->reduce_gradients();
  if (cfg_.sequence_parallel) sum_sequence_parallel_grads(groups_, memory, model_);
  return optimizer_->step(
      memory, lr, loss_scale,
      [&](double local) { return sum_norm_over_shards(groups_, *sync_, plan_, local); },
      [&](double* values, int64_t n) { sync_->sum(values, n); });
}

OptimizerStepResult Trainer::update_in_backward(int64_t step, float lr, float loss_scale,
                                                int64_t step_targets) {
  // Clipping and fp16's overflow skip need the step's norm before the first update: a first pass finds it.
  float multiplier = 1.0f / loss_scale;
  const bool norm_first = cfg_.adam.clip_grad > 0 || scaler_;
  if (norm_first) {
    backward_update_->begin_norm_pass();
    run_micro_batches(step, loss_scale, step_targets, /*record=*/true);
    const double norm = backward_update_->norm() / loss_scale;
    if (!std::isfinite(norm)) return {norm, true};
    multiplier = optimizer_->grad_multiplier(norm, loss_scale);
  }
  backward_update_->begin_update_pass(step, lr, multiplier);
  run_micro_batches(step, loss_scale, step_targets, /*record=*/!norm_first);
  return {backward_update_->norm() / loss_scale, false};
}

void Trainer::load_batch(Loader& loader, const BatchTensors& batch, int64_t first_sample) {
  const Allocation& memory = *memory_;
  // The host fills each tensor in place, or its staging twin where it cannot write the device's memory.
  const auto host = [&](int id) { return id >= 0 ? memory.staged(id) : nullptr; };
  loader.read(first_sample, cfg_.micro_batch,
              {.inputs = static_cast<int32_t*>(host(batch.tokens)),
               .targets = static_cast<int32_t*>(host(batch.targets)),
               .loss_mask = static_cast<uint8_t*>(host(batch.loss_mask)),
               .positions = static_cast<int32_t*>(host(batch.positions))});
  for (int id : {batch.tokens, batch.targets, batch.loss_mask, batch.positions})
    if (id >= 0) memory.upload(id);
}

void Trainer::log(int64_t step, const StepOutcome& outcome) {
  const OptimizerStepResult& update = outcome.update;
  const bool eval_now = evaluating_ && (step % cfg_.eval_interval == 0 || step == cfg_.train_iters);
  const bool log_now =
      step % cfg_.log_interval == 0 || step == cfg_.train_iters || eval_now || update.skipped;
  if (!log_now) return;
  nlohmann::json record = {
      {"step", step},
      {"loss", outcome.loss},
      {"lr", outcome.lr},
      {"grad_norm", update.skipped ? nlohmann::json(nullptr) : nlohmann::json(update.grad_norm)},
      {"step_ms", outcome.step_ms},
      {"tokens_per_sec", outcome.tokens_per_sec},
  };
  for (const auto& [key, value] : backend_->description().fields) record[key] = value;  // the level it ran at
  if (world_ > 1) {
    // The exchanges' time on the worker, and the part of it the step waited for (not hidden by kernels).
    record["comm_ms"] = outcome.comm_busy_ms;
    record["comm_exposed_ms"] = outcome.comm_exposed_ms;
  }
  if (scaler_) {
    record["loss_scale"] = scaler_->scale();
    record["skipped"] = update.skipped;
  }
  std::printf("step %5lld/%lld | loss %.4f | lr %.2e | grad norm %.4f | %7.1f ms | %7.0f tok/s | rss %s",
              static_cast<long long>(step), static_cast<long long>(cfg_.train_iters), outcome.loss,
              outcome.lr, update.grad_norm, outcome.step_ms, outcome.tokens_per_sec,
              human_bytes(peak_rss_bytes()).c_str());
  if (scaler_)
    std::printf(" | scale %g%s", scaler_->scale(), update.skipped ? " (overflow: step skipped)" : "");
  if (eval_now) {
    const double val_loss = evaluate();
    sync_->take_exposed_seconds();  // evaluation's gathers are not the next step's
    groups_.take_model_parallel_blocked_seconds();
    comm_.take_busy_seconds();
    record["val_loss"] = val_loss;
    std::printf(" | val loss %.4f", val_loss);
  }
  std::printf("\n");
  std::fflush(stdout);
  if (metrics_) metrics_->write(record);
}

void Trainer::finish_already_complete(int64_t step) {
  // A kill between the last save's rename and its pruning left one checkpoint too many.
  if (!cfg_.save.empty() && rank_ == 0) ckpt::tidy_save_dir(cfg_.save, run_id_, cfg_.keep_checkpoints);
  const bool write_weights = !cfg_.save_weights.empty() && !std::filesystem::exists(cfg_.save_weights);
  if (write_weights)
    save_weights(cfg_.save_weights, spec_, model_, *memory_, kDefaultShardBytes, weight_writers());
  // The final outputs a requeue finds missing are written from the checkpoint, which holds the same values.
  const bool write_adapter =
      !cfg_.save_adapter.empty() && !std::filesystem::exists(cfg_.save_adapter + "/" + kPeftAdapterFile);
  if (write_adapter && rank_ == 0) save_adapter();
  std::string wrote;
  if (write_weights) wrote += ", wrote --save-weights " + cfg_.save_weights;
  if (write_adapter) wrote += ", wrote --save-adapter " + cfg_.save_adapter;
  std::printf(
      "the run is complete: its checkpoint is at step %lld of --train-iters %lld; nothing to train%s\n",
      static_cast<long long>(step), static_cast<long long>(cfg_.train_iters), wrote.c_str());
}

void Trainer::save_adapter() {
  save_peft_adapter(cfg_.save_adapter, spec_, model_, *memory_, cfg_.lora,
                    peft_base_name(cfg_.init_from, spec_.name));
}

WeightWriters Trainer::weight_writers() {
  // After the last gather every data-parallel rank holds the same weights: the first one's write.
  return {.group = world_ > 1 ? &comm_ : nullptr,
          .writes = place_.dp_rank == 0,
          .writes_whole = place_.tp_rank == 0,
          .tied_copy = tied_copy()};
}

void Trainer::finish() {
  if (!cfg_.save_weights.empty())
    save_weights(cfg_.save_weights, spec_, model_, *memory_, kDefaultShardBytes, weight_writers());
  if (!cfg_.save_adapter.empty() && rank_ == 0) save_adapter();
  CategoryBytes measured = memory_->measured();
  measured[Category::comm] += groups_.buffer_bytes();  // the communicators' own receive buffers
  const MemoryReport report{plan_.bytes,
                            measured,
                            memory_->activations().high_water(),
                            plan_.activations.sum_of_tensors,
                            peak_rss_bytes(),
                            plan_.num_params,
                            plan_.offloaded_bytes,
                            plan_.host,
                            memory_->measured_host()};
  std::printf("%s%s", format_memory_report(report).c_str(), device_memory_.format().c_str());
  // Every rank reports its own plan: under ZeRO the ranks hold different shards.
  const std::string memory_json = cfg_.out + (world_ > 1 ? "/memory.rank" + std::to_string(rank_) + ".json"
                                                         : std::string("/memory.json"));
  nlohmann::json json = memory_report_json(report);
  // The device the plan was made for and ran on (the CPU's level).
  for (const auto& [key, value] : backend_->description().fields) json[key] = value;
  if (device_memory_.active()) json["device_memory"] = device_memory_.json();
  write_file_atomically(memory_json, json.dump(2) + "\n");
  if (report.planned.bytes != report.measured.bytes ||
      report.planned_host.bytes != report.measured_host.bytes)
    throw std::logic_error("measured memory differs from the plan (see " + memory_json + ")");
  if (const std::string failed = device_memory_.failures(); !failed.empty())
    throw std::logic_error(failed + "(see " + memory_json + ")");
}

double Trainer::evaluate() {
  // The first samples of the validation data every time, the same on every rank, so evaluations compare;
  // one mean over their counted targets.
  const int64_t b = cfg_.micro_batch;
  const int64_t targets = val_loader_->count_targets(0, cfg_.eval_iters * b);
  exec_->clear_loss();
  for (int64_t i = 0; i < cfg_.eval_iters; ++i) {
    load_batch(*val_loader_, model_.batch(), i * b);
    exec_->eval_step(targets);
  }
  const double mean = exec_->loss();
  return groups_.pipeline() ? sum_over_ranks(*groups_.pipeline(), mean) : mean;  // the last stage's
}

// The timeline goes where `memtrain report OUT` looks, and to the flag's own path unless that is the same
// file.
void Trainer::save_memory_timeline() {
  const std::string json = memory_timeline_json(timeline_);
  const std::string run_copy = cfg_.out + "/memory_timeline.json";
  write_file_atomically(run_copy, json);
  std::error_code ec;
  std::string written = run_copy;
  if (!std::filesystem::equivalent(cfg_.memory_timeline, run_copy, ec)) {
    write_file_atomically(cfg_.memory_timeline,
                          cfg_.memory_timeline.ends_with(".csv") ? memory_timeline_csv(timeline_) : json);
    written = cfg_.memory_timeline + " and " + run_copy;
  }
  const TimelinePoint& peak = timeline_.points[timeline_.peak_point()];
  std::printf("memory timeline: %zu ops, peak %s during %s -> %s\n", timeline_.points.size(),
              human_bytes(peak.live.total()).c_str(), peak.name.c_str(), written.c_str());
}

}  // namespace mt
