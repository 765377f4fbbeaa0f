// Node-level lock caching (ic/ges/node_cache.hpp and the worker's side of it,
// docs/ges.md "Node-level caching"): the shared-memory table (buckets, the
// eviction clock, generations) and the take/drop rules; then whole clusters
// of real workers (worker_support.hpp) where a released lock stays on its node
// as the node owner's, backends take it again from the table, a BAST gives it
// back once its users are done, tokens keep growing, a NOWAIT from another
// node waits a moment for an unused cached lock, a conversion the cache cannot
// make becomes the backend's own at the master, and a fence empties the cache;
// local waiters queue in their node's LMS and are served from the cache, go
// to the master behind a remote waiter when a BAST comes, and time out, are
// cancelled or chosen as deadlock victims there.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ges/cache_support.hpp"
#include "ges/worker_support.hpp"
#include "ic/ges/node_cache.hpp"

using namespace pgrac::ic;
using namespace pgrac::ic::ges;
using pgrac::ic::ges::testing::cached_and_used_by;
using pgrac::ic::ges::testing::cached_cluster;
using pgrac::ic::ges::testing::cached_then_taken;
using pgrac::ic::ges::testing::entry;
using pgrac::ic::ges::testing::GesCluster;
using pgrac::ic::ges::testing::local_rows;
using pgrac::ic::ges::testing::take;

