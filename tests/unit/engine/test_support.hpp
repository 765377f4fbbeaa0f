// Support for engine_test.cpp: engines with their own shared regions over the
// real TCP transport on the loopback interface, a transport decorator that
// injects faults, and the backend and LMS roles played by the test itself.
// Everything runs on the test thread: pump() polls every engine round-robin
// until a condition holds or a deadline passes.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ic/base/atomics.hpp"
#include "ic/engine/engine.hpp"
#include "ic/wire/frame.hpp"
#include "ic/shm/shared_state.hpp"
#include "tiers/transports.hpp"
#include "tiers/transport_test_support.hpp"

namespace pgrac::ic::enginetest {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

inline constexpr uint64_t kSystemId = 0x5eed5eed12345678ULL;
inline const std::string kKey = "engine-test-shared-key-0123456789";
inline constexpr milliseconds kWait{10000};

using tiers::transporttest::free_port;
using tiers::transporttest::raw_connect;

// ---- the fault-injecting transport

// One Message frame as the decorator saw it leave.
struct SentMessage {
    ic::ConnId conn;
    int lane;  // -1 if the connection's Hello was not seen
    uint32_t seq;
    uint16_t flags;
    MessageHeader mh;
};

// The bytes of one frame given as pieces (what a transport's send() takes).
inline std::vector<uint8_t> flatten(const iovec* iov, int iovcnt) {
    std::vector<uint8_t> f;
    for (int i = 0; i < iovcnt; i++) {
        const auto* b = static_cast<const uint8_t*>(iov[i].iov_base);
        f.insert(f.end(), b, b + iov[i].iov_len);
    }
    return f;
}

// Wraps the real TCP transport. It forwards everything, and on request drops
// or duplicates outbound Message frames or closes connections underneath the
// engine. It also learns each connection's lane from the Hello it carries.
class FaultyTransport final : public ic::Transport, public ic::TransportHandler {
  public:
    explicit FaultyTransport(ic::TransportHandler& up, const tiers::TcpOptions& opts = {})
        : up_(up), inner_(tiers::make_tcp_transport(*this, opts)) {}

    // ---- controls
    // The next n Message frames vanish (send() says yes, nothing is written).
    // With close_after, the connection that carried the last one is then closed.
    void drop_next_messages(int n, bool close_after = false) {
        drop_ = n;
        close_after_drop_ = close_after;
    }
    // The next n Message frames are written twice.
    void duplicate_next_messages(int n) { dup_ = n; }
    // The next Message frame goes out as fn makes it (crc mode: the decorator
    // sets the CRC again afterwards); the engine keeps its own copy.
    void rewrite_next_message(std::function<void(FrameHeader&, std::vector<uint8_t>&)> fn) {
        rewrite_ = std::move(fn);
    }
    // Writes a copy of every Message frame ever sent on this engine's
    // connections again, on whatever connection now carries its lane.
    size_t replay_old_messages() {
        size_t n = 0;
        for (const auto& [lane, frames] : history_) {
            ic::ConnId c = conn_of_lane(lane);
            if (c == 0) continue;
            for (const auto& f : frames) {
                iovec iov{const_cast<uint8_t*>(f.data()), f.size()};
                if (inner_->send(c, &iov, 1)) n++;
            }
        }
        return n;
    }
    void keep_history(bool on) { keep_history_ = on; }
    // Closes every open connection (as a network failure would).
    size_t kill_all() {
        std::vector<ic::ConnId> ids(open_.begin(), open_.end());
        for (auto id : ids) inner_->close(id);
        return ids.size();
    }
    // Refuses new outbound connections at once while set.
    bool refuse_connects = false;
    // Holds inbound HelloReply frames until n have arrived, then hands them
    // all to the engine: every lane's Hello is out before any lane completes.
    void hold_hello_replies(int n) { hold_replies_ = n; }

    const std::vector<SentMessage>& sent() const { return sent_; }
    void clear_sent() { sent_.clear(); }
    size_t open_conns() const { return open_.size(); }
    uint64_t duplicated() const { return duplicated_; }
    uint64_t dropped() const { return dropped_; }
    int lane_of(ic::ConnId c) const {
        auto it = lane_.find(c);
        return it == lane_.end() ? -1 : it->second;
    }
    ic::ConnId conn_of_lane(int lane) const {
        for (auto id : open_)
            if (lane_of(id) == lane) return id;
        return 0;
    }

