// Presets carry their published shapes: the parameter counts are the totals the model cards quote, and a
// Hugging Face config.json gives the same spec as the preset it describes.
#include <gtest/gtest.h>
#include <unistd.h>

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
  // One file per test process: ctest -j runs the tests of this fixture at the same time.
  std::string path_ = (std::filesystem::temp_directory_path() /
                       ("memtrain_model_spec_test." + std::to_string(::getpid()) + ".json"))
                          .string();
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

// GPT-2 keys of gpt2-tiny's shape, with `extra` added.
std::string gpt2_tiny_config(const std::string& extra) {
  return R"({"model_type": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 128,
      "vocab_size": 256)" +
         extra + "}";
}

// The usage error reading `json` raises, or "" when it reads.
std::string config_error(const std::string& path) {
  try {
    resolve_model(path, 1);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    return e.what();
  }
  return "";
}

TEST_F(ModelConfigFile, Gpt2LayerNormEpsilonIsReadOrRefused) {
  EXPECT_EQ(resolve_model(write(gpt2_tiny_config("")), 1).ln_eps, 1e-5f);
  EXPECT_EQ(resolve_model(write(gpt2_tiny_config(R"(, "layer_norm_epsilon": 1e-3)")), 1).ln_eps, 1e-3f);
  for (const char* bad : {"0", "-1e-5", "\"small\"", "1e39", "1e-50", "null"}) {
    const std::string what =
        config_error(write(gpt2_tiny_config(R"(, "layer_norm_epsilon": )" + std::string(bad))));
    EXPECT_NE(what.find("\"layer_norm_epsilon\" must be a positive finite number"), std::string::npos) << bad;
  }
  EXPECT_NE(config_error(write(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_attention_heads": 4, "num_hidden_layers": 1, "max_position_embeddings": 64, "vocab_size": 100,
      "rope_theta": 1e40})"))
                .find("\"rope_theta\" must be a positive finite number"),
            std::string::npos);
}

TEST_F(ModelConfigFile, Gpt2ShapeKeysThisEngineDoesNotBuildAreRefused) {
  EXPECT_EQ(config_error(write(gpt2_tiny_config(R"(, "n_inner": null, "activation_function": "gelu_new")"))),
            "");
  EXPECT_EQ(config_error(write(gpt2_tiny_config(R"(, "n_inner": 256, "tie_word_embeddings": true)"))), "");
  EXPECT_NE(config_error(write(gpt2_tiny_config(R"(, "n_inner": 128)"))).find("\"n_inner\""),
            std::string::npos);
  EXPECT_NE(
      config_error(write(gpt2_tiny_config(R"(, "activation_function": "relu")"))).find("activation_function"),
      std::string::npos);
  EXPECT_NE(
      config_error(write(gpt2_tiny_config(R"(, "tie_word_embeddings": false)"))).find("tie_word_embeddings"),
      std::string::npos);
}

// An unknown model_type is named with the supported ones, not reported as another architecture.
TEST_F(ModelConfigFile, UnknownModelTypeIsNamed) {
  const std::string what = config_error(write(R"({"model_type": "bert", "hidden_size": 64})"));
  EXPECT_NE(what.find("\"model_type\" bert is not supported: expected gpt2, llama, mistral or qwen2"),
            std::string::npos)
      << what;
  EXPECT_EQ(what.find("arch"), std::string::npos) << what;
  EXPECT_NE(config_error(write(gpt2_tiny_config(R"(, "arch": "llama")"))).find("contradicts"),
            std::string::npos);
  EXPECT_NE(config_error(write(gpt2_tiny_config(R"(, "arch": "t5")"))).find("\"arch\" t5"),
            std::string::npos);
}

}  // namespace
}  // namespace mt
