
# Copyright: pgrac_ic authors. The C API as an upper layer uses it: the example
# extension examples/pgrac_example, a second preloaded library
# (shared_preload_libraries = 'pgrac_ic,pgrac_example'), registers its own
# message types in _PG_init and talks between two instances: RPCs both ways, a
# handler's ERROR as an error with the remote text, one-way notes and
# broadcasts counted exactly, "no handler" for a type nobody registered, and no
# registration outside _PG_init. Needs the example installed
# (make install-example); its stub-tier test is make installcheck-example.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PgracCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $pkglibdir = `pg_config --pkglibdir`;
chomp $pkglibdir;
plan skip_all => "pgrac_example is not installed in $pkglibdir (make install-example)"
  unless -f "$pkglibdir/pgrac_example.so";

my $c = PgracCluster->new(n => 2, preload => ['pgrac_example']);
my ($n1, $n2) = ($c->node(1), $c->node(2));
$_->safe_psql('postgres', 'CREATE EXTENSION pgrac_example') for $c->nodes;

# Runs SQL expected to fail on a node; returns its stderr (error and detail).
sub fails
{
	my ($node, $sql) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', $sql, on_error_stop => 1);
	isnt($rc, 0, "fails: $sql");
	return $err;
}

# RPCs both ways, answered by the example's handler, registered in place, in
# the peer's listener.
my $served_in_place = sub {
	my ($node, $peer) = @_;
	return $node->safe_psql('postgres',
		"SELECT served_in_place FROM pg_cluster_rdma_counters WHERE peer_node_id = $peer");
};
my $in_place_before = $served_in_place->($n2, 1);
is($n1->safe_psql('postgres', "SELECT example_rpc(2, 'hello from one')"),
	'node 2: HELLO FROM ONE', 'RPC 1 -> 2');
is($n2->safe_psql('postgres', "SELECT example_rpc(1, 'hello from two')"),
	'node 1: HELLO FROM TWO', 'RPC 2 -> 1');
is($n1->safe_psql('postgres', "SELECT example_rpc(1, 'self')"), 'node 1: SELF', 'RPC to itself');
is($n2->safe_psql('postgres', "SELECT length(example_rpc(1, repeat('a', 65000)))"),
	'65008', 'a 65000-byte RPC and its reply');

is($served_in_place->($n2, 1) - $in_place_before, 1,
	'node 2 served the RPC from node 1 in place (PGRAC_IC_HANDLER_IN_PLACE)');

# The handler refuses a reply over reply->capacity.
like(fails($n1, "SELECT example_rpc(2, repeat('a', 65536))"),
	qr/RPC to node 2 failed: reply larger than the buffer/, 'reply over the capacity: REPLY_TOO_BIG');

# A handler that raises (in the peer's listener): HANDLER_ERROR with the
# remote text, and the listener goes on serving.
my $err = fails($n1, "SELECT example_rpc_fail(2, 'boom')");
like($err, qr/RPC to node 2 failed: the peer's handler raised an error/, 'handler ERROR: HANDLER_ERROR');
like($err, qr/Remote error: pgrac_example: node 2 refuses "boom" from node 1/,
	'handler ERROR: the remote text');
like(fails($n2, "SELECT example_rpc_fail(1, 'bang')"),
	qr/Remote error: pgrac_example: node 1 refuses "bang" from node 2/, 'handler ERROR 2 -> 1');
is($n1->safe_psql('postgres', "SELECT example_rpc(2, 'still there')"),
	'node 2: STILL THERE', 'the listener serves after a handler error in it');
is($n2->safe_psql('postgres',
		"SELECT count(*) FROM pg_cluster_rdma_errors WHERE type = 'handler_error' "
		  . "AND description LIKE '%handler \"example fail\" failed: pgrac_example: node 2 refuses \"boom\"%'"),
	'1', 'the serving node records the handler error');

# A message type nobody registered.
# A handler in place that tries to send: refused with a clear reason, and the
# listener goes on.
like(fails($n1, "SELECT example_rpc_type(2, 515, 'pass it on')"),
	qr/Remote error: a pgrac_ic handler registered in place may not send messages/,
	'a handler in place may not send: HANDLER_ERROR with the reason');
is($n1->safe_psql('postgres', "SELECT example_rpc(2, 'after the relay')"),
	'node 2: AFTER THE RELAY', 'the listener serves after refusing it');

like(fails($n1, "SELECT example_rpc_type(2, 600, 'anyone?')"),
	qr/no handler for the message type on the peer.*\n.*Remote error: no handler for message type 600 on node 2 \(from node 1\)/,
	'an unregistered type: NO_HANDLER');

# Notes and broadcasts, each counted once by the receiving handler. An RPC on
# the same route key closes each batch: one LMS worker handles them in order,
# so by its reply every note before it was counted.
$n1->safe_psql('postgres', q{
	SELECT example_note(2, 'from one', 25);
	SELECT example_broadcast('broadcast ' || g) FROM generate_series(1, 3) g;
	SELECT example_note(1, 'to myself', 4);
	SELECT example_rpc(2, 'sync'), example_rpc(1, 'sync');
});
$n2->safe_psql('postgres', q{
	SELECT example_note(1, 'from two', 7);
	SELECT example_broadcast('broadcast ' || g) FROM generate_series(1, 2) g;
	SELECT example_rpc(1, 'sync');
});
is($n2->safe_psql('postgres',
		'SELECT example_notes_received(), example_notes_received(1), example_notes_received(2)'),
	'28|28|0', 'node 2 counted 25 notes and 3 broadcasts from node 1');
is($n1->safe_psql('postgres',
		'SELECT example_notes_received(), example_notes_received(1), example_notes_received(2)'),
	'13|4|9', 'node 1 counted 4 notes from itself, 7 notes and 2 broadcasts from node 2');
is($n2->safe_psql('postgres', 'SELECT from_node, msg FROM example_last_note()'),
	'1|broadcast 3', 'node 2 kept the last body it received');

# No duplicates later either (exactly once).
$n1->safe_psql('postgres', "SELECT example_rpc(2, 'sync'), pg_sleep(0.3)");
is($n2->safe_psql('postgres', 'SELECT example_notes_received()'), '28', 'still 28 on node 2');

# Unknown nodes; registration outside _PG_init.
like(fails($n1, "SELECT example_rpc(3, 'x')"), qr/RPC to node 3 failed: unknown node/,
	'RPC to an unknown node');
like(fails($n1, 'SELECT example_broadcast(repeat(\'x\', 65537))'),
	qr/broadcast failed: message too large/, 'a broadcast over PGRAC_IC_MAX_MESSAGE');
like(fails($n2, 'SELECT example_register_late()'),
	qr/pgrac_ic handlers must be registered from _PG_init of a library in shared_preload_libraries/,
	'registering a handler from a backend fails');

$c->stop_all;
done_testing();
