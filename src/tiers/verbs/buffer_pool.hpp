// The verbs tier's buffer pool: one anonymous mapping, from hugepages when it
// can get them (1 GB or 2 MB), else normal pages with a warning, cut into
// fixed-size slots (frame header + max payload, rounded to 64 bytes). The pool
// knows nothing of verbs; the transport registers base()/bytes() once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pgrac::tiers {

class BufferPool {
  public:
    BufferPool() = default;
    ~BufferPool();
    BufferPool(const BufferPool&) = delete;
    BufferPool& operator=(const BufferPool&) = delete;

    // Maps slots * slot_bytes (rounded up to the page size) with pages of
    // page_size (0 or 4096 = normal pages; 2 MB; 1 GB). numa_node >= 0 asks
    // for memory on that node. False with *error only if no mapping at all
    // could be made; a fallback to smaller pages sets warning().
    bool create(size_t slots, size_t slot_bytes, uint64_t page_size, int numa_node,
                std::string* error);

    uint8_t* base() const { return base_; }
    size_t bytes() const { return bytes_; }
    size_t slot_bytes() const { return slot_bytes_; }
    size_t slots() const { return slots_; }
    uint64_t page_size() const { return page_size_; }  // what the mapping got
    const std::string& warning() const { return warning_; }

    uint8_t* slot(uint32_t i) const { return base_ + static_cast<size_t>(i) * slot_bytes_; }
    // Slot index of a pointer into the pool, or -1.
    long index_of(const void* p) const;

    static size_t round_slot(size_t frame_bytes) { return (frame_bytes + 63) & ~size_t{63}; }
    // What create() maps for `want` bytes on pages of `page` bytes.
    static size_t mapped_bytes(size_t want, uint64_t page) {
        return (want + page - 1) / page * page;
    }

  private:
    uint8_t* base_ = nullptr;
    size_t bytes_ = 0, slot_bytes_ = 0, slots_ = 0;
    uint64_t page_size_ = 0;
    std::string warning_;
};

// A LIFO free list of slot indices in [first, first+count).
class SlotList {
  public:
    void reset(uint32_t first, uint32_t count);
    bool empty() const { return free_.empty(); }
    size_t available() const { return free_.size(); }
    uint32_t take() {
        const uint32_t s = free_.back();
        free_.pop_back();
        return s;
    }
    void give(uint32_t s) { free_.push_back(s); }

  private:
    std::vector<uint32_t> free_;
};

}  // namespace pgrac::tiers
