// The GES glue in an LMS worker: the master side (a LockTable for this
// worker's shard of the resources this node masters) and the client side (a
// ClientRegistry of this node's locks in the same shard), driven by
// interconnect messages. One Worker object per LMS process; the listener
// routes by route_key % n_lms, so a resource's messages always meet on the
// same worker index on every node and the state needs no locking.
//
// Flow of a lock request (docs/ges.md has the whole story):
//   backend --Client:Request--> own LMS w (registry.on_request)
//           --Master:Request--> master's LMS w (table.request)
//           --Reply:Grant-----> own LMS w (registry.on_granted) --> wait slot
// A master that is this node is called directly, without a message.
//
// Boundary: the handlers below are C entry points that run the C++ in
// guarded() and only then send (pgrac_ic_send may wait and check for
// interrupts) and log, from globals, with no C++ object live on the stack.
extern "C" {
#include "postgres.h"

#include "miscadmin.h"
}

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ges_shmem.hpp"
#include "guc.hpp"
#include "ic/atomics.hpp"
#include "ic/ges_client.hpp"
#include "ic/ges_lock_table.hpp"
#include "ic/ges_wire.hpp"
#include "lms/ges_service.hpp"
#include "lms/handler_registry.hpp"
#include "pg_boundary.hpp"
#include "pgrac_ic/pgrac_ic.h"
#include "shmem.hpp"

namespace pgrac::glue {

namespace {

using namespace pgrac::ic;
using namespace pgrac::ic::ges;

constexpr long kTickMs = 100;
// How often a worker looks for requests older than cluster.ges_deadlock_timeout.
constexpr int64_t kWaitCheckUs = 50000;
// How often a worker looks for local owners whose backend is gone.
constexpr int64_t kReapUs = 250000;

struct OutMsg {
    uint16_t node;
    uint16_t type;
    uint32_t route_key;
    std::vector<uint8_t> body;
};

// Outgoing messages and log lines, filled by the C++ code and drained by
// flush() outside of it.
std::vector<OutMsg> g_out;
size_t g_out_sent = 0;
std::vector<std::string> g_logs;
std::vector<std::string> g_warnings;    // WARNING
std::vector<std::string> g_debug_logs;  // DEBUG1

struct Key {
    ResourceName resource;
    Owner owner;
    bool operator<(const Key& o) const {
        return resource < o.resource || (resource == o.resource && owner < o.owner);
    }
};

std::string list_text(const std::vector<uint16_t>& v) {
    std::string s = "{";
    for (size_t i = 0; i < v.size(); i++) s += (i ? "," : "") + std::to_string(v[i]);
    return s + "}";
}

// A witness (cluster.witness_nodes) votes in membership and masters nothing.
bool is_witness(uint16_t node) {
    return pgrac::glue::witness_mask() & node_bit(node);
}

class Worker {
  public:
    Worker(uint32_t index, uint16_t self)
        : index_(index), self_(self), table_(self), mirror_(ges_registry_mirror(index)) {
        if (GesShared* g = ges_shared()) shard_fences_seen_ = load_acquire(&g->shard_fences[index]);
        if (IcShared* shm = shared()) fences_seen_ = lease_fences(lease_word(&shm->membership));
    }

    // ---- restart of this LMS worker (docs/ges.md, "LMS restart")
    //
    // The previous process of this worker took its lock table (the master
    // side of the shard) and its registry (this node's client side of it)
    // with it. The registry comes back from its copy in shared memory (the
    // mirror, kept by every change); then a new epoch is asked for, in which
    // every master rebuilds its table from the registries, this one included.
    // Until that epoch the worker serves nothing: its empty table must not
    // grant. Only if the mirror overflowed are this node's locks in the shard
    // voided instead (shard_fences[w], which every holder checks at its next
    // GES call).
    void start_after_restart(int64_t now) {
        (void)now;
        IcShared* shm = shared();
        GesShared* g = ges_shared();
        min_epoch_ = committed_view(&shm->membership).epoch + 1;
        std::string got;
        if (mirror_.overflowed()) {
            shard_fences_seen_ = fetch_add(&g->shard_fences[index_], 1u) + 1;
            mirror_.clear();
            got =
                "its registry copy had overflowed: this node's global locks in its shard are "
                "void";
        } else {
            size_t n = 0;
            const std::vector<ReplayEntry> kept = mirror_.entries();
            mirror_.clear();  // written again below, with counts this process can trust
            for (const ReplayEntry& e : kept) {
                if (e.owner.node != self_) continue;
                registry_.restore(e);
                if (e.state != LockState::Waiting && e.token != 0)
                    held_tokens_[Key{e.resource, e.owner}] = e.token;
                sync(e.owner, e.resource);
                n++;
            }
            got = "got back " + std::to_string(n) + " lock(s) and request(s) of this node";
        }
        count(&shm->membership.bump_requests);
        g_logs.push_back("GES (LMS " + std::to_string(index_) + "): restarted; " + got +
                         "; serves again from epoch " + std::to_string(min_epoch_) + " on");
    }

    // Keeps the shared-memory copy of the registry entry of (o, r) current.
    void sync(Owner o, const ResourceName& r) {
        auto e = registry_.find(o, r);
        if (!e) {
            mirror_.erase(o, r);
            return;
        }
        auto t = held_tokens_.find(Key{r, o});
        if (t != held_tokens_.end() && e->state != LockState::Waiting) e->token = t->second;
        if (!mirror_.put(*e) && !mirror_full_logged_) {
            mirror_full_logged_ = true;
            g_warnings.push_back("GES (LMS " + std::to_string(index_) +
                                 "): the registry copy is full (" +
                                 std::to_string(mirror_.capacity()) +
                                 " entries): a restart of this worker would void this node's "
                                 "global locks in its shard");
        }
    }

