// Engine: connections, handshakes, heartbeats, acks and peer liveness.
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "ic/base/atomics.hpp"
#include "ic/wire/codec.hpp"
#include "ic/engine/engine.hpp"
#include "ic/transport/socket.hpp"

namespace pgrac::ic {

namespace {

constexpr int kMinBackoffMs = 20;
constexpr int kMaxBackoffMs = 1000;
// u8 kind, 3 pad, u32 epoch, u64 timestamp (the ping's send time), then the
// membership gossip (ic/membership/membership.hpp).
constexpr size_t kHeartbeatHead = 16;
constexpr size_t kHeartbeatMinSize = kHeartbeatHead + kGossipFixedSize;
constexpr size_t kHeartbeatMaxSize = kHeartbeatHead + kGossipMaxSize;
constexpr uint8_t kHeartbeatPing = 0;
constexpr uint8_t kHeartbeatPong = 1;

// Numeric forms of a configured host, to check where a peer connects from.
std::vector<std::string> resolve_numeric(const std::string& host) {
    std::vector<std::string> out;
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
        char buf[NI_MAXHOST];
        if (getnameinfo(ai->ai_addr, ai->ai_addrlen, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) ==
            0)
            out.emplace_back(buf);
    }
    freeaddrinfo(res);
    return out;
}

std::string strip_v4_mapped(const std::string& a) {
    return a.rfind("::ffff:", 0) == 0 && a.find('.') != std::string::npos ? a.substr(7) : a;
}

ErrorType error_type_for(RejectReason r) {
    switch (r) {
        case RejectReason::VersionMismatch:
            return ErrorType::VersionMismatch;
        case RejectReason::ClusterMismatch:
            return ErrorType::ClusterMismatch;
        case RejectReason::SystemMismatch:
            return ErrorType::SystemMismatch;
        case RejectReason::UnknownNode:
        case RejectReason::SelfConnect:
            return ErrorType::UnknownNode;
        case RejectReason::AddressMismatch:
            return ErrorType::AddressMismatch;
        case RejectReason::WrongKey:
            return ErrorType::WrongKey;
        case RejectReason::ShuttingDown:
            return ErrorType::PeerDown;
        case RejectReason::LimitMismatch:
            return ErrorType::LimitMismatch;
        case RejectReason::DuplicateNode:
            return ErrorType::DuplicateNode;
        case RejectReason::Busy:
            return ErrorType::Busy;
        case RejectReason::ConfigMismatch:
            return ErrorType::ConfigMismatch;
        default:
            return ErrorType::HandshakeFailed;
    }
}

// Longest a connection may take to authenticate.
int handshake_timeout_ms(int peer_timeout_ms) {
    return std::min(peer_timeout_ms, 10000);
}

}  // namespace

bool Engine::start(std::string* error) {
    const NodeAddress* me = find_node(cfg_.nodes, cfg_.identity.node_id);
    if (me == nullptr) {
        *error = "cluster.node_id " + std::to_string(cfg_.identity.node_id) +
                 " is not listed in cluster.nodes";
        return false;
    }
    for (Peer& p : peers_) {
        p.numeric_hosts = resolve_numeric(p.addr.host);
        for (auto& h : p.numeric_hosts) h = strip_v4_mapped(h);
    }
    if (!transport_->listen(me->host, me->port, error)) return false;
    // A previous listener of this instance (it failed and was restarted) died
    // with frames sent and not acknowledged; its sessions died with it, so
    // those frames will never be acked: give their room back to the senders.
    for (const NodeAddress& n : cfg_.nodes) {
        PeerShared& ps = shm_->peers[n.node_id - 1];
        release_queued(n.node_id, ps.unacked_msgs, ps.unacked_bytes);
        store_relaxed(&ps.unacked_msgs, uint64_t{0});
        store_relaxed(&ps.unacked_bytes, uint64_t{0});
        store_relaxed(&ps.requester_lanes, 0u);  // a dead listener's lanes are gone
    }
    const int64_t t = unix_time_us();
    for (const NodeAddress& n : cfg_.nodes) {
        PeerShared& ps = shm_->peers[n.node_id - 1];
        if (n.node_id == cfg_.identity.node_id) {
            store_relaxed(&ps.state, static_cast<uint32_t>(PeerState::Up));
            ps.incarnation = cfg_.identity.incarnation;
        } else {
            store_relaxed(&ps.state, static_cast<uint32_t>(PeerState::Down));
            ps.lanes_total = static_cast<uint32_t>(1 + cfg_.bulk_lanes);
        }
        ps.state_since_us = t;
    }
    store_release(&shm_->listener_ready, 1u);
    next_timer_us_ = now_us();
    return true;
}

void Engine::shutdown() {
    abandon_sealed_reply();  // the owner is leaving mid-reply: nothing of it is sent
    shutting_down_ = true;
    store_release(&shm_->listener_ready, 0u);
    // Accepted messages held for the owner are served by the LMS workers:
    // their inboxes outlive this process.
    hand_all_to_lms(~0u);
    drain_overflow();
    std::vector<ic::ConnId> ids;
    for (auto& [id, c] : conns_) ids.push_back(id);
    for (auto id : ids) close_conn(id);
    for (Peer& p : peers_) {
        fail_outstanding(p.addr.node_id, PGRAC_IC_NOT_RUNNING);
        set_state(p, PeerState::Disconnecting);
    }
    transport_->poll(0);
    wake_processes();
}

