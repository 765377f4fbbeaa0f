#include "ic/ges/resource.hpp"

#include <cstring>

#include "ic/wire/codec.hpp"

namespace pgrac::ic::ges {

namespace {

// splitmix64's finaliser: full avalanche, so close inputs get unrelated outputs.
uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

}  // namespace

std::optional<ResourceName> ResourceName::from_text(std::string_view text) {
    if (text.empty() || text.size() > kMaxResourceText) return std::nullopt;
    if (text.find('\0') != std::string_view::npos) return std::nullopt;
    ResourceName r;
    r.kind = ResourceKind::Text;
    r.len = static_cast<uint8_t>(text.size());
    std::memcpy(r.data, text.data(), text.size());
    return r;
}

ResourceName ResourceName::from_int(int64_t id) {
    ResourceName r;
    r.kind = ResourceKind::Int;
    r.len = 8;
    codec::store_le(r.data, id);
    return r;
}

int64_t ResourceName::int_value() const {
    return codec::load_le<int64_t>(data);
}

std::string_view ResourceName::text() const {
    return std::string_view(reinterpret_cast<const char*>(data), len);
}

std::string ResourceName::to_string() const {
    if (is_text()) return std::string(text());
    return "#" + std::to_string(int_value());
}

uint64_t ResourceName::hash() const {
    uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a over kind, len, bytes
    auto step = [&h](uint8_t b) {
        h ^= b;
        h *= 0x100000001b3ULL;
    };
    step(static_cast<uint8_t>(kind));
    step(len);
    for (uint8_t i = 0; i < len && i < kMaxResourceText; ++i) step(data[i]);
    return mix64(h);
}

bool operator==(const ResourceName& a, const ResourceName& b) {
    return a.kind == b.kind && a.len == b.len && std::memcmp(a.data, b.data, a.len) == 0;
}

bool operator<(const ResourceName& a, const ResourceName& b) {
    if (a.kind != b.kind) return a.kind < b.kind;
    if (a.len != b.len) return a.len < b.len;
    return std::memcmp(a.data, b.data, a.len) < 0;
}

uint16_t master_for(const ResourceName& r, const std::vector<uint16_t>& live) {
    const uint64_t h = r.hash();
    uint16_t best = 0;
    uint64_t best_weight = 0;
    bool found = false;
    for (uint16_t node : live) {
        const uint64_t w = mix64(h ^ mix64(0x9e3779b97f4a7c15ULL * (node + 1ULL)));
        // Ties (practically impossible) go to the lower id, whatever the order of `live`.
        if (!found || w > best_weight || (w == best_weight && node < best)) {
            found = true;
            best = node;
            best_weight = w;
        }
    }
    return best;
}

uint32_t route_key_for(const ResourceName& r) {
    // Different bits from the ones master_for mixes, folded to 32.
    const uint64_t h = mix64(r.hash() ^ 0x5bd1e9955bd1e995ULL);
    return static_cast<uint32_t>(h ^ (h >> 32));
}

uint32_t worker_for(const ResourceName& r, uint32_t n_workers) {
    return n_workers == 0 ? 0 : route_key_for(r) % n_workers;
}

}  // namespace pgrac::ic::ges
