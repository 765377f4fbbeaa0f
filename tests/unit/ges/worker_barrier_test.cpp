// The replay barrier of the GES worker (ic/ges/worker.hpp) with several LMS
// workers per node, as the interconnect routes them (route_key % the
// receiver's cluster.lms_workers): every shard's barrier completes without a
// replay conflict; worker counts or witness settings that differ between
// nodes are refused by name and nothing is granted; a barrier that cannot
// complete ends within its bound with barrier_overdue and a new-epoch
// request, once per bound; a lost replay batch keeps the barrier open; a
// message of an epoch that is never adopted here is counted when dropped.
#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ic/ges/worker.hpp"
#include "ic/membership/membership.hpp"
#include "ic/ges/registry_mirror.hpp"
#include "ic/shm/shared_state.hpp"

using namespace pgrac::ic;
using namespace pgrac::ic::ges;

namespace {

// The host of every LMS worker of one node: one membership view, a lease
// that never lapses, the node's settings, and what its workers did.
class NodeHost final : public WorkerHost {
  public:
    struct Sent {
        GesChannel channel;
        uint16_t node;
        uint32_t route_key;
        std::vector<uint8_t> body;
    };
    struct Error {
        ErrorType type;
        int peer;
        std::string text;
    };

    View view{};
    uint64_t now_ms = 1000;
    uint32_t lms = 1;
    NodeMask witness = 0;
    int64_t peer_timeout = 10000;
    uint32_t shard_fence[kMaxLmsWorkers] = {};
    std::set<uint64_t> waiting;
    std::set<uint64_t> granted;

    std::deque<Sent> sent;
    std::vector<std::string> logs;
    std::vector<Error> errors;
    std::map<WorkerCounter, uint64_t> counters;
    uint64_t epoch_requests = 0;
    std::vector<std::pair<uint16_t, uint64_t>> withheld;  // withhold_echoes() calls
    uint64_t future_messages = 0;

    size_t errors_of(ErrorType t) const {
        size_t n = 0;
        for (const Error& e : errors) n += e.type == t;
        return n;
    }
    bool logged(const std::string& part) const {
        for (const std::string& l : logs)
            if (l.find(part) != std::string::npos) return true;
        return false;
    }

    void send(uint16_t node, GesChannel channel, uint32_t route_key,
              std::vector<uint8_t> body) override {
        sent.push_back({channel, node, route_key, std::move(body)});
    }
    uint64_t lease_clock_ms() override { return now_ms; }
    bool fence_if_lapsed(uint64_t) override { return false; }
    View committed_view() override { return view; }
    uint64_t lease_word() override { return kLeaseForever; }
    void request_new_epoch() override { epoch_requests++; }
    void withhold_echoes(uint16_t node, uint64_t for_ms) override {
        withheld.emplace_back(node, for_ms);
    }
    void count_stale_epoch_message() override {}
    void count_future_epoch_message() override { future_messages++; }
    uint32_t shard_fences(uint32_t worker) override { return shard_fence[worker]; }
    uint32_t bump_shard_fences(uint32_t worker) override { return ++shard_fence[worker]; }
    NodeMask witnesses() override { return witness; }
    uint32_t n_lms() override { return lms; }
    int64_t peer_timeout_ms() override { return peer_timeout; }
    int64_t deadlock_timeout_ms() override { return 1000; }
    bool deliver_grant(uint32_t, uint64_t request_id, uint64_t, const LockValue&) override {
        if (waiting.erase(request_id) == 0) return false;
        granted.insert(request_id);
        return true;
    }
    bool deliver_denial(uint32_t, uint64_t request_id, DenyReason) override {
        return waiting.erase(request_id) != 0;
    }
    bool owner_alive(uint32_t, uint64_t) override { return true; }
    void log(WorkerLogLevel, std::string text) override { logs.push_back(std::move(text)); }
    void record_error(ErrorType type, Severity, int peer, const std::string& text) override {
        errors.push_back({type, peer, text});
    }
    void count(WorkerCounter c) override { counters[c]++; }
};

struct Node {
    uint16_t id;
    NodeHost host;
    std::vector<std::vector<uint64_t>> mirror_memory;
    std::vector<std::unique_ptr<Worker>> workers;

