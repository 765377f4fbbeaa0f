// The GES worker of the LMS (ic/ges/worker.hpp) driven through its host
// interface: whole clusters of real workers in memory (tests/unit/ges/worker_support.hpp),
// messages routed between them as the interconnect would. Grants, queues,
// conversions and BASTs; NOWAIT and cancel; deny without a lease or quorum and
// on a fence; stale-epoch and wrong-source messages; messages of a newer epoch
// kept until it is adopted; the replay barrier; a client node leaving and a
// master leaving (remastering, tokens kept); the reaper of dead backends;
// late grants given back; an LMS restart getting its locks back; the
// cluster-wide deadlock search.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ges/worker_support.hpp"

using namespace pgrac::ic;
using namespace pgrac::ic::ges;
using pgrac::ic::ges::testing::GesCluster;

namespace {

ResourceName text(const std::string& s) {
    return *ResourceName::from_text(s);
}

// A cluster of n nodes, all members of epoch `epoch`, with the replay done.
GesCluster cluster(uint16_t n, uint32_t epoch = 10) {
    GesCluster c(n);
    std::vector<uint16_t> all;
    for (uint16_t i = 1; i <= n; i++) all.push_back(i);
    c.commit_view(epoch, all);
    return c;
}

std::vector<uint8_t> encode(const GesMessage& m) {
    std::vector<uint8_t> body;
    EXPECT_EQ(encode_ges_message(m, &body), GesWireError::None);
    return body;
}

}  // namespace

TEST(GesWorker, AdoptsTheCommittedViewAndReplaysToEveryMember) {
    GesCluster c(3);
    EXPECT_EQ(c.worker(1).epoch(), 0u);
    c.commit_view(10, {1, 2, 3});
    for (uint16_t n = 1; n <= 3; n++) {
        EXPECT_EQ(c.worker(n).epoch(), 10u);
        EXPECT_TRUE(c.worker(n).member());
        EXPECT_FALSE(c.worker(n).replaying()) << "every member's last batch arrived";
    }
    // Each worker sent each other member at least the empty last-batch marker.
    EXPECT_GE(c.messages_delivered, 6u);
}

TEST(GesWorker, GrantsAtOnceWithATokenOfTheEpoch) {
    GesCluster c = cluster(1, 7);
    const ResourceName r = text("orders:42");
    const uint64_t id = c.request(1, 100, r, LockMode::EX);
    ASSERT_TRUE(c.granted(1, id));
    EXPECT_EQ(c.token(1, id), (uint64_t{7} << 32) | (uint64_t{1} << kCacheTokenBits));
    const std::vector<LockRow> rows = c.rows(1, r);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].state, LockState::Granted);
    EXPECT_EQ(rows[0].mode, LockMode::EX);
    EXPECT_EQ(c.worker(1).token_of(rows[0]), c.token(1, id));
}

TEST(GesWorker, ConflictingModesQueueAndAreNeverGrantedTogether) {
    GesCluster c = cluster(3);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2, 3});
    const uint64_t a = c.request(1, 10, r, LockMode::EX);
    ASSERT_TRUE(c.granted(1, a));
    const uint64_t b = c.request(3, 20, r, LockMode::PR);
    const uint64_t d = c.request(1, 11, r, LockMode::PR);
    EXPECT_FALSE(c.granted(3, b));
    EXPECT_FALSE(c.granted(1, d));
    EXPECT_TRUE(c.no_conflicting_holders());
    EXPECT_EQ(c.worker(1).basts_received(), 1u) << "one BAST for both PR waiters";

    c.release(1, 10, r);
    EXPECT_TRUE(c.granted(3, b));
    EXPECT_TRUE(c.granted(1, d));
    EXPECT_TRUE(c.no_conflicting_holders());

    const uint64_t e = c.request(3, 21, r, LockMode::EX);
    EXPECT_FALSE(c.granted(3, e));
    c.release(3, 20, r);
    EXPECT_FALSE(c.granted(3, e)) << "one PR holder is left";
    EXPECT_TRUE(c.no_conflicting_holders());
    c.release(1, 11, r);
    EXPECT_TRUE(c.granted(3, e));
    EXPECT_TRUE(c.no_conflicting_holders());
    EXPECT_GT(c.token(3, e), c.token(3, b)) << "tokens of one resource grow";
}

