
# Peers authenticate before anything is accepted: a wrong key, another
# cluster name and another database system are refused, the refusal is named
# in pg_cluster_rdma_errors, and the good nodes keep working.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PgracCluster;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $c = PgracCluster->new(n => 4, tier => 'tier3', start => 0);
my $wrong_key = $c->write_key('wrong.key', 0600);
$c->node(3)->append_conf('postgresql.conf', "cluster.auth_key_file = '$wrong_key'\n");
$c->node(4)->append_conf('postgresql.conf', "cluster.name = 'other_cluster'\n");
$_->start for $c->nodes;
$_->safe_psql('postgres', 'CREATE EXTENSION pgrac_ic') for $c->nodes;

ok($c->wait_peer_state(1, 2, 'UP'), 'nodes 1 and 2 (same key, same cluster) connect');
cmp_ok($c->node(1)->safe_psql('postgres', 'SELECT pgrac_ic_ping(2)'), '>', 0, 'and talk');

for my $i (1, 2)
{
	ok( $c->node($i)->poll_query_until('postgres',
			q{SELECT count(*) > 0 FROM pg_cluster_rdma_errors
			   WHERE peer_node_id = 3 AND type = 'wrong_key'}),
		"node $i records the wrong key of node 3");
	ok( $c->node($i)->poll_query_until('postgres',
			q{SELECT count(*) > 0 FROM pg_cluster_rdma_errors
			   WHERE peer_node_id = 4 AND type = 'cluster_mismatch'}),
		"node $i records node 4's other cluster name");
	is( $c->node($i)->safe_psql('postgres',
			q{SELECT string_agg(state, ',' ORDER BY node_id) FROM pg_cluster_ic_peers
			   WHERE node_id IN (3, 4)}) =~ /UP/ ? 'up' : 'not up',
		'not up', "node $i never lets node 3 or 4 in");
}
my ($ret, $out, $err) = $c->node(1)->psql('postgres', 'SELECT pgrac_ic_ping(3)');
like($err, qr/pgrac_ic ping to node 3 failed: peer unreachable/, 'ping to the refused node fails');
like($c->node(1)->safe_psql('postgres',
		q{SELECT description FROM pg_cluster_rdma_errors WHERE type = 'wrong_key' LIMIT 1}),
	qr/node 3/, 'the wrong-key error names the node');

# Another database system (its own initdb) in node 4's place is refused.
$c->node(4)->stop('fast');
my $foreign = PostgreSQL::Test::Cluster->new('foreign');
$foreign->init;
$foreign->append_conf('postgresql.conf', $c->conf_for(4));
$foreign->append_conf('postgresql.conf', 'port = ' . $foreign->port . "\n");
$foreign->start;
$foreign->safe_psql('postgres', 'CREATE EXTENSION pgrac_ic');
ok( $c->node(1)->poll_query_until('postgres',
		q{SELECT count(*) > 0 FROM pg_cluster_rdma_errors
		   WHERE peer_node_id = 4 AND type = 'system_mismatch'}),
	'an instance of another database system is refused');
isnt($c->node(1)->safe_psql('postgres', 'SELECT state FROM pg_cluster_ic_peers WHERE node_id = 4'),
	'UP', 'and stays out');
cmp_ok($c->node(2)->safe_psql('postgres', 'SELECT pgrac_ic_ping(1)'), '>', 0,
	'the good nodes still talk');

$foreign->stop('fast');
$c->node($_)->stop('fast') for 1 .. 3;
done_testing();
