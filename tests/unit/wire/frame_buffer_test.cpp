// KeptFramePool and unshare(): acked frames' buffers are reused, the pool
// stays bounded, and a frame a transport still holds is neither reused nor
// changed under it.
#include <gtest/gtest.h>

#include "ic/session/session.hpp"
#include "ic/wire/kept_frame.hpp"

using pgrac::ic::KeptFramePool;
using pgrac::ic::KeptFrameRef;
using pgrac::ic::Session;

TEST(KeptFramePool, GivesBackTheLastReturnedFrameResized) {
    KeptFramePool pool;
    KeptFrameRef a = pool.take(8216, 8232);
    ASSERT_EQ(a->bytes.size(), 8216u);
    EXPECT_GE(a->bytes.capacity(), 8232u) << "room for a tag";
    const uint8_t* storage = a->bytes.data();
    pool.give(std::move(a));
    EXPECT_EQ(pool.spares(), 1u);
    KeptFrameRef b = pool.take(88, 104);
    EXPECT_EQ(b->bytes.size(), 88u);
    EXPECT_EQ(b->bytes.data(), storage) << "the spare's storage is reused";
    EXPECT_EQ(pool.spares(), 0u);
    KeptFrameRef c = pool.take(8216, 8216);  // none spare: a new one
    EXPECT_EQ(c->bytes.size(), 8216u);
}

TEST(KeptFramePool, KeepsAtMostItsLimit) {
    KeptFramePool pool;
    for (size_t i = 0; i < KeptFramePool::kMaxSpares + 10; i++) pool.give(pool.take(64, 64));
    EXPECT_EQ(pool.spares(), 1u) << "one frame taken and given back again and again";
    std::vector<KeptFrameRef> many;
    for (size_t i = 0; i < KeptFramePool::kMaxSpares + 10; i++) many.push_back(pool.take(64, 64));
    for (auto& f : many) pool.give(std::move(f));
    EXPECT_EQ(pool.spares(), KeptFramePool::kMaxSpares);
    auto big = std::make_shared<pgrac::ic::KeptFrame>();
    big->bytes.resize(KeptFramePool::kMaxSpareCapacity + 1);
    pool.give(std::move(big));  // too big to keep
    EXPECT_EQ(pool.spares(), KeptFramePool::kMaxSpares);
}

TEST(KeptFramePool, AFrameATransportStillHoldsIsNotReused) {
    KeptFramePool pool;
    KeptFrameRef f = pool.take(100, 100);
    const KeptFrameRef queued = f;  // a transport's reference
    pool.give(std::move(f));
    EXPECT_EQ(pool.spares(), 0u) << "reused while a transport still sends from it";
    EXPECT_EQ(queued.use_count(), 1) << "the transport's reference is the last";
}

TEST(KeptFramePool, UnshareCopiesOnlyWhatAnotherHolds) {
    KeptFramePool pool;
    KeptFrameRef f = pool.take(10, 26);
    f->bytes.assign(10, 7);
    const uint8_t* alone = f->bytes.data();
    pgrac::ic::unshare(f);
    EXPECT_EQ(f->bytes.data(), alone) << "nobody else held it: changed in place";
    const KeptFrameRef queued = f;
    pgrac::ic::unshare(f);
    ASSERT_NE(f.get(), queued.get());
    EXPECT_EQ(f->bytes, queued->bytes);
    EXPECT_GE(f->bytes.capacity(), 26u) << "the copy keeps the room for a tag";
    const uint8_t* mine = f->bytes.data();
    f->bytes.resize(26);
    EXPECT_EQ(f->bytes.data(), mine) << "sealing the copy does not move it";
    f->bytes[0] = 9;
    EXPECT_EQ(queued->bytes[0], 7) << "the queued bytes did not change";
}

TEST(KeptFramePool, SessionRecyclesAckedFrames) {
    Session s;
    for (int i = 0; i < 3; i++) {
        KeptFrameRef f = s.take_frame(100, 116);
        f->bytes.assign(100, static_cast<uint8_t>(i));
        s.retain(s.next_seq(), std::move(f));
    }
    const uint8_t* first = (*s.frames_after(0).front().frame)->bytes.data();
    EXPECT_EQ(s.on_ack(1), 1u);
    KeptFrameRef again = s.take_frame(50, 66);
    EXPECT_EQ(again->bytes.data(), first) << "the acked frame's buffer comes back";
    // What is still retained is untouched.
    const auto held = s.frames_after(0);
    ASSERT_EQ(held.size(), 2u);
    EXPECT_EQ((*held[0].frame)->bytes[0], 1);
    EXPECT_EQ((*held[1].frame)->bytes[99], 2);
}
