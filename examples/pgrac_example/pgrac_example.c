/*
 * pgrac_example: an upper layer of the pgrac_ic interconnect, written as any
 * other extension would be, against the installed header only
 * (extension/pgrac_ic/pgrac_ic.h under the server include directory).
 *
 * Loaded after pgrac_ic (shared_preload_libraries = 'pgrac_ic,pgrac_example':
 * the pgrac_ic_* symbols come from pgrac_ic.so, already loaded), it registers
 * its own message types in _PG_init, so that every LMS worker the postmaster
 * forks has their handlers:
 *
 *   EXAMPLE_MSG_UPPER  RPC: the reply is "node N: " and the body in upper case
 *   EXAMPLE_MSG_FAIL   RPC: the handler raises an ERROR (the caller gets
 *                      PGRAC_IC_HANDLER_ERROR and the error's text)
 *   EXAMPLE_MSG_NOTE   one-way: counted per sending node in this library's
 *                      shared memory, the body of the last one kept
 *   EXAMPLE_MSG_RELAY  RPC, registered in place by mistake: it tries to send a
 *                      note on, which a handler in the listener may not do (the
 *                      caller gets PGRAC_IC_HANDLER_ERROR and the reason)
 *
 * The SQL functions (pgrac_example--1.0.sql) run in backends and call
 * pgrac_ic_rpc / pgrac_ic_send / pgrac_ic_broadcast.
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"

#include "pgrac_ic/pgrac_ic.h"

PG_MODULE_MAGIC;

/* Our message types: at or above PGRAC_IC_FIRST_USER_TYPE, and below
 * PGRAC_IC_MAX_MSG_TYPE. Another upper layer in the same cluster must pick
 * other numbers (registering a taken type fails in _PG_init). */
#define EXAMPLE_MSG_UPPER (PGRAC_IC_FIRST_USER_TYPE + 256) /* 512 */
#define EXAMPLE_MSG_FAIL (EXAMPLE_MSG_UPPER + 1)
#define EXAMPLE_MSG_NOTE (EXAMPLE_MSG_UPPER + 2)
#define EXAMPLE_MSG_RELAY (EXAMPLE_MSG_UPPER + 3)

/* One route key for everything this example sends: messages with one route
 * key are handled in order by one LMS worker on the receiver, so an RPC sent
 * after notes is answered after those notes were counted. A real upper layer
 * routes by what it serves (e.g. a hash of the resource). */
#define EXAMPLE_ROUTE_KEY 0

#define EXAMPLE_NOTE_TIMEOUT_MS 5000
#define EXAMPLE_MAX_NODE 64 /* node ids are 1..64 (cluster.node_id) */
#define EXAMPLE_LAST_NOTE_MAX 256

typedef struct ExampleShared {
    /* Notes received, by sending node (index 0: an id out of range). */
    pg_atomic_uint64 notes_from[EXAMPLE_MAX_NODE + 1];
    slock_t last_lock; /* protects the last note */
    int32 last_from;   /* 0: none yet */
    uint32 last_len;
    char last_body[EXAMPLE_LAST_NOTE_MAX];
} ExampleShared;

static ExampleShared* example_shared = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

void _PG_init(void);

/* ---- handlers: they run in the receiving instance's listener (registered in
 * place) or in one of its LMS workers ---- */

/* "node N: " and the body in ASCII upper case. The body is not NUL-terminated
 * and lives only during the call; the reply never exceeds reply->capacity. */
static int upper_handler(const pgrac_ic_message* msg, pgrac_ic_reply* reply) {
    char prefix[32];
    int n;
    char* out;
    const char* in = (const char*)msg->body;

    if (reply == NULL) return PGRAC_IC_OK; /* sent one-way: nothing to answer */
    n = snprintf(prefix, sizeof prefix, "node %d: ", pgrac_ic_my_node_id());
    if ((uint64)n + msg->len > reply->capacity) return PGRAC_IC_REPLY_TOO_BIG;
    out = (char*)reply->body;
    memcpy(out, prefix, n);
    for (uint32 i = 0; i < msg->len; i++) out[n + i] = pg_ascii_toupper((unsigned char)in[i]);
    reply->len = (uint32)n + msg->len;
    return PGRAC_IC_OK;
}

