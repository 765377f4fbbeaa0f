// FrameBuffer and FramePool: acked frames' buffers are reused, and the pool
// stays bounded.
#include <gtest/gtest.h>

#include "ic/wire/frame_buffer.hpp"
#include "ic/session/session.hpp"

using pgrac::ic::FrameBuffer;
using pgrac::ic::FramePool;
using pgrac::ic::Session;

TEST(FramePool, GivesBackTheLastReturnedBufferResized) {
    FramePool pool;
    FrameBuffer a = pool.take(8216);
    ASSERT_EQ(a.size(), 8216u);
    const uint8_t* storage = a.data();
    pool.give(std::move(a));
    EXPECT_EQ(pool.spares(), 1u);
    FrameBuffer b = pool.take(88);
    EXPECT_EQ(b.size(), 88u);
    EXPECT_EQ(b.data(), storage) << "the spare's storage is reused";
    EXPECT_EQ(pool.spares(), 0u);
    FrameBuffer c = pool.take(8216);  // none spare: a new one
    EXPECT_EQ(c.size(), 8216u);
}

TEST(FramePool, KeepsAtMostItsLimit) {
    FramePool pool;
    for (size_t i = 0; i < FramePool::kMaxSpares + 10; i++) pool.give(FrameBuffer(64));
    EXPECT_EQ(pool.spares(), FramePool::kMaxSpares);
    pool.give(FrameBuffer(FramePool::kMaxSpareCapacity + 1));  // too big to keep
    EXPECT_EQ(pool.spares(), FramePool::kMaxSpares);
}

TEST(FramePool, SessionRecyclesAckedFrames) {
    Session s;
    for (int i = 0; i < 3; i++) {
        FrameBuffer f = s.take_buffer(100);
        f.assign(100, static_cast<uint8_t>(i));
        s.retain(s.next_seq(), std::move(f));
    }
    const uint8_t* first = s.frames_after(0).front().frame->data();
    EXPECT_EQ(s.on_ack(1), 1u);
    FrameBuffer again = s.take_buffer(50);
    EXPECT_EQ(again.data(), first) << "the acked frame's buffer comes back";
    // What is still retained is untouched.
    const auto held = s.frames_after(0);
    ASSERT_EQ(held.size(), 2u);
    EXPECT_EQ((*held[0].frame)[0], 1);
    EXPECT_EQ((*held[1].frame)[99], 2);
}
