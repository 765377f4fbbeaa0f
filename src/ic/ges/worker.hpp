// The GES worker of one LMS process: the master side (a LockTable for this
// worker's shard of the resources this node masters) and the client side (a
// ClientRegistry of this node's locks in the same shard), driven by GES
// messages, the clock and the membership. PostgreSQL-free: everything it needs
// from its process (sending, the membership and lease in shared memory, the
// backends' wait slots, settings, logging and counters) it asks of a
// WorkerHost. The LMS glue (src/lms/ges_service.cpp) implements the host over
// shared memory and the interconnect; the unit tests and the fuzz target
// implement it in memory.
//
// Flow of a lock request (docs/ges.md has the whole story):
//   backend --Client:Request--> own LMS w (registry.on_request)
//           --Master:Request--> master's LMS w (table.request)
//           --Reply:Grant-----> own LMS w (registry.on_granted) --> wait slot
// A master that is this node is called directly, without a message.
//
// One Worker per LMS process; the listener routes by route_key % n_lms, so a
// resource's messages always meet on the same worker index on every node and
// the state needs no locking. The worker never sends or logs itself: the host
// queues what it is given and acts on it after the worker returns (so a host
// may drain the queue where a C++ exception or a longjmp cannot meet).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "ic/base/error_log.hpp"
#include "ic/ges/client.hpp"
#include "ic/ges/deadlock.hpp"
#include "ic/ges/lock_table.hpp"
#include "ic/ges/node_cache.hpp"
#include "ic/ges/wire.hpp"
#include "ic/membership/membership.hpp"
#include "ic/ges/registry_mirror.hpp"

namespace pgrac::ic::ges {

// Request ids with bit 63 set are the worker's own (give-backs and undos):
// no backend waits for them. A backend's ids carry its wait slot and the
// slot's session tag in bits 62..32 (src/instance/ges_shmem.hpp); the worker compares
// only the high 32 bits to tell two sessions of one pid apart.
inline constexpr uint64_t kInternalRequestId = uint64_t{1} << 63;

// Which kind of GES message a body is sent as (the glue maps each to its
// interconnect message type; all go on the control lane).
enum class GesChannel : uint8_t {
    Master,    // client LMS -> master LMS: Request, Convert, Release, ReleaseAll, Cancel, Replay
    Reply,     // master LMS -> client LMS: Grant, Bast, Deny
    Deadlock,  // the cluster-wide deadlock search: WaitHint, EdgesRequest, Edges
};

// Which handler a message arrived at (the interconnect message type).
enum class WorkerRole : uint8_t {
    Client,    // from a backend of this node
    Master,    // GesChannel::Master
    Reply,     // GesChannel::Reply
    Deadlock,  // GesChannel::Deadlock
};

enum class WorkerLogLevel : uint8_t { Debug, Log, Warning };

// Counters the worker bumps (the glue keeps them in shared memory).
enum class WorkerCounter : uint8_t {
    DeadOwnersReaped,    // owners whose backend was gone, released by the reaper
    LateGrantsUndone,    // grants nobody waited for, given back
    StaleEpochRefused,   // messages of an older epoch refused
    WrongSourceRefused,  // messages from a node that may not send them
    ReplayConflicts,     // replayed grants that conflicted with granted ones
    ClusterDeadlocks,    // victims of the cluster-wide deadlock search
    // Node-level caching (docs/ges.md, "Node-level caching")
    BastsReceived,     // BASTs that reached this node
    CacheTransfers,    // released locks kept in the node's cache
    CacheGiveBacks,    // cached locks given back because of a BAST
    CacheEvictions,    // cached locks given back to make room (or a refresh)
    CacheConversions,  // conversions of a cached lock made a backend's again
    // Lock value blocks made invalid at this node's masters (docs/ges.md,
    // "Lock value blocks"): a PW/EX holder gone, a rebuild that could not tell.
    ValueInvalidations,
    // Mastership that follows use: resources this node's masters handed to
    // the node that used them most, and hand-offs not acknowledged in time.
    Remasters,
    RemasterTimeouts,
    // Direct routing (docs/ges.md, "Direct routing"): requests this node's
    // masters served from a requester lane, and those they sent back to the
    // requester's LMS (Redirect).
    DirectServed,
    DirectRedirected,
    // Requests that waited in this node for a local user of a cached lock
    // (no message: docs/ges.md, "Local waiters").
    LocalWaits,
};

class WorkerHost {
  public:
    virtual ~WorkerHost() = default;

