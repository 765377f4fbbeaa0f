// SQL interface of Cache Fusion: page images from another instance's buffer
// pool, through the fetch of the C API (src/capi/block_fetch.hpp). Plain
// C-style code: every function here may raise an error.
extern "C" {
#include "postgres.h"

#include "common/relpath.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/pg_lsn.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(pgrac_fetch_block);
PG_FUNCTION_INFO_V1(pgrac_fetch_block_tag);
PG_FUNCTION_INFO_V1(pgrac_fetch_blocks);
PG_FUNCTION_INFO_V1(pgrac_fetch_block_bench);
}

#include <algorithm>
#include <cstring>

#include "capi/block_fetch.hpp"
#include "capi/block_request.hpp"
#include "ic/shm/shared_state.hpp"

using namespace pgrac::glue;

namespace {

// One block as bytea (a block past the end is the serving LMS's error, which
// names the block).
bytea* fetch_page(int node, const BlockRequest& rq) {
    bytea* out = static_cast<bytea*>(palloc(VARHDRSZ + kBlockSize));
    SET_VARSIZE(out, VARHDRSZ + kBlockSize);
    (void)block_fetch_into(node, rq, 1, VARDATA(out), nullptr);
    return out;
}

// One row (blkno, lsn, page) of pgrac_fetch_blocks per block fetched.
void put_block_row(void* arg, const uint8_t* e, int64_t) {
    ReturnSetInfo* rsinfo = static_cast<ReturnSetInfo*>(arg);
    bytea* page = static_cast<bytea*>(palloc(VARHDRSZ + kBlockSize));
    SET_VARSIZE(page, VARHDRSZ + kBlockSize);
    std::memcpy(VARDATA(page), e + kBlockEntryHeader, kBlockSize);
    const BlockEntryHeader h = entry_header(e);
    Datum v[3] = {Int64GetDatum(h.blkno), LSNGetDatum(h.lsn), PointerGetDatum(page)};
    bool nulls[3] = {false, false, false};
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, nulls);
}

}  // namespace

// pgrac_fetch_block(node, rel regclass, blkno bigint, fork text) -> bytea
Datum pgrac_fetch_block(PG_FUNCTION_ARGS) {
    const int node = PG_GETARG_INT32(0);
    const BlockRequest rq = block_relation_request(
        PG_GETARG_OID(1), text_to_cstring(PG_GETARG_TEXT_PP(3)), PG_GETARG_INT64(2));
    PG_RETURN_BYTEA_P(fetch_page(node, rq));
}

// pgrac_fetch_block_tag(node, spcoid, dboid, relnumber, fork text, blkno,
// reloid oid DEFAULT 0) -> bytea
Datum pgrac_fetch_block_tag(PG_FUNCTION_ARGS) {
    const int node = PG_GETARG_INT32(0);
    // A BufferTag names any relation of any database (including ones the
    // caller may not connect to, and catalogs such as pg_authid), and a page
    // shows every row version in it, dead ones too: superuser only.
    // pg_read_all_data is not enough (it does not bypass row-level security
    // or CONNECT), and pg_read_all_data with BYPASSRLS still would not cover
    // databases the role may not connect to.
    if (!superuser())
        ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                        errmsg("permission denied to fetch blocks by BufferTag"),
                        errdetail("Only superusers may fetch blocks named by BufferTag; "
                                  "pgrac_fetch_block checks the privileges on a relation.")));
    BlockRequest rq;
    rq.spc = PG_GETARG_OID(1);
    rq.db = PG_GETARG_OID(2);
    rq.rel = PG_GETARG_OID(3);
    rq.relid = PG_GETARG_OID(6);
    rq.fork = static_cast<uint8_t>(forkname_to_number(text_to_cstring(PG_GETARG_TEXT_PP(4))));
    rq.first = block_number(PG_GETARG_INT64(5));
    if (!OidIsValid(rq.relid)) rq.relid = block_relation_of_tag(rq.spc, rq.db, rq.rel);
    PG_RETURN_BYTEA_P(fetch_page(node, rq));
}

// pgrac_fetch_blocks(node, rel, first, count, fork) -> (blkno, lsn, page):
// batches of up to kMaxBlocksPerReply blocks per RPC; stops at the end of the
// relation (an error only if `first` is already past it).
Datum pgrac_fetch_blocks(PG_FUNCTION_ARGS) {
    const int node = PG_GETARG_INT32(0);
    const BlockRequest rq = block_relation_request(
        PG_GETARG_OID(1), text_to_cstring(PG_GETARG_TEXT_PP(4)), PG_GETARG_INT64(2));
    const int count = PG_GETARG_INT32(3);
    if (count < 0)
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("count must not be negative")));
    InitMaterializedSRF(fcinfo, 0);
    (void)block_fetch_each(node, rq, count, put_block_row, fcinfo->resultinfo);
    return (Datum)0;
}

// Latency of single-block fetches, measured in this backend:
// (p50_us, p99_us, blocks_per_sec, iterations). Cycles over `span` blocks
// from `first` so that the server's buffer pool, not one page, is exercised.
Datum pgrac_fetch_block_bench(PG_FUNCTION_ARGS) {
    const int node = PG_GETARG_INT32(0);
    BlockRequest rq = block_relation_request(PG_GETARG_OID(1), "main", 0);
    const int iterations = PG_GETARG_INT32(2);
    const int batch = PG_GETARG_INT32(3);
    if (iterations < 1 || iterations > 10000000 || batch < 1 ||
        batch > static_cast<int>(kMaxBlocksPerReply))
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                 errmsg("iterations must be 1..10000000 and batch 1..%u", kMaxBlocksPerReply)));
    uint64_t* samples = static_cast<uint64_t*>(palloc(sizeof(uint64_t) * iterations));
    uint32_t nblocks = 0, n = 0;
    pfree(block_fetch_rpc(node, rq, &nblocks, &n));
    rq.count = static_cast<uint16_t>(batch);
    uint64_t blocks = 0;
    const uint64_t begin = pgrac::ic::monotonic_ns();
    for (int i = 0; i < iterations; i++) {
        CHECK_FOR_INTERRUPTS();
        rq.first = nblocks > static_cast<uint32_t>(batch)
                       ? static_cast<uint32_t>(i) % (nblocks - batch + 1)
                       : 0;
        const uint64_t t0 = pgrac::ic::monotonic_ns();
        uint8_t* buf = block_fetch_rpc(node, rq, &nblocks, &n);
        samples[i] = pgrac::ic::monotonic_ns() - t0;
        blocks += n;
        pfree(buf);
    }
    const uint64_t elapsed = pgrac::ic::monotonic_ns() - begin;
    std::sort(samples, samples + iterations);
    auto pct = [&](double q) {
        return Float8GetDatum(
            static_cast<double>(samples[static_cast<int>(q * (iterations - 1) + 0.5)]) / 1000.0);
    };
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    Datum v[4] = {pct(0.5), pct(0.99), Float8GetDatum(blocks / (elapsed / 1e9)),
                  Int32GetDatum(iterations)};
    bool nulls[4] = {false, false, false, false};
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, nulls);
    return (Datum)0;
}