    // ---- ic::Transport
    const char* name() const override { return inner_->name(); }
    bool listen(const std::string& host, uint16_t port, std::string* error) override {
        return inner_->listen(host, port, error);
    }
    ic::ConnId connect(const std::string& host, uint16_t port, std::string* error) override {
        if (refuse_connects) {
            *error = "refused by the test";
            return 0;
        }
        return inner_->connect(host, port, error);
    }
    bool send(ic::ConnId conn, const iovec* iov, int iovcnt) override {
        return send_kept(conn, iov, iovcnt, nullptr, 0);
    }
    // A frame kept for resending reaches the real transport as such (it may
    // queue a reference to it), after the same faults as any other.
    bool send_kept(ic::ConnId conn, const iovec* iov, int iovcnt,
                   std::shared_ptr<const uint8_t> kept, size_t kept_len) override {
        const std::vector<uint8_t> f = flatten(iov, iovcnt);
        FrameHeader h;
        if (f.size() >= kFrameHeaderSize &&
            decode_frame_header(f.data(), f.size(), kMaxFramePayload, &h) == FrameError::None) {
            if (h.type == FrameType::Hello) note_hello(conn, f.data() + kFrameHeaderSize, f.size());
            if (h.type == FrameType::Message) {
                SentMessage m{conn, lane_of(conn), h.seq, h.flags, {}};
                decode_message_header(f.data() + kFrameHeaderSize, h.payload_len, &m.mh);
                sent_.push_back(m);
                if (keep_history_ && m.lane >= 0) history_[m.lane].push_back(f);
                if (drop_ > 0) {
                    dropped_++;
                    if (--drop_ == 0 && close_after_drop_) inner_->close(conn);
                    return true;
                }
                if (dup_ > 0) {
                    dup_--;
                    if (inner_->send(conn, iov, iovcnt)) duplicated_++;
                }
                if (rewrite_) {
                    auto fn = std::move(rewrite_);
                    rewrite_ = nullptr;
                    std::vector<uint8_t> body(f.begin() + kFrameHeaderSize, f.end());
                    fn(h, body);
                    h.payload_len = static_cast<uint32_t>(body.size());
                    std::vector<uint8_t> out(kFrameHeaderSize);
                    encode_frame_header(h, body.data(), out.data());
                    out.insert(out.end(), body.begin(), body.end());
                    iovec one{out.data(), out.size()};
                    return inner_->send(conn, &one, 1);
                }
            }
        }
        if (kept != nullptr) return inner_->send_kept(conn, iov, iovcnt, std::move(kept), kept_len);
        return inner_->send(conn, iov, iovcnt);
    }
    // The MSG_MORE hint reaches the real transport, as in the listener.
    void set_more(bool more) override { inner_->set_more(more); }
    void push_more() override { inner_->push_more(); }
    size_t queued_bytes(ic::ConnId conn) const override { return inner_->queued_bytes(conn); }
    void set_max_payload(ic::ConnId conn, uint32_t max_payload) override {
        inner_->set_max_payload(conn, max_payload);
    }
    void close(ic::ConnId conn) override { inner_->close(conn); }
    int wait_fd() const override { return inner_->wait_fd(); }
    void poll(int timeout_ms) override {
        inner_->poll(timeout_ms);
        if (hold_replies_ > 0 && static_cast<int>(held_.size()) >= hold_replies_) {
            hold_replies_ = 0;
            for (auto& [conn, f] : held_) {
                FrameHeader h;
                decode_frame_header(f.data(), f.size(), kMaxFramePayload, &h);
                if (open_.count(conn)) up_.on_frame(conn, h, f.data() + kFrameHeaderSize);
            }
            held_.clear();
        }
    }
    uint32_t max_payload() const override { return inner_->max_payload(); }
    ic::TransportCounters counters() const override { return inner_->counters(); }

