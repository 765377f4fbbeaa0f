// FrameGuard: every mode round-trips, and in mac and secure modes any change,
// replay, reordering or loss of a frame is refused; keys roll over in step.
#include "ic/wire/frame_guard.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include <stdexcept>
#include <string>
#include <vector>

#include "ic/wire/frame.hpp"

namespace pgrac::ic {
namespace {

using Bytes = std::vector<uint8_t>;

SessionKeys keys(uint8_t a, uint8_t b) {
    SessionKeys k;
    k.send.fill(a);
    k.recv.fill(b);
    return k;
}

// A sender and a receiver that agree on the keys.
struct Pair {
    FrameGuard tx, rx;
    Pair(WireProtection m, uint64_t interval = FrameGuard::kDefaultRekeyInterval)
        : tx(m, keys(1, 2), interval), rx(m, keys(2, 1), interval) {}
};

FrameHeader message_header(uint32_t seq) {
    FrameHeader h;
    h.type = FrameType::Message;
    h.flags = kFlagRpcRequest;
    h.src_node = 3;
    h.seq = seq;
    h.ack = 7;
    return h;
}

Bytes payload(size_t n, uint8_t seed) {
    Bytes b(n);
    for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 31);
    return b;
}

// Decodes a sealed frame as a transport would (header, CRC) and opens it.
bool receive(FrameGuard& rx, const Bytes& wire, Bytes* plain) {
    FrameHeader h;
    if (decode_frame_header(wire.data(), wire.size(), kMaxFramePayload, &h) != FrameError::None)
        return false;
    if (wire.size() != kFrameHeaderSize + h.payload_len) return false;
    if (verify_frame_crc(wire.data(), wire.data() + kFrameHeaderSize, h.payload_len) !=
        FrameError::None)
        return false;
    const uint8_t* p = nullptr;
    uint32_t n = 0;
    if (!rx.open(h, wire.data() + kFrameHeaderSize, &p, &n)) return false;
    plain->assign(p, p + n);
    return true;
}

// Re-sets the CRC after a test changed bytes: only the tag may catch the change.
void fix_crc(Bytes& wire) {
    FrameHeader h;
    // A change that breaks the header is refused by the decoder already.
    if (decode_frame_header(wire.data(), wire.size(), kMaxFramePayload, &h) != FrameError::None)
        return;
    h.payload_len = static_cast<uint32_t>(wire.size() - kFrameHeaderSize);
    Bytes body(wire.begin() + kFrameHeaderSize, wire.end());
    encode_frame_header(h, body.data(), wire.data());
}

class FrameGuardModes : public ::testing::TestWithParam<WireProtection> {};

TEST_P(FrameGuardModes, RoundTripsEverySize) {
    Pair p(GetParam());
    uint32_t seq = 1;
    for (size_t n : {size_t{24}, size_t{25}, size_t{1000}, size_t{8192 + 24}, size_t{65536 + 24}}) {
        const Bytes in = payload(n, static_cast<uint8_t>(n));
        Bytes wire, out;
        p.tx.seal(message_header(seq++), in.data(), static_cast<uint32_t>(in.size()), &wire);
        EXPECT_EQ(wire.size(), kFrameHeaderSize + n + p.tx.overhead());
        ASSERT_TRUE(receive(p.rx, wire, &out)) << n;
        EXPECT_EQ(out, in);
        const bool clear =
            Bytes(wire.begin() + kFrameHeaderSize, wire.begin() + kFrameHeaderSize + n) == in;
        EXPECT_EQ(clear, GetParam() != WireProtection::Secure) << "payload in clear on the wire";
    }
    // Frames without payload (Ack) too.
    FrameHeader ack;
    ack.type = FrameType::Ack;
    Bytes wire, out;
    p.tx.seal(ack, nullptr, 0, &wire);
    ASSERT_TRUE(receive(p.rx, wire, &out));
    EXPECT_TRUE(out.empty());
}

// seal_apart (the modes that leave the payload as it is): header, payload and
// tag sent as three pieces are byte for byte what seal() makes in one buffer,
// frame after frame (the nonce advances the same way), and the receiver opens them.
TEST_P(FrameGuardModes, SealApartIsSealWithoutTheCopy) {
    if (GetParam() == WireProtection::Secure) {
        Pair p(GetParam());
        uint8_t hdr[kFrameHeaderSize], tag[kFrameTagSize];
        const Bytes in = payload(100, 1);
        EXPECT_THROW(p.tx.seal_apart(message_header(1), in.data(), 100, hdr, tag),
                     std::logic_error);
        return;
    }
    Pair one(GetParam()), apart(GetParam());
    uint32_t seq = 1;
    for (size_t n : {size_t{24}, size_t{1000}, size_t{8192 + 24}}) {
        const Bytes in = payload(n, static_cast<uint8_t>(n + 5));
        Bytes whole, out;
        one.tx.seal(message_header(seq), in.data(), static_cast<uint32_t>(n), &whole);
        Bytes hdr(kFrameHeaderSize), tag(kFrameTagSize);
        apart.tx.seal_apart(message_header(seq), in.data(), static_cast<uint32_t>(n), hdr.data(),
                            tag.data());
        seq++;
        Bytes wire = hdr;
        wire.insert(wire.end(), in.begin(), in.end());
        tag.resize(apart.tx.overhead());
        wire.insert(wire.end(), tag.begin(), tag.end());
        EXPECT_EQ(wire, whole) << n;
        ASSERT_TRUE(receive(apart.rx, wire, &out)) << n;
        EXPECT_EQ(out, in);
    }
}

INSTANTIATE_TEST_SUITE_P(AllModes, FrameGuardModes,
                         ::testing::Values(WireProtection::Crc, WireProtection::Mac,
                                           WireProtection::Secure),
                         [](const auto& info) { return wire_protection_name(info.param); });

class FrameGuardAuthenticated : public ::testing::TestWithParam<WireProtection> {};

TEST_P(FrameGuardAuthenticated, AnyChangedByteIsRefused) {
    const Bytes in = payload(200, 9);
    Pair ref(GetParam());
    Bytes wire;
    ref.tx.seal(message_header(1), in.data(), static_cast<uint32_t>(in.size()), &wire);
    for (size_t i = 0; i < wire.size(); ++i) {
        // payload_len and the CRC field are rewritten by fix_crc (a changed
        // length breaks the framing itself, which the decoder catches).
        if ((i >= 8 && i < 12) || (i >= 20 && i < 24)) continue;
        Pair p(GetParam());
        Bytes w;
        p.tx.seal(message_header(1), in.data(), static_cast<uint32_t>(in.size()), &w);
        w[i] ^= 0x40;
        fix_crc(w);
        Bytes out;
        EXPECT_FALSE(receive(p.rx, w, &out)) << "byte " << i << " changed unnoticed";
    }
}

TEST_P(FrameGuardAuthenticated, ReplayReorderAndLossAreRefused) {
    const Bytes a = payload(40, 1), b = payload(40, 2);
    {
        Pair p(GetParam());
        Bytes w1, w2, out;
        p.tx.seal(message_header(1), a.data(), 40, &w1);
        ASSERT_TRUE(receive(p.rx, w1, &out));
        EXPECT_FALSE(receive(p.rx, w1, &out)) << "replay accepted";
    }
    {
        Pair p(GetParam());
        Bytes w1, w2, out;
        p.tx.seal(message_header(1), a.data(), 40, &w1);
        p.tx.seal(message_header(2), b.data(), 40, &w2);
        EXPECT_FALSE(receive(p.rx, w2, &out)) << "reordered or lost frame accepted";
    }
    {
        // Frames from another connection's keys.
        FrameGuard tx(GetParam(), keys(5, 6)), rx(GetParam(), keys(2, 1));
        Bytes w, out;
        tx.seal(message_header(1), a.data(), 40, &w);
        EXPECT_FALSE(receive(rx, w, &out));
    }
    {
        // A frame cut short of its tag.
        Pair p(GetParam());
        FrameHeader h;
        h.type = FrameType::Ack;
        const uint8_t junk[8] = {};
        h.payload_len = 8;
        const uint8_t* plain = nullptr;
        uint32_t n = 0;
        EXPECT_FALSE(p.rx.open(h, junk, &plain, &n));
    }
}

TEST_P(FrameGuardAuthenticated, KeysRollOverInStep) {
    Pair p(GetParam(), 4);
    for (uint32_t i = 1; i <= 21; ++i) {
        const Bytes in = payload(64, static_cast<uint8_t>(i));
        Bytes w, out;
        p.tx.seal(message_header(i), in.data(), 64, &w);
        ASSERT_TRUE(receive(p.rx, w, &out)) << i;
        EXPECT_EQ(out, in);
    }
    EXPECT_EQ(p.tx.frames_sealed(), 21u);
    EXPECT_EQ(p.rx.frames_opened(), 21u);
    EXPECT_EQ(p.tx.rekeys(), 5u);  // generations 1..5 on the send side
    // A receiver that does not roll over at the same point fails there.
    FrameGuard tx(GetParam(), keys(1, 2), 4), rx(GetParam(), keys(2, 1), 8);
    const Bytes in = payload(64, 0);
    int opened = 0;
    for (uint32_t i = 1; i <= 8; ++i) {
        Bytes w, out;
        tx.seal(message_header(i), in.data(), 64, &w);
        if (!receive(rx, w, &out)) break;
        ++opened;
    }
    EXPECT_EQ(opened, 4);
}

INSTANTIATE_TEST_SUITE_P(MacAndSecure, FrameGuardAuthenticated,
                         ::testing::Values(WireProtection::Mac, WireProtection::Secure),
                         [](const auto& info) { return wire_protection_name(info.param); });

TEST(FrameGuard, CrcModeRefusesNothingTheCrcAccepts) {
    Pair p(WireProtection::Crc);
    EXPECT_EQ(p.tx.overhead(), 0u);
    const Bytes in = payload(100, 3);
    Bytes w, out;
    p.tx.seal(message_header(5), in.data(), 100, &w);
    ASSERT_TRUE(receive(p.rx, w, &out));
    ASSERT_TRUE(receive(p.rx, w, &out));  // crc mode has no replay protection
    EXPECT_EQ(out, in);
}

TEST(FrameGuard, HkdfMatchesRfc5869TestCase1) {
    const Bytes ikm(22, 0x0b);
    Bytes salt, info;
    for (int i = 0; i <= 0x0c; ++i) salt.push_back(static_cast<uint8_t>(i));
    for (int i = 0xf0; i <= 0xf9; ++i) info.push_back(static_cast<uint8_t>(i));
    const Bytes okm = hkdf_sha256(ikm, salt, info, 42);
    const std::string hex =
        "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865";
    std::string got;
    for (uint8_t b : okm) {
        char buf[3];
        std::snprintf(buf, sizeof buf, "%02x", b);
        got += buf;
    }
    EXPECT_EQ(got, hex);
}

}  // namespace
}  // namespace pgrac::ic

