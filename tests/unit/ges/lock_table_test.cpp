// The master-side lock table: grants, FIFO queues, conversion priority, no
// starvation, BASTs once per blocking situation, NOWAIT, cancel, timeouts,
// release/release_all/release_node, local deadlocks, replay and the view.
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>

#include "ic/ges/lock_table.hpp"

using namespace pgrac::ic::ges;

namespace {

const Owner A{1, 100}, B{2, 200}, C{3, 300}, D{1, 101}, E{2, 201};
const ResourceName R = ResourceName::from_int(42);
const ResourceName R1 = *ResourceName::from_text("r1");
const ResourceName R2 = *ResourceName::from_text("r2");
const ResourceName R3 = *ResourceName::from_text("r3");

LockRequest req(Owner o, LockMode m, uint64_t id, int64_t now = 0, const ResourceName& r = R,
                uint8_t flags = 0, int64_t deadline = 0) {
    LockRequest q;
    q.owner = o;
    q.resource = r;
    q.mode = m;
    q.request_id = id;
    q.flags = flags;
    q.now = now;
    q.deadline = deadline;
    return q;
}

Event granted(Owner o, LockMode m, uint64_t id, const ResourceName& r = R) {
    return Event::granted(o, r, m, id);
}
Event bast(Owner o, LockMode m, uint64_t id, const ResourceName& r = R) {
    return Event::bast(o, r, m, id);
}
Event denied(Owner o, LockMode m, uint64_t id, DenyReason why, const ResourceName& r = R) {
    return Event::denied(o, r, m, id, why);
}

}  // namespace

namespace pgrac::ic::ges {
// Readable failures.
void PrintTo(const Event& e, std::ostream* os) {
    static const char* kType[] = {"?", "Granted", "Bast", "Denied"};
    *os << kType[static_cast<int>(e.type)] << "(" << e.owner.node << "/" << e.owner.proc << ", "
        << e.resource.to_string() << ", " << lock_mode_name(e.mode) << ", id " << e.request_id;
    if (e.type == EventType::Denied) *os << ", " << deny_reason_name(e.reason);
    *os << ")";
}
}  // namespace pgrac::ic::ges

namespace {

size_t count_type(const Events& ev, EventType t) {
    return std::count_if(ev.begin(), ev.end(), [t](const Event& e) { return e.type == t; });
}

}  // namespace

TEST(GesLockTable, CompatibleRequestsAreGrantedAtOnce) {
    LockTable t(1);
    EXPECT_EQ(t.request(req(A, LockMode::PR, 1)), Events{granted(A, LockMode::PR, 1)});
    EXPECT_EQ(t.request(req(B, LockMode::PR, 2)), Events{granted(B, LockMode::PR, 2)});
    EXPECT_EQ(t.request(req(C, LockMode::CR, 3)), Events{granted(C, LockMode::CR, 3)});
    EXPECT_EQ(t.lock_count(), 3u);
    EXPECT_EQ(t.resource_count(), 1u);
}

TEST(GesLockTable, ConflictingRequestWaitsAndBastsEachBlocker) {
    LockTable t(1);
    t.request(req(A, LockMode::PR, 1));
    t.request(req(B, LockMode::CR, 2));
    t.request(req(C, LockMode::PR, 3));
    // EX conflicts with all three holders; each gets one BAST.
    EXPECT_EQ(
        t.request(req(D, LockMode::EX, 4)),
        (Events{bast(A, LockMode::EX, 1), bast(B, LockMode::EX, 2), bast(C, LockMode::EX, 3)}));
    // PW conflicts with the PR holders only, but EX was already told: covered.
    EXPECT_EQ(t.request(req(E, LockMode::PW, 5)), Events{});
}

TEST(GesLockTable, NoStarvationCompatibleRequestQueuesBehindAWaiter) {
    LockTable t(1);
    t.request(req(A, LockMode::PR, 1));
    t.request(req(B, LockMode::EX, 2));  // waits for A
    // C's PR is compatible with A's PR but B is queued ahead: C waits.
    EXPECT_EQ(t.request(req(C, LockMode::PR, 3)), Events{});
    // B's EX now blocks C: B is told.
    EXPECT_EQ(t.release(A, R, 10), (Events{granted(B, LockMode::EX, 2), bast(B, LockMode::PR, 2)}));
    EXPECT_EQ(t.release(B, R, 11), Events{granted(C, LockMode::PR, 3)});
}

