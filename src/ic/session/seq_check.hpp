// Exactly-once probe: a requester numbers the messages of a stream 1, 2, 3...;
// the receiver records the highest number applied per (source node, stream)
// and classifies each arrival. A duplicate or an out-of-order arrival means
// the session layer broke its promise. Backs pgrac_ic_seq_rpc(), which the
// failure tests drive while instances are killed, stopped and restarted.
#pragma once

#include <cstdint>

namespace pgrac::ic {

inline constexpr int kSeqStreams = 16;

enum class SeqOutcome : uint8_t {
    Applied = 0,    // seq is the next one, or later (earlier ones failed or never arrived)
    Duplicate = 1,  // seq was already applied
    Reordered = 2,  // seq is below the highest applied but was never applied itself
};
const char* seq_outcome_name(SeqOutcome o);  // "applied", "duplicate", "reordered"

// Applies seq to the stream whose state is *last (highest seq applied, shared
// memory; updated atomically). seq 0 is a query: it changes nothing and reports
// Applied.
SeqOutcome seq_apply(uint64_t* last, uint64_t seq);

}  // namespace pgrac::ic