namespace {

ResourceName text(const std::string& s) {
    return *ResourceName::from_text(s);
}

struct Table {
    std::vector<uint64_t> mem;
    NodeCache c;
    explicit Table(uint32_t per_worker, uint32_t workers = 1) {
        mem.assign(NodeCache::bytes_for(workers, per_worker) / 8 + 1, 0);
        c = NodeCache::format(mem.data(), workers, per_worker);
    }
    CacheEntry* put(const ResourceName& r, LockMode m, uint64_t token) {
        const uint32_t p = c.partition_of(r, 0);
        CacheEntry* e = c.insert(p, r);
        if (e == nullptr) return nullptr;
        e->mode = static_cast<uint8_t>(m);
        e->grant_token = token;
        e->next_token = token + 1;
        e->token_end = token + kCacheTokenRange;
        e->state = kCacheCached;
        return e;
    }
};

TEST(GesNodeCache, FindsInsertsAndFreesWithNewGenerations) {
    Table t(64);
    EXPECT_TRUE(t.c.enabled());
    EXPECT_EQ(t.c.partitions(), kCachePartsPerWorker);
    const ResourceName a = text("a"), b = ResourceName::from_int(7);
    CacheEntry* ea = t.put(a, LockMode::EX, 256);
    ASSERT_NE(ea, nullptr);
    ASSERT_NE(t.put(b, LockMode::PR, 512), nullptr);
    EXPECT_EQ(t.c.find(t.c.partition_of(a, 0), a), ea);
    EXPECT_EQ(t.c.at(t.c.index_of(ea)), ea);
    const uint32_t gen = ea->generation;
    t.c.erase(t.c.partition_of(a, 0), ea);
    EXPECT_EQ(t.c.find(t.c.partition_of(a, 0), a), nullptr);
    EXPECT_NE(t.c.at(t.c.index_of(ea))->generation, gen) << "a freed entry's uses are void";
    EXPECT_NE(t.c.find(t.c.partition_of(b, 0), b), nullptr);
}

TEST(GesNodeCache, AFullPartitionRefusesAndTheClockEvictsAnUnusedEntry) {
    Table t(kCachePartsPerWorker);  // one entry a partition
    const ResourceName a = text("first");
    const uint32_t p = t.c.partition_of(a, 0);
    ASSERT_NE(t.put(a, LockMode::EX, 256), nullptr);
    ResourceName other;
    for (int i = 0;; i++) {  // another name of the same partition
        other = ResourceName::from_int(i);
        if (t.c.partition_of(other, 0) == p) break;
    }
    EXPECT_EQ(t.put(other, LockMode::EX, 512), nullptr) << "no free entry";
    CacheEntry* e = t.c.find(p, a);
    uint64_t token = 0;
    ASSERT_EQ(cache_take(*e, LockMode::EX, LockMode::NL, 0, 0, &token), CacheMiss::None);
    EXPECT_EQ(t.c.victim(p), nullptr) << "an entry in use is never evicted";
    cache_drop(*e, LockMode::EX);
    EXPECT_EQ(t.c.victim(p), e) << "unused: evicted once the hand passed its bit";
}

TEST(GesNodeCache, TakeRules) {
    Table t(64);
    CacheEntry* e = t.put(text("r"), LockMode::PW, 1024);
    uint64_t tok = 0;
    EXPECT_EQ(cache_take(*e, LockMode::EX, LockMode::NL, 0, 0, &tok), CacheMiss::ModeNotCovered);
    EXPECT_EQ(cache_take(*e, LockMode::PR, LockMode::NL, 1, 0, &tok), CacheMiss::Fenced);
    EXPECT_EQ(cache_take(*e, LockMode::PR, LockMode::NL, 0, 1, &tok), CacheMiss::Fenced);
    ASSERT_EQ(cache_take(*e, LockMode::PR, LockMode::NL, 0, 0, &tok), CacheMiss::None);
    EXPECT_EQ(tok, 1025u);
    ASSERT_EQ(cache_take(*e, LockMode::PR, LockMode::NL, 0, 0, &tok), CacheMiss::None);
    EXPECT_EQ(tok, 1026u) << "every take its own, larger token";
    EXPECT_EQ(cache_take(*e, LockMode::PW, LockMode::NL, 0, 0, &tok), CacheMiss::LocalConflict);
    EXPECT_EQ(cache_take(*e, LockMode::PW, LockMode::PR, 0, 0, &tok), CacheMiss::LocalConflict)
        << "the other reader still conflicts";
    EXPECT_FALSE(cache_drop(*e, LockMode::PR));
    ASSERT_EQ(cache_take(*e, LockMode::PW, LockMode::PR, 0, 0, &tok), CacheMiss::None)
        << "the last reader converts in place";
    EXPECT_EQ(cache_users(*e), 1u);
    e->bast = 1 + static_cast<uint8_t>(LockMode::PR);
    EXPECT_EQ(cache_take(*e, LockMode::NL, LockMode::NL, 0, 0, &tok), CacheMiss::Bast)
        << "nothing new after a BAST";
    EXPECT_TRUE(cache_drop(*e, LockMode::PW)) << "the LMS must look: a BAST waits";
    e->bast = 0;
    e->next_token = e->token_end;
    EXPECT_EQ(cache_take(*e, LockMode::PR, LockMode::NL, 0, 0, &tok), CacheMiss::RangeUsedUp);
}

// ---- the worker's side

bool registry_has(GesCluster& c, uint16_t node, Owner o, const ResourceName& r) {
    return c.worker(node).registry().find(o, r).has_value();
}

TEST(GesNodeCacheWorker, AReleasedLockStaysOnItsNodeAndIsTakenAgainWithoutAMessage) {
    GesCluster c = cached_cluster(3);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2, 3});
    const uint64_t a = c.request(1, 10, r, LockMode::EX);
    ASSERT_TRUE(c.granted(1, a));
    const uint64_t t0 = c.token(1, a);
    c.release(1, 10, r);
    std::vector<LockRow> rows = c.rows(2, r);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].proc, kNodeOwnerProc) << "the master lists the node's own owner";
    EXPECT_GT(c.worker(2).token_of(rows[0]), t0) << "granted to it under a new token";
    EXPECT_EQ(entry(c, 1, r)->grant_token, c.worker(2).token_of(rows[0]));
    EXPECT_EQ(c.host(1).counter(WorkerCounter::CacheTransfers), 1u);

    const uint64_t before = c.messages_delivered;
    uint64_t prev = t0;
    for (int i = 0; i < 10; i++) {
        uint64_t tok = 0;
        ASSERT_TRUE(take(c, 1, r, LockMode::EX, &tok));
        EXPECT_GT(tok, prev);
        prev = tok;
        cache_drop(*entry(c, 1, r), LockMode::EX);
    }
    EXPECT_EQ(c.messages_delivered, before) << "no message for a cached take";
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST(GesNodeCacheWorker, ARequestRightAfterTheReleaseIsServedFromTheCache) {
    GesCluster c = cached_cluster(3);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2, 3});
    const uint64_t a = c.request(1, 10, r, LockMode::EX);
    c.held.insert(2);     // the master's answer to the Transfer is late
    c.release(1, 10, r);  // Transfer
    const uint64_t b = c.request(1, 10, r, LockMode::EX);  // before the grant came back
    EXPECT_FALSE(c.granted(1, b)) << "kept for the Transfer's grant";
    c.held.clear();
    c.pump();
    ASSERT_TRUE(c.granted(1, b));
    EXPECT_NE(c.token(1, b) & (kCacheTokenRange - 1), 0u) << "a local take, made by the LMS";
    EXPECT_GT(c.token(1, b), c.token(1, a));
    EXPECT_EQ(cache_users(*entry(c, 1, r)), 1u);
    EXPECT_FALSE(registry_has(c, 1, Owner{1, 10}, r)) << "the backend's use is the node's lock";
    // The same while the backend's slot no longer waits: the use ends at once.
    cache_drop(*entry(c, 1, r), LockMode::EX);
    const uint64_t d = c.request(1, 11, r, LockMode::EX);
    EXPECT_TRUE(c.granted(1, d));
    cache_drop(*entry(c, 1, r), LockMode::EX);
    c.host(1).waiting.insert(12345);  // nothing to do with it
    const uint64_t e = c.request(1, 12, r, LockMode::EX);
    ASSERT_TRUE(c.granted(1, e));
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST(GesNodeCacheWorker, ALostTransferLeavesNothingUsable) {
    GesCluster c = cached_cluster(3);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2, 3});
    c.request(1, 10, r, LockMode::EX);
    c.held.insert(1);
    c.release(1, 10, r);
    c.host(1).sent.clear();  // the Transfer is lost with its session
    c.held.clear();
    uint64_t tok = 0;
    EXPECT_FALSE(take(c, 1, r, LockMode::EX, &tok)) << "not usable before the master's grant";
    const uint64_t kept = c.request(1, 11, r, LockMode::EX);
    EXPECT_FALSE(c.granted(1, kept)) << "kept for the Transfer's grant, which never comes";
    c.advance_ms(150);
    c.tick(1);  // then it goes to the master as the backend's own ...
    EXPECT_FALSE(c.granted(1, kept)) << "... behind backend 10's lock, as the master sees it";
    c.release_all(1, 10);  // the backend ends: the master drops its lock
    EXPECT_TRUE(c.granted(1, kept));
    c.release(1, 11, r);
    const uint64_t b = c.request(3, 30, r, LockMode::EX);
    EXPECT_TRUE(c.granted(3, b));
    EXPECT_FALSE(take(c, 1, r, LockMode::EX, &tok)) << "node 1 never got to use it";
    // The next epoch replays the node owner's request; it waits behind node 3.
    c.commit_view(11, {1, 2, 3});
    EXPECT_FALSE(take(c, 1, r, LockMode::EX, &tok));
    c.release(3, 30, r);
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST(GesNodeCacheWorker, ABastGivesTheLockBackWhenItsUsersAreDone) {
    GesCluster c = cached_cluster(3);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2, 3});
    const uint64_t a = c.request(1, 10, r, LockMode::EX);
    c.release(1, 10, r);
    uint64_t t1 = 0;
    ASSERT_TRUE(take(c, 1, r, LockMode::EX, &t1));  // in use on node 1
    const uint64_t b = c.request(3, 30, r, LockMode::EX);
    EXPECT_FALSE(c.granted(3, b)) << "node 1's user still has it";
    EXPECT_EQ(entry(c, 1, r)->bast, 1 + static_cast<uint8_t>(LockMode::EX));
    uint64_t tok = 0;
    EXPECT_FALSE(take(c, 1, r, LockMode::EX, &tok)) << "no new take after the BAST";
    EXPECT_EQ(c.worker(1).cache_basts_pending(), 1u);
    ASSERT_TRUE(cache_drop(*entry(c, 1, r), LockMode::EX));  // the user is done: notice
    c.cache_notify(1, 10, r);
    EXPECT_TRUE(c.granted(3, b));
    EXPECT_EQ(entry(c, 1, r), nullptr) << "given back";
    EXPECT_GT(c.token(3, b), t1) << "above every token node 1 handed out";
    EXPECT_GT(t1, c.token(1, a));
    EXPECT_EQ(c.host(1).counter(WorkerCounter::CacheGiveBacks), 1u);
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST(GesNodeCacheWorker, ALostNoticeIsMadeUpByTheTick) {
    GesCluster c = cached_cluster(2);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2});
    uint64_t t = 0;
    ASSERT_TRUE(cached_then_taken(c, 1, r, LockMode::EX, &t));
    const uint64_t b = c.request(2, 20, r, LockMode::EX);
    cache_drop(*entry(c, 1, r), LockMode::EX);  // and its CacheNotify is lost
    EXPECT_FALSE(c.granted(2, b));
    c.advance_ms(100);
    c.tick_all();
    EXPECT_TRUE(c.granted(2, b));
}

