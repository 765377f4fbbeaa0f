// Landing offers and the credit arithmetic of frames by RDMA WRITE
// (tiers/verbs/landing.hpp), without a device. The verbs path itself is in
// verbs_transport_test.cpp (VerbsPair.*Landing*), run in the soft-RoCE VM.
#include <gtest/gtest.h>

#include <cstring>

#include "tiers/verbs/landing.hpp"

using namespace pgrac::tiers;

namespace {

LandingOffer offer(uint32_t slots = 2, uint32_t slot_bytes = 8256) {
    LandingOffer o;
    o.addr = 0x7f0000001000ull;
    o.rkey = 0x1234;
    o.slot_bytes = slot_bytes;
    o.slots = slots;
    return o;
}

}  // namespace

TEST(LandingOffer, RoundTripsThroughPrivateData) {
    uint8_t buf[56] = {};  // rdma_cm pads the private data with zeros
    encode_landing_offer(offer(4), buf);
    LandingOffer got;
    ASSERT_TRUE(decode_landing_offer(buf, sizeof buf, &got));
    EXPECT_EQ(got.addr, offer().addr);
    EXPECT_EQ(got.rkey, 0x1234u);
    EXPECT_EQ(got.slot_bytes, 8256u);
    EXPECT_EQ(got.slots, 4u);
}

TEST(LandingOffer, AnythingElseIsNoOffer) {
    uint8_t buf[kLandingOfferSize];
    LandingOffer got;
    EXPECT_FALSE(decode_landing_offer(nullptr, 0, &got)) << "no private data";
    encode_landing_offer(offer(), buf);
    EXPECT_FALSE(decode_landing_offer(buf, kLandingOfferSize - 1, &got)) << "short";
    auto bad = [&](int at, uint8_t v) {
        uint8_t b[kLandingOfferSize];
        std::memcpy(b, buf, sizeof b);
        b[at] = v;
        return !decode_landing_offer(b, sizeof b, &got);
    };
    EXPECT_TRUE(bad(0, 'X')) << "magic";
    EXPECT_TRUE(bad(4, 2)) << "another version";
    EXPECT_TRUE(bad(5, 0)) << "no slots";
    EXPECT_TRUE(bad(5, kMaxLandingSlots + 1)) << "too many slots";
    EXPECT_TRUE(bad(6, 1)) << "reserved bits";
    encode_landing_offer(offer(2, 16), buf);
    EXPECT_FALSE(decode_landing_offer(buf, sizeof buf, &got)) << "slots too small";
    encode_landing_offer(offer(2, kMaxLandingSlotBytes + 64), buf);
    EXPECT_FALSE(decode_landing_offer(buf, sizeof buf, &got)) << "slots too large";
    LandingOffer zero = offer();
    zero.addr = 0;
    encode_landing_offer(zero, buf);
    EXPECT_FALSE(decode_landing_offer(buf, sizeof buf, &got)) << "no address";
}

TEST(LandingCredits, WritesIntoFreeSlotsInTurnUntilGivenBack) {
    LandingCredits w(offer(2, 1000));
    ASSERT_TRUE(w.offered());
    EXPECT_FALSE(w.can_write(1001)) << "larger than a slot";
    ASSERT_TRUE(w.can_write(1000));
    EXPECT_EQ(w.next_addr(), offer().addr);
    EXPECT_EQ(w.next_number(), 0u);
    w.wrote();
    EXPECT_EQ(w.next_addr(), offer().addr + 1000);
    w.wrote();
    EXPECT_FALSE(w.can_write(64)) << "both slots hold frames not yet consumed";
    EXPECT_EQ(w.in_use(), 2u);
    ASSERT_TRUE(w.on_consumed(1));
    ASSERT_TRUE(w.can_write(64));
    EXPECT_EQ(w.next_addr(), offer().addr) << "slot 0 again";
    EXPECT_EQ(w.next_number(), 2u);
    EXPECT_TRUE(w.on_consumed(1)) << "the same count again (a later SEND)";
}

TEST(LandingCredits, RefusesCountsItNeverEarned) {
    LandingCredits w(offer(2));
    w.wrote();
    EXPECT_FALSE(w.on_consumed(2)) << "more than were written";
    EXPECT_FALSE(w.on_consumed(0xffffffffu)) << "a count going back";
    EXPECT_EQ(w.in_use(), 1u) << "nothing changed";
    EXPECT_TRUE(w.on_consumed(1));
    EXPECT_FALSE(w.on_consumed(0)) << "going back";
}

TEST(LandingReader, TakesOnlyTheNextFrameInItsSlot) {
    LandingReader r(3, 100);
    EXPECT_EQ(r.slot_of(0, 100), 0);
    EXPECT_EQ(r.slot_of(1, 100), -1) << "not the next frame";
    EXPECT_EQ(r.slot_of(0, 101), -1) << "larger than a slot";
    for (uint32_t i = 0; i < 4; ++i) {
        EXPECT_EQ(r.slot_of(i, 64), static_cast<long>(i % 3));
        r.consumed_one();
    }
    EXPECT_EQ(r.consumed(), 4u) << "what the next SEND says";
}

TEST(LandingReader, NoSlotsMeansEveryWriteIsOutOfTurn) {
    LandingReader none;
    EXPECT_EQ(none.slot_of(0, 24), -1);
}