    // ---- owners whose backend is gone (docs/ges.md, "Cleanup")
    //
    // A backend's exit hook sends ReleaseAll, but that can be lost (listener
    // restarting, ring full) or never sent. Every kReapUs, each local owner in
    // the registry whose wait slot no longer belongs to it (its pid, and the
    // session tag in its request ids) has its locks released: all of them
    // (ReleaseAll) if none of its entries is from a live session, else (a new
    // backend reusing the pid) the stale resources one by one.
    void reap_dead_owners(int64_t now) {
        if (now - last_reap_ < kReapUs) return;
        last_reap_ = now;
        std::map<Owner, std::vector<ResourceName>> dead;
        std::set<Owner> live_owner;
        for (const ReplayEntry& e : registry_.locks()) {
            if (e.owner.node != self_) continue;
            if (ges_owner_alive(static_cast<int32_t>(e.owner.proc), e.request_id))
                live_owner.insert(e.owner);
            else
                dead[e.owner].push_back(e.resource);
        }
        for (auto& [o, resources] : dead) {
            if (GesShared* g = ges_shared()) count(&g->dead_owners_reaped);
            g_logs.push_back("GES (LMS " + std::to_string(index_) + "): backend " +
                             std::to_string(o.proc) +
                             " is gone but still had global locks; releasing " +
                             std::to_string(resources.size()));
            if (live_owner.count(o) == 0) {
                release_owner(o, now);
                continue;
            }
            for (const ResourceName& r : resources) release_one(o, r, now);
        }
    }

    // A new request from a session whose pid had entries of a dead session on
    // the same resource (pid reuse faster than the reaper): drop the stale one
    // first, so that the new request is not taken for a conversion of it.
    void drop_stale_entry(const GesMessage& m, int64_t now) {
        auto e = registry_.find(m.owner, m.resource);
        if (!e || (e->request_id & kGesInternalId) || (m.request_id & kGesInternalId) ||
            (e->request_id >> 32) == (m.request_id >> 32))
            return;
        release_one(m.owner, m.resource, now);
    }

    void release_one(Owner o, const ResourceName& r, int64_t now) {
        const Key k{r, o};
        registry_.on_released(o, r);
        held_tokens_.erase(k);
        cancelling_.erase(k);
        orphans_.erase(k);
        sync(o, r);
        GesMessage m;
        m.type = GesMsgType::Release;
        m.owner = o;
        m.resource = r;
        to_master(m, now);
    }

    // Everything of one owner, at every live master (its worker of this index).
    void release_owner(Owner o, int64_t now) {
        registry_.on_released_all(o);
        mirror_.erase_owner(o);
        erase_owner(&cancelling_, o);
        erase_owner(&orphans_, o);
        erase_owner(&held_tokens_, o);
        if (epoch_ == 0) return;  // outside an epoch the next replay leaves them out
        GesMessage m;
        m.type = GesMsgType::ReleaseAll;
        m.epoch = epoch_;
        m.owner = o;
        std::vector<uint8_t> body;
        if (encode_ges_message(m, &body) != GesWireError::None) return;
        for (uint16_t n : live_) {
            if (n == self_)
                on_master(self_, m, now);
            else
                g_out.push_back({n, kMsgGesMaster, index_, body});
        }
    }

    uint32_t index() const { return index_; }

    // ---- membership, fencing and epochs (docs/ges.md, "Membership, leases and epochs")
    //
    // The worker follows the committed view and this node's lease
    // (ic/membership.hpp), never raw peer states. In each epoch every master
    // starts from an empty table, rebuilt from every member's registry
    // (replay), and serves nothing until each member's last batch of that
    // epoch has arrived: no timeout ends the barrier early. Messages of an
    // older epoch are refused; those of a newer one wait until this worker
    // has adopted it.

    void check_membership(int64_t now) {
        IcShared* shm = shared();
        GesShared* g = ges_shared();
        MembershipShared* ms = &shm->membership;
        const uint64_t now_ms = monotonic_ns() / 1000000;
        if (fence_if_lapsed(ms, now_ms))
            g_logs.push_back("GES (LMS " + std::to_string(index_) +
                             "): this node's lease expired; fencing it");
        // The view first: a fence is published before any later epoch.
        const View v = committed_view(ms);
        const uint64_t w = lease_word(ms);
        const uint32_t shard = load_acquire(&g->shard_fences[index_]);
        if (lease_fences(w) != fences_seen_ || shard != shard_fences_seen_) {
            const bool node = lease_fences(w) != fences_seen_;
            fences_seen_ = lease_fences(w);
            shard_fences_seen_ = shard;
            drop_everything(node ? "this node was fenced (it lost its lease)"
                                 : "this LMS worker restarted");
        }
        // A view of witnesses only (no node may master) serves nothing.
        bool any_master = false;
        for (uint16_t n : mask_nodes(v.members)) any_master = any_master || !is_witness(n);
        const bool ok = lease_valid(w, now_ms) && has_node(v.members, self_) && any_master;
        if (!ok) {
            if (epoch_ != 0) {
                g_logs.push_back("GES (LMS " + std::to_string(index_) +
                                 "): not a member of epoch " + std::to_string(v.epoch) +
                                 " with a lease; serving nothing");
                stop_serving();
            }
            member_ = false;
            return;
        }
        member_ = true;
        if (v.epoch != epoch_) start_epoch(v, now);
    }

    // Everything this worker knew is void (the node was fenced, or the
    // worker restarted): waiting backends are told, the rest forgotten.
    void drop_everything(const char* why) {
        size_t waiting = 0;
        for (const ReplayEntry& e : registry_.locks()) {
            if (e.owner.node != self_ || e.state == LockState::Granted) continue;
            ges_deliver(static_cast<int32_t>(e.owner.proc), e.request_id,
                        kGesDenied | static_cast<uint32_t>(DenyReason::NoQuorum) << 8);
            waiting++;
        }
        g_logs.push_back("GES (LMS " + std::to_string(index_) + "): " + why + "; dropping " +
                         std::to_string(registry_.size()) + " local lock entries (" +
                         std::to_string(waiting) + " waiting, denied) and " +
                         std::to_string(table_.lock_count()) + " mastered locks");
        registry_ = ClientRegistry();
        held_tokens_.clear();
        mirror_.clear();
        stop_serving();
    }

    void stop_serving() {
        table_ = LockTable(self_);
        tokens_.clear();
        cancelling_.clear();
        orphans_.clear();
        replaying_ = false;
        round_.finish();
        epoch_ = 0;
        live_.assign(1, self_);
        masters_.assign(1, self_);
    }

