#include "train/run.h"

#include <omp.h>

#include <cstdio>
#include <string>

#include "core/error.h"
#include "train/signals.h"
#include "train/train_flags.h"
#include "train/trainer.h"
#include "train/verify_resume.h"

namespace mt {

void run_training(const TrainConfig& cfg, AsyncCommunicator& comm) {
  Trainer trainer(cfg, comm);
  const int64_t resumed = cfg.load.empty() && cfg.resume == ResumeMode::off ? 0 : trainer.resume();
  // Only now, with every input read and checked, does the run write anything.
  trainer.open_outputs(resumed);
  int64_t last_saved = resumed;
  begin_steps();  // until now a signal ended the process at once: nothing was trained that could be saved
  for (int64_t step = resumed + 1; step <= cfg.train_iters; ++step) {
    const StepOutcome outcome = trainer.step(step);
    trainer.log(step, outcome);
    const bool signalled = trainer.any_rank(stop_requested());
    const bool exit_now = cfg.exit_interval > 0 && step % cfg.exit_interval == 0;
    const bool save_now = (cfg.save_interval > 0 && step % cfg.save_interval == 0) || step == cfg.train_iters;
    if (!cfg.save.empty() && (save_now || signalled || exit_now)) {
      trainer.save(cfg.save, step, outcome);
      last_saved = step;
    }
    if (signalled || exit_now) {
      const std::string saved = cfg.save.empty() ? " (no --save: nothing saved)"
                                                 : ", checkpoint of step " + std::to_string(last_saved);
      std::printf("%s after step %lld%s\n", signalled ? "stopping on a signal" : "--exit-interval reached",
                  static_cast<long long>(step), saved.c_str());
      break;
    }
  }
  trainer.finish();
}

void train(const TrainConfig& cfg, const MemoryFitCheck& check_fit) {
  check_parallel_flags(cfg);
  check_checkpoint_flags(cfg);
  catch_stop_signals();  // first: every thread the run starts inherits the blocked signals
  // Collectives run on a worker thread, overlapping the kernels (dist/async_communicator.h).
  AsyncCommunicator comm(make_communicator(cfg.dist_backend));
  // Rank 0 logs; the other ranks' progress lines would only repeat it. Errors still reach stderr from all.
  if (comm.rank() != 0 && !std::freopen("/dev/null", "w", stdout))
    fail_data("cannot silence rank " + std::to_string(comm.rank()));
  // Ranks share the machine's cores: one thread each unless --threads says otherwise.
  omp_set_num_threads(rank_threads(cfg, comm.size()));
  if (check_fit)
    check_fit(lay_out_run(cfg, comm.size(), 0, omp_get_max_threads(), comm.buffer_bytes()), cfg, comm.size());
  if (cfg.verify_resume > 0)
    verify_resume(cfg, comm);
  else
    run_training(cfg, comm);
}

}  // namespace mt
