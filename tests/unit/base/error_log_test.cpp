// ErrorLog: names, wrap-around keeping the newest entries with exact totals,
// concurrent writers (with a concurrent reader checking for torn entries) and
// safe truncation of long and multibyte descriptions.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ic/base/error_log.hpp"

using namespace pgrac::ic;

namespace {

constexpr size_t kTypes = static_cast<size_t>(ErrorType::kCount);

std::unique_ptr<ErrorLog> fresh() {
    auto log = std::make_unique<ErrorLog>();
    log->reset();
    return log;
}

// True if s is well-formed UTF-8 (no truncated or stray sequences).
bool valid_utf8(const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        size_t n = c < 0x80           ? 1
                   : (c >> 5) == 0x6  ? 2
                   : (c >> 4) == 0xE  ? 3
                   : (c >> 3) == 0x1E ? 4
                                      : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (size_t k = 1; k < n; k++) {
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
        }
        i += n;
    }
    return true;
}

std::string stored(const std::string& description) {
    auto log = fresh();
    log->add(ErrorType::Internal, Severity::Error, -1, 0, description.c_str());
    ErrorEntry e;
    EXPECT_EQ(log->snapshot(&e, 1), 1u);
    return std::string(e.description);
}

}  // namespace

TEST(ErrorLog, Names) {
    const char* want[] = {"malformed_frame",
                          "bad_checksum",
                          "oversized_message",
                          "unknown_node",
                          "address_mismatch",
                          "wrong_key",
                          "cluster_mismatch",
                          "system_mismatch",
                          "version_mismatch",
                          "handshake_failed",
                          "connect_failed",
                          "peer_down",
                          "peer_reset",
                          "queue_full",
                          "inbox_full",
                          "rpc_timeout",
                          "no_handler",
                          "handler_error",
                          "cq_overflow",
                          "qp_error",
                          "tier_fallback",
                          "internal",
                          "stale_epoch",
                          "wrong_source",
                          "replay_conflict",
                          "fenced",
                          "membership_change",
                          "duplicate_node",
                          "limit_mismatch",
                          "frame_auth_failed",
                          "unauthenticated_limit",
                          "accept_paused",
                          "config_mismatch",
                          "config_drift",
                          "busy",
                          "future_epoch",
                          "barrier_overdue"};
    static_assert(sizeof(want) / sizeof(want[0]) == kTypes, "one name per type");
    for (size_t i = 0; i < kTypes; i++) {
        EXPECT_STREQ(error_type_name(static_cast<ErrorType>(i)), want[i]);
    }
    EXPECT_STREQ(error_type_name(ErrorType::kCount), "unknown");
    EXPECT_STREQ(severity_name(Severity::Info), "INFO");
    EXPECT_STREQ(severity_name(Severity::Warning), "WARNING");
    EXPECT_STREQ(severity_name(Severity::Error), "ERROR");
    EXPECT_STREQ(severity_name(static_cast<Severity>(9)), "UNKNOWN");
}

TEST(ErrorLog, EmptyAndOne) {
    auto log = fresh();
    ErrorEntry out[4];
    EXPECT_EQ(log->snapshot(out, 4), 0u);
    log->add(ErrorType::WrongKey, Severity::Warning, 3, 12345, "bad key from node 3");
    ASSERT_EQ(log->snapshot(out, 4), 1u);
    EXPECT_EQ(out[0].seq, 2u);
    EXPECT_EQ(out[0].time_us, 12345);
    EXPECT_EQ(out[0].peer_node, 3);
    EXPECT_EQ(out[0].type, static_cast<uint16_t>(ErrorType::WrongKey));
    EXPECT_EQ(out[0].severity, static_cast<uint8_t>(Severity::Warning));
    EXPECT_STREQ(out[0].description, "bad key from node 3");
    EXPECT_EQ(log->total(ErrorType::WrongKey), 1u);
    EXPECT_EQ(log->total(ErrorType::PeerDown), 0u);
    EXPECT_EQ(log->snapshot(out, 0), 0u);
    log->add(ErrorType::PeerDown, Severity::Info, 1, 1, nullptr);
    ASSERT_EQ(log->snapshot(out, 4), 2u);
    EXPECT_STREQ(out[0].description, "");
}

