// The added tokens of a tokenizer.json (special or not): found in the text before anything else runs, the
// longest at the leftmost place first, and never split. The reference's splitter does exactly this.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer_json/node.h"

namespace mt::tokjson {

class BpeModel;

struct Section {
  std::string_view text;
  int32_t token;  // the added token this section is, or -1 for text the model encodes
};

class AddedTokens {
 public:
  // Reads "added_tokens" and adds each to the model's vocabulary.
  AddedTokens(const Node& list, BpeModel* model);
  std::vector<Section> split(std::string_view text) const;
  bool is_added(int32_t id) const;

 private:
  struct TrieNode {
    std::vector<std::pair<uint8_t, int32_t>> children;
    int32_t token = -1;
  };
  void insert(const std::string& content, int32_t id);
  int32_t child(int32_t node, uint8_t byte) const;

  std::vector<TrieNode> trie_{1};
  std::vector<bool> starts_{std::vector<bool>(256, false)};  // bytes some token starts with
  std::vector<int32_t> ids_;
};

}  // namespace mt::tokjson
