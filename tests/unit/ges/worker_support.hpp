// A GES cluster in memory for the unit tests and the fuzz target: one real
// ges::Worker per node (LMS worker 0, n_lms = 1) over a FakeHost that keeps
// the membership in a real MembershipShared, the registry mirror in a
// buffer, the backends' wait slots as a set of waited-for request ids (and,
// for direct routing, the slots opened for their backend's own completion),
// and queues what the worker sends; GesCluster routes the queued messages between
// the nodes' workers as the interconnect would (per-pair FIFO, the sender as
// the authenticated source).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ic/ges/worker.hpp"
#include "ic/membership/membership.hpp"
#include "ic/ges/registry_mirror.hpp"
#include "ic/shm/shared_state.hpp"

namespace pgrac::ic::ges::testing {

class FakeHost final : public WorkerHost {
  public:
    struct Sent {
        uint16_t node;
        GesChannel channel;
        uint32_t route_key;
        std::vector<uint8_t> body;
    };
    struct Delivery {
        bool granted;
        uint32_t proc;
        uint64_t request_id;
        uint64_t token;     // granted
        DenyReason reason;  // denied
        LockValue value;    // granted: the value block
    };

    FakeHost() : ms(std::make_unique<MembershipShared>()) { set_lease(kLeaseForever); }

    // ---- what the test sets
    void set_view(uint32_t epoch, NodeMask members) {
        ms->views[epoch % kViewRing] = View{epoch, 0, members, 0};
        ms->committed_epoch = epoch;
    }
    void set_lease(uint64_t expiry_ms) {
        ms->lease_word = (static_cast<uint64_t>(lease_fences(ms->lease_word)) << 40) | expiry_ms;
    }
    std::unique_ptr<MembershipShared> ms;
    uint64_t now_ms = 1000;
    std::set<uint64_t> waiting;  // request ids whose backend waits in its slot
    // Direct routing (src/instance/ges_shmem.cpp): a slot is Waiting (in
    // `waiting`), DirectReady or SelfGranted (in `direct_slots`), or done
    // (in neither: answered, adopted, abandoned).
    enum class Slot : uint8_t { Waiting, DirectReady, SelfGranted, Done };
    struct DirectSlot {
        Slot state = Slot::DirectReady;
        uint64_t token = 0;  // SelfGranted: the grant the backend took
        LockValue value;
    };
    std::map<uint64_t, DirectSlot> direct_slots;
    Slot slot(uint64_t request_id) const {
        if (waiting.count(request_id)) return Slot::Waiting;
        auto it = direct_slots.find(request_id);
        return it == direct_slots.end() ? Slot::Done : it->second.state;
    }
    // The backend completes its slot with the master's immediate grant
    // (lock_client.cpp, direct_attempt): only from DirectReady.
    bool self_complete(uint32_t proc, uint64_t request_id, uint64_t token, const LockValue& value) {
        auto it = direct_slots.find(request_id);
        if (it == direct_slots.end() || it->second.state != Slot::DirectReady) return false;
        it->second = DirectSlot{Slot::SelfGranted, token, value};
        self_granted.push_back({true, proc, request_id, token, DenyReason::Cancelled, value});
        return true;
    }
    // The backend stops waiting (a timeout, a cancel, its exit).
    void abandon(uint64_t request_id) {
        waiting.erase(request_id);
        direct_slots.erase(request_id);
    }
    std::set<uint32_t> dead_procs;  // backends that are gone (owner_alive: false)
    uint32_t shard_fence[kMaxLmsWorkers] = {};
    NodeMask witness = 0;
    uint32_t lms = 1;
    int64_t peer_timeout = 10000;
    int64_t deadlock_timeout = 300;
    uint32_t remaster = 0;  // remaster_window(): 0, no mastership that follows use