namespace {

// Keys for one side filled with `a` (send) and `b` (receive), and the other
// side's: its send key is this side's receive key and back.
struct KeyPair {
    pgrac::ic::SessionKeys here, there;
};
KeyPair key_pair(uint8_t a, uint8_t b) {
    KeyPair p;
    p.here.send.fill(a);
    p.here.recv.fill(b);
    p.there.send = p.here.recv;
    p.there.recv = p.here.send;
    return p;
}

}  // namespace

// seal_into writes exactly what seal() makes, in every mode, through empty
// payloads and key roll-overs, and the frame opens at the other end.
TEST(FrameGuardSealInto, IsSealByteForByte) {
    const KeyPair keys = key_pair(5, 6);
    const pgrac::ic::SessionKeys &k = keys.here, &back = keys.there;
    for (auto mode : {pgrac::ic::WireProtection::Crc, pgrac::ic::WireProtection::Mac,
                      pgrac::ic::WireProtection::Secure}) {
        pgrac::ic::FrameGuard one(mode, k, 3), into(mode, k, 3);
        pgrac::ic::FrameGuard peer(mode, back, 3);
        for (uint32_t seq = 1; seq <= 12; ++seq) {
            const size_t n = seq % 4 == 0 ? 0 : seq * 101;
            std::vector<uint8_t> in(n, static_cast<uint8_t>(seq * 7));
            pgrac::ic::FrameHeader h;
            h.type = pgrac::ic::FrameType::Message;
            h.seq = seq;
            h.src_node = 3;
            std::vector<uint8_t> whole;
            one.seal(h, in.data(), static_cast<uint32_t>(n), &whole);
            std::vector<uint8_t> room(whole.size() + 8, 0xee);
            into.seal_into(h, n == 0 ? nullptr : in.data(), static_cast<uint32_t>(n), room.data());
            ASSERT_TRUE(std::equal(whole.begin(), whole.end(), room.begin())) << seq;
            EXPECT_EQ(room[whole.size()], 0xee) << "nothing written past the frame";
            pgrac::ic::FrameHeader got = h;  // as the receiver decodes it
            got.payload_len = static_cast<uint32_t>(whole.size() - pgrac::ic::kFrameHeaderSize);
            const uint8_t* plain = nullptr;
            uint32_t plain_len = 0;
            ASSERT_TRUE(
                peer.open(got, room.data() + pgrac::ic::kFrameHeaderSize, &plain, &plain_len))
                << seq;
            ASSERT_EQ(plain_len, n);
            if (n > 0) {
                EXPECT_EQ(std::memcmp(plain, in.data(), n), 0);
            }
        }
    }
}

