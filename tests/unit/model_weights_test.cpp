// Hugging Face checkpoints of both families: the file tensors a model maps to (fused q/k/v and gate/up split
// at their offsets, vocabulary padding left out), and save/load round trips, single-file and sharded, that
// give back the same weights bit for bit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "memory/allocation.h"
#include "memory/plan.h"
#include "memory/precision.h"
#include "model/hf_tensors.h"
#include "model/model.h"
#include "model/weights.h"
#include "tests/device_test_util.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

struct Model {
  ModelSpec spec;
  ModelGraph graph;
  Plan plan;
  Allocation memory;

  Model(const std::string& preset, uint64_t seed, DType dtype = DType::f32)
      : spec(resolve_model(preset, 64)),
        graph(build_model_graph(spec, {.batch = 1, .seq_len = 8, .dtype = dtype})),
        plan(make_plan(
            graph.graph.table, testing::kAlignment,
            model_state_policy({.precision = dtype == DType::f32 ? Precision::fp32 : Precision::bf16}))),
        memory(graph.graph.table, plan, testing::cpu_backend(plan.policy)) {
    init_model_params(spec, graph, memory, seed);
  }
  std::vector<float> master() const {
    std::vector<float> out;
    memory.optimizer_state().visit(
        0, memory.num_params(), StateAccess::read_master,
        [&](const StateWindow& w) { out.insert(out.end(), w.master, w.master + (w.end - w.begin)); });
    return out;
  }
  std::vector<char> weights() const {
    const char* p = static_cast<const char*>(memory.params());
    return {p, p + plan.bytes[Category::params]};
  }
};

class ModelWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("memtrain_weights_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST(CheckpointLayout, LlamaSplitsFusedParametersIntoHuggingFaceTensors) {
  const Model m("llama-tiny", 1);
  const std::vector<FileTensor> tensors = hf_tensors(m.spec, m.graph);
  std::map<std::string, FileTensor> by_name;
  for (const FileTensor& f : tensors) by_name[f.name] = f;
  ASSERT_EQ(by_name.size(), tensors.size());
  // C = 64, 2 KV heads of 16: k and v are [32, 64]; gate and up [176, 64]; the vocabulary's real 256 rows.
  const FileTensor& k = by_name.at("model.layers.1.self_attn.k_proj.weight");
  EXPECT_EQ(k.shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(k.offset, 64 * 64);
  EXPECT_EQ(by_name.at("model.layers.1.self_attn.v_proj.weight").offset, 96 * 64);
  EXPECT_EQ(k.param, by_name.at("model.layers.1.self_attn.q_proj.weight").param);
  EXPECT_EQ(by_name.at("model.layers.0.mlp.up_proj.weight").offset, 176 * 64);
  EXPECT_EQ(by_name.at("lm_head.weight").shape, (std::vector<int64_t>{256, 64}));
  int64_t total = 0;
  for (const FileTensor& f : tensors) total += f.numel();
  EXPECT_EQ(total, m.spec.num_parameters());
  EXPECT_FALSE(hf_tensor_name(m.spec, "model.layers.0.self_attn.rotary_emb.inv_freq"));
}

TEST_F(ModelWeights, ShardedSaveLoadsBackBitForBit) {
  const Model saved("llama-tiny", 1);
  const std::string index = (dir_ / "model.safetensors.index.json").string();
  save_weights(index, saved.spec, saved.graph, saved.memory, 64 << 10);  // 64 KiB shards: several files
  std::ifstream in(index);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::set<std::string> files;
  for (const auto& [name, file] : j["weight_map"].items()) files.insert(file.get<std::string>());
  EXPECT_GT(files.size(), 2u);
  EXPECT_EQ(j["metadata"]["total_size"].get<int64_t>(), saved.spec.num_parameters() * 4);

  Model loaded("llama-tiny", 2);
  ASSERT_NE(loaded.weights(), saved.weights());
  load_weights(dir_.string(), loaded.spec, loaded.graph, loaded.memory);  // the folder finds the index
  EXPECT_EQ(loaded.weights(), saved.weights());
}

TEST_F(ModelWeights, Bf16MasterCopySavesFp32AndLoadsBack) {
  const Model saved("llama-tiny", 1, DType::bf16);
  const std::string file = (dir_ / "model.safetensors").string();
  save_weights(file, saved.spec, saved.graph, saved.memory);
  EXPECT_EQ(SafetensorsReader(file).find("model.norm.weight")->dtype, DType::f32);
  Model loaded("llama-tiny", 2, DType::bf16);
  load_weights(file, loaded.spec, loaded.graph, loaded.memory);
  EXPECT_EQ(loaded.weights(), saved.weights());
  EXPECT_EQ(loaded.master(), saved.master());
}

TEST_F(ModelWeights, GptCheckpointDoesNotLoadIntoLlama) {
  const Model gpt("gpt2-tiny", 1);
  const std::string file = (dir_ / "gpt2.safetensors").string();
  save_weights(file, gpt.spec, gpt.graph, gpt.memory);
  Model llama("llama-tiny", 1);
  EXPECT_THROW(load_weights(file, llama.spec, llama.graph, llama.memory), Error);
}

// A NaN in the file is the file's fault, named where it is, not a divergence at step 1.
TEST_F(ModelWeights, NonFiniteWeightsAreNamedAsBadWeightsOfTheFile) {
  Model bad("gpt2-tiny", 1);
  static_cast<float*>(bad.memory.params())[3] = std::numeric_limits<float>::quiet_NaN();
  const std::string file = (dir_ / "bad.safetensors").string();
  save_weights(file, bad.spec, bad.graph, bad.memory);
  for (const DType dtype : {DType::f32, DType::bf16}) {  // read in place, and converted
    Model loaded("gpt2-tiny", 2, dtype);
    try {
      load_weights(file, loaded.spec, loaded.graph, loaded.memory);
      ADD_FAILURE() << "NaN weights were loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::data);
      const std::string what = e.what();
      EXPECT_NE(what.find(file + ": bad weights: tensor "), std::string::npos) << what;
      EXPECT_NE(what.find("nan at element"), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace mt
