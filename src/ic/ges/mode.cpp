#include "ic/ges/mode.hpp"

namespace pgrac::ic::ges {

namespace {

// Bit b of kCompat[a] is set when modes a and b are compatible.
constexpr uint8_t kCompat[kLockModeCount] = {
    0b111111,  // NL: all
    0b011111,  // CR: all but EX
    0b000111,  // CW: NL, CR, CW
    0b001011,  // PR: NL, CR, PR
    0b000011,  // PW: NL, CR
    0b000001,  // EX: NL
};

constexpr const char* kNames[kLockModeCount] = {"NL", "CR", "CW", "PR", "PW", "EX"};

uint8_t compat_set(LockMode m) {
    return kCompat[static_cast<uint8_t>(m) % kLockModeCount];
}

}  // namespace

bool modes_compatible(LockMode a, LockMode b) {
    if (!lock_mode_valid(static_cast<uint8_t>(a)) || !lock_mode_valid(static_cast<uint8_t>(b)))
        return false;
    return (compat_set(a) >> static_cast<uint8_t>(b)) & 1;
}

bool mode_at_most(LockMode weak, LockMode strong) {
    const uint8_t w = compat_set(weak), s = compat_set(strong);
    return (w & s) == s;
}

const char* lock_mode_name(LockMode m) {
    const auto i = static_cast<uint8_t>(m);
    return lock_mode_valid(i) ? kNames[i] : "??";
}

std::optional<LockMode> parse_lock_mode(std::string_view name) {
    for (uint8_t i = 0; i < kLockModeCount; ++i)
        if (name == kNames[i]) return static_cast<LockMode>(i);
    return std::nullopt;
}

}  // namespace pgrac::ic::ges
