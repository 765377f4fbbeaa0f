// Bytes a TCP connection accepted but could not write yet, frame by frame,
// written oldest first in vectored batches. A frame's pieces are copied, but
// those of a frame kept for resending (push_kept) are held by reference to
// the kept frame: the session keeps it anyway, so queueing it costs no copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <sys/uio.h>
#include <vector>

namespace pgrac::tiers {

class TcpSendQueue {
  public:
    bool empty() const { return frames_.empty(); }
    size_t bytes() const { return bytes_; }

    // Copies one frame given as iov[0..iovcnt), minus its first `skip` bytes.
    void push(const iovec* iov, int iovcnt, size_t skip);
    // As push(), but the pieces that lie in the kept_len bytes at kept.get()
    // are held by reference (`kept` lives as long as the frame is queued),
    // not copied. True if some were; a frame of more pieces than a queued
    // frame holds is copied whole.
    bool push_kept(const iovec* iov, int iovcnt, size_t skip, std::shared_ptr<const uint8_t> kept,
                   size_t kept_len);
    // Points out[0..max) at the queued bytes, oldest first; returns the count.
    int gather(iovec* out, int max) const;
    // Drops n written bytes from the front; returns how many frames completed.
    size_t consume(size_t n);
    void clear();

  private:
    // A frame's header, payload and tag are at most three pieces.
    static constexpr int kMaxPieces = 4;
    struct Frame {
        std::vector<uint8_t> own;             // the copied pieces, back to back
        std::shared_ptr<const uint8_t> kept;  // what the other pieces point into
        iovec piece[kMaxPieces];
        int pieces = 0;
        size_t size = 0;
    };
    std::deque<Frame> frames_;
    size_t head_offset_ = 0;  // bytes of frames_.front() already written
    size_t bytes_ = 0;
};

}  // namespace pgrac::tiers
