// The hand-delivered harness of the direct-routing attack tests
// (direct_attack_test.cpp, direct_attack2_test.cpp): real GES workers whose
// hosts model the wait slots' direct states as src/instance/ges_shmem.cpp
// does, and whose messages are delivered by hand, so that the requester lane
// (RPC), the backend's ring to its LMS and the LMSs' peer lanes can be
// interleaved at will (each FIFO on its own).
#pragma once

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "ges/worker_support.hpp"

namespace pgrac::ic::ges::testing::hand {

using pgrac::ic::ges::testing::FakeHost;
using pgrac::ic::ges::testing::GesCluster;

// Slot states (src/instance/ges_shmem.hpp).
inline constexpr uint32_t kIdle = 0, kWaiting = 1, kGranted = 2, kDenied = 3, kDirectReady = 5,
                          kSelfGranted = 6;

struct Slot {
    uint64_t id = 0;
    uint32_t st = kIdle;
    uint64_t token = 0;
    LockValue value;
    DenyReason why = DenyReason::Cancelled;
};

// FakeHost for everything but the slots, which follow ges_deliver,
// ges_mark_direct and ges_settle_direct.
class SlotHost final : public WorkerHost {
  public:
    FakeHost base;
    std::map<uint32_t, Slot> slots;  // by proc (one slot per backend)

    void send(uint16_t n, GesChannel c, uint32_t k, std::vector<uint8_t> b) override {
        base.send(n, c, k, std::move(b));
    }
    uint64_t lease_clock_ms() override { return base.lease_clock_ms(); }
    bool fence_if_lapsed(uint64_t now) override { return base.fence_if_lapsed(now); }
    View committed_view() override { return base.committed_view(); }
    uint64_t lease_word() override { return base.lease_word(); }
    void request_new_epoch() override { base.request_new_epoch(); }
    void withhold_echoes(uint16_t n, uint64_t ms) override { base.withhold_echoes(n, ms); }
    void count_stale_epoch_message() override { base.count_stale_epoch_message(); }
    uint32_t shard_fences(uint32_t w) override { return base.shard_fences(w); }
    uint32_t bump_shard_fences(uint32_t w) override { return base.bump_shard_fences(w); }
    NodeMask witnesses() override { return base.witnesses(); }
    NodeCache* node_cache() override { return base.node_cache(); }
    std::vector<uint32_t> cache_users(uint32_t e, uint32_t g) override {
        return base.cache_users(e, g);
    }
    uint32_t n_lms() override { return base.n_lms(); }
    int64_t peer_timeout_ms() override { return base.peer_timeout_ms(); }
    int64_t deadlock_timeout_ms() override { return base.deadlock_timeout_ms(); }
    uint32_t remaster_window() override { return base.remaster_window(); }
    bool owner_alive(uint32_t, uint64_t) override { return true; }
    void log(WorkerLogLevel l, std::string t) override { base.log(l, std::move(t)); }
    void record_error(ErrorType t, Severity s, int p, const std::string& x) override {
        base.record_error(t, s, p, x);
    }
    void count(WorkerCounter c) override { base.count(c); }

