// pgrac_ic_ping and pgrac_ic_bench: round trips through the full path
// (backend -> listener -> wire -> peer listener -> LMS -> back), measured in
// the calling backend.
extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(pgrac_ic_ping);
PG_FUNCTION_INFO_V1(pgrac_ic_bench);
}

#include <algorithm>
#include <cstring>

#include "ic/shm/shared_state.hpp"
#include "capi/send_path.hpp"
#include "instance/shmem.hpp"
#include "capi/errors.hpp"

using namespace pgrac::ic;

Datum pgrac_ic_ping(PG_FUNCTION_ARGS) {
    const int node = PG_GETARG_INT32(0);
    pgrac::glue::require_known_node(node);
    uint8_t body[8];
    const uint64_t t0 = monotonic_ns();
    std::memcpy(body, &t0, sizeof body);
    uint8_t reply[8];
    uint32_t reply_len = 0;
    int rc = pgrac_ic_rpc(node, PGRAC_IC_MSG_PING, 0, body, sizeof body, reply, sizeof reply,
                          &reply_len, PGRAC_IC_CONTROL, -1);
    const uint64_t t1 = monotonic_ns();
    if (rc != PGRAC_IC_OK) pgrac::glue::raise_status(rc, node, "ping", reply, reply_len);
    if (reply_len != sizeof body || std::memcmp(reply, body, sizeof body) != 0)
        ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                        errmsg("pgrac_ic ping to node %d returned %u bytes that differ from the "
                               "8 bytes sent",
                               node, reply_len)));
    PG_RETURN_FLOAT8(static_cast<double>(t1 - t0) / 1000.0);
}

Datum pgrac_ic_bench(PG_FUNCTION_ARGS) {
    const int node = PG_GETARG_INT32(0);
    const int payload = PG_GETARG_INT32(1);
    const int iterations = PG_GETARG_INT32(2);
    pgrac::glue::require_known_node(node);
    if (payload < 0 || payload > PGRAC_IC_MAX_MESSAGE)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("payload_bytes must be between 0 and %d", PGRAC_IC_MAX_MESSAGE)));
    if (iterations < 1 || iterations > 10000000)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("iterations must be between 1 and 10000000")));

    uint8_t* body = static_cast<uint8_t*>(palloc(Max(payload, 1)));
    uint8_t* reply = static_cast<uint8_t*>(palloc(Max(payload, 1)));
    for (int i = 0; i < payload; i++) body[i] = static_cast<uint8_t>(i * 131 + 7);
    uint64_t* samples = static_cast<uint64_t*>(palloc(sizeof(uint64_t) * iterations));
    const uint64_t begin = monotonic_ns();
    for (int i = 0; i < iterations; i++) {
        uint32_t reply_len = 0;
        // Each request differs from the one before: a reply that is not its
        // own echo (a stale or overwritten buffer) is caught below.
        if (payload >= 4) std::memcpy(body, &i, 4);
        const uint64_t t0 = monotonic_ns();
        int rc = pgrac_ic_rpc(node, PGRAC_IC_MSG_PING, static_cast<uint32_t>(i), body,
                              static_cast<uint32_t>(payload), reply, static_cast<uint32_t>(payload),
                              &reply_len, 0, -1);
        samples[i] = monotonic_ns() - t0;
        if (rc != PGRAC_IC_OK) pgrac::glue::raise_status(rc, node, "bench", reply, reply_len);
        if (reply_len != static_cast<uint32_t>(payload))
            ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                            errmsg("pgrac_ic bench: reply of %u bytes to a %d-byte request",
                                   reply_len, payload)));
        if (payload > 0 && std::memcmp(reply, body, static_cast<size_t>(payload)) != 0)
            ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                            errmsg("pgrac_ic bench: the reply to request %d is not its echo", i)));
    }
    const uint64_t elapsed = monotonic_ns() - begin;
    std::sort(samples, samples + iterations);
    auto pct = [&](double q) {
        int k = static_cast<int>(q * (iterations - 1) + 0.5);
        return Float8GetDatum(static_cast<double>(samples[k]) / 1000.0);
    };
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    Datum v[5] = {pct(0.5), pct(0.99), pct(0.999),
                  Float8GetDatum(iterations / (static_cast<double>(elapsed) / 1e9)),
                  Int32GetDatum(iterations)};
    bool n[5] = {false, false, false, false, false};
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, n);
    return (Datum)0;
}