// ---- timers

void Engine::run_timers(int64_t now) {
    membership_tick(now);
    int64_t next = now + 1000 * std::min(cfg_.heartbeat_interval_ms, 100);
    for (Peer& p : peers_) {
        for (size_t i = 0; i < p.lanes.size(); i++) {
            Lane& l = p.lanes[i];
            if (p.dialer && l.conn == 0 && !shutting_down_) {
                if (now >= l.next_dial_us) dial(p, static_cast<int>(i), now);
                if (l.conn == 0) next = std::min(next, l.next_dial_us);
            }
        }
        if (p.state == PeerState::Up && now >= p.next_heartbeat_us) {
            send_heartbeat(p, kHeartbeatPing, boottime_ns());
            p.next_heartbeat_us = now + 1000 * int64_t{membership_.ping_interval_ms()};
        }
        if (p.state == PeerState::Up) next = std::min(next, p.next_heartbeat_us);
        if (p.hold_until_us != 0) {
            if (now >= p.hold_until_us) {
                p.hold_until_us = 0;
                transmit_held(p, now);
            } else {
                next = std::min(next, p.hold_until_us);
            }
        }
        if ((p.state == PeerState::Up || p.state == PeerState::Connecting)) {
            const int64_t deadline = p.last_heard_us + 1000 * cfg_.peer_timeout_ms;
            if (now >= deadline)
                declare_down(p, "no message for " + std::to_string(cfg_.peer_timeout_ms) +
                                    " ms (cluster.peer_timeout)");
            else
                next = std::min(next, deadline);
        }
    }
    std::vector<ic::ConnId> expired;
    for (auto& [id, c] : conns_) {
        if (c.established) continue;
        if (now >= c.deadline_us)
            expired.push_back(id);
        else
            next = std::min(next, c.deadline_us);
    }
    for (auto id : expired) {
        Conn& c = conns_[id];
        std::string who = c.peer >= 0 ? "node " + std::to_string(peers_[c.peer].addr.node_id)
                                      : "address " + c.peer_host;
        const std::string text = "handshake with " + who + " timed out after " +
                                 std::to_string(handshake_timeout_ms(cfg_.peer_timeout_ms)) + " ms";
        const int node = c.peer >= 0 ? peers_[c.peer].addr.node_id : -1;
        if (c.dialer)
            report(ErrorType::HandshakeFailed, Severity::Warning, node, text);
        else
            report_throttled(ErrorType::HandshakeFailed, Severity::Warning, node, text);
        close_conn(id);
    }
    flush_acks(now);
    for (const Peer& p : peers_)
        for (const Lane& l : p.lanes)
            if (l.ack_due_since_us != 0)
                next = std::min(next, l.ack_due_since_us + cfg_.ack_delay_us);
    next_timer_us_ = next;
}

void Engine::dial(Peer& p, int lane, int64_t now) {
    std::string err;
    ic::ConnId id = transport_->connect(p.addr.host, p.addr.port, &err);
    Lane& l = p.lanes[lane];
    if (id == 0) {
        report_connect_failure(p, l, err);
        schedule_redial(l, now);
        return;
    }
    Conn c;
    c.peer = static_cast<int>(&p - peers_.data());
    c.lane = static_cast<uint8_t>(lane);
    c.dialer = true;
    c.peer_host = p.addr.host;
    c.handshake = std::make_unique<Handshake>(Handshake::Role::Dialer, cfg_.identity, *this,
                                              p.addr.node_id, p.addr.host, c.lane);
    c.deadline_us = now + 1000 * handshake_timeout_ms(cfg_.peer_timeout_ms);
    conns_.emplace(id, std::move(c));
    l.conn = id;
}

// Once per run of failures on a lane (a peer that is down would fill the
// error ring otherwise); a successful handshake re-arms it.
void Engine::report_connect_failure(Peer& p, Lane& l, const std::string& why) {
    if (l.failure_logged) return;
    l.failure_logged = true;
    report(ErrorType::ConnectFailed, Severity::Warning, p.addr.node_id,
           "cannot connect to node " + std::to_string(p.addr.node_id) + " at " +
               ic::endpoint_text(p.addr.host, p.addr.port) + ": " + why);
}

void Engine::schedule_redial(Lane& l, int64_t now) {
    l.backoff_ms =
        std::clamp(l.backoff_ms * 2, kMinBackoffMs,
                   std::min(kMaxBackoffMs, std::max(kMinBackoffMs, cfg_.heartbeat_interval_ms)));
    l.next_dial_us = now + 1000 * l.backoff_ms;
}

// ---- transport callbacks

void Engine::on_connected(ic::ConnId id, bool ok, const std::string& error) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    Conn& c = it->second;
    Peer& p = peers_[c.peer];
    Lane& l = p.lanes[c.lane];
    if (!ok) {
        report_connect_failure(p, l, error);
        // The transport reports a failed connect only here (no on_closed):
        // forget the attempt and dial again after the backoff.
        conns_.erase(it);
        if (l.conn == id) {
            l.conn = 0;
            l.up = false;
            schedule_redial(l, now_us());
            next_timer_us_ = std::min(next_timer_us_, l.next_dial_us);
        }
        update_state(p);
        return;
    }
    send_handshake(id, c.handshake->start());
}

