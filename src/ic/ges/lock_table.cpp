#include "ic/ges/lock_table.hpp"

#include <algorithm>

namespace pgrac::ic::ges {

namespace {

uint8_t mode_bit(LockMode m) {
    return static_cast<uint8_t>(1u << static_cast<uint8_t>(m));
}

// True if a BAST for a mode at least as strong as `m` already went out: the
// holder already knows to give way far enough for `m` too.
bool bast_covered(uint8_t sent, LockMode m) {
    for (uint8_t s = 0; s < kLockModeCount; ++s)
        if ((sent >> s & 1) && mode_at_most(m, static_cast<LockMode>(s))) return true;
    return false;
}

template <typename T, typename Pred>
void erase_if(std::vector<T>& v, Pred p) {
    v.erase(std::remove_if(v.begin(), v.end(), p), v.end());
}

}  // namespace

LockTable::Lock* LockTable::find_holder(Resource& r, Owner o) {
    for (Lock& l : r.holders)
        if (l.owner == o) return &l;
    return nullptr;
}

LockTable::Lock* LockTable::find_waiter(Resource& r, Owner o) {
    for (Lock& l : r.waiters)
        if (l.owner == o) return &l;
    return nullptr;
}

bool LockTable::compatible_with_holders(const Resource& r, LockMode m, Owner except) {
    for (const Lock& h : r.holders)
        if (h.owner != except && !modes_compatible(h.granted, m)) return false;
    return true;
}

Event LockTable::granted(const Resource& r, Owner o, const ResourceName& name, LockMode m,
                         uint64_t id) {
    Event e = Event::granted(o, name, m, id);
    e.value = r.value;
    return e;
}

void LockTable::write_value(Resource& r, LockMode held, const LockValue& v) {
    if (!mode_writes_value(held) || !v.carries()) return;
    if (v.state == ValueState::Valid) {
        r.value = v;
        return;
    }
    if (r.value.state != ValueState::Invalid) ++value_invalidations_;
    r.value = LockValue::invalid();
}

LockValue LockTable::value_of(const ResourceName& resource) const {
    auto it = resources_.find(resource);
    return it == resources_.end() ? LockValue{} : it->second.value;
}

// A replayed (or handed over) entry as a lock: its owner, state, ids, flags
// and since; the caller sets the modes and queue order.
LockTable::Lock LockTable::lock_from(const ReplayEntry& e) {
    Lock l;
    l.owner = e.owner;
    l.state = e.state;
    l.request_id = l.grant_id = e.request_id;
    l.flags = e.flags;
    l.since = e.since;
    return l;
}

size_t LockTable::lock_count() const {
    size_t n = 0;
    for (const auto& [name, r] : resources_) n += r.holders.size() + r.waiters.size();
    return n;
}

// ---- requests

Events LockTable::request(const LockRequest& rq) {
    return submit(rq, false);
}

Events LockTable::convert(const LockRequest& rq) {
    return submit(rq, true);
}

Events LockTable::submit(const LockRequest& rq, bool convert_only) {
    now_ = rq.now;
    Events ev;
    const ResourceName& name = rq.resource;
    Resource& r = resources_[name];
    const bool nowait = (rq.flags & kNoWait) != 0;
    bool queued = false;

    if (Lock* h = find_holder(r, rq.owner)) {
        if (h->state == LockState::Converting) {
            ev.push_back(
                Event::denied(rq.owner, name, rq.mode, rq.request_id, DenyReason::AlreadyPending));
            return ev;
        }
        start_conversion(r, *h, rq, ev);
        queued = h->state == LockState::Converting;
    } else if (find_waiter(r, rq.owner) != nullptr) {
        ev.push_back(
            Event::denied(rq.owner, name, rq.mode, rq.request_id, DenyReason::AlreadyPending));
        return ev;
    } else if (convert_only) {
        ev.push_back(Event::denied(rq.owner, name, rq.mode, rq.request_id, DenyReason::NotHeld));
    } else if (!frozen_ && r.convert.empty() && r.waiters.empty() &&
               compatible_with_holders(r, rq.mode, rq.owner)) {
        Lock l;
        l.owner = rq.owner;
        l.state = LockState::Granted;
        l.granted = l.requested = rq.mode;
        l.grant_id = l.request_id = rq.request_id;
        l.since = rq.now;
        r.holders.push_back(l);
        ev.push_back(granted(r, rq.owner, name, rq.mode, rq.request_id));
    } else if (nowait && !frozen_ && !blocked_only_by_cache(r, rq)) {
        ev.push_back(Event::denied(rq.owner, name, rq.mode, rq.request_id, DenyReason::NoWait));
    } else {
        Lock l;
        l.owner = rq.owner;
        l.state = LockState::Waiting;
        l.requested = rq.mode;
        l.request_id = rq.request_id;
        l.flags = rq.flags;
        l.since = rq.now;
        l.deadline = rq.deadline;
        if (nowait && !frozen_) {
            // Blocked only by cached locks: their BASTs go out now, and the
            // request waits a moment for them to come back.
            l.cache_grace = true;
            l.deadline = rq.now + options_.nowait_cache_grace;
        }
        if (l.deadline != 0) with_deadline_.insert(name);
        l.order = next_order_++;
        l.new_in_replay = frozen_;
        r.waiters.push_back(l);
        queued_.insert(name);
        queued = true;
    }

    settle(name, ev);
    if (queued && !frozen_ && options_.detect_deadlocks_on_wait) check_deadlocks(ev);
    return ev;
}

// A new NOWAIT request that only nodes' cached locks keep from a grant (no
// queue, every conflicting holder a node owner) may wait for their give-back.
bool LockTable::blocked_only_by_cache(const Resource& r, const LockRequest& rq) const {
    if (options_.nowait_cache_grace <= 0 || !r.convert.empty() || !r.waiters.empty()) return false;
    for (const Lock& h : r.holders)
        if (h.owner != rq.owner && !modes_compatible(h.granted, rq.mode) &&
            h.owner.proc != kNodeOwnerProc)
            return false;
    return true;
}

void LockTable::start_conversion(Resource& r, Lock& h, const LockRequest& rq, Events& ev) {
    // A PW or EX holder writes the value as it converts (PW to EX is an up-conversion: it reads).
    if (!(h.granted == LockMode::PW && rq.mode == LockMode::EX))
        write_value(r, h.granted, rq.value);
    if (rq.mode == h.granted) {  // already held in that mode
        h.grant_id = rq.request_id;
        ev.push_back(granted(r, rq.owner, rq.resource, rq.mode, rq.request_id));
        return;
    }
    const bool down = mode_at_most(rq.mode, h.granted);
    if (!frozen_ && compatible_with_holders(r, rq.mode, h.owner) && (down || r.convert.empty())) {
        h.granted = h.requested = rq.mode;
        h.grant_id = h.request_id = rq.request_id;
        h.since = rq.now;
        h.bast_sent = 0;
        ev.push_back(granted(r, rq.owner, rq.resource, rq.mode, rq.request_id));
        return;
    }
    if ((rq.flags & kNoWait) && !frozen_) {
        ev.push_back(
            Event::denied(rq.owner, rq.resource, rq.mode, rq.request_id, DenyReason::NoWait));
        return;
    }
    h.state = LockState::Converting;
    h.requested = rq.mode;
    h.request_id = rq.request_id;
    h.flags = rq.flags;
    h.since = rq.now;
    h.deadline = rq.deadline;
    if (h.deadline != 0) with_deadline_.insert(rq.resource);
    h.order = next_order_++;
    h.new_in_replay = frozen_;
    r.convert.push_back(h.owner);
    queued_.insert(rq.resource);
}

// ---- serving the queues

void LockTable::settle(const ResourceName& name, Events& ev) {
    auto it = resources_.find(name);
    if (it == resources_.end()) return;
    Resource& r = it->second;
    if (!frozen_) {
        serve_queues(name, r, ev);
        send_basts(name, r, ev);
    }
    if (r.empty()) resources_.erase(it);
}

void LockTable::serve_queues(const ResourceName& name, Resource& r, Events& ev) {
    for (;;) {
        while (!r.convert.empty()) {
            Lock* c = find_holder(r, r.convert.front());
            if (!compatible_with_holders(r, c->requested, c->owner)) break;
            c->state = LockState::Granted;
            c->granted = c->requested;
            c->grant_id = c->request_id;
            c->since = now_;
            c->deadline = 0;
            c->bast_sent = 0;
            r.convert.erase(r.convert.begin());
            ev.push_back(granted(r, c->owner, name, c->granted, c->grant_id));
        }
        while (r.convert.empty() && !r.waiters.empty()) {
            Lock w = r.waiters.front();
            if (!compatible_with_holders(r, w.requested, w.owner)) break;
            w.state = LockState::Granted;
            w.granted = w.requested;
            w.grant_id = w.request_id;
            w.since = now_;
            w.deadline = 0;
            r.waiters.erase(r.waiters.begin());
            r.holders.push_back(w);
            ev.push_back(granted(r, w.owner, name, w.granted, w.grant_id));
        }
        // NOWAIT requests still queued (they arrived during a replay) fail now;
        // removing one may free the queue for those behind it.
        bool withdrew = false;
        for (const Lock& h : std::vector<Lock>(r.holders))
            if (h.state == LockState::Converting && (h.flags & kNoWait))
                withdrew |= withdraw(name, r, h.owner, h.request_id, DenyReason::NoWait, ev);
        for (const Lock& w : std::vector<Lock>(r.waiters))
            if ((w.flags & kNoWait) && !w.cache_grace)
                withdrew |= withdraw(name, r, w.owner, w.request_id, DenyReason::NoWait, ev);
        if (!withdrew) return;
    }
}

void LockTable::send_basts(const ResourceName& name, Resource& r, Events& ev) {
    auto notify_blockers = [&](LockMode m, Owner requester) {
        for (Lock& h : r.holders) {
            if (h.owner == requester || modes_compatible(h.granted, m)) continue;
            if (bast_covered(h.bast_sent, m)) continue;
            h.bast_sent |= mode_bit(m);
            ev.push_back(Event::bast(h.owner, name, m, h.grant_id));
        }
    };
    for (Owner o : r.convert) notify_blockers(find_holder(r, o)->requested, o);
    for (const Lock& w : r.waiters) notify_blockers(w.requested, w.owner);
}

bool LockTable::withdraw(const ResourceName& name, Resource& r, Owner o, uint64_t request_id,
                         DenyReason why, Events& ev) {
    auto matches = [request_id](const Lock& l) {
        return request_id == 0 || l.request_id == request_id;
    };
    if (Lock* h = find_holder(r, o)) {
        if (h->state != LockState::Converting || !matches(*h)) return false;
        ev.push_back(Event::denied(o, name, h->requested, h->request_id, why));
        h->state = LockState::Granted;
        h->requested = h->granted;
        h->request_id = h->grant_id;
        h->deadline = 0;
        h->flags = 0;
        erase_if(r.convert, [o](Owner x) { return x == o; });
        return true;
    }
    if (Lock* w = find_waiter(r, o)) {
        if (!matches(*w)) return false;
        ev.push_back(Event::denied(o, name, w->requested, w->request_id, why));
        erase_if(r.waiters, [o](const Lock& l) { return l.owner == o; });
        return true;
    }
    return false;
}

// ---- giving up locks

Events LockTable::release(Owner owner, const ResourceName& resource, int64_t now,
                          const LockValue& value) {
    now_ = now;
    Events ev;
    auto it = resources_.find(resource);
    if (it == resources_.end()) return ev;
    Resource& r = it->second;
    if (const Lock* h = find_holder(r, owner)) write_value(r, h->granted, value);
    withdraw(resource, r, owner, 0, DenyReason::Cancelled, ev);
    erase_if(r.holders, [owner](const Lock& l) { return l.owner == owner; });
    settle(resource, ev);
    return ev;
}

// Node-level caching: from's granted lock becomes to's, in place (grant
// order, since and BAST marks kept: the master already told this holder).
// If `to` already has a lock or request on the resource, from's lock is
// released instead (to's own mode stays). Only a granted lock moves.
Events LockTable::transfer(Owner from, Owner to, const ResourceName& resource, uint64_t request_id,
                           int64_t now, bool* moved, const LockValue& value) {
    now_ = now;
    Events ev;
    if (moved != nullptr) *moved = false;
    auto it = resources_.find(resource);
    if (it == resources_.end()) return ev;
    Resource& r = it->second;
    Lock* l = find_holder(r, from);
    if (l == nullptr || l->state != LockState::Granted) return ev;
    write_value(r, l->granted, value);
    if (find_holder(r, to) != nullptr || find_waiter(r, to) != nullptr) {
        erase_if(r.holders, [from](const Lock& x) { return x.owner == from; });
        settle(resource, ev);
        return ev;
    }
    l->owner = to;
    if (request_id != 0) {
        l->grant_id = l->request_id = request_id;
        ev.push_back(granted(r, to, resource, l->granted, request_id));
    }
    if (moved != nullptr) *moved = true;
    return ev;
}

Events LockTable::cancel(Owner owner, const ResourceName& resource, uint64_t request_id,
                         DenyReason reason, int64_t now) {
    now_ = now;
    Events ev;
    auto it = resources_.find(resource);
    if (it == resources_.end()) return ev;
    if (withdraw(resource, it->second, owner, request_id, reason, ev)) settle(resource, ev);
    return ev;
}

void LockTable::drop_owner_if(const std::vector<ResourceName>& names, Owner owner, bool whole_node,
                              Events& ev, uint64_t bound) {
    auto owned = [&](Owner o) { return whole_node ? o.node == owner.node : o == owner; };
    // A holder granted under, or a waiter of, a request after the bound stays.
    auto gone = [&](const Lock& l) {
        if (!owned(l.owner)) return false;
        const uint64_t id = l.state == LockState::Waiting ? l.request_id : l.grant_id;
        return released_by_bound(id, bound);
    };
    for (const ResourceName& name : names) {
        Resource& r = resources_.at(name);
        // A writer gone without writing: nobody can tell what it left (VMS).
        std::vector<Owner> dropped;
        for (const Lock& l : r.holders)
            if (gone(l)) {
                write_value(r, l.granted, LockValue::invalid());
                dropped.push_back(l.owner);
            }
        erase_if(r.holders, gone);
        erase_if(r.convert, [&](Owner o) {
            return std::find(dropped.begin(), dropped.end(), o) != dropped.end();
        });
        erase_if(r.waiters, gone);
        settle(name, ev);
    }
}

namespace {

template <typename Map, typename Pred>
std::vector<ResourceName> sorted_names_where(const Map& m, Pred p) {
    std::vector<ResourceName> names;
    for (const auto& [name, r] : m)
        if (p(r)) names.push_back(name);
    std::sort(names.begin(), names.end());
    return names;
}

}  // namespace

Events LockTable::release_all(Owner owner, int64_t now, uint64_t bound) {
    now_ = now;
    Events ev;
    auto has = [owner](const Resource& r) {
        auto mine = [owner](const Lock& l) { return l.owner == owner; };
        return std::any_of(r.holders.begin(), r.holders.end(), mine) ||
               std::any_of(r.waiters.begin(), r.waiters.end(), mine);
    };
    drop_owner_if(sorted_names_where(resources_, has), owner, false, ev, bound);
    return ev;
}

Events LockTable::release_node(uint16_t node, int64_t now) {
    now_ = now;
    Events ev;
    auto has = [node](const Resource& r) {
        auto theirs = [node](const Lock& l) { return l.owner.node == node; };
        return std::any_of(r.holders.begin(), r.holders.end(), theirs) ||
               std::any_of(r.waiters.begin(), r.waiters.end(), theirs);
    };
    drop_owner_if(sorted_names_where(resources_, has), Owner{node, 0}, true, ev);
    return ev;
}

Events LockTable::expire(int64_t now) {
    now_ = now;
    Events ev;
    struct Due {
        ResourceName name;
        Owner owner;
        uint64_t request_id;
        bool nowait;  // a NOWAIT's grace for cached locks ran out
    };
    std::vector<Due> due;
    auto overdue = [now](const Lock& l) {
        return l.state != LockState::Granted && l.deadline != 0 && l.deadline <= now;
    };
    // Only the resources where a request with a deadline was queued (a
    // table of a million granted locks is not walked every tick); those whose
    // deadlines are all gone leave the set.
    for (auto n = with_deadline_.begin(); n != with_deadline_.end();) {
        auto it = resources_.find(*n);
        bool pending = false;
        if (it != resources_.end()) {
            const Resource& r = it->second;
            for (const Lock& l : r.holders) {
                pending = pending || (l.state != LockState::Granted && l.deadline != 0);
                if (overdue(l)) due.push_back({*n, l.owner, l.request_id, false});
            }
            for (const Lock& l : r.waiters) {
                pending = pending || l.deadline != 0;
                if (overdue(l)) due.push_back({*n, l.owner, l.request_id, l.cache_grace});
            }
        }
        n = pending ? std::next(n) : with_deadline_.erase(n);
    }
    std::sort(due.begin(), due.end(), [](const Due& a, const Due& b) {
        return a.name < b.name || (a.name == b.name && a.owner < b.owner);
    });
    for (const Due& d : due) {
        auto it = resources_.find(d.name);
        if (it == resources_.end()) continue;
        if (withdraw(d.name, it->second, d.owner, d.request_id,
                     d.nowait ? DenyReason::NoWait : DenyReason::Timeout, ev))
            settle(d.name, ev);
    }
    return ev;
}

// ---- deadlocks

void LockTable::add_edges(const ResourceName& name, const Resource& r,
                          std::vector<WaitForEdge>* out) const {
    auto add = [&](const Lock& w, Owner holder) {
        WaitForEdge e;
        e.waiter = w.owner;
        e.holder = holder;
        e.resource = name;
        e.master = self_;
        e.request_id = w.request_id;
        e.since = w.since;
        e.order = w.order;
        out->push_back(e);
    };
    auto blockers = [&](const Lock& w) {
        for (const Lock& h : r.holders)
            if (h.owner != w.owner && !modes_compatible(h.granted, w.requested)) add(w, h.owner);
    };
    // Queues are strict FIFO, so each pending request also waits for the one
    // right ahead of it (which in turn waits for the one ahead of it, ...).
    const Lock* ahead = nullptr;
    for (Owner o : r.convert) {
        const Lock* c = nullptr;
        for (const Lock& h : r.holders)
            if (h.owner == o) c = &h;
        blockers(*c);
        if (ahead != nullptr) add(*c, ahead->owner);
        ahead = c;
    }
    for (const Lock& w : r.waiters) {
        blockers(w);
        if (ahead != nullptr) add(w, ahead->owner);
        ahead = &w;
    }
}

// The resources with a queue now, sorted; those whose queues emptied leave
// queued_ (a table of a million granted locks is never walked for waits).
std::vector<ResourceName> LockTable::queued_names() const {
    std::vector<ResourceName> names;
    for (auto n = queued_.begin(); n != queued_.end();) {
        auto it = resources_.find(*n);
        if (it == resources_.end() || (it->second.convert.empty() && it->second.waiters.empty())) {
            n = queued_.erase(n);
            continue;
        }
        names.push_back(*n);
        ++n;
    }
    std::sort(names.begin(), names.end());
    return names;
}

std::vector<WaitForEdge> LockTable::wait_for_edges() const {
    std::vector<WaitForEdge> edges;
    for (const ResourceName& name : queued_names()) add_edges(name, resources_.at(name), &edges);
    return edges;
}

std::optional<int64_t> LockTable::oldest_wait_since() const {
    std::optional<int64_t> oldest;
    auto see = [&oldest](int64_t since) {
        if (!oldest || since < *oldest) oldest = since;
    };
    for (const ResourceName& name : queued_names()) {
        const Resource& r = resources_.at(name);
        if (!r.convert.empty())
            for (const Lock& h : r.holders)
                if (h.state == LockState::Converting) see(h.since);
        for (const Lock& w : r.waiters) see(w.since);
    }
    return oldest;
}

void LockTable::check_deadlocks(Events& ev) {
    // One victim at a time, from a fresh graph: denying it may grant others.
    for (;;) {
        const std::vector<WaitForEdge> victims = find_deadlock_victims(wait_for_edges());
        if (victims.empty()) return;
        const WaitForEdge& v = victims.front();
        auto it = resources_.find(v.resource);
        if (it == resources_.end() ||
            !withdraw(v.resource, it->second, v.waiter, v.request_id, DenyReason::Deadlock, ev))
            return;  // cannot happen: the edge came from this table
        settle(v.resource, ev);
    }
}

Events LockTable::detect_deadlocks(int64_t now) {
    now_ = now;
    Events ev;
    if (!frozen_) check_deadlocks(ev);
    return ev;
}

// ---- remastering

Events LockTable::ingest_replay(const std::vector<ReplayEntry>& entries, int64_t now) {
    now_ = now;
    Events ev;
    std::vector<ResourceName> touched;
    for (const ReplayEntry& e : entries) {
        Resource& r = resources_[e.resource];
        const Owner o = e.owner;
        erase_if(r.holders, [o](const Lock& l) { return l.owner == o; });
        erase_if(r.convert, [o](Owner x) { return x == o; });
        erase_if(r.waiters, [o](const Lock& l) { return l.owner == o; });

        Lock l = lock_from(e);
        // Replayed requests go ahead of those that arrived during the replay.
        if (e.state == LockState::Waiting) {
            l.requested = e.requested_mode;
            l.order = next_order_++;
            r.waiters.insert(std::find_if(r.waiters.begin(), r.waiters.end(),
                                          [](const Lock& w) { return w.new_in_replay; }),
                             l);
            queued_.insert(e.resource);
        } else {
            if (!compatible_with_holders(r, e.granted_mode, o)) ++replay_conflicts_;
            // Above CR no writer can have come since this holder's grant:
            // its value is the resource's (an invalid one stays invalid).
            if (e.granted_mode != LockMode::NL && e.granted_mode != LockMode::CR &&
                e.value.carries() && !r.value_replayed) {
                r.value = e.value;
                r.value_replayed = true;
            }
            l.granted = e.granted_mode;
            l.requested = e.state == LockState::Converting ? e.requested_mode : e.granted_mode;
            if (e.state == LockState::Converting) {
                l.order = next_order_++;
                auto first_new = std::find_if(r.convert.begin(), r.convert.end(), [&r](Owner x) {
                    return find_holder(r, x)->new_in_replay;
                });
                r.convert.insert(first_new, o);
                queued_.insert(e.resource);
            }
            r.holders.push_back(l);
        }
        touched.push_back(e.resource);
    }
    if (!frozen_) {
        std::sort(touched.begin(), touched.end());
        touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
        for (const ResourceName& name : touched) settle(name, ev);
        if (options_.detect_deadlocks_on_wait) check_deadlocks(ev);
    }
    return ev;
}

Events LockTable::end_replay(int64_t now) {
    now_ = now;
    frozen_ = false;
    for (auto& [name, r] : resources_) {
        for (Lock& l : r.holders) l.new_in_replay = false;
        for (Lock& l : r.waiters) l.new_in_replay = false;
        // Rebuilt without a holder above CR: a writer may have come and gone.
        if (!r.value_replayed && r.value.state != ValueState::Invalid) {
            r.value = LockValue::invalid();
            ++value_invalidations_;
        }
        r.value_replayed = false;
    }
    Events ev;
    // Only a queue (or an empty resource) gives settle() anything to do: a
    // resource of holders alone has nobody to grant or to BAST for. (A
    // rebuild of a million cached locks sorts and settles only the few with
    // waiters.)
    for (const ResourceName& name : queued_names()) settle(name, ev);
    check_deadlocks(ev);
    return ev;
}

bool LockTable::export_resource(const ResourceName& name, ResourceState* out) {
    if (frozen_) return false;
    out->entries.clear();
    auto it = resources_.find(name);
    if (it == resources_.end()) {  // no lock: a new resource's state
        out->value = LockValue::valid(nullptr, 0);
        return true;
    }
    const Resource& r = it->second;
    out->value = r.value;
    auto entry = [&](const Lock& l, LockState state) {
        ReplayEntry e;
        e.owner = l.owner;
        e.resource = name;
        e.state = state;
        e.granted_mode = state == LockState::Waiting ? LockMode::NL : l.granted;
        e.requested_mode = state == LockState::Granted ? l.granted : l.requested;
        e.request_id = state == LockState::Granted ? l.grant_id : l.request_id;
        e.flags = state == LockState::Granted ? 0 : l.flags;
        e.since = l.since;
        out->entries.push_back(e);
    };
    for (const Lock& h : r.holders)
        if (h.state == LockState::Granted) entry(h, LockState::Granted);
    for (Owner o : r.convert)
        for (const Lock& h : r.holders)
            if (h.owner == o) entry(h, LockState::Converting);
    for (const Lock& w : r.waiters) entry(w, LockState::Waiting);
    resources_.erase(it);
    return true;
}

bool LockTable::import_resource(const ResourceName& name, const ResourceState& st, int64_t now,
                                Events* ev) {
    if (resources_.count(name) != 0) return false;
    now_ = now;
    Resource& r = resources_[name];
    r.value = st.value;
    r.value_replayed = true;  // (imported during a replay: end_replay keeps it)
    for (const ReplayEntry& e : st.entries) {
        Lock l = lock_from(e);
        if (e.state == LockState::Waiting) {
            l.requested = e.requested_mode;
            l.order = next_order_++;
            r.waiters.push_back(l);
            queued_.insert(name);
            continue;
        }
        l.granted = e.granted_mode;
        l.requested = e.state == LockState::Converting ? e.requested_mode : e.granted_mode;
        if (e.state == LockState::Converting) {
            l.order = next_order_++;
            r.convert.push_back(l.owner);
            queued_.insert(name);
        }
        r.holders.push_back(l);
    }
    settle(name, *ev);  // (while frozen, end_replay serves it)
    if (!frozen_ && options_.detect_deadlocks_on_wait) check_deadlocks(*ev);
    return true;
}

size_t LockTable::locks_on(const ResourceName& name) const {
    auto it = resources_.find(name);
    return it == resources_.end() ? 0 : it->second.holders.size() + it->second.waiters.size();
}

bool LockTable::has_lock(Owner o, const ResourceName& name) const {
    auto it = resources_.find(name);
    if (it == resources_.end()) return false;
    for (const Lock& l : it->second.holders)
        if (l.owner == o) return true;
    for (const Lock& l : it->second.waiters)
        if (l.owner == o) return true;
    return false;
}

bool LockTable::lock_ids(Owner o, const ResourceName& name, LockState* state, uint64_t* grant_id,
                         uint64_t* request_id) const {
    auto it = resources_.find(name);
    if (it == resources_.end()) return false;
    for (const std::vector<Lock>* v : {&it->second.holders, &it->second.waiters})
        for (const Lock& l : *v)
            if (l.owner == o) {
                *state = l.state;
                *grant_id = l.state == LockState::Waiting ? 0 : l.grant_id;
                *request_id = l.request_id;
                return true;
            }
    return false;
}

Events LockTable::regrant(Owner o, const ResourceName& name) const {
    Events ev;
    auto it = resources_.find(name);
    if (it == resources_.end()) return ev;
    for (const Lock& l : it->second.holders)
        if (l.owner == o && l.state == LockState::Granted)
            ev.push_back(granted(it->second, o, name, l.granted, l.grant_id));
    return ev;
}

Events LockTable::withdraw_request(Owner o, const ResourceName& name, uint64_t request_id,
                                   int64_t now) {
    Events ev = cancel(o, name, request_id, DenyReason::Cancelled, now);
    if (!ev.empty()) return ev;
    auto it = resources_.find(name);
    if (it == resources_.end()) return ev;
    const Lock* h = find_holder(it->second, o);
    if (h == nullptr || h->state != LockState::Granted || h->grant_id != request_id) return ev;
    return release(o, name, now, LockValue{});
}

size_t LockTable::drop_unmastered(const std::vector<uint16_t>& live) {
    size_t dropped = 0;
    for (auto it = resources_.begin(); it != resources_.end();) {
        if (master_for(it->first, live) != self_) {
            it = resources_.erase(it);
            ++dropped;
        } else {
            ++it;
        }
    }
    return dropped;
}

// ---- the view

std::vector<LockRow> LockTable::snapshot() const {
    std::vector<LockRow> rows;
    auto row = [&](const ResourceName& name, const Lock& l) {
        LockRow x;
        x.name = name;
        x.resource = name.to_string();
        x.master = self_;
        x.owner_node = l.owner.node;
        x.proc = l.owner.proc;
        x.state = l.state;
        x.mode = l.state == LockState::Granted ? l.granted : l.requested;
        x.held_mode = l.state == LockState::Waiting ? LockMode::NL : l.granted;
        x.since = l.since;
        x.request_id = l.request_id;
        rows.push_back(x);
    };
    for (const ResourceName& name :
         sorted_names_where(resources_, [](const Resource&) { return true; })) {
        const Resource& r = resources_.at(name);
        for (const Lock& h : r.holders)
            if (h.state == LockState::Granted) row(name, h);
        for (Owner o : r.convert)
            for (const Lock& h : r.holders)
                if (h.owner == o) row(name, h);
        for (const Lock& w : r.waiters) row(name, w);
    }
    return rows;
}

std::vector<ReplayEntry> LockTable::entries_of_node(uint16_t node) const {
    std::vector<ReplayEntry> held, pending;
    for (const auto& [name, r] : resources_) {
        for (const Lock& h : r.holders) {
            if (h.owner.node != node) continue;
            ReplayEntry e;
            e.owner = h.owner;
            e.resource = name;
            e.state = h.state;
            e.granted_mode = h.granted;
            e.requested_mode = h.state == LockState::Converting ? h.requested : h.granted;
            e.request_id = h.state == LockState::Converting ? h.request_id : h.grant_id;
            e.flags = h.state == LockState::Converting ? h.flags : 0;
            e.since = h.since;
            e.value = r.value;
            held.push_back(e);
        }
        for (const Lock& w : r.waiters) {
            if (w.owner.node != node) continue;
            ReplayEntry e;
            e.owner = w.owner;
            e.resource = name;
            e.state = LockState::Waiting;
            e.requested_mode = w.requested;
            e.request_id = w.request_id;
            e.flags = w.flags;
            e.since = w.since;
            pending.push_back(e);
        }
    }
    std::stable_sort(pending.begin(), pending.end(),
                     [](const ReplayEntry& a, const ReplayEntry& b) { return a.since < b.since; });
    held.insert(held.end(), pending.begin(), pending.end());
    return held;
}

}  // namespace pgrac::ic::ges
