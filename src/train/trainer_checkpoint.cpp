// The Trainer's checkpoint hooks: what a checkpoint holds of the run, and resuming from one.
#include <cstdio>

#include "ckpt/base_weights.h"
#include "ckpt/flat_states.h"
#include "ckpt/reader.h"
#include "ckpt/saved_params.h"
#include "ckpt/writer.h"
#include "config/run_flag_table.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "model/hf_config.h"
#include "model/hf_tensors.h"
#include "train/resume_check.h"
#include "train/trainer.h"

namespace mt {

std::span<char> Trainer::checkpoint_stream() const {
  return {static_cast<char*>(memory_->data(run_.checkpoint_stream)),
          static_cast<size_t>(model_.graph.table[run_.checkpoint_stream].bytes())};
}

nlohmann::json Trainer::step_metrics(const StepOutcome& outcome) const {
  nlohmann::json metrics = {{"loss", outcome.loss},
                            {"lr", outcome.lr},
                            {"grad_norm", outcome.update.skipped ? nlohmann::json(nullptr)
                                                                 : nlohmann::json(outcome.update.grad_norm)},
                            {"skipped", outcome.update.skipped}};
  if (scaler_) metrics["loss_scale"] = scaler_->scale();
  return metrics;
}

const std::vector<ckpt::ManifestFile>& Trainer::base_files() {
  if (!base_files_) base_files_ = ckpt::checksum_base(cfg_.init_from, "--init-from: ", checkpoint_stream());
  return *base_files_;
}

bool Trainer::check_resumed_base(const ckpt::CheckpointState& state, const std::string& where) {
  if (!cfg_.lora.enabled() || cfg_.init_from.empty()) return false;  // a seed's base: the settings name it
  ckpt::check_recorded_base(state, base_files(), cfg_.init_from, where);
  return state.base_files.has_value();
}

ckpt::ModelPart Trainer::model_part() const {
  return {.tp = place_.tp, .pp = place_.pp, .tp_rank = place_.tp_rank, .pp_rank = place_.pp_rank};
}

std::vector<int64_t> Trainer::stage_param_counts() {
  Communicator* pipeline = groups_.pipeline();
  if (!pipeline) return {plan_.num_params};
  const double mine = static_cast<double>(plan_.num_params);  // exact in a double: below 2^53
  std::vector<double> counts(static_cast<size_t>(place_.pp));
  pipeline->all_gather(&mine, counts.data(), 1, DType::f64);
  return {counts.begin(), counts.end()};
}

ckpt::CheckpointState Trainer::checkpoint_state(int64_t step, nlohmann::json metrics) {
  ckpt::CheckpointState s;
  s.step = step;
  s.optimizer_updates = optimizer_->updates_taken();
  if (scaler_) s.loss_scaler = scaler_->state();
  s.consumed_samples = consumed_samples_;
  s.data_crc32c = train_loader_->data_crc32c();
  s.seed = cfg_.seed;
  s.run_id = run_id_;
  s.run = trajectory_settings();
  s.model = hf_config_json(spec_);
  s.model_name = spec_.name;
  s.metrics = std::move(metrics);
  s.layout = {.num_params = stage_param_counts(),
              .world = world_,
              .tp = place_.tp,
              .padded_vocab = spec_.padded_vocab_size,
              .weights = plan_.policy.weights,
              .master = plan_.policy.master_weights,
              .moments = plan_.policy.moments,
              .moment_block = plan_.policy.moment_block,
              .tensors = {}};
  // The whole model's Hugging Face tensors, each a contiguous range of one process's flat parameters; under
  // LoRA the trained ones and the adapters (the frozen base comes back from --init-from or the seed, which
  // the settings record).
  const std::vector<int64_t> whole_offset = ckpt::whole_offsets(whole_.graph.table);
  for (const FileTensor& f : trainable_tensors(spec_, whole_))
    s.layout.tensors.push_back({f.name, f.shape, whole_offset[static_cast<size_t>(f.param)] + f.offset});
  if (cfg_.lora.enabled() && !cfg_.init_from.empty()) s.base_files = base_files();
  return s;
}

nlohmann::json Trainer::trajectory_settings() const {
  nlohmann::json settings = run_settings(cfg_, seq_len_, step_samples());
  settings["--lr-decay-iters"] = schedule_.decay_iters;
  return settings;
}

std::string Trainer::save(const std::string& save_dir, int64_t step, const StepOutcome& outcome) {
  return save_state(save_dir, checkpoint_state(step, step_metrics(outcome)));
}

std::string Trainer::save_loaded(const std::string& save_dir, int64_t step) {
  return save_state(save_dir, checkpoint_state(step, resumed_metrics_));
}

std::string Trainer::save_state(const std::string& save_dir, const ckpt::CheckpointState& state) {
  const std::vector<FileTensor> tensors =
      held_tensors(trainable_tensors(spec_, whole_), whole_, model_, tied_copy());
  const std::string dir = ckpt::save_checkpoint(save_dir, state, *memory_, tensors, comm_,
                                                cfg_.keep_checkpoints, checkpoint_stream());
  std::printf("saved checkpoint %s\n", dir.c_str());
  std::fflush(stdout);
  return dir;
}

int64_t Trainer::resume() {
  const bool automatic = cfg_.resume == ResumeMode::automatic;
  const std::string dir = automatic ? cfg_.save : cfg_.load;
  const std::string chosen = ckpt::select_checkpoint(dir, automatic ? "--resume auto: --save" : "--load",
                                                     automatic, checkpoint_stream());
  // Every rank must continue from the same checkpoint (they verified it on their own).
  const ckpt::CheckpointState state = chosen.empty() ? ckpt::CheckpointState{} : ckpt::read_state(chosen);
  if (world_ > 1 &&
      sum_over_ranks(comm_, static_cast<double>(state.step)) != static_cast<double>(state.step) * world_)
    fail_data("resume: the ranks found different checkpoints in " + dir);
  if (chosen.empty()) {
    std::printf("no checkpoint in %s: starting fresh\n", dir.c_str());
    return 0;
  }
  return resume_from(chosen);
}

int64_t Trainer::resume_from(const std::string& checkpoint_dir) {
  const ckpt::CheckpointState state = ckpt::read_state(checkpoint_dir);
  const std::string where = "resume from " + checkpoint_dir + ": ";
  if (const std::string d = model_differences(state.model, hf_config_json(spec_)); !d.empty())
    fail_usage(where + "its model differs from --model " + cfg_.model + ": " + d);
  // Without --lr-decay-iters the schedule is the checkpoint's, as Megatron continues it: a resume with
  // another --train-iters (extending the run, or a requeue) moves neither the decay nor the learning rate.
  const nlohmann::json& decay =
      state.run.contains("--lr-decay-iters") ? state.run.at("--lr-decay-iters") : nlohmann::json();
  if (cfg_.lr_decay_iters == 0 && decay.is_number_integer()) schedule_.decay_iters = decay.get<int64_t>();
  nlohmann::json run = trajectory_settings();
  // The same base by content is the same setting, whichever path (relative, absolute, a link) names it.
  if (check_resumed_base(state, where) && state.run.contains("--init-from"))
    run["--init-from"] = state.run.at("--init-from");
  if (const std::string d = setting_differences(state.run, run); !d.empty())
    fail_usage(where + d + "; a resume repeats the run's settings");
  if (cfg_.lr_decay_iters == 0 && schedule_.decay_iters != cfg_.train_iters)
    std::printf("learning rate: the checkpoint's schedule, decaying until step %lld (--lr-decay-iters)\n",
                static_cast<long long>(schedule_.decay_iters));
  if (state.data_crc32c && *state.data_crc32c != train_loader_->data_crc32c())
    fail_usage(where + "the training data of --data " + cfg_.data + " (crc32c " +
               crc32c_hex(train_loader_->data_crc32c()) + ") differs from the checkpoint's (crc32c " +
               crc32c_hex(*state.data_crc32c) + "); a resume reads the data the run started on");
  if (state.step > cfg_.train_iters)
    fail_usage(where + "it is at step " + std::to_string(state.step) + ", past --train-iters " +
               std::to_string(cfg_.train_iters));
  ckpt::load_model_states(checkpoint_dir, state, *memory_, spec_, model_part());
  if (!state.run_id.empty()) run_id_ = state.run_id;  // the same run, continued
  optimizer_->restore_updates_taken(state.optimizer_updates);
  if (scaler_ && state.loss_scaler) scaler_->restore(*state.loss_scaler);
  // The global batch is a setting a resume repeats, so an older checkpoint's step counts its samples.
  consumed_samples_ = state.consumed_samples.value_or(state.step * step_samples());
  if (!state.consumed_samples)
    std::printf(
        "note: %s predates globally numbered samples: continuing the data at sample %lld of the "
        "current order\n",
        checkpoint_dir.c_str(), static_cast<long long>(consumed_samples_));
  resumed_metrics_ = state.metrics;
  std::printf("resumed from %s at step %lld (loss %s)\n", checkpoint_dir.c_str(),
              static_cast<long long>(state.step),
              state.metrics.value("loss", nlohmann::json()).dump().c_str());
  return state.step;
}

uint32_t Trainer::state_hash() {
  const ckpt::HeldWeights weights = ckpt::held_weights(*memory_);
  uint32_t crc = 0;
  const auto add = [&](const char* piece, int64_t, int64_t bytes) {
    crc = crc32c(piece, static_cast<size_t>(bytes), crc);
  };
  memory_->device().read(weights.data, weights.range.size() * static_cast<int64_t>(dtype_size(weights.dtype)),
                         add);
  const std::vector<ckpt::StateTensor> states = ckpt::state_tensors(plan_);
  memory_->optimizer_state().visit(plan_.shard_begin, plan_.shard_end, StateAccess::read_all,
                                   [&](const StateWindow& w) {
                                     for (const ckpt::StateTensor& t : states)
                                       memory_->device().read(t.in_window(w), t.bytes(w.begin, w.end), add);
                                   });
  if (const float* v = memory_->optimizer_state().adam_mini_v())
    memory_->device().read(v, plan_.policy.v_blocks * 4, add);
  const int64_t counters[2] = {optimizer_->updates_taken(), consumed_samples_};
  crc = crc32c(counters, sizeof counters, crc);
  if (scaler_) {
    const LossScaler::State s = scaler_->state();
    crc = crc32c(&s.scale, sizeof s.scale, crc);
    crc = crc32c(&s.good_steps, sizeof s.good_steps, crc);
    crc = crc32c(&s.hysteresis_left, sizeof s.hysteresis_left, crc);
  }
  if (world_ == 1) return crc;
  std::vector<double> all(world_);
  const double mine = crc;
  comm_.all_gather(&mine, all.data(), 1, DType::f64);
  return crc32c(all.data(), all.size() * sizeof(double));
}

int64_t Trainer::checkpoint_bytes() const {
  // At most: each tensor-parallel rank's rank files hold at most the whole parameters (and the last stage's
  // copy of a tied embedding), the model file the whole weights once.
  const int64_t weights = whole_.graph.table.numel(Category::params);
  const int64_t held = weights + (place_.tied_embedding ? spec_.padded_vocab_size * spec_.n_embd : 0);
  const int64_t weight_size = static_cast<int64_t>(dtype_size(plan_.policy.weights));
  int64_t rank_files = held * weight_size;
  for (const ckpt::StateTensor& t : ckpt::state_tensors(plan_)) rank_files += t.bytes(0, held);
  rank_files += plan_.policy.v_blocks * 4;  // Adam-mini's v, in rank 0's file
  return rank_files * place_.tp + weights * weight_size;
}

bool Trainer::any_rank(bool local) {
  return world_ > 1 ? sum_over_ranks(comm_, local ? 1.0 : 0.0) > 0 : local;
}

}  // namespace mt