    // ---- ic::TransportHandler (from the real transport, on to the engine)
    void on_connected(ic::ConnId conn, bool ok, const std::string& error) override {
        if (ok) open_.insert(conn);
        up_.on_connected(conn, ok, error);
    }
    void on_accepted(ic::ConnId conn, const std::string& peer_host) override {
        open_.insert(conn);
        up_.on_accepted(conn, peer_host);
    }
    void on_frame(ic::ConnId conn, const FrameHeader& h, const uint8_t* payload) override {
        if (h.type == FrameType::Hello) note_hello(conn, payload, kFrameHeaderSize + h.payload_len);
        if (h.type == FrameType::HelloReply && hold_replies_ > 0) {
            std::vector<uint8_t> f(kFrameHeaderSize);
            FrameHeader copy = h;
            encode_frame_header(copy, payload, f.data());
            f.insert(f.end(), payload, payload + h.payload_len);
            held_.emplace_back(conn, std::move(f));
            return;
        }
        up_.on_frame(conn, h, payload);
    }
    void on_closed(ic::ConnId conn, const std::string& reason, FrameError err) override {
        open_.erase(conn);
        up_.on_closed(conn, reason, err);
    }
    void on_accept_paused(int err, int pause_ms) override { up_.on_accept_paused(err, pause_ms); }

  private:
    // Hello: u8 min, u8 max, u8 len + cluster, u64 sysid, u16 node, u8 lane, nonce
    void note_hello(ic::ConnId conn, const uint8_t* p, size_t frame_len) {
        const size_t n = frame_len - kFrameHeaderSize;
        if (n < 3) return;
        const size_t off = 3 + p[2] + 8 + 2;
        if (off < n) lane_[conn] = p[off];
    }

    ic::TransportHandler& up_;
    std::unique_ptr<ic::Transport> inner_;
    std::set<ic::ConnId> open_;
    std::map<ic::ConnId, int> lane_;
    std::vector<SentMessage> sent_;
    std::map<int, std::vector<std::vector<uint8_t>>> history_;
    bool keep_history_ = false;
    int drop_ = 0;
    bool close_after_drop_ = false;
    int dup_ = 0;
    std::function<void(FrameHeader&, std::vector<uint8_t>&)> rewrite_;
    int hold_replies_ = 0;
    std::vector<std::pair<ic::ConnId, std::vector<uint8_t>>> held_;
    uint64_t duplicated_ = 0, dropped_ = 0;
};

// ---- the host

class FakeHost : public EngineHost {
  public:
    std::vector<uint32_t> woken_procs;
    std::map<uint32_t, uint64_t> woken_lms;
    std::vector<std::pair<Severity, std::string>> logs;

    void wake_process(uint32_t procno) override { woken_procs.push_back(procno); }
    void wake_lms(uint32_t worker) override { woken_lms[worker]++; }
    void log(Severity severity, const std::string& message) override {
        logs.emplace_back(severity, message);
    }
    bool logged(const std::string& part) const {
        for (const auto& l : logs)
            if (l.second.find(part) != std::string::npos) return true;
        return false;
    }
};

// ---- one shared region in plain process memory

class Region {
  public:
    explicit Region(const SharedSizing& s) : size_(shared_size(s)) {
        void* m = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        mem_ = m == MAP_FAILED ? nullptr : m;
        if (mem_ != nullptr) shm_ = shared_init(mem_, s);
    }
    ~Region() {
        if (mem_ != nullptr) munmap(mem_, size_);
    }
    Region(const Region&) = delete;
    Region& operator=(const Region&) = delete;
    IcShared* shm() const { return shm_; }

  private:
    size_t size_;
    void* mem_ = nullptr;
    IcShared* shm_ = nullptr;
};

// What the test's LMS role took from an inbox ring.
struct Received {
    uint16_t src;
    uint16_t flags;
    uint32_t worker;
    MessageHeader mh;
    std::vector<uint8_t> body;
};

inline SharedSizing small_sizing() {
    SharedSizing s;
    s.n_lms = 2;
    s.n_slots = 8;
    s.outbound_ring_bytes = 4u << 20;
    s.inbox_ring_bytes = 1u << 20;
    s.reply_pool_chunks = 8 * kReplyMaxChunks;  // every slot may await a largest reply
    return s;
}

// ---- one instance: region + host + engine, and the backend and LMS roles

class TestNode {
  public:
    TestNode(EngineConfig cfg, SharedSizing sizing = small_sizing())
        : cfg_(std::move(cfg)), sizing_(sizing) {
        build();
    }

