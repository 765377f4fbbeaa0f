// GES resource names, their stable hash, and where a resource is mastered.
//
// A resource is named by text (1..64 bytes, no NUL) or by a bigint. The
// canonical form is a tagged byte string (kind, length, bytes; a bigint is its
// 8 little-endian bytes), held in a fixed 66-byte struct with the unused tail
// zeroed, so equality, ordering and hashing are over bytes and agree on every
// node. The hash is ours (FNV-1a + a 64-bit finaliser), never std::hash: every
// instance must pick the same master for the same resource.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pgrac::ic::ges {

enum class ResourceKind : uint8_t { Text = 1, Int = 2 };
inline constexpr size_t kMaxResourceText = 64;

struct ResourceName {
    ResourceKind kind = ResourceKind::Int;
    uint8_t len = 8;                      // bytes used in data
    uint8_t data[kMaxResourceText] = {};  // text bytes, or the bigint little-endian

    // nullopt if text is empty, longer than 64 bytes, or contains a NUL.
    static std::optional<ResourceName> from_text(std::string_view text);
    static ResourceName from_int(int64_t id);

    bool is_text() const { return kind == ResourceKind::Text; }
    int64_t int_value() const;      // only for Int
    std::string_view text() const;  // only for Text

    // For views and logs: the text itself, or "#<bigint>" for a bigint.
    std::string to_string() const;
    uint64_t hash() const;
};

bool operator==(const ResourceName& a, const ResourceName& b);
inline bool operator!=(const ResourceName& a, const ResourceName& b) {
    return !(a == b);
}
// Total order (kind, then length, then bytes): for deterministic listings.
bool operator<(const ResourceName& a, const ResourceName& b);

struct ResourceNameHash {
    size_t operator()(const ResourceName& r) const { return static_cast<size_t>(r.hash()); }
};

// The master of `r` among the live nodes, by rendezvous (highest random
// weight) hashing: each node scores hash(r, node) and the highest wins. When a
// node leaves, only the resources it mastered move; when one joins, only the
// resources it now wins move to it. `live` may be in any order; 0 if empty.
uint16_t master_for(const ResourceName& r, const std::vector<uint16_t>& live);

// The interconnect route_key for messages about `r`. The listener hands a
// message to LMS worker route_key % n_workers, so worker_for() below is what
// the listener computes: all of one resource's messages meet on one worker.
uint32_t route_key_for(const ResourceName& r);
// The LMS worker (0..n_workers-1) that owns `r` on its master; 0 if n_workers == 0.
uint32_t worker_for(const ResourceName& r, uint32_t n_workers);

}  // namespace pgrac::ic::ges
