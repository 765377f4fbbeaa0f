// Mastership that follows use (docs/ges.md, "Mastership that follows use"):
// the table's export and import of one resource, then clusters of real
// workers where a resource's home master hands it to the node that uses it
// most, forwards what still comes to it, the new master says so (Moved)
// before its first answer on each node, tokens keep growing and the value
// block goes along; a lost hand-off asks for a new epoch, which (like every
// epoch) masters everything at its home again; and no two conflicting locks
// are ever held.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ges/worker_support.hpp"
#include "ic/ges/lock_table.hpp"

using namespace pgrac::ic;
using namespace pgrac::ic::ges;
using pgrac::ic::ges::testing::GesCluster;

namespace {

const Owner A{1, 100}, B{2, 200}, C{3, 300};
const ResourceName R = ResourceName::from_int(42);

LockRequest req(Owner o, LockMode m, uint64_t id) {
    LockRequest q;
    q.owner = o;
    q.resource = R;
    q.mode = m;
    q.request_id = id;
    return q;
}

LockValue val(const std::string& s) {
    return LockValue::valid(s.data(), s.size());
}

}  // namespace

TEST(GesRemasterTable, ExportAndImportKeepHoldersQueuesAndValue) {
    LockTable home(3), there(1);
    home.request(req(A, LockMode::PR, 1));
    home.request(req(B, LockMode::PR, 2));
    home.request(req(C, LockMode::EX, 3));  // waits
    home.request(req(A, LockMode::EX, 4));  // A converts: waits for B
    home.release(A, R, 0);                  // (A holds PR, PW/EX none: no value written)
    home.request(req(A, LockMode::PR, 5));
    LockTable::ResourceState st;
    ASSERT_TRUE(home.export_resource(R, &st));
    EXPECT_EQ(home.resource_count(), 0u);
    LockTable::ResourceState none;
    ASSERT_TRUE(home.export_resource(R, &none)) << "gone from the home: exported empty";
    EXPECT_TRUE(none.entries.empty());
    Events ev;
    ASSERT_TRUE(there.import_resource(R, st, 0, &ev));
    EXPECT_FALSE(there.import_resource(R, st, 0, &ev)) << "never two tables for one resource";
    const std::vector<LockRow> a = there.snapshot();
    ASSERT_EQ(a.size(), 3u);
    EXPECT_EQ(a[0].proc, 200u);  // B holds PR
    EXPECT_EQ(a[1].proc, 300u);  // C waits for EX ...
    EXPECT_EQ(a[1].state, LockState::Waiting);
    EXPECT_EQ(a[2].proc, 100u);  // ... and A behind it (FIFO)
    // B's release grants C on the new master, with the value block.
    there.request(req(B, LockMode::EX, 6));  // B converts up: queued behind nobody? C waits
    const Events rel = there.release(B, R, 0);
    bool c_granted = false;
    for (const Event& e : rel) c_granted |= e.type == EventType::Granted && e.owner == C;
    EXPECT_TRUE(c_granted);
}

namespace {

GesCluster remastering(uint16_t n, uint32_t window) {
    GesCluster c(n);
    std::vector<uint16_t> all;
    for (uint16_t i = 1; i <= n; i++) {
        all.push_back(i);
        c.host(i).remaster = window;
    }
    c.commit_view(10, all);
    return c;
}

}  // namespace

