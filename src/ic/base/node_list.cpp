// Parsing of cluster.nodes.
#include "ic/base/node_list.hpp"

#include <arpa/inet.h>

#include <cctype>
#include <map>
#include <utility>

namespace pgrac::ic {
namespace {

std::string trim(const std::string& s) {
    size_t b = 0, e = s.size();
    while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
    return s.substr(b, e - b);
}

// Decimal digits only (no sign, no spaces); false on anything else or above max.
bool parse_number(const std::string& s, unsigned long max, unsigned long* v) {
    if (s.empty()) return false;
    unsigned long x = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        x = x * 10 + static_cast<unsigned long>(c - '0');
        if (x > max) return false;
    }
    *v = x;
    return true;
}

bool all_digits(const std::string& s) {
    if (s.empty()) return false;
    for (char c : s)
        if (c < '0' || c > '9') return false;
    return true;
}

bool valid_name(const std::string& host) {
    for (char c : host)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_')
            return false;
    return true;
}

// Canonical IPv6 text (zone kept), or empty when `host` is not IPv6.
std::string canonical_ipv6(const std::string& host) {
    const size_t pct = host.find('%');
    in6_addr addr;
    if (inet_pton(AF_INET6, host.substr(0, pct).c_str(), &addr) != 1) return {};
    char buf[INET6_ADDRSTRLEN];
    if (inet_ntop(AF_INET6, &addr, buf, sizeof buf) == nullptr) return {};
    return pct == std::string::npos ? std::string(buf) : buf + host.substr(pct);
}

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// Parses one "id@host:port"; returns an empty string or what is wrong.
// *key is the host:port in a form where equal addresses compare equal.
std::string parse_entry(const std::string& entry, NodeAddress* a, std::string* key) {
    if (entry.empty()) return "the entry is empty";
    const size_t at = entry.find('@');
    if (at == std::string::npos) return "missing '@' between node id and host";

    const std::string id = entry.substr(0, at);
    unsigned long v = 0;
    if (!all_digits(id))
        return "node id \"" + id + "\" is not an integer from 1 to " + std::to_string(kMaxNodes);
    if (!parse_number(id, kMaxNodes, &v) || v < 1)
        return "node id " + id + " is out of range: it must be from 1 to " +
               std::to_string(kMaxNodes);
    a->node_id = static_cast<uint16_t>(v);

    const std::string rest = entry.substr(at + 1);
    std::string port;
    std::string canonical;
    if (!rest.empty() && rest[0] == '[') {
        const size_t close = rest.find(']');
        if (close == std::string::npos) return "the IPv6 address has no closing ']'";
        a->host = rest.substr(1, close - 1);
        if (a->host.empty()) return "the host is empty";
        canonical = canonical_ipv6(a->host);
        if (canonical.empty()) return "\"" + a->host + "\" in brackets is not an IPv6 address";
        if (close + 1 == rest.size()) return "missing port: expected [address]:port";
        if (rest[close + 1] != ':') return "expected ':port' after ']'";
        port = rest.substr(close + 2);
    } else {
        const size_t colon = rest.rfind(':');
        if (colon == std::string::npos) return "missing port: expected host:port";
        a->host = rest.substr(0, colon);
        if (a->host.empty()) return "the host is empty";
        if (a->host.find(':') != std::string::npos)
            return "an IPv6 address must be written in brackets, e.g. [::1]:7401";
        if (!valid_name(a->host))
            return "host \"" + a->host + "\" may hold only letters, digits, '.', '-' and '_'";
        canonical = lower(a->host);
        port = rest.substr(colon + 1);
    }
    if (port.empty()) return "missing port after ':'";
    if (!parse_number(port, 65535, &v) || v < 1)
        return "port \"" + port + "\" is not an integer from 1 to 65535";
    a->port = static_cast<uint16_t>(v);
    *key = canonical + "|" + std::to_string(a->port);
    return {};
}

}  // namespace

std::optional<std::vector<NodeAddress>> parse_node_list(const std::string& text,
                                                        std::string* error) {
    std::vector<NodeAddress> nodes;
    if (trim(text).empty()) return nodes;

    std::map<uint16_t, size_t> entry_of_id;       // node id -> entry number
    std::map<std::string, size_t> entry_of_addr;  // canonical host:port -> entry number
    size_t start = 0;
    for (size_t number = 1;; ++number) {
        const size_t comma = text.find(',', start);
        const std::string entry = trim(
            text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        auto refuse = [&](const std::string& why) {
            if (error != nullptr)
                *error = "entry " + std::to_string(number) + " (\"" + entry + "\"): " + why;
            return std::nullopt;
        };

        NodeAddress a;
        std::string key;
        const std::string why = parse_entry(entry, &a, &key);
        if (!why.empty()) return refuse(why);
        if (auto it = entry_of_id.find(a.node_id); it != entry_of_id.end())
            return refuse("node id " + std::to_string(a.node_id) + " is already used by entry " +
                          std::to_string(it->second));
        if (auto it = entry_of_addr.find(key); it != entry_of_addr.end())
            return refuse("address " + entry.substr(entry.find('@') + 1) +
                          " is already used by entry " + std::to_string(it->second));
        entry_of_id.emplace(a.node_id, number);
        entry_of_addr.emplace(std::move(key), number);
        nodes.push_back(std::move(a));

        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return nodes;
}

const NodeAddress* find_node(const std::vector<NodeAddress>& nodes, uint16_t id) {
    for (const NodeAddress& n : nodes)
        if (n.node_id == id) return &n;
    return nullptr;
}

}  // namespace pgrac::ic
