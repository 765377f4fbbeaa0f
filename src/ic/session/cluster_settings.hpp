// The settings that safety or routing rests on, as one node has them, and how
// two nodes' sets are compared. Two kinds:
//  * Fixed for the cluster (PGC_POSTMASTER): cluster.lms_workers (which worker
//    masters a resource), cluster.witness_nodes (who masters nothing),
//    cluster.nodes (ids, addresses, majorities) and cluster.tcp_paths (lanes).
//    Each node sends its set in the handshake (Auth, AuthOk); a peer whose set
//    differs is refused with config_mismatch, naming the setting and both
//    values, and so never joins a view. (cluster.name, the system identifier
//    and the largest message are checked by the handshake already.)
//  * Timing (PGC_SIGHUP): cluster.peer_timeout and cluster.heartbeat_interval.
//    They may differ for as long as a rolling reload takes, so they are not
//    refused: each node sends its values in every heartbeat, and the
//    membership makes every lease safe against the values its peers have
//    (ic/membership/membership.hpp, docs/ges.md "Settings that differ between nodes").
// PostgreSQL-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ic/base/node_list.hpp"

namespace pgrac::ic {

// Plain data (it lives in shared memory): value-initialise, ClusterSettings{}.
struct ClusterSettings {
    uint16_t lms_workers;   // cluster.lms_workers
    uint8_t tcp_paths;      // cluster.tcp_paths
    uint64_t witnesses;     // cluster.witness_nodes, bit id-1
    uint64_t nodes_digest;  // cluster_nodes_digest(cluster.nodes)
};
inline bool operator==(const ClusterSettings& a, const ClusterSettings& b) {
    return a.lms_workers == b.lms_workers && a.tcp_paths == b.tcp_paths &&
           a.witnesses == b.witnesses && a.nodes_digest == b.nodes_digest;
}
inline bool operator!=(const ClusterSettings& a, const ClusterSettings& b) {
    return !(a == b);
}

// A digest of the node list in its canonical text ("id@host:port" by id, the
// host lower-cased, as written: names are not resolved). Every node must list
// the same nodes with the same addresses; the digest tells one list from another.
uint64_t cluster_nodes_digest(const std::vector<NodeAddress>& nodes);

// Where an instance runs: a digest of the host name and the data directory's
// device and inode. Two postmasters never run on one data directory at once,
// so a new instance from its owner's location is that node restarted.
uint64_t instance_location(const std::string& host, uint64_t dev, uint64_t ino);

// Empty when the two sets agree; else every difference, e.g.
// "lms_workers is 1 here (node 1), 2 on node 3; witness_nodes is {} here
// (node 1), {2} on node 3": the same words make sense on both nodes (the
// refused one reads them in the Reject).
std::string settings_mismatch(const ClusterSettings& here, const ClusterSettings& there,
                              uint16_t self_node, uint16_t peer_node);

}  // namespace pgrac::ic
