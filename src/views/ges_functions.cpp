// SQL interface of the Global Enqueue Service: session-level global locks
// (as pg_advisory_lock) through the C API (src/capi/ges/lock_client.hpp), where a
// resource is mastered, the cluster-wide lock view, and the lock benchmark.
extern "C" {
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(pgrac_ges_lock_text);
PG_FUNCTION_INFO_V1(pgrac_ges_lock_int);
PG_FUNCTION_INFO_V1(pgrac_ges_unlock_text);
PG_FUNCTION_INFO_V1(pgrac_ges_unlock_int);
PG_FUNCTION_INFO_V1(pgrac_ges_unlock_all_sql);
PG_FUNCTION_INFO_V1(pgrac_ges_locks);
PG_FUNCTION_INFO_V1(pgrac_ges_resource);
PG_FUNCTION_INFO_V1(pgrac_ges_bench);
PG_FUNCTION_INFO_V1(pgrac_ges_lock_token);
PG_FUNCTION_INFO_V1(pgrac_ges_lock_value_text);
PG_FUNCTION_INFO_V1(pgrac_ges_lock_value_int);
PG_FUNCTION_INFO_V1(pgrac_ges_set_lock_value_text);
PG_FUNCTION_INFO_V1(pgrac_ges_set_lock_value_int);
}

#include <algorithm>
#include <cstring>
#include <vector>

#include "capi/ges/lock_client.hpp"
#include "instance/guc.hpp"
#include "ic/ges/types.hpp"
#include "ic/wire/message_types.hpp"
#include "instance/pg_boundary.hpp"
#include "instance/shmem.hpp"
#include "views/srf.hpp"

using namespace pgrac::ic;
using namespace pgrac::ic::ges;
using namespace pgrac::glue;

namespace {

ResourceName text_resource(text* t) {
    return ges_text_resource(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

// A mode by its name (NL, CR, CW, PR, PW, EX; any case).
LockMode parse_mode(text* t) {
    char buf[8];
    const int len = VARSIZE_ANY_EXHDR(t);
    if (len >= 1 && len <= 2) {
        for (int i = 0; i < len; i++) buf[i] = pg_toupper(VARDATA_ANY(t)[i]);
        buf[len] = '\0';
        for (int m = 0; m < kLockModeCount; m++)
            if (strcmp(buf, lock_mode_name(static_cast<LockMode>(m))) == 0)
                return static_cast<LockMode>(m);
    }
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("unknown global lock mode \"%s\"", text_to_cstring(t)),
                    errhint("Modes are NL, CR, CW, PR, PW and EX.")));
    pg_unreachable();
}

// The members of the committed membership view (this node alone before the first).
int64 count_live(uint16_t* live) {
    int64 n = 0;
    pgrac::ic::IcShared* shm = pgrac::glue::shared();
    const View v = shm ? committed_view(&shm->membership) : View{};
    const NodeMask members = v.members & ~pgrac::glue::witness_mask();
    for (uint16_t id = 1; id <= 64; id++)  // not mask_nodes(): no allocation, no throw here
        if (has_node(members, id)) live[n++] = id;
    if (n == 0) live[n++] = static_cast<uint16_t>(pgrac_node_id);
    return n;
}

}  // namespace

Datum pgrac_ges_lock_text(PG_FUNCTION_ARGS) {
    const ResourceName r = text_resource(PG_GETARG_TEXT_PP(0));
    PG_RETURN_BOOL(ges_lock(r, parse_mode(PG_GETARG_TEXT_PP(1)), PG_GETARG_INT32(2)));
}

// The bigint forms go through the C API, so that SQL tests exercise it too.
Datum pgrac_ges_lock_int(PG_FUNCTION_ARGS) {
    const auto mode = static_cast<pgrac_ges_mode>(parse_mode(PG_GETARG_TEXT_PP(1)));
    PG_RETURN_BOOL(pgrac_ges_lock_id(PG_GETARG_INT64(0), mode, PG_GETARG_INT32(2)) != 0);
}

Datum pgrac_ges_unlock_text(PG_FUNCTION_ARGS) {
    PG_RETURN_BOOL(ges_unlock(text_resource(PG_GETARG_TEXT_PP(0))));
}

Datum pgrac_ges_unlock_int(PG_FUNCTION_ARGS) {
    PG_RETURN_BOOL(pgrac_ges_unlock_id(PG_GETARG_INT64(0)) != 0);
}

// Releases every global lock of this session; returns how many resources.
Datum pgrac_ges_unlock_all_sql(PG_FUNCTION_ARGS) {
    PG_RETURN_INT32(pgrac_ges_unlock_all());
}