    Node(uint16_t node, uint32_t n_lms) : id(node), mirror_memory(n_lms) {
        host.lms = n_lms;
        for (uint32_t w = 0; w < n_lms; w++) {
            mirror_memory[w].resize(RegistryMirror::bytes_for(64) / 8 + 1);
            workers.push_back(std::make_unique<Worker>(
                host, w, node, RegistryMirror::create(mirror_memory[w].data(), 64)));
        }
    }
};

// Nodes with their own worker counts; messages go to worker
// route_key % (the receiver's count), per-pair FIFO, as the listener routes them.
class Cluster {
  public:
    explicit Cluster(const std::vector<uint32_t>& workers_per_node) {
        for (size_t i = 0; i < workers_per_node.size(); i++)
            nodes_.push_back(
                std::make_unique<Node>(static_cast<uint16_t>(i + 1), workers_per_node[i]));
    }

    Node& node(uint16_t id) { return *nodes_.at(id - 1); }
    NodeHost& host(uint16_t id) { return node(id).host; }
    Worker& worker(uint16_t id, uint32_t w) { return *node(id).workers.at(w); }
    std::set<uint16_t> held;  // messages to or from these nodes stay queued

    void set_view(uint16_t id, uint32_t epoch, const std::vector<uint16_t>& members) {
        host(id).view.epoch = epoch;
        host(id).view.members = nodes_mask(members);
    }
    void commit(uint32_t epoch, const std::vector<uint16_t>& members) {
        for (auto& n : nodes_) set_view(n->id, epoch, members);
        tick_all();
    }
    void advance_ms(int64_t ms) {
        now_us_ += ms * 1000;
        for (auto& n : nodes_) n->host.now_ms += static_cast<uint64_t>(ms);
    }
    void tick_all() {
        for (auto& n : nodes_)
            for (auto& w : n->workers) w->tick(now_us_);
        pump();
    }

    uint64_t request(uint16_t id, uint32_t proc, const ResourceName& r, LockMode mode) {
        const uint64_t rid = (static_cast<uint64_t>(proc) << 40) | (uint64_t{1} << 32) | ++counter_;
        GesMessage m;
        m.type = GesMsgType::Request;
        m.owner = Owner{id, proc};
        m.resource = r;
        m.mode = mode;
        m.request_id = rid;
        host(id).waiting.insert(rid);
        deliver(id, WorkerRole::Client, id, route_key_for(r), encode(m));
        pump();
        return rid;
    }
    bool granted(uint16_t id, uint64_t rid) { return host(id).granted.count(rid) != 0; }

    // Hands a body to the worker the listener would pick.
    void deliver(uint16_t to, WorkerRole role, uint16_t src, uint32_t route_key,
                 const std::vector<uint8_t>& body) {
        Node& n = node(to);
        n.workers[route_key % n.workers.size()]->handle(role, src, body.data(), body.size(),
                                                        now_us_);
    }
    static std::vector<uint8_t> encode(const GesMessage& m) {
        std::vector<uint8_t> body;
        EXPECT_EQ(encode_ges_message(m, &body), GesWireError::None);
        return body;
    }

    // Drops queued messages that `drop` selects (a lost batch, say).
    template <typename Pred>
    void drop_queued(uint16_t from, Pred drop) {
        std::deque<NodeHost::Sent>& q = host(from).sent;
        for (auto it = q.begin(); it != q.end();) it = drop(*it) ? q.erase(it) : std::next(it);
    }

    void pump() {
        for (int round = 0; round < 100000; round++) {
            bool moved = false;
            for (auto& n : nodes_) {
                std::deque<NodeHost::Sent>& q = n->host.sent;
                for (size_t i = 0; i < q.size(); i++) {
                    if (held.count(n->id) || held.count(q[i].node)) continue;
                    NodeHost::Sent s = std::move(q[i]);
                    q.erase(q.begin() + static_cast<long>(i));
                    if (s.node >= 1 && s.node <= nodes_.size())
                        deliver(s.node, role_of(s.channel), n->id, s.route_key, s.body);
                    moved = true;
                    break;
                }
            }
            if (!moved) return;
        }
    }

