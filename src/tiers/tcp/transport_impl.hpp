// The TCP tier (tier3): nonblocking sockets on one epoll instance.
//
// The event loop's epoll fd (event_loop.hpp) is wait_fd(). Besides the
// sockets it wakes for an end waiting to be reported and for its timer, armed
// at the earliest connect deadline or the end of an accept pause
// (tiers/tcp/transport_accept.cpp).
//
// Callbacks are made only from poll(). Connections are erased only when their
// end is reported, at the start or end of poll() and never inside a callback,
// so a handler may call close() or send() (on any connection) from on_frame
// while its connection's buffer is still being read.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "tiers/event_loop.hpp"
#include "tiers/tcp/connection.hpp"
#include "tiers/transports.hpp"

namespace pgrac::tiers {

// epoll_data.u64 of a connection is its ConnId (small); this tag marks a listener.
inline constexpr uint64_t kTcpListenerTag = uint64_t{1} << 62;  // | the listening fd
inline uint64_t tcp_listener_tag(int fd) {
    return kTcpListenerTag | static_cast<uint32_t>(fd);
}

class TcpTransport final : public Transport {
  public:
    TcpTransport(TransportHandler& handler, const TcpOptions& opts);
    ~TcpTransport() override;
    TcpTransport(const TcpTransport&) = delete;
    TcpTransport& operator=(const TcpTransport&) = delete;

    // False if the event loop's setup failed (the object is unusable).
    bool ok() const { return loop_.ok(); }

    const char* name() const override { return "tcp"; }
    bool listen(const std::string& host, uint16_t port, std::string* error) override;
    ConnId connect(const std::string& host, uint16_t port, std::string* error) override;
    bool send(ConnId conn, const iovec* iov, int iovcnt) override;
    bool send_kept(ConnId conn, const iovec* iov, int iovcnt, std::shared_ptr<const uint8_t> kept,
                   size_t kept_len) override;
    void set_more(bool more) override { more_ = more; }
    void push_more() override;
    size_t queued_bytes(ConnId conn) const override;
    void set_max_payload(ConnId conn, uint32_t max_payload) override;
    void close(ConnId conn) override;
    int wait_fd() const override { return loop_.fd(); }
    void poll(int timeout_ms) override;
    uint32_t max_payload() const override { return max_payload_; }
    TransportCounters counters() const override { return counters_; }

  private:
    TcpConnection* find(ConnId id) const;

    // setup and teardown (tiers/tcp/transport.cpp)
    bool start_connect_attempt(TcpConnection& c);
    void finish_connect(TcpConnection& c);
    void expire_connects();
    void rearm_timer();
    void deliver_reports();
    std::string end_text(const TcpConnection& c) const;

    // accepting, and pausing it when out of descriptors (tiers/tcp/transport_accept.cpp)
    void accept_ready(int listen_fd);
    void accept_one(int fd, const sockaddr_storage& peer, socklen_t len);
    void pause_accepting(int err);
    void resume_accepting_if_due();

    // data path (tiers/tcp/transport_io.cpp)
    void conn_ready(ConnId id, uint32_t events);
    void read_ready(TcpConnection& c);
    bool deliver_frames(TcpConnection& c);
    void flush(TcpConnection& c);
    void set_epollout(TcpConnection& c, bool on);
    void end(TcpConnection& c, TcpCloseCause cause, int err = 0,
             ic::FrameError fe = ic::FrameError::None);

    TransportHandler& handler_;
    const TcpOptions opts_;
    const uint32_t max_payload_;
    const uint32_t initial_max_payload_;  // a new connection's limit
    EventLoop loop_;
    std::vector<int> listeners_;
    std::unordered_map<ConnId, std::unique_ptr<TcpConnection>> conns_;
    ConnId next_id_ = 1;
    // Accepting paused: the listeners are out of the epoll set until accept_resume_.
    bool accept_paused_ = false;
    int accept_pause_ms_ = 0;  // the last pause; 0 once an accept succeeds (no episode)
    std::chrono::steady_clock::time_point accept_resume_;
    TransportCounters counters_;
    bool more_ = false;         // set_more(): writes carry MSG_MORE
    std::vector<ConnId> held_;  // connections whose last write carried it
};

}  // namespace pgrac::tiers