// open_in_place gives what open() gives, in every mode, and refuses what
// open() refuses (a flipped bit).
TEST(FrameGuardOpenInPlace, MatchesOpen) {
    const KeyPair keys = key_pair(1, 2);
    const pgrac::ic::SessionKeys &k = keys.here, &back = keys.there;
    for (auto mode : {pgrac::ic::WireProtection::Crc, pgrac::ic::WireProtection::Mac,
                      pgrac::ic::WireProtection::Secure}) {
        pgrac::ic::FrameGuard tx(mode, k), rx_apart(mode, back), rx_in_place(mode, back);
        for (uint32_t seq = 1; seq <= 5; ++seq) {
            std::vector<uint8_t> in(seq == 3 ? 0 : 8192 + seq, static_cast<uint8_t>(seq));
            pgrac::ic::FrameHeader h;
            h.type = pgrac::ic::FrameType::Message;
            h.seq = seq;
            std::vector<uint8_t> frame;
            tx.seal(h, in.data(), static_cast<uint32_t>(in.size()), &frame);
            pgrac::ic::FrameHeader got = h;
            got.payload_len = static_cast<uint32_t>(frame.size() - pgrac::ic::kFrameHeaderSize);
            std::vector<uint8_t> a(frame.begin() + pgrac::ic::kFrameHeaderSize, frame.end());
            std::vector<uint8_t> b = a;
            const uint8_t* plain = nullptr;
            uint32_t apart_len = 0, in_place_len = 0;
            ASSERT_TRUE(rx_apart.open(got, a.data(), &plain, &apart_len));
            ASSERT_TRUE(rx_in_place.open_in_place(got, b.data(), &in_place_len));
            ASSERT_EQ(in_place_len, apart_len);
            ASSERT_EQ(in_place_len, in.size());
            EXPECT_TRUE(std::equal(in.begin(), in.end(), b.begin())) << seq;
        }
        if (mode == pgrac::ic::WireProtection::Crc) continue;  // the CRC is the transport's
        std::vector<uint8_t> in(100, 7), frame;
        pgrac::ic::FrameHeader h;
        h.type = pgrac::ic::FrameType::Message;
        h.seq = 6;
        tx.seal(h, in.data(), 100, &frame);
        h.payload_len = static_cast<uint32_t>(frame.size() - pgrac::ic::kFrameHeaderSize);
        std::vector<uint8_t> p(frame.begin() + pgrac::ic::kFrameHeaderSize, frame.end());
        p[10] ^= 1;
        uint32_t len = 0;
        EXPECT_FALSE(rx_in_place.open_in_place(h, p.data(), &len)) << "a flipped bit";
    }
}