void Engine::on_accepted(ic::ConnId id, const std::string& peer_host) {
    if (unauthenticated_conns() >= cfg_.max_unauthenticated) {
        // Room for the newcomer: the oldest connection still authenticating
        // goes. Whoever holds idle connections open only churns through its
        // own, while a peer with the key finishes its handshake in a round
        // trip, long before enough newer connections arrive to push it out.
        ic::ConnId oldest = 0;
        int64_t oldest_deadline = 0;
        for (const auto& [cid, c] : conns_)
            if (!c.established && !c.dialer && (oldest == 0 || c.deadline_us < oldest_deadline)) {
                oldest = cid;
                oldest_deadline = c.deadline_us;
            }
        report_throttled(
            ErrorType::UnauthenticatedLimit, Severity::Warning, -1,
            "connection from " + conns_[oldest].peer_host +
                " closed before it authenticated: " + std::to_string(cfg_.max_unauthenticated) +
                " newer connections are authenticating "
                "(cluster.max_unauthenticated)");
        close_conn(oldest);
        conns_.erase(oldest);  // gone now: its close report finds nothing to do
    }
    Conn c;
    c.peer_host = strip_v4_mapped(peer_host);
    c.handshake = std::make_unique<Handshake>(Handshake::Role::Acceptor, cfg_.identity, *this, 0,
                                              c.peer_host);
    c.deadline_us = now_us() + 1000 * handshake_timeout_ms(cfg_.peer_timeout_ms);
    conns_.emplace(id, std::move(c));
    next_timer_us_ = std::min(next_timer_us_, conns_[id].deadline_us);
}

int Engine::unauthenticated_conns() const {
    int n = 0;
    for (const auto& [id, c] : conns_) n += !c.established && !c.dialer ? 1 : 0;
    return n;
}

void Engine::on_accept_paused(int err, int pause_ms) {
    report_throttled(ErrorType::AcceptPaused, Severity::Warning, -1,
                     std::string("cannot accept connections: ") + std::strerror(err) +
                         "; not accepting for " + std::to_string(pause_ms) +
                         " ms (raise the open-file limit, LimitNOFILE, or lower "
                         "cluster.max_unauthenticated)");
}

void Engine::on_frame(ic::ConnId id, const FrameHeader& h, const uint8_t* payload) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    Conn& c = it->second;
    work_++;
    if (!c.established) {
        handshake_frame(id, c, h, payload);
        return;
    }
    Peer& p = peers_[c.peer];
    // The guard first: nothing of a frame is believed before its tag verifies.
    FrameHeader ph = h;
    if (!c.guard->open(h, payload, &payload, &ph.payload_len)) {
        drop_conn(id, p, ErrorType::FrameAuthFailed,
                  std::string(frame_type_name(h.type)) + " frame " +
                      std::to_string(c.guard->frames_opened() + 1) + " from node " +
                      std::to_string(p.addr.node_id) +
                      " failed its authentication tag (forged, altered, replayed or reordered)");
        return;
    }
    if (ph.src_node != p.addr.node_id) {
        drop_conn(id, p, ErrorType::MalformedFrame,
                  "frame claims source node " + std::to_string(h.src_node) +
                      " on the connection of node " + std::to_string(p.addr.node_id));
        return;
    }
    if (ph.type == FrameType::Message && ph.payload_len < kMessageHeaderSize) {
        drop_conn(id, p, ErrorType::MalformedFrame,
                  "message of " + std::to_string(ph.payload_len) + " bytes from node " +
                      std::to_string(p.addr.node_id) + " is shorter than its header");
        return;
    }
    if (c.requester) {
        on_requester_frame(id, c, p, ph, payload);
        return;
    }
    Lane& l = p.lanes[c.lane];
    if (seq_after(ph.ack, l.session.last_sent())) {
        drop_conn(id, p, ErrorType::MalformedFrame,
                  "node " + std::to_string(p.addr.node_id) + " acknowledged seq " +
                      std::to_string(ph.ack) + " on lane " + std::to_string(c.lane) +
                      ", beyond the last one sent (" + std::to_string(l.session.last_sent()) + ")");
        return;
    }
    p.last_heard_us = now_us();
    membership_.on_heard(p.addr.node_id, p.last_heard_us);
    store_relaxed(&p.shm->last_heard_us, unix_time_us());
    on_ack(p, l, ph.ack);
    switch (ph.type) {
        case FrameType::Message:
            on_message(p, c.lane, id, ph, payload);
            break;
        case FrameType::Heartbeat:
            if (c.lane != 0) {
                drop_conn(id, p, ErrorType::MalformedFrame,
                          "heartbeat from node " + std::to_string(p.addr.node_id) + " on lane " +
                              std::to_string(c.lane) + " (heartbeats use the control lane)");
                break;
            }
            on_heartbeat(p, ph, payload);
            break;
        case FrameType::Ack:
            break;
        case FrameType::Backoff:
            on_backoff(p, ph, payload);
            break;
        case FrameType::Reject:
            report(ErrorType::PeerDown, Severity::Warning, p.addr.node_id,
                   "node " + std::to_string(p.addr.node_id) + " closed the session");
            close_conn(id);
            break;
        default:
            drop_conn(id, p, ErrorType::MalformedFrame,
                      std::string("unexpected ") + frame_type_name(h.type) + " frame from node " +
                          std::to_string(p.addr.node_id) + " after the handshake");
    }
}

