// The cluster.* settings. Registered once, in _PG_init.
#pragma once

extern "C" {
extern int pgrac_tier_requested;  // pgrac::tiers::Tier
extern bool pgrac_interconnect_strict;
extern bool pgrac_serve_in_place;
extern bool pgrac_requester_lanes;
extern char* pgrac_cluster_name;
extern int pgrac_node_id;
extern char* pgrac_nodes;
extern char* pgrac_auth_key_file;
extern int pgrac_lms_workers;
extern int pgrac_ges_registry_entries;
extern int pgrac_ges_cache_entries;  // cluster.ges_cache_entries (0: no caching)
extern int pgrac_heartbeat_interval_ms;
extern int pgrac_busy_poll_us;
extern int pgrac_ges_deadlock_timeout_ms;
extern bool pgrac_ges_direct_requests;  // cluster.ges_direct_requests
extern int pgrac_ges_remaster_after;    // cluster.ges_remaster_after (0: never)
extern int pgrac_peer_timeout_ms;
extern int pgrac_rpc_timeout_ms;
extern int pgrac_tcp_paths;
extern int pgrac_wire_protection;  // pgrac::ic::WireProtection
extern int pgrac_max_unauthenticated;
extern int pgrac_reply_pool_kb;  // cluster.reply_pool_size
extern int pgrac_send_queue_max_kb;
extern int pgrac_send_queue_max_messages;
extern char* pgrac_rdma_device;
extern int pgrac_rdma_gid_index;
extern int pgrac_rdma_hugepage_size;  // enum: 0 none, 1 2MB, 2 1GB
extern int pgrac_rdma_cq_depth;
extern int pgrac_rdma_use_xrc;  // enum: 0 auto, 1 on, 2 off
extern bool pgrac_rdma_numa_auto_bind;
extern int pgrac_rdma_write_min;  // bytes; 0 = never RDMA WRITE
extern char* pgrac_witness_nodes;
}

namespace pgrac::glue {

void define_settings();
// cluster.witness_nodes as a mask (bit id-1): nodes that vote in membership and
// master no global lock.
uint64_t witness_mask();
// Checks that need several settings at once; ereport(FATAL)s at postmaster start.
void check_settings_together();
const char* hugepage_size_name(int v);
const char* xrc_mode_name(int v);

}  // namespace pgrac::glue
