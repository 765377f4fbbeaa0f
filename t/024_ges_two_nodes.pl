# Copyright: pgrac_ic authors.
# Two data nodes. Without a witness, a majority of two is two: when one goes
# silent the other fences itself (no_quorum) and no lock is ever granted
# twice. With a witness (a third instance that votes in membership and masters
# nothing, cluster.witness_nodes), the survivor keeps a majority and goes on.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PgracCluster;
use PostgreSQL::Test::Utils;
use Test::More;

# ---- two nodes, no witness
{
	my $c = PgracCluster->new(n => 2);
	my ($n1, $n2) = ($c->node(1), $c->node(2));
	my $h1 = $n1->background_psql('postgres', on_error_stop => 0);
	is($h1->query_safe("SELECT pgrac_ges_lock('two:a', 'EX', 0)"), 't', 'node 1 holds two:a');
	$n2->stop('immediate');
	ok( $n1->poll_query_until('postgres', "SELECT state = 'fenced' FROM pg_cluster_membership"),
		'alone, node 1 is no majority of two: it fences itself');
	my ($ret, $out, $err) =
	  $n1->psql('postgres', "SELECT pgrac_ges_lock('two:b', 'EX', 0)");
	like($err, qr/refused: no_quorum/, 'a new request is refused with no_quorum');
	$h1->query("SELECT pgrac_ges_unlock('two:a')");
	like($h1->{stderr}, qr/global lock lost/, "the holder's next call says its lock was lost");
	$h1->{stderr} = '';
	is( $n1->safe_psql('postgres',
			"SELECT count(*) FROM pg_cluster_membership_history WHERE event = 'fenced'"),
		'1', 'the fence is in the history');
	$n2->start;
	ok($c->wait_member(1), 'node 2 back: node 1 is a member again');
	ok($c->wait_member(2), 'and node 2');
	is($h1->query_safe("SELECT pgrac_ges_lock('two:a', 'EX', 0)"), 't', 'node 1 locks again');
	is($n2->safe_psql('postgres', "SELECT pgrac_ges_lock('two:a', 'EX', 0)"),
		'f', 'node 2 is refused while node 1 holds it');
	$h1->quit;
	$c->stop_all;
}

# ---- two nodes and a witness
{
	my $c = PgracCluster->new(n => 3, name => 'wit', conf => "cluster.witness_nodes = '3'\n");
	my ($n1, $n2, $n3) = ($c->node(1), $c->node(2), $c->node(3));
	is( $n1->safe_psql('postgres',
			"SELECT count(*) FROM generate_series(1, 500) i,
			        pgrac_ges_resource('w:' || i) r WHERE r.master_node = 3"),
		'0', 'the witness masters no resource');
	my ($k2) = grep {
		$n1->safe_psql('postgres', "SELECT master_node FROM pgrac_ges_resource('$_')") eq '2'
	} map { "wk$_" } 1 .. 100;
	ok(defined $k2, "$k2 is mastered on node 2");
	my $h2 = $n2->background_psql('postgres', on_error_stop => 0);
	is($h2->query_safe("SELECT pgrac_ges_lock('$k2', 'EX', 0)"), 't', "node 2 holds $k2");
	is($n1->safe_psql('postgres', "SELECT pgrac_ges_lock('$k2', 'EX', 0)"),
		'f', 'node 1 is refused');
	$h2->quit;
	$n2->stop('immediate');
	ok( $n1->poll_query_until('postgres',
			"SELECT state = 'member' AND members = '{1,3}' FROM pg_cluster_membership"),
		'node 1 and the witness form a majority without node 2');
	is($n1->safe_psql('postgres', "SELECT master_node FROM pgrac_ges_resource('$k2')"),
		'1', "node 1 masters $k2 now");
	ok( $n1->poll_query_until('postgres', "SELECT pgrac_ges_lock('$k2', 'EX', 0)"),
		"node 1 gets $k2 once node 2 left the membership");
	is( $n1->safe_psql('postgres',
			"SELECT count(*) FROM pg_cluster_membership_history WHERE event = 'fenced'"),
		'0', 'node 1 was never fenced');
	$n2->start;
	ok($c->wait_member($_), "node $_ is a member of the full view again") for 1 .. 3;
	$c->stop_all;
}

done_testing();
