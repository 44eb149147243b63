// The safetensors format, read and written by us: 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}, then the raw bytes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace mt {

struct TensorEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
  int64_t numel() const;
  uint64_t bytes() const { return end - begin; }
};

// Validates the whole header at open: length within the file, JSON well-formed, known dtypes, offsets inside
// the data section, sizes that match dtype x shape, no overlaps. Every failure is a data error naming the
// file.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorEntry>& tensors() const { return tensors_; }  // in data-section order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorEntry* find(const std::string& name) const;  // null when absent

  // Reads one tensor's bytes into dst, which must hold exactly entry.end - entry.begin bytes.
  void read(const TensorEntry& entry, void* dst) const;
  // Reads bytes [offset, offset + bytes) of one tensor's data into dst (a data error if outside it).
  void read_part(const TensorEntry& entry, uint64_t offset, uint64_t bytes, void* dst) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  std::vector<TensorEntry> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Streams tensors to a temporary file one by one (no copy of the whole model in memory), then fsyncs and
// renames it into place on finish(): the destination is either the old file or the complete new one.
class SafetensorsWriter {
 public:
  struct Item {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  // The header needs every name and shape up front; data then follows in the same order.
  SafetensorsWriter(const std::string& path, const std::vector<Item>& items,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();  // removes the temporary file if finish() was not reached
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Appends the next tensor's bytes (items in order; the byte count must match dtype x shape).
  void write_next(const void* data, uint64_t bytes);
  // Appends the next bytes of the current tensor, which is complete once all its bytes are written: a tensor
  // can be streamed in pieces.
  void write_part(const void* data, uint64_t bytes);
  void finish();
  // The whole file as written so far (header included): its size and CRC-32C, for a manifest.
  uint64_t bytes_written() const { return bytes_written_; }
  uint32_t crc32c() const { return crc_; }

 private:
  void discard();  // closes and removes the temporary file
  void append(const void* data, uint64_t bytes, const std::string& what);  // writes and checksums

  std::string path_;
  std::string tmp_path_;
  int fd_ = -1;
  std::vector<Item> items_;
  size_t next_ = 0;
  uint64_t written_ = 0;  // bytes of items_[next_] written so far
  bool finished_ = false;
  uint64_t bytes_written_ = 0;
  uint32_t crc_ = 0;
};

// Where a safetensors file puts everything, known before any byte is written (so that several writers can
// each fill their own part of one file): the header (length field, JSON, padding) and each item's offset.
struct SafetensorsLayout {
  std::string header;                   // the file's first bytes
  std::vector<uint64_t> tensor_offset;  // per item, from the start of the file
  uint64_t file_size = 0;
};
// Data errors name `path` for duplicate names or impossible shapes.
SafetensorsLayout safetensors_layout(const std::string& path,
                                     const std::vector<SafetensorsWriter::Item>& items,
                                     const std::map<std::string, std::string>& metadata = {});

}  // namespace mt
