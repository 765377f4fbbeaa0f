// Byte buffers for encoded frames: no zero-fill on resize (every byte is
// written by the encoder before it is read), and recycled once acked, so a
// stream of 8 KiB frames neither memsets nor mallocs per frame.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace pgrac::ic {

// std::allocator that default-initializes (leaves trivial types unset) where
// the vector would value-initialize.
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
    template <typename U>
    struct rebind {
        using other = DefaultInitAllocator<U>;
    };
    DefaultInitAllocator() = default;
    template <typename U>
    DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
    template <typename U>
    void construct(U* p) noexcept(noexcept(::new (static_cast<void*>(p)) U)) {
        ::new (static_cast<void*>(p)) U;
    }
    template <typename U, typename... Args>
    void construct(U* p, Args&&... args) {
        ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
};

using FrameBuffer = std::vector<uint8_t, DefaultInitAllocator<uint8_t>>;

// A bounded stack of spare buffers. take() gives the most recently returned
// one (likeliest still in cache), sized to n, contents unspecified.
class FramePool {
  public:
    static constexpr size_t kMaxSpares = 128;
    static constexpr size_t kMaxSpareCapacity = 64 * 1024 + 256;
    static constexpr size_t kMaxSpareBytes = 1 << 20;  // per pool (per session)

    FrameBuffer take(size_t n) {
        if (spares_.empty()) return FrameBuffer(n);
        FrameBuffer b = std::move(spares_.back());
        spares_.pop_back();
        bytes_ -= b.capacity();
        b.resize(n);
        return b;
    }
    void give(FrameBuffer&& b) {
        if (spares_.size() < kMaxSpares && b.capacity() <= kMaxSpareCapacity &&
            bytes_ + b.capacity() <= kMaxSpareBytes) {
            bytes_ += b.capacity();
            spares_.push_back(std::move(b));
        }
    }
    size_t spares() const { return spares_.size(); }

  private:
    std::vector<FrameBuffer> spares_;
    size_t bytes_ = 0;  // capacity held by the spares
};

}  // namespace pgrac::ic