    // ---- what the worker did
    std::deque<Sent> sent;
    std::vector<Delivery> deliveries;
    std::vector<Delivery> undelivered;   // the slot no longer waited
    std::vector<Delivery> self_granted;  // grants a backend took itself (direct routing)
    std::vector<Delivery> adopted;       // ... and that the worker then took over
    uint64_t marks = 0, settles = 0;     // mark_direct() / settle_direct() calls
    std::vector<std::pair<WorkerLogLevel, std::string>> logs;
    std::vector<ErrorType> errors;
    std::map<WorkerCounter, uint64_t> counters;
    uint64_t epoch_requests = 0;
    std::vector<std::pair<uint16_t, uint64_t>> withheld;  // withhold_echoes() calls
    uint64_t stale_messages = 0;

    uint64_t counter(WorkerCounter c) const {
        auto it = counters.find(c);
        return it == counters.end() ? 0 : it->second;
    }

    // ---- WorkerHost
    void send(uint16_t node, GesChannel channel, uint32_t route_key,
              std::vector<uint8_t> body) override {
        sent.push_back({node, channel, route_key, std::move(body)});
    }
    uint64_t lease_clock_ms() override { return now_ms; }
    bool fence_if_lapsed(uint64_t now) override {
        return pgrac::ic::fence_if_lapsed(ms.get(), now);
    }
    View committed_view() override { return pgrac::ic::committed_view(ms.get()); }
    uint64_t lease_word() override { return pgrac::ic::lease_word(ms.get()); }
    void request_new_epoch() override { epoch_requests++; }
    void withhold_echoes(uint16_t node, uint64_t for_ms) override {
        withheld.emplace_back(node, for_ms);
    }
    void count_stale_epoch_message() override { stale_messages++; }
    uint32_t shard_fences(uint32_t worker) override { return shard_fence[worker]; }
    uint32_t bump_shard_fences(uint32_t worker) override { return ++shard_fence[worker]; }
    NodeMask witnesses() override { return witness; }
    uint32_t n_lms() override { return lms; }
    int64_t peer_timeout_ms() override { return peer_timeout; }
    int64_t deadlock_timeout_ms() override { return deadlock_timeout; }
    uint32_t remaster_window() override { return remaster; }
    bool deliver_grant(uint32_t proc, uint64_t request_id, uint64_t token,
                       const LockValue& value) override {
        return deliver({true, proc, request_id, token, DenyReason::Cancelled, value});
    }
    bool deliver_denial(uint32_t proc, uint64_t request_id, DenyReason reason) override {
        return deliver({false, proc, request_id, 0, reason, {}});
    }
    bool owner_alive(uint32_t proc, uint64_t) override { return dead_procs.count(proc) == 0; }
    bool mark_direct(uint32_t, uint64_t request_id) override {
        marks++;
        if (waiting.erase(request_id) == 0) return false;
        direct_slots[request_id] = DirectSlot{};
        return true;
    }
    bool slot_waits(uint32_t, uint64_t request_id) override {
        const Slot s = slot(request_id);
        return s == Slot::Waiting || s == Slot::DirectReady;
    }
    bool settle_direct(uint32_t proc, uint64_t request_id, uint64_t* token,
                       LockValue* value) override {
        settles++;
        auto it = direct_slots.find(request_id);
        if (it == direct_slots.end()) return false;
        if (it->second.state == Slot::DirectReady) {  // closed: the answer comes from the worker
            direct_slots.erase(it);
            waiting.insert(request_id);
            return false;
        }
        *token = it->second.token;
        *value = it->second.value;
        adopted.push_back(
            {true, proc, request_id, it->second.token, DenyReason::Cancelled, it->second.value});
        direct_slots.erase(it);  // the slot is free again
        return true;
    }
    void log(WorkerLogLevel level, std::string text) override {
        logs.emplace_back(level, std::move(text));
    }
    void record_error(ErrorType type, Severity, int, const std::string&) override {
        errors.push_back(type);
    }
    void count(WorkerCounter c) override { counters[c]++; }

