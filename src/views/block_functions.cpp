// SQL interface of Cache Fusion: fetch page images from another instance's
// buffer pool through the interconnect (src/lms/block_service.cpp serves
// them). Plain C-style code: every function here may raise an error.
extern "C" {
#include "postgres.h"

#include "access/relation.h"
#include "catalog/pg_class.h"
#include "catalog/pg_tablespace_d.h"
#include "common/relpath.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/block.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "utils/builtins.h"
#include "utils/pg_lsn.h"
#include "utils/rel.h"
#include "utils/relfilenodemap.h"
#include "utils/rls.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(pgrac_fetch_block);
PG_FUNCTION_INFO_V1(pgrac_fetch_block_tag);
PG_FUNCTION_INFO_V1(pgrac_fetch_blocks);
PG_FUNCTION_INFO_V1(pgrac_fetch_block_bench);
}

#include <algorithm>
#include <cstring>

#include "ic/shared_state.hpp"
#include "lms/block_service.hpp"
#include "lms/ges_service.hpp"
#include "views/ic_errors.hpp"

using namespace pgrac::glue;

namespace {

// A page image is every row of the block, whatever the column privileges or
// row-level security policies say: reading one needs SELECT on the relation,
// and is refused where row-level security applies to the caller. Checked
// before the relation is locked (as RangeVarGetRelidExtended callbacks do), so
// that a caller without the privilege can neither queue behind nor block a
// DDL on a relation it may not read; checked again once it is locked.
void check_may_read_pages(Oid relid) {
    const char* name = get_rel_name(relid);
    if (name == nullptr)
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                        errmsg("relation with OID %u does not exist", relid)));
    const AclResult acl = pg_class_aclcheck(relid, GetUserId(), ACL_SELECT);
    if (acl != ACLCHECK_OK) aclcheck_error(acl, get_relkind_objtype(get_rel_relkind(relid)), name);
    if (check_enable_rls(relid, InvalidOid, true) == RLS_ENABLED)
        ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                        errmsg("cannot fetch blocks of relation \"%s\": row-level security "
                               "applies to the current user",
                               name)));
}

BlockRequest relation_request(Oid relid, text* fork, int64 first) {
    BlockRequest rq;
    check_may_read_pages(relid);
    Relation rel = relation_open(relid, AccessShareLock);
    check_may_read_pages(relid);
    if (!RELKIND_HAS_STORAGE(rel->rd_rel->relkind) || rel->rd_rel->relkind == RELKIND_SEQUENCE)
        ereport(ERROR, (errcode(ERRCODE_WRONG_OBJECT_TYPE),
                        errmsg("\"%s\" has no storage whose blocks can be fetched",
                               RelationGetRelationName(rel)),
                        errdetail("Sequences are refused: their storage is replaced without an "
                                  "exclusive lock.")));
    if (RelationUsesLocalBuffers(rel))
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("blocks of temporary relation \"%s\" cannot be fetched",
                               RelationGetRelationName(rel))));
    rq.db = rel->rd_rel->relisshared ? InvalidOid : MyDatabaseId;
    rq.relid = relid;
    rq.spc = rel->rd_node.spcNode;
    rq.rel = rel->rd_node.relNode;
    // Keep the lock to the end of the transaction: the relation is not dropped
    // or rewritten here meanwhile (the serving instance locks it too, and
    // checks that rq.rel is still its storage there: docs/cache_fusion.md).
    relation_close(rel, NoLock);
    rq.fork = static_cast<uint8_t>(forkname_to_number(text_to_cstring(fork)));
    if (first < 0 || first > static_cast<int64>(MaxBlockNumber))
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                 errmsg("block number %lld is out of range", static_cast<long long>(first))));
    rq.first = static_cast<uint32_t>(first);
    rq.count = 1;
    return rq;
}

// The relation a BufferTag belongs to, by the local catalog: the server
// checks the pair. Only this database's relations and shared catalogs can be
// found here; another database's need the caller to name the relation.
Oid relation_of_tag(Oid spc, Oid db, Oid relnumber) {
    if (db != InvalidOid && db != MyDatabaseId)
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("blocks of database %u can be fetched by BufferTag only with the "
                               "relation's OID (reloid), or from a session connected to it",
                               db)));
    const Oid relid = RelidByRelfilenode(db == InvalidOid ? GLOBALTABLESPACE_OID : spc, relnumber);
    if (!OidIsValid(relid))
        ereport(ERROR,
                (errcode(ERRCODE_UNDEFINED_TABLE),
                 errmsg("no relation of this database has storage %u/%u/%u", spc, db, relnumber)));
    return relid;
}