// open_into writes what open() gives into the caller's room, in every mode,
// and refuses a flipped bit.
TEST(FrameGuardOpenInto, MatchesOpen) {
    const KeyPair keys = key_pair(3, 4);
    const pgrac::ic::SessionKeys &k = keys.here, &back = keys.there;
    for (auto mode : {pgrac::ic::WireProtection::Crc, pgrac::ic::WireProtection::Mac,
                      pgrac::ic::WireProtection::Secure}) {
        pgrac::ic::FrameGuard tx(mode, k), rx(mode, back);
        for (uint32_t seq = 1; seq <= 4; ++seq) {
            std::vector<uint8_t> in(seq == 2 ? 0 : 8192 + seq, static_cast<uint8_t>(seq + 40));
            pgrac::ic::FrameHeader h;
            h.type = pgrac::ic::FrameType::Message;
            h.seq = seq;
            std::vector<uint8_t> frame;
            tx.seal(h, in.data(), static_cast<uint32_t>(in.size()), &frame);
            pgrac::ic::FrameHeader got = h;
            got.payload_len = static_cast<uint32_t>(frame.size() - pgrac::ic::kFrameHeaderSize);
            std::vector<uint8_t> out(got.payload_len + 1, 0xcd);
            uint32_t len = 0;
            ASSERT_TRUE(
                rx.open_into(got, frame.data() + pgrac::ic::kFrameHeaderSize, out.data(), &len))
                << seq;
            ASSERT_EQ(len, in.size());
            EXPECT_TRUE(std::equal(in.begin(), in.end(), out.begin())) << seq;
            EXPECT_EQ(out.back(), 0xcd) << "nothing past the frame's payload";
        }
        if (mode == pgrac::ic::WireProtection::Crc) continue;
        std::vector<uint8_t> in(300, 9), frame;
        pgrac::ic::FrameHeader h;
        h.type = pgrac::ic::FrameType::Message;
        h.seq = 5;
        tx.seal(h, in.data(), 300, &frame);
        h.payload_len = static_cast<uint32_t>(frame.size() - pgrac::ic::kFrameHeaderSize);
        frame[pgrac::ic::kFrameHeaderSize + 7] ^= 0x10;
        std::vector<uint8_t> out(h.payload_len);
        uint32_t len = 0;
        EXPECT_FALSE(rx.open_into(h, frame.data() + pgrac::ic::kFrameHeaderSize, out.data(), &len))
            << "a flipped bit";
    }
}