    // ---- the interconnect
    // Queues a one-way GES message (control lane). Sent after the worker returns.
    virtual void send(uint16_t node, GesChannel channel, uint32_t route_key,
                      std::vector<uint8_t> body) = 0;

    // ---- membership (ic/membership/membership.hpp), this node's view of it
    // The lease clock (ic/membership/membership.hpp, lease_now_ms): what lease words are
    // compared with, and every timer of the worker.
    virtual uint64_t lease_clock_ms() = 0;
    // Marks a lapsed lease fenced; true if this call did it (fence_if_lapsed()).
    virtual bool fence_if_lapsed(uint64_t now_ms) = 0;
    virtual View committed_view() = 0;
    virtual uint64_t lease_word() = 0;
    // Asks the membership for a new epoch with the same members (bump_requests).
    virtual void request_new_epoch() = 0;
    // Withholds this node's lease echoes from `node` for `for_ms` (withhold_echoes()).
    virtual void withhold_echoes(uint16_t node, uint64_t for_ms) = 0;
    // A GES message of an older epoch was refused (MembershipShared::stale_epoch_messages).
    virtual void count_stale_epoch_message() = 0;
    // A GES message of an epoch this worker never adopted was dropped
    // (MembershipShared::future_epoch_messages); also in the errors view.
    virtual void count_future_epoch_message() {}
    // Restarts of LMS worker `worker` that voided this node's locks in its shard.
    virtual uint32_t shard_fences(uint32_t worker) = 0;
    virtual uint32_t bump_shard_fences(uint32_t worker) = 0;  // the new value
    // Witnesses vote and master nothing (cluster.witness_nodes). Every replay
    // marker carries it and n_lms(): a master refuses one whose differ.
    virtual NodeMask witnesses() = 0;

    // ---- the node's lock cache (ic/ges/node_cache.hpp, in shared memory);
    // nullptr: caching is off. The worker holds a partition's lock only
    // around calls on the cache, never while it sends or logs.
    virtual NodeCache* node_cache() { return nullptr; }
    virtual void lock_cache_partition(uint32_t /*partition*/) {}
    virtual void unlock_cache_partition(uint32_t /*partition*/) {}
    // The backends (pids) of this node that use cache entry `entry` while its
    // generation is `generation` (for the cluster-wide deadlock search).
    virtual std::vector<uint32_t> cache_users(uint32_t /*entry*/, uint32_t /*generation*/) {
        return {};
    }

    // ---- settings
    virtual uint32_t n_lms() = 0;               // cluster.lms_workers of this node (>= 1)
    virtual int64_t peer_timeout_ms() = 0;      // cluster.peer_timeout
    virtual int64_t deadlock_timeout_ms() = 0;  // cluster.ges_deadlock_timeout
    // cluster.ges_remaster_after: a resource's home master looks at who used it
    // after this many requests, and may hand it over (0: never).
    virtual uint32_t remaster_window() { return 0; }

    // ---- the backends' wait slots (src/instance/ges_shmem.hpp)
    // Completes backend proc's slot if it still waits for request_id (with the
    // grant's token and the resource's value block); true if delivered.
    virtual bool deliver_grant(uint32_t proc, uint64_t request_id, uint64_t token,
                               const LockValue& value) = 0;
    virtual bool deliver_denial(uint32_t proc, uint64_t request_id, DenyReason reason) = 0;
    // Whether the backend that sent request_id still has its GES session.
    virtual bool owner_alive(uint32_t proc, uint64_t request_id) = 0;
    // Direct routing (docs/ges.md, "Direct routing"). A registered direct
    // request: the backend's slot, if it still waits for request_id, lets the
    // backend complete it with the master's immediate grant (true if so).
    virtual bool mark_direct(uint32_t /*proc*/, uint64_t /*request_id*/) { return false; }
    // At an epoch change: a slot still open for its backend's own completion
    // is closed (the answer comes through this worker); true, with the grant's
    // token and value, if the backend completed it itself already (the
    // registry takes the grant over, and the slot is free again).
    virtual bool settle_direct(uint32_t /*proc*/, uint64_t /*request_id*/, uint64_t* /*token*/,
                               LockValue* /*value*/) {
        return false;
    }
    // A hint for this node's backends: `r` is mastered away from its home in
    // this epoch (mastership that follows use), so a direct request to the
    // home would only be redirected. Cleared for the worker at each epoch.
    virtual void note_moved(const ResourceName& /*r*/) {}
    // Whether backend proc's slot is armed for request_id and still waiting
    // (an answer that came before its direct request's registration).
    virtual bool slot_waits(uint32_t /*proc*/, uint64_t /*request_id*/) { return false; }
    virtual void clear_moved() {}