TEST(GesNodeCacheWorker, ANowaitFromAnotherNodeGetsAnUnusedCachedLock) {
    GesCluster c = cached_cluster(3);
    const ResourceName r = GesCluster::mastered_by(3, {1, 2, 3});
    c.request(1, 10, r, LockMode::EX);
    c.release(1, 10, r);
    const uint64_t b = c.request(2, 20, r, LockMode::EX, kNoWait);
    EXPECT_TRUE(c.granted(2, b)) << "the BAST brought it back at once";
    // In use: the NOWAIT is refused once its grace has passed.
    c.release(2, 20, r);
    uint64_t t = 0;
    ASSERT_TRUE(take(c, 2, r, LockMode::EX, &t));
    const uint64_t d = c.request(1, 11, r, LockMode::EX, kNoWait);
    EXPECT_FALSE(c.granted(1, d));
    c.advance_ms(60);
    c.tick_all();
    EXPECT_TRUE(c.denied(1, d, DenyReason::NoWait));
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST(GesNodeCacheWorker, AConversionTheCacheCannotMakeBecomesTheBackendsOwnLock) {
    GesCluster c = cached_cluster(2);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2});
    uint64_t t = 0;
    ASSERT_TRUE(cached_then_taken(c, 1, r, LockMode::PR, &t));  // backend 11
    uint64_t t2 = 0;
    ASSERT_TRUE(take(c, 1, r, LockMode::PR, &t2));  // backend 12
    const uint64_t x = c.convert_cached(1, 11, r, LockMode::EX);
    EXPECT_FALSE(c.granted(1, x)) << "waits for the other reader";
    uint64_t t3 = 0;
    EXPECT_FALSE(take(c, 1, r, LockMode::PR, &t3)) << "no new take while a conversion waits";
    ASSERT_TRUE(cache_drop(*entry(c, 1, r), LockMode::PR));  // backend 12 releases
    c.cache_notify(1, 12, r);
    ASSERT_TRUE(c.granted(1, x));
    std::vector<LockRow> rows = c.rows(2, r);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].proc, 11u) << "the backend's own lock at the master";
    EXPECT_EQ(rows[0].mode, LockMode::EX);
    EXPECT_EQ(c.host(1).counter(WorkerCounter::CacheConversions), 1u);
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST(GesNodeCacheWorker, TwoReadersConvertingEachOtherLoseTheYoungest) {
    GesCluster c = cached_cluster(2);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2});
    uint64_t t = 0;
    ASSERT_TRUE(cached_then_taken(c, 1, r, LockMode::PR, &t));
    ASSERT_TRUE(take(c, 1, r, LockMode::PR, &t));
    const uint64_t x = c.convert_cached(1, 11, r, LockMode::EX);
    c.advance_ms(1);
    const uint64_t y = c.convert_cached(1, 12, r, LockMode::EX);
    EXPECT_TRUE(c.denied(1, y, DenyReason::Deadlock)) << "the younger conversion gives way";
    EXPECT_FALSE(c.granted(1, x));
    cache_drop(*entry(c, 1, r), LockMode::PR);  // backend 12, after its error, releases
    c.cache_notify(1, 12, r);
    EXPECT_TRUE(c.granted(1, x));
}

