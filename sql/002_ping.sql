-- Round trips to this instance go through the real process path
-- (backend -> listener -> LMS worker -> listener -> backend) on the stub tier.
SELECT pgrac_ic_ping(1) > 0 AS ping_ok;
SELECT p50_us > 0 AS p50_ok, p99_us >= p50_us AS p99_ok, p999_us >= p99_us AS p999_ok,
       ops_per_sec > 0 AS rate_ok, iterations_done
  FROM pgrac_ic_bench(1, 64, 200);
SELECT iterations_done FROM pgrac_ic_bench(1, 8192, 50);
SELECT iterations_done FROM pgrac_ic_bench(1, 65536, 5);

-- A stream of one-way notes to this instance, closed by a ping on the same
-- route: by the reply, the LMS worker has handled (and counted) every note.
SELECT messages_sent, seconds > 0 AS timed, msgs_per_sec > 0 AS rate_ok,
       mbytes_per_sec > 0 AS mb_ok
  FROM pgrac_ic_stream(1, 64, 1000);
SELECT notes_recv FROM pg_cluster_ic_peers WHERE is_self;
SELECT messages_sent, mbytes_per_sec FROM pgrac_ic_stream(1, 0, 10);

-- The pings moved the counters and the latency percentiles.
SELECT peer_node_id, msgs_sent >= 512 AS sent, msgs_recv >= 512 AS received,
       latency_samples >= 256 AS samples, p50_latency_us > 0 AS p50,
       p999_latency_us >= p50_latency_us AS ordered
  FROM pg_cluster_rdma_counters ORDER BY peer_node_id NULLS LAST;

-- Unknown nodes and bad arguments are clear errors.
SELECT pgrac_ic_ping(2);
SELECT pgrac_ic_ping(0);
SELECT pgrac_ic_ping(-1);
SELECT pgrac_ic_ping(NULL) IS NULL AS null_in_null_out;
SELECT * FROM pgrac_ic_bench(1, -1, 10);
SELECT * FROM pgrac_ic_bench(1, 65537, 10);
SELECT * FROM pgrac_ic_bench(1, 64, 0);
SELECT * FROM pgrac_ic_bench(9, 64, 10);
SELECT * FROM pgrac_ic_stream(1, -1, 10);
SELECT * FROM pgrac_ic_stream(1, 65537, 10);
SELECT * FROM pgrac_ic_stream(1, 64, 0);
SELECT * FROM pgrac_ic_stream(1, 64, 100000001);
SELECT * FROM pgrac_ic_stream(9, 64, 10);

-- The stub tier has no network: nothing failed on it so far; its one-node
-- membership view was committed (recorded as INFO, counted as membership_change).
SELECT type, severity, description FROM pg_cluster_rdma_errors
 WHERE type NOT IN ('unknown_node') ORDER BY occurred_at;
