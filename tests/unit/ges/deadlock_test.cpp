// Wait-for graph cycle search: one victim per cycle, the youngest, for local
// and for cluster-wide (edges gathered from several masters) detection.
#include <gtest/gtest.h>

#include "ic/ges/deadlock.hpp"
#include "ic/ges/lock_table.hpp"

using namespace pgrac::ic::ges;

namespace {

const Owner A{1, 1}, B{2, 2}, C{3, 3}, D{4, 4};

WaitForEdge edge(Owner w, Owner h, int64_t since, uint64_t id, int64_t res = 0) {
    WaitForEdge e;
    e.waiter = w;
    e.holder = h;
    e.since = since;
    e.request_id = id;
    e.resource = ResourceName::from_int(res);
    return e;
}

LockRequest req(Owner o, const ResourceName& r, LockMode m, uint64_t id, int64_t now) {
    LockRequest q;
    q.owner = o;
    q.resource = r;
    q.mode = m;
    q.request_id = id;
    q.now = now;
    return q;
}

}  // namespace

TEST(GesDeadlock, NoCycleNoVictim) {
    EXPECT_TRUE(find_deadlock_victims({}).empty());
    EXPECT_TRUE(
        find_deadlock_victims({edge(A, B, 1, 1), edge(B, C, 2, 2), edge(A, C, 3, 3)}).empty());
}

TEST(GesDeadlock, TwoPartyCycleLosesTheYoungest) {
    const auto v = find_deadlock_victims({edge(A, B, 10, 1), edge(B, A, 20, 2)});
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].waiter, B);
    EXPECT_EQ(v[0].request_id, 2u);
}

TEST(GesDeadlock, ThreePartyCycleWithATailHasOneVictim) {
    // D waits on A but is not in the cycle; it must never be chosen.
    const auto v = find_deadlock_victims(
        {edge(D, A, 99, 9), edge(A, B, 10, 1), edge(B, C, 30, 2), edge(C, A, 20, 3)});
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].waiter, B);
}

TEST(GesDeadlock, DisjointCyclesEachLoseOne) {
    const auto v = find_deadlock_victims(
        {edge(A, B, 1, 1), edge(B, A, 2, 2), edge(C, D, 4, 3), edge(D, C, 3, 4)});
    ASSERT_EQ(v.size(), 2u);
    EXPECT_EQ(v[0].waiter, B);
    EXPECT_EQ(v[1].waiter, C);
}

TEST(GesDeadlock, OneVictimCanBreakTwoCyclesThroughIt) {
    // A <-> B and A <-> C; the youngest, A's request, is in both.
    const auto v = find_deadlock_victims(
        {edge(A, B, 50, 1), edge(B, A, 10, 2), edge(A, C, 50, 1), edge(C, A, 20, 3)});
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].waiter, A);
}

TEST(GesDeadlock, TiesAreBrokenTheSameWayWhateverTheEdgeOrder) {
    const auto v1 = find_deadlock_victims({edge(A, B, 5, 1), edge(B, A, 5, 2)});
    const auto v2 = find_deadlock_victims({edge(B, A, 5, 2), edge(A, B, 5, 1)});
    ASSERT_EQ(v1.size(), 1u);
    ASSERT_EQ(v2.size(), 1u);
    EXPECT_EQ(v1[0].waiter, v2[0].waiter);
}

TEST(GesDeadlock, CycleAcrossTwoMastersIsFoundFromGatheredEdges) {
    // R1 mastered by node 1, R2 by node 2. Neither table sees a cycle alone.
    LockTable m1(1), m2(2);
    const ResourceName r1 = ResourceName::from_int(1), r2 = ResourceName::from_int(2);
    m1.request(req(A, r1, LockMode::EX, 1, 0));
    m2.request(req(B, r2, LockMode::EX, 2, 0));
    m2.request(req(A, r2, LockMode::EX, 3, 10));
    const Events local = m1.request(req(B, r1, LockMode::EX, 4, 20));
    EXPECT_TRUE(local.empty() || local[0].type == EventType::Bast);
    EXPECT_TRUE(m1.detect_deadlocks(30).empty());
    EXPECT_TRUE(m2.detect_deadlocks(30).empty());

    std::vector<WaitForEdge> all = m1.wait_for_edges();
    const auto e2 = m2.wait_for_edges();
    all.insert(all.end(), e2.begin(), e2.end());
    const auto victims = find_deadlock_victims(all);
    ASSERT_EQ(victims.size(), 1u);
    const WaitForEdge& v = victims[0];
    EXPECT_EQ(v.waiter, B);
    EXPECT_EQ(v.master, 1);
    // The glue sends Cancel(reason deadlock) to the victim's master.
    const Events ev = m1.cancel(v.waiter, v.resource, v.request_id, DenyReason::Deadlock, 40);
    EXPECT_EQ(ev, Events{Event::denied(B, r1, LockMode::EX, 4, DenyReason::Deadlock)});
}

