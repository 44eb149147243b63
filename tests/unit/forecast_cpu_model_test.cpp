// The CPU model a profile records, from /proc/cpuinfo's text on x86 and on Arm.
#include <gtest/gtest.h>

#include <sstream>

#include "forecast/cpu_model.h"

namespace mt {
namespace {

std::string model_of(const std::string& cpuinfo) {
  std::istringstream in(cpuinfo);
  return cpu_model_from_cpuinfo(in);
}

TEST(CpuModel, FromCpuinfo) {
  EXPECT_EQ(model_of("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\n"
                     "processor\t: 1\nmodel name\t: AMD EPYC 7B13\n"),
            "AMD EPYC 7B13");
  EXPECT_EQ(model_of("processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU architecture: 8\n"
                     "CPU part\t: 0xd0c\n"),
            "CPU implementer 0x41, part 0xd0c");
  EXPECT_EQ(model_of("processor\t: 0\nHardware\t: BCM2835\nCPU part\t: 0xd08\n"), "BCM2835");
  EXPECT_EQ(model_of(""), "unknown");
}

TEST(CpuModel, ThisMachineHasOne) {
  EXPECT_FALSE(host_cpu_model().empty());
}

}  // namespace
}  // namespace mt
