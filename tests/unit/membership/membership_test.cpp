// Membership (ic/membership/membership.hpp): a deterministic discrete-event simulation of
// N nodes, each a Membership over its own MembershipShared, wired the way the
// engine wires them (ic/engine/links.cpp: heartbeat pings with gossip, pongs that
// echo the ping's send time and flag our accepted view, a tick every 100 ms and
// after every frame, pings to all at once when the gossip changed). One clock,
// message delays (in order per pair), partitions both ways or one way, frozen
// nodes, restarts of the host process (shared memory kept) and of the host
// (new shared memory). After every event the safety invariants are checked:
//  * uniqueness: one epoch names one member set, on every node;
//  * lease safety: when a view is committed, every node it leaves out has an
//    expired lease; and no node holds a valid lease while a view that leaves it
//    out is committed anywhere in a newer epoch than its own committed view;
//  * views are first committed in epoch order, and no node's epoch goes back.
// Then the gossip codec.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "ic/membership/membership.hpp"

using namespace pgrac::ic;

namespace pgrac::ic {
void PrintTo(const View& v, std::ostream* os) {
    *os << "epoch " << v.epoch << " " << mask_text(v.members);
}
}  // namespace pgrac::ic

namespace {

constexpr int64_t kMs = 1000;
constexpr int64_t kSec = 1000 * kMs;
constexpr int64_t kStartUs = 10 * kSec;  // monotonic clocks do not start at 0

int64_t g_unix_now_us = 0;
int64_t sim_unix_clock() {
    return g_unix_now_us;
}

NodeMask first_nodes(int n) {
    return (NodeMask{1} << n) - 1;
}

// A heartbeat frame in flight.
struct Frame {
    uint16_t from = 0;
    uint16_t to = 0;
    uint64_t to_incarnation = 0;  // frames to an incarnation that restarted are lost
    uint64_t from_instance = 0;   // the sender's instance (its shared memory)
    uint64_t from_location = 0;   // ... and where it runs
    int from_slot = 0;            // sender and receiver in the simulator (a second
    int to_slot = 0;              // instance of an id has a slot of its own)
    bool pong = false;
    int64_t ping_sent_us = 0;  // the ping's send time; a pong echoes it
    std::vector<uint8_t> gossip;
};

struct SimNode {
    uint16_t id = 0;
    std::unique_ptr<MembershipShared> shm;
    std::unique_ptr<Membership> m;
    uint64_t incarnation = 0;
    uint64_t instance = 0;      // changes with the shared memory (restart())
    int peer_timeout_ms = 0;    // 0: SimOptions::peer_timeout_ms
    uint32_t told_file_ms = 0;  // what the data directory's timing file holds
    bool frozen = false;        // stopped: receives (buffers), sends and ticks nothing
    bool down = false;          // crashed: frames to it are lost
    int64_t frozen_at_us = 0;
    int64_t next_timer_us = 0;
    int64_t next_heartbeat_us = 0;
    std::vector<Frame> held;  // frames that arrived while frozen
    uint32_t last_epoch = 0;  // committed epoch seen last (this incarnation)
    int slot = 0;             // index in the simulator + 1 (the id, but for a second instance)
    uint64_t location = 0;    // where it runs (the id, but for a second instance elsewhere)
    int heartbeat_ms = 0;     // 0: SimOptions::heartbeat_ms
};

// The safety invariants, checked after every event.
class SafetyMonitor {
  public:
    void check(const std::vector<SimNode>& nodes, int64_t now_us,
               const std::function<std::string()>& trace) {
        const uint64_t now_ms = static_cast<uint64_t>(now_us) / 1000;
        for (const SimNode& n : nodes) {
            if (n.down) continue;
            const View c = committed_view(n.shm.get());
            if (c.epoch < n.last_epoch)
                fail(trace, "node " + std::to_string(n.id) + " went back from epoch " +
                                std::to_string(n.last_epoch) + " to " + std::to_string(c.epoch));
            if (c.epoch == 0) continue;
            // One instance per id and epoch (a node commits only a view it voted for).
            if (has_node(c.members, n.id)) {
                auto [at, afirst] = instances_.emplace(std::make_pair(c.epoch, n.id), n.instance);
                if (!afirst && at->second != n.instance)
                    fail(trace, "epoch " + std::to_string(c.epoch) + " committed by instances " +
                                    std::to_string(at->second) + " and " +
                                    std::to_string(n.instance) + " of node " +
                                    std::to_string(n.id));
            }
            auto [it, first] = committed_.emplace(c.epoch, c.members);
            auto [bt, bfirst] = bindings_.emplace(c.epoch, c.binding);
            if (!bfirst && bt->second != c.binding)
                fail(trace, "epoch " + std::to_string(c.epoch) + " committed with two bindings");
            if (!first && it->second != c.members)
                fail(trace, "epoch " + std::to_string(c.epoch) + " committed as " +
                                mask_text(it->second) + " and as " + mask_text(c.members) +
                                " (node " + std::to_string(n.id) + ")");
            if (!first) continue;
            if (committed_.rbegin()->first != c.epoch)
                fail(trace, "node " + std::to_string(n.id) + " committed epoch " +
                                std::to_string(c.epoch) + " after epoch " +
                                std::to_string(committed_.rbegin()->first) + " was committed");
            // A new view: every node it leaves out has lost its lease by now.
            for (const SimNode& k : nodes) {
                if (k.down || has_node(c.members, k.id)) continue;
                const uint64_t w = lease_word(k.shm.get());
                if (lease_valid(w, now_ms))
                    fail(trace, "node " + std::to_string(n.id) + " committed epoch " +
                                    std::to_string(c.epoch) + " " + mask_text(c.members) +
                                    " while node " + std::to_string(k.id) +
                                    " holds a lease until " + std::to_string(lease_expiry_ms(w)) +
                                    " ms (now " + std::to_string(now_ms) + ")");
            }
        }
        for (const SimNode& k : nodes) {
            if (k.down || !lease_valid(lease_word(k.shm.get()), now_ms)) continue;
            const View c = committed_view(k.shm.get());
            const std::string who = "node " + std::to_string(k.id);
            if (k.m->state() != MemberState::Member)
                fail(trace, who + " holds a lease in state " + member_state_name(k.m->state()));
            if (!has_node(c.members, k.id))
                fail(trace, who + " holds a lease outside its view " + mask_text(c.members));
            for (auto it = committed_.upper_bound(c.epoch); it != committed_.end(); ++it) {
                if (!has_node(it->second, k.id))
                    fail(trace, who + " holds a lease in epoch " + std::to_string(c.epoch) +
                                    " while epoch " + std::to_string(it->first) + " " +
                                    mask_text(it->second) + " is committed without it");
                // ... or with another instance of its id.
                const auto other = instances_.find(std::make_pair(it->first, k.id));
                if (other != instances_.end() && other->second != k.instance)
                    fail(trace, who + " (instance " + std::to_string(k.instance) +
                                    ") holds a lease in epoch " + std::to_string(c.epoch) +
                                    " while epoch " + std::to_string(it->first) + " " +
                                    mask_text(it->second) + " is committed with instance " +
                                    std::to_string(other->second) + " of node " +
                                    std::to_string(k.id));
            }
        }
    }

    const std::map<uint32_t, NodeMask>& committed() const { return committed_; }
    int violations() const { return violations_; }

  private:
    void fail(const std::function<std::string()>& trace, const std::string& what) {
        if (violations_++ == 0) ADD_FAILURE() << what << "\nrecent events:\n" << trace();
    }

    std::map<uint32_t, NodeMask> committed_;                       // every view committed anywhere
    std::map<uint32_t, uint64_t> bindings_;                        // ... and its binding
    std::map<std::pair<uint32_t, uint16_t>, uint64_t> instances_;  // (epoch, id): instance
    int violations_ = 0;
};

struct SimOptions {
    int nodes = 3;
    uint64_t seed = 1;
    int64_t min_delay_us = 100;
    int64_t max_delay_us = 500;
    int heartbeat_ms = 100;
    int peer_timeout_ms = 1000;           // lease: 750 ms
    std::vector<int> node_timeouts_ms{};  // per node (index id - 1), else peer_timeout_ms
    bool reloads = false;  // soak: also reload peer_timeout on random nodes (up or down)
};
SimOptions sim(int nodes, uint64_t seed, int64_t min_delay_us = 100, int64_t max_delay_us = 500,
               int heartbeat_ms = 100, int peer_timeout_ms = 1000) {
    SimOptions o;
    o.nodes = nodes;
    o.seed = seed;
    o.min_delay_us = min_delay_us;
    o.max_delay_us = max_delay_us;
    o.heartbeat_ms = heartbeat_ms;
    o.peer_timeout_ms = peer_timeout_ms;
    return o;
}

// N nodes, one clock, a queue of events (frames, timers, scripted actions).
class Cluster {
  public:
    explicit Cluster(SimOptions opt) : opt_(opt), rng_(opt.seed), now_(kStartUs) {
        configured_ = first_nodes(opt.nodes);
        nodes_.resize(opt.nodes);
        cut_.assign(opt.nodes + 1, std::vector<bool>(opt.nodes + 1, false));
        last_arrival_.assign(opt.nodes + 1, std::vector<int64_t>(opt.nodes + 1, 0));
        for (int i = 0; i < opt.nodes; i++) {
            nodes_[i].id = static_cast<uint16_t>(i + 1);
            nodes_[i].slot = i + 1;
            nodes_[i].location = nodes_[i].id;
            start(nodes_[i]);
        }
        check();
    }

    int size() const { return static_cast<int>(nodes_.size()); }
    int64_t now_us() const { return now_; }
    NodeMask configured() const { return configured_; }
    SimNode& node(uint16_t id) { return nodes_.at(id - 1); }
    Membership& m(uint16_t id) { return *node(id).m; }
    MembershipShared* shm(uint16_t id) { return node(id).shm.get(); }
    View view(uint16_t id) { return committed_view(shm(id)); }
    MemberState state(uint16_t id) { return m(id).state(); }
    bool lease_ok(uint16_t id) { return lease_valid(lease_word(shm(id)), now_ / 1000); }
    const SafetyMonitor& monitor() const { return monitor_; }
    uint32_t max_epoch() const {
        return monitor_.committed().empty() ? 0 : monitor_.committed().rbegin()->first;
    }
    // Every view committed anywhere since epoch `after`.
    std::vector<View> views_after(uint32_t after) const {
        std::vector<View> out;
        for (auto it = monitor_.committed().upper_bound(after); it != monitor_.committed().end();
             ++it)
            out.push_back(View{it->first, 0, it->second, 0});
        return out;
    }

