// The GES glue in an LMS worker: the host of the worker (ic/ges/worker.hpp:
// the master side of this worker's shard and the client side of this node's
// locks in it) over shared memory and the interconnect, the handlers of the
// GES message types, and the worker's start and tick. One Worker object per
// LMS process; docs/ges.md has the whole story.
//
// Boundary: the handlers below are C entry points that run the C++ in
// guarded() and only then send (pgrac_ic_send may wait and check for
// interrupts) and log, from globals, with no C++ object live on the stack.
// The host only queues messages and log lines in those globals and touches
// shared memory through ic/base/atomics.hpp: it neither raises nor sends.
extern "C" {
#include "postgres.h"

#include "miscadmin.h"
}

#include <string>
#include <vector>

#include "instance/ges_shmem.hpp"
#include "instance/guc.hpp"
#include "ic/base/atomics.hpp"
#include "ic/ges/worker.hpp"
#include "lms/ges_service.hpp"
#include "capi/handler_registry.hpp"
#include "instance/pg_boundary.hpp"
#include "pgrac_ic/pgrac_ic.h"
#include "instance/shmem.hpp"

namespace pgrac::glue {

namespace {

using namespace pgrac::ic;
using namespace pgrac::ic::ges;

static_assert(kInternalRequestId == kGesInternalId, "the worker's own request ids");

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
std::vector<std::string> g_warnings;    // WARNING
std::vector<std::string> g_debug_logs;  // DEBUG1

// The worker index this process serves (-1 until its Worker exists).
int g_index = -1;

// The worker's host in an LMS process.
class LmsHost final : public WorkerHost {
  public:
    void send(uint16_t node, GesChannel channel, uint32_t route_key,
              std::vector<uint8_t> body) override {
        const uint16_t type = channel == GesChannel::Master  ? kMsgGesMaster
                              : channel == GesChannel::Reply ? kMsgGesReply
                                                             : kMsgGesDeadlock;
        g_out.push_back({node, type, route_key, std::move(body)});
    }

    // The lease clock (ic/membership/membership.hpp): what lease words are compared with.
    uint64_t lease_clock_ms() override { return lease_now_ms(&shared()->membership); }
    bool fence_if_lapsed(uint64_t now_ms) override {
        return pgrac::ic::fence_if_lapsed(&shared()->membership, now_ms);
    }
    View committed_view() override { return pgrac::ic::committed_view(&shared()->membership); }
    uint64_t lease_word() override {
        IcShared* shm = shared();
        return shm ? pgrac::ic::lease_word(&shm->membership) : 0;
    }
    void request_new_epoch() override { count(&shared()->membership.bump_requests); }
    void withhold_echoes(uint16_t node, uint64_t for_ms) override {
        MembershipShared* m = &shared()->membership;
        pgrac::ic::withhold_echoes(m, node, lease_now_ms(m), for_ms);
    }
    void count_stale_epoch_message() override { count(&shared()->membership.stale_epoch_messages); }
    void count_future_epoch_message() override {
        count(&shared()->membership.future_epoch_messages);
    }
    uint32_t shard_fences(uint32_t worker) override {
        GesShared* g = ges_shared();
        return g ? load_acquire(&g->shard_fences[worker]) : 0;
    }
    uint32_t bump_shard_fences(uint32_t worker) override {
        return fetch_add(&ges_shared()->shard_fences[worker], 1u) + 1;
    }
    NodeMask witnesses() override { return witness_mask(); }

    uint32_t n_lms() override { return shared()->n_lms; }
    int64_t peer_timeout_ms() override { return pgrac_peer_timeout_ms; }
    int64_t deadlock_timeout_ms() override { return pgrac_ges_deadlock_timeout_ms; }
    uint32_t remaster_window() override {
        return static_cast<uint32_t>(std::max(0, pgrac_ges_remaster_after));
    }