TEST(GesNodeCacheWorker, ADeadlockThroughACachedLockIsFoundAtItsUsers) {
    GesCluster c = cached_cluster(3);
    const ResourceName r1 = GesCluster::mastered_by(2, {1, 2, 3});
    const ResourceName r2 = GesCluster::mastered_by(3, {1, 2, 3});
    ASSERT_TRUE(cached_and_used_by(c, 1, r1, 11));
    const uint64_t a = c.request(3, 30, r2, LockMode::EX);
    ASSERT_TRUE(c.granted(3, a));
    const uint64_t b = c.request(1, 11, r2, LockMode::EX);  // 11 waits for 30
    c.advance_ms(1);
    const uint64_t d = c.request(3, 30, r1, LockMode::EX);  // 30 waits for node 1's lock: 11
    EXPECT_FALSE(c.granted(1, b));
    EXPECT_FALSE(c.granted(3, d));
    for (int i = 0; i < 30; i++) {  // tau is 300 ms: a hint, a round, a decision
        c.advance_ms(50);
        c.tick_all();
    }
    EXPECT_TRUE(c.denied(3, d, DenyReason::Deadlock))
        << "the youngest request of the cycle 30 -> node 1's lock (its user 11) -> 30";
    EXPECT_FALSE(c.denied(1, b, DenyReason::Deadlock));
    EXPECT_EQ(c.host(1).counter(WorkerCounter::ClusterDeadlocks), 1u);
}

