#include "tiers/detect/sysfs_util.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace pgrac::tiers {
namespace sysfs {

std::optional<std::string> read_trimmed(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::nullopt;
    std::ostringstream ss;
    ss << in.rdbuf();
    // sysfs reports errors (e.g. EINVAL for an empty GID slot) as a failed read.
    if (in.bad()) return std::nullopt;
    std::string s = ss.str();
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t' ||
                          s.back() == '\r' || s.back() == '\0'))
        s.pop_back();
    return s;
}

std::vector<std::string> list_dir(const std::string& path) {
    std::vector<std::string> names;
    std::error_code ec;
    fs::directory_iterator it(path, ec), end;
    for (; !ec && it != end; it.increment(ec)) names.push_back(it->path().filename().string());
    const bool numeric = std::all_of(names.begin(), names.end(), [](const std::string& n) {
        return !n.empty() && std::all_of(n.begin(), n.end(), ::isdigit);
    });
    if (numeric) {
        std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
            return a.size() != b.size() ? a.size() < b.size() : a < b;
        });
    } else {
        std::sort(names.begin(), names.end());
    }
    return names;
}

bool exists(const std::string& path) {
    std::error_code ec;
    return fs::exists(path, ec);
}

std::optional<std::string> link_target_name(const std::string& path) {
    std::error_code ec;
    fs::path target = fs::read_symlink(path, ec);
    if (ec) return std::nullopt;
    std::string name = target.filename().string();
    if (name.empty()) return std::nullopt;
    return name;
}

std::optional<long long> parse_int(std::string_view s) {
    if (s.empty()) return std::nullopt;
    int base = 10;
    if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s.remove_prefix(2);
    }
    bool neg = false;
    if (base == 10 && s[0] == '-') {
        neg = true;
        s.remove_prefix(1);
    }
    if (s.empty()) return std::nullopt;
    long long v = 0;
    for (char c : s) {
        int d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (base == 16 && c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (base == 16 && c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return std::nullopt;
        if (v > (static_cast<long long>(1) << 55)) return std::nullopt;  // absurd for sysfs
        v = v * base + d;
    }
    return neg ? -v : v;
}

bool write_text(const std::string& path, const std::string& text, std::string* error) {
    // std::ofstream would create a missing file; sysfs/procfs attributes must exist.
    if (!exists(path)) {
        if (error) *error = path + ": no such file";
        return false;
    }
    // "w" truncates: harmless on procfs, and needed on a recorded copy.
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f) {
        if (error) *error = path + ": " + std::strerror(errno);
        return false;
    }
    // procfs takes the value in one write(); flush reports its error.
    bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    int err = errno;
    if (std::fflush(f) != 0) {
        ok = false;
        err = errno;
    }
    std::fclose(f);
    if (!ok && error) *error = path + ": " + std::strerror(err);
    return ok;
}

}  // namespace sysfs

std::optional<std::vector<int>> parse_cpulist(std::string_view s) {
    std::vector<int> cpus;
    while (!s.empty()) {
        size_t comma = s.find(',');
        std::string_view part = s.substr(0, comma);
        s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
        if (part.empty()) continue;
        size_t dash = part.find('-');
        auto lo = sysfs::parse_int(part.substr(0, dash));
        auto hi = dash == std::string_view::npos ? lo : sysfs::parse_int(part.substr(dash + 1));
        if (!lo || !hi || *lo < 0 || *hi < *lo || *hi > 65535) return std::nullopt;
        for (long long c = *lo; c <= *hi; ++c) cpus.push_back(static_cast<int>(c));
    }
    std::sort(cpus.begin(), cpus.end());
    cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
    return cpus;
}

std::string format_cpulist(const std::vector<int>& cpus) {
    std::string out;
    for (size_t i = 0; i < cpus.size();) {
        size_t j = i;
        while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
        if (!out.empty()) out += ',';
        out += std::to_string(cpus[i]);
        if (j > i) out += '-' + std::to_string(cpus[j]);
        i = j + 1;
    }
    return out;
}

}  // namespace pgrac::tiers
