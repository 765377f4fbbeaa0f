// Cache Fusion block service (src/lms/block_service.cpp): an LMS handler that
// ships pages from this instance's buffer pool, and its wire format, shared
// with the fetch of the C API in src/capi/block_fetch.cpp.
//
// The wire format is in src/ic/block_wire.hpp. The server locks relation
// (dbOid, relOid) and serves the blocks only if spcOid/dbOid/relNumber is
// that relation's storage there (src/lms/block_identity.hpp).
// The reply holds min(count, nblocks - first) blocks; first >= nblocks, a
// missing relation or fork are errors (the caller gets HANDLER_ERROR with the
// text).
#pragma once

#include <cstdint>

#include "ic/block_wire.hpp"

namespace pgrac::glue {

using ic::BlockEntryHeader;
using ic::BlockReplyHeader;
using ic::BlockRequest;
using ic::encode_block_request;
using ic::entry_header;
using ic::kBlockEntryHeader;
using ic::kBlockReplyHeader;
using ic::kBlockRequestSize;
using ic::kBlockSize;
using ic::kMaxBlocksPerReply;

// The route_key of a block request: one relation's blocks spread over the
// LMS workers, one block always on the same worker.
inline uint32_t block_route_key(const BlockRequest& r) {
    return r.rel * 2654435761u ^ r.first;
}

// Registers the block handler (from _PG_init).
void register_block_handlers();

}  // namespace pgrac::glue