void Engine::on_closed(ic::ConnId id, const std::string& reason, FrameError err) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    Conn c = std::move(it->second);
    conns_.erase(it);
    const int node = c.peer >= 0 ? peers_[c.peer].addr.node_id : -1;
    if (err != FrameError::None) {
        ErrorType t = err == FrameError::BadChecksum       ? ErrorType::BadChecksum
                      : err == FrameError::PayloadTooLarge ? ErrorType::OversizedMessage
                                                           : ErrorType::MalformedFrame;
        const std::string text =
            std::string("dropped connection from ") +
            (c.established ? "node " + std::to_string(node) : "address " + c.peer_host) + ": " +
            frame_error_name(err) + " (" + reason + ")";
        if (c.established || c.dialer)
            report(t, Severity::Error, node, text);
        else
            report_throttled(t, Severity::Error, -1, text);
    }
    if (c.peer < 0) return;
    Peer& p = peers_[c.peer];
    if (c.requester) {
        __atomic_fetch_sub(&p.shm->requester_lanes, 1u, __ATOMIC_RELAXED);
        forget_requester_lane(id);
        return;
    }
    Lane& l = p.lanes[c.lane];
    if (l.conn != id) return;  // an older connection that was replaced
    const bool was_up = l.up;
    l.conn = 0;
    l.up = false;
    if (was_up && !shutting_down_)
        host_.log(Severity::Warning, "connection to node " + std::to_string(p.addr.node_id) +
                                         " lane " + std::to_string(c.lane) + " lost: " + reason);
    if (p.dialer) schedule_redial(l, now_us());
    update_state(p);
}

// ---- handshake

void Engine::handshake_frame(ic::ConnId id, Conn& c, const FrameHeader& h, const uint8_t* payload) {
    if (h.type < FrameType::Hello || h.type > FrameType::Reject) {
        report(ErrorType::HandshakeFailed, Severity::Error,
               c.peer >= 0 ? peers_[c.peer].addr.node_id : -1,
               "frame type " + std::to_string(static_cast<int>(h.type)) + " from " + c.peer_host +
                   " before authentication; connection dropped");
        close_conn(id);
        return;
    }
    std::vector<HandshakeOutput> out;
    c.handshake->on_frame(h.type, h.src_node, payload, h.payload_len, &out);
    send_handshake(id, out);
    if (c.handshake->failed()) {
        handshake_failed(id, c);
    } else if (c.handshake->done()) {
        establish(id, c);
    }
}

void Engine::send_handshake(ic::ConnId id, const std::vector<HandshakeOutput>& out) {
    for (const HandshakeOutput& o : out)
        send_control(id, nullptr, o.type, 0, o.payload.data(),
                     static_cast<uint32_t>(o.payload.size()));
}

void Engine::handshake_failed(ic::ConnId id, Conn& c) {
    const Handshake& hs = *c.handshake;
    note_config_refusal(hs);
    // A requester lane refused because of state (the node is not UP here yet,
    // the lane limit, another instance) is routine: the requester takes the
    // listener path and tries again later. Counted, and logged as a note
    // (busy) or a warning (duplicate_node: an instance we do not know holds
    // the key), throttled: every backend of that node may be refused so.
    if (!c.dialer && hs.lane() == kRequesterLane &&
        (hs.reject_reason() == RejectReason::Busy ||
         hs.reject_reason() == RejectReason::DuplicateNode)) {
        const bool busy = hs.reject_reason() == RejectReason::Busy;
        report_throttled(error_type_for(hs.reject_reason()),
                         busy ? Severity::Info : Severity::Warning, -1,
                         "refused requester lane from " + c.peer_host + ": " + hs.error_text() +
                             (busy ? " (its node is not UP here, or has " +
                                         std::to_string(kMaxRequesterLanes) + " lanes already)"
                                   : std::string()));
        close_conn(id);
        return;
    }
    int node = c.peer >= 0 ? peers_[c.peer].addr.node_id : -1;
    const std::string text =
        (hs.rejected_by_peer() ? "" : "refused connection from " + c.peer_host + ": ") +
        hs.error_text();
    // Anyone can open a connection and fail a handshake: the acceptor's
    // refusals are throttled in the log (and all counted), the dialer's are
    // throttled by its backoff.
    if (c.dialer)
        report(error_type_for(hs.reject_reason()), Severity::Error, node, text);
    else
        report_throttled(error_type_for(hs.reject_reason()), Severity::Error, -1, text);
    if (c.dialer && c.peer >= 0) {
        Peer& p = peers_[c.peer];
        if (p.state == PeerState::Down) set_state(p, PeerState::Error);
        p.lanes[c.lane].backoff_ms = kMaxBackoffMs;
    }
    close_conn(id);
}

