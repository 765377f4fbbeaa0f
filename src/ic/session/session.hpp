// Per-peer session: reliable, ordered, exactly-once delivery across reconnects.
//
// The sender numbers every Message frame (seq 1, 2, ...; 32-bit, compared with
// serial-number arithmetic) and keeps each encoded frame until the peer's
// cumulative ack covers it. After a reconnect the handshake tells the sender
// what the peer last received; the sender drops what is covered and resends
// the rest in order. The receiver delivers seq == last_received + 1, drops
// anything at or below last_received as a duplicate, and treats a gap as a
// protocol error (a stream transport never reorders). A peer that comes back
// with a new incarnation resets the session.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "ic/wire/kept_frame.hpp"

namespace pgrac::ic {

// a is after b in serial-number order (RFC 1982, 32-bit).
inline bool seq_after(uint32_t a, uint32_t b) {
    return static_cast<int32_t>(a - b) > 0;
}

class Session {
  public:
    struct Limits {
        size_t max_unacked_bytes = 64 << 20;
        size_t max_unacked_msgs = 65536;
    };
    explicit Session(Limits limits);
    Session() : Session(Limits{}) {}

    // ---- sender
    // True when another frame of `bytes` may be retained without passing the limits.
    bool can_retain(size_t bytes) const;
    // Sequence number for the next Message frame.
    uint32_t next_seq();
    // A frame of n bytes, with room for `room`, for the next frame to retain
    // (recycled from acked ones).
    KeptFrameRef take_frame(size_t n, size_t room) { return spare_.take(n, room); }
    // Keep an encoded frame (header + payload) until acked. It counts in
    // unacked_bytes() at its clear size, whatever sealing does to it later.
    void retain(uint32_t seq, KeptFrameRef frame);
    // Peer acked everything up to `ack`; returns how many frames were freed.
    size_t on_ack(uint32_t ack);
    // Frames the peer has not received, in order, given what it last received.
    // Drops the ones it has. The caller sends them again.
    std::vector<const KeptFrame*> resend_after(uint32_t peer_last_received);
    // Retained frames with a sequence number after `seq`, in order; acks
    // nothing. Each points at the session's reference, which the caller may
    // replace (unshare() before changing a frame in place).
    struct Held {
        uint32_t seq;
        KeptFrameRef* frame;
    };
    std::vector<Held> frames_after(uint32_t seq);
    // Every retained frame, to rewrite in place (unshare() first): the engine
    // voids RPC requests whose caller was told they failed.
    template <typename Fn>
    void for_each_retained(Fn&& fn) {
        for (Retained& r : unacked_) fn(r.seq, r.frame);
    }
    size_t unacked_msgs() const { return unacked_.size(); }
    size_t unacked_bytes() const { return unacked_bytes_; }
    uint32_t last_sent() const { return next_seq_ - 1; }

    // ---- receiver
    enum class Receive { Deliver, Duplicate, Gap };
    Receive on_receive(uint32_t seq);
    uint32_t last_received() const { return last_received_; }
    // True when we received frames the peer has not seen acked yet.
    bool ack_due() const { return last_received_ != last_ack_sent_; }
    void ack_sent(uint32_t ack) { last_ack_sent_ = ack; }

    // New peer incarnation: forget everything in both directions.
    // Returns the number of unacked frames that were dropped.
    size_t reset();

  private:
    friend struct SessionTestAccess;  // unit tests start near 2^32 to cover wraparound

    struct Retained {
        uint32_t seq;
        KeptFrameRef frame;
        size_t bytes;  // counted in unacked_bytes_
    };
    Limits limits_;
    uint32_t next_seq_ = 1;
    std::deque<Retained> unacked_;
    size_t unacked_bytes_ = 0;
    uint32_t last_received_ = 0;
    uint32_t last_ack_sent_ = 0;
    KeptFramePool spare_;  // acked frames
};

}  // namespace pgrac::ic
