# Global Enqueue Service over tier3 with three instances: session-level global
# locks, NOWAIT and timeouts, shared modes, the cluster-wide view, cancel of
# a waiter, a deadlock, mutual exclusion under load from every instance, and
# release of a dead instance's locks (with remastering).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use IPC::Run;
use PgracCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $c = PgracCluster->new(n => 3, tier => 'tier3');
my ($n1, $n2, $n3) = map { $c->node($_) } 1 .. 3;

$c->wait_ges_ready;

# resource_where($node, $prefix, $cond): PgracCluster::resource_where.
sub resource_where { return PgracCluster::resource_where(@_); }

sub bg
{
	my ($node) = @_;
	return $node->background_psql('postgres', on_error_stop => 0);
}

# ---- basics: hold, NOWAIT, timeout, the view
my $h1 = bg($n1);
my $h1pid = $h1->query_safe('SELECT pg_backend_pid()');
my $r1 = resource_where($n1, 'r', 'master_node = 2');
is($h1->query_safe("SELECT pgrac_ges_lock('$r1')"), 't', "node 1 takes $r1 (mastered on node 2) EX");
is($n2->safe_psql('postgres', "SELECT pgrac_ges_lock('$r1', 'EX', 0)"),
	'f', 'NOWAIT from node 2 is refused');
is($n3->safe_psql('postgres', "SELECT pgrac_ges_lock('$r1', 'PR', 300)"),
	'f', 'a 300 ms timeout from node 3 expires with false');
