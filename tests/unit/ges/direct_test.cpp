// Direct routing (src/ic/ges/worker.cpp, "direct routing"): a backend's new
// lock mastered on another node is registered with its LMS (Request flagged
// kDirect) and sent straight to the home master (Worker::handle_direct),
// which answers Grant, Deny, Queued or Redirect. An immediate grant is taken
// by the backend itself if its LMS opened the slot (DirectReady ->
// SelfGranted) and relayed to the LMS, which adopts it; an epoch change
// settles open slots. The FakeHost models the slot states
// (ges/worker_support.hpp); GesCluster runs the backend's steps one by one.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ges/worker_support.hpp"

using namespace pgrac::ic;
using namespace pgrac::ic::ges;
using pgrac::ic::ges::testing::FakeHost;
using pgrac::ic::ges::testing::GesCluster;
using Slot = FakeHost::Slot;
using DirectPath = GesCluster::DirectPath;

namespace {

const std::vector<uint16_t> kAll{1, 2, 3};

// Three nodes in epoch 10; r is mastered on node 3.
struct GesDirectRouting : ::testing::Test {
    GesCluster c{3};
    ResourceName r = GesCluster::mastered_by(3, kAll);
    void SetUp() override {
        c.count_types = true;
        c.commit_view(10, kAll);
    }

    std::optional<ReplayEntry> entry(uint16_t node, uint32_t proc) {
        return c.worker(node).registry().find(Owner{node, proc}, r);
    }
    bool in_mirror(uint16_t node, uint32_t proc, uint64_t rid, LockState state) {
        for (const ReplayEntry& e : c.node(node).mirror.entries())
            if (e.owner == Owner{node, proc} && e.resource == r && e.request_id == rid &&
                e.state == state)
                return true;
        return false;
    }
    // The master's rows for r: (node, proc, state).
    std::vector<LockRow> rows() { return c.rows(3, r); }
};

}  // namespace