    // ---- faults
    void cut(uint16_t from, uint16_t to) { set_cut(from, to, true); }
    void cut_both(uint16_t a, uint16_t b) {
        set_cut(a, b, true);
        set_cut(b, a, true);
    }
    void isolate(uint16_t id) {
        for (int other = 1; other <= size(); other++)
            if (other != id) cut_both(id, static_cast<uint16_t>(other));
    }
    void heal_all() {
        for (auto& row : cut_) std::fill(row.begin(), row.end(), false);
        note("heal all links");
    }
    void heal_both(uint16_t a, uint16_t b) {
        set_cut(a, b, false);
        set_cut(b, a, false);
    }
    void freeze(uint16_t id) {
        SimNode& n = node(id);
        if (n.frozen || n.down) return;
        n.frozen = true;
        n.frozen_at_us = now_;
        note("node " + std::to_string(id) + " frozen");
    }
    void thaw(uint16_t id) {
        SimNode& n = node(id);
        if (!n.frozen) return;
        n.frozen = false;
        n.next_timer_us = now_;
        std::vector<Frame> held;
        held.swap(n.held);
        // After a long stop the peers' engines have closed the connections: the
        // buffered frames are gone. Otherwise they arrive now, in order.
        if (now_ - n.frozen_at_us < opt_.peer_timeout_ms * kMs)
            for (const Frame& f : held) push(now_, Event{Event::Kind::Frame, f, nullptr});
        note("node " + std::to_string(id) + " thawed after " +
             std::to_string((now_ - n.frozen_at_us) / kMs) + " ms");
    }
    // Crashed: no frames in or out until restart().
    void crash(uint16_t id) {
        SimNode& n = node(id);
        n.down = true;
        n.frozen = false;
        n.held.clear();
        note("node " + std::to_string(id) + " down");
    }
    // A new host with zeroed shared memory (after crash(), or at once).
    void restart(uint16_t id) {
        SimNode& n = node(id);
        n.down = false;
        n.frozen = false;
        n.held.clear();
        // The data directory's timing file (src/instance/timing_file.cpp): the largest
        // window in force when the old instance last wrote it.
        if (n.shm) {
            const MembershipShared* old = n.shm.get();
            uint32_t told = old->advertised_timeout_ms;
            if (static_cast<uint64_t>(now_ / 1000) < old->window_floor_until_ms)
                told = std::max(told, old->window_floor_ms);
            n.told_file_ms = told;
        }
        n.shm.reset();
        n.last_epoch = 0;
        start(n);
        note("node " + std::to_string(id) + " restarted with new shared memory (incarnation " +
             std::to_string(n.incarnation) + ")");
        check();
    }
    // A reload of cluster.peer_timeout on one node.
    void set_timeout(uint16_t id, int peer_timeout_ms) {
        SimNode& n = node(id);
        n.peer_timeout_ms = peer_timeout_ms;
        n.m->set_timing(heartbeat_of(n), peer_timeout_ms, now_);
        note("node " + std::to_string(id) + " peer_timeout " + std::to_string(peer_timeout_ms) +
             " ms");
    }
    // A reload of both timing settings on one node.
    void set_timing(uint16_t id, int heartbeat_ms, int peer_timeout_ms) {
        SimNode& n = node(id);
        n.heartbeat_ms = heartbeat_ms;
        n.peer_timeout_ms = peer_timeout_ms;
        n.m->set_timing(heartbeat_ms, peer_timeout_ms, now_);
        n.next_heartbeat_us = std::min(n.next_heartbeat_us, now_ + heartbeat_ms * kMs);
        note("node " + std::to_string(id) + " heartbeat_interval " + std::to_string(heartbeat_ms) +
             " ms, peer_timeout " + std::to_string(peer_timeout_ms) + " ms");
    }
    int heartbeat_of(const SimNode& n) const {
        return n.heartbeat_ms != 0 ? n.heartbeat_ms : opt_.heartbeat_ms;
    }
    // A second instance of node `id` (another shared memory, maybe another
    // place), started now with `instance` (0: newer than every instance so
    // far) at `location`. Its slot (for cut, freeze, crash, node, m, shm...)
    // is returned. Frames of each instance pass the receiver's claim_verdict;
    // a node pings the instance it admitted for the id (every instance of it
    // while it admitted none of them).
    int add_instance(uint16_t id, uint64_t instance, uint64_t location) {
        SimNode n;
        n.id = id;
        n.slot = size() + 1;
        n.location = location;
        n.peer_timeout_ms = timeout_of(node(id));
        n.heartbeat_ms = node(id).heartbeat_ms;
        n.shm = std::make_unique<MembershipShared>();
        Membership::init_shared(n.shm.get());
        n.shm->self_instance = n.instance = instance != 0 ? instance : ++instances_;
        nodes_.push_back(std::move(n));
        for (auto& row : cut_) row.push_back(false);
        cut_.emplace_back(size() + 1, false);
        for (auto& row : last_arrival_) row.push_back(0);
        last_arrival_.emplace_back(size() + 1, 0);
        start(nodes_.back());
        note("node " + std::to_string(id) + " instance " + std::to_string(nodes_.back().instance) +
             " started at location " + std::to_string(location) + " (slot " +
             std::to_string(nodes_.back().slot) + ")");
        check();
        return nodes_.back().slot;
    }
    int timeout_of(const SimNode& n) const {
        if (n.peer_timeout_ms != 0) return n.peer_timeout_ms;
        if (static_cast<size_t>(n.id) <= opt_.node_timeouts_ms.size())
            return opt_.node_timeouts_ms[n.id - 1];
        return opt_.peer_timeout_ms;
    }
    // The host process restarts; shared memory (votes, views, lease) survives.
    void restart_process(uint16_t id) {
        SimNode& n = node(id);
        n.frozen = false;
        n.held.clear();
        start(n);
        note("node " + std::to_string(id) + " host process restarted (incarnation " +
             std::to_string(n.incarnation) + ")");
        check();
    }
    // Runs `action` at time `at_us` (a scripted fault or heal).
    void at(int64_t at_us, std::function<void()> action) {
        push(at_us, Event{Event::Kind::Action, Frame{}, std::move(action)});
    }

    // ---- running
    // Runs until `done` holds (checked after every event) or `for_us` passed.
    bool run_until(const std::function<bool()>& done, int64_t for_us) {
        const int64_t end = now_ + for_us;
        if (done()) return true;
        while (step(end))
            if (done()) return true;
        now_ = end;
        return false;
    }
    void run_for(int64_t for_us) {
        run_until([] { return false; }, for_us);
    }

    // Every node of `members` a member of the view of exactly `members`, with a
    // valid lease.
    bool converged(NodeMask members) {
        View first{};
        for (uint16_t id : mask_nodes(members)) {
            SimNode& n = node(id);
            const View v = committed_view(n.shm.get());
            if (first.epoch == 0) first = v;
            if (n.down || v != first || v.members != members ||
                n.m->state() != MemberState::Member || !lease_ok(n.id))
                return false;
        }
        return first.epoch != 0;
    }
    bool converged() { return converged(configured_); }

    // History events of a node, oldest first ("committed", "fenced", ...).
    std::vector<std::string> history(uint16_t id) {
        MembershipRecord recs[kHistoryLen];
        const size_t n = membership_history(shm(id), recs, kHistoryLen);
        std::vector<std::string> out;
        for (size_t i = n; i > 0; i--)
            out.push_back(membership_event_name(static_cast<MembershipEvent>(recs[i - 1].event)));
        return out;
    }
    bool has_history(uint16_t id, const std::string& event) {
        const std::vector<std::string> h = history(id);
        return std::find(h.begin(), h.end(), event) != h.end();
    }

    // Each node's state, for a failure message.
    std::string dump() {
        std::string s;
        for (SimNode& n : nodes_) {
            const Gossip g = n.m->gossip();
            s += "  node " + std::to_string(n.id) + " instance " + std::to_string(n.instance) +
                 " " + member_state_name(n.m->state()) + " committed " +
                 std::to_string(g.committed.epoch) + mask_text(g.committed.members) + " accepted " +
                 std::to_string(g.accepted.epoch) + mask_text(g.accepted.members) + " proposal " +
                 std::to_string(g.proposal.epoch) + mask_text(g.proposal.members) + " want " +
                 std::to_string(g.flags & kGossipWantEpoch) + " owners";
            for (uint16_t id = 1; id <= size(); id++) s += " " + std::to_string(n.m->owner(id));
            s += "\n";
        }
        return s;
    }

    std::string trace() const {
        std::string s;
        for (const std::string& line : trace_) s += "  " + line + "\n";
        return s;
    }

  private:
    struct Event {
        enum class Kind { Frame, Action } kind;
        Frame frame;
        std::function<void()> action;
    };
    struct Queued {
        int64_t at;
        uint64_t seq;
        size_t slot;
        bool operator>(const Queued& o) const { return at != o.at ? at > o.at : seq > o.seq; }
    };

    void start(SimNode& n) {
        if (!n.shm) {
            n.shm = std::make_unique<MembershipShared>();
            Membership::init_shared(n.shm.get());
            n.shm->advertised_timeout_ms = n.told_file_ms;
            // Instances grow with time (older < newer), as the glue's do.
            n.shm->self_instance = n.instance = ++instances_;
        }
        MembershipConfig cfg;
        cfg.self = n.id;
        cfg.configured = configured_;
        cfg.heartbeat_interval_ms = heartbeat_of(n);
        cfg.peer_timeout_ms = timeout_of(n);
        n.m = std::make_unique<Membership>(cfg, n.shm.get());
        n.m->set_unix_clock(sim_unix_clock);
        n.m->note_start(now_);  // as the engine does when it is made
        n.incarnation++;
        n.next_timer_us =
            now_ + std::uniform_int_distribution<int64_t>(0, heartbeat_of(n) * kMs)(rng_);
        n.next_heartbeat_us = n.next_timer_us;
        collect_logs(n);
    }

