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

#include "ges/direct_harness.hpp"
#include "ges/worker_support.hpp"

using namespace pgrac::ic;
using namespace pgrac::ic::ges;
using pgrac::ic::ges::testing::FakeHost;
using pgrac::ic::ges::testing::GesCluster;

namespace {

using namespace pgrac::ic::ges::testing::hand;

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
