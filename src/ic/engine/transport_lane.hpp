// Requester lane over a Transport of the process's own: the verbs tiers' way
// for a backend to send its RPC straight to a peer's listener (an RC queue
// pair of its own, through librdmacm) and read the reply itself, as
// RequesterLane does with a TCP socket. The same handshake (lane
// kRequesterLane), frame protection and rules (requester_lane.hpp).
//
// The transport is made when the lane opens and lives as long as it: one
// small CQ, receive queue and buffer pool per lane (docs/architecture.md,
// "Requester lanes on verbs"). Synchronous and PostgreSQL-free; every wait is
// the transport's own poll(), bounded by the deadline and cut short when
// `interrupted` says so.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ic/engine/requester_lane.hpp"
#include "ic/transport/transport.hpp"

namespace pgrac::ic {

class TransportRequesterLane final : public RequesterLaneBase, private ic::TransportHandler {
  public:
    // Makes the lane's transport, calling back into the given handler;
    // nullptr with *error set when it cannot be made.
    using TransportFactory =
        std::function<std::unique_ptr<ic::Transport>(ic::TransportHandler&, std::string* error)>;

    TransportRequesterLane(LocalIdentity local, uint16_t peer_node, std::string host, uint16_t port,
                           TransportFactory factory);
    ~TransportRequesterLane() override;
    TransportRequesterLane(const TransportRequesterLane&) = delete;
    TransportRequesterLane& operator=(const TransportRequesterLane&) = delete;

    Result open(uint64_t deadline_ns, InterruptCheck interrupted, std::string* error) override;
    bool is_open() const override { return transport_ != nullptr && guard_ != nullptr && !gone_; }
    void close() override;
    bool failed_locally() const override { return failed_locally_; }
    // Polls for the reply (the transport's poll(0), sched_yield between looks)
    // for up to spin_ns, then sleeps in the transport's poll().
    Result call(const uint8_t* payload, uint32_t len, uint16_t flags, uint64_t rpc_id,
                uint64_t spin_ns, uint64_t deadline_ns, InterruptCheck interrupted,
                std::vector<uint8_t>* reply, bool* sent, std::string* error) override;

  private:
    struct Received {
        FrameHeader h;
        std::vector<uint8_t> payload;
        // Once the lane is authenticated a frame is opened as it is taken
        // out of the transport's buffer (a landing slot): `opened` says so,
        // `authentic` whether its tag held, payload is then the plain text.
        bool opened = false, authentic = false;
    };

    // ic::TransportHandler: called from transport_->poll() only.
    void on_connected(ic::ConnId conn, bool ok, const std::string& error) override;
    void on_accepted(ic::ConnId conn, const std::string& peer_host) override;
    void on_frame(ic::ConnId conn, const FrameHeader& h, const uint8_t* payload) override;
    void on_closed(ic::ConnId conn, const std::string& reason, FrameError frame_error) override;

    // Checks the deadline and interrupts, then lets the transport work once
    // (poll(0) and a sched_yield when spinning, else a poll of at most 10 ms).
    Result pump(bool spin, uint64_t deadline_ns, InterruptCheck interrupted,
                const char* timeout_text, std::string* error);
    // Waits for the next frame into *out.
    Result next_frame(Received* out, uint64_t spin_ns, uint64_t deadline_ns,
                      InterruptCheck interrupted, std::string* error);
    bool send_frame(const std::vector<uint8_t>& frame);
    Result fail(Result r, const std::string& why, std::string* error);

    LocalIdentity local_;
    uint16_t peer_node_;
    std::string host_;
    uint16_t port_;
    TransportFactory factory_;
    std::unique_ptr<ic::Transport> transport_;
    ic::ConnId conn_ = 0;
    bool connected_ = false;
    bool gone_ = false;  // the connection failed or closed
    bool failed_locally_ = false;
    std::string gone_why_;
    std::deque<Received> inbox_;
    std::unique_ptr<FrameGuard> guard_;
    uint32_t sent_ = 0, received_ = 0;
    std::vector<uint8_t> frame_;
};

}  // namespace pgrac::ic
