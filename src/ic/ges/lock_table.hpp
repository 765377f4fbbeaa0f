// The master-side GES lock table: for every resource this instance (this LMS
// worker's shard of it) masters, a grant queue, a convert queue and a wait
// queue, all FIFO.
//
// Rules (docs/ges.md has the reasoning):
//  - An owner holds at most one lock per resource. A request by an owner that
//    holds the resource converts that lock to the new mode (session semantics,
//    as pg_advisory_lock); release() drops it whatever its mode.
//  - A new request is granted only if it is compatible with every granted lock
//    and both queues are empty; otherwise it waits (or NOWAIT denies it).
//  - Conversions are served before new requests, in FIFO order; a conversion
//    is granted when compatible with every other granted lock and no
//    conversion is ahead of it. A down-conversion (to a mode that blocks no
//    more than the held one) is granted at once: it can only help others.
//  - After anything that can free a queue head, the queues are re-served in
//    order: conversions until one cannot be granted, then (only if no
//    conversion waits) new requests until one cannot be granted.
//  - A holder whose granted mode blocks a queued request gets a BAST once per
//    blocking situation: not again for a request mode no stronger than one it
//    was already told about since its mode last changed.
//  - Whenever a request queues, the local wait-for graph is checked and every
//    cycle loses its youngest waiter (Denied: deadlock).
//  - Lock value blocks (the VMS rules): every resource has a value, valid
//    and empty when it is created; a PW or EX holder writes it when it
//    releases, transfers or converts (not PW to EX) with a value; it turns
//    invalid when a PW or EX holder goes without writing it (release_all,
//    release_node, a release that says so) until a PW or EX holder writes it
//    again; every Granted event carries it. The value lives as long as the
//    resource (some lock or request on it). A rebuild (end_replay) keeps the
//    value a replayed holder above CR brought; every other resource's is
//    invalid (only CR and NL holders, or none, survived: a writer may have
//    come and gone).
//
// Every call returns the events the glue must turn into messages, in order.
// Times (now, deadline, since) are the caller's clock, in any unit; the table
// only compares them and shows them (a lock granted from a queue gets the
// `now` of the call that granted it as its since). Not thread-safe: one LMS worker owns one table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ic/ges/deadlock.hpp"
#include "ic/ges/types.hpp"

namespace pgrac::ic::ges {

struct LockRequest {
    Owner owner;
    ResourceName resource;
    LockMode mode = LockMode::NL;
    uint64_t request_id = 0;  // the requester's id, echoed in Granted/Denied
    uint8_t flags = 0;        // RequestFlag bits
    int64_t now = 0;          // arrival time: the "since" of the view
    int64_t deadline = 0;     // expire() denies it (Timeout) at this time; 0 = never
    LockValue value;  // a conversion by a PW/EX holder writes it (docs/ges.md, "Lock value blocks")
};

// One row of the GES view.
struct LockRow {
    ResourceName name;
    std::string resource;  // ResourceName::to_string()
    uint16_t master = 0;
    uint16_t owner_node = 0;
    uint32_t proc = 0;
    LockMode mode = LockMode::NL;       // granted mode, or the mode waited for
    LockMode held_mode = LockMode::NL;  // Converting: the mode still held
    LockState state = LockState::Granted;
    int64_t since = 0;  // entered this state
    uint64_t request_id = 0;
    bool local = false;  // Waiting in its own node for a local user of a cached lock
};

class LockTable {
  public:
    struct Options {
        bool detect_deadlocks_on_wait = true;  // else only detect_deadlocks() finds them
        // A NOWAIT request blocked only by nodes' cached locks (owner proc
        // kNodeOwnerProc) waits this long for them to be given back (their
        // BASTs are sent) before it is denied NoWait; 0: denied at once.
        int64_t nowait_cache_grace = 0;
    };
    explicit LockTable(uint16_t self_node) : LockTable(self_node, Options{}) {}
    LockTable(uint16_t self_node, Options options) : self_(self_node), options_(options) {}

