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
#include "pg_boundary.hpp"
#include "pgrac_ic/pgrac_ic.h"
#include "shmem.hpp"

namespace pgrac::glue {

namespace {

using namespace pgrac::ic;
using namespace pgrac::ic::ges;

constexpr int64_t kEarlyMarkerWindowUs = 3000000;
constexpr long kTickMs = 100;

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
        dispatch(table_.end_replay(now), now);
    }

    void tick(int64_t now) {
        check_membership(now);
        if (replaying_ && now >= replay_deadline_) maybe_end_replay(now, true);
        if (!replaying_) dispatch(table_.expire(now), now);
    }

    // ---- client side: from this node's backends

    void on_client(const GesMessage& m, int64_t now) {
        const Key k{m.resource, m.owner};
        switch (m.type) {
            case GesMsgType::Request:
            case GesMsgType::Convert:
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
            case GesMsgType::ReleaseAll: {
                registry_.on_released_all(m.owner);
                erase_owner(&cancelling_, m.owner);
                erase_owner(&orphans_, m.owner);
                std::vector<uint8_t> body;
                if (encode_ges_message(m, &body) != GesWireError::None) return;
                for (uint16_t n : live_) {
                    if (n == self_)
                        on_master(self_, m, now);
                    else
                        g_out.push_back({n, kMsgGesMaster, index_, body});
                }
                return;
            }
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
    std::set<uint16_t> replay_done_;
    std::map<uint16_t, int64_t> early_last_;
    int64_t replay_deadline_ = 0;
    uint64_t next_internal_id_ = 1;
    uint64_t bast_count_ = 0;
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
}

enum class Role { Client, Master, Reply };

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
                    w.on_reply(m, now);
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
    pgrac_ic_register_handler(kMsgGesClient, "ges client", ges_client_handler);
    pgrac_ic_register_handler(kMsgGesMaster, "ges master", ges_master_handler);
    pgrac_ic_register_handler(kMsgGesReply, "ges reply", ges_reply_handler);
    pgrac_ic_register_handler(kMsgGesView, "ges view", ges_view_handler);
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
