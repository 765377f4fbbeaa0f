// What frame protection costs per frame, without the network: seal on one
// side and open on the other, for a 64 B message (a GES request) and an 8 KiB
// block, in each cluster.wire_protection mode. crc is the baseline (it still
// copies the payload into the sealed frame and computes the CRC).
#include <benchmark/benchmark.h>

#include <vector>

#include "ic/wire/frame_guard.hpp"

using namespace pgrac::ic;

namespace {

void BM_SealAndOpen(benchmark::State& state) {
    const auto mode = static_cast<WireProtection>(state.range(0));
    const size_t len = kMessageHeaderSize + static_cast<size_t>(state.range(1));
    SessionKeys a, b;
    a.send.fill(1);
    a.recv.fill(2);
    b.send.fill(2);
    b.recv.fill(1);
    FrameGuard tx(mode, a), rx(mode, b);
    const std::vector<uint8_t> payload(len, 0x5A);
    std::vector<uint8_t> wire;
    FrameHeader h;
    h.type = FrameType::Message;
    uint32_t seq = 0;
    for (auto _ : state) {
        h.seq = ++seq;
        tx.seal(h, payload.data(), static_cast<uint32_t>(len), &wire);
        FrameHeader got = h;
        got.payload_len = static_cast<uint32_t>(wire.size() - kFrameHeaderSize);
        const uint8_t* plain = nullptr;
        uint32_t plain_len = 0;
        if (!rx.open(got, wire.data() + kFrameHeaderSize, &plain, &plain_len))
            state.SkipWithError("open failed");
        benchmark::DoNotOptimize(plain);
    }
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(len));
    state.SetLabel(wire_protection_name(mode));
}
BENCHMARK(BM_SealAndOpen)->ArgsProduct({{0, 1, 2}, {64, 8192}});

}  // namespace
