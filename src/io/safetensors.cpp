#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/crc32c.h"
#include "core/error.h"

namespace mt {
namespace {

// A real header is a few hundred bytes per tensor; anything this large is a corrupt length field.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

std::optional<DType> dtype_from_name(std::string_view name) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::u16, DType::u8, DType::f8_e4m3}) {
    if (dtype_name(t) == name) return t;
  }
  return std::nullopt;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Bytes of a tensor with this dtype and shape; nullopt on a negative dimension or 64-bit overflow.
std::optional<uint64_t> tensor_bytes(DType dtype, const std::vector<int64_t>& shape) {
  uint64_t bytes = dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) return std::nullopt;
  }
  return bytes;
}

// Both return 0 or the errno of the failure; pread_all returns -1 at an early end of file.
int pread_all(int fd, void* dst, uint64_t bytes, uint64_t offset) {
  auto* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t n = pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return -1;
    p += n, bytes -= n, offset += n;
  }
  return 0;
}

int write_all(int fd, const void* src, uint64_t bytes) {
  const auto* p = static_cast<const char*>(src);
  while (bytes > 0) {
    const ssize_t n = write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    p += n, bytes -= n;
  }
  return 0;
}

std::string io_error(int err) {
  return err < 0 ? "unexpected end of file" : std::strerror(err);
}

std::string quoted(const std::string& name) {
  return "tensor \"" + name + "\"";
}

// Parses one header entry; `where` prefixes every error ("file: tensor "x"").
TensorEntry parse_entry(const std::string& where, const std::string& name, const nlohmann::json& j) {
  if (!j.is_object()) fail_data(where + ": entry is not an object");
  const auto dtype_it = j.find("dtype"), shape_it = j.find("shape"), offsets_it = j.find("data_offsets");
  if (dtype_it == j.end() || !dtype_it->is_string()) fail_data(where + ": \"dtype\" must be a string");
  if (shape_it == j.end() || !shape_it->is_array())
    fail_data(where + ": \"shape\" must be an array of integers");
  if (offsets_it == j.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
    fail_data(where + ": \"data_offsets\" must be two non-negative integers");
  }
  TensorEntry e;
  e.name = name;
  const auto dtype = dtype_from_name(dtype_it->get<std::string>());
  if (!dtype) fail_data(where + ": unknown dtype \"" + dtype_it->get<std::string>() + "\"");
  e.dtype = *dtype;
  for (const auto& d : *shape_it) {
    if (!d.is_number_integer()) fail_data(where + ": \"shape\" must be an array of integers");
    const bool in_range = d.is_number_unsigned() ? d.get<uint64_t>() <= std::numeric_limits<int64_t>::max()
                                                 : d.get<int64_t>() >= 0;
    if (!in_range) fail_data(where + ": dimension " + d.dump() + " is negative or too large");
    e.shape.push_back(d.get<int64_t>());
  }
  e.begin = (*offsets_it)[0].get<uint64_t>();
  e.end = (*offsets_it)[1].get<uint64_t>();
  return e;
}

// The entry `name` of the header at `where`, its offsets inside the data section of `data_size` bytes and
// spanning exactly its dtype and shape.
TensorEntry checked_entry(const std::string& where, const std::string& name, const nlohmann::json& value,
                          uint64_t data_size) {
  TensorEntry e = parse_entry(where, name, value);
  if (e.begin > e.end) {
    fail_data(where + ": data_offsets begin " + std::to_string(e.begin) + " > end " + std::to_string(e.end));
  }
  if (e.end > data_size) {
    fail_data(where + ": data_offsets end " + std::to_string(e.end) + " beyond the data section of " +
              std::to_string(data_size) + " bytes");
  }
  const auto expected = tensor_bytes(e.dtype, e.shape);
  if (!expected) fail_data(where + ": shape " + shape_str(e.shape) + " is too large");
  if (*expected != e.bytes()) {
    fail_data(where + ": data_offsets span " + std::to_string(e.bytes()) + " bytes but " +
              std::string(dtype_name(e.dtype)) + " " + shape_str(e.shape) + " needs " +
              std::to_string(*expected));
  }
  return e;
}