TEST(GesWorker, CompatibleModesAreGrantedTogether) {
    GesCluster c = cluster(2);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2});
    const uint64_t a = c.request(1, 10, r, LockMode::PR);
    const uint64_t b = c.request(2, 20, r, LockMode::PR);
    const uint64_t d = c.request(1, 11, r, LockMode::CR);
    EXPECT_TRUE(c.granted(1, a));
    EXPECT_TRUE(c.granted(2, b));
    EXPECT_TRUE(c.granted(1, d));
    EXPECT_EQ(c.rows(2, r).size(), 3u);
}

TEST(GesWorker, ConversionUpWaitsForOtherHoldersAndDownIsImmediate) {
    GesCluster c = cluster(2);
    const ResourceName r = GesCluster::mastered_by(1, {1, 2});
    ASSERT_TRUE(c.granted(2, c.request(2, 20, r, LockMode::PR)));
    ASSERT_TRUE(c.granted(1, c.request(1, 10, r, LockMode::PR)));
    const uint64_t up = c.request(2, 20, r, LockMode::EX);  // a conversion: it holds PR
    EXPECT_FALSE(c.granted(2, up));
    ASSERT_TRUE(c.worker(2).registry().find(Owner{2, 20}, r));
    EXPECT_EQ(c.worker(2).registry().find(Owner{2, 20}, r)->state, LockState::Converting);
    EXPECT_TRUE(c.no_conflicting_holders());
    c.release(1, 10, r);
    EXPECT_TRUE(c.granted(2, up));

    const uint64_t waiter = c.request(1, 10, r, LockMode::PR);
    EXPECT_FALSE(c.granted(1, waiter));
    const uint64_t down = c.request(2, 20, r, LockMode::PR);
    EXPECT_TRUE(c.granted(2, down)) << "a down-conversion is granted at once";
    EXPECT_TRUE(c.granted(1, waiter)) << "and unblocks the PR waiter";
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST(GesWorker, NowaitIsDeniedAtOnceAndASecondPendingRequestIsRefused) {
    GesCluster c = cluster(2);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2});
    ASSERT_TRUE(c.granted(2, c.request(2, 20, r, LockMode::EX)));
    const uint64_t nw = c.request(1, 10, r, LockMode::PR, kNoWait);
    EXPECT_TRUE(c.denied(1, nw, DenyReason::NoWait));
    EXPECT_FALSE(c.worker(1).registry().find(Owner{1, 10}, r));

    const uint64_t w = c.request(1, 10, r, LockMode::PR);
    const uint64_t again = c.request(1, 10, r, LockMode::EX);
    EXPECT_FALSE(c.granted(1, w));
    EXPECT_TRUE(c.denied(1, again, DenyReason::AlreadyPending));
}

TEST(GesWorker, CancelWithdrawsAWaiterAtItsMaster) {
    GesCluster c = cluster(2);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2});
    ASSERT_TRUE(c.granted(2, c.request(2, 20, r, LockMode::EX)));
    const uint64_t w = c.request(1, 10, r, LockMode::EX);
    c.cancel(1, 10, r, w);
    EXPECT_EQ(c.rows(2, r).size(), 1u) << "only the holder is left at the master";
    c.release(2, 20, r);
    EXPECT_TRUE(c.rows(2, r).empty());
    EXPECT_TRUE(c.host(1).undelivered.empty());
    EXPECT_FALSE(c.worker(1).registry().find(Owner{1, 10}, r));
}

TEST(GesWorker, DeniesNoQuorumWithoutALeaseOrOutsideTheView) {
    GesCluster c = cluster(3);
    const ResourceName r = text("x");
    c.host(3).set_lease(1);  // lapsed long ago
    const uint64_t a = c.request(3, 30, r, LockMode::EX);
    EXPECT_TRUE(c.denied(3, a, DenyReason::NoQuorum));
    EXPECT_FALSE(c.worker(3).member());
    EXPECT_EQ(c.worker(3).epoch(), 0u);

    // A view without node 2 (node 2 still has a lease): not a member.
    c.host(2).set_view(11, nodes_mask({1, 3}));
    const uint64_t b = c.request(2, 20, r, LockMode::EX);
    EXPECT_TRUE(c.denied(2, b, DenyReason::NoQuorum));
    EXPECT_TRUE(c.host(1).deliveries.empty());
}

