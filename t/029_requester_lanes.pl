
# Copyright: pgrac_ic authors. Requester lanes (docs/architecture.md):
# a backend sends its RPCs to a peer's listener on a connection of its own and
# reads the reply itself. Checked here: RPCs take the lane (block fetches do
# too: t/021 runs with the default)
# and are counted on both sides; cluster.requester_lanes = off and a one-way
# message before the RPC keep the listener path; the lane lives as long as the
# backend; a peer listener's restart and a frozen peer listener fail only the
# RPC in flight, with a clear status, and the next RPC works; a cancel ends a
# wait on a frozen peer. The same on every tier: a TCP socket of the backend's
# own at tier3, a queue pair of its own on the verbs tiers.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PgracCluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $c = PgracCluster->new(n => 2);
my ($n1, $n2) = ($c->node(1), $c->node(2));

# node 1's view of node 2 and node 2's view of node 1
sub sent
{
	return $n1->safe_psql('postgres',
		'SELECT rpcs_sent || \':\' || direct_rpcs_sent FROM pg_cluster_rdma_counters WHERE peer_node_id = 2');
}
sub served
{
	return $n2->safe_psql('postgres',
		'SELECT direct_rpcs_served || \':\' || requester_lanes FROM pg_cluster_rdma_counters WHERE peer_node_id = 1');
}

my ($rpcs0, $direct0) = split /:/, sent();
is($n1->safe_psql('postgres', 'SELECT count(*) FROM (SELECT pgrac_ic_ping(2) FROM generate_series(1, 20)) s'),
	'20', '20 pings from node 1 to node 2');
my ($rpcs1, $direct1) = split /:/, sent();
is($rpcs1 - $rpcs0, 20, 'node 1 counted 20 RPCs to node 2');

