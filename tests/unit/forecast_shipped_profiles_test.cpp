// The hardware profiles shipped in profiles/: each built in as the file is, loadable, named by its level and
// thread count, with MPI rates; and the choice of one for a plan, with what the plan prints about it.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "devices/devices.h"
#include "forecast/cpu_model.h"
#include "forecast/shipped_profiles.h"

namespace mt {
namespace {

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ShippedProfiles, EachLoadsAsItsFileSays) {
  const std::vector<HardwareProfile>& profiles = shipped_hardware_profiles();
  ASSERT_EQ(profiles.size(), shipped_profile_files().size());
  std::set<std::pair<CpuIsa, int>> seen;
  for (size_t i = 0; i < profiles.size(); ++i) {
    const ProfileFile& file = shipped_profile_files()[i];
    const HardwareProfile& p = profiles[i];
    const std::string name(file.name);
    SCOPED_TRACE(name);
    // Built from the file in the source tree as it is now, and read back key for key.
    EXPECT_EQ(std::string(file.text), file_text(std::string(MEMTRAIN_SOURCE_DIR) + "/" + name));
    EXPECT_EQ(hardware_profile_json(p), nlohmann::json::parse(file.text));
    // profiles/LEVEL-Nthreads.json holds the profile of LEVEL at N threads, one per pair.
    EXPECT_EQ(name, "profiles/" + std::string(cpu_isa_name(p.cpu_isa)) + "-" + std::to_string(p.threads) +
                        (p.threads == 1 ? "thread" : "threads") + ".json");
    EXPECT_TRUE(seen.insert({p.cpu_isa, p.threads}).second);
    EXPECT_EQ(p.source, "built-in " + name);
    EXPECT_FALSE(p.cpu_model.empty());
    EXPECT_FALSE(p.notes.empty()) << "a shipped profile says how it was measured";
    EXPECT_TRUE(p.mpi_gbps.has_value());
    EXPECT_TRUE(p.adamw_mparams.fp8_moments.has_value());
    EXPECT_TRUE(p.adamw_mparams.int8_moments.has_value());
  }
  // Every level has one at the thread count this project's machine calibrates at.
  for (CpuIsa isa : {CpuIsa::generic, CpuIsa::avx2, CpuIsa::avx512, CpuIsa::avx512_bf16})
    EXPECT_TRUE(seen.count({isa, 2})) << cpu_isa_name(isa);
}

// The kept default: the numbers the planner priced with before the profiles moved out of the code.
TEST(ShippedProfiles, Avx512Bf16AtTwoThreadsIsTheFormerDefault) {
  const HardwareProfile& p = shipped_hardware_profile(CpuIsa::avx512_bf16, 2);
  EXPECT_EQ(p.cpu_isa, CpuIsa::avx512_bf16);
  EXPECT_EQ(p.threads, 2);
  EXPECT_EQ(p.bf16.forward.gflops[1][1], 926);
  EXPECT_EQ(p.fp32.forward.gflops[1][1], 471);
  EXPECT_EQ(p.mpi_gbps, 2.91);
}

HardwareProfile profile_of(CpuIsa isa, int threads, const std::string& model = host_cpu_model()) {
  HardwareProfile p;
  p.cpu_isa = isa;
  p.threads = threads;
  p.cpu_model = model;
  p.source = "test";
  p.adamw_mparams.fp8_moments = p.adamw_mparams.int8_moments = 1000;  // as every calibration now has
  return p;
}

TEST(ShippedProfiles, ExactMatchFirst) {
  for (const HardwareProfile& p : shipped_hardware_profiles())
    EXPECT_EQ(&shipped_hardware_profile(p.cpu_isa, p.threads), &p) << p.source;
}

TEST(ShippedProfiles, NearestThreadsThenNearestLevel) {
  const std::vector<HardwareProfile> profiles = {profile_of(CpuIsa::avx2, 2), profile_of(CpuIsa::avx2, 8),
                                                 profile_of(CpuIsa::avx512_bf16, 4)};
  const auto nearest = [&](CpuIsa isa, int threads) {
    return &nearest_hardware_profile(profiles, isa, threads) - profiles.data();
  };
  EXPECT_EQ(nearest(CpuIsa::avx2, 2), 0);
  EXPECT_EQ(nearest(CpuIsa::avx2, 6), 1);
  EXPECT_EQ(nearest(CpuIsa::avx2, 5), 0);         // 3 from each: the fewer threads
  EXPECT_EQ(nearest(CpuIsa::avx512_bf16, 1), 2);  // its level at 4 threads before avx2's at 2
  EXPECT_EQ(nearest(CpuIsa::generic, 16), 1);
  EXPECT_EQ(nearest(CpuIsa::avx512, 2), 0);  // one level from avx2 and from avx512_bf16: the lower
}

TEST(ShippedProfiles, DescriptionSaysWhereTheRatesComeFrom) {
  // A level other than this process's is a plan for another machine: its CPU is not compared.
  const CpuIsa other = process_cpu_isa() == CpuIsa::avx2 ? CpuIsa::generic : CpuIsa::avx2;
  const HardwareProfile p = profile_of(other, 2, "Another CPU 9000");
  const std::string name(cpu_isa_name(other));
  EXPECT_EQ(describe_profile(p, other, 2), name + ", 2 threads, calibrated on Another CPU 9000 (test)");
  EXPECT_EQ(describe_profile(p, other, 1),
            name + ", 2 threads, calibrated on Another CPU 9000 (test; this plan: " + name +
                ", 1 thread: rates from another thread count)");
  const CpuIsa here = process_cpu_isa();
  const std::string here_name(cpu_isa_name(here));
  EXPECT_EQ(describe_profile(p, here, 1),
            name + ", 2 threads, calibrated on Another CPU 9000 (test; this plan: " + here_name +
                ", 1 thread on " + host_cpu_model() +
                ": rates from another ISA level, thread count and CPU)");
  // This process's level on this CPU's model: nothing to say.
  EXPECT_EQ(describe_profile(profile_of(here, 2), here, 2),
            here_name + ", 2 threads, calibrated on " + host_cpu_model() + " (test)");
  EXPECT_EQ(describe_profile(profile_of(here, 2, "Another CPU 9000"), here, 2),
            here_name + ", 2 threads, calibrated on Another CPU 9000 (test; this plan: " + here_name +
                ", 2 threads on " + host_cpu_model() + ": rates from another CPU)");
}

// A profile calibrated before the 8-bit AdamW kernels: the plan says whose rates price them.
TEST(ShippedProfiles, DescriptionNamesTheSourceOfMissingEightBitRates) {
  const CpuIsa here = process_cpu_isa();
  HardwareProfile p = profile_of(here, 2);
  p.adamw_mparams.int8_moments.reset();
  EXPECT_EQ(describe_profile(p, here, 2),
            std::string(cpu_isa_name(here)) + ", 2 threads, calibrated on " + host_cpu_model() +
                " (test; AdamW with 8-bit moments at the rates of " +
                shipped_hardware_profile(here, 2).source + ", which it was calibrated without)");
}

}  // namespace
}  // namespace mt