    void set_cut(uint16_t from, uint16_t to, bool cut) {
        cut_[from][to] = cut;
        note(std::string(cut ? "cut " : "heal ") + std::to_string(from) + "->" +
             std::to_string(to));
    }

    void push(int64_t at, Event e) {
        size_t slot;
        if (!free_.empty()) {
            slot = free_.back();
            free_.pop_back();
            slots_[slot] = std::move(e);
        } else {
            slot = slots_.size();
            slots_.push_back(std::move(e));
        }
        queue_.push(Queued{at, seq_++, slot});
    }

    // One event at or before `end`; false if there is none.
    bool step(int64_t end) {
        SimNode* timer = nullptr;
        for (SimNode& n : nodes_)
            if (!n.down && !n.frozen &&
                (timer == nullptr || n.next_timer_us < timer->next_timer_us))
                timer = &n;
        const int64_t frame_at = queue_.empty() ? INT64_MAX : queue_.top().at;
        const int64_t timer_at = timer == nullptr ? INT64_MAX : timer->next_timer_us;
        const int64_t at = std::min(frame_at, timer_at);
        if (at > end) return false;
        now_ = std::max(now_, at);
        g_unix_now_us = 1'700'000'000 * kSec + now_;
        if (frame_at <= timer_at) {
            const Queued q = queue_.top();
            queue_.pop();
            Event e = std::move(slots_[q.slot]);
            free_.push_back(q.slot);
            if (e.kind == Event::Kind::Action)
                e.action();
            else
                deliver(e.frame);
        } else {
            // Engine::run_timers: a tick every min(heartbeat, 100 ms), then
            // the heartbeats that are due.
            timer->next_timer_us = now_ + std::min(heartbeat_of(*timer), 100) * kMs;
            membership_tick(*timer);
            if (now_ >= timer->next_heartbeat_us) {
                timer->next_heartbeat_us = now_ + timer->m->ping_interval_ms() * kMs;
                ping_all(*timer);
            }
        }
        check();
        return true;
    }

    void check() {
        monitor_.check(nodes_, now_, [this] { return trace(); });
        for (SimNode& n : nodes_)
            if (!n.down) n.last_epoch = committed_view(n.shm.get()).epoch;
    }

    void send(Frame f) {
        SimNode& to = node(static_cast<uint16_t>(f.to_slot));
        if (cut_[f.from_slot][f.to_slot] || to.down) return;
        f.to_incarnation = to.incarnation;
        const int64_t delay =
            std::uniform_int_distribution<int64_t>(opt_.min_delay_us, opt_.max_delay_us)(rng_);
        // One TCP connection per pair: frames arrive in order.
        int64_t& last = last_arrival_[f.from_slot][f.to_slot];
        last = std::max(now_ + delay, last);
        push(last, Event{Event::Kind::Frame, f, nullptr});
    }

    void ping_all(SimNode& n) {
        for (uint16_t id = 1; id <= opt_.nodes; id++)
            if (id != n.id) send_ping(n, id);
    }

    // To node `to`: its only instance, or the one `n` admitted, or (none of
    // them admitted) each of them.
    void send_ping(SimNode& n, uint16_t to) {
        std::vector<int> slots;
        for (const SimNode& k : nodes_)
            if (k.id == to && k.instance == n.m->owner(to)) slots.push_back(k.slot);
        if (slots.empty() || size() == opt_.nodes) {
            slots.clear();
            for (const SimNode& k : nodes_)
                if (k.id == to) slots.push_back(k.slot);
        }
        for (int s : slots) {
            Frame f;
            f.from = n.id;
            f.to = to;
            f.from_slot = n.slot;
            f.to_slot = s;
            f.ping_sent_us = now_;
            f.from_instance = n.instance;
            f.from_location = n.location;
            f.gossip = encoded(n.m->gossip());
            send(f);
        }
    }

    void deliver(const Frame& f) {
        SimNode& n = node(static_cast<uint16_t>(f.to_slot));
        if (n.down || f.to_incarnation != n.incarnation) return;
        if (n.frozen) {
            n.held.push_back(f);
            return;
        }
        Gossip g;
        if (!decode_gossip(f.gossip.data(), f.gossip.size(), configured_, &g)) {
            ADD_FAILURE() << "node " << f.to << " cannot decode gossip from node " << f.from;
            return;
        }
        // Engine::admit: one instance per node id. The owner's lanes are up
        // while it runs (or is stopped for less than a timeout: then the
        // engine closes them), and no link between the two is cut (a
        // restarted instance took its slot: then they are down).
        if (n.m->owner(f.from) != f.from_instance) {
            std::string why;
            bool lanes_up = false;
            for (const SimNode& k : nodes_)
                lanes_up = lanes_up ||
                           (k.id == f.from && k.instance == n.m->owner(f.from) && !k.down &&
                            !(k.frozen && now_ - k.frozen_at_us >= opt_.peer_timeout_ms * kMs) &&
                            !cut_[k.slot][n.slot] && !cut_[n.slot][k.slot]);
            if (n.m->claim_verdict(f.from, f.from_instance, f.from_location, lanes_up, now_,
                                   &why) == ClaimVerdict::Refuse) {
                refusals_++;
                if (size() > opt_.nodes && refusal_noted_++ < 8)
                    note("node " + std::to_string(n.id) + " (slot " + std::to_string(n.slot) +
                         ") refuses: " + why);
                return;
            }
            if (n.m->owner(f.from) != 0 && size() > opt_.nodes)
                note("node " + std::to_string(n.id) + " (slot " + std::to_string(n.slot) +
                     ") admits instance " + std::to_string(f.from_instance) + " for node " +
                     std::to_string(f.from) + " instead of instance " +
                     std::to_string(n.m->owner(f.from)));
            n.m->set_owner(f.from, f.from_instance, f.from_location);
        }
        n.m->on_heard(f.from, now_);
        if (!f.pong) {
            n.m->on_gossip(f.from, g, now_);
            Frame r;
            r.from = n.id;
            r.to = f.from;
            r.from_slot = n.slot;
            r.to_slot = f.from_slot;
            r.from_location = n.location;
            r.pong = true;
            r.ping_sent_us = f.ping_sent_us;
            r.from_instance = n.instance;
            Gossip mine = n.m->gossip();
            if (n.m->echo_for(f.from, now_)) mine.flags |= kGossipInView;
            r.gossip = encoded(mine);
            send(r);
        } else {
            n.m->on_gossip(f.from, g, now_);
            n.m->on_echo(f.from, f.ping_sent_us, (g.flags & kGossipInView) != 0, now_);
        }
        membership_tick(n);
    }

    static std::vector<uint8_t> encoded(const Gossip& g) {
        std::vector<uint8_t> b(gossip_size(g));
        encode_gossip(g, b.data());
        return b;
    }

    // Engine::membership_tick: a changed gossip goes to every peer at once.
    void membership_tick(SimNode& n) {
        const bool changed = n.m->tick(now_);
        collect_logs(n);
        if (!changed) return;
        ping_all(n);
    }

    void collect_logs(SimNode& n) {
        for (const std::string& line : n.m->take_logs())
            note("node " + std::to_string(n.id) +
                 (n.slot != n.id ? " (slot " + std::to_string(n.slot) + ")" : std::string()) + " " +
                 line + " [" + member_state_name(n.m->state()) + "]");
    }

    void note(const std::string& what) {
        char t[32];
        snprintf(t, sizeof t, "%9.3f s ", static_cast<double>(now_ - kStartUs) / kSec);
        trace_.push_back(t + what);
        if (trace_.size() > 80) trace_.pop_front();
    }

    SimOptions opt_;
    std::mt19937_64 rng_;
    int64_t now_;
    NodeMask configured_ = 0;
    std::vector<SimNode> nodes_;
    std::vector<std::vector<bool>> cut_;              // cut_[from][to]
    std::vector<std::vector<int64_t>> last_arrival_;  // per link, for FIFO
    std::vector<Event> slots_;
    std::vector<size_t> free_;
    std::priority_queue<Queued, std::vector<Queued>, std::greater<Queued>> queue_;
    uint64_t seq_ = 0;
    SafetyMonitor monitor_;
    std::deque<std::string> trace_;
    uint64_t instances_ = 0;
    int refusal_noted_ = 0;

