// The BPE model of a tokenizer.json: a vocabulary (token -> id), the ranked merges, and what happens to a
// character the vocabulary lacks (its bytes as <0xNN> tokens with byte_fallback, else the unknown token).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/tokenizer_json/node.h"

namespace mt::tokjson {

class BpeModel {
 public:
  explicit BpeModel(const Node& model);

  // Appends the ids of one pre-tokenized piece (valid UTF-8).
  void encode(std::string_view piece, std::vector<int32_t>* ids) const;
  // Added tokens join the vocabulary (ignore_merges sees them, decoding spells them).
  void add_token(const std::string& content, int32_t id);

  int32_t id_of(const std::string& token) const;  // -1 when absent
  int32_t unknown() const { return unk_; }
  bool fuse_unknown() const { return fuse_unk_; }
  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }  // highest id + 1
  // The token's spelling; nullptr for an id no token has.
  const std::string* token(int32_t id) const;

 private:
  struct Merge {
    int32_t rank, merged;
  };
  static uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | uint32_t(b); }
  void read_vocab(const Node& vocab);
  void read_merges(const Node& merges);
  void merge_symbols(std::string_view piece, std::vector<int32_t>* ids) const;

  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::string> tokens_;
  std::vector<bool> has_token_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left, right) -> rank and merged token
  std::array<int32_t, 256> byte_tokens_{};      // <0xNN>, -1 when absent
  int32_t unk_ = -1;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;

  static constexpr size_t kCacheEntries = 1 << 16, kCachedLength = 256;  // cleared when full
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace mt::tokjson
