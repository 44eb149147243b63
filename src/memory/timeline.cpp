#include "memory/timeline.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace mt {

namespace {

nlohmann::ordered_json bytes_json(const CategoryBytes& bytes) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  for (Category c : kAllCategories) json[std::string(category_key(c))] = bytes[c];
  return json;
}

CategoryBytes bytes_from_json(const nlohmann::json& json) {
  CategoryBytes bytes;
  for (Category c : kAllCategories) bytes[c] = json.at(std::string(category_key(c))).get<int64_t>();
  return bytes;
}

// Op names are identifiers today; quoting keeps the file valid CSV should one ever hold a comma or quote.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char ch : text) quoted += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return quoted + "\"";
}

}  // namespace

int MemoryTimeline::peak_point() const {
  int peak = -1;
  for (int i = 0; i < static_cast<int>(points.size()); ++i)
    if (peak < 0 || points[i].live.total() > points[peak].live.total()) peak = i;
  return peak;
}

std::string memory_timeline_json(const MemoryTimeline& t) {
  using json = nlohmann::ordered_json;
  std::ostringstream out;
  out << "{\n \"run\": " << json(t.run).dump() << ",\n \"loss_op\": " << t.loss_op
      << ",\n \"planned\": " << bytes_json(t.planned).dump() << ",\n \"points\": [";
  for (size_t i = 0; i < t.points.size(); ++i) {
    const TimelinePoint& p = t.points[i];
    out << (i ? ",\n  " : "\n  ")
        << json({{"op", p.op}, {"name", p.name}, {"bytes", bytes_json(p.live)}}).dump();
  }
  out << "\n ]\n}\n";
  return out.str();
}

MemoryTimeline memory_timeline_from_json(const nlohmann::json& json) {
  MemoryTimeline t;
  t.run = json.at("run").get<std::string>();
  t.loss_op = json.at("loss_op").get<int>();
  t.planned = bytes_from_json(json.at("planned"));
  for (const nlohmann::json& p : json.at("points"))
    t.points.push_back(
        {p.at("op").get<int>(), p.at("name").get<std::string>(), bytes_from_json(p.at("bytes"))});
  return t;
}

std::string memory_timeline_csv(const MemoryTimeline& t) {
  std::ostringstream out;
  out << "op,name";
  for (Category c : kAllCategories) out << ',' << category_key(c);
  out << ",total\n";
  for (const TimelinePoint& p : t.points) {
    out << p.op << ',' << csv_field(p.name);
    for (Category c : kAllCategories) out << ',' << p.live[c];
    out << ',' << p.live.total() << '\n';
  }
  return out.str();
}

MemoryTimeline read_memory_timeline(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail_data(path + ": cannot open: " + std::strerror(errno));
  try {
    return memory_timeline_from_json(nlohmann::json::parse(in));
  } catch (const nlohmann::json::exception& e) {
    fail_data(path + ": not a memory timeline: " + e.what());
  }
}

}  // namespace mt