/* Refuses every request with a PostgreSQL ERROR: pgrac_ic catches it, cleans
 * up, and the caller receives PGRAC_IC_HANDLER_ERROR and this text. */
static int fail_handler(const pgrac_ic_message* msg, pgrac_ic_reply* reply) {
    (void)reply;
    ereport(ERROR,
            (errcode(ERRCODE_RAISE_EXCEPTION),
             errmsg("pgrac_example: node %d refuses \"%.*s\" from node %d", pgrac_ic_my_node_id(),
                    (int)Min(msg->len, 200), (const char*)msg->body, msg->src_node)));
    return PGRAC_IC_OK; /* not reached */
}

/* Counts the note and keeps a copy of its body (the body itself is gone once
 * the handler returns). */
static int note_handler(const pgrac_ic_message* msg, pgrac_ic_reply* reply) {
    int from = msg->src_node;
    uint32 n = Min(msg->len, EXAMPLE_LAST_NOTE_MAX);

    (void)reply;
    if (from < 1 || from > EXAMPLE_MAX_NODE) from = 0;
    SpinLockAcquire(&example_shared->last_lock);
    example_shared->last_from = msg->src_node;
    example_shared->last_len = n;
    memcpy(example_shared->last_body, msg->body, n);
    SpinLockRelease(&example_shared->last_lock);
    /* Counted last: who reads the counter sees the body of that note. */
    pg_atomic_fetch_add_u64(&example_shared->notes_from[from], 1);
    return PGRAC_IC_OK;
}

/* What not to do in a handler registered in place: send (or wait for anything).
 * pgrac_ic raises an ERROR rather than let the listener wait for itself. */
static int relay_handler(const pgrac_ic_message* msg, pgrac_ic_reply* reply) {
    (void)reply;
    (void)pgrac_ic_send(msg->src_node, EXAMPLE_MSG_NOTE, EXAMPLE_ROUTE_KEY, msg->body, msg->len, 0,
                        EXAMPLE_NOTE_TIMEOUT_MS);
    return PGRAC_IC_OK; /* not reached */
}

/* ---- shared memory ---- */

static void example_shmem_request(void) {
    if (prev_shmem_request_hook) prev_shmem_request_hook();
    RequestAddinShmemSpace(MAXALIGN(sizeof(ExampleShared)));
}

static void example_shmem_startup(void) {
    bool found;

    if (prev_shmem_startup_hook) prev_shmem_startup_hook();
    LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
    example_shared = ShmemInitStruct("pgrac_example", sizeof(ExampleShared), &found);
    if (!found) {
        for (int i = 0; i <= EXAMPLE_MAX_NODE; i++)
            pg_atomic_init_u64(&example_shared->notes_from[i], 0);
        SpinLockInit(&example_shared->last_lock);
        example_shared->last_from = 0;
        example_shared->last_len = 0;
    }
    LWLockRelease(AddinShmemInitLock);
}

/* Registers one handler; any failure stops the server start. */
static void register_or_fail(uint16 type, const char* name, pgrac_ic_handler_fn fn, int flags) {
    int rc = pgrac_ic_register_handler_flags(type, name, fn, flags);

    if (rc != PGRAC_IC_OK)
        ereport(ERROR, (errmsg("pgrac_example: cannot register message type %u: %s", type,
                               pgrac_ic_strerror(rc))));
}

