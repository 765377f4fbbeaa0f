# cluster.ges_registry_entries sizes each LMS worker's registry mirror (the
# copy of this node's global locks that a restarted LMS worker gets back):
# a node whose locks in one shard outgrow it is warned, and a restart of that
# worker then voids them (their holders get "global lock lost") instead of
# keeping them; a node with room keeps its locks through the same restart.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PgracCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $c = PgracCluster->new(
	n => 2,
	tier => 'tier3',
	node_conf => { 1 => "cluster.ges_registry_entries = 1024\n" });
my ($n1, $n2) = map { $c->node($_) } 1 .. 2;
$c->wait_ges_ready;

is($n1->safe_psql('postgres', 'SHOW cluster.ges_registry_entries'), '1024', 'node 1 has 1024 entries');
is($n2->safe_psql('postgres', 'SHOW cluster.ges_registry_entries'), '16384', 'node 2 the default');

# Resources of LMS worker 0 (the same index on every node: route_key % 2).
sub shard0
{
	my ($node, $prefix, $offset, $count) = @_;
	return "SELECT n FROM generate_series(1, 20000) g, LATERAL (SELECT '$prefix' || g AS n) s,
	               LATERAL pgrac_ges_resource(n) r WHERE r.lms_worker = 0
	         ORDER BY g OFFSET $offset LIMIT $count";
}

# Takes $count locks of shard 0 from one session and keeps the session open.
sub hold
{
	my ($node, $prefix, $offset, $count) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	my $q = shard0($node, $prefix, $offset, $count);
	is($s->query_safe("SELECT count(*) FILTER (WHERE pgrac_ges_lock(n, 'PR', 10000)) FROM ($q) q"),
		$count, $node->name . " holds $count locks of shard 0 ($prefix, from $offset)");
	return $s;
}

# Node 1: 1200 locks of shard 0 (two sessions: a session holds at most 1024)
# outgrow its 1024-entry mirror; node 2 holds as many in its roomy one.
my @s1 = (hold($n1, 'a', 0, 600), hold($n1, 'a', 600, 600));
my @s2 = (hold($n2, 'b', 0, 600), hold($n2, 'b', 600, 600));
ok($n1->log_contains(qr/GES \(LMS 0\): the registry copy is full \(1024 entries, cluster\.ges_registry_entries\)/),
	"node 1 warns that its LMS 0's registry copy is full");
ok(!$n2->log_contains(qr/registry copy is full/), 'node 2 does not');

# Restart LMS 0 on both nodes.
for my $i (1, 2)
{
	my $node = $c->node($i);
	my $pid = $c->worker_pid($i, 'pgrac_ic lms 0');
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	ok( $node->poll_query_until('postgres',
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pgrac_ic lms 0' AND pid <> $pid"),
		$node->name . "'s LMS 0 is back");
}
ok($n1->log_contains(qr/GES \(LMS 0\): restarted; its registry copy had overflowed/),
	"node 1's restarted LMS 0 says its copy had overflowed");
ok($n2->log_contains(qr/GES \(LMS 0\): restarted; got back 1200 lock/), "node 2's got its 1200 locks back");

# Node 1's holders learn at their next GES call that the shard's locks are void.
my ($out, $ret) = $s1[0]->query("SELECT pgrac_ges_lock('after-restart', 'EX', 10000)");
like($s1[0]->{stderr}, qr/global lock lost: \d+ global lock\(s\) of this session/,
	"node 1's holder is told its locks are lost");
$s1[0]->{stderr} = '';
# Node 2's holders kept theirs: node 1 cannot take one of them in EX.
my $kept = $n2->safe_psql('postgres', shard0($n2, 'b', 5, 1));
ok( $n2->poll_query_until('postgres', "SELECT count(*) > 0 FROM pg_cluster_ges_locks WHERE resource = '$kept'"),
	'the restarted masters list node 2\'s replayed lock');
is($n1->safe_psql('postgres', "SELECT pgrac_ges_lock('$kept', 'EX', 0)"),
	'f', "node 2's lock on $kept survived its LMS restart (NOWAIT EX from node 1 refused)");

$_->quit for @s1, @s2;
$c->stop_all;
done_testing();
