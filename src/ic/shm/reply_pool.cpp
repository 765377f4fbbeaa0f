#include "ic/shm/reply_pool.hpp"

#include "ic/base/atomics.hpp"

namespace pgrac::ic {

namespace {

size_t align64(size_t n) {
    return (n + 63) & ~size_t{63};
}

uint32_t* free_stack(ReplyPoolShared* pool) {
    return reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(pool) + pool->stack_off);
}

}  // namespace

uint32_t reply_chunks_for(uint32_t reply_cap) {
    if (reply_cap <= kReplyInlineBytes) return 0;
    if (reply_cap > PGRAC_IC_MAX_MESSAGE) reply_cap = PGRAC_IC_MAX_MESSAGE;
    return (reply_cap - kReplyInlineBytes + kReplyChunkBytes - 1) / kReplyChunkBytes;
}

size_t reply_pool_bytes_needed(uint32_t n_chunks) {
    return align64(sizeof(ReplyPoolShared)) + align64(n_chunks * sizeof(uint32_t)) +
           static_cast<size_t>(n_chunks) * kReplyChunkBytes;
}

ReplyPoolShared* reply_pool_create(void* region, uint32_t n_chunks) {
    auto* pool = static_cast<ReplyPoolShared*>(region);
    *pool = ReplyPoolShared{};
    pool->n_chunks = n_chunks;
    pool->stack_off = align64(sizeof(ReplyPoolShared));
    pool->chunks_off = pool->stack_off + align64(n_chunks * sizeof(uint32_t));
    uint32_t* stack = free_stack(pool);
    // Lowest numbers on top: a lightly used pool touches few pages.
    for (uint32_t i = 0; i < n_chunks; i++) stack[i] = n_chunks - 1 - i;
    pool->n_free = n_chunks;
    return pool;
}

bool reply_pool_reserve(ReplyPoolShared* pool, uint32_t n, uint32_t* out) {
    if (n == 0) return true;
    if (n > kReplyMaxChunks) return false;
    spin_lock(&pool->lock);
    if (pool->n_free < n) {
        pool->refusals++;
        spin_unlock(&pool->lock);
        return false;
    }
    uint32_t* stack = free_stack(pool);
    for (uint32_t i = 0; i < n; i++) out[i] = stack[--pool->n_free];
    pool->reservations++;
    const uint64_t in_use = pool->n_chunks - pool->n_free;
    if (in_use > pool->peak_in_use) pool->peak_in_use = in_use;
    spin_unlock(&pool->lock);
    return true;
}

void reply_pool_release(ReplyPoolShared* pool, const uint32_t* chunks, uint32_t n) {
    if (n == 0) return;
    spin_lock(&pool->lock);
    uint32_t* stack = free_stack(pool);
    for (uint32_t i = 0; i < n && pool->n_free < pool->n_chunks; i++)
        stack[pool->n_free++] = chunks[i];
    spin_unlock(&pool->lock);
}

uint32_t reply_pool_in_use(const ReplyPoolShared* pool) {
    return pool->n_chunks - load_relaxed(&pool->n_free);
}

uint8_t* reply_pool_chunk(ReplyPoolShared* pool, uint32_t chunk) {
    if (chunk >= pool->n_chunks) return nullptr;
    return reinterpret_cast<uint8_t*>(pool) + pool->chunks_off +
           static_cast<size_t>(chunk) * kReplyChunkBytes;
}

}  // namespace pgrac::ic
