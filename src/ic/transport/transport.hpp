// Transport is the interface a tier provides to the engine, owned by the core:
// the tiers (src/tiers) implement it, the core never includes them. A transport
// moves whole frames between this instance and its peers; it knows nothing of
// sessions, handshakes or message types (those are tier-independent, in src/ic).
//
// Single-threaded contract: every call, and every callback into the handler,
// happens on the thread that calls poll(). A transport may use its own I/O
// threads internally, but they never call back directly.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <sys/uio.h>

#include "ic/wire/frame.hpp"

namespace pgrac::ic {

using ConnId = uint64_t;  // never reused within one transport's lifetime

struct TransportCounters {
    uint64_t frames_sent = 0, frames_recv = 0;
    uint64_t bytes_sent = 0, bytes_recv = 0;
    uint64_t send_calls = 0;    // syscalls or work requests posted
    uint64_t cq_overflows = 0;  // verbs only
    uint64_t qp_errors = 0;     // verbs only
    // verbs only, added with the verbs tier
    uint64_t mr_cache_hits = 0, mr_cache_misses = 0;  // mr_cache_hit_rate = hits / (hits + misses)
    uint64_t verbs_sends = 0;                         // send work requests completed successfully
    uint64_t verbs_recvs = 0;                         // receive completions delivered as frames
    uint64_t send_queue_waits = 0;  // frames queued in user space: send queue or slots full
    // tcp only: frames kept for resending (send_kept) that a full socket left
    // queued, the queue holding a reference to them, not a copy
    uint64_t queued_by_reference = 0;
    uint64_t srq_low_events = 0;  // IBV_EVENT_SRQ_LIMIT_REACHED: receives ran low
    uint64_t cq_rebuilds = 0;     // CQ+SRQ recreated after an overflow or error
    // frames the transport sent without copying them: a payload piece read in
    // place from the MR cache, or a frame written into its slot (reserve_frame)
    uint64_t zero_copy_sends = 0;
    uint64_t rdma_writes = 0;    // frames written into a peer's landing slot (RDMA WRITE)
    uint64_t landed_frames = 0;  // frames the peer wrote into our landing slots
    // tcp only: accept() failed for lack of descriptors or memory (EMFILE,
    // ENFILE, ENOBUFS, ENOMEM) and the listening sockets were left alone for
    // a back-off period; one per pause, several per episode.
    uint64_t accept_pauses = 0;
};

class TransportHandler {
  public:
    virtual ~TransportHandler() = default;
    // An outbound connect() finished (ok) or failed (error names why).
    virtual void on_connected(ConnId conn, bool ok, const std::string& error) = 0;
    // An inbound connection was accepted from peer_host (numeric address).
    virtual void on_accepted(ConnId conn, const std::string& peer_host) = 0;
    // A complete frame whose header and CRC have been validated.
    virtual void on_frame(ConnId conn, const FrameHeader& h, const uint8_t* payload) = 0;
    // The connection is gone. frame_error says whether bad input caused it.
    virtual void on_closed(ConnId conn, const std::string& reason, FrameError frame_error) = 0;
    // accept failed with err (EMFILE...); not accepting for pause_ms. Made
    // once per episode: at the first failure after a successful accept (or
    // ever), not again for the longer pauses while the failures go on.
    virtual void on_accept_paused(int /*err*/, int /*pause_ms*/) {}
};

class Transport {
  public:
    virtual ~Transport() = default;

    virtual const char* name() const = 0;  // "stub", "tcp", "verbs"
    // Starts accepting on host:port. False with *error set on failure.
    virtual bool listen(const std::string& host, uint16_t port, std::string* error) = 0;
    // Starts a connection; on_connected reports the outcome. 0 = failed at once (*error set).
    virtual ConnId connect(const std::string& host, uint16_t port, std::string* error) = 0;
    // Sends one frame: iov holds the 24-byte header and the payload pieces.
    // The transport copies or queues it; false if the connection is unusable.
    virtual bool send(ConnId conn, const iovec* iov, int iovcnt) = 0;
    // As send(), for a frame kept for resending: the pieces of iov that lie
    // in the kept_len bytes at kept.get() stay as they are while `kept` is
    // held. A transport that must queue the frame (TCP, a full socket) holds
    // `kept` for those pieces instead of copying them; other pieces (a
    // header, a tag) are copied.
    virtual bool send_kept(ConnId conn, const iovec* iov, int iovcnt,
                           std::shared_ptr<const uint8_t> kept, size_t kept_len) {
        (void)kept;
        (void)kept_len;
        return send(conn, iov, iovcnt);
    }
    // A hint for the frames send() takes until it is set again: more follow
    // at once, so they may share the wire's segments and the peer's wakeups
    // (TCP: MSG_MORE). push_more() sends whatever the hint left pending; a
    // send() without the hint does too, on its connection.
    virtual void set_more(bool more) { (void)more; }
    virtual void push_more() {}
    // Room for one whole frame of `bytes` on conn, in memory the transport
    // sends from as it is (verbs: a registered send slot), so that a caller
    // who must write the frame anyway (sealing it) writes it there, not into
    // a buffer of its own that is copied again. nullptr when the transport
    // has none to lend now: build the frame elsewhere and send() it. Room
    // returned is given back by send_reserved() (sends what was written
    // there) or cancel_reserved(), before any other call on the transport.
    virtual uint8_t* reserve_frame(ConnId conn, size_t bytes) {
        (void)conn;
        (void)bytes;
        return nullptr;
    }
    virtual bool send_reserved(ConnId conn, size_t bytes) {
        (void)conn;
        (void)bytes;
        return false;
    }
    virtual void cancel_reserved(ConnId conn) { (void)conn; }
    // Whether reserve_frame() lends send buffers at all (verbs): a caller that
    // seals a kept frame seals it into one then, else where it is kept.
    virtual bool lends_frames() const { return false; }
    // Bytes accepted by send() but not yet written to the wire.
    virtual size_t queued_bytes(ConnId conn) const = 0;
    // Largest payload this connection accepts from now on (capped at
    // max_payload()); a larger frame closes it with PayloadTooLarge. A new
    // connection starts with the transport's initial_max_payload option.
    virtual void set_max_payload(ConnId conn, uint32_t max_payload) = 0;
    // Closes; on_closed is still reported (from a later poll()).
    virtual void close(ConnId conn) = 0;
    // A file descriptor that becomes readable when poll() has work; -1 if none.
    virtual int wait_fd() const = 0;
    // Does all work that is ready, waiting up to timeout_ms (0 = don't wait).
    virtual void poll(int timeout_ms) = 0;
    // As poll(0), but also looks at what a busy-polling poll(0) may defer to
    // a later call (the verbs tier's connection events): a caller that polls
    // once before it decides uses this.
    virtual void poll_now() { poll(0); }
    // Largest frame payload the transport carries.
    virtual uint32_t max_payload() const = 0;
    virtual TransportCounters counters() const = 0;
};

}  // namespace pgrac::ic
