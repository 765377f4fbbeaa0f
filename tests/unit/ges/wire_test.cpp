// GES wire codec: every message round-trips, the layout is what docs/ges.md
// says (version 5), and every malformed field, truncation, trailing byte and
// version-1 message is rejected.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ic/ges/wire.hpp"

using namespace pgrac::ic::ges;

namespace {

using Bytes = std::vector<uint8_t>;

const ResourceName kText = *ResourceName::from_text("orders:42");
const ResourceName kInt = ResourceName::from_int(-5);
// Every byte different (and the top bit set), so a misplaced or byte-swapped
// field shows.
const uint32_t kEpoch = 0xd4c3b2a1u;
const uint64_t kToken = 0xf8f7f6f5f4f3f2f1ULL;

GesMessage base(GesMsgType t) {
    GesMessage m;
    m.type = t;
    m.epoch = kEpoch;
    m.owner = Owner{3, 4242};
    m.resource = kText;
    m.mode = LockMode::PW;
    m.request_id = 0x1122334455667788ULL;
    if (t == GesMsgType::Request || t == GesMsgType::Convert) {
        m.flags = kNoWait;
        m.timeout_ms = 5000;
    }
    if (t == GesMsgType::Cancel) m.reason = DenyReason::Deadlock;
    if (t == GesMsgType::Deny) m.reason = DenyReason::NoWait;
    if (t == GesMsgType::Grant) m.token = kToken;  // only a Grant carries one
    return m;
}

ReplayEntry entry(LockState s, LockMode g, LockMode r, const ResourceName& res) {
    ReplayEntry e;
    e.owner = Owner{2, 77};
    e.resource = res;
    e.state = s;
    e.granted_mode = g;
    e.requested_mode = r;
    e.request_id = 9;
    e.flags = s == LockState::Granted ? 0 : kNoWait;
    e.since = -123456789;
    e.token = g == LockMode::NL ? 0 : kToken + static_cast<uint8_t>(s);  // a held mode's grant
    return e;
}

GesMessage replay() {
    GesMessage m;
    m.type = GesMsgType::Replay;
    m.epoch = kEpoch;
    m.flags = kReplayLast;
    m.entries = {entry(LockState::Granted, LockMode::PR, LockMode::PR, kText),
                 entry(LockState::Converting, LockMode::PR, LockMode::EX, kInt),
                 entry(LockState::Waiting, LockMode::NL, LockMode::CW, kText)};
    return m;
}

WaitForEdge wf(Owner w, Owner h, const ResourceName& r) {
    WaitForEdge e;
    e.waiter = w;
    e.holder = h;
    e.resource = r;
    e.master = 5;
    e.request_id = 0x0102030405060708ULL;
    e.since = -42;
    e.order = 77;
    return e;
}

GesMessage hint() {
    GesMessage m;
    m.type = GesMsgType::WaitHint;
    m.epoch = kEpoch;
    m.worker = 3;
    m.wait_ms = 1500;
    return m;
}

GesMessage edges_request() {
    GesMessage m;
    m.type = GesMsgType::EdgesRequest;
    m.epoch = kEpoch;
    m.round = 0xa1a2a3a4a5a6a7a8ULL;
    m.wait_ms = 1000;
    return m;
}

GesMessage edges() {
    GesMessage m;
    m.type = GesMsgType::Edges;
    m.epoch = kEpoch;
    m.round = 0xa1a2a3a4a5a6a7a8ULL;
    m.worker = 1;
    m.flags = kEdgesLast;
    m.edges = {wf(Owner{2, 77}, Owner{3, 88}, kText), wf(Owner{3, 88}, Owner{2, 77}, kInt)};
    return m;
}

GesMessage hand_off() {
    GesMessage m;
    m.type = GesMsgType::HandOff;
    m.epoch = kEpoch;
    m.resource = kText;
    m.value = LockValue::valid("lsn", 3);
    m.grant_seq = 0x01020304;
    m.entries = {entry(LockState::Granted, LockMode::PR, LockMode::PR, kText),
                 entry(LockState::Waiting, LockMode::NL, LockMode::EX, kText)};
    return m;
}

GesMessage forwarded() {
    GesMessage m;
    m.type = GesMsgType::Forwarded;
    m.epoch = kEpoch;
    m.origin = 2;
    GesMessage in = base(GesMsgType::Request);
    in.owner.node = 2;
    EXPECT_EQ(encode_ges_message(in, &m.inner), GesWireError::None);
    return m;
}

bool has_owner(GesMsgType t) {
    const auto v = static_cast<uint8_t>(t);
    return (v >= 1 && v <= 8) || v == 14 || v == 15 || v == 21;
}

std::vector<GesMessage> all_messages() {
    std::vector<GesMessage> v;
    for (uint8_t t = 1; t <= kMaxGesMsgType; ++t) {
        switch (static_cast<GesMsgType>(t)) {
            case GesMsgType::Replay:
                v.push_back(replay());
                break;
            case GesMsgType::WaitHint:
                v.push_back(hint());
                break;
            case GesMsgType::EdgesRequest:
                v.push_back(edges_request());
                break;
            case GesMsgType::Edges:
                v.push_back(edges());
                break;
            case GesMsgType::HandOff:
                v.push_back(hand_off());
                break;
            case GesMsgType::Forwarded:
                v.push_back(forwarded());
                break;
            default:
                v.push_back(base(static_cast<GesMsgType>(t)));
        }
    }
    return v;
}

Bytes encode(const GesMessage& m) {
    Bytes b;
    EXPECT_EQ(encode_ges_message(m, &b), GesWireError::None) << ges_msg_type_name(m.type);
    return b;
}

GesWireError decode(const Bytes& b) {
    GesMessage m;
    return decode_ges_message(b.data(), b.size(), &m);
}

// The n-byte little-endian value at b[off].
uint64_t le(const Bytes& b, size_t off, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(b.at(off + i)) << (8 * i);
    return v;
}

// m as a version-1 peer would have sent it: version 1, the 4-byte header
// without the epoch, no token in a Grant or a replay entry.
Bytes v1_form(const GesMessage& m) {
    Bytes b = encode(m);
    b[0] = 1;
    b.erase(b.begin() + 4, b.begin() + 8);
    if (m.type == GesMsgType::Grant) b.erase(b.begin() + 19, b.begin() + 27);  // after the mode
    if (m.type == GesMsgType::Replay) {
        size_t at = 8;  // v1: header 4, replay head 4
        for (const ReplayEntry& e : m.entries) {
            b.erase(b.begin() + at + 26, b.begin() + at + 34);  // after the entry's flags
            at += 26 + 2 + e.resource.len + 1 +
                  (e.value.state == ValueState::Valid ? 1 + e.value.len : 0);
        }
        EXPECT_EQ(at, b.size());
    }
    return b;
}

}  // namespace