    // ---- reporting
    virtual void log(WorkerLogLevel level, std::string text) = 0;
    // An entry of the errors view (peer -1: none).
    virtual void record_error(ErrorType type, Severity severity, int peer,
                              const std::string& text) = 0;
    virtual void count(WorkerCounter counter) = 0;
    virtual void count_many(WorkerCounter counter, uint64_t n) {
        for (uint64_t i = 0; i < n; ++i) count(counter);
    }
};

class Worker {
  public:
    // `mirror`: the shared-memory copy of this worker's registry (docs/ges.md,
    // "LMS restart"); it outlives the process.
    Worker(WorkerHost& host, uint32_t index, uint16_t self, RegistryMirror mirror);

    // A restart of this worker (not its first start since the shared memory
    // was created): the registry comes back from the mirror (or, if it
    // overflowed, this node's locks in the shard are voided), and a new epoch
    // is asked for; nothing is served until it is committed.
    void start_after_restart(int64_t now);
    // A message that arrived for `role` from node `src` (authenticated by the
    // interconnect): decoded as untrusted input, then acted on.
    void handle(WorkerRole role, uint16_t src, const uint8_t* body, size_t len, int64_t now);
    // Direct routing (docs/ges.md, "Direct routing"): a backend of node src
    // sent a Request flagged kDirect on its requester lane to this node, the
    // resource's home master. Returns the answer for the RPC's reply, encoded:
    // Grant, Deny, Queued (the outcome comes later through the requester's
    // LMS), or Deny Redirect (not served here: the requester's LMS sends it).
    // Empty: the body is not a direct Request (malformed).
    std::vector<uint8_t> handle_direct(uint16_t src, const uint8_t* body, size_t len, int64_t now);
    // Membership changes and fencing, request deadlines, the reaper, deadlock
    // rounds (at least every 100 ms).
    void tick(int64_t now);
    // Follows the committed view and this node's lease (before every message).
    void check_membership(int64_t now);

    // Rows of this worker's table for the view; a holder's fencing token.
    // This worker's table, then the requests waiting here for a local user.
    std::vector<LockRow> snapshot() const;
    uint64_t token_of(const LockRow& r) const;
    const ClientRegistry& registry() const { return registry_; }
    uint32_t index() const { return index_; }
    uint32_t epoch() const { return epoch_; }  // 0: serving none
    bool replaying() const { return replaying_; }
    // How long a replay barrier may wait for a member's marker before it asks
    // the membership for a new epoch (kBarrierBoundTimeouts x peer_timeout).
    int64_t replay_barrier_bound_ms();
    bool member() const { return member_; }
    uint64_t basts_received() const { return bast_count_; }
    // Cached locks of this worker whose BAST waits for their local users.
    size_t cache_basts_pending() const { return cache_basts_.size(); }

  private:
    using Key = LockKey;
    struct Undo {
        uint64_t request_id;
        LockMode prior;
        // A direct request withdrawn (Withdraw): the master releases a grant
        // of it itself, so a grant that comes back is not undone here.
        bool withdrawn = false;
    };
    struct Stashed {
        uint16_t src;
        bool reply;
        GesMessage m;
        uint64_t since_ms;  // monotonic: when it arrived
    };
    static constexpr size_t kMaxStash = 100000;
    // What one member owes this worker's replay barrier in the epoch: its LMS
    // worker of this index replays this shard (worker counts being equal,
    // which its marker proves), then sends one ReplayDone.
    struct ReplaySource {
        uint64_t entries = 0;  // replayed entries accepted from it
        bool done = false;     // its marker arrived, agreed and counted right
        std::string refused;   // why its replay cannot complete in this epoch
    };