// Sorted by begin, any overlap shows between neighbours; empty tensors occupy no bytes.
void check_no_overlap(const std::string& path, const std::vector<TensorEntry>& sorted) {
  const TensorEntry* prev = nullptr;
  for (const TensorEntry& e : sorted) {
    if (e.bytes() == 0) continue;
    if (prev && e.begin < prev->end)
      fail_data(path + ": " + quoted(prev->name) + " and " + quoted(e.name) + " overlap in the data section");
    prev = &e;
  }
}

}  // namespace

int64_t TensorEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail_data(path + ": cannot open: " + std::strerror(errno));
  // The constructor body may throw, and then no destructor closes the file.
  try {
    struct stat st;
    if (fstat(fd_, &st) != 0) fail_data(path + ": cannot stat: " + std::strerror(errno));
    const uint64_t file_size = st.st_size;
    if (file_size < 8) {
      fail_data(path + ": file size " + std::to_string(file_size) +
                " is below the 8-byte header length field");
    }
    unsigned char len_bytes[8];
    if (int err = pread_all(fd_, len_bytes, 8, 0))
      fail_data(path + ": reading header length: " + io_error(err));
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = header_len << 8 | len_bytes[i];
    if (header_len > kMaxHeaderBytes) {
      fail_data(path + ": header length " + std::to_string(header_len) + " exceeds the limit of " +
                std::to_string(kMaxHeaderBytes));
    }
    if (header_len > file_size - 8) {
      fail_data(path + ": header length " + std::to_string(header_len) + " exceeds file size " +
                std::to_string(file_size));
    }
    std::string text(header_len, '\0');
    if (int err = pread_all(fd_, text.data(), header_len, 8))
      fail_data(path + ": reading header: " + io_error(err));
    data_start_ = 8 + header_len;
    const uint64_t data_size = file_size - data_start_;

    nlohmann::json header;
    try {
      header = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail_data(path + ": header is not valid JSON: " + e.what());
    }
    if (!header.is_object()) fail_data(path + ": header is not a JSON object");
    for (const auto& [name, value] : header.items()) {
      if (name == "__metadata__") {
        if (!value.is_object()) fail_data(path + ": __metadata__ is not an object");
        for (const auto& [key, v] : value.items()) {
          if (!v.is_string()) fail_data(path + ": __metadata__ value of \"" + key + "\" is not a string");
          metadata_[key] = v.get<std::string>();
        }
        continue;
      }
      tensors_.push_back(checked_entry(path + ": " + quoted(name), name, value, data_size));
    }
    std::sort(tensors_.begin(), tensors_.end(), [](const TensorEntry& a, const TensorEntry& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    check_no_overlap(path, tensors_);
  } catch (...) {
    close(fd_);
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  close(fd_);
}

const TensorEntry* SafetensorsReader::find(const std::string& name) const {
  for (const TensorEntry& e : tensors_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

void SafetensorsReader::read(const TensorEntry& entry, void* dst) const {
  read_part(entry, 0, entry.bytes(), dst);
}

void SafetensorsReader::read_part(const TensorEntry& entry, uint64_t offset, uint64_t bytes,
                                  void* dst) const {
  if (offset > entry.bytes() || bytes > entry.bytes() - offset) {
    fail_data(path_ + ": reading bytes [" + std::to_string(offset) + ", +" + std::to_string(bytes) + ") of " +
              quoted(entry.name) + ", which holds " + std::to_string(entry.bytes()));
  }
  if (int err = pread_all(fd_, dst, bytes, data_start_ + entry.begin + offset)) {
    fail_data(path_ + ": reading " + quoted(entry.name) + ": " + io_error(err));
  }
}

SafetensorsLayout safetensors_layout(const std::string& path,
                                     const std::vector<SafetensorsWriter::Item>& items,
                                     const std::map<std::string, std::string>& metadata) {
  // Keys in data order, so the header reads like the file's layout.
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<uint64_t> data_offsets;
  for (const SafetensorsWriter::Item& item : items) {
    const std::string where = path + ": " + quoted(item.name);
    if (item.name == "__metadata__" || header.contains(item.name))
      fail_data(where + ": duplicate or reserved name");
    const auto bytes = tensor_bytes(item.dtype, item.shape);
    if (!bytes) fail_data(where + ": shape " + shape_str(item.shape) + " is negative or too large");
    header[item.name] = {{"dtype", dtype_name(item.dtype)},
                         {"shape", item.shape},
                         {"data_offsets", {offset, offset + *bytes}}};
    data_offsets.push_back(offset);
    offset += *bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    fail_data(path + ": tensor names and metadata must be valid UTF-8: " + e.what());
  }
  // Pad with spaces so the data section starts 8-byte aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');
  SafetensorsLayout layout;
  for (int i = 0; i < 8; ++i) layout.header += static_cast<char>(text.size() >> (8 * i));
  layout.header += text;
  for (uint64_t o : data_offsets) layout.tensor_offset.push_back(layout.header.size() + o);
  layout.file_size = layout.header.size() + offset;
  return layout;
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, const std::vector<Item>& items,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), tmp_path_(path + ".tmp." + std::to_string(getpid())), items_(items) {
  const SafetensorsLayout layout = safetensors_layout(path, items, metadata);
  fd_ = open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail_data(path + ": cannot create " + tmp_path_ + ": " + std::strerror(errno));
  try {
    append(layout.header.data(), layout.header.size(), "header");
  } catch (...) {
    discard();
    throw;
  }
}

void SafetensorsWriter::append(const void* data, uint64_t bytes, const std::string& what) {
  if (int err = write_all(fd_, data, bytes)) {
    fail_data(path_ + ": writing " + what + ": " + std::strerror(err));
  }
  crc_ = mt::crc32c(data, bytes, crc_);
  bytes_written_ += bytes;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (!finished_) discard();
}

void SafetensorsWriter::discard() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  unlink(tmp_path_.c_str());
}

void SafetensorsWriter::write_next(const void* data, uint64_t bytes) {
  if (!finished_ && next_ < items_.size()) {
    const Item& item = items_[next_];
    const uint64_t expected = *tensor_bytes(item.dtype, item.shape);
    if (written_ != 0 || bytes != expected)
      fail_data(path_ + ": " + quoted(item.name) + " is " + std::string(dtype_name(item.dtype)) + " " +
                shape_str(item.shape) + " = " + std::to_string(expected) + " bytes, got " +
                std::to_string(bytes));
  }
  write_part(data, bytes);
}

void SafetensorsWriter::write_part(const void* data, uint64_t bytes) {
  if (finished_ || next_ == items_.size()) {
    fail_data(path_ + ": write_next after all " + std::to_string(items_.size()) + " tensors were written");
  }
  const Item& item = items_[next_];
  const uint64_t expected = *tensor_bytes(item.dtype, item.shape);
  if (bytes > expected - written_) {
    fail_data(path_ + ": " + quoted(item.name) + " is " + std::to_string(expected) + " bytes, " +
              std::to_string(written_) + " written, got " + std::to_string(bytes) + " more");
  }
  append(data, bytes, quoted(item.name));
  written_ += bytes;
  if (written_ == expected) {
    ++next_;
    written_ = 0;
  }
}

void SafetensorsWriter::finish() {
  if (finished_ || next_ != items_.size()) {
    fail_data(path_ + ": finish after " + std::to_string(next_) + " of " + std::to_string(items_.size()) +
              " tensors");
  }
  // Data on disk before the rename, and the rename on disk before we report success.
  if (fsync(fd_) != 0) fail_data(path_ + ": fsync: " + std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (close(fd) != 0) fail_data(path_ + ": close: " + std::strerror(errno));
  if (rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    fail_data(path_ + ": rename from " + tmp_path_ + ": " + std::strerror(errno));
  }
  finished_ = true;
  std::string dir = std::filesystem::path(path_).parent_path();
  if (dir.empty()) dir = ".";
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) fail_data(path_ + ": opening directory " + dir + ": " + std::strerror(errno));
  const int rc = fsync(dir_fd);
  const int fsync_errno = errno;
  close(dir_fd);
  if (rc != 0) fail_data(path_ + ": fsync of directory " + dir + ": " + std::strerror(fsync_errno));
}

}  // namespace mt
