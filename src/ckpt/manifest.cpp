#include "ckpt/manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "ckpt/layout.h"
#include "core/crc32c.h"
#include "core/error.h"

namespace mt::ckpt {

namespace {

constexpr int kFormatVersion = 1;

}  // namespace

ManifestFile checksum_file(const std::string& path, const std::string& name, std::span<char> buffer) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_data(path + ": cannot open: " + std::strerror(errno));
  ManifestFile file{name, 0, 0};
  while (true) {
    const ssize_t n = read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      fail_data(path + ": cannot read: " + std::strerror(err));
    }
    if (n == 0) break;
    file.crc32c = crc32c(buffer.data(), static_cast<size_t>(n), file.crc32c);
    file.bytes += static_cast<uint64_t>(n);
  }
  close(fd);
  return file;
}

ManifestFile write_synced(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_data(path + ": cannot create: " + std::strerror(errno));
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      fail_data(path + ": write failed: " + std::strerror(err));
    }
    p += n, left -= static_cast<size_t>(n);
  }
  const bool synced = fsync(fd) == 0;
  const int err = errno;
  close(fd);
  if (!synced) fail_data(path + ": fsync: " + std::strerror(err));
  return {name, text.size(), crc32c(text.data(), text.size())};
}

void sync_directory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail_data(dir + ": cannot open directory: " + std::strerror(errno));
  const bool synced = fsync(fd) == 0;
  const int err = errno;
  close(fd);
  if (!synced) fail_data(dir + ": fsync of directory: " + std::strerror(err));
}

void write_manifest(const std::string& dir, const Manifest& manifest) {
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const ManifestFile& f : manifest.files)
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"crc32c", crc32c_hex(f.crc32c)}});
  const nlohmann::ordered_json j = {
      {"format", "memtrain-checkpoint"}, {"version", kFormatVersion}, {"step", manifest.step},
      {"world", manifest.world},         {"checksum", "crc32c"},      {"files", files}};
  write_synced(dir, kManifestFile, j.dump(2) + "\n");
}

Manifest verify_checkpoint(const std::string& dir, std::span<char> buffer) {
  const std::string path = dir + "/" + kManifestFile;
  std::ifstream in(path);
  if (!in) fail_data(path + ": missing: a partial checkpoint (the manifest is written last)");
  Manifest manifest;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    if (j.at("format") != "memtrain-checkpoint" || j.at("version") != kFormatVersion)
      fail_data(path + ": not a memtrain checkpoint manifest of version " + std::to_string(kFormatVersion));
    manifest.step = j.at("step").get<int64_t>();
    manifest.world = j.at("world").get<int>();
    for (const nlohmann::json& f : j.at("files")) {
      const std::string crc = f.at("crc32c").get<std::string>();
      manifest.files.push_back({f.at("name").get<std::string>(), f.at("bytes").get<uint64_t>(),
                                static_cast<uint32_t>(std::stoul(crc, nullptr, 16))});
    }
  } catch (const nlohmann::json::exception& e) {
    fail_data(path + ": malformed: " + e.what());
  } catch (const std::logic_error& e) {  // stoul
    fail_data(path + ": malformed checksum: " + e.what());
  }
  if (manifest.world < 1) fail_data(path + ": world must be positive");
  std::set<std::string> listed;
  for (const ManifestFile& f : manifest.files) {
    if (f.name.find('/') != std::string::npos || f.name.starts_with("."))
      fail_data(path + ": file name " + f.name + " leaves the checkpoint directory");
    listed.insert(f.name);
  }
  std::vector<std::string> needed = {kStateFile};
  for (int r = 0; r < manifest.world; ++r) needed.push_back(rank_file_name(r));
  for (const std::string& name : needed)
    if (!listed.contains(name)) fail_data(path + ": does not list " + name);
  for (const ManifestFile& f : manifest.files) {
    const std::string file = dir + "/" + f.name;
    if (!std::filesystem::exists(file)) fail_data(file + ": missing (listed in " + path + ")");
    const ManifestFile found = checksum_file(file, f.name, buffer);
    if (found.bytes != f.bytes)
      fail_data(file + ": " + std::to_string(found.bytes) + " bytes, " + path + " lists " +
                std::to_string(f.bytes) + " (truncated or overwritten)");
    if (found.crc32c != f.crc32c)
      fail_data(file + ": CRC-32C " + crc32c_hex(found.crc32c) + " differs from " + crc32c_hex(f.crc32c) +
                " in " + path + " (corrupt, or a manifest from another checkpoint)");
  }
  return manifest;
}

}  // namespace mt::ckpt
