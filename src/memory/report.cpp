#include "memory/report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace mt {

int64_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.starts_with("VmHWM:")) return std::stoll(line.substr(6)) * 1024;  // reported in kB
  return 0;
}

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

std::string with_commas(int64_t n) {
  const std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out = n < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

double model_state_bytes_per_param(const CategoryBytes& b, int64_t num_params) {
  const int64_t states = b[Category::params] + b[Category::master] + b[Category::grads] + b[Category::optim];
  return num_params > 0 ? static_cast<double>(states) / static_cast<double>(num_params) : 0.0;
}

std::string format_trainable(int64_t trainable, int64_t all) {
  char share[32];
  std::snprintf(share, sizeof share, "%.2f%%", all > 0 ? 100.0 * static_cast<double>(trainable) / all : 0.0);
  return "trainable parameters " + with_commas(trainable) + " of " + with_commas(all) + " (" + share + ")";
}

std::string format_memory_report(const MemoryReport& r) {
  std::ostringstream out;
  char line[160];
  std::snprintf(line, sizeof line, "%-18s %16s %16s %12s\n", "memory", "planned", "measured", "");
  out << line;
  for (Category c : kAllCategories) {
    const bool match = r.planned[c] == r.measured[c];
    std::snprintf(line, sizeof line, "%-18s %16lld %16lld %12s%s\n", std::string(category_title(c)).c_str(),
                  static_cast<long long>(r.planned[c]), static_cast<long long>(r.measured[c]),
                  human_bytes(r.planned[c]).c_str(), match ? "" : "  MISMATCH");
    out << line;
  }
  std::snprintf(line, sizeof line, "%-18s %16lld %16lld %12s\n", "total",
                static_cast<long long>(r.planned.total()), static_cast<long long>(r.measured.total()),
                human_bytes(r.planned.total()).c_str());
  out << line;
  // What the host itself reads and writes; on the CPU every byte is host memory, on an accelerator the rest
  // is the device's.
  std::snprintf(line, sizeof line, "%-18s %16lld %16lld %12s%s\n", "of which host",
                static_cast<long long>(r.planned_host.total()),
                static_cast<long long>(r.measured_host.total()), human_bytes(r.planned_host.total()).c_str(),
                r.planned_host.bytes == r.measured_host.bytes ? "" : "  MISMATCH");
  out << line;
  out << "model states " << model_state_bytes_per_param(r.measured, r.num_params)
      << " bytes/parameter measured, " << model_state_bytes_per_param(r.planned, r.num_params)
      << " planned\n";
  out << "activation arena peak " << human_bytes(r.arena_peak_bytes)
      << " (tensors without lifetime packing: " << human_bytes(r.activations_sum_bytes) << ")\n";
  if (r.offloaded_bytes > 0)
    out << "optimizer offload file " << human_bytes(r.offloaded_bytes)
        << " (master weights and moments on disk, not memory)\n";
  if (r.peak_rss_bytes > 0)
    out << "process peak RSS " << human_bytes(r.peak_rss_bytes)
        << " (includes code, libraries and their buffers)\n";
  return out.str();
}

std::string format_largest_tensors(const TensorTable& table, const ArenaLayout& layout, Category category,
                                   int n, const std::vector<std::string>& op_names) {
  std::vector<int> ids;
  for (int id = 0; id < table.size(); ++id)
    if (layout.offset[id] >= 0) ids.push_back(id);
  // The packing's order: largest first, then earlier start, then id.
  std::sort(ids.begin(), ids.end(), [&](int a, int b) {
    if (table[a].bytes() != table[b].bytes()) return table[a].bytes() > table[b].bytes();
    if (table[a].first_op != table[b].first_op) return table[a].first_op < table[b].first_op;
    return a < b;
  });
  const size_t shown = std::min(ids.size(), static_cast<size_t>(std::max(n, 0)));
  std::vector<std::vector<std::string>> rows = {
      {"tensor", "shape", "dtype", "bytes", "offset", "ops", "first .. last op"}};
  for (size_t i = 0; i < shown; ++i) {
    const TensorDesc& t = table[ids[i]];
    std::string shape = "[";
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d > 0) shape += ", ";
      shape += std::to_string(t.shape[d]);
    }
    std::string ops = "[";
    ops.append(std::to_string(t.first_op)).append(", ").append(std::to_string(t.last_op)).append("]");
    std::string names = op_names.at(t.first_op);
    if (t.last_op != t.first_op) names.append(" .. ").append(op_names.at(t.last_op));
    rows.push_back({t.name, shape + "]", std::string(dtype_name(t.dtype)), human_bytes(t.bytes()),
                    std::to_string(layout.offset[ids[i]]), ops, names});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::ostringstream out;
  out << "largest " << category_title(category) << ": " << shown << " of " << ids.size() << " tensors, arena "
      << human_bytes(layout.size) << "\n";
  for (const auto& row : rows) {
    std::string line = " ";
    for (size_t c = 0; c < row.size(); ++c) {
      const bool right = c == 3 || c == 4;  // byte counts line up on the right
      const std::string pad(width[c] - row[c].size(), ' ');
      line.append(" ").append(right ? pad : row[c]).append(right ? row[c] : pad);
    }
    out << line.substr(0, line.find_last_not_of(' ') + 1) << "\n";
  }
  return out.str();
}

nlohmann::json memory_report_json(const MemoryReport& r) {
  const auto by_category = [](const CategoryBytes& bytes) {
    nlohmann::json json = nlohmann::json::object();
    for (Category c : kAllCategories) json[std::string(category_key(c))] = bytes[c];
    return json;
  };
  return {{"planned", by_category(r.planned)},
          {"measured", by_category(r.measured)},
          {"planned_host", by_category(r.planned_host)},
          {"measured_host", by_category(r.measured_host)},
          {"planned_total_bytes", r.planned.total()},
          {"measured_total_bytes", r.measured.total()},
          {"arena_peak_bytes", r.arena_peak_bytes},
          {"activations_unpacked_bytes", r.activations_sum_bytes},
          {"peak_rss_bytes", r.peak_rss_bytes},
          {"num_params", r.num_params},
          {"offloaded_optimizer_file_bytes", r.offloaded_bytes},
          {"model_state_bytes_per_param",
           {{"planned", model_state_bytes_per_param(r.planned, r.num_params)},
            {"measured", model_state_bytes_per_param(r.measured, r.num_params)}}}};
}

}  // namespace mt
