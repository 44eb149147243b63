#include "train/job_agreement.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/run_flag_table.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/host_name.h"

namespace mt {

namespace {

// The ranks compare texts by their CRC-32C, one i32 word each.
int32_t digest(std::string_view text) {
  return static_cast<int32_t>(crc32c(text.data(), text.size()));
}

// What must match across the job, by name: the job-wide flags and, for a --model file, its contents.
std::vector<std::pair<std::string, std::string>> shared_settings(const TrainConfig& config) {
  std::vector<std::pair<std::string, std::string>> settings;
  for (auto& [name, args] : job_wide_args(config)) settings.emplace_back(name, std::move(args));
  if (std::filesystem::is_regular_file(config.model)) {
    std::ifstream file(config.model, std::ios::binary);
    settings.emplace_back("the contents of --model " + config.model,
                          std::string(std::istreambuf_iterator<char>(file), {}));
  }
  return settings;
}

std::string per_rank_flags() {
  std::string names;
  for (const RunFlag& flag : run_flag_table())
    if (flag.per_rank) names += (names.empty() ? "" : ", ") + std::string(flag.name());
  return names;
}

}  // namespace

std::vector<int32_t> gather_words(Communicator& comm, const std::vector<int32_t>& words) {
  std::vector<int32_t> all(words.size() * static_cast<size_t>(comm.size()));
  comm.all_gather(words.data(), all.data(), static_cast<int64_t>(words.size()), DType::i32);
  return all;
}

void agree_on_failure(Communicator& comm, const std::function<void()>& check) {
  if (comm.size() == 1) return check();
  std::string message;
  int code = 0;
  try {
    check();
  } catch (const Error& e) {
    message = e.what();
    code = e.exit_code();
  }
  const std::vector<int32_t> all = gather_words(comm, {code, digest(message)});
  int first_code = 0;
  bool alike = true;
  for (size_t r = 0; r < all.size(); r += 2) {
    if (first_code == 0) first_code = all[r];
    alike = alike && all[r] == all[0] && all[r + 1] == all[1];
  }
  if (first_code == 0) return;
  if (alike && comm.rank() == 0) print_error(message);
  if (!alike && code != 0)
    print_error("rank " + std::to_string(comm.rank()) + " on " + host_name() + ": " + message);
  // Printed before any rank exits: mpirun ends the others as soon as one does.
  comm.barrier();
  throw ReportedElsewhere(static_cast<ErrorKind>(code != 0 ? code : first_code));
}

void check_same_settings(const TrainConfig& config, Communicator& comm) {
  const std::vector<std::pair<std::string, std::string>> settings = shared_settings(config);
  std::vector<int32_t> words;
  for (const auto& setting : settings) words.push_back(digest(setting.second));
  // A --model file on one rank and a preset on another give different counts: compare the counts first.
  const std::vector<int32_t> counts = gather_words(comm, {static_cast<int32_t>(words.size())});
  for (const int32_t count : counts)
    if (count != counts[0])
      fail_usage(
          "the ranks of this job were given different settings: --model is a file on some ranks only; "
          "every rank needs the same flags");
  const std::vector<int32_t> all = gather_words(comm, words);
  std::string differing;
  for (size_t i = 0; i < settings.size(); ++i) {
    std::string ranks;
    for (int r = 1; r < comm.size(); ++r) {
      if (all[static_cast<size_t>(r) * words.size() + i] != all[i])
        ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    }
    if (!ranks.empty())
      differing += (differing.empty() ? "" : "; ") + settings[i].first + " differs on rank" +
                   (ranks.find(',') == std::string::npos ? " " : "s ") + ranks + " from rank 0's";
  }
  if (!differing.empty())
    fail_usage("the ranks of this job were given different settings: " + differing +
               "; every rank needs the same flags (all but " + per_rank_flags() + ")");
}

}  // namespace mt