    bool is_witness(uint16_t node) { return (host_.witnesses() & node_bit(node)) != 0; }
    void log(WorkerLogLevel level, std::string text) { host_.log(level, std::move(text)); }

    void sync(Owner o, const ResourceName& r);
    void reap_dead_owners(int64_t now);
    void drop_stale_entry(const GesMessage& m, int64_t now);
    void release_one(Owner o, const ResourceName& r, int64_t now);
    void count_value_invalidations();
    void release_owner(Owner o, int64_t now, uint64_t bound = 0);
    void drop_everything(const char* why);
    void stop_serving();
    void start_epoch(const View& v, int64_t now);
    void stash(uint16_t src, const GesMessage& m, bool reply);
    void drop_future(uint16_t src, const GesMessage& m, Severity severity, const std::string& why);
    void expire_stash();
    bool epoch_ok(uint16_t src, const GesMessage& m, bool reply, int64_t now);
    void refuse_source(uint16_t src, const GesMessage& m, const char* why);
    void send_replay(const std::map<uint16_t, std::vector<ReplayEntry>>& by_master, int64_t now);
    void refuse_replay(uint16_t src, const GesMessage& m, const std::string& why);
    void on_replay_done(uint16_t src, const GesMessage& m);
    void maybe_end_replay(int64_t now);
    void barrier_overdue(uint64_t now_ms, const std::vector<uint16_t>& missing);

    int64_t deadlock_timeout_us();
    bool is_coordinator() const { return index_ == 0 && deadlock_coordinator(live_) == self_; }
    std::vector<WaitForEdge> old_edges(int64_t now, int64_t min_wait) const;
    void deadlock_tick(int64_t now);
    void hint_coordinator(int64_t age);
    void start_round(int64_t now, int64_t tau);
    void maybe_decide(int64_t now);

    void on_client(const GesMessage& m, int64_t now);
    void on_master(uint16_t src, const GesMessage& m, int64_t now);
    void report_replay_conflict(uint16_t src, const GesMessage& m);
    void on_reply(uint16_t src, const GesMessage& m, int64_t now);
    void on_deadlock(uint16_t src, const GesMessage& m, int64_t now);
    // Mastership that follows use (docs/ges.md, "Mastership that follows use").
    uint16_t master_of(const ResourceName& r) const;
    bool hosted(const ResourceName& r) const { return hosted_.count(r) != 0; }
    void note_use(const ResourceName& r, uint16_t src, int64_t now);
    void hand_off(const ResourceName& r, uint16_t to, int64_t now);
    void run_hand_offs(int64_t now);
    bool answers_for(uint16_t src, const ResourceName& r) const;
    void on_hand_off(uint16_t src, const GesMessage& m, int64_t now);
    void forward(uint16_t src, uint16_t to, const GesMessage& m);
    void on_forwarded(uint16_t src, const GesMessage& m, int64_t now);
    void remaster_tick();
    void clear_remastering();