namespace {

pgrac::ic::FrameHeader piece_header(uint32_t seq) {
    pgrac::ic::FrameHeader h;
    h.type = pgrac::ic::FrameType::Message;
    h.flags = pgrac::ic::kFlagRpcReply;
    h.seq = seq;
    h.src_node = 2;
    return h;
}

// Opens a frame sealed into `room` at `peer`; its plain payload, or nothing.
bool open_sealed(pgrac::ic::FrameGuard& peer, const pgrac::ic::FrameHeader& h,
                 std::vector<uint8_t>& room, size_t frame_len, std::vector<uint8_t>* plain) {
    pgrac::ic::FrameHeader got = h;
    got.payload_len = static_cast<uint32_t>(frame_len - pgrac::ic::kFrameHeaderSize);
    if (pgrac::ic::verify_frame_crc(room.data(), room.data() + pgrac::ic::kFrameHeaderSize,
                                    got.payload_len) != pgrac::ic::FrameError::None)
        return false;
    const uint8_t* p = nullptr;
    uint32_t n = 0;
    if (!peer.open(got, room.data() + pgrac::ic::kFrameHeaderSize, &p, &n)) return false;
    plain->assign(p, p + n);
    return true;
}

}  // namespace

// A payload sealed in pieces (seal_begin, seal_next, seal_end) is the frame
// seal() makes of it, in every mode, whatever the cuts, across key roll-overs.
TEST(FrameGuardSealInPieces, IsSealByteForByte) {
    const KeyPair keys = key_pair(7, 8);
    for (auto mode : {pgrac::ic::WireProtection::Crc, pgrac::ic::WireProtection::Mac,
                      pgrac::ic::WireProtection::Secure}) {
        pgrac::ic::FrameGuard whole_guard(mode, keys.here, 3), pieces(mode, keys.here, 3);
        pgrac::ic::FrameGuard peer(mode, keys.there, 3);
        // The block service's cuts (header, entry header and LSN, the rest of
        // the page) and odd ones; 0 = an empty payload.
        const std::vector<std::vector<uint32_t>> cuts = {
            {0}, {1}, {8, 20, 8184}, {8, 20, 8184, 20, 8184}, {15, 1, 16, 17}, {4096, 0, 4096}};
        uint32_t seq = 0;
        for (int round = 0; round < 3; ++round)
            for (const auto& c : cuts) {
                ++seq;
                uint32_t len = 0;
                for (uint32_t n : c) len += n;
                std::vector<uint8_t> in(len);
                for (uint32_t i = 0; i < len; ++i) in[i] = static_cast<uint8_t>(i * 13 + seq);
                const pgrac::ic::FrameHeader h = piece_header(seq);
                std::vector<uint8_t> whole;
                whole_guard.seal(h, in.data(), len, &whole);
                std::vector<uint8_t> room(whole.size() + 8, 0xee);
                pieces.seal_begin(h, len, room.data());
                EXPECT_TRUE(pieces.sealing());
                uint32_t at = 0;
                for (uint32_t n : c) {
                    pieces.seal_next(in.data() + at, n);
                    at += n;
                }
                pieces.seal_end();
                EXPECT_FALSE(pieces.sealing());
                ASSERT_TRUE(std::equal(whole.begin(), whole.end(), room.begin()))
                    << pgrac::ic::wire_protection_name(mode) << " frame " << seq;
                EXPECT_EQ(room[whole.size()], 0xee) << "nothing written past the frame";
                std::vector<uint8_t> plain;
                ASSERT_TRUE(open_sealed(peer, h, room, whole.size(), &plain)) << seq;
                EXPECT_EQ(plain, in);
            }
        EXPECT_EQ(pieces.frames_sealed(), whole_guard.frames_sealed());
    }
}

