#include "forecast/cpu_model.h"

#include <fstream>
#include <map>

namespace mt {

namespace {

// "key\t: value" -> {key, value}; lines without a colon give an empty key.
std::pair<std::string, std::string> split_line(const std::string& line) {
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return {};
  const auto trim = [](const std::string& s) {
    const size_t first = s.find_first_not_of(" \t");
    if (first == std::string::npos) return std::string();
    return s.substr(first, s.find_last_not_of(" \t") - first + 1);
  };
  return {trim(line.substr(0, colon)), trim(line.substr(colon + 1))};
}

}  // namespace

std::string cpu_model_from_cpuinfo(std::istream& cpuinfo) {
  // The first processor's fields; every core of the machines we run on is the same model.
  std::map<std::string, std::string> fields;
  std::string line;
  while (std::getline(cpuinfo, line)) {
    auto [key, value] = split_line(line);
    if (!key.empty() && !value.empty()) fields.emplace(std::move(key), std::move(value));
  }
  if (fields.count("model name")) return fields["model name"];
  if (fields.count("Hardware")) return fields["Hardware"];
  if (fields.count("CPU implementer") && fields.count("CPU part"))
    return "CPU implementer " + fields["CPU implementer"] + ", part " + fields["CPU part"];
  return "unknown";
}

const std::string& host_cpu_model() {
  static const std::string model = [] {
    std::ifstream cpuinfo("/proc/cpuinfo");
    return cpu_model_from_cpuinfo(cpuinfo);
  }();
  return model;
}

}  // namespace mt
