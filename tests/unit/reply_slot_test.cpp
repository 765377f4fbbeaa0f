// Reply slots (shared_state.hpp): complete_slot delivers a reply only to the
// RPC it answers. A late reply for an older rpc_id of the same slot, a reply
// after the requester gave up (Idle), a second reply to an RPC already Done
// and a reply naming another slot are all refused and leave the slot as it
// was; a reply that would not fit is delivered as PGRAC_IC_REPLY_TOO_BIG.
// The owner's side follows api.cpp (arm: generation + 1, rpc_id, Waiting;
// give up: Waiting -> Idle).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "ic/atomics.hpp"
#include "ic/shared_state.hpp"

using namespace pgrac::ic;

namespace {

constexpr uint32_t kSlotNo = 5;

uint32_t state_of(const ReplySlot& s) {
    return load_acquire(&s.state);
}
constexpr uint32_t st(SlotState s) {
    return static_cast<uint32_t>(s);
}

// Arms the slot for its next RPC as api.cpp does; returns the rpc_id.
uint64_t arm(ReplySlot* slot, uint32_t slot_no = kSlotNo) {
    const uint32_t gen = slot->generation + 1;
    slot->generation = gen;
    const uint64_t rpc_id = make_rpc_id(slot_no, gen);
    store_release(&slot->rpc_id, rpc_id);
    store_release(&slot->state, st(SlotState::Waiting));
    return rpc_id;
}

// The requester gives up: Waiting -> Idle (api.cpp give_up).
bool give_up(ReplySlot* slot) {
    uint32_t expected = st(SlotState::Waiting);
    return compare_exchange(&slot->state, &expected, st(SlotState::Idle));
}

struct SlotFixture : ::testing::Test {
    void SetUp() override {
        slot = std::make_unique<ReplySlot>();
        std::memset(slot.get(), 0, sizeof(ReplySlot));
        // What a refused reply must not overwrite.
        std::memset(slot->data, 0xAB, 64);
        slot->len = 7;
        slot->status = 12345;
    }
    bool untouched() const {
        for (int i = 0; i < 64; i++)
            if (slot->data[i] != 0xAB) return false;
        return slot->len == 7 && slot->status == 12345;
    }
    // Done with this reply in it.
    ::testing::AssertionResult holds(uint32_t status, const uint8_t* data, uint32_t len) const {
        if (state_of(*slot) != st(SlotState::Done))
            return ::testing::AssertionFailure() << "state " << state_of(*slot) << ", not Done";
        if (slot->status != status || slot->len != len || std::memcmp(slot->data, data, len) != 0)
            return ::testing::AssertionFailure()
                   << "status " << slot->status << " and " << slot->len
                   << " bytes, expected status " << status << " and " << len
                   << " bytes (or other bytes)";
        return ::testing::AssertionSuccess();
    }
    std::unique_ptr<ReplySlot> slot;
    const uint8_t body[4] = {1, 2, 3, 4};
};

}  // namespace

TEST_F(SlotFixture, DeliversTheReplyOfTheArmedRpc) {
    const uint64_t id = arm(slot.get());
    ASSERT_TRUE(complete_slot(slot.get(), id, PGRAC_IC_OK, body, sizeof body));
    EXPECT_TRUE(holds(PGRAC_IC_OK, body, sizeof body));
}

TEST_F(SlotFixture, LateReplyForAnOlderRpcIdIsRefused) {
    const uint64_t old_id = arm(slot.get());
    ASSERT_TRUE(give_up(slot.get()));  // timed out
    const uint64_t new_id = arm(slot.get());
    ASSERT_NE(old_id, new_id);
    ASSERT_EQ(rpc_slot(old_id), rpc_slot(new_id));  // the same slot, an older generation

    EXPECT_FALSE(complete_slot(slot.get(), old_id, PGRAC_IC_OK, body, sizeof body));
    EXPECT_EQ(state_of(*slot), st(SlotState::Waiting)) << "the newer RPC still waits";
    EXPECT_TRUE(untouched()) << "the late reply wrote into the slot";

    // The newer RPC's own reply still lands.
    const uint8_t mine[2] = {9, 9};
    ASSERT_TRUE(complete_slot(slot.get(), new_id, PGRAC_IC_OK, mine, sizeof mine));
    EXPECT_TRUE(holds(PGRAC_IC_OK, mine, sizeof mine));
}

