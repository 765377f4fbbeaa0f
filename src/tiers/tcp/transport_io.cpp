// TCP tier: the data path. Frames go out with one vectored write when nothing
// is queued, else join the queue that EPOLLOUT drains in batches; frames come
// in through reads straight into the connection's FrameStreamDecoder.
#include <algorithm>
#include <cerrno>
#include <climits>
#include <new>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tiers/tcp/transport_impl.hpp"

namespace pgrac::tiers {

namespace {

// A connection reads in chunks of this, or of one largest frame if smaller:
// a decoder's buffer grows to about two chunks, so connections with a small
// limit (unauthenticated peers) stay small however many there are.
constexpr size_t kReadChunk = 64 * 1024;
constexpr int kReadsPerEvent = 16;  // then other sockets get their turn
constexpr int kMaxIov = IOV_MAX;

// writev() that cannot raise SIGPIPE (PostgreSQL processes do not all ignore it).
// more: more frames follow at once (MSG_MORE: the kernel holds a partial
// segment for them, so that a burst of frames crosses in full segments, one
// transmit and one wakeup of the peer for several).
ssize_t write_vectored(int fd, const iovec* iov, int iovcnt, bool more = false) {
    msghdr msg{};
    msg.msg_iov = const_cast<iovec*>(iov);
    msg.msg_iovlen = static_cast<size_t>(iovcnt);
    ssize_t n;
    do {
        n = sendmsg(fd, &msg, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
    } while (n < 0 && errno == EINTR);
    return n;
}

}  // namespace

bool TcpTransport::send(ConnId conn, const iovec* iov, int iovcnt) {
    return send_kept(conn, iov, iovcnt, nullptr, 0);
}

bool TcpTransport::send_kept(ConnId conn, const iovec* iov, int iovcnt,
                             std::shared_ptr<const uint8_t> kept, size_t kept_len) {
    TcpConnection* c = find(conn);
    if (c == nullptr || c->state == TcpConnState::Closed || iov == nullptr || iovcnt <= 0)
        return false;
    size_t total = 0;
    for (int i = 0; i < iovcnt; ++i) total += iov[i].iov_len;
    // Not a frame this transport may carry: refused, the connection stays usable.
    if (total < ic::kFrameHeaderSize || total > ic::kFrameHeaderSize + max_payload_) return false;

    size_t written = 0;
    if (c->state == TcpConnState::Open && c->out.empty() && iovcnt <= kMaxIov) {
        const ssize_t n = write_vectored(c->fd, iov, iovcnt, more_);
        ++counters_.send_calls;
        if (more_ && !c->held) held_.push_back(c->id);
        c->held = more_;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            end(*c, TcpCloseCause::WriteFailed, errno);
            return false;
        }
        written = n < 0 ? 0 : static_cast<size_t>(n);
        counters_.bytes_sent += written;
        if (written == total) {
            ++counters_.frames_sent;
            return true;
        }
    }
    try {
        if (c->out.push_kept(iov, iovcnt, written, std::move(kept), kept_len))
            ++counters_.queued_by_reference;
    } catch (...) {
        // Part of the frame may be on the wire already: the stream is broken.
        end(*c, TcpCloseCause::OutOfMemory);
        return false;
    }
    if (c->state == TcpConnState::Open) set_epollout(*c, true);
    return true;
}

void TcpTransport::push_more() {
    // Clearing TCP_CORK (never set) pushes what MSG_MORE held, as a write
    // without it would.
    for (ConnId id : held_) {
        TcpConnection* c = find(id);
        if (c == nullptr || !c->held) continue;
        c->held = false;
        if (c->state != TcpConnState::Open) continue;
        const int off = 0;
        (void)setsockopt(c->fd, IPPROTO_TCP, TCP_CORK, &off, sizeof off);
    }
    held_.clear();
}

size_t TcpTransport::queued_bytes(ConnId conn) const {
    const TcpConnection* c = find(conn);
    return c == nullptr ? 0 : c->out.bytes();
}

void TcpTransport::set_max_payload(ConnId conn, uint32_t max_payload) {
    TcpConnection* c = find(conn);
    if (c == nullptr || c->state == TcpConnState::Closed) return;
    c->max_payload = std::min(max_payload, max_payload_);
    c->decoder.set_max_payload(c->max_payload);
}

void TcpTransport::close(ConnId conn) {
    TcpConnection* c = find(conn);
    if (c != nullptr && c->state != TcpConnState::Closed) end(*c, TcpCloseCause::Local);
}

// Closes the socket now; the entry stays (a read loop may still be using its
// decoder) until poll() reports the end.
void TcpTransport::end(TcpConnection& c, TcpCloseCause cause, int err, ic::FrameError fe) {
    if (c.state == TcpConnState::Closed) return;  // the first cause is the one reported
    if (c.fd >= 0) ::close(c.fd);                 // also leaves the epoll set
    c.fd = -1;
    c.state = TcpConnState::Closed;
    c.out.clear();
    c.addrs.clear();
    c.cause = cause;
    c.err = err;
    c.frame_error = fe;
    c.report_pending = true;
    loop_.note_report();
}

void TcpTransport::set_epollout(TcpConnection& c, bool on) {
    if (c.epollout == on) return;
    if (!loop_.modify(c.fd, on ? EPOLLIN | EPOLLOUT : EPOLLIN, c.id)) {
        end(c, TcpCloseCause::WriteFailed, errno);
        return;
    }
    c.epollout = on;
}

void TcpTransport::conn_ready(ConnId id, uint32_t events) {
    TcpConnection* c = find(id);
    if (c == nullptr || c->state == TcpConnState::Closed) return;  // ended earlier in this poll
    try {
        if (c->state == TcpConnState::Connecting) {
            finish_connect(*c);
            return;
        }
        if (events & EPOLLOUT) flush(*c);
        if (c->state == TcpConnState::Open && (events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
            read_ready(*c);
    } catch (const std::bad_alloc&) {
        if (c->state != TcpConnState::Closed) end(*c, TcpCloseCause::OutOfMemory);
    } catch (...) {
        if (c->state != TcpConnState::Closed) end(*c, TcpCloseCause::Internal);
    }
}

void TcpTransport::flush(TcpConnection& c) {
    iovec iov[kMaxIov];
    while (!c.out.empty()) {
        const int cnt = c.out.gather(iov, kMaxIov);
        size_t want = 0;
        for (int i = 0; i < cnt; ++i) want += iov[i].iov_len;
        const ssize_t n = write_vectored(c.fd, iov, cnt);
        ++counters_.send_calls;
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            end(c, TcpCloseCause::WriteFailed, errno);
            return;
        }
        c.held = false;  // a write without MSG_MORE sends what it held
        counters_.bytes_sent += static_cast<size_t>(n);
        counters_.frames_sent += c.out.consume(static_cast<size_t>(n));
        if (static_cast<size_t>(n) < want) break;  // socket buffer full
    }
    set_epollout(c, !c.out.empty());
}

void TcpTransport::read_ready(TcpConnection& c) {
    for (int i = 0; i < kReadsPerEvent; ++i) {
        const size_t chunk = std::min(kReadChunk, ic::kFrameHeaderSize + c.max_payload);
        uint8_t* p = c.decoder.write_ptr(chunk);
        const ssize_t n = recv(c.fd, p, chunk, 0);
        if (n > 0) {
            c.decoder.commit(static_cast<size_t>(n));
            counters_.bytes_recv += static_cast<size_t>(n);
            if (!deliver_frames(c)) return;
            if (static_cast<size_t>(n) < chunk) return;  // drained
            continue;
        }
        if (n == 0) {
            // Every complete frame was taken: what is left is a cut-off one.
            end(c, TcpCloseCause::PeerClosed, 0,
                c.decoder.buffered() > 0 ? ic::FrameError::Truncated : ic::FrameError::None);
            return;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) end(c, TcpCloseCause::ReadFailed, errno);
        return;
    }
}

// Hands every complete frame to the handler. False once the connection ended
// (bad frame, or the handler closed it).
bool TcpTransport::deliver_frames(TcpConnection& c) {
    ic::FrameHeader h;
    const uint8_t* payload = nullptr;
    while (c.state == TcpConnState::Open && c.decoder.next(&h, &payload)) {
        ++counters_.frames_recv;
        handler_.on_frame(c.id, h, payload);
    }
    if (c.state != TcpConnState::Open) return false;
    if (c.decoder.error() != ic::FrameError::None) {
        end(c, TcpCloseCause::BadFrame, 0, c.decoder.error());
        return false;
    }
    return true;
}

}  // namespace pgrac::tiers
