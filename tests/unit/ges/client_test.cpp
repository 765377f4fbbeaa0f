// The client registry (what this node's owners hold and wait for) and
// remastering end to end: a node dies, survivors replay to the new masters,
// grants and queues come back and only the dead node's resources moved.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "ic/ges/client.hpp"
#include "ic/ges/lock_table.hpp"
#include "ic/ges/wire.hpp"

using namespace pgrac::ic::ges;

namespace {

const ResourceName R = ResourceName::from_int(7);
const Owner A{1, 10};

}  // namespace

TEST(GesClient, TracksRequestGrantConvertDenyRelease) {
    ClientRegistry c;
    EXPECT_TRUE(c.on_request(A, R, LockMode::PR, 1, 0, 100));
    EXPECT_EQ(c.find(A, R)->state, LockState::Waiting);
    EXPECT_FALSE(c.on_request(A, R, LockMode::EX, 2, 0, 101));  // one pending at a time
    c.on_granted(A, R, 99, 102);                                // stale id: ignored
    EXPECT_EQ(c.find(A, R)->state, LockState::Waiting);
    c.on_granted(A, R, 1, 103);
    auto e = c.find(A, R);
    EXPECT_EQ(e->state, LockState::Granted);
    EXPECT_EQ(e->granted_mode, LockMode::PR);
    EXPECT_EQ(e->since, 103);

    EXPECT_TRUE(c.on_request(A, R, LockMode::EX, 3, kNoWait, 104));
    e = c.find(A, R);
    EXPECT_EQ(e->state, LockState::Converting);
    EXPECT_EQ(e->granted_mode, LockMode::PR);
    EXPECT_EQ(e->requested_mode, LockMode::EX);
    EXPECT_EQ(e->flags, kNoWait);
    c.on_denied(A, R, 3);  // conversion refused: back to PR under the old grant
    e = c.find(A, R);
    EXPECT_EQ(e->state, LockState::Granted);
    EXPECT_EQ(e->requested_mode, LockMode::PR);
    EXPECT_EQ(e->request_id, 1u);

    c.on_released(A, R);
    EXPECT_FALSE(c.find(A, R).has_value());
    c.on_request(A, R, LockMode::EX, 4, 0, 105);
    c.on_denied(A, R, 4);  // a refused new request leaves nothing
    EXPECT_EQ(c.size(), 0u);
}

TEST(GesClient, ReleaseAllForgetsOneOwnerOnly) {
    ClientRegistry c;
    const Owner other{1, 11};
    for (int k = 0; k < 5; ++k) {
        c.on_request(A, ResourceName::from_int(k), LockMode::EX, k + 1, 0, 0);
        c.on_request(other, ResourceName::from_int(k), LockMode::EX, k + 1, 0, 0);
    }
    c.on_released_all(A);
    EXPECT_EQ(c.size(), 5u);
    for (const auto& e : c.locks()) EXPECT_EQ(e.owner, other);
}

TEST(GesClient, PlanReplaysOnlyResourcesWhoseMasterChanged) {
    ClientRegistry c;
    const std::vector<uint16_t> before{1, 2, 3}, after{1, 2};
    for (int k = 0; k < 300; ++k) {
        c.on_request(A, ResourceName::from_int(k), LockMode::PR, k + 1, 0, k);
        if (k % 2 == 0) c.on_granted(A, ResourceName::from_int(k), k + 1, k);
    }
    size_t planned = 0;
    for (const ReplayBatch& b : c.plan_replay(before, after)) {
        EXPECT_NE(b.master, 3);
        bool seen_waiter = false;
        for (const ReplayEntry& e : b.entries) {
            EXPECT_EQ(master_for(e.resource, before), 3);
            EXPECT_EQ(master_for(e.resource, after), b.master);
            if (e.state == LockState::Waiting) seen_waiter = true;
            EXPECT_FALSE(seen_waiter && e.state != LockState::Waiting);  // holders first
            ++planned;
        }
    }
    size_t expected = 0;
    for (int k = 0; k < 300; ++k) expected += master_for(ResourceName::from_int(k), before) == 3;
    EXPECT_EQ(planned, expected);
    EXPECT_GT(planned, 0u);
    EXPECT_TRUE(c.plan_replay(before, before).empty());
}

TEST(GesClient, ARestartedMasterGetsEverythingItMasters) {
    ClientRegistry c;
    const std::vector<uint16_t> live{1, 2, 3};
    size_t expected = 0;
    for (int k = 0; k < 100; ++k) {
        c.on_request(A, ResourceName::from_int(k), LockMode::PR, k + 1, 0, 0);
        expected += master_for(ResourceName::from_int(k), live) == 2;
    }
    const auto batches = c.plan_replay(live, live, {2});
    ASSERT_EQ(batches.size(), 1u);
    EXPECT_EQ(batches[0].master, 2);
    EXPECT_EQ(batches[0].entries.size(), expected);
}

namespace {

// Three nodes, each a master (LockTable) and a client (ClientRegistry), wired
// the way the glue will be: requests go to master_for(), events come back.
struct Cluster {
    std::vector<uint16_t> live{1, 2, 3};
    std::map<uint16_t, std::unique_ptr<LockTable>> masters;
    std::map<uint16_t, ClientRegistry> clients;
    int64_t now = 0;

