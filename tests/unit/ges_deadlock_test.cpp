// Wait-for graph cycle search: one victim per cycle, the youngest, for local
// and for cluster-wide (edges gathered from several masters) detection.
#include <gtest/gtest.h>

#include "ic/ges_deadlock.hpp"
#include "ic/ges_lock_table.hpp"

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