TEST(GesLockTable, QueueIsServedInOrderUntilTheFirstThatCannotBeGranted) {
    LockTable t(1);
    t.request(req(A, LockMode::EX, 1));
    t.request(req(B, LockMode::PR, 2));
    t.request(req(C, LockMode::PR, 3));
    t.request(req(D, LockMode::EX, 4));
    t.request(req(E, LockMode::PR, 5));
    const Events ev = t.release(A, R, 10);
    // B and C granted together; D stops the queue; E stays behind D; B and C get D's BAST.
    EXPECT_EQ(ev, (Events{granted(B, LockMode::PR, 2), granted(C, LockMode::PR, 3),
                          bast(B, LockMode::EX, 2), bast(C, LockMode::EX, 3)}));
}

TEST(GesLockTable, ConversionsAreServedBeforeEarlierWaiters) {
    LockTable t(1);
    t.request(req(A, LockMode::PR, 1));
    t.request(req(B, LockMode::PR, 2));
    t.request(req(C, LockMode::EX, 3));  // waits (BASTs A and B)
    // A converts PR -> EX: blocked by B, queues in the convert queue.
    EXPECT_EQ(count_type(t.request(req(A, LockMode::EX, 4)), EventType::Granted), 0u);
    // B leaves: A's conversion goes first although C asked earlier.
    // (A's new EX blocks C, and A's mode changed: A is told.)
    EXPECT_EQ(t.release(B, R, 10), (Events{granted(A, LockMode::EX, 4), bast(A, LockMode::EX, 4)}));
    EXPECT_EQ(t.release(A, R, 11), Events{granted(C, LockMode::EX, 3)});
}

TEST(GesLockTable, CompatibleConversionIsGrantedAheadOfWaiters) {
    LockTable t(1);
    t.request(req(A, LockMode::CR, 1));
    t.request(req(B, LockMode::PR, 2));
    t.request(req(C, LockMode::EX, 3));  // waits
    // CR -> PR is compatible with B's PR and no conversion is queued: granted.
    // A's mode changed, so it is a new blocking situation for C's EX.
    EXPECT_EQ(t.request(req(A, LockMode::PR, 4)),
              (Events{granted(A, LockMode::PR, 4), bast(A, LockMode::EX, 4)}));
}

TEST(GesLockTable, DownConversionIsImmediateAndFreesWaiters) {
    LockTable t(1);
    t.request(req(A, LockMode::EX, 1));
    t.request(req(B, LockMode::PR, 2));
    EXPECT_EQ(t.request(req(A, LockMode::PR, 3)),
              (Events{granted(A, LockMode::PR, 3), granted(B, LockMode::PR, 2)}));
}

TEST(GesLockTable, SameModeAgainIsGrantedWithoutChange) {
    LockTable t(1);
    t.request(req(A, LockMode::PW, 1));
    EXPECT_EQ(t.request(req(A, LockMode::PW, 2)), Events{granted(A, LockMode::PW, 2)});
    EXPECT_EQ(t.lock_count(), 1u);
    // One release drops it (session semantics: one lock per owner and resource).
    t.release(A, R, 0);
    EXPECT_EQ(t.lock_count(), 0u);
    EXPECT_EQ(t.resource_count(), 0u);
}

TEST(GesLockTable, SecondPendingRequestAndConvertOfUnheldAreDenied) {
    LockTable t(1);
    t.request(req(A, LockMode::EX, 1));
    t.request(req(B, LockMode::EX, 2));
    EXPECT_EQ(t.request(req(B, LockMode::PR, 3)),
              Events{denied(B, LockMode::PR, 3, DenyReason::AlreadyPending)});
    EXPECT_EQ(t.convert(req(C, LockMode::PR, 4)),
              Events{denied(C, LockMode::PR, 4, DenyReason::NotHeld)});
    t.request(req(D, LockMode::CR, 5));  // queued behind B
    EXPECT_EQ(t.request(req(D, LockMode::CR, 6)),
              Events{denied(D, LockMode::CR, 6, DenyReason::AlreadyPending)});
    EXPECT_EQ(t.lock_count(), 3u);
}

