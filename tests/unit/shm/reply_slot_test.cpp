// Reply slots (shared_state.hpp): complete_slot delivers a reply only to the
// RPC it answers. A late reply for an older rpc_id of the same slot, a reply
// after the requester gave up (Idle), a second reply to an RPC already Done
// and a reply naming another slot are all refused and leave the slot as it
// was. A reply lands inline or in the reply pool chunks the requester
// reserved (reply_pool.hpp), byte for byte, and one longer than that space is
// cut there with its full length kept (the requester reports it as
// PGRAC_IC_REPLY_TOO_BIG) without touching anyone else's chunk.
// The owner's side follows src/capi/rpc.cpp (arm: generation + 1, rpc_id, Waiting;
// give up: Waiting -> Idle).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "ic/base/atomics.hpp"
#include "ic/shm/shared_state.hpp"

using namespace pgrac::ic;

namespace {

constexpr uint32_t kSlotNo = 5;

// A real shared region (shared_init), small: a few slots and a 16-chunk pool.
struct Region {
    Region() {
        sizing.n_lms = 1;
        sizing.n_slots = 8;
        sizing.outbound_ring_bytes = 1u << 16;
        sizing.inbox_ring_bytes = 1u << 16;
        sizing.reply_pool_chunks = 16;
        bytes.assign(shared_size(sizing) + 64, 0);
        void* p = bytes.data() + (64 - reinterpret_cast<uintptr_t>(bytes.data()) % 64) % 64;
        shm = shared_init(p, sizing);
    }
    SharedSizing sizing;
    std::vector<uint8_t> bytes;
    IcShared* shm;
};

uint32_t state_of(const ReplySlot& s) {
    return load_acquire(&s.state);
}
constexpr uint32_t st(SlotState s) {
    return static_cast<uint32_t>(s);
}

// Arms the slot for its next RPC as src/capi/rpc.cpp does; returns the rpc_id.
uint64_t arm(ReplySlot* slot, uint32_t slot_no = kSlotNo) {
    const uint32_t gen = slot->generation + 1;
    slot->generation = gen;
    const uint64_t rpc_id = make_rpc_id(slot_no, gen);
    store_release(&slot->rpc_id, rpc_id);
    store_release(&slot->state, st(SlotState::Waiting));
    return rpc_id;
}

// The requester gives up: Waiting -> Idle (src/capi/rpc.cpp give_up).
bool give_up(ReplySlot* slot) {
    uint32_t expected = st(SlotState::Waiting);
    return compare_exchange(&slot->state, &expected, st(SlotState::Idle));
}

struct SlotFixture : ::testing::Test {
    void SetUp() override {
        slot = reply_slot(region.shm, kSlotNo);
        // What a refused reply must not overwrite.
        std::memset(slot->inline_data, 0xAB, 64);
        slot->len = 7;
        slot->status = 12345;
    }
    bool untouched() const {
        for (int i = 0; i < 64; i++)
            if (slot->inline_data[i] != 0xAB) return false;
        return slot->len == 7 && slot->status == 12345;
    }
    // Done with this reply in it.
    ::testing::AssertionResult holds(uint32_t status, const uint8_t* data, uint32_t len) const {
        if (state_of(*slot) != st(SlotState::Done))
            return ::testing::AssertionFailure() << "state " << state_of(*slot) << ", not Done";
        std::vector<uint8_t> got(len);
        read_slot(region.shm, slot, got.data(), len);
        if (slot->status != status || slot->len != len || std::memcmp(got.data(), data, len) != 0)
            return ::testing::AssertionFailure()
                   << "status " << slot->status << " and " << slot->len
                   << " bytes, expected status " << status << " and " << len
                   << " bytes (or other bytes)";
        return ::testing::AssertionSuccess();
    }
    Region region;
    ReplySlot* slot = nullptr;
    const uint8_t body[4] = {1, 2, 3, 4};
};

}  // namespace

TEST_F(SlotFixture, DeliversTheReplyOfTheArmedRpc) {
    const uint64_t id = arm(slot);
    ASSERT_TRUE(complete_slot(region.shm, slot, id, PGRAC_IC_OK, body, sizeof body));
    EXPECT_TRUE(holds(PGRAC_IC_OK, body, sizeof body));
}

TEST_F(SlotFixture, LateReplyForAnOlderRpcIdIsRefused) {
    const uint64_t old_id = arm(slot);
    ASSERT_TRUE(give_up(slot));  // timed out
    const uint64_t new_id = arm(slot);
    ASSERT_NE(old_id, new_id);
    ASSERT_EQ(rpc_slot(old_id), rpc_slot(new_id));  // the same slot, an older generation

    EXPECT_FALSE(complete_slot(region.shm, slot, old_id, PGRAC_IC_OK, body, sizeof body));
    EXPECT_EQ(state_of(*slot), st(SlotState::Waiting)) << "the newer RPC still waits";
    EXPECT_TRUE(untouched()) << "the late reply wrote into the slot";

    // The newer RPC's own reply still lands.
    const uint8_t mine[2] = {9, 9};
    ASSERT_TRUE(complete_slot(region.shm, slot, new_id, PGRAC_IC_OK, mine, sizeof mine));
    EXPECT_TRUE(holds(PGRAC_IC_OK, mine, sizeof mine));
}

