#include "tiers/tcp/send_queue.hpp"

#include <algorithm>
#include <utility>

namespace pgrac::tiers {

namespace {

bool inside(const iovec& v, const uint8_t* begin, size_t len) {
    const auto* p = static_cast<const uint8_t*>(v.iov_base);
    return begin != nullptr && p >= begin && v.iov_len <= len &&
           static_cast<size_t>(p - begin) <= len - v.iov_len;
}

}  // namespace

void TcpSendQueue::push(const iovec* iov, int iovcnt, size_t skip) {
    (void)push_kept(iov, iovcnt, skip, nullptr, 0);
}

bool TcpSendQueue::push_kept(const iovec* iov, int iovcnt, size_t skip,
                             std::shared_ptr<const uint8_t> kept, size_t kept_len) {
    // The pieces still to write: the first `skip` bytes went out already.
    iovec left[kMaxPieces];
    int n = 0;
    bool fits = true;
    size_t total = 0;
    for (int i = 0; i < iovcnt; ++i) {
        const size_t skipped = std::min(skip, iov[i].iov_len);
        skip -= skipped;
        const size_t len = iov[i].iov_len - skipped;
        if (len == 0) continue;
        total += len;
        if (n == kMaxPieces) {
            fits = false;
            continue;
        }
        left[n++] = iovec{static_cast<uint8_t*>(iov[i].iov_base) + skipped, len};
    }
    Frame f;
    f.size = total;
    bool referenced = false;
    if (fits && kept != nullptr) {
        size_t own = 0;
        for (int i = 0; i < n; ++i)
            if (!inside(left[i], kept.get(), kept_len)) own += left[i].iov_len;
        f.own.reserve(own);  // no reallocation below: the pieces' pointers stay good
        for (int i = 0; i < n; ++i) {
            if (inside(left[i], kept.get(), kept_len)) {
                f.piece[f.pieces++] = left[i];
                referenced = true;
                continue;
            }
            const auto* p = static_cast<const uint8_t*>(left[i].iov_base);
            const size_t at = f.own.size();
            f.own.insert(f.own.end(), p, p + left[i].iov_len);
            f.piece[f.pieces++] = iovec{f.own.data() + at, left[i].iov_len};
        }
        if (referenced) f.kept = std::move(kept);
    } else {
        // Copied whole, into one piece.
        f.own.reserve(total);
        size_t to_skip = 0;
        for (int i = 0; i < iovcnt; ++i) to_skip += iov[i].iov_len;
        to_skip -= total;  // the bytes already written
        for (int i = 0; i < iovcnt; ++i) {
            const auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
            const size_t skipped = std::min(to_skip, iov[i].iov_len);
            to_skip -= skipped;
            f.own.insert(f.own.end(), p + skipped, p + iov[i].iov_len);
        }
        f.piece[0] = iovec{f.own.data(), f.own.size()};
        f.pieces = f.own.empty() ? 0 : 1;
    }
    bytes_ += f.size;
    frames_.push_back(std::move(f));
    return referenced;
}

int TcpSendQueue::gather(iovec* out, int max) const {
    int n = 0;
    size_t skip = head_offset_;
    for (auto it = frames_.begin(); it != frames_.end() && n < max; ++it) {
        for (int i = 0; i < it->pieces && n < max; ++i) {
            const iovec& p = it->piece[i];
            if (skip >= p.iov_len) {
                skip -= p.iov_len;
                continue;
            }
            out[n].iov_base = static_cast<uint8_t*>(p.iov_base) + skip;
            out[n].iov_len = p.iov_len - skip;
            skip = 0;
            ++n;
        }
    }
    return n;
}

size_t TcpSendQueue::consume(size_t n) {
    size_t completed = 0;
    bytes_ -= n;
    while (n > 0) {
        const size_t left = frames_.front().size - head_offset_;
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
