// A GES cluster in memory for the unit tests and the fuzz target: one real
// ges::Worker per node (LMS worker 0, n_lms = 1) over a FakeHost that keeps
// the membership in a real MembershipShared, the registry mirror in a
// buffer, the backends' wait slots as a set of waited-for request ids, and
// queues what the worker sends; GesCluster routes the queued messages between
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
    std::set<uint64_t> waiting;     // request ids whose backend waits in its slot
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
    std::vector<Delivery> undelivered;  // the slot no longer waited
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
        if (waiting.erase(d.request_id) == 0) {
            undelivered.push_back(d);
            return false;
        }
        deliveries.push_back(d);
        return true;
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
    void release_all(uint16_t id, uint32_t proc) {
        GesMessage m;
        m.type = GesMsgType::ReleaseAll;
        m.owner = Owner{id, proc};
        from_backend(id, m);
    }
    // The backend stops waiting (timeout, query cancel) and sends a Cancel.
    void cancel(uint16_t id, uint32_t proc, const ResourceName& r, uint64_t rid) {
        host(id).waiting.erase(rid);
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
    LockValue value(uint16_t id, uint64_t rid) {
        for (const FakeHost::Delivery& d : host(id).deliveries)
            if (d.granted && d.request_id == rid) return d.value;
        return LockValue{};
    }
    uint64_t token(uint16_t id, uint64_t rid) {
        for (const FakeHost::Delivery& d : host(id).deliveries)
            if (d.granted && d.request_id == rid) return d.token;
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
};

}  // namespace pgrac::ic::ges::testing
