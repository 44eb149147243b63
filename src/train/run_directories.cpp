#include "train/run_directories.h"

#include <exception>
#include <filesystem>
#include <iterator>

#include "ckpt/layout.h"
#include "core/error.h"
#include "core/warning.h"
#include "io/output_path.h"
#include "memory/report.h"

namespace mt {

namespace {

namespace fs = std::filesystem;

void check_overwrite_flags(const TrainConfig& c) {
  if (!c.overwrite_checkpoints) return;
  if (c.save.empty())
    fail_usage("--overwrite-checkpoints removes the checkpoints of --save: give --save DIR");
  if (c.resume != ResumeMode::off || !c.load.empty())
    fail_usage("--overwrite-checkpoints starts afresh: it excludes --resume auto and --load");
}

// A fresh run must not mix its checkpoints with an earlier run's: a later --resume auto would take whichever
// is newest.
void refuse_used_save_dir(const TrainConfig& c) {
  const bool fresh = c.resume == ResumeMode::off && c.load.empty();
  if (!fresh || c.overwrite_checkpoints) return;
  const std::vector<std::string> found = ckpt::list_checkpoints(c.save);
  if (found.empty()) return;
  fail_data("--save " + c.save + " holds " + std::to_string(found.size()) + " checkpoint" +
            (found.size() == 1 ? "" : "s") + " (newest " + fs::path(found.front()).filename().string() +
            "): continue that run with --resume auto, or start over with --overwrite-checkpoints");
}

// A directory inside a checkpoint goes when the run that saved the checkpoint prunes it.
void refuse_inside_checkpoint(const std::string& flag, const std::string& dir) {
  std::error_code ec;
  const fs::path full = fs::weakly_canonical(fs::absolute(dir), ec);
  for (fs::path p = full.parent_path(); !ec && p != p.parent_path(); p = p.parent_path())
    if (ckpt::is_checkpoint_dir(p.string()))
      fail_data(flag + " " + dir + ": inside checkpoint " + p.string() +
                ", which its run deletes when it prunes old checkpoints: choose a directory outside it");
}

}  // namespace

RunDirectories::RunDirectories(const TrainConfig& config, Communicator& comm) {
  if (comm.size() == 1) {
    check_overwrite_flags(config);
    claim(config);
    return;
  }
  // Rank 0's refusal is the job's: printed once, before the broadcast lets any rank exit (mpirun then ends
  // the others), and every rank exits with its code.
  double exit_code = 0;
  if (comm.rank() == 0) {
    try {
      check_overwrite_flags(config);  // the same flags on every rank (train/job_agreement.h)
      claim(config);
    } catch (const Error& e) {
      print_error(e.what());
      exit_code = e.exit_code();
    }
  }
  comm.broadcast(&exit_code, 1, DType::f64, 0);
  if (exit_code != 0) throw ReportedElsewhere(static_cast<ErrorKind>(exit_code));
}

void RunDirectories::claim(const TrainConfig& config) {
  try {
    claim_all(config);
  } catch (...) {
    remove_unwritten();  // the destructor does not run for a constructor that throws
    throw;
  }
}

void RunDirectories::claim_all(const TrainConfig& c) {
  claim_dir("--out", c.out);
  if (!c.save.empty()) {
    claim_dir("--save", c.save);
    refuse_used_save_dir(c);
  }
  // Written at the end: a bad path found then would cost the whole run.
  if (!c.save_adapter.empty()) claim_dir("--save-adapter", c.save_adapter);
  if (!c.save_weights.empty()) check_output_file("--save-weights", c.save_weights);
  if (!c.memory_timeline.empty()) check_output_file("--memory-timeline", c.memory_timeline);
  if (c.offload_optimizer != OffloadOptimizer::none) check_existing_dir("--offload-path", c.offload_path);
}

void RunDirectories::claim_dir(const std::string& flag, const std::string& dir) {
  refuse_inside_checkpoint(flag, dir);
  const bool created = make_output_dir(flag, dir);
  std::error_code ec;
  for (const Claimed& held : claimed_)
    if (fs::equivalent(held.dir, dir, ec)) return;  // --save is --out: one lock (flock would refuse a second)
  claimed_.push_back({dir, created, std::make_unique<DirectoryLock>(flag, dir)});
}

RunDirectories::~RunDirectories() {
  if (std::uncaught_exceptions() > 0) remove_unwritten();
}

void RunDirectories::remove_unwritten() {
  for (auto it = claimed_.rbegin(); it != claimed_.rend(); ++it) {
    if (!it->created) continue;
    std::error_code ec;
    const auto entries = std::distance(fs::directory_iterator(it->dir, ec), fs::directory_iterator());
    if (ec || entries != 1) continue;  // the run wrote something: its files stay
    it->lock->remove_file();
    fs::remove(it->dir, ec);
  }
  claimed_.clear();
}

void warn_if_short_of_space(const std::string& flag, const std::string& dir, int64_t needed_bytes) {
  const int64_t available = available_bytes(dir);
  if (available < 0 || available >= needed_bytes) return;
  warn(flag + " " + dir + ": " + human_bytes(available) + " free, less than one checkpoint (" +
       human_bytes(needed_bytes) + ")");
}

}  // namespace mt