  public:
    uint64_t refusals_ = 0;  // frames of an instance refused by claim_verdict
};

// A cluster that formed its first full view.
std::unique_ptr<Cluster> formed(SimOptions opt) {
    auto c = std::make_unique<Cluster>(opt);
    EXPECT_TRUE(c->run_until([&] { return c->converged(); }, 3 * kSec)) << c->trace();
    return c;
}
std::unique_ptr<Cluster> formed(int n, uint64_t seed = 1) {
    return formed(sim(n, seed));
}

// ---- forming

void expect_forms_within_2s(int n) {
    Cluster c(sim(n, 7));
    ASSERT_TRUE(c.run_until([&] { return c.converged(); }, 2 * kSec)) << c.trace();
    const View v = c.view(1);
    EXPECT_EQ(v.members, first_nodes(n));
    for (uint16_t id = 1; id <= n; id++) {
        EXPECT_EQ(c.view(id), v);
        EXPECT_EQ(c.state(id), MemberState::Member);
        EXPECT_TRUE(c.lease_ok(id));
        EXPECT_TRUE(c.has_history(id, "rejoined")) << "node " << id;
    }
    // And it stays so: no epoch churns in a steady cluster.
    c.run_for(5 * kSec);
    EXPECT_TRUE(c.converged());
    EXPECT_EQ(c.view(1), v);
    EXPECT_EQ(c.monitor().violations(), 0);
}

TEST(MembershipSim, ThreeNodesFormOneViewWithinTwoSeconds) {
    expect_forms_within_2s(3);
}

TEST(MembershipSim, FiveNodesFormOneViewWithinTwoSeconds) {
    expect_forms_within_2s(5);
}

TEST(MembershipSim, OneNodeIsAMemberAtOnceWithALeaseForever) {
    Cluster c(sim(1, 1));
    c.run_for(kSec / 5);  // the first ticks
    EXPECT_EQ(c.state(1), MemberState::Member);
    EXPECT_EQ(c.view(1).epoch, 1u);
    EXPECT_EQ(c.view(1).members, node_bit(1));
    EXPECT_EQ(lease_expiry_ms(lease_word(c.shm(1))), kLeaseForever);
    c.run_for(10 * kSec);
    EXPECT_EQ(c.state(1), MemberState::Member);
    EXPECT_EQ(c.view(1).epoch, 1u);
    EXPECT_TRUE(c.lease_ok(1));
}

// ---- partitions

TEST(MembershipSim, MinorityPartitionFencesAndRejoins) {
    auto c = formed(3);
    const uint32_t e0 = c->view(1).epoch;
    c->isolate(3);
    ASSERT_TRUE(c->run_until(
        [&] {
            return c->converged(nodes_mask({1, 2})) && c->state(3) == MemberState::Fenced;
        },
        3 * kSec))
        << c->trace();
    const View split = c->view(1);
    EXPECT_GT(split.epoch, e0);
    EXPECT_EQ(c->view(2), split);
    EXPECT_TRUE(c->has_history(3, "fenced"));
    EXPECT_FALSE(c->lease_ok(3));
    // The minority commits nothing on its own.
    for (const View& v : c->views_after(e0)) EXPECT_EQ(v.members, nodes_mask({1, 2}));

    c->heal_all();
    ASSERT_TRUE(c->run_until([&] { return c->converged(); }, 3 * kSec)) << c->trace();
    EXPECT_GT(c->view(3).epoch, split.epoch);
    const std::vector<std::string> h = c->history(3);
    EXPECT_EQ(h.back(), "rejoined");
    EXPECT_EQ(c->monitor().violations(), 0);
}

TEST(MembershipSim, IsolatedCoordinatorFencesAndTheOthersGoOn) {
    auto c = formed(3);
    const uint32_t e0 = c->view(1).epoch;
    c->isolate(1);
    ASSERT_TRUE(c->run_until(
        [&] {
            return c->converged(nodes_mask({2, 3})) && c->state(1) == MemberState::Fenced;
        },
        3 * kSec))
        << c->trace();
    EXPECT_GT(c->view(2).epoch, e0);
    EXPECT_TRUE(c->has_history(1, "fenced"));
    for (const View& v : c->views_after(e0)) EXPECT_EQ(v.members, nodes_mask({2, 3}));

    c->heal_all();
    ASSERT_TRUE(c->run_until([&] { return c->converged(); }, 3 * kSec)) << c->trace();
    EXPECT_EQ(c->history(1).back(), "rejoined");
    EXPECT_EQ(c->monitor().violations(), 0);
}

// 3's frames to 1 are lost; everything else flows. 2 still hears 3, so no view
// may leave 3 out, and (2 echoing everyone) every node keeps its lease.
TEST(MembershipSim, OneWayLossExcludesNobody) {
    auto c = formed(3);
    const View v0 = c->view(1);
    c->cut(3, 1);
    bool all_leases = true;
    c->run_until(
        [&] {
            for (uint16_t id = 1; id <= 3; id++)
                all_leases = all_leases && c->lease_ok(id) && c->state(id) == MemberState::Member;
            return false;
        },
        10 * kSec);
    EXPECT_TRUE(c->views_after(v0.epoch).empty());
    EXPECT_TRUE(all_leases) << c->trace();
    for (uint16_t id = 1; id <= 3; id++) {
        EXPECT_EQ(c->view(id), v0);
        EXPECT_FALSE(c->has_history(id, "fenced")) << "node " << id;
    }
    // 1 (not hearing 3) keeps proposing {1,2}, which 2 refuses while it hears
    // 3: 1's accepted epoch climbs, but nothing is committed.
    EXPECT_EQ(c->shm(2)->accepted, v0);
    EXPECT_GT(c->shm(1)->accepted.epoch, v0.epoch);
    EXPECT_EQ(c->shm(1)->accepted.members, nodes_mask({1, 2}));

    // After the heal 1's vote for {1,2} would keep its echoes from counting
    // (they count from a committed view only): a new epoch of the same members
    // is committed, and when 3 then stops, 1's echoes keep 2's lease.
    c->heal_all();
    ASSERT_TRUE(c->run_until(
        [&] {
            return c->converged() && c->shm(1)->accepted == c->view(1) &&
                   c->view(1).epoch > v0.epoch;
        },
        2 * kSec))
        << c->trace();
    EXPECT_EQ(c->view(1).members, v0.members);
    c->freeze(3);
    ASSERT_TRUE(c->run_until(
        [&] {
            return c->converged(nodes_mask({1, 2}));
        },
        3 * kSec))
        << c->trace();
    EXPECT_FALSE(c->has_history(1, "fenced"));
    EXPECT_FALSE(c->has_history(2, "fenced"));
    EXPECT_EQ(c->monitor().violations(), 0);
}

// ---- stopped and restarted nodes

TEST(MembershipSim, NodeFrozenLongerThanTheTimeoutFencesAndRejoins) {
    auto c = formed(3);
    const uint32_t e0 = c->view(1).epoch;
    c->freeze(3);
    c->run_for(2 * kSec);
    EXPECT_TRUE(c->converged(nodes_mask({1, 2})));
    const View split = c->view(1);
    EXPECT_GT(split.epoch, e0);
    // Before 3 runs a single instruction its lease has run out: it must not act.
    EXPECT_FALSE(c->lease_ok(3));
    EXPECT_EQ(c->state(3), MemberState::Member);  // it has not noticed yet
    c->thaw(3);
    ASSERT_TRUE(c->run_until([&] { return c->converged(); }, 3 * kSec)) << c->trace();
    EXPECT_TRUE(c->has_history(3, "fenced"));
    EXPECT_EQ(c->history(3).back(), "rejoined");
    EXPECT_GT(c->view(3).epoch, split.epoch);
    EXPECT_EQ(c->monitor().violations(), 0);
}

TEST(MembershipSim, NodeFrozenShorterThanTheLeaseChangesNothing) {
    auto c = formed(3);
    const View v0 = c->view(1);
    c->freeze(3);
    c->run_for(500 * kMs);
    EXPECT_TRUE(c->lease_ok(3));
    c->thaw(3);
    c->run_for(3 * kSec);
    EXPECT_TRUE(c->converged());
    EXPECT_TRUE(c->views_after(v0.epoch).empty());
    for (uint16_t id = 1; id <= 3; id++) EXPECT_FALSE(c->has_history(id, "fenced"));
    EXPECT_EQ(c->monitor().violations(), 0);
}

// Between the lease (750 ms) and the peer timeout (1 s): the others keep the
// view, the node fences on waking and needs a new epoch although it voted for
// the committed one.
TEST(MembershipSim, NodeFrozenBetweenLeaseAndTimeoutRejoinsInANewEpoch) {
    auto c = formed(3);
    const View v0 = c->view(1);
    c->freeze(3);
    c->run_for(900 * kMs);
    EXPECT_FALSE(c->lease_ok(3));
    c->thaw(3);
    ASSERT_TRUE(
        c->run_until([&] { return c->converged() && c->view(3).epoch > v0.epoch; }, 2 * kSec))
        << c->trace();
    EXPECT_TRUE(c->has_history(3, "fenced"));
    EXPECT_EQ(c->history(3).back(), "rejoined");
    for (const View& v : c->views_after(v0.epoch)) EXPECT_EQ(v.members, v0.members);
    EXPECT_EQ(c->monitor().violations(), 0);
}

// A restarted host process has lost when it last heard each peer. 1 no longer
// hears 3 (one way) and proposes {1,2}; 2 heard 3 a moment before its restart,
// so 3's lease may rest on 2's echoes: 2 must not vote 3 out at once.
TEST(MembershipSim, HostProcessRestartVotesOutNobodyItMayHaveJustHeard) {
    for (uint64_t seed = 1; seed <= 5; seed++) {
        auto c = formed(3, seed);
        const View v0 = c->view(1);
        c->cut(3, 1);
        c->run_for(1500 * kMs);  // 1 proposes {1,2} again and again; 2 refuses
        c->restart_process(2);
        c->run_for(3 * kSec);
        EXPECT_TRUE(c->views_after(v0.epoch).empty()) << "seed " << seed;
        EXPECT_TRUE(c->converged()) << "seed " << seed;
        EXPECT_EQ(c->monitor().violations(), 0) << "seed " << seed;
    }
}

// A restarted node has lost its vote and its view: it must not act in an old
// view that lists it, only in one it voted for after the restart.
void expect_restart_rejoins(int64_t down_us) {
    auto c = formed(3);
    c->crash(3);
    c->run_for(down_us);
    const uint32_t before = c->max_epoch();
    c->restart(3);
    bool adopted_old = false;
    ASSERT_TRUE(c->run_until(
        [&] {
            const View v = c->view(3);
            if (v.epoch != 0 && v.epoch <= before && has_node(v.members, 3)) adopted_old = true;
            return c->converged();
        },
        3 * kSec))
        << c->trace();
    EXPECT_FALSE(adopted_old);
    EXPECT_GT(c->view(3).epoch, before);
    const std::vector<std::string> h = c->history(3);
    EXPECT_EQ(h.back(), "rejoined");
    EXPECT_EQ(c->monitor().violations(), 0);
}

TEST(MembershipSim, NodeRestartedAtOnceRejoinsInANewEpoch) {
    expect_restart_rejoins(0);
}

TEST(MembershipSim, NodeRestartedAfterAnOutageRejoinsInANewEpoch) {
    expect_restart_rejoins(3 * kSec);
}

// A new epoch with the same members mutes no echo: while it waits for a
// member that cannot vote (frozen past the lease), the others keep their
// leases. (Muting every echo until the commit fenced the whole cluster.)
TEST(MembershipSim, SameMemberEpochWaitingForAFrozenVoterFencesNobodyElse) {
    auto c = formed(3);
    c->freeze(3);
    c->shm(1)->bump_requests++;
    c->run_for(900 * kMs);  // past the lease (750 ms), short of peer_timeout
    c->thaw(3);
    ASSERT_TRUE(c->run_until([&] { return c->converged(); }, 3 * kSec)) << c->trace();
    EXPECT_FALSE(c->has_history(1, "fenced")) << c->trace();
    EXPECT_FALSE(c->has_history(2, "fenced")) << c->trace();
    EXPECT_EQ(c->monitor().violations(), 0);
}

// An LMS restart asks for a new epoch (bump_requests); the members stay.
TEST(MembershipSim, BumpRequestCommitsANewEpochWithTheSameMembers) {
    auto c = formed(3);
    const View v0 = c->view(1);
    c->shm(2)->bump_requests++;
    ASSERT_TRUE(c->run_until(
        [&] {
            return c->view(1).epoch > v0.epoch && c->converged() &&
                   c->shm(2)->bump_handled == c->shm(2)->bump_requests;
        },
        2 * kSec))
        << c->trace();
    EXPECT_EQ(c->view(2).members, v0.members);
    c->run_for(2 * kSec);
    EXPECT_EQ(c->view(1).epoch, v0.epoch + 1) << "one bump, one epoch";
    for (uint16_t id = 1; id <= 3; id++) EXPECT_FALSE(c->has_history(id, "fenced"));
    EXPECT_EQ(c->monitor().violations(), 0);
}

// The majority of two is two: the survivor commits nothing and fences.
TEST(MembershipSim, TwoNodesTheSurvivorOfASilentPeerFences) {
    auto c = formed(2);
    const uint32_t e0 = c->view(1).epoch;
    c->crash(2);
    ASSERT_TRUE(c->run_until([&] { return c->state(1) == MemberState::Fenced; }, 2 * kSec))
        << c->trace();
    c->run_for(5 * kSec);
    EXPECT_TRUE(c->views_after(e0).empty());
    EXPECT_EQ(c->state(1), MemberState::Fenced);
    EXPECT_FALSE(c->lease_ok(1));
    c->restart(2);
    ASSERT_TRUE(c->run_until([&] { return c->converged(); }, 3 * kSec)) << c->trace();
    EXPECT_EQ(c->history(1).back(), "rejoined");
    EXPECT_EQ(c->monitor().violations(), 0);
}

// ---- schedules that once broke safety (five nodes, one-way partitions)

// 2 proposes X = {2,4,5} without 3; 4 votes for it, then for Y = {1,2,3,4}
// from 1 (which hears 3, and which 2 does not hear), and echoes 3's pings from
// Y. 5 votes for X late, 2 commits X on 4's older vote, and 3 kept a lease on
// 1's and 4's echoes: X committed while 3 held a lease. Echoes count only from
// a committed view, so 4 gives none while it only voted for Y.
TEST(MembershipSim, AVoteForANewerViewRenewsNoLease) {
    const NodeMask x = nodes_mask({2, 4, 5});
    for (uint64_t seed = 1; seed <= 10; seed++) {
        auto c = formed(5, seed);
        c->run_for(1 * kSec);
        c->cut(1, 2);  // 2 hears 4 and 5 only: it will propose X
        c->cut(3, 2);
        c->cut(1, 4);  // 4 hears 2 only: it will vote for X
        c->cut(3, 4);
        c->cut(5, 4);
        c->cut(1, 5);  // 5 hears 2, 3 and 4: it refuses X while it hears 3
        c->cut(5, 1);  // 1 hears 2 and 3, later 4: it will propose {1,2,3,4}
        c->cut(4, 1);
        c->cut(2, 5);  // 5 learns of X only later
        c->run_for(400 * kMs);
        c->cut(3, 5);  // 5 stops hearing 3 (its echoes keep 3's lease ~750 ms)
        ASSERT_TRUE(c->run_until([&] { return c->shm(4)->accepted.members == x; }, 2 * kSec))
            << c->trace();
        c->run_for(2 * kMs);  // 2 learns of 4's vote, and hears 4 no more
        c->cut(4, 2);
        c->heal_both(1, 4);  // 1 proposes {1,2,3,4}; 4 votes for it and hears 3
        c->heal_both(3, 4);
        c->heal_both(2, 5);  // 5 votes for X once 3 is silent for 1 s; 2 commits X
        c->run_for(2 * kSec);
        EXPECT_EQ(c->monitor().violations(), 0) << "seed " << seed;
    }
}

// With a heartbeat of half the peer timeout (allowed), a proposal kept for 4
// heartbeats outlived a peer timeout: 4 voted for X = {2,4,5}, stopped hearing
// 2, voted for Y = {1,3,4}, Y was committed, and 2 then committed X on 4's
// older vote once 5 voted late. A proposal now lives under half the timeout.
TEST(MembershipSim, ViewsAreCommittedInEpochOrderWithASlowHeartbeat) {
    const NodeMask x = nodes_mask({2, 4, 5});
    for (uint64_t seed = 1; seed <= 10; seed++) {
        auto c = formed(sim(5, seed, 100, 500, 500, 1000));
        c->run_for(1 * kSec);
        c->cut(1, 2);  // 2 hears 4 and 5: it proposes X
        c->cut(3, 2);
        c->cut(2, 1);
        c->cut(1, 4);  // 4 hears 2 only: it votes for X
        c->cut(3, 4);
        c->cut(5, 4);
        c->cut(4, 1);  // 1 hears 3 only, later 4: then it proposes Y
        c->cut(5, 1);
        c->cut(2, 3);  // 3 hears 1 and 4: it votes for Y
        c->cut(5, 3);
        c->cut(1, 5);  // 5 hears 2, 3 and 4: it refuses X while it hears 3
        ASSERT_TRUE(c->run_until([&] { return c->shm(4)->accepted.members == x; }, 3 * kSec))
            << c->trace();
        c->heal_both(1, 4);
        c->cut(2, 4);  // 4 votes for Y once 2 is silent for 1 s
        c->heal_both(3, 4);
        c->run_for(600 * kMs);
        c->cut(3, 5);  // 5 votes for X 1 s later
        c->run_for(350 * kMs);
        c->cut(4, 2);  // 2 still counts 4 as heard for 1 s
        c->run_for(2 * kSec);
        EXPECT_EQ(c->monitor().violations(), 0) << "seed " << seed;
    }
}

// ---- randomized soak

// Random faults for `duration_us`, then everything healed: the invariants hold
// throughout, and all nodes are members of one view within 5 s of the heal.
//
// A restart with new shared memory forgets the node's votes. The protocol has
// no durable state beyond shared memory, so that is safe only while the
// others remember what it forgot: the soak restarts a node that way only when
// no node is down and every other node committed the newest epoch.
uint32_t soak(SimOptions opt, int64_t duration_us) {
    const int n = opt.nodes;
    const uint64_t seed = opt.seed;
    Cluster c(opt);
    std::mt19937_64 rng(seed * 7919 + 17);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    auto any_node = [&] { return static_cast<uint16_t>(pick(1, n)); };
    auto other_node = [&](uint16_t a) {
        uint16_t b;
        do b = any_node();
        while (b == a);
        return b;
    };
    auto may_forget = [&](uint16_t a) {
        for (uint16_t id = 1; id <= n; id++)
            if (c.node(id).down || (id != a && c.view(id).epoch != c.max_epoch())) return false;
        return true;
    };
    bool faults_on = true;  // scheduled thaws and restarts stop at the final heal
    const int64_t end = c.now_us() + duration_us;
    while (c.now_us() < end && c.monitor().violations() == 0) {
        c.run_for(pick(50, 1500) * kMs);
        const uint16_t a = any_node();
        const uint16_t b = other_node(a);
        if (opt.reloads && pick(0, 3) == 0 && !c.node(a).down) {
            static const int kTimeouts[] = {500, 1000, 2000, 3000};
            c.set_timeout(a, kTimeouts[pick(0, 3)]);
        }
        switch (pick(0, 10)) {
            case 0:
            case 1:
                c.cut_both(a, b);
                break;
            case 2:
            case 3:
                c.cut(a, b);
                break;
            case 4:
                c.heal_both(a, b);
                break;
            case 5:
                c.heal_all();
                break;
            case 6: {
                c.freeze(a);
                c.at(c.now_us() + pick(50, 2500) * kMs, [&c, &faults_on, a] {
                    if (faults_on) c.thaw(a);
                });
                break;
            }
            case 7:
                if (!may_forget(a)) break;
                c.crash(a);
                c.at(c.now_us() + pick(0, 3000) * kMs, [&c, &faults_on, a] {
                    if (faults_on && c.node(a).down) c.restart(a);
                });
                break;
            case 8:
                if (!c.node(a).down) c.restart_process(a);
                break;
            case 9:
                c.isolate(a);
                break;
            case 10:
                break;  // quiet for a while
        }
    }
    faults_on = false;
    c.heal_all();
    for (uint16_t id = 1; id <= n; id++) {
        if (c.node(id).frozen) c.thaw(id);
        if (c.node(id).down) c.restart(id);
    }
    EXPECT_TRUE(c.run_until([&] { return c.converged(); }, (opt.reloads ? 12 : 5) * kSec))
        << "seed " << seed << ", " << n << " nodes\n"
        << c.trace() << c.dump();
    EXPECT_EQ(c.monitor().violations(), 0) << "seed " << seed << ", " << n << " nodes";
    return c.max_epoch();
}

// PGRAC_MEMBERSHIP_SOAK_SEEDS=N runs N seeds instead of 20.
uint64_t soak_seeds() {
    const char* env = getenv("PGRAC_MEMBERSHIP_SOAK_SEEDS");
    return env != nullptr && atoi(env) > 0 ? static_cast<uint64_t>(atoi(env)) : 20;
}

void soak_seeds(int nodes) {
    uint32_t epochs = 0;
    for (uint64_t seed = 1; seed <= soak_seeds() && !::testing::Test::HasFailure(); seed++) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        epochs += soak(sim(nodes, seed, 100, 2000), 60 * kSec);
    }
    // The faults did change the membership, many times per run.
    EXPECT_GT(epochs, 10 * soak_seeds());
}

