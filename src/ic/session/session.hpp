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

#include "ic/wire/frame_buffer.hpp"

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
    // A buffer of n bytes for the next frame to retain (recycled from acked ones).
    FrameBuffer take_buffer(size_t n) { return spare_.take(n); }
    // Keep an encoded frame (header + payload) until acked.
    void retain(uint32_t seq, FrameBuffer frame);
    // Peer acked everything up to `ack`; returns how many frames were freed.
    size_t on_ack(uint32_t ack);
    // Frames the peer has not received, in order, given what it last received.
    // Drops the ones it has. The caller sends them again.
    std::vector<const FrameBuffer*> resend_after(uint32_t peer_last_received);
    // Retained frames with a sequence number after `seq`, in order; acks nothing.
    struct Held {
        uint32_t seq;
        const FrameBuffer* frame;
    };
    std::vector<Held> frames_after(uint32_t seq) const;
    // Every retained frame, to rewrite in place (same length): the engine
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
        FrameBuffer frame;
    };
    Limits limits_;
    uint32_t next_seq_ = 1;
    std::deque<Retained> unacked_;
    size_t unacked_bytes_ = 0;
    uint32_t last_received_ = 0;
    uint32_t last_ack_sent_ = 0;
    FramePool spare_;  // acked frames' buffers
};

}  // namespace pgrac::ic