TEST(GesNodeCacheWorker, AFenceEmptiesTheCache) {
    GesCluster c = cached_cluster(2);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2});
    c.request(1, 10, r, LockMode::EX);
    c.release(1, 10, r);
    ASSERT_NE(entry(c, 1, r), nullptr);
    const uint32_t f0 = lease_fences(c.host(1).lease_word());
    c.host(1).set_lease(1);  // lapsed
    c.advance_ms(10);
    c.tick(1);
    EXPECT_NE(lease_fences(c.host(1).lease_word()), f0);
    EXPECT_EQ(entry(c, 1, r), nullptr) << "void with the node's other locks";
}

// ---- local waiters (docs/ges.md, "Local waiters")

TEST(GesNodeCacheWorker, LocalWaitersQueueInTheirNodeAndAreServedFromTheCacheInOrder) {
    GesCluster c = cached_cluster(3);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2, 3});
    uint64_t t11 = 0;
    ASSERT_TRUE(cached_then_taken(c, 1, r, LockMode::EX, &t11));  // backend 11 uses it
    const uint64_t before = c.messages_delivered;
    const uint64_t w12 = c.request(1, 12, r, LockMode::EX);
    EXPECT_FALSE(c.granted(1, w12)) << "backend 11 still uses it";
    EXPECT_EQ(entry(c, 1, r)->waiting, 1) << "the entry says a local request waits";
    uint64_t tok = 0;
    EXPECT_FALSE(take(c, 1, r, LockMode::EX, &tok)) << "no take ahead of the waiter";
    const uint64_t w13 = c.request(1, 13, r, LockMode::EX);
    EXPECT_EQ(c.messages_delivered, before) << "they wait in node 1: nothing sent";
    EXPECT_EQ(c.rows(2, r).size(), 1u) << "the master knows only the node's lock";
    EXPECT_EQ(local_rows(c, 1, r), 2u) << "node 1's view rows show both";
    EXPECT_EQ(c.host(1).counter(WorkerCounter::LocalWaits), 2u);

    ASSERT_TRUE(cache_drop(*entry(c, 1, r), LockMode::EX)) << "the LMS is told: a waiter";
    c.cache_notify(1, 11, r);
    ASSERT_TRUE(c.granted(1, w12)) << "the first waiter, from the cache";
    EXPECT_FALSE(c.granted(1, w13));
    EXPECT_GT(c.token(1, w12), t11);
    EXPECT_NE(c.token(1, w12) & (kCacheTokenRange - 1), 0u) << "a local take";
    cache_drop(*entry(c, 1, r), LockMode::EX);
    c.cache_notify(1, 12, r);
    ASSERT_TRUE(c.granted(1, w13));
    EXPECT_GT(c.token(1, w13), c.token(1, w12));
    EXPECT_EQ(entry(c, 1, r)->waiting, 0);
    EXPECT_EQ(local_rows(c, 1, r), 0u);
    EXPECT_EQ(c.messages_delivered, before) << "served without a message";
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST(GesNodeCacheWorker, ABastSendsLocalWaitersToTheMasterBehindTheRemoteWaiter) {
    GesCluster c = cached_cluster(3);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2, 3});
    uint64_t t11 = 0;
    ASSERT_TRUE(cached_then_taken(c, 1, r, LockMode::EX, &t11));
    const uint64_t w12 = c.request(1, 12, r, LockMode::EX);
    const uint64_t b = c.request(3, 30, r, LockMode::EX);  // BAST to node 1
    EXPECT_EQ(local_rows(c, 1, r), 0u) << "the waiter went to the master";
    std::vector<LockRow> rows = c.rows(2, r);
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_EQ(rows[1].owner_node, 3) << "the remote waiter first";
    EXPECT_EQ(rows[2].proc, 12u) << "node 1's waiter behind it";
    cache_drop(*entry(c, 1, r), LockMode::EX);  // backend 11 is done
    c.cache_notify(1, 11, r);
    ASSERT_TRUE(c.granted(3, b)) << "the remote waiter waited only for the user of the moment";
    EXPECT_FALSE(c.granted(1, w12));
    EXPECT_GT(c.token(3, b), t11);
    c.release(3, 30, r);
    ASSERT_TRUE(c.granted(1, w12)) << "then node 1's waiter, as its own lock";
    EXPECT_GT(c.token(1, w12), c.token(3, b));
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST(GesNodeCacheWorker, LocalWaitersTimeOutAreCancelledAndNowaitIsRefusedAtOnce) {
    GesCluster c = cached_cluster(2);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2});
    uint64_t t = 0;
    ASSERT_TRUE(cached_then_taken(c, 1, r, LockMode::PW, &t));  // backend 11
    const uint64_t before = c.messages_delivered;
    const uint64_t nw = c.request(1, 12, r, LockMode::PW, kNoWait);
    EXPECT_TRUE(c.denied(1, nw, DenyReason::NoWait)) << "in use in a conflicting mode";
    const uint64_t tw = c.request(1, 13, r, LockMode::PW, 0, 100);
    const uint64_t cw = c.request(1, 14, r, LockMode::PW);
    const uint64_t pr = c.request(1, 15, r, LockMode::PR);  // compatible with none of the PWs
    c.advance_ms(150);
    c.tick(1);
    EXPECT_TRUE(c.denied(1, tw, DenyReason::Timeout));
    EXPECT_EQ(local_rows(c, 1, r), 2u);
    c.cancel(1, 14, r, cw);  // (its slot abandoned first, as the backend does)
    EXPECT_EQ(local_rows(c, 1, r), 1u) << "withdrawn";
    EXPECT_FALSE(c.granted(1, cw));
    EXPECT_FALSE(c.granted(1, pr)) << "PR conflicts with backend 11's PW";
    cache_drop(*entry(c, 1, r), LockMode::PW);
    c.cache_notify(1, 11, r);
    EXPECT_TRUE(c.granted(1, pr));
    EXPECT_EQ(c.messages_delivered, before) << "all of it in node 1";
    // A backend that ends while it waits locally: its ReleaseAll takes it out.
    const uint64_t gone = c.request(1, 16, r, LockMode::PW);
    c.release_all(1, 16);
    EXPECT_EQ(local_rows(c, 1, r), 0u);
    EXPECT_FALSE(c.granted(1, gone));
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST(GesNodeCacheWorker, ADeadlockThroughALocalWaitIsBroken) {
    GesCluster c = cached_cluster(3);
    const ResourceName r1 = GesCluster::mastered_by(2, {1, 2, 3});
    const ResourceName r2 = GesCluster::mastered_by(3, {1, 2, 3});
    ASSERT_TRUE(cached_and_used_by(c, 1, r1, 11));
    const uint64_t a = c.request(1, 12, r2, LockMode::EX);
    ASSERT_TRUE(c.granted(1, a));                           // 12 holds r2 (its own lock at node 3)
    const uint64_t b = c.request(1, 11, r2, LockMode::EX);  // 11 waits for 12 at node 3
    c.advance_ms(1);
    const uint64_t d = c.request(1, 12, r1, LockMode::EX);  // 12 waits in node 1 for 11
    EXPECT_FALSE(c.granted(1, b));
    EXPECT_FALSE(c.granted(1, d));
    EXPECT_EQ(local_rows(c, 1, r1), 1u);
    for (int i = 0; i < 30; i++) {  // tau is 300 ms: a hint, a round, a decision
        c.advance_ms(50);
        c.tick_all();
    }
    EXPECT_TRUE(c.denied(1, d, DenyReason::Deadlock)) << "the youngest wait of the cycle";
    EXPECT_FALSE(c.denied(1, b, DenyReason::Deadlock));
    EXPECT_EQ(local_rows(c, 1, r1), 0u);
    c.release(1, 12, r2);
    EXPECT_TRUE(c.granted(1, b));
    EXPECT_TRUE(c.no_conflicting_holders());
}