// One RPC for up to kMaxBlocksPerReply blocks; returns the reply (palloc'd,
// PGRAC_IC_MAX_MESSAGE bytes) and the number of blocks in it.
uint8_t* fetch(int node, const BlockRequest& rq, uint32_t* nblocks_out, uint32_t* count_out) {
    require_known_node(node);
    uint8_t req[kBlockRequestSize];
    encode_block_request(rq, req);
    uint8_t* buf = static_cast<uint8_t*>(palloc(PGRAC_IC_MAX_MESSAGE));
    uint32_t len = 0;
    // Room for what was asked (reply space comes from a shared pool).
    const uint32_t cap = kBlockReplyHeader + rq.count * (kBlockEntryHeader + kBlockSize);
    const int rc = pgrac_ic_rpc(node, kMsgBlockFetch, block_route_key(rq), req, sizeof req, buf,
                                Min(cap, PGRAC_IC_MAX_MESSAGE), &len, 0, -1);
    if (rc != PGRAC_IC_OK) raise_status(rc, node, "block fetch", buf, len);
    const uint32_t n = len >= kBlockReplyHeader ? get_u16(buf + 4) : 0;
    if (len < kBlockReplyHeader || n < 1 || n > rq.count ||
        len != kBlockReplyHeader + n * (kBlockEntryHeader + kBlockSize) ||
        get_u32(buf + kBlockReplyHeader) != rq.first)
        ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                        errmsg("malformed block reply of %u bytes from node %d", len, node)));
    *nblocks_out = get_u32(buf);
    *count_out = n;
    return buf;
}

bytea* page_bytea(const uint8_t* entry) {
    bytea* out = static_cast<bytea*>(palloc(VARHDRSZ + kBlockSize));
    SET_VARSIZE(out, VARHDRSZ + kBlockSize);
    std::memcpy(VARDATA(out), entry + kBlockEntryHeader, kBlockSize);
    return out;
}

// Up to `count` blocks from rq.first, as many RPCs as needed, stopping at the
// end of the fork: calls each(entry, i) for the i-th block's reply entry
// (u32 blkno | u64 LSN | page). Returns the number of blocks.
template <typename Each>
int64 for_each_block(int node, BlockRequest rq, int64 count, Each each) {
    int64 done = 0;
    while (done < count) {
        CHECK_FOR_INTERRUPTS();
        rq.count = static_cast<uint16_t>(Min(static_cast<int64>(kMaxBlocksPerReply), count - done));
        uint32_t nblocks, n;
        uint8_t* buf = fetch(node, rq, &nblocks, &n);
        const uint8_t* e = buf + kBlockReplyHeader;
        for (uint32_t i = 0; i < n; i++, e += kBlockEntryHeader + kBlockSize) each(e, done++);
        pfree(buf);
        if (static_cast<uint64_t>(rq.first) + n >= nblocks) break;
        rq.first += n;
    }
    return done;
}

// The same into `pages` (kBlockSize each) and `lsns` (may be nullptr).
int fetch_into(int node, const BlockRequest& rq, int count, void* pages, uint64_t* lsns) {
    return static_cast<int>(for_each_block(node, rq, count, [&](const uint8_t* e, int64 i) {
        std::memcpy(static_cast<uint8_t*>(pages) + static_cast<size_t>(i) * kBlockSize,
                    e + kBlockEntryHeader, kBlockSize);
        if (lsns != nullptr) lsns[i] = get_u64(e + 4);
    }));
}

}  // namespace

