// Best-fit decreasing packing of whole records into sequences: a record goes to the sequence with the least
// room that still holds it (a multimap from room left to sequence), or opens a new one. Ties keep file order,
// so a prepare repeats exactly.
#include "data/pack.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "core/error.h"

namespace mt {

TokenStream pack_records(const TokenStream& stream, int64_t first, int64_t last, int64_t seq_len,
                         int32_t pad_token, const std::string& source, PackStats& stats) {
  const auto end_of = [&](int64_t r) {
    return r + 1 < static_cast<int64_t>(stream.record_starts.size())
               ? stream.record_starts[r + 1]
               : static_cast<int64_t>(stream.tokens.size());
  };
  const auto length = [&](int64_t r) { return end_of(r) - stream.record_starts[r]; };
  std::vector<int64_t> order(static_cast<size_t>(last - first));
  std::iota(order.begin(), order.end(), first);
  for (int64_t r : order) {
    if (length(r) > seq_len) {
      fail_data(source + " line " + std::to_string(stream.record_lines[r]) + ": a record of " +
                std::to_string(length(r)) + " tokens, more than --seq-length " + std::to_string(seq_len) +
                " (--pack keeps records whole)");
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return length(a) > length(b); });
  std::multimap<int64_t, size_t> room;  // tokens left -> sequence
  std::vector<std::vector<int64_t>> sequences;
  for (int64_t r : order) {
    const auto fit = room.lower_bound(length(r));
    size_t seq = sequences.size();
    int64_t left = seq_len;
    if (fit == room.end()) {
      sequences.emplace_back();
    } else {
      seq = fit->second, left = fit->first;
      room.erase(fit);
    }
    sequences[seq].push_back(r);
    if (left -= length(r); left > 0) room.emplace(left, seq);
  }
  TokenStream out;
  const auto append_padding = [&](int64_t count) {
    out.record_starts.push_back(static_cast<int64_t>(out.tokens.size()));
    out.record_lines.push_back(0);
    out.tokens.insert(out.tokens.end(), static_cast<size_t>(count), pad_token);
    out.loss_mask.insert(out.loss_mask.end(), static_cast<size_t>(count), uint8_t{0});
  };
  for (const std::vector<int64_t>& records : sequences) {
    int64_t used = 0;
    for (int64_t r : records) {
      out.record_starts.push_back(static_cast<int64_t>(out.tokens.size()));
      out.record_lines.push_back(stream.record_lines[r]);
      out.tokens.insert(out.tokens.end(), stream.tokens.begin() + stream.record_starts[r],
                        stream.tokens.begin() + end_of(r));
      out.loss_mask.insert(out.loss_mask.end(), stream.loss_mask.begin() + stream.record_starts[r],
                           stream.loss_mask.begin() + end_of(r));
      stats.record_tokens += length(r);
      used += length(r);
    }
    if (used < seq_len) append_padding(seq_len - used);
  }
  append_padding(1);  // the last sequence's last target
  stats.records += last - first;
  stats.sequences += static_cast<int64_t>(sequences.size());
  stats.seq_len = seq_len;
  return out;
}

}  // namespace mt
