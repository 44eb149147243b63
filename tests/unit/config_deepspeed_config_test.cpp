// --deepspeed-config: every key is set as its flag would be, warned about, or refused naming it; a key that
// contradicts a flag given is an error naming both; fractions, negatives and wrong types are usage errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "config/deepspeed_config.h"
#include "core/error.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

class DeepSpeedConfig : public ::testing::Test {
 protected:
  void TearDown() override { fs::remove(path_); }

  // `json` applied to `config` with `given` flags on the command line.
  TrainConfig apply(const std::string& json, TrainConfig config = {},
                    const std::set<std::string, std::less<>>& given = {}) {
    std::ofstream(path_) << json;
    apply_deepspeed_config(path_, given, config);
    return config;
  }

  // The usage error `json` raises (with `given` flags set as in `config`).
  std::string error(const std::string& json, TrainConfig config = {},
                    const std::set<std::string, std::less<>>& given = {}) {
    try {
      apply(json, config, given);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::usage) << e.what();
      return e.what();
    }
    ADD_FAILURE() << json << " was accepted";
    return "";
  }

  std::string path_ =
      (fs::temp_directory_path() / ("memtrain_ds_test_" + std::to_string(::getpid()))).string();
};

TEST_F(DeepSpeedConfig, SupportedKeysSetTheirFlagsFields) {
  const TrainConfig c = apply(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3,
      "gradient_clipping": 0.25, "bf16": true,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "betas": [0.8, 0.95], "eps": 1e-6,
                                                "weight_decay": 0.05}},
      "zero_optimization": {"stage": 2.0, "overlap_comm": false, "reduce_bucket_size": 5e8,
                            "allgather_bucket_size": 500000000}})");
  EXPECT_EQ(c.micro_batch, 2);
  EXPECT_EQ(c.grad_accum_steps, 3);
  EXPECT_EQ(c.adam.clip_grad, 0.25f);
  EXPECT_EQ(c.precision.precision, Precision::bf16);
  EXPECT_EQ(c.lr, 0.002f);
  EXPECT_EQ(c.adam.beta1, 0.8f);
  EXPECT_EQ(c.adam.beta2, 0.95f);
  EXPECT_EQ(c.adam.eps, 1e-6f);
  EXPECT_EQ(c.adam.weight_decay, 0.05f);
  EXPECT_EQ(c.zero_stage, 2);
  EXPECT_FALSE(c.overlap_comm);
  EXPECT_DOUBLE_EQ(c.bucket_size_mb, 5e8 * 4 / (1 << 20));
  EXPECT_EQ(apply(R"({"bf16": {"enabled": true}})").precision.precision, Precision::bf16);
  EXPECT_EQ(apply(R"({"optimizer": {"type": "adam", "params": {"lr": 0.1}}})").lr, 0.1f);
}

// fp16's settings count under fp16 only, as in DeepSpeed; elsewhere they are warned about.
TEST_F(DeepSpeedConfig, Fp16SettingsApplyOnlyUnderFp16) {
  const std::string settings = R"("initial_scale_power": 8, "loss_scale_window": 50, "hysteresis": 3)";
  const TrainConfig on = apply(R"({"fp16": {"enabled": true, )" + settings + "}}");
  EXPECT_EQ(on.precision.precision, Precision::fp16);
  EXPECT_EQ(on.loss_scaler.initial_scale, 256.0f);
  EXPECT_EQ(on.loss_scaler.window, 50);
  EXPECT_EQ(on.loss_scaler.hysteresis, 3);
  ::testing::internal::CaptureStderr();
  const TrainConfig off = apply(R"({"fp16": {"enabled": false, )" + settings + "}}");
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(off.precision.precision, Precision::fp32);
  EXPECT_EQ(off.loss_scaler.window, TrainConfig{}.loss_scaler.window);
  EXPECT_NE(warnings.find("fp16.loss_scale_window has no effect here: fp16 is not enabled"),
            std::string::npos)
      << warnings;
}

TEST_F(DeepSpeedConfig, KeysThatChangeNothingHereAreWarnedAboutByName) {
  ::testing::internal::CaptureStderr();
  const TrainConfig c = apply(R"({"steps_per_print": 10, "wall_clock_breakdown": false,
      "flops_profiler": {"enabled": false, "profile_step": 1}, "zero_optimization": {"contiguous_gradients": true}})");
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  for (const char* key : {"steps_per_print", "wall_clock_breakdown", "flops_profiler has",
                          "zero_optimization.contiguous_gradients"})
    EXPECT_NE(warnings.find(std::string("memtrain: warning: --deepspeed-config ") + path_ + ": " + key),
              std::string::npos)
        << warnings;
  EXPECT_EQ(warnings.find("profile_step"), std::string::npos) << "one warning for the whole section";
  EXPECT_EQ(c.log_interval, TrainConfig{}.log_interval);
}

