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

#include "pgrac_ic/pgrac_ic.h"

namespace pgrac::glue {

inline constexpr uint32_t kBlockRequestSize = 24;
inline constexpr uint32_t kBlockReplyHeader = 8;
inline constexpr uint32_t kBlockEntryHeader = 12;
inline constexpr uint32_t kBlockSize = 8192;  // BLCKSZ; checked against it in the .cpp
inline constexpr uint32_t kMaxBlocksPerReply =
    (PGRAC_IC_MAX_MESSAGE - kBlockReplyHeader) / (kBlockEntryHeader + kBlockSize);  // 7

struct BlockRequest {
    uint32_t db, relid;  // the relation: database (0 if shared) and pg_class oid
    uint32_t spc, rel;   // its storage: tablespace and relfilenode
    uint8_t fork;
    uint16_t count;
    uint32_t first;
};

inline void put_u16(uint8_t* p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v);
    p[1] = static_cast<uint8_t>(v >> 8);
}
inline void put_u32(uint8_t* p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void put_u64(uint8_t* p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t get_u16(const uint8_t* p) {
    return static_cast<uint16_t>(p[0] | p[1] << 8);
}
inline uint32_t get_u32(const uint8_t* p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= static_cast<uint32_t>(p[i]) << (8 * i);
    return v;
}
inline uint64_t get_u64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= static_cast<uint64_t>(p[i]) << (8 * i);
    return v;
}

inline void encode_block_request(const BlockRequest& r, uint8_t out[kBlockRequestSize]) {
    put_u32(out, r.db);
    put_u32(out + 4, r.relid);
    put_u32(out + 8, r.spc);
    put_u32(out + 12, r.rel);
    out[16] = r.fork;
    out[17] = 0;
    put_u16(out + 18, r.count);
    put_u32(out + 20, r.first);
}

// The route_key of a block request: one relation's blocks spread over the
// LMS workers, one block always on the same worker.
inline uint32_t block_route_key(const BlockRequest& r) {
    return r.rel * 2654435761u ^ r.first;
}

// Registers the block handler (from _PG_init).
void register_block_handlers();

}  // namespace pgrac::glue
