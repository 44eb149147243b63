// Added tokens: a byte trie, searched at each place for the longest token there.
#include "data/tokenizer_json/added_tokens.h"

#include <algorithm>

#include "data/tokenizer_json/bpe_model.h"

namespace mt::tokjson {

AddedTokens::AddedTokens(const Node& list, BpeModel* model) {
  if (list.json().is_null()) return;
  if (!list.json().is_array()) list.fail("expected a list");
  // Added tokens follow the model's ids or take some of them (Llama-2's <unk>, <s>, </s>).
  const int64_t limit = model->size() + static_cast<int64_t>(list.size());
  for (size_t k = 0; k < list.size(); ++k) {
    const Node token = list.at(k);
    token.only({"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"});
    const std::string content = token.string("content");
    const int64_t id = token.integer_or("id", -1);
    if (id < 0 || id >= limit) token.fail("expected an \"id\" in [0, " + std::to_string(limit) + ")");
    if (content.empty()) token.fail("content is empty");
    // The four model families mark every added token plain: matched as written, nothing stripped.
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
      if (token.boolean_or(flag, false)) token.unsupported(flag);
    }
    // Unset, "normalized" is true for a token that is not special (the reference's default).
    if (token.boolean_or("normalized", !token.boolean_or("special", false))) {
      if (token.has("normalized")) token.unsupported("normalized");
      token.fail("normalized (unset, so true for a token that is not special) is not supported");
    }
    model->add_token(content, static_cast<int32_t>(id));
    insert(content, static_cast<int32_t>(id));
    ids_.push_back(static_cast<int32_t>(id));
  }
  std::sort(ids_.begin(), ids_.end());
}

void AddedTokens::insert(const std::string& content, int32_t id) {
  int32_t node = 0;
  for (char c : content) {
    const uint8_t byte = static_cast<uint8_t>(c);
    int32_t next = child(node, byte);
    if (next < 0) {
      next = static_cast<int32_t>(trie_.size());
      trie_[node].children.emplace_back(byte, next);
      trie_.emplace_back();
    }
    node = next;
  }
  trie_[node].token = id;
  starts_[static_cast<uint8_t>(content[0])] = true;
}

int32_t AddedTokens::child(int32_t node, uint8_t byte) const {
  for (const auto& [b, next] : trie_[node].children) {
    if (b == byte) return next;
  }
  return -1;
}

std::vector<Section> AddedTokens::split(std::string_view text) const {
  std::vector<Section> sections;
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    size_t match_end = 0;
    int32_t match = -1;
    if (starts_[static_cast<uint8_t>(text[i])]) {
      for (int32_t node = 0, j = static_cast<int32_t>(i); j < static_cast<int32_t>(text.size());) {
        node = child(node, static_cast<uint8_t>(text[j++]));
        if (node < 0) break;
        if (trie_[node].token >= 0) match = trie_[node].token, match_end = j;
      }
    }
    if (match < 0) {
      ++i;
      continue;
    }
    if (i > start) sections.push_back({text.substr(start, i - start), -1});
    sections.push_back({text.substr(i, match_end - i), match});
    i = start = match_end;
  }
  if (start < text.size()) sections.push_back({text.substr(start), -1});
  return sections;
}

bool AddedTokens::is_added(int32_t id) const {
  return std::binary_search(ids_.begin(), ids_.end(), id);
}

}  // namespace mt::tokjson
