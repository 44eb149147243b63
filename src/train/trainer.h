// The training run: model, data, memory plan and optimizer, built once from the config; one optimizer step at
// a time with its logging and evaluation; the final weights and memory report.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ckpt/state.h"
#include "config/train_config.h"
#include "data/loader.h"
#include "devices/devices.h"
#include "dist/async_communicator.h"
#include "exec/executor.h"
#include "layout/run_layout.h"
#include "memory/allocation.h"
#include "memory/plan.h"
#include "memory/timeline.h"
#include "model/model.h"
#include "model/weights.h"
#include "model/zero_schedule.h"
#include "optim/schedule.h"
#include "parallel/parallel_groups.h"
#include "parallel/zero_sync.h"
#include "train/backward_update.h"
#include "train/device_memory_check.h"
#include "train/metrics.h"

namespace mt {

// What one optimizer step did.
struct StepOutcome {
  double loss = 0;  // mean over the step's counted targets, on every micro-batch and rank
  float lr = 0;
  OptimizerStepResult update;
  double step_ms = 0;
  double tokens_per_sec = 0;
  // Data parallel: the exchanges' time on the communicator's worker, and the part the step waited for.
  double comm_busy_ms = 0, comm_exposed_ms = 0;
};

class Trainer {
 public:
  // Resolves the model, checks the flags, plans for `device` and allocates the memory there, and
  // initialises or loads the weights. Writes nothing: every bad input is an mt::Error before any file
  // changes.
  Trainer(const TrainConfig& config, AsyncCommunicator& comm, const DeviceTarget& device);
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Resumes from --load or --resume auto: restores the model states, optimizer, loss scaler and data cursor.
  // Returns the step the checkpoint was taken after, 0 when starting fresh.
  int64_t resume();
  int64_t resume_from(const std::string& checkpoint_dir);
  // Collective: saves a checkpoint of the state after `step` into save_dir; returns its directory.
  std::string save(const std::string& save_dir, int64_t step, const StepOutcome& outcome);
  // Collective: saves the state just resumed from, as it was loaded, with the loaded step's metrics.
  std::string save_loaded(const std::string& save_dir, int64_t step);
  // A checksum of every rank's model states, the optimizer's update count, the loss scaler and the data
  // cursor: equal on two runs only if they hold the same bits.
  uint32_t state_hash();
  // Whether any rank was asked to stop (all ranks get the same answer).
  bool any_rank(bool local);
  // Bytes of one checkpoint of this run, all ranks together (its files' headers and state.json aside).
  int64_t checkpoint_bytes() const;

  // Opens metrics.jsonl in --out (rank 0): the first thing the run writes. Resuming after step
  // `resumed_step`, metrics.jsonl keeps the records up to it.
  void open_outputs(int64_t resumed_step = 0);
  // Runs optimizer step `step` (1-based): micro-batches, gradient exchange, update, loss scaler.
  StepOutcome step(int64_t step);
  // Prints the progress line and appends to metrics.jsonl when the step is logged (evaluating when due). A
  // failed append is held in log_failure() for the run to stop on, after saving.
  void log(int64_t step, const StepOutcome& outcome);
  // Why rank 0 could not append to metrics.jsonl; "" while it can (and on the other ranks).
  std::string log_failure() const { return metrics_ ? metrics_->failure() : ""; }
  // --save-weights and --save-adapter, then the memory report printed and written; throws if measured
  // differs from planned.
  void finish();
  // A resume found the run at --train-iters (a requeued job that had finished): says so and writes
  // --save-weights and --save-adapter if missing, leaving memory.json and metrics.jsonl as the finished run
  // wrote them.
  void finish_already_complete(int64_t step);

