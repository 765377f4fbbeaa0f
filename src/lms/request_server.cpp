// Serving one request, in an LMS worker or in place in the listener
// (request_server.hpp). Plain C-style code: handlers may raise PostgreSQL
// errors, and no C++ object with a destructor is live when they do.
extern "C" {
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "storage/condition_variable.h"
#include "storage/lwlock.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
}

#include <cstring>

#include "ic/base/atomics.hpp"
#include "capi/handler_registry.hpp"
#include "lms/held_db_lock.hpp"
#include "lms/request_server.hpp"

using namespace pgrac::ic;

namespace pgrac::glue {

namespace {

MemoryContext g_msg_context = nullptr;
uint8_t* g_reply_body = nullptr;      // PGRAC_IC_MAX_MESSAGE bytes, after the header's room
uint8_t* g_own_reply_body = nullptr;  // what g_reply_body is unless use_reply_body() says
bool g_declined = false;

// The reply stream (use_reply_stream): where the reply to the request being
// served goes, while serve_record() runs an RPC's handler, and its state.
const ReplyStreamOps* g_stream_ops = nullptr;
struct StreamTarget {
    bool set = false;
    uint16_t node = 0, flags = 0;
    MessageHeader mh;
};
StreamTarget g_target;
bool g_stream_open = false;
bool g_stream_sent = false;

// After a handler raised: what the checkpointer and bgwriter do after an
// error, since neither the LMS nor the listener runs a transaction whose abort
// would do it (handlers may take LWLocks, pin buffers, sleep on condition
// variables, or even start a transaction). Resources the handler registered
// with CurrentResourceOwner (the process's AuxProcessResourceOwner) are released.
void recover_from_handler_error() {
    LWLockReleaseAll();
    // Before a transaction's abort, which would drop it behind our back.
    held_db_lock_release();
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
int run_handler(const HandlerEntry* h, const pgrac_ic_message* msg, pgrac_ic_reply* reply) {
    volatile int status = PGRAC_IC_OK;
    MemoryContext old = MemoryContextSwitchTo(g_msg_context);
    PG_TRY();
    {
        status = h->fn(msg, reply);
        // A handler may point reply->body at memory of its own (palloc'd in
        // the context reset below): the reply leaves from ours.
        if (reply != nullptr && reply->body != g_reply_body) {
            if (reply->len > 0 && reply->len <= PGRAC_IC_MAX_MESSAGE)
                std::memmove(g_reply_body, reply->body, reply->len);
            reply->body = g_reply_body;
        }
    }
    PG_CATCH();
    {
        HOLD_INTERRUPTS();
        if (reply != nullptr) {  // the error text goes to our buffer, whatever the handler did
            reply->body = g_reply_body;
            reply->capacity = PGRAC_IC_MAX_MESSAGE;
        }
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

}  // namespace

void request_server_init() {
    // Handlers (and the block service) get a resource owner to register pins
    // and locks with; recover_from_handler_error() releases them.
    CreateAuxProcessResourceOwner();
    g_msg_context =
        AllocSetContextCreate(TopMemoryContext, "pgrac_ic request", ALLOCSET_DEFAULT_SIZES);
    g_own_reply_body = static_cast<uint8_t*>(MemoryContextAlloc(
                           TopMemoryContext, kMessageHeaderSize + PGRAC_IC_MAX_MESSAGE)) +
                       kMessageHeaderSize;
    g_reply_body = g_own_reply_body;
}

void use_reply_body(uint8_t* body) {
    g_reply_body = body != nullptr ? body : g_own_reply_body;
}

void use_reply_stream(const ReplyStreamOps* ops) {
    g_stream_ops = ops;
}

bool reply_stream_begin(uint32_t len) {
    if (g_stream_ops == nullptr || !g_target.set || g_stream_open || g_stream_sent) return false;
    if (!g_stream_ops->begin(g_target.node, g_target.flags, g_target.mh, len)) return false;
    g_stream_open = true;
    return true;
}

void reply_stream_write(const void* piece, uint32_t len) {
    if (!g_stream_open)
        ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                        errmsg("pgrac_ic: a reply piece was written with no reply begun")));
    g_stream_ops->write(static_cast<const uint8_t*>(piece), len);
}

void reply_stream_finish() {
    if (!g_stream_open)
        ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                        errmsg("pgrac_ic: a reply was finished with none begun")));
    g_stream_open = false;  // the engine has abandoned it if this raises
    g_stream_ops->finish();
    g_stream_sent = true;
}