TEST(GesWorker, AFenceDeniesWaitersAndDropsEverything) {
    GesCluster c = cluster(2);
    const ResourceName r = GesCluster::mastered_by(1, {1, 2});
    const uint64_t h = c.request(1, 10, r, LockMode::EX);
    const uint64_t w = c.request(1, 11, r, LockMode::EX);
    ASSERT_TRUE(c.granted(1, h));
    ASSERT_FALSE(c.granted(1, w));
    c.host(1).set_lease(c.host(1).now_ms + 100);
    c.advance_ms(200);
    c.tick(1);
    EXPECT_TRUE(c.denied(1, w, DenyReason::NoQuorum));
    EXPECT_EQ(c.worker(1).registry().size(), 0u);
    EXPECT_TRUE(c.worker(1).snapshot().empty());
    EXPECT_EQ(c.worker(1).epoch(), 0u);
    EXPECT_EQ(lease_fences(c.host(1).lease_word()), 1u) << "the worker fenced the node";
}

TEST(GesWorker, RefusesStaleEpochsNonMembersAndOwnersOfOtherNodes) {
    GesCluster c = cluster(3);
    const ResourceName r = GesCluster::mastered_by(1, {1, 2, 3});
    GesMessage m;
    m.type = GesMsgType::Request;
    m.owner = Owner{2, 20};
    m.resource = r;
    m.mode = LockMode::EX;
    m.request_id = GesCluster::request_id(20, 1);
    std::vector<uint8_t> body;

    m.epoch = 9;  // older
    body = encode(m);
    c.worker(1).handle(WorkerRole::Master, 2, body.data(), body.size(), c.now());
    EXPECT_EQ(c.host(1).counter(WorkerCounter::StaleEpochRefused), 1u);
    EXPECT_EQ(c.host(1).stale_messages, 1u);
    ASSERT_EQ(c.host(1).errors.size(), 1u);
    EXPECT_EQ(c.host(1).errors[0], ErrorType::StaleEpoch);

    m.epoch = 10;
    body = encode(m);
    c.worker(1).handle(WorkerRole::Master, 3, body.data(), body.size(), c.now());  // names node 2
    EXPECT_EQ(c.host(1).counter(WorkerCounter::WrongSourceRefused), 1u);

    // Only a member's requests, and only for resources mastered here.
    GesCluster c2 = cluster(4);
    c2.commit_view(11, {1, 2, 3});
    m.epoch = 11;
    m.owner = Owner{4, 40};
    body = encode(m);
    c2.worker(1).handle(WorkerRole::Master, 4, body.data(), body.size(), c2.now());
    EXPECT_EQ(c2.host(1).counter(WorkerCounter::WrongSourceRefused), 1u);
    m.owner = Owner{2, 20};
    m.resource = GesCluster::mastered_by(3, {1, 2, 3});
    body = encode(m);
    c2.worker(1).handle(WorkerRole::Master, 2, body.data(), body.size(), c2.now());
    EXPECT_EQ(c2.host(1).counter(WorkerCounter::WrongSourceRefused), 2u);
    EXPECT_TRUE(c.worker(1).snapshot().empty());
    EXPECT_TRUE(c2.worker(1).snapshot().empty());

    // A reply from a node that does not master the resource.
    GesMessage g;
    g.type = GesMsgType::Grant;
    g.epoch = 10;
    g.owner = Owner{1, 10};
    g.resource = GesCluster::mastered_by(2, {1, 2, 3});
    g.mode = LockMode::EX;
    g.request_id = GesCluster::request_id(10, 1);
    g.token = 1;
    body = encode(g);
    c.worker(1).handle(WorkerRole::Reply, 3, body.data(), body.size(), c.now());
    EXPECT_EQ(c.host(1).counter(WorkerCounter::WrongSourceRefused), 2u);
}

TEST(GesWorker, KeepsMessagesOfANewerEpochUntilItIsAdopted) {
    GesCluster c = cluster(2);
    const ResourceName r = GesCluster::mastered_by(1, {1, 2});
    // Node 2 adopts epoch 11 first: its replay and request reach node 1 early.
    c.host(2).set_view(11, nodes_mask({1, 2}));
    c.tick(2);
    EXPECT_EQ(c.worker(2).epoch(), 11u);
    EXPECT_EQ(c.worker(1).epoch(), 10u);
    const uint64_t a = c.request(2, 20, r, LockMode::EX);
    EXPECT_FALSE(c.granted(2, a));
    EXPECT_EQ(c.host(1).counter(WorkerCounter::StaleEpochRefused), 0u);
    c.host(1).set_view(11, nodes_mask({1, 2}));
    c.tick_all();
    EXPECT_EQ(c.worker(1).epoch(), 11u);
    EXPECT_TRUE(c.granted(2, a));
    EXPECT_EQ(c.token(2, a) >> 32, 11u);
}

