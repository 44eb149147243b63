#include "train/verify_resume.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "core/error.h"
#include "train/trainer.h"

namespace mt {

namespace {

struct Continuation {
  std::vector<double> losses;  // of steps K+1 ... --train-iters
  uint32_t state_hash = 0;
};

bool bitwise_equal(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

}  // namespace

void verify_resume(const TrainConfig& cfg, AsyncCommunicator& comm, const DeviceTarget& device) {
  const int64_t k = cfg.verify_resume;
  const std::string save_dir = cfg.out + "/verify-resume";
  std::string checkpoint;
  Continuation uninterrupted, resumed;
  {
    Trainer trainer(cfg, comm, device);
    trainer.open_outputs();
    for (int64_t step = 1; step <= cfg.train_iters; ++step) {
      const StepOutcome outcome = trainer.step(step);
      trainer.log(step, outcome);
      if (step == k) checkpoint = trainer.save(save_dir, step, outcome);
      if (step > k) uninterrupted.losses.push_back(outcome.loss);
    }
    uninterrupted.state_hash = trainer.state_hash();
    trainer.finish();
  }
  {
    Trainer trainer(cfg, comm, device);  // a fresh plan, allocation, loader and optimizer
    trainer.resume_from(checkpoint);
    for (int64_t step = k + 1; step <= cfg.train_iters; ++step)
      resumed.losses.push_back(trainer.step(step).loss);
    resumed.state_hash = trainer.state_hash();
  }
  size_t equal = 0;
  int64_t first_difference = 0;
  for (size_t i = 0; i < resumed.losses.size(); ++i) {
    if (bitwise_equal(resumed.losses[i], uninterrupted.losses[i]))
      ++equal;
    else if (first_difference == 0)
      first_difference = k + 1 + static_cast<int64_t>(i);
  }
  const bool pass = equal == resumed.losses.size() && resumed.state_hash == uninterrupted.state_hash;
  const std::string verdict =
      "verify-resume: " + std::string(pass ? "PASS" : "FAIL") + ": saved after step " + std::to_string(k) +
      ", reloaded into a fresh trainer; steps " + std::to_string(k + 1) + "-" +
      std::to_string(cfg.train_iters) + ": " + std::to_string(equal) + "/" +
      std::to_string(resumed.losses.size()) + " losses bitwise equal; state hash " +
      crc32c_hex(resumed.state_hash) + (resumed.state_hash == uninterrupted.state_hash ? " = " : " != ") +
      crc32c_hex(uninterrupted.state_hash) +
      (first_difference > 0 ? "; first loss difference at step " + std::to_string(first_difference) : "");
  if (!pass) fail_data(verdict);
  std::printf("%s\n", verdict.c_str());
}

}  // namespace mt
