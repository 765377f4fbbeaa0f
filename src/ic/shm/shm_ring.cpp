// ShmRing: bounded MPSC ring of variable-size records in shared memory.
//
// Layout: ShmRingHeader, then `capacity` data bytes. head and tail are byte
// positions that only grow (the offset in the data area is pos & mask), so
// head - tail is always the number of bytes in use and there is no full/empty
// ambiguity. Every record starts with an 8-byte RecordHeader {len, state}.
//
// Protocol:
//  - producer, under the spinlock: check space against tail (acquire: the
//    consumer is done with those bytes), write the header(s) of what it takes
//    (a SKIP record up to the end of the buffer if needed, then its own header
//    with state RESERVED), store-release head, unlock. Then it copies the body
//    without the lock and store-releases state = COMMITTED.
//  - consumer: tail == load-acquire(head) means empty. Otherwise the header at
//    tail was written in this lap before head was published, so its state is
//    RESERVED, SKIP or COMMITTED of *this* record, never a stale COMMITTED
//    from an earlier lap. COMMITTED is read with acquire, so the body is
//    visible. pop() store-releases tail once the consumer is done reading.
//
// A producer that dies between reserve and commit blocks the consumer at that
// record; PostgreSQL reinitializes shared memory after any process crash.
#include "ic/shm/shm_ring.hpp"

#include <cassert>
#include <cstring>

#include "ic/base/atomics.hpp"

namespace pgrac::ic {

namespace {

constexpr uint64_t kMagic = 0x7067726163726e67ULL;  // "pgracrng"
constexpr size_t kMinCapacity = 4096;
constexpr size_t kCacheLine = 64;

constexpr uint32_t kReserved = 1;
constexpr uint32_t kCommitted = 2;
constexpr uint32_t kSkip = 3;

struct RecordHeader {
    uint32_t len;    // body bytes (for SKIP: bytes after this header up to the end)
    uint32_t state;  // kReserved / kCommitted / kSkip
};
static_assert(sizeof(RecordHeader) == 8, "record header is 8 bytes");

constexpr size_t align8(size_t n) {
    return (n + 7) & ~size_t{7};
}
constexpr size_t record_bytes(size_t body) {
    return sizeof(RecordHeader) + align8(body);
}

// Counter increment for a field with a single writer at a time (the lock
// holder, or the one consumer): a relaxed load and store, no locked RMW.
// Readers still get whole values because both accesses are atomic.
inline void bump_owned(uint64_t* p) {
    store_relaxed(p, load_relaxed(p) + 1);
}

size_t round_capacity(size_t capacity) {
    size_t c = kMinCapacity;
    while (c < capacity) c <<= 1;
    return c;
}

}  // namespace

// Read-mostly fields, producer fields and consumer fields on separate cache
// lines so that pushes and pops do not bounce each other's lines. Padding is
// explicit rather than alignas(64): the region is only guaranteed 8-byte
// alignment, and an over-aligned type at such an address would be UB.
struct ShmRingHeader {
    uint64_t magic;
    uint64_t capacity;  // data bytes, a power of two
    uint64_t mask;      // capacity - 1
    uint8_t pad0[kCacheLine - 3 * sizeof(uint64_t)];

    // Producers (head and the spinlock are written together).
    uint32_t lock;
    uint32_t pad1;
    uint64_t head;        // reserved up to
    uint64_t pushed;      // records reserved; written under the lock
    uint64_t full_count;  // written under the lock
    uint8_t pad2[kCacheLine - 4 * sizeof(uint64_t)];

    // Consumer.
    uint64_t tail;    // consumed up to
    uint64_t popped;  // written by the consumer only
    uint8_t pad3[kCacheLine - 2 * sizeof(uint64_t)];

    uint8_t* data() { return reinterpret_cast<uint8_t*>(this + 1); }
    RecordHeader* record_at(uint64_t pos) {
        return reinterpret_cast<RecordHeader*>(data() + (pos & mask));
    }
};
static_assert(sizeof(ShmRingHeader) == 3 * kCacheLine, "header layout");

size_t ShmRing::bytes_needed(size_t capacity) {
    return sizeof(ShmRingHeader) + round_capacity(capacity);
}

ShmRing ShmRing::create(void* region, size_t capacity) {
    assert(reinterpret_cast<uintptr_t>(region) % alignof(uint64_t) == 0);
    auto* h = static_cast<ShmRingHeader*>(region);
    std::memset(static_cast<void*>(h), 0, sizeof(*h));
    h->capacity = round_capacity(capacity);
    h->mask = h->capacity - 1;
    // Published last: a region with the magic is fully initialized.
    store_release(&h->magic, kMagic);
    return ShmRing(h);
}

ShmRing ShmRing::attach(void* region) {
    auto* h = static_cast<ShmRingHeader*>(region);
    assert(load_acquire(&h->magic) == kMagic);
    return ShmRing(h);
}

size_t ShmRing::max_record() const {
    // Half the data area, so that an empty ring always has room for any
    // record whatever its offset: a record of need <= capacity/2 that does not
    // fit before the end is preceded by a skip of capacity - offset < need
    // bytes, and skip + need <= capacity. Hence Full always means that the
    // consumer has records to take, and taking them makes room.
    size_t m = h_->capacity / 2 - sizeof(RecordHeader);
    return m > UINT32_MAX ? size_t{UINT32_MAX} & ~size_t{7} : m;
}

ShmRing::Push ShmRing::push(const iovec* iov, int n) {
    const size_t limit = max_record();
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        if (iov[i].iov_len > limit - len) return Push::TooBig;
        len += iov[i].iov_len;
    }
    const uint64_t need = record_bytes(len);
    const uint64_t cap = h_->capacity;

