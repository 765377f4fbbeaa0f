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

#include "ges/direct_harness.hpp"
#include "ges/worker_support.hpp"

using namespace pgrac::ic;
using namespace pgrac::ic::ges;
using pgrac::ic::ges::testing::FakeHost;
using pgrac::ic::ges::testing::GesCluster;

namespace {

using namespace pgrac::ic::ges::testing::hand;

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