void Engine::establish(ic::ConnId id, Conn& c) {
    const PeerIdentity pid = c.handshake->peer();
    Peer* pp = peer_by_node(pid.node_id);
    if (pp != nullptr && pid.lane == kRequesterLane) {
        establish_requester(id, c, *pp, pid);
        return;
    }
    if (pp == nullptr || pid.lane >= pp->lanes.size()) {  // check_peer() let it through
        report(ErrorType::Internal, Severity::Error, pid.node_id,
               "handshake completed for node " + std::to_string(pid.node_id) + " lane " +
                   std::to_string(pid.lane) + ", which is not configured");
        close_conn(id);
        return;
    }
    Peer& p = *pp;
    Lane& l = p.lanes[pid.lane];
    if (pid.offered_session != l.session_id) {
        // Another connection of this lane changed the session while this one
        // authenticated: what it agreed is stale. The next handshake settles it.
        host_.log(Severity::Warning, "node " + std::to_string(pid.node_id) + " lane " +
                                         std::to_string(pid.lane) +
                                         ": the session changed while this connection "
                                         "authenticated (offered " +
                                         std::to_string(pid.offered_session) + ", now " +
                                         std::to_string(l.session_id) + "); reconnecting");
        close_conn(id);
        return;
    }
    c.peer = static_cast<int>(pp - peers_.data());
    c.lane = pid.lane;
    c.established = true;
    c.guard = std::make_unique<FrameGuard>(pid.protection, pid.keys, cfg_.rekey_interval);
    c.handshake.reset();
    // Authenticated: frames up to one full message (and its tag) from now on.
    transport_->set_max_payload(
        id, static_cast<uint32_t>(kMessageHeaderSize + cfg_.identity.max_message + kFrameTagSize));
    if (l.conn != 0 && l.conn != id) close_conn(l.conn);  // the peer reconnected
    if (membership_.owner(pid.node_id) != pid.instance) {
        if (membership_.owner(pid.node_id) != 0)
            report(ErrorType::DuplicateNode, Severity::Warning, pid.node_id,
                   "node " + std::to_string(pid.node_id) + " is now instance " +
                       std::to_string(pid.instance) + " (connected from " + c.peer_host +
                       "), no longer instance " + std::to_string(membership_.owner(pid.node_id)) +
                       (p.owner_host.empty() ? "" : " (connected from " + p.owner_host + ")"));
        membership_.set_owner(pid.node_id, pid.instance, pid.location);
        store_relaxed(&p.shm->instance, pid.instance);
    }
    p.owner_host = c.dialer ? p.addr.host + ":" + std::to_string(p.addr.port) : c.peer_host;
    if (p.shm->config_mismatch[0] != '\0') set_config_mismatch(p, "");
    if (p.incarnation != 0 && p.incarnation != pid.incarnation)
        peer_restarted(p, pid.incarnation, id, pid.lane);
    p.incarnation = pid.incarnation;
    p.shm->incarnation = pid.incarnation;
    uint32_t peer_has = pid.last_seq_received;
    if (pid.new_session) {
        // Both sides decided this from the same transcript: both start again.
        // A lane that never had a session (we offered 0) is new already: it
        // has sent and received nothing, and the messages queued on it are
        // numbered from 1, as the peer now expects. Dropping them would lose
        // them (the peer may have taken a handshake whose AuthOk never
        // reached us, and so offered a session we never had).
        if (l.session_id != 0) reset_lane(p, l, pid.lane);
        peer_has = 0;
    }
    l.session_id = pid.session_id;
    if (pid.lane == 0)
        store_relaxed(&p.shm->wire_protection, static_cast<uint32_t>(pid.protection) + 1);
    if (seq_after(peer_has, l.session.last_sent())) {
        // Same session on both sides, yet it claims more than we ever sent.
        drop_conn(id, p, ErrorType::MalformedFrame,
                  "node " + std::to_string(p.addr.node_id) + " claims to have received seq " +
                      std::to_string(peer_has) + " on lane " + std::to_string(pid.lane) +
                      ", beyond the last one sent (" + std::to_string(l.session.last_sent()) + ")");
        return;
    }
    if (l.ever_up) count(&p.shm->reconnects);
    l.conn = id;
    l.up = true;
    l.ever_up = true;
    l.failure_logged = false;
    l.backoff_ms = 0;
    p.last_heard_us = now_us();
    // Resend, in order, what the peer has not received: frames it had been
    // sent count as retransmits, frames held back (backoff, lane down) as firsts.
    on_ack(p, l, peer_has);  // what it has is acked (and accounted)
    const uint32_t was_transmitted = l.transmitted;
    l.transmitted = peer_has;
    void_abandoned_requests(p);   // callers that gave up meanwhile (timeout)
    transmit_after(l, peer_has);  // l.conn is id by now
    if (seq_after(was_transmitted, peer_has)) {
        const uint32_t upto =
            seq_after(l.transmitted, was_transmitted) ? was_transmitted : l.transmitted;
        count<uint64_t>(&p.shm->retransmits, upto - peer_has);
    }
    update_state(p);
}