    bool replaying(uint16_t id) {
        for (auto& w : node(id).workers)
            if (w->replaying()) return true;
        return false;
    }
    uint64_t counter(WorkerCounter c) {
        uint64_t sum = 0;
        for (auto& n : nodes_) sum += n->host.counters[c];
        return sum;
    }
    // No table anywhere holds two conflicting grants of one resource.
    bool tables_consistent() {
        for (auto& n : nodes_)
            for (auto& w : n->workers) {
                std::map<std::string, std::vector<LockMode>> granted;
                for (const LockRow& row : w->snapshot())
                    if (row.state != LockState::Waiting)
                        granted[row.resource].push_back(
                            row.state == LockState::Converting ? row.held_mode : row.mode);
                for (auto& [r, modes] : granted)
                    for (size_t i = 0; i < modes.size(); i++)
                        for (size_t j = i + 1; j < modes.size(); j++)
                            if (!modes_compatible(modes[i], modes[j])) return false;
            }
        return true;
    }

    int64_t now() const { return now_us_; }

  private:
    static WorkerRole role_of(GesChannel c) {
        return c == GesChannel::Master  ? WorkerRole::Master
               : c == GesChannel::Reply ? WorkerRole::Reply
                                        : WorkerRole::Deadlock;
    }
    std::vector<std::unique_ptr<Node>> nodes_;
    int64_t now_us_ = 1'700'000'000'000'000;
    uint32_t counter_ = 0;
};

// A resource mastered by `master` among `members` whose shard is `shard` of `n_lms`.
ResourceName resource(uint16_t master, const std::vector<uint16_t>& members, uint32_t shard,
                      uint32_t n_lms, const std::string& prefix = "r") {
    for (int i = 0;; i++) {
        ResourceName r = *ResourceName::from_text(prefix + std::to_string(i));
        if (master_for(r, members) == master && worker_for(r, n_lms) == shard) return r;
    }
}

}  // namespace

TEST(GesReplayBarrier, TwoWorkersPerNodeEveryShardCompletesWithoutAReplayConflict) {
    Cluster c({2, 2, 2});
    c.commit(10, {1, 2, 3});
    for (uint16_t n = 1; n <= 3; n++) EXPECT_FALSE(c.replaying(n)) << "node " << n;
    // A holder on every master's every shard, and a waiter behind it.
    struct Wait {
        uint16_t holder, waiter;
        uint64_t rid;
    };
    std::vector<Wait> waits;
    for (uint16_t m = 1; m <= 3; m++)
        for (uint32_t w = 0; w < 2; w++) {
            const ResourceName r = resource(m, {1, 2, 3}, w, 2, "s" + std::to_string(m));
            const uint16_t holder = static_cast<uint16_t>(m % 3 + 1);
            ASSERT_TRUE(c.granted(holder, c.request(holder, 10 + m, r, LockMode::EX)));
            const uint16_t waiter = static_cast<uint16_t>(holder % 3 + 1);
            const uint64_t rid = c.request(waiter, 20 + m, r, LockMode::EX);
            EXPECT_FALSE(c.granted(waiter, rid));
            waits.push_back({holder, waiter, rid});
        }
    // The same members again: every table is rebuilt from the registries.
    c.commit(11, {1, 2, 3});
    for (uint16_t n = 1; n <= 3; n++) {
        EXPECT_FALSE(c.replaying(n)) << "every shard's barrier completed on node " << n;
        EXPECT_EQ(c.host(n).errors_of(ErrorType::ConfigMismatch), 0u);
    }
    EXPECT_EQ(c.counter(WorkerCounter::ReplayConflicts), 0u);
    EXPECT_TRUE(c.tables_consistent());
    for (uint16_t n = 1; n <= 3; n++) EXPECT_TRUE(c.host(n).granted.size() == 2) << n;
    // Node 3 leaves: its holds vanish, and the waiters behind them are granted.
    c.commit(12, {1, 2});
    EXPECT_FALSE(c.replaying(1));
    EXPECT_FALSE(c.replaying(2));
    EXPECT_EQ(c.counter(WorkerCounter::ReplayConflicts), 0u);
    EXPECT_TRUE(c.tables_consistent());
    for (const Wait& w : waits)
        if (w.waiter != 3) {
            EXPECT_EQ(c.granted(w.waiter, w.rid), w.holder == 3) << w.waiter;
        }
    EXPECT_EQ(c.host(1).epoch_requests + c.host(2).epoch_requests, 0u);
}

