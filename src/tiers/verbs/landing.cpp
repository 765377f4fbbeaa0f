// Landing offers (landing.hpp).
#include "tiers/verbs/landing.hpp"

#include <cstring>

#include "ic/wire/codec.hpp"

namespace pgrac::tiers {

namespace {

constexpr uint8_t kMagic[4] = {'P', 'G', 'R', 'L'};
constexpr uint8_t kVersion = 1;

}  // namespace

void encode_landing_offer(const LandingOffer& o, uint8_t* out) {
    using ic::codec::store_le;
    std::memcpy(out, kMagic, 4);
    out[4] = kVersion;
    out[5] = static_cast<uint8_t>(o.slots);
    store_le<uint16_t>(out + 6, 0);
    store_le<uint32_t>(out + 8, o.slot_bytes);
    store_le<uint32_t>(out + 12, o.rkey);
    store_le<uint64_t>(out + 16, o.addr);
}

bool decode_landing_offer(const void* data, size_t len, LandingOffer* out) {
    using ic::codec::load_le;
    // rdma_cm may pad the private data with zeros: longer is fine.
    if (data == nullptr || len < kLandingOfferSize) return false;
    const auto* p = static_cast<const uint8_t*>(data);
    if (std::memcmp(p, kMagic, 4) != 0 || p[4] != kVersion || load_le<uint16_t>(p + 6) != 0)
        return false;
    LandingOffer o;
    o.slots = p[5];
    o.slot_bytes = load_le<uint32_t>(p + 8);
    o.rkey = load_le<uint32_t>(p + 12);
    o.addr = load_le<uint64_t>(p + 16);
    // The writer checks each frame against slot_bytes; these bounds keep the
    // slot arithmetic far from overflowing.
    if (o.slots == 0 || o.slots > kMaxLandingSlots || o.slot_bytes < kMinLandingSlotBytes ||
        o.slot_bytes > kMaxLandingSlotBytes || o.addr == 0)
        return false;
    *out = o;
    return true;
}

}  // namespace pgrac::tiers