LaneState Engine::lane_state(uint16_t node_id, uint8_t lane) {
    Peer* p = peer_by_node(node_id);
    if (p == nullptr || lane >= p->lanes.size()) return {};
    const Lane& l = p->lanes[lane];
    return LaneState{l.session_id, l.session.last_received()};
}

RejectReason Engine::check_peer(uint16_t node_id, const std::string& peer_address, uint8_t lane) {
    Peer* p = peer_by_node(node_id);
    if (p == nullptr) return RejectReason::UnknownNode;
    const std::string addr = strip_v4_mapped(peer_address);
    bool known = false;
    for (const std::string& h : p->numeric_hosts) known = known || h == addr;
    if (!known) return RejectReason::AddressMismatch;
    if (lane == kRequesterLane) {  // a backend's own: either side may dial
        if (shutting_down_) return RejectReason::ShuttingDown;
        // Refused before anything is authenticated, so that the requester
        // knows nothing was sent and takes the listener path.
        if (p->state != PeerState::Up) return RejectReason::Busy;
        if (requester_lanes(static_cast<int>(p - peers_.data())) >= kMaxRequesterLanes)
            return RejectReason::Busy;
        return RejectReason::None;
    }
    if (p->dialer) return RejectReason::WrongDirection;  // we dial it: one connection per lane
    if (lane >= p->lanes.size()) return RejectReason::UnknownLane;
    if (shutting_down_) return RejectReason::ShuttingDown;
    return RejectReason::None;
}

// One instance per node id (Membership::claim_verdict, docs/ges.md "One
// instance per node id"): the instance a view of ours binds keeps the id; among
// the others the older wins while it is alive. Another incarnation of the same
// instance is its listener restarted: admitted once its old lanes are gone
// (one connection per lane).
RejectReason Engine::admit(uint16_t node_id, uint64_t incarnation, uint64_t instance,
                           uint64_t location, uint8_t lane, std::string* why) {
    Peer* p = peer_by_node(node_id);
    if (p == nullptr) return RejectReason::UnknownNode;
    if (lane == kRequesterLane) return admit_requester(*p, incarnation, why);
    int up = 0;
    for (const Lane& l : p->lanes) up += l.up ? 1 : 0;
    const uint64_t owner = membership_.owner(node_id);
    if (owner == instance || owner == 0) {
        if (p->incarnation == 0 || p->incarnation == incarnation || up == 0)
            return RejectReason::None;
        *why = "node " + std::to_string(node_id) + " is connected as incarnation " +
               std::to_string(p->incarnation) + " (" + std::to_string(up) +
               " lanes up); incarnation " + std::to_string(incarnation) +
               " of the same instance is refused until those lanes close";
        return RejectReason::DuplicateNode;
    }
    std::string reason;
    const ClaimVerdict v =
        membership_.claim_verdict(node_id, instance, location, up > 0, now_us(), &reason);
    if (v != ClaimVerdict::Refuse) return RejectReason::None;
    *why = "are two instances configured with cluster.node_id = " + std::to_string(node_id) + "? " +
           reason + ", at " + (p->owner_host.empty() ? p->addr.host : p->owner_host);
    count(&p->shm->duplicate_refusals);
    return RejectReason::DuplicateNode;
}

// A refusal for settings that differ, either way, is kept on the peer's row
// of pg_cluster_ic_peers (config_mismatch, config_refusals) until a handshake
// with it succeeds: ours once the peer proved the key, or the peer's Reject
// (its detail names the settings, in words that hold on both sides).
void Engine::note_config_refusal(const Handshake& hs) {
    if (hs.reject_reason() != RejectReason::ConfigMismatch) return;
    if (!hs.peer_authenticated() && !hs.rejected_by_peer()) return;
    Peer* p = peer_by_node(hs.claimed_node());
    if (p == nullptr) return;
    count(&p->shm->config_refusals);
    set_config_mismatch(*p, hs.error_text());
}

void Engine::set_config_mismatch(Peer& p, const std::string& text) {
    char* out = p.shm->config_mismatch;
    const size_t cap = sizeof p.shm->config_mismatch;
    for (size_t b = 0; b < cap; b++)
        store_relaxed(&out[b], b < text.size() && b + 1 < cap ? text[b] : '\0');
}

// ---- control frames, heartbeats, acks

void Engine::send_control(ic::ConnId conn, Lane* lane, FrameType type, uint16_t flags,
                          const uint8_t* payload, uint32_t len) {
    FrameHeader h;
    h.type = type;
    h.flags = flags;
    h.src_node = cfg_.identity.node_id;
    h.payload_len = len;
    h.ack = lane != nullptr ? lane->session.last_received() : 0;
    if (!send_frame(conn, h, payload)) {
        close_conn(conn);
        return;
    }
    if (lane != nullptr) {
        lane->session.ack_sent(h.ack);
        lane->ack_due_since_us = 0;
    }
}

