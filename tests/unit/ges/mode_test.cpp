// GES lock modes: the full compatibility matrix, its symmetry, the
// "at most as strong" order, and names.
#include <gtest/gtest.h>

#include "ic/ges/mode.hpp"

using namespace pgrac::ic::ges;

namespace {

constexpr LockMode kAll[] = {LockMode::NL, LockMode::CR, LockMode::CW,
                             LockMode::PR, LockMode::PW, LockMode::EX};

// The standard VMS/Oracle matrix, written out row by row (1 = compatible).
constexpr int kExpected[6][6] = {
    //        NL CR CW PR PW EX
    /* NL */ {1, 1, 1, 1, 1, 1},
    /* CR */ {1, 1, 1, 1, 1, 0},
    /* CW */ {1, 1, 1, 0, 0, 0},
    /* PR */ {1, 1, 0, 1, 0, 0},
    /* PW */ {1, 1, 0, 0, 0, 0},
    /* EX */ {1, 0, 0, 0, 0, 0},
};

}  // namespace

TEST(GesMode, CompatibilityMatrixIsExactlyTheStandardOne) {
    for (int a = 0; a < 6; ++a)
        for (int b = 0; b < 6; ++b)
            EXPECT_EQ(modes_compatible(kAll[a], kAll[b]), kExpected[a][b] == 1)
                << lock_mode_name(kAll[a]) << " vs " << lock_mode_name(kAll[b]);
}

TEST(GesMode, MatrixIsSymmetric) {
    for (LockMode a : kAll)
        for (LockMode b : kAll) EXPECT_EQ(modes_compatible(a, b), modes_compatible(b, a));
}

TEST(GesMode, OutOfRangeModesAreNeverCompatible) {
    EXPECT_FALSE(modes_compatible(static_cast<LockMode>(6), LockMode::NL));
    EXPECT_FALSE(modes_compatible(LockMode::NL, static_cast<LockMode>(255)));
    EXPECT_FALSE(lock_mode_valid(6));
    EXPECT_TRUE(lock_mode_valid(5));
}

TEST(GesMode, AtMostFollowsTheLattice) {
    // NL < CR < {CW, PR} < PW < EX, with CW and PR unordered.
    EXPECT_TRUE(mode_at_most(LockMode::NL, LockMode::EX));
    EXPECT_TRUE(mode_at_most(LockMode::CR, LockMode::CW));
    EXPECT_TRUE(mode_at_most(LockMode::CR, LockMode::PR));
    EXPECT_TRUE(mode_at_most(LockMode::PR, LockMode::PW));
    EXPECT_TRUE(mode_at_most(LockMode::CW, LockMode::PW));
    EXPECT_TRUE(mode_at_most(LockMode::PW, LockMode::EX));
    EXPECT_FALSE(mode_at_most(LockMode::CW, LockMode::PR));
    EXPECT_FALSE(mode_at_most(LockMode::PR, LockMode::CW));
    EXPECT_FALSE(mode_at_most(LockMode::EX, LockMode::PW));
    for (LockMode m : kAll) EXPECT_TRUE(mode_at_most(m, m));
    // The defining property: a weaker mode blocks nothing the stronger does not.
    for (LockMode w : kAll) {
        for (LockMode s : kAll) {
            if (!mode_at_most(w, s)) continue;
            for (LockMode x : kAll) {
                if (modes_compatible(s, x)) {
                    EXPECT_TRUE(modes_compatible(w, x));
                }
            }
        }
    }
}

TEST(GesMode, NamesRoundTrip) {
    const char* names[] = {"NL", "CR", "CW", "PR", "PW", "EX"};
    for (int i = 0; i < 6; ++i) {
        EXPECT_STREQ(lock_mode_name(kAll[i]), names[i]);
        EXPECT_EQ(parse_lock_mode(names[i]), kAll[i]);
    }
    EXPECT_STREQ(lock_mode_name(static_cast<LockMode>(9)), "??");
    EXPECT_FALSE(parse_lock_mode("ex").has_value());
    EXPECT_FALSE(parse_lock_mode("").has_value());
}