// An abandoned frame wipes what it wrote and does not count: the next frame
// takes its nonce and opens at the peer, which never saw the abandoned one.
TEST(FrameGuardSealInPieces, AnAbandonedFrameLeavesNothingAndTheCountersInStep) {
    const KeyPair keys = key_pair(9, 10);
    for (auto mode : {pgrac::ic::WireProtection::Mac, pgrac::ic::WireProtection::Secure}) {
        pgrac::ic::FrameGuard tx(mode, keys.here), peer(mode, keys.there);
        const std::vector<uint8_t> in(8204, 0x5a);
        for (uint32_t seq = 1; seq <= 4; ++seq) {
            std::vector<uint8_t> room(pgrac::ic::kFrameHeaderSize + in.size() + 16, 0);
            const uint64_t before = tx.frames_sealed();
            tx.seal_begin(piece_header(seq), static_cast<uint32_t>(in.size()), room.data());
            // Abandoned after half the payload, after all of it, or at once.
            const uint32_t upto = seq == 1 ? 0 : seq == 2 ? 4102 : 8204;
            tx.seal_next(in.data(), upto);
            tx.seal_abandon();
            EXPECT_FALSE(tx.sealing());
            EXPECT_EQ(tx.frames_sealed(), before);
            EXPECT_TRUE(std::all_of(room.begin(), room.end(), [](uint8_t b) { return b == 0; }))
                << "the abandoned frame's bytes were wiped";
            const std::vector<uint8_t> next(100 + seq, static_cast<uint8_t>(seq));
            tx.seal_begin(piece_header(seq), static_cast<uint32_t>(next.size()), room.data());
            tx.seal_next(next.data(), static_cast<uint32_t>(next.size()));
            tx.seal_end();
            std::vector<uint8_t> plain;
            ASSERT_TRUE(open_sealed(peer, piece_header(seq), room,
                                    pgrac::ic::kFrameHeaderSize + next.size() + 16, &plain))
                << pgrac::ic::wire_protection_name(mode) << " frame " << seq;
            EXPECT_EQ(plain, next);
        }
        tx.seal_abandon();  // nothing begun: nothing to do
    }
}

