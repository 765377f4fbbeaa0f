// Requester lane, the requesting side (requester_lane.hpp).
#include "ic/engine/requester_lane.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ic/transport/socket.hpp"

namespace pgrac::ic {

namespace {

// The dialer's side of the handshake policy: a requester lane offers no
// session and takes any instance the listener would.
class NoSessionPolicy : public HandshakePolicy {
  public:
    RejectReason check_peer(uint16_t, const std::string&, uint8_t) override {
        return RejectReason::None;
    }
    LaneState lane_state(uint16_t, uint8_t) override { return {}; }
    RejectReason admit(uint16_t, uint64_t, uint64_t, uint64_t, uint8_t, std::string*) override {
        return RejectReason::None;
    }
};

// Longest single sleep: interrupts are looked at at least this often.
constexpr uint64_t kSliceMs = 10;

}  // namespace

namespace lane {

uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

int sleep_ms(uint64_t now_ns, uint64_t deadline_ns) {
    const uint64_t left = deadline_ns > now_ns ? (deadline_ns - now_ns) / 1000000 + 1 : 1;
    return static_cast<int>(std::min(left, kSliceMs));
}

RequesterLaneBase::Result dial(const LocalIdentity& local, uint16_t peer_node,
                               const std::string& host, const SendFrame& send,
                               const NextFrame& next, PeerIdentity* peer, std::string* error) {
    using Result = RequesterLaneBase::Result;
    NoSessionPolicy policy;
    Handshake hs(Handshake::Role::Dialer, local, policy, peer_node, host, kRequesterLane);
    std::vector<HandshakeOutput> out = hs.start();
    std::vector<uint8_t> frame;
    for (;;) {
        for (const HandshakeOutput& o : out) {
            FrameHeader h;
            h.type = o.type;
            h.src_node = local.node_id;
            h.payload_len = static_cast<uint32_t>(o.payload.size());
            frame.resize(kFrameHeaderSize + o.payload.size());
            encode_frame_header(h, o.payload.data(), frame.data());
            if (!o.payload.empty())
                std::memcpy(frame.data() + kFrameHeaderSize, o.payload.data(), o.payload.size());
            const Result r = send(frame);
            if (r != Result::Ok) return r;
        }
        out.clear();
        if (hs.done()) break;
        if (hs.failed()) {
            if (error != nullptr) *error = hs.error_text();
            return Result::Failed;
        }
        FrameHeader h;
        const uint8_t* payload = nullptr;
        const Result r = next(&h, &payload);
        if (r != Result::Ok) return r;
        hs.on_frame(h.type, h.src_node, payload, h.payload_len, &out);
    }
    *peer = hs.peer();
    return Result::Ok;
}

}  // namespace lane

bool valid_lane_reply(const FrameHeader& h, const uint8_t* plain, uint32_t plain_len,
                      uint16_t peer_node, uint32_t expected_seq, uint64_t rpc_id,
                      std::string* why) {
    MessageHeader mh;
    if (h.type != FrameType::Message || !(h.flags & kFlagRpcReply) || h.src_node != peer_node ||
        h.seq != expected_seq || plain_len < kMessageHeaderSize ||
        decode_message_header(plain, plain_len, &mh) != FrameError::None || mh.rpc_id != rpc_id) {
        *why = "unexpected frame from node " + std::to_string(peer_node) + " on a requester lane";
        return false;
    }
    return true;
}

void build_lane_request(FrameGuard& guard, uint16_t src_node, const uint8_t* payload, uint32_t len,
                        uint16_t flags, uint32_t seq, uint32_t ack, std::vector<uint8_t>* frame) {
    FrameHeader h;
    h.type = FrameType::Message;
    h.flags = static_cast<uint16_t>(flags | kFlagRpcRequest);
    h.src_node = src_node;
    h.payload_len = len;
    h.seq = seq;
    h.ack = ack;
    if (guard.mode() == WireProtection::Crc) {
        frame->resize(kFrameHeaderSize + len);
        encode_frame_header(h, payload, frame->data());
        std::memcpy(frame->data() + kFrameHeaderSize, payload, len);
    } else {
        guard.seal(h, payload, len, frame);
    }
}

RequesterLane::RequesterLane(LocalIdentity local, uint16_t peer_node, std::string host,
                             uint16_t port)
    : local_(std::move(local)), peer_node_(peer_node), host_(std::move(host)), port_(port) {}

RequesterLane::~RequesterLane() {
    close();
}

void RequesterLane::close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    guard_.reset();
    decoder_.reset();
    sent_ = received_ = 0;
}

