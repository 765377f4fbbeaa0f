// Lock value blocks (docs/ges.md, "Lock value blocks"): the master's rules
// (a PW/EX holder writes at release, transfer and down-conversion; a writer
// gone without writing leaves it invalid; a rebuild keeps what a holder above
// CR brought and marks the rest invalid; every grant carries it), then whole
// clusters of real workers: the value crosses nodes with the grants, goes
// through a node's cache and back with the give-back, survives an epoch
// change in a cached lock, and turns invalid when its writer's node leaves or
// its backend dies. The registry's copy in shared memory keeps it too.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ges/worker_support.hpp"
#include "ic/ges/lock_table.hpp"
#include "ic/ges/node_cache.hpp"
#include "ic/ges/registry_mirror.hpp"

using namespace pgrac::ic;
using namespace pgrac::ic::ges;
using pgrac::ic::ges::testing::GesCluster;

namespace {

const Owner A{1, 100}, B{2, 200}, C{3, 300};
const ResourceName R = ResourceName::from_int(42);

LockValue val(const std::string& s) {
    return LockValue::valid(s.data(), s.size());
}

std::string text_of(const LockValue& v) {
    if (v.state == ValueState::Invalid) return "<invalid>";
    if (v.state == ValueState::None) return "<none>";
    return std::string(reinterpret_cast<const char*>(v.data), v.len);
}

LockRequest req(Owner o, LockMode m, uint64_t id, const LockValue& v = {}) {
    LockRequest q;
    q.owner = o;
    q.resource = R;
    q.mode = m;
    q.request_id = id;
    q.value = v;
    return q;
}

// The value the (single) Granted event for `o` carries.
std::string granted_value(const Events& ev, Owner o) {
    for (const Event& e : ev)
        if (e.type == EventType::Granted && e.owner == o) return text_of(e.value);
    return "<no grant>";
}

ReplayEntry held(Owner o, LockMode m, const LockValue& v) {
    ReplayEntry e;
    e.owner = o;
    e.resource = R;
    e.state = LockState::Granted;
    e.granted_mode = e.requested_mode = m;
    e.request_id = 7;
    e.value = v;
    return e;
}

}  // namespace

TEST(GesLockValue, ANewResourceHasAValidEmptyValue) {
    LockTable t(1);
    const Events ev = t.request(req(A, LockMode::EX, 1));
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].value.state, ValueState::Valid);
    EXPECT_EQ(ev[0].value.len, 0u);
    EXPECT_EQ(t.value_of(ResourceName::from_int(7)).state, ValueState::None) << "no resource";
}

TEST(GesLockValue, AWriterSetsItAtReleaseAndTheNextGrantBringsIt) {
    LockTable t(1);
    t.request(req(A, LockMode::EX, 1));
    t.request(req(B, LockMode::PR, 2));  // waits
    EXPECT_EQ(granted_value(t.release(A, R, 0, val("v1")), B), "v1");
    // A reader's value is ignored; a release without one leaves it.
    t.request(req(C, LockMode::PR, 3));
    t.release(B, R, 0, val("from a reader"));
    EXPECT_EQ(text_of(t.value_of(R)), "v1");
    t.request(req(A, LockMode::PW, 4));  // waits for C
    EXPECT_EQ(granted_value(t.release(C, R, 0), A), "v1");
    t.release(A, R, 0);  // PW, nothing written: unchanged (and the resource goes)
    EXPECT_EQ(t.value_of(R).state, ValueState::None) << "the value lives with the resource";
    EXPECT_EQ(t.value_invalidations(), 0u);
}

TEST(GesLockValue, ADownConversionWritesAndPwToExDoesNot) {
    LockTable t(1);
    t.request(req(A, LockMode::PW, 1));
    EXPECT_EQ(granted_value(t.request(req(A, LockMode::EX, 2, val("up"))), A), "")
        << "PW to EX reads the value";
    EXPECT_EQ(granted_value(t.request(req(A, LockMode::PR, 3, val("down"))), A), "down");
    t.request(req(B, LockMode::PR, 4));
    EXPECT_EQ(text_of(t.value_of(R)), "down");
    EXPECT_EQ(granted_value(t.request(req(A, LockMode::PR, 5, val("again"))), A), "down")
        << "a PR holder does not write";
}