TEST(GesWorker, TheReplayBarrierWaitsForEveryMember) {
    GesCluster c = cluster(3);
    const ResourceName r = GesCluster::mastered_by(1, {1, 2, 3});
    c.held = {3};
    c.commit_view(11, {1, 2, 3});
    EXPECT_TRUE(c.worker(1).replaying());
    const uint64_t a = c.request(1, 10, r, LockMode::EX);
    EXPECT_FALSE(c.granted(1, a)) << "nothing is granted before node 3 replayed";
    c.advance_ms(20000);  // no timeout ends the barrier
    c.tick(1);
    EXPECT_FALSE(c.granted(1, a));
    c.held.clear();
    c.pump();
    EXPECT_TRUE(c.granted(1, a));
}

TEST(GesWorker, ALeavingClientNodesLocksVanishInTheNextEpoch) {
    GesCluster c = cluster(3);
    // Mastered by node 1 in both views (rendezvous hashing: only node 3's resources move).
    const ResourceName r = GesCluster::mastered_by(1, {1, 2, 3});
    ASSERT_EQ(master_for(r, {1, 2}), 1);
    const uint64_t h = c.request(3, 30, r, LockMode::EX);
    ASSERT_TRUE(c.granted(3, h));
    const uint64_t w = c.request(1, 10, r, LockMode::EX);
    ASSERT_FALSE(c.granted(1, w));
    // Node 3 is cut off; the others commit a view without it.
    c.held = {3};
    c.host(1).set_view(11, nodes_mask({1, 2}));
    c.host(2).set_view(11, nodes_mask({1, 2}));
    c.tick(1);
    c.tick(2);
    EXPECT_TRUE(c.granted(1, w));
    for (const LockRow& row : c.worker(1).snapshot()) EXPECT_NE(row.owner_node, 3);
    EXPECT_EQ(c.token(1, w) >> 32, 11u);
}

TEST(GesWorker, RemastersWhenTheMasterLeavesAndKeepsTokensAndQueues) {
    GesCluster c = cluster(3);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2, 3});
    const uint64_t h = c.request(1, 10, r, LockMode::EX);
    ASSERT_TRUE(c.granted(1, h));
    const uint64_t t = c.token(1, h);
    const uint64_t w = c.request(3, 30, r, LockMode::PR);
    ASSERT_FALSE(c.granted(3, w));

    c.held = {2};
    c.host(1).set_view(11, nodes_mask({1, 3}));
    c.host(3).set_view(11, nodes_mask({1, 3}));
    c.tick(1);
    c.tick(3);
    const uint16_t m = master_for(r, {1, 3});
    const std::vector<LockRow> rows = c.rows(m, r);
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].owner_node, 1);
    EXPECT_EQ(rows[0].state, LockState::Granted);
    EXPECT_EQ(c.worker(m).token_of(rows[0]), t) << "a replayed grant keeps its token";
    EXPECT_EQ(rows[1].owner_node, 3);
    EXPECT_EQ(rows[1].state, LockState::Waiting);
    EXPECT_FALSE(c.granted(3, w));
    EXPECT_TRUE(c.no_conflicting_holders());

    c.release(1, 10, r);
    EXPECT_TRUE(c.granted(3, w)) << "the replayed waiter keeps its request id";
    EXPECT_GT(c.token(3, w), t);
}

TEST(GesWorker, TheReaperReleasesTheLocksOfGoneBackends) {
    GesCluster c = cluster(2);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2});
    ASSERT_TRUE(c.granted(1, c.request(1, 10, r, LockMode::EX)));
    const uint64_t w = c.request(2, 20, r, LockMode::EX);
    c.host(1).dead_procs.insert(10);
    c.advance_ms(300);
    c.tick(1);
    EXPECT_EQ(c.host(1).counter(WorkerCounter::DeadOwnersReaped), 1u);
    EXPECT_TRUE(c.granted(2, w));
    EXPECT_EQ(c.worker(1).registry().size(), 0u);
}