// ---- settings that differ between nodes (issue: one cluster, one configuration)

// Node 3 has a peer_timeout three times the others' (a reload on it only),
// holds its lease, and is cut off. Its lease must be over before the others
// commit a view without it: an echo is good for 3/4 of the smaller timeout.
// (Before, its lease was 3/4 of its own 3 s: 2.25 s against their 1 s.)
TEST(MembershipSim, LongerTimeoutOnOneNodeNeverOutlivesItsExclusion) {
    for (uint64_t seed = 1; seed <= 10; seed++) {
        SimOptions o = sim(3, seed);
        o.node_timeouts_ms = {1000, 1000, 3000};
        auto c = formed(o);
        c->run_for(500 * kMs);
        const uint32_t before = c->max_epoch();
        c->isolate(3);
        ASSERT_TRUE(c->run_until([&] { return c->max_epoch() > before; }, 5 * kSec)) << c->trace();
        EXPECT_EQ(c->monitor().violations(), 0) << "seed " << seed;
        EXPECT_TRUE(c->has_history(3, "fenced")) << "seed " << seed;
        c->heal_all();
        EXPECT_TRUE(c->run_until([&] { return c->converged(); }, 5 * kSec)) << c->trace();
    }
}

// Nodes 1 and 2 lower peer_timeout from 3 s to 1 s; node 3, which holds a
// lease from their echoes under 3 s, is cut off at once. They may exclude it
// only once their old window has passed.
TEST(MembershipSim, LoweredTimeoutKeepsTheOldWindowUntilItPassed) {
    for (uint64_t seed = 1; seed <= 10; seed++) {
        auto c = formed(sim(3, seed, 100, 500, 100, 3000));
        c->run_for(500 * kMs);
        const uint32_t before = c->max_epoch();
        const int64_t cut_at = c->now_us();
        c->set_timeout(1, 1000);
        c->set_timeout(2, 1000);
        c->isolate(3);
        ASSERT_TRUE(c->run_until([&] { return c->max_epoch() > before; }, 10 * kSec)) << c->trace();
        EXPECT_GE(c->now_us() - cut_at, 2250 * kMs) << "seed " << seed;
        EXPECT_EQ(c->monitor().violations(), 0) << "seed " << seed;
        // And the cluster goes on with the new value: the next exclusion takes 1 s.
        c->heal_all();
        ASSERT_TRUE(c->run_until([&] { return c->converged(); }, 10 * kSec)) << c->trace();
        c->set_timeout(3, 1000);
        c->run_for(4 * kSec);
        const uint32_t again = c->max_epoch();
        const int64_t second_cut = c->now_us();
        c->isolate(2);
        ASSERT_TRUE(c->run_until([&] { return c->max_epoch() > again; }, 10 * kSec)) << c->trace();
        EXPECT_LT(c->now_us() - second_cut, 2000 * kMs) << "seed " << seed;
        EXPECT_EQ(c->monitor().violations(), 0) << "seed " << seed;
    }
}