TEST(GesLockValue, AWriterGoneWithoutWritingLeavesItInvalidUntilTheNextWrite) {
    LockTable t(1);
    t.request(req(A, LockMode::NL, 1));  // keeps the resource
    t.request(req(B, LockMode::EX, 2));
    t.release(B, R, 0, val("v"));
    t.request(req(B, LockMode::EX, 3));
    t.release_all(B, 0);  // its session ended holding EX
    EXPECT_EQ(t.value_of(R).state, ValueState::Invalid);
    EXPECT_EQ(t.value_invalidations(), 1u);
    EXPECT_EQ(granted_value(t.request(req(C, LockMode::PR, 4)), C), "<invalid>");
    t.release(C, R, 0);
    t.request(req(C, LockMode::EX, 5));
    t.release(C, R, 0, LockValue::invalid());  // a lost lock says so
    EXPECT_EQ(t.value_invalidations(), 1u) << "already invalid: counted once";
    t.request(req(C, LockMode::EX, 6));
    t.release(C, R, 0, val("fresh"));
    EXPECT_EQ(text_of(t.value_of(R)), "fresh");
    // A node's death takes its PW lock with it: invalid again.
    t.request(req(B, LockMode::PW, 7));
    t.release_node(2, 0);
    EXPECT_EQ(t.value_of(R).state, ValueState::Invalid);
    EXPECT_EQ(t.value_invalidations(), 2u);
    // Readers leaving do not touch it.
    t.request(req(C, LockMode::EX, 8));
    t.release(C, R, 0, val("w"));
    t.request(req(B, LockMode::PR, 9));
    t.release_node(2, 0);
    EXPECT_EQ(text_of(t.value_of(R)), "w");
}

TEST(GesLockValue, ATransferWritesLikeARelease) {
    LockTable t(1);
    t.request(req(A, LockMode::EX, 1));
    const Owner node = node_owner(1);
    bool moved = false;
    const Events ev = t.transfer(A, node, R, 9, 0, &moved, val("cached"));
    EXPECT_TRUE(moved);
    EXPECT_EQ(granted_value(ev, node), "cached");
    EXPECT_EQ(t.entries_of_node(1).at(0).value, val("cached")) << "a restarted worker gets it back";
}

TEST(GesLockValue, ARebuildKeepsWhatAHolderAboveCrBroughtAndMarksTheRestInvalid) {
    const ResourceName R2 = ResourceName::from_int(43), R3 = ResourceName::from_int(44);
    LockTable t(1);
    t.begin_replay();
    std::vector<ReplayEntry> batch{
        held(A, LockMode::CR, val("old")), held(B, LockMode::PR, val("v")),
        held(A, LockMode::CR, val("stale")), held(C, LockMode::NL, val("x"))};
    batch[2].resource = R2;  // only CR: a writer may have come and gone since
    batch[3].resource = R3;  // only NL
    ReplayEntry waiter;
    waiter.owner = B;
    waiter.resource = R3;
    waiter.state = LockState::Waiting;
    waiter.requested_mode = LockMode::EX;
    waiter.request_id = 8;
    batch.push_back(waiter);
    t.ingest_replay(batch, 0);
    t.request(req(C, LockMode::PR, 11));  // a new request during the replay, R
    const Events ev = t.end_replay(0);
    EXPECT_EQ(granted_value(ev, C), "v");
    EXPECT_EQ(text_of(t.value_of(R)), "v");
    EXPECT_EQ(t.value_of(R2).state, ValueState::Invalid);
    EXPECT_EQ(granted_value(ev, B), "<invalid>") << "R3's waiter gets the invalid value";
    EXPECT_EQ(t.value_invalidations(), 2u);

    // An invalid value a holder above CR brings stays invalid.
    LockTable u(1);
    u.begin_replay();
    u.ingest_replay({held(A, LockMode::PR, LockValue::invalid())}, 0);
    u.end_replay(0);
    EXPECT_EQ(u.value_of(R).state, ValueState::Invalid);
}

TEST(GesLockValue, TheRegistryCopyInSharedMemoryKeepsIt) {
    std::vector<uint64_t> mem(RegistryMirror::bytes_for(16) / 8 + 1);
    RegistryMirror m = RegistryMirror::create(mem.data(), 16);
    ReplayEntry e = held(A, LockMode::EX, val(std::string(kMaxLockValue, 'z')));
    ASSERT_TRUE(m.put(e));
    ReplayEntry f = held(B, LockMode::PR, LockValue::invalid());
    ASSERT_TRUE(m.put(f));
    const std::vector<ReplayEntry> back = RegistryMirror::attach(mem.data()).entries();
    ASSERT_EQ(back.size(), 2u);
    for (const ReplayEntry& x : back) EXPECT_TRUE(x == e || x == f);
}

