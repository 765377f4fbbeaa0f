// cluster.* settings: definitions, defaults and validation.
extern "C" {
#include "postgres.h"

#include "miscadmin.h"
#include "utils/guc.h"
}

#include <cstring>
#include <string>

#include "instance/guc.hpp"
#include "instance/pg_boundary.hpp"
#include "ic/session/handshake.hpp"
#include "ic/base/node_list.hpp"
#include "ic/shm/shared_state.hpp"
#include "tiers/tier.hpp"

using pgrac::tiers::Tier;

extern "C" {
int pgrac_tier_requested = static_cast<int>(Tier::Auto);
bool pgrac_interconnect_strict = false;
bool pgrac_serve_in_place = true;
bool pgrac_requester_lanes = true;
char* pgrac_cluster_name = nullptr;
int pgrac_node_id = 1;
char* pgrac_nodes = nullptr;
char* pgrac_witness_nodes = nullptr;
char* pgrac_auth_key_file = nullptr;
int pgrac_lms_workers = 2;
int pgrac_ges_registry_entries = 16384;
int pgrac_ges_cache_entries = 16384;
int pgrac_heartbeat_interval_ms = 1000;
int pgrac_busy_poll_us = 200;
int pgrac_ges_deadlock_timeout_ms = 1000;
int pgrac_ges_remaster_after = 32;
bool pgrac_ges_direct_requests = true;
int pgrac_peer_timeout_ms = 10000;
int pgrac_rpc_timeout_ms = 5000;
int pgrac_tcp_paths = 1;
int pgrac_wire_protection = 2;  // pgrac::ic::WireProtection::Secure
int pgrac_reply_pool_kb = 16384;
int pgrac_max_unauthenticated = 64;
int pgrac_send_queue_max_kb = 65536;
int pgrac_send_queue_max_messages = 65536;
char* pgrac_rdma_device = nullptr;
int pgrac_rdma_gid_index = -1;
int pgrac_rdma_hugepage_size = 1;
int pgrac_rdma_cq_depth = 4096;
int pgrac_rdma_use_xrc = 0;
int pgrac_rdma_write_min = 1024;
bool pgrac_rdma_numa_auto_bind = true;
}

