// The stub tier: accepts startup calls, refuses every connection clearly.
#include <gtest/gtest.h>

#include <string>

#include "tiers/transports.hpp"

using namespace pgrac;
using namespace pgrac::tiers;

namespace {

struct CountingHandler : TransportHandler {
    int calls = 0;
    void on_connected(ConnId, bool, const std::string&) override { ++calls; }
    void on_accepted(ConnId, const std::string&) override { ++calls; }
    void on_frame(ConnId, const ic::FrameHeader&, const uint8_t*) override { ++calls; }
    void on_closed(ConnId, const std::string&, ic::FrameError) override { ++calls; }
};

}  // namespace

TEST(StubTransport, HasNoNetwork) {
    CountingHandler handler;
    auto t = make_stub_transport(handler);
    ASSERT_NE(t, nullptr);
    EXPECT_STREQ(t->name(), "stub");
    std::string error;
    EXPECT_TRUE(t->listen("127.0.0.1", 5432, &error));
    EXPECT_EQ(t->connect("127.0.0.1", 5432, &error), 0u);
    EXPECT_EQ(error,
              "the stub tier has no network: node-to-node traffic needs tier3 (TCP) or an RDMA "
              "tier");
    EXPECT_EQ(t->wait_fd(), -1);
    EXPECT_EQ(t->max_payload(), ic::kMaxFramePayload);

    uint8_t header[ic::kFrameHeaderSize] = {};
    iovec iov{header, sizeof header};
    EXPECT_FALSE(t->send(1, &iov, 1));
    EXPECT_EQ(t->queued_bytes(1), 0u);
    t->close(1);
    t->poll(0);
    EXPECT_EQ(handler.calls, 0);

    const TransportCounters c = t->counters();
    EXPECT_EQ(c.frames_sent + c.frames_recv + c.bytes_sent + c.bytes_recv + c.send_calls +
                  c.cq_overflows + c.qp_errors,
              0u);
}
