// Cache Fusion: serves page images from the local buffer pool, in place in the
// listener when every block is there and free to share-lock, else in an LMS
// worker. Written as plain C-style code (no C++ objects): everything here may
// raise a PostgreSQL error, which becomes a HANDLER_ERROR reply.
//
// Neither the LMS nor the listener has a transaction, so nothing would release a buffer pin or
// content lock on error: the handler does it itself (PG_CATCH: abort buffer
// I/O, release LWLocks and the pins held by its own ResourceOwner, release the
// session locks on the database and relation), and closes the smgr relations
// after every request so that a dropped relation is never read through a
// stale file descriptor. A request is served only under AccessShareLock on its
// relation and only if it names the relation's current storage
// (block_identity.hpp).
extern "C" {
#include "postgres.h"

#include "catalog/pg_database_d.h"
#include "common/relpath.h"
#include "miscadmin.h"
#include "storage/buf_internals.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"
#include "storage/lock.h"
#include "storage/lwlock.h"
#include "storage/smgr.h"
#include "utils/resowner.h"
}

#include <cstddef>
#include <cstring>

#include "instance/guc.hpp"
#include "lms/block_identity.hpp"
#include "lms/block_service.hpp"
#include "capi/handler_registry.hpp"
#include "lms/held_db_lock.hpp"
#include "lms/kept_files.hpp"
#include "lms/request_server.hpp"
#include "lms/ges_service.hpp"

static_assert(pgrac::glue::kBlockSize == BLCKSZ, "kBlockSize must be BLCKSZ");

