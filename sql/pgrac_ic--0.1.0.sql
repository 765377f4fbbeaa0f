-- pgrac_ic 0.1.0: the cluster interconnect's SQL interface.
\echo Use "CREATE EXTENSION pgrac_ic" to load this file. \quit

-- ---------------------------------------------------------------- status
CREATE FUNCTION pgrac_ic_status(
    OUT node_id int, OUT cluster_name text, OUT tier text, OUT tier_requested text,
    OUT tier_reason text, OUT strict bool, OUT listener_ready bool, OUT incarnation bigint,
    OUT epoch bigint, OUT hca_name text, OUT hca_vendor text, OUT link_layer text,
    OUT port_state text, OUT mtu int, OUT xrc text, OUT dcqcn text, OUT hugepage_size text,
    OUT numa_node int, OUT numa_binding text, OUT cq_depth int, OUT verify_issues text[],
    OUT lms_workers int, OUT started_at timestamptz, OUT reply_pool_bytes bigint,
    OUT reply_pool_in_use_bytes bigint, OUT reply_pool_peak_bytes bigint,
    OUT reply_pool_refusals bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pgrac_ic_status_view' LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE VIEW pg_cluster_rdma_status AS SELECT * FROM pgrac_ic_status();
COMMENT ON VIEW pg_cluster_rdma_status IS
    'The interconnect tier in use, why, and the state of the RDMA device if there is one';

-- ---------------------------------------------------------------- counters
CREATE FUNCTION pgrac_ic_counters(
    OUT peer_node_id int, OUT msgs_sent bigint, OUT msgs_recv bigint, OUT bytes_sent bigint,
    OUT bytes_recv bigint, OUT rpcs_sent bigint, OUT rpcs_served bigint, OUT retransmits bigint,
    OUT reconnects bigint, OUT duplicates_dropped bigint, OUT backpressure_stalls bigint,
    OUT queued_msgs bigint, OUT queued_bytes bigint, OUT mr_cache_hit_rate float8,
    OUT cq_overflow_count bigint, OUT p50_latency_us float8, OUT p99_latency_us float8,
    OUT p999_latency_us float8, OUT latency_samples bigint, OUT verbs_sends bigint,
    OUT verbs_recvs bigint, OUT served_in_place bigint, OUT in_place_handoffs bigint,
    OUT direct_rpcs_sent bigint, OUT direct_rpcs_served bigint, OUT requester_lanes bigint,
    OUT rdma_writes bigint, OUT zero_copy_sends bigint, OUT sealed_in_place bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pgrac_ic_counters' LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE VIEW pg_cluster_rdma_counters AS SELECT * FROM pgrac_ic_counters();
COMMENT ON VIEW pg_cluster_rdma_counters IS
    'Interconnect traffic and RPC latency per peer; the row with a NULL peer_node_id is the total';

-- ---------------------------------------------------------------- errors
CREATE FUNCTION pgrac_ic_errors(
    OUT occurred_at timestamptz, OUT peer_node_id int, OUT type text, OUT severity text,
    OUT description text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pgrac_ic_errors' LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE VIEW pg_cluster_rdma_errors AS SELECT * FROM pgrac_ic_errors();
COMMENT ON VIEW pg_cluster_rdma_errors IS
    'The most recent interconnect errors, newest first (a bounded ring)';

CREATE FUNCTION pgrac_ic_error_totals(OUT type text, OUT total bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pgrac_ic_error_totals' LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE VIEW pg_cluster_rdma_error_totals AS SELECT * FROM pgrac_ic_error_totals();
COMMENT ON VIEW pg_cluster_rdma_error_totals IS
    'How many errors of each type occurred since the instance started';

-- ---------------------------------------------------------------- peers
CREATE FUNCTION pgrac_ic_peers(
    OUT node_id int, OUT address text, OUT is_self bool, OUT state text,
    OUT state_since timestamptz, OUT tier text, OUT paths_up int, OUT paths int,
    OUT incarnation bigint, OUT epoch bigint, OUT rtt_us float8, OUT queued_msgs bigint,
    OUT queued_bytes bigint, OUT unacked_msgs bigint, OUT last_heard timestamptz,
    OUT notes_recv bigint, OUT wire_protection text, OUT session_resets bigint,
    OUT last_error text, OUT instance bigint, OUT peer_timeout_ms int,
    OUT heartbeat_interval_ms int, OUT config_mismatch text, OUT config_refusals bigint,
    OUT duplicate_refusals bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pgrac_ic_peers' LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE VIEW pg_cluster_ic_peers AS SELECT * FROM pgrac_ic_peers();
COMMENT ON VIEW pg_cluster_ic_peers IS 'Every node of the cluster as this instance sees it';

-- ---------------------------------------------------------------- round trips
CREATE FUNCTION pgrac_ic_ping(node int) RETURNS float8
AS 'MODULE_PATHNAME', 'pgrac_ic_ping' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_ic_ping(int) IS
    'Round trip to a node through the interconnect, in microseconds';

CREATE FUNCTION pgrac_ic_bench(node int, payload_bytes int DEFAULT 64,
                               iterations int DEFAULT 10000,
                               OUT p50_us float8, OUT p99_us float8, OUT p999_us float8,
                               OUT ops_per_sec float8, OUT iterations_done int)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pgrac_ic_bench' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_ic_bench(int, int, int) IS
    'RPC latency percentiles and rate to a node, measured through the full path';

-- ---------------------------------------------------------------- diagnostics
CREATE FUNCTION pgrac_ic_broadcast(body bytea DEFAULT '') RETURNS int
AS 'MODULE_PATHNAME', 'pgrac_ic_broadcast_note' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_ic_broadcast(bytea) IS
    'Sends a one-way note to every other node (counted in pg_cluster_ic_peers.notes_recv there); returns the number of nodes';

CREATE FUNCTION pgrac_ic_seq_rpc(node int, stream int, seq bigint) RETURNS text
AS 'MODULE_PATHNAME', 'pgrac_ic_seq_rpc' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_ic_seq_rpc(int, int, bigint) IS
    'Exactly-once probe: applies seq to a numbered stream on node; returns applied, duplicate or reordered';

CREATE FUNCTION pgrac_ic_stream(node int, payload_bytes int DEFAULT 64,
                                messages int DEFAULT 100000,
                                OUT messages_sent bigint, OUT seconds float8,
                                OUT msgs_per_sec float8, OUT mbytes_per_sec float8)
RETURNS record
AS 'MODULE_PATHNAME', 'pgrac_ic_stream' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_ic_stream(int, int, int) IS
    'Streaming throughput to a node: one-way notes on one route, timed until the receiving LMS worker has handled them all (mbytes_per_sec counts payload bytes, 1 MB = 10^6 bytes)';

-- ================================================================ GES and Cache Fusion
-- Global Enqueue Service locks (session-level, as pg_advisory_lock) and Cache
-- Fusion block shipping. docs/ges.md and docs/cache_fusion.md describe them.

-- ---------------------------------------------------------------- GES locks
CREATE FUNCTION pgrac_ges_lock(resource text, mode text DEFAULT 'EX', timeout_ms int DEFAULT -1)
RETURNS bool
AS 'MODULE_PATHNAME', 'pgrac_ges_lock_text' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_ges_lock(text, text, int) IS
    'Takes (or converts to) a cluster-wide lock in mode NL/CR/CW/PR/PW/EX; timeout_ms -1 waits, 0 is NOWAIT; false if not granted in time';

CREATE FUNCTION pgrac_ges_lock(resource bigint, mode text DEFAULT 'EX', timeout_ms int DEFAULT -1)
RETURNS bool
AS 'MODULE_PATHNAME', 'pgrac_ges_lock_int' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_ges_lock(bigint, text, int) IS
    'Takes (or converts to) a cluster-wide lock named by a bigint';

CREATE FUNCTION pgrac_ges_unlock(resource text) RETURNS bool
AS 'MODULE_PATHNAME', 'pgrac_ges_unlock_text' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_ges_unlock(text) IS
    'Releases one level of a cluster-wide lock held by this session; false (and a WARNING) if not held';

CREATE FUNCTION pgrac_ges_unlock(resource bigint) RETURNS bool
AS 'MODULE_PATHNAME', 'pgrac_ges_unlock_int' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_ges_unlock(bigint) IS
    'Releases one level of a cluster-wide lock named by a bigint';

CREATE FUNCTION pgrac_ges_unlock_all() RETURNS int
AS 'MODULE_PATHNAME', 'pgrac_ges_unlock_all_sql' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_ges_unlock_all() IS
    'Releases every cluster-wide lock of this session; returns how many resources it held';

CREATE FUNCTION pgrac_ges_resource(resource text, OUT master_node int, OUT lms_worker int,
                                   OUT route_key bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'pgrac_ges_resource' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_ges_resource(text) IS
    'Where a resource is mastered now (this node''s view of the live members) and which LMS worker serves it';

CREATE FUNCTION pgrac_ges_bench(resource text, mode text DEFAULT 'EX', iterations int DEFAULT 1000,
                                OUT p50_us float8, OUT p99_us float8, OUT ops_per_sec float8,
                                OUT iterations_done int)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pgrac_ges_bench' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_ges_bench(text, text, int) IS
    'Latency of lock + unlock of one cluster-wide lock, measured in this backend';

CREATE FUNCTION pgrac_ges_locks(
    OUT resource text, OUT master_node int, OUT node_id int, OUT pid int, OUT mode text,
    OUT held_mode text, OUT state text, OUT since timestamptz, OUT token bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pgrac_ges_locks' LANGUAGE C STRICT VOLATILE;

CREATE VIEW pg_cluster_ges_locks AS SELECT * FROM pgrac_ges_locks();
COMMENT ON VIEW pg_cluster_ges_locks IS
    'Every global lock and request on every member''s masters: granted, converting (held_mode still held) or waiting; and requests waiting in their own node for a local user of a cached lock (waiting_local); token is the grant''s fencing token';

CREATE FUNCTION pgrac_ges_lock_token(resource text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'pgrac_ges_lock_token' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_ges_lock_token(text) IS
    'The fencing token of a global lock this session holds (NULL if none); tokens of a resource grow strictly across the cluster';

CREATE FUNCTION pgrac_ges_lock_value(resource text) RETURNS bytea
AS 'MODULE_PATHNAME', 'pgrac_ges_lock_value_text' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_ges_lock_value(text) IS
    'The lock value block of a global lock this session holds (0 to 32 bytes; NULL when invalid: a PW or EX holder went without writing it)';
CREATE FUNCTION pgrac_ges_lock_value(resource bigint) RETURNS bytea
AS 'MODULE_PATHNAME', 'pgrac_ges_lock_value_int' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_ges_lock_value(bigint) IS
    'The lock value block of a global lock this session holds (0 to 32 bytes; NULL when invalid)';
CREATE FUNCTION pgrac_ges_set_lock_value(resource text, value bytea) RETURNS void
AS 'MODULE_PATHNAME', 'pgrac_ges_set_lock_value_text' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_ges_set_lock_value(text, bytea) IS
    'Sets the lock value block of a PW or EX global lock this session holds (0 to 32 bytes): written when the lock is released with pgrac_ges_unlock or converted down';
CREATE FUNCTION pgrac_ges_set_lock_value(resource bigint, value bytea) RETURNS void
AS 'MODULE_PATHNAME', 'pgrac_ges_set_lock_value_int' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_ges_set_lock_value(bigint, bytea) IS
    'Sets the lock value block of a PW or EX global lock this session holds (0 to 32 bytes)';

CREATE FUNCTION pgrac_ges_cache(
    OUT resource text, OUT lms_worker int, OUT mode text, OUT users bigint, OUT bast_mode text,
    OUT converting boolean, OUT local_waiters boolean, OUT grant_token bigint,
    OUT tokens_left bigint, OUT hits bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pgrac_ges_cache' LANGUAGE C STRICT VOLATILE;

CREATE VIEW pg_cluster_ges_cache AS SELECT * FROM pgrac_ges_cache();
COMMENT ON VIEW pg_cluster_ges_cache IS
    'This node''s cached global locks (the node owner, pid 0 in pg_cluster_ges_locks): mode, local users, the mode a BAST asked for (no new local take until it is given back), a waiting local conversion, local requests waiting for its users, the grant''s token and the local takes left in its range';

CREATE FUNCTION pgrac_ges_stats(
    OUT cache_capacity bigint, OUT cached bigint, OUT cache_hits bigint,
    OUT misses_not_cached bigint, OUT misses_fenced bigint, OUT misses_bast bigint,
    OUT misses_mode bigint, OUT misses_local_conflict bigint, OUT misses_range_used_up bigint,
    OUT basts_received bigint, OUT cache_transfers bigint, OUT cache_give_backs bigint,
    OUT cache_evictions bigint, OUT cache_conversions bigint, OUT grants_delivered bigint,
    OUT denials_delivered bigint, OUT late_grants_undone bigint, OUT dead_owners_reaped bigint,
    OUT cluster_deadlocks bigint, OUT replay_conflicts bigint, OUT value_invalidations bigint,
    OUT remasters bigint, OUT remaster_timeouts bigint, OUT direct_sent bigint,
    OUT direct_taken bigint, OUT direct_served bigint, OUT direct_redirected bigint,
    OUT local_waits bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'pgrac_ges_stats' LANGUAGE C STRICT VOLATILE;

CREATE VIEW pg_cluster_ges_stats AS SELECT * FROM pgrac_ges_stats();
COMMENT ON VIEW pg_cluster_ges_stats IS
    'This node''s GES counters: the lock cache (hits taken without a message, misses by reason, BASTs, locks kept, given back, evicted, conversions), grants and denials delivered, late grants undone, dead owners reaped, cluster-wide deadlock victims, replay conflicts (must stay 0), value-block invalidations, remasters, and direct requests (sent on requester lanes, grants taken by their backends, served and redirected as a master)';

-- ---------------------------------------------------------------- membership
CREATE FUNCTION pgrac_membership(
    OUT node_id int, OUT state text, OUT epoch bigint, OUT members int[],
    OUT lease_valid boolean, OUT lease_remaining_ms bigint, OUT fence_count bigint,
    OUT accepted_epoch bigint, OUT accepted_members int[], OUT quorum int,
    OUT stale_epoch_messages bigint, OUT epoch_requests bigint, OUT instance bigint,
    OUT lease_ms int, OUT exclusion_window_ms int, OUT future_epoch_messages bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'pgrac_membership' LANGUAGE C STRICT VOLATILE;

CREATE VIEW pg_cluster_membership AS SELECT * FROM pgrac_membership();
COMMENT ON VIEW pg_cluster_membership IS
    'This node''s membership: state (joining, member, fenced), the committed epoch and its members, the lease, its vote';

CREATE FUNCTION pgrac_membership_history(
    OUT at timestamptz, OUT epoch bigint, OUT event text, OUT members int[], OUT detail text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pgrac_membership_history' LANGUAGE C STRICT VOLATILE;

CREATE VIEW pg_cluster_membership_history AS SELECT * FROM pgrac_membership_history();
COMMENT ON VIEW pg_cluster_membership_history IS
    'The last membership changes seen here, newest first: committed views, fences (at = when the lease ran out), rejoins, exclusions';

-- ---------------------------------------------------------------- Cache Fusion
CREATE FUNCTION pgrac_fetch_block(node int, rel regclass, blkno bigint, fork text DEFAULT 'main')
RETURNS bytea
AS 'MODULE_PATHNAME', 'pgrac_fetch_block' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_fetch_block(int, regclass, bigint, text) IS
    'The page image of a block as it is in node''s buffer pool (or storage), shipped over the interconnect';

CREATE FUNCTION pgrac_fetch_block_tag(node int, spcoid oid, dboid oid, relnumber oid, fork text,
                                      blkno bigint, reloid oid DEFAULT 0)
RETURNS bytea
AS 'MODULE_PATHNAME', 'pgrac_fetch_block_tag' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_fetch_block_tag(int, oid, oid, oid, text, bigint, oid) IS
    'The page image of a block named by its BufferTag (and the OID of its relation, 0: found in this database), from node; superuser only';

CREATE FUNCTION pgrac_fetch_blocks(node int, rel regclass, first bigint, count int,
                                   fork text DEFAULT 'main')
RETURNS TABLE(blkno bigint, lsn pg_lsn, page bytea)
AS 'MODULE_PATHNAME', 'pgrac_fetch_blocks' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_fetch_blocks(int, regclass, bigint, int, text) IS
    'Up to count consecutive blocks from node, several per round trip; stops at the end of the relation';

CREATE FUNCTION pgrac_fetch_block_bench(node int, rel regclass, iterations int DEFAULT 1000,
                                        batch int DEFAULT 1,
                                        OUT p50_us float8, OUT p99_us float8,
                                        OUT blocks_per_sec float8, OUT iterations_done int)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'pgrac_fetch_block_bench' LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION pgrac_fetch_block_bench(int, regclass, int, int) IS
    'Latency of block fetches (batch blocks per round trip) from node, measured in this backend';

-- ---------------------------------------------------------------- privileges
-- Monitoring roles read the views; nothing here is for PUBLIC.
REVOKE ALL ON FUNCTION pgrac_ic_status(), pgrac_ic_counters(), pgrac_ic_errors(),
    pgrac_ic_error_totals(), pgrac_ic_peers(), pgrac_ic_ping(int),
    pgrac_ic_bench(int, int, int), pgrac_ic_broadcast(bytea),
    pgrac_ic_seq_rpc(int, int, bigint), pgrac_ic_stream(int, int, int) FROM PUBLIC;
REVOKE ALL ON pg_cluster_rdma_status, pg_cluster_rdma_counters, pg_cluster_rdma_errors,
    pg_cluster_rdma_error_totals, pg_cluster_ic_peers FROM PUBLIC;
-- GES and Cache Fusion move locks and raw blocks: superuser or a granted role.
REVOKE ALL ON FUNCTION pgrac_ges_lock(text, text, int), pgrac_ges_lock(bigint, text, int),
    pgrac_ges_unlock(text), pgrac_ges_unlock(bigint), pgrac_ges_unlock_all(),
    pgrac_ges_resource(text), pgrac_ges_bench(text, text, int), pgrac_ges_locks(),
    pgrac_ges_lock_token(text), pgrac_ges_lock_value(text), pgrac_ges_lock_value(bigint),
    pgrac_ges_set_lock_value(text, bytea), pgrac_ges_set_lock_value(bigint, bytea),
    pgrac_fetch_block(int, regclass, bigint, text),
    pgrac_fetch_block_tag(int, oid, oid, oid, text, bigint, oid),
    pgrac_fetch_blocks(int, regclass, bigint, int, text),
    pgrac_fetch_block_bench(int, regclass, int, int) FROM PUBLIC;
REVOKE ALL ON pg_cluster_ges_locks FROM PUBLIC;
REVOKE ALL ON FUNCTION pgrac_ges_cache(), pgrac_ges_stats() FROM PUBLIC;
REVOKE ALL ON pg_cluster_ges_cache, pg_cluster_ges_stats FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgrac_ges_cache(), pgrac_ges_stats() TO pg_monitor;
GRANT SELECT ON pg_cluster_ges_cache, pg_cluster_ges_stats TO pg_monitor;
GRANT EXECUTE ON FUNCTION pgrac_ges_locks(), pgrac_ges_resource(text) TO pg_monitor;
GRANT SELECT ON pg_cluster_ges_locks TO pg_monitor;
REVOKE ALL ON FUNCTION pgrac_membership(), pgrac_membership_history() FROM PUBLIC;
REVOKE ALL ON pg_cluster_membership, pg_cluster_membership_history FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgrac_membership(), pgrac_membership_history() TO pg_monitor;
GRANT SELECT ON pg_cluster_membership, pg_cluster_membership_history TO pg_monitor;
GRANT EXECUTE ON FUNCTION pgrac_ic_status(), pgrac_ic_counters(), pgrac_ic_errors(),
    pgrac_ic_error_totals(), pgrac_ic_peers(), pgrac_ic_ping(int) TO pg_monitor;
GRANT SELECT ON pg_cluster_rdma_status, pg_cluster_rdma_counters, pg_cluster_rdma_errors,
    pg_cluster_rdma_error_totals, pg_cluster_ic_peers TO pg_monitor;
