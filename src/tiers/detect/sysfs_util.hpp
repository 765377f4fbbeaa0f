// Small helpers for reading sysfs/procfs through a root prefix, so the same
// code reads the running machine ("/sys", "/proc") or a recorded tree.
// Nothing here throws: missing or unreadable files come back as empty.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pgrac::tiers {

struct SysRoots {
    std::string sysfs = "/sys";
    std::string procfs = "/proc";
    // True when both roots are the running kernel's: only then may live
    // sources (verbs, netlink) be mixed with what the files say.
    bool live() const { return sysfs == "/sys" && procfs == "/proc"; }
};

namespace sysfs {

// The file's content with trailing whitespace removed; nullopt if unreadable.
std::optional<std::string> read_trimmed(const std::string& path);
// Entry names of a directory, sorted (numerically when all are numbers).
std::vector<std::string> list_dir(const std::string& path);
bool exists(const std::string& path);
// Last component of a symlink's target ("mlx5_core" for .../drivers/mlx5_core).
std::optional<std::string> link_target_name(const std::string& path);
// Parses decimal, or hex with a 0x prefix. nullopt unless the whole string is a number.
std::optional<long long> parse_int(std::string_view s);
// Writes text to an existing file (sysfs/procfs semantics: one write call).
bool write_text(const std::string& path, const std::string& text, std::string* error);

}  // namespace sysfs

// Kernel cpulist syntax ("0-3,8-11"): sorted unique CPUs; nullopt if malformed.
std::optional<std::vector<int>> parse_cpulist(std::string_view s);
std::string format_cpulist(const std::vector<int>& cpus);

}  // namespace pgrac::tiers