void _PG_init(void) {
    if (!process_shared_preload_libraries_in_progress)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("pgrac_example must be loaded via shared_preload_libraries"),
                        errhint("Set shared_preload_libraries = 'pgrac_ic,pgrac_example' (in this "
                                "order) and restart the server.")));

    /* The name is kept by pointer: a string literal. */
    /* upper and fail never wait: the peer's listener runs them where the
     * request arrives. note takes a spinlock and could as well; it stays in an
     * LMS worker to show the default. */
    register_or_fail(EXAMPLE_MSG_UPPER, "example upper", upper_handler, PGRAC_IC_HANDLER_IN_PLACE);
    register_or_fail(EXAMPLE_MSG_FAIL, "example fail", fail_handler, PGRAC_IC_HANDLER_IN_PLACE);
    register_or_fail(EXAMPLE_MSG_NOTE, "example note", note_handler, 0);
    register_or_fail(EXAMPLE_MSG_RELAY, "example relay", relay_handler, PGRAC_IC_HANDLER_IN_PLACE);

    prev_shmem_request_hook = shmem_request_hook;
    shmem_request_hook = example_shmem_request;
    prev_shmem_startup_hook = shmem_startup_hook;
    shmem_startup_hook = example_shmem_startup;
}

/* ---- SQL functions: they run in backends ---- */

/* A failed call as an ERROR; for HANDLER_ERROR and NO_HANDLER the reply holds
 * the remote text. */
static void raise_ic_error(const char* what, int node, int rc, const char* reply,
                           uint32 reply_len) {
    bool remote = (rc == PGRAC_IC_HANDLER_ERROR || rc == PGRAC_IC_NO_HANDLER) && reply_len > 0;

    /* The remote text is NUL-terminated; do not print the NUL. */
    if (remote && reply[reply_len - 1] == '\0') reply_len--;
    ereport(ERROR,
            (errcode(rc == PGRAC_IC_UNKNOWN_NODE ? ERRCODE_UNDEFINED_OBJECT
                                                 : ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
             errmsg("pgrac_example: %s to node %d failed: %s", what, node, pgrac_ic_strerror(rc)),
             remote ? errdetail("Remote error: %.*s", (int)reply_len, reply) : 0));
}

static text* call_rpc(int node, int msg_type, text* body) {
    uint32 cap = PGRAC_IC_MAX_MESSAGE;
    char* buf;
    uint32 len = 0;
    int rc;

    if (msg_type < 1 || msg_type > PGRAC_IC_MAX_MSG_TYPE)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("message type %d is out of range (1..%d)", msg_type,
                               PGRAC_IC_MAX_MSG_TYPE)));
    /* palloc, not a stack buffer or anything with a destructor: the wait may
     * end by a query cancel (longjmp). */
    buf = palloc(cap);
    rc = pgrac_ic_rpc(node, (uint16)msg_type, EXAMPLE_ROUTE_KEY, VARDATA_ANY(body),
                      VARSIZE_ANY_EXHDR(body), buf, cap, &len, 0, -1 /* cluster.rpc_timeout */);
    if (rc != PGRAC_IC_OK) raise_ic_error("RPC", node, rc, buf, len);
    return cstring_to_text_with_len(buf, (int)len);
}

PG_FUNCTION_INFO_V1(example_rpc);
Datum example_rpc(PG_FUNCTION_ARGS) {
    PG_RETURN_TEXT_P(call_rpc(PG_GETARG_INT32(0), EXAMPLE_MSG_UPPER, PG_GETARG_TEXT_PP(1)));
}

PG_FUNCTION_INFO_V1(example_rpc_fail);
Datum example_rpc_fail(PG_FUNCTION_ARGS) {
    PG_RETURN_TEXT_P(call_rpc(PG_GETARG_INT32(0), EXAMPLE_MSG_FAIL, PG_GETARG_TEXT_PP(1)));
}