// ---- clusters of real workers

namespace {

GesCluster cluster(uint16_t n, bool cache) {
    GesCluster c(n);
    std::vector<uint16_t> all;
    for (uint16_t i = 1; i <= n; i++) {
        all.push_back(i);
        if (cache) c.host(i).enable_cache(256);
    }
    c.commit_view(10, all);
    return c;
}

CacheEntry* entry(GesCluster& c, uint16_t node, const ResourceName& r) {
    NodeCache& nc = c.host(node).cache;
    return nc.find(nc.partition_of(r, 0), r);
}

}  // namespace

TEST(GesLockValueCluster, TheValueCrossesNodesWithTheGrants) {
    GesCluster c = cluster(3, false);
    const ResourceName r = GesCluster::mastered_by(3, {1, 2, 3});
    const uint64_t a = c.request(1, 10, r, LockMode::EX);
    ASSERT_TRUE(c.granted(1, a));
    EXPECT_EQ(text_of(c.value(1, a)), "");
    const uint64_t b = c.request(2, 20, r, LockMode::PR);  // waits
    c.release(1, 10, r, val("page lsn 0/16B3F20"));
    ASSERT_TRUE(c.granted(2, b));
    EXPECT_EQ(text_of(c.value(2, b)), "page lsn 0/16B3F20");
    EXPECT_EQ(c.worker(2).registry().find(Owner{2, 20}, r)->value, val("page lsn 0/16B3F20"))
        << "kept for the replay";
    // A down-conversion from node 2 ... after an up-conversion to EX.
    const uint64_t up = c.ask(GesMsgType::Request, 2, 20, r, LockMode::EX, 0, 0);
    ASSERT_TRUE(c.granted(2, up));
    const uint64_t down =
        c.ask(GesMsgType::Request, 2, 20, r, LockMode::PR, 0, 0, val("written by node 2"));
    ASSERT_TRUE(c.granted(2, down));
    EXPECT_EQ(text_of(c.value(2, down)), "written by node 2");
    const uint64_t d = c.request(1, 11, r, LockMode::PR);
    EXPECT_EQ(text_of(c.value(1, d)), "written by node 2");
}