RequesterLane::Result RequesterLane::fail(Result r, const std::string& why, std::string* error) {
    close();
    if (error != nullptr) *error = why;
    return r;
}

RequesterLane::Result RequesterLane::wait_ready(short events, bool spin, uint64_t deadline_ns,
                                                InterruptCheck interrupted,
                                                const char* timeout_text, std::string* error) {
    const uint64_t now = lane::now_ns();
    if (now >= deadline_ns) return fail(Result::Timeout, timeout_text, error);
    if (interrupted != nullptr && interrupted())
        return fail(Result::Interrupted, "interrupted", error);
    if (spin) {
        sched_yield();  // let the peer's listener have this CPU
        return Result::Ok;
    }
    pollfd pfd{fd_, events, 0};
    (void)::poll(&pfd, 1, lane::sleep_ms(now, deadline_ns));
    return Result::Ok;
}

RequesterLane::Result RequesterLane::write_all(const uint8_t* data, size_t n, uint64_t deadline_ns,
                                               InterruptCheck interrupted, std::string* error,
                                               bool* sent) {
    size_t off = 0;
    while (off < n) {
        const ssize_t w = ::send(fd_, data + off, n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            off += static_cast<size_t>(w);
            if (sent != nullptr) *sent = true;  // before anything else can fail
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return fail(Result::Failed,
                        ic::sys_error("send to node " + std::to_string(peer_node_), errno), error);
        const Result r =
            wait_ready(POLLOUT, false, deadline_ns, interrupted, "send timed out", error);
        if (r != Result::Ok) return r;
    }
    return Result::Ok;
}

RequesterLane::Result RequesterLane::read_frame(FrameHeader* h, const uint8_t** payload,
                                                uint64_t spin_ns, uint64_t deadline_ns,
                                                InterruptCheck interrupted, std::string* error) {
    const uint64_t spin_end = spin_ns > 0 ? lane::now_ns() + spin_ns : 0;
    for (;;) {
        if (decoder_->next(h, payload)) return Result::Ok;
        if (decoder_->error() != FrameError::None)
            return fail(Result::Failed,
                        std::string("bad frame from node ") + std::to_string(peer_node_) + ": " +
                            frame_error_name(decoder_->error()),
                        error);
        uint8_t* w = decoder_->write_ptr(16384);
        const ssize_t r = ::recv(fd_, w, 16384, MSG_DONTWAIT);
        if (r > 0) {
            decoder_->commit(static_cast<size_t>(r));
            continue;
        }
        if (r == 0)
            return fail(Result::Failed, "node " + std::to_string(peer_node_) + " closed the lane",
                        error);
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return fail(Result::Failed,
                        ic::sys_error("recv from node " + std::to_string(peer_node_), errno),
                        error);
        const Result waited =
            wait_ready(POLLIN, spin_end != 0 && lane::now_ns() < spin_end, deadline_ns, interrupted,
                       "no reply before the deadline", error);
        if (waited != Result::Ok) return waited;
    }
}

RequesterLane::Result RequesterLane::open(uint64_t deadline_ns, InterruptCheck interrupted,
                                          std::string* error) {
    close();
    std::vector<ic::SocketAddress> addrs;
    std::string err;
    if (!ic::resolve_tcp(host_, port_, false, &addrs, &err) || addrs.empty())
        return fail(Result::Failed, err, error);
    fd_ = ic::open_tcp_socket(addrs[0].addr.ss_family, 0, 0);
    if (fd_ < 0) return fail(Result::Failed, ic::sys_error("socket", errno), error);
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&addrs[0].addr), addrs[0].len) != 0 &&
        errno != EINPROGRESS)
        return fail(Result::Failed,
                    ic::sys_error("connect to " + ic::endpoint_text(host_, port_), errno), error);
    for (;;) {  // the connect completes when the socket becomes writable
        pollfd pfd{fd_, POLLOUT, 0};
        if (::poll(&pfd, 1, 0) > 0) break;
        const Result r =
            wait_ready(POLLOUT, false, deadline_ns, interrupted, "connect timed out", error);
        if (r != Result::Ok) return r;
    }
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0)
        return fail(Result::Failed,
                    ic::sys_error("connect to " + ic::endpoint_text(host_, port_), soerr), error);

    decoder_ = std::make_unique<FrameStreamDecoder>(kMaxHandshakePayload);
    PeerIdentity peer;
    const Result r = lane::dial(
        local_, peer_node_, host_,
        [&](const std::vector<uint8_t>& f) {
            return write_all(f.data(), f.size(), deadline_ns, interrupted, error, nullptr);
        },
        [&](FrameHeader* h, const uint8_t** payload) {
            return read_frame(h, payload, 0, deadline_ns, interrupted, error);
        },
        &peer, error);
    if (r == Result::Failed && fd_ >= 0)  // refused: the handshake's reason is in *error
        return fail(r, error != nullptr ? *error : std::string(), error);
    if (r != Result::Ok) return r;
    guard_ = std::make_unique<FrameGuard>(peer.protection, peer.keys);
    decoder_->set_max_payload(
        static_cast<uint32_t>(kMessageHeaderSize + local_.max_message + kFrameTagSize));
    return Result::Ok;
}

