// Deadlock detection over a wait-for graph of lock owners.
//
// The same function serves two scopes: a LockTable runs it over the edges of
// the resources it masters (local cycles, found the moment a request queues),
// and a cluster-wide detector runs it over edges gathered from every master's
// LockTable::wait_for_edges() (cycles that span masters). See docs/ges.md.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ic/ges/types.hpp"

namespace pgrac::ic::ges {

// waiter's pending request `request_id` on `resource` cannot be granted before
// `holder` gives way: holder's granted mode conflicts, or holder is queued
// ahead of it (queues are strict FIFO).
struct WaitForEdge {
    Owner waiter;
    Owner holder;
    ResourceName resource;
    uint16_t master = 0;      // where resource is mastered: the cancel goes there
    uint64_t request_id = 0;  // the waiter's pending request
    int64_t since = 0;        // when that request started waiting
    uint64_t order = 0;       // master-local arrival order, a tie-break only
};

bool operator==(const WaitForEdge& a, const WaitForEdge& b);

// Breaks every cycle, one victim per cycle: the youngest waiting request in it
// (largest since, then order, then owner and request id, so every node picks
// the same one). Returns one edge per victim (its waiter, resource, master and
// request_id say what to deny); removing a victim's request removes all its
// edges before the search goes on. Deterministic for a given edge set.
std::vector<WaitForEdge> find_deadlock_victims(std::vector<WaitForEdge> edges);

// Node-level caching (docs/ges.md, "Node-level caching"): a cached lock's
// holder at the master is its node's owner (proc kNodeOwnerProc), and the
// ones a waiter really waits for are that lock's local users. A node reports
// them as *use edges* (waiter = the node owner, holder = a user, master = the
// reporting node). This replaces every edge to a node owner by edges to the
// users of that lock on that node (none: the lock is on its way back, no
// wait) and drops the use edges.
std::vector<WaitForEdge> through_cached_locks(const std::vector<WaitForEdge>& edges);
inline bool is_use_edge(const WaitForEdge& e) {
    return e.waiter.proc == kNodeOwnerProc;
}

// ---- cluster-wide detection (docs/ges.md, "Deadlocks", layer 2)

// The node that runs the cluster-wide search: the lowest live node id (0 if
// none). Every node computes it from its own view of the live set.
uint16_t deadlock_coordinator(const std::vector<uint16_t>& live);

// The edges whose waiter has waited at least min_wait (now - since >=
// min_wait, in the table's clock). A cycle that has existed for min_wait
// consists only of such edges; younger waits are left out of the search.
std::vector<WaitForEdge> edges_waiting_at_least(const std::vector<WaitForEdge>& edges, int64_t now,
                                                int64_t min_wait);

// One gathering round of the cluster-wide search, as the coordinator keeps it
// (pure state, no I/O): which (node, LMS worker) sources must report, what
// they reported, and whether the round may be used for a decision.
//
// A source reports its edges in one or more parts, the last one marked. A
// source that could not report a trustworthy graph (its table is replaying
// after a membership change) marks its report incomplete, and the round is
// then spoiled: no decision is taken from it. A part for another round, from
// an unexpected source, after the source's last part, or with an edge that
// the source does not master, is ignored (and such an edge spoils the round).
class DeadlockRound {
  public:
    struct Source {
        uint16_t node = 0;
        uint16_t worker = 0;
    };

    // Starts round `id` (nonzero) at `now`, forgetting any previous round.
    void start(uint64_t id, const std::vector<Source>& expected, int64_t now);
    // Ends the round (nothing is accepted until the next start()).
    void finish();
    // One part of a source's report. Returns false if it was ignored.
    bool add(uint16_t node, uint16_t worker, uint64_t round, bool last, bool incomplete,
             const std::vector<WaitForEdge>& edges);

    bool active() const { return id_ != 0; }
    uint64_t id() const { return id_; }
    int64_t started() const { return started_; }
    // Every expected source has sent its last part.
    bool complete() const { return active() && done_ == expected_.size(); }
    bool spoiled() const { return spoiled_; }
    // Sources that have not finished reporting (for logs).
    std::vector<Source> missing() const;
    const std::vector<WaitForEdge>& edges() const { return edges_; }

  private:
    struct Slot {
        Source source;
        bool done = false;
    };
    uint64_t id_ = 0;
    int64_t started_ = 0;
    std::vector<Slot> expected_;
    size_t done_ = 0;
    bool spoiled_ = false;
    std::vector<WaitForEdge> edges_;
};

}  // namespace pgrac::ic::ges