    // ---- the node's lock cache (off unless enable_cache() was called)
    std::vector<uint64_t> cache_memory;
    NodeCache cache;
    void enable_cache(uint32_t entries_per_worker) {
        cache_memory.assign(NodeCache::bytes_for(lms, entries_per_worker) / 8 + 1, 0);
        cache = NodeCache::format(cache_memory.data(), lms, entries_per_worker);
    }
    NodeCache* node_cache() override { return cache.enabled() ? &cache : nullptr; }
    // Who uses which entry (index, generation): what the backends' slots record.
    std::map<std::pair<uint32_t, uint32_t>, std::vector<uint32_t>> users_of;
    std::vector<uint32_t> cache_users(uint32_t entry, uint32_t generation) override {
        auto it = users_of.find({entry, generation});
        return it == users_of.end() ? std::vector<uint32_t>{} : it->second;
    }

  private:
    bool deliver(const Delivery& d) {
        if (waiting.erase(d.request_id) != 0) {
            deliveries.push_back(d);
            return true;
        }
        auto it = direct_slots.find(d.request_id);
        if (it != direct_slots.end() && it->second.state == Slot::DirectReady) {
            direct_slots.erase(it);
            deliveries.push_back(d);
            return true;
        }
        if (it != direct_slots.end() && it->second.state == Slot::SelfGranted && d.granted) {
            // The backend took this grant itself: the worker has it now, and
            // the slot is free again (ges_deliver's adoption).
            adopted.push_back(d);
            direct_slots.erase(it);
            return true;
        }
        undelivered.push_back(d);
        return false;
    }
};

// One node: its host, its mirror's memory, its worker (re-created by restart()).
struct FakeNode {
    uint16_t id = 0;
    FakeHost host;
    std::vector<uint64_t> mirror_memory;
    RegistryMirror mirror;
    std::unique_ptr<Worker> worker;

    FakeNode(uint16_t node, uint32_t mirror_capacity) : id(node) {
        mirror_memory.resize(RegistryMirror::bytes_for(mirror_capacity) / 8 + 1);
        mirror = RegistryMirror::create(mirror_memory.data(), mirror_capacity);
        worker = std::make_unique<Worker>(host, 0, node, mirror);
    }
    // A new process of LMS worker 0: an empty worker, its registry back from the mirror.
    void restart(int64_t now) {
        worker =
            std::make_unique<Worker>(host, 0, id, RegistryMirror::attach(mirror_memory.data()));
        worker->start_after_restart(now);
    }
};

class GesCluster {
  public:
    explicit GesCluster(uint16_t n_nodes, uint32_t mirror_capacity = 256) {
        for (uint16_t n = 1; n <= n_nodes; n++)
            nodes_.push_back(std::make_unique<FakeNode>(n, mirror_capacity));
    }

    FakeNode& node(uint16_t id) { return *nodes_.at(id - 1); }
    Worker& worker(uint16_t id) { return *node(id).worker; }
    FakeHost& host(uint16_t id) { return node(id).host; }
    uint16_t size() const { return static_cast<uint16_t>(nodes_.size()); }
    int64_t now() const { return now_us_; }

    // Advances every node's clocks (Unix us for the worker, monotonic ms for leases).
    void advance_ms(int64_t ms) {
        now_us_ += ms * 1000;
        for (auto& n : nodes_) n->host.now_ms += static_cast<uint64_t>(ms);
    }

    // Commits view (epoch, members) on every node, then lets each worker adopt it.
    void commit_view(uint32_t epoch, std::vector<uint16_t> members) {
        for (auto& n : nodes_) n->host.set_view(epoch, nodes_mask(members));
        tick_all();
    }

    void tick(uint16_t id) {
        worker(id).tick(now_us_);
        pump();
    }
    void tick_all() {
        for (auto& n : nodes_) n->worker->tick(now_us_);
        pump();
    }

