// crc32c: the standard check value, RFC 3720 test vectors, and chaining.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "ic/wire/crc32c.hpp"

using pgrac::ic::crc32c;

TEST(Crc32c, CheckValue) {
    EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
}

TEST(Crc32c, EmptyInputKeepsTheRunningValue) {
    EXPECT_EQ(crc32c("", 0), 0u);
    EXPECT_EQ(crc32c("", 0, 0xE3069283u), 0xE3069283u);
}

// iSCSI's own vectors (RFC 3720, appendix B.4).
TEST(Crc32c, Rfc3720Vectors) {
    uint8_t buf[32];
    std::memset(buf, 0, sizeof buf);
    EXPECT_EQ(crc32c(buf, sizeof buf), 0x8A9136AAu);
    std::memset(buf, 0xFF, sizeof buf);
    EXPECT_EQ(crc32c(buf, sizeof buf), 0x62A8AB43u);
    for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(i);
    EXPECT_EQ(crc32c(buf, sizeof buf), 0x46DD794Eu);
    for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(31 - i);
    EXPECT_EQ(crc32c(buf, sizeof buf), 0x113FDB5Cu);
}

TEST(Crc32c, ChainsAcrossAnySplit) {
    std::mt19937 rng(7);
    std::vector<uint8_t> data(100000);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    const uint32_t whole = crc32c(data.data(), data.size());
    for (size_t split :
         {size_t{0}, size_t{1}, size_t{3}, size_t{4096}, size_t{65537}, data.size()}) {
        const uint32_t head = crc32c(data.data(), split);
        EXPECT_EQ(crc32c(data.data() + split, data.size() - split, head), whole) << split;
    }
}

TEST(Crc32c, DetectsEverySingleBitFlip) {
    std::vector<uint8_t> data(64, 0x5A);
    const uint32_t good = crc32c(data.data(), data.size());
    for (size_t bit = 0; bit < data.size() * 8; ++bit) {
        data[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
        EXPECT_NE(crc32c(data.data(), data.size()), good) << bit;
        data[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    }
}
