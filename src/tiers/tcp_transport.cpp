// TCP tier: setup, listening, connecting, accepting, and the poll loop.
// The data path (send, read, close) is in tcp_transport_io.cpp.
#include <algorithm>
#include <cerrno>
#include <new>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "tiers/conn_bookkeeping.hpp"
#include "tiers/tcp_transport_impl.hpp"

namespace pgrac::tiers {

namespace {

// epoll_data.u64 of a connection is its ConnId (small); these tags mark the rest.
constexpr uint64_t kListenerTag = uint64_t{1} << 62;  // | the listening fd
constexpr uint64_t kWakeTag = uint64_t{1} << 63;
constexpr uint64_t kTimerTag = kWakeTag | 1;

constexpr int kMaxEvents = 64;
constexpr int kAcceptsPerEvent = 64;

bool epoll_add(int epfd, int fd, uint32_t events, uint64_t data) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = data;
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0;
}

void drain_fd(int fd) {
    uint64_t value;
    while (read(fd, &value, sizeof value) < 0 && errno == EINTR) {
    }
}

}  // namespace

TcpTransport::TcpTransport(TransportHandler& handler, const TcpOptions& opts)
    : handler_(handler),
      opts_(opts),
      max_payload_(std::min(opts.max_payload, ic::kMaxFramePayload)) {
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    wakefd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    timerfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (ok() && !(epoll_add(epfd_, wakefd_, EPOLLIN, kWakeTag) &&
                  epoll_add(epfd_, timerfd_, EPOLLIN, kTimerTag))) {
        ::close(epfd_);
        epfd_ = -1;
    }
}

TcpTransport::~TcpTransport() {
    for (auto& [id, c] : conns_)
        if (c->fd >= 0) ::close(c->fd);
    for (int fd : listeners_) ::close(fd);
    for (int fd : {epfd_, wakefd_, timerfd_})
        if (fd >= 0) ::close(fd);
}

TcpConnection* TcpTransport::find(ConnId id) const {
    auto it = conns_.find(id);
    return it == conns_.end() ? nullptr : it->second.get();
}

// Binds every address host resolves to; succeeds if at least one listens.
bool TcpTransport::listen(const std::string& host, uint16_t port, std::string* error) {
    try {
        std::vector<SocketAddress> addrs;
        if (!resolve_tcp(host, port, true, &addrs, error)) return false;
        std::string first_error, this_error;
        size_t bound = 0;
        for (const SocketAddress& a : addrs) {
            listeners_.reserve(listeners_.size() + 1);
            const int fd = open_tcp_listener(a, opts_.sndbuf, opts_.rcvbuf, &this_error);
            if (fd >= 0 &&
                epoll_add(epfd_, fd, EPOLLIN, kListenerTag | static_cast<uint32_t>(fd))) {
                listeners_.push_back(fd);
                ++bound;
                continue;
            }
            if (fd >= 0) {
                this_error = sys_error("epoll_ctl", errno);
                ::close(fd);
            }
            if (first_error.empty()) first_error = this_error;
        }
        return listen_outcome(bound, first_error, error);
    } catch (...) {
        set_error_nothrow(error, "cannot listen: out of memory");
        return false;
    }
}

ConnId TcpTransport::connect(const std::string& host, uint16_t port, std::string* error) {
    ConnId id = 0;
    try {
        std::vector<SocketAddress> addrs;
        if (!resolve_tcp(host, port, false, &addrs, error)) return 0;
        id = next_id_++;
        auto owned = std::make_unique<TcpConnection>(id, max_payload_);
        TcpConnection& c = *owned;
        c.target = endpoint_text(host, port);
        c.addrs = std::move(addrs);
        c.deadline =
            std::chrono::steady_clock::now() + std::chrono::milliseconds(opts_.connect_timeout_ms);
        conns_.emplace(id, std::move(owned));
        if (!start_connect_attempt(c)) {
            *error = sys_error("connect to " + c.target + " failed", c.err);
            conns_.erase(id);
            return 0;
        }
        rearm_timer();
        return id;
    } catch (...) {
        if (id != 0) {
            TcpConnection* c = find(id);
            if (c != nullptr && c->fd >= 0) ::close(c->fd);
            conns_.erase(id);
        }
        set_error_nothrow(error, "connect failed: out of memory");
        return 0;
    }
}

// Starts a nonblocking connect to the next address that takes one. Completion
// (or failure) shows up as EPOLLOUT on the socket. False when none is left.
bool TcpTransport::start_connect_attempt(TcpConnection& c) {
    while (c.next_addr < c.addrs.size()) {
        const SocketAddress& a = c.addrs[c.next_addr++];
        const int fd = open_tcp_socket(a.addr.ss_family, opts_.sndbuf, opts_.rcvbuf);
        if (fd < 0) {
            c.err = errno;
            continue;
        }
        int rc;
        do {
            rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&a.addr), a.len);
        } while (rc != 0 && errno == EINTR);
        if ((rc == 0 || errno == EINPROGRESS) && epoll_add(epfd_, fd, EPOLLOUT, c.id)) {
            c.fd = fd;
            c.epollout = true;
            return true;
        }
        c.err = errno;
        ::close(fd);
    }
    return false;
}

