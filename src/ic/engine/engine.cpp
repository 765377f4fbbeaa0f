// Engine: message routing between the shared-memory rings and the sessions.
#include "ic/engine/engine.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "ic/base/atomics.hpp"

namespace pgrac::ic {

namespace {

constexpr int kOutboundBudget = 4096;  // ring records per run_once, for fairness
// LMS backlog held in the listener (inboxes full): past the first mark senders
// are asked to back off; past the second, requests are refused unacknowledged
// (the connection is dropped and the sender resends them later), so the
// listener never grows without bound and never loses an accepted message.
constexpr size_t kBackoffAtBytes = 32u << 20;
constexpr size_t kOverflowLimitBytes = 256u << 20;
constexpr uint32_t kBackoffHoldMs = 10;

}  // namespace

namespace {
NodeMask configured_mask(const std::vector<NodeAddress>& nodes) {
    NodeMask m = 0;
    for (const NodeAddress& n : nodes) m |= node_bit(n.node_id);
    return m;
}

// The instance the handshake offers is the one the membership binds: the
// shared memory's (the glue sets it when it creates the region; a region
// without one, as in tests, takes the listener's incarnation).
MembershipShared* with_instance(IcShared* shm, LocalIdentity* identity) {
    MembershipShared* m = &shm->membership;
    if (m->self_instance == 0)
        m->self_instance = identity->incarnation != 0 ? identity->incarnation : 1;
    identity->instance = m->self_instance;
    if (identity->location == 0) identity->location = m->self_location;
    return m;
}
}  // namespace

Engine::Engine(EngineConfig config, IcShared* shm, EngineHost& host, const TransportFactory& make)
    : cfg_(std::move(config)),
      shm_(shm),
      host_(host),
      // The stub tier (one node, no cluster.nodes) is its own cluster of one.
      membership_(MembershipConfig{cfg_.identity.node_id,
                                   configured_mask(cfg_.nodes) | node_bit(cfg_.identity.node_id),
                                   cfg_.heartbeat_interval_ms, cfg_.peer_timeout_ms},
                  with_instance(shm_, &cfg_.identity)) {
    membership_.set_unix_clock(&unix_time_us);
    membership_.note_start(now_us());
    transport_ = make(*this);
    peer_index_.assign(kMaxNodes + 1, -1);
    const uint16_t me = cfg_.identity.node_id;
    const int lanes = 1 + cfg_.bulk_lanes;
    for (const NodeAddress& n : cfg_.nodes) {
        PeerShared* ps = &shm_->peers[n.node_id - 1];
        if (n.node_id == me) continue;
        Peer p;
        p.addr = n;
        p.shm = ps;
        p.dialer = me < n.node_id;
        for (int i = 0; i < lanes; i++)
            p.lanes.emplace_back(Lane{0, false, false, false, Session(cfg_.session_limits)});
        peer_index_[n.node_id] = static_cast<int>(peers_.size());
        peers_.push_back(std::move(p));
    }
    overflow_.resize(shm_->n_lms);
    held_per_worker_.assign(shm_->n_lms, 0);
}

Engine::~Engine() = default;

const char* Engine::transport_name() const {
    return transport_->name();
}

int Engine::wait_fd() const {
    return transport_->wait_fd();
}

int Engine::next_timeout_ms() const {
    if (!in_place_.empty() || !procs_to_wake_.empty()) return 0;
    if (overflow_bytes_ > 0) return 1;
    int64_t delta = next_timer_us_ - now_us();
    if (delta <= 0) return 0;
    return static_cast<int>((delta + 999) / 1000);
}

bool Engine::run_once() {
    require_no_sealed_reply("run_once");
    const uint64_t before = work_;
    if (in_place_change_) apply_in_place_change();
    transport_->poll(0);
    // The requesters whose replies this poll brought, woken together after
    // it: a woken backend that preempts the listener then finds the whole
    // batch done, not one frame of it.
    wake_processes();
    drain_overflow();
    drain_outbound();
    // Timers (membership, heartbeats, dials, deadlines, delayed acks) when one
    // is due, and at least every millisecond for those scheduled without
    // lowering next_timer_us_: not on every turn of a busy-polling loop, where
    // they were a tenth of the listener's CPU under load.
    const int64_t now = now_us();
    if (now >= next_timer_us_ || now - last_timers_us_ >= kTimerPeriodUs) {
        last_timers_us_ = now;
        run_timers(now);
    }
    wake_lms_workers();
    wake_processes();
    return work_ != before;
}

void Engine::wake_processes() {
    for (uint32_t procno : procs_to_wake_) host_.wake_process(procno);
    procs_to_wake_.clear();
}

void Engine::apply_in_place_change() {
    if (overflow_bytes_ > 0) return;
    for (uint32_t w = 0; w < shm_->n_lms; w++)
        if (!inbox_ring(shm_, w).empty()) return;
    cfg_.serve_in_place = std::move(next_in_place_);
    next_in_place_.clear();
    in_place_change_ = false;
    host_.log(Severity::Info, std::string("serving in place is ") +
                                  (cfg_.serve_in_place.empty() ? "off" : "on") + " from now on");
}

void Engine::wake_lms_workers() {
    for (uint32_t w = 0; lms_to_wake_ != 0 && w < shm_->n_lms; w++) {
        if (lms_to_wake_ & (1u << w)) host_.wake_lms(w);
    }
    lms_to_wake_ = 0;
}

// ---- serving in place

uint32_t Engine::worker_of(const std::vector<uint8_t>& rec) const {
    MessageHeader mh;
    decode_message_header(rec.data() + sizeof(RingPrefix), rec.size() - sizeof(RingPrefix), &mh);
    return mh.route_key % shm_->n_lms;
}

std::vector<uint8_t> Engine::pop_held(std::deque<std::vector<uint8_t>>::iterator* it) {
    std::vector<uint8_t> rec = std::move(**it);
    held_per_worker_[worker_of(rec)]--;
    overflow_bytes_ -= rec.size();
    *it = in_place_.erase(*it);
    return rec;
}

// A record taken off the front of in_place_ is older than all it holds: it
// goes to its worker without taking the younger ones along first.
void Engine::push_older(const std::vector<uint8_t>& rec) {
    RingPrefix pre;
    std::memcpy(&pre, rec.data(), sizeof pre);
    push_to_lms(pre.node, pre.flags, rec.data() + sizeof pre, pre.payload_len, false);
    wake_lms_workers();
}

size_t Engine::take_in_place(uint8_t* out, size_t cap) {
    require_no_sealed_reply("take_in_place");
    while (!in_place_.empty()) {
        auto front = in_place_.begin();
        std::vector<uint8_t> rec = pop_held(&front);
        // Something for its LMS worker arrived before it, or was handed on
        // (a request that would wait, the backlog): it queues behind that.
        if (lms_busy(worker_of(rec)) || rec.size() > cap) {
            push_older(rec);
            continue;
        }
        std::memcpy(out, rec.data(), rec.size());
        const size_t taken = rec.size();
        if (held_spares_.size() < kHeldSpares && rec.capacity() <= kMaxHeldSpareBytes)
            held_spares_.push_back(std::move(rec));
        return taken;
    }
    return 0;
}

void Engine::hand_to_lms(const uint8_t* rec, size_t len) {
    require_no_sealed_reply("hand_to_lms");
    RingPrefix pre;
    if (len < sizeof pre + kMessageHeaderSize) return;
    std::memcpy(&pre, rec, sizeof pre);
    if (pre.payload_len != len - sizeof pre) return;
    // Taken by the owner, so older than whatever it still holds.
    push_to_lms(pre.node, pre.flags, rec + sizeof pre, pre.payload_len, false);
    wake_lms_workers();
    wake_processes();  // a refusal may have failed an RPC
}

bool Engine::lms_busy(uint32_t w) const {
    return !overflow_[w].empty() || !inbox_ring(shm_, w).empty();
}

void Engine::hand_all_to_lms(uint32_t w) {
    for (auto it = in_place_.begin(); it != in_place_.end();) {
        if (w != ~0u && worker_of(*it) != w) {
            ++it;
            continue;
        }
        push_older(pop_held(&it));
    }
}

void Engine::send_from_owner(uint16_t node, uint16_t flags, const uint8_t* payload, uint32_t len) {
    require_no_sealed_reply("send_from_owner");
    // route_outbound gives back the send budget a ring record took; this
    // message took it here.
    if (node >= 1 && node <= kMaxNodes) {
        PeerShared& ps = shm_->peers[node - 1];
        __atomic_fetch_add(&ps.queued_msgs, uint64_t{1}, __ATOMIC_RELAXED);
        __atomic_fetch_add(&ps.queued_bytes, uint64_t{kFrameHeaderSize} + len, __ATOMIC_RELAXED);
    }
    route_outbound(node, flags, payload, len);
    wake_processes();  // a reply to our own node completed a slot
    work_++;
}

Engine::Peer* Engine::peer_by_node(uint16_t node) {
    if (node > kMaxNodes || peer_index_[node] < 0) return nullptr;
    return &peers_[peer_index_[node]];
}

void Engine::release_queued(uint16_t node, uint64_t msgs, uint64_t bytes) {
    if (node < 1 || node > kMaxNodes) return;
    PeerShared& ps = shm_->peers[node - 1];
    __atomic_fetch_sub(&ps.queued_msgs, msgs, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&ps.queued_bytes, bytes, __ATOMIC_RELAXED);
}

// ---- outbound: backends and LMS workers -> peers

void Engine::drain_outbound() {
    ShmRing ring = outbound_ring(shm_);
    const uint8_t* rec;
    size_t len;
    // Whatever leaves the pass (its end, or an exception) turns the hint off
    // and pushes what it held: no later write (heartbeat, ack, resend) carries it.
    struct MoreHint {
        Transport* t;
        bool held = false;
        ~MoreHint() {
            if (!held) return;
            t->set_more(false);
            t->push_more();  // nothing waits past this pass
        }
    } hint{transport_.get()};
    for (int budget = kOutboundBudget; budget > 0 && ring.peek(&rec, &len); budget--) {
        RingPrefix pre;
        std::memcpy(&pre, rec, sizeof pre);
        // The next record goes the same way (a stream, a burst to one lane):
        // its frame may share this one's segments (the transport holds it:
        // set_more). Not for another node or lane, whose frames cannot.
        const uint8_t* next;
        size_t next_len;
        const bool more =
            budget > 1 && ring.peek_next(&next, &next_len) && same_wire(rec, len, next, next_len);
        transport_->set_more(more);
        hint.held = hint.held || more;
        if (len >= sizeof pre + kMessageHeaderSize && pre.payload_len == len - sizeof pre) {
            route_outbound(pre.node, pre.flags, rec + sizeof pre, pre.payload_len);
        } else {
            report(ErrorType::Internal, Severity::Error, -1, "malformed record in outbound ring");
        }
        ring.pop();
        work_++;
    }
}

// Two well-formed ring records whose frames take the same connection: the
// same peer and lane.
bool Engine::same_wire(const uint8_t* a, size_t a_len, const uint8_t* b, size_t b_len) {
    RingPrefix pa, pb;
    if (a_len < sizeof pa + kMessageHeaderSize || b_len < sizeof pb + kMessageHeaderSize)
        return false;
    std::memcpy(&pa, a, sizeof pa);
    std::memcpy(&pb, b, sizeof pb);
    if (pa.node != pb.node) return false;
    // A reply due to a requester lane takes that lane's connection.
    if (((pa.flags | pb.flags) & kFlagRpcReply) && !replies_due_.empty()) return false;
    const Peer* p = peer_by_node(pa.node);
    if (p == nullptr) return false;
    MessageHeader ma, mb;
    decode_message_header(a + sizeof pa, a_len - sizeof pa, &ma);
    decode_message_header(b + sizeof pb, b_len - sizeof pb, &mb);
    return choose_lane(*p, pa.flags, ma.route_key) == choose_lane(*p, pb.flags, mb.route_key);
}

void Engine::route_outbound(uint16_t node, uint16_t flags, const uint8_t* payload, uint32_t len) {
    MessageHeader mh;
    decode_message_header(payload, len, &mh);
    const uint64_t frame_bytes = kFrameHeaderSize + len;
    if ((flags & kFlagRpcReply) && !replies_due_.empty() &&
        route_due_reply(node, flags, mh, payload, len))
        return;
    if (node == cfg_.identity.node_id) {
        // To ourselves: no wire, but the same counters as a peer's traffic.
        PeerShared& self = shm_->peers[node - 1];
        release_queued(node, 1, frame_bytes);
        count(&self.msgs_sent);
        count(&self.msgs_recv);
        count<uint64_t>(&self.bytes_sent, frame_bytes);
        count<uint64_t>(&self.bytes_recv, frame_bytes);
        if (flags & kFlagRpcRequest) {
            count(&self.rpcs_sent);
            count(&self.rpcs_served);
        }
        deliver_local(node, flags, payload, len);
        return;
    }
    Peer* p = peer_by_node(node);
    if (len > transport_->max_payload()) {
        // send_path caps bodies at PGRAC_IC_MAX_MESSAGE; a transport that
        // carries less cannot take this frame at all.
        release_queued(node, 1, frame_bytes);
        if (flags & kFlagRpcRequest) fail_rpc(mh.rpc_id, PGRAC_IC_TOO_BIG);
        report(ErrorType::OversizedMessage, Severity::Warning, node,
               "message of " + std::to_string(len) + " bytes for node " + std::to_string(node) +
                   " dropped: the " + transport_->name() + " transport carries at most " +
                   std::to_string(transport_->max_payload()));
        return;
    }
    if (p == nullptr) {
        release_queued(node, 1, frame_bytes);
        if (flags & kFlagRpcRequest) fail_rpc(mh.rpc_id, PGRAC_IC_UNKNOWN_NODE);
        report(ErrorType::UnknownNode, Severity::Warning, node,
               "message for node " + std::to_string(node) + " dropped: not in cluster.nodes");
        return;
    }
    if ((flags & kFlagRpcRequest) &&
        (p->state == PeerState::Down || p->state == PeerState::Error)) {
        release_queued(node, 1, frame_bytes);
        fail_rpc(mh.rpc_id, PGRAC_IC_UNREACHABLE);
        return;
    }
    send_message(*p, choose_lane(*p, flags, mh.route_key), flags, payload, len);
    if (flags & kFlagRpcRequest) {
        outstanding_[rpc_slot(mh.rpc_id)] = Outstanding{mh.rpc_id, node};
        count(&p->shm->rpcs_sent);
    }
}

int Engine::choose_lane(const Peer& p, uint16_t flags, uint32_t route_key) const {
    const int bulk = static_cast<int>(p.lanes.size()) - 1;
    if (bulk == 0 || (flags & kFlagControlLane)) return 0;
    return 1 + static_cast<int>(route_key % static_cast<uint32_t>(bulk));
}

void Engine::send_message(Peer& p, int lane, uint16_t flags, const uint8_t* payload, uint32_t len) {
    Lane& l = p.lanes[lane];
    FrameHeader h;
    h.type = FrameType::Message;
    h.flags = flags & kKnownFrameFlags;
    h.src_node = cfg_.identity.node_id;
    h.payload_len = len;
    h.seq = l.session.next_seq();
    h.ack = l.session.last_received();
    const size_t clear_bytes = kFrameHeaderSize + len;
    KeptFrameRef frame = l.session.take_frame(clear_bytes, clear_bytes + kFrameTagSize);
    // While the peer asked us to back off, the frame is only retained; it goes
    // out in order when the hold expires (transmit_held) or on a reconnect.
    const bool now = l.up && now_us() >= p.hold_until_us && l.transmitted == h.seq - 1;
    FrameGuard* g = now ? guard_of(l.conn) : nullptr;
    bool sent = false;
    if (g != nullptr && g->mode() == WireProtection::Secure && !transport_->lends_frames()) {
        // Sealed from the ring record straight into the kept frame: the
        // cipher's pass is its only copy, and the transport sends it from there.
        seal_kept_frame(*g, h, payload, *frame);
        sent = send_sealed_kept(l.conn, frame);
    } else {
        // Retained with the crc field zero: send_kept computes the CRC where the
        // mode uses it (crc), and sealing modes never pay for it.
        encode_frame_fields(h, frame->bytes.data());
        std::memcpy(frame->bytes.data() + kFrameHeaderSize, payload, len);
        if (now) sent = send_kept(l.conn, frame);
    }
    if (now) {
        if (sent) {
            l.session.ack_sent(h.ack);
            l.transmitted = h.seq;
        } else {
            close_conn(l.conn);
        }
    }
    count(&p.shm->msgs_sent);
    count<uint64_t>(&p.shm->bytes_sent, clear_bytes);
    l.session.retain(h.seq, std::move(frame));
    count(&p.shm->unacked_msgs);
    count<uint64_t>(&p.shm->unacked_bytes, clear_bytes);
}

bool Engine::send_sealed_kept(ic::ConnId id, const KeptFrameRef& f) {
    iovec iov{f->bytes.data(), f->bytes.size()};
    return transport_->send_kept(id, &iov, 1, std::shared_ptr<const uint8_t>(f, f->bytes.data()),
                                 f->bytes.size());
}

FrameGuard* Engine::guard_of(ic::ConnId id) {
    auto it = conns_.find(id);
    return it == conns_.end() ? nullptr : it->second.guard.get();
}

bool Engine::send_kept(ic::ConnId id, KeptFrameRef& f) {
    // Sealed for an earlier connection: in clear again, then sealed under
    // this connection's keys below.
    if (f->is_sealed()) open_kept_frame(f);
    FrameHeader h;
    if (decode_frame_header(f->bytes.data(), f->bytes.size(), kMaxFramePayload, &h) !=
            FrameError::None ||
        f->bytes.size() != kFrameHeaderSize + h.payload_len)
        throw std::logic_error("a kept frame's header does not decode");
    uint8_t* payload = f->bytes.data() + kFrameHeaderSize;
    FrameGuard* g = guard_of(id);
    const WireProtection mode = g == nullptr ? WireProtection::Crc : g->mode();
    if (mode == WireProtection::Secure && transport_->lends_frames())
        return send_frame(id, h, payload);  // sealed into a lent send slot
    if (mode == WireProtection::Secure) {
        unshare(f);
        seal_kept_frame(*g, h, nullptr, *f);  // in place
        return send_sealed_kept(id, f);
    }
    const std::shared_ptr<const uint8_t> kept(f, f->bytes.data());
    if (mode == WireProtection::Mac) {
        // The payload goes from the kept frame as it is: header and tag apart.
        uint8_t hdr[kFrameHeaderSize];
        uint8_t tag[kFrameTagSize];
        g->seal_apart(h, payload, h.payload_len, hdr, tag);
        iovec iov[3] = {{hdr, kFrameHeaderSize}, {payload, h.payload_len}, {tag, kFrameTagSize}};
        return transport_->send_kept(id, iov, 3, kept, f->bytes.size());
    }
    uint8_t hdr[kFrameHeaderSize];
    encode_frame_header(h, payload, hdr);
    iovec iov[2] = {{hdr, kFrameHeaderSize}, {payload, h.payload_len}};
    return transport_->send_kept(id, iov, h.payload_len > 0 ? 2 : 1, kept, f->bytes.size());
}

bool Engine::send_frame(ic::ConnId id, FrameHeader h, const uint8_t* payload) {
    auto it = conns_.find(id);
    FrameGuard* g = it == conns_.end() ? nullptr : it->second.guard.get();
    if (g == nullptr || g->mode() == WireProtection::Crc) {
        uint8_t hdr[kFrameHeaderSize];
        encode_frame_header(h, payload, hdr);
        iovec iov[2] = {{hdr, kFrameHeaderSize}, {const_cast<uint8_t*>(payload), h.payload_len}};
        return transport_->send(id, iov, h.payload_len > 0 ? 2 : 1);
    }
    if (g->mode() == WireProtection::Mac) {
        // The payload goes from the retained frame as it is: header and tag apart.
        uint8_t hdr[kFrameHeaderSize];
        uint8_t tag[kFrameTagSize];
        const uint32_t len = h.payload_len;
        g->seal_apart(h, payload, len, hdr, tag);
        iovec iov[3] = {
            {hdr, kFrameHeaderSize}, {const_cast<uint8_t*>(payload), len}, {tag, kFrameTagSize}};
        return transport_->send(id, iov, 3);
    }
    // secure: the cipher pass writes a copy, straight into the transport's
    // send buffer when it lends one (verbs), so that it is the only one.
    const size_t sealed = kFrameHeaderSize + h.payload_len + g->overhead();
    if (uint8_t* room = transport_->reserve_frame(id, sealed)) {
        try {
            g->seal_into(h, payload, h.payload_len, room);
        } catch (...) {
            transport_->cancel_reserved(id);
            throw;
        }
        return transport_->send_reserved(id, sealed);
    }
    g->seal(h, payload, h.payload_len, &seal_buf_);
    iovec iov{seal_buf_.data(), seal_buf_.size()};
    return transport_->send(id, &iov, 1);
}

// ---- inbound: wire -> LMS inboxes and reply slots

// Everything that makes a Message unacceptable is checked here, before the
// session counts it as received (and acknowledges it): a refused message is
// never half-taken.
bool Engine::valid_message(Peer& p, const FrameHeader& h, const uint8_t* payload) {
    MessageHeader mh;
    const std::string from = " from node " + std::to_string(p.addr.node_id);
    if (decode_message_header(payload, h.payload_len, &mh) != FrameError::None) {
        report(ErrorType::MalformedFrame, Severity::Error, p.addr.node_id,
               "message" + from + " has a nonzero reserved field; connection dropped");
        return false;
    }
    const uint32_t body = h.payload_len - static_cast<uint32_t>(kMessageHeaderSize);
    if (body > cfg_.identity.max_message) {
        report(ErrorType::OversizedMessage, Severity::Error, p.addr.node_id,
               "message of " + std::to_string(body) + " bytes" + from + ", more than the " +
                   std::to_string(cfg_.identity.max_message) +
                   " agreed in the handshake; connection dropped");
        return false;
    }
    if (mh.msg_type > PGRAC_IC_MAX_MSG_TYPE) {
        report(ErrorType::MalformedFrame, Severity::Error, p.addr.node_id,
               "message type " + std::to_string(mh.msg_type) + from + " is above " +
                   std::to_string(PGRAC_IC_MAX_MSG_TYPE) + "; connection dropped");
        return false;
    }
    if (mh.msg_type == kVoidMsgType && (h.flags & (kFlagRpcRequest | kFlagRpcReply))) {
        report(ErrorType::MalformedFrame, Severity::Error, p.addr.node_id,
               "void message" + from + " flagged as an RPC; connection dropped");
        return false;
    }
    return true;
}

void Engine::on_message(Peer& p, int lane, ic::ConnId conn, const FrameHeader& h,
                        const uint8_t* payload) {
    Lane& l = p.lanes[lane];
    if (!valid_message(p, h, payload)) {
        close_conn(conn);
        return;
    }
    // The same test deliver_to_lms() applies, made before the frame counts as
    // received: a message that would not fit is never acknowledged.
    if (!(h.flags & kFlagRpcReply) && !backlog_has_room(h.payload_len) &&
        seq_after(h.seq, l.session.last_received())) {
        // Not acknowledged, so not lost: the sender resends it after reconnecting.
        count(&p.shm->backpressure_stalls);
        report(ErrorType::InboxFull, Severity::Error, p.addr.node_id,
               "LMS backlog over " + std::to_string(kOverflowLimitBytes >> 20) +
                   " MB: connection from node " + std::to_string(p.addr.node_id) +
                   " dropped with its requests unacknowledged; it resends them later");
        close_conn(conn);
        return;
    }
    switch (l.session.on_receive(h.seq)) {
        case Session::Receive::Duplicate:
            count(&p.shm->duplicates_dropped);
            return;
        case Session::Receive::Gap:
            report(ErrorType::MalformedFrame, Severity::Error, p.addr.node_id,
                   "sequence gap from node " + std::to_string(p.addr.node_id) + " (got " +
                       std::to_string(h.seq) + " after " +
                       std::to_string(l.session.last_received()) + "); reconnecting");
            close_conn(conn);
            return;
        case Session::Receive::Deliver:
            break;
    }
    if (l.ack_due_since_us == 0) {
        l.ack_due_since_us = now_us();
        // The timers run when due: the standalone ack then goes out on time.
        next_timer_us_ = std::min(next_timer_us_, l.ack_due_since_us + cfg_.ack_delay_us);
    }
    count(&p.shm->msgs_recv);
    count<uint64_t>(&p.shm->bytes_recv, kFrameHeaderSize + h.payload_len);
    MessageHeader mh;
    decode_message_header(payload, h.payload_len, &mh);
    store_relaxed(&p.shm->epoch_seen, mh.epoch);
    if (mh.msg_type == kVoidMsgType) return;  // a request its caller gave up: never run
    if (h.flags & kFlagRpcReply) {
        // A reply only from the node the request went to, for a request
        // still waiting: anything else is a forgery or too late.
        auto it = outstanding_.find(rpc_slot(mh.rpc_id));
        if (it == outstanding_.end() || it->second.rpc_id != mh.rpc_id ||
            it->second.node != p.addr.node_id) {
            report(ErrorType::WrongSource, Severity::Warning, p.addr.node_id,
                   "reply from node " + std::to_string(p.addr.node_id) +
                       " to an RPC that is not waiting for it (rpc_id " +
                       std::to_string(mh.rpc_id) + ") dropped");
            return;
        }
        deliver_reply(mh.rpc_id, mh.status, payload + kMessageHeaderSize,
                      h.payload_len - static_cast<uint32_t>(kMessageHeaderSize));
    } else {
        if ((h.flags & kFlagRpcRequest) && stale_request(p.addr.node_id, mh.rpc_id)) {
            count(&p.shm->requests_voided);  // its caller has moved on: never run
            return;
        }
        if ((h.flags & kFlagRpcRequest) && !expect_reply(p.addr.node_id, mh.rpc_id, kViaPeerLanes))
            return;
        if (h.flags & kFlagRpcRequest) count(&p.shm->rpcs_served);
        deliver_to_lms(p.addr.node_id, h.flags, payload, h.payload_len);
        if (overflow_bytes_ >= kBackoffAtBytes) signal_backoff(p);
    }
}

// ---- congestion

void Engine::signal_backoff(Peer& p) {
    const int64_t now = now_us();
    if (now < p.backoff_sent_until_us || !p.lanes[0].up) return;
    uint8_t b[4];
    for (int i = 0; i < 4; i++) b[i] = static_cast<uint8_t>(kBackoffHoldMs >> (8 * i));
    Lane& l = p.lanes[0];
    send_control(l.conn, &l, FrameType::Backoff, kFlagControlLane, b, sizeof b);
    p.backoff_sent_until_us = now + 1000 * static_cast<int64_t>(kBackoffHoldMs);
}

void Engine::on_backoff(Peer& p, const FrameHeader& h, const uint8_t* payload) {
    if (h.payload_len != 4) {
        drop_conn(p.lanes[0].conn, p, ErrorType::MalformedFrame,
                  "backoff of " + std::to_string(h.payload_len) + " bytes from node " +
                      std::to_string(p.addr.node_id) + " (expected 4)");
        return;
    }
    uint32_t hold_ms = 0;
    for (int i = 0; i < 4; i++) hold_ms |= static_cast<uint32_t>(payload[i]) << (8 * i);
    hold_ms = std::min<uint32_t>(hold_ms, 1000);  // a peer cannot silence us for long
    p.hold_until_us = std::max(p.hold_until_us, now_us() + 1000 * static_cast<int64_t>(hold_ms));
    next_timer_us_ = std::min(next_timer_us_, p.hold_until_us);
    count(&p.shm->backpressure_stalls);
}

void Engine::transmit_held(Peer& p, int64_t now) {
    if (now < p.hold_until_us) return;
    for (Lane& l : p.lanes)
        if (l.up && l.transmitted != l.session.last_sent()) transmit_after(l, l.transmitted);
}

// Sends, in order, the retained frames after seq `after` (a reconnect's resend,
// or what a backoff held).
// Rewrites, in the retained frames of peer p, every RPC request that is no
// longer awaited (failed, timed out, given up) into a void message.
void Engine::void_abandoned_requests(Peer& p) {
    for (Lane& l : p.lanes) {
        l.session.for_each_retained([&](uint32_t, KeptFrameRef& f) {
            FrameHeader h;
            if (f->bytes.size() < kFrameHeaderSize + kMessageHeaderSize ||
                decode_frame_header(f->bytes.data(), f->bytes.size(), kMaxFramePayload, &h) !=
                    FrameError::None ||
                !(h.flags & kFlagRpcRequest))
                return;
            if (f->is_sealed()) {
                // Its message header is under the cipher: opened where it is
                // kept, it is sealed again when it goes out.
                open_kept_frame(f);
                decode_frame_header(f->bytes.data(), f->bytes.size(), kMaxFramePayload, &h);
            }
            MessageHeader mh;
            if (decode_message_header(f->bytes.data() + kFrameHeaderSize, h.payload_len, &mh) !=
                FrameError::None)
                return;
            auto it = outstanding_.find(rpc_slot(mh.rpc_id));
            if (it != outstanding_.end() && it->second.rpc_id == mh.rpc_id) {
                const ReplySlot* slot = reply_slot(shm_, rpc_slot(mh.rpc_id));
                const bool waiting =
                    slot != nullptr && load_acquire(&slot->rpc_id) == mh.rpc_id &&
                    load_acquire(&slot->state) == static_cast<uint32_t>(SlotState::Waiting);
                if (waiting) return;
                outstanding_.erase(it);
            }
            // Rewritten in place: a transport still queueing it keeps the old bytes.
            unshare(f);
            mh.msg_type = kVoidMsgType;
            encode_message_header(mh, f->bytes.data() + kFrameHeaderSize);
            h.flags = static_cast<uint16_t>(h.flags & ~kFlagRpcRequest);
            encode_frame_fields(h, f->bytes.data());
            count(&p.shm->requests_voided);
        });
    }
}

void Engine::transmit_after(Lane& l, uint32_t after) {
    for (const Session::Held& held : l.session.frames_after(after)) {
        if (!send_kept(l.conn, *held.frame)) {
            close_conn(l.conn);
            return;
        }
        l.transmitted = held.seq;
    }
}

void Engine::deliver_local(uint16_t src, uint16_t flags, const uint8_t* payload, uint32_t len) {
    if (flags & kFlagRpcReply) {
        MessageHeader mh;
        decode_message_header(payload, len, &mh);
        deliver_reply(mh.rpc_id, mh.status, payload + kMessageHeaderSize,
                      len - static_cast<uint32_t>(kMessageHeaderSize));
    } else {
        deliver_to_lms(src, flags, payload, len);
    }
}

void Engine::deliver_reply(uint64_t rpc_id, uint32_t status, const uint8_t* body, uint32_t len) {
    const uint32_t slot_no = rpc_slot(rpc_id);
    auto it = outstanding_.find(slot_no);
    if (it != outstanding_.end() && it->second.rpc_id == rpc_id) outstanding_.erase(it);
    ReplySlot* slot = reply_slot(shm_, slot_no);
    if (slot != nullptr && complete_slot(shm_, slot, rpc_id, status, body, len))
        procs_to_wake_.push_back(slot_no);  // wake_processes()
}

void Engine::fail_rpc(uint64_t rpc_id, uint32_t status) {
    deliver_reply(rpc_id, status, nullptr, 0);
}

void Engine::fail_outstanding(uint16_t node, uint32_t status) {
    std::vector<uint64_t> ids;
    for (const auto& [slot, o] : outstanding_)
        if (o.node == node) ids.push_back(o.rpc_id);
    for (uint64_t id : ids) fail_rpc(id, status);
}

void Engine::deliver_to_lms(uint16_t src, uint16_t flags, const uint8_t* payload, uint32_t len) {
    MessageHeader mh;
    decode_message_header(payload, len, &mh);
    // In place only if nothing of its route key waits for an LMS worker.
    if (!served_in_place(mh.msg_type) || lms_busy(mh.route_key % shm_->n_lms)) {
        push_to_lms(src, flags, payload, len);
        return;
    }
    if (hold(in_place_, src, flags, mh, payload, len)) {
        held_per_worker_[mh.route_key % shm_->n_lms]++;
        work_++;
    }
}

void Engine::push_to_lms(uint16_t src, uint16_t flags, const uint8_t* payload, uint32_t len,
                         bool flush_held) {
    MessageHeader mh;
    decode_message_header(payload, len, &mh);
    const uint32_t w = mh.route_key % shm_->n_lms;
    // What the owner holds for this worker arrived first: it goes to the
    // worker first, so that one worker's (one route key's) messages stay in order.
    if (flush_held && held_per_worker_[w] > 0) hand_all_to_lms(w);
    RingPrefix pre{src, flags, len};
    if (overflow_[w].empty()) {
        iovec iov[2] = {{&pre, sizeof pre}, {const_cast<uint8_t*>(payload), len}};
        if (inbox_ring(shm_, w).push(iov, 2) == ShmRing::Push::Ok) {
            lms_to_wake_ |= 1u << w;
            return;
        }
        report(ErrorType::InboxFull, Severity::Warning, src,
               "LMS worker " + std::to_string(w) + " inbox full; holding messages in the listener");
    }
    if (hold(overflow_[w], src, flags, mh, payload, len)) lms_to_wake_ |= 1u << w;
}

bool Engine::hold(std::deque<std::vector<uint8_t>>& queue, uint16_t src, uint16_t flags,
                  const MessageHeader& mh, const uint8_t* payload, uint32_t len) {
    if (!backlog_has_room(len)) {
        // Only a message to ourselves gets here (a peer's was refused before it
        // was acknowledged): fail its requester rather than grow without bound.
        if (flags & kFlagRpcRequest) fail_rpc(mh.rpc_id, PGRAC_IC_QUEUE_FULL);
        report(ErrorType::InboxFull, Severity::Error, src,
               "message from node " + std::to_string(src) + " refused: LMS backlog over " +
                   std::to_string(kOverflowLimitBytes >> 20) + " MB");
        return false;
    }
    const RingPrefix pre{src, flags, len};
    // A spare's storage if there is one, and no zero-fill: the record is
    // written once (a stream of 8 KiB notes served in place neither mallocs
    // nor memsets per note).
    std::vector<uint8_t> rec;
    if (!held_spares_.empty()) {
        rec = std::move(held_spares_.back());
        held_spares_.pop_back();
        rec.clear();
    }
    rec.reserve(sizeof pre + len);
    const auto* p = reinterpret_cast<const uint8_t*>(&pre);
    rec.insert(rec.end(), p, p + sizeof pre);
    rec.insert(rec.end(), payload, payload + len);
    overflow_bytes_ += rec.size();
    queue.push_back(std::move(rec));
    return true;
}

bool Engine::backlog_has_room(uint32_t payload_len) const {
    return overflow_bytes_ + sizeof(RingPrefix) + payload_len <= kOverflowLimitBytes;
}

void Engine::drain_overflow() {
    for (uint32_t w = 0; overflow_bytes_ > 0 && w < overflow_.size(); w++) {
        ShmRing ring = inbox_ring(shm_, w);
        auto& q = overflow_[w];
        while (!q.empty() && ring.push(q.front().data(), q.front().size()) == ShmRing::Push::Ok) {
            overflow_bytes_ -= q.front().size();
            q.pop_front();
            lms_to_wake_ |= 1u << w;
        }
    }
}

void Engine::report_throttled(ErrorType type, Severity sev, int peer_node,
                              const std::string& text) {
    uint64_t held_back = 0;
    if (!throttle_.allow(static_cast<int>(type), now_us(), &held_back)) {
        shm_->errors.count_only(type);
        return;
    }
    report(type, sev, peer_node,
           held_back == 0 ? text
                          : text + " (and " + std::to_string(held_back) +
                                " more like it in the last seconds, counted in "
                                "pg_cluster_rdma_error_totals)");
}

void Engine::report(ErrorType type, Severity sev, int peer_node, const std::string& text) {
    shm_->errors.add(type, sev, peer_node, unix_time_us(), text.c_str());
    if (peer_node >= 1 && peer_node <= kMaxNodes) {
        PeerShared& ps = shm_->peers[peer_node - 1];
        std::strncpy(ps.last_error, text.c_str(), sizeof ps.last_error - 1);
    }
    host_.log(sev, text);
}

}  // namespace pgrac::ic