TEST_F(DeepSpeedConfig, UnsupportedKeysAreRefusedByName) {
  for (const auto& [json, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"gradient_predivide_factor": 2})", "gradient_predivide_factor"},
           {R"({"scheduler": {"type": "WarmupLR"}})", "scheduler.type"},
           {R"({"fp16": {"enabled": true, "auto_cast": true}})", "fp16.auto_cast"},
           {R"({"optimizer": {"type": "AdamW", "params": {"amsgrad": true}}})", "optimizer.params.amsgrad"},
           {R"({"zero_optimization": 2})", "zero_optimization must be a JSON object"},
           {R"({"optimizer": {"type": "Lamb"}})", "optimizer.type Lamb"},
           {R"({"optimizer": {"params": {"lr": 1}}})", "optimizer has no type"},
           {R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})",
            "optimizer.params.adam_w_mode false"},
           {R"({"zero_optimization": {"offload_param": {"device": "cpu"}}})",
            "zero_optimization.offload_param"},
       })
    EXPECT_NE(error(json).find(": " + key), std::string::npos) << json;
}

// The config's optimizer is AdamW; with --optimizer adam-mini one of the two would be silently ignored.
TEST_F(DeepSpeedConfig, AnOptimizerTypeContradictsAdamMini) {
  TrainConfig mini;
  mini.optimizer = OptimizerKind::adam_mini;
  const std::string e = error(R"({"optimizer": {"type": "AdamW"}})", mini, {"--optimizer"});
  EXPECT_NE(e.find("optimizer.type AdamW contradicts --optimizer adam-mini"), std::string::npos) << e;
  EXPECT_EQ(apply(R"({"optimizer": {"type": "AdamW"}})").optimizer, OptimizerKind::adamw);
}

// Stage 1.5 is not truncated to 1, a negative bucket is not taken, a string is not a boolean.
TEST_F(DeepSpeedConfig, ValuesOfTheWrongTypeOrRangeAreRefused) {
  for (const auto& [json, text] : std::vector<std::pair<std::string, std::string>>{
           {R"({"zero_optimization": {"stage": 1.5}})",
            "zero_optimization.stage must be an integer, got 1.5"},
           {R"({"zero_optimization": {"stage": 4}})", "zero_optimization.stage must be 0, 1, 2 or 3"},
           {R"({"zero_optimization": {"reduce_bucket_size": -5}})", "reduce_bucket_size must be a positive"},
           {R"({"zero_optimization": {"reduce_bucket_size": 5e8, "allgather_bucket_size": 2e8}})", "differ"},
           {R"({"zero_optimization": {"overlap_comm": "yes"}})", "overlap_comm must be true or false"},
           {R"({"train_batch_size": "auto"})", "train_batch_size must be an integer, got \"auto\""},
           {R"({"train_batch_size": 0})", "train_batch_size must be positive (leave it out"},
           {R"({"gradient_clipping": -1})", "gradient_clipping must be 0 (off) or positive"},
           {R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e39}}})",
            "optimizer.params.lr inf: expected a finite number"},
           {R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9]}}})",
            "betas must be [beta1, beta2]"},
           {R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1.0]}}})", "must both be in [0, 1)"},
           {R"({"fp16": {"enabled": true, "initial_scale_power": 200}})", "from 0 to 127"},
           {R"({"bf16": true, "fp16": true})", "exclude each other"},
           {R"([1, 2])", "expected a JSON object"},
       })
    EXPECT_NE(error(json).find(text), std::string::npos) << json;
}

TEST_F(DeepSpeedConfig, AKeyContradictingAGivenFlagNamesBoth) {
  TrainConfig flags;
  flags.adam.clip_grad = 0.5f;
  flags.lr = 0.002f;
  EXPECT_NE(error(R"({"gradient_clipping": 1.0})", flags, {"--clip-grad"})
                .find("gradient_clipping 1.0 conflicts with --clip-grad 0.5"),
            std::string::npos);
  EXPECT_NE(error(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.001}}})", flags, {"--lr"})
                .find("optimizer.params.lr 0.001 conflicts with --lr 0.002"),
            std::string::npos);
  EXPECT_EQ(apply(R"({"gradient_clipping": 0.5})", flags, {"--clip-grad"}).adam.clip_grad, 0.5f);  // agrees
  EXPECT_EQ(apply(R"({"gradient_clipping": 1.0})", flags).adam.clip_grad, 1.0f);  // the flag's default
  flags.precision.precision = Precision::fp16;
  EXPECT_NE(error(R"({"bf16": true})", flags, {"--fp16"}).find("bf16 true conflicts with --fp16"),
            std::string::npos);
  flags.precision.precision = Precision::bf16;
  EXPECT_NE(error(R"({"bf16": {"enabled": false}})", flags, {"--precision"})
                .find("bf16.enabled false conflicts with --precision bf16"),
            std::string::npos);
  flags.zero_stage = 1;
  EXPECT_NE(error(R"({"zero_optimization": {"stage": 2}})", flags, {"--use-distributed-optimizer"})
                .find("zero_optimization.stage 2 conflicts with --use-distributed-optimizer"),
            std::string::npos);
  EXPECT_NE(error(R"({"zero_optimization": {"reduce_bucket_size": 1048576}})", flags, {"--bucket-size-mb"})
                .find("reduce_bucket_size 1048576 conflicts with --bucket-size-mb 25"),
            std::string::npos);
}

}  // namespace
}  // namespace mt