// Out-of-order use throws a logic error and spoils nothing: after it the frame
// can still be abandoned and the next one sealed.
TEST(FrameGuardSealInPieces, MisuseThrows) {
    const KeyPair keys = key_pair(11, 12);
    pgrac::ic::FrameGuard tx(pgrac::ic::WireProtection::Secure, keys.here);
    pgrac::ic::FrameGuard peer(pgrac::ic::WireProtection::Secure, keys.there);
    std::vector<uint8_t> room(pgrac::ic::kFrameHeaderSize + 64 + 16);
    const std::vector<uint8_t> in(64, 1);
    EXPECT_THROW(tx.seal_next(in.data(), 1), std::logic_error) << "nothing begun";
    EXPECT_THROW(tx.seal_end(), std::logic_error) << "nothing begun";
    tx.seal_begin(piece_header(1), 64, room.data());
    EXPECT_THROW(tx.seal_begin(piece_header(1), 64, room.data()), std::logic_error);
    tx.seal_next(in.data(), 60);
    EXPECT_THROW(tx.seal_next(in.data(), 5), std::logic_error) << "past the payload";
    EXPECT_THROW(tx.seal_end(), std::logic_error) << "payload not complete";
    EXPECT_THROW(tx.seal_into(piece_header(1), in.data(), 64, room.data()), std::logic_error);
    tx.seal_abandon();
    tx.seal_into(piece_header(1), in.data(), 64, room.data());
    std::vector<uint8_t> plain;
    ASSERT_TRUE(open_sealed(peer, piece_header(1), room, room.size(), &plain));
    EXPECT_EQ(plain, in);
}

namespace {

// As the engine keeps a frame: payload_len is the clear payload's.
pgrac::ic::FrameHeader kept_header(uint32_t seq, size_t n = 0) {
    pgrac::ic::FrameHeader h;
    h.payload_len = static_cast<uint32_t>(n);
    h.type = pgrac::ic::FrameType::Message;
    h.flags = pgrac::ic::kFlagRpcRequest;
    h.seq = seq;
    h.src_node = 3;
    h.ack = 9;
    return h;
}

}  // namespace

