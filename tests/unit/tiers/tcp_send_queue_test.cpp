// TcpSendQueue: a frame kept for resending is queued by reference (its
// pieces inside the kept frame point into it, the rest is copied), written
// out across piece and frame boundaries, and let go once written.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "tiers/tcp/send_queue.hpp"

namespace pgrac::tiers {
namespace {

// Everything gather() points at, in order.
std::vector<uint8_t> queued(const TcpSendQueue& q) {
    iovec iov[64];
    const int n = q.gather(iov, 64);
    std::vector<uint8_t> out;
    for (int i = 0; i < n; ++i) {
        const auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
        out.insert(out.end(), p, p + iov[i].iov_len);
    }
    return out;
}

std::shared_ptr<std::vector<uint8_t>> kept_frame(size_t n, uint8_t seed) {
    auto f = std::make_shared<std::vector<uint8_t>>(n);
    for (size_t i = 0; i < n; ++i) (*f)[i] = static_cast<uint8_t>(seed + i * 13);
    return f;
}

TEST(TcpSendQueue, KeptPiecesAreReferencedAndTheRestCopied) {
    auto frame = kept_frame(1000, 1);
    const std::shared_ptr<const uint8_t> kept(frame, frame->data());
    std::vector<uint8_t> hdr(24, 0xab), tag(16, 0xcd);
    iovec iov[3] = {{hdr.data(), hdr.size()}, {frame->data() + 24, 976}, {tag.data(), tag.size()}};
    TcpSendQueue q;
    ASSERT_TRUE(q.push_kept(iov, 3, 0, kept, frame->size()));
    EXPECT_EQ(q.bytes(), 24u + 976 + 16);
    iovec out[8];
    ASSERT_EQ(q.gather(out, 8), 3);
    EXPECT_NE(out[0].iov_base, hdr.data()) << "the header is copied";
    EXPECT_EQ(out[1].iov_base, frame->data() + 24) << "the payload is not";
    EXPECT_NE(out[2].iov_base, tag.data());
    std::vector<uint8_t> want(hdr);
    want.insert(want.end(), frame->begin() + 24, frame->end());
    want.insert(want.end(), tag.begin(), tag.end());
    std::memset(hdr.data(), 0, hdr.size());  // the caller's stack, reused at once
    std::memset(tag.data(), 0, tag.size());
    EXPECT_EQ(queued(q), want);
    EXPECT_EQ(frame.use_count(), 3) << "the queue holds the kept frame";
    EXPECT_EQ(q.consume(want.size()), 1u);
    EXPECT_TRUE(q.empty());
    EXPECT_EQ(frame.use_count(), 2) << "let go once written";
}

TEST(TcpSendQueue, WrittenBytesAreSkippedAcrossPiecesAndFrames) {
    auto one = kept_frame(300, 2), two = kept_frame(500, 3);
    std::vector<uint8_t> hdr(24, 0x11);
    TcpSendQueue q;
    iovec a[2] = {{hdr.data(), 24}, {one->data() + 24, 276}};
    // The first write took the header and 6 payload bytes.
    ASSERT_TRUE(q.push_kept(a, 2, 30, std::shared_ptr<const uint8_t>(one, one->data()), 300));
    iovec b{two->data(), two->size()};
    ASSERT_TRUE(q.push_kept(&b, 1, 0, std::shared_ptr<const uint8_t>(two, two->data()), 500));
    std::vector<uint8_t> want(one->begin() + 30, one->end());
    want.insert(want.end(), two->begin(), two->end());
    EXPECT_EQ(q.bytes(), want.size());
    EXPECT_EQ(queued(q), want);
    iovec out[4];
    ASSERT_EQ(q.gather(out, 4), 2);
    EXPECT_EQ(out[0].iov_base, one->data() + 30);
    // Part of a frame, then the rest and part of the next.
    EXPECT_EQ(q.consume(100), 0u);
    EXPECT_EQ(queued(q), std::vector<uint8_t>(want.begin() + 100, want.end()));
    EXPECT_EQ(q.consume(270 - 100 + 7), 1u);
    EXPECT_EQ(queued(q), std::vector<uint8_t>(two->begin() + 7, two->end()));
    EXPECT_EQ(one.use_count(), 1);
    q.clear();
    EXPECT_EQ(two.use_count(), 1);
}

TEST(TcpSendQueue, PiecesOutsideTheKeptFrameOrTooManyAreCopied) {
    auto frame = kept_frame(200, 4);
    std::vector<uint8_t> other(200, 0x77);
    TcpSendQueue q;
    iovec outside{other.data(), other.size()};
    EXPECT_FALSE(q.push_kept(&outside, 1, 0, std::shared_ptr<const uint8_t>(frame, frame->data()),
                             frame->size()))
        << "nothing in the kept frame: nothing referenced";
    EXPECT_EQ(frame.use_count(), 1);
    // Straddling the end of the kept range: copied.
    iovec straddle{frame->data() + 150, 50};
    EXPECT_FALSE(
        q.push_kept(&straddle, 1, 0, std::shared_ptr<const uint8_t>(frame, frame->data()), 170));
    // Five pieces: more than a queued frame holds, so copied whole.
    iovec five[5];
    for (int i = 0; i < 5; ++i) five[i] = iovec{frame->data() + 40 * i, 40};
    EXPECT_FALSE(q.push_kept(five, 5, 10, std::shared_ptr<const uint8_t>(frame, frame->data()),
                             frame->size()));
    EXPECT_EQ(frame.use_count(), 1);
    std::vector<uint8_t> want = other;
    want.insert(want.end(), frame->begin() + 150, frame->end());
    want.insert(want.end(), frame->begin() + 10, frame->end());
    std::memset(other.data(), 0, other.size());
    std::vector<uint8_t> original = *frame;
    std::memset(frame->data(), 0, frame->size());
    EXPECT_EQ(queued(q), want) << "the copies do not change with their sources";
    (void)original;
}

}  // namespace
}  // namespace pgrac::tiers
