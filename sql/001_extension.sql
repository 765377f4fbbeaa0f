-- The extension installs, and every view has its full column set.
CREATE EXTENSION pgrac_ic;
SELECT extname, extversion FROM pg_extension WHERE extname = 'pgrac_ic';

SELECT table_name, string_agg(column_name || ' ' || data_type, ', ' ORDER BY ordinal_position)
  FROM information_schema.columns
 WHERE table_name IN ('pg_cluster_rdma_status', 'pg_cluster_rdma_counters',
                      'pg_cluster_rdma_errors', 'pg_cluster_rdma_error_totals',
                      'pg_cluster_ic_peers')
 GROUP BY table_name ORDER BY table_name;

-- The stub tier runs, as configured, with its workers.
SELECT node_id, tier, tier_requested, tier_reason, listener_ready, lms_workers,
       incarnation > 0 AS has_incarnation, verify_issues
  FROM pg_cluster_rdma_status;
SELECT node_id, address, is_self, state, tier FROM pg_cluster_ic_peers;
SELECT backend_type, count(*) FROM pg_stat_activity
 WHERE backend_type LIKE 'pgrac_ic%' GROUP BY backend_type ORDER BY backend_type;

-- Nothing is granted to PUBLIC; monitoring roles read the views and may ping
-- (a liveness probe), and only superusers (or roles granted EXECUTE) run other
-- round trips.
SELECT p.proname,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_exec,
       has_function_privilege('pg_monitor', p.oid, 'EXECUTE') AS monitor_exec
  FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pgrac_ic'
 ORDER BY p.proname;
SELECT c.relname, has_table_privilege('public', c.oid, 'SELECT') AS public_select,
       has_table_privilege('pg_monitor', c.oid, 'SELECT') AS monitor_select
  FROM pg_class c JOIN pg_depend d ON d.objid = c.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pgrac_ic'
 WHERE c.relkind = 'v' ORDER BY c.relname;

CREATE ROLE pgrac_regress_nobody LOGIN;
SET ROLE pgrac_regress_nobody;
SELECT count(*) FROM pg_cluster_rdma_status;
SELECT pgrac_ic_ping(1);
RESET ROLE;
GRANT pg_monitor TO pgrac_regress_nobody;
SET ROLE pgrac_regress_nobody;
SELECT count(*) FROM pg_cluster_rdma_status;
SELECT pgrac_ic_bench(1, 8, 1);
RESET ROLE;
DROP ROLE pgrac_regress_nobody;
