# Cluster-wide GES deadlock detection with three instances: cycles whose
# resources are mastered on different instances (invisible to every single
# lock table) end with one "deadlock detected" error within a few
# cluster.ges_deadlock_timeout intervals, even when every request waits
# without a limit (timeout_ms -1); a long wait that is not a cycle is left
# alone.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PgracCluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $c = PgracCluster->new(
	n => 3,
	tier => 'tier3',
	conf => "cluster.ges_deadlock_timeout = 300ms\n",
	# The coordinator's search rounds are logged at DEBUG1.
	node_conf => { 1 => "log_min_messages = debug1\n" });
my ($n1, $n2, $n3) = map { $c->node($_) } 1 .. 3;

$c->wait_ges_ready;
is($n2->safe_psql('postgres', 'SHOW cluster.ges_deadlock_timeout'), '300ms', 'timeout set');

# A resource name (prefix || g) mastered on node m.
sub resource_at
{
	my ($m, $prefix) = @_;
	return $n1->safe_psql('postgres',
		"SELECT n FROM generate_series(1, 1000) g, LATERAL (SELECT '$prefix' || g AS n) s,
		        LATERAL pgrac_ges_resource(n) r WHERE r.master_node = $m ORDER BY g LIMIT 1");
}

sub bg
{
	my ($node) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query("\\set VERBOSITY verbose");
	return $s;
}

sub waiting_on
{
	my ($res) = @_;
	return $n1->safe_psql('postgres',
		"SELECT count(*) FROM pg_cluster_ges_locks WHERE resource = '$res' AND state = 'waiting'");
}

# Starts a lock request in session s that is expected to wait, and waits
# until the master shows it waiting.
sub start_wait
{
	my ($s, $res) = @_;
	$s->query_until(qr/waiting/, "\\echo waiting\nSELECT pgrac_ges_lock('$res');\n");
	ok($n1->poll_query_until('postgres',
			"SELECT count(*) > 0 FROM pg_cluster_ges_locks WHERE resource = '$res' AND state = 'waiting'"),
		"a request for $res waits");
}

my $deadlock_re = qr/40P01: deadlock detected on global lock/;

# Reads what the sessions printed so far, without blocking, until one of
# them reports a deadlock or `limit` seconds pass; returns the indexes of
# the sessions that did.
sub victims_within
{
	my ($limit, @s) = @_;
	my $t0 = time;
	for (;;)
	{
		$_->{run}->pump_nb for @s;
		my @v = grep { $s[$_]->{stderr} =~ $deadlock_re } 0 .. $#s;
		return @v if @v || time - $t0 > $limit;
		sleep 0.05;
	}
}

# The same, but keeps reading for the whole `secs` seconds.
sub victims_after
{
	my ($secs, @s) = @_;
	my $t0 = time;
	while (time - $t0 < $secs)
	{
		$_->{run}->pump_nb for @s;
		sleep 0.05;
	}
	return grep { $s[$_]->{stderr} =~ $deadlock_re } 0 .. $#s;
}

# ---- (1) two parties, two masters (neither the coordinator, node 1)
my $a = resource_at(2, 'dla');
my $b = resource_at(3, 'dlb');
note "resources $a (master 2), $b (master 3)";
my @s = (bg($n1), bg($n2));
is($s[0]->query_safe("SELECT pgrac_ges_lock('$a')"), 't', "node 1 takes $a");
is($s[1]->query_safe("SELECT pgrac_ges_lock('$b')"), 't', "node 2 takes $b");
$_->{stderr} = '' for @s;
start_wait($s[0], $b);
my $t0 = time;
$s[1]->query_until(qr/waiting/, "\\echo waiting\nSELECT pgrac_ges_lock('$a');\n");
my @v = victims_within(15, @s);
my $took = time - $t0;
is(scalar(@v), 1, 'one participant of the two-master cycle gets the deadlock error');
cmp_ok($took, '<', 10, sprintf('... within %.1f s (ges_deadlock_timeout 300ms)', $took));
@v = victims_after(1.5, @s);    # nobody else is hit later
is(scalar(@v), 1, 'still exactly one victim 1.5 s later');
my $victim = $v[0] // 1;
my $other = 1 - $victim;
note "victim: session on node " . ($victim + 1);
unlike($s[$other]->{stderr}, $deadlock_re, 'the other side got no error');
$s[$victim]->query('SELECT pgrac_ges_unlock_all()');
my ($out) = $s[$other]->query('SELECT 1');
is($out, "t\n1", 'the other side gets its lock once the victim releases');
like(slurp_file($n1->logfile),
	qr/deadlock across instances or LMS workers: cancelling the request/,
	'the coordinator (node 1) logged its decision');
$_->query('SELECT pgrac_ges_unlock_all()') for @s;
$_->{stderr} = '' for @s;

# ---- (2) three parties, three masters: session i holds R[i] and waits
# ---- for R[i+1]; the last request closes the cycle
my @r = (resource_at(1, 'tx'), resource_at(2, 'ty'), resource_at(3, 'tz'));
note "resources @r (masters 1, 2, 3)";
push @s, bg($n3);
for my $i (0 .. 2)
{
	is($s[$i]->query_safe("SELECT pgrac_ges_lock('$r[$i]')"),
		't', 'node ' . ($i + 1) . " takes $r[$i]");
}
$_->{stderr} = '' for @s;
start_wait($s[0], $r[1]);
start_wait($s[1], $r[2]);
$t0 = time;
$s[2]->query_until(qr/waiting/, "\\echo waiting\nSELECT pgrac_ges_lock('$r[0]');\n");
@v = victims_within(15, @s);
$took = time - $t0;
is(scalar(@v), 1, 'one participant of the three-master cycle gets the deadlock error');
cmp_ok($took, '<', 10, sprintf('... within %.1f s', $took));
@v = victims_after(1.5, @s);
is(scalar(@v), 1, 'exactly one victim in the three-party cycle, 1.5 s later too');
$victim = $v[0] // 2;
note "victim: session on node " . ($victim + 1);
is(waiting_on($r[0]) + waiting_on($r[1]) + waiting_on($r[2]),
	2, 'the two others still wait (each for the next one)');
# The victim releases; the one waiting for its resource gets it, releases,
# and so on around the broken cycle.
$s[$victim]->query('SELECT pgrac_ges_unlock_all()');
for my $k (1 .. 2)
{
	my $i = ($victim - $k) % 3;
	my ($o) = $s[$i]->query('SELECT 1');
	is($o, "t\n1", 'node ' . ($i + 1) . " gets $r[($i + 1) % 3]");
	unlike($s[$i]->{stderr}, $deadlock_re, '... without an error');
	$s[$i]->query('SELECT pgrac_ges_unlock_all()');
}
$_->{stderr} = '' for @s;

# ---- (3) no false positive: a long wait that is not a cycle (a chain across
# ---- masters: node 3 waits for node 2, which waits for node 1, which sleeps)
for my $node ($c->nodes)
{
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET cluster.ges_deadlock_timeout = '500ms'; SELECT pg_reload_conf()");
}
for my $node ($c->nodes)
{
	ok($node->poll_query_until('postgres',
			"SELECT setting = '500' FROM pg_settings WHERE name = 'cluster.ges_deadlock_timeout'"),
		'ges_deadlock_timeout reloaded as 500ms');
}
my $log_off = -s $n1->logfile;
my $w = resource_at(2, 'lw');
my $u = resource_at(3, 'lu');
is($s[0]->query_safe("SELECT pgrac_ges_lock('$w')"), 't', "node 1 takes $w");
is($s[1]->query_safe("SELECT pgrac_ges_lock('$u')"), 't', "node 2 takes $u");
# Held 5 s: even on a slow VM, several 500 ms search rounds see the chain.
$s[0]->query_until(qr/sleeping/,
	"\\echo sleeping\nSELECT pg_sleep(5), pgrac_ges_unlock('$w');\n");
$t0 = time;
start_wait($s[2], $u);
start_wait($s[1], $w);
($out) = $s[1]->query('SELECT 1');
$took = time - $t0;
is($out, "t\n1", "node 2 gets $w when node 1 unlocks it");
cmp_ok($took, '>', 2, sprintf('... after waiting %.1f s, several search intervals', $took));
$s[1]->query('SELECT pgrac_ges_unlock_all()');
($out) = $s[2]->query('SELECT 1');
is($out, "t\n1", "node 3 then gets $u");
($out) = $s[0]->query('SELECT 1');
for my $i (0 .. 2)
{
	unlike($s[$i]->{stderr}, qr/deadlock/, 'no deadlock error on node ' . ($i + 1));
}
my $log = slurp_file($n1->logfile, $log_off);
my @rounds = $log =~ /GES deadlock search: round \d+: (\d+) old wait-for edges, (\d+) cycle/g;
my ($searched, $found) = (0, 0);
while (my ($edges, $cycles) = splice(@rounds, 0, 2))
{
	$searched++ if $edges >= 2;
	$found += $cycles;
}
cmp_ok($searched, '>=', 2, "the coordinator searched the chain's edges $searched times");
is($found, 0, '... and found no cycle');
unlike($log, qr/deadlock across instances/, 'nothing was cancelled');
$_->query('SELECT pgrac_ges_unlock_all()') for @s;
$_->quit for @s;
$c->stop_all;
done_testing();
