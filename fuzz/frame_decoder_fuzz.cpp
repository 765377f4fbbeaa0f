// libFuzzer target: arbitrary bytes, as a peer could send them, into
// FrameStreamDecoder in uneven chunks (through write_ptr/commit and feed);
// the MessageHeader of every Message frame accepted is decoded too.
//
// Besides memory errors it checks what must hold for any input: an accepted
// frame re-encodes to the same header (so the CRC it passed is the one its
// fields give), a decodable MessageHeader re-encodes to the same bytes, a
// decoder with a lower payload limit accepts a prefix of the same frames, and
// an error is final.
#include <cstdint>
#include <cstring>
#include <vector>

#include "ic/wire/frame.hpp"

using namespace pgrac::ic;

namespace {

constexpr uint32_t kSmallLimit = 64;

void check(bool ok) {
    if (!ok) __builtin_trap();
}

struct Accepted {
    FrameHeader h;
    std::vector<uint8_t> payload;
};

void take_frames(FrameStreamDecoder& d, std::vector<Accepted>* out) {
    FrameHeader h;
    const uint8_t* payload;
    while (d.next(&h, &payload)) {
        uint8_t header[kFrameHeaderSize];
        FrameHeader again = h;
        encode_frame_header(again, payload, header);
        check(again.crc == h.crc);
        check(verify_frame_crc(header, payload, h.payload_len) == FrameError::None);

        if (h.type == FrameType::Message) {
            check(h.payload_len >= kMessageHeaderSize);
            MessageHeader m;
            if (decode_message_header(payload, h.payload_len, &m) == FrameError::None) {
                uint8_t bytes[kMessageHeaderSize];
                encode_message_header(m, bytes);
                check(std::memcmp(bytes, payload, kMessageHeaderSize) == 0);
            }
        } else {
            check(h.seq == 0);
        }
        out->push_back({h, std::vector<uint8_t>(payload, payload + h.payload_len)});
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FrameStreamDecoder full, small(kSmallLimit);
    std::vector<Accepted> full_frames, small_frames;
    size_t pos = 0;
    bool use_feed = false;
    while (pos < size) {
        // Chunk sizes from the data itself, so the fuzzer explores them too.
        const size_t n = std::min<size_t>(1 + (data[pos] * 131u + pos) % 300, size - pos);
        std::memcpy(full.write_ptr(n), data + pos, n);
        full.commit(n);
        if (use_feed) {
            small.feed(data + pos, n);
        } else {
            std::memcpy(small.write_ptr(n), data + pos, n);
            small.commit(n);
        }
        use_feed = !use_feed;
        pos += n;
        take_frames(full, &full_frames);
        take_frames(small, &small_frames);
    }

    check(small_frames.size() <= full_frames.size());
    for (size_t i = 0; i < small_frames.size(); ++i) {
        check(small_frames[i].h.crc == full_frames[i].h.crc);
        check(small_frames[i].payload == full_frames[i].payload);
        check(small_frames[i].h.payload_len <= kSmallLimit);
    }
    if (small.error() == FrameError::None && full.error() == FrameError::None)
        check(small_frames.size() == full_frames.size());

    FrameHeader h;
    const uint8_t* payload;
    if (full.error() != FrameError::None) check(!full.next(&h, &payload));
    return 0;
}
