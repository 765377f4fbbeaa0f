// An LMS worker: takes requests from its inbox ring (the listener routes them
// by route_key, so one resource's messages stay in order on one worker), runs
// the registered handler (request_server.cpp) and sends the reply back
// through the outbound ring.
extern "C" {
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/wait_event.h"

PGDLLEXPORT void pgrac_ic_lms_main(Datum arg);
}

#include <sched.h>

#include "instance/guc.hpp"

#include "ic/base/adaptive_spin.hpp"
#include "ic/base/atomics.hpp"
#include "lms/ges_service.hpp"
#include "lms/held_db_lock.hpp"
#include "lms/request_server.hpp"
#include "capi/send_path.hpp"
#include "instance/shmem.hpp"

using namespace pgrac::ic;

namespace {

// How long to poll the inbox before sleeping, learned from request gaps.
AdaptiveSpin g_spin;
uint64_t g_last_request_ns = 0;

// Replies wait for room without limit: dropping one would hang the requester.
void send_reply(uint16_t node, uint16_t flags, const MessageHeader& mh, uint8_t* body,
                uint32_t len) {
    pgrac::glue::enqueue_message(node, flags, mh, body, len, 0, -1);
}

}  // namespace

void pgrac_ic_lms_main(Datum arg) {
    const int index = DatumGetInt32(arg);
    pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
    pqsignal(SIGHUP, SignalHandlerForConfigReload);
    BackgroundWorkerUnblockSignals();
    BackgroundWorkerInitializeConnection(nullptr, nullptr, 0);
    // The bgworker start-up installs StatementCancelHandler for SIGINT (a
    // database connection): a pg_cancel_backend() would then turn the next
    // CHECK_FOR_INTERRUPTS outside a handler into an ERROR, and the worker
    // would exit. A query cancel means nothing to an LMS.
    pqsignal(SIGINT, SIG_IGN);
    pgrac::glue::release_session_locks_at_exit();
    pgrac::glue::request_server_init();

    IcShared* shm = pgrac::glue::shared();
    store_release(&shm->lms_procno[index], static_cast<int32_t>(MyProc->pgprocno));
    ShmRing inbox = inbox_ring(shm, static_cast<uint32_t>(index));
    // GES: a restart rebuilds this worker's shard before it is served
    // (replay from the other nodes; requests queue meanwhile).
    pgrac::glue::lms_start(index);

    const uint64_t tick_ns = static_cast<uint64_t>(pgrac::glue::lms_tick_interval_ms()) * 1000000;
    uint64_t last_tick_ns = 0;
    while (!ShutdownRequestPending) {
        ResetLatch(MyLatch);
        // GES: membership changes, request deadlines (src/lms/ges_service.cpp).
        pgrac::glue::lms_tick(index);
        last_tick_ns = monotonic_ns();
        const uint8_t* rec;
        size_t len;
        // Serve what is there, then keep polling a little: the next request
        // of a conversation is often on its way.
        g_spin.set_max_ns(static_cast<uint64_t>(pgrac_busy_poll_us) * 1000);
        uint64_t idle_since = monotonic_ns();
        for (;;) {
            while (!ShutdownRequestPending && inbox.peek(&rec, &len)) {
                const uint64_t now = monotonic_ns();
                if (g_last_request_ns != 0) g_spin.observe(now - g_last_request_ns);
                g_last_request_ns = now;
                pgrac::glue::serve_record(shm, rec, len, false, send_reply);
                inbox.pop();
                CHECK_FOR_INTERRUPTS();
                idle_since = monotonic_ns();
                // Housekeeping (expiry, reaper, deadlock rounds, membership)
                // stays on time under a stream that never pauses.
                if (idle_since - last_tick_ns >= tick_ns) {
                    pgrac::glue::lms_tick(index);
                    last_tick_ns = monotonic_ns();
                }
            }
            if (ShutdownRequestPending || monotonic_ns() - idle_since >= g_spin.budget_ns()) break;
            sched_yield();
        }
        // Bounded sleep so that lms_tick runs even when no message comes (GES).
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
                        pgrac::glue::lms_tick_interval_ms(), PG_WAIT_EXTENSION);
        CHECK_FOR_INTERRUPTS();
        if (ConfigReloadPending) {
            ConfigReloadPending = false;
            ProcessConfigFile(PGC_SIGHUP);
        }
    }
    store_release(&shm->lms_procno[index], -1);
    proc_exit(1);
}
