// Wire codec costs on the hot path: CRC32C, header encode/decode, and stream
// reassembly of GES-sized (64 B) and block-sized (8 KiB) frames.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "ic/wire/crc32c.hpp"
#include "ic/wire/frame.hpp"

using namespace pgrac::ic;

namespace {

std::vector<uint8_t> message_frame(size_t payload_len) {
    std::vector<uint8_t> frame(kFrameHeaderSize + payload_len, 0xAB);
    MessageHeader m;
    m.msg_type = 300;
    encode_message_header(m, frame.data() + kFrameHeaderSize);
    FrameHeader h;
    h.type = FrameType::Message;
    h.seq = 1;
    h.payload_len = static_cast<uint32_t>(payload_len);
    encode_frame_header(h, frame.data() + kFrameHeaderSize, frame.data());
    return frame;
}

void BM_Crc32c(benchmark::State& state) {
    const std::vector<uint8_t> data(static_cast<size_t>(state.range(0)), 0x5A);
    for (auto _ : state) benchmark::DoNotOptimize(crc32c(data.data(), data.size()));
    state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Crc32c)->Arg(64)->Arg(8192);

// Encode (with the CRC over a 64-byte payload) then decode and verify.
void BM_FrameHeaderEncodeDecode(benchmark::State& state) {
    const std::vector<uint8_t> payload(64, 0x11);
    uint8_t header[kFrameHeaderSize];
    FrameHeader h;
    h.type = FrameType::Message;
    h.payload_len = static_cast<uint32_t>(payload.size());
    uint32_t seq = 0;
    for (auto _ : state) {
        h.seq = ++seq;
        encode_frame_header(h, payload.data(), header);
        FrameHeader out;
        benchmark::DoNotOptimize(
            decode_frame_header(header, sizeof header, kMaxFramePayload, &out));
        benchmark::DoNotOptimize(verify_frame_crc(header, payload.data(), out.payload_len));
    }
}
BENCHMARK(BM_FrameHeaderEncodeDecode);

// Reads of 64 frames at a time copied into the decoder, as a socket read
// would, then every frame taken out; reported per frame.
void BM_StreamDecode(benchmark::State& state) {
    constexpr int kFramesPerRead = 64;
    const std::vector<uint8_t> frame = message_frame(static_cast<size_t>(state.range(0)));
    std::vector<uint8_t> stream;
    for (int i = 0; i < kFramesPerRead; ++i)
        stream.insert(stream.end(), frame.begin(), frame.end());
    FrameStreamDecoder d;
    for (auto _ : state) {
        std::memcpy(d.write_ptr(stream.size()), stream.data(), stream.size());
        d.commit(stream.size());
        FrameHeader h;
        const uint8_t* payload;
        while (d.next(&h, &payload)) benchmark::DoNotOptimize(payload);
    }
    state.SetItemsProcessed(state.iterations() * kFramesPerRead);
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(stream.size()));
}
BENCHMARK(BM_StreamDecode)->Arg(64)->Arg(8192);

}  // namespace
