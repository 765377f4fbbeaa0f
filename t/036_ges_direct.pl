# Direct routing (docs/ges.md, "Direct routing") on a real three-node tier3
# cluster: a new lock mastered on another node goes there on the backend's own
# requester lane and an immediate grant is taken by the backend itself (its
# LMS records it); a request that must wait is answered later through the LMS;
# NOWAIT, timeouts, the value block and fencing tokens behave as on the LMS
# path; a lock never leaks (the next taker gets it at once); a loop of fresh
# locks goes direct; cluster.ges_direct_requests = off sends nothing direct;
# a session that ends right after its unlock leaves the lock cached; an epoch
# change under a loop of direct locks loses and doubles nothing.
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

is($n1->safe_psql('postgres', 'SHOW cluster.ges_direct_requests'), 'on', 'on by default');

# An uncontended lock mastered on node 2, from node 1: taken by the backend.
my $r = resource_where($n1, 'd', 'master_node = 2');
my ($sent0, $taken0, $served0) =
  (stat1($n1, 'direct_sent'), stat1($n1, 'direct_taken'), stat1($n2, 'direct_served'));
my $s1 = bg($n1);
is($s1->query_safe("SELECT pgrac_ges_lock('$r', 'EX', 20000)"), 't', "node 1 locks $r (master 2)");
cmp_ok(stat1($n1, 'direct_sent'),   '>', $sent0,   'sent on the requester lane');
cmp_ok(stat1($n1, 'direct_taken'),  '>', $taken0,  'the grant taken by the backend itself');
cmp_ok(stat1($n2, 'direct_served'), '>', $served0, 'served by node 2 as a direct request');
is( $n1->safe_psql('postgres',
		"SELECT master_node || ':' || node_id || ':' || mode || ':' || state FROM pg_cluster_ges_locks "
		  . "WHERE resource = '$r' AND pid = $s1->{pgrac_pid}"),
	'2:1:EX:granted', 'node 2 lists it granted to the backend');
my $tok1 = $s1->query_safe("SELECT pgrac_ges_lock_token('$r')");
$s1->query_safe("SELECT pgrac_ges_set_lock_value('$r', '\\x0a0b')");
is($s1->query_safe("SELECT pgrac_ges_unlock('$r')"), 't', 'and unlocks it');

# The next one (node 3, mastered on 2 as well) gets it at once, with the value
# node 1 wrote, and a larger token.
is( $n3->safe_psql('postgres',
		"SELECT pgrac_ges_lock('$r', 'EX', 0), pgrac_ges_lock_value('$r'), "
		  . "pgrac_ges_lock_token('$r') > $tok1, pgrac_ges_unlock('$r')"),
	"t|\\x0a0b|t|t", 'node 3 takes it NOWAIT: value and token as on the LMS path');

# A request that must wait: the master says Queued, the grant comes later
# through node 1's LMS.
my $s3 = bg($n3);
$s3->query_safe("SELECT pgrac_ges_lock('$r', 'EX', 20000)");
is($s1->query_safe("SELECT pgrac_ges_lock('$r', 'EX', 0)"), 'f', 'NOWAIT refused while node 3 holds it');
is($s1->query_safe("SELECT pgrac_ges_lock('$r', 'PR', 300)"), 'f', 'a 300 ms wait times out');
$s1->query_until(qr/started/, "\\echo started\nSELECT pgrac_ges_lock('$r', 'EX', 20000);\n");
ok( $n2->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_cluster_ges_locks WHERE resource = '$r' AND state = 'waiting'"),
	'node 1 waits at the master');
my $tok3 = $s3->query_safe("SELECT pgrac_ges_lock_token('$r')");
$s3->query_safe("SELECT pgrac_ges_unlock('$r')");
ok( $n2->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_cluster_ges_locks WHERE resource = '$r' AND node_id = 1 "
		  . "AND state = 'granted'"),
	'and gets it when node 3 unlocks');
$s1->query_safe('SELECT 1');    # the lock call has returned
cmp_ok($s1->query_safe("SELECT pgrac_ges_lock_token('$r')"), '>', $tok3, 'with a larger token');
$s1->query_safe("SELECT pgrac_ges_unlock('$r')");
is($n3->safe_psql('postgres', "SELECT pgrac_ges_lock('$r', 'EX', 0), pgrac_ges_unlock('$r')"),
	't|t', 'nothing leaked: free again');

# A loop of fresh locks on node 1: those mastered elsewhere go direct.
my $taken1 = stat1($n1, 'direct_taken');
is( $s1->query_safe(
		"SELECT count(*) FROM generate_series(1, 300) g, "
		  . "LATERAL (SELECT pgrac_ges_lock('fresh' || g, 'EX', 20000) AS l, "
		  . "pgrac_ges_unlock('fresh' || g) AS u) x WHERE l AND u"),
	'300', '300 fresh locks and unlocks');
my $remote = $n1->safe_psql('postgres',
	"SELECT count(*) FROM generate_series(1, 300) g, LATERAL pgrac_ges_resource('fresh' || g) r "
	  . "WHERE master_node <> 1");
