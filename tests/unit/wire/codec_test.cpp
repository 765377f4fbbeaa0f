// The one wire codec (src/ic/wire/codec.hpp): exact little-endian bytes, one field
// list for both directions, and every way a buffer can be short or long.
#include "ic/wire/codec.hpp"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <type_traits>
#include <vector>

using namespace pgrac::ic;

namespace {

enum class Kind : uint16_t { A = 0x0102, B = 0xfffe };

struct Record {
    uint8_t version = 0;
    Kind kind = Kind::A;
    int64_t value = 0;
    std::string name;
    std::array<uint8_t, 3> tag{};

    template <class C, class S>
    static void fields(C& c, S& s) {
        c.le(s.version, "version");
        c.le(s.kind, "kind");
        c.le(s.value, "value");
        c.str8(s.name, 8, "name");
        c.fixed(s.tag, "tag");
    }
};

Record sample() {
    Record r;
    r.version = 7;
    r.kind = Kind::B;
    r.value = -2;
    r.name = "abc";
    r.tag = {0xaa, 0xbb, 0xcc};
    return r;
}

const std::vector<uint8_t> kSampleBytes = {0x07,        // version
                                           0xfe, 0xff,  // kind, low byte first
                                           0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,  // -2
                                           0x03, 'a',  'b',  'c',                           // name
                                           0xaa, 0xbb, 0xcc};                               // tag

struct Small {
    uint32_t a = 0x0a0b0c0d;
    uint16_t b = 0x0102;
    template <class C, class S>
    static void fields(C& c, S& s) {
        c.le(s.a, "a");
        c.le(s.b, "b");
    }
};

}  // namespace

TEST(Codec, StoreAndLoadAreLittleEndianWhateverTheHost) {
    uint8_t b[8] = {};
    codec::store_le<uint32_t>(b, 0x01020304u);
    EXPECT_EQ(b[0], 0x04);
    EXPECT_EQ(b[3], 0x01);
    EXPECT_EQ(codec::load_le<uint32_t>(b), 0x01020304u);
    codec::store_le<int64_t>(b, -1);
    for (uint8_t x : b) EXPECT_EQ(x, 0xff);
    EXPECT_EQ(codec::load_le<int64_t>(b), -1);
    codec::store_le(b, Kind::A);
    EXPECT_EQ(b[0], 0x02);
    EXPECT_EQ(b[1], 0x01);
    EXPECT_EQ(codec::load_le<Kind>(b), Kind::A);
}

TEST(Codec, OneFieldListEncodesTheExactBytes) {
    EXPECT_EQ(codec::encode(sample()), kSampleBytes);
}

TEST(Codec, OneFieldListDecodesWhatItEncodes) {
    Record r;
    std::string err;
    ASSERT_TRUE(codec::decode(kSampleBytes.data(), kSampleBytes.size(), &r, &err)) << err;
    EXPECT_EQ(r.version, 7);
    EXPECT_EQ(r.kind, Kind::B);
    EXPECT_EQ(r.value, -2);
    EXPECT_EQ(r.name, "abc");
    EXPECT_EQ(r.tag, (std::array<uint8_t, 3>{0xaa, 0xbb, 0xcc}));
}

TEST(Codec, EveryTruncationNamesTheFieldItEndsIn) {
    const char* field_at[] = {"version", "kind",  "kind",  "value", "value", "value",
                              "value",   "value", "value", "value", "value", "name",
                              "name",    "name",  "name",  "tag",   "tag",   "tag"};
    ASSERT_EQ(std::size(field_at), kSampleBytes.size());
    for (size_t n = 0; n < kSampleBytes.size(); ++n) {
        Record r;
        std::string err;
        EXPECT_FALSE(codec::decode(kSampleBytes.data(), n, &r, &err)) << n;
        EXPECT_EQ(err,
                  "the payload (" + std::to_string(n) + " bytes) ends inside the " + field_at[n])
            << n;
    }
}

TEST(Codec, TrailingBytesAreRefused) {
    std::vector<uint8_t> b = kSampleBytes;
    b.push_back(0);
    b.push_back(0);
    Record r;
    std::string err;
    EXPECT_FALSE(codec::decode(b.data(), b.size(), &r, &err));
    EXPECT_EQ(err, "2 unexpected bytes follow the last field");
}

TEST(Codec, StringLongerThanItsLimitIsRefusedOnReadAndCutOnWrite) {
    std::vector<uint8_t> b = kSampleBytes;
    b[11] = 9;  // name length, limit 8
    b.insert(b.begin() + 15, {'d', 'e', 'f', 'g', 'h', 'i'});
    Record r;
    std::string err;
    EXPECT_FALSE(codec::decode(b.data(), b.size(), &r, &err));
    EXPECT_EQ(err, "the name is 9 bytes long, at most 8 are allowed");

    Record w = sample();
    w.name = "abcdefghijkl";
    const std::vector<uint8_t> out = codec::encode(w);
    EXPECT_EQ(out[11], 8);
    ASSERT_TRUE(codec::decode(out.data(), out.size(), &r, &err)) << err;
    EXPECT_EQ(r.name, "abcdefgh");
}

TEST(Codec, AfterTheFirstProblemNothingIsReadAndTheFirstProblemStays) {
    const uint8_t b[3] = {1, 2, 3};
    codec::Reader rd(b, sizeof b);
    uint32_t x = 0xdeadbeef;
    EXPECT_FALSE(rd.le(x, "word"));
    EXPECT_EQ(x, 0xdeadbeefu);
    uint8_t y = 9;
    EXPECT_FALSE(rd.le(y, "byte"));  // would fit, but reading has stopped
    EXPECT_EQ(y, 9);
    EXPECT_EQ(rd.le<uint8_t>(), 0);
    EXPECT_EQ(rd.bytes(1), nullptr);
    rd.fail("a later phrase");
    EXPECT_FALSE(rd.ok());
    EXPECT_EQ(rd.error(), "the payload (3 bytes) ends inside the word");
}

TEST(Codec, FixedWriterWritesTheSameBytesAndRefusesWhatDoesNotFit) {
    uint8_t out[8] = {};
    EXPECT_EQ(codec::encode_to(Small{}, out, sizeof out), 6u);
    EXPECT_EQ(std::vector<uint8_t>(out, out + 6), codec::encode(Small{}));
    uint8_t tight[5] = {0xee, 0xee, 0xee, 0xee, 0xee};
    EXPECT_EQ(codec::encode_to(Small{}, tight, sizeof tight), 0u);
    EXPECT_EQ(tight[4], 0xee);  // b did not fit: not even partly written
    Small back;
    back.a = 0;
    EXPECT_TRUE(codec::decode(out, 6, &back));
    EXPECT_EQ(back.a, 0x0a0b0c0du);
    EXPECT_FALSE(codec::decode(out, 5, &back));
    // The reader keeps no heap state: it may live in a PostgreSQL frame.
    static_assert(std::is_trivially_destructible_v<codec::Reader>);
    static_assert(std::is_trivially_destructible_v<codec::FixedWriter>);
}

TEST(Codec, CallerChecksBecomeTheError) {
    const uint8_t b[1] = {0};
    codec::Reader rd(b, sizeof b);
    EXPECT_EQ(rd.le<uint8_t>(), 0);
    EXPECT_TRUE(rd.at_end());
    rd.fail("mode 0 is not a lock mode");
    EXPECT_FALSE(rd.finish());
    EXPECT_EQ(rd.error(), "mode 0 is not a lock mode");
}
