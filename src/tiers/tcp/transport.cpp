// TCP tier: setup, listening, connecting, accepting, and the poll loop.
// The data path (send, read, close) is in tiers/tcp/transport_io.cpp.
#include <algorithm>
#include <cerrno>
#include <new>
#include <optional>
#include <sys/epoll.h>
#include <unistd.h>

#include "tiers/conn_bookkeeping.hpp"
#include "tiers/tcp/transport_impl.hpp"

namespace pgrac::tiers {

namespace {

constexpr int kMaxEvents = 64;

}  // namespace

TcpTransport::TcpTransport(TransportHandler& handler, const TcpOptions& opts)
    : handler_(handler),
      opts_(opts),
      max_payload_(std::min(opts.max_payload, ic::kMaxFramePayload)),
      initial_max_payload_(std::min(opts.initial_max_payload, max_payload_)) {}

TcpTransport::~TcpTransport() {
    for (auto& [id, c] : conns_)
        if (c->fd >= 0) ::close(c->fd);
    for (int fd : listeners_) ::close(fd);
}

TcpConnection* TcpTransport::find(ConnId id) const {
    auto it = conns_.find(id);
    return it == conns_.end() ? nullptr : it->second.get();
}

// Binds every address host resolves to; succeeds if at least one listens.
bool TcpTransport::listen(const std::string& host, uint16_t port, std::string* error) {
    try {
        std::vector<ic::SocketAddress> addrs;
        if (!ic::resolve_tcp(host, port, true, &addrs, error)) return false;
        std::string first_error, this_error;
        size_t bound = 0;
        for (const ic::SocketAddress& a : addrs) {
            listeners_.reserve(listeners_.size() + 1);
            const int fd = ic::open_tcp_listener(a, opts_.sndbuf, opts_.rcvbuf, &this_error);
            // While accepting is paused a new listener joins the others at resume.
            if (fd >= 0 && (accept_paused_ || loop_.add(fd, EPOLLIN, tcp_listener_tag(fd)))) {
                listeners_.push_back(fd);
                ++bound;
                continue;
            }
            if (fd >= 0) {
                this_error = ic::sys_error("epoll_ctl", errno);
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
        std::vector<ic::SocketAddress> addrs;
        if (!ic::resolve_tcp(host, port, false, &addrs, error)) return 0;
        id = next_id_++;
        auto owned = std::make_unique<TcpConnection>(id, initial_max_payload_);
        TcpConnection& c = *owned;
        c.target = ic::endpoint_text(host, port);
        c.addrs = std::move(addrs);
        c.deadline =
            std::chrono::steady_clock::now() + std::chrono::milliseconds(opts_.connect_timeout_ms);
        conns_.emplace(id, std::move(owned));
        if (!start_connect_attempt(c)) {
            *error = ic::sys_error("connect to " + c.target + " failed", c.err);
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
        const ic::SocketAddress& a = c.addrs[c.next_addr++];
        const int fd = ic::open_tcp_socket(a.addr.ss_family, opts_.sndbuf, opts_.rcvbuf);
        if (fd < 0) {
            c.err = errno;
            continue;
        }
        int rc;
        do {
            rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&a.addr), a.len);
        } while (rc != 0 && errno == EINTR);
        if ((rc == 0 || errno == EINPROGRESS) && loop_.add(fd, EPOLLOUT, c.id)) {
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
    if (!loop_.modify(c.fd, c.out.empty() ? EPOLLIN : EPOLLIN | EPOLLOUT, c.id)) {
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

// Arms the timer at the earliest connect deadline or the end of an accept
// pause, or disarms it. A connect_timeout_ms <= 0 means no connect timeout of
// our own (the kernel's applies).
void TcpTransport::rearm_timer() {
    std::optional<std::chrono::steady_clock::time_point> when;
    if (opts_.connect_timeout_ms > 0)
        when = earliest_connect_deadline(conns_, TcpConnState::Connecting);
    if (accept_paused_ && (!when || accept_resume_ < *when)) when = accept_resume_;
    loop_.arm_timer(when);
}

std::string TcpTransport::end_text(const TcpConnection& c) const {
    switch (c.cause) {
        case TcpCloseCause::Local:
            return "closed locally";
        case TcpCloseCause::PeerClosed:
            return c.frame_error == ic::FrameError::Truncated
                       ? "peer closed the connection in the middle of a frame"
                       : "peer closed the connection";
        case TcpCloseCause::ReadFailed:
            return ic::sys_error("read failed", c.err);
        case TcpCloseCause::WriteFailed:
            return ic::sys_error("write failed", c.err);
        case TcpCloseCause::BadFrame:
            return std::string("bad frame from peer: ") + ic::frame_error_name(c.frame_error);
        case TcpCloseCause::OutOfMemory:
            return "out of memory";
        case TcpCloseCause::Internal:
            return "internal error (exception in a handler callback)";
        case TcpCloseCause::ConnectFailed:
            return ic::sys_error("connect to " + c.target + " failed", c.err);
        case TcpCloseCause::ConnectTimeout:
            return "connect to " + c.target + " timed out after " +
                   std::to_string(opts_.connect_timeout_ms) + " ms";
    }
    return "closed";
}

// Reports ended connections in ConnId order and forgets them. A connect that
// never completed gets on_connected(false); everything else gets on_closed.
void TcpTransport::deliver_reports() {
    deliver_conn_reports(handler_, conns_, loop_.pending_reports(), [this](TcpConnection& c) {
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
    loop_.run_pass([&] {
        deliver_reports();
        resume_accepting_if_due();
        epoll_event events[kMaxEvents];
        const int n = loop_.wait(events, kMaxEvents, timeout_ms);
        for (int i = 0; i < n; ++i) {
            const uint64_t tag = events[i].data.u64;
            if (tag & kTcpListenerTag)
                accept_ready(static_cast<int>(tag & ~kTcpListenerTag));
            else
                conn_ready(tag, events[i].events);
        }
        expire_connects();
        resume_accepting_if_due();  // the timer woke epoll_wait for it
        deliver_reports();
        rearm_timer();
    });
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