void Engine::send_heartbeat(Peer& p, uint8_t kind, uint64_t ts_ns) {
    Lane& l = p.lanes[0];
    if (!l.up) return;
    uint8_t b[kHeartbeatMaxSize] = {};
    b[0] = kind;
    const uint32_t epoch = load_relaxed(&shm_->epoch);
    codec::store_le(b + 4, epoch);
    codec::store_le(b + 8, ts_ns);
    Gossip g = membership_.gossip();
    // A pong counts toward the pinger's lease only from within our accepted view.
    if (kind == kHeartbeatPong && membership_.echo_for(p.addr.node_id, now_us()))
        g.flags |= kGossipInView;
    encode_gossip(g, b + kHeartbeatHead);
    send_control(l.conn, &l, FrameType::Heartbeat, kFlagControlLane, b,
                 static_cast<uint32_t>(kHeartbeatHead + gossip_size(g)));
}

void Engine::on_heartbeat(Peer& p, const FrameHeader& h, const uint8_t* payload) {
    if (h.payload_len < kHeartbeatMinSize || h.payload_len > kHeartbeatMaxSize) {
        drop_conn(p.lanes[0].conn, p, ErrorType::MalformedFrame,
                  "heartbeat of " + std::to_string(h.payload_len) + " bytes from node " +
                      std::to_string(p.addr.node_id) + " (expected " +
                      std::to_string(kHeartbeatMinSize) + " to " +
                      std::to_string(kHeartbeatMaxSize) + ")");
        return;
    }
    const auto epoch = codec::load_le<uint32_t>(payload + 4);
    const auto ts = codec::load_le<uint64_t>(payload + 8);
    Gossip g;
    if (payload[0] > kHeartbeatPong ||
        !decode_gossip(payload + kHeartbeatHead, h.payload_len - kHeartbeatHead,
                       membership_.configured(), &g)) {
        report(ErrorType::MalformedFrame, Severity::Warning, p.addr.node_id,
               "heartbeat with a malformed membership part from node " +
                   std::to_string(p.addr.node_id) + " ignored");
        return;
    }
    store_relaxed(&p.shm->epoch_seen, epoch);
    store_relaxed(&p.shm->peer_timeout_ms, g.peer_timeout_ms);
    store_relaxed(&p.shm->heartbeat_interval_ms, g.heartbeat_interval_ms);
    const int64_t now_mono = now_us();
    if (payload[0] == kHeartbeatPing) {
        membership_.on_gossip(p.addr.node_id, g, now_mono);
        send_heartbeat(p, kHeartbeatPong, ts);
    } else {
        const uint64_t now = boottime_ns();
        if (now > ts) store_relaxed(&p.shm->rtt_ns, now - ts);
        // Gossip first: the echo is good for the timeout the pong carries.
        membership_.on_gossip(p.addr.node_id, g, now_mono);
        membership_.on_echo(p.addr.node_id, static_cast<int64_t>(ts / 1000),
                            (g.flags & kGossipInView) != 0, now_mono);
    }
    membership_tick(now_mono);
}

void Engine::membership_tick(int64_t now) {
    const bool changed = membership_.tick(now);
    for (const std::string& line : membership_.take_logs()) host_.log(Severity::Info, line);
    // Counted too (pg_cluster_rdma_error_totals): a fence as fenced, every
    // other change of this node's view as membership_change.
    for (const auto& [node, text] : membership_.take_drift())
        report(ErrorType::ConfigDrift, Severity::Warning, node, "config_drift: " + text);
    for (const auto& [event, text] : membership_.take_events()) {
        const bool fenced = event == MembershipEvent::Fenced;
        shm_->errors.add(fenced ? ErrorType::Fenced : ErrorType::MembershipChange,
                         fenced ? Severity::Error : Severity::Info, 0, unix_time_us(),
                         text.c_str());
    }
    const uint32_t epoch = membership_.committed().epoch;
    const uint64_t lease = lease_word(&shm_->membership);
    if (epoch != load_relaxed(&shm_->epoch) || lease_fences(lease) != fences_seen_) {
        // GES follows the committed view and the lease: wake every LMS worker.
        store_release(&shm_->epoch, epoch);
        fences_seen_ = lease_fences(lease);
        for (uint32_t w = 0; w < shm_->n_lms; w++) host_.wake_lms(w);
    }
    if (!changed) return;
    // Tell everyone now rather than at the next heartbeat: proposals, votes
    // and commits then take one round trip each.
    for (Peer& p : peers_)
        if (p.state == PeerState::Up) send_heartbeat(p, kHeartbeatPing, boottime_ns());
}

void Engine::on_ack(Peer& p, Lane& l, uint32_t ack) {
    const size_t bytes_before = l.session.unacked_bytes();
    const size_t freed = l.session.on_ack(ack);
    if (freed == 0) return;
    const size_t bytes = bytes_before - l.session.unacked_bytes();
    __atomic_fetch_sub(&p.shm->unacked_msgs, static_cast<uint64_t>(freed), __ATOMIC_RELAXED);
    __atomic_fetch_sub(&p.shm->unacked_bytes, static_cast<uint64_t>(bytes), __ATOMIC_RELAXED);
    release_queued(p.addr.node_id, freed, bytes);
}