TEST_F(GesDirectRouting, UncontendedGrantIsTakenByTheBackendAndAdoptedByItsLms) {
    DirectPath path;
    const uint64_t id = c.direct_request(1, 10, r, LockMode::EX, 0, 0, &path);
    EXPECT_EQ(path, DirectPath::Taken);
    EXPECT_TRUE(c.taken(1, id));
    EXPECT_FALSE(c.granted(1, id)) << "not delivered by the LMS: the backend took it";
    ASSERT_EQ(c.host(1).adopted.size(), 1u) << "the relay freed the SelfGranted slot";
    EXPECT_EQ(c.host(1).adopted[0].request_id, id);
    EXPECT_EQ(c.host(1).slot(id), Slot::Done);
    EXPECT_TRUE(c.host(1).undelivered.empty());
    // The registry (and its mirror) has the grant, with the master's token.
    auto e = entry(1, 10);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->state, LockState::Granted);
    EXPECT_EQ(e->request_id, id);
    EXPECT_EQ(e->granted_mode, LockMode::EX);
    EXPECT_TRUE(in_mirror(1, 10, id, LockState::Granted));
    ASSERT_EQ(rows().size(), 1u);
    EXPECT_EQ(rows()[0].owner_node, 1);
    EXPECT_EQ(rows()[0].state, LockState::Granted);
    EXPECT_EQ(c.worker(3).token_of(rows()[0]), c.token(1, id));
    EXPECT_EQ(c.token(1, id) >> 32, 10u) << "a token of this epoch";
    EXPECT_EQ(c.host(3).counter(WorkerCounter::DirectServed), 1u);
    EXPECT_EQ(c.host(3).counter(WorkerCounter::DirectRedirected), 0u);
    // Nothing went on the wire for it (the RPC does not count): the LMS did
    // not send the request to the master.
    EXPECT_EQ(c.messages_delivered_to(3, GesMsgType::Request), 0u);

    // Node 2 waits for it; the release goes the usual way and grants node 2.
    const uint64_t x = c.request(2, 20, r, LockMode::EX);
    EXPECT_FALSE(c.granted(2, x));
    c.release(1, 10, r);
    EXPECT_FALSE(entry(1, 10));
    EXPECT_TRUE(c.granted(2, x));
    ASSERT_EQ(rows().size(), 1u);
    EXPECT_EQ(rows()[0].owner_node, 2);
    EXPECT_TRUE(c.no_conflicting_holders());
    // And node 1 takes it directly again after node 2's release.
    c.release(2, 20, r);
    const uint64_t again = c.direct_request(1, 10, r, LockMode::EX, 0, 0, &path);
    EXPECT_EQ(path, DirectPath::Taken);
    EXPECT_GT(c.token(1, again), c.token(2, x));
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST_F(GesDirectRouting, QueuedRequestIsGrantedThroughTheLms) {
    const uint64_t x = c.request(2, 20, r, LockMode::EX);
    ASSERT_TRUE(c.granted(2, x));
    const uint64_t id = c.direct_register(1, 10, r, LockMode::EX);
    EXPECT_EQ(c.host(1).slot(id), Slot::DirectReady);
    const GesCluster::DirectAnswer a = c.direct_call(id);
    ASSERT_TRUE(a.ok);
    EXPECT_EQ(a.m.type, GesMsgType::Queued);
    EXPECT_EQ(c.direct_finish(id, a), DirectPath::Wait);
    EXPECT_FALSE(c.holds_grant(1, id));
    ASSERT_EQ(rows().size(), 2u);
    EXPECT_EQ(rows()[1].state, LockState::Waiting);
    c.release(2, 20, r);
    EXPECT_TRUE(c.granted(1, id)) << "the later grant reaches the DirectReady slot via the LMS";
    EXPECT_FALSE(c.taken(1, id));
    EXPECT_EQ(c.host(1).slot(id), Slot::Done);
    EXPECT_EQ(entry(1, 10)->state, LockState::Granted);
    EXPECT_TRUE(in_mirror(1, 10, id, LockState::Granted));
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST_F(GesDirectRouting, NoWaitDenialIsRelayedToTheLms) {
    const uint64_t x = c.request(2, 20, r, LockMode::EX);
    ASSERT_TRUE(c.granted(2, x));
    const uint64_t id = c.direct_register(1, 10, r, LockMode::EX, kNoWait);
    const GesCluster::DirectAnswer a = c.direct_call(id);
    ASSERT_TRUE(a.ok);
    EXPECT_EQ(a.m.type, GesMsgType::Deny);
    EXPECT_EQ(a.m.reason, DenyReason::NoWait);
    EXPECT_EQ(c.host(1).slot(id), Slot::DirectReady) << "not answered before the relay";
    EXPECT_EQ(c.direct_finish(id, a), DirectPath::Wait);
    EXPECT_TRUE(c.denied(1, id, DenyReason::NoWait));
    EXPECT_EQ(c.host(1).slot(id), Slot::Done);
    EXPECT_FALSE(entry(1, 10)) << "the registry forgot the denied request";
    ASSERT_EQ(rows().size(), 1u);
    EXPECT_EQ(rows()[0].owner_node, 2);
}

TEST_F(GesDirectRouting, RequestOfAnotherEpochIsRedirectedAndServedOnceThroughTheLms) {
    // The backend read epoch 9 (the view changed since): its LMS sends the
    // request itself, and the master refuses the direct copy.
    const uint64_t id = c.direct_register(1, 10, r, LockMode::EX, 0, 0, 9);
    EXPECT_NE(c.host(1).slot(id), Slot::DirectReady) << "not opened for another epoch";
    const GesCluster::DirectAnswer a = c.direct_call(id);
    ASSERT_TRUE(a.redirect());
    EXPECT_EQ(c.host(3).counter(WorkerCounter::DirectRedirected), 1u);
    EXPECT_EQ(c.direct_finish(id, a), DirectPath::Fallback);
    EXPECT_TRUE(c.granted(1, id));
    EXPECT_EQ(c.deliveries(1).size(), 1u) << "one answer";
    ASSERT_EQ(rows().size(), 1u) << "the LMS's request and its fallback copy are one";
    EXPECT_EQ(c.messages_delivered_to(3, GesMsgType::Request), 1u);
    EXPECT_TRUE(c.no_conflicting_holders());
}

// The backend (and its LMS) follow epoch 11 while the master's node has not
// committed it yet: a grant of the master's epoch 10 must not be taken (its
// LMS would refuse the relay as stale, and the new epoch's master would
// never hear of the lock).
TEST_F(GesDirectRouting, MasterBehindTheRequestsEpochRedirects) {
    for (uint16_t n : {1, 2}) c.host(n).set_view(11, nodes_mask(kAll));
    c.tick(1);
    c.tick(2);
    ASSERT_EQ(c.worker(1).epoch(), 11u);
    ASSERT_EQ(c.worker(3).epoch(), 10u);
    const uint64_t x = c.request(2, 20, r, LockMode::EX);  // kept at node 3 for epoch 11
    const uint64_t id = c.direct_register(1, 10, r, LockMode::EX);
    EXPECT_EQ(c.host(1).slot(id), Slot::DirectReady);
    const GesCluster::DirectAnswer a = c.direct_call(id);
    ASSERT_TRUE(a.ok);
    EXPECT_TRUE(a.redirect()) << "a request of epoch 11 at a master of epoch 10";
    c.direct_finish(id, a);
    EXPECT_FALSE(c.taken(1, id));
    c.host(3).set_view(11, nodes_mask(kAll));
    c.tick_all();
    ASSERT_EQ(c.worker(3).epoch(), 11u);
    ASSERT_FALSE(c.worker(3).replaying());
    EXPECT_NE(c.holds_grant(1, id), c.holds_grant(2, x));
    EXPECT_TRUE(c.no_conflicting_holders());
    if (c.holds_grant(2, x)) {
        c.release(2, 20, r);
        EXPECT_TRUE(c.granted(1, id));
    }
}

TEST_F(GesDirectRouting, RequestDuringTheReplayBarrierIsRedirected) {
    // Node 2's replay is held: node 3's barrier of epoch 11 stays up.
    c.held.insert(2);
    c.commit_view(11, kAll);
    ASSERT_TRUE(c.worker(3).replaying());
    const uint64_t id = c.direct_register(1, 10, r, LockMode::EX);
    EXPECT_EQ(c.host(1).slot(id), Slot::DirectReady);
    const GesCluster::DirectAnswer a = c.direct_call(id);
    ASSERT_TRUE(a.redirect());
    EXPECT_EQ(c.direct_finish(id, a), DirectPath::Fallback);
    EXPECT_EQ(c.host(1).slot(id), Slot::Waiting) << "the fallback closed the slot";
    EXPECT_FALSE(c.holds_grant(1, id));
    c.held.clear();
    c.pump();
    EXPECT_FALSE(c.worker(3).replaying());
    EXPECT_TRUE(c.granted(1, id));
    EXPECT_EQ(c.token(1, id) >> 32, 11u);
    EXPECT_EQ(rows().size(), 1u);
}

// The most important refusal: the owner's Release of r is still on its way
// through its LMS when its next direct request for r arrives. Served, the
// master would take it as a conversion of the old lock, and the Release
// arriving after it would free the lock the backend just took.
TEST_F(GesDirectRouting, DirectRequestBehindTheOwnersReleaseInFlightIsRedirected) {
    DirectPath path;
    const uint64_t first = c.direct_request(1, 10, r, LockMode::EX, 0, 0, &path);
    ASSERT_EQ(path, DirectPath::Taken);
    c.held.insert(3);  // node 1's Release (and the rest) to node 3 in flight
    c.release(1, 10, r);
    const uint64_t x = c.request(2, 20, r, LockMode::EX);
    const uint64_t id = c.direct_register(1, 10, r, LockMode::EX);
    const GesCluster::DirectAnswer a = c.direct_call(id);
    ASSERT_TRUE(a.ok);
    EXPECT_TRUE(a.redirect()) << "busy: the owner still has a lock on r at the master";
    EXPECT_EQ(c.direct_finish(id, a), DirectPath::Fallback);
    c.held.clear();
    c.pump();
    // Exactly one of them holds r, whatever the order at the master.
    EXPECT_NE(c.holds_grant(1, id), c.holds_grant(2, x));
    EXPECT_TRUE(c.no_conflicting_holders());
    EXPECT_EQ(c.host(1).slot(first), Slot::Done);
    if (c.holds_grant(1, id)) {
        c.release(1, 10, r);
        EXPECT_TRUE(c.granted(2, x));
    } else {
        c.release(2, 20, r);
        EXPECT_TRUE(c.granted(1, id));
    }
    EXPECT_TRUE(c.no_conflicting_holders());
    EXPECT_EQ(rows().size(), 1u);
}

// A direct request that arrives after its own Cancel (the backend gave up
// while the RPC was slow) is stale: served, its grant would go back in a
// reply nobody reads, and the lock would stay at the master forever.
TEST_F(GesDirectRouting, DirectRequestAfterItsCancelIsStaleAndLeavesNoLock) {
    const uint64_t id = c.direct_register(1, 10, r, LockMode::EX);
    c.cancel(1, 10, r, id);  // through the LMS, to the master
    EXPECT_FALSE(entry(1, 10));
    const GesCluster::DirectAnswer late = c.direct_call(id);
    ASSERT_TRUE(late.ok);
    EXPECT_TRUE(late.redirect());
    EXPECT_TRUE(rows().empty()) << "no lock left behind for an abandoned request";
    const uint64_t x = c.request(2, 20, r, LockMode::EX);
    EXPECT_TRUE(c.granted(2, x));
    // An older id of the same owner is refused as well; a newer one is served.
    const uint64_t next = c.direct_register(1, 10, r, LockMode::PR, kNoWait);
    const GesCluster::DirectAnswer served = c.direct_call(next);
    ASSERT_TRUE(served.ok);
    EXPECT_EQ(served.m.type, GesMsgType::Deny);
    EXPECT_EQ(served.m.reason, DenyReason::NoWait);
}

TEST(GesDirect, ResourceHandedOffByItsHomeIsRedirected) {
    GesCluster c(3);
    for (uint16_t i = 1; i <= 3; i++) c.host(i).remaster = 8;
    c.commit_view(10, kAll);
    const ResourceName r = GesCluster::mastered_by(3, kAll);
    ASSERT_TRUE(c.granted(3, c.request(3, 30, r, LockMode::NL)));
    for (int i = 0; i < 40; i++) {
        const uint16_t node = i % 2 == 0 ? 1 : 2;
        ASSERT_TRUE(c.granted(node, c.request(node, 10, r, LockMode::EX))) << i;
        c.release(node, 10, r);
    }
    ASSERT_EQ(c.host(3).counter(WorkerCounter::Remasters), 1u);
    const bool on1 = c.rows(1, r).size() == 1;
    const uint16_t host = on1 ? 1 : 2, other = on1 ? 2 : 1;
    for (uint16_t node : {other, host}) {
        ASSERT_EQ(c.direct_master(node, r), 3) << "the backend still sends to the home";
        const uint64_t id = c.direct_register(node, 11, r, LockMode::EX);
        const GesCluster::DirectAnswer a = c.direct_call(id);
        ASSERT_TRUE(a.ok);
        EXPECT_TRUE(a.redirect()) << "node " << node << ": the home does not master it now";
        EXPECT_EQ(c.direct_finish(id, a), DirectPath::Fallback);
        EXPECT_TRUE(c.granted(node, id)) << node;
        EXPECT_FALSE(c.taken(node, id));
        EXPECT_TRUE(c.rows(3, r).empty());
        EXPECT_TRUE(c.no_conflicting_holders());
        c.release(node, 11, r);
    }
    EXPECT_EQ(c.host(3).counter(WorkerCounter::DirectServed), 0u);
}

// The second most important case: the master granted in epoch 10, then the
// epoch changed before the backend could take the grant. The new epoch's
// settle closes the slot, so the old grant is not taken; the request is
// replayed as waiting, and the new epoch's master decides (here: node 2,
// whose replay came first, gets the lock first).
TEST_F(GesDirectRouting, EpochChangeBeforeTheBackendTakesTheGrantClosesTheSlot) {
    const uint64_t id = c.direct_register(1, 10, r, LockMode::EX);
    const GesCluster::DirectAnswer a = c.direct_call(id);
    ASSERT_TRUE(a.ok);
    ASSERT_EQ(a.m.type, GesMsgType::Grant);
    ASSERT_EQ(a.m.epoch, 10u);
    const uint64_t x = c.request(2, 20, r, LockMode::EX);  // waits at the master
    c.held.insert(1);                                      // node 1 replays last
    c.commit_view(11, kAll);
    EXPECT_EQ(c.host(1).slot(id), Slot::Waiting) << "settled: closed to the backend";
    c.held.clear();
    c.pump();
    ASSERT_FALSE(c.worker(3).replaying());
    EXPECT_TRUE(c.granted(2, x)) << "node 2's replayed request was first";
    // The backend gets to the old answer only now.
    EXPECT_EQ(c.direct_finish(id, a), DirectPath::Wait);
    EXPECT_FALSE(c.taken(1, id)) << "an old epoch's grant is never taken";
    EXPECT_FALSE(c.holds_grant(1, id));
    EXPECT_GE(c.host(1).counter(WorkerCounter::StaleEpochRefused), 1u) << "the relay refused";
    EXPECT_EQ(entry(1, 10)->state, LockState::Waiting);
    EXPECT_TRUE(c.no_conflicting_holders());
    c.release(2, 20, r);
    EXPECT_TRUE(c.granted(1, id)) << "granted through the LMS in epoch 11";
    EXPECT_EQ(c.token(1, id) >> 32, 11u);
    EXPECT_TRUE(c.no_conflicting_holders());
}

// The backend took the grant, and the epoch changed before its relay
// reached the LMS: the settle adopts it, so the replay carries it as
// granted and nobody gets a conflicting mode in the new epoch.
TEST_F(GesDirectRouting, EpochChangeAfterTheBackendTookTheGrantReplaysItAsGranted) {
    const uint64_t id = c.direct_register(1, 10, r, LockMode::EX);
    const GesCluster::DirectAnswer a = c.direct_call(id);
    ASSERT_TRUE(c.direct_take(id, a));
    EXPECT_EQ(c.host(1).slot(id), Slot::SelfGranted);
    const uint64_t x = c.request(2, 20, r, LockMode::EX);  // waits at the master
    c.held.insert(1);                                      // node 1 replays last
    c.commit_view(11, kAll);
    EXPECT_EQ(c.host(1).slot(id), Slot::Done) << "adopted by the settle: the slot is free";
    ASSERT_EQ(c.host(1).adopted.size(), 1u);
    EXPECT_EQ(c.host(1).adopted[0].token, a.m.token);
    EXPECT_EQ(entry(1, 10)->state, LockState::Granted);
    EXPECT_TRUE(in_mirror(1, 10, id, LockState::Granted));
    c.held.clear();
    c.pump();
    ASSERT_FALSE(c.worker(3).replaying());
    EXPECT_FALSE(c.granted(2, x)) << "node 1's replayed grant holds r in epoch 11";
    EXPECT_TRUE(c.no_conflicting_holders());
    // The relay comes late: refused (another epoch), nothing changes.
    c.direct_relay(id, a);
    EXPECT_EQ(entry(1, 10)->state, LockState::Granted);
    EXPECT_FALSE(c.granted(2, x));
    EXPECT_TRUE(c.host(1).undelivered.empty());
    c.release(1, 10, r);
    EXPECT_TRUE(c.granted(2, x));
    EXPECT_GT(c.token(2, x), a.m.token);
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST_F(GesDirectRouting, HostileDirectRequestsAreRefused) {
    const uint64_t id = c.direct_register(1, 10, r, LockMode::EX);
    // Node 2 sends node 1's request: refused by the authenticated source.
    const GesCluster::DirectAnswer forged = c.direct_call(id, 3, 2);
    ASSERT_TRUE(forged.ok);
    EXPECT_TRUE(forged.redirect());
    EXPECT_EQ(c.host(3).counter(WorkerCounter::WrongSourceRefused), 1u);
    EXPECT_TRUE(rows().empty());
    // Node 3 to itself, an internal id, the node owner: refused too.
    GesMessage m;
    m.type = GesMsgType::Request;
    m.flags = kDirect;
    m.epoch = 10;
    m.resource = r;
    m.mode = LockMode::EX;
    auto call = [&](uint16_t src, Owner o, uint64_t rid) {
        m.owner = o;
        m.request_id = rid;
        std::vector<uint8_t> body;
        encode_ges_message(m, &body);
        std::vector<uint8_t> out =
            c.worker(3).handle_direct(src, body.data(), body.size(), c.now());
        GesMessage ans;
        if (out.empty() || decode_ges_message(out.data(), out.size(), &ans) != GesWireError::None)
            return DenyReason::Cancelled;
        return ans.type == GesMsgType::Deny ? ans.reason : DenyReason::Cancelled;
    };
    EXPECT_EQ(call(3, Owner{3, 30}, GesCluster::request_id(30, 1)), DenyReason::Redirect);
    EXPECT_EQ(call(2, Owner{2, 20}, kInternalRequestId | 7), DenyReason::Redirect);
    EXPECT_EQ(call(2, Owner{2, kNodeOwnerProc}, GesCluster::request_id(0, 1)),
              DenyReason::Redirect);
    EXPECT_TRUE(rows().empty());
    // Not a direct request: no answer at all.
    m.flags = 0;
    m.owner = Owner{2, 20};
    std::vector<uint8_t> body;
    encode_ges_message(m, &body);
    EXPECT_TRUE(c.worker(3).handle_direct(2, body.data(), body.size(), c.now()).empty());
    const uint8_t junk[3] = {1, 2, 3};
    EXPECT_TRUE(c.worker(3).handle_direct(2, junk, sizeof junk, c.now()).empty());
    // The real owner's request is still served afterwards.
    const GesCluster::DirectAnswer a = c.direct_call(id);
    EXPECT_EQ(c.direct_finish(id, a), DirectPath::Taken);
}

// Two backends on different nodes send direct EX requests for one resource,
// their steps interleaved every way: never both hold it, and the loser gets
// it through its LMS when the winner releases.
TEST(GesDirect, RacingDirectExRequestsNeverBothHold) {
    // Orders of the six steps: register (R), call (C), finish (F) of each.
    const std::vector<std::string> orders = {"R1R2C1C2F1F2", "R1R2C2C1F2F1", "R1C1R2C2F2F1",
                                             "R2R1C1F1C2F2", "R1R2C1C2F2F1", "R2C2R1C1F1F2"};
    for (const std::string& order : orders) {
        SCOPED_TRACE(order);
        GesCluster c(3);
        c.commit_view(10, kAll);
        const ResourceName r = GesCluster::mastered_by(3, kAll);
        uint64_t id[3] = {};
        GesCluster::DirectAnswer ans[3];
        const uint32_t proc[3] = {0, 10, 20};
        for (size_t i = 0; i < order.size(); i += 2) {
            const int n = order[i + 1] - '0';
            if (order[i] == 'R')
                id[n] = c.direct_register(static_cast<uint16_t>(n), proc[n], r, LockMode::EX);
            if (order[i] == 'C') ans[n] = c.direct_call(id[n]);
            if (order[i] == 'F') c.direct_finish(id[n], ans[n]);
            ASSERT_FALSE(id[1] && id[2] && c.holds_grant(1, id[1]) && c.holds_grant(2, id[2]));
            ASSERT_TRUE(c.no_conflicting_holders());
        }
        ASSERT_NE(c.holds_grant(1, id[1]), c.holds_grant(2, id[2]));
        const uint16_t w = c.holds_grant(1, id[1]) ? 1 : 2, l = 3 - w;
        EXPECT_TRUE(c.taken(w, id[w])) << "the winner took its grant itself";
        c.release(w, proc[w], r);
        EXPECT_TRUE(c.granted(l, id[l])) << "the loser's grant comes through its LMS";
        EXPECT_TRUE(c.no_conflicting_holders());
        EXPECT_EQ(c.rows(3, r).size(), 1u);
    }
}

// Found by this suite (fixed: ReleaseAll carries the session's last request
// id, and a master keeps the owner's locks of later requests): a session's
// ReleaseAll (pgrac_ges_unlock_all(),
// or a backend's exit followed by a new session of the same pid) goes
// through its LMS to every master; a direct request the backend sends right
// after it can reach the master first. The owner has no lock on that
// resource there (not "busy"), its id is the highest seen (not "stale"), so
// the master grants it; then the ReleaseAll arrives and frees every lock of
// the owner, including the one just taken. The backend (and its LMS's
// registry) believe they hold EX; the master lets another node take EX.
TEST_F(GesDirectRouting, DirectRequestOvertakingTheOwnersReleaseAllIsNotFreedByIt) {
    const ResourceName other = GesCluster::mastered_by(2, kAll, "o");
    ASSERT_TRUE(c.granted(1, c.request(1, 10, other, LockMode::EX)));  // the session used GES
    c.held.insert(3);      // node 1's ReleaseAll to node 3 in flight
    c.release_all(1, 10);  // pgrac_ges_unlock_all()
    DirectPath path;
    const uint64_t id = c.direct_request(1, 10, r, LockMode::EX, 0, 0, &path);
    c.held.clear();
    c.pump();  // the ReleaseAll reaches node 3
    const uint64_t x = c.request(2, 20, r, LockMode::EX);
    EXPECT_FALSE(c.holds_grant(1, id) && c.granted(2, x))
        << "node 1 took r (path " << static_cast<int>(path)
        << ") and node 2 was granted EX too: the ReleaseAll freed node 1's direct grant";
    EXPECT_TRUE(c.no_conflicting_holders());
}