namespace pgrac::glue {

namespace {

const struct config_enum_entry kTierOptions[] = {{"auto", static_cast<int>(Tier::Auto), false},
                                                 {"stub", static_cast<int>(Tier::Stub), false},
                                                 {"tier1", static_cast<int>(Tier::Tier1), false},
                                                 {"tier2", static_cast<int>(Tier::Tier2), false},
                                                 {"tier3", static_cast<int>(Tier::Tier3), false},
                                                 {"tcp", static_cast<int>(Tier::Tier3), true},
                                                 {nullptr, 0, false}};

const struct config_enum_entry kHugepageOptions[] = {
    {"none", 0, false}, {"2MB", 1, false}, {"1GB", 2, false}, {nullptr, 0, false}};

const struct config_enum_entry kWireProtectionOptions[] = {
    {"crc", 0, false}, {"mac", 1, false}, {"secure", 2, false}, {nullptr, 0, false}};

const struct config_enum_entry kXrcOptions[] = {
    {"auto", 0, false}, {"on", 1, false}, {"off", 2, false}, {nullptr, 0, false}};

// A custom setting with a bad value in postgresql.conf only gets a WARNING
// from PostgreSQL and falls back to its default; for the cluster's identity
// that would start an instance in the wrong cluster, so the first rejection
// seen while the library loads is kept and check_settings_together() stops
// the start with it.
char g_rejected[512] = "";

void remember_rejection(const char* name, const char* detail) {
    if (process_shared_preload_libraries_in_progress && g_rejected[0] == '\0')
        std::snprintf(g_rejected, sizeof g_rejected, "invalid value for parameter \"%s\": %s", name,
                      detail);
}

bool check_cluster_name(char** newval, void**, GucSource) {
    const char* s = *newval;
    size_t n = s ? std::strlen(s) : 0;
    if (n == 0 || n > pgrac::ic::kMaxClusterName) {
        GUC_check_errdetail("cluster.name must be 1 to %d characters long.",
                            static_cast<int>(pgrac::ic::kMaxClusterName));
        char why[64];
        std::snprintf(why, sizeof why, "it must be 1 to %d characters long",
                      static_cast<int>(pgrac::ic::kMaxClusterName));
        remember_rejection("cluster.name", why);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || c == '.';
        if (!ok) {
            GUC_check_errdetail("cluster.name may contain only letters, digits, '_', '-' and '.'.");
            remember_rejection("cluster.name",
                               "it may contain only letters, digits, '_', '-' and '.'");
            return false;
        }
    }
    return true;
}

uint64_t g_witness_mask = 0;

// "3" or "3,4": node ids 1..64, each once.
bool parse_witnesses(const char* text, uint64_t* mask, char* err, size_t errlen) {
    *mask = 0;
    const char* p = text;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        char* end = nullptr;
        const long id = std::strtol(p, &end, 10);
        if (end == p || id < 1 || id > 64) {
            std::snprintf(err, errlen, "\"%s\" is not a list of node ids from 1 to 64", text);
            return false;
        }
        const uint64_t bit = uint64_t{1} << (id - 1);
        if (*mask & bit) {
            std::snprintf(err, errlen, "node %ld is listed twice", id);
            return false;
        }
        *mask |= bit;
        p = end;
        while (*p == ' ') p++;
        if (*p && *p != ',') {
            std::snprintf(err, errlen, "\"%s\" is not a list of node ids from 1 to 64", text);
            return false;
        }
    }
    return true;
}

bool check_witnesses(char** newval, void**, GucSource) {
    char err[256] = "";
    uint64_t mask = 0;
    if (!parse_witnesses(*newval ? *newval : "", &mask, err, sizeof err)) {
        GUC_check_errdetail("cluster.witness_nodes: %s.", err);
        remember_rejection("cluster.witness_nodes", err);
        GUC_check_errhint("Write node ids separated by commas, e.g. '3'.");
        return false;
    }
    return true;
}

void assign_witnesses(const char* newval, void*) {
    char err[256];
    uint64_t mask = 0;
    if (parse_witnesses(newval ? newval : "", &mask, err, sizeof err)) g_witness_mask = mask;
}

bool check_nodes(char** newval, void**, GucSource) {
    char err[512] = "";
    const char* text = *newval ? *newval : "";
    if (!guarded(
            [&] {
                std::string error;
                if (!pgrac::ic::parse_node_list(text, &error))
                    std::snprintf(err, sizeof err, "%s", error.c_str());
            },
            err, sizeof err))
        std::snprintf(err, sizeof err, "cannot be read (out of memory)");
    if (err[0] != '\0') {
        GUC_check_errdetail("cluster.nodes: %s.", err);
        remember_rejection("cluster.nodes", err);
        GUC_check_errhint(
            "Write the nodes as id@host:port, separated by commas, e.g. "
            "'1@10.0.0.1:7400,2@10.0.0.2:7400'.");
        return false;
    }
    return true;
}

}  // namespace

uint64_t witness_mask() {
    return g_witness_mask;
}

const char* hugepage_size_name(int v) {
    return v == 2 ? "1GB" : v == 1 ? "2MB" : "none";
}
const char* xrc_mode_name(int v) {
    return v == 1 ? "on" : v == 2 ? "off" : "auto";
}