void Engine::flush_acks(int64_t now) {
    for (Peer& p : peers_) {
        for (Lane& l : p.lanes) {
            if (!l.up || !l.session.ack_due()) {
                l.ack_due_since_us = 0;
                continue;
            }
            if (l.ack_due_since_us != 0 && now - l.ack_due_since_us >= cfg_.ack_delay_us)
                send_control(l.conn, &l, FrameType::Ack, 0, nullptr, 0);
        }
    }
}

// ---- peer state

void Engine::declare_down(Peer& p, const std::string& why) {
    report(ErrorType::PeerDown, Severity::Warning, p.addr.node_id,
           "node " + std::to_string(p.addr.node_id) + " is DOWN: " + why);
    for (Lane& l : p.lanes)
        if (l.conn != 0) close_conn(l.conn);
    close_requester_lanes(static_cast<int>(&p - peers_.data()));
    forget_requests_of(p.addr.node_id, false);
    fail_outstanding(p.addr.node_id, PGRAC_IC_UNREACHABLE);
    // Their callers were told they failed: if the peer comes back, they must not run.
    void_abandoned_requests(p);
    set_state(p, PeerState::Down);
}

void Engine::peer_restarted(Peer& p, uint64_t new_incarnation, ic::ConnId keep, uint8_t lane) {
    report(ErrorType::PeerReset, Severity::Warning, p.addr.node_id,
           "node " + std::to_string(p.addr.node_id) + " restarted (incarnation " +
               std::to_string(p.incarnation) + " -> " + std::to_string(new_incarnation) +
               "); its sessions are reset and requests in flight to it fail");
    // Lanes still connected to the old incarnation are stale; each starts a
    // new session in its next handshake (the new instance offers none).
    for (Lane& l : p.lanes)
        if (l.up && l.conn != keep) close_conn(l.conn);
    // Its processes' requests are numbered afresh (a new shared memory).
    close_requester_lanes(static_cast<int>(&p - peers_.data()));
    forget_requests_of(p.addr.node_id, true);
    // The other lanes' sessions were with the old instance, which is gone:
    // they start again now, not at their own handshake, so that what is
    // queued on them from now on (after the peer is seen UP again) is for the
    // new instance and is kept. The new instance has no session on any lane,
    // and neither have we now: their handshakes drop nothing.
    for (size_t i = 0; i < p.lanes.size(); i++) {
        Lane& l = p.lanes[i];
        if (i == lane) continue;  // its own handshake decides
        if (l.session_id != 0) reset_lane(p, l, static_cast<int>(i));
        l.session_id = 0;
    }
    fail_outstanding(p.addr.node_id, PGRAC_IC_PEER_RESET);
    count(&shm_->membership.bump_requests);
}

void Engine::reset_lane(Peer& p, Lane& l, int lane) {
    const size_t bytes = l.session.unacked_bytes();
    const size_t msgs = l.session.reset();
    l.transmitted = 0;
    l.ack_due_since_us = 0;
    __atomic_fetch_sub(&p.shm->unacked_msgs, static_cast<uint64_t>(msgs), __ATOMIC_RELAXED);
    __atomic_fetch_sub(&p.shm->unacked_bytes, static_cast<uint64_t>(bytes), __ATOMIC_RELAXED);
    release_queued(p.addr.node_id, msgs, bytes);
    count(&p.shm->session_resets);
    host_.log(Severity::Warning, "session with node " + std::to_string(p.addr.node_id) + " lane " +
                                     std::to_string(lane) + " starts again (" +
                                     std::to_string(msgs) + " unacknowledged messages dropped)");
    // Messages of the old session may be lost either way: their callers are
    // told (PEER_RESET) and GES rebuilds its tables in a new epoch.
    fail_outstanding(p.addr.node_id, PGRAC_IC_PEER_RESET);
    count(&shm_->membership.bump_requests);
}

void Engine::drop_conn(ic::ConnId id, Peer& p, ErrorType type, const std::string& why) {
    report(type, Severity::Error, p.addr.node_id, why + "; connection dropped");
    close_conn(id);
}

void Engine::update_state(Peer& p) {
    uint32_t up = 0;
    for (const Lane& l : p.lanes) up += l.up ? 1 : 0;
    store_relaxed(&p.shm->lanes_up, up);
    if (p.lanes[0].up) {
        if (p.state != PeerState::Up) {
            host_.log(Severity::Info, "node " + std::to_string(p.addr.node_id) + " is UP");
            p.shm->last_error[0] = '\0';  // history stays in pg_cluster_rdma_errors
            p.next_heartbeat_us = now_us();
            set_state(p, PeerState::Up);
        }
    } else if (p.state == PeerState::Up) {
        set_state(p, PeerState::Connecting);
    }
}

void Engine::set_state(Peer& p, PeerState s) {
    if (p.state == s) return;
    // Connection states are liveness, not membership: ic/membership/membership.hpp decides
    // who is a member.
    p.state = s;
    store_relaxed(&p.shm->state, static_cast<uint32_t>(s));
    store_relaxed(&p.shm->state_since_us, unix_time_us());
}

void Engine::close_conn(ic::ConnId id) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    if (it->second.peer >= 0 && !it->second.requester) {
        Lane& l = peers_[it->second.peer].lanes[it->second.lane];
        if (l.conn == id) l.up = false;
    }
    transport_->close(id);
}

}  // namespace pgrac::ic
