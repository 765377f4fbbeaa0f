#include "tiers/tcp/send_queue.hpp"

#include <algorithm>

namespace pgrac::tiers {

void TcpSendQueue::push(const iovec* iov, int iovcnt, size_t skip) {
    size_t total = 0;
    for (int i = 0; i < iovcnt; ++i) total += iov[i].iov_len;
    std::vector<uint8_t> frame;
    frame.reserve(total - skip);
    for (int i = 0; i < iovcnt; ++i) {
        const auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
        size_t len = iov[i].iov_len;
        const size_t skipped = std::min(skip, len);
        skip -= skipped;
        frame.insert(frame.end(), p + skipped, p + len);
    }
    bytes_ += frame.size();
    frames_.push_back(std::move(frame));
}

int TcpSendQueue::gather(iovec* out, int max) const {
    int n = 0;
    for (auto it = frames_.begin(); it != frames_.end() && n < max; ++it, ++n) {
        const size_t offset = n == 0 ? head_offset_ : 0;
        out[n].iov_base = const_cast<uint8_t*>(it->data() + offset);
        out[n].iov_len = it->size() - offset;
    }
    return n;
}

size_t TcpSendQueue::consume(size_t n) {
    size_t completed = 0;
    bytes_ -= n;
    while (n > 0) {
        const size_t left = frames_.front().size() - head_offset_;
        if (n < left) {
            head_offset_ += n;
            break;
        }
        n -= left;
        frames_.pop_front();
        head_offset_ = 0;
        ++completed;
    }
    return completed;
}

void TcpSendQueue::clear() {
    frames_.clear();
    head_offset_ = 0;
    bytes_ = 0;
}

}  // namespace pgrac::tiers
