-- pgrac_ic 0.1.0: the cluster interconnect's SQL interface.
\echo Use "CREATE EXTENSION pgrac_ic" to load this file. \quit

-- ---------------------------------------------------------------- status
CREATE FUNCTION pgrac_ic_status(
    OUT node_id int, OUT cluster_name text, OUT tier text, OUT tier_requested text,
    OUT tier_reason text, OUT strict bool, OUT listener_ready bool, OUT incarnation bigint,
    OUT epoch bigint, OUT hca_name text, OUT hca_vendor text, OUT link_layer text,
    OUT port_state text, OUT mtu int, OUT xrc text, OUT dcqcn text, OUT hugepage_size text,
    OUT numa_node int, OUT numa_binding text, OUT cq_depth int, OUT verify_issues text[],
    OUT lms_workers int, OUT started_at timestamptz)
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
    OUT p999_latency_us float8, OUT latency_samples bigint)
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
    OUT notes_recv bigint, OUT last_error text)
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

-- ---------------------------------------------------------------- privileges
-- Monitoring roles read the views; nothing here is for PUBLIC.
REVOKE ALL ON FUNCTION pgrac_ic_status(), pgrac_ic_counters(), pgrac_ic_errors(),
    pgrac_ic_error_totals(), pgrac_ic_peers(), pgrac_ic_ping(int),
    pgrac_ic_bench(int, int, int), pgrac_ic_broadcast(bytea),
    pgrac_ic_seq_rpc(int, int, bigint) FROM PUBLIC;
REVOKE ALL ON pg_cluster_rdma_status, pg_cluster_rdma_counters, pg_cluster_rdma_errors,
    pg_cluster_rdma_error_totals, pg_cluster_ic_peers FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgrac_ic_status(), pgrac_ic_counters(), pgrac_ic_errors(),
    pgrac_ic_error_totals(), pgrac_ic_peers(), pgrac_ic_ping(int) TO pg_monitor;
GRANT SELECT ON pg_cluster_rdma_status, pg_cluster_rdma_counters, pg_cluster_rdma_errors,
    pg_cluster_rdma_error_totals, pg_cluster_ic_peers TO pg_monitor;
