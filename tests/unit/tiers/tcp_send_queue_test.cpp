// TcpSendQueue: a frame kept for resending is queued by reference (its
// pieces inside the kept frame point into it, the rest is copied), written
// out across piece and frame boundaries, and let go once written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
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

// Random frames of up to six pieces, inside the kept frame or apart, a random
// part of each already written, against a flat model of the byte stream
// (from an adversarial review).
TEST(TcpSendQueue, RandomPiecesMatchAFlatStream) {
    std::mt19937 rng(12345);
    for (int round = 0; round < 300; ++round) {
        TcpSendQueue q;
        std::vector<uint8_t> model;  // bytes still to write, in order
        std::vector<std::shared_ptr<std::vector<uint8_t>>> frames;
        size_t frames_pushed = 0, frames_done = 0;
        std::vector<size_t> frame_ends;  // model offsets (absolute) where frames end
        size_t written_abs = 0, pushed_abs = 0;
        for (int step = 0; step < 40; ++step) {
            if (rng() % 3 != 0) {
                // A kept frame of up to 6 pieces: some inside it, some apart.
                auto kept = std::make_shared<std::vector<uint8_t>>(1 + rng() % 300);
                for (auto& b : *kept) b = static_cast<uint8_t>(rng());
                frames.push_back(kept);
                std::vector<std::vector<uint8_t>> apart;
                apart.reserve(8);
                iovec iov[8];
                const int cnt = 1 + static_cast<int>(rng() % 6);
                size_t total = 0;
                for (int i = 0; i < cnt; ++i) {
                    if (rng() % 2) {
                        const size_t off = rng() % kept->size();
                        const size_t len = rng() % (kept->size() - off + 1);
                        iov[i] = iovec{kept->data() + off, len};
                    } else {
                        apart.emplace_back(rng() % 40);
                        for (auto& b : apart.back()) b = static_cast<uint8_t>(rng());
                        iov[i] = iovec{apart.back().data(), apart.back().size()};
                    }
                    total += iov[i].iov_len;
                }
                if (total == 0) continue;           // the transport never queues an empty frame
                const size_t skip = rng() % total;  // a partial first write
                std::vector<uint8_t> flat;
                for (int i = 0; i < cnt; ++i) {
                    auto* p = static_cast<uint8_t*>(iov[i].iov_base);
                    flat.insert(flat.end(), p, p + iov[i].iov_len);
                }
                const std::shared_ptr<const uint8_t> alias(kept, kept->data());
                q.push_kept(iov, cnt, skip, rng() % 4 ? alias : nullptr, kept->size());
                for (auto& a : apart) std::fill(a.begin(), a.end(), 0xee);  // caller's, reused
                model.insert(model.end(), flat.begin() + skip, flat.end());
                pushed_abs += total - skip;
                frame_ends.push_back(pushed_abs);
                ++frames_pushed;
            } else if (!model.empty()) {
                iovec out[64];
                const int max = 1 + static_cast<int>(rng() % 7);
                const int n = q.gather(out, max);
                std::vector<uint8_t> got;
                for (int i = 0; i < n; ++i) {
                    auto* p = static_cast<uint8_t*>(out[i].iov_base);
                    ASSERT_GT(out[i].iov_len, 0u);
                    got.insert(got.end(), p, p + out[i].iov_len);
                }
                ASSERT_LE(got.size(), model.size());
                ASSERT_TRUE(std::equal(got.begin(), got.end(), model.begin()))
                    << "round " << round << " step " << step;
                const size_t w = got.empty() ? 0 : rng() % (got.size() + 1);
                const size_t done = q.consume(w);
                model.erase(model.begin(), model.begin() + static_cast<long>(w));
                written_abs += w;
                size_t expect_done = 0;
                while (frames_done + expect_done < frame_ends.size() &&
                       frame_ends[frames_done + expect_done] <= written_abs)
                    ++expect_done;
                ASSERT_EQ(done, expect_done) << "round " << round << " step " << step;
                frames_done += done;
            }
            ASSERT_EQ(q.bytes(), model.size());
            ASSERT_EQ(q.empty(), frames_done == frames_pushed);
        }
    }
}

}  // namespace
}  // namespace pgrac::tiers
