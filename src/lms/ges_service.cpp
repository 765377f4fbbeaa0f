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

constexpr int64_t kEarlyMarkerWindowUs = 3000000;
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

class Worker {
  public:
    Worker(uint32_t index, uint16_t self) : index_(index), self_(self), table_(self) {
        live_.push_back(self);
        if (GesShared* g = ges_shared())
            for (int i = 0; i < kMaxNodes; i++) seen_lost_[i] = load_acquire(&g->lost_count[i]);
    }

    // ---- restart of this LMS worker (docs/ges.md, "LMS restart")
    //
    // The previous process of this worker took its lock table (the master
    // side of the shard) and its registry (this node's client side) with it.
    // Nobody else noticed: the node stayed UP, so no membership change makes
    // the others replay. Ask them: every other live node's worker of the same
    // index replays its locks mastered here (the remastering path: the table
    // is frozen until every live node's last batch has arrived, or the
    // barrier times out, and new requests queue behind the replayed ones), and
    // sends back what its table holds for this node's owners (the registry).
    void start_recovery(int64_t now) {
        live_ = current_live();
        table_.begin_replay();
        replaying_ = true;
        recovering_ = true;
        replay_done_.clear();
        replay_done_.insert(self_);  // this node's registry for the shard is gone with it
        early_last_.clear();
        replay_deadline_ = now + static_cast<int64_t>(std::max(1000, pgrac_peer_timeout_ms)) * 1000;
        g_logs.push_back("GES (LMS " + std::to_string(index_) +
                         "): restarted; rebuilding the shard from nodes " + list_text(live_));
        for (uint16_t n : live_)
            if (n != self_) g_out.push_back({n, kMsgGesRecover, index_, {}});
        maybe_end_replay(now, false);
    }

    // Another node's worker of this index restarted and asks for its shard.
    void on_recover(uint16_t src, int64_t now) {
        (void)now;
        g_logs.push_back("GES (LMS " + std::to_string(index_) + "): node " + std::to_string(src) +
                         " LMS " + std::to_string(index_) +
                         " restarted; replaying its shard to it");
        // Client side: our locks it masters (all of them: it lost its table).
        std::vector<ReplayEntry> entries;
        for (ReplayBatch& b : registry_.plan_replay(live_, live_, {src}))
            if (b.master == src) entries = std::move(b.entries);
        for (std::vector<uint8_t>& body : encode_replay_messages(entries))
            g_out.push_back({src, kMsgGesMaster, index_, std::move(body)});
        // Master side: what its owners hold and wait for here.
        for (std::vector<uint8_t>& body : encode_replay_messages(table_.entries_of_node(src)))
            g_out.push_back({src, kMsgGesRestore, index_, std::move(body)});
    }

    // Entries of this node's owners from a master: the registry rebuilt.
    void on_restore(uint16_t src, const GesMessage& m) {
        size_t n = 0;
        for (const ReplayEntry& e : m.entries) {
            if (e.owner.node != self_) continue;
            registry_.restore(e);
            n++;
        }
        if (recovering_ && (m.flags & kReplayLast))
            g_debug_logs.push_back("GES (LMS " + std::to_string(index_) + "): node " +
                                   std::to_string(src) + " restored the registry (" +
                                   std::to_string(n) + " entries in its last batch)");
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
        cancelling_.erase(k);
        orphans_.erase(k);
        GesMessage m;
        m.type = GesMsgType::Release;
        m.owner = o;
        m.resource = r;
        to_master(m, now);
    }