    spin_lock(&h_->lock);
    uint64_t pos = h_->head;  // only written under the lock
    const uint64_t tail = load_acquire(&h_->tail);
    const uint64_t to_end = cap - (pos & h_->mask);  // a multiple of 8, >= 8
    uint64_t start = pos;
    if (need > to_end) {
        // The record would straddle the end: a SKIP record fills the rest of
        // the buffer and the record starts at offset 0.
        start = pos + to_end;
    }
    if (start + need - tail > cap) {
        bump_owned(&h_->full_count);
        spin_unlock(&h_->lock);
        return Push::Full;
    }
    if (start != pos) {
        RecordHeader* skip = h_->record_at(pos);
        skip->len = static_cast<uint32_t>(to_end - sizeof(RecordHeader));
        store_relaxed(&skip->state, kSkip);
        pos = start;
    }
    RecordHeader* rec = h_->record_at(pos);
    rec->len = static_cast<uint32_t>(len);
    // Relaxed is enough: the release store of head below orders it before any
    // consumer can look at this position.
    store_relaxed(&rec->state, kReserved);
    store_release(&h_->head, pos + need);
    bump_owned(&h_->pushed);
    spin_unlock(&h_->lock);

    uint8_t* body = reinterpret_cast<uint8_t*>(rec + 1);
    for (int i = 0; i < n; i++) {
        if (iov[i].iov_len == 0) continue;
        std::memcpy(body, iov[i].iov_base, iov[i].iov_len);
        body += iov[i].iov_len;
    }
    // Release: the body is visible to whoever acquires COMMITTED.
    store_release(&rec->state, kCommitted);
    return Push::Ok;
}

bool ShmRing::peek(const uint8_t** data, size_t* len) {
    uint64_t tail = h_->tail;  // only the consumer writes it
    for (;;) {
        if (tail == load_acquire(&h_->head)) return false;
        RecordHeader* rec = h_->record_at(tail);
        const uint32_t state = load_acquire(&rec->state);
        if (state == kSkip) {
            tail += sizeof(RecordHeader) + rec->len;
            // Release: we are done with these bytes (nothing read, but keep
            // every tail store a release so producers can rely on it).
            store_release(&h_->tail, tail);
            continue;
        }
        if (state != kCommitted) return false;  // still being copied
        *data = reinterpret_cast<const uint8_t*>(rec + 1);
        *len = rec->len;
        return true;
    }
}

bool ShmRing::peek_next(const uint8_t** data, size_t* len) {
    const uint8_t* first;
    size_t first_len;
    if (!peek(&first, &first_len)) return false;
    // As in peek(): a position below head was written in this lap.
    uint64_t pos = h_->tail + record_bytes(first_len);
    for (;;) {
        if (pos == load_acquire(&h_->head)) return false;
        RecordHeader* rec = h_->record_at(pos);
        const uint32_t state = load_acquire(&rec->state);
        if (state == kSkip) {
            pos += sizeof(RecordHeader) + rec->len;
            continue;
        }
        if (state != kCommitted) return false;
        *data = reinterpret_cast<const uint8_t*>(rec + 1);
        *len = rec->len;
        return true;
    }
}

void ShmRing::pop() {
    const uint8_t* data;
    size_t len;
    if (!peek(&data, &len)) return;  // nothing ready: popping would be a bug
    // Release: the consumer's reads of the body happen before a producer
    // (which acquires tail) can reuse these bytes.
    store_release(&h_->tail, h_->tail + record_bytes(len));
    bump_owned(&h_->popped);
}

bool ShmRing::empty() const {
    const uint64_t tail = load_acquire(&h_->tail);
    return tail == load_acquire(&h_->head);
}

size_t ShmRing::used_bytes() const {
    // tail first: head only grows, so the head read after it is >= it.
    const uint64_t tail = load_acquire(&h_->tail);
    return static_cast<size_t>(load_acquire(&h_->head) - tail);
}

size_t ShmRing::capacity() const {
    return h_->capacity;
}
uint64_t ShmRing::pushed() const {
    return load_relaxed(&h_->pushed);
}
uint64_t ShmRing::popped() const {
    return load_relaxed(&h_->popped);
}
uint64_t ShmRing::full_count() const {
    return load_relaxed(&h_->full_count);
}

}  // namespace pgrac::ic
