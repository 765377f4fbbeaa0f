// Deadlock detection over a wait-for graph of lock owners.
//
// The same function serves two scopes: a LockTable runs it over the edges of
// the resources it masters (local cycles, found the moment a request queues),
// and a cluster-wide detector runs it over edges gathered from every master's
// LockTable::wait_for_edges() (cycles that span masters). See docs/ges.md.
#pragma once

#include <cstdint>
#include <vector>

#include "ic/ges_types.hpp"

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

// Breaks every cycle, one victim per cycle: the youngest waiting request in it
// (largest since, then order, then owner and request id, so every node picks
// the same one). Returns one edge per victim (its waiter, resource, master and
// request_id say what to deny); removing a victim's request removes all its
// edges before the search goes on. Deterministic for a given edge set.
std::vector<WaitForEdge> find_deadlock_victims(std::vector<WaitForEdge> edges);

}  // namespace pgrac::ic::ges
