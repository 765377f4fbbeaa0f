// The IC Listener background worker: runs the engine on this process's main
// thread, waiting on its latch (backends and LMS workers put work in the
// outbound ring and set it) and on the transport's descriptor.
extern "C" {
#include "postgres.h"

#include "access/xlog.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

PGDLLEXPORT void pgrac_ic_listener_main(Datum arg);
}

#include <sched.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "instance/guc.hpp"
#include "ic/base/adaptive_spin.hpp"
#include "ic/base/atomics.hpp"
#include "ic/engine/engine.hpp"
#include "listener/in_place.hpp"
#include "capi/handler_registry.hpp"
#include "lms/ges_service.hpp"
#include "lms/held_db_lock.hpp"
#include "lms/kept_files.hpp"
#include "instance/pg_boundary.hpp"
#include "instance/shmem.hpp"
#include "instance/tier_startup.hpp"
#include "instance/timing_file.hpp"
#include "instance/verbs_glue.hpp"

namespace {

using pgrac::ic::Severity;

// Collects what the engine wants to log; the main loop emits it with ereport()
// outside of any C++ frame.
class ListenerHost final : public pgrac::ic::EngineHost {
  public:
    void wake_process(uint32_t procno) override {
        pgrac::glue::wake_procno(static_cast<int>(procno));
    }
    void wake_lms(uint32_t worker) override {
        pgrac::glue::wake_procno(pgrac::glue::shared()->lms_procno[worker]);
    }
    void log(Severity severity, const std::string& message) override {
        pending.emplace_back(severity, message);
    }
    // GES: the LMS workers release the node's locks and remaster.
    std::vector<std::pair<Severity, std::string>> pending;
};

ListenerHost* g_host = nullptr;
pgrac::ic::Engine* g_engine = nullptr;

// Memory of the log relay, reset around every emission.
MemoryContext g_log_context = nullptr;

// Emits the engine's log lines, on the main thread (the only one that calls
// PostgreSQL; the engine only queues them through ListenerHost::log). Copies them to palloc'd
// strings in g_log_context first so that no C++ object is live when ereport() runs, then frees them
// all at once by resetting the context. It is reset before the copy too, in case an error escaped
// the last emission before its reset.
void emit_logs() {
    if (g_host->pending.empty()) return;
    if (g_log_context == nullptr)
        g_log_context =
            AllocSetContextCreate(TopMemoryContext, "pgrac_ic log relay", ALLOCSET_SMALL_SIZES);
    MemoryContextReset(g_log_context);
    MemoryContext old = MemoryContextSwitchTo(g_log_context);
    int n = static_cast<int>(g_host->pending.size());
    int* levels = static_cast<int*>(palloc(sizeof(int) * n));
    char** texts = static_cast<char**>(palloc(sizeof(char*) * n));
    for (int i = 0; i < n; i++) {
        const auto& [sev, msg] = g_host->pending[i];
        levels[i] = sev == Severity::Error ? LOG : sev == Severity::Warning ? WARNING : LOG;
        texts[i] = pstrdup(msg.c_str());
    }
    MemoryContextSwitchTo(old);
    g_host->pending.clear();
    for (int i = 0; i < n; i++) ereport(levels[i], (errmsg("pgrac_ic: %s", texts[i])));
    MemoryContextReset(g_log_context);
}

pgrac::ic::EngineConfig make_config(pgrac::ic::IcShared* shm) {
    pgrac::ic::EngineConfig cfg;
    cfg.identity.cluster_name = pgrac_cluster_name;
    cfg.identity.system_id = GetSystemIdentifier();
    cfg.identity.node_id = static_cast<uint16_t>(pgrac_node_id);
    cfg.identity.incarnation = shm->incarnation;
    cfg.identity.instance = shm->membership.self_instance;
    cfg.identity.settings = shm->settings;
    cfg.nodes = pgrac::glue::configured_nodes();
    cfg.bulk_lanes = pgrac_tcp_paths;
    cfg.heartbeat_interval_ms = pgrac_heartbeat_interval_ms;
    cfg.peer_timeout_ms = pgrac_peer_timeout_ms;
    cfg.max_unauthenticated = pgrac_max_unauthenticated;
    cfg.identity.max_message = PGRAC_IC_MAX_MESSAGE;
    cfg.identity.protection = static_cast<pgrac::ic::WireProtection>(pgrac_wire_protection);
    if (pgrac_serve_in_place) cfg.serve_in_place = pgrac::glue::in_place_types();
    if (cfg.nodes.size() > 1 && pgrac_auth_key_file && *pgrac_auth_key_file) {
        std::string err;
        auto key = pgrac::ic::load_key_file(pgrac_auth_key_file, &err);
        if (!key) throw std::runtime_error("cluster.auth_key_file: " + err);
        cfg.identity.key = std::move(*key);
    }
    return cfg;
}

// A new incarnation every time the listener starts: its sessions start empty,
// so peers must not try to resume the old ones.
uint64_t new_incarnation() {
    uint64_t r = 0;
    if (!pg_strong_random(&r, sizeof r)) r = static_cast<uint64_t>(MyProcPid);
    return (static_cast<uint64_t>(pgrac::ic::unix_time_us()) << 8 ^ (r & 0xffff)) &
           0x7fffffffffffffffULL;
}

// Whatever way the listener leaves (shutdown, an ERROR, a terminate), backends
// must not go on queueing to it or waiting for replies it will never route:
// it is marked not ready, its peers DOWN, and every armed reply slot fails
// at once with NOT_RUNNING. The restarted listener starts from there.
void listener_exit(int, Datum) {
    pgrac::ic::IcShared* shm = pgrac::glue::shared();
    if (shm == nullptr) return;
    pgrac::ic::store_release(&shm->listener_ready, 0u);
    pgrac::ic::store_release(&shm->listener_procno, -1);
    for (pgrac::ic::PeerShared& p : shm->peers) {
        if (p.node_id == 0 || p.node_id == shm->my_node_id) continue;
        pgrac::ic::store_relaxed(&p.state, static_cast<uint32_t>(pgrac::ic::PeerState::Down));
        pgrac::ic::store_relaxed(&p.lanes_up, 0u);
    }
    for (uint32_t i = 0; i < shm->n_slots; i++) {
        pgrac::ic::ReplySlot* slot = pgrac::ic::reply_slot(shm, i);
        if (pgrac::ic::load_acquire(&slot->state) !=
            static_cast<uint32_t>(pgrac::ic::SlotState::Waiting))
            continue;
        if (pgrac::ic::complete_slot(shm, slot, pgrac::ic::load_acquire(&slot->rpc_id),
                                     PGRAC_IC_NOT_RUNNING, nullptr, 0))
            pgrac::glue::wake_procno(static_cast<int>(i));
    }
}

// Longest stretch of busy-polling before the loop goes back to its latch
// (interrupts, configuration reloads, postmaster death).
constexpr uint64_t kMaxSpinNs = 20 * 1000 * 1000;

pgrac::ic::AdaptiveSpin g_spin;
uint64_t g_last_work_ns = 0;

// The gaps between rounds that moved something teach g_spin how long to poll.
void note_work() {
    const uint64_t now = pgrac::ic::monotonic_ns();
    if (g_last_work_ns != 0) g_spin.observe(now - g_last_work_ns);
    g_last_work_ns = now;
}

// One round of engine work; its logs are emitted and its failure is an ERROR
// (the postmaster restarts the listener).
bool step() {
    char err[512] = "";
    bool worked = false;
    const bool ok = pgrac::glue::guarded([&] { worked = g_engine->run_once(); }, err, sizeof err);
    emit_logs();
    if (!ok)
        ereport(ERROR,
                (errcode(ERRCODE_INTERNAL_ERROR), errmsg("pgrac_ic listener failed: %s", err)));
    // Requests the listener serves itself (ping, blocks in the buffer pool).
    if (pgrac::glue::serve_in_place(pgrac::glue::shared())) {
        worked = true;
        emit_logs();
    }
    pgrac::glue::held_db_lock_idle();
    return worked;
}

}  // namespace