    // A backend's request id: its slot (proc) and session in the high bits.
    static uint64_t request_id(uint32_t proc, uint32_t counter, uint32_t session = 1) {
        return (static_cast<uint64_t>(proc) << 40) | (static_cast<uint64_t>(session & 0xff) << 32) |
               counter;
    }

    // A backend of node `id` (proc) asks for `mode` on `r` and waits in its slot.
    uint64_t request(uint16_t id, uint32_t proc, const ResourceName& r, LockMode mode,
                     uint8_t flags = 0, uint32_t timeout_ms = 0) {
        return ask(GesMsgType::Request, id, proc, r, mode, flags, timeout_ms);
    }
    // A backend that took a lock from the cache asks for a conversion the
    // cache could not make (a Convert to its LMS).
    uint64_t convert_cached(uint16_t id, uint32_t proc, const ResourceName& r, LockMode mode,
                            uint8_t flags = 0, uint32_t timeout_ms = 0) {
        return ask(GesMsgType::Convert, id, proc, r, mode, flags, timeout_ms);
    }
    uint64_t ask(GesMsgType type, uint16_t id, uint32_t proc, const ResourceName& r, LockMode mode,
                 uint8_t flags, uint32_t timeout_ms, const LockValue& value = {}) {
        const uint64_t rid = request_id(proc, ++counter_);
        GesMessage m;
        m.type = type;
        m.value = value;
        m.owner = Owner{id, proc};
        m.resource = r;
        m.mode = mode;
        m.request_id = rid;
        m.flags = flags;
        m.timeout_ms = timeout_ms;
        host(id).waiting.insert(rid);
        from_backend(id, m);
        return rid;
    }
    // (value: what a PW/EX holder writes; None leaves the value block as it is)
    void release(uint16_t id, uint32_t proc, const ResourceName& r, const LockValue& value = {}) {
        GesMessage m;
        m.type = GesMsgType::Release;
        m.value = value;
        m.owner = Owner{id, proc};
        m.resource = r;
        from_backend(id, m);
    }
    void cache_notify(uint16_t id, uint32_t proc, const ResourceName& r) {
        GesMessage m;
        m.type = GesMsgType::CacheNotify;
        m.owner = Owner{id, proc};
        m.resource = r;
        from_backend(id, m);
    }
    // pgrac_ges_unlock_all() or the exit hook: bounded by the session's last
    // request id, as the backend sends it (lock_client.cpp).
    void release_all(uint16_t id, uint32_t proc) {
        GesMessage m;
        m.type = GesMsgType::ReleaseAll;
        m.owner = Owner{id, proc};
        m.request_id = request_id(proc, counter_);
        from_backend(id, m);
    }
    // The backend stops waiting (timeout, query cancel) and sends a Cancel.
    void cancel(uint16_t id, uint32_t proc, const ResourceName& r, uint64_t rid) {
        host(id).abandon(rid);
        GesMessage m;
        m.type = GesMsgType::Cancel;
        m.owner = Owner{id, proc};
        m.resource = r;
        m.request_id = rid;
        m.reason = DenyReason::Cancelled;
        from_backend(id, m);
    }
    void from_backend(uint16_t id, const GesMessage& m) {
        std::vector<uint8_t> body;
        encode_ges_message(m, &body);
        worker(id).handle(WorkerRole::Client, id, body.data(), body.size(), now_us_);
        pump();
    }

