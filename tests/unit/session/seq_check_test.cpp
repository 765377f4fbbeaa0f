#include "ic/session/seq_check.hpp"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace pgrac::ic {
namespace {

TEST(SeqCheck, InOrderIsApplied) {
    uint64_t last = 0;
    for (uint64_t s = 1; s <= 100; s++) EXPECT_EQ(seq_apply(&last, s), SeqOutcome::Applied);
    EXPECT_EQ(last, 100u);
}

TEST(SeqCheck, GapIsAppliedAndMoves) {
    uint64_t last = 3;
    EXPECT_EQ(seq_apply(&last, 7), SeqOutcome::Applied);
    EXPECT_EQ(last, 7u);
}

TEST(SeqCheck, RepeatIsDuplicateAndBelowIsReordered) {
    uint64_t last = 0;
    ASSERT_EQ(seq_apply(&last, 5), SeqOutcome::Applied);
    EXPECT_EQ(seq_apply(&last, 5), SeqOutcome::Duplicate);
    EXPECT_EQ(seq_apply(&last, 4), SeqOutcome::Reordered);
    EXPECT_EQ(last, 5u);
}

TEST(SeqCheck, ZeroIsAQuery) {
    uint64_t last = 9;
    EXPECT_EQ(seq_apply(&last, 0), SeqOutcome::Applied);
    EXPECT_EQ(last, 9u);
}

TEST(SeqCheck, Names) {
    EXPECT_STREQ(seq_outcome_name(SeqOutcome::Applied), "applied");
    EXPECT_STREQ(seq_outcome_name(SeqOutcome::Duplicate), "duplicate");
    EXPECT_STREQ(seq_outcome_name(SeqOutcome::Reordered), "reordered");
}

// Many threads racing for the same numbers: each number is applied exactly once.
TEST(SeqCheck, ConcurrentApplyIsExactlyOnce) {
    uint64_t last = 0;
    constexpr int kThreads = 4;
    constexpr uint64_t kMax = 20000;
    std::vector<uint64_t> applied(kThreads, 0);
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; t++)
        ts.emplace_back([&, t] {
            for (uint64_t s = 1; s <= kMax; s++)
                if (seq_apply(&last, s) == SeqOutcome::Applied) applied[t]++;
        });
    for (auto& th : ts) th.join();
    uint64_t total = 0;
    for (uint64_t a : applied) total += a;
    EXPECT_EQ(last, kMax);
    EXPECT_LE(total, kMax);
    EXPECT_GE(total, 1u);
}

}  // namespace
}  // namespace pgrac::ic