    // Lock, or convert a lock the owner already holds (see the rules above).
    Events request(const LockRequest& rq);
    // Like request(), but only for a held lock: Denied(NotHeld) otherwise.
    Events convert(const LockRequest& rq);
    // Drops the owner's lock on the resource (and any pending conversion or
    // request of it, which gets Denied: cancelled). Nothing if none.
    // A PW/EX holder's value is written first (value: None leaves it).
    Events release(Owner owner, const ResourceName& resource, int64_t now,
                   const LockValue& value = {});
    // Node-level caching (docs/ges.md): from's granted lock on the resource
    // becomes to's (same mode and place); with a nonzero request_id, `to` is
    // told with a Granted event (the client's acknowledgement). If `to`
    // already has a lock or request there, from's is released instead.
    // Nothing if from holds no granted lock there. *moved (if given): whether
    // the lock moved. A PW/EX holder's value is written first, as by release().
    Events transfer(Owner from, Owner to, const ResourceName& resource, uint64_t request_id,
                    int64_t now, bool* moved = nullptr, const LockValue& value = {});
    // Withdraws the owner's pending request or conversion (request_id 0: any).
    // A conversion reverts to the mode still held. Denied(reason) to the owner.
    Events cancel(Owner owner, const ResourceName& resource, uint64_t request_id, DenyReason reason,
                  int64_t now);
    // Everything of one owner (backend exit) or of every owner on a node (node
    // dead), dropped silently; others are granted what becomes grantable.
    // bound (nonzero): the owner's last request id when it let everything go;
    // a lock granted under (or a request of) a later id of the same session
    // is its next one, come first by another path (direct routing), and stays.
    Events release_all(Owner owner, int64_t now, uint64_t bound = 0);
    Events release_node(uint16_t node, int64_t now);
    // Denies (Timeout) every pending request whose deadline is <= now.
    Events expire(int64_t now);
    // Full local deadlock check (automatic on every wait unless disabled).
    Events detect_deadlocks(int64_t now);

    // Remastering. Between begin_replay() and end_replay() nothing is granted,
    // denied for NOWAIT, BASTed or checked for deadlock: replayed grants are
    // reinstated as they come (in order), replayed conversions and waiters
    // queue behind them, and new requests queue too (behind every replayed
    // request: those were waiting before the membership change). end_replay() then serves
    // every queue, sends BASTs and breaks deadlocks. ingest_replay() outside
    // that window settles each touched resource at once. A replayed entry for
    // an owner that already has a lock on the resource replaces it.
    void begin_replay() { frozen_ = true; }
    Events ingest_replay(const std::vector<ReplayEntry>& entries, int64_t now);
    Events end_replay(int64_t now);
    bool replaying() const { return frozen_; }
    // Mastership that follows use (docs/ges.md): one resource's whole state
    // out of this table (holders, converting ones last in convert-queue
    // order, then waiters FIFO, as replay entries without tokens; its value),
    // and into another node's. export_resource removes it (an unknown one is
    // exported empty; false: a replay is running); import_resource serves the queues and
    // sends BASTs as after any change, or at end_replay if a replay is running
    // (false, nothing done: the resource is here already). Deadlines and BAST marks are not
    // carried: a requester's own limit cancels its request, and a holder may be told again.
    struct ResourceState {
        std::vector<ReplayEntry> entries;
        LockValue value;
    };
    bool export_resource(const ResourceName& name, ResourceState* out);
    bool import_resource(const ResourceName& name, const ResourceState& st, int64_t now,
                         Events* ev);
    size_t locks_on(const ResourceName& name) const;
    // Whether `o` holds or waits for a lock on `name` here.
    bool has_lock(Owner o, const ResourceName& name) const;
    // o's lock on name: its state, the id it was granted under (holders) and
    // the id of its pending request; false if o has none.
    bool lock_ids(Owner o, const ResourceName& name, LockState* state, uint64_t* grant_id,
                  uint64_t* request_id) const;
    // The grant of o's granted lock again (its answer was lost): no change.
    Events regrant(Owner o, const ResourceName& name) const;
    // Direct routing's withdraw: o's request request_id is cancelled if it
    // waits, or its lock released (nothing written) if it was granted under
    // exactly that id and is not converting.
    Events withdraw_request(Owner o, const ResourceName& name, uint64_t request_id, int64_t now);

    // Forgets resources that `live` no longer maps to self; returns how many.
    size_t drop_unmastered(const std::vector<uint16_t>& live);

    // Edges of the local wait-for graph, for a cluster-wide detector.
    std::vector<WaitForEdge> wait_for_edges() const;
    // When the longest-waiting pending request or conversion started waiting
    // (its since); nullopt if nothing waits. Cheap: one pass, no allocation.
    std::optional<int64_t> oldest_wait_since() const;
    // Rows for the view, ordered by resource, then grant/convert/wait queue order.
    std::vector<LockRow> snapshot() const;
    // Every lock and request of the owners on `node`, as replay entries (what
    // that node's client registry should hold: used to rebuild the registry of
    // a restarted LMS worker there). Holders first, then pending by since.
    std::vector<ReplayEntry> entries_of_node(uint16_t node) const;

