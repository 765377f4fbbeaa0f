// Frames kept for resending over TCP, in every mode: queued by reference when
// the socket is full, resent after the connection dies; under `secure` sealed
// where they are kept (the cipher's pass is their only copy), opened in place
// and sealed again under the next connection's keys (opened to be voided:
// EngineProtectionTest.AnRpcToldItFailedNeverRunsAfterTheReconnect).
#include "engine/fixture.hpp"

namespace pgrac::ic::enginetest {
namespace {

class KeptFramesTest : public EngineTest, public ::testing::WithParamInterface<WireProtection> {};

// Node 2 stops reading, so node 1's socket fills and its kept frames queue by
// reference; then every connection dies with frames queued, sent but unacked
// and not yet sent. Under secure the resends cross several key generations.
TEST_P(KeptFramesTest, QueuedByReferenceThenKilledArrivesExactlyOnce) {
    make(2, [](EngineConfig& c) {
        c.identity.protection = GetParam();
        c.rekey_interval = 64;
    });
    bring_up();
    TestNode& a = node(1);
    TestNode& b = node(2);
    constexpr uint32_t kN = 3000;
    b.paused = true;
    uint32_t pushed = 0;
    const auto queued_by_reference = [&] { return a.net().counters().queued_by_reference; };
    ASSERT_TRUE(pump([&] {
        for (int k = 0; k < 20 && pushed < kN; k++, pushed++)
            if (!a.send(2, kStreamType, 3, stream_body(pushed, 8000))) return false;
        return queued_by_reference() >= 50;
    })) << "nothing queued by reference after "
        << pushed << " messages";
    a.net().kill_all();
    b.paused = false;
    ASSERT_TRUE(pump([&] {
        for (int k = 0; k < 20 && pushed < kN; k++, pushed++)
            if (!a.send(2, kStreamType, 3, stream_body(pushed, 8000))) return false;
        return pushed == kN && stream_from(b, 1).size() >= kN;
    }));
    EXPECT_EQ(stream_from(b, 1), iota_vec(kN)) << "exactly once, in order";
    for (const Received& r : b.received) {
        if (r.mh.msg_type != kStreamType) continue;
        ASSERT_EQ(r.body, stream_body(stream_index(r), 8000)) << "message " << stream_index(r);
    }
    EXPECT_GE(load_relaxed(&a.peer(2).retransmits), 1u) << "kept frames were resent";
    EXPECT_GE(load_relaxed(&a.peer(2).reconnects), 1u);
    EXPECT_EQ(b.errors(ErrorType::MalformedFrame), 0u);
    EXPECT_EQ(b.errors(ErrorType::FrameAuthFailed), 0u) << "every resent frame opened";
    ASSERT_TRUE(pump([&] { return fully_up() && quiescent(); }));
    EXPECT_EQ(load_relaxed(&a.peer(2).unacked_bytes), 0u) << "counted at the clear size";
}

INSTANTIATE_TEST_SUITE_P(Modes, KeptFramesTest,
                         ::testing::Values(WireProtection::Crc, WireProtection::Mac,
                                           WireProtection::Secure),
                         [](const auto& info) { return wire_protection_name(info.param); });

// A sealed request voided before its resend: EngineProtectionTest in engine_test.cpp.

}  // namespace
}  // namespace pgrac::ic::enginetest
