// unit.kernels.<level> (tests/CMakeLists.txt) runs the kernel tests again with the kernels capped at a level,
// so that every machine tests the fallbacks below its own level. Capped at the CPU's own level or above, the
// run would repeat the unit tests' own run at that level bit for bit: it is skipped, and CTest reports it so.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backend/cpu/cpu_isa.h"

namespace mt::kernels {
namespace {

class LevelRun : public ::testing::Environment {
 public:
  void SetUp() override {
    if (!std::getenv("MEMTRAIN_KERNEL_LEVEL_RUN")) return;
    if (cpu_isa() == cpu_isa_supported())
      GTEST_SKIP() << "kernel level run: " << cpu_isa_name(cpu_isa())
                   << " is this CPU's own level, where the unit tests already ran";
  }
};

const ::testing::Environment* const kLevelRun = ::testing::AddGlobalTestEnvironment(new LevelRun);

}  // namespace
}  // namespace mt::kernels