// A kept frame sealed in place is what seal_into() makes of the same payload,
// through key roll-overs; the peer opens it; open_kept() gives back the clear
// frame (header as before sealing), even after the guard is gone; and sealing
// it again under another guard gives a frame that guard's peer opens.
TEST(FrameGuardSealKept, InPlaceIsSealIntoAndOpensAgainWhereItIs) {
    using namespace pgrac::ic;
    const KeyPair keys = key_pair(8, 9);
    const KeyPair next = key_pair(10, 11);
    auto kept_by = std::make_unique<FrameGuard>(WireProtection::Secure, keys.here, 3);
    FrameGuard twin(WireProtection::Secure, keys.here, 3);
    FrameGuard peer(WireProtection::Secure, keys.there, 3);
    FrameGuard later(WireProtection::Secure, next.here, 3);
    FrameGuard later_peer(WireProtection::Secure, next.there, 3);
    std::vector<std::vector<uint8_t>> sealed, clears;
    std::vector<SealedUnder> under;
    for (uint32_t seq = 1; seq <= 10; ++seq) {
        const size_t n = kMessageHeaderSize + seq * 97;
        std::vector<uint8_t> clear(kFrameHeaderSize + n);
        encode_frame_fields(kept_header(seq, n), clear.data());
        for (size_t i = 0; i < n; ++i) clear[kFrameHeaderSize + i] = static_cast<uint8_t>(seq + i);
        std::vector<uint8_t> frame = clear;
        frame.resize(clear.size() + kFrameTagSize);
        under.push_back(kept_by->seal_kept(kept_header(seq), frame.data() + kFrameHeaderSize,
                                           static_cast<uint32_t>(n), frame.data()));
        std::vector<uint8_t> want(frame.size());
        twin.seal_into(kept_header(seq), clear.data() + kFrameHeaderSize, static_cast<uint32_t>(n),
                       want.data());
        ASSERT_EQ(frame, want) << "sealed in place differs from seal_into, frame " << seq;
        FrameHeader h;
        ASSERT_EQ(decode_frame_header(frame.data(), frame.size(), kMaxFramePayload, &h),
                  FrameError::None);
        const uint8_t* plain = nullptr;
        uint32_t plain_len = 0;
        ASSERT_TRUE(peer.open(h, frame.data() + kFrameHeaderSize, &plain, &plain_len)) << seq;
        ASSERT_EQ(plain_len, n);
        EXPECT_EQ(under.back().counter, seq - 1);
        if (seq > 1) {
            EXPECT_EQ(under.back().key == under[seq - 2].key, (seq - 1) % 3 != 0)
                << "one key copy per generation";
        }
        sealed.push_back(frame);
        clears.push_back(clear);
    }
    kept_by.reset();  // the connection is gone; its frames' keys are not
    for (uint32_t seq = 1; seq <= 10; ++seq) {
        std::vector<uint8_t>& frame = sealed[seq - 1];
        const std::vector<uint8_t>& clear = clears[seq - 1];
        ASSERT_TRUE(FrameGuard::open_kept(under[seq - 1], frame.data(), frame.size())) << seq;
        frame.resize(frame.size() - kFrameTagSize);
        ASSERT_EQ(frame, clear) << "opened in place, frame " << seq;
        // Sealed again under another connection's keys, in place.
        frame.resize(frame.size() + kFrameTagSize);
        const uint32_t n = static_cast<uint32_t>(clear.size() - kFrameHeaderSize);
        later.seal_kept(kept_header(seq), frame.data() + kFrameHeaderSize, n, frame.data());
        FrameHeader h;
        ASSERT_EQ(decode_frame_header(frame.data(), frame.size(), kMaxFramePayload, &h),
                  FrameError::None);
        const uint8_t* plain = nullptr;
        uint32_t plain_len = 0;
        ASSERT_TRUE(later_peer.open(h, frame.data() + kFrameHeaderSize, &plain, &plain_len));
        ASSERT_EQ(std::vector<uint8_t>(plain, plain + plain_len),
                  std::vector<uint8_t>(clear.begin() + kFrameHeaderSize, clear.end()));
    }
}

// open_kept() refuses a frame whose bytes changed, the wrong counter, and a
// frame that was never sealed; seal_kept() is for secure mode only.
TEST(FrameGuardSealKept, RefusesWhatItDidNotSeal) {
    using namespace pgrac::ic;
    const KeyPair keys = key_pair(12, 13);
    FrameGuard g(WireProtection::Secure, keys.here);
    const uint32_t n = kMessageHeaderSize + 100;
    std::vector<uint8_t> frame(kFrameHeaderSize + n + kFrameTagSize, 0x5a);
    const SealedUnder at =
        g.seal_kept(kept_header(1), frame.data() + kFrameHeaderSize, n, frame.data());
    for (size_t at_byte : {size_t{3}, kFrameHeaderSize + 5, frame.size() - 1}) {
        std::vector<uint8_t> changed = frame;
        changed[at_byte] ^= 0x10;
        EXPECT_FALSE(FrameGuard::open_kept(at, changed.data(), changed.size())) << at_byte;
    }
    std::vector<uint8_t> copy = frame;
    EXPECT_FALSE(
        FrameGuard::open_kept(SealedUnder{at.key, at.counter + 1}, copy.data(), copy.size()));
    copy = frame;
    EXPECT_FALSE(FrameGuard::open_kept(SealedUnder{}, copy.data(), copy.size()));
    copy = frame;
    EXPECT_TRUE(FrameGuard::open_kept(at, copy.data(), copy.size()));
    for (auto mode : {WireProtection::Crc, WireProtection::Mac}) {
        FrameGuard other(mode, keys.here);
        EXPECT_THROW(
            other.seal_kept(kept_header(1), frame.data() + kFrameHeaderSize, n, frame.data()),
            std::logic_error);
    }
}