// ---- the cluster-wide search's pure parts

TEST(GesDeadlock, TheCoordinatorIsTheLowestLiveNode) {
    EXPECT_EQ(deadlock_coordinator({3, 1, 2}), 1);
    EXPECT_EQ(deadlock_coordinator({5, 4}), 4);
    EXPECT_EQ(deadlock_coordinator({7}), 7);
    EXPECT_EQ(deadlock_coordinator({}), 0);
    EXPECT_EQ(deadlock_coordinator({0, 9}), 9);  // 0 is no node
}

TEST(GesDeadlock, OnlyWaitsOlderThanTheTimeoutAreSearched) {
    const std::vector<WaitForEdge> all = {edge(A, B, 100, 1), edge(B, A, 900, 2),
                                          edge(C, A, 500, 3)};
    const auto old = edges_waiting_at_least(all, 1000, 500);
    ASSERT_EQ(old.size(), 2u);
    EXPECT_EQ(old[0], all[0]);
    EXPECT_EQ(old[1], all[2]);
    // A cycle that is younger than the timeout is not acted on yet.
    EXPECT_TRUE(find_deadlock_victims(old).empty());
    EXPECT_EQ(find_deadlock_victims(edges_waiting_at_least(all, 1400, 500)).size(), 1u);
}

TEST(GesDeadlock, LockTableReportsItsOldestWait) {
    LockTable t(1);
    const ResourceName r1 = ResourceName::from_int(1), r2 = ResourceName::from_int(2);
    EXPECT_FALSE(t.oldest_wait_since().has_value());
    t.request(req(A, r1, LockMode::EX, 1, 10));
    EXPECT_FALSE(t.oldest_wait_since().has_value());  // holders do not wait
    t.request(req(B, r1, LockMode::EX, 2, 20));
    t.request(req(C, r2, LockMode::PR, 3, 5));
    t.request(req(C, r1, LockMode::PR, 4, 30));  // C: waits on r1 too (another resource)
    ASSERT_TRUE(t.oldest_wait_since().has_value());
    EXPECT_EQ(*t.oldest_wait_since(), 20);
    // A conversion waits too: D holds r2 PR with C, asks EX at 3.
    t.request(req(D, r2, LockMode::PR, 5, 1));
    t.request(req(D, r2, LockMode::EX, 6, 3));
    EXPECT_EQ(*t.oldest_wait_since(), 3);
    t.cancel(D, r2, 6, DenyReason::Cancelled, 40);
    t.release(A, r1, 50);  // B granted at 50; C still waits behind it
    EXPECT_EQ(*t.oldest_wait_since(), 30);
}

namespace {

WaitForEdge at(WaitForEdge e, uint16_t master) {
    e.master = master;
    return e;
}

}  // namespace

TEST(GesDeadlock, ARoundDecidesOnlyWhenEverySourceHasAnswered) {
    DeadlockRound round;
    EXPECT_FALSE(round.active());
    EXPECT_FALSE(round.add(1, 0, 5, true, false, {}));  // no round yet
    round.start(5, {{1, 0}, {1, 1}, {2, 0}, {2, 1}, {2, 1}}, 1000);
    EXPECT_TRUE(round.active());
    EXPECT_EQ(round.id(), 5u);
    EXPECT_EQ(round.started(), 1000);
    EXPECT_EQ(round.missing().size(), 4u);  // the duplicate counts once
    EXPECT_TRUE(round.add(1, 0, 5, true, false, {at(edge(A, B, 1, 1), 1)}));
    EXPECT_FALSE(round.add(1, 0, 5, true, false, {}));                         // already done
    EXPECT_FALSE(round.add(3, 0, 5, true, false, {}));                         // not expected
    EXPECT_FALSE(round.add(2, 0, 4, true, false, {}));                         // another round
    EXPECT_TRUE(round.add(2, 0, 5, false, false, {at(edge(B, C, 2, 2), 2)}));  // a first part
    EXPECT_TRUE(round.add(2, 0, 5, true, false, {at(edge(C, A, 3, 3), 2)}));   // and the last
    EXPECT_TRUE(round.add(1, 1, 5, true, false, {}));
    EXPECT_FALSE(round.complete());
    ASSERT_EQ(round.missing().size(), 1u);
    EXPECT_EQ(round.missing()[0].node, 2);
    EXPECT_EQ(round.missing()[0].worker, 1);
    EXPECT_TRUE(round.add(2, 1, 5, true, false, {}));
    EXPECT_TRUE(round.complete());
    EXPECT_FALSE(round.spoiled());
    ASSERT_EQ(round.edges().size(), 3u);
    // The three edges came from two masters; the cycle A -> B -> C -> A has
    // one victim, the youngest wait (C's, since 3), at master 2.
    const auto victims = find_deadlock_victims(round.edges());
    ASSERT_EQ(victims.size(), 1u);
    EXPECT_EQ(victims[0].waiter, C);
    EXPECT_EQ(victims[0].master, 2);
    round.finish();
    EXPECT_FALSE(round.active());
    EXPECT_FALSE(round.complete());
    EXPECT_TRUE(round.edges().empty());
}