    void start_epoch(const View& v, int64_t now) {
        if (v.epoch < min_epoch_) return;  // a restarted worker waits for a new epoch
        const std::vector<uint16_t> old = live_;
        const uint32_t old_epoch = epoch_;
        epoch_ = v.epoch;
        live_.clear();
        masters_.clear();
        for (uint16_t n : mask_nodes(v.members)) {
            live_.push_back(n);
            if (!is_witness(n)) masters_.push_back(n);
        }
        table_ = LockTable(self_);
        tokens_.clear();
        table_.begin_replay();
        replaying_ = true;
        barrier_since_ = now;
        barrier_warned_ = false;
        replay_done_.clear();
        cancelling_.clear();
        orphans_.clear();
        round_.finish();
        if (old != live_ || old_epoch == 0)
            g_logs.push_back("GES (LMS " + std::to_string(index_) + "): epoch " +
                             std::to_string(old_epoch) + " " + list_text(old) + " -> " +
                             std::to_string(epoch_) + " " + list_text(live_) +
                             "; rebuilding the shard");
        else
            g_debug_logs.push_back("GES (LMS " + std::to_string(index_) + "): epoch " +
                                   std::to_string(epoch_) + "; rebuilding the shard");
        // Client side: every member gets our locks it masters now (possibly
        // none: the last-batch marker is what it waits for).
        std::map<uint16_t, std::vector<ReplayEntry>> by_master;
        for (uint16_t m : masters_) by_master[m];
        for (ReplayEntry e : registry_.locks()) {
            auto t = held_tokens_.find(Key{e.resource, e.owner});
            if (t != held_tokens_.end() && e.state != LockState::Waiting) e.token = t->second;
            by_master[master_for(e.resource, masters_)].push_back(e);
        }
        size_t replayed = 0, kept = 0;
        for (auto& [m, entries] : by_master) {
            kept += entries.size();
            std::vector<std::vector<uint8_t>> bodies = encode_replay_messages(entries, epoch_);
            for (std::vector<uint8_t>& body : bodies) {
                GesMessage count_m;
                if (decode_ges_message(body.data(), body.size(), &count_m) == GesWireError::None)
                    replayed += count_m.entries.size();
            }
            for (std::vector<uint8_t>& body : bodies) {
                if (m == self_) {
                    GesMessage dm;
                    if (decode_ges_message(body.data(), body.size(), &dm) == GesWireError::None)
                        on_master(self_, dm, now);
                } else {
                    g_out.push_back({m, kMsgGesMaster, index_, std::move(body)});
                }
            }
        }
        if (replayed != kept) {
            // An entry the wire cannot carry would be dropped from every
            // table: say so loudly (it must not happen).
            const std::string text =
                "GES (LMS " + std::to_string(index_) + "): epoch " + std::to_string(epoch_) + ": " +
                std::to_string(kept - replayed) + " registry entries could not be replayed";
            g_warnings.push_back(text);
            shared()->errors.add(ErrorType::Internal, Severity::Error, -1, unix_time_us(),
                                 text.c_str());
        }
        // Messages of this epoch that came before we adopted it.
        std::vector<Stashed> later;
        std::vector<Stashed> now_due;
        for (Stashed& s : stash_) {
            if (s.m.epoch > epoch_)
                later.push_back(std::move(s));
            else if (s.m.epoch == epoch_)
                now_due.push_back(std::move(s));
        }
        stash_ = std::move(later);
        for (Stashed& s : now_due) {
            if (s.reply)
                on_reply(s.src, s.m, now);
            else
                on_master(s.src, s.m, now);
        }
        maybe_end_replay(now);
    }

    // A message for an epoch this worker has not adopted yet: keep it (bounded).
    void stash(uint16_t src, const GesMessage& m, bool reply) {
        if (stash_.size() >= kMaxStash) {
            g_logs.push_back("GES (LMS " + std::to_string(index_) +
                             "): too many messages of a future epoch; dropping one from node " +
                             std::to_string(src) + " and asking for a new epoch");
            count(&shared()->membership.bump_requests);  // the rebuild recovers what it said
            return;
        }
        stash_.push_back(Stashed{src, reply, m});
    }

    // Whether a message of epoch e may be acted on now (else it is stashed or refused).
    bool epoch_ok(uint16_t src, const GesMessage& m, bool reply, int64_t now) {
        if (m.epoch > epoch_) {
            check_membership(now);
            if (m.epoch > epoch_) {  // not adopted yet (or not serving): keep it
                stash(src, m, reply);
                return false;
            }
        }
        if (epoch_ == 0) return false;
        if (m.epoch < epoch_) {
            if (GesShared* g = ges_shared()) count(&g->stale_epoch_refused);
            count(&shared()->membership.stale_epoch_messages);
            shared()->errors.add(
                ErrorType::StaleEpoch, Severity::Info, src, unix_time_us(),
                (std::string(ges_msg_type_name(m.type)) + " of epoch " + std::to_string(m.epoch) +
                 " refused in epoch " + std::to_string(epoch_))
                    .c_str());
            g_debug_logs.push_back(std::string("GES: ") + ges_msg_type_name(m.type) + " of epoch " +
                                   std::to_string(m.epoch) + " from node " + std::to_string(src) +
                                   " refused in epoch " + std::to_string(epoch_));
            return false;
        }
        return true;
    }

    void refuse_source(uint16_t src, const GesMessage& m, const char* why) {
        if (GesShared* g = ges_shared()) count(&g->wrong_source_refused);
        std::string text = std::string("GES: ") + ges_msg_type_name(m.type) + " from node " +
                           std::to_string(src) + " refused: " + why;
        if (wrong_source_logged_++ < 20) g_logs.push_back(text);
        shared()->errors.add(ErrorType::WrongSource, Severity::Warning, src, unix_time_us(),
                             text.c_str());
    }

    void maybe_end_replay(int64_t now) {
        if (!replaying_) return;
        if (is_witness(self_)) {  // masters nothing: nothing to wait for
            replaying_ = false;
            return;
        }
        std::string missing;
        for (uint16_t s : live_)
            if (replay_done_.count(s) == 0) missing += " " + std::to_string(s);
        if (!missing.empty()) {
            const int64_t wait = static_cast<int64_t>(pgrac_peer_timeout_ms) * 1000;
            if (!barrier_warned_ && now - barrier_since_ > wait) {
                barrier_warned_ = true;
                g_logs.push_back("GES (LMS " + std::to_string(index_) + "): epoch " +
                                 std::to_string(epoch_) + " still waits for the replay of node(s)" +
                                 missing +
                                 "; their shard is not served until they report or "
                                 "leave the membership");
            }
            return;
        }
        replaying_ = false;
        dispatch(table_.end_replay(now), now);
    }