TEST(GesWorker, AGrantNobodyWaitsForIsGivenBack) {
    GesCluster c = cluster(2);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2});
    ASSERT_TRUE(c.granted(2, c.request(2, 20, r, LockMode::EX)));
    const uint64_t w = c.request(1, 10, r, LockMode::EX);
    c.host(1).waiting.erase(w);  // the backend gave up; its cancel is not sent yet
    const uint64_t x = c.request(2, 21, r, LockMode::EX);
    c.release(2, 20, r);
    ASSERT_EQ(c.host(1).undelivered.size(), 1u);
    EXPECT_EQ(c.host(1).counter(WorkerCounter::LateGrantsUndone), 1u);
    EXPECT_TRUE(c.granted(2, x)) << "the lock given back went to the next waiter";
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST(GesWorker, ACancelCrossingAGrantGivesTheLockBack) {
    GesCluster c = cluster(2);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2});
    ASSERT_TRUE(c.granted(2, c.request(2, 20, r, LockMode::EX)));
    const uint64_t w = c.request(1, 10, r, LockMode::EX);
    // The master grants (the holder releases) while node 1's cancel is on its way.
    c.held = {1};
    c.release(2, 20, r);
    c.cancel(1, 10, r, w);
    c.held.clear();
    c.pump();
    EXPECT_FALSE(c.granted(1, w));
    EXPECT_EQ(c.host(1).counter(WorkerCounter::LateGrantsUndone), 1u);
    EXPECT_TRUE(c.rows(2, r).empty()) << "the late grant was released";
    EXPECT_TRUE(c.granted(2, c.request(2, 21, r, LockMode::EX)));
}

TEST(GesWorker, ARestartedWorkerGetsItsLocksBackInTheNextEpoch) {
    GesCluster c = cluster(3);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2, 3});
    const ResourceName own = GesCluster::mastered_by(1, {1, 2, 3});
    const uint64_t h = c.request(1, 10, r, LockMode::EX);
    ASSERT_TRUE(c.granted(1, h));
    const uint64_t t = c.token(1, h);
    ASSERT_TRUE(c.granted(2, c.request(2, 20, own, LockMode::PR)));

    c.node(1).restart(c.now());
    EXPECT_EQ(c.host(1).epoch_requests, 1u);
    ASSERT_TRUE(c.worker(1).registry().find(Owner{1, 10}, r));
    c.tick(1);
    EXPECT_EQ(c.worker(1).epoch(), 0u) << "serves nothing until a newer epoch";
    const uint64_t x = c.request(3, 30, own, LockMode::EX);
    EXPECT_FALSE(c.granted(3, x));

    c.commit_view(11, {1, 2, 3});
    EXPECT_EQ(c.worker(1).epoch(), 11u);
    const std::vector<LockRow> rows = c.rows(2, r);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].owner_node, 1);
    EXPECT_EQ(c.worker(2).token_of(rows[0]), t);
    const uint64_t y = c.request(3, 31, r, LockMode::EX);
    EXPECT_FALSE(c.granted(3, y)) << "the restarted node still holds it";
    // Its own table came back from the registries: node 2's PR blocks node 3's EX.
    EXPECT_EQ(c.rows(1, own).size(), 2u);
    EXPECT_FALSE(c.granted(3, x));
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST(GesWorker, AnOverflowedMirrorVoidsTheShardOnRestart) {
    GesCluster c(1, /*mirror_capacity=*/16);  // 12 entries fit (3/4 load)
    c.commit_view(10, {1});
    for (uint32_t p = 1; p <= 13; p++)
        ASSERT_TRUE(c.granted(1, c.request(1, p, text("m" + std::to_string(p)), LockMode::EX)));
    c.node(1).restart(c.now());
    EXPECT_EQ(c.host(1).shard_fence[0], 1u);
    EXPECT_EQ(c.worker(1).registry().size(), 0u);
}