PG_FUNCTION_INFO_V1(example_rpc_type);
Datum example_rpc_type(PG_FUNCTION_ARGS) {
    PG_RETURN_TEXT_P(call_rpc(PG_GETARG_INT32(0), PG_GETARG_INT32(1), PG_GETARG_TEXT_PP(2)));
}

PG_FUNCTION_INFO_V1(example_note);
Datum example_note(PG_FUNCTION_ARGS) {
    int node = PG_GETARG_INT32(0);
    text* body = PG_GETARG_TEXT_PP(1);
    int count = PG_GETARG_INT32(2);

    if (count < 0 || count > 1000000)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("count must be between 0 and 1000000")));
    for (int i = 0; i < count; i++) {
        int rc = pgrac_ic_send(node, EXAMPLE_MSG_NOTE, EXAMPLE_ROUTE_KEY, VARDATA_ANY(body),
                               VARSIZE_ANY_EXHDR(body), 0, EXAMPLE_NOTE_TIMEOUT_MS);
        if (rc != PGRAC_IC_OK) raise_ic_error("note", node, rc, NULL, 0);
        CHECK_FOR_INTERRUPTS();
    }
    PG_RETURN_INT32(count);
}

PG_FUNCTION_INFO_V1(example_broadcast);
Datum example_broadcast(PG_FUNCTION_ARGS) {
    text* body = PG_GETARG_TEXT_PP(0);
    int rc = pgrac_ic_broadcast(EXAMPLE_MSG_NOTE, EXAMPLE_ROUTE_KEY, VARDATA_ANY(body),
                                VARSIZE_ANY_EXHDR(body), 0, EXAMPLE_NOTE_TIMEOUT_MS);

    if (rc != PGRAC_IC_OK)
        ereport(ERROR, (errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
                        errmsg("pgrac_example: broadcast failed: %s", pgrac_ic_strerror(rc))));
    PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(example_notes_received);
Datum example_notes_received(PG_FUNCTION_ARGS) {
    uint64 total = 0;

    for (int i = 0; i <= EXAMPLE_MAX_NODE; i++)
        total += pg_atomic_read_u64(&example_shared->notes_from[i]);
    PG_RETURN_INT64((int64)total);
}

PG_FUNCTION_INFO_V1(example_notes_received_from);
Datum example_notes_received_from(PG_FUNCTION_ARGS) {
    int node = PG_GETARG_INT32(0);

    if (node < 1 || node > EXAMPLE_MAX_NODE) PG_RETURN_INT64(0);
    PG_RETURN_INT64((int64)pg_atomic_read_u64(&example_shared->notes_from[node]));
}

PG_FUNCTION_INFO_V1(example_last_note);
Datum example_last_note(PG_FUNCTION_ARGS) {
    TupleDesc desc;
    Datum values[2];
    bool nulls[2] = {false, false};
    char body[EXAMPLE_LAST_NOTE_MAX];
    uint32 len;
    int32 from;

    if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
        elog(ERROR, "example_last_note: return type must be a row type");
    SpinLockAcquire(&example_shared->last_lock);
    from = example_shared->last_from;
    len = example_shared->last_len;
    memcpy(body, example_shared->last_body, len);
    SpinLockRelease(&example_shared->last_lock);
    if (from == 0) nulls[0] = nulls[1] = true;
    values[0] = Int32GetDatum(from);
    values[1] = nulls[1] ? (Datum)0 : PointerGetDatum(cstring_to_text_with_len(body, (int)len));
    PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}

PG_FUNCTION_INFO_V1(example_register_late);
Datum example_register_late(PG_FUNCTION_ARGS) {
    /* Raises an ERROR: a backend's handler table is nobody's (the LMS workers
     * were forked from the postmaster long ago). */
    int rc = pgrac_ic_register_handler(EXAMPLE_MSG_NOTE + 1, "example late", note_handler);

    ereport(ERROR, (errmsg("pgrac_example: late registration returned %s", pgrac_ic_strerror(rc))));
    PG_RETURN_VOID();
}
