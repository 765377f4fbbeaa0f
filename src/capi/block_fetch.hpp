// Fetching page images from another instance's buffer pool through the
// interconnect (src/lms/block_service.cpp serves them, wire format in
// src/ic/wire/block_wire.hpp). Every function here may raise an error.
#pragma once

#include <cstdint>

#include "capi/block_request.hpp"

namespace pgrac::glue {

// One RPC for rq.count (1..kMaxBlocksPerReply) blocks from rq.first; returns
// the checked reply (palloc'd, PGRAC_IC_MAX_MESSAGE bytes), the number of
// blocks of the fork (*nblocks) and of blocks in the reply (*count).
uint8_t* block_fetch_rpc(int node, const BlockRequest& rq, uint32_t* nblocks, uint32_t* count);

// Called for the i-th block fetched with its reply entry
// (u32 blkno | u64 LSN | kBlockSize bytes of page).
using BlockVisitor = void (*)(void* arg, const uint8_t* entry, int64_t i);
// Up to `count` blocks from rq.first, in batches of kMaxBlocksPerReply per
// RPC, stopping at the end of the fork. Returns the number of blocks.
int64_t block_fetch_each(int node, BlockRequest rq, int64_t count, BlockVisitor each, void* arg);
// The same into `pages` (kBlockSize bytes each) and `lsns` (may be nullptr).
int block_fetch_into(int node, const BlockRequest& rq, int count, void* pages, uint64_t* lsns);

}  // namespace pgrac::glue
