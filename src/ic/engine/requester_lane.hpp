// Requester lane, the requesting side: one process's own connection to a
// peer's listener, for its RPCs. The process writes each request itself and
// reads the reply itself, so that an RPC costs two process wakeups (the peer's
// listener and back), where the path through the listeners costs four.
//
// Same handshake and frame protection as a peer lane (lane kRequesterLane),
// but no session: a request is sent once and never again. Whatever goes wrong
// after a request was written leaves its outcome unknown; the call says so
// (*sent) and closes the lane. docs/architecture.md, "Requester lanes".
//
// Synchronous and PostgreSQL-free: every wait is a poll() bounded by a
// deadline and cut short when `interrupted` says so (the caller then handles
// its interrupt outside this code).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ic/wire/frame.hpp"
#include "ic/wire/frame_guard.hpp"
#include "ic/session/handshake.hpp"

namespace pgrac::ic {

// What a requester lane does, whatever carries it: RequesterLane below on
// TCP sockets, TransportRequesterLane (transport_lane.hpp) on a transport of
// the process's own (the verbs tiers).
class RequesterLaneBase {
  public:
    enum class Result { Ok, Timeout, Interrupted, Failed };
    using InterruptCheck = bool (*)();

    virtual ~RequesterLaneBase() = default;

    // Connects and authenticates. Nothing but the handshake is sent.
    virtual Result open(uint64_t deadline_ns, InterruptCheck interrupted, std::string* error) = 0;
    virtual bool is_open() const = 0;
    virtual void close() = 0;
    // The last open() failed here, not at the peer: a resource of this
    // process (a transport that could not be made). The caller reports it.
    virtual bool failed_locally() const { return false; }

    // One RPC: payload is the message header and body. Polls for the reply
    // for up to spin_ns, then sleeps. Ok: *reply holds the reply's message
    // header and body. Otherwise the lane is closed, and *sent tells whether
    // the request may have run.
    virtual Result call(const uint8_t* payload, uint32_t len, uint16_t flags, uint64_t rpc_id,
                        uint64_t spin_ns, uint64_t deadline_ns, InterruptCheck interrupted,
                        std::vector<uint8_t>* reply, bool* sent, std::string* error) = 0;
};

// What both kinds of lane share.
namespace lane {

uint64_t now_ns();  // CLOCK_MONOTONIC
// How long one sleep may last: until the deadline, but at most 10 ms, so that
// interrupts are looked at at least that often.
int sleep_ms(uint64_t now_ns, uint64_t deadline_ns);

// The dialer's side of a requester lane's handshake (lane kRequesterLane, no
// session). send(frame) writes one whole frame; next(h, payload) waits for
// the next one. Either's failure is returned as it is (it has closed the lane
// and set the error); a refusal or a bad peer is Failed with *error set, for
// the caller to close. Ok: *peer is whom the lane talks to.
using SendFrame = std::function<RequesterLaneBase::Result(const std::vector<uint8_t>& frame)>;
using NextFrame = std::function<RequesterLaneBase::Result(FrameHeader* h, const uint8_t** payload)>;
RequesterLaneBase::Result dial(const LocalIdentity& local, uint16_t peer_node,
                               const std::string& host, const SendFrame& send,
                               const NextFrame& next, PeerIdentity* peer, std::string* error);

}  // namespace lane

// Checks a reply frame, already opened (plain, plain_len), against the request
// it answers; false names why in *why.
bool valid_lane_reply(const FrameHeader& h, const uint8_t* plain, uint32_t plain_len,
                      uint16_t peer_node, uint32_t expected_seq, uint64_t rpc_id, std::string* why);

// The request frame of an RPC on a lane: header, then the payload in the
// clear (crc) or sealed (mac, secure), into *frame.
void build_lane_request(FrameGuard& guard, uint16_t src_node, const uint8_t* payload, uint32_t len,
                        uint16_t flags, uint32_t seq, uint32_t ack, std::vector<uint8_t>* frame);

class RequesterLane final : public RequesterLaneBase {
  public:
    RequesterLane(LocalIdentity local, uint16_t peer_node, std::string host, uint16_t port);
    ~RequesterLane() override;
    RequesterLane(const RequesterLane&) = delete;
    RequesterLane& operator=(const RequesterLane&) = delete;

    Result open(uint64_t deadline_ns, InterruptCheck interrupted, std::string* error) override;
    bool is_open() const override { return fd_ >= 0 && guard_ != nullptr; }
    int fd() const { return fd_; }  // tests write what a hostile requester would
    void close() override;

    // Polls for the reply for up to spin_ns (sched_yield between looks), then
    // sleeps in poll().
    Result call(const uint8_t* payload, uint32_t len, uint16_t flags, uint64_t rpc_id,
                uint64_t spin_ns, uint64_t deadline_ns, InterruptCheck interrupted,
                std::vector<uint8_t>* reply, bool* sent, std::string* error) override;

  private:
    // Checks the deadline and interrupts, then waits once for fd_ (a poll() of
    // at most 10 ms, or a sched_yield when spinning): Ok means look again.
    Result wait_ready(short events, bool spin, uint64_t deadline_ns, InterruptCheck interrupted,
                      const char* timeout_text, std::string* error);
    Result write_all(const uint8_t* data, size_t n, uint64_t deadline_ns,
                     InterruptCheck interrupted, std::string* error, bool* sent);
    Result read_frame(FrameHeader* h, const uint8_t** payload, uint64_t spin_ns,
                      uint64_t deadline_ns, InterruptCheck interrupted, std::string* error);
    Result fail(Result r, const std::string& why, std::string* error);

    LocalIdentity local_;
    uint16_t peer_node_;
    std::string host_;
    uint16_t port_;
    int fd_ = -1;
    std::unique_ptr<FrameGuard> guard_;
    std::unique_ptr<FrameStreamDecoder> decoder_;
    uint32_t sent_ = 0, received_ = 0;  // request and reply numbering
    std::vector<uint8_t> frame_;        // the frame being written
};

}  // namespace pgrac::ic
