// TCP tier: accepting inbound connections, and pausing when accept() fails
// for lack of descriptors or memory.
//
// A listening socket with connections in its backlog stays readable, so an
// accept() that keeps failing with EMFILE would have poll() spin at full CPU.
// Instead the listeners leave the epoll set for a back-off period (50 ms,
// doubling to 1 s while the failures go on, back to 50 ms after an accept
// succeeds), the event loop's timer is armed at its end, and the handler is told once
// per episode so the owner can shed connections (e.g. unauthenticated ones).
//
// Not done: the "spare descriptor" trick (keep /dev/null open; on EMFILE close
// it, accept, close the new connection at once, reopen). It sheds one queued
// connection per try and picks it blindly, so a peer node dialing in is as
// likely to be refused as the flood; a refused node then redials on its own
// back-off, while one left in the backlog is simply accepted when descriptors
// come back (its TCP handshake is complete already, so it only waits). The
// spare is also no guarantee: any other thread of the process (libraries
// included) can take the freed descriptor between the close and the accept.
// A full backlog makes the kernel drop further SYNs, which bounds what waits.
#include <algorithm>
#include <cerrno>
#include <sys/socket.h>
#include <unistd.h>

#include "tiers/tcp/transport_impl.hpp"

namespace pgrac::tiers {

namespace {

constexpr int kAcceptsPerEvent = 64;
constexpr int kFirstPauseMs = 50;
constexpr int kMaxPauseMs = 1000;

// accept() errors that say the process or the system is out of a resource,
// not that this one connection failed.
bool out_of_resources(int err) {
    return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

}  // namespace

void TcpTransport::accept_ready(int listen_fd) {
    for (int i = 0; i < kAcceptsPerEvent && !accept_paused_; ++i) {
        sockaddr_storage peer{};
        socklen_t len = sizeof peer;
        const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &len,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            accept_pause_ms_ = 0;  // the episode, if any, is over
            accept_one(fd, peer, len);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (out_of_resources(errno)) pause_accepting(errno);
        return;  // EAGAIN: all taken; anything else: retried next poll
    }
}

// Registers an accepted socket and announces it.
void TcpTransport::accept_one(int fd, const sockaddr_storage& peer, socklen_t len) {
    ic::tune_tcp_socket(fd, opts_.sndbuf, opts_.rcvbuf);
    const ConnId id = next_id_++;
    std::string host;
    try {
        host = ic::numeric_host(reinterpret_cast<const sockaddr*>(&peer), len);
        auto c = std::make_unique<TcpConnection>(id, initial_max_payload_);
        c->fd = fd;
        c->state = TcpConnState::Open;
        conns_.emplace(id, std::move(c));
    } catch (...) {
        ::close(fd);  // never announced, so nothing to report
        return;
    }
    if (!loop_.add(fd, EPOLLIN, id)) {
        ::close(fd);
        conns_.erase(id);
        return;
    }
    try {
        handler_.on_accepted(id, host);
    } catch (...) {
        if (TcpConnection* c = find(id); c != nullptr && c->state != TcpConnState::Closed)
            end(*c, TcpCloseCause::Internal);
    }
}

// Takes every listener out of the epoll set until the pause ends. The handler
// hears of the first pause of an episode only (its exception is poll()'s).
void TcpTransport::pause_accepting(int err) {
    const bool first = accept_pause_ms_ == 0;
    accept_pause_ms_ = first ? kFirstPauseMs : std::min(2 * accept_pause_ms_, kMaxPauseMs);
    accept_paused_ = true;
    accept_resume_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(accept_pause_ms_);
    for (int fd : listeners_) loop_.remove(fd);
    ++counters_.accept_pauses;
    rearm_timer();
    if (first) handler_.on_accept_paused(err, accept_pause_ms_);
}

void TcpTransport::resume_accepting_if_due() {
    if (!accept_paused_ || std::chrono::steady_clock::now() < accept_resume_) return;
    accept_paused_ = false;
    for (int fd : listeners_) {
        if (!loop_.add(fd, EPOLLIN, tcp_listener_tag(fd))) {
            pause_accepting(errno);  // out of memory for the epoll entry: try again later
            return;
        }
    }
}

}  // namespace pgrac::tiers