TEST_F(SlotFixture, ReplyAfterTheRequesterGaveUpIsDropped) {
    const uint64_t id = arm(slot.get());
    ASSERT_TRUE(give_up(slot.get()));
    EXPECT_FALSE(complete_slot(slot.get(), id, PGRAC_IC_OK, body, sizeof body));
    EXPECT_EQ(state_of(*slot), st(SlotState::Idle)) << "a dropped reply re-armed the slot";
    EXPECT_TRUE(untouched());
}

TEST_F(SlotFixture, SecondReplyToAnRpcAlreadyDoneIsRefused) {
    const uint64_t id = arm(slot.get());
    ASSERT_TRUE(complete_slot(slot.get(), id, PGRAC_IC_OK, body, sizeof body));
    const uint8_t other[3] = {7, 7, 7};
    EXPECT_FALSE(complete_slot(slot.get(), id, PGRAC_IC_PEER_RESET, other, sizeof other));
    EXPECT_TRUE(holds(PGRAC_IC_OK, body, sizeof body)) << "the second reply replaced the first";
}

TEST_F(SlotFixture, ReplyNamingAnotherSlotIsRefused) {
    const uint64_t id = arm(slot.get());
    const uint64_t other_slot = make_rpc_id(kSlotNo + 1, static_cast<uint32_t>(id));
    EXPECT_FALSE(complete_slot(slot.get(), other_slot, PGRAC_IC_OK, body, sizeof body));
    EXPECT_EQ(state_of(*slot), st(SlotState::Waiting));
    EXPECT_TRUE(untouched());
}

TEST_F(SlotFixture, OversizedReplyIsDeliveredAsTooBig) {
    const uint64_t id = arm(slot.get());
    std::vector<uint8_t> big(sizeof(slot->data) + 1, 0x5A);
    ASSERT_TRUE(
        complete_slot(slot.get(), id, PGRAC_IC_OK, big.data(), static_cast<uint32_t>(big.size())));
    EXPECT_EQ(state_of(*slot), st(SlotState::Done));
    EXPECT_EQ(slot->status, static_cast<uint32_t>(PGRAC_IC_REPLY_TOO_BIG));
    EXPECT_EQ(slot->len, 0u);
}

// The owner keeps giving up and re-arming while another thread completes the
// slot with the rpc_id it read a moment before (the listener's late replies):
// every reply the owner sees Done must carry its own generation. A reply that
// passed the first rpc_id check before the owner re-armed, and took the slot
// (Waiting -> Filling) after, is what the second check catches.
TEST(ReplySlotRace, RearmedSlotNeverTakesAnOlderGenerationsReply) {
    auto slot = std::make_unique<ReplySlot>();
    std::memset(slot.get(), 0, sizeof(ReplySlot));
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> stale{0}, delivered{0};
    std::thread replier([&] {
        uint8_t b[4];
        while (!stop.load(std::memory_order_relaxed)) {
            const uint64_t id = load_acquire(&slot->rpc_id);
            if (id == 0) continue;
            const uint32_t gen = static_cast<uint32_t>(id);
            std::memcpy(b, &gen, sizeof b);
            complete_slot(slot.get(), id, PGRAC_IC_OK, b, sizeof b);
        }
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    uint32_t rounds = 0;
    while (std::chrono::steady_clock::now() < deadline && rounds < 2000000) {
        rounds++;
        // Disarm as api.cpp does: give up (Waiting -> Idle), or wait out a
        // reply being written (Filling) and take it (Done -> Idle).
        for (;;) {
            uint32_t expected = st(SlotState::Waiting);
            if (compare_exchange(&slot->state, &expected, st(SlotState::Idle))) break;
            if (expected == st(SlotState::Idle)) break;
            if (expected == st(SlotState::Done)) {
                uint32_t got;
                std::memcpy(&got, slot->data, sizeof got);
                if (got != slot->generation) stale++;
                delivered++;
                store_release(&slot->state, st(SlotState::Idle));
                break;
            }
        }
        arm(slot.get());
        // Now and then wait for the reply, so that some are delivered even
        // when the two threads share a core.
        if (rounds % 256 == 0) {
            const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
            while (state_of(*slot) == st(SlotState::Waiting) &&
                   std::chrono::steady_clock::now() < until)
                std::this_thread::yield();
        }
    }
    stop = true;
    replier.join();
    EXPECT_EQ(stale.load(), 0u) << "of " << delivered.load() << " replies delivered in " << rounds
                                << " rounds";
    EXPECT_GT(delivered.load(), 0u);
}