    Cluster() {
        for (uint16_t n : live) masters[n] = std::make_unique<LockTable>(n);
    }
    void deliver(const Events& ev) {
        for (const Event& e : ev) {
            ClientRegistry& c = clients[e.owner.node];
            if (e.type == EventType::Granted) c.on_granted(e.owner, e.resource, e.request_id, now);
            if (e.type == EventType::Denied) c.on_denied(e.owner, e.resource, e.request_id);
        }
    }
    void request(Owner o, const ResourceName& r, LockMode m, uint64_t id) {
        ++now;
        clients[o.node].on_request(o, r, m, id, 0, now);
        LockRequest q;
        q.owner = o;
        q.resource = r;
        q.mode = m;
        q.request_id = id;
        q.now = now;
        deliver(masters.at(master_for(r, live))->request(q));
    }
    void release(Owner o, const ResourceName& r) {
        ++now;
        clients[o.node].on_released(o, r);
        deliver(masters.at(master_for(r, live))->release(o, r, now));
    }
    void kill(uint16_t dead) {
        const std::vector<uint16_t> old = live;
        live.erase(std::find(live.begin(), live.end(), dead));
        masters.erase(dead);
        clients.erase(dead);
        for (auto& [n, m] : masters) {
            m->begin_replay();
            deliver(m->release_node(dead, now));
        }
        for (auto& [n, c] : clients)
            for (const ReplayBatch& b : c.plan_replay(old, live))
                deliver(masters.at(b.master)->ingest_replay(b.entries, now));
        for (auto& [n, m] : masters) {
            deliver(m->end_replay(now));
            m->drop_unmastered(live);
        }
    }
    // Every client lock, as its resource's master sees it (state and mode).
    void expect_consistent() {
        size_t client_locks = 0;
        for (auto& [n, c] : clients) {
            for (const ReplayEntry& e : c.locks()) {
                ++client_locks;
                const LockTable& m = *masters.at(master_for(e.resource, live));
                bool found = false;
                for (const LockRow& row : m.snapshot()) {
                    if (row.resource != e.resource.to_string() || row.owner_node != e.owner.node ||
                        row.proc != e.owner.proc)
                        continue;
                    found = true;
                    EXPECT_EQ(row.state, e.state) << row.resource;
                    EXPECT_EQ(row.mode,
                              e.state == LockState::Granted ? e.granted_mode : e.requested_mode);
                }
                EXPECT_TRUE(found) << e.resource.to_string();
            }
        }
        size_t master_locks = 0;
        for (auto& [n, m] : masters) master_locks += m->lock_count();
        EXPECT_EQ(master_locks, client_locks);
    }
};

}  // namespace

TEST(GesClient, RemasteringAfterANodeDiesRestoresGrantsAndQueues) {
    Cluster cl;
    const Owner a{1, 10}, b{2, 20}, dead{3, 30};
    // Resources mastered by each node; holders on nodes 1 and 2, and waiters.
    std::vector<ResourceName> on3, others;
    for (int k = 0; k < 60 && (on3.size() < 6 || others.size() < 6); ++k) {
        const ResourceName r = ResourceName::from_int(k);
        (master_for(r, cl.live) == 3 ? on3 : others).push_back(r);
    }
    ASSERT_GE(on3.size(), 6u);
    uint64_t id = 1;
    for (const auto* set : {&on3, &others}) {
        for (const ResourceName& r : *set) {
            cl.request(a, r, LockMode::PR, id++);     // granted
            cl.request(b, r, LockMode::EX, id++);     // waits for a
            cl.request(dead, r, LockMode::CR, id++);  // waits behind b (dies)
        }
    }
    cl.expect_consistent();
    const auto before = cl.masters.at(1)->snapshot().size() + cl.masters.at(2)->snapshot().size();

    cl.kill(3);
    cl.expect_consistent();
    // The dead node's waiters left the surviving masters' queues: 2 per resource.
    EXPECT_EQ(cl.masters.at(1)->lock_count() + cl.masters.at(2)->lock_count(),
              2 * (on3.size() + others.size()));
    EXPECT_LT(cl.masters.at(1)->lock_count() + cl.masters.at(2)->lock_count(),
              before + 3 * on3.size());
    // Replayed queues work: a releases, b (a replayed waiter) gets EX.
    for (const ResourceName& r : on3) {
        cl.release(a, r);
        const auto e = cl.clients[2].find(b, r);
        ASSERT_TRUE(e.has_value());
        EXPECT_EQ(e->state, LockState::Granted);
        EXPECT_EQ(e->granted_mode, LockMode::EX);
    }
    cl.expect_consistent();
}

TEST(GesClient, NoReplayWhenTheDeadNodeMasteredNothingOfOurs) {
    ClientRegistry c;
    const std::vector<uint16_t> before{1, 2, 3}, after{1, 2};
    for (int k = 0; k < 50; ++k) {
        const ResourceName r = ResourceName::from_int(k);
        if (master_for(r, before) != 3) c.on_request(A, r, LockMode::EX, k + 1, 0, 0);
    }
    EXPECT_GT(c.size(), 0u);
    EXPECT_TRUE(c.plan_replay(before, after).empty());
}

