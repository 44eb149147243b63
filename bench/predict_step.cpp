// The cost model's prediction for one training configuration, for bench_plan.sh to compare with measured
// steps: predict_step PROFILE MODEL B T THREADS ACCUM PRECISION RECOMPUTE, where PRECISION is fp32, bf16 or
// bf16-o2 (both O2 flags) and RECOMPUTE none, selective, uniform-N or block-N. Prints one JSON object.
#include <cstdio>
#include <string>

#include "plan/cost_model.h"

int main(int argc, char** argv) {
  if (argc != 9) {
    std::fprintf(stderr, "usage: predict_step PROFILE MODEL B T THREADS ACCUM PRECISION RECOMPUTE\n");
    return 2;
  }
  try {
    mt::TrainConfig c;
    c.model = argv[2];
    c.micro_batch = std::stoll(argv[3]);
    c.seq_len = std::stoll(argv[4]);
    c.threads = std::stoi(argv[5]);
    c.grad_accum_steps = std::stoll(argv[6]);
    c.train_iters = 1;
    c.eval_interval = 0;
    const std::string precision = argv[7], recompute = argv[8];
    c.precision.precision = mt::parse_precision(precision == "bf16-o2" ? "bf16" : precision);
    c.precision.o2_optimizer = c.precision.o2_gradient = precision == "bf16-o2";
    const size_t dash = recompute.find('-');
    c.recompute = dash == std::string::npos
                      ? mt::parse_recompute(recompute == "none" ? "" : recompute, "", 0, false)
                      : mt::parse_recompute("full", recompute.substr(0, dash),
                                            std::stoll(recompute.substr(dash + 1)), false);
    const mt::HardwareProfile profile = mt::load_hardware_profile(argv[1]);
    const mt::StepCost cost = mt::predict_step_cost(mt::plan_run(c, 1, 0, c.threads, 0), c, 1, profile);
    std::printf(
        "{\"step_ms\": %.3f, \"tokens_per_sec\": %.3f, \"gflop\": %.3f, \"matmul_ms\": %.3f, "
        "\"attention_ms\": "
        "%.3f, \"elementwise_ms\": %.3f, \"optimizer_ms\": %.3f}\n",
        cost.step_s * 1e3, cost.tokens_per_sec, cost.flops / 1e9, cost.matmul_s * 1e3, cost.attention_s * 1e3,
        cost.elementwise_s * 1e3, cost.optimizer_s * 1e3);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "predict_step: %s\n", e.what());
    return 2;
  }
  return 0;
}
