// Requester lanes, the serving side: a peer's backend connects to this
// listener on its own (lane kRequesterLane, the same handshake), sends its RPC
// requests there and gets each reply back on that connection, so that neither
// its own listener nor ours has to relay them through shared memory. Requests
// are served as those of a peer lane are (in place or by an LMS worker); what
// differs is that nothing is resent: a lane that breaks fails its request at
// the requester, and stale_request() keeps a late one from running after a
// newer request of the same process (docs/architecture.md).
#include <stdexcept>
#include <string>

#include "ic/base/atomics.hpp"
#include "ic/engine/engine.hpp"

namespace pgrac::ic {

int Engine::requester_lanes(int peer) const {
    int n = 0;
    for (const auto& [id, c] : conns_) n += c.requester && c.peer == peer ? 1 : 0;
    return n;
}

RejectReason Engine::admit_requester(const Peer& p, uint64_t incarnation, std::string* why) {
    const std::string lane = "requester lane of node " + std::to_string(p.addr.node_id) +
                             " incarnation " + std::to_string(incarnation) + " refused: ";
    // Went DOWN since the Hello (check_peer): the same busy as then, since
    // which instance is the node's cannot be told while none is UP.
    if (p.state != PeerState::Up) {
        *why = lane + "node " + std::to_string(p.addr.node_id) + " is not UP here";
        return RejectReason::Busy;
    }
    if (p.incarnation == incarnation) return RejectReason::None;
    *why = lane + "node " + std::to_string(p.addr.node_id) + " is UP here as incarnation " +
           std::to_string(p.incarnation);
    return RejectReason::DuplicateNode;
}

void Engine::establish_requester(ic::ConnId id, Conn& c, Peer& p, const PeerIdentity& pid) {
    // admit_requester() checked the node's state and incarnation in the same
    // turn of the loop (the AuthOk that completes the handshake), so they hold.
    c.peer = static_cast<int>(&p - peers_.data());
    c.lane = kRequesterLane;
    c.requester = true;
    c.established = true;
    c.guard = std::make_unique<FrameGuard>(pid.protection, pid.keys, cfg_.rekey_interval);
    c.handshake.reset();
    transport_->set_max_payload(
        id, static_cast<uint32_t>(kMessageHeaderSize + cfg_.identity.max_message + kFrameTagSize));
    count(&p.shm->requester_lanes);
}

void Engine::on_requester_frame(ic::ConnId id, Conn& c, Peer& p, const FrameHeader& h,
                                const uint8_t* payload) {
    const std::string from = " on a requester lane of node " + std::to_string(p.addr.node_id);
    if (h.type != FrameType::Message || !(h.flags & kFlagRpcRequest)) {
        drop_conn(id, p, ErrorType::MalformedFrame,
                  std::string("a ") + frame_type_name(h.type) +
                      " frame that is not an RPC request" + from);
        return;
    }
    // A process has one RPC at a time: a second request before the reply is a
    // peer that would make us queue replies it does not read.
    // An honest requester has read the whole reply before it sends again, so
    // nothing of it is still queued here: replies it does not read cannot pile up.
    if (c.req_pending || transport_->queued_bytes(id) > 0) {
        drop_conn(id, p, ErrorType::MalformedFrame,
                  "a request before the reply to the previous one was read" + from);
        return;
    }
    if (h.seq != c.req_received + 1) {
        drop_conn(id, p, ErrorType::MalformedFrame,
                  "request seq " + std::to_string(h.seq) + " after " +
                      std::to_string(c.req_received) + from);
        return;
    }
    if (!valid_message(p, h, payload)) {
        close_conn(id);
        return;
    }
    // Nothing to resend from: a request that does not fit is refused with its
    // lane, before it runs, and the requester reports the failure.
    if (!backlog_has_room(h.payload_len)) {
        count(&p.shm->backpressure_stalls);
        report(ErrorType::InboxFull, Severity::Error, p.addr.node_id,
               "LMS backlog full: requester lane of node " + std::to_string(p.addr.node_id) +
                   " closed with its request refused");
        close_conn(id);
        return;
    }
    c.req_received = h.seq;
    count(&p.shm->msgs_recv);
    count<uint64_t>(&p.shm->bytes_recv, kFrameHeaderSize + h.payload_len);
    MessageHeader mh;
    decode_message_header(payload, h.payload_len, &mh);
    if (rpc_slot(mh.rpc_id) >= kMaxRpcSlots) {
        drop_conn(id, p, ErrorType::MalformedFrame,
                  "request from process slot " + std::to_string(rpc_slot(mh.rpc_id)) +
                      ", above any PGPROC number" + from);
        return;
    }
    store_relaxed(&p.shm->epoch_seen, mh.epoch);
    if (stale_request(p.addr.node_id, mh.rpc_id)) {
        count(&p.shm->requests_voided);
        return;
    }
    if (!expect_reply(p.addr.node_id, mh.rpc_id, id)) {
        close_conn(id);
        return;
    }
    count(&p.shm->rpcs_served);
    count(&p.shm->direct_rpcs_served);
    c.req_pending = true;
    deliver_to_lms(p.addr.node_id, h.flags, payload, h.payload_len);
}

bool Engine::expect_reply(uint16_t node, uint64_t rpc_id, ic::ConnId conn) {
    // The same id still awaiting its reply can only be an earlier instance's
    // request (the node restarted and numbers its processes' RPCs afresh; a
    // live one's same id again is stale, stale_request()): this one does not
    // run, rather than risk the old reply reaching it.
    if (replies_due_.emplace(std::make_pair(node, rpc_id), conn).second) return true;
    if (Peer* p = peer_by_node(node)) count(&p->shm->requests_voided);
    report(ErrorType::PeerReset, Severity::Warning, node,
           "request " + std::to_string(rpc_id) + " of node " + std::to_string(node) +
               " has the id of one of its previous instance whose reply is still due; " +
               (conn == kViaPeerLanes ? "dropped (its caller times out)" : "its lane closed"));
    return false;
}

bool Engine::route_due_reply(uint16_t node, uint16_t flags, const MessageHeader& mh,
                             const uint8_t* payload, uint32_t len) {
    auto it = replies_due_.find({node, mh.rpc_id});
    if (it == replies_due_.end()) return false;
    const ic::ConnId id = it->second;
    replies_due_.erase(it);
    if (id == kViaPeerLanes) return false;
    release_queued(node, 1, kFrameHeaderSize + len);
    auto ci = conns_.find(id);
    // Its requester is gone (id 0 marks that: its lane closed, or its node
    // went DOWN or restarted): dropped here, not sent over the peer lanes,
    // where a new instance's RPC of the same id could take it.
    if (id == 0 || ci == conns_.end() || !ci->second.requester) return true;
    Conn& c = ci->second;
    c.req_pending = false;
    FrameHeader h;
    h.type = FrameType::Message;
    h.flags = flags & kKnownFrameFlags;
    h.src_node = cfg_.identity.node_id;
    h.payload_len = len;
    h.seq = ++c.req_sent;
    h.ack = c.req_received;
    if (!send_frame(id, h, payload)) {
        close_conn(id);
        return true;
    }
    PeerShared* ps = peers_[c.peer].shm;
    count(&ps->msgs_sent);
    count<uint64_t>(&ps->bytes_sent, kFrameHeaderSize + len);
    return true;
}

// ---- a reply sealed while it is written (engine.hpp)

void Engine::require_no_sealed_reply(const char* what) const {
    if (sealed_reply_.conn != 0)
        throw std::logic_error(std::string("Engine::") + what + " while a reply is being sealed");
}

bool Engine::begin_sealed_reply(uint16_t node, uint16_t flags, const MessageHeader& mh,
                                uint32_t body_len) {
    require_no_sealed_reply("begin_sealed_reply");
    if (!(flags & kFlagRpcReply) || replies_due_.empty()) return false;
    auto due = replies_due_.find({node, mh.rpc_id});
    if (due == replies_due_.end() || due->second == 0 || due->second == kViaPeerLanes) return false;
    auto ci = conns_.find(due->second);
    if (ci == conns_.end() || !ci->second.requester || ci->second.guard == nullptr ||
        ci->second.guard->mode() != WireProtection::Secure)
        return false;
    const uint32_t len = static_cast<uint32_t>(kMessageHeaderSize) + body_len;
    if (len > transport_->max_payload()) return false;  // the usual path says why
    Conn& c = ci->second;
    SealedReply r;
    r.conn = due->second;
    r.node = node;
    r.rpc_id = mh.rpc_id;
    r.h.type = FrameType::Message;
    r.h.flags = flags & kKnownFrameFlags;
    r.h.src_node = cfg_.identity.node_id;
    r.h.payload_len = len;
    r.h.seq = c.req_sent + 1;  // taken at finish_sealed_reply()
    r.h.ack = c.req_received;
    r.sealed_len = kFrameHeaderSize + len + c.guard->overhead();
    uint8_t* out = transport_->reserve_frame(r.conn, r.sealed_len);
    r.reserved = out != nullptr;
    if (out == nullptr) {
        sealed_buf_.resize(r.sealed_len);
        out = sealed_buf_.data();
    }
    try {
        c.guard->seal_begin(r.h, len, out);
    } catch (...) {
        if (r.reserved) transport_->cancel_reserved(r.conn);
        throw;
    }
    sealed_reply_ = r;
    uint8_t head[kMessageHeaderSize];
    encode_message_header(mh, head);
    write_sealed_reply(head, sizeof head);
    return true;
}

FrameGuard& Engine::sealed_reply_guard() {
    auto ci = sealed_reply_.conn == 0 ? conns_.end() : conns_.find(sealed_reply_.conn);
    if (ci == conns_.end() || ci->second.guard == nullptr)
        throw std::logic_error("Engine: no reply is being sealed");
    return *ci->second.guard;
}

// A throw leaves nothing begun: the reply is abandoned first.
void Engine::write_sealed_reply(const uint8_t* piece, uint32_t len) {
    try {
        sealed_reply_guard().seal_next(piece, len);
    } catch (...) {
        abandon_sealed_reply();
        throw;
    }
}

void Engine::finish_sealed_reply() {
    const SealedReply r = sealed_reply_;
    try {
        sealed_reply_guard().seal_end();
    } catch (...) {
        abandon_sealed_reply();
        throw;
    }
    sealed_reply_ = SealedReply{};
    // What route_due_reply() does once the frame is sealed. From here nothing
    // throws: the frame counter has moved and the reply is no longer due, so
    // a failure must end the lane (its request fails at the requester), never
    // leave it out of step or let the owner send a second reply.
    replies_due_.erase({r.node, r.rpc_id});
    Conn& c = conns_.at(r.conn);
    c.req_pending = false;
    c.req_sent = r.h.seq;
    PeerShared* ps = peers_[c.peer].shm;
    bool sent = false;
    try {
        if (r.reserved) {
            sent = transport_->send_reserved(r.conn, r.sealed_len);
        } else {
            iovec iov{sealed_buf_.data(), r.sealed_len};
            sent = transport_->send(r.conn, &iov, 1);
        }
    } catch (...) {
        if (r.reserved) transport_->cancel_reserved(r.conn);
        sent = false;
    }
    work_++;
    if (!sent) {
        try {
            close_conn(r.conn);
        } catch (...) {
            // the transport reports the close, or the lane times out
        }
        return;
    }
    count(&ps->msgs_sent);
    count<uint64_t>(&ps->bytes_sent, kFrameHeaderSize + r.h.payload_len);
    count(&ps->sealed_in_place);
}

void Engine::abandon_sealed_reply() {
    if (sealed_reply_.conn == 0) return;
    const SealedReply r = sealed_reply_;
    sealed_reply_ = SealedReply{};
    auto ci = conns_.find(r.conn);
    if (ci != conns_.end() && ci->second.guard != nullptr) ci->second.guard->seal_abandon();
    if (r.reserved) transport_->cancel_reserved(r.conn);
}

void Engine::close_requester_lanes(int peer) {
    for (const auto& [id, c] : conns_)
        if (c.requester && c.peer == peer) transport_->close(id);
}

void Engine::forget_requester_lane(ic::ConnId id) {
    // The replies still due (an LMS worker has the request) are dropped when
    // they come: the lane's entries stay, marked with no connection.
    for (auto& [key, conn] : replies_due_)
        if (conn == id) conn = 0;
}

void Engine::forget_requests_of(uint16_t node, bool restarted) {
    // Replies still due (held in place or queued at an LMS worker) to its
    // requester lanes are dropped when they come: the lanes are closed. Those
    // due over the peer lanes are dropped only if the node restarted (they
    // could meet an RPC of its new instance with the same rpc_id); after a
    // DOWN of the same instance its sessions may still carry them to their
    // requesters.
    for (auto& [key, conn] : replies_due_)
        if (key.first == node && (restarted || conn != kViaPeerLanes)) conn = 0;
    for (auto it = newest_rpc_.begin(); it != newest_rpc_.end();)
        it = (it->first >> 32) == node ? newest_rpc_.erase(it) : std::next(it);
}

bool Engine::stale_request(uint16_t node, uint64_t rpc_id) {
    if (rpc_slot(rpc_id) >= kMaxRpcSlots) return false;  // no such process: not remembered
    const uint64_t key = (static_cast<uint64_t>(node) << 32) | rpc_slot(rpc_id);
    const uint32_t gen = static_cast<uint32_t>(rpc_id);
    auto [it, fresh] = newest_rpc_.emplace(key, gen);
    if (fresh) return false;
    // The slot's generation also moves with its RPCs to other nodes: only a
    // request a little behind (or the same one again) is stale; one far
    // behind is a wrap, and starts the count again.
    const uint32_t behind = it->second - gen;
    if (behind < kStaleWindow) return true;
    it->second = gen;
    return false;
}

}  // namespace pgrac::ic