    template <typename Map>
    static void erase_owner(Map* m, Owner o) {
        for (auto it = m->begin(); it != m->end();)
            it = it->first.owner == o ? m->erase(it) : std::next(it);
    }
    // Node-level caching (docs/ges.md, "Node-level caching").
    struct CachedConversion {
        GesMessage m;      // the backend's Convert
        int64_t deadline;  // 0: none
        int64_t since;     // when it began to wait
    };
    struct AfterTransfer {
        GesMessage m;   // a backend's new request
        int64_t since;  // when it came
    };
    bool cache_on() const;
    void direct_request(const GesMessage& m, int64_t now);
    bool serve_from_cache(const GesMessage& m, int64_t now);
    CacheMiss take_for(const GesMessage& m, bool queue_head = false);
    // Local waiters: new requests a local user's mode blocks, queued here
    // (FIFO) until the cached lock can serve them; a BAST sends them to the master.
    bool wait_locally(const GesMessage& m, int64_t now);
    bool has_local_waiters(const ResourceName& r) const;
    void serve_local_waiters(const ResourceName& r, int64_t now);
    void flush_local_waiters(const ResourceName& r, int64_t now);
    bool cancel_local_wait(const GesMessage& m, int64_t now);
    void mark_waiting(const ResourceName& r);
    void clear_waiting_marks();
    template <typename Fn>
    void each_cached_entry(Fn fn);
    std::vector<uint32_t> local_users(const ResourceName& r) const;
    void serve_after_transfer(const ResourceName& r, int64_t now);
    std::vector<AfterTransfer> take_after_transfer(const ResourceName& r);
    bool cancel_after_transfer(const GesMessage& m);
    bool keep_in_cache(Owner o, const ResourceName& r, const LockValue& value, int64_t now);
    void give_back_cached(const ResourceName& r, int64_t now);
    void cache_granted(const ResourceName& r, LockMode mode, uint64_t token, const LockValue& value,
                       int64_t now);
    void release_node_lock(const ResourceName& r, int64_t now, const LockValue& value = {});
    bool free_unused_entry(const ResourceName& r, LockValue* value);
    LockValue cached_value(const ResourceName& r);
    void mark_converting(const ResourceName& r);
    void cache_bast(const GesMessage& m, int64_t now);
    void cache_look(const ResourceName& r, int64_t now);
    void convert_cached(const GesMessage& m, int64_t now);
    bool convert_cached_now(const GesMessage& m, int64_t now);
    void cache_tick(int64_t now);
    void clear_cache();
    // grant_id (nonzero): the grant to give back; the master releases only a
    // lock granted under it (a later lock of the owner may be there first:
    // direct routing), else whatever the owner holds.
    void give_back(Owner o, const ResourceName& r, LockMode prior, int64_t now,
                   uint64_t grant_id = 0);
    void undo(Owner o, const ResourceName& r, int64_t now, uint64_t grant_id = 0);
    void to_master(const GesMessage& msg, int64_t now);
    // The answer to one request that dispatch() keeps instead of sending
    // (the direct path's RPC reply).
    struct Capture {
        Owner owner;
        uint64_t request_id = 0;
        bool got = false;
        GesMessage answer;
    };
    void dispatch(const Events& ev, int64_t now, Capture* capture = nullptr);
    // Direct routing: master side, then client side.
    const char* direct_refusal(uint16_t src, const GesMessage& m) const;
    void note_owner_id(uint16_t src, const GesMessage& m);
    void register_direct(const GesMessage& m, int64_t now);
    void adopt_direct_grant(Owner o, const ResourceName& r, uint64_t request_id, uint64_t token,
                            const LockValue& value, int64_t now);
    void settle_direct_requests(int64_t now);