cmp_ok(stat1($n1, 'direct_taken') - $taken1, '>=', $remote * 0.9,
	"most of the $remote mastered elsewhere were taken directly");

# Off: nothing goes direct.
my $sent1 = stat1($n1, 'direct_sent');
$s1->query_safe('SET cluster.ges_direct_requests = off');
$s1->query_safe(
	"SELECT pgrac_ges_lock('off' || g, 'EX', 20000), pgrac_ges_unlock('off' || g) FROM generate_series(1, 50) g");
is(stat1($n1, 'direct_sent'), $sent1, 'cluster.ges_direct_requests = off: nothing sent direct');
$s1->query_safe('RESET cluster.ges_direct_requests');

# A session that takes a lock directly, unlocks it and ends at once: its exit
# waits until its LMS has the relayed grant, so the lock is kept in node 1's
# cache, never given back as a grant nobody waited for.
my ($undone0, $taken2) = (stat1($n1, 'late_grants_undone'), stat1($n1, 'direct_taken'));
my $cached = 0;
for my $i (1 .. 30)
{
	my $x = resource_where($n1, "x$i", 'master_node = 2');
	$n1->safe_psql('postgres', "SELECT pgrac_ges_lock('$x', 'EX') AND pgrac_ges_unlock('$x')");
	$cached++
	  if $n1->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_cluster_ges_cache WHERE resource = '$x'");
}
cmp_ok(stat1($n1, 'direct_taken') - $taken2, '>=', 30, '30 one-lock sessions took their grants directly');
is($cached, 30, 'each lock is in node 1\'s cache after its session ended');
is(stat1($n1, 'late_grants_undone'), $undone0, 'no grant was given back as one nobody waited for');

# An epoch change (node 3 restarts) under two loops of direct EX locks on the
# same ten resources from nodes 1 and 2: every call succeeds or fails cleanly,
# and no fencing token is handed out twice for a resource (the chaos suite's
# checker is the full test of this; tests/chaos).
my $loop = sub {
	my ($node, $tag) = @_;
	return $node->background_psql('postgres', on_error_stop => 0);
};
my ($l1, $l2) = ($loop->($n1), $loop->($n2));
my $body = sub {
	my ($tag) = @_;
	return "DO \$\$ DECLARE ok int := 0; t bigint; r text; i int := 0; "
	  . "stop timestamptz := clock_timestamp() + interval '10 s'; BEGIN "
	  . "WHILE clock_timestamp() < stop LOOP i := i + 1; r := 'ep' || (i % 10); "
	  . "BEGIN IF pgrac_ges_lock(r, 'EX', 5000) THEN t := pgrac_ges_lock_token(r); "
	  . "RAISE NOTICE 'hold % % $tag', r, t; PERFORM pgrac_ges_unlock(r); ok := ok + 1; END IF; "
	  . "EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'err %', SQLERRM; END; END LOOP; "
	  . "RAISE NOTICE 'done % $tag', ok; END \$\$;";
};
$l1->query_until(qr/go/, "\\echo go\n" . $body->('n1') . "\n");
$l2->query_until(qr/go/, "\\echo go\n" . $body->('n2') . "\n");
my $epoch0 = $n1->safe_psql('postgres', 'SELECT epoch FROM pg_cluster_membership');
sleep 2;
$n3->restart;
$c->wait_all_members;
ok($n1->poll_query_until('postgres', "SELECT epoch > $epoch0 FROM pg_cluster_membership"),
	'a new epoch under the loops');
my %out;
for my $p ([ 'n1', $l1 ], [ 'n2', $l2 ])
{
	my ($tag, $s) = @$p;
	$s->query('SELECT 1');
	$out{$tag} = $s->{stderr};
	$s->quit;
}
my %tokens;
my $holds = 0;
for my $tag (sort keys %out)
{
	for my $line (split /\n/, $out{$tag})
	{
		next unless $line =~ /hold (ep\d+) (\d+) /;
		push @{ $tokens{$1} }, $2;
		$holds++;
	}
}
my $dups = 0;
for my $res (keys %tokens)
{
	my %n;
	$dups += grep { $n{$_}++ } @{ $tokens{$res} };
}
cmp_ok($holds, '>', 100, "the loops held the resources $holds times");
is($dups, 0, 'no fencing token was handed out twice for a resource (no double grant)');
like($out{n1} . $out{n2}, qr/done \d+ n1/, 'node 1 loop finished');
like($out{n1} . $out{n2}, qr/done \d+ n2/, 'node 2 loop finished');
is( $n1->safe_psql('postgres',
		"SELECT count(*) FROM pg_cluster_ges_locks WHERE resource LIKE 'ep%' AND pid <> 0"),
	'0', 'and no session lock is left behind');
is(join(',', map { stat1($_, 'replay_conflicts') } ($n1, $n2, $n3)), '0,0,0', 'no replay conflict');

$s1->quit;
$s3->quit;
$c->stop_all;
done_testing();
