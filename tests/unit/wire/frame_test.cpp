// Frame codec: field round trips and wire layout, every rejection, the CRC,
// MessageHeader, and FrameStreamDecoder fed in every way a socket can.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ic/wire/crc32c.hpp"
#include "ic/wire/frame.hpp"

using namespace pgrac::ic;

namespace {

uint32_t crc_field(const std::vector<uint8_t>& frame) {
    return static_cast<uint32_t>(frame[20]) | (frame[21] << 8) | (frame[22] << 16) |
           (static_cast<uint32_t>(frame[23]) << 24);
}

std::vector<uint8_t> make_frame(FrameHeader h, const std::vector<uint8_t>& payload) {
    h.payload_len = static_cast<uint32_t>(payload.size());
    std::vector<uint8_t> out(kFrameHeaderSize);
    encode_frame_header(h, payload.data(), out.data());
    out.insert(out.end(), payload.begin(), payload.end());
    return out;
}

std::vector<uint8_t> message_payload(uint16_t msg_type, size_t body_len, uint8_t fill) {
    MessageHeader m;
    m.msg_type = msg_type;
    m.rpc_id = 0x1122334455667788ULL;
    std::vector<uint8_t> p(kMessageHeaderSize + body_len, fill);
    encode_message_header(m, p.data());
    return p;
}

FrameHeader message(uint32_t seq, uint16_t flags = 0) {
    FrameHeader h;
    h.type = FrameType::Message;
    h.seq = seq;
    h.flags = flags;
    h.src_node = 3;
    return h;
}

FrameHeader control(FrameType type) {
    FrameHeader h;
    h.type = type;
    return h;
}

// Header bytes with one field overwritten (little-endian), CRC left as is.
std::vector<uint8_t> patched(std::vector<uint8_t> frame, size_t offset, uint32_t value, int width) {
    for (int i = 0; i < width; ++i) frame[offset + i] = static_cast<uint8_t>(value >> (8 * i));
    return frame;
}

FrameError decode(const std::vector<uint8_t>& frame, uint32_t max = kMaxFramePayload) {
    FrameHeader h;
    return decode_frame_header(frame.data(), frame.size(), max, &h);
}

// Everything the decoder yields for `bytes`, fed in chunks of the given sizes.
struct Decoded {
    std::vector<FrameHeader> headers;
    std::vector<std::vector<uint8_t>> payloads;
    FrameError error = FrameError::None;
};

Decoded decode_stream(const std::vector<uint8_t>& bytes, const std::vector<size_t>& chunks,
                      uint32_t max = kMaxFramePayload) {
    FrameStreamDecoder d(max);
    Decoded out;
    size_t pos = 0, i = 0;
    while (pos < bytes.size()) {
        const size_t n = std::min(chunks[i++ % chunks.size()], bytes.size() - pos);
        std::memcpy(d.write_ptr(n), bytes.data() + pos, n);
        d.commit(n);
        pos += n;
        FrameHeader h;
        const uint8_t* payload;
        while (d.next(&h, &payload)) {
            out.headers.push_back(h);
            out.payloads.emplace_back(payload, payload + h.payload_len);
        }
    }
    out.error = d.error();
    return out;
}

}  // namespace

TEST(FrameHeader, RoundTripsEveryField) {
    FrameHeader h = message(0xA1B2C3D4u, kFlagRpcRequest | kFlagControlLane);
    h.src_node = 0xBEEF;
    h.ack = 0x0F1E2D3Cu;
    const auto payload = message_payload(42, 100, 0x77);
    const auto frame = make_frame(h, payload);

    FrameHeader d;
    ASSERT_EQ(decode_frame_header(frame.data(), frame.size(), kMaxFramePayload, &d),
              FrameError::None);
    EXPECT_EQ(d.version, kFramingVersion);
    EXPECT_EQ(d.type, FrameType::Message);
    EXPECT_EQ(d.flags, kFlagRpcRequest | kFlagControlLane);
    EXPECT_EQ(d.src_node, 0xBEEF);
    EXPECT_EQ(d.payload_len, payload.size());
    EXPECT_EQ(d.seq, 0xA1B2C3D4u);
    EXPECT_EQ(d.ack, 0x0F1E2D3Cu);
    EXPECT_EQ(verify_frame_crc(frame.data(), frame.data() + kFrameHeaderSize, d.payload_len),
              FrameError::None);
}

