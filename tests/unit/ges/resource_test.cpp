// GES resource names (canonical form, hash, text form) and mastering:
// rendezvous hashing moves only the resources of a departed (or joining) node.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <unordered_set>
#include <vector>

#include "ic/ges/resource.hpp"

using namespace pgrac::ic::ges;

TEST(GesResource, TextNamesAreValidated) {
    EXPECT_TRUE(ResourceName::from_text("a").has_value());
    EXPECT_TRUE(ResourceName::from_text(std::string(64, 'x')).has_value());
    EXPECT_FALSE(ResourceName::from_text("").has_value());
    EXPECT_FALSE(ResourceName::from_text(std::string(65, 'x')).has_value());
    EXPECT_FALSE(ResourceName::from_text(std::string("a\0b", 3)).has_value());
    EXPECT_EQ(ResourceName::from_text("orders")->to_string(), "orders");
    EXPECT_EQ(ResourceName::from_text("orders")->text(), "orders");
}

TEST(GesResource, IntNamesRoundTrip) {
    for (int64_t v : {int64_t{0}, int64_t{1}, int64_t{-1}, INT64_MIN, INT64_MAX}) {
        const ResourceName r = ResourceName::from_int(v);
        EXPECT_EQ(r.int_value(), v);
        EXPECT_EQ(r.to_string(), "#" + std::to_string(v));
        EXPECT_FALSE(r.is_text());
    }
}

TEST(GesResource, EqualityAndHashAreByContent) {
    const ResourceName a = *ResourceName::from_text("12345678");
    const ResourceName b = *ResourceName::from_text("12345678");
    const ResourceName i = ResourceName::from_int(0x3837363534333231);  // same 8 bytes
    EXPECT_EQ(a, b);
    EXPECT_EQ(a.hash(), b.hash());
    EXPECT_NE(a, i);  // the kind tag keeps text and bigint apart
    EXPECT_NE(a.hash(), i.hash());
    EXPECT_TRUE(a < i || i < a);
    EXPECT_FALSE(a < b || b < a);
    // Distinct names spread: no collisions among a few thousand.
    std::unordered_set<uint64_t> seen;
    for (int k = 0; k < 5000; ++k) seen.insert(ResourceName::from_int(k).hash());
    EXPECT_EQ(seen.size(), 5000u);
}

TEST(GesResource, HashIsStableAcrossBuilds) {
    // Every node must compute the same master: the hash is part of the protocol.
    EXPECT_EQ(ResourceName::from_int(1).hash(), ResourceName::from_int(1).hash());
    const uint64_t h = ResourceName::from_text("pgrac")->hash();
    EXPECT_EQ(h, ResourceName::from_text("pgrac")->hash());
    EXPECT_NE(h, 0u);
}

TEST(GesResource, MasterIsAMemberAndIndependentOfListOrder) {
    const std::vector<uint16_t> live{1, 2, 3, 4}, shuffled{3, 1, 4, 2};
    std::map<uint16_t, int> count;
    for (int k = 0; k < 4000; ++k) {
        const ResourceName r = ResourceName::from_int(k);
        const uint16_t m = master_for(r, live);
        EXPECT_EQ(m, master_for(r, shuffled));
        ++count[m];
    }
    ASSERT_EQ(count.size(), 4u);
    for (const auto& [node, n] : count) EXPECT_GT(n, 800) << node;  // about 1000 each
    EXPECT_EQ(master_for(ResourceName::from_int(1), {}), 0);
    EXPECT_EQ(master_for(ResourceName::from_int(1), {7}), 7);
}

TEST(GesResource, OnlyTheDepartedNodesResourcesMove) {
    const std::vector<uint16_t> before{1, 2, 3, 4}, after{1, 2, 4};
    int moved = 0;
    for (int k = 0; k < 4000; ++k) {
        const ResourceName r = *ResourceName::from_text("res" + std::to_string(k));
        const uint16_t a = master_for(r, before), b = master_for(r, after);
        if (a != 3) {
            EXPECT_EQ(a, b) << r.to_string();
        } else {
            EXPECT_NE(b, 3);
            ++moved;
        }
    }
    EXPECT_GT(moved, 800);
}

TEST(GesResource, AJoiningNodeOnlyTakesResources) {
    const std::vector<uint16_t> before{1, 2, 4}, after{1, 2, 4, 9};
    for (int k = 0; k < 4000; ++k) {
        const ResourceName r = ResourceName::from_int(k * 7919);
        const uint16_t a = master_for(r, before), b = master_for(r, after);
        if (a != b) {
            EXPECT_EQ(b, 9);
        }
    }
}

TEST(GesResource, WorkerMatchesTheListenersRouting) {
    std::map<uint32_t, int> count;
    for (int k = 0; k < 3000; ++k) {
        const ResourceName r = ResourceName::from_int(k);
        const uint32_t w = worker_for(r, 3);
        EXPECT_LT(w, 3u);
        EXPECT_EQ(w, route_key_for(r) % 3);  // the listener's rule
        ++count[w];
    }
    for (const auto& [w, n] : count) EXPECT_GT(n, 800) << w;
    EXPECT_EQ(worker_for(ResourceName::from_int(5), 0), 0u);
    EXPECT_EQ(worker_for(ResourceName::from_int(5), 1), 0u);
}
