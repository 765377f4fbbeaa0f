#include "ic/session/seq_check.hpp"

#include "ic/base/atomics.hpp"

namespace pgrac::ic {

const char* seq_outcome_name(SeqOutcome o) {
    switch (o) {
        case SeqOutcome::Applied:
            return "applied";
        case SeqOutcome::Duplicate:
            return "duplicate";
        case SeqOutcome::Reordered:
            return "reordered";
    }
    return "unknown";
}

SeqOutcome seq_apply(uint64_t* last, uint64_t seq) {
    if (seq == 0) return SeqOutcome::Applied;
    uint64_t cur = load_acquire(last);
    while (seq > cur) {
        if (compare_exchange(last, &cur, seq)) return SeqOutcome::Applied;
    }
    // A requester sends one stream strictly in order and never reuses a
    // number, so anything at or below the mark arrived twice or out of order.
    return seq == cur ? SeqOutcome::Duplicate : SeqOutcome::Reordered;
}

}  // namespace pgrac::ic