// Where a resource is mastered now, and which LMS worker owns it there.
Datum pgrac_ges_resource(PG_FUNCTION_ARGS) {
    const ResourceName r = text_resource(PG_GETARG_TEXT_PP(0));
    uint16_t live[kMaxNodes + 1];
    const int64 n = count_live(live);
    uint16_t master = 0;
    char err[128];
    const bool ok = pgrac::glue::guarded(
        [&] { master = master_for(r, std::vector<uint16_t>(live, live + n)); }, err, sizeof err);
    if (!ok) ereport(ERROR, (errmsg("pgrac_ic: %s", err)));
    pgrac::ic::IcShared* shm = pgrac::glue::shared();
    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        ereport(ERROR, (errmsg("return type must be a row type")));
    Datum v[3] = {Int32GetDatum(master),
                  Int32GetDatum(shm && shm->n_lms ? worker_for(r, shm->n_lms) : 0),
                  Int64GetDatum(static_cast<int64>(route_key_for(r)))};
    bool nulls[3] = {false, false, false};
    PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), v, nulls)));
}

// Every lock of every reachable master (live nodes x LMS workers).
namespace {

// One row of a GES view reply (ges_view_handler in src/lms/ges_service.cpp):
// u8 length, the resource's text, then 27 bytes.
void put_lock_row(ReturnSetInfo* rsinfo, const uint8_t* row) {
    const uint32_t rl = row[0];
    const uint8_t* p = row + 1 + rl;
    Datum v[9];
    bool nulls[9] = {false, false, false, false, false, false, false, false, false};
    v[0] = PointerGetDatum(
        cstring_to_text_with_len(reinterpret_cast<const char*>(row + 1), static_cast<int>(rl)));
    v[1] = Int32GetDatum(p[0] | p[1] << 8);
    v[2] = Int32GetDatum(p[2] | p[3] << 8);
    v[3] = Int32GetDatum(
        static_cast<int32>(p[4] | p[5] << 8 | p[6] << 16 | static_cast<uint32_t>(p[7]) << 24));
    const LockMode mode = static_cast<LockMode>(p[8] % kLockModeCount);
    const LockMode held = static_cast<LockMode>(p[9] % kLockModeCount);
    const LockState st = static_cast<LockState>(p[10]);  // 4: waiting in its own node
    int64_t since = 0;
    for (int b = 0; b < 8; b++) since |= static_cast<int64_t>(p[11 + b]) << (8 * b);
    v[4] = CStringGetTextDatum(lock_mode_name(mode));
    v[5] = CStringGetTextDatum(lock_mode_name(held));
    nulls[5] = st != LockState::Converting;
    v[6] = CStringGetTextDatum(p[10] == 4 ? "waiting_local" : lock_state_name(st));
    v[7] = pgrac::glue::unix_us_to_timestamptz(since);
    uint64_t token = 0;
    for (int b = 0; b < 8; b++) token |= static_cast<uint64_t>(p[19 + b]) << (8 * b);
    v[8] = Int64GetDatum(static_cast<int64>(token));
    nulls[8] = token == 0;
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, nulls);
}

}  // namespace

Datum pgrac_ges_locks(PG_FUNCTION_ARGS) {
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    uint16_t live[kMaxNodes + 1];
    const int64 nlive = count_live(live);
    std::sort(live, live + nlive);
    uint8_t* buf = static_cast<uint8_t*>(palloc(PGRAC_IC_MAX_MESSAGE));
    for (int64 i = 0; i < nlive; i++) {
        uint32_t n_lms = 1;
        for (uint32_t w = 0; w < n_lms; w++) {
            // A worker's table may not fit one reply: read it in pages, each
            // request naming the first row it wants.
            uint32_t first = 0;
            for (int page = 0; page < 100000; page++) {
                uint8_t want[4] = {static_cast<uint8_t>(first), static_cast<uint8_t>(first >> 8),
                                   static_cast<uint8_t>(first >> 16),
                                   static_cast<uint8_t>(first >> 24)};
                uint32_t len = 0;
                const int rc = pgrac_ic_rpc(live[i], pgrac::ic::kMsgGesView, w, want, sizeof want,
                                            buf, PGRAC_IC_MAX_MESSAGE, &len, PGRAC_IC_CONTROL, -1);
                if (rc != PGRAC_IC_OK || len < 9) {
                    ereport(NOTICE, (errmsg("GES locks of node %u worker %u not read: %s", live[i],
                                            w, pgrac_ic_strerror(rc))));
                    break;
                }
                n_lms = buf[0] | buf[1] << 8 | buf[2] << 16 | static_cast<uint32_t>(buf[3]) << 24;
                // A peer's word, not ours to trust with the number of RPCs.
                n_lms = Max(1u, Min(n_lms, static_cast<uint32_t>(kMaxLmsWorkers)));
                const uint32_t rows =
                    buf[4] | buf[5] << 8 | buf[6] << 16 | static_cast<uint32_t>(buf[7]) << 24;
                const bool more = buf[8] != 0;
                uint32_t got = 0;
                uint32_t off = 9;
                for (uint32_t k = 0; k < rows; k++) {
                    if (off + 1 > len || off + 1 + buf[off] + 27 > len) break;
                    put_lock_row(rsinfo, buf + off);
                    off += 1 + buf[off] + 27;
                    got++;
                }
                if (!more || got == 0) break;
                first += got;
            }
        }
    }
    return (Datum)0;
}

