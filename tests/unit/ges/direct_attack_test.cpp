// Adversarial tests of GES direct routing (commit 2ee584b): a small harness of
// real workers whose hosts model the wait slots' direct states (ges_shmem.cpp:
// Waiting, DirectReady, Delivering, SelfGranted) and whose messages are
// delivered by hand, so that the requester lane (RPC), the backend's ring to
// its LMS and the LMSs' peer lanes can be interleaved at will (each FIFO on
// its own). Every GesDirectAttack test showed a violation on 2ee584b (an adversarial
// review's sequences); each passes with its fix.
#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "ges/worker_support.hpp"

using namespace pgrac::ic;
using namespace pgrac::ic::ges;
using pgrac::ic::ges::testing::FakeHost;
using pgrac::ic::ges::testing::GesCluster;

namespace {

// Slot states (src/instance/ges_shmem.hpp).
constexpr uint32_t kIdle = 0, kWaiting = 1, kGranted = 2, kDenied = 3, kDirectReady = 5,
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

const std::vector<uint16_t> kAll{1, 2, 3};

uint64_t rid(uint32_t proc, uint32_t n) {
    return GesCluster::request_id(proc, n);
}

// ---------------------------------------------------------------------------
// 1. SAFETY. An owner's earlier Request for the resource, still on the LMS
// path (its backend timed out and cancelled it: the Cancel follows it), is
// overtaken by the owner's next, direct, request. has_lock() is false (the
// earlier request has not arrived) and owner_ids_ is below the new id: the
// master serves it (EX). The old Request (PR) then arrives and is taken as a
// DOWN-conversion of the new grant, granted at once; its Cancel finds nothing
// to withdraw. The requester LMS files the old grant as an orphan (the new
// entry is still Waiting), the relay of the direct grant erases the orphan:
// the backend holds EX, the master records PR, a PR of another node is granted.
TEST(GesDirectAttack, EarlierRequestOnLmsPathDownConvertsDirectGrant) {
    Net net(3);
    net.commit_view(1, kAll);
    const ResourceName r = GesCluster::mastered_by(2, kAll, "dc");
    // (1) PR request through the LMS (e.g. a Redirect/RPC-timeout fallback,
    // cluster.ges_direct_requests off, or a direct_master() that said 0).
    const uint64_t id1 = rid(7, 1);
    net.arm(1, 7, id1);
    net.to_lms(1, Net::request(1, 7, r, LockMode::PR, id1, false, 0));
    // (2) lock_timeout: the backend abandons it; the Cancel follows on the LMS path.
    net.abandon(1, 7, r);
    // (3) The next request, direct, EX: registered, then the RPC overtakes (1)+(2).
    const uint64_t id2 = rid(7, 2);
    net.arm(1, 7, id2);
    GesMessage d = Net::request(1, 7, r, LockMode::EX, id2, true, 1);
    net.to_lms(1, d);
    ASSERT_EQ(net.slot(1, 7).st, kDirectReady);
    std::vector<uint8_t> a = net.rpc(1, 2, d);
    // (4) The LMS path catches up: Request id1, Cancel id1, Grant id1 back.
    net.pump();
    // (5) The backend takes the grant itself and relays it.
    ASSERT_TRUE(net.self_take(1, 7, a));
    net.to_lms_raw(1, a);
    net.pump();
    // (6) Another node asks for PR.
    const uint64_t id3 = rid(9, 3);
    net.arm(3, 9, id3);
    net.to_lms(3, Net::request(3, 9, r, LockMode::PR, id3, false, 0));
    net.pump();
    net.tick_all();
    // The backend of node 1 believes EX (its grant's token is in its hold);
    // node 3 must not be granted PR meanwhile.
    EXPECT_EQ(net.believers(r)[std::make_pair(uint16_t{1}, uint32_t{7})], LockMode::EX);
    EXPECT_NE(net.slot(3, 9).st, kGranted) << "PR granted while node 1 holds EX";
    EXPECT_FALSE(net.conflicting_believers(r));
    for (const LockRow& row : net.rows(2, r)) {
        if (row.owner_node == 1) {
            EXPECT_EQ(row.mode, LockMode::EX) << "master records 1/7 as PR";
        }
    }
}

// ---------------------------------------------------------------------------
// 2. LIVENESS (leak). A query cancel / statement_timeout lands while the
// backend waits in requester_lane_rpc (CHECK_FOR_INTERRUPTS after
// out.interrupted), after the master granted: the grant was captured into the
// RPC reply, which nobody reads. ges_abandon swaps DirectReady to Idle and
// sends Cancel; the master's Cancel of a *granted* lock is a no-op, and no
// Grant ever reaches the LMS (so its cancelling_ entry never triggers undo).
// The lock stays at the master until the session ends.
TEST(GesDirectAttack, CancelDuringRpcLeaksDirectGrant) {
    Net net(3);
    net.commit_view(1, kAll);
    const ResourceName r = GesCluster::mastered_by(2, kAll, "lk");
    const uint64_t id1 = rid(7, 1);
    net.arm(1, 7, id1);
    GesMessage d = Net::request(1, 7, r, LockMode::EX, id1, true, 1);
    net.to_lms(1, d);
    (void)net.rpc(1, 2, d);  // granted at the master; the reply is lost to the interrupt
    net.abandon(1, 7, r);
    net.pump();
    net.tick_all();
    EXPECT_TRUE(net.believers(r).empty());
    EXPECT_TRUE(net.rows(2, r).empty()) << "the master still holds node 1's EX for nobody";
    const uint64_t id2 = rid(9, 2);
    net.arm(3, 9, id2);
    net.to_lms(3, Net::request(3, 9, r, LockMode::EX, id2, false, 0));
    net.pump();
    net.tick_all();
    EXPECT_EQ(net.slot(3, 9).st, kGranted) << "node 3 waits for a lock nobody holds";
}

// ---------------------------------------------------------------------------
// 3. LIVENESS (wait forever). The direct request is Queued; its grant comes
// later on the master's peer lane and reaches the requester's LMS before the
// LMS took the registration from the backend's ring (LMS busy: a flush that
// waits up to 1 s for room, a replay, ...). No registry entry: "a grant
// nobody waits for" is undone (Release). Then the registration arrives,
// opens the slot (DirectReady) and sends nothing: the backend waits forever
// (resend_if_lms_restarted only resends from Waiting).
TEST(GesDirectAttack, PeerLaneGrantBeforeRegistrationStrandsBackend) {
    Net net(3);
    net.commit_view(1, kAll);
    const ResourceName r = GesCluster::mastered_by(2, kAll, "wf");
    const uint64_t h = rid(9, 1);
    net.arm(3, 9, h);
    net.to_lms(3, Net::request(3, 9, r, LockMode::EX, h, false, 0));
    net.pump();
    ASSERT_EQ(net.slot(3, 9).st, kGranted);
    const uint64_t id = rid(7, 2);
    net.arm(1, 7, id);
    GesMessage d = Net::request(1, 7, r, LockMode::EX, id, true, 1);
    std::vector<uint8_t> a = net.rpc(1, 2, d);  // Queued (the registration is still in the ring)
    GesMessage ans;
    ASSERT_EQ(decode_ges_message(a.data(), a.size(), &ans), GesWireError::None);
    ASSERT_EQ(ans.type, GesMsgType::Queued);
    net.release(3, 9, r);
    net.pump();        // grant -> node 1's LMS, which undoes it
    net.to_lms(1, d);  // the registration, at last
    net.pump();
    for (int i = 0; i < 20; i++) {
        net.now += 100'000;
        for (auto& n : net.nodes) n->host.base.now_ms += 100;
        net.tick_all();
    }
    EXPECT_EQ(net.slot(1, 7).st, kGranted)
        << "backend still waits; slot state " << net.slot(1, 7).st;
}

// ---------------------------------------------------------------------------
// 4. LIVENESS (slot stuck SelfGranted). The backend took the grant itself;
// before its LMS processed the relay, the node is fenced (lease lapsed) or the
// LMS worker's shard is fenced: drop_everything denies waiting entries
// (ges_deliver fails on SelfGranted), clears the registry and direct_. The
// relay then finds no entry and is dropped; no epoch settles the slot (the
// registry has no entry to settle). ges_arm spins forever on SelfGranted:
// every later global lock call of the session hangs.
TEST(GesDirectAttack, FenceWhileSelfGrantedLeavesSlotStuck) {
    Net net(3);
    net.commit_view(1, kAll);
    const ResourceName r = GesCluster::mastered_by(2, kAll, "sg");
    const uint64_t id = rid(7, 1);
    net.arm(1, 7, id);
    GesMessage d = Net::request(1, 7, r, LockMode::PR, id, true, 1);
    net.to_lms(1, d);
    std::vector<uint8_t> a = net.rpc(1, 2, d);
    ASSERT_TRUE(net.self_take(1, 7, a));
    net.node(1).host.base.shard_fence[0]++;  // (or the node's lease fence)
    net.w(1).tick(net.now);
    net.collect();
    net.to_lms_raw(1, a);  // the relay, after the drop
    net.commit_view(2, kAll);
    net.commit_view(3, kAll);
    EXPECT_NE(net.slot(1, 7).st, kSelfGranted) << "the backend's next ges_arm never returns";
}

// ---------------------------------------------------------------------------
// 5. LIVENESS (BAST lost; cached lock starves the waiter). The direct grant
// is BASTed (another node asks) and the BAST reaches the requester LMS before
// the registration: cache_bast records basted_ but no early_basts_ (no entry
// yet); register_direct then erases basted_. At its release the lock goes
// into the node's cache (Transfer), the master does not BAST the node owner
// again (marks kept), and the waiter starves (the fix of c0f0248 bypassed).
TEST(GesDirectAttack, BastBeforeRegistrationIsLostAndLockIsCached) {
    Net net(3);
    net.node(1).host.base.enable_cache(64);
    net.commit_view(1, kAll);
    const ResourceName r = GesCluster::mastered_by(2, kAll, "bc");
    const uint64_t id = rid(7, 1);
    net.arm(1, 7, id);
    GesMessage d = Net::request(1, 7, r, LockMode::EX, id, true, 1);
    std::vector<uint8_t> a = net.rpc(1, 2, d);  // Grant; registration still in the ring
    ASSERT_FALSE(net.self_take(1, 7, a));  // slot not opened yet: relay and wait (Direct::Wait)
    const uint64_t w = rid(9, 2);
    net.arm(3, 9, w);
    net.to_lms(3, Net::request(3, 9, r, LockMode::EX, w, false, 0));
    net.pump();            // node 3's request waits; the BAST reaches node 1 first
    net.to_lms(1, d);      // registration
    net.to_lms_raw(1, a);  // relay: granted through the LMS
    ASSERT_EQ(net.slot(1, 7).st, kGranted);
    net.slot(1, 7).st = kIdle;
    net.release(1, 7, r);
    net.pump();
    for (int i = 0; i < 10; i++) {
        net.now += 100'000;
        for (auto& n : net.nodes) n->host.base.now_ms += 100;
        net.tick_all();
    }
    EXPECT_EQ(net.slot(3, 9).st, kGranted) << "node 3 starves behind node 1's cached lock";
}

}  // namespace