    void tick(int64_t now) {
        check_membership(now);
        maybe_end_replay(now);
        if (epoch_ != 0 && !replaying_) dispatch(table_.expire(now), now);
        reap_dead_owners(now);
        if (epoch_ != 0) deadlock_tick(now);
    }

    // ---- the cluster-wide deadlock search (docs/ges.md, "Deadlocks")
    //
    // Every worker: when one of its pending requests has waited longer than
    // cluster.ges_deadlock_timeout (tau), hint the coordinator (LMS 0 of the
    // lowest live node), at most once per tau. The coordinator: when hinted,
    // at most once per tau, ask every live node's every LMS worker for its
    // wait-for edges older than tau (one-way messages, answered at once: no
    // LMS ever waits for another), and when all have answered within tau,
    // cancel each cycle's victim at its master.

    static int64_t deadlock_timeout_us() {
        return static_cast<int64_t>(std::max(1, pgrac_ges_deadlock_timeout_ms)) * 1000;
    }

    bool is_coordinator() const { return index_ == 0 && deadlock_coordinator(live_) == self_; }

    std::vector<WaitForEdge> old_edges(int64_t now, int64_t min_wait) const {
        return edges_waiting_at_least(table_.wait_for_edges(), now, min_wait);
    }

    void deadlock_tick(int64_t now) {
        const int64_t tau = deadlock_timeout_us();
        if (!replaying_ && now - last_wait_check_ >= std::min(kWaitCheckUs, tau)) {
            last_wait_check_ = now;
            const std::optional<int64_t> oldest = table_.oldest_wait_since();
            if (oldest && now - *oldest >= tau && now - last_hint_ >= tau) {
                last_hint_ = now;
                hint_coordinator(now - *oldest);
            }
        }
        if (!is_coordinator()) {
            round_.finish();
            hinted_ = false;
            return;
        }
        if (round_.active() && now - round_.started() > tau) {
            std::string who;
            for (const DeadlockRound::Source& s : round_.missing())
                who += " " + std::to_string(s.node) + "/" + std::to_string(s.worker);
            g_debug_logs.push_back("GES deadlock search: round " + std::to_string(round_.id()) +
                                   " incomplete after " + std::to_string(tau / 1000) +
                                   " ms (no answer from node/LMS" + who + "); dropped");
            round_.finish();
        }
        if (!round_.active() && hinted_ && now - last_round_ >= tau) start_round(now, tau);
    }

    void hint_coordinator(int64_t age) {
        const uint16_t coordinator = deadlock_coordinator(live_);
        if (coordinator == self_ && index_ == 0) {
            hinted_ = true;
            return;
        }
        GesMessage h;
        h.type = GesMsgType::WaitHint;
        h.worker = static_cast<uint16_t>(index_);
        h.wait_ms = static_cast<uint32_t>(std::min<int64_t>(age / 1000, UINT32_MAX));
        OutMsg out{coordinator, kMsgGesDeadlock, 0, {}};
        if (encode_ges_message(h, &out.body) == GesWireError::None) g_out.push_back(std::move(out));
    }

    void start_round(int64_t now, int64_t tau) {
        round_id_ = std::max(static_cast<uint64_t>(now), round_id_ + 1);
        const uint32_t n_lms = std::max<uint32_t>(1, shared()->n_lms);
        std::vector<DeadlockRound::Source> expected;
        for (uint16_t n : live_)
            for (uint32_t w = 0; w < n_lms; w++) expected.push_back({n, static_cast<uint16_t>(w)});
        round_.start(round_id_, expected, now);
        hinted_ = false;
        last_round_ = now;
        GesMessage rq;
        rq.type = GesMsgType::EdgesRequest;
        rq.round = round_id_;
        rq.wait_ms = static_cast<uint32_t>(tau / 1000);
        std::vector<uint8_t> body;
        if (encode_ges_message(rq, &body) != GesWireError::None) {
            round_.finish();
            return;
        }
        for (const DeadlockRound::Source& s : expected) {
            if (s.node == self_ && s.worker == index_)
                round_.add(self_, s.worker, round_id_, true, replaying_, old_edges(now, tau));
            else
                g_out.push_back({s.node, kMsgGesDeadlock, s.worker, body});
        }
        maybe_decide(now);
    }

    void on_deadlock(uint16_t src, const GesMessage& m, int64_t now) {
        switch (m.type) {
            case GesMsgType::WaitHint:
                if (is_coordinator()) hinted_ = true;
                return;
            case GesMsgType::EdgesRequest: {
                const int64_t min_wait = static_cast<int64_t>(m.wait_ms) * 1000;
                for (std::vector<uint8_t>& body :
                     encode_edges_messages(m.round, static_cast<uint16_t>(index_),
                                           old_edges(now, min_wait), replaying_))
                    g_out.push_back({src, kMsgGesDeadlock, 0, std::move(body)});
                return;
            }
            case GesMsgType::Edges:
                round_.add(src, m.worker, m.round, (m.flags & kEdgesLast) != 0,
                           (m.flags & kEdgesIncomplete) != 0, m.edges);
                maybe_decide(now);
                return;
            default:
                g_logs.push_back(std::string("GES: unexpected ") + ges_msg_type_name(m.type) +
                                 " in the deadlock search, from node " + std::to_string(src));
        }
    }