// cluster.lms_workers 2 / 2 / 1 (issue 25): node 3's one worker got both
// workers' markers of node 1 and ended its barrier on the first, before the
// other worker's locks arrived, and granted them again. Now every marker
// names its worker and its node's worker count: each side refuses the other
// by name, no barrier that includes node 3 completes, nothing is granted, and
// within the bound each stuck worker asks for a new epoch. Without node 3
// (the handshake refuses it), both shards complete again.
TEST(GesReplayBarrier, UnequalWorkerCountsAreRefusedByNameAndNothingIsGrantedTwice) {
    Cluster c({2, 2, 1});
    c.commit(10, {1, 2});
    // Locks that node 3 will master in {1,2,3}, one in each shard of nodes 1 and 2.
    const ResourceName a = resource(3, {1, 2, 3}, 1, 2, "a");
    const ResourceName b = resource(3, {1, 2, 3}, 0, 2, "b");
    ASSERT_TRUE(c.granted(1, c.request(1, 10, a, LockMode::EX)));
    ASSERT_TRUE(c.granted(2, c.request(2, 20, b, LockMode::EX)));

    c.commit(11, {1, 2, 3});
    EXPECT_TRUE(c.worker(3, 0).replaying());
    EXPECT_TRUE(c.worker(1, 0).replaying());
    EXPECT_TRUE(c.worker(1, 1).replaying());
    EXPECT_GE(c.host(3).errors_of(ErrorType::ConfigMismatch), 2u);
    EXPECT_TRUE(c.host(3).logged("config_mismatch: cluster.lms_workers is 1 here, 2 on node 1"));
    EXPECT_TRUE(c.host(1).logged("config_mismatch: cluster.lms_workers is 2 here, 1 on node 3"));
    const uint64_t xa = c.request(3, 30, a, LockMode::EX);
    const uint64_t xb = c.request(3, 31, b, LockMode::EX);
    EXPECT_FALSE(c.granted(3, xa)) << "node 1 still holds it";
    EXPECT_FALSE(c.granted(3, xb)) << "node 2 still holds it";
    EXPECT_EQ(c.counter(WorkerCounter::ReplayConflicts), 0u);
    EXPECT_TRUE(c.tables_consistent());

    // Within the bound, each stuck barrier asks for a new epoch, naming node 3.
    const int64_t bound = c.worker(1, 0).replay_barrier_bound_ms();
    EXPECT_EQ(bound, 2 * c.host(1).peer_timeout);
    c.advance_ms(bound);
    c.tick_all();
    EXPECT_EQ(c.host(1).errors_of(ErrorType::BarrierOverdue), 2u) << "one per LMS worker";
    EXPECT_EQ(c.host(1).epoch_requests, 2u);
    EXPECT_EQ(c.host(3).errors_of(ErrorType::BarrierOverdue), 1u);
    EXPECT_TRUE(
        c.host(1).logged("node 3: refused, config_mismatch: cluster.lms_workers is 2 "
                         "here, 1 on node 3"));
    EXPECT_TRUE(c.host(1).logged("node 3: no marker arrived"));  // LMS 1: node 3 has none
    EXPECT_FALSE(c.granted(3, xa));
    EXPECT_FALSE(c.granted(3, xb));

    // Node 3 left: both shards of nodes 1 and 2 complete, the holders kept their locks.
    c.commit(12, {1, 2});
    for (uint16_t n : {1, 2})
        for (uint32_t w = 0; w < 2; w++) EXPECT_FALSE(c.worker(n, w).replaying()) << n << "/" << w;
    EXPECT_TRUE(c.granted(2, c.request(2, 21, a, LockMode::NL)));
    EXPECT_FALSE(c.granted(2, c.request(2, 22, a, LockMode::EX)));
    EXPECT_EQ(c.counter(WorkerCounter::ReplayConflicts), 0u);
    EXPECT_TRUE(c.tables_consistent());
}

