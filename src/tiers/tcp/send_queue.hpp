// Bytes a TCP connection accepted but could not write yet: an owned copy of
// each frame (or of the part its first write left over), written oldest first
// in vectored batches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <sys/uio.h>
#include <vector>

namespace pgrac::tiers {

class TcpSendQueue {
  public:
    bool empty() const { return frames_.empty(); }
    size_t bytes() const { return bytes_; }

    // Copies one frame given as iov[0..iovcnt), minus its first `skip` bytes.
    void push(const iovec* iov, int iovcnt, size_t skip);
    // Points out[0..max) at the queued bytes, oldest first; returns the count.
    int gather(iovec* out, int max) const;
    // Drops n written bytes from the front; returns how many frames completed.
    size_t consume(size_t n);
    void clear();

  private:
    std::deque<std::vector<uint8_t>> frames_;
    size_t head_offset_ = 0;  // bytes of frames_.front() already written
    size_t bytes_ = 0;
};

}  // namespace pgrac::tiers
