// Second adversarial review of GES direct routing, against the fixes of
// c7c2cf6 (stale-request drop and regrant, Withdraw, early answers, the
// ReleaseAll bound). The harness is direct_attack_test.cpp's (real workers,
// slots modelled after ges_shmem.cpp, messages delivered by hand). Each
// GesDirectAttack2 test FAILS on c7c2cf6: it shows the violation named above it.
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

uint64_t rid(uint32_t proc, uint32_t n, uint32_t session = 1) {
    return GesCluster::request_id(proc, n, session);
}

GesMessage release_all(uint16_t n, uint32_t proc, uint64_t bound) {
    GesMessage m;
    m.type = GesMsgType::ReleaseAll;
    m.owner = Owner{n, proc};
    m.request_id = bound;  // ges_send_release_all: the session's last request id
    return m;
}

GesMessage cancel(uint16_t n, uint32_t proc, const ResourceName& r, uint64_t id) {
    GesMessage c;
    c.type = GesMsgType::Cancel;
    c.owner = Owner{n, proc};
    c.resource = r;
    c.request_id = id;
    c.reason = DenyReason::Timeout;
    return c;
}

GesMsgType answer_type(const std::vector<uint8_t>& a) {
    GesMessage m;
    EXPECT_EQ(decode_ges_message(a.data(), a.size(), &m), GesWireError::None);
    return m.type;
}

void idle_ticks(Net& net, int n) {
    for (int i = 0; i < n; i++) {
        net.now += 100'000;
        for (auto& x : net.nodes) x->host.base.now_ms += 100;
        net.tick_all();
    }
}

// ---------------------------------------------------------------------------
// 1. LIVENESS (backend waits forever, lock leaked at the master). Fix (3)
// keeps a peer-lane grant that overtook its direct request's registration in
// early_answers_; fix (6) lets a ReleaseAll keep the owner's locks of later
// requests. But the LMS's ReleaseAll handler erases the owner's early answers
// unconditionally. pgrac_ges_unlock_all() queues ReleaseAll(bound id1) in the
// ring; the session's next lock (id2, direct) is Queued at the master and
// granted; the grant reaches the LMS before the LMS drains its ring (the very
// premise of fix 3) and is kept; then the ReleaseAll erases it, the master
// keeps the lock (id2 > bound), the registration opens the slot: nobody will
// ever answer it. The session hangs (no lock_timeout) and node 3 never gets r.
TEST(GesDirectAttack2, UnlockAllErasesEarlyGrantOfLaterRequest) {
    Net net(3);
    net.commit_view(1, kAll);
    const ResourceName r0 = GesCluster::mastered_by(3, kAll, "ua0");
    const ResourceName r = GesCluster::mastered_by(2, kAll, "ua1");
    const uint64_t id1 = rid(7, 1);
    net.arm(1, 7, id1);
    net.to_lms(1, Net::request(1, 7, r0, LockMode::PR, id1, false, 0));
    net.pump();
    ASSERT_EQ(net.slot(1, 7).st, kGranted);
    net.slot(1, 7).st = kIdle;
    const uint64_t h = rid(9, 1);
    net.arm(3, 9, h);
    net.to_lms(3, Net::request(3, 9, r, LockMode::EX, h, false, 0));
    net.pump();
    ASSERT_EQ(net.slot(3, 9).st, kGranted);
    // unlock_all: ReleaseAll(bound id1) sits in node 1's ring (LMS busy).
    const GesMessage ra = release_all(1, 7, id1);
    // The session's next lock, direct: Queued behind node 3's EX.
    const uint64_t id2 = rid(7, 2);
    net.arm(1, 7, id2);
    const GesMessage d = Net::request(1, 7, r, LockMode::EX, id2, true, 1);
    ASSERT_EQ(answer_type(net.rpc(1, 2, d)), GesMsgType::Queued);
    // Node 3 releases: the grant of id2 reaches node 1's LMS on the peer lane
    // before the ring is drained: kept for the registration.
    net.slot(3, 9).st = kIdle;
    net.release(3, 9, r);
    net.pump();
    // The LMS drains its ring: the ReleaseAll, then the registration.
    net.to_lms(1, ra);
    net.to_lms(1, d);
    net.pump();
    idle_ticks(net, 20);
    bool master_holds = false;
    for (const LockRow& row : net.rows(2, r))
        if (row.owner_node == 1 && row.state == LockState::Granted) master_holds = true;
    EXPECT_EQ(net.slot(1, 7).st, kGranted) << "backend waits forever (slot " << net.slot(1, 7).st
                                           << "), master holds its lock: " << master_holds;
}

