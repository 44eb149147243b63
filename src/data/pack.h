// `prepare --pack`: instruction records laid whole into sequences of T tokens, several to a sequence, by
// best-fit decreasing (each record, longest first, into the fullest sequence it still fits), the rest of each
// sequence padding. The loss mask marks where each record starts, so that training keeps records apart
// (document-masked attention, positions restarting per record).
#pragma once

#include <cstdint>

#include "data/instruction.h"

namespace mt {

struct PackStats {
  int64_t records = 0, sequences = 0, record_tokens = 0;
  int64_t seq_len = 0;
  int64_t padding() const { return sequences * seq_len - record_tokens; }
  // What one record per sequence would pad.
  int64_t unpacked_padding() const { return records * seq_len - record_tokens; }
};

// Records [first, last) of stream as whole sequences of seq_len tokens, then one padding token (the last
// sequence's last target); padding is pad_token, not counted, a record of its own. A record longer than
// seq_len is a data error naming its line of `source`. Adds to stats.
TokenStream pack_records(const TokenStream& stream, int64_t first, int64_t last, int64_t seq_len,
                         int32_t pad_token, const std::string& source, PackStats& stats);

}  // namespace mt