TEST(GesLockValueCluster, ACachedLockCarriesLocalWritesBackWithTheGiveBack) {
    GesCluster c = cluster(3, true);
    const ResourceName r = GesCluster::mastered_by(3, {1, 2, 3});
    const uint64_t a = c.request(1, 10, r, LockMode::EX);
    ASSERT_TRUE(c.granted(1, a));
    c.release(1, 10, r, val("first"));  // kept in node 1's cache (Transfer)
    CacheEntry* e = entry(c, 1, r);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(text_of(e->value), "first") << "the Transfer's grant brought it back";
    // Local users write it without a message (lock_client.cpp does this under
    // the partition lock).
    uint64_t tok = 0;
    ASSERT_EQ(cache_take(*e, LockMode::EX, LockMode::NL, lease_fences(c.host(1).lease_word()),
                         c.host(1).shard_fence[0], &tok),
              CacheMiss::None);
    e->value = val("second, local");
    cache_drop(*e, LockMode::EX);
    // Node 2 asks: BAST, give-back with the local value, grant to node 2.
    const uint64_t b = c.request(2, 20, r, LockMode::PR);
    ASSERT_TRUE(c.granted(2, b));
    EXPECT_EQ(text_of(c.value(2, b)), "second, local");
    EXPECT_EQ(entry(c, 1, r), nullptr);
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST(GesLockValueCluster, AnEpochChangeKeepsACachedLocksValueAndALostWriterInvalidates) {
    GesCluster c = cluster(3, true);
    const ResourceName r = GesCluster::mastered_by(3, {1, 2, 3});
    const uint64_t a = c.request(1, 10, r, LockMode::EX);
    ASSERT_TRUE(c.granted(1, a));
    c.release(1, 10, r, val("kept"));
    CacheEntry* e = entry(c, 1, r);
    ASSERT_NE(e, nullptr);
    e->value = val("kept, then written locally");
    // Same members, new epoch: every master rebuilds from the replays.
    c.commit_view(11, {1, 2, 3});
    c.tick_all();
    const uint64_t b = c.request(2, 20, r, LockMode::PR);
    ASSERT_TRUE(c.granted(2, b));
    EXPECT_EQ(text_of(c.value(2, b)), "kept, then written locally");

    // Node 2 takes EX and writes nothing; node 2 leaves: its EX went with it.
    c.release(2, 20, r);
    const uint64_t x = c.request(2, 21, r, LockMode::EX);
    ASSERT_TRUE(c.granted(2, x));
    const uint64_t w = c.request(1, 12, r, LockMode::CR);  // waits behind node 2's EX
    EXPECT_FALSE(c.granted(1, w));
    c.commit_view(12, {1, 3});
    c.tick_all();
    ASSERT_TRUE(c.granted(1, w));
    EXPECT_EQ(c.value(1, w).state, ValueState::Invalid);
}

TEST(GesLockValueCluster, ADeadBackendsExclusiveLockLeavesTheValueInvalid) {
    GesCluster c = cluster(2, false);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2});
    const uint64_t a = c.request(2, 20, r, LockMode::NL);  // keeps the resource at the master
    ASSERT_TRUE(c.granted(2, a));
    const uint64_t b = c.request(1, 10, r, LockMode::EX);
    ASSERT_TRUE(c.granted(1, b));
    c.host(1).dead_procs.insert(10);  // gone without a word
    c.advance_ms(300);
    c.tick_all();
    EXPECT_FALSE(c.worker(1).registry().find(Owner{1, 10}, r).has_value()) << "reaped";
    const uint64_t d = c.request(2, 21, r, LockMode::PR);
    ASSERT_TRUE(c.granted(2, d));
    EXPECT_EQ(c.value(2, d).state, ValueState::Invalid);
    EXPECT_EQ(c.host(2).counter(WorkerCounter::ValueInvalidations), 1u);
}

// ---- found by review (a helper's adversarial reading of the first version)

namespace {

std::string txt(const LockValue& x) {
    return text_of(x);
}

}  // namespace

// A cached EX use converting down while a BAST keeps the cache from doing it
// locally: the Convert to the LMS carries the session's write.
TEST(GesLockValueReview, ACachedDownConversionTheCacheRefusesCarriesTheWrite) {
    GesCluster c = cluster(3, true);
    const ResourceName r = GesCluster::mastered_by(3, {1, 2, 3});
    ASSERT_TRUE(c.granted(1, c.request(1, 10, r, LockMode::EX)));
    c.release(1, 10, r, val("first"));
    CacheEntry* e = entry(c, 1, r);
    ASSERT_NE(e, nullptr);
    uint64_t tok = 0;
    ASSERT_EQ(cache_take(*e, LockMode::EX, LockMode::NL, lease_fences(c.host(1).lease_word()),
                         c.host(1).shard_fence[0], &tok),
              CacheMiss::None);
    c.host(1).users_of[{c.host(1).cache.index_of(e), e->generation}] = {11};
    const uint64_t b = c.request(2, 20, r, LockMode::PR);
    ASSERT_FALSE(c.granted(2, b));
    ASSERT_NE(e->bast, 0);
    const uint64_t conv = c.ask(GesMsgType::Convert, 1, 11, r, LockMode::PR, 0, 0, val("second"));
    ASSERT_TRUE(c.granted(1, conv));
    ASSERT_TRUE(c.granted(2, b));
    EXPECT_EQ(txt(c.value(2, b)), "second");
    EXPECT_EQ(txt(c.value(1, conv)), "second");
}

