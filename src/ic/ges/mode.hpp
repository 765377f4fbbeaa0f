// GES lock modes and the VMS/Oracle DLM compatibility matrix.
//
//        NL CR CW PR PW EX
//   NL   y  y  y  y  y  y
//   CR   y  y  y  y  y  -
//   CW   y  y  y  -  -  -
//   PR   y  y  -  y  -  -
//   PW   y  y  -  -  -  -
//   EX   y  -  -  -  -  -
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace pgrac::ic::ges {

// Values are the wire encoding; do not renumber.
enum class LockMode : uint8_t { NL = 0, CR = 1, CW = 2, PR = 3, PW = 4, EX = 5 };
inline constexpr int kLockModeCount = 6;

inline constexpr bool lock_mode_valid(uint8_t raw) {
    return raw < kLockModeCount;
}

// The matrix is symmetric.
bool modes_compatible(LockMode a, LockMode b);

// True if every mode compatible with `strong` is also compatible with `weak`:
// holding `weak` instead of `strong` can never block anyone new. CW and PR are
// not ordered either way.
bool mode_at_most(LockMode weak, LockMode strong);

// "NL", "CR", ... ; "??" for an out-of-range value.
const char* lock_mode_name(LockMode m);
// Inverse of lock_mode_name (upper case only).
std::optional<LockMode> parse_lock_mode(std::string_view name);

}  // namespace pgrac::ic::ges