void TcpTransport::finish_connect(TcpConnection& c) {
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) {
        ::close(c.fd);
        c.fd = -1;
        c.err = err;
        if (!start_connect_attempt(c)) end(c, TcpCloseCause::ConnectFailed, c.err);
        return;
    }
    c.state = TcpConnState::Open;
    c.addrs.clear();
    epoll_event ev{};
    ev.events = c.out.empty() ? EPOLLIN : EPOLLIN | EPOLLOUT;
    ev.data.u64 = c.id;
    if (epoll_ctl(epfd_, EPOLL_CTL_MOD, c.fd, &ev) != 0) {
        end(c, TcpCloseCause::ConnectFailed, errno);
        return;
    }
    c.epollout = !c.out.empty();
    handler_.on_connected(c.id, true, std::string());
    // Frames sent while connecting go out now rather than a poll() later.
    if (c.state == TcpConnState::Open && !c.out.empty()) flush(c);
}

void TcpTransport::expire_connects() {
    if (opts_.connect_timeout_ms <= 0) return;
    expire_connect_deadlines(conns_, TcpConnState::Connecting,
                             [this](TcpConnection& c) { end(c, TcpCloseCause::ConnectTimeout); });
}

// Arms the timerfd at the earliest connect deadline, or disarms it. A
// connect_timeout_ms <= 0 means no timeout of our own (the kernel's applies).
void TcpTransport::rearm_timer() {
    if (opts_.connect_timeout_ms <= 0) return;
    rearm_connect_timer(timerfd_, timer_armed_, conns_, TcpConnState::Connecting);
}

void TcpTransport::accept_ready(int listen_fd) {
    for (int i = 0; i < kAcceptsPerEvent; ++i) {
        sockaddr_storage peer{};
        socklen_t len = sizeof peer;
        const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &len,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return;  // EAGAIN: all taken; anything else (EMFILE...): retried next poll
        }
        tune_tcp_socket(fd, opts_.sndbuf, opts_.rcvbuf);
        const ConnId id = next_id_++;
        std::string host;
        try {
            host = numeric_host(reinterpret_cast<const sockaddr*>(&peer), len);
            auto c = std::make_unique<TcpConnection>(id, max_payload_);
            c->fd = fd;
            c->state = TcpConnState::Open;
            conns_.emplace(id, std::move(c));
        } catch (...) {
            ::close(fd);  // never announced, so nothing to report
            continue;
        }
        if (!epoll_add(epfd_, fd, EPOLLIN, id)) {
            ::close(fd);
            conns_.erase(id);
            continue;
        }
        try {
            handler_.on_accepted(id, host);
        } catch (...) {
            if (TcpConnection* c = find(id); c != nullptr && c->state != TcpConnState::Closed)
                end(*c, TcpCloseCause::Internal);
        }
    }
}

std::string TcpTransport::end_text(const TcpConnection& c) const {
    switch (c.cause) {
        case TcpCloseCause::Local:
            return "closed locally";
        case TcpCloseCause::PeerClosed:
            return "peer closed the connection";
        case TcpCloseCause::ReadFailed:
            return sys_error("read failed", c.err);
        case TcpCloseCause::WriteFailed:
            return sys_error("write failed", c.err);
        case TcpCloseCause::BadFrame:
            return std::string("bad frame from peer: ") + ic::frame_error_name(c.frame_error);
        case TcpCloseCause::OutOfMemory:
            return "out of memory";
        case TcpCloseCause::Internal:
            return "internal error (exception in a handler callback)";
        case TcpCloseCause::ConnectFailed:
            return sys_error("connect to " + c.target + " failed", c.err);
        case TcpCloseCause::ConnectTimeout:
            return "connect to " + c.target + " timed out after " +
                   std::to_string(opts_.connect_timeout_ms) + " ms";
    }
    return "closed";
}

// Reports ended connections in ConnId order and forgets them. A connect that
// never completed gets on_connected(false); everything else gets on_closed.
void TcpTransport::deliver_reports() {
    deliver_conn_reports(handler_, conns_, pending_reports_, [this](TcpConnection& c) {
        const bool connect_failed =
            c.cause == TcpCloseCause::ConnectFailed || c.cause == TcpCloseCause::ConnectTimeout;
        ConnEndReport r{
            connect_failed ? ConnEndReport::Kind::ConnectFailed : ConnEndReport::Kind::Closed,
            end_text(c), c.frame_error};
        conns_.erase(c.id);
        return r;
    });
}

void TcpTransport::poll(int timeout_ms) {
    if (in_poll_ || !ok()) return;  // called from inside a handler callback
    in_poll_ = true;
    try {
        deliver_reports();
        epoll_event events[kMaxEvents];
        int n = epoll_wait(epfd_, events, kMaxEvents, timeout_ms);
        for (int i = 0; i < n; ++i) {
            const uint64_t tag = events[i].data.u64;
            if (tag == kWakeTag) {
                drain_fd(wakefd_);
                wake_signalled_ = false;
            } else if (tag == kTimerTag) {
                drain_fd(timerfd_);
            } else if (tag & kListenerTag) {
                accept_ready(static_cast<int>(tag & ~kListenerTag));
            } else {
                conn_ready(tag, events[i].events);
            }
        }
        expire_connects();
        deliver_reports();
        rearm_timer();
    } catch (...) {
        // Only a handler's exception or out of memory outside any connection's
        // work lands here; what is pending is retried by the next poll().
    }
    in_poll_ = false;
    if (pending_reports_ > 0) signal_wake();
}

std::unique_ptr<Transport> make_tcp_transport(TransportHandler& handler, const TcpOptions& opts) {
    try {
        auto t = std::make_unique<TcpTransport>(handler, opts);
        if (!t->ok()) return nullptr;
        return t;
    } catch (...) {
        return nullptr;
    }
}

}  // namespace pgrac::tiers