// Alphabetical, as citus does: one place to find every setting.
void define_settings() {
    DefineCustomStringVariable(
        "cluster.auth_key_file", "File holding the cluster's shared authentication key.",
        "Peers prove knowledge of this key (HMAC-SHA256) before any "
        "message is accepted. The file must have mode 0600.",
        &pgrac_auth_key_file, "", PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "cluster.busy_poll_us", "Microseconds the interconnect's processes poll before sleeping.",
        "After moving a message, the listener, the LMS workers and a backend "
        "waiting for a reply keep polling (yielding the CPU) this long "
        "before they sleep on their latch: a wakeup costs 5-25 us. "
        "0 never polls.",
        &pgrac_busy_poll_us, 200, 0, 10000, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "cluster.ges_deadlock_timeout",
        "How long a global lock request waits before the cluster-wide deadlock search looks at it.",
        "The lowest-numbered live instance gathers the wait-for edges of every instance's "
        "LMS workers when some request has waited this long, and cancels one request of "
        "each cycle it finds (at most one search per this interval).",
        &pgrac_ges_deadlock_timeout_ms, 1000, 10, 3600000, PGC_SIGHUP, GUC_UNIT_MS, nullptr,
        nullptr, nullptr);
    DefineCustomIntVariable("cluster.heartbeat_interval", "Interval between heartbeats to peers.",
                            nullptr, &pgrac_heartbeat_interval_ms, 1000, 10, 60000, PGC_SIGHUP,
                            GUC_UNIT_MS, nullptr, nullptr, nullptr);
    DefineCustomEnumVariable("cluster.interconnect_tier", "Network tier of the interconnect.",
                             "auto probes for an RDMA device and falls back to tier3 (TCP).",
                             &pgrac_tier_requested, static_cast<int>(Tier::Auto), kTierOptions,
                             PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    DefineCustomBoolVariable(
        "cluster.interconnect_strict", "Refuse to start rather than fall back to a slower tier.",
        nullptr, &pgrac_interconnect_strict, false, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "cluster.max_unauthenticated",
        "Most accepted connections that may be authenticating at once.",
        "A new connection beyond this closes the oldest one still authenticating "
        "(counted as unauthenticated_limit): idle connections push out each other, while a "
        "peer with the key authenticates in a round trip.",
        &pgrac_max_unauthenticated, 64, 1, 65536, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable("cluster.lms_workers", "Number of LMS worker processes.", nullptr,
                            &pgrac_lms_workers, 2, 1, pgrac::ic::kMaxLmsWorkers, PGC_POSTMASTER, 0,
                            nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "cluster.ges_registry_entries",
        "Entries of each LMS worker's registry mirror in shared memory.",
        "The mirror keeps this node's global locks and requests of the worker's shard, so that "
        "a restarted LMS worker gets them back; when it is full, a restart voids the shard's "
        "locks instead (their holders get \"global lock lost\"). Rounded up to a power of "
        "two; about 112 bytes each, for each of cluster.lms_workers.",
        &pgrac_ges_registry_entries, 16384, 1024, 1 << 24, PGC_POSTMASTER, 0, nullptr, nullptr,
        nullptr);
    DefineCustomIntVariable(
        "cluster.ges_cache_entries",
        "Global locks this node keeps cached after their last local user released them.",
        "A cached lock is taken again by any backend of the node without a message, until "
        "another node asks for it (a BAST) or it is evicted (least recently used first). "
        "0 turns caching off. About 150 bytes each; cached locks also take entries of "
        "cluster.ges_registry_entries.",
        &pgrac_ges_cache_entries, 16384, 0, 1 << 24, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "cluster.ges_remaster_after",
        "Requests after which a global lock's home master may hand it to the node that uses it.",
        "Each resource's home master counts the requests it gets for it; after this many, if "
        "one other node sent at least 40 % of them and this node under 20 %, the resource is "
        "mastered on that node for the rest of the membership epoch (docs/ges.md, \"Mastership "
        "that follows use\"). 0 never hands a resource over.",
        &pgrac_ges_remaster_after, 32, 0, 1000000, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
    DefineCustomBoolVariable(
        "cluster.ges_direct_requests",
        "Send a new global lock request to its remote master on the backend's own lane.",
        "The backend sends the request to the resource's master itself, on its requester lane "
        "(cluster.requester_lanes), and takes an immediate grant from the reply: two process "
        "wakeups fewer than through its own node's LMS and listener (docs/ges.md, \"Direct "
        "routing\"). Conversions, cached locks and locks mastered on this node never take it. "
        "off: every request goes through the LMS.",
        &pgrac_ges_direct_requests, true, PGC_USERSET, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "cluster.reply_pool_size", "Shared memory for replies larger than 512 bytes in flight.",
        "A requester that may get a large reply (a block, a batch of blocks) takes 8 kB "
        "chunks of this pool for the duration of its request, so reply space does not grow "
        "with max_connections. When the pool is short a request waits for room up to its "
        "timeout, then fails with \"send queue full\".",
        &pgrac_reply_pool_kb, 16384, 1024, 1048576, PGC_POSTMASTER, GUC_UNIT_KB, nullptr, nullptr,
        nullptr);
    DefineCustomStringVariable("cluster.name", "Name of the cluster; peers must match it.", nullptr,
                               &pgrac_cluster_name, "pgrac", PGC_POSTMASTER, 0, check_cluster_name,
                               nullptr, nullptr);
    DefineCustomIntVariable("cluster.node_id", "This instance's node id in cluster.nodes.", nullptr,
                            &pgrac_node_id, 1, 1, pgrac::ic::kMaxNodes, PGC_POSTMASTER, 0, nullptr,
                            nullptr, nullptr);
    DefineCustomStringVariable("cluster.nodes", "Every node of the cluster: id@host:port,...",
                               "Empty means a single-node cluster.", &pgrac_nodes, "",
                               PGC_POSTMASTER, 0, check_nodes, nullptr, nullptr);
    DefineCustomIntVariable("cluster.peer_timeout", "Silence after which a peer is declared DOWN.",
                            nullptr, &pgrac_peer_timeout_ms, 10000, 100, 3600000, PGC_SIGHUP,
                            GUC_UNIT_MS, nullptr, nullptr, nullptr);
    DefineCustomIntVariable("cluster.rdma_cq_depth", "Completion queue depth of the RDMA tiers.",
                            nullptr, &pgrac_rdma_cq_depth, 4096, 4, 1048576, PGC_POSTMASTER, 0,
                            nullptr, nullptr, nullptr);
    DefineCustomStringVariable("cluster.rdma_device",
                               "RDMA device to use (e.g. mlx5_0); empty picks the first "
                               "device with an active port.",
                               nullptr, &pgrac_rdma_device, "", PGC_POSTMASTER, 0, nullptr, nullptr,
                               nullptr);
    DefineCustomIntVariable(
        "cluster.rdma_gid_index", "GID index for RoCE; -1 picks the RoCE v2 IPv4 GID.", nullptr,
        &pgrac_rdma_gid_index, -1, -1, 1023, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    DefineCustomEnumVariable("cluster.rdma_hugepage_size",
                             "Page size of the RDMA buffer pool (falls back to 4 kB pages).",
                             nullptr, &pgrac_rdma_hugepage_size, 1, kHugepageOptions,
                             PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    DefineCustomBoolVariable(
        "cluster.rdma_numa_auto_bind", "Bind the listener's I/O to the HCA's NUMA node.", nullptr,
        &pgrac_rdma_numa_auto_bind, true, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    DefineCustomEnumVariable(
        "cluster.rdma_use_xrc", "Use XRC queue pairs where the device supports them.", nullptr,
        &pgrac_rdma_use_xrc, 0, kXrcOptions, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "cluster.rdma_write_min",
        "Frames of at least this size go to a requester lane by RDMA WRITE into the slots its "
        "process offered; 0 sends every frame.",
        nullptr, &pgrac_rdma_write_min, 1024, 0, 1048576, PGC_POSTMASTER, GUC_UNIT_BYTE, nullptr,
        nullptr, nullptr);
    DefineCustomIntVariable("cluster.rpc_timeout", "Default time an RPC waits for its reply.",
                            nullptr, &pgrac_rpc_timeout_ms, 5000, 1, 3600000, PGC_USERSET,
                            GUC_UNIT_MS, nullptr, nullptr, nullptr);
    DefineCustomBoolVariable(
        "cluster.serve_in_place",
        "The listener serves non-blocking requests (ping, blocks in the buffer pool) itself.",
        "Off hands every request to an LMS worker: two process wakeups more per round trip.",
        &pgrac_serve_in_place, true, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
    DefineCustomBoolVariable(
        "cluster.requester_lanes",
        "A backend sends its RPCs to a peer on a connection of its own (tier3).",
        "The reply comes straight back to it: two process wakeups per round trip instead of "
        "four through the listeners. Off sends every RPC through the listeners.",
        &pgrac_requester_lanes, true, PGC_USERSET, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable("cluster.send_queue_max_messages",
                            "Most messages queued to one peer and not yet acknowledged.", nullptr,
                            &pgrac_send_queue_max_messages, 65536, 16, 16777216, PGC_SIGHUP, 0,
                            nullptr, nullptr, nullptr);
    DefineCustomIntVariable("cluster.send_queue_max_size",
                            "Most bytes queued to one peer and not yet acknowledged.", nullptr,
                            &pgrac_send_queue_max_kb, 65536, 256, 4194304, PGC_SIGHUP, GUC_UNIT_KB,
                            nullptr, nullptr, nullptr);
    DefineCustomEnumVariable(
        "cluster.wire_protection", "How frames are protected after the handshake.",
        "crc: CRC32C only; mac: an AES-256-GCM tag on every frame (no injection, alteration, "
        "replay or reordering); secure: mac and the payload encrypted. A session uses the "
        "stronger of its two nodes' settings.",
        &pgrac_wire_protection, 2, kWireProtectionOptions, PGC_POSTMASTER, 0, nullptr, nullptr,
        nullptr);
    DefineCustomStringVariable(
        "cluster.witness_nodes", "Nodes that vote in membership but master no global lock.",
        "Node ids, e.g. '3': a small third instance that lets one of two data nodes go on "
        "when the other fails. Every node must list the same witnesses.",
        &pgrac_witness_nodes, "", PGC_POSTMASTER, 0, check_witnesses, assign_witnesses, nullptr);
    DefineCustomIntVariable("cluster.tcp_paths",
                            "Bulk connections per pair of instances, besides the control lane.",
                            nullptr, &pgrac_tcp_paths, 1, 0, pgrac::ic::kMaxLanes - 1,
                            PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
    MarkGUCPrefixReserved("cluster");
}

namespace {
void check_combination(char* err, size_t errlen, char* hint, size_t hintlen);
char g_key_warning[512] = "";  // reported after the checks, outside C++ frames
}  // namespace

void check_settings_together() {
    char err[512] = "";
    char hint[256] = "";
    if (g_rejected[0] != '\0')
        ereport(FATAL, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("%s", g_rejected),
                        errhint("Fix the setting in postgresql.conf; pgrac_ic does not start "
                                "with a cluster identity it cannot read.")));
    // Everything that allocates runs under guarded(): an exception must not
    // reach the postmaster's frames.
    char oom[128] = "";
    if (!guarded([&] { check_combination(err, sizeof err, hint, sizeof hint); }, oom, sizeof oom))
        std::snprintf(err, sizeof err, "cluster settings cannot be checked: %s", oom);
    if (err[0] != '\0')
        ereport(FATAL, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("%s", err),
                        hint[0] ? errhint("%s", hint) : 0));
    if (g_key_warning[0] != '\0') ereport(WARNING, (errmsg("%s", g_key_warning)));
}

namespace {

void check_combination(char* err, size_t errlen, char* hint, size_t hintlen) {
    {
        std::string error;
        auto nodes = pgrac::ic::parse_node_list(pgrac_nodes ? pgrac_nodes : "", &error);
        bool multi = nodes && nodes->size() > 1;
        if (nodes && !nodes->empty() && !pgrac::ic::find_node(*nodes, pgrac_node_id)) {
            std::snprintf(err, errlen, "cluster.node_id %d is not listed in cluster.nodes",
                          pgrac_node_id);
            std::snprintf(hint, hintlen,
                          "Add \"%d@host:port\" to cluster.nodes or fix "
                          "cluster.node_id.",
                          pgrac_node_id);
        } else if (nodes && !nodes->empty() && g_witness_mask != 0 && [&] {
                       uint64_t configured = 0;
                       for (const auto& n : *nodes) configured |= uint64_t{1} << (n.node_id - 1);
                       return (g_witness_mask & ~configured) != 0 ||
                              (configured & ~g_witness_mask) == 0;
                   }()) {
            std::snprintf(err, errlen,
                          "cluster.witness_nodes must name nodes of cluster.nodes and leave at "
                          "least one node that is not a witness");
            std::snprintf(hint, hintlen, "Fix cluster.witness_nodes or cluster.nodes.");
        } else if (pgrac_peer_timeout_ms < 2 * pgrac_heartbeat_interval_ms) {
            std::snprintf(err, errlen,
                          "cluster.peer_timeout (%d ms) must be at least twice "
                          "cluster.heartbeat_interval (%d ms)",
                          pgrac_peer_timeout_ms, pgrac_heartbeat_interval_ms);
            std::snprintf(hint, hintlen,
                          "Raise cluster.peer_timeout or lower "
                          "cluster.heartbeat_interval.");
        } else if (multi && pgrac_tier_requested != static_cast<int>(Tier::Stub)) {
            if (!pgrac_auth_key_file || !*pgrac_auth_key_file) {
                std::snprintf(err, errlen,
                              "cluster.auth_key_file must be set when cluster.nodes lists "
                              "other nodes");
                std::snprintf(hint, hintlen,
                              "Create a key with \"openssl rand -hex 32 > "
                              "FILE; chmod 0600 FILE\" and copy it to every node.");
            } else if (std::string warning;
                       !pgrac::ic::load_key_file(pgrac_auth_key_file, &error, &warning)) {
                std::snprintf(err, errlen, "cluster.auth_key_file: %s", error.c_str());
            } else if (!warning.empty()) {
                std::snprintf(g_key_warning, sizeof g_key_warning, "cluster.auth_key_file: %s",
                              warning.c_str());
            }
        }
    }
}

}  // namespace

}  // namespace pgrac::glue