TEST(GesWire, EveryMessageRoundTrips) {
    for (const GesMessage& m : all_messages()) {
        for (const ResourceName& r :
             {kText, kInt, *ResourceName::from_text(std::string(64, 'z'))}) {
            GesMessage x = m;
            x.resource = r;
            for (ReplayEntry& e : x.entries)
                if (x.type == GesMsgType::HandOff) e.resource = r;  // all of the resource
            const Bytes b = encode(x);
            GesMessage back;
            ASSERT_EQ(decode_ges_message(b.data(), b.size(), &back), GesWireError::None)
                << ges_msg_type_name(m.type);
            EXPECT_TRUE(back == x) << ges_msg_type_name(m.type);
            EXPECT_EQ(back.type, m.type);
            EXPECT_EQ(back.epoch, kEpoch) << ges_msg_type_name(m.type);
            EXPECT_EQ(back.token, m.type == GesMsgType::Grant ? kToken : 0u)
                << ges_msg_type_name(m.type);
            GesMessage other_epoch = x;  // the epoch is part of the message
            other_epoch.epoch = kEpoch + 1;
            EXPECT_FALSE(back == other_epoch) << ges_msg_type_name(m.type);
        }
    }
}

TEST(GesWire, LayoutIsLittleEndianAsDocumented) {
    EXPECT_EQ(kGesWireVersion, 5);
    const Bytes b = encode(base(GesMsgType::Request));
    // version, type, reserved, epoch; ...; resource, value (state 0: none)
    ASSERT_EQ(b.size(), 8u + 6 + 8 + 1 + 1 + 4 + 2 + 9 + 1);
    EXPECT_EQ(b[0], 5);
    EXPECT_EQ(b[1], 1);
    EXPECT_EQ(b[2], 0);
    EXPECT_EQ(b[3], 0);
    EXPECT_EQ(b[4], 0xa1);  // epoch 0xd4c3b2a1, low byte first
    EXPECT_EQ(b[5], 0xb2);
    EXPECT_EQ(b[6], 0xc3);
    EXPECT_EQ(b[7], 0xd4);
    EXPECT_EQ(b[8], 3);  // node 3
    EXPECT_EQ(b[9], 0);
    EXPECT_EQ(b[10], 0x92);  // proc 4242 = 0x1092
    EXPECT_EQ(b[11], 0x10);
    EXPECT_EQ(b[14], 0x88);  // request id, low byte first
    EXPECT_EQ(b[21], 0x11);
    EXPECT_EQ(b[22], static_cast<uint8_t>(LockMode::PW));
    EXPECT_EQ(b[23], kNoWait);
    EXPECT_EQ(b[24], 0x88);  // 5000 = 0x1388
    EXPECT_EQ(b[25], 0x13);
    EXPECT_EQ(b[28], 1);  // text
    EXPECT_EQ(b[29], 9);
    EXPECT_EQ(std::string(b.begin() + 30, b.end() - 1), "orders:42");
    EXPECT_EQ(b.back(), 0);
    EXPECT_EQ(encode(base(GesMsgType::ReleaseAll)).size(), 22u);  // owner, u64 bound
}

TEST(GesWire, GrantCarriesItsTokenAfterTheModeAndBastDoesNot) {
    const GesMessage grant = base(GesMsgType::Grant);
    const Bytes g = encode(grant);
    // header 8, owner 6, request id 8, mode 1, token 8, resource, value
    ASSERT_EQ(g.size(), 8u + 6 + 8 + 1 + 8 + 2 + 9 + 1);
    EXPECT_EQ(g[1], 6);
    EXPECT_EQ(le(g, 14, 8), 0x1122334455667788ULL);
    EXPECT_EQ(g[22], static_cast<uint8_t>(LockMode::PW));
    EXPECT_EQ(g[23], 0xf1);  // token 0xf8f7f6f5f4f3f2f1, low byte first
    EXPECT_EQ(g[30], 0xf8);
    EXPECT_EQ(le(g, 23, 8), kToken);
    EXPECT_EQ(g[31], 1);  // text
    EXPECT_EQ(g[32], 9);
    EXPECT_EQ(std::string(g.begin() + 33, g.end() - 1), "orders:42");
    for (uint64_t token : {uint64_t{0}, uint64_t{1}, kToken, ~uint64_t{0}}) {
        GesMessage x = grant;
        x.token = token;
        const Bytes b = encode(x);
        EXPECT_EQ(le(b, 23, 8), token);
        GesMessage back;
        ASSERT_EQ(decode_ges_message(b.data(), b.size(), &back), GesWireError::None);
        EXPECT_EQ(back.token, token);
        EXPECT_TRUE(back == x);
        x.token = token + 1;  // the token is part of the message
        EXPECT_FALSE(back == x);
    }
    // A Bast has no token: the resource follows the mode, and a token set in
    // the struct is not sent.
    GesMessage bast = base(GesMsgType::Bast);
    const Bytes b = encode(bast);
    ASSERT_EQ(b.size(), 8u + 6 + 8 + 1 + 2 + 9);
    EXPECT_EQ(b[22], static_cast<uint8_t>(LockMode::PW));
    EXPECT_EQ(b[23], 1);  // text
    EXPECT_EQ(b[24], 9);
    bast.token = kToken;
    EXPECT_EQ(encode(bast), b);
    GesMessage back;
    ASSERT_EQ(decode_ges_message(b.data(), b.size(), &back), GesWireError::None);
    EXPECT_EQ(back.token, 0u);
}

