// What to fetch from another instance's buffer pool: a BlockRequest
// (src/ic/wire/block_wire.hpp) naming the relation and its storage, built by
// the local catalog and checked against the caller's privileges.
#pragma once

#include <cstdint>

#include "ic/wire/block_wire.hpp"

namespace pgrac::glue {

// The block wire format (ic/wire/block_wire.hpp), under the names the glue uses.
using ic::block_route_key;
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

// Block `first` of fork `forkname` of relation `relid`, which the caller must
// be allowed to read whole (SELECT; refused where row-level security applies);
// the relation stays locked (AccessShareLock) to the end of the transaction.
BlockRequest block_relation_request(uint32_t relid, const char* forkname, int64_t first);
// A block number checked to be one (ERROR otherwise).
uint32_t block_number(int64_t blkno);
// The relation a BufferTag belongs to, by the local catalog: only this
// database's relations and shared catalogs can be found here; another
// database's need the caller to name the relation.
uint32_t block_relation_of_tag(uint32_t spc, uint32_t db, uint32_t relnumber);

}  // namespace pgrac::glue
