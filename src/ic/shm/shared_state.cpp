#include "ic/shm/shared_state.hpp"

#include <cstring>
#include <ctime>

#include "ic/base/atomics.hpp"

namespace pgrac::ic {

namespace {

size_t align_up(size_t n) {
    return (n + 63) & ~size_t{63};
}

}  // namespace

const char* peer_state_name(PeerState s) {
    switch (s) {
        case PeerState::Down:
            return "DOWN";
        case PeerState::Connecting:
            return "CONNECTING";
        case PeerState::Up:
            return "UP";
        case PeerState::Disconnecting:
            return "DISCONNECTING";
        case PeerState::Error:
            return "ERROR";
    }
    return "UNKNOWN";
}

size_t shared_size(const SharedSizing& s) {
    size_t n = align_up(sizeof(IcShared));
    n += align_up(ShmRing::bytes_needed(s.outbound_ring_bytes));
    n += s.n_lms * align_up(ShmRing::bytes_needed(s.inbox_ring_bytes));
    n += static_cast<size_t>(s.n_slots) * align_up(sizeof(ReplySlot));
    n += align_up(reply_pool_bytes_needed(s.reply_pool_chunks));
    return n;
}

IcShared* shared_init(void* region, const SharedSizing& s) {
    // Only the header is zeroed here: rings and the reply pool initialize
    // themselves, and reply slots need only their state words.
    auto* shm = static_cast<IcShared*>(region);
    std::memset(shm, 0, sizeof(IcShared));
    shm->magic = kSharedMagic;
    shm->n_lms = s.n_lms;
    shm->n_slots = s.n_slots;
    shm->listener_procno = -1;
    for (auto& p : shm->lms_procno) p = -1;
    shm->errors.reset();
    shm->total_latency.reset();

    auto* base = static_cast<uint8_t*>(region);
    size_t off = align_up(sizeof(IcShared));
    shm->outbound_off = off;
    ShmRing::create(base + off, s.outbound_ring_bytes);
    off += align_up(ShmRing::bytes_needed(s.outbound_ring_bytes));
    for (uint32_t i = 0; i < s.n_lms; i++) {
        shm->inbox_off[i] = off;
        ShmRing::create(base + off, s.inbox_ring_bytes);
        off += align_up(ShmRing::bytes_needed(s.inbox_ring_bytes));
    }
    shm->slots_off = off;
    for (uint32_t i = 0; i < s.n_slots; i++) {
        auto* slot = reinterpret_cast<ReplySlot*>(base + off + i * align_up(sizeof(ReplySlot)));
        slot->rpc_id = 0;
        slot->state = static_cast<uint32_t>(SlotState::Idle);
        slot->status = 0;
        slot->len = 0;
        slot->generation = 0;
        slot->n_chunks = 0;
    }
    off += static_cast<size_t>(s.n_slots) * align_up(sizeof(ReplySlot));
    shm->reply_pool_off = off;
    reply_pool_create(base + off, s.reply_pool_chunks);
    return shm;
}

ShmRing outbound_ring(IcShared* shm) {
    return ShmRing::attach(reinterpret_cast<uint8_t*>(shm) + shm->outbound_off);
}

ShmRing inbox_ring(IcShared* shm, uint32_t lms) {
    return ShmRing::attach(reinterpret_cast<uint8_t*>(shm) + shm->inbox_off[lms]);
}

ReplySlot* reply_slot(IcShared* shm, uint32_t slot) {
    if (slot >= shm->n_slots) return nullptr;
    return reinterpret_cast<ReplySlot*>(reinterpret_cast<uint8_t*>(shm) + shm->slots_off +
                                        slot * align_up(sizeof(ReplySlot)));
}

ReplyPoolShared* reply_pool(IcShared* shm) {
    return reinterpret_cast<ReplyPoolShared*>(reinterpret_cast<uint8_t*>(shm) +
                                              shm->reply_pool_off);
}

namespace {

// Calls f(space, offset, part) for the slot's storage that holds bytes
// [0, n) of a reply: its inline buffer, then its chunks in order.
template <typename F>
void for_each_part(IcShared* shm, const ReplySlot* slot, uint32_t n, F f) {
    uint32_t off = 0;
    auto part = [&](uint8_t* space, uint32_t room) {
        const uint32_t len = n - off < room ? n - off : room;
        f(space, off, len);
        off += len;
    };
    part(const_cast<uint8_t*>(slot->inline_data), kReplyInlineBytes);
    ReplyPoolShared* pool = reply_pool(shm);
    for (uint32_t i = 0; i < slot->n_chunks && off < n; i++)
        if (uint8_t* chunk = reply_pool_chunk(pool, slot->chunks[i])) part(chunk, kReplyChunkBytes);
}

}  // namespace

bool complete_slot(IcShared* shm, ReplySlot* slot, uint64_t rpc_id, uint32_t status,
                   const uint8_t* body, uint32_t len) {
    if (load_acquire(&slot->rpc_id) != rpc_id) return false;
    uint32_t expected = static_cast<uint32_t>(SlotState::Waiting);
    if (!compare_exchange(&slot->state, &expected, static_cast<uint32_t>(SlotState::Filling)))
        return false;
    // The owner may have re-armed the slot for a newer RPC between the two
    // checks above only by first leaving Waiting, which the CAS would have seen.
    if (load_acquire(&slot->rpc_id) != rpc_id) {
        store_release(&slot->state, static_cast<uint32_t>(SlotState::Waiting));
        return false;
    }
    const uint32_t cap = slot_capacity(slot);
    if (len > 0)
        for_each_part(
            shm, slot, len < cap ? len : cap,
            [&](uint8_t* space, uint32_t off, uint32_t n) { std::memcpy(space, body + off, n); });
    slot->len = len;
    slot->status = status;
    store_release(&slot->state, static_cast<uint32_t>(SlotState::Done));
    return true;
}

void read_slot(IcShared* shm, const ReplySlot* slot, void* dst, uint32_t n) {
    const uint32_t cap = slot_capacity(slot);
    if (n > cap) n = cap;
    auto* out = static_cast<uint8_t*>(dst);
    for_each_part(shm, slot, n, [&](const uint8_t* space, uint32_t off, uint32_t len) {
        std::memcpy(out + off, space, len);
    });
}

bool slot_reserve(IcShared* shm, ReplySlot* slot, uint32_t reply_cap) {
    const uint32_t need = reply_chunks_for(reply_cap);
    slot_release(shm, slot);  // left by an RPC that an ERROR interrupted
    if (!reply_pool_reserve(reply_pool(shm), need, slot->chunks)) return false;
    slot->n_chunks = need;
    return true;
}

void slot_release(IcShared* shm, ReplySlot* slot) {
    reply_pool_release(reply_pool(shm), slot->chunks, slot->n_chunks);
    slot->n_chunks = 0;
}

int64_t unix_time_us() {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

uint64_t monotonic_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

uint64_t boottime_ns() {
    timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

}  // namespace pgrac::ic
