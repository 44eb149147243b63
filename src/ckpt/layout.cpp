#include "ckpt/layout.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <regex>

#include "core/int_math.h"

namespace mt::ckpt {

namespace {

const std::regex& checkpoint_pattern() {
  static const std::regex pattern(R"(step_(\d{8,}))");
  return pattern;
}

}  // namespace

std::string checkpoint_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
  return name;
}

std::string hidden_name(int64_t step, const char* suffix) {
  char name[48];
  std::snprintf(name, sizeof name, ".step_%08lld.%s", static_cast<long long>(step), suffix);
  return name;
}

std::string rank_file_name(int rank) {
  return "rank" + std::to_string(rank) + ".safetensors";
}

FlatRange save_range(int64_t num_params, int world, int rank, int64_t block) {
  block = std::max<int64_t>(block, 1);
  const int64_t per_rank = round_up(ceil_div(num_params, world), block);
  const int64_t begin = std::min(num_params, rank * per_rank);
  return {begin, std::min(num_params, begin + per_rank)};
}

std::vector<std::string> list_checkpoints(const std::string& save_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(save_dir, ec)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && std::regex_match(name, match, checkpoint_pattern()))
      found.emplace_back(std::stoll(match[1].str()), entry.path().string());
  }
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> dirs;
  for (auto& [step, dir] : found) dirs.push_back(std::move(dir));
  return dirs;
}

bool is_checkpoint_dir(const std::string& dir) {
  const std::filesystem::path path(dir);
  // "save/step_00000012/" names its directory in the parent's part.
  const std::string name = (path.has_filename() ? path : path.parent_path()).filename().string();
  return std::filesystem::exists(path / kManifestFile) || std::regex_match(name, checkpoint_pattern());
}

}  // namespace mt::ckpt