// An LMS worker restarts: its table is rebuilt from the other nodes' registries
// (plan_replay with itself as "restarted"), and its registry from the other
// nodes' tables (entries_of_node + restore).
TEST(GesClient, ARestartedWorkerRebuildsTableAndRegistry) {
    const std::vector<uint16_t> live{1, 2, 3};
    const Owner b{2, 20}, c{2, 21}, mine{1, 10};
    ResourceName on1, on2;
    bool have1 = false, have2 = false;
    for (int k = 0; !(have1 && have2); ++k) {
        const ResourceName r = ResourceName::from_int(1000 + k);
        if (!have1 && master_for(r, live) == 1) on1 = r, have1 = true;
        if (!have2 && master_for(r, live) == 2) on2 = r, have2 = true;
    }
    // Node 2's client side: b holds on1 EX, c waits for it.
    ClientRegistry reg2;
    LockTable t1(1);
    auto req = [](Owner o, const ResourceName& r, LockMode m, uint64_t id) {
        LockRequest rq;
        rq.owner = o;
        rq.resource = r;
        rq.mode = m;
        rq.request_id = id;
        return rq;
    };
    reg2.on_request(b, on1, LockMode::EX, 1, 0, 0);
    for (const Event& e : t1.request(req(b, on1, LockMode::EX, 1)))
        reg2.on_granted(e.owner, e.resource, e.request_id, 1);
    reg2.on_request(c, on1, LockMode::EX, 2, 0, 2);
    for (const Event& e : t1.request(req(c, on1, LockMode::EX, 2)))
        EXPECT_EQ(e.type, EventType::Bast);  // c waits; b is told

    // Node 1's worker restarts: a fresh table, frozen, fed node 2's replay.
    LockTable fresh(1);
    fresh.begin_replay();
    std::vector<ReplayEntry> entries;
    for (ReplayBatch& bt : reg2.plan_replay(live, live, {1}))
        if (bt.master == 1) entries = bt.entries;
    ASSERT_EQ(entries.size(), 2u);
    fresh.ingest_replay(entries, 10);
    const Events done = fresh.end_replay(11);
    for (const Event& e : done)
        EXPECT_EQ(e.type, EventType::Bast);  // b still holds, c still waits: nobody is granted
    const auto rows = fresh.snapshot();
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].proc, b.proc);
    EXPECT_EQ(rows[0].state, LockState::Granted);
    EXPECT_EQ(rows[1].proc, c.proc);
    EXPECT_EQ(rows[1].state, LockState::Waiting);
    EXPECT_EQ(fresh.replay_conflicts(), 0u);

    // Node 1's registry rebuilt from node 2's table: mine holds on2 PR.
    LockTable t2(2);
    t2.request(req(mine, on2, LockMode::PR, 7));
    EXPECT_TRUE(t2.entries_of_node(2).empty());
    ClientRegistry reg1;
    // A newer request already seen since the restart wins over the master's
    // word, but becomes a conversion from the held mode.
    const ResourceName other = ResourceName::from_int(5);
    t2.request(req(mine, other, LockMode::PR, 8));
    reg1.on_request(mine, other, LockMode::EX, 9, 0, 20);
    for (const ReplayEntry& e : t2.entries_of_node(1)) reg1.restore(e);
    auto e = reg1.find(mine, on2);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->state, LockState::Granted);
    EXPECT_EQ(e->granted_mode, LockMode::PR);
    EXPECT_EQ(e->request_id, 7u);
    e = reg1.find(mine, other);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->state, LockState::Converting);
    EXPECT_EQ(e->granted_mode, LockMode::PR);
    EXPECT_EQ(e->request_id, 9u);
}

// A converting entry restored from a copy (the LMS restart's registry mirror)
// does not know the id its held mode was granted under. A refused conversion
// must still leave a replayable entry: nonzero id, of the same session.
TEST(GesClient, RestoredConversionRefusedKeepsAReplayableEntry) {
    ClientRegistry c;
    ReplayEntry e;
    e.owner = A;
    e.resource = R;
    e.state = LockState::Converting;
    e.granted_mode = LockMode::PR;
    e.requested_mode = LockMode::EX;
    e.request_id = (uint64_t{7} << 32) | 42;
    c.restore(e);
    c.on_denied(A, R, e.request_id);
    auto got = c.find(A, R);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->state, LockState::Granted);
    EXPECT_EQ(got->granted_mode, LockMode::PR);
    EXPECT_NE(got->request_id, 0u);
    EXPECT_EQ(got->request_id >> 32, uint64_t{7}) << "the same session's id";
    const auto bodies = encode_replay_messages(c.locks(), 5);
    ASSERT_EQ(bodies.size(), 1u);
    GesMessage m;
    ASSERT_EQ(decode_ges_message(bodies[0].data(), bodies[0].size(), &m), GesWireError::None);
    EXPECT_EQ(m.entries.size(), 1u) << "the held PR is replayed, not dropped";
}
