# Mastership that follows use (docs/ges.md) on a real three-node cluster: a
# resource homed on node 3 and passed back and forth between nodes 1 and 2 is
# handed by node 3 to one of them (counted, and shown by pg_cluster_ges_locks
# under its new master); fencing tokens keep growing through the move; a node
# that never used it gets it through the home, then straight from the new
# master; a new epoch masters it at its home again; cluster.ges_remaster_after
# = 0 moves nothing.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use GesFaultKit ();
use PgracCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $c = PgracCluster->new(n => 3, tier => 'tier3');
my ($n1, $n2, $n3) = map { $c->node($_) } 1 .. 3;
$c->wait_ges_ready;

sub resource_where { return PgracCluster::resource_where(@_); }
sub bg             { return GesFaultKit::bg(@_); }

sub stat1
{
	my ($node, $col) = @_;
	return $node->safe_psql('postgres', "SELECT $col FROM pg_cluster_ges_stats");
}

is($n3->safe_psql('postgres', 'SHOW cluster.ges_remaster_after'), '32', 'the default window');
my $r = resource_where($n1, 'p', 'master_node = 3');
my ($s1, $s2) = (bg($n1), bg($n2));
my $moves0 = stat1($n3, 'remasters');
my @tokens;
my $masters = '';
for my $i (1 .. 60)
{
	my $s = $i % 2 ? $s1 : $s2;
	my $got = $s->query_safe("SELECT pgrac_ges_lock('$r', 'EX', 20000)");
	if ($got ne 't')
	{
		diag("lock $i not granted; locks:\n"
			  . $n1->safe_psql('postgres', 'SELECT * FROM pg_cluster_ges_locks')
			  . "\ncaches:\n"
			  . join("\n", map { $_->safe_psql('postgres', 'SELECT * FROM pg_cluster_ges_cache') } ($n1, $n2, $n3))
			  . "\nstats:\n"
			  . join("\n", map { $_->safe_psql('postgres', 'SELECT * FROM pg_cluster_ges_stats') } ($n1, $n2, $n3)));
	}
	push @tokens, $s->query_safe("SELECT pgrac_ges_lock_token('$r')");
	$masters .= ' ' . $n1->safe_psql('postgres',
		"SELECT master_node FROM pg_cluster_ges_locks WHERE resource = '$r' AND pid <> 0")
	  if $i > 50;
	$s->query_safe("SELECT pgrac_ges_unlock('$r')");
}
cmp_ok(stat1($n3, 'remasters'), '>', $moves0,
	"node 3 handed $r over after it was passed between nodes 1 and 2");
like($masters, qr/^( [12])+$/, "pg_cluster_ges_locks shows it mastered on node 1 or 2 ($masters)");
my @bad = grep { $tokens[$_] <= $tokens[ $_ - 1 ] } 1 .. $#tokens;
is(scalar(@bad), 0, 'fencing tokens grow strictly through the move (' . scalar(@tokens) . ' grants)')
  or diag("tokens: @tokens");

# Node 3 never used it: its request goes to the home (itself), which
# forwards it; the new master answers.
my ($moved_to) = $masters =~ /(\d)$/;
is( $n3->safe_psql('postgres',
		"SELECT pgrac_ges_lock('$r', 'PR', 20000); SELECT pgrac_ges_unlock('$r')"),
	"t\nt", 'node 3 locks and unlocks it through the new master');
my $t3 = $s1->query_safe("SELECT pgrac_ges_lock('$r', 'EX', 20000); SELECT pgrac_ges_lock_token('$r')");
cmp_ok((split /\n/, $t3)[-1], '>', $tokens[-1], 'and tokens still grow');
$s1->query_safe("SELECT pgrac_ges_unlock('$r')");

# A new epoch (node 2 restarts) masters it at its home again.
my $epoch0 = $n1->safe_psql('postgres', 'SELECT epoch FROM pg_cluster_membership');
$s2->quit;
$n2->restart;
$c->wait_all_members;
ok( $n1->poll_query_until('postgres', "SELECT epoch > $epoch0 FROM pg_cluster_membership"),
	'a new epoch');
$c->wait_ges_ready;
$s1->query_safe("SELECT pgrac_ges_lock('$r', 'EX', 20000)");
is( $n1->safe_psql('postgres',
		"SELECT string_agg(DISTINCT master_node::text, ',') FROM pg_cluster_ges_locks WHERE resource = '$r'"),
	'3', 'back at its home (node 3) in the new epoch');
$s1->query_safe("SELECT pgrac_ges_unlock('$r')");

# cluster.ges_remaster_after = 0: nothing moves.
$_->safe_psql('postgres',
	"ALTER SYSTEM SET cluster.ges_remaster_after = 0; SELECT pg_reload_conf()")
  for ($n1, $n2, $n3);
ok($n3->poll_query_until('postgres', "SELECT current_setting('cluster.ges_remaster_after') = '0'"),
	'reloaded');
my $q = resource_where($n1, 'q', 'master_node = 3');
$s2 = bg($n2);
my $moves1 = stat1($n3, 'remasters');
for my $i (1 .. 40)
{
	my $s = $i % 2 ? $s1 : $s2;
	$s->query_safe("SELECT pgrac_ges_lock('$q', 'EX', 20000); SELECT pgrac_ges_unlock('$q')");
}
is(stat1($n3, 'remasters'), $moves1, 'with the setting 0 nothing is handed over');

$_->quit for ($s1, $s2);
$c->stop_all;
done_testing();