    void maybe_decide(int64_t now) {
        if (!round_.complete()) return;
        const int64_t tau = deadlock_timeout_us();
        const int64_t took = now - round_.started();
        if (round_.spoiled() || took > tau) {
            // Snapshots further apart than tau, or a table being rebuilt:
            // a cycle in them might not have existed at any one moment.
            g_debug_logs.push_back(
                "GES deadlock search: round " + std::to_string(round_.id()) +
                (round_.spoiled() ? " spoiled (a table is replaying)" : " took too long") +
                "; dropped");
            round_.finish();
            return;
        }
        const size_t n_edges = round_.edges().size();
        const std::vector<WaitForEdge> victims = find_deadlock_victims(round_.edges());
        g_debug_logs.push_back("GES deadlock search: round " + std::to_string(round_.id()) + ": " +
                               std::to_string(n_edges) + " old wait-for edges, " +
                               std::to_string(victims.size()) + " cycle(s), " +
                               std::to_string(took) + " us");
        round_.finish();
        const uint32_t n_lms = std::max<uint32_t>(1, shared()->n_lms);
        for (const WaitForEdge& v : victims) {
            if (GesShared* g = ges_shared()) count(&g->cluster_deadlocks);
            g_logs.push_back(
                "GES: deadlock across instances or LMS workers: cancelling the "
                "request of node " +
                std::to_string(v.waiter.node) + " pid " + std::to_string(v.waiter.proc) +
                " for \"" + v.resource.to_string() + "\" (mastered on node " +
                std::to_string(v.master) + ")");
            GesMessage c;
            c.type = GesMsgType::Cancel;
            c.owner = v.waiter;
            c.resource = v.resource;
            c.request_id = v.request_id;
            c.reason = DenyReason::Deadlock;
            c.epoch = epoch_;
            if (v.master == self_ && worker_for(v.resource, n_lms) == index_) {
                on_master(self_, c, now);
                continue;
            }
            OutMsg out{v.master, kMsgGesMaster, route_key_for(v.resource), {}};
            if (encode_ges_message(c, &out.body) == GesWireError::None)
                g_out.push_back(std::move(out));
        }
    }

    // ---- client side: from this node's backends

    void on_client(const GesMessage& m, int64_t now) {
        const Key k{m.resource, m.owner};
        if (!member_ && (m.type == GesMsgType::Request || m.type == GesMsgType::Convert)) {
            // Not a member with a lease (joining, fenced, no quorum): refuse at once.
            ges_deliver(static_cast<int32_t>(m.owner.proc), m.request_id,
                        kGesDenied | static_cast<uint32_t>(DenyReason::NoQuorum) << 8);
            return;
        }
        switch (m.type) {
            case GesMsgType::Request:
            case GesMsgType::Convert: {
                // The backend resends a request after a restart of this worker
                // (the old process may have taken it unrecorded): one we have
                // is not new; a grant of it that never reached the slot is
                // delivered again.
                auto have = registry_.find(m.owner, m.resource);
                if (have && have->request_id == m.request_id) {
                    if (have->state == LockState::Granted) {
                        auto t = held_tokens_.find(k);
                        ges_deliver(static_cast<int32_t>(m.owner.proc), m.request_id, kGesGranted,
                                    t != held_tokens_.end() ? t->second : 0);
                    }
                    return;
                }
                drop_stale_entry(m, now);
                if (!registry_.on_request(m.owner, m.resource, m.mode, m.request_id, m.flags,
                                          now)) {
                    ges_deliver(static_cast<int32_t>(m.owner.proc), m.request_id,
                                kGesDenied | static_cast<uint32_t>(DenyReason::AlreadyPending)
                                                 << 8);
                    return;
                }
                sync(m.owner, m.resource);
                to_master(m, now);  // outside an epoch, the next epoch's replay carries it
                return;
            }
            case GesMsgType::Release:
                registry_.on_released(m.owner, m.resource);
                held_tokens_.erase(k);
                cancelling_.erase(k);
                orphans_.erase(k);
                sync(m.owner, m.resource);
                to_master(m, now);
                return;
            case GesMsgType::ReleaseAll:
                release_owner(m.owner, now);
                return;
            case GesMsgType::Cancel: {
                auto e = registry_.find(m.owner, m.resource);
                if (!e || e->state == LockState::Granted ||
                    (m.request_id != 0 && e->request_id != m.request_id))
                    return;  // already answered: the backend handles the outcome
                const LockMode prior =
                    e->state == LockState::Converting ? e->granted_mode : LockMode::NL;
                registry_.on_denied(m.owner, m.resource, e->request_id);
                sync(m.owner, m.resource);
                cancelling_[k] = Undo{e->request_id, prior};
                GesMessage c = m;
                c.request_id = e->request_id;
                to_master(c, now);
                return;
            }
            default:
                g_logs.push_back(std::string("GES: unexpected ") + ges_msg_type_name(m.type) +
                                 " from a backend");
        }
    }

    // ---- master side

    void on_master(uint16_t src, const GesMessage& m, int64_t now) {
        if (!epoch_ok(src, m, false, now)) return;
        if (!std::binary_search(live_.begin(), live_.end(), src)) {
            refuse_source(src, m, "the node is not a member of this epoch");
            return;
        }
        // The master acts on the authenticated source, not on the body: an
        // owner is always a backend of the node that sends for it (a deadlock
        // victim's cancel comes from the search's coordinator).
        const bool coordinator_cancel =
            m.type == GesMsgType::Cancel && m.reason == DenyReason::Deadlock;
        if (m.type != GesMsgType::Replay && m.owner.node != src && !coordinator_cancel) {
            refuse_source(src, m, "it names an owner of another node");
            return;
        }
        if (m.type != GesMsgType::Replay && m.type != GesMsgType::ReleaseAll &&
            master_for(m.resource, masters_) != self_) {
            refuse_source(src, m, "this node is not the resource's master in this epoch");
            return;
        }
        Events ev;
        switch (m.type) {
            case GesMsgType::Request:
            case GesMsgType::Convert: {
                LockRequest rq;
                rq.owner = m.owner;
                rq.resource = m.resource;
                rq.mode = m.mode;
                rq.request_id = m.request_id;
                rq.flags = m.flags;
                rq.now = now;
                rq.deadline = m.timeout_ms ? now + static_cast<int64_t>(m.timeout_ms) * 1000 : 0;
                ev = m.type == GesMsgType::Request ? table_.request(rq) : table_.convert(rq);
                break;
            }
            case GesMsgType::Release:
                tokens_.erase(Key{m.resource, m.owner});
                ev = table_.release(m.owner, m.resource, now);
                break;
            case GesMsgType::ReleaseAll:
                erase_owner(&tokens_, m.owner);
                ev = table_.release_all(m.owner, now);
                break;
            case GesMsgType::Cancel:
                ev = table_.cancel(m.owner, m.resource, m.request_id, m.reason, now);
                break;
            case GesMsgType::Replay: {
                for (const ReplayEntry& e : m.entries) {
                    if (e.owner.node != src || master_for(e.resource, masters_) != self_) {
                        refuse_source(src, m, "a replayed lock is not the sender's or not ours");
                        return;
                    }
                }
                const uint64_t conflicts = table_.replay_conflicts();
                ev = table_.ingest_replay(m.entries, now);
                if (table_.replay_conflicts() != conflicts) report_replay_conflict(src, m);
                for (const ReplayEntry& e : m.entries)
                    if (e.state != LockState::Waiting && e.token != 0)
                        tokens_[Key{e.resource, e.owner}] = e.token;
                if (m.flags & kReplayLast) replay_done_.insert(src);
                break;
            }
            default:
                g_logs.push_back(std::string("GES: unexpected ") + ges_msg_type_name(m.type) +
                                 " from node " + std::to_string(src));
                return;
        }
        dispatch(ev, now);
        maybe_end_replay(now);
    }