TEST(GesLockTable, ConvertOfHeldLockConverts) {
    LockTable t(1);
    t.request(req(A, LockMode::NL, 1));
    EXPECT_EQ(t.convert(req(A, LockMode::EX, 2)), Events{granted(A, LockMode::EX, 2)});
}

TEST(GesLockTable, BastOncePerBlockingSituation) {
    LockTable t(1);
    t.request(req(A, LockMode::EX, 1));
    EXPECT_EQ(t.request(req(B, LockMode::PR, 2)), Events{bast(A, LockMode::PR, 1)});
    EXPECT_EQ(t.request(req(C, LockMode::PR, 3)), Events{});  // same situation
    EXPECT_EQ(t.request(req(D, LockMode::EX, 4)), Events{bast(A, LockMode::EX, 1)});  // stronger
    EXPECT_EQ(t.request(req(E, LockMode::PW, 5)), Events{});  // covered by EX
    // Unrelated calls do not repeat anything.
    EXPECT_EQ(t.expire(1000), Events{});
    EXPECT_EQ(t.detect_deadlocks(1000), Events{});
}

TEST(GesLockTable, BastRepeatsAfterTheHoldersModeChanges) {
    LockTable t(1);
    t.request(req(A, LockMode::PW, 1));
    EXPECT_EQ(t.request(req(B, LockMode::EX, 2)), Events{bast(A, LockMode::EX, 1)});
    // A downconverts to CR: still blocks EX, a new situation, told again.
    EXPECT_EQ(t.request(req(A, LockMode::CR, 3)),
              (Events{granted(A, LockMode::CR, 3), bast(A, LockMode::EX, 3)}));
}

TEST(GesLockTable, ConvertingHolderIsBastedForWaitersItBlocks) {
    LockTable t(1);
    t.request(req(A, LockMode::PR, 1));
    t.request(req(B, LockMode::PR, 2));
    // A: PR -> EX waits for B; B is told about EX.
    EXPECT_EQ(t.request(req(A, LockMode::EX, 3)), Events{bast(B, LockMode::EX, 2)});
}

TEST(GesLockTable, NoWaitFailsAtOnceWithoutSideEffects) {
    LockTable t(1);
    t.request(req(A, LockMode::EX, 1));
    EXPECT_EQ(t.request(req(B, LockMode::PR, 2, 0, R, kNoWait)),
              Events{denied(B, LockMode::PR, 2, DenyReason::NoWait)});
    EXPECT_EQ(t.lock_count(), 1u);
    // Grantable NOWAIT is just granted.
    EXPECT_EQ(t.request(req(B, LockMode::NL, 3, 0, R, kNoWait)),
              Events{granted(B, LockMode::NL, 3)});
    // NOWAIT behind a waiter is denied too (no jumping the queue).
    t.request(req(C, LockMode::PR, 4));
    EXPECT_EQ(t.request(req(D, LockMode::NL, 5, 0, R, kNoWait)),
              Events{denied(D, LockMode::NL, 5, DenyReason::NoWait)});
}

TEST(GesLockTable, NoWaitConversionKeepsTheHeldMode) {
    LockTable t(1);
    t.request(req(A, LockMode::PR, 1));
    t.request(req(B, LockMode::PR, 2));
    EXPECT_EQ(t.request(req(A, LockMode::EX, 3, 0, R, kNoWait)),
              Events{denied(A, LockMode::EX, 3, DenyReason::NoWait)});
    const auto rows = t.snapshot();
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].state, LockState::Granted);
    EXPECT_EQ(rows[0].mode, LockMode::PR);
}

TEST(GesLockTable, CancelRemovesAWaiterAndServesThoseBehind) {
    LockTable t(1);
    t.request(req(A, LockMode::PR, 1));
    t.request(req(B, LockMode::EX, 2));
    t.request(req(C, LockMode::PR, 3));
    EXPECT_EQ(t.cancel(B, R, 99, DenyReason::Cancelled, 5), Events{});  // wrong request id
    EXPECT_EQ(
        t.cancel(B, R, 2, DenyReason::Cancelled, 5),
        (Events{denied(B, LockMode::EX, 2, DenyReason::Cancelled), granted(C, LockMode::PR, 3)}));
    EXPECT_EQ(t.cancel(B, R, 0, DenyReason::Cancelled, 5), Events{});  // nothing left
    EXPECT_EQ(t.cancel(A, R, 0, DenyReason::Cancelled, 5), Events{});  // holder: not pending
}

