// GES wire codec: every message round-trips, the layout is what docs/ges.md
// says, and every malformed field, truncation and trailing byte is rejected.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "ic/ges_wire.hpp"

using namespace pgrac::ic::ges;

namespace {

using Bytes = std::vector<uint8_t>;

const ResourceName kText = *ResourceName::from_text("orders:42");
const ResourceName kInt = ResourceName::from_int(-5);

GesMessage base(GesMsgType t) {
    GesMessage m;
    m.type = t;
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
    return e;
}

GesMessage replay() {
    GesMessage m;
    m.type = GesMsgType::Replay;
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
    m.worker = 3;
    m.wait_ms = 1500;
    return m;
}

GesMessage edges_request() {
    GesMessage m;
    m.type = GesMsgType::EdgesRequest;
    m.round = 0xa1a2a3a4a5a6a7a8ULL;
    m.wait_ms = 1000;
    return m;
}

GesMessage edges() {
    GesMessage m;
    m.type = GesMsgType::Edges;
    m.round = 0xa1a2a3a4a5a6a7a8ULL;
    m.worker = 1;
    m.flags = kEdgesLast;
    m.edges = {wf(Owner{2, 77}, Owner{3, 88}, kText), wf(Owner{3, 88}, Owner{2, 77}, kInt)};
    return m;
}

bool has_owner(GesMsgType t) {
    const auto v = static_cast<uint8_t>(t);
    return v >= 1 && v <= 8;
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

}  // namespace

TEST(GesWire, EveryMessageRoundTrips) {
    for (const GesMessage& m : all_messages()) {
        for (const ResourceName& r :
             {kText, kInt, *ResourceName::from_text(std::string(64, 'z'))}) {
            GesMessage x = m;
            x.resource = r;
            const Bytes b = encode(x);
            GesMessage back;
            ASSERT_EQ(decode_ges_message(b.data(), b.size(), &back), GesWireError::None)
                << ges_msg_type_name(m.type);
            EXPECT_TRUE(back == x) << ges_msg_type_name(m.type);
            EXPECT_EQ(back.type, m.type);
        }
    }
}

TEST(GesWire, LayoutIsLittleEndianAsDocumented) {
    const Bytes b = encode(base(GesMsgType::Request));
    // version, type, reserved
    ASSERT_EQ(b.size(), 4u + 6 + 8 + 1 + 1 + 4 + 2 + 9);
    EXPECT_EQ(b[0], 1);
    EXPECT_EQ(b[1], 1);
    EXPECT_EQ(b[2], 0);
    EXPECT_EQ(b[3], 0);
    EXPECT_EQ(b[4], 3);  // node 3
    EXPECT_EQ(b[5], 0);
    EXPECT_EQ(b[6], 0x92);  // proc 4242 = 0x1092
    EXPECT_EQ(b[7], 0x10);
    EXPECT_EQ(b[10], 0x88);  // request id, low byte first
    EXPECT_EQ(b[17], 0x11);
    EXPECT_EQ(b[18], static_cast<uint8_t>(LockMode::PW));
    EXPECT_EQ(b[19], kNoWait);
    EXPECT_EQ(b[20], 0x88);  // 5000 = 0x1388
    EXPECT_EQ(b[21], 0x13);
    EXPECT_EQ(b[24], 1);  // text
    EXPECT_EQ(b[25], 9);
    EXPECT_EQ(std::string(b.begin() + 26, b.end()), "orders:42");
    EXPECT_EQ(encode(base(GesMsgType::ReleaseAll)).size(), 10u);
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
        expect_bad(m, 0, 2, GesWireError::BadVersion);
        expect_bad(m, 1, 0, GesWireError::BadType);
        expect_bad(m, 1, kMaxGesMsgType + 1, GesWireError::BadType);
        expect_bad(m, 2, 1, GesWireError::BadReserved);
        expect_bad(m, 3, 0x80, GesWireError::BadReserved);
    }
}

