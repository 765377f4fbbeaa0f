// A bounded multi-producer, single-consumer ring of variable-size records in
// caller-provided (shared) memory. The region holds only plain integers and
// bytes, so it can live in PostgreSQL shared memory and be used by many
// processes at once.
//
// Producers reserve space under a short spinlock (pointer bump only), copy
// their record outside the lock, then publish it with a release store of the
// record's state word. The consumer takes records strictly in reservation
// order; a record still being copied stops it until it is committed. Records
// are 8-byte aligned; a record that would straddle the end of the buffer is
// preceded by a skip marker and placed at the start.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sys/uio.h>

namespace pgrac::ic {

struct ShmRingHeader;  // lives at the start of the region

class ShmRing {
  public:
    enum class Push { Ok, Full, TooBig };

    // Bytes of shared memory for a ring whose data area holds `capacity` bytes
    // (rounded up to a power of two, at least 4 KiB).
    static size_t bytes_needed(size_t capacity);
    // Initializes the region (once, by whoever creates the shared memory).
    static ShmRing create(void* region, size_t capacity);
    // Uses an initialized region.
    static ShmRing attach(void* region);

    ShmRing() = default;

    // Largest record body that can ever fit.
    size_t max_record() const;
    // Copies the concatenation of iov[0..n) as one record. Full means not now
    // (try again after the consumer makes room); TooBig means never.
    Push push(const iovec* iov, int n);
    Push push(const void* data, size_t len) {
        iovec v{const_cast<void*>(data), len};
        return push(&v, 1);
    }

    // Consumer: the oldest committed record, or false if none is ready.
    // The pointer stays valid until pop().
    bool peek(const uint8_t** data, size_t* len);
    // Consumer: the committed record right behind the one peek() gives, or
    // false if there is none yet. Valid until the pop() after next.
    bool peek_next(const uint8_t** data, size_t* len);
    void pop();

    bool empty() const;
    size_t used_bytes() const;
    size_t capacity() const;
    // Records pushed and pops done since creation (monotonic).
    uint64_t pushed() const;
    uint64_t popped() const;
    uint64_t full_count() const;  // pushes refused with Full

  private:
    explicit ShmRing(ShmRingHeader* h) : h_(h) {}
    ShmRingHeader* h_ = nullptr;
};

}  // namespace pgrac::ic