TEST(FrameHeader, EveryTypeRoundTrips) {
    for (uint8_t t = 1; t <= kMaxFrameType; ++t) {
        const auto type = static_cast<FrameType>(t);
        const bool is_message = type == FrameType::Message;
        FrameHeader h = is_message ? message(9) : control(type);
        const auto frame =
            make_frame(h, is_message ? message_payload(1, 0, 0) : std::vector<uint8_t>(5, 1));
        FrameHeader d;
        ASSERT_EQ(decode_frame_header(frame.data(), frame.size(), kMaxFramePayload, &d),
                  FrameError::None)
            << int(t);
        EXPECT_EQ(d.type, type);
    }
}

TEST(FrameHeader, WireLayoutIsLittleEndian) {
    FrameHeader h = message(0x04030201u, kFlagRpcReply);
    h.src_node = 0x0201;
    h.ack = 0x08070605u;
    const auto frame = make_frame(h, message_payload(1, 0x100 - kMessageHeaderSize, 0));
    const std::vector<uint8_t> expect = {'R',  'C',  1,    8,    0x02, 0x00, 0x01,
                                         0x02, 0x00, 0x01, 0x00, 0x00, 0x01, 0x02,
                                         0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
    EXPECT_EQ(std::vector<uint8_t>(frame.begin(), frame.begin() + 20), expect);
    FrameHeader d;
    ASSERT_EQ(decode_frame_header(frame.data(), frame.size(), kMaxFramePayload, &d),
              FrameError::None);
    EXPECT_EQ(d.crc, crc_field(frame));
}

TEST(FrameHeader, CrcCoversHeaderWithZeroedCrcThenPayload) {
    FrameHeader h = control(FrameType::Heartbeat);
    const std::vector<uint8_t> payload = {1, 2, 3, 4, 5};
    const auto frame = make_frame(h, payload);
    uint8_t zeroed[kFrameHeaderSize];
    std::memcpy(zeroed, frame.data(), kFrameHeaderSize);
    std::memset(zeroed + 20, 0, 4);
    const uint32_t expect =
        crc32c(payload.data(), payload.size(), crc32c(zeroed, kFrameHeaderSize));
    EXPECT_EQ(crc_field(frame), expect);
    uint8_t again[kFrameHeaderSize];
    h.payload_len = static_cast<uint32_t>(payload.size());
    encode_frame_header(h, payload.data(), again);  // and encode reports it in h
    EXPECT_EQ(h.crc, expect);
}

TEST(FrameHeader, RejectsShortInput) {
    const auto frame = make_frame(control(FrameType::Ack), {});
    FrameHeader h;
    EXPECT_EQ(decode_frame_header(frame.data(), kFrameHeaderSize - 1, kMaxFramePayload, &h),
              FrameError::Truncated);
}

TEST(FrameHeader, RejectsBadMagic) {
    const auto frame = make_frame(control(FrameType::Ack), {});
    EXPECT_EQ(decode(patched(frame, 0, 0x5243, 2)), FrameError::BadMagic);
    EXPECT_EQ(decode(patched(frame, 0, 0, 2)), FrameError::BadMagic);
}

TEST(FrameHeader, AcceptsOnlyTheFramingVersion) {
    const auto frame = make_frame(control(FrameType::Ack), {});
    for (uint32_t v : {0u, 2u, 255u})
        EXPECT_EQ(decode(patched(frame, 2, v, 1)), FrameError::BadVersion);
}

TEST(FrameHeader, RejectsUnknownTypes) {
    const auto frame = make_frame(control(FrameType::Ack), {});
    for (uint32_t t : {0u, uint32_t{kMaxFrameType} + 1, 255u})
        EXPECT_EQ(decode(patched(frame, 3, t, 1)), FrameError::BadType) << t;
}

TEST(FrameHeader, RejectsUnknownFlagBits) {
    const auto frame = make_frame(message(1), message_payload(1, 0, 0));
    for (uint32_t f : {0x0008u, 0x0100u, 0x8000u, 0xFFFFu})
        EXPECT_EQ(decode(patched(frame, 4, f, 2)), FrameError::BadFlags) << f;
}

TEST(FrameHeader, RpcFlagsOnlyOnMessagesAndNeverBoth) {
    const auto msg = make_frame(message(1), message_payload(1, 0, 0));
    EXPECT_EQ(decode(patched(msg, 4, kFlagRpcRequest, 2)), FrameError::None);
    EXPECT_EQ(decode(patched(msg, 4, kFlagRpcReply, 2)), FrameError::None);
    EXPECT_EQ(decode(patched(msg, 4, kFlagRpcRequest | kFlagRpcReply, 2)), FrameError::BadFlags);
    for (uint8_t t = 1; t <= kMaxFrameType; ++t) {
        if (static_cast<FrameType>(t) == FrameType::Message) continue;
        const auto frame = make_frame(control(static_cast<FrameType>(t)), {});
        EXPECT_EQ(decode(patched(frame, 4, kFlagRpcRequest, 2)), FrameError::BadFlags) << int(t);
        EXPECT_EQ(decode(patched(frame, 4, kFlagRpcReply, 2)), FrameError::BadFlags) << int(t);
        EXPECT_EQ(decode(patched(frame, 4, kFlagControlLane, 2)), FrameError::None) << int(t);
    }
}

TEST(FrameHeader, EnforcesThePayloadLimit) {
    const auto frame = make_frame(control(FrameType::Hello), {});
    EXPECT_EQ(decode(patched(frame, 8, 1000, 4), 1000), FrameError::None);
    EXPECT_EQ(decode(patched(frame, 8, 1001, 4), 1000), FrameError::PayloadTooLarge);
    EXPECT_EQ(decode(patched(frame, 8, kMaxFramePayload, 4)), FrameError::None);
    EXPECT_EQ(decode(patched(frame, 8, kMaxFramePayload + 1, 4)), FrameError::PayloadTooLarge);
    EXPECT_EQ(decode(patched(frame, 8, 0xFFFFFFFFu, 4)), FrameError::PayloadTooLarge);
    // A connection cannot raise the hard limit.
    EXPECT_EQ(decode(patched(frame, 8, kMaxFramePayload + 1, 4), 0xFFFFFFFFu),
              FrameError::PayloadTooLarge);
}

TEST(FrameHeader, MessageNeedsAMessageHeader) {
    const auto frame = make_frame(message(1), message_payload(1, 0, 0));
    EXPECT_EQ(decode(patched(frame, 8, kMessageHeaderSize, 4)), FrameError::None);
    EXPECT_EQ(decode(patched(frame, 8, kMessageHeaderSize - 1, 4)), FrameError::BadPayload);
    EXPECT_EQ(decode(patched(frame, 8, 0, 4)), FrameError::BadPayload);
}

TEST(FrameHeader, OnlyMessagesCarryASequenceNumber) {
    const auto hb = make_frame(control(FrameType::Heartbeat), {});
    EXPECT_EQ(decode(patched(hb, 12, 1, 4)), FrameError::BadPayload);
    const auto msg = make_frame(message(0), message_payload(1, 0, 0));
    EXPECT_EQ(decode(patched(msg, 12, 0, 4)), FrameError::None);
    EXPECT_EQ(decode(patched(msg, 12, 0xFFFFFFFFu, 4)), FrameError::None);
}

TEST(FrameHeader, CrcCatchesAnySingleByteChange) {
    const auto frame = make_frame(message(5), message_payload(7, 40, 0x33));
    const uint32_t len = static_cast<uint32_t>(frame.size() - kFrameHeaderSize);
    for (size_t pos = 0; pos < frame.size(); ++pos) {
        if (pos >= 8 && pos < 12) continue;  // payload_len: would change what is covered
        for (int x = 1; x < 256; ++x) {
            auto bad = frame;
            bad[pos] ^= static_cast<uint8_t>(x);
            ASSERT_EQ(verify_frame_crc(bad.data(), bad.data() + kFrameHeaderSize, len),
                      FrameError::BadChecksum)
                << pos << " " << x;
        }
    }
}

TEST(FrameErrorName, EveryErrorHasItsStableName) {
    const std::vector<std::string> names = {
        "none",      "truncated",         "bad_magic",    "bad_version", "bad_type",
        "bad_flags", "payload_too_large", "bad_checksum", "bad_payload"};
    ASSERT_EQ(names.size(), size_t{kFrameErrorCount});
    for (int i = 0; i < kFrameErrorCount; ++i)
        EXPECT_EQ(frame_error_name(static_cast<FrameError>(i)), names[i]);
}

TEST(FrameMessageHeader, RoundTripsEveryFieldInItsLayout) {
    MessageHeader m;
    m.msg_type = 0x0201;
    m.status = 0x0403;
    m.route_key = 0x08070605u;
    m.rpc_id = 0x100F0E0D0C0B0A09ULL;
    m.epoch = 0x14131211u;
    uint8_t buf[kMessageHeaderSize];
    encode_message_header(m, buf);
    for (size_t i = 0; i < 20; ++i) EXPECT_EQ(buf[i], i + 1) << i;
    for (size_t i = 20; i < kMessageHeaderSize; ++i) EXPECT_EQ(buf[i], 0) << i;

    MessageHeader d;
    ASSERT_EQ(decode_message_header(buf, sizeof buf, &d), FrameError::None);
    EXPECT_EQ(d.msg_type, m.msg_type);
    EXPECT_EQ(d.status, m.status);
    EXPECT_EQ(d.route_key, m.route_key);
    EXPECT_EQ(d.rpc_id, m.rpc_id);
    EXPECT_EQ(d.epoch, m.epoch);
}

TEST(FrameMessageHeader, RejectsShortInputAndNonzeroReserved) {
    uint8_t buf[kMessageHeaderSize];
    encode_message_header(MessageHeader{}, buf);
    MessageHeader d;
    EXPECT_EQ(decode_message_header(buf, kMessageHeaderSize - 1, &d), FrameError::Truncated);
    for (size_t i = 20; i < kMessageHeaderSize; ++i) {
        buf[i] = 1;
        EXPECT_EQ(decode_message_header(buf, sizeof buf, &d), FrameError::BadPayload) << i;
        buf[i] = 0;
    }
}

// ---- FrameStreamDecoder

namespace {

struct Stream {
    std::vector<uint8_t> bytes;
    std::vector<std::vector<uint8_t>> payloads;
};

// A mix of message sizes, control frames and empty payloads.
Stream sample_stream() {
    Stream s;
    uint32_t seq = 1;
    for (size_t body : {0, 1, 100, 8192, 0, 65536, 3}) {
        auto payload = message_payload(static_cast<uint16_t>(seq), body, static_cast<uint8_t>(seq));
        auto f = make_frame(message(seq++), payload);
        s.bytes.insert(s.bytes.end(), f.begin(), f.end());
        s.payloads.push_back(payload);
        auto hb = make_frame(control(FrameType::Heartbeat), {});
        s.bytes.insert(s.bytes.end(), hb.begin(), hb.end());
        s.payloads.push_back({});
    }
    return s;
}

void expect_all(const Decoded& d, const Stream& s) {
    EXPECT_EQ(d.error, FrameError::None);
    ASSERT_EQ(d.payloads.size(), s.payloads.size());
    for (size_t i = 0; i < s.payloads.size(); ++i) EXPECT_EQ(d.payloads[i], s.payloads[i]) << i;
}

}  // namespace

TEST(FrameStreamDecoder, WholeStreamAtOnce) {
    const Stream s = sample_stream();
    expect_all(decode_stream(s.bytes, {s.bytes.size()}), s);
}

TEST(FrameStreamDecoder, ByteByByte) {
    const Stream s = sample_stream();
    expect_all(decode_stream(s.bytes, {1}), s);
}

TEST(FrameStreamDecoder, RandomChunks) {
    const Stream s = sample_stream();
    std::mt19937 rng(12345);
    for (int round = 0; round < 50; ++round) {
        std::vector<size_t> chunks;
        for (int i = 0; i < 64; ++i) chunks.push_back(1 + rng() % (round % 2 ? 70000 : 300));
        expect_all(decode_stream(s.bytes, chunks), s);
    }
}

TEST(FrameStreamDecoder, FeedCopiesIn) {
    const Stream s = sample_stream();
    FrameStreamDecoder d;
    d.feed(s.bytes.data(), s.bytes.size());
    EXPECT_EQ(d.buffered(), s.bytes.size());
    FrameHeader h;
    const uint8_t* payload;
    size_t n = 0;
    while (d.next(&h, &payload)) ++n;
    EXPECT_EQ(n, s.payloads.size());
    EXPECT_EQ(d.buffered(), 0u);
    EXPECT_EQ(d.error(), FrameError::None);
}

TEST(FrameStreamDecoder, RejectsOversizeBeforeThePayloadArrives) {
    FrameHeader h = message(1);
    const auto frame = make_frame(h, message_payload(1, 5000, 0));
    FrameStreamDecoder d(4096);
    d.feed(frame.data(), kFrameHeaderSize);
    FrameHeader out;
    const uint8_t* payload;
    EXPECT_FALSE(d.next(&out, &payload));
    EXPECT_EQ(d.error(), FrameError::PayloadTooLarge);
}

TEST(FrameStreamDecoder, WaitsForTheRestOfAFrame) {
    const auto frame = make_frame(message(1), message_payload(1, 500, 9));
    FrameStreamDecoder d;
    FrameHeader h;
    const uint8_t* payload;
    d.feed(frame.data(), frame.size() - 1);
    EXPECT_FALSE(d.next(&h, &payload));
    EXPECT_EQ(d.error(), FrameError::None);
    d.feed(frame.data() + frame.size() - 1, 1);
    ASSERT_TRUE(d.next(&h, &payload));
    EXPECT_EQ(h.payload_len, frame.size() - kFrameHeaderSize);
    EXPECT_EQ(std::memcmp(payload, frame.data() + kFrameHeaderSize, h.payload_len), 0);
}

TEST(FrameStreamDecoder, ErrorIsFinal) {
    auto bad = make_frame(control(FrameType::Ack), {1, 2, 3});
    bad.back() ^= 1;
    const auto good = make_frame(control(FrameType::Ack), {});
    FrameStreamDecoder d;
    FrameHeader h;
    const uint8_t* payload;
    d.feed(bad.data(), bad.size());
    EXPECT_FALSE(d.next(&h, &payload));
    EXPECT_EQ(d.error(), FrameError::BadChecksum);
    for (int i = 0; i < 3; ++i) {
        d.feed(good.data(), good.size());
        std::memcpy(d.write_ptr(good.size()), good.data(), good.size());
        d.commit(good.size());
        EXPECT_FALSE(d.next(&h, &payload));
        EXPECT_EQ(d.error(), FrameError::BadChecksum);
    }
}

// Whatever byte of a frame is damaged, and however, the decoder reports an
// error and never yields that frame (it may wait for more bytes first, when
// the damage makes the frame look longer: padding supplies them).
TEST(FrameStreamDecoder, AnyCorruptedByteIsCaught) {
    constexpr uint32_t kLimit = 4096;
    const auto frame = make_frame(message(11, kFlagRpcRequest), message_payload(3, 40, 0x5C));
    std::vector<uint8_t> padding(kFrameHeaderSize + kLimit, 0);
    for (size_t pos = 0; pos < frame.size(); ++pos) {
        for (int x = 1; x < 256; ++x) {
            auto bad = frame;
            bad[pos] ^= static_cast<uint8_t>(x);
            bad.insert(bad.end(), padding.begin(), padding.end());
            const Decoded d = decode_stream(bad, {bad.size()}, kLimit);
            ASSERT_TRUE(d.headers.empty()) << pos << " " << x;
            ASSERT_NE(d.error, FrameError::None) << pos << " " << x;
        }
    }
}

TEST(FrameStreamDecoder, ErrorsAreThoseOfTheHeaderCheck) {
    const auto frame = make_frame(control(FrameType::Ack), {});
    std::set<FrameError> seen;
    for (auto [offset, value, width] :
         {std::tuple{0, 0x1234u, 2}, {2, 9u, 1}, {3, 0u, 1}, {4, 0x10u, 2}, {8, 0x7FFFFFFFu, 4}}) {
        const Decoded d = decode_stream(patched(frame, offset, value, width), {1});
        seen.insert(d.error);
    }
    EXPECT_EQ(seen, (std::set<FrameError>{FrameError::BadMagic, FrameError::BadVersion,
                                          FrameError::BadType, FrameError::BadFlags,
                                          FrameError::PayloadTooLarge}));
}

// Reading straight into the decoder, as the TCP tier does, in reads that end
// mid-frame: the partial frame is moved to the front of the same buffer
// instead of the buffer growing (or moving) with the stream.
TEST(FrameStreamDecoder, ZeroCopyReadsReuseTheBuffer) {
    const auto frame = make_frame(message(1), message_payload(1, 1000, 4));
    std::vector<uint8_t> stream;
    for (int i = 0; i < 3000; ++i) stream.insert(stream.end(), frame.begin(), frame.end());
    const size_t read_size = frame.size() * 3 / 2;
    FrameStreamDecoder d;
    size_t delivered = 0, pos = 0;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; pos < stream.size(); ++i) {
        const size_t n = std::min(read_size, stream.size() - pos);
        uint8_t* p = d.write_ptr(read_size);
        if (i >= 10) {  // after the buffer reached its working size
            lo = std::min(lo, reinterpret_cast<uintptr_t>(p));
            hi = std::max(hi, reinterpret_cast<uintptr_t>(p));
        }
        std::memcpy(p, stream.data() + pos, n);
        d.commit(n);
        pos += n;
        FrameHeader h;
        const uint8_t* payload;
        while (d.next(&h, &payload)) ++delivered;
        ASSERT_LT(d.buffered(), frame.size());
    }
    EXPECT_EQ(delivered, 3000u);
    EXPECT_LT(hi - lo, 4 * read_size);  // one buffer all along
}