    // Everything of one owner, at every live master (its worker of this index).
    void release_owner(Owner o, int64_t now) {
        registry_.on_released_all(o);
        erase_owner(&cancelling_, o);
        erase_owner(&orphans_, o);
        GesMessage m;
        m.type = GesMsgType::ReleaseAll;
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

    // ---- membership and remastering

    std::vector<uint16_t> current_live() const {
        std::vector<uint16_t> live{self_};
        IcShared* shm = shared();
        for (int n = 1; n <= kMaxNodes; n++) {
            if (n == self_) continue;
            PeerShared* p = peer_shared(shm, static_cast<uint32_t>(n));
            if (p != nullptr && static_cast<PeerState>(load_relaxed(&p->state)) == PeerState::Up)
                live.push_back(static_cast<uint16_t>(n));
        }
        std::sort(live.begin(), live.end());
        return live;
    }

    void check_membership(int64_t now) {
        std::vector<uint16_t> lost;
        if (GesShared* g = ges_shared()) {
            for (int i = 0; i < kMaxNodes; i++) {
                const uint32_t v = load_acquire(&g->lost_count[i]);
                if (v == seen_lost_[i]) continue;
                seen_lost_[i] = v;
                if (i + 1 != self_) lost.push_back(static_cast<uint16_t>(i + 1));
            }
        }
        std::vector<uint16_t> live = current_live();
        if (live == live_ && lost.empty()) return;
        const std::vector<uint16_t> old = live_;
        live_ = live;
        std::vector<uint16_t> departed = lost;
        for (uint16_t n : old)
            if (!std::binary_search(live_.begin(), live_.end(), n)) departed.push_back(n);
        std::sort(departed.begin(), departed.end());
        departed.erase(std::unique(departed.begin(), departed.end()), departed.end());
        std::vector<uint16_t> restarted;
        for (uint16_t n : lost)
            if (std::binary_search(live_.begin(), live_.end(), n)) restarted.push_back(n);
        if (old.size() > 1 || live_.size() > 1 || !lost.empty())
            g_logs.push_back("GES (LMS " + std::to_string(index_) + "): membership " +
                             list_text(old) + " -> " + list_text(live_) + ", lost " +
                             list_text(lost) + "; remastering");

        // Master side: freeze, forget the departed, wait for every live
        // node's replay (or the timeout).
        table_.begin_replay();
        replaying_ = true;
        Events ev;
        for (uint16_t d : departed) {
            Events e = table_.release_node(d, now);
            ev.insert(ev.end(), e.begin(), e.end());
        }
        table_.drop_unmastered(live_);
        replay_done_.clear();
        for (uint16_t s : live_) {
            auto it = early_last_.find(s);
            if (it != early_last_.end() && now - it->second < kEarlyMarkerWindowUs)
                replay_done_.insert(s);
        }
        early_last_.clear();
        replay_deadline_ = now + static_cast<int64_t>(std::max(1000, pgrac_peer_timeout_ms)) * 1000;

        // Client side: every live master gets our replay for it (possibly
        // empty: the last-batch marker is what it waits for).
        std::vector<ReplayBatch> plan = registry_.plan_replay(old, live_, restarted);
        for (uint16_t m : live_) {
            std::vector<ReplayEntry> entries;
            for (ReplayBatch& b : plan)
                if (b.master == m) entries = std::move(b.entries);
            for (std::vector<uint8_t>& body : encode_replay_messages(entries)) {
                if (m == self_) {
                    GesMessage dm;
                    if (decode_ges_message(body.data(), body.size(), &dm) == GesWireError::None)
                        on_master(self_, dm, now);
                } else {
                    g_out.push_back({m, kMsgGesMaster, index_, std::move(body)});
                }
            }
        }
        dispatch(ev, now);
        maybe_end_replay(now, false);
    }

    void maybe_end_replay(int64_t now, bool timed_out) {
        if (!replaying_) return;
        bool all = true;
        for (uint16_t s : live_) all = all && replay_done_.count(s) > 0;
        if (!all && !timed_out) return;
        if (!all)
            g_logs.push_back("GES (LMS " + std::to_string(index_) +
                             "): replay barrier timed out; serving the queues");
        replaying_ = false;
        if (recovering_) {
            recovering_ = false;
            g_logs.push_back("GES (LMS " + std::to_string(index_) +
                             "): shard rebuilt after the restart (" +
                             std::to_string(table_.lock_count()) + " locks)");
        }
        dispatch(table_.end_replay(now), now);
    }

    void tick(int64_t now) {
        check_membership(now);
        if (replaying_ && now >= replay_deadline_) maybe_end_replay(now, true);
        if (!replaying_) dispatch(table_.expire(now), now);
        reap_dead_owners(now);
        deadlock_tick(now);
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
        switch (m.type) {
            case GesMsgType::Request:
            case GesMsgType::Convert:
                drop_stale_entry(m, now);
                if (!registry_.on_request(m.owner, m.resource, m.mode, m.request_id, m.flags,
                                          now)) {
                    ges_deliver(static_cast<int32_t>(m.owner.proc), m.request_id,
                                kGesDenied | static_cast<uint32_t>(DenyReason::AlreadyPending)
                                                 << 8);
                    return;
                }
                to_master(m, now);
                return;
            case GesMsgType::Release:
                registry_.on_released(m.owner, m.resource);
                cancelling_.erase(k);
                orphans_.erase(k);
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
                ev = table_.release(m.owner, m.resource, now);
                break;
            case GesMsgType::ReleaseAll:
                ev = table_.release_all(m.owner, now);
                break;
            case GesMsgType::Cancel:
                ev = table_.cancel(m.owner, m.resource, m.request_id, m.reason, now);
                break;
            case GesMsgType::Replay:
                ev = table_.ingest_replay(m.entries, now);
                if (m.flags & kReplayLast) {
                    if (replaying_)
                        replay_done_.insert(src);
                    else
                        early_last_[src] = now;
                }
                break;
            default:
                g_logs.push_back(std::string("GES: unexpected ") + ges_msg_type_name(m.type) +
                                 " from node " + std::to_string(src));
                return;
        }
        dispatch(ev, now);
        maybe_end_replay(now, false);
    }

    // ---- client side: from masters

    void on_reply(const GesMessage& m, int64_t now) {
        const Key k{m.resource, m.owner};
        const int32_t pid = static_cast<int32_t>(m.owner.proc);
        if (m.type == GesMsgType::Bast) {
            bast_count_++;
            return;
        }
        auto c = cancelling_.find(k);
        const bool cancelled = c != cancelling_.end() && c->second.request_id == m.request_id;
        if (cancelled) cancelling_.erase(c);
        if (m.type == GesMsgType::Grant) {
            if (cancelled) {
                // Granted before the cancel reached the master: give it back,
                // unless a newer request of the owner is already on its way
                // (the master treats that one as a conversion of this grant).
                auto e = registry_.find(m.owner, m.resource);
                if (e && e->state != LockState::Granted)
                    orphans_[k] = LockMode::NL;
                else
                    undo(m.owner, m.resource, now);
                return;
            }
            registry_.on_granted(m.owner, m.resource, m.request_id, now);
            orphans_.erase(k);
            ges_deliver(pid, m.request_id, kGesGranted);
        } else if (m.type == GesMsgType::Deny) {
            if (cancelled) return;
            registry_.on_denied(m.owner, m.resource, m.request_id);
            auto o = orphans_.find(k);
            if (o != orphans_.end()) {
                orphans_.erase(o);
                undo(m.owner, m.resource, now);
            }
            ges_deliver(pid, m.request_id, kGesDenied | static_cast<uint32_t>(m.reason) << 8);
        }
    }

    // Rows of this worker's table for the view.
    std::vector<LockRow> snapshot() const { return table_.snapshot(); }

  private:
    struct Undo {
        uint64_t request_id;
        LockMode prior;
    };

    template <typename Map>
    static void erase_owner(Map* m, Owner o) {
        for (auto it = m->begin(); it != m->end();)
            it = it->first.owner == o ? m->erase(it) : std::next(it);
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

    void to_master(const GesMessage& m, int64_t now) {
        const uint16_t master = master_for(m.resource, live_);
        if (master == self_) {
            on_master(self_, m, now);
            return;
        }
        OutMsg out{master, kMsgGesMaster, route_key_for(m.resource), {}};
        if (encode_ges_message(m, &out.body) == GesWireError::None) g_out.push_back(std::move(out));
    }

    void dispatch(const Events& ev, int64_t now) {
        for (const Event& e : ev) {
            GesMessage r = message_for_event(e);
            if (e.owner.node == self_) {
                on_reply(r, now);
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
    std::vector<uint16_t> live_;
    uint32_t seen_lost_[kMaxNodes] = {};
    std::map<Key, Undo> cancelling_;   // requests cancelled, answer not yet seen
    std::map<Key, LockMode> orphans_;  // late grants superseded by a newer request
    bool replaying_ = false;
    bool recovering_ = false;  // the replay is the rebuild after a restart
    int64_t last_reap_ = 0;
    std::set<uint16_t> replay_done_;
    std::map<uint16_t, int64_t> early_last_;
    int64_t replay_deadline_ = 0;
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
void flush() {
    for (; g_out_sent < g_out.size(); g_out_sent++) {
        const OutMsg& o = g_out[g_out_sent];
        const int rc = pgrac_ic_send(o.node, o.type, o.route_key, o.body.data(),
                                     static_cast<uint32_t>(o.body.size()), PGRAC_IC_CONTROL, -1);
        if (rc != PGRAC_IC_OK && rc != PGRAC_IC_UNREACHABLE)
            ereport(LOG, (errmsg("pgrac_ic GES: message to node %u not sent: %s", o.node,
                                 pgrac_ic_strerror(rc))));
    }
    g_out.clear();
    g_out_sent = 0;
    for (size_t i = 0; i < g_logs.size(); i++)
        ereport(LOG, (errmsg("pgrac_ic %s", g_logs[i].c_str())));
    g_logs.clear();
    for (size_t i = 0; i < g_debug_logs.size(); i++)
        ereport(DEBUG1, (errmsg("pgrac_ic %s", g_debug_logs[i].c_str())));
    g_debug_logs.clear();
}

enum class Role { Client, Master, Reply, Deadlock, Recover, Restore };

int handle(Role role, const pgrac_ic_message* msg) {
    char err[256];
    const bool ok = guarded(
        [&] {
            if (role == Role::Recover) {
                Worker& w = worker(worker_index_of(msg));
                const int64_t now = unix_time_us();
                w.check_membership(now);
                if (msg->src_node != pgrac_node_id)
                    w.on_recover(static_cast<uint16_t>(msg->src_node), now);
                return;
            }
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
                    w.on_reply(m, now);
                    break;
                case Role::Deadlock:
                    w.on_deadlock(static_cast<uint16_t>(msg->src_node), m, now);
                    break;
                case Role::Restore:
                    if (m.type == GesMsgType::Replay)
                        w.on_restore(static_cast<uint16_t>(msg->src_node), m);
                    break;
                case Role::Recover:
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

int ges_recover_handler(const pgrac_ic_message* msg, pgrac_ic_reply*) {
    return handle(Role::Recover, msg);
}
int ges_restore_handler(const pgrac_ic_message* msg, pgrac_ic_reply*) {
    return handle(Role::Restore, msg);
}

// View RPC reply: u32 n_lms | u32 rows | u8 truncated | rows of
//   u8 len, resource text | u16 master | u16 node | u32 pid | u8 mode
//   | u8 held_mode | u8 state | i64 since (Unix us)
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
                if (g_view.size() + r.resource.size() + 32 > reply->capacity) {
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
    put_handler(kMsgGesRecover, "ges lms recovery", ges_recover_handler);
    put_handler(kMsgGesRestore, "ges registry restore", ges_restore_handler);
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
            if (before > 0) w.start_recovery(unix_time_us());
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