namespace pgrac::glue {

namespace {

ResourceOwner g_owner = nullptr;

__attribute__((noinline)) void write_header(uint8_t* out, uint32_t nblocks, uint32_t n) {
    BlockReplyHeader h;
    h.nblocks = nblocks;
    h.count = static_cast<uint16_t>(n);
    ic::codec::encode_to(h, out, kBlockReplyHeader);
}

// Pins the block and takes its content lock in share mode; in place (the
// listener) only if it is in the buffer pool and the lock is free now:
// InvalidBuffer otherwise, and an LMS worker serves the request.
Buffer pin_and_share_lock(SMgrRelation sr, RelFileNode rnode, ForkNumber forknum, BlockNumber blk,
                          BufferAccessStrategy strategy) {
    if (!serving_in_place()) {
        const Buffer buf =
            ReadBufferWithoutRelcache(rnode, forknum, blk, RBM_NORMAL, strategy, true);
        LockBuffer(buf, BUFFER_LOCK_SHARE);
        return buf;
    }
    // A miss starts the read-ahead (posix_fadvise) for the LMS worker that
    // will serve it.
    const PrefetchBufferResult r = PrefetchSharedBuffer(sr, forknum, blk);
    if (!BufferIsValid(r.recent_buffer) || !ReadRecentBuffer(rnode, forknum, blk, r.recent_buffer))
        return InvalidBuffer;
    if (!LWLockConditionalAcquire(
            BufferDescriptorGetContentLock(GetBufferDescriptor(r.recent_buffer - 1)), LW_SHARED)) {
        ReleaseBuffer(r.recent_buffer);
        return InvalidBuffer;
    }
    return r.recent_buffer;
}

// Pins, share-locks, copies and releases each block in turn. False if a
// block would have to wait (in place only; nothing is held then).
// A batch reads through a ring of buffers (BAS_BULKREAD, as a sequential
// scan does), so that remote batch readers cannot flush the buffer pool.
__attribute__((noinline)) bool copy_blocks(SMgrRelation sr, RelFileNode rnode, ForkNumber forknum,
                                           BlockNumber first, uint32_t n, uint8_t* p) {
    // palloc'd in the request's memory context, which is reset after it.
    BufferAccessStrategy strategy =
        n > 1 && !serving_in_place() ? GetAccessStrategy(BAS_BULKREAD) : nullptr;
    for (uint32_t i = 0; i < n; i++) {
        const Buffer buf = pin_and_share_lock(sr, rnode, forknum, first + i, strategy);
        if (!BufferIsValid(buf)) return false;
        const Page page = BufferGetPage(buf);
        std::memcpy(p + kBlockEntryHeader, page, BLCKSZ);
        // With checksums (or wal_log_hints) a hint bit set under a share lock
        // may move the page LSN while we copy (MarkBufferDirtyHint): read it
        // under the buffer header lock after the copy, and put that one in the
        // image and beside it, so that both always agree.
        const XLogRecPtr lsn = BufferGetLSNAtomic(buf);
        UnlockReleaseBuffer(buf);
        PageSetLSN(reinterpret_cast<Page>(p + kBlockEntryHeader), lsn);
        ic::codec::encode_to(BlockEntryHeader{first + i, lsn}, p, kBlockEntryHeader);
        p += kBlockEntryHeader + BLCKSZ;
    }
    return true;
}

static_assert(offsetof(PageHeaderData, pd_lsn) == 0 && sizeof(PageXLogRecPtr) == 8,
              "the page LSN is the page's first 8 bytes");

// As copy_blocks, for a reply written while it is sealed (request_server.hpp,
// under `secure` in place): the cipher reads each page where it lies, under
// its content lock, and its pass is the only one. It cannot go back to the
// LSN it passed, so the LSN is read first, under the buffer header lock, and
// sealed from here in place of the page's own: a hint bit set while the page
// is read may be in the image with an LSN newer than the one it carries, as
// in the page FlushBuffer writes, which reads the LSN before its copy too.
// The image and its entry header always carry the same LSN.
__attribute__((noinline)) bool seal_blocks(SMgrRelation sr, RelFileNode rnode, ForkNumber forknum,
                                           BlockNumber first, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        const Buffer buf = pin_and_share_lock(sr, rnode, forknum, first + i, nullptr);
        if (!BufferIsValid(buf)) return false;
        const XLogRecPtr lsn = BufferGetLSNAtomic(buf);
        uint8_t head[kBlockEntryHeader + sizeof(PageXLogRecPtr)];
        ic::codec::encode_to(BlockEntryHeader{first + i, lsn}, head, kBlockEntryHeader);
        PageXLogRecPtr at;
        PageXLogRecPtrSet(at, lsn);
        std::memcpy(head + kBlockEntryHeader, &at, sizeof at);
        reply_stream_write(head, sizeof head);
        reply_stream_write(reinterpret_cast<const uint8_t*>(BufferGetPage(buf)) + sizeof at,
                           BLCKSZ - sizeof at);
        UnlockReleaseBuffer(buf);
    }
    return true;
}

int serve_blocks(Oid db, Oid relid, RelFileNode rnode, ForkNumber forknum, BlockNumber first,
                 uint32_t count, pgrac_ic_reply* reply);

int block_fetch_handler(const pgrac_ic_message* msg, pgrac_ic_reply* reply) {
    if (reply == nullptr) return PGRAC_IC_OK;
    BlockRequest rq;  // fixed-size fields: decoding allocates nothing
    if (!ic::codec::decode(static_cast<const uint8_t*>(msg->body), msg->len, &rq) ||
        rq.reserved != 0)
        ereport(ERROR, (errcode(ERRCODE_PROTOCOL_VIOLATION),
                        errmsg("malformed block request of %u bytes", msg->len)));
    const Oid db = rq.db;
    const Oid relid = rq.relid;
    RelFileNode rnode;
    rnode.spcNode = rq.spc;
    rnode.dbNode = db;
    rnode.relNode = rq.rel;
    const int fork = rq.fork;
    const uint32_t count = rq.count;
    const BlockNumber first = rq.first;
    if (fork > MAX_FORKNUM || count < 1 || count > kMaxBlocksPerReply || !OidIsValid(relid))
        ereport(ERROR, (errcode(ERRCODE_PROTOCOL_VIOLATION),
                        errmsg("block request with relation %u, fork %d and count %u is out of "
                               "range",
                               relid, fork, count)));
    return serve_blocks(db, relid, rnode, static_cast<ForkNumber>(fork), first, count, reply);
}

// AccessShareLock on `tag` as a session lock, never waiting: a DDL holding or
// awaiting a conflicting lock makes the request fail at once (the LMS must
// not block), and the requester may retry.
void lock_or_refuse(const LOCKTAG* tag, const char* what, Oid db, Oid oid) {
    if (LockAcquire(tag, AccessShareLock, true, true) == LOCKACQUIRE_NOT_AVAIL)
        ereport(ERROR, (errcode(ERRCODE_LOCK_NOT_AVAILABLE),
                        errmsg("%s %u of database %u is locked by a concurrent DDL on node %d, "
                               "retry",
                               what, oid, db, pgrac_node_id)));
}

// Reads the blocks; runs with the relation locked, under the PG_TRY of
// serve_blocks (errors leave pins and content locks to its PG_CATCH).
// Declines (decline_in_place) if serving in place would have to wait.
__attribute__((noinline)) int read_blocks(Oid db, Oid relid, RelFileNode rnode, ForkNumber forknum,
                                          BlockNumber first, uint32_t count,
                                          pgrac_ic_reply* reply) {
    const int fork = forknum;
    // After the lock: a DROP, TRUNCATE or rewrite of the relation has either
    // committed (the catalog says so: refused) or cannot commit before we
    // release the lock. PostgreSQL unlinks files after releasing locks and
    // relies on readers consulting the catalog; this is that consultation.
    if (!verify_block_identity(db, relid, rnode)) {
        decline_in_place();  // in place, and the check would have to wait
        return PGRAC_IC_OK;
    }
    SMgrRelation sr = kept_files_open(rnode);
    if (!kept_fork_is_open(sr, forknum) && !smgrexists(sr, forknum))
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                        errmsg("relation %u/%u/%u fork \"%s\" does not exist on node %d "
                               "(dropped, or never created there)",
                               rnode.spcNode, rnode.dbNode, rnode.relNode, forkNames[fork],
                               pgrac_node_id)));
    const BlockNumber nblocks = smgrnblocks(sr, forknum);
    if (nblocks == 0)
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                        errmsg("relation %u/%u/%u fork \"%s\" is empty or was dropped on node %d",
                               rnode.spcNode, rnode.dbNode, rnode.relNode, forkNames[fork],
                               pgrac_node_id)));
    if (first >= nblocks)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("block %u is beyond the end of relation %u/%u/%u fork \"%s\" on "
                               "node %d (%u blocks)",
                               first, rnode.spcNode, rnode.dbNode, rnode.relNode, forkNames[fork],
                               pgrac_node_id, nblocks)));
    const uint32_t n = Min(count, nblocks - first);
    const uint32_t len = kBlockReplyHeader + n * (kBlockEntryHeader + BLCKSZ);
    // Sealed as it is read, or copied into the reply (then sealed, or sent
    // with its CRC, from there).
    const bool sealing = reply_stream_begin(len);
    uint8_t sealed_header[kBlockReplyHeader];
    uint8_t* out = sealing ? sealed_header : static_cast<uint8_t*>(reply->body);
    write_header(out, nblocks, n);
    if (sealing) reply_stream_write(sealed_header, kBlockReplyHeader);
    if (sealing ? !seal_blocks(sr, rnode, forknum, first, n)
                : !copy_blocks(sr, rnode, forknum, first, n, out + kBlockReplyHeader)) {
        reply_stream_abandon();
        decline_in_place();  // an LMS worker reads it
        return PGRAC_IC_OK;
    }
    // Only a DDL that does not conflict with AccessShareLock could have
    // changed the relation meanwhile (docs/cache_fusion.md): never ship what
    // it replaced (a sealed reply leaves only after this).
    const bool holds = block_identity_holds(db, relid, rnode);
    if (block_identity_undecided()) {
        reply_stream_abandon();
        decline_in_place();
        return PGRAC_IC_OK;
    }
    if (!holds)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("relation %u of database %u changed on node %d while its blocks "
                               "were read, retry",
                               relid, db, pgrac_node_id)));
    if (sealing) {
        reply_stream_finish();
        return PGRAC_IC_OK;
    }
    reply->len = len;
    return PGRAC_IC_OK;
}