TEST(GesNodeCacheWorker, ATimedOutLastLocalWaiterLeavesTheEntryTakeable) {
    GesCluster c = cached_cluster(2);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2});
    uint64_t t = 0;
    ASSERT_TRUE(cached_then_taken(c, 1, r, LockMode::EX, &t));
    const uint64_t w = c.request(1, 12, r, LockMode::EX, 0, 100);
    c.advance_ms(150);
    c.tick(1);
    ASSERT_TRUE(c.denied(1, w, DenyReason::Timeout));
    EXPECT_EQ(entry(c, 1, r)->waiting, 0) << "no waiter left: the mark goes";
    cache_drop(*entry(c, 1, r), LockMode::EX);
    EXPECT_TRUE(take(c, 1, r, LockMode::EX, &t)) << "and takes work again";
}

TEST(GesNodeCacheWorker, ACachedConversionSendsTheLocalWaitersToTheMasterBehindIt) {
    GesCluster c = cached_cluster(2);
    const ResourceName r = GesCluster::mastered_by(2, {1, 2});
    uint64_t t = 0;
    ASSERT_TRUE(cached_then_taken(c, 1, r, LockMode::PW, &t));  // backend 11
    const uint64_t w = c.request(1, 12, r, LockMode::PW);
    EXPECT_EQ(local_rows(c, 1, r), 1u);
    const uint64_t x = c.convert_cached(1, 11, r, LockMode::EX);  // 11 is the only user
    ASSERT_TRUE(c.granted(1, x));
    EXPECT_EQ(entry(c, 1, r), nullptr) << "the lock is backend 11's own again";
    EXPECT_EQ(local_rows(c, 1, r), 0u) << "the waiter did not stay behind a gone entry";
    EXPECT_FALSE(c.granted(1, w));
    c.release(1, 11, r);
    EXPECT_TRUE(c.granted(1, w)) << "granted at the master after the conversion's holder";
    EXPECT_TRUE(c.no_conflicting_holders());
}

}  // namespace
