// The name of the CPU a profile was calibrated on, so a plan can say when its rates come from another CPU.
#pragma once

#include <istream>
#include <string>

namespace mt {

// From /proc/cpuinfo's text: x86's "model name"; else "Hardware" or the implementer and part numbers that
// Arm kernels give ("CPU implementer 0x41, part 0xd0c"); else "unknown".
std::string cpu_model_from_cpuinfo(std::istream& cpuinfo);

// This machine's, read once.
const std::string& host_cpu_model();

}  // namespace mt
