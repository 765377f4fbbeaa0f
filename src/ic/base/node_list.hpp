// Parsing of cluster.nodes: "id@host:port[,id@host:port...]".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pgrac::ic {

inline constexpr int kMaxNodes = 64;  // node ids are 1..kMaxNodes

struct NodeAddress {
    uint16_t node_id = 0;
    std::string host;  // IPv4 dotted quad, IPv6 in [brackets] in the text, or a name
    uint16_t port = 0;
};

// Parses the list. Errors name the entry and what is wrong, e.g.
// "entry 2 (\"x@h:1\"): node id must be an integer from 1 to 64". Duplicate ids
// and duplicate host:port pairs are errors. An empty string is an empty list.
std::optional<std::vector<NodeAddress>> parse_node_list(const std::string& text,
                                                        std::string* error);

const NodeAddress* find_node(const std::vector<NodeAddress>& nodes, uint16_t id);

}  // namespace pgrac::ic
