// Cache Fusion's wire format: the block request and the headers of its reply
// (docs/cache_fusion.md), as records of the one codec. PostgreSQL-
// free, so the fuzzer reaches them; the service is src/lms/block_service.cpp,
// the fetch src/capi/block_fetch.cpp.
//
// Request (kMsgBlockFetch, an RPC), 24 bytes little-endian:
//   u32 dbOid (0: a shared catalog) | u32 relOid (the pg_class oid)
//   | u32 spcOid | u32 relNumber (the relfilenode) | u8 fork | u8 reserved (0)
//   | u16 count (1..kMaxBlocksPerReply) | u32 first block
// Reply: u32 nblocks of the fork | u16 count | u16 reserved, then count times
//   u32 blkno | u64 page LSN | BLCKSZ bytes of page image
#pragma once

#include <cstdint>

#include "ic/wire/codec.hpp"
#include "pgrac_ic/pgrac_ic.h"

namespace pgrac::ic {

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
    codec::decode(e, kBlockEntryHeader, &h);
    return h;
}

inline void encode_block_request(const BlockRequest& r, uint8_t out[kBlockRequestSize]) {
    codec::encode_to(r, out, kBlockRequestSize);
}

// The route_key of a block request: one relation's blocks spread over the
// LMS workers, one block always on the same worker.
inline uint32_t block_route_key(const BlockRequest& r) {
    return r.rel * 2654435761u ^ r.first;
}

}  // namespace pgrac::ic
