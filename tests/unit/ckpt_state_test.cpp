#include <gtest/gtest.h>

#include "ckpt/state.h"
#include "core/error.h"

namespace mt::ckpt {
namespace {

CheckpointState sample_state() {
  CheckpointState s;
  s.step = 12;
  s.optimizer_updates = 10;  // two skipped steps
  s.loss_scaler = LossScaler::State{32768.0f, 3, 1};
  s.consumed_samples = 217;
  s.seed = 99;
  s.run = {{"--lr", 0.0006000000284984708}, {"--seed", 99}};
  s.model = {{"n_layer", 2}};
  s.metrics = {{"loss", 2.5}, {"lr", 0.0003}};
  s.layout = {.num_params = {100},
              .world = 2,
              .weights = DType::bf16,
              .master = true,
              .moments = DType::bf16,
              .tensors = {{"wte.weight", {4, 5}, 0}, {"ln.bias", {80}, 20}}};
  return s;
}

TEST(CheckpointState, SurvivesAJsonRoundTrip) {
  const CheckpointState s = sample_state();
  const CheckpointState r = state_from_json(nlohmann::json::parse(to_json(s).dump()), "state.json");
  EXPECT_EQ(r.step, 12);
  EXPECT_EQ(r.optimizer_updates, 10);
  ASSERT_TRUE(r.loss_scaler.has_value());
  EXPECT_EQ(r.loss_scaler->scale, 32768.0f);
  EXPECT_EQ(r.loss_scaler->good_steps, 3);
  EXPECT_EQ(r.loss_scaler->hysteresis_left, 1);
  EXPECT_EQ(r.consumed_samples, 217);
  EXPECT_EQ(r.seed, 99u);
  EXPECT_EQ(r.run, s.run);  // floats come back with the same bits
  EXPECT_EQ(r.model, s.model);
  EXPECT_EQ(r.layout.world, 2);
  EXPECT_EQ(r.layout.weights, DType::bf16);
  EXPECT_TRUE(r.layout.master);
  ASSERT_EQ(r.layout.tensors.size(), 2u);
  EXPECT_EQ(r.layout.tensors[1].name, "ln.bias");
  EXPECT_EQ(r.layout.tensors[1].offset, 20);
  EXPECT_EQ(r.layout.tensors[0].numel(), 20);
}

TEST(CheckpointState, NamesALoraBaseByItsFilesChecksums) {
  CheckpointState s = sample_state();
  EXPECT_FALSE(state_from_json(to_json(s), "state.json").base_files.has_value());  // a seed's base
  s.base_files = {{"base/model-00001-of-00002.safetensors", 1234, 0xdeadbeefu},
                  {"base/model-00002.safetensors", 8, 0}};
  const CheckpointState r = state_from_json(nlohmann::json::parse(to_json(s).dump()), "state.json");
  ASSERT_TRUE(r.base_files.has_value());
  ASSERT_EQ(r.base_files->size(), 2u);
  EXPECT_EQ((*r.base_files)[0].name, "base/model-00001-of-00002.safetensors");
  EXPECT_EQ((*r.base_files)[0].bytes, 1234u);
  EXPECT_EQ((*r.base_files)[0].crc32c, 0xdeadbeefu);
  EXPECT_EQ((*r.base_files)[1].crc32c, 0u);
  nlohmann::json j = to_json(s);
  j["base"]["files"][0]["crc32c"] = "not hex";
  EXPECT_THROW(state_from_json(j, "state.json"), Error);
}

// Pipeline stages hold different parameter counts: one per stage, and rank file r's stage and range from
// them (world rank r = (stage x dp + data-parallel rank) x tp + tensor-parallel rank).
TEST(CheckpointState, RecordsEachStagesParameterCount) {
  CheckpointState s = sample_state();
  s.layout.num_params = {100, 60};
  s.layout.world = 8;
  s.layout.tp = 2;
  const nlohmann::json j = to_json(s);
  EXPECT_EQ(j["layout"]["pp"], 2);
  const CheckpointLayout r = state_from_json(nlohmann::json::parse(j.dump()), "state.json").layout;
  EXPECT_EQ(r.num_params, (std::vector<int64_t>{100, 60}));
  EXPECT_EQ(r.dp(), 2);
  const ModelPart part = r.file_part(7);
  EXPECT_EQ(part.tp_rank, 1);
  EXPECT_EQ(part.pp_rank, 1);
  EXPECT_EQ(part.index(), 3);
  EXPECT_EQ(r.file_range(7).begin, 30);  // data-parallel rank 1 of stage 1's 60
  EXPECT_EQ(r.file_range(7).end, 60);
  EXPECT_EQ(r.file_range(2).end, 100);  // data-parallel rank 1 of stage 0's 100
  nlohmann::json older = j;             // saved before pipeline parallelism: one number, no pp
  older["layout"]["num_params"] = 100;
  older["layout"].erase("pp");
  EXPECT_EQ(state_from_json(older, "state.json").layout.num_params, (std::vector<int64_t>{100}));
  nlohmann::json disagreeing = j;
  disagreeing["layout"]["pp"] = 3;
  EXPECT_THROW(state_from_json(disagreeing, "state.json"), Error);
}

// A checkpoint of an older memtrain counted windows of one micro-batch: it loads without a sample count, and
// a negative count is refused.
TEST(CheckpointState, AnOlderWindowCursorLoadsWithoutASampleCount) {
  nlohmann::json j = to_json(sample_state());
  j["data"] = {{"epoch", 2}, {"shard", 1}, {"window", 17}, {"shuffle_seed", 99}};
  EXPECT_FALSE(state_from_json(j, "state.json").consumed_samples.has_value());
  j["data"] = {{"consumed_samples", -3}};
  try {
    state_from_json(j, "old/state.json");
    FAIL() << "a negative sample count was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("old/state.json: data.consumed_samples is negative"),
              std::string::npos)
        << e.what();
  }
}

TEST(CheckpointState, RejectsMissingFieldsAndOutOfRangeTensors) {
  nlohmann::json j = to_json(sample_state());
  j.erase("data");
  try {
    state_from_json(j, "ckpt/state.json");
    FAIL() << "a state without its data cursor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ckpt/state.json"), std::string::npos) << e.what();
  }
  CheckpointState s = sample_state();
  s.layout.tensors[1].offset = 30;  // 30 + 80 > 100
  EXPECT_THROW(state_from_json(to_json(s), "state.json"), Error);
  s = sample_state();
  s.optimizer_updates = 13;  // more updates than steps
  EXPECT_THROW(state_from_json(to_json(s), "state.json"), Error);
}

}  // namespace
}  // namespace mt::ckpt