TEST(GesLockTable, CancelOfAConversionRevertsToTheHeldMode) {
    LockTable t(1);
    t.request(req(A, LockMode::PR, 1));
    t.request(req(B, LockMode::PR, 2));
    t.request(req(A, LockMode::EX, 3));
    EXPECT_EQ(t.cancel(A, R, 0, DenyReason::Timeout, 5),
              Events{denied(A, LockMode::EX, 3, DenyReason::Timeout)});
    EXPECT_EQ(t.lock_count(), 2u);
    // A still holds PR: an EX request from C waits for both; B already knows
    // about EX (from A's conversion), A is told now.
    EXPECT_EQ(t.request(req(C, LockMode::EX, 4)), Events{bast(A, LockMode::EX, 1)});
}

TEST(GesLockTable, ReleaseOfAWaiterDeniesItsRequest) {
    LockTable t(1);
    t.request(req(A, LockMode::EX, 1));
    t.request(req(B, LockMode::EX, 2));
    EXPECT_EQ(t.release(B, R, 3), Events{denied(B, LockMode::EX, 2, DenyReason::Cancelled)});
    EXPECT_EQ(t.release(C, R, 3), Events{});
    EXPECT_EQ(t.release(C, R2, 3), Events{});
}

TEST(GesLockTable, ReleaseAllDropsEverythingOfOneOwner) {
    LockTable t(1);
    t.request(req(A, LockMode::EX, 1, 0, R1));
    t.request(req(A, LockMode::EX, 2, 0, R2));
    t.request(req(D, LockMode::PR, 3, 0, R2));  // same node, other owner: waits
    t.request(req(B, LockMode::PR, 4, 0, R1));
    const Events ev = t.release_all(A, 10);
    EXPECT_EQ(ev, (Events{granted(B, LockMode::PR, 4, R1), granted(D, LockMode::PR, 3, R2)}));
    EXPECT_EQ(t.lock_count(), 2u);
}

TEST(GesLockTable, ReleaseNodeGrantsTheWaitersOfOtherNodes) {
    LockTable t(2);
    t.request(req(A, LockMode::PR, 1));            // node 1
    t.request(req(D, LockMode::PR, 2));            // node 1
    t.request(req(B, LockMode::EX, 3));            // node 2: waits
    t.request(req(Owner{1, 7}, LockMode::CR, 4));  // node 1 waiter: dropped silently
    t.request(req(C, LockMode::PR, 5));            // node 3
    const Events ev = t.release_node(1, 20);
    EXPECT_EQ(ev, (Events{granted(B, LockMode::EX, 3), bast(B, LockMode::PR, 3)}));
    for (const Event& e : ev) EXPECT_NE(e.owner.node, 1);
    EXPECT_EQ(t.lock_count(), 2u);
}

TEST(GesLockTable, ExpireDeniesOverdueRequestsOnly) {
    LockTable t(1);
    t.request(req(A, LockMode::EX, 1));
    t.request(req(B, LockMode::EX, 2, 0, R, 0, 100));
    t.request(req(C, LockMode::EX, 3, 0, R, 0, 200));
    t.request(req(D, LockMode::EX, 4));  // no deadline
    EXPECT_EQ(t.expire(99), Events{});
    EXPECT_EQ(t.expire(100), Events{denied(B, LockMode::EX, 2, DenyReason::Timeout)});
    EXPECT_EQ(t.expire(1000), Events{denied(C, LockMode::EX, 3, DenyReason::Timeout)});
    EXPECT_EQ(t.lock_count(), 2u);
}

