// The membership simulator (membership/simulator.hpp) at 16 and 64 nodes, the
// most a cluster configures (issue 27, "Scale"): a node fails (frozen, or cut
// off from every other node), the others commit a view without it within the
// bound derived below, the safety invariants hold throughout, and the node
// rejoins once it is back. bench/tools/membership_scale.cpp measures the same
// at the default timing (heartbeat 1 s, peer_timeout 10 s); these run at the
// simulator's (100 ms, 1 s): as many events per timeout, a tenth of the
// simulated time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "ic/membership/membership.hpp"
#include "membership/simulator.hpp"

using namespace pgrac::ic;
using namespace pgrac::ic::memsim;

namespace {

void gtest_failure(const std::string& what) {
    ADD_FAILURE() << what;
}
[[maybe_unused]] const bool kFailuresReported = (g_failure_handler = gtest_failure, true);

// How long after node X fails at F the others may take to commit a view
// without it, with T = peer_timeout, H = the ping interval (heartbeat_interval,
// which is under a third of the lease 3T/4 here), t = the tick period
// min(H, 100 ms) and d = the largest one-way delay:
//  1. X's last frames arrive by F + d. So by E = F + d + T every survivor has
//     not heard X for its window T: it counts X as unreachable and may vote for
//     a view without it; the lowest survivor proposes one at a tick by then.
//  2. A survivor that refused the proposal (it heard X later than the
//     proposer did) gets it again with the proposer's next heartbeat ping, by
//     E + H + d, and its pong carries its vote back: by E + H + 2d the
//     proposer has every vote and commits...
//  3. ...unless the proposal's life (min(max(4H, 500 ms), T/2)) ran out first:
//     then the proposer renews it at a tick, by E + H + 2d + t, with a higher
//     epoch sent to everyone at once; each survivor, past E, votes at once, and
//     the proposer commits 2d later.
//  4. A survivor commits the view it voted for when the proposer's gossip,
//     sent to all at once on the commit, reaches it: d later.
// So every survivor has committed a view without X by
// F + T + H + t + 6d (case 3; case 2 gives F + T + H + 4d).
int64_t exclusion_bound_us(const SimOptions& o) {
    const int64_t t = std::min(o.heartbeat_ms, 100) * kMs;
    return o.peer_timeout_ms * kMs + o.heartbeat_ms * kMs + t + 6 * o.max_delay_us;
}

// When X is back (thawed after more than T, or its links healed) it hears every
// other node within H (their heartbeats, or its own and their pongs). Until
// then X may count itself the lowest node it hears and propose a view of the
// nodes it heard, under the epoch the proposer picks for the view with X: that
// proposal then waits out its life L = min(max(4H, 500 ms), T/2) before the
// proposer renews it under a higher epoch. The renewed one is voted for and
// committed as in the failure case (within H + t + 6d, every node past its
// window). X's lease then needs echoes of a ping sent from the new view, and X
// adopts it from the proposer's gossip, which Membership::tick() does not
// report as a change: its next heartbeat, within H, carries it. So X is a
// member with a lease again within 3H + L + t + 6d.
int64_t rejoin_bound_us(const SimOptions& o) {
    const int64_t t = std::min(o.heartbeat_ms, 100) * kMs;
    const int64_t life =
        std::min<int64_t>(std::max(4 * o.heartbeat_ms, 500), o.peer_timeout_ms / 2) * kMs;
    return 3 * o.heartbeat_ms * kMs + life + t + 6 * o.max_delay_us;
}

// Forms the cluster, fails node `failed` at a seed-dependent phase of the
// heartbeat, and checks the exclusion, the rejoin and safety.
void expect_failure_handled(int nodes, uint64_t seed, FailureKind kind, uint16_t failed) {
    SCOPED_TRACE(std::to_string(nodes) + " nodes, seed " + std::to_string(seed) + ", " +
                 failure_kind_name(kind) + " node " + std::to_string(failed));
    const SimOptions o = sim(nodes, seed);
    Cluster c(o);
    ASSERT_TRUE(c.run_until([&] { return c.converged(); }, 3 * kSec)) << c.trace();
    const View before = c.view(1);
    c.run_for(500 * kMs + static_cast<int64_t>(seed * 37 % 100) * kMs);
    ASSERT_EQ(c.view(1), before) << "a steady cluster keeps its view";

    c.fail(failed, kind);
    const int64_t failed_at = c.now_us();
    ASSERT_TRUE(c.run_until([&] { return c.excluded_everywhere(failed); }, exclusion_bound_us(o)))
        << "no view without node " << failed << " on every other node within "
        << exclusion_bound_us(o) / kMs << " ms\n"
        << c.trace() << c.dump();
    const int64_t took = c.now_us() - failed_at;
    // Not before the window: every member of the new view has not heard it for T,
    // and it had sent its last frame (a ping, or a pong to a survivor's ping) at
    // most a heartbeat before it failed.
    EXPECT_GE(took, (o.peer_timeout_ms - o.heartbeat_ms) * kMs);
    // The survivors hold their leases in it (echoes from one another) at once.
    const NodeMask survivors = first_nodes(nodes) & ~node_bit(failed);
    ASSERT_TRUE(c.run_until([&] { return c.converged(survivors); }, rejoin_bound_us(o)))
        << c.trace() << c.dump();
    EXPECT_GT(c.view(1 == failed ? 2 : 1).epoch, before.epoch);
    if (kind == FailureKind::Isolate) {  // it ran on alone: its lease lapsed, it fenced
        EXPECT_TRUE(c.has_history(failed, "fenced"));
        EXPECT_EQ(c.state(failed), MemberState::Fenced);
    } else {  // it has not run since: its lease lapsed unnoticed
        EXPECT_FALSE(c.lease_ok(failed));
    }

    c.run_for(500 * kMs);
    c.recover(failed, kind);
    ASSERT_TRUE(c.run_until([&] { return c.converged(); }, rejoin_bound_us(o)))
        << "node " << failed << " did not rejoin within " << rejoin_bound_us(o) / kMs << " ms\n"
        << c.trace() << c.dump();
    EXPECT_TRUE(c.has_history(failed, "fenced"));
    EXPECT_EQ(c.history(failed).back(), "rejoined");
    EXPECT_EQ(c.monitor().violations(), 0);
    // Heartbeats stay what the engine sends: 72 bytes of gossip and more.
    for (uint16_t id = 1; id <= nodes; id++) {
        const Traffic& t = c.node(id).traffic;
        EXPECT_GE(t.bytes_sent, t.frames_sent * heartbeat_wire_bytes(kGossipFixedSize));
        EXPECT_LE(t.bytes_sent, t.frames_sent * heartbeat_wire_bytes(kGossipMaxSize));
    }
}

// Node 1 is the proposer: its successor has to take over.
TEST(MembershipScale, SixteenNodesExcludeAFrozenNodeAndTakeItBack) {
    const uint16_t failed[] = {1, 11, 16, 2};
    for (uint64_t seed = 1; seed <= 4 && !::testing::Test::HasFailure(); seed++)
        expect_failure_handled(16, seed, FailureKind::Freeze, failed[seed - 1]);
}

TEST(MembershipScale, SixteenNodesExcludeAnIsolatedNodeAndTakeItBack) {
    const uint16_t failed[] = {7, 1, 2, 16};
    for (uint64_t seed = 1; seed <= 4 && !::testing::Test::HasFailure(); seed++)
        expect_failure_handled(16, seed, FailureKind::Isolate, failed[seed - 1]);
}

TEST(MembershipScale, SixtyFourNodesExcludeAFrozenProposerAndTakeItBack) {
    expect_failure_handled(64, 1, FailureKind::Freeze, 1);
}

TEST(MembershipScale, SixtyFourNodesExcludeAnIsolatedNodeAndTakeItBack) {
    expect_failure_handled(64, 2, FailureKind::Isolate, 64);
}

// In a steady cluster every node pings each other node once per heartbeat
// and answers each ping with a pong: 2 (N - 1) frames each way per interval,
// each of 24 + 16 + 72 + 16 bytes (no proposal in the gossip).
TEST(MembershipScale, SteadyHeartbeatTrafficIsTwoFramesPerPeerAndInterval) {
    const SimOptions o = sim(16, 3);
    Cluster c(o);
    ASSERT_TRUE(c.run_until([&] { return c.converged(); }, 3 * kSec)) << c.trace();
    c.run_for(1 * kSec);
    c.reset_traffic();
    c.run_for(10 * kSec);
    const uint64_t frame = heartbeat_wire_bytes(kGossipFixedSize);
    EXPECT_EQ(frame, 128u);
    const uint64_t intervals = 10 * kSec / (o.heartbeat_ms * kMs);
    for (uint16_t id = 1; id <= 16; id++) {
        const Traffic& t = c.node(id).traffic;
        // One interval's frames may fall on either side of the window.
        EXPECT_NEAR(static_cast<double>(t.frames_sent), 2.0 * 15 * intervals, 2 * 15) << id;
        EXPECT_NEAR(static_cast<double>(t.frames_received), 2.0 * 15 * intervals, 2 * 15) << id;
        EXPECT_EQ(t.bytes_sent, t.frames_sent * frame) << id;
        EXPECT_EQ(t.bytes_received, t.frames_received * frame) << id;
    }
    EXPECT_EQ(c.monitor().violations(), 0);
}

}  // namespace