TEST(GesWire, EveryTruncationIsRejected) {
    for (const GesMessage& m : all_messages()) {
        const Bytes b = encode(m);
        for (size_t n = 0; n < b.size(); ++n) {
            const Bytes cut(b.begin(), b.begin() + n);
            const GesWireError e = decode(cut);
            EXPECT_NE(e, GesWireError::None) << ges_msg_type_name(m.type) << " cut at " << n;
        }
        EXPECT_EQ(decode(Bytes{}), GesWireError::Truncated);
    }
}

TEST(GesWire, TrailingBytesAreRejected) {
    for (const GesMessage& m : all_messages()) {
        Bytes b = encode(m);
        b.push_back(0);
        EXPECT_EQ(decode(b), GesWireError::TrailingBytes) << ges_msg_type_name(m.type);
    }
}

namespace {

// Corrupts one byte of the encoding of m and expects err.
void expect_bad(const GesMessage& m, size_t offset, uint8_t value, GesWireError err) {
    Bytes b = encode(m);
    ASSERT_LT(offset, b.size());
    b[offset] = value;
    EXPECT_EQ(decode(b), err) << ges_msg_type_name(m.type) << " offset " << offset << " value "
                              << int(value) << ": got " << ges_wire_error_name(decode(b));
}

}  // namespace

TEST(GesWire, HeaderFieldsAreValidated) {
    for (const GesMessage& m : all_messages()) {
        expect_bad(m, 0, 0, GesWireError::BadVersion);
        expect_bad(m, 0, 1, GesWireError::BadVersion);
        expect_bad(m, 0, 2, GesWireError::BadVersion);
        expect_bad(m, 0, 3, GesWireError::BadVersion);
        expect_bad(m, 0, 4, GesWireError::BadVersion);  // before direct routing
        expect_bad(m, 0, 6, GesWireError::BadVersion);
        expect_bad(m, 1, 0, GesWireError::BadType);
        expect_bad(m, 1, kMaxGesMsgType + 1, GesWireError::BadType);
        expect_bad(m, 2, 1, GesWireError::BadReserved);
        expect_bad(m, 3, 0x80, GesWireError::BadReserved);
        // The header is 8 bytes: one cut inside the epoch is truncated.
        const Bytes b = encode(m);
        for (size_t n = 0; n < 8; ++n)
            EXPECT_EQ(decode(Bytes(b.begin(), b.begin() + n)), GesWireError::Truncated)
                << ges_msg_type_name(m.type) << " cut at " << n;
    }
}

