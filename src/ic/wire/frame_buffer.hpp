// Byte buffers for encoded frames: no zero-fill on resize (every byte is
// written by the encoder before it is read). Kept frames recycle theirs once
// acked (kept_frame.hpp), so a stream of 8 KiB frames neither memsets nor
// mallocs per frame.
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

}  // namespace pgrac::ic