TEST_F(SlotFixture, ReplyAfterTheRequesterGaveUpIsDropped) {
    const uint64_t id = arm(slot);
    ASSERT_TRUE(give_up(slot));
    EXPECT_FALSE(complete_slot(region.shm, slot, id, PGRAC_IC_OK, body, sizeof body));
    EXPECT_EQ(state_of(*slot), st(SlotState::Idle)) << "a dropped reply re-armed the slot";
    EXPECT_TRUE(untouched());
}

TEST_F(SlotFixture, SecondReplyToAnRpcAlreadyDoneIsRefused) {
    const uint64_t id = arm(slot);
    ASSERT_TRUE(complete_slot(region.shm, slot, id, PGRAC_IC_OK, body, sizeof body));
    const uint8_t other[3] = {7, 7, 7};
    EXPECT_FALSE(complete_slot(region.shm, slot, id, PGRAC_IC_PEER_RESET, other, sizeof other));
    EXPECT_TRUE(holds(PGRAC_IC_OK, body, sizeof body)) << "the second reply replaced the first";
}

TEST_F(SlotFixture, ReplyNamingAnotherSlotIsRefused) {
    const uint64_t id = arm(slot);
    const uint64_t other_slot = make_rpc_id(kSlotNo + 1, static_cast<uint32_t>(id));
    EXPECT_FALSE(complete_slot(region.shm, slot, other_slot, PGRAC_IC_OK, body, sizeof body));
    EXPECT_EQ(state_of(*slot), st(SlotState::Waiting));
    EXPECT_TRUE(untouched());
}

TEST_F(SlotFixture, ReplyLongerThanTheInlineSpaceIsCutAndKeepsItsLength) {
    const uint64_t id = arm(slot);
    std::vector<uint8_t> big(kReplyInlineBytes + 100, 0x5A);
    ASSERT_TRUE(complete_slot(region.shm, slot, id, PGRAC_IC_OK, big.data(),
                              static_cast<uint32_t>(big.size())));
    EXPECT_EQ(state_of(*slot), st(SlotState::Done));
    EXPECT_EQ(slot->len, big.size()) << "the requester must see that it did not fit";
    EXPECT_EQ(reply_pool_in_use(reply_pool(region.shm)), 0u);
}

// A block-sized reply goes through the pool: the requester reserves chunks,
// the reply lands across them in order, and the chunks go back after.
TEST_F(SlotFixture, LargeReplyLandsInReservedChunksByteForByte) {
    ReplyPoolShared* pool = reply_pool(region.shm);
    ASSERT_TRUE(slot_reserve(region.shm, slot, 3 * kReplyChunkBytes));
    EXPECT_EQ(slot->n_chunks, 3u);
    EXPECT_EQ(reply_pool_in_use(pool), 3u);
    const uint64_t id = arm(slot);
    std::vector<uint8_t> reply(2 * kReplyChunkBytes + 1234);
    for (size_t i = 0; i < reply.size(); i++) reply[i] = static_cast<uint8_t>(i * 31 + 7);
    ASSERT_TRUE(complete_slot(region.shm, slot, id, PGRAC_IC_OK, reply.data(),
                              static_cast<uint32_t>(reply.size())));
    EXPECT_TRUE(holds(PGRAC_IC_OK, reply.data(), static_cast<uint32_t>(reply.size())));
    store_release(&slot->state, st(SlotState::Idle));
    slot_release(region.shm, slot);
    EXPECT_EQ(slot->n_chunks, 0u);
    EXPECT_EQ(reply_pool_in_use(pool), 0u);
}

// A reply longer than the reserved chunks stops at their end: the chunk that
// another requester holds keeps its bytes.
TEST_F(SlotFixture, ReplyLongerThanItsChunksNeverWritesPastThem) {
    ReplySlot* other = reply_slot(region.shm, kSlotNo + 1);
    ASSERT_TRUE(slot_reserve(region.shm, slot, kReplyChunkBytes));
    ASSERT_TRUE(slot_reserve(region.shm, other, kReplyChunkBytes));
    uint8_t* theirs = reply_pool_chunk(reply_pool(region.shm), other->chunks[0]);
    std::memset(theirs, 0xCD, kReplyChunkBytes);
    const uint64_t id = arm(slot);
    std::vector<uint8_t> big(PGRAC_IC_MAX_MESSAGE, 0x11);
    ASSERT_TRUE(complete_slot(region.shm, slot, id, PGRAC_IC_OK, big.data(),
                              static_cast<uint32_t>(big.size())));
    EXPECT_EQ(slot->len, static_cast<uint32_t>(PGRAC_IC_MAX_MESSAGE));
    for (uint32_t i = 0; i < kReplyChunkBytes; i++)
        ASSERT_EQ(theirs[i], 0xCD) << "byte " << i << " of another requester's chunk";
    uint8_t mine[kReplyChunkBytes];
    read_slot(region.shm, slot, mine, sizeof mine);
    EXPECT_EQ(mine[0], 0x11);
    EXPECT_EQ(mine[kReplyChunkBytes - 1], 0x11);
}

