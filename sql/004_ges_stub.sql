-- GES on one node (stub tier): the node is its own majority, a member of
-- epoch 1 with a lease that never ends; locks, tokens and the views work.
SELECT node_id, state, epoch, members, lease_valid, lease_remaining_ms IS NULL AS lease_forever,
       fence_count, quorum
  FROM pg_cluster_membership;
SELECT epoch, event, members, at > now() - interval '1 day' AS recent
  FROM pg_cluster_membership_history ORDER BY at, event;
SELECT pgrac_ges_lock('stub:a', 'EX', 0) AS locked;
SELECT pgrac_ges_lock_token('stub:a') >> 32 AS token_epoch, pgrac_ges_lock_token('stub:a') > 0 AS has_token;
SELECT resource, master_node, mode, state, token = pgrac_ges_lock_token('stub:a') AS same_token
  FROM pg_cluster_ges_locks;
SELECT pgrac_ges_lock_token('stub:none') IS NULL AS no_token_unheld;
SELECT pgrac_ges_unlock('stub:a') AS unlocked;
SELECT pgrac_ges_lock('stub:a', 'EX', 0) AS again;
SELECT pgrac_ges_lock_token('stub:a') > (1::bigint << 32) + 1 AS tokens_grow;
SELECT pgrac_ges_unlock_all();
-- The released lock stays cached on the node (docs/ges.md, "Node-level
-- caching"): the master (this node) lists the node owner, pid 0, and the cache
-- has it unused. The master's grant of the Transfer is asynchronous: wait.
DO $$ BEGIN
  FOR i IN 1..500 LOOP
    EXIT WHEN EXISTS (SELECT 1 FROM pg_cluster_ges_cache WHERE resource = 'stub:a');
    PERFORM pg_sleep(0.01);
  END LOOP;
END $$;
SELECT count(*) FROM pg_cluster_ges_locks WHERE pid <> 0;
SELECT resource, node_id, pid, mode FROM pg_cluster_ges_locks;
SELECT resource, mode, users, bast_mode, converting, tokens_left < 256 AS range_left
  FROM pg_cluster_ges_cache;
SELECT pgrac_ges_lock('stub:a', 'EX', 0) AS from_cache;
SELECT (pgrac_ges_lock_token('stub:a') & 255) > 0 AS local_take_token;
SELECT users FROM pg_cluster_ges_cache WHERE resource = 'stub:a';
SELECT pgrac_ges_unlock('stub:a');
SELECT cache_hits >= 1 AS hit, cache_transfers >= 1 AS kept FROM pg_cluster_ges_stats;
-- CW and PR are unordered: converting between them is refused (a failed
-- conversion could not be given back to the held mode at once).
SELECT pgrac_ges_lock('stub:cw', 'CW', 0);
SELECT pgrac_ges_lock('stub:cw', 'PR', 0);
SELECT pgrac_ges_lock('stub:cw', 'EX', 0) AS up_to_ex;
SELECT pgrac_ges_unlock_all();
-- Lock value blocks (docs/ges.md, "Lock value blocks"): an EX holder's value
-- is written at its release and read with the next grant (here a local take
-- from the node's cache); a reader cannot write; pgrac_ges_unlock_all() of an
-- EX lock leaves it invalid (NULL) until the next write.
SELECT pgrac_ges_lock('stub:v', 'EX', 0) AS ex, pgrac_ges_lock_value('stub:v') AS fresh;
SELECT pgrac_ges_set_lock_value('stub:v', 'lsn 0/1A2B');
SELECT pgrac_ges_unlock('stub:v');
SELECT pgrac_ges_lock('stub:v', 'PR', 0) AS pr,
       convert_from(pgrac_ges_lock_value('stub:v'), 'UTF8') AS value;
SELECT pgrac_ges_set_lock_value('stub:v', 'x');
SELECT pgrac_ges_lock_value('stub:unheld');
SELECT pgrac_ges_lock('stub:v', 'EX', 0) AS up;
SELECT pgrac_ges_unlock_all();
SELECT pgrac_ges_lock('stub:v', 'PR', 0) AS pr, pgrac_ges_lock_value('stub:v') IS NULL AS invalid;
SELECT pgrac_ges_unlock_all();