namespace {

// Controls (these PASS): the same steps as 3 and 5 with the registration
// taken before the master's peer-lane messages: the ordering is the cause.
TEST(GesDirectAttackControl, RegistrationFirstThenPeerLaneGrant) {
    Net net(3);
    net.commit_view(1, kAll);
    const ResourceName r = GesCluster::mastered_by(2, kAll, "wf");
    const uint64_t h = rid(9, 1);
    net.arm(3, 9, h);
    net.to_lms(3, Net::request(3, 9, r, LockMode::EX, h, false, 0));
    net.pump();
    const uint64_t id = rid(7, 2);
    net.arm(1, 7, id);
    GesMessage d = Net::request(1, 7, r, LockMode::EX, id, true, 1);
    net.to_lms(1, d);
    (void)net.rpc(1, 2, d);
    net.release(3, 9, r);
    net.pump();
    EXPECT_EQ(net.slot(1, 7).st, kGranted);
}

TEST(GesDirectAttackControl, RegistrationBeforeBastKeepsIt) {
    Net net(3);
    net.node(1).host.base.enable_cache(64);
    net.commit_view(1, kAll);
    const ResourceName r = GesCluster::mastered_by(2, kAll, "bc");
    const uint64_t id = rid(7, 1);
    net.arm(1, 7, id);
    GesMessage d = Net::request(1, 7, r, LockMode::EX, id, true, 1);
    std::vector<uint8_t> a = net.rpc(1, 2, d);
    ASSERT_FALSE(net.self_take(1, 7, a));
    net.to_lms(1, d);  // registration before the BAST
    const uint64_t w = rid(9, 2);
    net.arm(3, 9, w);
    net.to_lms(3, Net::request(3, 9, r, LockMode::EX, w, false, 0));
    net.pump();
    net.to_lms_raw(1, a);
    ASSERT_EQ(net.slot(1, 7).st, kGranted);
    net.slot(1, 7).st = kIdle;
    net.release(1, 7, r);
    net.pump();
    net.tick_all();
    EXPECT_EQ(net.slot(3, 9).st, kGranted);
}

}  // namespace