    bool deliver_grant(uint32_t proc, uint64_t request_id, uint64_t token,
                       const LockValue& value) override {
        return ges_deliver(static_cast<int32_t>(proc), request_id, kGesGranted, token, &value);
    }
    bool deliver_denial(uint32_t proc, uint64_t request_id, DenyReason reason) override {
        return ges_deliver(static_cast<int32_t>(proc), request_id,
                           kGesDenied | static_cast<uint32_t>(reason) << 8);
    }
    bool owner_alive(uint32_t proc, uint64_t request_id) override {
        return ges_owner_alive(static_cast<int32_t>(proc), request_id);
    }
    bool mark_direct(uint32_t proc, uint64_t request_id) override {
        return ges_mark_direct(static_cast<int32_t>(proc), request_id);
    }
    bool settle_direct(uint32_t proc, uint64_t request_id, uint64_t* token,
                       LockValue* value) override {
        return ges_settle_direct(static_cast<int32_t>(proc), request_id, token, value);
    }
    bool slot_waits(uint32_t proc, uint64_t request_id) override {
        return ges_slot_waits(static_cast<int32_t>(proc), request_id);
    }
    void note_moved(const ResourceName& r) override {
        const uint32_t rk = route_key_for(r);
        ges_note_moved(rk % n_lms(), rk);
    }
    void clear_moved() override {
        // This process serves one worker index: whichever its route keys map to.
        if (g_index >= 0) ges_clear_moved(static_cast<uint32_t>(g_index));
    }

    void log(WorkerLogLevel level, std::string text) override {
        std::vector<std::string>& to = level == WorkerLogLevel::Warning ? g_warnings
                                       : level == WorkerLogLevel::Debug ? g_debug_logs
                                                                        : g_logs;
        to.push_back(std::move(text));
    }
    void record_error(ErrorType type, Severity severity, int peer,
                      const std::string& text) override {
        shared()->errors.add(type, severity, peer, unix_time_us(), text.c_str());
    }
    void count(WorkerCounter counter) override {
        GesShared* g = ges_shared();
        if (g == nullptr) return;
        switch (counter) {
            case WorkerCounter::DeadOwnersReaped:
                count(&g->dead_owners_reaped);
                break;
            case WorkerCounter::LateGrantsUndone:
                count(&g->late_grants_undone);
                break;
            case WorkerCounter::StaleEpochRefused:
                count(&g->stale_epoch_refused);
                break;
            case WorkerCounter::WrongSourceRefused:
                count(&g->wrong_source_refused);
                break;
            case WorkerCounter::ReplayConflicts:
                count(&g->replay_conflicts);
                break;
            case WorkerCounter::ClusterDeadlocks:
                count(&g->cluster_deadlocks);
                break;
            case WorkerCounter::BastsReceived:
                count(&g->basts_received);
                break;
            case WorkerCounter::CacheTransfers:
                count(&g->cache_transfers);
                break;
            case WorkerCounter::CacheGiveBacks:
                count(&g->cache_give_backs);
                break;
            case WorkerCounter::CacheEvictions:
                count(&g->cache_evictions);
                break;
            case WorkerCounter::CacheConversions:
                count(&g->cache_conversions);
                break;
            case WorkerCounter::ValueInvalidations:
                count(&g->value_invalidations);
                break;
            case WorkerCounter::Remasters:
                count(&g->remasters);
                break;
            case WorkerCounter::RemasterTimeouts:
                count(&g->remaster_timeouts);
                break;
            case WorkerCounter::DirectServed:
                count(&g->direct_served);
                break;
            case WorkerCounter::DirectRedirected:
                count(&g->direct_redirected);
                break;
            case WorkerCounter::LocalWaits:
                count(&g->local_waits);
                break;
        }
    }
    void count_many(WorkerCounter counter, uint64_t n) override {
        GesShared* g = ges_shared();
        if (g != nullptr && counter == WorkerCounter::ValueInvalidations)
            pgrac::ic::count(&g->value_invalidations, n);
        else
            WorkerHost::count_many(counter, n);
    }

    NodeCache* node_cache() override { return ges_node_cache(); }
    void lock_cache_partition(uint32_t partition) override { ges_cache_lock(partition); }
    void unlock_cache_partition(uint32_t partition) override { ges_cache_unlock(partition); }
    std::vector<uint32_t> cache_users(uint32_t entry, uint32_t generation) override {
        int32_t pids[256];
        const int n = ges_cache_users(entry, generation, pids, 256);
        return std::vector<uint32_t>(pids, pids + n);
    }

