// Comparing the settings two nodes have (see cluster_settings.hpp).
#include "ic/session/cluster_settings.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <stdexcept>

#include "ic/membership/membership.hpp"

namespace pgrac::ic {

uint64_t cluster_nodes_digest(const std::vector<NodeAddress>& nodes) {
    std::vector<NodeAddress> sorted = nodes;
    std::sort(sorted.begin(), sorted.end(),
              [](const NodeAddress& a, const NodeAddress& b) { return a.node_id < b.node_id; });
    std::string text;
    for (const NodeAddress& n : sorted) {
        std::string host = n.host;
        for (char& c : host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        text += std::to_string(n.node_id) + "@" + host + ":" + std::to_string(n.port) + ",";
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_Digest(text.data(), text.size(), md, &len, EVP_sha256(), nullptr) != 1 || len < 8)
        throw std::runtime_error("SHA-256 failed while digesting cluster.nodes");
    uint64_t d = 0;
    for (int i = 0; i < 8; i++) d |= uint64_t{md[i]} << (8 * i);
    return d;
}

uint64_t instance_location(const std::string& host, uint64_t dev, uint64_t ino) {
    const std::string text = host + "\n" + std::to_string(dev) + "\n" + std::to_string(ino);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_Digest(text.data(), text.size(), md, &len, EVP_sha256(), nullptr) != 1 || len < 8)
        return 0;  // unknown: restarts then wait out the window like any new instance
    uint64_t d = 0;
    for (int i = 0; i < 8; i++) d |= uint64_t{md[i]} << (8 * i);
    return d == 0 ? 1 : d;
}

std::string settings_mismatch(const ClusterSettings& here, const ClusterSettings& there,
                              uint16_t self_node, uint16_t peer_node) {
    const std::string on = " on node " + std::to_string(peer_node);
    const std::string me = " here (node " + std::to_string(self_node) + "), ";
    std::string out;
    auto add = [&](const std::string& what) { out += (out.empty() ? "" : "; ") + what; };
    if (here.lms_workers != there.lms_workers)
        add("lms_workers is " + std::to_string(here.lms_workers) + me +
            std::to_string(there.lms_workers) + on);
    if (here.witnesses != there.witnesses)
        add("witness_nodes is " + mask_text(here.witnesses) + me + mask_text(there.witnesses) + on);
    if (here.tcp_paths != there.tcp_paths)
        add("tcp_paths is " + std::to_string(here.tcp_paths) + me +
            std::to_string(there.tcp_paths) + on);
    if (here.nodes_digest != there.nodes_digest) {
        char a[20], b[20];
        std::snprintf(a, sizeof a, "%016llx", static_cast<unsigned long long>(here.nodes_digest));
        std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(there.nodes_digest));
        add(std::string("nodes differs (digest ") + a + me + b + on + ")");
    }
    return out;
}

}  // namespace pgrac::ic