// A down-conversion that writes, in flight across an epoch change: the
// registry has the write, the replay carries it, the new master applies it.
TEST(GesLockValueReview, ADownConversionInFlightAcrossAnEpochChangeKeepsItsWrite) {
    GesCluster c = cluster(3, false);
    const ResourceName r = GesCluster::mastered_by(3, {1, 2, 3});
    ASSERT_TRUE(c.granted(2, c.request(2, 21, r, LockMode::NL)));
    ASSERT_TRUE(c.granted(1, c.request(1, 10, r, LockMode::EX)));
    c.release(1, 10, r, val("v1"));
    const uint64_t a = c.request(1, 10, r, LockMode::EX);
    ASSERT_TRUE(c.granted(1, a));
    c.held.insert(3);
    const uint64_t down = c.ask(GesMsgType::Request, 1, 10, r, LockMode::PR, 0, 0, val("v2"));
    c.commit_view(11, {1, 2, 3});
    c.held.clear();
    c.pump();
    c.tick_all();
    ASSERT_TRUE(c.granted(1, down));
    EXPECT_EQ(txt(c.value(1, down)), "v2");
    const uint64_t b = c.request(2, 20, r, LockMode::PR);
    ASSERT_TRUE(c.granted(2, b));
    EXPECT_EQ(txt(c.value(2, b)), "v2");
}

// An LMS restart whose registry copy overflowed voids its cache entries: a
// stale one never comes back with its old value.
TEST(GesLockValueReview, AnOverflowedRestartVoidsTheCacheAndNoStaleValueComesBack) {
    GesCluster c(3, /*mirror_capacity=*/16);
    for (uint16_t i = 1; i <= 3; i++) c.host(i).enable_cache(256);
    c.commit_view(10, {1, 2, 3});
    const ResourceName r = GesCluster::mastered_by(3, {1, 2, 3});
    ASSERT_TRUE(c.granted(2, c.request(2, 21, r, LockMode::NL)));
    ASSERT_TRUE(c.granted(1, c.request(1, 10, r, LockMode::EX)));
    c.release(1, 10, r, val("old, before the restart"));
    ASSERT_NE(entry(c, 1, r), nullptr);
    for (uint32_t p = 1; p <= 13; p++)
        c.request(1, 100 + p, GesCluster::mastered_by(2, {1, 2, 3}, "f" + std::to_string(p)),
                  LockMode::EX);
    c.node(1).restart(c.now());
    ASSERT_EQ(c.host(1).shard_fence[0], 1u) << "overflowed: the shard's locks are void";
    EXPECT_EQ(entry(c, 1, r), nullptr) << "and so are its cache entries";
    c.commit_view(11, {1, 2, 3});
    c.tick_all();
    ASSERT_TRUE(c.granted(2, c.request(2, 20, r, LockMode::EX)));
    c.host(2).enable_cache(0);
    c.release(2, 20, r, val("newer"));
    const uint64_t a = c.request(1, 11, r, LockMode::EX);
    ASSERT_TRUE(c.granted(1, a));
    EXPECT_EQ(txt(c.value(1, a)), "newer");
    c.release(1, 11, r, val("newest"));
    const uint64_t b = c.request(3, 30, r, LockMode::PR);
    ASSERT_TRUE(c.granted(3, b));
    EXPECT_EQ(txt(c.value(3, b)), "newest");
}

// A down-conversion's grant that finds its backend gone from the slot is
// kept (the backend takes a down-conversion it stopped waiting for as made):
// no give-back up-conversion, so nobody believes EX while the master has PR.
TEST(GesLockValueReview, ALateGrantOfADownConversionIsKept) {
    GesCluster c = cluster(3, false);
    const ResourceName r = GesCluster::mastered_by(3, {1, 2, 3});
    ASSERT_TRUE(c.granted(3, c.request(3, 31, r, LockMode::NL)));
    ASSERT_TRUE(c.granted(1, c.request(1, 10, r, LockMode::EX)));
    const uint64_t pr = c.request(2, 20, r, LockMode::PR);  // waits
    c.held.insert(3);
    const uint64_t down = c.ask(GesMsgType::Request, 1, 10, r, LockMode::PR, 0, 0, val("v2"));
    c.host(1).waiting.erase(down);  // the backend stopped waiting: it holds PR now
    c.cancel(1, 10, r, down);       // (a Cancel of a down-conversion is ignored)
    c.held.clear();
    c.pump();
    ASSERT_TRUE(c.granted(2, pr));
    EXPECT_EQ(txt(c.value(2, pr)), "v2");
    EXPECT_EQ(c.host(1).counter(WorkerCounter::LateGrantsUndone), 0u) << "no give-back";
    auto e = c.worker(1).registry().find(Owner{1, 10}, r);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->state, LockState::Granted);
    EXPECT_EQ(e->granted_mode, LockMode::PR) << "as the backend believes";
    EXPECT_TRUE(c.no_conflicting_holders());
}
