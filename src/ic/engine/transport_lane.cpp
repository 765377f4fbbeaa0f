// Requester lane over a transport of the process's own (transport_lane.hpp).
#include "ic/engine/transport_lane.hpp"

#include <cstring>
#include <sched.h>

namespace pgrac::ic {

TransportRequesterLane::TransportRequesterLane(LocalIdentity local, uint16_t peer_node,
                                               std::string host, uint16_t port,
                                               TransportFactory factory)
    : local_(std::move(local)),
      peer_node_(peer_node),
      host_(std::move(host)),
      port_(port),
      factory_(std::move(factory)) {}

TransportRequesterLane::~TransportRequesterLane() {
    close();
}

void TransportRequesterLane::close() {
    if (transport_ != nullptr && conn_ != 0 && !gone_) transport_->close(conn_);
    transport_.reset();  // its queue pair and buffers go with it
    conn_ = 0;
    connected_ = gone_ = false;
    gone_why_.clear();
    inbox_.clear();
    guard_.reset();
    sent_ = received_ = 0;
}

TransportRequesterLane::Result TransportRequesterLane::fail(Result r, const std::string& why,
                                                            std::string* error) {
    close();
    if (error != nullptr) *error = why;
    return r;
}

void TransportRequesterLane::on_connected(ic::ConnId conn, bool ok, const std::string& error) {
    if (conn != conn_) return;
    connected_ = ok;
    if (!ok) {
        gone_ = true;
        gone_why_ = error;
    }
}

void TransportRequesterLane::on_accepted(ic::ConnId conn, const std::string&) {
    transport_->close(conn);  // it never listens: nothing may come in
}

void TransportRequesterLane::on_frame(ic::ConnId conn, const FrameHeader& h,
                                      const uint8_t* payload) {
    if (conn != conn_ || gone_) return;
    Received r;
    r.h = h;
    if (guard_ != nullptr) {
        // Out of the transport's buffer and opened in one pass: under secure
        // the decryption writes the plain text (the only copy on this side).
        r.payload.resize(h.payload_len);
        uint32_t plain_len = 0;
        r.opened = true;
        r.authentic = guard_->open_into(h, payload, r.payload.data(), &plain_len);
        if (r.authentic) r.payload.resize(plain_len);
    } else {
        r.payload.assign(payload, payload + h.payload_len);
    }
    inbox_.push_back(std::move(r));
}

void TransportRequesterLane::on_closed(ic::ConnId conn, const std::string& reason,
                                       FrameError frame_error) {
    if (conn != conn_) return;
    gone_ = true;
    gone_why_ = frame_error != FrameError::None
                    ? std::string("bad frame from node ") + std::to_string(peer_node_) + ": " +
                          frame_error_name(frame_error)
                    : "node " + std::to_string(peer_node_) + " closed the lane (" + reason + ")";
}

TransportRequesterLane::Result TransportRequesterLane::pump(bool spin, uint64_t deadline_ns,
                                                            InterruptCheck interrupted,
                                                            const char* timeout_text,
                                                            std::string* error) {
    const uint64_t now = lane::now_ns();
    if (now >= deadline_ns) return fail(Result::Timeout, timeout_text, error);
    if (interrupted != nullptr && interrupted())
        return fail(Result::Interrupted, "interrupted", error);
    if (spin) {
        transport_->poll(0);
        sched_yield();  // let the peer's listener have this CPU
    } else {
        transport_->poll(lane::sleep_ms(now, deadline_ns));
    }
    return Result::Ok;
}

TransportRequesterLane::Result TransportRequesterLane::next_frame(Received* out, uint64_t spin_ns,
                                                                  uint64_t deadline_ns,
                                                                  InterruptCheck interrupted,
                                                                  std::string* error) {
    const uint64_t spin_end = spin_ns > 0 ? lane::now_ns() + spin_ns : 0;
    for (;;) {
        if (!inbox_.empty()) {
            *out = std::move(inbox_.front());
            inbox_.pop_front();
            return Result::Ok;
        }
        if (gone_) return fail(Result::Failed, gone_why_, error);
        const Result r = pump(spin_end != 0 && lane::now_ns() < spin_end, deadline_ns, interrupted,
                              "no reply before the deadline", error);
        if (r != Result::Ok) return r;
    }
}

bool TransportRequesterLane::send_frame(const std::vector<uint8_t>& frame) {
    iovec iov{const_cast<uint8_t*>(frame.data()), frame.size()};
    return transport_->send(conn_, &iov, 1);
}

TransportRequesterLane::Result TransportRequesterLane::open(uint64_t deadline_ns,
                                                            InterruptCheck interrupted,
                                                            std::string* error) {
    close();
    std::string err;
    transport_ = factory_(*this, &err);
    failed_locally_ = transport_ == nullptr;
    if (failed_locally_) return fail(Result::Failed, "its transport cannot be made: " + err, error);
    conn_ = transport_->connect(host_, port_, &err);
    if (conn_ == 0) return fail(Result::Failed, err, error);
    while (!connected_) {
        if (gone_)
            return fail(Result::Failed,
                        "connect to node " + std::to_string(peer_node_) + ": " + gone_why_, error);
        const Result r = pump(false, deadline_ns, interrupted, "connect timed out", error);
        if (r != Result::Ok) return r;
    }

    PeerIdentity peer;
    Received f;
    const Result r = lane::dial(
        local_, peer_node_, host_,
        [&](const std::vector<uint8_t>& frame) {
            if (send_frame(frame)) return Result::Ok;
            return fail(Result::Failed,
                        "handshake with node " + std::to_string(peer_node_) + ": send failed",
                        error);
        },
        [&](FrameHeader* h, const uint8_t** payload) {
            const Result got = next_frame(&f, 0, deadline_ns, interrupted, error);
            *h = f.h;
            *payload = f.payload.data();
            return got;
        },
        &peer, error);
    if (r == Result::Failed && transport_ != nullptr)  // refused: the reason is in *error
        return fail(r, error != nullptr ? *error : std::string(), error);
    if (r != Result::Ok) return r;
    guard_ = std::make_unique<FrameGuard>(peer.protection, peer.keys);
    transport_->set_max_payload(
        conn_, static_cast<uint32_t>(kMessageHeaderSize + local_.max_message + kFrameTagSize));
    return Result::Ok;
}

TransportRequesterLane::Result TransportRequesterLane::call(const uint8_t* payload, uint32_t len,
                                                            uint16_t flags, uint64_t rpc_id,
                                                            uint64_t spin_ns, uint64_t deadline_ns,
                                                            InterruptCheck interrupted,
                                                            std::vector<uint8_t>* reply, bool* sent,
                                                            std::string* error) {
    *sent = false;
    if (!is_open()) return fail(Result::Failed, "requester lane is not open", error);
    // Between RPCs nothing may arrive: a frame or a close means the peer
    // closed or reset the lane, so the request is not sent on it.
    transport_->poll_now();
    if (gone_ || !inbox_.empty())
        return fail(Result::Failed, "node " + std::to_string(peer_node_) + " closed the lane",
                    error);
    build_lane_request(*guard_, local_.node_id, payload, len, flags, ++sent_, received_, &frame_);
    if (!send_frame(frame_))
        return fail(Result::Failed,
                    "send to node " + std::to_string(peer_node_) + " on its requester lane failed",
                    error);
    *sent = true;  // posted (or queued for the wire): the peer may run it
    Received f;
    const Result r = next_frame(&f, spin_ns, deadline_ns, interrupted, error);
    if (r != Result::Ok) return r;
    // Opened as it was taken in (on_frame) and handed over without another
    // copy: the frame is this lane's own.
    const uint32_t plain_len = static_cast<uint32_t>(f.payload.size());
    if (!f.opened || !f.authentic)
        return fail(
            Result::Failed,
            "reply from node " + std::to_string(peer_node_) + " failed its authentication tag",
            error);
    std::string why;
    if (!valid_lane_reply(f.h, f.payload.data(), plain_len, peer_node_, received_ + 1, rpc_id,
                          &why))
        return fail(Result::Failed, why, error);
    received_ = f.h.seq;
    reply->swap(f.payload);
    return Result::Ok;
}

}  // namespace pgrac::ic
