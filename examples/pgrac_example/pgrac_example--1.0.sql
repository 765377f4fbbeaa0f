-- pgrac_example: SQL face of an example upper layer of pgrac_ic (README.md).
\echo Use "CREATE EXTENSION pgrac_example" to load this file. \quit

-- RPC to `node`: its handler answers 'node N: ' || upper(msg) (ASCII).
CREATE FUNCTION example_rpc(node int, msg text) RETURNS text
    AS 'MODULE_PATHNAME', 'example_rpc' LANGUAGE C STRICT;

-- RPC to `node` whose handler raises an ERROR: fails with the remote text.
CREATE FUNCTION example_rpc_fail(node int, msg text) RETURNS text
    AS 'MODULE_PATHNAME', 'example_rpc_fail' LANGUAGE C STRICT;

-- RPC of any message type (to see what a type nobody registered gives).
CREATE FUNCTION example_rpc_type(node int, msg_type int, msg text) RETURNS text
    AS 'MODULE_PATHNAME', 'example_rpc_type' LANGUAGE C STRICT;

-- `count` one-way notes to `node`; returns how many were sent.
CREATE FUNCTION example_note(node int, msg text, count int DEFAULT 1) RETURNS int
    AS 'MODULE_PATHNAME', 'example_note' LANGUAGE C STRICT;

-- One note to every other configured node.
CREATE FUNCTION example_broadcast(msg text) RETURNS void
    AS 'MODULE_PATHNAME', 'example_broadcast' LANGUAGE C STRICT;

-- Notes (and broadcasts) this instance's handlers received, in all or from one node.
CREATE FUNCTION example_notes_received() RETURNS bigint
    AS 'MODULE_PATHNAME', 'example_notes_received' LANGUAGE C STRICT;
CREATE FUNCTION example_notes_received(from_node int) RETURNS bigint
    AS 'MODULE_PATHNAME', 'example_notes_received_from' LANGUAGE C STRICT;

-- The body of the last note received (copied by the handler: bodies live
-- only during the call), and who sent it.
CREATE FUNCTION example_last_note(OUT from_node int, OUT msg text) RETURNS record
    AS 'MODULE_PATHNAME', 'example_last_note' LANGUAGE C STRICT;

-- Tries to register a handler from this backend: always fails (handlers are
-- registered in _PG_init of a preloaded library only).
CREATE FUNCTION example_register_late() RETURNS void
    AS 'MODULE_PATHNAME', 'example_register_late' LANGUAGE C STRICT;

REVOKE ALL ON FUNCTION example_rpc(int, text), example_rpc_fail(int, text),
    example_rpc_type(int, int, text), example_note(int, text, int), example_broadcast(text),
    example_register_late() FROM PUBLIC;