// The same with the host processes of nodes 1 and 2 restarted right after
// the reload: shared memory keeps the timeout they told their peers, and the
// restarted process keeps the old window from its start.
TEST(MembershipSim, LoweredTimeoutSurvivesAHostProcessRestart) {
    for (uint64_t seed = 1; seed <= 10; seed++) {
        auto c = formed(sim(3, seed, 100, 500, 100, 3000));
        c->run_for(500 * kMs);
        const uint32_t before = c->max_epoch();
        const int64_t cut_at = c->now_us();
        c->set_timeout(1, 1000);
        c->set_timeout(2, 1000);
        c->restart_process(1);
        c->restart_process(2);
        c->isolate(3);
        ASSERT_TRUE(c->run_until([&] { return c->max_epoch() > before; }, 10 * kSec)) << c->trace();
        EXPECT_GE(c->now_us() - cut_at, 2250 * kMs) << "seed " << seed;
        EXPECT_EQ(c->monitor().violations(), 0) << "seed " << seed;
    }
}

// A rolling reload, up and down, node by node, under no fault: the view never
// changes (nobody is excluded) and every node keeps its lease throughout.
TEST(MembershipSim, RollingReloadChangesNoView) {
    auto c = formed(sim(3, 3, 100, 500, 100, 1000));
    const View v = c->view(1);
    for (int t : {3000, 500, 2000, 1000}) {
        for (uint16_t id = 1; id <= 3; id++) {
            c->set_timeout(id, t);
            c->run_for(700 * kMs);
            for (uint16_t k = 1; k <= 3; k++) ASSERT_TRUE(c->lease_ok(k)) << c->trace();
        }
    }
    EXPECT_EQ(c->view(1), v);
    EXPECT_EQ(c->monitor().violations(), 0);
}

void soak_reload_seeds(int nodes) {
    for (uint64_t seed = 1; seed <= soak_seeds() && !::testing::Test::HasFailure(); seed++) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        SimOptions o = sim(nodes, seed, 100, 2000);
        o.reloads = true;
        soak(o, 60 * kSec);
    }
}

TEST(MembershipSim, SoakThreeNodesWithReloads) {
    soak_reload_seeds(3);
}

TEST(MembershipSim, SoakFiveNodesWithReloads) {
    soak_reload_seeds(5);
}

TEST(MembershipSim, SoakThreeNodes) {
    soak_seeds(3);
}

TEST(MembershipSim, SoakFiveNodes) {
    soak_seeds(5);
}

// Known limit, kept for whoever lifts it: votes and views live in shared
// memory only, so when a majority restarts with new shared memory while the
// node that remembers is cut off, epochs start again at 1 and one epoch names
// two member sets. (Leases still hold: the old node is fenced.)
TEST(MembershipSim, DISABLED_MajorityRestartedWithNewSharedMemoryReusesNoEpoch) {
    auto c = formed(3);
    c->isolate(1);
    c->run_for(3 * kSec);
    c->crash(2);
    c->crash(3);
    c->run_for(1 * kSec);
    c->restart(2);
    c->restart(3);
    c->run_for(3 * kSec);
    EXPECT_EQ(c->monitor().violations(), 0);
}

// ---- gossip codec

Gossip sample_gossip() {
    Gossip g;
    uint64_t inst[64] = {};
    inst[0] = 11;
    inst[1] = 12;
    inst[2] = 13;
    g.committed = View{7, 0, nodes_mask({1, 2, 3}), view_binding(nodes_mask({1, 2, 3}), inst)};
    g.accepted = View{9, 0, nodes_mask({1, 3}), view_binding(nodes_mask({1, 3}), inst)};
    g.proposal = g.accepted;
    g.proposal_instances[0] = 11;
    g.proposal_instances[2] = 13;
    g.flags = kGossipWantEpoch | kGossipInView;
    g.peer_timeout_ms = 3000;
    g.heartbeat_interval_ms = 250;
    return g;
}

std::vector<uint8_t> encode(const Gossip& g) {
    std::vector<uint8_t> b(gossip_size(g));
    encode_gossip(g, b.data());
    return b;
}

constexpr NodeMask kThree = 0x7;

TEST(MembershipGossip, RoundTrips) {
    const Gossip g = sample_gossip();
    std::vector<uint8_t> b = encode(g);
    ASSERT_EQ(b.size(), kGossipFixedSize + 2 * 8);  // two proposal members
    Gossip d;
    ASSERT_TRUE(decode_gossip(b.data(), b.size(), kThree, &d));
    EXPECT_EQ(d.committed, g.committed);
    EXPECT_EQ(d.accepted, g.accepted);
    EXPECT_EQ(d.proposal, g.proposal);
    EXPECT_EQ(d.flags, g.flags);
    EXPECT_EQ(d.peer_timeout_ms, 3000u);
    EXPECT_EQ(d.heartbeat_interval_ms, 250u);
    EXPECT_EQ(d.proposal_instances[0], 11u);
    EXPECT_EQ(d.proposal_instances[1], 0u);
    EXPECT_EQ(d.proposal_instances[2], 13u);
    // Little-endian, at the documented offsets.
    EXPECT_EQ(b[0], 7);
    EXPECT_EQ(b[4], 0x7);
    EXPECT_EQ(b[20], 9);
    EXPECT_EQ(b[24], 0x5);
    EXPECT_EQ(b[40], 9);
    EXPECT_EQ(b[60], 0x3);
    EXPECT_EQ(b[64] | b[65] << 8, 3000);
    EXPECT_EQ(b[68], 250);
    EXPECT_EQ(b[72], 11);
    EXPECT_EQ(b[80], 13);

    Gossip none;
    none.peer_timeout_ms = 100;
    none.heartbeat_interval_ms = 10;
    b = encode(none);
    Gossip empty;
    ASSERT_TRUE(decode_gossip(b.data(), b.size(), kThree, &empty));
    EXPECT_EQ(empty.committed, View{});
    EXPECT_EQ(empty.flags, 0);
}

TEST(MembershipGossip, RejectsMalformed) {
    const std::vector<uint8_t> good = encode(sample_gossip());
    Gossip d;
    auto rejects = [&](const std::function<void(uint8_t*)>& spoil, NodeMask configured = kThree) {
        std::vector<uint8_t> b = good;
        spoil(b.data());
        return !decode_gossip(b.data(), b.size(), configured, &d);
    };
    EXPECT_FALSE(decode_gossip(good.data(), good.size() - 1, kThree, &d)) << "short";
    std::vector<uint8_t> longer = good;
    longer.push_back(0);
    EXPECT_FALSE(decode_gossip(longer.data(), longer.size(), kThree, &d)) << "long";
    for (size_t i = 61; i < 64; i++)
        EXPECT_TRUE(rejects([i](uint8_t* b) { b[i] = 1; })) << "reserved byte " << i;
    EXPECT_TRUE(rejects([](uint8_t* b) { b[60] = 0x04; })) << "unknown flag";
    EXPECT_TRUE(rejects([](uint8_t* b) { b[60] = 0x80 | kGossipInView; })) << "unknown flag";
    // A node outside the configured ones, in each view.
    for (size_t at : {4, 24, 44})
        EXPECT_TRUE(rejects([at](uint8_t* b) { b[at] |= 0x08; })) << "member 4 at " << at;
    EXPECT_TRUE(rejects([](uint8_t* b) { b[11] = 0x80; })) << "member 64";
    // An epoch without members and members without an epoch.
    for (size_t at : {0, 20, 40}) {
        EXPECT_TRUE(rejects([at](uint8_t* b) { memset(b + at, 0, 4); })) << "epoch 0 at " << at;
        EXPECT_TRUE(rejects([at](uint8_t* b) { memset(b + at + 4, 0, 8); }))
            << "no members at " << at;
    }
    // Timing out of the settings' bounds.
    EXPECT_TRUE(rejects([](uint8_t* b) { memset(b + 64, 0, 4); })) << "peer_timeout 0";
    EXPECT_TRUE(rejects([](uint8_t* b) { memset(b + 68, 0xff, 4); })) << "heartbeat huge";
    // A proposal whose instances do not give its binding, or one of them 0.
    EXPECT_TRUE(rejects([](uint8_t* b) { b[72] ^= 1; })) << "instance altered";
    EXPECT_TRUE(rejects([](uint8_t* b) { b[52] ^= 1; })) << "binding altered";
    EXPECT_TRUE(rejects([](uint8_t* b) { memset(b + 80, 0, 8); })) << "instance 0";
    // The same bytes are fine for a cluster that configures node 4 (the
    // committed view's binding is not checked: only its members).
    EXPECT_FALSE(rejects([](uint8_t* b) { b[4] |= 0x08; }, 0xF));
    EXPECT_TRUE(decode_gossip(good.data(), good.size(), kThree, &d));
}