// Latency of lock + unlock of one resource, measured in this backend.
Datum pgrac_ges_bench(PG_FUNCTION_ARGS) {
    const ResourceName r = text_resource(PG_GETARG_TEXT_PP(0));
    const LockMode mode = parse_mode(PG_GETARG_TEXT_PP(1));
    const int iterations = PG_GETARG_INT32(2);
    if (iterations < 1 || iterations > 10000000)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("iterations must be between 1 and 10000000")));
    uint64_t held_token;
    if (ges_held_token(r, &held_token))
        ereport(ERROR, (errcode(ERRCODE_OBJECT_IN_USE),
                        errmsg("release the lock before benchmarking it")));
    uint64_t* samples = static_cast<uint64_t*>(palloc(sizeof(uint64_t) * iterations));
    const uint64_t begin = monotonic_ns();
    for (int i = 0; i < iterations; i++) {
        const uint64_t t0 = monotonic_ns();
        if (!ges_lock(r, mode, -1)) ereport(ERROR, (errmsg("global lock not granted")));
        ges_unlock(r);
        samples[i] = monotonic_ns() - t0;
    }
    const uint64_t elapsed = monotonic_ns() - begin;
    std::sort(samples, samples + iterations);
    auto pct = [&](double q) {
        return Float8GetDatum(
            static_cast<double>(samples[static_cast<int>(q * (iterations - 1) + 0.5)]) / 1000.0);
    };
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    Datum v[4] = {pct(0.5), pct(0.99),
                  Float8GetDatum(iterations / (static_cast<double>(elapsed) / 1e9)),
                  Int32GetDatum(iterations)};
    bool n[4] = {false, false, false, false};
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, n);
    return (Datum)0;
}

// The lock value block of a lock this session holds; NULL when invalid. The
// bigint forms go through the C API.
Datum pgrac_ges_lock_value_text(PG_FUNCTION_ARGS) {
    LockValue v;
    if (!ges_lock_value(text_resource(PG_GETARG_TEXT_PP(0)), &v)) PG_RETURN_NULL();
    bytea* out = static_cast<bytea*>(palloc(VARHDRSZ + v.len));
    SET_VARSIZE(out, VARHDRSZ + v.len);
    memcpy(VARDATA(out), v.data, v.len);
    PG_RETURN_BYTEA_P(out);
}

Datum pgrac_ges_lock_value_int(PG_FUNCTION_ARGS) {
    char buf[PGRAC_GES_MAX_VALUE];
    int len = 0;
    if (pgrac_ges_lock_value_id(PG_GETARG_INT64(0), buf, &len) == 0) PG_RETURN_NULL();
    bytea* out = static_cast<bytea*>(palloc(VARHDRSZ + len));
    SET_VARSIZE(out, VARHDRSZ + len);
    memcpy(VARDATA(out), buf, len);
    PG_RETURN_BYTEA_P(out);
}

Datum pgrac_ges_set_lock_value_text(PG_FUNCTION_ARGS) {
    bytea* v = PG_GETARG_BYTEA_PP(1);
    ges_set_lock_value(text_resource(PG_GETARG_TEXT_PP(0)), VARDATA_ANY(v),
                       static_cast<int>(VARSIZE_ANY_EXHDR(v)));
    PG_RETURN_VOID();
}

Datum pgrac_ges_set_lock_value_int(PG_FUNCTION_ARGS) {
    bytea* v = PG_GETARG_BYTEA_PP(1);
    pgrac_ges_set_lock_value_id(PG_GETARG_INT64(0), VARDATA_ANY(v),
                                static_cast<int>(VARSIZE_ANY_EXHDR(v)));
    PG_RETURN_VOID();
}

// The fencing token of a lock this session holds; NULL if it holds none.
Datum pgrac_ges_lock_token(PG_FUNCTION_ARGS) {
    uint64_t token = 0;
    if (!ges_held_token(text_resource(PG_GETARG_TEXT_PP(0)), &token)) PG_RETURN_NULL();
    PG_RETURN_INT64(static_cast<int64>(token));
}
