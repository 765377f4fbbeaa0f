#include "ic/shared_state.hpp"

#include <cstring>
#include <ctime>

#include "ic/atomics.hpp"

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

const char* tier_name(Tier t) {
    switch (t) {
        case Tier::Auto:
            return "auto";
        case Tier::Stub:
            return "stub";
        case Tier::Tier1:
            return "tier1";
        case Tier::Tier2:
            return "tier2";
        case Tier::Tier3:
            return "tier3";
    }
    return "unknown";
}

size_t shared_size(const SharedSizing& s) {
    size_t n = align_up(sizeof(IcShared));
    n += align_up(ShmRing::bytes_needed(s.outbound_ring_bytes));
    n += s.n_lms * align_up(ShmRing::bytes_needed(s.inbox_ring_bytes));
    n += static_cast<size_t>(s.n_slots) * align_up(sizeof(ReplySlot));
    return n;
}

IcShared* shared_init(void* region, const SharedSizing& s) {
    // Only the header is zeroed here: rings initialize themselves and reply
    // slots need only their state words (zeroing 8 MB of slot buffers at every
    // start would be wasted work).
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
    }
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

bool complete_slot(ReplySlot* slot, uint64_t rpc_id, uint32_t status, const uint8_t* body,
                   uint32_t len) {
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
    if (len > sizeof(slot->data)) {
        status = PGRAC_IC_REPLY_TOO_BIG;
        len = 0;
    }
    if (len > 0) std::memcpy(slot->data, body, len);
    slot->len = len;
    slot->status = status;
    store_release(&slot->state, static_cast<uint32_t>(SlotState::Done));
    return true;
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

}  // namespace pgrac::ic