// ---- one instance per node id (Membership::claim_verdict)

struct ClaimFixture {
    MembershipShared shm{};
    std::unique_ptr<Membership> m;
    explicit ClaimFixture(uint16_t self = 1) {
        Membership::init_shared(&shm);
        shm.self_instance = 100;
        MembershipConfig cfg;
        cfg.self = self;
        cfg.configured = first_nodes(3);
        cfg.heartbeat_interval_ms = 100;
        cfg.peer_timeout_ms = 1000;
        m = std::make_unique<Membership>(cfg, &shm);
        m->set_unix_clock(sim_unix_clock);
        m->tick(kStartUs);  // started at kStartUs
    }
    ClaimVerdict claim(uint16_t node, uint64_t instance, bool lanes_up, int64_t now,
                       std::string* why = nullptr) {
        std::string w;
        return m->claim_verdict(node, instance, 0, lanes_up, now, why ? why : &w);
    }
};

// Gossip of node 1..3's cluster proposing epoch `epoch` bound to `instances`.
Gossip proposing(uint32_t epoch, std::vector<uint64_t> instances) {
    uint64_t inst[64] = {};
    for (size_t i = 0; i < instances.size(); i++) inst[i] = instances[i];
    Gossip g;
    g.peer_timeout_ms = 1000;
    g.heartbeat_interval_ms = 100;
    g.proposal = View{epoch, 0, first_nodes(3), view_binding(first_nodes(3), inst)};
    for (size_t i = 0; i < instances.size(); i++) g.proposal_instances[i] = inst[i];
    return g;
}

TEST(MembershipClaims, FirstInstanceAndTheOwnerAreAdmitted) {
    ClaimFixture f;
    EXPECT_EQ(f.claim(2, 50, false, kStartUs), ClaimVerdict::Admit);
    f.m->set_owner(2, 50, 0);
    EXPECT_EQ(f.claim(2, 50, true, kStartUs), ClaimVerdict::Admit);
    EXPECT_EQ(f.m->owner(2), 50u);
    EXPECT_EQ(f.m->owner(1), 100u);  // ourselves: our own instance
}

TEST(MembershipClaims, AnotherInstanceWaitsOutTheWindowAfterOurStart) {
    ClaimFixture f;
    f.m->set_owner(2, 50, 0);
    // Just started: the owner may hold a lease through an echo we gave before.
    std::string why;
    EXPECT_EQ(f.claim(2, 60, false, kStartUs + 500 * kMs, &why), ClaimVerdict::Refuse);
    EXPECT_NE(why.find("instance 60 claiming node 2 is refused: it is instance 50"),
              std::string::npos)
        << why;
    // A window later, silent and not connected: it gives way.
    EXPECT_EQ(f.claim(2, 60, false, kStartUs + 1001 * kMs), ClaimVerdict::Switch);
}

TEST(MembershipClaims, TheOlderOfTwoLiveInstancesWins) {
    ClaimFixture f;
    f.m->set_owner(2, 50, 0);
    const int64_t later = kStartUs + 5 * kSec;
    f.m->on_heard(2, later);
    EXPECT_EQ(f.claim(2, 60, true, later), ClaimVerdict::Refuse);                // newer: refused
    EXPECT_EQ(f.claim(2, 40, true, later), ClaimVerdict::Switch);                // older: wins
    EXPECT_EQ(f.claim(2, 60, false, later + 500 * kMs), ClaimVerdict::Refuse);   // heard lately
    EXPECT_EQ(f.claim(2, 60, false, later + 1500 * kMs), ClaimVerdict::Switch);  // silent
}

TEST(MembershipClaims, AnInstanceWeEchoedKeepsTheIdForAWindow) {
    ClaimFixture f;
    f.m->set_owner(2, 50, 0);
    // Our vote binds node 2 to instance 50 and a committed view has it.
    Gossip g = proposing(5, {100, 50, 70});
    const int64_t t = kStartUs + 5 * kSec;
    f.m->on_heard(2, t);
    f.m->on_heard(3, t);
    f.m->on_gossip(2, g, t);
    ASSERT_EQ(f.shm.accepted.epoch, 5u);
    g.committed = g.proposal;
    g.proposal = View{};
    f.m->on_gossip(2, g, t);
    ASSERT_EQ(committed_view(&f.shm).epoch, 5u);
    ASSERT_TRUE(f.m->echo_for(2, t));  // a pong to it counts toward its lease
    // Silent since, not connected, and newer or older: refused within the window.
    EXPECT_EQ(f.claim(2, 60, false, t + 900 * kMs), ClaimVerdict::Refuse);
    EXPECT_EQ(f.claim(2, 40, false, t + 900 * kMs), ClaimVerdict::Refuse);
    // But the instance the vote binds is always admitted over another owner.
    f.m->set_owner(2, 60, 0);
    EXPECT_FALSE(f.m->in_accepted_view(2));  // no echo for an instance our vote does not bind
    EXPECT_EQ(f.claim(2, 50, true, t + 900 * kMs), ClaimVerdict::Switch);
    f.m->set_owner(2, 50, 0);
    EXPECT_TRUE(f.m->in_accepted_view(2));
    // A window after our last echo, the id is free again.
    EXPECT_EQ(f.claim(2, 60, false, t + 1100 * kMs), ClaimVerdict::Switch);
}

TEST(MembershipClaims, AnInstanceFromTheOwnersDataDirectoryIsARestart) {
    ClaimFixture f;
    f.m->set_owner(2, 50, 777);
    // Within the window after our start, from elsewhere: refused; from the
    // owner's own data directory: the owner is gone, admitted at once.
    EXPECT_EQ(f.claim(2, 60, false, kStartUs + 100 * kMs), ClaimVerdict::Refuse);
    std::string why;
    EXPECT_EQ(f.m->claim_verdict(2, 60, 777, false, kStartUs + 100 * kMs, &why),
              ClaimVerdict::Switch);
    EXPECT_EQ(f.m->claim_verdict(2, 60, 778, false, kStartUs + 100 * kMs, &why),
              ClaimVerdict::Refuse);
    // With a lane to the owner up, the same place proves nothing (a cloned machine).
    EXPECT_EQ(f.m->claim_verdict(2, 60, 777, true, kStartUs + 100 * kMs, &why),
              ClaimVerdict::Refuse);
}

// An LMS whose replay barrier node 2 never completes withholds this node's
// echoes from it: no in-view pong, and a window after the withholding began
// node 2 counts as unheard here (a view without it may be voted for), however
// often it is heard meanwhile. When the withholding ends, it counts again.
TEST(MembershipSim, WithheldEchoesLetAMajorityVoteAMemberOut) {
    for (uint64_t seed = 1; seed <= 5; seed++) {
        auto c = formed(3, seed);
        const uint32_t before = c->max_epoch();
        for (uint16_t id : {1, 3})
            withhold_echoes(c->shm(id), 2, static_cast<uint64_t>(c->now_us() / 1000), 3000);
        ASSERT_TRUE(c->run_until(
            [&] {
                return c->converged(nodes_mask({1, 3}));
            },
            3 * kSec))
            << c->trace();
        EXPECT_GT(c->max_epoch(), before);
        EXPECT_TRUE(c->has_history(2, "fenced")) << "seed " << seed;
        EXPECT_EQ(c->monitor().violations(), 0) << "seed " << seed;
        // Node 2 comes back in a new epoch once the withholding is over.
        ASSERT_TRUE(c->run_until([&] { return c->converged(); }, 5 * kSec)) << c->trace();
    }
}

TEST(MembershipClaims, AVoteIsRefusedForAViewBindingAnotherInstance) {
    ClaimFixture f;
    f.m->set_owner(2, 50, 0);
    f.m->set_owner(3, 70, 0);
    Gossip g = proposing(5, {100, 99, 70});  // 99: not the node 2 we admitted
    const int64_t t = kStartUs + 5 * kSec;
    f.m->on_gossip(2, g, t);
    EXPECT_EQ(f.shm.accepted.epoch, 0u);
    bool logged = false;
    for (const std::string& line : f.m->take_logs())
        logged = logged || line.find(
                               "binds node 2 to instance 99, but here node 2 is instance "
                               "50") != std::string::npos;
    EXPECT_TRUE(logged);
    // The same view binding the instance we know is voted for.
    g = proposing(5, {100, 50, 70});
    f.m->on_gossip(2, g, t);
    EXPECT_EQ(f.shm.accepted.epoch, 5u);
}

TEST(MembershipClaims, EpochsDoNotWrap) {
    ClaimFixture f;
    f.m->set_owner(2, 50, 0);
    f.m->set_owner(3, 70, 0);
    Gossip g;
    g.peer_timeout_ms = 1000;
    g.heartbeat_interval_ms = 100;
    uint64_t inst[64] = {};
    inst[1] = 50;
    inst[2] = 70;
    g.accepted = View{UINT32_MAX, 0, nodes_mask({2, 3}), view_binding(nodes_mask({2, 3}), inst)};
    const int64_t t = kStartUs + 5 * kSec;
    f.m->on_heard(2, t);
    f.m->on_heard(3, t);
    f.m->on_gossip(2, g, t);
    f.m->on_gossip(3, g, t);
    f.m->tick(t);
    EXPECT_EQ(f.m->gossip().proposal.epoch, 0u);  // no proposal for epoch 0 (a wrap)
    bool logged = false;
    for (const std::string& line : f.m->take_logs())
        logged = logged || line.find("is the last one") != std::string::npos;
    EXPECT_TRUE(logged);
}

