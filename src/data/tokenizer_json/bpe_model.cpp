// BPE as the reference runs it: a piece starts as one symbol per character, and the adjacent pair with the
// best-ranked merge (the leftmost among equals) is merged, one at a time, until no ranked pair is left.
// Pieces repeat a lot in real text, so their encodings are cached.
#include "data/tokenizer_json/bpe_model.h"

#include <cstdio>
#include <queue>

#include "data/utf8.h"

namespace mt::tokjson {

BpeModel::BpeModel(const Node& model) {
  model.only({"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
              "byte_fallback", "ignore_merges", "vocab", "merges"});
  if (model.string("type") != "BPE") model.unsupported("type");
  if (model.has("dropout")) model.unsupported("dropout");
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!model.string_or(affix, "").empty()) model.unsupported(affix);
  }
  byte_fallback_ = model.boolean_or("byte_fallback", false);
  fuse_unk_ = model.boolean_or("fuse_unk", false);
  ignore_merges_ = model.boolean_or("ignore_merges", false);
  read_vocab(model.at("vocab"));
  read_merges(model.at("merges"));
  if (model.has("unk_token")) {
    unk_ = id_of(model.string("unk_token"));
    if (unk_ < 0) model.at("unk_token").fail("is not in model.vocab");
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    byte_tokens_[b] = id_of(name);
  }
}

void BpeModel::read_vocab(const Node& vocab) {
  if (!vocab.json().is_object()) vocab.fail("expected an object of token -> id");
  for (const auto& [token, id] : vocab.json().items()) {
    // Ids are 0..n-1 for n tokens (so a vocabulary's size is what it holds, and memory what its file says).
    const int64_t n = static_cast<int64_t>(vocab.size());
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= n) {
      vocab.fail("token " + nlohmann::json(token).dump() + " has id " + id.dump() +
                 ", expected an id in [0, " + std::to_string(n) + ")");
    }
    add_token(token, id.get<int32_t>());
  }
}

void BpeModel::add_token(const std::string& content, int32_t id) {
  if (static_cast<size_t>(id) >= tokens_.size()) tokens_.resize(id + 1), has_token_.resize(id + 1);
  tokens_[id] = content, has_token_[id] = true;
  ids_[content] = id;
}

void BpeModel::read_merges(const Node& merges) {
  if (!merges.json().is_array()) merges.fail("expected a list");
  for (size_t k = 0; k < merges.size(); ++k) {
    const Node merge = merges.at(k);
    std::string a, b;
    if (merge.json().is_string()) {  // "a b"
      const std::string text = merge.json().get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        merge.fail("expected two tokens separated by one space, found " + merge.json().dump());
      }
      a = text.substr(0, space), b = text.substr(space + 1);
    } else if (merge.json().is_array() && merge.size() == 2 && merge.json()[0].is_string() &&
               merge.json()[1].is_string()) {  // ["a", "b"]
      a = merge.json()[0].get<std::string>(), b = merge.json()[1].get<std::string>();
    } else {
      merge.fail("expected \"a b\" or [\"a\", \"b\"], found " + merge.json().dump());
    }
    const int32_t ia = id_of(a), ib = id_of(b), iab = id_of(a + b);
    if (ia < 0 || ib < 0 || iab < 0)
      merge.fail(merge.json().dump() + " uses or makes a token missing from model.vocab");
    merges_.insert_or_assign(pair_key(ia, ib), Merge{static_cast<int32_t>(k), iab});
  }
}

int32_t BpeModel::id_of(const std::string& token) const {
  const auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

const std::string* BpeModel::token(int32_t id) const {
  return id >= 0 && id < size() && has_token_[id] ? &tokens_[id] : nullptr;
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>* ids) const {
  if (piece.empty()) return;
  const bool cached = piece.size() < kCachedLength;
  if (cached) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto it = cache_.find(std::string(piece));
    if (it != cache_.end()) return ids->insert(ids->end(), it->second.begin(), it->second.end()), void();
  }
  std::vector<int32_t> out;
  const int32_t whole = ignore_merges_ ? id_of(std::string(piece)) : -1;
  if (whole >= 0) {
    out.push_back(whole);  // ignore_merges: a piece the vocabulary has is one token
  } else {
    merge_symbols(piece, &out);
  }
  ids->insert(ids->end(), out.begin(), out.end());
  if (!cached) return;
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kCacheEntries) cache_.clear();
  cache_.emplace(piece, std::move(out));
}

void BpeModel::merge_symbols(std::string_view piece, std::vector<int32_t>* out) const {
  struct Symbol {
    int32_t id;  // -1: a character the vocabulary lacks
    size_t begin, end;
    int32_t prev, next;  // neighbours in the list, -1 at the ends
  };
  std::vector<Symbol> sym;
  for (size_t i = 0; i < piece.size();) {
    int32_t cp;
    const size_t len = next_utf8(piece, i, &cp);
    const int32_t n = static_cast<int32_t>(sym.size());
    sym.push_back({id_of(std::string(piece.substr(i, len))), i, i + len, n - 1, n + 1});
    i += len;
  }
  sym.back().next = -1;
  // Candidate merges by (rank, position of the left symbol); a candidate whose symbols have changed since is
  // stale and skipped.
  struct Candidate {
    int32_t rank, left, right, left_id, right_id, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  const auto consider = [&](int32_t left) {
    if (left < 0) return;  // the first symbol has no left neighbour
    const int32_t right = sym[left].next;
    if (right < 0 || sym[left].id < 0 || sym[right].id < 0) return;
    const auto it = merges_.find(pair_key(sym[left].id, sym[right].id));
    if (it != merges_.end())
      queue.push({it->second.rank, left, right, sym[left].id, sym[right].id, it->second.merged});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol &l = sym[c.left], &r = sym[c.right];
    if (l.id != c.left_id || r.id != c.right_id || l.next != c.right) continue;
    l.id = c.merged, l.end = r.end, l.next = r.next;
    r.id = -2;  // gone
    if (l.next >= 0) sym[l.next].prev = c.left;
    consider(l.prev);
    consider(c.left);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    const Symbol& s = sym[i];
    if (s.id >= 0) {
      out->push_back(s.id);
      continue;
    }
    bool all_bytes = byte_fallback_;
    for (size_t k = s.begin; all_bytes && k < s.end; ++k)
      all_bytes = byte_tokens_[static_cast<uint8_t>(piece[k])] >= 0;
    if (all_bytes) {
      for (size_t k = s.begin; k < s.end; ++k) out->push_back(byte_tokens_[static_cast<uint8_t>(piece[k])]);
    } else if (unk_ >= 0) {
      out->push_back(unk_);
    }
  }
}

}  // namespace mt::tokjson