TEST(GesWire, VersionOneMessagesAreRefused) {
    for (const GesMessage& m : all_messages()) {
        const Bytes v1 = v1_form(m);
        EXPECT_EQ(v1[0], 1);
        EXPECT_EQ(decode(v1), GesWireError::BadVersion) << ges_msg_type_name(m.type);
    }
    // A version-1 ReleaseAll, byte for byte: version 1, type 4, reserved,
    // node 3, proc 4242 (and this version's bound, 0).
    const Bytes release_all = {1, 4, 0, 0, 3, 0, 0x92, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    GesMessage unbounded = base(GesMsgType::ReleaseAll);
    unbounded.request_id = 0;
    EXPECT_EQ(release_all, v1_form(unbounded));
    EXPECT_EQ(decode(release_all), GesWireError::BadVersion);
}

TEST(GesWire, EpochIsLittleEndianAtOffset4InEveryMessageAndRoundTrips) {
    for (const GesMessage& m : all_messages()) {
        for (uint32_t epoch : {0u, 1u, kEpoch, 0xffffffffu}) {
            GesMessage x = m;
            x.epoch = epoch;
            if (x.type == GesMsgType::Forwarded) {  // the inner message is of the same epoch
                GesMessage in;
                ASSERT_EQ(decode_ges_message(m.inner.data(), m.inner.size(), &in),
                          GesWireError::None);
                in.epoch = epoch;
                x.inner.clear();
                ASSERT_EQ(encode_ges_message(in, &x.inner), GesWireError::None);
            }
            const Bytes b = encode(x);
            ASSERT_GE(b.size(), 8u);
            EXPECT_EQ(b[4], static_cast<uint8_t>(epoch)) << ges_msg_type_name(m.type);
            EXPECT_EQ(b[5], static_cast<uint8_t>(epoch >> 8));
            EXPECT_EQ(b[6], static_cast<uint8_t>(epoch >> 16));
            EXPECT_EQ(b[7], static_cast<uint8_t>(epoch >> 24));
            EXPECT_EQ(le(b, 4, 4), epoch);
            GesMessage back;
            ASSERT_EQ(decode_ges_message(b.data(), b.size(), &back), GesWireError::None)
                << ges_msg_type_name(m.type);
            EXPECT_EQ(back.epoch, epoch) << ges_msg_type_name(m.type);
            EXPECT_TRUE(back == x) << ges_msg_type_name(m.type);
        }
        // The codec carries any epoch; the glue decides what is stale.
        // (A Forwarded message's inner one must be of its epoch.)
        for (size_t i = 4; i < 8; ++i)
            expect_bad(
                m, i, 0,
                m.type == GesMsgType::Forwarded ? GesWireError::BadInner : GesWireError::None);
    }
    const auto msgs = encode_replay_messages({}, kEpoch);
    ASSERT_EQ(msgs.size(), 1u);
    EXPECT_EQ(le(msgs[0], 4, 4), kEpoch);
}

TEST(GesWire, OwnerNodeIsValidated) {
    for (const GesMessage& m : all_messages()) {
        if (!has_owner(m.type)) continue;
        expect_bad(m, 8, 0, GesWireError::BadNode);
        expect_bad(m, 8, 65, GesWireError::BadNode);
        expect_bad(m, 9, 1, GesWireError::BadNode);  // 259
    }
}

TEST(GesWire, RequestFieldsAreValidated) {
    for (GesMsgType t : {GesMsgType::Request, GesMsgType::Convert}) {
        const GesMessage m = base(t);
        for (size_t i = 14; i < 22; ++i) {  // a zero request id
            GesMessage z = m;
            z.request_id = 0;
            Bytes b;
            EXPECT_EQ(encode_ges_message(z, &b), GesWireError::BadRequestId);
            EXPECT_TRUE(b.empty());
        }
        Bytes b = encode(m);
        for (size_t i = 14; i < 22; ++i) b[i] = 0;
        EXPECT_EQ(decode(b), GesWireError::BadRequestId);
        expect_bad(m, 22, 6, GesWireError::BadMode);
        expect_bad(m, 22, 0xff, GesWireError::BadMode);
        expect_bad(m, 23, 0x04, GesWireError::BadFlags);
        expect_bad(m, 23, 0x02, GesWireError::None);  // kDirect
        expect_bad(m, 23, 0x80, GesWireError::BadFlags);
    }
}

TEST(GesWire, ResourceIsValidated) {
    // Request: resource at offset 28; Release at 14; Cancel at 23; Grant at 31 (after the
    // token); Bast at 23; Deny at 24.
    const std::pair<GesMsgType, size_t> where[] = {
        {GesMsgType::Request, 28}, {GesMsgType::Convert, 28}, {GesMsgType::Release, 14},
        {GesMsgType::Cancel, 23},  {GesMsgType::Grant, 31},   {GesMsgType::Bast, 23},
        {GesMsgType::Deny, 24}};
    for (const auto& [t, off] : where) {
        const GesMessage m = base(t);
        expect_bad(m, off, 0, GesWireError::BadResource);       // kind 0
        expect_bad(m, off, 3, GesWireError::BadResource);       // kind 3
        expect_bad(m, off + 1, 0, GesWireError::BadResource);   // empty text
        expect_bad(m, off + 1, 65, GesWireError::BadResource);  // too long
        expect_bad(m, off + 1, 11, GesWireError::Truncated);    // longer than the bytes
        expect_bad(m, off + 2, 0, GesWireError::BadResource);   // NUL in text
        expect_bad(m, off, 2, GesWireError::BadResource);       // bigint with 9 bytes
        GesMessage i = m;
        i.resource = kInt;
        expect_bad(i, off + 1, 7, GesWireError::BadResource);  // bigint with 7 bytes
    }
}

TEST(GesWire, EmptyTextResourceIsRejectedEvenWhenTheLengthFits) {
    GesMessage m = base(GesMsgType::Release);
    Bytes b = encode(m);
    b.resize(16);
    b[15] = 0;  // text of length 0, nothing after
    EXPECT_EQ(decode(b), GesWireError::BadResource);
}

TEST(GesWire, CancelGrantBastDenyFieldsAreValidated) {
    const GesMessage cancel = base(GesMsgType::Cancel);
    for (uint8_t r : {0, 1, 5, 6, 7, 8, 255}) expect_bad(cancel, 22, r, GesWireError::BadReason);
    for (uint8_t r : {2, 3, 4}) expect_bad(cancel, 22, r, GesWireError::None);
    GesMessage any = cancel;
    any.request_id = 0;  // cancel whatever is pending
    EXPECT_EQ(decode(encode(any)), GesWireError::None);

    for (GesMsgType t : {GesMsgType::Grant, GesMsgType::Bast, GesMsgType::Deny}) {
        const GesMessage m = base(t);
        expect_bad(m, 22, 6, GesWireError::BadMode);
        Bytes b = encode(m);
        for (size_t i = 14; i < 22; ++i) b[i] = 0;
        EXPECT_EQ(decode(b), GesWireError::BadRequestId) << ges_msg_type_name(t);
    }
    expect_bad(base(GesMsgType::Bast), 22, 0, GesWireError::BadMode);  // NL blocks nobody
    expect_bad(base(GesMsgType::Grant), 22, 0, GesWireError::None);    // NL can be granted
    for (size_t i = 23; i < 31; ++i)                                   // any token, zero included
        expect_bad(base(GesMsgType::Grant), i, 0, GesWireError::None);
    const GesMessage deny = base(GesMsgType::Deny);
    EXPECT_EQ(kMaxDenyReason, 8);
    expect_bad(deny, 23, 0, GesWireError::BadReason);
    expect_bad(deny, 23, kMaxDenyReason + 1, GesWireError::BadReason);
    expect_bad(deny, 23, 9, GesWireError::BadReason);
    expect_bad(deny, 23, 0xff, GesWireError::BadReason);
    for (uint8_t r = 1; r <= kMaxDenyReason; ++r) expect_bad(deny, 23, r, GesWireError::None);
    // no_quorum (7) is a deny reason, decoded as such; 8 cannot be encoded.
    Bytes b = encode(deny);
    b[23] = 7;
    GesMessage back;
    ASSERT_EQ(decode_ges_message(b.data(), b.size(), &back), GesWireError::None);
    EXPECT_EQ(back.reason, DenyReason::NoQuorum);
    GesMessage nq = deny;
    nq.reason = DenyReason::NoQuorum;
    EXPECT_EQ(encode(nq), b);
    nq.reason = static_cast<DenyReason>(9);
    Bytes out;
    EXPECT_EQ(encode_ges_message(nq, &out), GesWireError::BadReason);
    EXPECT_TRUE(out.empty());
}

TEST(GesWire, ReplayFieldsAreValidated) {
    const GesMessage m = replay();
    expect_bad(m, 8, 0x02, GesWireError::BadFlags);
    expect_bad(m, 9, 1, GesWireError::BadReserved);
    expect_bad(m, 10, 2, GesWireError::TrailingBytes);  // fewer counted than sent
    expect_bad(m, 10, 4, GesWireError::Truncated);      // more counted than sent
    expect_bad(m, 11, 0x01, GesWireError::Truncated);   // 259: allowed, but not there
    expect_bad(m, 11, 0x02, GesWireError::BadCount);    // 515 > kMaxReplayEntries
    {
        Bytes b = encode(m);
        b[10] = 0xc2;  // 450 = 0x1c2: allowed, but not there
        b[11] = 0x01;
        EXPECT_EQ(decode(b), GesWireError::Truncated);
        b[10] = 0xc3;  // 451 > kMaxReplayEntries
        EXPECT_EQ(decode(b), GesWireError::BadCount);
    }
    // First entry starts at 12: owner 12..17, id 18..25, since 26..33, state 34,
    // granted 35, requested 36, flags 37, token 38..45, resource 46.
    expect_bad(m, 12, 0, GesWireError::BadNode);
    Bytes b = encode(m);
    for (size_t i = 18; i < 26; ++i) b[i] = 0;
    EXPECT_EQ(decode(b), GesWireError::BadRequestId);
    expect_bad(m, 34, 0, GesWireError::BadState);
    expect_bad(m, 34, 4, GesWireError::BadState);
    expect_bad(m, 34, 3, GesWireError::BadState);  // waiting while granted PR
    expect_bad(m, 34, 2, GesWireError::BadState);  // converting PR -> PR
    expect_bad(m, 35, 6, GesWireError::BadMode);
    expect_bad(m, 36, 9, GesWireError::BadMode);
    expect_bad(m, 36, 5, GesWireError::BadState);  // granted with requested != granted
    expect_bad(m, 37, 2, GesWireError::BadFlags);
    for (size_t i = 38; i < 46; ++i) expect_bad(m, i, 0, GesWireError::None);  // any token
    expect_bad(m, 46, 7, GesWireError::BadResource);
    // Encoding refuses what decoding would.
    GesMessage bad = m;
    bad.entries[2].granted_mode = LockMode::CR;
    Bytes out;
    EXPECT_EQ(encode_ges_message(bad, &out), GesWireError::BadState);
    GesMessage big = m;
    big.entries.assign(kMaxReplayEntries + 1, m.entries[0]);
    EXPECT_EQ(encode_ges_message(big, &out), GesWireError::BadCount);
    EXPECT_TRUE(out.empty());
}

TEST(GesWire, ReplayEntryLayoutAndTokensAreAsDocumented) {
    const GesMessage m = replay();
    const Bytes b = encode(m);
    // head 12 (header 8, flags, reserved, count); entries: owner 6, id 8, since 8,
    // state, granted, requested, flags, token 8, resource, value (none: 1 byte)
    ASSERT_EQ(b.size(), 12u + (34 + 2 + 9 + 1) + (34 + 2 + 8 + 1) + (34 + 2 + 9 + 1));
    EXPECT_EQ(b[1], 9);
    EXPECT_EQ(le(b, 4, 4), kEpoch);
    EXPECT_EQ(b[8], kReplayLast);
    EXPECT_EQ(b[9], 0);
    EXPECT_EQ(le(b, 10, 2), 3u);
    size_t at = 12;
    for (const ReplayEntry& e : m.entries) {
        EXPECT_EQ(le(b, at, 2), uint64_t{e.owner.node});
        EXPECT_EQ(le(b, at + 2, 4), uint64_t{e.owner.proc});
        EXPECT_EQ(le(b, at + 6, 8), e.request_id);
        EXPECT_EQ(le(b, at + 14, 8), static_cast<uint64_t>(e.since));
        EXPECT_EQ(b[at + 22], static_cast<uint8_t>(e.state));
        EXPECT_EQ(b[at + 23], static_cast<uint8_t>(e.granted_mode));
        EXPECT_EQ(b[at + 24], static_cast<uint8_t>(e.requested_mode));
        EXPECT_EQ(b[at + 25], e.flags);
        EXPECT_EQ(le(b, at + 26, 8), e.token);
        EXPECT_EQ(b[at + 34], static_cast<uint8_t>(e.resource.kind));
        EXPECT_EQ(b[at + 35], e.resource.len);
        EXPECT_EQ(b[at + 36 + e.resource.len], 0);  // value: none
        at += 37 + e.resource.len;
    }
    EXPECT_EQ(at, b.size());
    EXPECT_EQ(b[38], 0xf2);  // first entry (granted): token kToken + 1, low byte first
    EXPECT_EQ(b[45], 0xf8);

    // Every entry's token round-trips, and is part of the entry.
    GesMessage x = m;
    x.entries[0].token = 0;
    x.entries[1].token = ~uint64_t{0};
    x.entries[2].token = 0x0102030405060708ULL;  // the codec does not tie it to the state
    const Bytes xb = encode(x);
    GesMessage back;
    ASSERT_EQ(decode_ges_message(xb.data(), xb.size(), &back), GesWireError::None);
    ASSERT_EQ(back.entries.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(back.entries[i].token, x.entries[i].token) << i;
    EXPECT_TRUE(back == x);
    ReplayEntry other = x.entries[1];
    other.token = 1;
    EXPECT_FALSE(other == x.entries[1]);
}

TEST(GesWire, ReplayOf450LargestEntriesFitsAnd451IsRefused) {
    EXPECT_EQ(kMaxReplayEntries, 450);
    ReplayEntry largest = entry(LockState::Converting, LockMode::PR, LockMode::EX,
                                *ResourceName::from_text(std::string(64, 'q')));
    const std::string v(kMaxLockValue, 'v');
    largest.value = LockValue::valid(v.data(), v.size());
    GesMessage m = replay();
    m.entries.assign(kMaxReplayEntries, largest);
    Bytes b = encode(m);
    ASSERT_EQ(b.size(), 12u + 450 * 134);  // the largest entry is 134 bytes
    EXPECT_LE(b.size(), kMaxGesMessage);
    GesMessage back;
    ASSERT_EQ(decode_ges_message(b.data(), b.size(), &back), GesWireError::None);
    EXPECT_EQ(back.entries.size(), 450u);
    EXPECT_TRUE(back == m);
    // One more entry: refused on encode, and on decode even with the bytes there.
    GesMessage more = m;
    more.entries.push_back(largest);
    Bytes out;
    EXPECT_EQ(encode_ges_message(more, &out), GesWireError::BadCount);
    EXPECT_TRUE(out.empty());
    const Bytes last(b.end() - 134, b.end());  // the 450th entry, again
    b.insert(b.end(), last.begin(), last.end());
    b[10] = 0xc3;  // 451
    b[11] = 0x01;
    EXPECT_EQ(decode(b), GesWireError::BadCount);
}

TEST(GesWire, ValueBlocksRoundTripAndAreValidated) {
    const std::string v = "counter=17";
    const LockValue valid = LockValue::valid(v.data(), v.size());
    for (GesMsgType t :
         {GesMsgType::Request, GesMsgType::Convert, GesMsgType::Release, GesMsgType::Grant}) {
        for (const LockValue& val :
             {valid, LockValue::invalid(), LockValue::valid(nullptr, 0), LockValue{}}) {
            GesMessage m = base(t);
            m.value = val;
            const Bytes b = encode(m);
            // The value follows the resource: state, then (valid) length and bytes.
            const size_t at = b.size() - (val.state == ValueState::Valid ? 2 + val.len : 1);
            EXPECT_EQ(b[at], static_cast<uint8_t>(val.state)) << ges_msg_type_name(t);
            GesMessage back;
            ASSERT_EQ(decode_ges_message(b.data(), b.size(), &back), GesWireError::None);
            EXPECT_TRUE(back == m) << ges_msg_type_name(t);
            EXPECT_TRUE(back.value == val);
            GesMessage other = m;
            other.value = val == valid ? LockValue::invalid() : valid;
            EXPECT_FALSE(back == other) << "the value is part of the message";
        }
        GesMessage m = base(t);
        m.value = valid;
        const Bytes b = encode(m);
        const size_t at = b.size() - 2 - v.size();
        expect_bad(m, at, 3, GesWireError::BadValue);           // unknown state
        expect_bad(m, at + 1, 33, GesWireError::BadValue);      // longer than kMaxLockValue
        expect_bad(m, at + 1, 11, GesWireError::Truncated);     // longer than the bytes
        expect_bad(m, at + 1, 9, GesWireError::TrailingBytes);  // shorter
        m.value.len = kMaxLockValue + 1;
        Bytes out;
        EXPECT_EQ(encode_ges_message(m, &out), GesWireError::BadValue);
        EXPECT_TRUE(out.empty());
    }
    // Messages without a value carry none; a waiting replay entry holds nothing to carry.
    EXPECT_EQ(encode(base(GesMsgType::Bast)).size(), 8u + 6 + 8 + 1 + 2 + 9);
    GesMessage r = replay();
    for (ReplayEntry& e : r.entries) {
        if (e.state != LockState::Waiting) e.value = valid;
    }
    const Bytes rb = encode(r);
    GesMessage back;
    ASSERT_EQ(decode_ges_message(rb.data(), rb.size(), &back), GesWireError::None);
    EXPECT_TRUE(back == r);
    for (ReplayEntry& e : r.entries) {
        if (e.state == LockState::Waiting) e.value = valid;
    }
    Bytes out;
    EXPECT_EQ(encode_ges_message(r, &out), GesWireError::BadValue);
}

TEST(GesWire, ReplayIsSplitIntoBoundedMessagesAndTheLastIsMarked) {
    std::vector<ReplayEntry> entries;
    for (int k = 0; k < 1500; ++k) {
        ReplayEntry e = entry(LockState::Granted, LockMode::EX, LockMode::EX,
                              *ResourceName::from_text(std::string(64, 'a' + k % 26)));
        e.request_id = k + 1;
        e.token = kToken - static_cast<uint64_t>(k);
        entries.push_back(e);
    }
    ReplayEntry invalid = entries[0];
    invalid.owner.node = 0;
    entries.push_back(invalid);  // left out
    const auto msgs = encode_replay_messages(entries, kEpoch);
    ASSERT_EQ(msgs.size(), 4u);  // 450 + 450 + 450 + 150
    std::vector<ReplayEntry> back;
    for (size_t i = 0; i < msgs.size(); ++i) {
        EXPECT_LE(msgs[i].size(), kMaxGesMessage);
        GesMessage m;
        ASSERT_EQ(decode_ges_message(msgs[i].data(), msgs[i].size(), &m), GesWireError::None);
        EXPECT_EQ(m.flags == kReplayLast, i + 1 == msgs.size());
        EXPECT_EQ(m.epoch, kEpoch) << "every message carries the epoch";
        EXPECT_EQ(m.entries.size(), i + 1 < msgs.size() ? size_t{kMaxReplayEntries} : 150u);
        back.insert(back.end(), m.entries.begin(), m.entries.end());
    }
    entries.pop_back();
    EXPECT_TRUE(back == entries);

    const auto empty = encode_replay_messages({});
    ASSERT_EQ(empty.size(), 1u);
    GesMessage m;
    ASSERT_EQ(decode_ges_message(empty[0].data(), empty[0].size(), &m), GesWireError::None);
    EXPECT_EQ(m.flags, kReplayLast);
    EXPECT_EQ(m.epoch, 0u);  // the default
    EXPECT_TRUE(m.entries.empty());
    const auto empty_in_epoch = encode_replay_messages({}, kEpoch);
    ASSERT_EQ(empty_in_epoch.size(), 1u);
    ASSERT_EQ(empty_in_epoch[0].size(), 12u);
    ASSERT_EQ(decode_ges_message(empty_in_epoch[0].data(), empty_in_epoch[0].size(), &m),
              GesWireError::None);
    EXPECT_EQ(m.epoch, kEpoch);
    EXPECT_EQ(m.flags, kReplayLast);
    EXPECT_TRUE(m.entries.empty());
}

TEST(GesWire, HandOffForwardedAndMovedAreAsDocumentedAndValidated) {
    // HandOff: header 8, resource (2 + 9), value (1 + 1 + 3), u32 grant_seq, u16 count, entries.
    const GesMessage h = hand_off();
    const Bytes b = encode(h);
    EXPECT_EQ(b[1], 16);
    EXPECT_EQ(b[8], 1);  // text
    EXPECT_EQ(b[9], 9);
    EXPECT_EQ(b[19], 1);  // value: valid, 3 bytes
    EXPECT_EQ(b[20], 3);
    EXPECT_EQ(le(b, 24, 4), 0x01020304u);
    EXPECT_EQ(le(b, 28, 2), 2u);
    ASSERT_EQ(b.size(), 30u + (34 + 2 + 9 + 1) * 2);
    GesMessage other = h;
    other.entries[1].resource = kInt;  // every entry is of the resource handed over
    Bytes out;
    EXPECT_EQ(encode_ges_message(other, &out), GesWireError::BadInner);
    other = h;
    other.entries.assign(kMaxReplayEntries + 1, h.entries[0]);
    EXPECT_EQ(encode_ges_message(other, &out), GesWireError::BadCount);

    // Forwarded: u16 origin, u16 len, the inner message.
    const GesMessage f = forwarded();
    const Bytes fb = encode(f);
    EXPECT_EQ(fb[1], 18);
    EXPECT_EQ(le(fb, 8, 2), 2u);
    EXPECT_EQ(le(fb, 10, 2), f.inner.size());
    EXPECT_EQ(Bytes(fb.begin() + 12, fb.end()), f.inner);
    expect_bad(f, 8, 0, GesWireError::BadNode);           // origin 0
    expect_bad(f, 12 + 4, 0x11, GesWireError::BadInner);  // the inner epoch differs
    GesMessage nested = f;
    nested.inner.clear();
    EXPECT_EQ(encode_ges_message(nested, &out), GesWireError::BadInner);
    for (GesMsgType t : {GesMsgType::Grant, GesMsgType::ReleaseAll, GesMsgType::HandOffAck}) {
        GesMessage in = base(t);
        nested.inner.clear();
        EXPECT_EQ(encode_ges_message(in, &nested.inner), GesWireError::None);
        EXPECT_EQ(encode_ges_message(nested, &out), GesWireError::BadInner)
            << ges_msg_type_name(t) << " is not forwarded";
    }
    EXPECT_TRUE(forwardable(GesMsgType::Transfer));
    EXPECT_FALSE(forwardable(GesMsgType::Forwarded)) << "no forwarding of a forwarded message";

    // HandOffAck and Moved: the resource only.
    for (GesMsgType t : {GesMsgType::HandOffAck, GesMsgType::Moved}) {
        const Bytes mb = encode(base(t));
        EXPECT_EQ(mb.size(), 8u + 2 + 9) << ges_msg_type_name(t);
    }
    EXPECT_STREQ(ges_msg_type_name(GesMsgType::Moved), "moved");
    EXPECT_STREQ(ges_wire_error_name(GesWireError::BadInner), "bad_inner");
}

TEST(GesWire, DeadlockSearchLayoutIsAsDocumented) {
    const Bytes h = encode(hint());
    ASSERT_EQ(h.size(), 8u + 2 + 4);
    EXPECT_EQ(h[1], 10);
    EXPECT_EQ(le(h, 4, 4), kEpoch);
    EXPECT_EQ(h[8], 3);      // worker
    EXPECT_EQ(h[10], 0xdc);  // 1500 = 0x5dc
    EXPECT_EQ(h[11], 0x05);
    const Bytes q = encode(edges_request());
    ASSERT_EQ(q.size(), 8u + 8 + 4);
    EXPECT_EQ(q[1], 11);
    EXPECT_EQ(le(q, 4, 4), kEpoch);
    EXPECT_EQ(q[8], 0xa8);  // round, low byte first
    EXPECT_EQ(q[15], 0xa1);
    EXPECT_EQ(q[16], 0xe8);  // 1000 = 0x3e8
    EXPECT_EQ(q[17], 0x03);
    const Bytes e = encode(edges());
    // head 22 (header 8, round 8, worker 2, flags, reserved, count 2); entries: waiter 6,
    // holder 6, master 2, id 8, since 8, order 8, resource
    ASSERT_EQ(e.size(), 22u + (38 + 2 + 9) + (38 + 2 + 8));
    EXPECT_EQ(e[1], 12);
    EXPECT_EQ(le(e, 4, 4), kEpoch);
    EXPECT_EQ(e[8], 0xa8);  // round
    EXPECT_EQ(e[15], 0xa1);
    EXPECT_EQ(e[16], 1);  // worker
    EXPECT_EQ(e[18], kEdgesLast);
    EXPECT_EQ(e[19], 0);  // reserved
    EXPECT_EQ(e[20], 2);  // count
    EXPECT_EQ(e[22], 2);  // waiter node 2
    EXPECT_EQ(e[24], 77);
    EXPECT_EQ(e[28], 3);     // holder node 3
    EXPECT_EQ(e[34], 5);     // master
    EXPECT_EQ(e[36], 0x08);  // request id
    EXPECT_EQ(e[44], 0xd6);  // since -42
    EXPECT_EQ(e[51], 0xff);
    EXPECT_EQ(e[52], 77);  // order
    EXPECT_EQ(e[60], 1);   // text resource
    EXPECT_EQ(e[61], 9);
}

TEST(GesWire, DeadlockSearchFieldsAreValidated) {
    expect_bad(hint(), 8, kMaxWireWorkers, GesWireError::BadWorker);
    expect_bad(hint(), 9, 1, GesWireError::BadWorker);
    {
        Bytes b = encode(edges_request());
        for (size_t i = 8; i < 16; ++i) b[i] = 0;
        EXPECT_EQ(decode(b), GesWireError::BadRound);
        b = encode(edges_request());
        for (size_t i = 16; i < 20; ++i) b[i] = 0;
        EXPECT_EQ(decode(b), GesWireError::BadRound);
    }
    const GesMessage m = edges();
    {
        Bytes b = encode(m);
        for (size_t i = 8; i < 16; ++i) b[i] = 0;
        EXPECT_EQ(decode(b), GesWireError::BadRound);
    }
    expect_bad(m, 16, kMaxWireWorkers, GesWireError::BadWorker);
    expect_bad(m, 18, 0x04, GesWireError::BadFlags);
    expect_bad(m, 18, kEdgesLast | kEdgesIncomplete, GesWireError::None);
    expect_bad(m, 19, 1, GesWireError::BadReserved);
    expect_bad(m, 20, 1, GesWireError::TrailingBytes);  // fewer counted than sent
    expect_bad(m, 20, 3, GesWireError::Truncated);      // more counted than sent
    expect_bad(m, 21, 0x02, GesWireError::Truncated);   // 514: allowed, but not there
    expect_bad(m, 21, 0x03, GesWireError::BadCount);    // 770 > kMaxEdgeEntries
    // First entry at 22: waiter 22..27, holder 28..33, master 34..35, id 36..43,
    // since 44..51, order 52..59, resource 60.
    expect_bad(m, 22, 0, GesWireError::BadNode);
    expect_bad(m, 28, 65, GesWireError::BadNode);
    expect_bad(m, 34, 0, GesWireError::BadNode);
    expect_bad(m, 28, 2, GesWireError::None);  // holder node 2, proc 88: another owner
    {
        Bytes b = encode(m);  // holder := waiter: an owner cannot wait for itself
        for (size_t i = 0; i < 6; ++i) b[28 + i] = b[22 + i];
        EXPECT_EQ(decode(b), GesWireError::BadEdge);
        b = encode(m);
        for (size_t i = 36; i < 44; ++i) b[i] = 0;
        EXPECT_EQ(decode(b), GesWireError::BadRequestId);
    }
    expect_bad(m, 60, 3, GesWireError::BadResource);
    expect_bad(m, 62, 0, GesWireError::BadResource);  // NUL in text
    // Encoding refuses what decoding would.
    Bytes out;
    GesMessage bad = m;
    bad.edges[1].holder = bad.edges[1].waiter;
    EXPECT_EQ(encode_ges_message(bad, &out), GesWireError::BadEdge);
    bad = m;
    bad.edges.assign(kMaxEdgeEntries + 1, m.edges[0]);
    EXPECT_EQ(encode_ges_message(bad, &out), GesWireError::BadCount);
    bad = m;
    bad.round = 0;
    EXPECT_EQ(encode_ges_message(bad, &out), GesWireError::BadRound);
    GesMessage q = edges_request();
    q.wait_ms = 0;
    EXPECT_EQ(encode_ges_message(q, &out), GesWireError::BadRound);
    GesMessage h = hint();
    h.worker = kMaxWireWorkers;
    EXPECT_EQ(encode_ges_message(h, &out), GesWireError::BadWorker);
    EXPECT_TRUE(out.empty());
}

TEST(GesWire, EdgesAreSplitIntoBoundedMessagesAndTheLastIsMarked) {
    std::vector<WaitForEdge> all;
    for (int k = 0; k < 1300; ++k) {
        WaitForEdge e = wf(Owner{1, static_cast<uint32_t>(k + 1)}, Owner{2, 1},
                           *ResourceName::from_text(std::string(64, 'a' + k % 26)));
        e.request_id = k + 1;
        all.push_back(e);
    }
    WaitForEdge invalid = all[0];
    invalid.holder = invalid.waiter;
    all.push_back(invalid);  // left out
    for (bool incomplete : {false, true}) {
        const auto msgs = encode_edges_messages(99, 2, all, incomplete);
        ASSERT_EQ(msgs.size(), 3u);
        std::vector<WaitForEdge> back;
        for (size_t i = 0; i < msgs.size(); ++i) {
            EXPECT_LE(msgs[i].size(), kMaxGesMessage);
            GesMessage m;
            ASSERT_EQ(decode_ges_message(msgs[i].data(), msgs[i].size(), &m), GesWireError::None);
            EXPECT_EQ(m.round, 99u);
            EXPECT_EQ(m.worker, 2);
            EXPECT_EQ((m.flags & kEdgesLast) != 0, i + 1 == msgs.size());
            EXPECT_EQ((m.flags & kEdgesIncomplete) != 0, incomplete);
            back.insert(back.end(), m.edges.begin(), m.edges.end());
        }
        std::vector<WaitForEdge> expect(all.begin(), all.end() - 1);
        EXPECT_TRUE(back == expect);
    }
    const auto empty = encode_edges_messages(7, 0, {}, false);
    ASSERT_EQ(empty.size(), 1u);
    GesMessage m;
    ASSERT_EQ(decode_ges_message(empty[0].data(), empty[0].size(), &m), GesWireError::None);
    EXPECT_EQ(m.flags, kEdgesLast);
    EXPECT_TRUE(m.edges.empty());
    EXPECT_TRUE(encode_edges_messages(0, 0, all, false).empty());  // round 0 cannot be sent
}

TEST(GesWire, EventsBecomeTheirMessages) {
    const Owner o{4, 9};
    Event g = Event::granted(o, kInt, LockMode::EX, 5);
    g.token = kToken;  // set by the glue
    const Event b = Event::bast(o, kInt, LockMode::PR, 6);
    const Event d = Event::denied(o, kInt, LockMode::CW, 7, DenyReason::Deadlock);
    EXPECT_EQ(message_for_event(g).type, GesMsgType::Grant);
    EXPECT_EQ(message_for_event(g).token, kToken);
    EXPECT_EQ(message_for_event(b).type, GesMsgType::Bast);
    const GesMessage dm = message_for_event(d);
    EXPECT_EQ(dm.type, GesMsgType::Deny);
    EXPECT_EQ(dm.reason, DenyReason::Deadlock);
    EXPECT_EQ(dm.request_id, 7u);
    for (const Event& e : {g, b, d}) {
        const Bytes bytes = encode(message_for_event(e));
        GesMessage back;
        ASSERT_EQ(decode_ges_message(bytes.data(), bytes.size(), &back), GesWireError::None);
        EXPECT_EQ(back.owner, o);
        EXPECT_EQ(back.resource, kInt);
        EXPECT_EQ(back.mode, e.mode);
        EXPECT_EQ(back.token, e.type == EventType::Granted ? kToken : 0u);
    }
}

TEST(GesWire, NamesAreStable) {
    EXPECT_STREQ(ges_wire_error_name(GesWireError::BadResource), "bad_resource");
    EXPECT_STREQ(ges_msg_type_name(GesMsgType::ReleaseAll), "release_all");
    EXPECT_STREQ(ges_msg_type_name(GesMsgType::WaitHint), "wait_hint");
    EXPECT_STREQ(ges_msg_type_name(GesMsgType::EdgesRequest), "edges_request");
    EXPECT_STREQ(ges_msg_type_name(GesMsgType::Edges), "edges");
    EXPECT_STREQ(ges_wire_error_name(GesWireError::BadEdge), "bad_edge");
    EXPECT_STREQ(deny_reason_name(DenyReason::Deadlock), "deadlock");
    EXPECT_STREQ(deny_reason_name(DenyReason::NoQuorum), "no_quorum");
    EXPECT_EQ(static_cast<uint8_t>(DenyReason::NoQuorum), 7);
    EXPECT_STREQ(ges_wire_error_name(GesWireError::BadVersion), "bad_version");
    EXPECT_STREQ(lock_state_name(LockState::Converting), "converting");
}