TEST(MembershipGossip, MaskHelpers) {
    EXPECT_EQ(mask_text(nodes_mask({3, 1, 64})), "{1,3,64}");
    EXPECT_EQ(mask_text(0), "{}");
    EXPECT_EQ(node_count(nodes_mask({1, 2, 5})), 3);
    EXPECT_EQ(mask_nodes(nodes_mask({5, 2})), (std::vector<uint16_t>{2, 5}));
    EXPECT_EQ(nodes_mask({0, 65}), 0u);
}

}  // namespace

// ---- from an adversarial review: two instances of one id, timing across restarts

namespace {

// Node 2 is instance A (slot 2). 1 and 3 are cut off from each other, A from 3;
// a second instance B of node 2, elsewhere, reaches only 3. 1 and A form a
// majority of ids {1,2}; 3 and B would be another one, {2,3}: two views, two
// leases. Node 3 does not vote for a view that rebinds node 2 with too few
// other members (Membership::rebinding_allowed).
TEST(MembershipSim, SecondInstanceBridgingAPartitionCommitsNoSecondView) {
    for (uint64_t seed = 1; seed <= 3; seed++) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        auto c = formed(3, seed);
        c->cut_both(1, 3);
        c->cut_both(2, 3);
        const int b = c->add_instance(2, 0, 1002);
        c->cut_both(b, 1);
        c->cut_both(b, 2);
        c->cut_both(b, 3);
        c->run_for(2 * kSec);  // {1,2:A} committed; 3 fenced, A silent to it for a window
        c->heal_both(b, 3);
        c->run_for(3 * kSec);
        EXPECT_EQ(c->monitor().violations(), 0) << c->dump();
        if (c->monitor().violations() != 0) break;
    }
}

// A copy of node 2 whose location is node 2's (a cloned VM, or a data
// directory on shared storage started on a second host with the same host
// name) starts while node 2 runs, connected to every node. The same place
// proves the owner gone only while no lane to it is up: refused.
TEST(MembershipSim, CopyAtTheOwnersLocationIsRefusedWhileTheOwnerIsConnected) {
    for (uint64_t seed = 1; seed <= 3; seed++) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        auto c = formed(3, seed);
        c->run_for(500 * kMs);
        c->add_instance(2, 0, 2);
        c->run_for(3 * kSec);
        EXPECT_EQ(c->monitor().violations(), 0) << c->dump();
        if (c->monitor().violations() != 0) break;
    }
}

// Node 2 lowers peer_timeout 3 s -> 1 s and raises it back later (the floor
// it kept has run out, but window_floor_ms still says 3000). Its host process
// then restarts with 1 s in the configuration, while node 3 holds a lease of
// 2.25 s from node 2's last echo: node 2 must keep the 3 s it told (a stale
// window_floor_ms larger than the told value once hid it).
TEST(MembershipSim, HostProcessRestartWithALowerTimeoutAfterAnEarlierDecreaseKeepsTheToldWindow) {
    for (uint64_t seed = 1; seed <= 3; seed++) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        SimOptions o = sim(3, seed);
        o.node_timeouts_ms = {1000, 3000, 3000};
        auto c = formed(o);
        c->set_timeout(2, 1000);
        c->run_for(4 * kSec);  // the old window (3 s) has passed
        c->set_timeout(2, 3000);
        c->run_for(1 * kSec);  // node 2's pongs carry 3 s again: node 3's lease is 2.25 s
        c->isolate(3);
        c->node(2).peer_timeout_ms = 1000;  // the configuration file says 1 s now
        c->restart_process(2);
        c->run_for(3 * kSec);
        EXPECT_EQ(c->monitor().violations(), 0) << c->dump();
        if (c->monitor().violations() != 0) break;
    }
}

// Node 2 restarts with new shared memory (same place) and a lower
// peer_timeout: the new instance knows nothing of the 3 s its predecessor
// told node 3, whose lease rests on that echo for 2.25 s; node 1 admits the
// new instance at once (its location). The data directory's timing file
// (src/instance/timing_file.cpp) keeps the 3 s window for the new instance.
TEST(MembershipSim, InstanceRestartWithALowerTimeoutKeepsTheWindowItsPredecessorTold) {
    for (uint64_t seed = 1; seed <= 3; seed++) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        SimOptions o = sim(3, seed);
        o.node_timeouts_ms = {1000, 3000, 3000};
        auto c = formed(o);
        c->run_for(1 * kSec);
        c->isolate(3);
        c->node(2).peer_timeout_ms = 1000;
        c->restart(2);
        c->run_for(3 * kSec);
        EXPECT_EQ(c->monitor().violations(), 0) << c->dump();
        if (c->monitor().violations() != 0) break;
    }
}

// A rolling reload of both timing settings, from the defaults (heartbeat 1 s,
// peer_timeout 10 s) to heartbeat 100 ms, peer_timeout 1 s, and back. Each
// step is a valid configuration (peer_timeout >= 2 x heartbeat), and
// a rolling reload changes no view and fences no node. An echo is good for
// 3/4 of the smaller timeout (750 ms) while a node that still has a 1 s
// heartbeat would ping once a second: it pings at least three times a lease
// instead (Membership::ping_interval_ms), or its lease would lapse between
// two pings.
void expect_timing_reload_fences_nobody(const std::vector<std::pair<int, int>>& steps, int hb0,
                                        int to0) {
    for (uint64_t seed = 1; seed <= 3; seed++) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        auto c = formed(sim(3, seed, 100, 500, hb0, to0));
        c->run_for(2 * kSec);
        const View v = c->view(1);
        for (const auto& [hb, to] : steps) {
            for (uint16_t id = 1; id <= 3; id++) {
                c->set_timing(id, hb, to);
                c->run_for(10 * kSec);  // an operator's pace: a node every 10 s
            }
        }
        for (uint16_t id = 1; id <= 3; id++)
            EXPECT_FALSE(c->has_history(id, "fenced")) << "node " << id << "\n" << c->trace();
        EXPECT_EQ(c->view(1), v);
        EXPECT_EQ(c->monitor().violations(), 0);
        if (::testing::Test::HasFailure()) break;
    }
}

TEST(MembershipSim, RollingReloadOfBothTimingSettingsDownFencesNoNode) {
    expect_timing_reload_fences_nobody({{100, 1000}}, 1000, 10000);
}

TEST(MembershipSim, RollingReloadOfBothTimingSettingsUpFencesNoNode) {
    expect_timing_reload_fences_nobody({{1000, 10000}}, 100, 1000);
}

// A second instance of node 2 elsewhere, newer or older, connected to every
// node while node 2 runs: every node refuses it (it echoed node 2 within its
// window), no view changes, nobody fences. Then node 2 stops for good: the
// others exclude it, admit the second instance, and bind it in a new epoch.
TEST(MembershipSim, SecondInstanceElsewhereWaitsUntilTheOwnerIsExcluded) {
    for (uint64_t instance : {uint64_t{0}, uint64_t{1}}) {  // newer, older than node 2's (2)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            SCOPED_TRACE("seed " + std::to_string(seed) + " instance " + std::to_string(instance));
            auto c = formed(3, seed);
            const View v = c->view(1);
            const int b = c->add_instance(2, instance, 1002);
            c->run_for(3 * kSec);
            EXPECT_EQ(c->view(1), v);
            EXPECT_GT(c->refusals_, 0u);
            for (uint16_t id : {1, 3}) EXPECT_EQ(c->m(id).owner(2), c->node(2).instance);
            for (uint16_t id = 1; id <= 3; id++) EXPECT_FALSE(c->has_history(id, "fenced"));
            c->crash(2);
            ASSERT_TRUE(c->run_until(
                [&] {
                    return c->view(1).members == first_nodes(3) && c->view(1) == c->view(3) &&
                           c->state(1) == MemberState::Member &&
                           c->state(3) == MemberState::Member &&
                           c->m(1).owner(2) == c->node(b).instance && c->view(1) == c->view(b) &&
                           c->m(b).state() == MemberState::Member;
                },
                5 * kSec))
                << c->trace() << c->dump();
            EXPECT_EQ(c->monitor().violations(), 0);
        }
    }
}

// The replaced instance comes back (thawed after a long stop): it is refused
// by every node that bound the other, and no lease or epoch overlaps.
TEST(MembershipSim, ReplacedInstanceThawedIsRefusedByTheNodesThatBoundTheOther) {
    for (uint64_t seed = 1; seed <= 3; seed++) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        auto c = formed(3, seed);
        c->freeze(2);
        const int b = c->add_instance(2, 0, 1002);
        ASSERT_TRUE(c->run_until(
            [&] {
                return c->m(1).owner(2) == c->node(b).instance &&
                       c->m(3).owner(2) == c->node(b).instance &&
                       c->m(b).state() == MemberState::Member && c->view(1) == c->view(b);
            },
            5 * kSec))
            << c->trace() << c->dump();
        c->thaw(2);
        c->run_for(3 * kSec);
        EXPECT_EQ(c->m(1).owner(2), c->node(b).instance);
        EXPECT_EQ(c->m(3).owner(2), c->node(b).instance);
        EXPECT_NE(c->m(2).state(), MemberState::Member);
        EXPECT_EQ(c->monitor().violations(), 0);
    }
}

// A second instance of node 2 that says it is older (instance 1) reaches only
// node 3, and the real node 2 freezes. Node 3 may admit the claimant (older,
// connected), but that instance is not the one its vote binds: it neither
// keeps the frozen member in the view nor blocks the view of nodes 1 and 3.
TEST(MembershipSim, AnOlderClaimantReachingOneNodeKeepsNoFrozenMemberInTheView) {
    for (uint64_t seed = 1; seed <= 5; seed++) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        auto c = formed(3, seed);
        const int b = c->add_instance(2, 1, 9002);
        c->cut_both(static_cast<uint16_t>(b), 1);
        c->cut_both(static_cast<uint16_t>(b), 2);
        c->freeze(2);
        ASSERT_TRUE(c->run_until(
            [&] {
                return c->converged(nodes_mask({1, 3}));
            },
            4 * kSec))
            << c->trace() << c->dump();
        EXPECT_EQ(c->monitor().violations(), 0);
    }
}

}  // namespace