// A member that never sends its marker: the barrier keeps waiting (nothing
// is served early) but within 2 x peer_timeout asks for a new epoch, with a
// barrier_overdue error naming the node; once per bound, however often it
// ticks; a completed barrier starts the count again.
TEST(GesReplayBarrier, AMissingMarkerEndsWithinTheBoundWithBarrierOverdueAndANewEpoch) {
    Cluster c({1, 1, 1});
    c.commit(10, {1, 2, 3});
    const ResourceName r = resource(1, {1, 2, 3}, 0, 1);
    c.held = {3};
    c.commit(11, {1, 2, 3});
    ASSERT_TRUE(c.replaying(1));
    const uint64_t x = c.request(1, 10, r, LockMode::EX);
    const int64_t bound = c.worker(1, 0).replay_barrier_bound_ms();

    c.advance_ms(bound - 1);
    c.tick_all();
    EXPECT_EQ(c.host(1).errors_of(ErrorType::BarrierOverdue), 0u);
    EXPECT_EQ(c.host(1).epoch_requests, 0u);
    EXPECT_TRUE(c.host(1).logged("still waits for the replay of node(s) {3}"));
    c.advance_ms(1);
    c.tick_all();
    ASSERT_EQ(c.host(1).errors_of(ErrorType::BarrierOverdue), 1u);
    EXPECT_EQ(c.host(1).errors.back().peer, 3);
    EXPECT_NE(c.host(1).errors.back().text.find("node 3: no marker arrived"), std::string::npos)
        << c.host(1).errors.back().text;
    EXPECT_EQ(c.host(1).epoch_requests, 1u);
    EXPECT_EQ(c.host(2).epoch_requests, 1u);
    EXPECT_TRUE(c.host(1).withheld.empty()) << "the first time, a new epoch only";
    EXPECT_FALSE(c.granted(1, x)) << "overdue is not complete: nothing is served";

    for (int i = 0; i < 50; i++) c.tick_all();  // no spin
    EXPECT_EQ(c.host(1).epoch_requests, 1u);
    c.advance_ms(bound - 1);
    c.tick_all();
    EXPECT_EQ(c.host(1).epoch_requests, 1u);
    c.advance_ms(1);
    c.tick_all();
    EXPECT_EQ(c.host(1).epoch_requests, 2u) << "the same epoch asks again after another bound";
    EXPECT_TRUE(c.host(1).logged("attempt 2"));
    // The second time membership decides: no more lease echoes to node 3 here
    // (for three bounds); where a majority does so, node 3 fences and rejoins.
    ASSERT_EQ(c.host(1).withheld.size(), 1u);
    EXPECT_EQ(c.host(1).withheld[0], std::make_pair(uint16_t{3}, uint64_t(3 * bound)));
    EXPECT_TRUE(c.host(1).logged("withholding lease echoes from the node(s) above"));

    // The new epoch comes; node 3 reports; the barrier ends and serves.
    c.held.clear();
    c.commit(12, {1, 2, 3});
    EXPECT_FALSE(c.replaying(1));
    EXPECT_TRUE(c.granted(1, x));
    c.advance_ms(3 * bound);
    c.tick_all();
    EXPECT_EQ(c.host(1).epoch_requests, 2u);
}

// cluster.witness_nodes set on node 2 only: node 2 maps node 3's resources
// to itself. Its marker says so, every other node refuses it (and node 2
// refuses theirs), so no master grants from a table the others do not share.
TEST(GesReplayBarrier, WitnessSettingsThatDifferAreRefusedAndNoNodeGrantsAsTheWrongMaster) {
    Cluster c({1, 1, 1});
    c.host(2).witness = node_bit(3);
    c.commit(10, {1, 2, 3});
    ResourceName r;
    for (int i = 0;; i++) {
        r = *ResourceName::from_text("w" + std::to_string(i));
        if (master_for(r, {1, 2, 3}) == 3 && master_for(r, {1, 2}) == 2) break;
    }
    for (uint16_t n = 1; n <= 3; n++) {
        EXPECT_TRUE(c.replaying(n)) << n;
        EXPECT_GE(c.host(n).errors_of(ErrorType::ConfigMismatch), 1u) << n;
    }
    EXPECT_TRUE(
        c.host(2).logged("config_mismatch: cluster.witness_nodes is {3} here, {} on node 1"));
    EXPECT_TRUE(
        c.host(3).logged("config_mismatch: cluster.witness_nodes is {} here, {3} on node 2"));
    const uint64_t on2 = c.request(2, 20, r, LockMode::EX);  // node 2 believes it masters r
    const uint64_t on1 = c.request(1, 10, r, LockMode::EX);  // node 1 sends it to node 3
    EXPECT_FALSE(c.granted(2, on2));
    EXPECT_FALSE(c.granted(1, on1));
    c.advance_ms(c.worker(1, 0).replay_barrier_bound_ms());
    c.tick_all();
    for (uint16_t n = 1; n <= 3; n++) {
        EXPECT_EQ(c.host(n).errors_of(ErrorType::BarrierOverdue), 1u) << n;
        EXPECT_EQ(c.host(n).epoch_requests, 1u) << n;
    }
    EXPECT_TRUE(
        c.host(1).logged("node 2: refused, config_mismatch: cluster.witness_nodes is {} "
                         "here, {3} on node 2"));
    EXPECT_FALSE(c.granted(2, on2));
    EXPECT_FALSE(c.granted(1, on1));
}

