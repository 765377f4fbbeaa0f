// Cache Fusion block service (src/lms/block_service.cpp): an LMS handler that
// ships pages from this instance's buffer pool, and its wire format, shared
// with the fetch of the C API in src/capi/block_fetch.cpp.
//
// Request (kMsgBlockFetch, an RPC), 24 bytes little-endian:
//   u32 dbOid (0: a shared catalog) | u32 relOid (the pg_class oid)
//   | u32 spcOid | u32 relNumber (the relfilenode) | u8 fork | u8 reserved (0)
//   | u16 count (1..kMaxBlocksPerReply) | u32 first block
// The server locks relation (dbOid, relOid) and serves the blocks only if
// spcOid/dbOid/relNumber is that relation's storage there
// (src/lms/block_identity.hpp).
// Reply: u32 nblocks of the fork | u16 count | u16 reserved, then count times
//   u32 blkno | u64 page LSN | BLCKSZ bytes of page image
// The reply holds min(count, nblocks - first) blocks; first >= nblocks, a
// missing relation or fork are errors (the caller gets HANDLER_ERROR with the
// text).
#pragma once

#include <cstdint>

#include "ic/codec.hpp"
#include "pgrac_ic/pgrac_ic.h"

namespace pgrac::glue {

inline constexpr uint32_t kBlockRequestSize = 24;
inline constexpr uint32_t kBlockReplyHeader = 8;
inline constexpr uint32_t kBlockEntryHeader = 12;
inline constexpr uint32_t kBlockSize = 8192;  // BLCKSZ; checked against it in the .cpp
inline constexpr uint32_t kMaxBlocksPerReply =
    (PGRAC_IC_MAX_MESSAGE - kBlockReplyHeader) / (kBlockEntryHeader + kBlockSize);  // 7

struct BlockRequest {
    uint32_t db = 0, relid = 0;  // the relation: database (0 if shared) and pg_class oid
    uint32_t spc = 0, rel = 0;   // its storage: tablespace and relfilenode
    uint8_t fork = 0;
    uint8_t reserved = 0;  // 0 on the wire
    uint16_t count = 0;
    uint32_t first = 0;

    template <class C, class S>
    static void fields(C& c, S& s) {
        c.le(s.db, "database");
        c.le(s.relid, "relation");
        c.le(s.spc, "tablespace");
        c.le(s.rel, "relfilenode");
        c.le(s.fork, "fork");
        c.le(s.reserved, "reserved byte");
        c.le(s.count, "count");
        c.le(s.first, "first block");
    }
};

// The reply's header and each entry's (before its page image).
struct BlockReplyHeader {
    uint32_t nblocks = 0;  // of the fork
    uint16_t count = 0;
    uint16_t reserved = 0;

    template <class C, class S>
    static void fields(C& c, S& s) {
        c.le(s.nblocks, "fork size");
        c.le(s.count, "count");
        c.le(s.reserved, "reserved");
    }
};

struct BlockEntryHeader {
    uint32_t blkno = 0;
    uint64_t lsn = 0;

    template <class C, class S>
    static void fields(C& c, S& s) {
        c.le(s.blkno, "block number");
        c.le(s.lsn, "page LSN");
    }
};

// The header of the entry at e (kBlockEntryHeader bytes are there).
inline BlockEntryHeader entry_header(const uint8_t* e) {
    BlockEntryHeader h;
    ic::codec::decode(e, kBlockEntryHeader, &h);
    return h;
}

inline void encode_block_request(const BlockRequest& r, uint8_t out[kBlockRequestSize]) {
    ic::codec::encode_to(r, out, kBlockRequestSize);
}

// The route_key of a block request: one relation's blocks spread over the
// LMS workers, one block always on the same worker.
inline uint32_t block_route_key(const BlockRequest& r) {
    return r.rel * 2654435761u ^ r.first;
}

// Registers the block handler (from _PG_init).
void register_block_handlers();

}  // namespace pgrac::glue