    bool start(std::string* err) { return engine_->start(err); }
    // Throws the engine away without a word to anyone (a crash) and starts a
    // new one with a new incarnation and fresh shared memory (a restart).
    bool restart(uint64_t incarnation, std::string* err) {
        engine_.reset();
        net_ = nullptr;
        cfg_.identity.incarnation = incarnation;
        received.clear();
        build();
        return start(err);
    }

    Engine& engine() { return *engine_; }
    FaultyTransport& net() { return *net_; }
    IcShared* shm() { return region_->shm(); }
    FakeHost& host() { return *host_; }
    uint16_t id() const { return cfg_.identity.node_id; }
    PeerShared& peer(uint16_t node) { return shm()->peers[node - 1]; }
    PeerState state_of(uint16_t node) {
        return static_cast<PeerState>(load_relaxed(&peer(node).state));
    }
    uint64_t errors(ErrorType t) { return shm()->errors.total(t); }

    // ---- LMS role
    bool serve = true;                 // drain inbox rings (else leave them full)
    bool echo_rpcs = true;             // answer RPC requests with their body
    std::set<uint16_t> no_echo_types;  // ... except these message types
    std::vector<Received> received;
    // Takes every record from every inbox, like lms_worker.cpp. True if any.
    bool serve_lms() {
        if (!serve) return false;
        bool any = false;
        for (uint32_t w = 0; w < shm()->n_lms; w++) {
            ShmRing ring = inbox_ring(shm(), w);
            const uint8_t* rec;
            size_t len;
            while (ring.peek(&rec, &len)) {
                RingPrefix pre;
                std::memcpy(&pre, rec, sizeof pre);
                Received r{pre.node, pre.flags, w, {}, {}};
                const uint8_t* payload = rec + sizeof pre;
                decode_message_header(payload, pre.payload_len, &r.mh);
                r.body.assign(payload + kMessageHeaderSize, payload + pre.payload_len);
                ring.pop();
                any = true;
                if ((pre.flags & kFlagRpcRequest) && echo_rpcs &&
                    no_echo_types.count(r.mh.msg_type) == 0) {
                    MessageHeader rh = r.mh;
                    rh.status = PGRAC_IC_OK;
                    rh.epoch = load_relaxed(&shm()->epoch);
                    push(pre.node, kFlagRpcReply | (pre.flags & kFlagControlLane), rh,
                         r.body.data(), static_cast<uint32_t>(r.body.size()));
                }
                received.push_back(std::move(r));
            }
        }
        return any;
    }

    // ---- the listener serving in place (src/listener/in_place.cpp), for the types in
    // EngineConfig::serve_in_place: echoes RPCs, or with hand_to_lms set gives
    // the request to the LMS workers as a handler that would block does.
    bool hand_to_lms = false;
    bool owner_serves = true;  // false: leave requests held in the engine
    // Echo replies sealed while they are written (Engine::begin_sealed_reply),
    // in pieces of 1, 7, 1000 bytes and the rest, as the block service does;
    // with abandon_first each is begun, half written and abandoned once first.
    bool seal_replies = false;
    bool abandon_first = false;
    size_t sealed_begun = 0;  // replies begin_sealed_reply() took
    bool seal_reply(uint16_t to, const MessageHeader& rh, const std::vector<uint8_t>& body) {
        const uint32_t len = static_cast<uint32_t>(body.size());
        auto write_all = [&](uint32_t upto) {
            const uint32_t cuts[] = {1, 8, 1008, len};
            uint32_t at = 0;
            for (uint32_t cut : cuts) {
                const uint32_t end = std::min(cut, upto);
                if (end <= at) continue;
                engine_->write_sealed_reply(body.data() + at, end - at);
                at = end;
            }
        };
        if (abandon_first) {
            if (!engine_->begin_sealed_reply(to, kFlagRpcReply, rh, len)) return false;
            write_all(len / 2);
            engine_->abandon_sealed_reply();
        }
        if (!engine_->begin_sealed_reply(to, kFlagRpcReply, rh, len)) return false;
        sealed_begun++;
        write_all(len);
        engine_->finish_sealed_reply();
        return true;
    }
    std::vector<Received> served_in_place;
    bool serve_owner() {
        if (!owner_serves) return false;
        bool any = false;
        std::vector<uint8_t> rec(sizeof(RingPrefix) + kMessageHeaderSize + PGRAC_IC_MAX_MESSAGE);
        while (size_t len = engine_->take_in_place(rec.data(), rec.size())) {
            any = true;
            if (hand_to_lms) {
                engine_->hand_to_lms(rec.data(), len);
                continue;
            }
            RingPrefix pre;
            std::memcpy(&pre, rec.data(), sizeof pre);
            Received r{pre.node, pre.flags, ~0u, {}, {}};
            const uint8_t* payload = rec.data() + sizeof pre;
            decode_message_header(payload, pre.payload_len, &r.mh);
            r.body.assign(payload + kMessageHeaderSize, payload + pre.payload_len);
            if (pre.flags & kFlagRpcRequest) {
                MessageHeader rh = r.mh;
                rh.status = PGRAC_IC_OK;
                if (seal_replies && seal_reply(pre.node, rh, r.body)) {
                    served_in_place.push_back(std::move(r));
                    continue;
                }
                std::vector<uint8_t> out(kMessageHeaderSize + r.body.size());
                encode_message_header(rh, out.data());
                std::copy(r.body.begin(), r.body.end(), out.begin() + kMessageHeaderSize);
                engine_->send_from_owner(pre.node, kFlagRpcReply, out.data(),
                                         static_cast<uint32_t>(out.size()));
            }
            served_in_place.push_back(std::move(r));
        }
        return any;
    }

