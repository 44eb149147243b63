// What a refused resume names: the model config's keys that differ, and the run settings that differ in the
// flag table's order, so that a changed --micro-batch-size is named before the --global-batch-size it
// changes.
#include <gtest/gtest.h>

#include "config/run_flag_table.h"
#include "model/hf_config.h"
#include "model/spec.h"
#include "train/resume_check.h"

namespace mt {
namespace {

TEST(ResumeCheck, ModelDifferencesNameTheKeys) {
  const ModelSpec spec = resolve_model("gpt2-tiny", 64);
  ModelSpec other = spec;
  other.n_layer = 3;
  other.ln_eps = 1e-3f;
  const nlohmann::json saved = hf_config_json(spec);
  EXPECT_EQ(model_differences(saved, saved), "");
  const std::string text = model_differences(saved, hf_config_json(other));
  EXPECT_NE(text.find("n_layer is 3 here but 2 in the checkpoint"), std::string::npos) << text;
  EXPECT_NE(text.find("layer_norm_epsilon is "), std::string::npos) << text;
  EXPECT_EQ(text.find("vocab_size"), std::string::npos) << "only the keys that differ: " << text;
  EXPECT_EQ(model_differences({{"a", 1}}, {{"a", 1}, {"b", 2}}), "b is 2 here but absent in the checkpoint");
}

TEST(ResumeCheck, SettingDifferencesComeInFlagTableOrder) {
  TrainConfig config;
  const nlohmann::json saved = run_settings(config, 32, 8);
  EXPECT_EQ(setting_differences(saved, saved), "");
  // The micro-batch size is no setting a resume repeats: only the global batch is.
  config.micro_batch = 2;
  EXPECT_EQ(setting_differences(saved, run_settings(config, 32, 8)), "");
  EXPECT_EQ(setting_differences(saved, run_settings(config, 32, 4)),
            "--global-batch-size is 4 here but 8 in the checkpoint");
  config.lr = 1e-3f;
  EXPECT_EQ(setting_differences(saved, run_settings(config, 32, 4)),
            "--global-batch-size is 4 here but 8 in the checkpoint, --lr is 0.0010000000474974513 here but "
            "0.0006000000284984708 in the checkpoint");
  nlohmann::json older = saved;  // a setting the checkpoint predates is not compared; one it has is
  older.erase("--seed");
  older["--gone"] = 1;
  older["--micro-batch-size"] = 4;  // recorded before samples were numbered globally: no longer compared
  EXPECT_EQ(setting_differences(older, saved), "--gone is absent here but 1 in the checkpoint");
}

}  // namespace
}  // namespace mt
