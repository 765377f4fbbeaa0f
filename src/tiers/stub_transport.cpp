// The stub tier: a transport without a network, for a single instance. It
// accepts the calls an engine makes at startup and refuses every connection,
// so node-to-node traffic fails with a clear reason instead of hanging.
#include "tiers/transports.hpp"

namespace pgrac::tiers {

namespace {

class StubTransport final : public Transport {
  public:
    const char* name() const override { return "stub"; }
    bool listen(const std::string&, uint16_t, std::string*) override { return true; }
    ConnId connect(const std::string&, uint16_t, std::string* error) override {
        if (error != nullptr) {
            try {
                *error =
                    "the stub tier has no network: node-to-node traffic needs tier3 (TCP) or an "
                    "RDMA tier";
            } catch (...) {  // out of memory: the 0 still says it failed
            }
        }
        return 0;
    }
    bool send(ConnId, const iovec*, int) override { return false; }
    size_t queued_bytes(ConnId) const override { return 0; }
    void set_max_payload(ConnId, uint32_t) override {}
    void close(ConnId) override {}
    int wait_fd() const override { return -1; }
    void poll(int) override {}
    uint32_t max_payload() const override { return ic::kMaxFramePayload; }
    TransportCounters counters() const override { return {}; }
};

}  // namespace

std::unique_ptr<Transport> make_stub_transport(TransportHandler&) {
    return std::make_unique<StubTransport>();
}

}  // namespace pgrac::tiers