    // ---- backend role
    // A record into the outbound ring, with the queue accounting of send_path.cpp.
    bool push(uint16_t to, uint16_t flags, const MessageHeader& mh, const void* body,
              uint32_t len) {
        uint8_t mhbuf[kMessageHeaderSize];
        encode_message_header(mh, mhbuf);
        RingPrefix pre{to, flags, static_cast<uint32_t>(kMessageHeaderSize + len)};
        iovec iov[3] = {{&pre, sizeof pre}, {mhbuf, sizeof mhbuf}, {const_cast<void*>(body), len}};
        const uint64_t frame_bytes = kFrameHeaderSize + pre.payload_len;
        PeerShared* ps = peer_shared(shm(), to);
        if (ps != nullptr) {
            count(&ps->queued_msgs);
            count(&ps->queued_bytes, frame_bytes);
        }
        if (outbound_ring(shm()).push(iov, len > 0 ? 3 : 2) == ShmRing::Push::Ok) return true;
        if (ps != nullptr) {
            __atomic_fetch_sub(&ps->queued_msgs, uint64_t{1}, __ATOMIC_RELAXED);
            __atomic_fetch_sub(&ps->queued_bytes, frame_bytes, __ATOMIC_RELAXED);
        }
        return false;
    }
    bool send(uint16_t to, uint16_t msg_type, uint32_t route_key, const std::vector<uint8_t>& body,
              uint16_t flags = 0) {
        MessageHeader mh;
        mh.msg_type = msg_type;
        mh.route_key = route_key;
        mh.epoch = load_relaxed(&shm()->epoch);
        return push(to, flags, mh, body.data(), static_cast<uint32_t>(body.size()));
    }
    // Arms reply slot `slot` like src/capi/rpc.cpp and sends the request. Returns the rpc_id.
    uint64_t start_rpc(uint16_t to, uint32_t slot_no, uint32_t route_key,
                       const std::vector<uint8_t>& body, uint16_t flags = 0) {
        ReplySlot* slot = reply_slot(shm(), slot_no);
        store_release(&slot->state, static_cast<uint32_t>(SlotState::Idle));
        if (!slot_reserve(shm(), slot, PGRAC_IC_MAX_MESSAGE)) return 0;
        const uint32_t gen = ++slot->generation;
        const uint64_t rpc_id = make_rpc_id(slot_no, gen);
        store_release(&slot->rpc_id, rpc_id);
        store_release(&slot->state, static_cast<uint32_t>(SlotState::Waiting));
        MessageHeader mh;
        mh.msg_type = 300;
        mh.route_key = route_key;
        mh.rpc_id = rpc_id;
        mh.epoch = load_relaxed(&shm()->epoch);
        if (!push(to, kFlagRpcRequest | flags, mh, body.data(), static_cast<uint32_t>(body.size())))
            return 0;
        return rpc_id;
    }
    bool rpc_done(uint32_t slot_no) {
        return load_acquire(&reply_slot(shm(), slot_no)->state) ==
               static_cast<uint32_t>(SlotState::Done);
    }
    uint32_t rpc_status(uint32_t slot_no) { return reply_slot(shm(), slot_no)->status; }
    std::vector<uint8_t> rpc_reply(uint32_t slot_no) {
        ReplySlot* s = reply_slot(shm(), slot_no);
        std::vector<uint8_t> out(s->len);
        read_slot(shm(), s, out.data(), s->len);
        return out;
    }