void pgrac_ic_listener_main(Datum) {
    pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
    pqsignal(SIGHUP, SignalHandlerForConfigReload);
    BackgroundWorkerUnblockSignals();
    BackgroundWorkerInitializeConnection(nullptr, nullptr, 0);

    pqsignal(SIGINT, SIG_IGN);  // a query cancel means nothing to the listener
    pgrac::ic::IcShared* shm = pgrac::glue::shared();
    before_shmem_exit(listener_exit, 0);
    pgrac::glue::release_session_locks_at_exit();
    shm->incarnation = new_incarnation();
    shm->peers[pgrac_node_id - 1].incarnation = shm->incarnation;

    // Published before the engine marks itself ready, so that no backend
    // queues a message and then wakes nobody.
    pgrac::ic::store_release(&shm->listener_procno, static_cast<int32_t>(MyProc->pgprocno));
    char err[512] = "";
    bool ok = pgrac::glue::guarded(
        [&] {
            g_host = new ListenerHost();
            g_engine = new pgrac::ic::Engine(make_config(shm), shm, *g_host,
                                             pgrac::glue::transport_factory());
            std::string e;
            if (!g_engine->start(&e)) throw std::runtime_error(e);
        },
        err, sizeof err);
    if (!ok)
        ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
                        errmsg("pgrac_ic listener cannot start: %s", err)));
    pgrac::glue::in_place_init(g_engine);
    pgrac::glue::publish_transport(shm);  // tier1/tier2: what runs (verbs or the TCP fallback)
    pgrac::glue::remember_told_timeout(shm);
    ereport(LOG, (errmsg("pgrac_ic listener started: node %d, tier %s (%s transport), %zu nodes",
                         pgrac_node_id,
                         pgrac::tiers::tier_name(static_cast<pgrac::tiers::Tier>(shm->tier_active)),
                         g_engine->transport_name(), pgrac::glue::configured_nodes().size())));

    WaitEventSet* set = CreateWaitEventSet(TopMemoryContext, 3);
    AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, nullptr);
    AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, nullptr, nullptr);
    if (g_engine->wait_fd() >= 0)
        AddWaitEventToSet(set, WL_SOCKET_READABLE, g_engine->wait_fd(), nullptr, nullptr);

    bool serving_in_place = pgrac_serve_in_place;  // as the engine was told
    while (!ShutdownRequestPending) {
        WaitEvent events[3];
        // A database lock kept between requests is looked at every millisecond.
        int timeout_ms = g_engine->next_timeout_ms();
        const int lock_ms = pgrac::glue::held_db_lock_wait_ms();
        if (lock_ms >= 0 && (timeout_ms < 0 || timeout_ms > lock_ms)) timeout_ms = lock_ms;
        WaitEventSetWait(set, timeout_ms, events, 3, PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
        CHECK_FOR_INTERRUPTS();
        if (ConfigReloadPending) {
            ConfigReloadPending = false;
            ProcessConfigFile(PGC_SIGHUP);
            // The start-up rule (timeout at least two heartbeats) holds for
            // reloads too: a peer would otherwise be DOWN between heartbeats.
            if (pgrac_serve_in_place != serving_in_place) {
                serving_in_place = pgrac_serve_in_place;
                if (!pgrac::glue::guarded(
                        [] {
                            g_engine->set_serve_in_place(pgrac_serve_in_place
                                                             ? pgrac::glue::in_place_types()
                                                             : std::vector<bool>());
                        },
                        err, sizeof err))
                    ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                                    errmsg("pgrac_ic listener failed: %s", err)));
                ereport(LOG, (errmsg("pgrac_ic: cluster.serve_in_place is now %s; it takes "
                                     "effect once the LMS inboxes are empty",
                                     serving_in_place ? "on" : "off")));
            }
            if (pgrac_peer_timeout_ms >= 2 * pgrac_heartbeat_interval_ms) {
                g_engine->set_timing(pgrac_heartbeat_interval_ms, pgrac_peer_timeout_ms);
                pgrac::glue::remember_told_timeout(shm);
            } else
                ereport(WARNING,
                        (errmsg("pgrac_ic: cluster.peer_timeout (%d ms) must be at least twice "
                                "cluster.heartbeat_interval (%d ms); keeping the previous values",
                                pgrac_peer_timeout_ms, pgrac_heartbeat_interval_ms)));
        }
        // Busy-poll while traffic flows: the next frame or ring record is
        // usually a few microseconds away, and a sleep/wakeup costs more.
        g_spin.set_max_ns(static_cast<uint64_t>(pgrac_busy_poll_us) * 1000);
        if (step()) {
            note_work();
            uint64_t idle_since = pgrac::ic::monotonic_ns();
            const uint64_t spin_start = idle_since;
            while (!ShutdownRequestPending) {
                const uint64_t now = pgrac::ic::monotonic_ns();
                if (now - idle_since >= g_spin.budget_ns() || now - spin_start > kMaxSpinNs) break;
                sched_yield();  // let the process we wait for have this CPU
                if (step()) {
                    note_work();
                    idle_since = pgrac::ic::monotonic_ns();
                }
            }
        }
        pgrac::glue::publish_transport_counters(shm);
        pgrac::glue::kept_files_idle();
    }

    pgrac::glue::guarded([] { g_engine->shutdown(); }, err, sizeof err);
    emit_logs();
    pgrac::ic::store_release(&shm->listener_procno, -1);
    // Exit code 1: the postmaster restarts us unless it is shutting down
    // (pg_terminate_backend on the listener must not leave the node deaf).
    proc_exit(1);
}
