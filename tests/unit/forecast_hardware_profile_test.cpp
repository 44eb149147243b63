// Hardware profiles: what `memtrain calibrate` writes, `memtrain plan --profile` reads back unchanged; a file
// that is not a profile is one data error naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "forecast/hardware_profile.h"
#include "plan_test_util.h"

namespace mt {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(HardwareProfile, RoundTripsThroughJson) {
  HardwareProfile p = testing::tested_profile();
  p.cpu_isa = CpuIsa::avx2;
  p.threads = 3;
  p.cpu_model = "Some CPU";
  p.notes.clear();     // a calibrated profile has none
  p.mpi_gbps.reset();  // a profile calibrated outside mpirun
  p.comm_overlap.reset();
  // Every rate a different value from the default's, so each must be read back from its own key.
  p.bf16.forward.gflops[1][0] = 123.5;
  p.bf16.backward.gflops[1][2] = 98.5;
  p.fp32.backward.gflops[2][1] = 76.5;
  p.attention_gflops = {11.5, 12.5};
  p.lm_head_gflops = {13.5, 14.5};
  p.adamw_mparams = {.fp32_moments = 15.5, .bf16_moments = 16.5, .fp8_moments = 19.5, .int8_moments = 20.5};
  p.norm_melems = 17.5;
  p.activation_melems = 18.5;
  const std::string path = write_temp("memtrain-profile-test.json", hardware_profile_json(p).dump());
  const HardwareProfile q = load_hardware_profile(path);
  EXPECT_EQ(q.source, path);
  EXPECT_EQ(hardware_profile_json(q), hardware_profile_json(p));
  EXPECT_EQ(q.cpu_isa, CpuIsa::avx2);
  EXPECT_EQ(q.threads, 3);
  EXPECT_EQ(q.cpu_model, "Some CPU");
  EXPECT_FALSE(hardware_profile_json(q).contains("notes"));
  EXPECT_FALSE(q.mpi_gbps.has_value());
  EXPECT_FALSE(q.comm_overlap.has_value());
  // And one calibrated under mpirun: the overlap comes back too.
  p.mpi_gbps = 2.5;
  p.comm_overlap = -0.75;
  std::ofstream(path) << hardware_profile_json(p).dump();
  EXPECT_EQ(load_hardware_profile(path).comm_overlap, -0.75);
  std::filesystem::remove(path);
}

TEST(HardwareProfile, RejectsWhatIsNotAProfile) {
  const nlohmann::json good = hardware_profile_json(testing::tested_profile());
  nlohmann::json j = good;
  j.erase("memory_gbps");
  const std::string missing = write_temp("memtrain-profile-missing.json", j.dump());
  j = good;
  j["disk_gbps"] = 0;
  const std::string zero = write_temp("memtrain-profile-zero.json", j.dump());
  j = good;
  j["comm_overlap"] = nullptr;  // MPI bandwidth without its overlap
  const std::string half = write_temp("memtrain-profile-half.json", j.dump());
  j = good;
  j["cpu_isa"] = "avx1024";
  const std::string level = write_temp("memtrain-profile-level.json", j.dump());
  j = good;
  j.erase("cpu_model");  // written before profiles named their CPU
  const std::string unnamed = write_temp("memtrain-profile-unnamed.json", j.dump());
  for (const std::string& path :
       {missing, zero, half, level, unnamed, std::string("/nonexistent/profile.json")}) {
    try {
      load_hardware_profile(path);
      ADD_FAILURE() << path << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::data);
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
    std::filesystem::remove(path);
  }
}

// A profile calibrated before the 8-bit kernels has no rates for them: it loads, and those rates are absent
// (the cost model takes the shipped ones, forecast_cost_model_test); one that is there must be positive.
TEST(HardwareProfile, EightBitAdamWRatesMayBeAbsentNotWrong) {
  nlohmann::json j = hardware_profile_json(testing::tested_profile());
  ASSERT_TRUE(j.at("adamw_mparams_per_sec").contains("int8_moments"));
  j["adamw_mparams_per_sec"].erase("fp8_moments");
  j["adamw_mparams_per_sec"].erase("int8_moments");
  const HardwareProfile old = parse_hardware_profile(j.dump(), "old.json");
  EXPECT_FALSE(old.adamw_mparams.of(DType::u8).has_value());
  EXPECT_FALSE(old.adamw_mparams.of(DType::f8_e4m3).has_value());
  EXPECT_EQ(old.adamw_mparams.of(DType::bf16).value_or(0),
            testing::tested_profile().adamw_mparams.bf16_moments);
  EXPECT_FALSE(hardware_profile_json(old).at("adamw_mparams_per_sec").contains("int8_moments"));
  j["adamw_mparams_per_sec"]["int8_moments"] = -1;
  try {
    parse_hardware_profile(j.dump(), "negative.json");
    ADD_FAILURE() << "a negative int8 rate was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::data);
    EXPECT_NE(std::string(e.what()).find("negative.json"), std::string::npos) << e.what();
  }
}

TEST(HardwareProfile, LinearClassesByWeightSize) {
  EXPECT_EQ(weight_class(384, 384), ShapeClass::small);
  EXPECT_EQ(weight_class(768, 768), ShapeClass::medium);
  EXPECT_EQ(weight_class(768, 3072), ShapeClass::large);
  EXPECT_EQ(weight_class(768, 2304), ShapeClass::large);  // GPT-2's q, k, v together
  EXPECT_EQ(weight_class(4096, 11008), ShapeClass::large);
}

// Rates between the timed rows are interpolated in log(rows), and held beyond the first and last.
TEST(HardwareProfile, LinearRatesAlongTheRows) {
  LinearCurve curve;
  curve.gflops[1] = {100, 200, 400};
  EXPECT_DOUBLE_EQ(curve.at(ShapeClass::medium, 256), 100);
  EXPECT_DOUBLE_EQ(curve.at(ShapeClass::medium, 512), 100);
  EXPECT_DOUBLE_EQ(curve.at(ShapeClass::medium, 724), 100 + 100 * std::log(724.0 / 512) / std::log(2.0));
  EXPECT_DOUBLE_EQ(curve.at(ShapeClass::medium, 1024), 200);
  EXPECT_DOUBLE_EQ(curve.at(ShapeClass::medium, 1536), 200 + 200 * std::log(1.5) / std::log(2.0));
  EXPECT_DOUBLE_EQ(curve.at(ShapeClass::medium, 8192), 400);
}

}  // namespace
}  // namespace mt