TEST(ErrorLog, WrapKeepsNewestAndTotalsExact) {
    auto log = fresh();
    constexpr int kAdds = 1000;
    uint64_t want[kTypes] = {};
    for (int i = 0; i < kAdds; i++) {
        const auto type = static_cast<ErrorType>(i % kTypes);
        want[i % kTypes]++;
        log->add(type, Severity::Error, i % 7, i, ("e" + std::to_string(i)).c_str());
    }
    EXPECT_EQ(log->next, uint64_t{kAdds});
    for (size_t t = 0; t < kTypes; t++) EXPECT_EQ(log->total(static_cast<ErrorType>(t)), want[t]);

    std::vector<ErrorEntry> out(ErrorLog::kEntries + 10);
    const size_t n = log->snapshot(out.data(), out.size());
    ASSERT_EQ(n, ErrorLog::kEntries);
    for (size_t k = 0; k < n; k++) {
        const int i = kAdds - 1 - static_cast<int>(k);  // newest first
        EXPECT_EQ(out[k].description, "e" + std::to_string(i));
        EXPECT_EQ(out[k].time_us, i);
        EXPECT_EQ(out[k].seq, 2 * static_cast<uint64_t>(i) + 2);
        EXPECT_EQ(out[k].type, i % kTypes);
    }
    // A shorter snapshot gives the newest ones.
    ASSERT_EQ(log->snapshot(out.data(), 3), 3u);
    EXPECT_STREQ(out[0].description, "e999");
    EXPECT_STREQ(out[2].description, "e997");
}

TEST(ErrorLog, OutOfRangeTypeCountsAsInternal) {
    auto log = fresh();
    log->add(static_cast<ErrorType>(200), Severity::Error, -1, 0, "x");
    EXPECT_EQ(log->total(ErrorType::Internal), 1u);
    EXPECT_EQ(log->total(static_cast<ErrorType>(200)), 0u);
}

TEST(ErrorLog, ConcurrentAddsWithReader) {
    auto log = fresh();
    constexpr int kThreads = 4, kPer = 50000;
    bool done = false;
    uint64_t torn = 0, seen = 0;
    // The reader checks that every entry it gets is internally consistent:
    // description, peer, type and time all encode the same (thread, i).
    std::thread reader([&] {
        std::vector<ErrorEntry> out(ErrorLog::kEntries);
        while (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
            const size_t n = log->snapshot(out.data(), out.size());
            for (size_t k = 0; k < n; k++) {
                const ErrorEntry& e = out[k];
                int t = -1, i = -1;
                if (std::sscanf(e.description, "thread %d item %d", &t, &i) != 2 ||
                    e.peer_node != t || e.time_us != int64_t{t} * kPer + i ||
                    e.type != static_cast<uint16_t>((t + i) % kTypes) ||
                    e.severity != static_cast<uint8_t>(i % 3)) {
                    torn++;
                }
                seen++;
            }
        }
    });
    std::vector<std::thread> writers;
    for (int t = 0; t < kThreads; t++) {
        writers.emplace_back([&log, t] {
            char buf[64];
            for (int i = 0; i < kPer; i++) {
                std::snprintf(buf, sizeof(buf), "thread %d item %d", t, i);
                log->add(static_cast<ErrorType>((t + i) % kTypes), static_cast<Severity>(i % 3), t,
                         int64_t{t} * kPer + i, buf);
            }
        });
    }
    for (auto& w : writers) w.join();
    __atomic_store_n(&done, true, __ATOMIC_RELEASE);
    reader.join();
    EXPECT_EQ(torn, 0u);
    EXPECT_GT(seen, 0u);

    EXPECT_EQ(log->next, uint64_t{kThreads} * kPer);
    uint64_t sum = 0;
    for (size_t t = 0; t < kTypes; t++) sum += log->total(static_cast<ErrorType>(t));
    EXPECT_EQ(sum, uint64_t{kThreads} * kPer);

    // Quiescent now: the newest kEntries tickets are all readable and distinct.
    std::vector<ErrorEntry> out(ErrorLog::kEntries);
    const size_t n = log->snapshot(out.data(), out.size());
    EXPECT_EQ(n, ErrorLog::kEntries);
    std::set<std::string> distinct;
    for (size_t k = 0; k < n; k++) {
        distinct.insert(out[k].description);
        if (k > 0) {
            EXPECT_LT(out[k].seq, out[k - 1].seq);
        }
    }
    EXPECT_EQ(distinct.size(), n);
}

