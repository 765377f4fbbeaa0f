// Buffer pool mapping: hugepages first, then smaller pages.
#include "tiers/verbs/buffer_pool.hpp"

#include <numa.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#endif
#ifndef MAP_HUGE_1GB
#define MAP_HUGE_1GB (30 << MAP_HUGE_SHIFT)
#endif

namespace pgrac::tiers {

namespace {

constexpr uint64_t k2M = 2u << 20;
constexpr uint64_t k1G = 1u << 30;

std::string size_text(uint64_t page) {
    if (page == k1G) return "1 GB";
    if (page == k2M) return "2 MB";
    return std::to_string(page / 1024) + " KiB";
}

void* map_pages(size_t len, uint64_t page, int* err) {
    int flags = MAP_PRIVATE | MAP_ANONYMOUS;
    if (page == k2M) flags |= MAP_HUGETLB | MAP_HUGE_2MB;
    if (page == k1G) flags |= MAP_HUGETLB | MAP_HUGE_1GB;
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p == MAP_FAILED) {
        *err = errno;
        return nullptr;
    }
    return p;
}

}  // namespace

BufferPool::~BufferPool() {
    if (base_ != nullptr) munmap(base_, bytes_);
}

bool BufferPool::create(size_t slots, size_t slot_bytes, uint64_t page_size, int numa_node,
                        std::string* error) {
    if (slots == 0 || slot_bytes == 0) {
        *error = "buffer pool: no slots";
        return false;
    }
    const uint64_t small = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    std::vector<uint64_t> tries;
    if (page_size >= k1G) tries.push_back(k1G);
    if (page_size >= k2M) tries.push_back(k2M);
    tries.push_back(small);
    const size_t want = slots * slot_bytes;
    std::string failed;
    for (uint64_t page : tries) {
        const size_t len = mapped_bytes(want, page);
        int err = 0;
        void* p = map_pages(len, page, &err);
        if (p == nullptr) {
            if (!failed.empty()) failed += "; ";
            failed += size_text(page) + " pages: " + std::strerror(err);
            continue;
        }
        if (numa_node >= 0 && numa_available() >= 0) numa_tonode_memory(p, len, numa_node);
        std::memset(p, 0, len);  // fault in now, on the chosen node
        base_ = static_cast<uint8_t*>(p);
        bytes_ = len;
        slot_bytes_ = slot_bytes;
        slots_ = slots;
        page_size_ = page;
        if (page < page_size && page_size > small)
            warning_ = "RDMA buffer pool: " + size_text(page_size) + " hugepages unavailable (" +
                       failed + "); using " + size_text(page) +
                       " pages (reserve hugepages via vm.nr_hugepages)";
        return true;
    }
    *error = "RDMA buffer pool: cannot map " + std::to_string(want) + " bytes (" + failed + ")";
    return false;
}

long BufferPool::index_of(const void* p) const {
    const auto* b = static_cast<const uint8_t*>(p);
    if (base_ == nullptr || b < base_ || b >= base_ + slots_ * slot_bytes_) return -1;
    return static_cast<long>(static_cast<size_t>(b - base_) / slot_bytes_);
}

void SlotList::reset(uint32_t first, uint32_t count) {
    free_.clear();
    free_.reserve(count);
    for (uint32_t i = count; i > 0; --i) free_.push_back(first + i - 1);
}

}  // namespace pgrac::tiers