is( $n3->safe_psql('postgres',
		"SELECT master_node || ':' || node_id || ':' || pid || ':' || mode || ':' || state
		   FROM pg_cluster_ges_locks WHERE resource = '$r1'"),
	"2:1:$h1pid:EX:granted",
	'node 3 sees the lock in pg_cluster_ges_locks (master 2, holder node 1)');
is($h1->query_safe("SELECT pgrac_ges_lock('$r1'), pgrac_ges_unlock('$r1')"),
	"t|t", 'locking again counts; one unlock keeps it');
is($n2->safe_psql('postgres', "SELECT pgrac_ges_lock('$r1', 'EX', 0)"),
	'f', 'still held after one of two unlocks');
is($h1->query_safe("SELECT pgrac_ges_unlock('$r1')"), 't', 'second unlock releases');
is($n2->safe_psql('postgres', "SELECT pgrac_ges_lock('$r1', 'EX', 0)"),
	't', 'node 2 gets it with NOWAIT after the release');
my ($out, $ret) = $h1->query("SELECT pgrac_ges_unlock('$r1')");
is($out, 'f', 'unlocking an unheld lock returns false');
like($h1->{stderr}, qr/you don't own a global lock/, '... with a WARNING');
$h1->{stderr} = '';
is($h1->query_safe("SELECT pgrac_ges_lock(42::bigint), pgrac_ges_unlock_all()"),
	't|1', 'bigint resources; unlock_all counts what it released');

# ---- shared modes are granted together
my $h2 = bg($n2);
my $h3 = bg($n3);
my $h2pid = $h2->query_safe('SELECT pg_backend_pid()');
is($h1->query_safe("SELECT pgrac_ges_lock('sh', 'PR')"), 't', 'node 1 takes sh PR');
is($h2->query_safe("SELECT pgrac_ges_lock('sh', 'PR', 0)"), 't', 'node 2 takes sh PR at once');
is($h3->query_safe("SELECT pgrac_ges_lock('sh', 'PR', 0)"), 't', 'node 3 takes sh PR at once');
is( $n1->safe_psql('postgres',
		"SELECT count(*) FROM pg_cluster_ges_locks WHERE resource = 'sh' AND mode = 'PR' AND state = 'granted'"),
	'3', 'three PR holders in the view');
is($n1->safe_psql('postgres', "SELECT pgrac_ges_lock('sh', 'EX', 0)"),
	'f', 'EX is refused while PR is held');
$h1->query_safe('SELECT pgrac_ges_unlock_all()');
$h2->query_safe('SELECT pgrac_ges_unlock_all()');
$h3->query_safe('SELECT pgrac_ges_unlock_all()');

# ---- cancel of a waiter removes its request
is($h1->query_safe("SELECT pgrac_ges_lock('cx')"), 't', 'node 1 takes cx');
$h2->query_until(qr/waiting/, "\\echo waiting\nSELECT pgrac_ges_lock('cx');\n");
ok( $n1->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_cluster_ges_locks WHERE resource = 'cx' AND state = 'waiting' AND node_id = 2"),
	'node 2 waits for cx');
$n2->safe_psql('postgres', "SELECT pg_cancel_backend($h2pid)");
($out, $ret) = $h2->query('SELECT 1');
like($h2->{stderr}, qr/canceling statement due to user request/, 'the waiter is cancelled');
$h2->{stderr} = '';
ok( $n1->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_cluster_ges_locks WHERE resource = 'cx' AND state = 'waiting'"),
	'the cancelled request is gone from the master');
$h1->query_safe("SELECT pgrac_ges_unlock('cx')");
is($n3->safe_psql('postgres', "SELECT pgrac_ges_lock('cx', 'EX', 0)"),
	't', 'after the release nobody holds cx (the cancelled waiter was not granted)');

# ---- deadlock between two instances: one participant gets an error
my $pair = $n1->safe_psql('postgres',
	"SELECT a.n || ' ' || b.n
	   FROM (SELECT 'da' || g AS n FROM generate_series(1, 200) g) a,
	        (SELECT 'db' || g AS n FROM generate_series(1, 200) g) b,
	        LATERAL pgrac_ges_resource(a.n) ra, LATERAL pgrac_ges_resource(b.n) rb
	  WHERE ra.master_node = rb.master_node AND ra.lms_worker = rb.lms_worker LIMIT 1");
my ($da, $db) = split ' ', $pair;
is($h1->query_safe("SELECT pgrac_ges_lock('$da')"), 't', "node 1 takes $da");
is($h2->query_safe("SELECT pgrac_ges_lock('$db')"), 't', "node 2 takes $db");
$h1->query_until(qr/waiting/, "\\echo waiting\nSELECT pgrac_ges_lock('$db');\n");
ok( $n1->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_cluster_ges_locks WHERE resource = '$db' AND state = 'waiting'"),
	'node 1 waits for node 2');
$h2->{stderr} = '';
($out, $ret) = $h2->query("SELECT pgrac_ges_lock('$da')");
like($h2->{stderr}, qr/deadlock detected on global lock/, 'node 2 closing the cycle is the deadlock victim');
$h2->{stderr} = '';
$h2->query_safe('SELECT pgrac_ges_unlock_all()');
($out, $ret) = $h1->query('SELECT 1');
is($out, "t\n1", 'node 1 is granted once the victim gives up its lock');
$h1->query_safe('SELECT pgrac_ges_unlock_all()');

# ---- mutual exclusion under load: 2 clients on each of the 3 instances
my $script = "$PostgreSQL::Test::Utils::tmp_check/mx.sql";
open my $fh, '>', $script or die;
print $fh <<'EOS';
SELECT pgrac_ges_lock('mx');
INSERT INTO mx(client, t_enter) VALUES (:client_id, clock_timestamp());
SELECT pg_sleep(0.001);
UPDATE mx SET t_exit = clock_timestamp() WHERE id = currval('mx_id_seq');
SELECT pgrac_ges_unlock('mx');
EOS
close $fh;
my @runs;
for my $i (1 .. 3)
{
	my $node = $c->node($i);
	$node->safe_psql('postgres',
		'CREATE TABLE mx (id serial, client int, t_enter timestamptz, t_exit timestamptz)');
	my ($o, $e) = ('', '');
	my $h = IPC::Run::start(
		[ 'pgbench', '-n', '-c', '2', '-j', '2', '-T', '4', '-f', $script,
		  '-h', $node->host, '-p', $node->port, 'postgres' ],
		'>', \$o, '2>', \$e,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	push @runs, [ $h, \$o, \$e ];
}
for my $i (0 .. 2)
{
	my ($h, $o, $e) = @{ $runs[$i] };
	ok($h->finish, 'pgbench on node ' . ($i + 1) . ' finished') or diag($$e);
}
my @iv;
my %clients;
for my $i (1 .. 3)
{
	my $rows = $c->node($i)->safe_psql('postgres',
		"SELECT client, extract(epoch FROM t_enter)::numeric(20,6), extract(epoch FROM t_exit)::numeric(20,6)
		   FROM mx WHERE t_exit IS NOT NULL");
	for my $line (split /\n/, $rows)
	{
		my ($cl, $en, $ex) = split /\|/, $line;
		push @iv, [ $en, $ex, "$i/$cl" ];
		$clients{"$i/$cl"}++;
	}
}
@iv = sort { $a->[0] <=> $b->[0] } @iv;
my $overlaps = 0;
for my $k (1 .. $#iv)
{
	if ($iv[$k][0] < $iv[ $k - 1 ][1])
	{
		$overlaps++;
		diag("overlap: $iv[$k-1][2] [$iv[$k-1][0], $iv[$k-1][1]] and $iv[$k][2] [$iv[$k][0], $iv[$k][1]]")
		  if $overlaps < 5;
	}
}
cmp_ok(scalar(@iv), '>', 30, 'the clients went through the critical section ' . scalar(@iv) . ' times');
is($overlaps, 0, 'no two critical sections overlapped');
is(scalar(keys %clients), 6, 'every client of every instance made progress');

# ---- an LMS restart keeps the locks of its shard: node 2 holds a lock
# ---- mastered on node 1's LMS k; that LMS is cancelled (ignored) and then
# ---- terminated; the restarted worker rebuilds its table from the others
my $kr = resource_where($n1, 'lr', 'master_node = 1');
my $kw = $n1->safe_psql('postgres', "SELECT lms_worker FROM pgrac_ges_resource('$kr')");
is($h2->query_safe("SELECT pgrac_ges_lock('$kr')"), 't', "node 2 holds $kr (mastered on node 1, LMS $kw)");
my $lms_pid = $c->worker_pid(1, "pgrac_ic lms $kw");
$n1->safe_psql('postgres', "SELECT pg_cancel_backend($lms_pid)");
is($n3->safe_psql('postgres', "SELECT pgrac_ges_lock('$kr', 'EX', 0)"),
	'f', 'after a pg_cancel_backend of the LMS a NOWAIT EX from node 3 is refused');
is($c->worker_pid(1, "pgrac_ic lms $kw"), $lms_pid, '... and the LMS did not exit (SIGINT ignored)');
$n1->safe_psql('postgres', "SELECT pg_terminate_backend($lms_pid)");
ok( $n1->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pgrac_ic lms $kw' AND pid <> $lms_pid"),
	"node 1's LMS $kw is back after pg_terminate_backend");
is($n3->safe_psql('postgres', "SELECT pgrac_ges_lock('$kr', 'EX', 0)"),
	'f', "node 2's lock on $kr survived the LMS restart (NOWAIT EX from node 3 refused)");
is( $n1->safe_psql('postgres',
		"SELECT node_id || ':' || pid || ':' || mode || ':' || state FROM pg_cluster_ges_locks
		  WHERE resource = '$kr' AND master_node = 1"),
	"2:$h2pid:EX:granted", 'the restarted master lists the replayed grant');
ok($n1->log_contains(qr/LMS $kw\): restarted; got back \d+ lock/), 'the restart is logged');
is($h2->query_safe("SELECT pgrac_ges_unlock('$kr')"), 't', 'node 2 unlocks');
is($n3->safe_psql('postgres', "SELECT pgrac_ges_lock('$kr', 'EX', 0) AND pgrac_ges_unlock('$kr')"),
	't', 'then node 3 gets it');

# ---- a backend that ends while holding global locks: they are released
# ---- cluster-wide (exit hook, or the LMS reaper of dead owners)
my $kd = resource_where($n1, 'ld', 'master_node = 1');
my $hd = bg($n2);
my $hdpid = $hd->query_safe('SELECT pg_backend_pid()');
is($hd->query_safe("SELECT pgrac_ges_lock('$kd'), pgrac_ges_lock('${kd}x', 'PR')"),
	't|t', "a node 2 backend holds $kd and ${kd}x");
$n2->safe_psql('postgres', "SELECT pg_terminate_backend($hdpid)");
eval { $hd->quit };
ok( $n3->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_cluster_ges_locks WHERE node_id = 2 AND pid = $hdpid"),
	'the terminated backend holds nothing anywhere');
is($n3->safe_psql('postgres', "SELECT pgrac_ges_lock('$kd', 'EX', 0) AND pgrac_ges_unlock('$kd')"),
	't', "node 3 gets $kd after the holder was terminated");

# ---- the same when the exit hook's ReleaseAll cannot be sent (node 2's
# ---- listener is being restarted): the LMS reaper releases the locks
my $ke = resource_where($n1, 'le', 'master_node = 1');
my $he = bg($n2);
my $hepid = $he->query_safe('SELECT pg_backend_pid()');
is($he->query_safe("SELECT pgrac_ges_lock('$ke')"), 't', "a node 2 backend holds $ke (mastered on node 1)");
my $lpid = $c->worker_pid(2, 'pgrac_ic listener');
my $log_from = -s $n2->logfile;
$n2->safe_psql('postgres', "SELECT pg_terminate_backend($lpid)");
ok( $n2->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $lpid"),
	"node 2's listener is gone");
$n2->safe_psql('postgres', "SELECT pg_terminate_backend($hepid)");
eval { $he->quit };
ok( $n2->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pgrac_ic listener'"),
	"node 2's listener is back");
ok($c->wait_up($_), "node $_ sees all nodes UP again") for 1 .. 3;
ok( $n3->poll_query_until('postgres', "SELECT pgrac_ges_lock('$ke', 'EX', 0) AND pgrac_ges_unlock('$ke')"),
	"node 3 gets $ke: the lock of the backend that died while the listener restarted is released");
# Released on node 2 whichever way it went there: the exit hook's ReleaseAll
# once the listener was back, the LMS reaper, or, where the listener's restart
# outlasted the lease (a slow machine, the soft-RoCE VM), fencing. The dead
# backend holds nothing anywhere, and the reaper's line names it if it acted.
ok( $n2->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_cluster_ges_locks WHERE pid = $hepid"),
	'node 2: the dead owner holds nothing');
my $log = slurp_file($n2->logfile, $log_from);
note('released by: '
	  . ($log =~ /backend $hepid is gone but still had global locks/ ? 'the LMS reaper'
		: $log =~ /this node was fenced/ ? 'fencing'
		: 'the exit hook'));

# ---- a dead instance's locks are released; waiters elsewhere get them,
# ---- also for resources that were mastered on the dead instance
my $k_here = resource_where($n1, 'k', 'master_node = 1');
my $k_else = resource_where($n1, 'k', 'master_node = 3');
is($h1->query_safe("SELECT pgrac_ges_lock('$k_here'), pgrac_ges_lock('$k_else')"),
	't|t', "node 1 holds $k_here (mastered on 1) and $k_else (mastered on 3)");
# A lock node 2 holds on a resource mastered on node 1 must survive remastering.
my $k_kept = resource_where($n1, 'kk', 'master_node = 1');
is($h2->query_safe("SELECT pgrac_ges_lock('$k_kept')"), 't', "node 2 holds $k_kept (mastered on 1)");
$h2->query_until(qr/waiting/, "\\echo waiting\nSELECT pgrac_ges_lock('$k_here');\n");
$h3->query_until(qr/waiting/, "\\echo waiting\nSELECT pgrac_ges_lock('$k_else');\n");
ok( $n3->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM pg_cluster_ges_locks WHERE resource IN ('$k_here', '$k_else') AND state = 'waiting'"),
	'nodes 2 and 3 wait');
$n1->stop('immediate');
eval { $h1->quit };
($out, $ret) = $h2->query('SELECT 1');
is($out, "t\n1", "node 2 gets $k_here after node 1 died (remastered)");
($out, $ret) = $h3->query('SELECT 1');
is($out, "t\n1", "node 3 gets $k_else after node 1 died");
is($n3->safe_psql('postgres', "SELECT pgrac_ges_lock('$k_kept', 'EX', 0)"),
	'f', "node 2's lock on $k_kept survived the remastering");
is( $n3->safe_psql('postgres',
		"SELECT count(*) FROM pg_cluster_ges_locks WHERE node_id = 1"),
	'0', 'no lock of node 1 is left');
$h2->quit;
$h3->quit;
$n2->stop('fast');
$n3->stop('fast');
done_testing();