// One writer lapping the ring as fast as it can while the reader snapshots for
// half a second: long descriptions make the copy window wide, so an entry
// overwritten during the copy would show up as mixed fields or filler.
TEST(ErrorLog, ReaderNeverSeesTornEntries) {
    auto log = fresh();
    constexpr size_t kLen = 190;
    auto consistent = [](const ErrorEntry& e) {
        int i = -1, off = 0;
        if (std::sscanf(e.description, "item %d:%n", &i, &off) != 1 || off == 0) return false;
        if (e.peer_node != i || e.time_us != i || std::strlen(e.description) != kLen) return false;
        for (size_t k = static_cast<size_t>(off); k < kLen; k++) {
            if (e.description[k] != 'a' + i % 26) return false;
        }
        return true;
    };
    bool done = false;
    std::thread writer([&] {
        char buf[kLen + 1];
        for (int i = 0; !__atomic_load_n(&done, __ATOMIC_RELAXED); i++) {
            const int n = std::snprintf(buf, sizeof(buf), "item %d:", i);
            std::memset(buf + n, 'a' + i % 26, kLen - static_cast<size_t>(n));
            buf[kLen] = '\0';
            log->add(ErrorType::Internal, Severity::Info, i, i, buf);
        }
    });
    uint64_t torn = 0, seen = 0;
    std::vector<ErrorEntry> out(ErrorLog::kEntries);
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while (std::chrono::steady_clock::now() < end) {
        const size_t n = log->snapshot(out.data(), out.size());
        for (size_t k = 0; k < n; k++) torn += consistent(out[k]) ? 0 : 1;
        seen += n;
    }
    __atomic_store_n(&done, true, __ATOMIC_RELAXED);
    writer.join();
    EXPECT_EQ(torn, 0u) << "of " << seen;
    EXPECT_GT(seen, 0u);
}

TEST(ErrorLog, LongDescriptionTruncated) {
    EXPECT_EQ(stored(std::string(kErrorDescriptionMax - 1, 'a')),
              std::string(kErrorDescriptionMax - 1, 'a'));
    EXPECT_EQ(stored(std::string(kErrorDescriptionMax, 'b')),
              std::string(kErrorDescriptionMax - 1, 'b'));
    EXPECT_EQ(stored(std::string(5000, 'c')), std::string(kErrorDescriptionMax - 1, 'c'));
}

TEST(ErrorLog, MultibyteNeverSplit) {
    // 2-, 3- and 4-byte characters at every alignment against the cut.
    for (const std::string ch : {"\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80"}) {
        for (size_t prefix = 0; prefix < 4; prefix++) {
            std::string s(prefix, 'x');
            while (s.size() < 2 * kErrorDescriptionMax) s += ch;
            const std::string got = stored(s);
            EXPECT_TRUE(valid_utf8(got)) << ch.size() << "/" << prefix;
            EXPECT_LE(got.size(), kErrorDescriptionMax - 1);
            EXPECT_GT(got.size(), kErrorDescriptionMax - 1 - ch.size());  // longest that fits
            EXPECT_EQ(s.compare(0, got.size(), got), 0);
        }
    }
    // Not UTF-8 (continuation bytes only): a plain byte cut, still terminated.
    const std::string junk(300, '\x80');
    EXPECT_EQ(stored(junk).size(), kErrorDescriptionMax - 1);
}

TEST(ErrorLog, ShorterEntryLeavesNoTail) {
    auto log = fresh();
    for (size_t i = 0; i < ErrorLog::kEntries; i++) {
        log->add(ErrorType::Internal, Severity::Info, -1, 0, std::string(150, 'z').c_str());
    }
    log->add(ErrorType::Internal, Severity::Info, -1, 0, "short");  // reuses slot 0
    ErrorEntry e;
    ASSERT_EQ(log->snapshot(&e, 1), 1u);
    EXPECT_STREQ(e.description, "short");
    for (size_t i = 5; i < kErrorDescriptionMax; i++) ASSERT_EQ(e.description[i], '\0');
}
