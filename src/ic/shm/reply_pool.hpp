// Reply space shared by every process of an instance.
//
// A reply lands in the requester's reply slot. Slots used to carry a buffer of
// PGRAC_IC_MAX_MESSAGE each, one per PGPROC: 330 MB at max_connections = 5000,
// although only requesters with an RPC in flight need any. Now a slot holds a
// small inline buffer (enough for pings, GES replies and errors), and a
// requester that may get a larger reply (a block, a batch) reserves chunks of
// this pool for the duration of the RPC; the reply fills the inline buffer
// first, then the chunks in order (one 8 KiB block and its headers take one
// chunk). The pool is sized by
// cluster.reply_pool_size, not by max_connections.
//
// Chunks are taken and returned under a spinlock held for a few stores; the
// free list is a stack of chunk numbers. Plain data only (shared memory).
#pragma once

#include <cstddef>
#include <cstdint>

#include "pgrac_ic/pgrac_ic.h"

namespace pgrac::ic {

inline constexpr uint32_t kReplyChunkBytes = 8192;
inline constexpr uint32_t kReplyMaxChunks = PGRAC_IC_MAX_MESSAGE / kReplyChunkBytes;
inline constexpr uint32_t kReplyInlineBytes = 512;
static_assert(kReplyMaxChunks * kReplyChunkBytes == PGRAC_IC_MAX_MESSAGE);

struct ReplyPoolShared {
    uint32_t lock;
    uint32_t n_chunks;
    uint32_t n_free;  // entries of the free stack in use
    uint32_t pad;
    uint64_t reservations;  // successful reserve() calls
    uint64_t refusals;      // reserve() calls that found too few free chunks
    uint64_t peak_in_use;   // most chunks reserved at once
    uint64_t stack_off;     // uint32_t[n_chunks], from the start of this struct
    uint64_t chunks_off;    // n_chunks * kReplyChunkBytes, from the start of this struct
};

// Chunks needed, besides the inline buffer, for a reply of up to `reply_cap`
// bytes (0 if it fits inline).
uint32_t reply_chunks_for(uint32_t reply_cap);

size_t reply_pool_bytes_needed(uint32_t n_chunks);
// Lays out the pool in `region` (reply_pool_bytes_needed bytes), every chunk free.
ReplyPoolShared* reply_pool_create(void* region, uint32_t n_chunks);

// Takes `n` chunks (n <= kReplyMaxChunks) into `out`: all or none.
bool reply_pool_reserve(ReplyPoolShared* pool, uint32_t n, uint32_t* out);
void reply_pool_release(ReplyPoolShared* pool, const uint32_t* chunks, uint32_t n);
uint32_t reply_pool_in_use(const ReplyPoolShared* pool);
uint8_t* reply_pool_chunk(ReplyPoolShared* pool, uint32_t chunk);

}  // namespace pgrac::ic