TEST(GesWorker, TheClusterWideDeadlockSearchCancelsOneVictim) {
    GesCluster c = cluster(2);
    const ResourceName r1 = GesCluster::mastered_by(1, {1, 2});
    const ResourceName r2 = GesCluster::mastered_by(2, {1, 2});
    ASSERT_TRUE(c.granted(1, c.request(1, 10, r1, LockMode::EX)));
    ASSERT_TRUE(c.granted(2, c.request(2, 20, r2, LockMode::EX)));
    const uint64_t a = c.request(1, 10, r2, LockMode::EX);
    const uint64_t b = c.request(2, 20, r1, LockMode::EX);
    c.tick_all();
    EXPECT_FALSE(c.denied(1, a, DenyReason::Deadlock) || c.denied(2, b, DenyReason::Deadlock))
        << "no master sees the cycle alone";
    for (int i = 0; i < 10; i++) {
        c.advance_ms(100);
        c.tick_all();
    }
    const int victims = c.denied(1, a, DenyReason::Deadlock) + c.denied(2, b, DenyReason::Deadlock);
    EXPECT_EQ(victims, 1);
    EXPECT_EQ(c.host(1).counter(WorkerCounter::ClusterDeadlocks), 1u);
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST(GesWorker, AMalformedMessageIsLoggedAndIgnored) {
    GesCluster c = cluster(2);
    const uint8_t junk[] = {9, 9, 9};
    c.worker(1).handle(WorkerRole::Master, 2, junk, sizeof junk, c.now());
    ASSERT_FALSE(c.host(1).logs.empty());
    EXPECT_NE(c.host(1).logs.back().second.find("malformed message from node 2"),
              std::string::npos);
    EXPECT_TRUE(c.host(1).sent.empty());
}

namespace {

// A table as text, to compare before and after.
std::string table_text(GesCluster& c, uint16_t node) {
    std::string s;
    for (const LockRow& row : c.worker(node).snapshot())
        s += row.resource + " " + std::to_string(row.owner_node) + "/" + std::to_string(row.proc) +
             " " + std::to_string(static_cast<int>(row.state)) + " " +
             std::to_string(static_cast<int>(row.mode)) + "\n";
    return s;
}

ReplayEntry granted_entry(Owner o, const ResourceName& r, LockMode mode, uint64_t request_id) {
    ReplayEntry e;
    e.owner = o;
    e.resource = r;
    e.state = LockState::Granted;
    e.granted_mode = mode;
    e.requested_mode = mode;
    e.request_id = request_id;
    e.token = 1;
    return e;
}

}  // namespace

// Issue 25, item 6: a replay may only carry the sender's own locks. A batch
// with one entry of another node is refused whole (wrong_source), during the
// rebuild and after it, and the master's table is as it was.
TEST(GesWorker, AReplayNamingAnOwnerOfAnotherNodeIsRefusedAndLeavesTheTableUntouched) {
    GesCluster c = cluster(3);
    const ResourceName r = GesCluster::mastered_by(1, {1, 2, 3});
    const ResourceName other = GesCluster::mastered_by(1, {1, 2, 3}, "other");
    const uint64_t held = c.request(2, 20, r, LockMode::EX);
    ASSERT_TRUE(c.granted(2, held));

    // During the rebuild of epoch 11: node 2's own replay is held back, and a
    // batch from node 2 carries one of its own locks and one of node 3's.
    c.held = {2};
    c.commit_view(11, {1, 2, 3});
    ASSERT_TRUE(c.worker(1).replaying());
    const std::string before = table_text(c, 1);
    GesMessage m;
    m.type = GesMsgType::Replay;
    m.epoch = 11;
    m.entries = {granted_entry(Owner{2, 21}, other, LockMode::PR, GesCluster::request_id(21, 1)),
                 granted_entry(Owner{3, 30}, r, LockMode::EX, GesCluster::request_id(30, 1))};
    std::vector<uint8_t> body = encode(m);
    c.worker(1).handle(WorkerRole::Master, 2, body.data(), body.size(), c.now());
    EXPECT_EQ(table_text(c, 1), before) << "nothing of the batch was taken";
    EXPECT_EQ(c.host(1).counter(WorkerCounter::WrongSourceRefused), 1u);
    EXPECT_EQ(c.host(1).errors, std::vector<ErrorType>{ErrorType::WrongSource});

    // Node 2's real replay arrives, but its replay in this epoch was spoiled:
    // the barrier does not end on an incomplete table.
    c.held.clear();
    c.pump();
    EXPECT_TRUE(c.worker(1).replaying());
    const uint64_t x = c.request(3, 31, r, LockMode::EX);
    EXPECT_FALSE(c.granted(3, x));

    // A new epoch replays everything again; the barrier ends, node 2 still holds.
    c.commit_view(12, {1, 2, 3});
    EXPECT_FALSE(c.worker(1).replaying());
    EXPECT_FALSE(c.granted(3, x));
    EXPECT_TRUE(c.no_conflicting_holders());

    // After the rebuild, too: refused, and the table is as it was.
    const std::string serving = table_text(c, 1);
    m.epoch = 12;
    body = encode(m);
    c.worker(1).handle(WorkerRole::Master, 2, body.data(), body.size(), c.now());
    EXPECT_EQ(c.host(1).counter(WorkerCounter::WrongSourceRefused), 2u);
    EXPECT_EQ(table_text(c, 1), serving);
}