// The other way round: node 3 alone believes it is a witness. It masters
// nothing in its own view, and the others refuse its marker.
TEST(GesReplayBarrier, ANodeThatAloneBelievesItIsAWitnessIsRefused) {
    Cluster c({1, 1, 1});
    c.host(3).witness = node_bit(3);
    c.commit(10, {1, 2, 3});
    EXPECT_FALSE(c.replaying(3)) << "a witness masters nothing";
    EXPECT_TRUE(c.replaying(1));
    EXPECT_TRUE(c.replaying(2));
    EXPECT_TRUE(
        c.host(1).logged("config_mismatch: cluster.witness_nodes is {} here, {3} on node 3"));
    EXPECT_GE(c.host(3).errors_of(ErrorType::ConfigMismatch), 2u) << "it hears of it too";
    const ResourceName r = resource(3, {1, 2, 3}, 0, 1);
    const uint64_t on1 = c.request(1, 10, r, LockMode::EX);
    const uint64_t on3 = c.request(3, 30, r, LockMode::EX);
    EXPECT_FALSE(c.granted(1, on1));
    EXPECT_FALSE(c.granted(3, on3));
}

// A replay batch lost on the way (a session reset) while its marker arrives:
// the marker says how many entries were sent, so the barrier stays open
// rather than serve a table without them.
TEST(GesReplayBarrier, ALostReplayBatchKeepsTheBarrierOpen) {
    Cluster c({1, 1});
    c.commit(10, {1, 2});
    const ResourceName r = resource(1, {1, 2}, 0, 1);
    const uint64_t h = c.request(2, 20, r, LockMode::EX);
    ASSERT_TRUE(c.granted(2, h));
    c.held = {2};
    c.commit(11, {1, 2});
    c.drop_queued(2, [](const NodeHost::Sent& s) {
        GesMessage m;
        return decode_ges_message(s.body.data(), s.body.size(), &m) == GesWireError::None &&
               m.type == GesMsgType::Replay;
    });
    c.held.clear();
    c.pump();
    EXPECT_TRUE(c.replaying(1));
    EXPECT_TRUE(c.host(1).logged("the replay of node 2 is incomplete: 0 of the 1 entries"));
    const uint64_t x = c.request(1, 10, r, LockMode::EX);
    EXPECT_FALSE(c.granted(1, x)) << "node 2 still holds it";
    c.advance_ms(c.worker(1, 0).replay_barrier_bound_ms());
    c.tick_all();
    EXPECT_EQ(c.host(1).errors_of(ErrorType::BarrierOverdue), 1u);
    EXPECT_TRUE(c.host(1).logged("node 2: refused, 0 of the 1 entries it replayed arrived"));
    c.commit(12, {1, 2});
    EXPECT_FALSE(c.replaying(1));
    EXPECT_FALSE(c.granted(1, x));
    EXPECT_TRUE(c.tables_consistent());
}