TEST(GesWire, OwnerNodeIsValidated) {
    for (const GesMessage& m : all_messages()) {
        if (!has_owner(m.type)) continue;
        expect_bad(m, 4, 0, GesWireError::BadNode);
        expect_bad(m, 4, 65, GesWireError::BadNode);
        expect_bad(m, 5, 1, GesWireError::BadNode);  // 259
    }
}

TEST(GesWire, RequestFieldsAreValidated) {
    for (GesMsgType t : {GesMsgType::Request, GesMsgType::Convert}) {
        const GesMessage m = base(t);
        for (size_t i = 10; i < 18; ++i) {  // a zero request id
            GesMessage z = m;
            z.request_id = 0;
            Bytes b;
            EXPECT_EQ(encode_ges_message(z, &b), GesWireError::BadRequestId);
            EXPECT_TRUE(b.empty());
        }
        Bytes b = encode(m);
        for (size_t i = 10; i < 18; ++i) b[i] = 0;
        EXPECT_EQ(decode(b), GesWireError::BadRequestId);
        expect_bad(m, 18, 6, GesWireError::BadMode);
        expect_bad(m, 18, 0xff, GesWireError::BadMode);
        expect_bad(m, 19, 0x02, GesWireError::BadFlags);
        expect_bad(m, 19, 0x80, GesWireError::BadFlags);
    }
}

