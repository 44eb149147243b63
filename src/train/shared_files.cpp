#include "train/shared_files.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "core/error.h"
#include "data/shard.h"
#include "train/job_agreement.h"

namespace mt {

namespace fs = std::filesystem;

namespace {

// Bytes of each shard and mask that the ranks compare: the header and the first tokens.
constexpr std::size_t kComparedBytes = 4096;

// Rank 0's check file for `value`, in the directory it checks.
std::string shared_check_file_name(uint64_t value) {
  return ".memtrain-shared-check-" + std::to_string(value);
}

struct CheckedDir {
  std::string flag, dir;
};

// The directories rank 0 may write a check file into; which of them it did is its broadcast mask.
std::vector<CheckedDir> candidate_dirs(const TrainConfig& c) {
  std::vector<CheckedDir> dirs{{"--out", c.out}};
  if (!c.save.empty()) dirs.push_back({"--save", c.save});
  if (!c.save_adapter.empty()) {
    dirs.push_back({"--save-adapter", c.save_adapter});
    const fs::path parent = fs::path(c.save_adapter).parent_path();
    dirs.push_back({"--save-adapter", parent.empty() ? "." : parent.string()});
  }
  return dirs;
}

// Rank 0: the check files, one per directory that exists (--save-adapter's folder only when it does not),
// as a mask of candidate_dirs. An unwritable one is left to the checks of the output paths.
uint32_t write_check_files(const std::vector<CheckedDir>& dirs, uint64_t value) {
  uint32_t mask = 0;
  for (size_t i = 0; i < dirs.size(); ++i) {
    const bool parent_of_adapter =
        i > 0 && dirs[i].flag == "--save-adapter" && dirs[i - 1].flag == dirs[i].flag;
    if (parent_of_adapter && (mask >> (i - 1) & 1u)) continue;
    std::error_code ec;
    if (dirs[i].dir.empty() || !fs::is_directory(dirs[i].dir, ec)) continue;
    std::ofstream file(fs::path(dirs[i].dir) / shared_check_file_name(value));
    file << value;
    if (file.flush()) mask |= 1u << i;
  }
  return mask;
}

void remove_check_files(const std::vector<CheckedDir>& dirs, uint32_t mask, uint64_t value) {
  for (size_t i = 0; i < dirs.size(); ++i) {
    std::error_code ec;
    if (mask >> i & 1u) fs::remove(fs::path(dirs[i].dir) / shared_check_file_name(value), ec);
  }
}

// Another rank: what is wrong with rank 0's check files here, or empty.
std::string read_check_files(const std::vector<CheckedDir>& dirs, uint32_t mask, uint64_t value) {
  for (size_t i = 0; i < dirs.size(); ++i) {
    if (!(mask >> i & 1u)) continue;
    const fs::path file = fs::path(dirs[i].dir) / shared_check_file_name(value);
    std::ifstream in(file);
    uint64_t read = 0;
    if (!(in >> read) || read != value)
      return dirs[i].flag + " " + dirs[i].dir + ": this rank does not see " + file.filename().string() +
             ", which rank 0 wrote there: a job across hosts needs its --out, --save, --save-adapter and "
             "--data "
             "on a file system every host shares";
  }
  return "";
}

uint32_t add_file(uint32_t crc, const std::string& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  const std::string head = path + "\n" + std::to_string(ec ? 0 : size) + "\n";
  crc = crc32c(head.data(), head.size(), crc);
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes(kComparedBytes);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return crc32c(bytes.data(), static_cast<std::size_t>(in.gcount()), crc);
}

// The names, sizes and first bytes of the shards (and masks) this rank sees, as one CRC-32C.
uint32_t data_digest(const TrainConfig& c) {
  uint32_t crc = 0;
  for (const char* split : {"train", "val"}) {
    std::vector<std::string> shards;
    try {
      shards = find_shards(c.data, split);
    } catch (const Error&) {
      crc = crc32c(split, 1, crc);  // none here: a difference only if rank 0 has some
      continue;
    }
    for (const std::string& shard : shards) {
      crc = add_file(crc, shard);
      if (fs::exists(loss_mask_path(shard))) crc = add_file(crc, loss_mask_path(shard));
    }
  }
  return crc;
}

}  // namespace

void check_shared_files(const TrainConfig& config, Communicator& comm) {
  if (comm.size() == 1) return;
  const std::vector<CheckedDir> dirs = candidate_dirs(config);
  uint64_t value = 0;
  uint32_t mask = 0;
  if (comm.rank() == 0) {
    value = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
    mask = write_check_files(dirs, value);
  }
  // Nothing below throws before the last collective: every rank goes through all of them.
  std::vector<int32_t> sent{static_cast<int32_t>(value), static_cast<int32_t>(value >> 32),
                            static_cast<int32_t>(mask)};
  comm.broadcast(sent.data(), static_cast<int64_t>(sent.size()), DType::i32, 0);
  value = static_cast<uint32_t>(sent[0]) | uint64_t{static_cast<uint32_t>(sent[1])} << 32;
  mask = static_cast<uint32_t>(sent[2]);
  std::string problem = comm.rank() == 0 ? "" : read_check_files(dirs, mask, value);
  const std::vector<int32_t> digests = gather_words(comm, {static_cast<int32_t>(data_digest(config))});
  if (problem.empty() && digests[static_cast<size_t>(comm.rank())] != digests[0])
    problem =
        "--data " + config.data +
        ": this rank sees other shards than rank 0 (names, sizes or first bytes differ): a job across hosts "
        "needs its --data on a file system every host shares";
  comm.barrier();  // every rank has read the check files
  if (comm.rank() == 0) remove_check_files(dirs, mask, value);
  if (!problem.empty()) fail_data(problem);
}

}  // namespace mt
