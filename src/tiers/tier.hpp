// The interconnect tiers: one enum for the tier decision (src/tiers/detect/tier_select.hpp),
// the setting (cluster.interconnect_tier) and shared memory (IcShared::tier_requested,
// tier_active hold it as uint32_t, so its underlying type is fixed).
#pragma once

#include <cstdint>
#include <type_traits>

namespace pgrac::tiers {

// Auto is a request only: a decision is always one of the others.
enum class Tier : uint32_t { Auto = 0, Stub, Tier1, Tier2, Tier3 };
static_assert(std::is_same_v<std::underlying_type_t<Tier>, uint32_t>,
              "IcShared::tier_requested and tier_active hold a Tier as uint32_t");
const char* tier_name(Tier t);  // "auto", "stub", "tier1", "tier2", "tier3"

}  // namespace pgrac::tiers
