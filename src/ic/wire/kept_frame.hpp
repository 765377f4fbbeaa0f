// A frame kept for resending until the peer acks it. One buffer, shared by
// reference count: the session keeps it, and a transport that cannot write it
// at once (a full socket) queues a reference instead of a copy. Under
// `secure` over a transport that lends no send buffer it is sealed where it is
// kept, so the cipher's pass is its only copy; it is opened in place again
// before it goes out under another connection's keys or is rewritten.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "ic/wire/frame.hpp"
#include "ic/wire/frame_buffer.hpp"
#include "ic/wire/frame_guard.hpp"

namespace pgrac::ic {

struct KeptFrame {
    // Header and payload: in clear with the crc field zero, or sealed
    // (header, ciphertext, tag, CRC set). Room for a tag is reserved.
    FrameBuffer bytes;
    SealedUnder sealed;  // key set while the bytes are sealed
    bool is_sealed() const { return sealed.key != nullptr; }
};
using KeptFrameRef = std::shared_ptr<KeptFrame>;

// Makes ref's frame the caller's alone before it is changed in place: a
// transport still holding the buffer (queued, not yet written) keeps the old
// bytes, and ref gets a copy of them.
inline void unshare(KeptFrameRef& ref) {
    if (ref.use_count() <= 1) return;
    auto copy = std::make_shared<KeptFrame>();
    copy->bytes.reserve(ref->bytes.capacity());
    copy->bytes.assign(ref->bytes.begin(), ref->bytes.end());
    copy->sealed = ref->sealed;
    ref = std::move(copy);
}

// Seals f under g (secure) from payload, or in place when payload is
// nullptr (f then holds the frame in clear), into the room reserved for the
// tag, and records what opens it again. Unshare f first if a transport may
// hold it.
inline void seal_kept_frame(FrameGuard& g, const FrameHeader& h, const uint8_t* payload,
                            KeptFrame& f) {
    f.bytes.resize(kFrameHeaderSize + h.payload_len + kFrameTagSize);
    f.sealed = g.seal_kept(h, payload != nullptr ? payload : f.bytes.data() + kFrameHeaderSize,
                           h.payload_len, f.bytes.data());
}

// Opens a sealed kept frame where it is kept (unshared first: a transport
// still holding it keeps the sealed bytes): in clear again, header as before
// sealing. Throws logic_error if it does not open (its bytes changed).
inline void open_kept_frame(KeptFrameRef& ref) {
    unshare(ref);
    KeptFrame& f = *ref;
    if (!FrameGuard::open_kept(f.sealed, f.bytes.data(), f.bytes.size()))
        throw std::logic_error("a kept frame no longer opens under the key it was sealed with");
    f.sealed = SealedUnder{};
    f.bytes.resize(f.bytes.size() - kFrameTagSize);
}

// A bounded stack of spare kept frames. take() gives the most recently
// returned one (likeliest still in cache), its bytes sized to n with room for
// `room` bytes, contents unspecified; give() keeps only a frame no transport
// still holds.
class KeptFramePool {
  public:
    static constexpr size_t kMaxSpares = 128;
    static constexpr size_t kMaxSpareCapacity = 64 * 1024 + 256;
    static constexpr size_t kMaxSpareBytes = 1 << 20;  // per pool (per session)

    KeptFrameRef take(size_t n, size_t room) {
        KeptFrameRef f;
        if (spares_.empty()) {
            f = std::make_shared<KeptFrame>();
        } else {
            f = std::move(spares_.back());
            spares_.pop_back();
            bytes_ -= f->bytes.capacity();
        }
        f->bytes.reserve(room);
        f->bytes.resize(n);
        return f;
    }
    void give(KeptFrameRef&& f) {
        if (f.use_count() == 1 && spares_.size() < kMaxSpares &&
            f->bytes.capacity() <= kMaxSpareCapacity &&
            bytes_ + f->bytes.capacity() <= kMaxSpareBytes) {
            f->sealed = SealedUnder{};
            bytes_ += f->bytes.capacity();
            spares_.push_back(std::move(f));
        }
        f.reset();
    }
    size_t spares() const { return spares_.size(); }

  private:
    std::vector<KeptFrameRef> spares_;
    size_t bytes_ = 0;  // capacity held by the spares
};

}  // namespace pgrac::ic