void reply_stream_abandon() {
    if (!g_stream_open) return;
    g_stream_open = false;
    g_stream_ops->abandon();
}

void decline_in_place() {
    if (serving_in_place()) g_declined = true;
}

Served serve_record(IcShared* shm, const uint8_t* rec, size_t len, bool in_place,
                    ReplySender send) {
    RingPrefix pre;
    std::memcpy(&pre, rec, sizeof pre);
    MessageHeader mh;
    const uint8_t* payload = rec + sizeof pre;
    if (len < sizeof pre + kMessageHeaderSize || pre.payload_len != len - sizeof pre ||
        decode_message_header(payload, pre.payload_len, &mh) != FrameError::None)
        return Served::Done;
    if (pre.payload_len - kMessageHeaderSize > PGRAC_IC_MAX_MESSAGE) {
        // The listener refuses such messages where they arrive; this is the
        // last line: no handler ever sees a body over the documented limit.
        shm->errors.add(ErrorType::OversizedMessage, Severity::Error, pre.node, unix_time_us(),
                        "message over PGRAC_IC_MAX_MESSAGE reached a handler; dropped");
        return Served::Done;
    }
    const bool is_rpc = (pre.flags & kFlagRpcRequest) != 0;
    pgrac_ic_message msg{mh.msg_type, pre.node, mh.route_key, payload + kMessageHeaderSize,
                         static_cast<uint32_t>(pre.payload_len - kMessageHeaderSize)};
    pgrac_ic_reply reply{g_reply_body, PGRAC_IC_MAX_MESSAGE, 0};

    int status;
    const HandlerEntry* h = find_handler(mh.msg_type);
    if (h == nullptr) {
        status = PGRAC_IC_NO_HANDLER;
        char text[128];
        snprintf(text, sizeof text, "no handler for message type %u on node %u (from node %u)",
                 mh.msg_type, shm->my_node_id, pre.node);
        shm->errors.add(ErrorType::NoHandler, Severity::Warning, pre.node, unix_time_us(), text);
        reply.len = static_cast<uint32_t>(strlen(text) + 1);
        memcpy(reply.body, text, reply.len);
    } else {
        set_serving_in_place(in_place);
        g_declined = false;
        g_stream_sent = false;
        if (is_rpc) {
            g_target.set = true;
            g_target.node = pre.node;
            g_target.flags = kFlagRpcReply | (pre.flags & kFlagControlLane);
            g_target.mh = mh;
            g_target.mh.status = PGRAC_IC_OK;
            g_target.mh.epoch = load_relaxed(&shm->epoch);
        }
        status = run_handler(h, &msg, is_rpc ? &reply : nullptr);
        g_target.set = false;
        reply_stream_abandon();  // begun and not finished: an error or a decline
        set_serving_in_place(false);
        // Sent first: a reply that left is never followed by an LMS worker's.
        if (g_stream_sent) {
            // The reply has left; whatever the handler did after it cannot
            // change it, and a second reply to one request is never sent.
            if (status != PGRAC_IC_OK)
                shm->errors.add(ErrorType::HandlerError, Severity::Warning, pre.node,
                                unix_time_us(),
                                "a handler failed after its reply was sent; the reply stands");
            return Served::Done;
        }
        if (g_declined) return Served::WouldBlock;
        if (status == PGRAC_IC_HANDLER_ERROR && is_rpc) {
            char text[kErrorDescriptionMax];
            snprintf(text, sizeof text, "handler \"%s\" failed: %.*s", h->name,
                     static_cast<int>(reply.len), static_cast<char*>(reply.body));
            shm->errors.add(ErrorType::HandlerError, Severity::Warning, pre.node, unix_time_us(),
                            text);
        }
    }
    if (!is_rpc) return Served::Done;
    if (reply.len > PGRAC_IC_MAX_MESSAGE) {
        status = PGRAC_IC_REPLY_TOO_BIG;
        reply.len = 0;
    }
    MessageHeader rh = mh;
    rh.status = static_cast<uint16_t>(status);
    rh.epoch = load_relaxed(&shm->epoch);
    send(pre.node, kFlagRpcReply | (pre.flags & kFlagControlLane), rh, g_reply_body, reply.len);
    return Served::Done;
}

}  // namespace pgrac::glue
