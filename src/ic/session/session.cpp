// Per-peer session bookkeeping: sequence numbers, retained frames, acks.
#include "ic/session/session.hpp"

#include <algorithm>
#include <cassert>

namespace pgrac::ic {

namespace {
// Serial-number comparison only orders seqs less than 2^31 apart, so more
// unacked frames than that could never be acked correctly.
constexpr size_t kMaxWindow = (size_t{1} << 31) - 1;
}  // namespace

Session::Session(Limits limits) : limits_(limits) {
    limits_.max_unacked_msgs = std::min(limits_.max_unacked_msgs, kMaxWindow);
}

bool Session::can_retain(size_t bytes) const {
    return unacked_.size() < limits_.max_unacked_msgs &&
           unacked_bytes_ <= limits_.max_unacked_bytes &&
           bytes <= limits_.max_unacked_bytes - unacked_bytes_;
}

uint32_t Session::next_seq() {
    return next_seq_++;
}

void Session::retain(uint32_t seq, KeptFrameRef frame) {
    // Frames are retained in the order next_seq() handed out their numbers.
    assert(seq == last_sent());
    assert(unacked_.empty() || seq == unacked_.back().seq + 1);
    // Counted at its clear size, sealed or not.
    const size_t bytes = frame->bytes.size() - (frame->is_sealed() ? kFrameTagSize : 0);
    unacked_.push_back(Retained{seq, std::move(frame), bytes});
    unacked_bytes_ += bytes;
}

size_t Session::on_ack(uint32_t ack) {
    size_t freed = 0;
    while (!unacked_.empty() && !seq_after(unacked_.front().seq, ack)) {
        unacked_bytes_ -= unacked_.front().bytes;
        spare_.give(std::move(unacked_.front().frame));
        unacked_.pop_front();
        ++freed;
    }
    return freed;
}

std::vector<const KeptFrame*> Session::resend_after(uint32_t peer_last_received) {
    on_ack(peer_last_received);
    std::vector<const KeptFrame*> frames;
    frames.reserve(unacked_.size());
    for (const Retained& r : unacked_) frames.push_back(r.frame.get());
    return frames;
}

std::vector<Session::Held> Session::frames_after(uint32_t seq) {
    std::vector<Held> frames;
    for (Retained& r : unacked_)
        if (seq_after(r.seq, seq)) frames.push_back(Held{r.seq, &r.frame});
    return frames;
}

Session::Receive Session::on_receive(uint32_t seq) {
    if (seq == last_received_ + 1) {
        last_received_ = seq;
        return Receive::Deliver;
    }
    return seq_after(seq, last_received_) ? Receive::Gap : Receive::Duplicate;
}

size_t Session::reset() {
    const size_t dropped = unacked_.size();
    unacked_.clear();
    unacked_bytes_ = 0;
    next_seq_ = 1;
    last_received_ = 0;
    last_ack_sent_ = 0;
    return dropped;
}

}  // namespace pgrac::ic
