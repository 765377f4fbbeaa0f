
# Three instances over tier3 (TCP), or PGRAC_TEST_TIER: every pair pings, broadcast reaches all,
# the per-peer views fill, and the RPC bench runs through the full path.
use strict;
use warnings;

use FindBin;
use JSON::PP;
use lib $FindBin::RealBin;
use PgracCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $c = PgracCluster->new(n => 3, tier => 'tier3');

for my $i (1 .. 3)
{
	my $node = $c->node($i);
	is($node->safe_psql('postgres', 'SELECT tier FROM pg_cluster_rdma_status'),
		$c->tier, "node $i runs " . $c->tier);
	for my $j (1 .. 3)
	{
		cmp_ok($node->safe_psql('postgres', "SELECT pgrac_ic_ping($j)"),
			'>', 0, "node $i pings node $j");
	}
}

# Broadcast: a one-way note to every other node, taken by an LMS worker there.
is($c->node(1)->safe_psql('postgres', q{SELECT pgrac_ic_broadcast('\x0102')}),
	'2', 'broadcast from node 1 is queued for two nodes');
is($c->node(3)->safe_psql('postgres', q{SELECT pgrac_ic_broadcast('\x03')}),
	'2', 'broadcast from node 3 is queued for two nodes');
for my $i (2, 3)
{
	ok( $c->node($i)->poll_query_until('postgres',
			'SELECT notes_recv = 1 FROM pg_cluster_ic_peers WHERE node_id = 1'),
		"node $i received node 1's broadcast exactly once");
}
ok( $c->node(1)->poll_query_until('postgres',
		'SELECT notes_recv = 1 FROM pg_cluster_ic_peers WHERE node_id = 3'),
	"node 1 received node 3's broadcast");

# A stream of one-way notes, closed by a ping on the same route: each note is
# handled exactly once on node 2 by the time the stream returns.
my $notes_before = $c->node(2)->safe_psql('postgres',
	'SELECT notes_recv FROM pg_cluster_ic_peers WHERE node_id = 1');
is( $c->node(1)->safe_psql('postgres',
		'SELECT messages_sent FROM pgrac_ic_stream(2, 64, 20000)'),
	'20000', 'stream of 20000 notes from node 1 to node 2');
is( $c->node(2)->safe_psql('postgres',
		'SELECT notes_recv FROM pg_cluster_ic_peers WHERE node_id = 1'),
	$notes_before + 20000, 'node 2 handled each streamed note exactly once');

# Views: every peer UP with a heartbeat RTT, a shared epoch, per-peer counters.
my $peers = $c->node(2)->safe_psql('postgres',
	q{SELECT string_agg(node_id || ':' || state || ':' || is_self || ':' || paths_up || '/' || paths
	                     || ':' || (rtt_us IS NOT NULL OR is_self), ' ' ORDER BY node_id)
	    FROM pg_cluster_ic_peers});
is($peers, '1:UP:false:2/2:true 2:UP:true:0/0:true 3:UP:false:2/2:true',
	'node 2 sees both peers UP on both paths, with RTTs');
ok( $c->node(2)->poll_query_until('postgres',
		q{SELECT bool_and(rtt_us > 0) FROM pg_cluster_ic_peers WHERE NOT is_self}),
	'heartbeat RTTs are measured');

# The shared epoch: one committed view on every node (membership and status
# agree), and node 2's peers carry it in their messages.
my @epochs = map {
	$c->node($_)->safe_psql('postgres',
		q{SELECT m.epoch || '/' || s.epoch FROM pg_cluster_membership m, pg_cluster_rdma_status s})
} 1 .. 3;
my ($epoch) = split m{/}, $epochs[0];
cmp_ok($epoch, '>', 0, 'node 1 has a committed epoch');
is(join(' ', @epochs), join(' ', ("$epoch/$epoch") x 3),
	'the three nodes share one epoch, in the membership and the status views alike');
ok( $c->node(2)->poll_query_until('postgres',
		"SELECT count(*) = 3 AND bool_and(epoch = $epoch) FROM pg_cluster_ic_peers"),
	"node 2's peers carry the shared epoch $epoch");

