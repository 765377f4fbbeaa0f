#include "ic/base/adaptive_spin.hpp"

#include <gtest/gtest.h>

namespace pgrac::ic {
namespace {

TEST(AdaptiveSpin, StartsPollingUpToTheMaximum) {
    AdaptiveSpin s(50000);
    EXPECT_EQ(s.budget_ns(), 50000u);
}

TEST(AdaptiveSpin, ZeroMaximumNeverPolls) {
    AdaptiveSpin s(0);
    for (int i = 0; i < 10; i++) s.observe(10);
    EXPECT_EQ(s.budget_ns(), 0u);
}

TEST(AdaptiveSpin, LongWaitsStopPollingAndShortOnesResumeIt) {
    AdaptiveSpin s(50000);
    for (int i = 0; i < 5; i++) s.observe(1000000);
    EXPECT_EQ(s.budget_ns(), 0u) << "waits far beyond the budget: polling only burns CPU";
    for (int i = 0; i < 8; i++) s.observe(5000);
    EXPECT_EQ(s.budget_ns(), 50000u) << "short waits again: polling pays";
}

TEST(AdaptiveSpin, KeepsPollingWhenMostWaitsAreShort) {
    AdaptiveSpin s(50000);
    for (int round = 0; round < 100; round++) {
        s.observe(10000);
        s.observe(10000);
        s.observe(10000);
        s.observe(900000);  // one wait in four is long
    }
    EXPECT_EQ(s.budget_ns(), 50000u);
}

TEST(AdaptiveSpin, StopsWhenMostWaitsAreLong) {
    AdaptiveSpin s(50000);
    for (int round = 0; round < 100; round++) {
        s.observe(10000);
        s.observe(900000);
    }
    EXPECT_EQ(s.budget_ns(), 0u);
}

}  // namespace
}  // namespace pgrac::ic