// pgrac_fetch_block(node, rel regclass, blkno bigint, fork text) -> bytea
Datum pgrac_fetch_block(PG_FUNCTION_ARGS) {
    const int node = PG_GETARG_INT32(0);
    const BlockRequest rq =
        relation_request(PG_GETARG_OID(1), PG_GETARG_TEXT_PP(3), PG_GETARG_INT64(2));
    uint32_t nblocks, n;
    const uint8_t* buf = fetch(node, rq, &nblocks, &n);
    PG_RETURN_BYTEA_P(page_bytea(buf + kBlockReplyHeader));
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
    const int64 blk = PG_GETARG_INT64(5);
    if (blk < 0 || blk > static_cast<int64>(MaxBlockNumber))
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("block number %lld is out of range", static_cast<long long>(blk))));
    if (!OidIsValid(rq.relid)) rq.relid = relation_of_tag(rq.spc, rq.db, rq.rel);
    rq.first = static_cast<uint32_t>(blk);
    bytea* out = static_cast<bytea*>(palloc(VARHDRSZ + kBlockSize));
    SET_VARSIZE(out, VARHDRSZ + kBlockSize);
    // A block past the end is the serving LMS's error (it names the block).
    (void)fetch_into(node, rq, 1, VARDATA(out), nullptr);
    PG_RETURN_BYTEA_P(out);
}

// pgrac_fetch_blocks(node, rel, first, count, fork) -> (blkno, lsn, page):
// batches of up to kMaxBlocksPerReply blocks per RPC; stops at the end of the
// relation (an error only if `first` is already past it).
Datum pgrac_fetch_blocks(PG_FUNCTION_ARGS) {
    const int node = PG_GETARG_INT32(0);
    const BlockRequest rq =
        relation_request(PG_GETARG_OID(1), PG_GETARG_TEXT_PP(4), PG_GETARG_INT64(2));
    const int count = PG_GETARG_INT32(3);
    if (count < 0)
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("count must not be negative")));
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    for_each_block(node, rq, count, [&](const uint8_t* e, int64) {
        Datum v[3] = {Int64GetDatum(get_u32(e)), LSNGetDatum(get_u64(e + 4)),
                      PointerGetDatum(page_bytea(e))};
        bool nulls[3] = {false, false, false};
        tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, nulls);
    });
    return (Datum)0;
}

// Latency of single-block fetches, measured in this backend:
// (p50_us, p99_us, blocks_per_sec, iterations). Cycles over `span` blocks
// from `first` so that the server's buffer pool, not one page, is exercised.
Datum pgrac_fetch_block_bench(PG_FUNCTION_ARGS) {
    const int node = PG_GETARG_INT32(0);
    BlockRequest rq = relation_request(PG_GETARG_OID(1), cstring_to_text("main"), 0);
    const int iterations = PG_GETARG_INT32(2);
    const int batch = PG_GETARG_INT32(3);
    if (iterations < 1 || iterations > 10000000 || batch < 1 ||
        batch > static_cast<int>(kMaxBlocksPerReply))
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                 errmsg("iterations must be 1..10000000 and batch 1..%u", kMaxBlocksPerReply)));
    uint64_t* samples = static_cast<uint64_t*>(palloc(sizeof(uint64_t) * iterations));
    uint32_t nblocks = 0, n = 0;
    pfree(fetch(node, rq, &nblocks, &n));
    rq.count = static_cast<uint16_t>(batch);
    uint64_t blocks = 0;
    const uint64_t begin = pgrac::ic::monotonic_ns();
    for (int i = 0; i < iterations; i++) {
        CHECK_FOR_INTERRUPTS();
        rq.first = nblocks > static_cast<uint32_t>(batch)
                       ? static_cast<uint32_t>(i) % (nblocks - batch + 1)
                       : 0;
        const uint64_t t0 = pgrac::ic::monotonic_ns();
        uint8_t* buf = fetch(node, rq, &nblocks, &n);
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

// ---- the C API (include/pgrac_ic/pgrac_ic.h) for upper layers
extern "C" int pgrac_cf_fetch_blocks(int node, uint32_t spcoid, uint32_t dboid, uint32_t relnumber,
                                     int forknum, uint32_t first, int count, void* pages,
                                     uint64_t* lsns) {
    if (count < 1 || pages == nullptr || forknum < 0 || forknum > MAX_FORKNUM)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("pgrac_cf_fetch_blocks: count must be at least 1, pages set and "
                               "the fork valid")));
    BlockRequest rq;
    rq.spc = spcoid;
    rq.db = dboid;
    rq.rel = relnumber;
    rq.relid = relation_of_tag(spcoid, dboid, relnumber);
    rq.fork = static_cast<uint8_t>(forknum);
    rq.first = first;
    return fetch_into(node, rq, count, pages, lsns);
}