TEST(GesWire, ResourceIsValidated) {
    // Request: resource at offset 24; Release at 10; Cancel at 19; Grant/Bast at 19; Deny at 20.
    const std::pair<GesMsgType, size_t> where[] = {
        {GesMsgType::Request, 24}, {GesMsgType::Convert, 24}, {GesMsgType::Release, 10},
        {GesMsgType::Cancel, 19},  {GesMsgType::Grant, 19},   {GesMsgType::Bast, 19},
        {GesMsgType::Deny, 20}};
    for (const auto& [t, off] : where) {
        const GesMessage m = base(t);
        expect_bad(m, off, 0, GesWireError::BadResource);       // kind 0
        expect_bad(m, off, 3, GesWireError::BadResource);       // kind 3
        expect_bad(m, off + 1, 0, GesWireError::BadResource);   // empty text
        expect_bad(m, off + 1, 65, GesWireError::BadResource);  // too long
        expect_bad(m, off + 1, 10, GesWireError::Truncated);    // longer than the bytes
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
    b.resize(12);
    b[11] = 0;  // text of length 0, nothing after
    EXPECT_EQ(decode(b), GesWireError::BadResource);
}

TEST(GesWire, CancelGrantBastDenyFieldsAreValidated) {
    const GesMessage cancel = base(GesMsgType::Cancel);
    for (uint8_t r : {0, 1, 5, 6, 7, 255}) expect_bad(cancel, 18, r, GesWireError::BadReason);
    for (uint8_t r : {2, 3, 4}) expect_bad(cancel, 18, r, GesWireError::None);
    GesMessage any = cancel;
    any.request_id = 0;  // cancel whatever is pending
    EXPECT_EQ(decode(encode(any)), GesWireError::None);

    for (GesMsgType t : {GesMsgType::Grant, GesMsgType::Bast, GesMsgType::Deny}) {
        const GesMessage m = base(t);
        expect_bad(m, 18, 6, GesWireError::BadMode);
        Bytes b = encode(m);
        for (size_t i = 10; i < 18; ++i) b[i] = 0;
        EXPECT_EQ(decode(b), GesWireError::BadRequestId) << ges_msg_type_name(t);
    }
    expect_bad(base(GesMsgType::Bast), 18, 0, GesWireError::BadMode);  // NL blocks nobody
    expect_bad(base(GesMsgType::Grant), 18, 0, GesWireError::None);    // NL can be granted
    const GesMessage deny = base(GesMsgType::Deny);
    expect_bad(deny, 19, 0, GesWireError::BadReason);
    expect_bad(deny, 19, kMaxDenyReason + 1, GesWireError::BadReason);
    for (uint8_t r = 1; r <= kMaxDenyReason; ++r) expect_bad(deny, 19, r, GesWireError::None);
}

TEST(GesWire, ReplayFieldsAreValidated) {
    const GesMessage m = replay();
    expect_bad(m, 4, 0x02, GesWireError::BadFlags);
    expect_bad(m, 5, 1, GesWireError::BadReserved);
    expect_bad(m, 6, 2, GesWireError::TrailingBytes);  // fewer counted than sent
    expect_bad(m, 6, 4, GesWireError::Truncated);      // more counted than sent
    expect_bad(m, 7, 0x02, GesWireError::Truncated);   // 515: allowed, but not there
    expect_bad(m, 7, 0x03, GesWireError::BadCount);    // 771 > kMaxReplayEntries
    // First entry starts at 8: owner 8..13, id 14..21, since 22..29, state 30,
    // granted 31, requested 32, flags 33, resource 34.
    expect_bad(m, 8, 0, GesWireError::BadNode);
    Bytes b = encode(m);
    for (size_t i = 14; i < 22; ++i) b[i] = 0;
    EXPECT_EQ(decode(b), GesWireError::BadRequestId);
    expect_bad(m, 30, 0, GesWireError::BadState);
    expect_bad(m, 30, 4, GesWireError::BadState);
    expect_bad(m, 30, 3, GesWireError::BadState);  // waiting while granted PR
    expect_bad(m, 30, 2, GesWireError::BadState);  // converting PR -> PR
    expect_bad(m, 31, 6, GesWireError::BadMode);
    expect_bad(m, 32, 9, GesWireError::BadMode);
    expect_bad(m, 32, 5, GesWireError::BadState);  // granted with requested != granted
    expect_bad(m, 33, 2, GesWireError::BadFlags);
    expect_bad(m, 34, 7, GesWireError::BadResource);
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

TEST(GesWire, ReplayIsSplitIntoBoundedMessagesAndTheLastIsMarked) {
    std::vector<ReplayEntry> entries;
    for (int k = 0; k < 1500; ++k) {
        ReplayEntry e = entry(LockState::Granted, LockMode::EX, LockMode::EX,
                              *ResourceName::from_text(std::string(64, 'a' + k % 26)));
        e.request_id = k + 1;
        entries.push_back(e);
    }
    ReplayEntry invalid = entries[0];
    invalid.owner.node = 0;
    entries.push_back(invalid);  // left out
    const auto msgs = encode_replay_messages(entries);
    ASSERT_EQ(msgs.size(), 3u);
    std::vector<ReplayEntry> back;
    for (size_t i = 0; i < msgs.size(); ++i) {
        EXPECT_LE(msgs[i].size(), kMaxGesMessage);
        GesMessage m;
        ASSERT_EQ(decode_ges_message(msgs[i].data(), msgs[i].size(), &m), GesWireError::None);
        EXPECT_EQ(m.flags == kReplayLast, i + 1 == msgs.size());
        back.insert(back.end(), m.entries.begin(), m.entries.end());
    }
    entries.pop_back();
    EXPECT_TRUE(back == entries);

    const auto empty = encode_replay_messages({});
    ASSERT_EQ(empty.size(), 1u);
    GesMessage m;
    ASSERT_EQ(decode_ges_message(empty[0].data(), empty[0].size(), &m), GesWireError::None);
    EXPECT_EQ(m.flags, kReplayLast);
    EXPECT_TRUE(m.entries.empty());
}

TEST(GesWire, DeadlockSearchLayoutIsAsDocumented) {
    const Bytes h = encode(hint());
    ASSERT_EQ(h.size(), 4u + 2 + 4);
    EXPECT_EQ(h[1], 10);
    EXPECT_EQ(h[4], 3);     // worker
    EXPECT_EQ(h[6], 0xdc);  // 1500 = 0x5dc
    EXPECT_EQ(h[7], 0x05);
    const Bytes q = encode(edges_request());
    ASSERT_EQ(q.size(), 4u + 8 + 4);
    EXPECT_EQ(q[1], 11);
    EXPECT_EQ(q[4], 0xa8);  // round, low byte first
    EXPECT_EQ(q[11], 0xa1);
    EXPECT_EQ(q[12], 0xe8);  // 1000 = 0x3e8
    EXPECT_EQ(q[13], 0x03);
    const Bytes e = encode(edges());
    // head 18; entries: waiter 6, holder 6, master 2, id 8, since 8, order 8, resource
    ASSERT_EQ(e.size(), 18u + (38 + 2 + 9) + (38 + 2 + 8));
    EXPECT_EQ(e[1], 12);
    EXPECT_EQ(e[12], 1);  // worker
    EXPECT_EQ(e[14], kEdgesLast);
    EXPECT_EQ(e[15], 0);  // reserved
    EXPECT_EQ(e[16], 2);  // count
    EXPECT_EQ(e[18], 2);  // waiter node 2
    EXPECT_EQ(e[20], 77);
    EXPECT_EQ(e[24], 3);     // holder node 3
    EXPECT_EQ(e[30], 5);     // master
    EXPECT_EQ(e[32], 0x08);  // request id
    EXPECT_EQ(e[40], 0xd6);  // since -42
    EXPECT_EQ(e[47], 0xff);
    EXPECT_EQ(e[48], 77);  // order
    EXPECT_EQ(e[56], 1);   // text resource
    EXPECT_EQ(e[57], 9);
}

TEST(GesWire, DeadlockSearchFieldsAreValidated) {
    expect_bad(hint(), 4, kMaxWireWorkers, GesWireError::BadWorker);
    expect_bad(hint(), 5, 1, GesWireError::BadWorker);
    {
        Bytes b = encode(edges_request());
        for (size_t i = 4; i < 12; ++i) b[i] = 0;
        EXPECT_EQ(decode(b), GesWireError::BadRound);
        b = encode(edges_request());
        for (size_t i = 12; i < 16; ++i) b[i] = 0;
        EXPECT_EQ(decode(b), GesWireError::BadRound);
    }
    const GesMessage m = edges();
    {
        Bytes b = encode(m);
        for (size_t i = 4; i < 12; ++i) b[i] = 0;
        EXPECT_EQ(decode(b), GesWireError::BadRound);
    }
    expect_bad(m, 12, kMaxWireWorkers, GesWireError::BadWorker);
    expect_bad(m, 14, 0x04, GesWireError::BadFlags);
    expect_bad(m, 14, kEdgesLast | kEdgesIncomplete, GesWireError::None);
    expect_bad(m, 15, 1, GesWireError::BadReserved);
    expect_bad(m, 16, 1, GesWireError::TrailingBytes);  // fewer counted than sent
    expect_bad(m, 16, 3, GesWireError::Truncated);      // more counted than sent
    expect_bad(m, 17, 0x02, GesWireError::Truncated);   // 514: allowed, but not there
    expect_bad(m, 17, 0x03, GesWireError::BadCount);    // 770 > kMaxEdgeEntries
    // First entry at 18: waiter 18..23, holder 24..29, master 30..31, id 32..39,
    // since 40..47, order 48..55, resource 56.
    expect_bad(m, 18, 0, GesWireError::BadNode);
    expect_bad(m, 24, 65, GesWireError::BadNode);
    expect_bad(m, 30, 0, GesWireError::BadNode);
    expect_bad(m, 24, 2, GesWireError::None);  // holder node 2, proc 88: another owner
    {
        Bytes b = encode(m);  // holder := waiter: an owner cannot wait for itself
        for (size_t i = 0; i < 6; ++i) b[24 + i] = b[18 + i];
        EXPECT_EQ(decode(b), GesWireError::BadEdge);
        b = encode(m);
        for (size_t i = 32; i < 40; ++i) b[i] = 0;
        EXPECT_EQ(decode(b), GesWireError::BadRequestId);
    }
    expect_bad(m, 56, 3, GesWireError::BadResource);
    expect_bad(m, 58, 0, GesWireError::BadResource);  // NUL in text
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
    const Event g = Event::granted(o, kInt, LockMode::EX, 5);
    const Event b = Event::bast(o, kInt, LockMode::PR, 6);
    const Event d = Event::denied(o, kInt, LockMode::CW, 7, DenyReason::Deadlock);
    EXPECT_EQ(message_for_event(g).type, GesMsgType::Grant);
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
    EXPECT_STREQ(lock_state_name(LockState::Converting), "converting");
}