 private:
  void save_adapter();  // rank 0's --save-adapter
  // The model, batch, precision, recompute and offload lines (and --memory-report) before allocating.
  void print_banner(size_t train_shards) const;
  // Allocates exactly the plan, then the weights (initialised or loaded), loaders, optimizer and executor.
  void allocate(const std::vector<std::string>& train_shards, const std::vector<std::string>& val_shards);
  double evaluate();
  // One micro-batch from `loader` into `batch`'s tensors: the samples from `first_sample` on.
  void load_batch(Loader& loader, const BatchTensors& batch, int64_t first_sample);
  // The step's micro-batches through the graph (`record`: step 1's --memory-timeline from the first).
  void run_micro_batches(int64_t step, float loss_scale, int64_t step_targets, bool record);
  // The ordinary step: gradients accumulated over the micro-batches, summed over ranks, then the update.
  OptimizerStepResult accumulate_and_update(int64_t step, float lr, float loss_scale, int64_t step_targets);
  // --optimizer-in-backward: the update inside the backward (train/backward_update.h), after a pass for
  // the norm where clipping or fp16 needs it.
  OptimizerStepResult update_in_backward(int64_t step, float lr, float loss_scale, int64_t step_targets);
  // Samples per optimizer step: the global batch, however it is split.
  int64_t step_samples() const { return accum_ * place_.dp * cfg_.micro_batch; }
  void save_memory_timeline();
  // What a checkpoint records of the step it was taken after.
  nlohmann::json step_metrics(const StepOutcome& outcome) const;
  ckpt::CheckpointState checkpoint_state(int64_t step, nlohmann::json metrics);
  // The settings a checkpoint records and a resume compares (config/run_flag_table.h: run_settings), with
  // the schedule this run follows.
  nlohmann::json trajectory_settings() const;
  // LoRA from --init-from: the base's files and checksums, computed at the first call.
  const std::vector<ckpt::ManifestFile>& base_files();
  // A LoRA checkpoint's base must be this run's --init-from, bit for bit: a data error otherwise. Returns
  // whether its files' checksums were compared (the checkpoint records them), which identifies the base
  // whatever path names it.
  bool check_resumed_base(const ckpt::CheckpointState& state, const std::string& where);
  std::string save_state(const std::string& save_dir, const ckpt::CheckpointState& state);
  // This rank's model part (ckpt::ModelPart).
  ckpt::ModelPart model_part() const;
  // Collective over the pipeline: the flat parameters of a model part of each stage, by stage.
  std::vector<int64_t> stage_param_counts();
  // The last stage's copy of a tied embedding, which the first stage's writes for both; -1 elsewhere.
  int tied_copy() const { return place_.first_stage() ? -1 : model_.tied_embedding; }
  // The ranks that write --save-weights together: one model copy's, one tensor-parallel rank of each stage
  // writing the parameters they all hold.
  WeightWriters weight_writers();
  // The planned buffer that checkpoint files are checksummed through.
  std::span<char> checkpoint_stream() const;

  const TrainConfig& cfg_;
  AsyncCommunicator& comm_;
  const int world_, rank_;
  ParallelGroups groups_;  // the tensor- and data-parallel groups of comm_
  const ParallelRank& place_ = groups_.place();
  RunLayout run_;  // the table and plan the allocation below refers to: never moved after construction
  const ModelSpec& spec_ = run_.spec;
  const int64_t& seq_len_ = run_.seq_len;
  const int64_t& accum_ = run_.accum;
  ModelGraph& model_ = run_.model;
  const ZeroSchedule& zero_schedule_ = run_.zero;
  const Plan& plan_ = run_.plan;
  const ModelGraph whole_;  // whole_model's: what checkpoints and weight files list
  // The device the plan is made for: memory_ is its, so it outlives memory_.
  const std::unique_ptr<Backend> backend_;
  std::unique_ptr<LossScaler> scaler_;
  LrSchedule schedule_;  // a resume continues the checkpoint's decay (resume_from)
  const bool evaluating_;
  std::unique_ptr<Allocation> memory_;
  std::unique_ptr<Loader> train_loader_, val_loader_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<Executor> exec_;
  std::unique_ptr<ZeroSync> sync_;
  std::unique_ptr<BackwardUpdate> backward_update_;  // --optimizer-in-backward: the step's hook
  std::unique_ptr<MetricsLog> metrics_;
  MemoryTimeline timeline_;
  DeviceMemoryCheck device_memory_;  // a GPU's driver against the plan (nothing on the CPU)
  int64_t consumed_samples_ = 0;     // of the training data's global order (data/loader.h)
  std::string run_id_;  // the lineage of the checkpoints this run writes (ckpt::CheckpointState::run_id)
  nlohmann::json resumed_metrics_;                             // of the step resumed from
  std::optional<std::vector<ckpt::ManifestFile>> base_files_;  // base_files(), once computed
};

}  // namespace mt