TEST(GesLockTable, TwoPartyDeadlockHasExactlyOneVictimTheYoungest) {
    LockTable t(1);
    t.request(req(A, LockMode::EX, 1, 0, R1));
    t.request(req(B, LockMode::EX, 2, 0, R2));
    t.request(req(A, LockMode::EX, 3, 10, R2));                    // A waits for B
    const Events ev = t.request(req(B, LockMode::EX, 4, 20, R1));  // B waits for A: cycle
    EXPECT_EQ(count_type(ev, EventType::Denied), 1u);
    EXPECT_NE(std::find(ev.begin(), ev.end(), denied(B, LockMode::EX, 4, DenyReason::Deadlock, R1)),
              ev.end());
    EXPECT_EQ(count_type(ev, EventType::Granted), 0u);
    // The survivor proceeds once the victim gives up what it holds.
    EXPECT_EQ(t.release_all(B, 30), Events{granted(A, LockMode::EX, 3, R2)});
}

TEST(GesLockTable, VictimIsTheYoungestWaiterNotTheLastArrival) {
    LockTable t(1);
    t.request(req(A, LockMode::EX, 1, 0, R1));
    t.request(req(B, LockMode::EX, 2, 0, R2));
    t.request(req(A, LockMode::EX, 3, 50, R2));                    // A waits since 50
    const Events ev = t.request(req(B, LockMode::EX, 4, 20, R1));  // B since 20 (older)
    EXPECT_EQ(count_type(ev, EventType::Denied), 1u);
    EXPECT_NE(std::find(ev.begin(), ev.end(), denied(A, LockMode::EX, 3, DenyReason::Deadlock, R2)),
              ev.end());
}

TEST(GesLockTable, ThreePartyDeadlockHasExactlyOneVictim) {
    LockTable t(1);
    t.request(req(A, LockMode::EX, 1, 0, R1));
    t.request(req(B, LockMode::EX, 2, 0, R2));
    t.request(req(C, LockMode::EX, 3, 0, R3));
    EXPECT_EQ(count_type(t.request(req(A, LockMode::PR, 4, 10, R2)), EventType::Denied), 0u);
    EXPECT_EQ(count_type(t.request(req(B, LockMode::PR, 5, 20, R3)), EventType::Denied), 0u);
    const Events ev = t.request(req(C, LockMode::PR, 6, 30, R1));
    EXPECT_EQ(count_type(ev, EventType::Denied), 1u);
    EXPECT_NE(std::find(ev.begin(), ev.end(), denied(C, LockMode::PR, 6, DenyReason::Deadlock, R1)),
              ev.end());
    EXPECT_TRUE(t.wait_for_edges().size() == 2u);  // A->B, B->C remain, no cycle
    EXPECT_EQ(t.detect_deadlocks(40), Events{});
}

TEST(GesLockTable, ConversionDeadlockDeniesOneConversionWhichKeepsItsMode) {
    LockTable t(1);
    t.request(req(A, LockMode::PR, 1));
    t.request(req(B, LockMode::PR, 2));
    t.request(req(A, LockMode::EX, 3, 10));
    const Events ev = t.request(req(B, LockMode::EX, 4, 20));
    EXPECT_EQ(count_type(ev, EventType::Denied), 1u);
    EXPECT_NE(std::find(ev.begin(), ev.end(), denied(B, LockMode::EX, 4, DenyReason::Deadlock)),
              ev.end());
    // B still holds PR; A's conversion goes through when B releases.
    EXPECT_EQ(t.release(B, R, 30), Events{granted(A, LockMode::EX, 3)});
}

TEST(GesLockTable, QueueOrderCountsInTheWaitForGraph) {
    // A holds R1 EX; B waits on R1 EX. C holds R2; A waits on R2 behind nobody.
    // C then asks R1 NL: compatible with A's EX, but queued behind B, and B
    // waits for A, A for C: a cycle through queue order.
    LockTable t(1);
    t.request(req(A, LockMode::EX, 1, 0, R1));
    t.request(req(C, LockMode::EX, 2, 0, R2));
    t.request(req(B, LockMode::EX, 3, 5, R1));
    t.request(req(A, LockMode::EX, 4, 6, R2));
    const Events ev = t.request(req(C, LockMode::NL, 5, 7, R1));
    EXPECT_EQ(count_type(ev, EventType::Denied), 1u);
    EXPECT_NE(std::find(ev.begin(), ev.end(), denied(C, LockMode::NL, 5, DenyReason::Deadlock, R1)),
              ev.end());
}