// The part that may longjmp with buffers pinned or locks held: kept apart
// from the decoding so that no inlined decoder variable lives across the
// PG_TRY.
__attribute__((noinline)) int serve_blocks(Oid db, Oid relid, RelFileNode rnode, ForkNumber forknum,
                                           BlockNumber first, uint32_t count,
                                           pgrac_ic_reply* reply) {
    // The database first (DROP DATABASE and ALTER DATABASE SET TABLESPACE
    // remove its files while they hold it), then the relation.
    LOCKTAG dbtag, reltag;
    SET_LOCKTAG_OBJECT(dbtag, InvalidOid, DatabaseRelationId, db, 0);
    SET_LOCKTAG_RELATION(reltag, db, relid);
    const bool shared = db == InvalidOid;
    if (!shared) lock_or_refuse(&dbtag, "database", db, db);
    PG_TRY();
    { lock_or_refuse(&reltag, "relation", db, relid); }
    PG_CATCH();
    {
        if (!shared) LockRelease(&dbtag, AccessShareLock, true);
        PG_RE_THROW();
    }
    PG_END_TRY();

    kept_files_begin();
    if (g_owner == nullptr) g_owner = ResourceOwnerCreate(nullptr, "pgrac_ic block service");
    ResourceOwner saved = CurrentResourceOwner;
    CurrentResourceOwner = g_owner;
    volatile int status = PGRAC_IC_OK;
    PG_TRY();
    { status = read_blocks(db, relid, rnode, forknum, first, count, reply); }
    PG_CATCH();
    {
        // Whatever ReadBuffer or LockBuffer left behind: I/O in progress, the
        // content lock, the pin (tracked by g_owner); then the relation locks.
        HOLD_INTERRUPTS();
        AbortBufferIO();
        LWLockReleaseAll();
        ResourceOwnerRelease(g_owner, RESOURCE_RELEASE_BEFORE_LOCKS, false, false);
        ResourceOwnerRelease(g_owner, RESOURCE_RELEASE_LOCKS, false, false);
        ResourceOwnerRelease(g_owner, RESOURCE_RELEASE_AFTER_LOCKS, false, false);
        CurrentResourceOwner = saved;
        kept_files_close_all();
        reset_block_identity_cache();
        held_db_lock_release();
        LockRelease(&reltag, AccessShareLock, true);
        if (!shared) LockRelease(&dbtag, AccessShareLock, true);
        RESUME_INTERRUPTS();
        PG_RE_THROW();
    }
    PG_END_TRY();
    CurrentResourceOwner = saved;
    // Also pg_class's: a request never reads through a stale file descriptor
    // (in place, the files kept are those that cannot be stale).
    kept_files_end();
    // In place, the database's lock outlives the request (held_db_lock.hpp).
    if (!shared && serving_in_place()) held_db_lock_keep(db);
    LockRelease(&reltag, AccessShareLock, true);
    if (!shared) LockRelease(&dbtag, AccessShareLock, true);
    return status;
}

}  // namespace

void register_block_handlers() {
    // In place: the listener serves what is in the buffer pool and free to
    // share-lock now; anything else goes to an LMS worker (copy_blocks).
    put_handler(kMsgBlockFetch, "block fetch", block_fetch_handler, true);
}

}  // namespace pgrac::glue