    // ---- direct routing (src/capi/ges/lock_client.cpp, direct_attempt):
    // a backend's new request for a resource mastered on another node is
    // registered with its LMS (Client Request flagged kDirect, with the epoch
    // of the committed view it read) and sent as an RPC to the home master
    // (Worker::handle_direct); the steps can be run one by one.
    enum class DirectPath { Taken, Wait, Fallback };
    struct DirectAnswer {
        bool ok = false;            // decoded, and about this request
        GesMessage m;               // Grant, Deny, Queued
        std::vector<uint8_t> body;  // as the RPC's reply carried it
        bool redirect() const {
            return ok && m.type == GesMsgType::Deny && m.reason == DenyReason::Redirect;
        }
    };
    // r's home master in node id's committed view (witnesses master nothing)
    // and that view's epoch; 0 if it is id itself.
    uint16_t direct_master(uint16_t id, const ResourceName& r, uint32_t* epoch = nullptr) {
        const View v = committed_view(host(id).ms.get());
        std::vector<uint16_t> masters;
        for (uint16_t n : mask_nodes(v.members & ~host(id).witness)) masters.push_back(n);
        if (masters.empty()) return 0;
        const uint16_t m = master_for(r, masters);
        if (epoch != nullptr) *epoch = v.epoch;
        return m == id ? 0 : m;
    }
    // Step 1: the backend arms its slot and registers the request with its
    // LMS (epoch: what it read of the committed view; 0: read it now).
    uint64_t direct_register(uint16_t id, uint32_t proc, const ResourceName& r, LockMode mode,
                             uint8_t flags = 0, uint32_t timeout_ms = 0, uint32_t epoch = 0) {
        const uint64_t rid = request_id(proc, ++counter_);
        GesMessage m;
        m.type = GesMsgType::Request;
        m.owner = Owner{id, proc};
        m.resource = r;
        m.mode = mode;
        m.request_id = rid;
        m.flags = static_cast<uint8_t>(flags | kDirect);
        m.timeout_ms = timeout_ms;
        m.epoch = epoch != 0 ? epoch : committed_view(host(id).ms.get()).epoch;
        direct_msgs_[rid] = m;
        host(id).waiting.insert(rid);
        from_backend(id, m);
        return rid;
    }
    // Step 2: the RPC to `master` (0: the home master in the committed view
    // of the owner's node), as sent by node `src` (0: the owner's node).
    DirectAnswer direct_call(uint64_t rid, uint16_t master = 0, uint16_t src = 0) {
        const GesMessage& m = direct_msgs_.at(rid);
        if (master == 0) master = direct_master(m.owner.node, m.resource);
        if (src == 0) src = m.owner.node;
        std::vector<uint8_t> body;
        encode_ges_message(m, &body);
        DirectAnswer a;
        a.body = worker(master).handle_direct(src, body.data(), body.size(), now_us_);
        pump();
        a.ok = !a.body.empty() &&
               decode_ges_message(a.body.data(), a.body.size(), &a.m) == GesWireError::None &&
               a.m.owner == m.owner && a.m.request_id == rid && a.m.resource == m.resource;
        return a;
    }
    // The backend takes an immediate grant itself, if its LMS opened the slot.
    bool direct_take(uint64_t rid, const DirectAnswer& a) {
        const GesMessage& m = direct_msgs_.at(rid);
        return a.ok && a.m.type == GesMsgType::Grant && a.m.epoch != 0 &&
               host(m.owner.node).self_complete(m.owner.proc, rid, a.m.token, a.m.value);
    }
    // The answer's bytes to the backend's LMS (a Client message).
    void direct_relay(uint64_t rid, const DirectAnswer& a) {
        const uint16_t id = direct_msgs_.at(rid).owner.node;
        worker(id).handle(WorkerRole::Client, id, a.body.data(), a.body.size(), now_us_);
        pump();
    }
    // Not served directly: the same request, plain, to the LMS.
    void direct_fallback(uint64_t rid) {
        GesMessage m = direct_msgs_.at(rid);
        m.flags = static_cast<uint8_t>(m.flags & ~kDirect);
        m.epoch = 0;
        from_backend(m.owner.node, m);
    }
    // Step 3: what the backend does with the answer (direct_attempt).
    DirectPath direct_finish(uint64_t rid, const DirectAnswer& a) {
        if (!a.ok || a.redirect() ||
            (a.m.type != GesMsgType::Grant && a.m.type != GesMsgType::Deny &&
             a.m.type != GesMsgType::Queued)) {
            direct_fallback(rid);
            return DirectPath::Fallback;
        }
        if (a.m.type == GesMsgType::Queued) return DirectPath::Wait;
        const bool taken = direct_take(rid, a);
        direct_relay(rid, a);
        return taken ? DirectPath::Taken : DirectPath::Wait;
    }
    // All three steps.
    uint64_t direct_request(uint16_t id, uint32_t proc, const ResourceName& r, LockMode mode,
                            uint8_t flags = 0, uint32_t timeout_ms = 0,
                            DirectPath* path = nullptr) {
        const uint64_t rid = direct_register(id, proc, r, mode, flags, timeout_ms);
        const DirectPath p = direct_finish(rid, direct_call(rid));
        if (path != nullptr) *path = p;
        return rid;
    }
    // The backend took rid's grant itself.
    bool taken(uint16_t id, uint64_t rid) {
        for (const FakeHost::Delivery& d : host(id).self_granted)
            if (d.request_id == rid) return true;
        return false;
    }
    // The backend has rid's grant, whichever way it came.
    bool holds_grant(uint16_t id, uint64_t rid) { return granted(id, rid) || taken(id, rid); }

