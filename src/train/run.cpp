#include "train/run.h"

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/layout.h"
#include "ckpt/writer.h"
#include "config/check_config.h"
#include "config/data_bounds.h"
#include "config/data_vocabulary.h"
#include "core/error.h"
#include "data/shard.h"
#include "train/job_agreement.h"
#include "train/run_directories.h"
#include "train/shared_files.h"
#include "train/signals.h"
#include "train/trainer.h"
#include "train/verify_resume.h"

namespace mt {

namespace {

// Before step 1 of a run that saves: --overwrite-checkpoints clears the way (rank 0; the other ranks write
// into --save only at the first save), and a --save short of space for one checkpoint is warned about.
void prepare_save_dir(const TrainConfig& cfg, const Trainer& trainer, int rank, int64_t resumed) {
  if (cfg.save.empty() || rank != 0) return;
  if (resumed == 0 && cfg.overwrite_checkpoints) {
    const size_t removed = ckpt::remove_checkpoints(cfg.save);
    if (removed > 0)
      std::printf("--overwrite-checkpoints: removed %zu checkpoints from %s\n", removed, cfg.save.c_str());
  }
  warn_if_short_of_space("--save", cfg.save, trainer.checkpoint_bytes());
}

// The run cannot log, so it stops, after the save that keeps its steps (rank 0 has the reason).
[[noreturn]] void stop_on_log_failure(const Trainer& trainer, int rank, int64_t step,
                                      const std::string& checkpoint) {
  const std::string kept = checkpoint.empty()
                               ? "no --save: nothing saved"
                               : "saved checkpoint " + checkpoint + " (continue with --resume auto)";
  if (rank != 0)
    fail_data("rank " + std::to_string(rank) + ": stopped after step " + std::to_string(step) +
              " with rank 0, which could not write metrics.jsonl; " + kept);
  fail_data(trainer.log_failure() + " at step " + std::to_string(step) + "; " + kept);
}

}  // namespace

void run_training(const TrainConfig& cfg, AsyncCommunicator& comm, const DeviceTarget& device) {
  Trainer trainer(cfg, comm, device);
  const int64_t resumed = cfg.load.empty() && cfg.resume == ResumeMode::off ? 0 : trainer.resume();
  // A requeued job that already finished: done, with nothing rewritten. Loaded into a --save that lacks
  // that step (--load from another run), it saves it there as loaded: on another world size or ZeRO stage,
  // that reshards the checkpoint.
  if (resumed == cfg.train_iters) {
    const bool missing =
        !cfg.save.empty() && !std::filesystem::exists(cfg.save + "/" + ckpt::checkpoint_name(resumed));
    if (trainer.any_rank(missing)) trainer.save_loaded(cfg.save, resumed);
    return trainer.finish_already_complete(resumed);
  }
  prepare_save_dir(cfg, trainer, comm.rank(), resumed);
  // Only now, with every input read and checked, does the run write anything.
  trainer.open_outputs(resumed);
  int64_t last_saved = resumed;
  // Until now a signal ended the process at once: nothing was trained that could be saved.
  const bool keeps_nothing = cfg.save.empty() && cfg.save_weights.empty() && cfg.save_adapter.empty();
  begin_steps(keeps_nothing ? "memtrain: warning: stopping after the step in progress; no --save, "
                              "--save-weights or --save-adapter: nothing will be saved\n"
                            : nullptr);
  for (int64_t step = resumed + 1; step <= cfg.train_iters; ++step) {
    const StepOutcome outcome = trainer.step(step);
    trainer.log(step, outcome);
    const bool signalled = trainer.any_rank(stop_requested());
    const bool log_failed = trainer.any_rank(!trainer.log_failure().empty());
    const bool exit_now = cfg.exit_interval > 0 && step % cfg.exit_interval == 0;
    const bool save_now = (cfg.save_interval > 0 && step % cfg.save_interval == 0) || step == cfg.train_iters;
    std::string checkpoint;
    if (!cfg.save.empty() && (save_now || signalled || exit_now || log_failed)) {
      checkpoint = trainer.save(cfg.save, step, outcome);
      last_saved = step;
    }
    if (log_failed) stop_on_log_failure(trainer, comm.rank(), step, checkpoint);
    if (signalled || exit_now) {
      const std::string saved = cfg.save.empty() ? " (no --save: nothing saved)"
                                                 : ", checkpoint of step " + std::to_string(last_saved);
      std::printf("%s after step %lld%s\n", signalled ? "stopping on a signal" : "--exit-interval reached",
                  static_cast<long long>(step), saved.c_str());
      break;
    }
  }
  // A stopped run that kept nothing did not succeed: it exits as the signal's second delivery would, 128 +
  // signal (143 for SIGTERM), so that a scheduler does not count it as done, and, as any failed run, without
  // memory.json.
  if (keeps_nothing && stop_signal() != 0)
    throw Error(static_cast<ErrorKind>(128 + stop_signal()),
                std::string("stopped by ") + (stop_signal() == SIGINT ? "SIGINT" : "SIGTERM") +
                    " with no --save, --save-weights or --save-adapter: the steps trained are lost");
  trainer.finish();
}

void read_data_shape(TrainConfig& cfg) {
  const std::vector<std::string> shards = find_shards(cfg.data, "train");
  cfg.loss_mask = shards_have_loss_masks(shards);
  cfg.packed = packed_seq_len(shards) > 0;
  // A mask that counts nothing trains at loss 0 and learns nothing.
  if (cfg.loss_mask && !masks_count_a_target(shards))
    fail_data("--data " + cfg.data +
              ": the loss masks beside its train shards count no target token, so nothing would be trained");
}

void train(const TrainConfig& given, const MemoryFitCheck& check_fit) {
  catch_stop_signals();  // first: every thread the run starts inherits the blocked signals
  // Collectives run on a worker thread, overlapping the kernels (dist/async_communicator.h).
  AsyncCommunicator comm(make_communicator(given.dist_backend, given.distributed_timeout_minutes * 60));
  // Every rank checks its flags and data, and the job agrees before going on: an error is printed once,
  // and differing flags are refused before any exchange could wait for a step the other ranks never take.
  TrainConfig cfg = given;
  agree_on_failure(comm, [&] {
    read_data_shape(cfg);  // instruction data: the plan holds its mask (and packed positions)
    check_config(cfg);
    check_device_ranks(cfg.device, comm.size());
    data_parallel_size(cfg, comm.size());
    check_data_bounds(cfg, comm.size());
    check_data_vocabulary(cfg);
  });
  agree_on_failure(comm, [&] { check_same_settings(cfg, comm); });
  // Where the run writes, claimed before anything else can fail half-way (train/run_directories.h).
  const RunDirectories directories(cfg, comm);
  agree_on_failure(comm, [&] { check_shared_files(cfg, comm); });
  // Rank 0 logs; the other ranks' progress lines would only repeat it. Errors still reach stderr from all.
  if (comm.rank() != 0 && !std::freopen("/dev/null", "w", stdout))
    fail_data("cannot silence rank " + std::to_string(comm.rank()));
  // Ranks share the machine's cores: one thread each unless --threads says otherwise.
  const DeviceTarget device = open_device(cfg.device, rank_threads(cfg, comm.size()), cfg.tf32);
  if (check_fit) agree_on_failure(comm, [&] { check_fit(cfg, comm.size()); });
  if (cfg.verify_resume > 0)
    verify_resume(cfg, comm, device);
  else
    run_training(cfg, comm, device);
}

}  // namespace mt
