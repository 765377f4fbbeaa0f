// pgrac_ic_broadcast and pgrac_ic_seq_rpc: the C API's broadcast and an
// exactly-once probe, callable from SQL so that operators and the failure
// tests can see delivery across the cluster. pgrac_ic_stream: one-way
// streaming throughput to a node, through the C API.
extern "C" {
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(pgrac_ic_broadcast_note);
PG_FUNCTION_INFO_V1(pgrac_ic_seq_rpc);
PG_FUNCTION_INFO_V1(pgrac_ic_stream);
}

#include <cstring>

#include "ic/session/seq_check.hpp"
#include "ic/shm/shared_state.hpp"
#include "instance/shmem.hpp"
#include "capi/errors.hpp"

using namespace pgrac::ic;

// Sends a one-way note to every other node through the C API's broadcast;
// returns how many nodes it went to. An error if any node could not take it.
Datum pgrac_ic_broadcast_note(PG_FUNCTION_ARGS) {
    bytea* body = PG_GETARG_BYTEA_PP(0);
    const int rc = pgrac_ic_broadcast(PGRAC_IC_MSG_NOTE, 0, VARDATA_ANY(body),
                                      static_cast<uint32_t>(VARSIZE_ANY_EXHDR(body)), 0, -1);
    if (rc != PGRAC_IC_OK)
        ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
                        errmsg("pgrac_ic broadcast failed: %s", pgrac_ic_strerror(rc)),
                        errdetail("The other nodes were still sent the note."),
                        errhint("See pg_cluster_ic_peers for the nodes that are not UP.")));
    PG_RETURN_INT32(static_cast<int32>(pgrac::glue::configured_nodes().size()) - 1);
}

// One exactly-once probe RPC: applies seq to this backend's stream on `node`
// and returns "applied", "duplicate" or "reordered".
Datum pgrac_ic_seq_rpc(PG_FUNCTION_ARGS) {
    const int node = PG_GETARG_INT32(0);
    const int stream = PG_GETARG_INT32(1);
    const int64 seq = PG_GETARG_INT64(2);
    pgrac::glue::require_known_node(node);
    if (stream < 0 || stream >= kSeqStreams)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("stream must be between 0 and %d", kSeqStreams - 1)));
    if (seq < 0)
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("seq must not be negative")));
    uint8_t body[12];
    for (int i = 0; i < 4; i++)
        body[i] = static_cast<uint8_t>(static_cast<uint32_t>(stream) >> (8 * i));
    for (int i = 0; i < 8; i++)
        body[4 + i] = static_cast<uint8_t>(static_cast<uint64_t>(seq) >> (8 * i));
    uint8_t reply[256];
    uint32_t reply_len = 0;
    const int rc = pgrac_ic_rpc(node, PGRAC_IC_MSG_SEQ, static_cast<uint32_t>(stream), body,
                                sizeof body, reply, sizeof reply, &reply_len, 0, -1);
    if (rc != PGRAC_IC_OK) pgrac::glue::raise_status(rc, node, "seq probe", reply, reply_len);
    if (reply_len != 1 || reply[0] > static_cast<uint8_t>(SeqOutcome::Reordered))
        ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                        errmsg("pgrac_ic seq probe to node %d: malformed reply of %u bytes", node,
                               reply_len)));
    PG_RETURN_TEXT_P(cstring_to_text(seq_outcome_name(static_cast<SeqOutcome>(reply[0]))));
}

// Streams `messages` one-way notes of `payload_bytes` to `node` with one
// route_key (waiting for room on a full queue), then one ping RPC with the
// same route_key and flags: the same lane and the same LMS worker there, so
// its reply comes after that worker has handled every note. Times from the
// first send to that reply. Plain locals only: sends and the RPC may raise a
// PostgreSQL error (a query cancel while waiting for room).
Datum pgrac_ic_stream(PG_FUNCTION_ARGS) {
    const int node = PG_GETARG_INT32(0);
    const int payload = PG_GETARG_INT32(1);
    const int messages = PG_GETARG_INT32(2);
    pgrac::glue::require_known_node(node);
    if (payload < 0 || payload > PGRAC_IC_MAX_MESSAGE)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("payload_bytes must be between 0 and %d", PGRAC_IC_MAX_MESSAGE)));
    if (messages < 1 || messages > 100000000)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("messages must be between 1 and 100000000")));
    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("pgrac_ic_stream must be called in a context that accepts a row")));

    constexpr uint32_t kStreamRouteKey = 0;
    uint8_t* body = static_cast<uint8_t*>(palloc(Max(payload, 1)));
    for (int i = 0; i < payload; i++) body[i] = static_cast<uint8_t>(i * 131 + 7);
    const uint64_t begin = monotonic_ns();
    for (int i = 0; i < messages; i++) {
        const int rc = pgrac_ic_send(node, PGRAC_IC_MSG_NOTE, kStreamRouteKey, body,
                                     static_cast<uint32_t>(payload), 0, -1);
        if (rc != PGRAC_IC_OK) pgrac::glue::raise_status(rc, node, "stream", nullptr, 0);
        if ((i & 1023) == 1023) CHECK_FOR_INTERRUPTS();
    }
    uint8_t ping[8];
    std::memcpy(ping, &begin, sizeof ping);
    uint8_t reply[256];
    uint32_t reply_len = 0;
    const int rc = pgrac_ic_rpc(node, PGRAC_IC_MSG_PING, kStreamRouteKey, ping, sizeof ping, reply,
                                sizeof reply, &reply_len, 0, -1);
    const uint64_t elapsed = monotonic_ns() - begin;
    if (rc != PGRAC_IC_OK) pgrac::glue::raise_status(rc, node, "stream", reply, reply_len);
    if (reply_len != sizeof ping || std::memcmp(reply, ping, sizeof ping) != 0)
        ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                        errmsg("pgrac_ic stream to node %d: the closing ping returned %u bytes "
                               "that differ from the 8 bytes sent",
                               node, reply_len)));
    pfree(body);

    const double seconds = static_cast<double>(elapsed) / 1e9;
    Datum v[4] = {Int64GetDatum(messages), Float8GetDatum(seconds),
                  Float8GetDatum(messages / seconds),
                  Float8GetDatum(static_cast<double>(messages) * payload / seconds / 1e6)};
    bool nulls[4] = {false, false, false, false};
    PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), v, nulls)));
}