    // Two members replayed grants that conflict: a double grant happened
    // before (it must not). Said loudly; the table keeps both, so that
    // neither is granted anything more until one releases.
    void report_replay_conflict(uint16_t src, const GesMessage& m) {
        if (GesShared* g = ges_shared()) count(&g->replay_conflicts);
        std::string text = "GES (LMS " + std::to_string(index_) + "): epoch " +
                           std::to_string(epoch_) + ": a lock replayed by node " +
                           std::to_string(src) + " conflicts with a granted one (" +
                           std::to_string(m.entries.size()) + " entries in the batch)";
        g_warnings.push_back(text);
        shared()->errors.add(ErrorType::ReplayConflict, Severity::Error, src, unix_time_us(),
                             text.c_str());
    }

    // ---- client side: from masters

    void on_reply(uint16_t src, const GesMessage& m, int64_t now) {
        if (!epoch_ok(src, m, true, now)) return;
        // Replies only from the node that masters the resource in this epoch.
        if (src != master_for(m.resource, masters_) || m.owner.node != self_) {
            refuse_source(src, m, "it is not the resource's master in this epoch");
            return;
        }
        const Key k{m.resource, m.owner};
        const int32_t pid = static_cast<int32_t>(m.owner.proc);
        if (m.type == GesMsgType::Bast) {
            bast_count_++;
            return;
        }
        auto c = cancelling_.find(k);
        const bool cancelled = c != cancelling_.end() && c->second.request_id == m.request_id;
        if (cancelled) cancelling_.erase(c);
        auto e = registry_.find(m.owner, m.resource);
        if (m.type == GesMsgType::Grant) {
            if (cancelled) {
                // Granted before the cancel reached the master: give it back,
                // unless a newer request of the owner is already on its way
                // (the master treats that one as a conversion of this grant).
                if (e && e->state != LockState::Granted)
                    orphans_[k] = LockMode::NL;
                else
                    undo(m.owner, m.resource, now);
                return;
            }
            if (!e || (e->state != LockState::Granted && e->request_id != m.request_id)) {
                // A grant nobody waits for (the backend ended, its request was
                // dropped): give it back, or the lock would leak.
                if (!e) undo(m.owner, m.resource, now);
                return;
            }
            if (e->state == LockState::Granted) return;  // a duplicate
            const LockMode prior =
                e->state == LockState::Converting ? e->granted_mode : LockMode::NL;
            registry_.on_granted(m.owner, m.resource, m.request_id, now);
            orphans_.erase(k);
            held_tokens_[k] = m.token;
            sync(m.owner, m.resource);  // before the backend may act on it
            // (The LMS's own requests, to undo or give back, have no waiter.)
            if (!(m.request_id & kGesInternalId) &&
                !ges_deliver(pid, m.request_id, kGesGranted, m.token))
                give_back(m.owner, m.resource, prior, now);
        } else if (m.type == GesMsgType::Deny) {
            if (cancelled) return;
            registry_.on_denied(m.owner, m.resource, m.request_id);
            sync(m.owner, m.resource);
            auto o = orphans_.find(k);
            if (o != orphans_.end()) {
                orphans_.erase(o);
                undo(m.owner, m.resource, now);
            }
            ges_deliver(pid, m.request_id, kGesDenied | static_cast<uint32_t>(m.reason) << 8);
        }
    }
    // Rows of this worker's table for the view, with each holder's token.
    std::vector<LockRow> snapshot() const { return table_.snapshot(); }
    uint64_t token_of(const LockRow& r) const {
        for (const auto& [k, t] : tokens_)
            if (k.owner.node == r.owner_node && k.owner.proc == r.proc &&
                k.resource.to_string() == r.resource)
                return t;
        return 0;
    }
    uint32_t epoch() const { return epoch_; }
    bool replaying() const { return replaying_; }

  private:
    struct Undo {
        uint64_t request_id;
        LockMode prior;
    };
    struct Stashed {
        uint16_t src;
        bool reply;
        GesMessage m;
    };
    static constexpr size_t kMaxStash = 100000;

    template <typename Map>
    static void erase_owner(Map* m, Owner o) {
        for (auto it = m->begin(); it != m->end();)
            it = it->first.owner == o ? m->erase(it) : std::next(it);
    }

    // The backend stopped waiting before the grant reached it (its slot was
    // no longer waiting: timeout, cancel, exit): it believes it holds `prior`
    // (NL: nothing). Bring the registry and the master back to that.
    void give_back(Owner o, const ResourceName& r, LockMode prior, int64_t now) {
        if (GesShared* g = ges_shared()) count(&g->late_grants_undone);
        const Key k{r, o};
        GesMessage m;
        m.owner = o;
        m.resource = r;
        if (prior == LockMode::NL) {
            registry_.on_released(o, r);
            held_tokens_.erase(k);
            m.type = GesMsgType::Release;
        } else {
            m.type = GesMsgType::Request;  // a down-conversion: granted at once
            m.mode = prior;
            m.request_id = kGesInternalId | next_internal_id_++;
            registry_.on_request(o, r, prior, m.request_id, 0, now);
        }
        sync(o, r);
        to_master(m, now);
    }

