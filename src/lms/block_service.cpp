// Cache Fusion in the LMS: serves page images from the local buffer pool.
// Written as plain C-style code (no C++ objects): everything here may raise a
// PostgreSQL error, which the LMS turns into a HANDLER_ERROR reply.
//
// The LMS worker has no transaction, so nothing would release a buffer pin or
// content lock on error: the handler does it itself (PG_CATCH: abort buffer
// I/O, release LWLocks and the pins held by its own ResourceOwner), and
// closes the smgr relation after every request so that a dropped relation is
// never read through a stale file descriptor.
extern "C" {
#include "postgres.h"

#include "common/relpath.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"
#include "storage/lwlock.h"
#include "storage/smgr.h"
#include "utils/resowner.h"
}

#include <cstring>

#include "guc.hpp"
#include "lms/block_service.hpp"
#include "lms/handler_registry.hpp"
#include "lms/ges_service.hpp"

static_assert(pgrac::glue::kBlockSize == BLCKSZ, "kBlockSize must be BLCKSZ");

namespace pgrac::glue {

namespace {

ResourceOwner g_owner = nullptr;

__attribute__((noinline)) void write_header(uint8_t* out, uint32_t nblocks, uint32_t n) {
    put_u32(out, nblocks);
    put_u16(out + 4, static_cast<uint16_t>(n));
    put_u16(out + 6, 0);
}

// Pins, share-locks, copies and releases each block in turn.
// A batch reads through a ring of buffers (BAS_BULKREAD, as a sequential
// scan does), so that remote batch readers cannot flush the buffer pool.
__attribute__((noinline)) void copy_blocks(RelFileNode rnode, ForkNumber forknum, BlockNumber first,
                                           uint32_t n, uint8_t* p) {
    // palloc'd in the LMS message context, which is reset after every message.
    BufferAccessStrategy strategy = n > 1 ? GetAccessStrategy(BAS_BULKREAD) : nullptr;
    for (uint32_t i = 0; i < n; i++) {
        const Buffer buf =
            ReadBufferWithoutRelcache(rnode, forknum, first + i, RBM_NORMAL, strategy, true);
        LockBuffer(buf, BUFFER_LOCK_SHARE);
        const Page page = BufferGetPage(buf);
        put_u32(p, first + i);
        put_u64(p + 4, PageGetLSN(page));
        std::memcpy(p + kBlockEntryHeader, page, BLCKSZ);
        UnlockReleaseBuffer(buf);
        p += kBlockEntryHeader + BLCKSZ;
    }
}

int serve_blocks(RelFileNode rnode, ForkNumber forknum, BlockNumber first, uint32_t count,
                 pgrac_ic_reply* reply);

int block_fetch_handler(const pgrac_ic_message* msg, pgrac_ic_reply* reply) {
    if (reply == nullptr) return PGRAC_IC_OK;
    const uint8_t* b = static_cast<const uint8_t*>(msg->body);
    if (msg->len != kBlockRequestSize || b[13] != 0)
        ereport(ERROR, (errcode(ERRCODE_PROTOCOL_VIOLATION),
                        errmsg("malformed block request of %u bytes", msg->len)));
    RelFileNode rnode;
    rnode.spcNode = get_u32(b);
    rnode.dbNode = get_u32(b + 4);
    rnode.relNode = get_u32(b + 8);
    const int fork = b[12];
    const uint32_t count = get_u16(b + 14);
    const BlockNumber first = get_u32(b + 16);
    if (fork > MAX_FORKNUM || count < 1 || count > kMaxBlocksPerReply)
        ereport(ERROR,
                (errcode(ERRCODE_PROTOCOL_VIOLATION),
                 errmsg("block request with fork %d and count %u is out of range", fork, count)));
    return serve_blocks(rnode, static_cast<ForkNumber>(fork), first, count, reply);
}

// The part that may longjmp with buffers pinned: kept apart from the decoding
// so that no inlined decoder variable lives across the PG_TRY.
__attribute__((noinline)) int serve_blocks(RelFileNode rnode, ForkNumber forknum, BlockNumber first,
                                           uint32_t count, pgrac_ic_reply* reply) {
    const int fork = forknum;
    SMgrRelation sr = smgropen(rnode, InvalidBackendId);
    if (!smgrexists(sr, forknum)) {
        smgrclose(sr);
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                        errmsg("relation %u/%u/%u fork \"%s\" does not exist on node %d "
                               "(dropped, or never created there)",
                               rnode.spcNode, rnode.dbNode, rnode.relNode, forkNames[fork],
                               pgrac_node_id)));
    }
    const BlockNumber nblocks = smgrnblocks(sr, forknum);
    if (nblocks == 0) {
        smgrclose(sr);
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                        errmsg("relation %u/%u/%u fork \"%s\" is empty or was dropped on node %d",
                               rnode.spcNode, rnode.dbNode, rnode.relNode, forkNames[fork],
                               pgrac_node_id)));
    }
    if (first >= nblocks) {
        smgrclose(sr);
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("block %u is beyond the end of relation %u/%u/%u fork \"%s\" on "
                               "node %d (%u blocks)",
                               first, rnode.spcNode, rnode.dbNode, rnode.relNode, forkNames[fork],
                               pgrac_node_id, nblocks)));
    }
    const uint32_t n = Min(count, nblocks - first);

    if (g_owner == nullptr) g_owner = ResourceOwnerCreate(nullptr, "pgrac_ic block service");
    ResourceOwner saved = CurrentResourceOwner;
    CurrentResourceOwner = g_owner;
    uint8_t* out = static_cast<uint8_t*>(reply->body);
    write_header(out, nblocks, n);
    PG_TRY();
    { copy_blocks(rnode, forknum, first, n, out + kBlockReplyHeader); }
    PG_CATCH();
    {
        // Whatever ReadBuffer or LockBuffer left behind: I/O in progress, the
        // content lock, the pin (tracked by g_owner).
        HOLD_INTERRUPTS();
        AbortBufferIO();
        LWLockReleaseAll();
        ResourceOwnerRelease(g_owner, RESOURCE_RELEASE_BEFORE_LOCKS, false, false);
        ResourceOwnerRelease(g_owner, RESOURCE_RELEASE_LOCKS, false, false);
        ResourceOwnerRelease(g_owner, RESOURCE_RELEASE_AFTER_LOCKS, false, false);
        CurrentResourceOwner = saved;
        smgrcloseall();
        RESUME_INTERRUPTS();
        PG_RE_THROW();
    }
    PG_END_TRY();
    CurrentResourceOwner = saved;
    smgrclose(sr);
    reply->len = kBlockReplyHeader + n * (kBlockEntryHeader + BLCKSZ);
    return PGRAC_IC_OK;
}

}  // namespace

void register_block_handlers() {
    put_handler(kMsgBlockFetch, "block fetch", block_fetch_handler);
}

}  // namespace pgrac::glue