    bool deliver_grant(uint32_t proc, uint64_t id, uint64_t token, const LockValue& v) override {
        auto it = slots.find(proc);
        if (it == slots.end() || it->second.id != id) return false;
        Slot& s = it->second;
        if (s.st == kWaiting || s.st == kDirectReady) {
            s.st = kGranted;
            s.token = token;
            s.value = v;
            return true;
        }
        if (s.st == kSelfGranted) {  // the registry has it now: the slot is free
            s.st = kIdle;
            return true;
        }
        return false;
    }
    bool deliver_denial(uint32_t proc, uint64_t id, DenyReason why) override {
        auto it = slots.find(proc);
        if (it == slots.end() || it->second.id != id) return false;
        Slot& s = it->second;
        if (s.st != kWaiting && s.st != kDirectReady) return false;
        s.st = kDenied;
        s.why = why;
        return true;
    }
    bool slot_waits(uint32_t proc, uint64_t id) override {
        auto it = slots.find(proc);
        return it != slots.end() && it->second.id == id &&
               (it->second.st == kWaiting || it->second.st == kDirectReady);
    }
    bool mark_direct(uint32_t proc, uint64_t id) override {
        auto it = slots.find(proc);
        if (it == slots.end() || it->second.id != id || it->second.st != kWaiting) return false;
        it->second.st = kDirectReady;
        return true;
    }
    bool settle_direct(uint32_t proc, uint64_t id, uint64_t* token, LockValue* value) override {
        auto it = slots.find(proc);
        if (it == slots.end() || it->second.id != id) return false;
        Slot& s = it->second;
        if (s.st == kDirectReady) {
            s.st = kWaiting;
            return false;
        }
        if (s.st != kSelfGranted) return false;
        *token = s.token;
        *value = s.value;
        s.st = kIdle;
        return true;
    }
};

struct Node {
    uint16_t id;
    SlotHost host;
    std::vector<uint64_t> mirror_memory;
    std::unique_ptr<Worker> worker;
    explicit Node(uint16_t n) : id(n) {
        mirror_memory.resize(RegistryMirror::bytes_for(256) / 8 + 1);
        worker =
            std::make_unique<Worker>(host, 0, n, RegistryMirror::create(mirror_memory.data(), 256));
    }
};

struct Msg {
    uint16_t from, to;
    GesChannel ch;
    std::vector<uint8_t> body;
};

class Net {
  public:
    explicit Net(uint16_t n) {
        for (uint16_t i = 1; i <= n; i++) nodes.push_back(std::make_unique<Node>(i));
    }
    std::vector<std::unique_ptr<Node>> nodes;
    std::deque<Msg> wire;  // the LMSs' peer lanes (per-pair FIFO)
    int64_t now = 1'700'000'000'000'000;

    Node& node(uint16_t i) { return *nodes.at(i - 1); }
    Worker& w(uint16_t i) { return *node(i).worker; }
    Slot& slot(uint16_t n, uint32_t proc) { return node(n).host.slots[proc]; }

    void collect() {
        for (auto& n : nodes) {
            for (auto& s : n->host.base.sent)
                wire.push_back(Msg{n->id, s.node, s.channel, std::move(s.body)});
            n->host.base.sent.clear();
        }
    }
    // Delivers peer-lane messages `pick` accepts, each pair in order.
    void pump(const std::function<bool(const Msg&)>& pick = nullptr) {
        for (bool moved = true; moved;) {
            moved = false;
            std::set<std::pair<uint16_t, uint16_t>> blocked;
            for (size_t i = 0; i < wire.size(); i++) {
                const Msg& m = wire[i];
                if (blocked.count({m.from, m.to})) continue;
                if (pick && !pick(m)) {
                    blocked.insert({m.from, m.to});
                    continue;
                }
                Msg x = std::move(wire[i]);
                wire.erase(wire.begin() + static_cast<long>(i));
                w(x.to).handle(GesCluster::role_of(x.ch), x.from, x.body.data(), x.body.size(),
                               now);
                collect();
                moved = true;
                break;
            }
        }
    }
    void commit_view(uint32_t epoch, const std::vector<uint16_t>& members) {
        for (auto& n : nodes) n->host.base.set_view(epoch, nodes_mask(members));
        for (auto& n : nodes) n->worker->tick(now);
        collect();
        pump();
    }
    void tick_all() {
        for (auto& n : nodes) n->worker->tick(now);
        collect();
        pump();
    }
    // The backend's ring to its own LMS (the LMS takes the message now).
    void to_lms(uint16_t n, const GesMessage& m) {
        std::vector<uint8_t> b;
        EXPECT_EQ(encode_ges_message(m, &b), GesWireError::None);
        w(n).handle(WorkerRole::Client, n, b.data(), b.size(), now);
        collect();
    }
    void to_lms_raw(uint16_t n, const std::vector<uint8_t>& b) {
        w(n).handle(WorkerRole::Client, n, b.data(), b.size(), now);
        collect();
    }
    // The backend's RPC on its requester lane to `master`: the encoded answer.
    std::vector<uint8_t> rpc(uint16_t from, uint16_t master, const GesMessage& m) {
        std::vector<uint8_t> b;
        EXPECT_EQ(encode_ges_message(m, &b), GesWireError::None);
        std::vector<uint8_t> a = w(master).handle_direct(from, b.data(), b.size(), now);
        collect();
        return a;
    }

