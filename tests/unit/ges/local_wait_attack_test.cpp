// Adversarial tests of the GES local waiters (commit e96deb0, worker.cpp
// wait_locally / serve_local_waiters / flush_local_waiters, node_cache.cpp
// `waiting`): sequences a review found, on whole clusters of real workers
// (worker_support.hpp). Tests named ...Bug... fail on e96deb0; the others pin
// behaviour worth keeping.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ges/cache_support.hpp"
#include "ges/worker_support.hpp"
#include "ic/ges/node_cache.hpp"

using namespace pgrac::ic;
using namespace pgrac::ic::ges;
using pgrac::ic::ges::testing::FakeHost;
using pgrac::ic::ges::testing::GesCluster;
using namespace pgrac::ic::ges::testing;

namespace {

// A backend's use of r ends (ges_drop_cache_use): its LMS is told if the
// entry says so.
void drop(GesCluster& c, uint16_t node, uint32_t proc, const ResourceName& r, LockMode mode) {
    CacheEntry* e = entry(c, node, r);
    ASSERT_NE(e, nullptr);
    if (cache_drop(*e, mode)) c.cache_notify(node, proc, r);
}

bool answered(GesCluster& c, uint16_t node, uint64_t rid) {
    for (const FakeHost::Delivery& d : c.host(node).deliveries)
        if (d.request_id == rid) return true;
    return false;
}

// r (mastered by node 2) cached on node 1 in `mode`.
ResourceName cached_on_1(GesCluster& c, LockMode mode, const std::vector<uint16_t>& members) {
    const ResourceName r = GesCluster::mastered_by(2, members);
    c.request(1, 10, r, mode);
    c.release(1, 10, r);
    return r;
}

// ---- F1: the last waiter's timeout leaves the entry marked `waiting`

TEST(GesLocalWaitAttack, BugATimedOutLastWaiterLeavesTheEntryMarkedWaiting) {
    GesCluster c = cached_cluster(2);
    const ResourceName r = cached_on_1(c, LockMode::EX, {1, 2});
    uint64_t t = 0;
    ASSERT_TRUE(take(c, 1, r, LockMode::EX, &t));  // backend 11
    const uint64_t w = c.request(1, 12, r, LockMode::EX, 0, 100);
    ASSERT_EQ(local_rows(c, 1, r), 1u);
    c.advance_ms(150);
    c.tick(1);
    ASSERT_TRUE(c.denied(1, w, DenyReason::Timeout));
    EXPECT_EQ(local_rows(c, 1, r), 0u);
    drop(c, 1, 11, r, LockMode::EX);  // backend 11 is done: nobody uses or waits for r
    for (int i = 0; i < 3; i++) {
        c.advance_ms(10);
        c.tick(1);
    }
    EXPECT_EQ(entry(c, 1, r)->waiting, 0) << "no local request waits any more";
    // pg_try_advisory_lock on a lock nobody holds: the take misses on the
    // stale mark, the NOWAIT request goes to the LMS ...
    const uint64_t nw = c.request(1, 13, r, LockMode::EX, kNoWait);
    EXPECT_TRUE(c.granted(1, nw)) << "a free cached lock refused NOWAIT";
    EXPECT_FALSE(c.denied(1, nw, DenyReason::NoWait));
}

// ---- F2: an LMS restart forgets its local waiters but not the mark

TEST(GesLocalWaitAttack, BugAnLmsRestartLeavesTheWaitingMarkWithNoWaiter) {
    GesCluster c = cached_cluster(2);
    const ResourceName r = cached_on_1(c, LockMode::EX, {1, 2});
    uint64_t t = 0;
    ASSERT_TRUE(take(c, 1, r, LockMode::EX, &t));  // backend 11
    const uint64_t w = c.request(1, 12, r, LockMode::EX);
    ASSERT_EQ(entry(c, 1, r)->waiting, 1);
    c.node(1).restart(c.now());  // local_waiters_ gone with the process
    c.commit_view(11, {1, 2});
    for (int i = 0; i < 5; i++) {
        c.advance_ms(10);
        c.tick_all();
    }
    ASSERT_NE(entry(c, 1, r), nullptr) << "the cached lock survives the restart";
    c.cancel(1, 12, r, w);  // backend 12 gives up (statement_timeout) instead of resending
    drop(c, 1, 11, r, LockMode::EX);
    for (int i = 0; i < 3; i++) {
        c.advance_ms(10);
        c.tick(1);
    }
    EXPECT_EQ(entry(c, 1, r)->waiting, 0) << "no local request waits in the new process";
    const uint64_t nw = c.request(1, 13, r, LockMode::EX, kNoWait);
    EXPECT_TRUE(c.granted(1, nw)) << "a free cached lock refused NOWAIT";
}

// ---- F3: a new request of an owner whose older local wait is stale is
// swallowed as "a copy" (owner and resource compared, not the request id)

TEST(GesLocalWaitAttack, BugANewRequestAfterALostCancelIsNotSwallowedAsACopy) {
    GesCluster c = cached_cluster(2);
    const ResourceName r = cached_on_1(c, LockMode::EX, {1, 2});
    uint64_t t = 0;
    ASSERT_TRUE(take(c, 1, r, LockMode::EX, &t));  // backend 11
    const uint64_t a = c.request(1, 12, r, LockMode::EX);
    ASSERT_EQ(local_rows(c, 1, r), 1u);
    // Backend 12 stops waiting; its Cancel does not reach the LMS
    // (ges_send_client gave up on a full queue after 1 s).
    c.host(1).abandon(a);
    const uint64_t b = c.request(1, 12, r, LockMode::EX);  // its next statement, same lock
    drop(c, 1, 11, r, LockMode::EX);
    for (int i = 0; i < 3; i++) {
        c.advance_ms(10);
        c.tick(1);
    }
    EXPECT_TRUE(answered(c, 1, b)) << "request b is never answered: the backend waits forever";
    EXPECT_TRUE(c.granted(1, b));
}

TEST(GesLocalWaitAttack, BugAReusedSlotsRequestIsNotSwallowedByTheDeadSessionsLocalWait) {
    GesCluster c = cached_cluster(2);
    const ResourceName r = cached_on_1(c, LockMode::EX, {1, 2});
    uint64_t t = 0;
    ASSERT_TRUE(take(c, 1, r, LockMode::EX, &t));  // backend 11
    const uint64_t a = c.request(1, 12, r, LockMode::EX);
    // Session 1 of slot 12 exits while it waits; its ReleaseAll is lost (the
    // exit hook's send is best effort), and it had no registry entry for the
    // reaper to find.
    c.host(1).abandon(a);
    c.advance_ms(1000);
    c.tick(1);
    // Session 2 in the same slot (same proc) asks for r.
    GesMessage m;
    m.type = GesMsgType::Request;
    m.owner = Owner{1, 12};
    m.resource = r;
    m.mode = LockMode::EX;
    m.request_id = GesCluster::request_id(12, 1, 2);
    c.host(1).waiting.insert(m.request_id);
    c.from_backend(1, m);
    drop(c, 1, 11, r, LockMode::EX);
    for (int i = 0; i < 3; i++) {
        c.advance_ms(10);
        c.tick(1);
    }
    EXPECT_TRUE(c.granted(1, m.request_id)) << "the new session's request is never answered";
}

// ---- behaviour worth keeping

// A deadlock through a local wait on a node that is not the coordinator:
// the coordinator's Cancel goes to that node (the edge names it as master)
// and is taken there from the local waiters.
TEST(GesLocalWaitAttack, KeepsADeadlockVictimWaitingLocallyOnAnotherNodeCancelled) {
    GesCluster c = cached_cluster(3);
    const ResourceName r1 = GesCluster::mastered_by(3, {1, 2, 3});
    const ResourceName r2 = GesCluster::mastered_by(1, {1, 2, 3}, "s");
    ASSERT_TRUE(cached_and_used_by(c, 2, r1, 21));
    const uint64_t a = c.request(2, 22, r2, LockMode::EX);
    ASSERT_TRUE(c.granted(2, a));
    const uint64_t b = c.request(2, 21, r2, LockMode::EX);  // 21 waits for 22 at node 1
    c.advance_ms(1);
    const uint64_t d = c.request(2, 22, r1, LockMode::EX);  // 22 waits in node 2 for 21
    ASSERT_EQ(local_rows(c, 2, r1), 1u);
    for (int i = 0; i < 30; i++) {
        c.advance_ms(50);
        c.tick_all();
    }
    EXPECT_TRUE(c.denied(2, d, DenyReason::Deadlock));
    EXPECT_FALSE(c.denied(2, b, DenyReason::Deadlock));
    EXPECT_EQ(local_rows(c, 2, r1), 0u);
    EXPECT_EQ(entry(c, 2, r1)->waiting, 0);
}

// A new epoch while a request waits locally: the node's lock is replayed,
// the waiter stays and is served from the cache; a remote request of the new
// epoch still sends it to the master behind it.
TEST(GesLocalWaitAttack, KeepsALocalWaiterThroughAnEpochChange) {
    GesCluster c = cached_cluster(3);
    const ResourceName r = cached_on_1(c, LockMode::EX, {1, 2, 3});
    uint64_t t = 0;
    ASSERT_TRUE(take(c, 1, r, LockMode::EX, &t));  // backend 11
    const uint64_t w = c.request(1, 12, r, LockMode::EX);
    c.commit_view(11, {1, 2, 3});
    for (int i = 0; i < 3; i++) {
        c.advance_ms(10);
        c.tick_all();
    }
    EXPECT_EQ(local_rows(c, 1, r), 1u);
    const uint64_t remote = c.request(3, 30, r, LockMode::EX);
    EXPECT_EQ(local_rows(c, 1, r), 0u) << "the BAST of the new epoch sends it on";
    drop(c, 1, 11, r, LockMode::EX);
    ASSERT_TRUE(c.granted(3, remote));
    EXPECT_GT(c.token(3, remote), t);
    EXPECT_FALSE(c.granted(1, w));
    c.release(3, 30, r);
    ASSERT_TRUE(c.granted(1, w));
    EXPECT_GT(c.token(1, w), c.token(3, remote));
    EXPECT_TRUE(c.no_conflicting_holders());
}

// A fence denies local waiters no_quorum and leaves nothing behind.
TEST(GesLocalWaitAttack, KeepsAFenceDenyingLocalWaiters) {
    GesCluster c = cached_cluster(2);
    const ResourceName r = cached_on_1(c, LockMode::EX, {1, 2});
    uint64_t t = 0;
    ASSERT_TRUE(take(c, 1, r, LockMode::EX, &t));
    const uint64_t w = c.request(1, 12, r, LockMode::EX);
    c.host(1).set_lease(1);  // lapsed
    c.advance_ms(10);
    c.tick(1);
    EXPECT_TRUE(c.denied(1, w, DenyReason::NoQuorum));
    EXPECT_EQ(local_rows(c, 1, r), 0u);
    EXPECT_EQ(entry(c, 1, r), nullptr);
}

// A backend that goes to the master directly (it had no free use record,
// so its take never looked at the entry) while a request waits locally:
// the BAST puts the local waiter behind it; one holder at a time.
TEST(GesLocalWaitAttack, KeepsADirectRequestAndALocalWaiterExclusive) {
    GesCluster c = cached_cluster(2);
    const ResourceName r = cached_on_1(c, LockMode::EX, {1, 2});
    uint64_t t = 0;
    ASSERT_TRUE(take(c, 1, r, LockMode::EX, &t));  // backend 11
    const uint64_t w = c.request(1, 12, r, LockMode::EX);
    GesCluster::DirectPath path;
    const uint64_t d = c.direct_request(1, 13, r, LockMode::EX, 0, 0, &path);
    EXPECT_NE(path, GesCluster::DirectPath::Taken) << "the node's lock is held";
    EXPECT_EQ(local_rows(c, 1, r), 0u);
    EXPECT_TRUE(c.no_conflicting_holders());
    drop(c, 1, 11, r, LockMode::EX);
    EXPECT_NE(c.holds_grant(1, d), c.granted(1, w)) << "exactly one of them";
    EXPECT_TRUE(c.no_conflicting_holders());
    c.release(1, c.holds_grant(1, d) ? 13 : 12, r);
    EXPECT_TRUE(c.holds_grant(1, d) && c.granted(1, w));
    EXPECT_TRUE(c.no_conflicting_holders());
}

// A same-id copy (the backend's resend after an LMS restart it thought it
// saw) is not queued twice and gets one grant.
TEST(GesLocalWaitAttack, KeepsASameIdResendAsOneWaiter) {
    GesCluster c = cached_cluster(2);
    const ResourceName r = cached_on_1(c, LockMode::EX, {1, 2});
    uint64_t t = 0;
    ASSERT_TRUE(take(c, 1, r, LockMode::EX, &t));
    GesMessage m;
    m.type = GesMsgType::Request;
    m.owner = Owner{1, 12};
    m.resource = r;
    m.mode = LockMode::EX;
    m.request_id = GesCluster::request_id(12, 900);
    c.host(1).waiting.insert(m.request_id);
    c.from_backend(1, m);
    c.from_backend(1, m);
    EXPECT_EQ(local_rows(c, 1, r), 1u);
    drop(c, 1, 11, r, LockMode::EX);
    EXPECT_TRUE(c.granted(1, m.request_id));
    EXPECT_EQ(cache_users(*entry(c, 1, r)), 1u) << "one use, not two";
    EXPECT_EQ(entry(c, 1, r)->waiting, 0);
}

// A local waiter sent to the master because the entry converts (a user's
// conversion the cache could not make) is not starved: the conversion's grant
// re-BASTs the converted lock, whose release goes back to the master.
TEST(GesLocalWaitAttack, KeepsAWaiterFlushedByAConversionFromStarving) {
    GesCluster c = cached_cluster(3);
    const ResourceName r = cached_on_1(c, LockMode::EX, {1, 2, 3});
    uint64_t t = 0;
    ASSERT_TRUE(take(c, 1, r, LockMode::PR, &t));  // backend 11
    ASSERT_TRUE(take(c, 1, r, LockMode::PR, &t));  // backend 12
    const uint64_t w = c.request(1, 13, r, LockMode::EX);
    ASSERT_EQ(local_rows(c, 1, r), 1u);
    ASSERT_EQ(try_take(c, 1, r, LockMode::PW, &t, LockMode::PR), CacheMiss::LocalConflict);
    const uint64_t cv = c.convert_cached(1, 11, r, LockMode::PW);
    EXPECT_EQ(local_rows(c, 1, r), 0u) << "the entry converts: its waiter goes to the master";
    drop(c, 1, 12, r, LockMode::PR);
    ASSERT_TRUE(c.granted(1, cv));
    EXPECT_FALSE(c.granted(1, w));
    c.release(1, 11, r);
    for (int i = 0; i < 5; i++) {
        c.advance_ms(10);
        c.tick_all();
    }
    EXPECT_TRUE(c.granted(1, w));
    EXPECT_TRUE(c.no_conflicting_holders());
}

// A remote request's BAST sends the local waiters to the master, and no take
// (by a backend or by the LMS) goes ahead of the remote waiter afterwards.
TEST(GesLocalWaitAttack, KeepsTheRemoteWaiterAheadOfLocalReacquisitions) {
    GesCluster c = cached_cluster(3);
    const ResourceName r = cached_on_1(c, LockMode::PW, {1, 2, 3});
    uint64_t t = 0;
    ASSERT_TRUE(take(c, 1, r, LockMode::PR, &t));  // backend 11
    const uint64_t w12 = c.request(1, 12, r, LockMode::PW);
    const uint64_t remote = c.request(3, 30, r, LockMode::PR);  // compatible with 11's PR only
    EXPECT_EQ(local_rows(c, 1, r), 0u);
    uint64_t tok = 0;
    EXPECT_EQ(try_take(c, 1, r, LockMode::PR, &tok), CacheMiss::Bast);
    const uint64_t w14 = c.request(1, 14, r, LockMode::PR);
    EXPECT_FALSE(c.granted(1, w14)) << "not from the cache after the BAST";
    drop(c, 1, 11, r, LockMode::PR);
    EXPECT_TRUE(c.granted(3, remote));
    EXPECT_TRUE(c.no_conflicting_holders());
    (void)w12;
}

// The waiters of an entry evicted (or given back) between its last user's
// drop and the LMS's look go to the master, not lost.
TEST(GesLocalWaitAttack, KeepsWaitersOfAnEntryThatIsGoneServedByTheMaster) {
    GesCluster c = cached_cluster(2);
    const ResourceName r = cached_on_1(c, LockMode::EX, {1, 2});
    uint64_t t = 0;
    ASSERT_TRUE(take(c, 1, r, LockMode::EX, &t));
    const uint64_t w = c.request(1, 12, r, LockMode::EX);
    CacheEntry* e = entry(c, 1, r);
    cache_drop(*e, LockMode::EX);  // the notice is lost (a full queue)
    // Someone on node 2 wants it: BAST, and the lock goes back with no user.
    const uint64_t b = c.request(2, 20, r, LockMode::EX);
    EXPECT_EQ(local_rows(c, 1, r), 0u);
    c.advance_ms(10);
    c.tick_all();
    EXPECT_TRUE(c.granted(2, b) || c.granted(1, w));
    c.release(2, 20, r);
    c.advance_ms(10);
    c.tick_all();
    EXPECT_TRUE(c.granted(1, w));
    EXPECT_TRUE(c.no_conflicting_holders());
}

}  // namespace