    // Messages to or from a held node stay queued until released.
    std::set<uint16_t> held;
    // A message (from, to, body) this returns true for is lost.
    std::function<bool(uint16_t, uint16_t, const std::vector<uint8_t>&)> lose;
    // Delivers queued messages until none is left (or only held ones).
    void pump() {
        for (int round = 0; round < 100000; round++) {
            bool moved = false;
            for (auto& n : nodes_) {
                std::deque<FakeHost::Sent>& q = n->host.sent;
                for (size_t i = 0; i < q.size();) {
                    if (q[i].node < 1 || q[i].node > size()) {  // no such node
                        q.erase(q.begin() + static_cast<long>(i));
                        continue;
                    }
                    if (held.count(n->id) || held.count(q[i].node)) {
                        i++;
                        continue;
                    }
                    FakeHost::Sent s = std::move(q[i]);
                    q.erase(q.begin() + static_cast<long>(i));
                    if (lose && lose(n->id, s.node, s.body)) {
                        moved = true;
                        break;
                    }
                    messages_delivered++;
                    if (count_types) {
                        GesMessage d;
                        if (decode_ges_message(s.body.data(), s.body.size(), &d) ==
                            GesWireError::None)
                            delivered_types[{s.node, d.type}]++;
                    }
                    worker(s.node).handle(role_of(s.channel), n->id, s.body.data(), s.body.size(),
                                          now_us_);
                    moved = true;
                    break;  // per-pair FIFO: start again from the oldest queued message
                }
            }
            if (!moved) return;
        }
    }
    uint64_t messages_delivered = 0;
    // With count_types: messages delivered by pump(), by destination and type.
    bool count_types = false;
    std::map<std::pair<uint16_t, GesMsgType>, uint64_t> delivered_types;
    uint64_t messages_delivered_to(uint16_t node, GesMsgType type) const {
        auto it = delivered_types.find({node, type});
        return it == delivered_types.end() ? 0 : it->second;
    }

    static WorkerRole role_of(GesChannel c) {
        return c == GesChannel::Master  ? WorkerRole::Master
               : c == GesChannel::Reply ? WorkerRole::Reply
                                        : WorkerRole::Deadlock;
    }

