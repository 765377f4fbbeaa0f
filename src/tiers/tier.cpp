#include "tiers/tier.hpp"

namespace pgrac::tiers {

const char* tier_name(Tier t) {
    switch (t) {
        case Tier::Auto:
            return "auto";
        case Tier::Stub:
            return "stub";
        case Tier::Tier1:
            return "tier1";
        case Tier::Tier2:
            return "tier2";
        case Tier::Tier3:
            return "tier3";
    }
    return "unknown";
}

}  // namespace pgrac::tiers
