// An LMS worker: takes requests from its inbox ring (the listener routes them
// by route_key, so one resource's messages stay in order on one worker), runs
// the registered handler and sends the reply back through the outbound ring.
extern "C" {
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/bufmgr.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/wait_event.h"

PGDLLEXPORT void pgrac_ic_lms_main(Datum arg);
}

#include <sched.h>

#include <cstring>

#include "guc.hpp"

#include "ic/adaptive_spin.hpp"
#include "ic/atomics.hpp"
#include "lms/ges_service.hpp"
#include "lms/handler_registry.hpp"
#include "send_path.hpp"
#include "shmem.hpp"

using namespace pgrac::ic;

namespace {

MemoryContext g_msg_context = nullptr;
// How long to poll the inbox before sleeping, learned from request gaps.
AdaptiveSpin g_spin;
uint64_t g_last_request_ns = 0;
uint8_t* g_reply_body = nullptr;  // PGRAC_IC_MAX_MESSAGE bytes

// After a handler raised: what the checkpointer and bgwriter do after an
// error, since the LMS runs no transaction whose abort would do it (handlers
// may take LWLocks, pin buffers, sleep on condition variables, or even start
// a transaction). Resources the handler registered with CurrentResourceOwner
// (the worker's AuxProcessResourceOwner) are released.
void recover_from_handler_error() {
    LWLockReleaseAll();
    ConditionVariableCancelSleep();
    pgstat_report_wait_end();
    AbortBufferIO();
    UnlockBuffers();
    if (IsTransactionState()) AbortCurrentTransaction();
    ReleaseAuxProcessResources(false);
    CurrentResourceOwner = AuxProcessResourceOwner;
}

// Runs the handler; a PostgreSQL error becomes HANDLER_ERROR with its message
// as the reply body.
int run_handler(const pgrac::glue::HandlerEntry* h, const pgrac_ic_message* msg,
                pgrac_ic_reply* reply) {
    volatile int status = PGRAC_IC_OK;
    MemoryContext old = MemoryContextSwitchTo(g_msg_context);
    PG_TRY();
    { status = h->fn(msg, reply); }
    PG_CATCH();
    {
        HOLD_INTERRUPTS();
        recover_from_handler_error();
        MemoryContextSwitchTo(g_msg_context);
        ErrorData* ed = CopyErrorData();
        FlushErrorState();
        RESUME_INTERRUPTS();
        status = PGRAC_IC_HANDLER_ERROR;
        if (reply != nullptr) {
            int n = snprintf(static_cast<char*>(reply->body), reply->capacity, "%s",
                             ed->message ? ed->message : "unknown error");
            reply->len = static_cast<uint32_t>(Min(n + 1, static_cast<int>(reply->capacity)));
        } else {
            ereport(LOG, (errmsg("pgrac_ic: handler \"%s\" failed on a one-way message: %s",
                                 h->name, ed->message)));
        }
    }
    PG_END_TRY();
    MemoryContextSwitchTo(old);
    MemoryContextReset(g_msg_context);
    return status;
}

void handle_record(IcShared* shm, const uint8_t* rec, size_t len) {
    RingPrefix pre;
    std::memcpy(&pre, rec, sizeof pre);
    MessageHeader mh;
    const uint8_t* payload = rec + sizeof pre;
    if (len < sizeof pre + kMessageHeaderSize || pre.payload_len != len - sizeof pre ||
        decode_message_header(payload, pre.payload_len, &mh) != FrameError::None)
        return;
    if (pre.payload_len - kMessageHeaderSize > PGRAC_IC_MAX_MESSAGE) {
        // The listener refuses such messages where they arrive; this is the
        // last line: no handler ever sees a body over the documented limit.
        shm->errors.add(ErrorType::OversizedMessage, Severity::Error, pre.node, unix_time_us(),
                        "message over PGRAC_IC_MAX_MESSAGE reached an LMS worker; dropped");
        return;
    }
    const bool is_rpc = (pre.flags & kFlagRpcRequest) != 0;
    pgrac_ic_message msg{mh.msg_type, pre.node, mh.route_key, payload + kMessageHeaderSize,
                         static_cast<uint32_t>(pre.payload_len - kMessageHeaderSize)};
    pgrac_ic_reply reply{g_reply_body, PGRAC_IC_MAX_MESSAGE, 0};

    int status;
    const pgrac::glue::HandlerEntry* h = pgrac::glue::find_handler(mh.msg_type);
    if (h == nullptr) {
        status = PGRAC_IC_NO_HANDLER;
        char text[128];
        snprintf(text, sizeof text, "no handler for message type %u on node %u (from node %u)",
                 mh.msg_type, shm->my_node_id, pre.node);
        shm->errors.add(ErrorType::NoHandler, Severity::Warning, pre.node, unix_time_us(), text);
        reply.len = static_cast<uint32_t>(strlen(text) + 1);
        memcpy(reply.body, text, reply.len);
    } else {
        status = run_handler(h, &msg, is_rpc ? &reply : nullptr);
        if (status == PGRAC_IC_HANDLER_ERROR && is_rpc) {
            char text[kErrorDescriptionMax];
            snprintf(text, sizeof text, "handler \"%s\" failed: %.*s", h->name,
                     static_cast<int>(reply.len), static_cast<char*>(reply.body));
            shm->errors.add(ErrorType::HandlerError, Severity::Warning, pre.node, unix_time_us(),
                            text);
        }
    }
    if (!is_rpc) return;
    if (reply.len > PGRAC_IC_MAX_MESSAGE) {
        status = PGRAC_IC_REPLY_TOO_BIG;
        reply.len = 0;
    }
    MessageHeader rh = mh;
    rh.status = static_cast<uint16_t>(status);
    rh.epoch = load_relaxed(&shm->epoch);
    // Replies wait for room without limit: dropping one would hang the requester.
    pgrac::glue::enqueue_message(pre.node, kFlagRpcReply | (pre.flags & kFlagControlLane), rh,
                                 reply.body, reply.len, 0, -1);
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
    // Handlers (and the block service) get a resource owner to register pins
    // and locks with; recover_from_handler_error() releases them.
    CreateAuxProcessResourceOwner();

    IcShared* shm = pgrac::glue::shared();
    g_msg_context =
        AllocSetContextCreate(TopMemoryContext, "pgrac_ic LMS message", ALLOCSET_DEFAULT_SIZES);
    g_reply_body =
        static_cast<uint8_t*>(MemoryContextAlloc(TopMemoryContext, PGRAC_IC_MAX_MESSAGE));
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
                handle_record(shm, rec, len);
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