    // Every delivery to backends of node `id`, and the grants among them.
    const std::vector<FakeHost::Delivery>& deliveries(uint16_t id) { return host(id).deliveries; }
    bool granted(uint16_t id, uint64_t rid) {
        for (const FakeHost::Delivery& d : host(id).deliveries)
            if (d.granted && d.request_id == rid) return true;
        return false;
    }
    bool denied(uint16_t id, uint64_t rid, DenyReason why) {
        for (const FakeHost::Delivery& d : host(id).deliveries)
            if (!d.granted && d.request_id == rid && d.reason == why) return true;
        return false;
    }
    // The value block the grant of rid brought (None: no such grant).
    // (a grant the backend took itself, too)
    LockValue value(uint16_t id, uint64_t rid) {
        for (const FakeHost::Delivery& d : host(id).deliveries)
            if (d.granted && d.request_id == rid) return d.value;
        for (const FakeHost::Delivery& d : host(id).self_granted)
            if (d.request_id == rid) return d.value;
        return LockValue{};
    }
    uint64_t token(uint16_t id, uint64_t rid) {
        for (const FakeHost::Delivery& d : host(id).deliveries)
            if (d.granted && d.request_id == rid) return d.token;
        for (const FakeHost::Delivery& d : host(id).self_granted)
            if (d.request_id == rid) return d.token;
        return 0;
    }

    // What the clients believe they hold, cluster-wide: for each resource,
    // owner -> held mode (granted or converting entries of every registry).
    std::map<std::string, std::map<std::pair<uint16_t, uint32_t>, LockMode>> held_locks() {
        std::map<std::string, std::map<std::pair<uint16_t, uint32_t>, LockMode>> out;
        for (auto& n : nodes_)
            for (const ReplayEntry& e : n->worker->registry().locks())
                if (e.state != LockState::Waiting && e.granted_mode != LockMode::NL)
                    out[e.resource.to_string()][{e.owner.node, e.owner.proc}] = e.granted_mode;
        return out;
    }
    // True if no two owners anywhere believe they hold one resource in
    // conflicting modes, and every master's table is consistent.
    bool no_conflicting_holders() {
        for (auto& [r, holders] : held_locks())
            for (auto& [a, ma] : holders)
                for (auto& [b, mb] : holders)
                    if (a < b && !modes_compatible(ma, mb)) return false;
        return tables_consistent();
    }
    // Every master's table has one row per owner and resource, valid modes,
    // and no two conflicting grants (unless its host was told of a replay
    // conflict: replayed grants that conflict are kept, and reported).
    bool tables_consistent() {
        for (auto& n : nodes_) {
            std::set<std::pair<std::string, std::pair<uint16_t, uint32_t>>> seen;
            std::map<std::string, std::vector<LockMode>> granted;
            for (const LockRow& row : n->worker->snapshot()) {
                if (!lock_mode_valid(static_cast<uint8_t>(row.mode)) ||
                    !seen.insert({row.resource, {row.owner_node, row.proc}}).second)
                    return false;
                if (row.state != LockState::Waiting)
                    granted[row.resource].push_back(
                        row.state == LockState::Converting ? row.held_mode : row.mode);
            }
            if (n->host.counter(WorkerCounter::ReplayConflicts) != 0) continue;
            for (auto& [r, modes] : granted)
                for (size_t i = 0; i < modes.size(); i++)
                    for (size_t j = i + 1; j < modes.size(); j++)
                        if (!modes_compatible(modes[i], modes[j])) return false;
        }
        return true;
    }

    // The rows of master's table (its snapshot) for r.
    std::vector<LockRow> rows(uint16_t master, const ResourceName& r) {
        std::vector<LockRow> out;
        for (const LockRow& row : worker(master).snapshot())
            if (row.resource == r.to_string()) out.push_back(row);
        return out;
    }

    // A resource (text "<prefix>N") that `master` masters among `members`.
    static ResourceName mastered_by(uint16_t master, const std::vector<uint16_t>& members,
                                    const std::string& prefix = "r") {
        for (int i = 0;; i++) {
            ResourceName r = *ResourceName::from_text(prefix + std::to_string(i));
            if (master_for(r, members) == master) return r;
        }
    }

  private:
    std::vector<std::unique_ptr<FakeNode>> nodes_;
    int64_t now_us_ = 1'700'000'000'000'000;
    uint32_t counter_ = 0;
    std::map<uint64_t, GesMessage> direct_msgs_;  // direct requests by id
};

}  // namespace pgrac::ic::ges::testing
