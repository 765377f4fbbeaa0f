// What frame protection costs per frame, without the network: seal on one
// side and open on the other, for a 64 B message (a GES request) and an 8 KiB
// block, in each cluster.wire_protection mode. crc is the baseline (it still
// copies the payload into the sealed frame and computes the CRC). Then what
// the serving side does for one 8 KiB block before the transport takes it:
// copy the page out of the pool and seal the copy (every mode's path through
// a reply buffer), against sealing from the page where it lies, in pieces
// (the secure path in place, Engine::begin_sealed_reply).
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "ic/wire/block_wire.hpp"
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

constexpr uint32_t kBlock = kBlockSize;
constexpr uint32_t kEntry = kBlockEntryHeader;
constexpr uint32_t kReply = kBlockReplyHeader + kEntry + kBlock;  // one block's reply body

SessionKeys send_keys() {
    SessionKeys k;
    k.send.fill(3);
    k.recv.fill(4);
    return k;
}

// The copy under the content lock into the reply buffer, then the seal of the
// whole reply (crc: into the frame with its CRC; mac and secure as the engine
// does, here into one buffer).
void BM_ServeBlockCopyThenSeal(benchmark::State& state) {
    const auto mode = static_cast<WireProtection>(state.range(0));
    FrameGuard tx(mode, send_keys());
    const std::vector<uint8_t> page(kBlock, 0x5A);
    std::vector<uint8_t> reply(kMessageHeaderSize + kReply, 0);
    std::vector<uint8_t> frame(kFrameHeaderSize + reply.size() + kFrameTagSize);
    FrameHeader h;
    h.type = FrameType::Message;
    uint32_t seq = 0;
    for (auto _ : state) {
        std::memcpy(reply.data() + kMessageHeaderSize + kBlockReplyHeader + kEntry, page.data(),
                    kBlock);
        h.seq = ++seq;
        tx.seal_into(h, reply.data(), static_cast<uint32_t>(reply.size()), frame.data());
        benchmark::DoNotOptimize(frame.data());
    }
    state.SetBytesProcessed(state.iterations() * int64_t{kBlock});
    state.SetLabel(wire_protection_name(mode));
}
BENCHMARK(BM_ServeBlockCopyThenSeal)->Arg(0)->Arg(1)->Arg(2);

// secure in place: the headers, the LSN read apart, then the page's other
// 8,184 bytes sealed from where they lie (block_service.cpp, seal_blocks).
void BM_ServeBlockSealFromPool(benchmark::State& state) {
    FrameGuard tx(WireProtection::Secure, send_keys());
    const std::vector<uint8_t> page(kBlock, 0x5A);
    uint8_t head[kMessageHeaderSize + kBlockReplyHeader] = {};
    uint8_t entry[kEntry + 8] = {};
    std::vector<uint8_t> frame(kFrameHeaderSize + kMessageHeaderSize + kReply + kFrameTagSize);
    FrameHeader h;
    h.type = FrameType::Message;
    uint32_t seq = 0;
    for (auto _ : state) {
        h.seq = ++seq;
        tx.seal_begin(h, kMessageHeaderSize + kReply, frame.data());
        tx.seal_next(head, sizeof head);
        tx.seal_next(entry, sizeof entry);
        tx.seal_next(page.data() + 8, kBlock - 8);
        tx.seal_end();
        benchmark::DoNotOptimize(frame.data());
    }
    state.SetBytesProcessed(state.iterations() * int64_t{kBlock});
    state.SetLabel("secure");
}
BENCHMARK(BM_ServeBlockSealFromPool);

}  // namespace
