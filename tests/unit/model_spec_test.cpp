// Presets carry their published shapes: the parameter counts are the totals the model cards quote, and a
// Hugging Face config.json gives the same spec as the preset it describes.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/spec.h"

namespace mt {
namespace {

TEST(ModelSpec, LlamaPresetsHavePublishedParameterCounts) {
  EXPECT_EQ(resolve_model("llama2-7b", 1).num_parameters(), 6738415616);
  EXPECT_EQ(resolve_model("llama2-13b", 1).num_parameters(), 13015864320);
  EXPECT_EQ(resolve_model("llama2-70b", 1).num_parameters(), 68976648192);
  EXPECT_EQ(resolve_model("llama3-8b", 1).num_parameters(), 8030261248);
  EXPECT_EQ(resolve_model("llama3-70b", 1).num_parameters(), 70553706496);
  EXPECT_EQ(resolve_model("qwen2.5-7b", 1).num_parameters(), 7615616512);
  EXPECT_EQ(resolve_model("mistral-7b", 1).num_parameters(), 7241732096);
}

TEST(ModelSpec, GroupedQueryAttentionShapes) {
  const ModelSpec s = resolve_model("llama3-8b", 64);
  EXPECT_EQ(s.arch, Arch::llama);
  EXPECT_EQ(s.head_dim(), 128);
  EXPECT_EQ(s.kv_dim(), 1024);  // 8 key/value heads
  EXPECT_FALSE(s.tied_head);
  EXPECT_EQ(s.rope_theta, 500000.0f);
  EXPECT_EQ(s.padded_vocab_size, 128256);
}

class ModelConfigFile : public ::testing::Test {
 protected:
  std::string write(const std::string& json) {
    std::ofstream(path_) << json;
    return path_;
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::string path_ = (std::filesystem::temp_directory_path() / "memtrain_model_spec_test.json").string();
};

TEST_F(ModelConfigFile, HuggingFaceLlamaConfigMatchesPreset) {
  // Meta-Llama-3-8B's config.json, keys memtrain reads plus some it ignores.
  const ModelSpec s = resolve_model(write(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
      "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
      "num_key_value_heads": 8, "max_position_embeddings": 8192, "rms_norm_eps": 1e-05,
      "rope_theta": 500000.0, "tie_word_embeddings": false, "vocab_size": 128256, "hidden_act": "silu",
      "torch_dtype": "bfloat16"})"),
                                    1);
  const ModelSpec p = resolve_model("llama3-8b", 1);
  EXPECT_EQ(s.num_parameters(), p.num_parameters());
  EXPECT_EQ(s.n_kv_head, 8);
  EXPECT_EQ(s.ln_eps, 1e-5f);
  EXPECT_EQ(s.rope_theta, p.rope_theta);
  EXPECT_EQ(s.n_positions, 8192);
}

TEST_F(ModelConfigFile, Qwen2HasQkvBiasesAndArchKeySelectsLlama) {
  EXPECT_TRUE(resolve_model(write(R"({"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
      "num_attention_heads": 4, "num_hidden_layers": 1, "num_key_value_heads": 2,
      "max_position_embeddings": 64, "vocab_size": 100})"),
                            1)
                  .qkv_bias);
  const ModelSpec s = resolve_model(write(R"({"arch": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_attention_heads": 4, "num_hidden_layers": 1, "max_position_embeddings": 64, "vocab_size": 100,
      "tie_word_embeddings": true})"),
                                    1);
  EXPECT_EQ(s.arch, Arch::llama);
  EXPECT_EQ(s.n_kv_head, 4);
  EXPECT_TRUE(s.tied_head);
  EXPECT_EQ(s.num_parameters(), 100 * 64 + 64 + (64 + 3 * 64 * 64 + 64 * 64 + 64 + 3 * 64 * 128));
}

TEST_F(ModelConfigFile, SlidingWindowBoundsTheSequence) {
  const std::string keys = R"("hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
      "num_hidden_layers": 1, "max_position_embeddings": 32768, "vocab_size": 100, "sliding_window": 4096)";
  EXPECT_EQ(resolve_model(write("{\"model_type\": \"mistral\", " + keys + "}"), 1).n_positions, 4096);
  // Qwen2 names the window but does not use it.
  EXPECT_EQ(
      resolve_model(write("{\"model_type\": \"qwen2\", \"use_sliding_window\": false, " + keys + "}"), 1)
          .n_positions,
      32768);
}

TEST_F(ModelConfigFile, BadShapesAreUsageErrors) {
  EXPECT_THROW(resolve_model(write(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_attention_heads": 4, "num_hidden_layers": 1, "num_key_value_heads": 3,
      "max_position_embeddings": 64, "vocab_size": 100})"),
                             1),
               Error);
  EXPECT_THROW(resolve_model(write(R"({"model_type": "bert", "hidden_size": 64})"), 1), Error);
  EXPECT_THROW(resolve_model(write(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_attention_heads": 4, "num_hidden_layers": 1, "max_position_embeddings": 64, "vocab_size": 100,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})"),
                             1),
               Error);
  EXPECT_THROW(resolve_model(write(R"({"model_type": "llama", "hidden_size": 64})"), 1), Error);
}

}  // namespace
}  // namespace mt
