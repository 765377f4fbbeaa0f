-- pgrac_example at the stub tier: one instance, every message to itself, through
-- the real process path (backend -> listener -> LMS worker -> backend).
CREATE EXTENSION pgrac_example CASCADE;

-- RPC to this node: the example's handler answers in an LMS worker.
SELECT example_rpc(1, 'hello, upper layer');
SELECT example_rpc(1, '');
SELECT length(example_rpc(1, repeat('x', 65000)));

-- A reply that would not fit reply->capacity: the handler says so.
SELECT example_rpc(1, repeat('x', 65536));

-- A handler's ERROR arrives as an error with the remote text.
\set VERBOSITY default
SELECT example_rpc_fail(1, 'please');

-- A type nobody registered, and types out of range.
SELECT example_rpc_type(1, 600, 'anyone?');
SELECT example_rpc_type(1, 0, 'x');
SELECT example_rpc_type(1, 1024, 'x');
-- The built-in PING (type 1) echoes.
SELECT example_rpc_type(1, 1, 'echo');

-- Notes to this node, then an RPC on the same route key: by its reply every
-- note was counted (one LMS worker, in order).
SELECT example_notes_received();
SELECT example_note(1, 'note ' || g) FROM generate_series(1, 3) g;
SELECT example_note(1, 'many', 100);
SELECT example_rpc(1, 'sync');
SELECT example_notes_received(), example_notes_received(1), example_notes_received(2);
SELECT * FROM example_last_note();

-- A broadcast goes to every other node: there are none.
SELECT example_broadcast('to nobody');
SELECT example_rpc(1, 'sync');
SELECT example_notes_received();

-- Unknown nodes.
SELECT example_rpc(2, 'x');
SELECT example_note(9, 'x');

-- Handlers are registered in _PG_init of a preloaded library only.
SELECT example_register_late();

-- What the remote side logged.
SELECT type, description FROM pg_cluster_rdma_errors
 WHERE type IN ('no_handler', 'handler_error') ORDER BY occurred_at;