  private:
    static void count(uint64_t* c) { pgrac::ic::count(c); }
};

LmsHost g_host;

Worker* g_worker = nullptr;

Worker& worker(uint32_t index) {
    if (g_worker == nullptr) g_index = static_cast<int>(index);
    if (g_worker == nullptr)
        g_worker = new Worker(g_host, index, static_cast<uint16_t>(pgrac_node_id),
                              ges_registry_mirror(index));
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

int handle(WorkerRole role, const pgrac_ic_message* msg) {
    char err[256];
    const bool ok = guarded(
        [&] {
            worker(worker_index_of(msg))
                .handle(role, static_cast<uint16_t>(msg->src_node),
                        static_cast<const uint8_t*>(msg->body), msg->len, unix_time_us());
        },
        err, sizeof err);
    flush();
    if (!ok) ereport(LOG, (errmsg("pgrac_ic GES handler failed: %s", err)));
    return PGRAC_IC_OK;
}

int ges_client_handler(const pgrac_ic_message* msg, pgrac_ic_reply*) {
    return handle(WorkerRole::Client, msg);
}
int ges_master_handler(const pgrac_ic_message* msg, pgrac_ic_reply*) {
    return handle(WorkerRole::Master, msg);
}
int ges_reply_handler(const pgrac_ic_message* msg, pgrac_ic_reply*) {
    return handle(WorkerRole::Reply, msg);
}
int ges_deadlock_handler(const pgrac_ic_message* msg, pgrac_ic_reply*) {
    return handle(WorkerRole::Deadlock, msg);
}

// Direct routing (docs/ges.md): a backend's request on its requester lane,
// answered in the reply (the master's Grant, Deny or Queued, encoded).
std::vector<uint8_t> g_direct_reply;

int ges_direct_handler(const pgrac_ic_message* msg, pgrac_ic_reply* reply) {
    if (reply == nullptr) return PGRAC_IC_OK;  // an RPC only
    char err[256];
    g_direct_reply.clear();
    const bool ok = guarded(
        [&] {
            g_direct_reply = worker(worker_index_of(msg))
                                 .handle_direct(static_cast<uint16_t>(msg->src_node),
                                                static_cast<const uint8_t*>(msg->body), msg->len,
                                                unix_time_us());
        },
        err, sizeof err);
    flush();
    if (!ok) ereport(LOG, (errmsg("pgrac_ic GES direct request failed: %s", err)));
    if (!ok || g_direct_reply.empty() || g_direct_reply.size() > reply->capacity) {
        const char* why = ok ? "malformed direct GES request" : "GES direct request failed";
        shared()->errors.add(ErrorType::MalformedFrame, Severity::Warning,
                             static_cast<int>(msg->src_node), unix_time_us(), why);
        reply->len = static_cast<uint32_t>(strlen(why) + 1);
        memcpy(reply->body, why, reply->len);
        return PGRAC_IC_HANDLER_ERROR;
    }
    memcpy(reply->body, g_direct_reply.data(), g_direct_reply.size());
    reply->len = static_cast<uint32_t>(g_direct_reply.size());
    return PGRAC_IC_OK;
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
            // The request may name the first row wanted (u32): a table larger
            // than one reply is read in pages (views/ges_functions.cpp).
            uint32_t first = 0;
            if (msg->len >= 4)
                for (int i = 0; i < 4; i++)
                    first |= static_cast<uint32_t>(static_cast<const uint8_t*>(msg->body)[i])
                             << (8 * i);
            g_view.clear();
            put<uint32_t>(&g_view, shared()->n_lms);
            put<uint32_t>(&g_view, 0);
            put<uint8_t>(&g_view, 0);
            uint32_t rows = 0;
            const std::vector<LockRow> all = w.snapshot();
            for (size_t i = first; i < all.size(); i++) {
                const LockRow& r = all[i];
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
                // 4: waiting in its own node (views/ges_functions.cpp)
                put<uint8_t>(&g_view, r.local ? 4 : static_cast<uint8_t>(r.state));
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
    put_handler(kMsgGesDirect, "ges direct request", ges_direct_handler);
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