my $bench = $c->node(1)->safe_psql('postgres',
	q{SELECT iterations_done, p50_us > 0, p99_us >= p50_us, ops_per_sec > 0
	    FROM pgrac_ic_bench(2, 64, 2000)});
is($bench, '2000|t|t|t', '64-byte RPC bench to node 2');
note 'bench ' . $c->tier . ' 64 B x 500: p50 '
  . $c->node(1)->safe_psql('postgres', 'SELECT round(p50_us::numeric, 1) FROM pgrac_ic_bench(2, 64, 500)')
  . ' us';
$bench = $c->node(1)->safe_psql('postgres',
	q{SELECT iterations_done FROM pgrac_ic_bench(3, 8192, 500)});
is($bench, '500', '8 KiB RPC bench to node 3');
$bench = $c->node(3)->safe_psql('postgres',
	q{SELECT iterations_done FROM pgrac_ic_bench(1, 65536, 50)});
is($bench, '50', '64 KiB RPC bench from node 3 to node 1');

my $counters = $c->node(1)->safe_psql('postgres',
	q{SELECT msgs_sent >= 2000, msgs_recv >= 2000, bytes_sent > 2000 * 64, rpcs_sent >= 2000,
	         latency_samples >= 2000, p50_latency_us > 0, p999_latency_us >= p99_latency_us
	    FROM pg_cluster_rdma_counters WHERE peer_node_id = 2});
is($counters, 't|t|t|t|t|t|t', 'node 1 counters for node 2 moved');
is( $c->node(2)->safe_psql('postgres',
		q{SELECT rpcs_served >= 2000 FROM pg_cluster_rdma_counters WHERE peer_node_id = 1}),
	't', 'node 2 served the RPCs of node 1');

# Exactly-once probe in order: every number applied once.
my $outcomes = $c->node(2)->safe_psql('postgres',
	q{SELECT string_agg(DISTINCT pgrac_ic_seq_rpc(3, 0, s), ',') FROM generate_series(1, 200) s});
is($outcomes, 'applied', 'ordered probe stream: every message applied once');
is($c->node(2)->safe_psql('postgres', 'SELECT pgrac_ic_seq_rpc(3, 0, 200)'),
	'duplicate', 'the probe does detect a repeated number');

# pgrac_ctl status reads the same views over libpq.
my ($out, $err);
my $ok = IPC::Run::run(
	[ 'pgrac_ctl', 'status', '-h', $c->node(1)->host, '-p', $c->node(1)->port, '-d', 'postgres' ],
	'>', \$out, '2>', \$err);
ok($ok, 'pgrac_ctl status exits 0') or diag($err);
like($out, qr/@{[ $c->tier ]}/, 'pgrac_ctl status shows the tier');
like($out, qr/\bUP\b/, 'pgrac_ctl status shows peers UP');

# The same as one JSON document: the views' columns by name, typed.
$ok = IPC::Run::run(
	[
		'pgrac_ctl', 'status', '-h', $c->node(1)->host, '-p', $c->node(1)->port,
		'-d', 'postgres', '--json'
	],
	'>', \$out, '2>', \$err);
ok($ok, 'pgrac_ctl status --json exits 0') or diag($err);
my $doc = eval { JSON::PP::decode_json($out) };
ok($doc, 'pgrac_ctl status --json prints JSON') or diag($@, $out);
is($doc->{rdma_status}{tier}, $c->tier, 'status --json: the tier');
is($doc->{rdma_status}{node_id}, 1, 'status --json: node_id is a number');
is(scalar(grep { $_->{state} eq 'UP' } @{ $doc->{peers} }), 3, 'status --json: 3 peers UP');
ok(exists $doc->{peers}[0]{notes_recv}, 'status --json: peers carry notes_recv');
is(scalar(grep { !defined $_->{peer_node_id} } @{ $doc->{counters} }),
	1, 'status --json: one total row in the counters');

is($c->node(1)->safe_psql('postgres',
		q{SELECT count(*) FROM pg_cluster_rdma_errors WHERE severity = 'ERROR'}),
	'0', 'no errors on node 1');

$c->stop_all;
done_testing();