// ---------------------------------------------------------------------------
// 2. SAFETY (two EX holders). Fix (3) + fix (1)'s regrant make a second Grant
// for one lock; the undo of the stray one is a Release without an id, which
// the master applies to whatever lock the owner has on r by then - a later
// direct request's, granted at the master but not registered at the LMS yet.
// Sequence: direct id1 Queued; its peer-lane grant T1 is kept early; the
// backend times out before its LMS takes the registration (slot Idle). The
// registration: mark_direct fails, so register_direct sends a plain copy of
// id1 to the master although it holds id1's answer; the master regrants
// (T2). The early T1 is then taken: nobody waits, give_back Releases it. The
// backend's next direct request id2 is granted at once (not busy any more).
// T2 arrives before id2's registration: no entry, slot not waiting for id1:
// undo -> Release -> the master drops id2's lock. The backend takes id2's
// grant itself: it holds EX, the master has nothing, node 3 gets EX.
TEST(GesDirectAttack2, StrayRegrantUndoReleasesLaterDirectLock) {
    Net net(3);
    net.commit_view(1, kAll);
    const ResourceName r = GesCluster::mastered_by(2, kAll, "rg");
    const uint64_t h = rid(9, 1);
    net.arm(3, 9, h);
    net.to_lms(3, Net::request(3, 9, r, LockMode::EX, h, false, 0));
    net.pump();
    ASSERT_EQ(net.slot(3, 9).st, kGranted);
    const uint64_t id1 = rid(7, 1);
    net.arm(1, 7, id1);
    const GesMessage d1 = Net::request(1, 7, r, LockMode::EX, id1, true, 1);
    ASSERT_EQ(answer_type(net.rpc(1, 2, d1)), GesMsgType::Queued);
    net.slot(3, 9).st = kIdle;
    net.release(3, 9, r);
    net.pump();  // T1 -> node 1's LMS: kept in early_answers_
    // lock_timeout: ges_abandon (slot Idle); its Cancel is behind the registration.
    net.slot(1, 7).st = kIdle;
    net.to_lms(1, d1);                    // plain copy to the master; T1 -> give_back Release
    net.to_lms(1, cancel(1, 7, r, id1));  // no entry any more: nothing sent
    net.pump([](const Msg& m) { return m.to == 2; });  // master: regrant (T2), release
    // The session's next lock, direct: granted at once.
    const uint64_t id2 = rid(7, 2);
    net.arm(1, 7, id2);
    const GesMessage d2 = Net::request(1, 7, r, LockMode::EX, id2, true, 1);
    const std::vector<uint8_t> a2 = net.rpc(1, 2, d2);
    ASSERT_EQ(answer_type(a2), GesMsgType::Grant);
    net.pump();  // T2 reaches node 1's LMS (id2's registration still in the ring)
    net.to_lms(1, d2);
    ASSERT_EQ(net.slot(1, 7).st, kDirectReady);
    ASSERT_TRUE(net.self_take(1, 7, a2));  // the backend holds EX now
    net.to_lms_raw(1, a2);
    net.pump();
    const uint64_t h2 = rid(9, 2);
    net.arm(3, 9, h2);
    net.to_lms(3, Net::request(3, 9, r, LockMode::EX, h2, false, 0));
    net.pump();
    net.tick_all();
    EXPECT_NE(net.slot(3, 9).st, kGranted) << "node 3 granted EX while node 1's backend holds EX";
    EXPECT_FALSE(net.conflicting_believers(r));
    bool master_has_1 = false;
    for (const LockRow& row : net.rows(2, r))
        if (row.owner_node == 1) master_has_1 = true;
    EXPECT_TRUE(master_has_1) << "the master dropped node 1's id2 lock";
}

// ---------------------------------------------------------------------------
// 3. SAFETY (pid reuse only: low likelihood). The ReleaseAll bound keeps
// only later locks of the SAME session (after_bound compares the high 32
// bits); a lock of another session of the same owner (pid) is dropped. A
// backend exits (ReleaseAll(bound) in the ring); a new backend gets the same
// pid and slot (session tag + 1), its direct request is granted at the
// master before the LMS forwards the old session's ReleaseAll, which then
// drops the new session's lock silently. (The reaper's ReleaseAll, bound 0,
// drops it the same way when the exit hook's send was lost.)
TEST(GesDirectAttack2, OldSessionsReleaseAllDropsNewSessionsDirectLock) {
    Net net(3);
    net.commit_view(1, kAll);
    const ResourceName r0 = GesCluster::mastered_by(3, kAll, "pr0");
    const ResourceName r = GesCluster::mastered_by(2, kAll, "pr1");
    const uint64_t s1 = rid(7, 1, 1);
    net.arm(1, 7, s1);
    net.to_lms(1, Net::request(1, 7, r0, LockMode::PR, s1, false, 0));
    net.pump();
    ASSERT_EQ(net.slot(1, 7).st, kGranted);
    const GesMessage ra = release_all(1, 7, s1);  // exit hook of session 1, in the ring
    const uint64_t s2 = rid(7, 1, 2);             // session 2, same pid and slot
    net.arm(1, 7, s2);
    const GesMessage d = Net::request(1, 7, r, LockMode::EX, s2, true, 1);
    const std::vector<uint8_t> a = net.rpc(1, 2, d);
    ASSERT_EQ(answer_type(a), GesMsgType::Grant);
    net.to_lms(1, ra);
    net.to_lms(1, d);
    ASSERT_EQ(net.slot(1, 7).st, kDirectReady);
    ASSERT_TRUE(net.self_take(1, 7, a));
    net.to_lms_raw(1, a);
    net.pump();
    const uint64_t h = rid(9, 1);
    net.arm(3, 9, h);
    net.to_lms(3, Net::request(3, 9, r, LockMode::EX, h, false, 0));
    net.pump();
    net.tick_all();
    EXPECT_NE(net.slot(3, 9).st, kGranted) << "node 3 granted EX while session 2 holds EX";
    EXPECT_FALSE(net.conflicting_believers(r));
}

}  // namespace