TEST(GesDeadlock, AReplayingSourceOrAForeignEdgeSpoilsTheRound) {
    DeadlockRound round;
    round.start(9, {{1, 0}, {2, 0}}, 0);
    EXPECT_TRUE(round.add(1, 0, 9, true, false, {at(edge(A, B, 1, 1), 1)}));
    EXPECT_TRUE(round.add(2, 0, 9, true, true, {}));  // replaying: incomplete
    EXPECT_TRUE(round.complete());
    EXPECT_TRUE(round.spoiled());

    round.start(10, {{1, 0}, {2, 0}}, 0);  // a new round forgets the old one
    EXPECT_FALSE(round.spoiled());
    EXPECT_TRUE(round.edges().empty());
    // Node 2 cannot report an edge of a resource mastered on node 3.
    EXPECT_FALSE(round.add(2, 0, 10, true, false, {at(edge(A, B, 1, 1), 3)}));
    EXPECT_TRUE(round.spoiled());
    EXPECT_FALSE(round.complete());
}

TEST(GesDeadlock, CycleAcrossThreeMastersAndTwoWorkersHasOneVictim) {
    // Each owner holds one resource on its own master and waits for the next
    // one's; no table sees more than one edge.
    LockTable m1(1), m2(2), m3(3);
    const ResourceName r1 = ResourceName::from_int(1), r2 = ResourceName::from_int(2),
                       r3 = ResourceName::from_int(3);
    m1.request(req(A, r1, LockMode::EX, 1, 0));
    m2.request(req(B, r2, LockMode::EX, 2, 0));
    m3.request(req(C, r3, LockMode::PW, 3, 0));
    m2.request(req(A, r2, LockMode::EX, 4, 10));
    m3.request(req(B, r3, LockMode::PR, 5, 20));
    m1.request(req(C, r1, LockMode::CR, 6, 30));
    DeadlockRound round;
    round.start(1, {{1, 0}, {2, 0}, {3, 0}}, 100);
    round.add(1, 0, 1, true, false, edges_waiting_at_least(m1.wait_for_edges(), 100, 50));
    round.add(2, 0, 1, true, false, edges_waiting_at_least(m2.wait_for_edges(), 100, 50));
    round.add(3, 0, 1, true, false, edges_waiting_at_least(m3.wait_for_edges(), 100, 50));
    ASSERT_TRUE(round.complete());
    const auto victims = find_deadlock_victims(round.edges());
    ASSERT_EQ(victims.size(), 1u);
    EXPECT_EQ(victims[0].waiter, C);
    EXPECT_EQ(victims[0].master, 1);
    EXPECT_EQ(victims[0].request_id, 6u);
    const Events ev = m1.cancel(C, r1, 6, DenyReason::Deadlock, 110);
    EXPECT_EQ(ev, Events{Event::denied(C, r1, LockMode::CR, 6, DenyReason::Deadlock)});
    // A stale decision (the request is gone, or a newer one waits) matches nothing.
    EXPECT_TRUE(m1.cancel(C, r1, 6, DenyReason::Deadlock, 120).empty());
    m1.request(req(C, r1, LockMode::CR, 7, 130));
    EXPECT_TRUE(m1.cancel(C, r1, 6, DenyReason::Deadlock, 140).empty());
}