    // The master holds a lock the owner does not believe in: bring the
    // master back to what the registry (= the backend) believes.
    void undo(Owner o, const ResourceName& r, int64_t now) {
        if (GesShared* g = ges_shared()) count(&g->late_grants_undone);
        GesMessage m;
        m.owner = o;
        m.resource = r;
        auto e = registry_.find(o, r);
        if (!e) {
            m.type = GesMsgType::Release;
        } else {
            m.type = GesMsgType::Request;
            m.mode = e->granted_mode;
            m.request_id = (1ull << 63) | next_internal_id_++;
        }
        to_master(m, now);
    }

    // Outside an epoch nothing is sent: the registry holds the request, and
    // the next epoch's replay carries it to the master.
    void to_master(const GesMessage& msg, int64_t now) {
        if (epoch_ == 0) return;
        GesMessage m = msg;
        m.epoch = epoch_;
        const uint16_t master = master_for(m.resource, masters_);
        if (master == self_) {
            on_master(self_, m, now);
            return;
        }
        OutMsg out{master, kMsgGesMaster, route_key_for(m.resource), {}};
        if (encode_ges_message(m, &out.body) == GesWireError::None) g_out.push_back(std::move(out));
    }

    // Each grant gets a fencing token: the epoch in the high 32 bits, a
    // counter of this worker's grants in the epoch in the low 32. One master
    // per resource and epoch, and epochs only grow: so a resource's tokens
    // grow strictly across the cluster (docs/ges.md, "Fencing tokens").
    void dispatch(const Events& ev, int64_t now) {
        for (const Event& e : ev) {
            GesMessage r = message_for_event(e);
            r.epoch = epoch_;
            if (e.type == EventType::Granted) {
                if (grant_epoch_ != epoch_) {
                    grant_epoch_ = epoch_;
                    grant_seq_ = 0;
                }
                r.token = (static_cast<uint64_t>(epoch_) << 32) | ++grant_seq_;
                // Far from wrapping (2^32 grants of one worker in one epoch),
                // ask for a new epoch: tokens must only grow.
                if (grant_seq_ == (1u << 31)) count(&shared()->membership.bump_requests);
                tokens_[Key{e.resource, e.owner}] = r.token;
            }
            if (e.owner.node == self_) {
                on_reply(self_, r, now);
                continue;
            }
            OutMsg out{e.owner.node, kMsgGesReply, route_key_for(e.resource), {}};
            if (encode_ges_message(r, &out.body) == GesWireError::None)
                g_out.push_back(std::move(out));
        }
    }

