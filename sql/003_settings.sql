-- Settings: defaults, and every bad value is refused with a message that
-- says what is wrong.
SELECT name, setting, unit, context FROM pg_settings
 WHERE name LIKE 'cluster.%' ORDER BY name;

SET cluster.rpc_timeout = '2s';
SHOW cluster.rpc_timeout;
SET cluster.rpc_timeout = 0;
SET cluster.rpc_timeout = 'soon';
RESET cluster.rpc_timeout;
SET cluster.nodes = '1@127.0.0.1:7400';
SET cluster.no_such_setting = 1;

-- Postmaster settings go through the same checks when written with ALTER SYSTEM.
ALTER SYSTEM SET cluster.nodes = '1@127.0.0.1';
ALTER SYSTEM SET cluster.nodes = '1@127.0.0.1:7400,1@127.0.0.2:7400';
ALTER SYSTEM SET cluster.nodes = '0@127.0.0.1:7400';
ALTER SYSTEM SET cluster.nodes = '2@127.0.0.1:99999';
ALTER SYSTEM SET cluster.name = 'has space';
ALTER SYSTEM SET cluster.name = '';
ALTER SYSTEM SET cluster.interconnect_tier = 'tier9';
ALTER SYSTEM SET cluster.lms_workers = 0;
ALTER SYSTEM SET cluster.lms_workers = 17;
ALTER SYSTEM SET cluster.ges_registry_entries = 100;
ALTER SYSTEM SET cluster.node_id = 0;
ALTER SYSTEM SET cluster.rdma_hugepage_size = '4MB';
ALTER SYSTEM SET cluster.rdma_use_xrc = 'maybe';
ALTER SYSTEM SET cluster.tcp_paths = 5;
ALTER SYSTEM SET cluster.heartbeat_interval = '1us';