RequesterLane::Result RequesterLane::call(const uint8_t* payload, uint32_t len, uint16_t flags,
                                          uint64_t rpc_id, uint64_t spin_ns, uint64_t deadline_ns,
                                          InterruptCheck interrupted, std::vector<uint8_t>* reply,
                                          bool* sent, std::string* error) {
    *sent = false;
    if (!is_open()) return fail(Result::Failed, "requester lane is not open", error);
    // Between RPCs nothing may arrive: readable means the peer closed or
    // reset the lane (a restart, ss -K), so the request is not sent on it.
    pollfd idle{fd_, POLLIN | POLLRDHUP, 0};
    if (::poll(&idle, 1, 0) != 0)
        return fail(Result::Failed, "node " + std::to_string(peer_node_) + " closed the lane",
                    error);
    build_lane_request(*guard_, local_.node_id, payload, len, flags, ++sent_, received_, &frame_);
    // From the first byte on the peer may run it: *sent says so.
    Result r = write_all(frame_.data(), frame_.size(), deadline_ns, interrupted, error, sent);
    if (r != Result::Ok) return r;
    // Not polling: the reply is not there yet, so sleep before the first
    // recv rather than after one that would find nothing (a system call).
    // No deadline or interrupt check here: a reply already in the socket is
    // read first (read_frame checks both before it sleeps again).
    if (spin_ns == 0) {
        pollfd ready{fd_, POLLIN, 0};
        (void)::poll(&ready, 1, lane::sleep_ms(lane::now_ns(), deadline_ns));
    }
    FrameHeader rh;
    const uint8_t* rp = nullptr;
    r = read_frame(&rh, &rp, spin_ns, deadline_ns, interrupted, error);
    if (r != Result::Ok) return r;
    const uint8_t* plain = nullptr;
    uint32_t plain_len = 0;
    if (!guard_->open(rh, rp, &plain, &plain_len))
        return fail(
            Result::Failed,
            "reply from node " + std::to_string(peer_node_) + " failed its authentication tag",
            error);
    std::string why;
    if (!valid_lane_reply(rh, plain, plain_len, peer_node_, received_ + 1, rpc_id, &why))
        return fail(Result::Failed, why, error);
    received_ = rh.seq;
    reply->assign(plain, plain + plain_len);
    return Result::Ok;
}

}  // namespace pgrac::ic