TEST_F(SlotFixture, ShortPoolRefusesAllOrNothingAndCountsIt) {
    ReplyPoolShared* pool = reply_pool(region.shm);
    ReplySlot* a = reply_slot(region.shm, 0);
    ReplySlot* b = reply_slot(region.shm, 1);
    ASSERT_TRUE(slot_reserve(region.shm, a, PGRAC_IC_MAX_MESSAGE));      // 8 of 16
    ASSERT_TRUE(slot_reserve(region.shm, b, 6 * kReplyChunkBytes));      // 14 of 16
    EXPECT_FALSE(slot_reserve(region.shm, slot, 3 * kReplyChunkBytes));  // needs 3, 2 free
    EXPECT_EQ(slot->n_chunks, 0u);
    EXPECT_EQ(reply_pool_in_use(pool), 14u) << "a refused reservation kept chunks";
    EXPECT_EQ(pool->refusals, 1u);
    EXPECT_TRUE(slot_reserve(region.shm, slot, 100)) << "an inline reply needs no chunk";
    slot_release(region.shm, a);
    ASSERT_TRUE(slot_reserve(region.shm, slot, 3 * kReplyChunkBytes));
    EXPECT_EQ(pool->peak_in_use, 14u);
    // Every chunk is held once: no two slots share one.
    std::vector<int> owners(16, 0);
    for (uint32_t i = 0; i < b->n_chunks; i++) owners.at(b->chunks[i])++;
    for (uint32_t i = 0; i < slot->n_chunks; i++) owners.at(slot->chunks[i])++;
    for (int o : owners) EXPECT_LE(o, 1);
}

TEST(ReplyPool, ChunksForACapacity) {
    EXPECT_EQ(reply_chunks_for(0), 0u);
    EXPECT_EQ(reply_chunks_for(kReplyInlineBytes), 0u);
    EXPECT_EQ(reply_chunks_for(kReplyInlineBytes + 1), 1u);
    EXPECT_EQ(reply_chunks_for(kReplyChunkBytes), 1u);
    EXPECT_EQ(reply_chunks_for(kReplyInlineBytes + kReplyChunkBytes), 1u);  // a block, headers
    EXPECT_EQ(reply_chunks_for(kReplyInlineBytes + kReplyChunkBytes + 1), 2u);
    EXPECT_EQ(reply_chunks_for(PGRAC_IC_MAX_MESSAGE), kReplyMaxChunks);
    EXPECT_EQ(reply_chunks_for(UINT32_MAX), kReplyMaxChunks);
}

// The owner keeps giving up and re-arming while another thread completes the
// slot with the rpc_id it read a moment before (the listener's late replies):
// every reply the owner sees Done must carry its own generation. A reply that
// passed the first rpc_id check before the owner re-armed, and took the slot
// (Waiting -> Filling) after, is what the second check catches.
TEST(ReplySlotRace, RearmedSlotNeverTakesAnOlderGenerationsReply) {
    Region region;
    ReplySlot* slot = reply_slot(region.shm, kSlotNo);
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> stale{0}, delivered{0};
    std::thread replier([&] {
        uint8_t b[4];
        while (!stop.load(std::memory_order_relaxed)) {
            const uint64_t id = load_acquire(&slot->rpc_id);
            if (id == 0) continue;
            const uint32_t gen = static_cast<uint32_t>(id);
            std::memcpy(b, &gen, sizeof b);
            complete_slot(region.shm, slot, id, PGRAC_IC_OK, b, sizeof b);
        }
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    uint32_t rounds = 0;
    while (std::chrono::steady_clock::now() < deadline && rounds < 2000000) {
        rounds++;
        // Disarm as src/capi/rpc.cpp does: give up (Waiting -> Idle), or wait out a
        // reply being written (Filling) and take it (Done -> Idle).
        for (;;) {
            uint32_t expected = st(SlotState::Waiting);
            if (compare_exchange(&slot->state, &expected, st(SlotState::Idle))) break;
            if (expected == st(SlotState::Idle)) break;
            if (expected == st(SlotState::Done)) {
                uint32_t got;
                std::memcpy(&got, slot->inline_data, sizeof got);
                if (got != slot->generation) stale++;
                delivered++;
                store_release(&slot->state, st(SlotState::Idle));
                break;
            }
        }
        arm(slot);
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