TEST(GesLockTable, NoDeadlockWithoutACycle) {
    LockTable t(1);
    t.request(req(A, LockMode::EX, 1, 0, R1));
    t.request(req(B, LockMode::EX, 2, 0, R1));
    t.request(req(C, LockMode::EX, 3, 0, R1));
    t.request(req(B, LockMode::EX, 4, 0, R2));  // B holds nothing that A needs
    EXPECT_EQ(t.detect_deadlocks(1), Events{});
    EXPECT_EQ(t.lock_count(), 4u);
}

TEST(GesLockTable, DetectionCanBeLeftToThePeriodicCall) {
    LockTable t(1, LockTable::Options{false});
    t.request(req(A, LockMode::EX, 1, 0, R1));
    t.request(req(B, LockMode::EX, 2, 0, R2));
    t.request(req(A, LockMode::EX, 3, 10, R2));
    EXPECT_EQ(count_type(t.request(req(B, LockMode::EX, 4, 20, R1)), EventType::Denied), 0u);
    const Events ev = t.detect_deadlocks(30);
    EXPECT_EQ(ev, Events{denied(B, LockMode::EX, 4, DenyReason::Deadlock, R1)});
}

TEST(GesLockTable, WaitForEdgesDescribeTheGraph) {
    LockTable t(7);
    t.request(req(A, LockMode::PR, 1));
    t.request(req(B, LockMode::EX, 2, 15));
    t.request(req(C, LockMode::CR, 3, 16));
    const auto edges = t.wait_for_edges();
    ASSERT_EQ(edges.size(), 2u);
    EXPECT_EQ(edges[0].waiter, B);
    EXPECT_EQ(edges[0].holder, A);
    EXPECT_EQ(edges[0].master, 7);
    EXPECT_EQ(edges[0].request_id, 2u);
    EXPECT_EQ(edges[0].since, 15);
    EXPECT_EQ(edges[1].waiter, C);  // queued behind B
    EXPECT_EQ(edges[1].holder, B);
}

TEST(GesLockTable, SnapshotListsEveryLockInQueueOrder) {
    LockTable t(3);
    t.request(req(A, LockMode::PR, 1, 100));
    t.request(req(B, LockMode::PR, 2, 101));
    t.request(req(C, LockMode::EX, 3, 102));
    t.request(req(A, LockMode::EX, 4, 103));
    t.request(req(D, LockMode::NL, 5, 104, R1));
    const auto rows = t.snapshot();
    ASSERT_EQ(rows.size(), 4u);  // a converting lock is one row
    // Text names sort before bigints: r1 first.
    EXPECT_EQ(rows[0].resource, "r1");
    EXPECT_EQ(rows[0].state, LockState::Granted);
    EXPECT_EQ(rows[1].resource, "#42");
    EXPECT_EQ(rows[1].owner_node, B.node);
    EXPECT_EQ(rows[1].proc, B.proc);
    EXPECT_EQ(rows[1].since, 101);
    EXPECT_EQ(rows[2].owner_node, A.node);
    EXPECT_EQ(rows[2].state, LockState::Converting);
    EXPECT_EQ(rows[2].mode, LockMode::EX);
    EXPECT_EQ(rows[2].held_mode, LockMode::PR);
    EXPECT_EQ(rows[2].since, 103);
    EXPECT_EQ(rows[3].proc, C.proc);
    EXPECT_EQ(rows[3].state, LockState::Waiting);
    EXPECT_EQ(rows[3].since, 102);
    for (const auto& r : rows) EXPECT_EQ(r.master, 3);
    // A lock granted from the queue takes the granting call's time.
    t.release_all(A, 200);
    t.release_all(B, 201);
    const auto after = t.snapshot();
    EXPECT_EQ(after[1].proc, C.proc);
    EXPECT_EQ(after[1].since, 201);
}