    uint32_t index_;
    uint16_t self_;
    LockTable table_;
    ClientRegistry registry_;
    RegistryMirror mirror_;  // registry_'s copy in shared memory (LMS restart)
    bool mirror_full_logged_ = false;
    std::vector<uint16_t> live_{self_};
    std::vector<uint16_t> masters_{self_};  // live_ without witnesses: who masters resources
    // Membership as this worker follows it.
    uint32_t epoch_ = 0;      // the epoch served (0: none)
    uint32_t min_epoch_ = 0;  // a restarted worker serves from this epoch on
    bool member_ = false;     // a member with a valid lease
    uint32_t fences_seen_ = 0;
    uint32_t shard_fences_seen_ = 0;
    std::vector<Stashed> stash_;  // messages of an epoch not adopted yet
    int64_t barrier_since_ = 0;
    bool barrier_warned_ = false;
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
    std::set<uint16_t> replay_done_;
    uint64_t next_internal_id_ = 1;
    uint64_t bast_count_ = 0;
    // Deadlock search: every worker's hinting, and the coordinator's round.
    int64_t last_wait_check_ = 0;
    int64_t last_hint_ = 0;
    bool hinted_ = false;
    int64_t last_round_ = 0;
    uint64_t round_id_ = 0;
    DeadlockRound round_;
};

Worker* g_worker = nullptr;

Worker& worker(uint32_t index) {
    if (g_worker == nullptr) g_worker = new Worker(index, static_cast<uint16_t>(pgrac_node_id));
    return *g_worker;
}

uint32_t worker_index_of(const pgrac_ic_message* msg) {
    IcShared* shm = shared();
    return shm && shm->n_lms ? msg->route_key % shm->n_lms : 0;
}

// Sends what the C++ code queued and emits its log lines. Plain loops over
// globals: a longjmp out of pgrac_ic_send leaves nothing to destroy.
// No wait for send room is without bound: a peer whose queue stays full for
// kSendWaitMs (it is frozen, say) gets nothing more in this flush, and the
// epoch request resynchronises what it missed.
constexpr int kSendWaitMs = 1000;

void flush() {
    bool lost = false;
    uint64_t failed_nodes = 0;  // bit id-1
    for (; g_out_sent < g_out.size(); g_out_sent++) {
        const OutMsg& o = g_out[g_out_sent];
        const uint64_t bit = o.node >= 1 && o.node <= 64 ? uint64_t{1} << (o.node - 1) : 0;
        const int rc = (failed_nodes & bit)
                           ? PGRAC_IC_QUEUE_FULL
                           : pgrac_ic_send(o.node, o.type, o.route_key, o.body.data(),
                                           static_cast<uint32_t>(o.body.size()), PGRAC_IC_CONTROL,
                                           kSendWaitMs);
        if (rc == PGRAC_IC_OK) continue;
        if (failed_nodes & bit) continue;
        failed_nodes |= bit;
        // A lost GES message leaves a master and a registry apart: ask for a
        // new epoch, in which every master rebuilds from the registries.
        if (!lost && o.type != kMsgGesDeadlock) count(&shared()->membership.bump_requests);
        lost = lost || o.type != kMsgGesDeadlock;
        if (rc != PGRAC_IC_UNREACHABLE)
            ereport(LOG, (errmsg("pgrac_ic GES: message to node %u not sent: %s; asking for a new "
                                 "epoch to resynchronise",
                                 o.node, pgrac_ic_strerror(rc))));
    }
    g_out.clear();
    g_out_sent = 0;
    for (size_t i = 0; i < g_logs.size(); i++)
        ereport(LOG, (errmsg("pgrac_ic %s", g_logs[i].c_str())));
    g_logs.clear();
    for (size_t i = 0; i < g_warnings.size(); i++)
        ereport(WARNING, (errmsg("pgrac_ic %s", g_warnings[i].c_str())));
    g_warnings.clear();
    for (size_t i = 0; i < g_debug_logs.size(); i++)
        ereport(DEBUG1, (errmsg("pgrac_ic %s", g_debug_logs[i].c_str())));
    g_debug_logs.clear();
}

enum class Role { Client, Master, Reply, Deadlock };

int handle(Role role, const pgrac_ic_message* msg) {
    char err[256];
    const bool ok = guarded(
        [&] {
            GesMessage m;
            const GesWireError we =
                decode_ges_message(static_cast<const uint8_t*>(msg->body), msg->len, &m);
            if (we != GesWireError::None) {
                g_logs.push_back(std::string("GES: malformed message from node ") +
                                 std::to_string(msg->src_node) + ": " + ges_wire_error_name(we));
                return;
            }
            Worker& w = worker(worker_index_of(msg));
            const int64_t now = unix_time_us();
            w.check_membership(now);
            switch (role) {
                case Role::Client:
                    if (msg->src_node == pgrac_node_id) w.on_client(m, now);
                    break;
                case Role::Master:
                    w.on_master(static_cast<uint16_t>(msg->src_node), m, now);
                    break;
                case Role::Reply:
                    w.on_reply(static_cast<uint16_t>(msg->src_node), m, now);
                    break;
                case Role::Deadlock:
                    w.on_deadlock(static_cast<uint16_t>(msg->src_node), m, now);
                    break;
            }
        },
        err, sizeof err);
    flush();
    if (!ok) ereport(LOG, (errmsg("pgrac_ic GES handler failed: %s", err)));
    return PGRAC_IC_OK;
}

int ges_client_handler(const pgrac_ic_message* msg, pgrac_ic_reply*) {
    return handle(Role::Client, msg);
}
int ges_master_handler(const pgrac_ic_message* msg, pgrac_ic_reply*) {
    return handle(Role::Master, msg);
}
int ges_reply_handler(const pgrac_ic_message* msg, pgrac_ic_reply*) {
    return handle(Role::Reply, msg);
}
int ges_deadlock_handler(const pgrac_ic_message* msg, pgrac_ic_reply*) {
    return handle(Role::Deadlock, msg);
}

// View RPC reply: u32 n_lms | u32 rows | u8 truncated | rows of
//   u8 len, resource text | u16 master | u16 node | u32 pid | u8 mode
//   | u8 held_mode | u8 state | i64 since (Unix us) | u64 fencing token (0: none)
std::vector<uint8_t> g_view;

template <typename T>
void put(std::vector<uint8_t>* b, T v) {
    for (size_t i = 0; i < sizeof(T); i++)
        b->push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
}

int ges_view_handler(const pgrac_ic_message* msg, pgrac_ic_reply* reply) {
    if (reply == nullptr) return PGRAC_IC_OK;
    char err[256];
    const bool ok = guarded(
        [&] {
            Worker& w = worker(worker_index_of(msg));
            w.check_membership(unix_time_us());
            g_view.clear();
            put<uint32_t>(&g_view, shared()->n_lms);
            put<uint32_t>(&g_view, 0);
            put<uint8_t>(&g_view, 0);
            uint32_t rows = 0;
            for (const LockRow& r : w.snapshot()) {
                if (g_view.size() + r.resource.size() + 40 > reply->capacity) {
                    g_view[8] = 1;
                    break;
                }
                put<uint8_t>(&g_view, static_cast<uint8_t>(r.resource.size()));
                g_view.insert(g_view.end(), r.resource.begin(), r.resource.end());
                put<uint16_t>(&g_view, r.master);
                put<uint16_t>(&g_view, r.owner_node);
                put<uint32_t>(&g_view, r.proc);
                put<uint8_t>(&g_view, static_cast<uint8_t>(r.mode));
                put<uint8_t>(&g_view, static_cast<uint8_t>(r.held_mode));
                put<uint8_t>(&g_view, static_cast<uint8_t>(r.state));
                put<int64_t>(&g_view, r.since);
                put<uint64_t>(&g_view, r.state == LockState::Waiting ? 0 : w.token_of(r));
                rows++;
            }
            for (int i = 0; i < 4; i++) g_view[4 + i] = static_cast<uint8_t>(rows >> (8 * i));
        },
        err, sizeof err);
    flush();
    if (!ok) ereport(ERROR, (errmsg("GES view: %s", err)));
    memcpy(reply->body, g_view.data(), g_view.size());
    reply->len = static_cast<uint32_t>(g_view.size());
    return PGRAC_IC_OK;
}

}  // namespace

void register_ges_handlers() {
    put_handler(kMsgGesClient, "ges client", ges_client_handler);
    put_handler(kMsgGesMaster, "ges master", ges_master_handler);
    put_handler(kMsgGesReply, "ges reply", ges_reply_handler);
    put_handler(kMsgGesView, "ges view", ges_view_handler);
    put_handler(kMsgGesDeadlock, "ges deadlock search", ges_deadlock_handler);
}

void lms_start(int worker_index) {
    GesShared* g = ges_shared();
    if (shared() == nullptr || g == nullptr || worker_index < 0 || worker_index >= kMaxLmsWorkers)
        return;
    const uint32_t before = fetch_add(&g->lms_starts[worker_index], 1u);
    char err[256];
    const bool ok = guarded(
        [&] {
            Worker& w = worker(static_cast<uint32_t>(worker_index));
            if (before > 0) w.start_after_restart(unix_time_us());
        },
        err, sizeof err);
    flush();
    if (!ok) ereport(LOG, (errmsg("pgrac_ic GES start of LMS %d failed: %s", worker_index, err)));
}

void lms_tick(int worker_index) {
    if (shared() == nullptr || ges_shared() == nullptr) return;
    char err[256];
    const bool ok = guarded(
        [&] { worker(static_cast<uint32_t>(worker_index)).tick(unix_time_us()); }, err, sizeof err);
    flush();
    if (!ok) ereport(LOG, (errmsg("pgrac_ic GES tick failed: %s", err)));
}

long lms_tick_interval_ms() {
    return kTickMs;
}

}  // namespace pgrac::glue