    // ---- backend helpers (lock_client.cpp / lock_wait.cpp)
    void arm(uint16_t n, uint32_t proc, uint64_t id) {
        Slot& s = slot(n, proc);
        s = Slot{};
        s.id = id;
        s.st = kWaiting;
    }
    static GesMessage request(uint16_t n, uint32_t proc, const ResourceName& r, LockMode mode,
                              uint64_t id, bool direct, uint32_t epoch) {
        GesMessage m;
        m.type = GesMsgType::Request;
        m.owner = Owner{n, proc};
        m.resource = r;
        m.mode = mode;
        m.request_id = id;
        m.flags = direct ? kDirect : 0;
        m.epoch = direct ? epoch : 0;
        return m;
    }
    // direct_attempt's Grant case: DirectReady -> SelfGranted (true) or not.
    bool self_take(uint16_t n, uint32_t proc, const std::vector<uint8_t>& answer) {
        GesMessage a;
        EXPECT_EQ(decode_ges_message(answer.data(), answer.size(), &a), GesWireError::None);
        Slot& s = slot(n, proc);
        if (a.type != GesMsgType::Grant || s.id != a.request_id || s.st != kDirectReady)
            return false;
        s.st = kSelfGranted;
        s.token = a.token;
        s.value = a.value;
        return true;
    }
    // ges_abandon of a wait (Waiting or DirectReady -> Idle, then a Cancel).
    void abandon(uint16_t n, uint32_t proc, const ResourceName& r) {
        Slot& s = slot(n, proc);
        ASSERT_TRUE(s.st == kWaiting || s.st == kDirectReady);
        const uint64_t id = s.id;
        s.st = kIdle;
        GesMessage c;
        c.type = GesMsgType::Cancel;
        c.owner = Owner{n, proc};
        c.resource = r;
        c.request_id = id;
        c.reason = DenyReason::Timeout;
        to_lms(n, c);
    }
    void release(uint16_t n, uint32_t proc, const ResourceName& r) {
        GesMessage m;
        m.type = GesMsgType::Release;
        m.owner = Owner{n, proc};
        m.resource = r;
        to_lms(n, m);
    }

    std::vector<LockRow> rows(uint16_t master, const ResourceName& r) {
        std::vector<LockRow> out;
        for (const LockRow& row : w(master).snapshot())
            if (row.resource == r.to_string()) out.push_back(row);
        return out;
    }
    // Who believes it holds r (registries: granted or converting), and how.
    std::map<std::pair<uint16_t, uint32_t>, LockMode> believers(const ResourceName& r) {
        std::map<std::pair<uint16_t, uint32_t>, LockMode> out;
        for (auto& n : nodes)
            for (const ReplayEntry& e : n->worker->registry().locks())
                if (e.resource == r && e.state != LockState::Waiting)
                    out[{e.owner.node, e.owner.proc}] = e.granted_mode;
        return out;
    }
    bool conflicting_believers(const ResourceName& r) {
        auto b = believers(r);
        for (auto& [x, mx] : b)
            for (auto& [y, my] : b)
                if (x < y && !modes_compatible(mx, my)) return true;
        return false;
    }
};

inline const std::vector<uint16_t> kAll{1, 2, 3};

inline uint64_t rid(uint32_t proc, uint32_t n, uint32_t session = 1) {
    return GesCluster::request_id(proc, n, session);
}

}  // namespace pgrac::ic::ges::testing::hand