TEST(GesLockTable, ReplayReinstatesGrantsThenQueuesWaiters) {
    LockTable t(2);
    t.begin_replay();
    // A new request arriving during the replay waits like everyone else.
    EXPECT_EQ(t.request(req(C, LockMode::PR, 9, 50)), Events{});
    std::vector<ReplayEntry> batch;
    ReplayEntry w;  // B waits for EX
    w.owner = B;
    w.resource = R;
    w.state = LockState::Waiting;
    w.requested_mode = LockMode::EX;
    w.request_id = 2;
    w.since = 10;
    ReplayEntry g;  // A holds PR
    g.owner = A;
    g.resource = R;
    g.state = LockState::Granted;
    g.granted_mode = g.requested_mode = LockMode::PR;
    g.request_id = 1;
    g.since = 5;
    batch.push_back(w);
    batch.push_back(g);
    EXPECT_EQ(t.ingest_replay(batch, 60), Events{});
    EXPECT_TRUE(t.replaying());
    // Serving starts at the end: A's grant stands, B (EX) waits and C queues behind B.
    const Events ev = t.end_replay(70);
    EXPECT_EQ(ev, Events{bast(A, LockMode::EX, 1)});
    EXPECT_EQ(t.replay_conflicts(), 0u);
    EXPECT_EQ(t.release(A, R, 80), (Events{granted(B, LockMode::EX, 2), bast(B, LockMode::PR, 2)}));
    EXPECT_EQ(t.release(B, R, 90), Events{granted(C, LockMode::PR, 9)});
}

TEST(GesLockTable, ReplayedConversionAndNoWaitAreSettledAtTheEnd) {
    LockTable t(2);
    t.begin_replay();
    ReplayEntry a;
    a.owner = A;
    a.resource = R;
    a.state = LockState::Converting;
    a.granted_mode = LockMode::PR;
    a.requested_mode = LockMode::EX;
    a.request_id = 3;
    ReplayEntry b = a;
    b.owner = B;
    b.state = LockState::Granted;
    b.requested_mode = LockMode::PR;
    b.request_id = 4;
    t.ingest_replay({a, b}, 0);
    t.request(req(C, LockMode::NL, 5, 0, R, kNoWait));  // would have to wait
    const Events ev = t.end_replay(1);
    EXPECT_EQ(ev,
              (Events{denied(C, LockMode::NL, 5, DenyReason::NoWait), bast(B, LockMode::EX, 4)}));
    EXPECT_EQ(t.release(B, R, 2), Events{granted(A, LockMode::EX, 3)});
}

TEST(GesLockTable, ReplayOfAnExistingOwnerReplacesItsLock) {
    LockTable t(2);
    t.request(req(A, LockMode::EX, 1));
    ReplayEntry g;
    g.owner = A;
    g.resource = R;
    g.state = LockState::Granted;
    g.granted_mode = g.requested_mode = LockMode::CR;
    g.request_id = 1;
    EXPECT_EQ(t.ingest_replay({g}, 0), Events{});
    EXPECT_EQ(t.lock_count(), 1u);
    EXPECT_EQ(t.snapshot()[0].mode, LockMode::CR);
}

TEST(GesLockTable, ConflictingReplayedGrantsAreCounted) {
    LockTable t(2);
    ReplayEntry g;
    g.owner = A;
    g.resource = R;
    g.state = LockState::Granted;
    g.granted_mode = g.requested_mode = LockMode::EX;
    g.request_id = 1;
    ReplayEntry h = g;
    h.owner = B;
    t.ingest_replay({g, h}, 0);
    EXPECT_EQ(t.replay_conflicts(), 1u);
    EXPECT_EQ(t.lock_count(), 2u);
}

TEST(GesLockTable, DropUnmasteredKeepsOnlyOwnResources) {
    LockTable t(2);
    for (int k = 0; k < 200; ++k)
        t.request(req(A, LockMode::PR, k + 1, 0, ResourceName::from_int(k)));
    const std::vector<uint16_t> live{1, 2, 3};
    size_t mine = 0;
    for (int k = 0; k < 200; ++k) mine += master_for(ResourceName::from_int(k), live) == 2;
    EXPECT_EQ(t.drop_unmastered(live), 200 - mine);
    EXPECT_EQ(t.resource_count(), mine);
    for (const auto& row : t.snapshot()) {
        const int64_t id = std::stoll(row.resource.substr(1));
        EXPECT_EQ(master_for(ResourceName::from_int(id), live), 2);
    }
}
