#include "ic/ges/deadlock.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace pgrac::ic::ges {

namespace {

bool younger(const WaitForEdge& a, const WaitForEdge& b) {
    return std::make_tuple(a.since, a.order, a.waiter.node, a.waiter.proc, a.request_id) >
           std::make_tuple(b.since, b.order, b.waiter.node, b.waiter.proc, b.request_id);
}

// One cycle as the indices of its edges, or empty. Iterative DFS over owners
// (in owner order, edges in input order, so the result is deterministic).
std::vector<size_t> find_cycle(const std::vector<WaitForEdge>& edges) {
    std::map<Owner, std::vector<size_t>> out;
    for (size_t i = 0; i < edges.size(); ++i) out[edges[i].waiter].push_back(i);

    enum Color : uint8_t { White, Gray, Black };
    std::map<Owner, Color> color;
    struct Frame {
        Owner node;
        size_t next;     // next outgoing edge to try
        size_t via = 0;  // edge that led here
    };
    for (const auto& [start, unused] : out) {
        (void)unused;
        if (color[start] != White) continue;
        std::vector<Frame> stack{{start, 0}};
        color[start] = Gray;
        while (!stack.empty()) {
            Frame& f = stack.back();
            const auto it = out.find(f.node);
            if (it == out.end() || f.next >= it->second.size()) {
                color[f.node] = Black;
                stack.pop_back();
                continue;
            }
            const size_t e = it->second[f.next++];
            const Owner to = edges[e].holder;
            const Color c = color[to];
            if (c == Gray) {
                // The cycle: stack[k - 1] is `to`; the edges that led up the stack from it, then e.
                std::vector<size_t> cycle;
                size_t k = stack.size();
                while (k > 0 && stack[k - 1].node != to) --k;
                for (size_t j = k; j < stack.size(); ++j) cycle.push_back(stack[j].via);
                cycle.push_back(e);
                return cycle;
            }
            if (c == White) {
                color[to] = Gray;
                stack.push_back({to, 0, e});
            }
        }
    }
    return {};
}

}  // namespace

std::vector<WaitForEdge> find_deadlock_victims(std::vector<WaitForEdge> edges) {
    std::vector<WaitForEdge> victims;
    for (;;) {
        const std::vector<size_t> cycle = find_cycle(edges);
        if (cycle.empty()) return victims;
        size_t victim = cycle.front();
        for (size_t e : cycle)
            if (younger(edges[e], edges[victim])) victim = e;
        const WaitForEdge v = edges[victim];
        victims.push_back(v);
        edges.erase(std::remove_if(edges.begin(), edges.end(),
                                   [&v](const WaitForEdge& e) {
                                       return e.waiter == v.waiter && e.resource == v.resource &&
                                              e.request_id == v.request_id;
                                   }),
                    edges.end());
    }
}

bool operator==(const WaitForEdge& a, const WaitForEdge& b) {
    return a.waiter == b.waiter && a.holder == b.holder && a.resource == b.resource &&
           a.master == b.master && a.request_id == b.request_id && a.since == b.since &&
           a.order == b.order;
}

uint16_t deadlock_coordinator(const std::vector<uint16_t>& live) {
    uint16_t c = 0;
    for (uint16_t n : live)
        if (n != 0 && (c == 0 || n < c)) c = n;
    return c;
}

std::vector<WaitForEdge> edges_waiting_at_least(const std::vector<WaitForEdge>& edges, int64_t now,
                                                int64_t min_wait) {
    std::vector<WaitForEdge> out;
    for (const WaitForEdge& e : edges)
        if (now - e.since >= min_wait) out.push_back(e);
    return out;
}

void DeadlockRound::start(uint64_t id, const std::vector<Source>& expected, int64_t now) {
    finish();
    id_ = id;
    started_ = now;
    for (const Source& s : expected) {
        bool dup = false;
        for (const Slot& x : expected_)
            dup = dup || (x.source.node == s.node && x.source.worker == s.worker);
        if (!dup) expected_.push_back(Slot{s, false});
    }
}

void DeadlockRound::finish() {
    id_ = 0;
    started_ = 0;
    expected_.clear();
    done_ = 0;
    spoiled_ = false;
    edges_.clear();
}

std::vector<WaitForEdge> through_cached_locks(const std::vector<WaitForEdge>& edges) {
    std::map<std::pair<uint16_t, ResourceName>, std::vector<Owner>> users;
    for (const WaitForEdge& e : edges)
        if (is_use_edge(e)) users[{e.waiter.node, e.resource}].push_back(e.holder);
    std::vector<WaitForEdge> out;
    for (const WaitForEdge& e : edges) {
        if (is_use_edge(e)) continue;
        if (e.holder.proc != kNodeOwnerProc) {
            out.push_back(e);
            continue;
        }
        auto it = users.find({e.holder.node, e.resource});
        if (it == users.end()) continue;
        for (Owner u : it->second) {
            if (u == e.waiter) continue;
            WaitForEdge x = e;
            x.holder = u;
            out.push_back(x);
        }
    }
    return out;
}

bool DeadlockRound::add(uint16_t node, uint16_t worker, uint64_t round, bool last, bool incomplete,
                        const std::vector<WaitForEdge>& edges) {
    if (!active() || round != id_) return false;
    Slot* slot = nullptr;
    for (Slot& s : expected_)
        if (s.source.node == node && s.source.worker == worker) slot = &s;
    if (slot == nullptr || slot->done) return false;
    for (const WaitForEdge& e : edges) {
        // A use edge comes from the cached lock's node; any other from its master.
        if (is_use_edge(e) ? e.waiter.node != node : e.master != node) {
            // A source only knows the resources it masters: nonsense, so no
            // decision from this round.
            spoiled_ = true;
            return false;
        }
    }
    if (incomplete) spoiled_ = true;
    edges_.insert(edges_.end(), edges.begin(), edges.end());
    if (last) {
        slot->done = true;
        done_++;
    }
    return true;
}

std::vector<DeadlockRound::Source> DeadlockRound::missing() const {
    std::vector<Source> out;
    for (const Slot& s : expected_)
        if (!s.done) out.push_back(s.source);
    return out;
}

}  // namespace pgrac::ic::ges