// A message of an epoch this node never adopts is dropped and counted (and
// in the errors view as future_epoch): when its epoch is passed over, and
// when it waited peer_timeout for an epoch that never comes. One that is
// merely early is served once its epoch is adopted, and not counted.
TEST(GesReplayBarrier, AFutureEpochMessageIsCountedWhenItIsDropped) {
    Cluster c({1, 1});
    c.commit(10, {1, 2});
    const ResourceName r = resource(1, {1, 2}, 0, 1);

    // Early: node 2 adopts 11 first; node 1 keeps its messages until it does.
    c.set_view(2, 11, {1, 2});
    c.tick_all();
    const uint64_t early = c.request(2, 20, r, LockMode::EX);
    c.set_view(1, 11, {1, 2});
    c.tick_all();
    EXPECT_TRUE(c.granted(2, early));
    EXPECT_EQ(c.host(1).future_messages, 0u);
    EXPECT_EQ(c.host(1).errors_of(ErrorType::FutureEpoch), 0u);

    // An epoch that never comes (a peer that makes one up): kept peer_timeout, then dropped.
    GesMessage m;
    m.type = GesMsgType::Request;
    m.epoch = 4000000000u;
    m.owner = Owner{2, 21};
    m.resource = resource(1, {1, 2}, 0, 1, "f");
    m.mode = LockMode::EX;
    m.request_id = (uint64_t{21} << 40) | 1;
    c.deliver(1, WorkerRole::Master, 2, route_key_for(m.resource), Cluster::encode(m));
    EXPECT_EQ(c.host(1).future_messages, 0u) << "kept for now";
    c.advance_ms(c.host(1).peer_timeout + 1);
    c.tick_all();
    EXPECT_EQ(c.host(1).future_messages, 1u);
    ASSERT_EQ(c.host(1).errors_of(ErrorType::FutureEpoch), 1u);
    EXPECT_EQ(c.host(1).errors.back().peer, 2);
    EXPECT_NE(c.host(1).errors.back().text.find("request of epoch 4000000000 from node 2 dropped"),
              std::string::npos)
        << c.host(1).errors.back().text;
    EXPECT_TRUE(c.worker(1, 0).snapshot().size() == 1) << "only the early request's lock";

    // Passed over: node 2 sends in epoch 12, node 1 goes from 11 straight to 13.
    c.set_view(2, 12, {1, 2});
    c.tick_all();
    const uint64_t late = c.request(2, 22, resource(1, {1, 2}, 0, 1, "p"), LockMode::EX);
    c.commit(13, {1, 2});
    // The request, and node 2's replay and marker of epoch 12.
    EXPECT_EQ(c.host(1).future_messages, 4u);
    EXPECT_EQ(c.host(1).errors_of(ErrorType::FutureEpoch), 4u);
    EXPECT_TRUE(c.granted(2, late)) << "the replay of epoch 13 carried the request";
}

// A member replays once per epoch, and its marker ends its replay: a batch
// after it (a replay to a serving table) is refused, and the table is as it was.
TEST(GesReplayBarrier, AReplayAfterTheSendersMarkerIsRefused) {
    Cluster c({1, 1});
    c.commit(10, {1, 2});
    const ResourceName r = resource(1, {1, 2}, 0, 1);
    ASSERT_TRUE(c.granted(1, c.request(1, 10, r, LockMode::EX)));
    ASSERT_FALSE(c.replaying(1));
    ReplayEntry e;
    e.owner = Owner{2, 20};
    e.resource = r;
    e.state = LockState::Granted;
    e.granted_mode = e.requested_mode = LockMode::EX;
    e.request_id = (uint64_t{20} << 40) | 1;
    e.token = 1;
    GesMessage m;
    m.type = GesMsgType::Replay;
    m.epoch = 10;
    m.entries = {e};
    c.deliver(1, WorkerRole::Master, 2, 0, Cluster::encode(m));
    EXPECT_EQ(c.host(1).counters[WorkerCounter::WrongSourceRefused], 1u);
    EXPECT_TRUE(c.host(1).logged("refused: it came after the sender's replay marker"));
    EXPECT_EQ(c.worker(1, 0).snapshot().size(), 1u);
    EXPECT_EQ(c.counter(WorkerCounter::ReplayConflicts), 0u);
}

// Node 1 has one LMS worker, node 2 two: node 1's worker replays the locks of
// both of node 2's shards to node 2's worker 0, which takes none of another
// shard's (and refuses node 1's marker by name).
TEST(GesReplayBarrier, AReplayedLockOfAnotherShardIsRefused) {
    Cluster c({1, 2});
    c.commit(10, {1});
    const ResourceName r = resource(2, {1, 2}, 1, 2);
    ASSERT_TRUE(c.granted(1, c.request(1, 10, r, LockMode::EX)));
    c.commit(11, {1, 2});
    EXPECT_TRUE(c.host(2).logged("refused: a replayed lock is of another LMS worker's shard"));
    EXPECT_TRUE(c.worker(2, 0).snapshot().empty());
    EXPECT_TRUE(c.worker(2, 1).snapshot().empty());
    EXPECT_TRUE(c.worker(2, 0).replaying());
    EXPECT_TRUE(c.worker(2, 1).replaying());
    const uint64_t x = c.request(2, 20, r, LockMode::EX);
    EXPECT_FALSE(c.granted(2, x)) << "node 1 holds it";
}