    size_t resource_count() const { return resources_.size(); }
    size_t lock_count() const;
    uint16_t self_node() const { return self_; }
    // Replayed grants that conflicted with grants already present (should be
    // 0; nonzero means two nodes believed in incompatible grants).
    uint64_t replay_conflicts() const { return replay_conflicts_; }
    // Value blocks made invalid (a holder gone, a rebuild that could not tell).
    uint64_t value_invalidations() const { return value_invalidations_; }
    // The resource's value block (None: no such resource).
    LockValue value_of(const ResourceName& resource) const;

  private:
    struct Lock {
        Owner owner;
        LockState state = LockState::Waiting;
        LockMode granted = LockMode::NL;    // Granted/Converting
        LockMode requested = LockMode::NL;  // Converting/Waiting
        uint64_t grant_id = 0;              // request that was granted
        uint64_t request_id = 0;            // pending request
        uint8_t flags = 0;                  // of the pending request
        int64_t since = 0;                  // entered the current state
        int64_t deadline = 0;               // of the pending request; 0 = none
        uint64_t order = 0;                 // arrival order of the pending request
        uint8_t bast_sent = 0;              // blocked modes already BASTed (bit per mode)
        bool new_in_replay = false;         // queued by request() during a replay
        bool cache_grace = false;           // NOWAIT waiting for cached locks to come back
    };
    struct Resource {
        std::vector<Lock> holders;   // grant queue: Granted and Converting, grant order
        std::vector<Owner> convert;  // convert queue: converting holders, FIFO
        std::vector<Lock> waiters;   // wait queue, FIFO
        LockValue value = LockValue::valid(nullptr, 0);
        bool value_replayed = false;  // a rebuild's holder above CR brought the value
        bool empty() const { return holders.empty() && waiters.empty(); }
    };
    using Map = std::unordered_map<ResourceName, Resource, ResourceNameHash>;

    Events submit(const LockRequest& rq, bool convert_only);
    void start_conversion(Resource& r, Lock& l, const LockRequest& rq, Events& ev);
    bool blocked_only_by_cache(const Resource& r, const LockRequest& rq) const;
    std::vector<ResourceName> queued_names() const;
    // Serves the queues, denies NOWAIT leftovers, sends BASTs, and erases the
    // resource if it is empty. Skipped (except the erase) while frozen.
    void settle(const ResourceName& name, Events& ev);
    void serve_queues(const ResourceName& name, Resource& r, Events& ev);
    void send_basts(const ResourceName& name, Resource& r, Events& ev);
    // Withdraws a pending request: conversion reverts, waiter goes. Denied(why).
    bool withdraw(const ResourceName& name, Resource& r, Owner o, uint64_t request_id,
                  DenyReason why, Events& ev);
    void drop_owner_if(const std::vector<ResourceName>& names, Owner owner, bool whole_node,
                       Events& ev, uint64_t bound = 0);
    void check_deadlocks(Events& ev);
    static Event granted(const Resource& r, Owner o, const ResourceName& name, LockMode m,
                         uint64_t id);
    // A holder of `held` writes `v` (or marks it invalid); nothing unless
    // `held` is PW or EX.
    void write_value(Resource& r, LockMode held, const LockValue& v);
    void add_edges(const ResourceName& name, const Resource& r,
                   std::vector<WaitForEdge>* out) const;

    static Lock lock_from(const ReplayEntry& e);
    static Lock* find_holder(Resource& r, Owner o);
    static Lock* find_waiter(Resource& r, Owner o);
    static bool compatible_with_holders(const Resource& r, LockMode m, Owner except);

    uint16_t self_;
    Options options_;
    Map resources_;
    // Resources where a pending request has (or had) a deadline: expire()'s work list.
    std::unordered_set<ResourceName, ResourceNameHash> with_deadline_;
    // Resources where a request or conversion queued (a superset of those
    // with a queue now; queued_names() prunes it).
    mutable std::unordered_set<ResourceName, ResourceNameHash> queued_;
    uint64_t next_order_ = 1;
    int64_t now_ = 0;  // the current call's time
    bool frozen_ = false;
    uint64_t replay_conflicts_ = 0;
    uint64_t value_invalidations_ = 0;
};

}  // namespace pgrac::ic::ges
