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
    // The other user was told (Moved) and takes answers from the new master;
    // its own messages still go through the home, so that they keep their
    // order: request and release two messages each, the grant one, the
    // host's own grant local.
    const uint64_t d0 = c.messages_delivered;
    const uint64_t x = c.request(other, 10, r, LockMode::EX);
    ASSERT_TRUE(c.granted(other, x));
    EXPECT_EQ(c.value(other, x), val("round 39")) << "the value block went along";
    c.release(other, 10, r);
    const uint64_t y = c.request(host, 10, r, LockMode::EX);
    ASSERT_TRUE(c.granted(host, y));
    EXPECT_LE(c.messages_delivered - d0, 5u);
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

TEST(GesRemaster, AnotherNodeGoesThroughTheHomeAndMovedComesBeforeTheAnswer) {
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
    // Told now, and still through the home (one path, so in order).
    const uint64_t d1 = c.messages_delivered;
    c.release(2, 20, r);
    EXPECT_EQ(c.messages_delivered - d1, 2u);
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

// ---- found by review (a helper reading the first version as an adversary)

namespace {

bool forwarded_of(const std::vector<uint8_t>& body, GesMsgType t) {
    GesMessage m, in;
    return decode_ges_message(body.data(), body.size(), &m) == GesWireError::None &&
           m.type == GesMsgType::Forwarded &&
           decode_ges_message(m.inner.data(), m.inner.size(), &in) == GesWireError::None &&
           in.type == t;
}

// From the first forwarded message of type t on, every message of lane
// from -> to is kept back (FIFO kept): release_lane() sends them on in order.
struct DelayedLane {
    GesCluster& c;
    uint16_t from, to;
    GesMsgType first;
    std::vector<std::vector<uint8_t>> kept;
    void arm() {
        c.lose = [this](uint16_t f, uint16_t t, const std::vector<uint8_t>& body) {
            if (f != from || t != to || (kept.empty() && !forwarded_of(body, first))) return false;
            kept.push_back(body);
            return true;
        };
    }
    void release_lane() {
        c.lose = nullptr;
        for (auto& b : kept)
            c.host(from).sent.push_back(
                pgrac::ic::ges::testing::FakeHost::Sent{to, GesChannel::Master, 0, b});
        kept.clear();
        c.pump();
    }
};

}  // namespace

// The new master's own node re-requests a lock whose Release it sent the home
// before the hand-off: the request goes the same way (through the home) until
// Drained, so the late Release cannot take away the new grant.
TEST(GesRemasterReview, AReleaseThroughTheHomeIsNotOvertakenByTheNewMastersOwnRequest) {
    GesCluster c = remastering(3, 4);
    const ResourceName r = GesCluster::mastered_by(3, {1, 2, 3});
    const uint64_t a = c.request(1, 10, r, LockMode::EX);
    ASSERT_TRUE(c.granted(1, a));
    for (int i = 0; i < 2; i++) {
        const uint64_t n = c.request(1, 11, r, LockMode::NL);
        ASSERT_TRUE(c.granted(1, n));
        c.release(1, 11, r);
    }
    c.held = {1};
    c.request(1, 11, r, LockMode::NL);  // the 4th: r goes to node 1
    c.release(1, 10, r);                // crosses the HandOff
    DelayedLane lane{c, 3, 1, GesMsgType::Release, {}};
    lane.arm();
    c.held.clear();
    c.pump();
    ASSERT_EQ(c.host(3).counter(WorkerCounter::Remasters), 1u);
    const uint64_t a2 = c.request(1, 10, r, LockMode::EX);
    lane.release_lane();
    ASSERT_TRUE(c.granted(1, a2));
    const uint64_t b = c.request(2, 20, r, LockMode::EX);
    EXPECT_FALSE(c.granted(2, b)) << "node 1 holds EX";
    EXPECT_TRUE(c.no_conflicting_holders());
}

// The same from a third node that was told of the move: its EX request takes
// the path its earlier Release took.
TEST(GesRemasterReview, AReleaseThroughTheHomeIsNotOvertakenByAThirdNodesRequest) {
    GesCluster c = remastering(3, 4);
    const ResourceName r = GesCluster::mastered_by(3, {1, 2, 3});
    const uint64_t p = c.request(2, 20, r, LockMode::PR);
    ASSERT_TRUE(c.granted(2, p));
    for (int i = 0; i < 3; i++) {
        const uint64_t n = c.request(1, 10, r, LockMode::NL);
        ASSERT_TRUE(c.granted(1, n));
        c.release(1, 10, r);
    }
    ASSERT_EQ(c.host(3).counter(WorkerCounter::Remasters), 1u);
    DelayedLane lane{c, 3, 1, GesMsgType::Release, {}};
    lane.arm();
    c.release(2, 20, r);
    const uint64_t x = c.request(1, 11, r, LockMode::EX);
    const uint64_t q = c.request(2, 20, r, LockMode::EX);
    lane.release_lane();
    EXPECT_TRUE(c.granted(1, x) != c.granted(2, q)) << "one EX at a time";
    EXPECT_TRUE(c.no_conflicting_holders());
}

// A hand-off decided while the home is in the middle of dispatching grants
// is made after them: the new master's token floor is above every token the
// home gave.
TEST(GesRemasterReview, AHandOffDecidedInsideADispatchComesAfterItsTokens) {
    GesCluster c = remastering(3, 16);
    const ResourceName r = GesCluster::mastered_by(3, {1, 2, 3});
    for (int i = 0; i < 11; i++) {
        const uint64_t n = c.request(2, 22, r, LockMode::NL);
        ASSERT_TRUE(c.granted(2, n));
        c.release(2, 22, r);
    }
    const uint64_t pw = c.request(2, 20, r, LockMode::PW);
    ASSERT_TRUE(c.granted(2, pw));
    const uint64_t cr = c.request(3, 30, r, LockMode::CR);
    ASSERT_TRUE(c.granted(3, cr));
    const uint64_t up = c.request(3, 30, r, LockMode::PR);
    EXPECT_FALSE(c.granted(3, up));
    const uint64_t pr = c.request(2, 21, r, LockMode::PR);
    EXPECT_FALSE(c.granted(2, pr));
    ASSERT_EQ(c.host(3).counter(WorkerCounter::Remasters), 0u);
    c.host(3).waiting.erase(up);
    c.release(2, 20, r);
    ASSERT_EQ(c.host(3).counter(WorkerCounter::Remasters), 1u);
    ASSERT_TRUE(c.granted(2, pr));
    const uint64_t t21 = c.token(2, pr);
    uint64_t t30 = 0;
    for (const LockRow& row : c.worker(2).snapshot())
        if (row.owner_node == 3 && row.proc == 30) t30 = c.worker(2).token_of(row);
    ASSERT_NE(t30, 0u);
    EXPECT_NE(t30, t21);
    EXPECT_TRUE(c.no_conflicting_holders());
}

// A hand-off that reaches a node still in its epoch's replay barrier is
// taken there (served once the barrier ends), not refused.
TEST(GesRemasterReview, AHandOffToANodeStillInItsBarrierIsTaken) {
    GesCluster c(3);
    for (uint16_t i = 1; i <= 3; i++) c.host(i).remaster = 4;
    auto is_done = [](const std::vector<uint8_t>& body) {
        GesMessage m;
        return decode_ges_message(body.data(), body.size(), &m) == GesWireError::None &&
               m.type == GesMsgType::ReplayDone;
    };
    std::vector<std::vector<uint8_t>> kept;
    c.lose = [&](uint16_t from, uint16_t to, const std::vector<uint8_t>& body) {
        if (from == 2 && to == 1 && is_done(body)) {
            kept.push_back(body);
            return true;
        }
        return false;
    };
    c.commit_view(10, {1, 2, 3});
    c.lose = nullptr;
    ASSERT_TRUE(c.worker(1).replaying());
    ASSERT_FALSE(c.worker(3).replaying());
    const ResourceName r = GesCluster::mastered_by(3, {1, 2, 3});
    for (int i = 0; i < 3; i++) {
        const uint64_t a = c.request(1, 10, r, LockMode::EX);
        ASSERT_TRUE(c.granted(1, a));
        c.release(1, 10, r);
    }
    const uint64_t a0 = c.request(1, 10, r, LockMode::EX);  // the home serves it, then
    ASSERT_TRUE(c.granted(1, a0));                          // hands r to node 1 (in its barrier)
    EXPECT_EQ(c.host(3).counter(WorkerCounter::Remasters), 1u);
    c.release(1, 10, r);
    const uint64_t a = c.request(1, 10, r, LockMode::EX);
    EXPECT_FALSE(c.granted(1, a)) << "nothing is granted in a barrier";
    for (auto& b : kept)
        c.host(2).sent.push_back(
            pgrac::ic::ges::testing::FakeHost::Sent{1, GesChannel::Master, 0, b});
    c.pump();
    ASSERT_FALSE(c.worker(1).replaying());
    EXPECT_TRUE(c.granted(1, a)) << "served once node 1's barrier ended";
    EXPECT_EQ(c.host(3).counter(WorkerCounter::RemasterTimeouts), 0u);
    EXPECT_TRUE(c.no_conflicting_holders());
}

// A BAST about a grant that has not come yet (after a hand-off, answers about
// a resource come on another lane than its home's did) is kept for the
// grant: the lock then goes back at its release instead of into the cache,
// where the waiter would starve.
TEST(GesRemasterReview, ABastBeforeItsGrantIsKeptForTheGrant) {
    GesCluster c = remastering(3, 0);
    for (uint16_t i = 1; i <= 3; i++) c.host(i).enable_cache(256);
    const ResourceName r = GesCluster::mastered_by(3, {1, 2, 3});
    // Lane 3 -> 2 is held back: the grant to node 2, then the master's BAST.
    std::vector<std::vector<uint8_t>> lane;
    c.lose = [&](uint16_t from, uint16_t to, const std::vector<uint8_t>& body) {
        if (from != 3 || to != 2) return false;
        lane.push_back(body);
        return true;
    };
    const uint64_t a = c.request(2, 20, r, LockMode::EX);
    const uint64_t w = c.request(1, 10, r, LockMode::EX);  // queues: node 2 is granted EX
    c.lose = nullptr;
    ASSERT_EQ(lane.size(), 2u);  // Grant, Bast
    // The BAST comes first, as a new master's would on its own lane.
    c.worker(2).handle(WorkerRole::Reply, 3, lane[1].data(), lane[1].size(), c.now());
    c.worker(2).handle(WorkerRole::Reply, 3, lane[0].data(), lane[0].size(), c.now());
    c.pump();
    ASSERT_TRUE(c.granted(2, a));
    EXPECT_FALSE(c.granted(1, w));
    c.release(2, 20, r);
    EXPECT_TRUE(c.granted(1, w)) << "given back, not kept in node 2's cache";
    EXPECT_TRUE(c.no_conflicting_holders());
}