{
	is($direct1 - $direct0, 20, '... all 20 on a requester lane');
	my ($served) = split /:/, served();
	cmp_ok($served, '>=', 20, 'node 2 counted them as served on requester lanes');
	ok($n2->poll_query_until('postgres',
			'SELECT requester_lanes = 0 FROM pg_cluster_rdma_counters WHERE peer_node_id = 1'),
		'the lane closed with the session that opened it');

	# The lane lives as long as the backend.
	my $s = $n1->background_psql('postgres');
	$s->query_safe('SELECT pgrac_ic_ping(2)');
	ok($n2->poll_query_until('postgres',
			'SELECT requester_lanes = 1 FROM pg_cluster_rdma_counters WHERE peer_node_id = 1'),
		'an open session keeps its lane');
	$s->quit;
	ok($n2->poll_query_until('postgres',
			'SELECT requester_lanes = 0 FROM pg_cluster_rdma_counters WHERE peer_node_id = 1'),
		'... and closes it when it ends');

	# Off: through the listeners.
	my ($r0, $d0) = split /:/, sent();
	$n1->safe_psql('postgres', 'SET cluster.requester_lanes = off; SELECT pgrac_ic_ping(2), pgrac_ic_ping(2)');
	my ($r1, $d1) = split /:/, sent();
	is("@{[$r1 - $r0]}:@{[$d1 - $d0]}", '2:0', 'with cluster.requester_lanes = off, RPCs take the listeners');

	# A one-way message first: the session's later RPCs to that node take the
	# listeners, so that none overtakes it.
	($r0, $d0) = split /:/, sent();
	is( $n1->safe_psql('postgres',
			"SELECT pgrac_ic_ping(2) IS NOT NULL, pgrac_ic_broadcast('x') >= 1, pgrac_ic_ping(2) IS NOT NULL"),
		't|t|t', 'ping, broadcast, ping');
	($r1, $d1) = split /:/, sent();
	is("@{[$r1 - $r0]}:@{[$d1 - $d0]}", '2:1',
		'after a one-way message to the node, its RPCs take the listeners');

	# The peer's listener restarts: the lane breaks; the next RPC opens a new
	# one once the peer is UP again.
	my $s2 = $n1->background_psql('postgres', on_error_stop => 0);
	$s2->query_safe('SELECT pgrac_ic_ping(2)');
	my $listener2 = $c->worker_pid(2, 'pgrac_ic listener');
	$n2->safe_psql('postgres', "SELECT pg_terminate_backend($listener2)");
	ok($n2->poll_query_until('postgres',
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pgrac_ic listener' AND pid <> $listener2"),
		'node 2\'s listener restarted');
	ok($c->wait_up(1) && $c->wait_up(2), 'both nodes UP again');
	($r0, $d0) = split /:/, sent();
	my $ok = $s2->query_safe('SELECT pgrac_ic_ping(2) IS NOT NULL');
	($r1, $d1) = split /:/, sent();
	is("$ok:@{[$d1 - $d0]}", 't:1', 'the same session pings over a new lane');

	# A frozen peer listener: the RPC in flight fails with a timeout, and a
	# cancel ends a wait at once.
	# The session is connected and its lane open before the freeze: under a
	# slow VM a new connection can take longer than peer_timeout (2 s), and
	# the peer would be DOWN (refused at once) before the RPC is sent.
	my $sf = $n1->background_psql('postgres', on_error_stop => 0);
	$sf->query_safe("SET cluster.rpc_timeout = '500ms'; SELECT pgrac_ic_ping(2) IS NOT NULL");
	my $frozen = $c->worker_pid(2, 'pgrac_ic listener');
	kill 'STOP', $frozen;
	my $t0 = time;
	$sf->query('SELECT pgrac_ic_ping(2)');
	like($sf->{stderr}, qr/timed out|timeout/i, 'an RPC to a frozen listener times out');
	$sf->quit;
	my $pid = $s2->query_safe('SELECT pg_backend_pid()');
	$s2->query_until(qr/started/, "\\echo started\nSET cluster.rpc_timeout = '60s';\nSELECT pgrac_ic_ping(2);\n");
	sleep 1;
	$n1->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
	my $after = $s2->query('SELECT 1');
	kill 'CONT', $frozen;
	cmp_ok(time - $t0, '<', 30, 'the cancel ended the wait well before the 60 s timeout');
	$s2->quit;
	ok($c->wait_up(1), 'node 2 UP again after SIGCONT');
	is($n1->safe_psql('postgres', 'SELECT pgrac_ic_ping(2) IS NOT NULL'), 't', 'RPCs work again');
}

# A lane's descriptors count against PostgreSQL's budget for descriptors
# outside its file cache (AcquireExternalFD), which dblink and postgres_fdw
# draw on too: a backend that has none to spare sends its RPCs through the
# listeners and says so once in the errors view.
{
	$n1->safe_psql('postgres', 'ALTER SYSTEM SET max_files_per_process = 70');
	$n1->restart;
	ok($c->wait_up(1) && $c->wait_up(2), 'node 1 restarted with max_files_per_process = 70');
	$n1->safe_psql('postgres', 'CREATE EXTENSION IF NOT EXISTS dblink');
	my $connstr = 'host=' . $n2->host . ' port=' . $n2->port . ' dbname=postgres';
	my ($r0, $d0) = split /:/, sent();
	my ($rc, $out, $err) = $n1->psql('postgres', qq{
DO \$\$ BEGIN
  FOR i IN 1..500 LOOP
    BEGIN
      PERFORM dblink_connect('c' || i, '$connstr');
    EXCEPTION WHEN sqlclient_unable_to_establish_sqlconnection THEN
      RAISE NOTICE 'budget used up after % connections', i - 1;
      EXIT;
    END;
  END LOOP;
END \$\$;
SELECT pgrac_ic_ping(2) IS NOT NULL;});
	like($err, qr/budget used up after \d+ connections/, 'dblink used up the backend\'s descriptors');
	is($out, 't', 'the ping still works');
	my ($r1, $d1) = split /:/, sent();
	is(($r1 - $r0) . ':' . ($d1 - $d0), '1:0', '... through the listeners, not on a lane');
	is($n1->safe_psql('postgres',
			"SELECT count(*) FROM pg_cluster_rdma_errors WHERE peer_node_id = 2 AND type = 'connect_failed' AND description LIKE '%no file descriptors to spare%'"),
		'1', 'reported once in the errors view');
	is($n1->safe_psql('postgres', 'SELECT pgrac_ic_ping(2) IS NOT NULL'), 't',
		'a new session (descriptors to spare) pings on its lane again');
	my ($r2, $d2) = split /:/, sent();
	is($d2 - $d1, 1, '... counted as a lane RPC');
}

done_testing();