    WorkerHost& host_;
    uint32_t index_;
    uint16_t self_;
    LockTable table_;
    ClientRegistry registry_;
    RegistryMirror mirror_;  // registry_'s copy in shared memory (LMS restart)
    bool mirror_full_logged_ = false;
    std::vector<uint16_t> live_{self_};
    std::vector<uint16_t> masters_{self_};  // live_ without witnesses: who masters resources
    NodeMask epoch_witnesses_ = 0;          // cluster.witness_nodes as this epoch was adopted
    // Membership as this worker follows it.
    uint32_t epoch_ = 0;      // the epoch served (0: none)
    uint32_t min_epoch_ = 0;  // a restarted worker serves from this epoch on
    bool member_ = false;     // a member with a valid lease
    uint32_t fences_seen_ = 0;
    uint32_t shard_fences_seen_ = 0;
    std::vector<Stashed> stash_;  // messages of an epoch not adopted yet, oldest first
    uint64_t future_logged_ = 0;
    // The replay barrier of the epoch: who owes what, since when (monotonic
    // ms), when it is overdue next, and how many overdue attempts in a row.
    std::map<uint16_t, ReplaySource> replay_;
    uint64_t barrier_start_ms_ = 0;
    uint64_t barrier_deadline_ms_ = 0;
    bool barrier_warned_ = false;
    uint32_t overdue_attempts_ = 0;
    uint64_t wrong_source_logged_ = 0;
    // Fencing tokens: of grants made here (master), of locks held here (client).
    std::map<Key, uint64_t> tokens_;
    std::map<Key, uint64_t> held_tokens_;
    uint32_t grant_epoch_ = 0;
    uint32_t grant_seq_ = 0;
    std::map<Key, Undo> cancelling_;   // requests cancelled, answer not yet seen
    std::map<Key, LockMode> orphans_;  // late grants superseded by a newer request
    bool replaying_ = false;
    int64_t last_reap_ = 0;
    uint64_t next_internal_id_ = 1;
    uint64_t bast_count_ = 0;
    uint64_t invalidations_seen_ = 0;  // table_.value_invalidations() already counted
    // Mastership that follows use, in this epoch only (a new epoch rebuilds
    // every table at the home masters).
    struct Use {
        uint32_t total = 0;
        uint32_t local = 0;
        uint16_t node[4] = {0, 0, 0, 0};   // the remote nodes seen first ...
        uint32_t count[4] = {0, 0, 0, 0};  // ... and their requests
    };
    std::unordered_map<ResourceName, Use, ResourceNameHash> use_;  // home: requests by node
    std::map<ResourceName, uint16_t> handed_off_;      // home: resource -> its master now
    std::map<ResourceName, uint64_t> unacked_;         // home: hand-off -> deadline (lease clock)
    std::set<ResourceName> hosted_;                    // masters here, handed by its home
    std::map<ResourceName, std::set<uint16_t>> told_;  // hosted: nodes sent Moved
    std::map<ResourceName, uint16_t> moved_;           // client: resource -> its master now
    // Direct routing, in this epoch only. Master side: the highest request id
    // of each owner seen on either path (a direct request at or below it
    // arrived after a later message of its owner, e.g. the cancel of the
    // same request: refused); past kMaxDirectOwners owners, none is served.
    static constexpr size_t kMaxDirectOwners = 65536;
    std::map<Owner, uint64_t> owner_ids_;
    bool owner_ids_full_ = false;
    // Client side: registered direct requests whose slot this worker opened
    // for the backend's own completion (not sent to the master by us).
    std::map<Key, uint64_t> direct_;
    // Answers (Grant, Deny) from a master that came before the registration
    // of the direct request they answer: the registration goes to this worker
    // through the listener, the answer of a request that waited (Queued) may
    // overtake it on a peer lane. Kept for the registration (this epoch only).
    static constexpr size_t kMaxEarlyAnswers = 65536;
    std::map<Key, std::pair<uint16_t, GesMessage>> early_answers_;
    bool keep_early_answer(uint16_t src, const GesMessage& m);
    std::set<ResourceName> drained_;  // hosted: this node's own messages go local now
    // hosted, not drained yet: this node's own messages since the import,
    // kept in order, and when the import was (lease clock)
    std::map<ResourceName, std::vector<GesMessage>> undrained_;
    std::map<ResourceName, uint64_t> hosted_since_ms_;
    std::vector<std::pair<ResourceName, uint16_t>> due_hand_offs_;  // decided, not yet made
    std::set<Key> basted_;                         // direct holders told of a BAST (not cached)
    std::map<Key, uint64_t> early_basts_;          // BASTs that came before their grant (its id)
    std::set<ResourceName> cache_basts_;           // cached locks a BAST asks back
    std::set<ResourceName> pending_basts_;         // BASTs that came before the Transfer's grant
    std::map<Key, CachedConversion> conversions_;  // conversions of cached locks waiting locally
    std::vector<AfterTransfer> after_transfer_;    // requests waiting for a Transfer's grant
    std::vector<CachedConversion> local_waiters_;  // new requests waiting for a local user (FIFO)
    // Deadlock search: every worker's hinting, and the coordinator's round.
    int64_t last_wait_check_ = 0;
    int64_t last_hint_ = 0;
    bool hinted_ = false;
    int64_t last_round_ = 0;
    uint64_t round_id_ = 0;
    DeadlockRound round_;
};

}  // namespace pgrac::ic::ges