TEST(GesRemaster, APingPongResourceMovesToAUserAndTokensKeepGrowing) {
    GesCluster c = remastering(3, 8);
    const ResourceName r = GesCluster::mastered_by(3, {1, 2, 3});
    // Node 3 keeps an NL lock (the resource, and its value, live on), and
    // does not use it otherwise.
    ASSERT_TRUE(c.granted(3, c.request(3, 30, r, LockMode::NL)));
    uint64_t last = 0;
    uint64_t before_moved = 0;
    for (int i = 0; i < 40; i++) {
        const uint16_t node = i % 2 == 0 ? 1 : 2;
        const uint64_t id = c.request(node, 10, r, LockMode::EX);
        ASSERT_TRUE(c.granted(node, id)) << i;
        EXPECT_GT(c.token(node, id), last) << "tokens grow strictly across the hand-off, " << i;
        last = c.token(node, id);
        ASSERT_TRUE(c.no_conflicting_holders());
        if (i == 20) before_moved = c.messages_delivered;
        c.release(node, 10, r, val("round " + std::to_string(i)));
    }
    EXPECT_EQ(c.host(3).counter(WorkerCounter::Remasters), 1u) << "handed over once";
    const bool on1 = c.rows(1, r).size() == 1, on2 = c.rows(2, r).size() == 1;
    EXPECT_TRUE(on1 != on2) << "mastered by one of its users now";
    EXPECT_TRUE(c.rows(3, r).empty()) << "not at its home any more";
    EXPECT_EQ(c.rows(on1 ? 1 : 2, r).at(0).proc, 30u) << "node 3's NL went along";
    const uint16_t host = on1 ? 1 : 2, other = on1 ? 2 : 1;
    // The other user was told and talks to the new master itself: a
    // round of two transfers is four messages (request, grant, release
    // and the grant to the host's own backend is local).
    const uint64_t d0 = c.messages_delivered;
    const uint64_t x = c.request(other, 10, r, LockMode::EX);
    ASSERT_TRUE(c.granted(other, x));
    EXPECT_EQ(c.value(other, x), val("round 39")) << "the value block went along";
    c.release(other, 10, r);
    const uint64_t y = c.request(host, 10, r, LockMode::EX);
    ASSERT_TRUE(c.granted(host, y));
    EXPECT_LE(c.messages_delivered - d0, 3u)
        << "no hop through the home: request, grant, release (the host's own grant is local)";
    EXPECT_GT(d0, before_moved);
    EXPECT_TRUE(c.no_conflicting_holders());

    // A new epoch masters it at its home again (rebuilt from the registries).
    c.commit_view(11, {1, 2, 3});
    c.tick_all();
    c.release(host, 10, r);
    const uint64_t z = c.request(other, 10, r, LockMode::EX);
    ASSERT_TRUE(c.granted(other, z));
    EXPECT_GT(c.token(other, z), last);
    EXPECT_FALSE(c.rows(3, r).empty()) << "back at its home";
    EXPECT_TRUE(c.rows(host, r).empty());
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST(GesRemaster, ALostHandOffAsksForANewEpochThatRebuildsTheLocks) {
    GesCluster c = remastering(3, 4);
    const ResourceName r = GesCluster::mastered_by(3, {1, 2, 3});
    // Node 2 holds PR all along; node 1 sends the requests that move it.
    const uint64_t b = c.request(2, 20, r, LockMode::PR);
    ASSERT_TRUE(c.granted(2, b));
    for (int i = 0; i < 2; i++) {
        const uint64_t a = c.request(1, 10, r, LockMode::PR);
        ASSERT_TRUE(c.granted(1, a));
        c.release(1, 10, r);
    }
    // The next request of node 1 triggers the hand-off, which is lost (a lane
    // reset), and so is the request forwarded after it.
    size_t lost = 0;
    c.lose = [&](uint16_t from, uint16_t, const std::vector<uint8_t>& body) {
        GesMessage m;
        const bool hit = from == 3 &&
                         decode_ges_message(body.data(), body.size(), &m) == GesWireError::None &&
                         m.type == GesMsgType::HandOff;
        lost += hit;
        return hit;
    };
    const uint64_t a = c.request(1, 10, r, LockMode::EX);  // waits for node 2's PR
    ASSERT_EQ(c.host(3).counter(WorkerCounter::Remasters), 1u);
    EXPECT_EQ(lost, 1u);
    c.lose = nullptr;
    EXPECT_FALSE(c.granted(1, a));
    // Node 2 releases: its Release is forwarded to node 1, which does not
    // master the resource (it never got it) and drops it.
    c.release(2, 20, r);
    EXPECT_FALSE(c.granted(1, a)) << "nobody masters it: nothing is granted";
    c.advance_ms(25000);  // past two peer timeouts
    c.tick_all();
    EXPECT_EQ(c.host(3).counter(WorkerCounter::RemasterTimeouts), 1u);
    EXPECT_GE(c.host(3).epoch_requests, 1u);
    c.commit_view(11, {1, 2, 3});
    c.tick_all();
    EXPECT_TRUE(c.granted(1, a)) << "the new epoch's rebuild granted node 1's request";
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST(GesRemaster, ANodeNotToldYetIsForwardedAndMovedComesBeforeTheAnswer) {
    GesCluster c = remastering(3, 4);
    const ResourceName r = GesCluster::mastered_by(3, {1, 2, 3});
    for (int i = 0; i < 4; i++) {
        const uint64_t a = c.request(1, 10, r, LockMode::EX);
        ASSERT_TRUE(c.granted(1, a));
        c.release(1, 10, r);
    }
    ASSERT_EQ(c.host(3).counter(WorkerCounter::Remasters), 1u);
    // Node 2 never used it: its request goes to the home, which forwards it.
    const uint64_t d0 = c.messages_delivered;
    const uint64_t b = c.request(2, 20, r, LockMode::EX);
    ASSERT_TRUE(c.granted(2, b));
    EXPECT_EQ(c.messages_delivered - d0, 4u)
        << "request to the home, forwarded, then Moved and the grant from node 1";
    EXPECT_FALSE(c.rows(1, r).empty()) << "mastered on node 1";
    // Known now: the release goes to node 1 directly.
    const uint64_t d1 = c.messages_delivered;
    c.release(2, 20, r);
    EXPECT_EQ(c.messages_delivered - d1, 1u);
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST(GesRemaster, OffByDefaultAndNotForAResourceTheHomeUses) {
    GesCluster off = remastering(3, 0);
    GesCluster busy = remastering(3, 4);
    for (GesCluster* c : {&off, &busy}) {
        const ResourceName r = GesCluster::mastered_by(3, {1, 2, 3});
        for (int i = 0; i < 8; i++) {
            const uint16_t node =
                c == &busy && i % 2 == 1 ? 3 : 1;  // the home uses it half the time
            const uint64_t a = c->request(node, 10, r, LockMode::EX);
            ASSERT_TRUE(c->granted(node, a));
            c->release(node, 10, r);
        }
        EXPECT_EQ(c->host(3).counter(WorkerCounter::Remasters), 0u);
    }
}