    bool paused = false;  // not polled (a SIGSTOPped listener)

  private:
    void build() {
        region_ = std::make_unique<Region>(sizing_);
        IcShared* s = region_->shm();
        s->my_node_id = cfg_.identity.node_id;
        s->incarnation = cfg_.identity.incarnation;
        s->started_us = unix_time_us();
        for (const NodeAddress& n : cfg_.nodes) {
            PeerShared& p = s->peers[n.node_id - 1];
            p.node_id = n.node_id;
            snprintf(p.address, sizeof p.address, "%s:%u", n.host.c_str(),
                     static_cast<unsigned>(n.port));
            p.rpc_latency.reset();
        }
        host_ = std::make_unique<FakeHost>();
        FaultyTransport** slot = &net_;
        engine_ = std::make_unique<Engine>(
            cfg_, s, *host_, [slot](ic::TransportHandler& h) -> std::unique_ptr<ic::Transport> {
                // As the listener configures TCP: small frames until authenticated.
                tiers::TcpOptions o;
                o.max_payload = static_cast<uint32_t>(kMessageHeaderSize + 65536 + kFrameTagSize);
                o.initial_max_payload = kMaxHandshakePayload;
                auto t = std::make_unique<FaultyTransport>(h, o);
                *slot = t.get();
                return t;
            });
    }

    EngineConfig cfg_;
    SharedSizing sizing_;
    std::unique_ptr<Region> region_;
    std::unique_ptr<FakeHost> host_;
    FaultyTransport* net_ = nullptr;
    std::unique_ptr<Engine> engine_;
};

// Configuration of node `id` in a cluster of `nodes`.
inline EngineConfig make_config(uint16_t id, const std::vector<NodeAddress>& nodes,
                                uint64_t incarnation = 0) {
    EngineConfig c;
    c.identity.cluster_name = "enginetest";
    c.identity.system_id = kSystemId;
    c.identity.node_id = id;
    c.identity.incarnation = incarnation != 0 ? incarnation : 1000 + id;
    c.identity.instance = c.identity.incarnation;
    c.identity.location = 5000 + id;  // a restart is at the same place
    c.identity.key.assign(kKey.begin(), kKey.end());
    // The fault-injecting transport reads the frames it passes (lanes, seqs,
    // message headers): in clear. Tests of mac and secure set them.
    c.identity.protection = WireProtection::Crc;
    c.nodes = nodes;
    c.bulk_lanes = 1;
    c.heartbeat_interval_ms = 100;
    c.peer_timeout_ms = 10000;
    return c;
}

// Polls every node that is not paused, and serves its LMS inboxes, until
// pred() holds (true) or `limit` passes (false). Sleeps on the engines'
// wait fds for at most a millisecond when nothing moved.
inline bool pump_until(const std::vector<TestNode*>& nodes, const std::function<bool()>& pred,
                       milliseconds limit = kWait) {
    const auto deadline = Clock::now() + limit;
    for (;;) {
        if (pred()) return true;
        if (Clock::now() >= deadline) return false;
        bool any = false;
        std::vector<pollfd> fds;
        for (TestNode* n : nodes) {
            if (n->paused) continue;
            any |= n->engine().run_once();
            any |= n->serve_lms();
            any |= n->serve_owner();
            fds.push_back(pollfd{n->engine().wait_fd(), POLLIN, 0});
        }
        if (!any && !fds.empty()) ::poll(fds.data(), fds.size(), 1);
    }
}

// Polls for `span`, checking `invariant` after every round. False as soon as
// it fails.
inline bool pump_for(const std::vector<TestNode*>& nodes, milliseconds span,
                     const std::function<bool()>& invariant) {
    bool ok = true;
    pump_until(
        nodes,
        [&] {
            ok = invariant();
            return !ok;
        },
        span);
    return ok;
}

}  // namespace pgrac::ic::enginetest
