# Node-level lock caching (docs/ges.md, "Node-level caching"): a lock whose
# last local user released it stays on the node (the node owner, pid 0, at
# the master) and is taken again without a message; a BAST from the master
# gives it back once its local users are done; tokens keep growing through
# local takes and give-backs; a NOWAIT from another node is granted once an
# unused cached lock comes back; a conversion that the cache cannot make
# turns the lock into the session's own; a second local session waits in the
# node and is served from the cache, until a BAST sends it to the master behind
# the remote waiter; the counters and views show it.
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

sub bg
{
	my ($node) = @_;
	return $node->background_psql('postgres', on_error_stop => 0);
}

sub stat1
{
	my ($node, $col) = @_;
	return $node->safe_psql('postgres', "SELECT $col FROM pg_cluster_ges_stats");
}

# ---- a lock used only on node 1, mastered on node 2: cached after the first release
my $r = resource_where($n1, 'c', 'master_node = 2');
my $s1 = bg($n1);
is($s1->query_safe("SELECT pgrac_ges_lock('$r', 'EX') AND pgrac_ges_unlock('$r')"), 't',
	"node 1 locks and unlocks $r (mastered on node 2)");
ok($n1->poll_query_until('postgres', "SELECT count(*) = 1 FROM pg_cluster_ges_cache WHERE resource = '$r' AND mode = 'EX' AND users = 0"),
	'the lock stays in node 1\'s cache, unused');
is( $n1->safe_psql('postgres',
		"SELECT node_id || ':' || pid || ':' || mode FROM pg_cluster_ges_locks WHERE resource = '$r'"),
	'1:0:EX', 'the master lists it as node 1\'s (pid 0)');
my $hits0 = stat1($n1, 'cache_hits');
my $grants0 = stat1($n1, 'grants_delivered');
$s1->query_safe("SELECT pgrac_ges_lock('$r', 'EX')");
my $t1 = $s1->query_safe("SELECT pgrac_ges_lock_token('$r')");
$s1->query_safe("SELECT pgrac_ges_unlock('$r')");
is( $s1->query_safe(
		"SELECT count(*) FILTER (WHERE pgrac_ges_lock('$r', 'EX') AND pgrac_ges_unlock('$r')) FROM generate_series(1, 100)"),
	'100', '100 more lock + unlock pairs on node 1');
cmp_ok(stat1($n1, 'cache_hits') - $hits0, '>=', 101, 'all of them from the cache');
is(stat1($n1, 'grants_delivered'), $grants0, 'none through the LMS (no grant delivered)');
$s1->query_safe("SELECT pgrac_ges_lock('$r', 'PR')");
my $t2 = $s1->query_safe("SELECT pgrac_ges_lock_token('$r')");
cmp_ok($t2, '>', $t1, "a later local take has a larger fencing token ($t2 > $t1)");
is($n1->safe_psql('postgres', "SELECT users FROM pg_cluster_ges_cache WHERE resource = '$r'"),
	'1', 'the view shows one local user');

# ---- another node asks: a BAST; node 1 gives the lock back when its user is done
my $w3 = bg($n3);
is($w3->query_safe("SELECT pgrac_ges_lock('$r', 'EX', 300)"), 'f',
	'node 3 waits in vain while node 1 uses the cached lock');
ok($n1->poll_query_until('postgres', "SELECT bast_mode = 'EX' FROM pg_cluster_ges_cache WHERE resource = '$r'"),
	'node 1\'s cache entry shows the BAST (EX)');
my $s1b = bg($n1);
is($s1b->query_safe("SELECT pgrac_ges_lock('$r', 'PR', 0)"), 'f',
	'no new local take after the BAST: another session of node 1 (NOWAIT) is refused');
$w3->query_until(qr/started/, "\\echo started\nSELECT pgrac_ges_lock('$r', 'EX', 20000);\n");
is($s1->query_safe("SELECT pgrac_ges_unlock('$r')"), 't', 'node 1\'s user releases');
ok($n1->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_cluster_ges_cache WHERE resource = '$r'"),
	'node 1 gave the lock back');
ok($n3->poll_query_until('postgres', "SELECT count(*) = 1 FROM pg_cluster_ges_locks WHERE resource = '$r' AND node_id = 3 AND state = 'granted'"),
	'node 3 is granted');
cmp_ok(stat1($n1, 'cache_give_backs'), '>=', 1, 'node 1 counts a give-back');
cmp_ok(stat1($n1, 'basts_received'), '>=', 1, 'and the BAST');
my $t3 = (split /\n/, $w3->query_safe("SELECT pgrac_ges_lock_token('$r')"))[-1];
cmp_ok($t3, '>', $t2, "node 3's token is above every token node 1 handed out ($t3 > $t2)");
$w3->query_safe("SELECT pgrac_ges_unlock('$r')");

# ---- NOWAIT from another node gets an unused cached lock (it comes back at once)
my $q = resource_where($n1, 'q', 'master_node = 3');
is($n1->safe_psql('postgres', "SELECT pgrac_ges_lock('$q', 'EX') AND pgrac_ges_unlock('$q')"), 't',
	"node 1 caches $q");
ok($n1->poll_query_until('postgres', "SELECT count(*) = 1 FROM pg_cluster_ges_locks WHERE resource = '$q' AND node_id = 1 AND pid = 0"),
	'the master has it as node 1\'s');
is($n2->safe_psql('postgres', "SELECT pgrac_ges_lock('$q', 'EX', 0) AND pgrac_ges_unlock('$q')"), 't',
	'a NOWAIT EX from node 2 is granted: node 1 gave the unused lock back');


# ---- a conversion the cache cannot make: the lock becomes the session's own
my $v = resource_where($n1, 'v', 'master_node = 2');
is($n1->safe_psql('postgres', "SELECT pgrac_ges_lock('$v', 'PR') AND pgrac_ges_unlock('$v')"), 't',
	"node 1 caches $v in PR");
my $s1c = bg($n1);
my $pid1c = $s1c->query_safe('SELECT pg_backend_pid()');
is($s1c->query_safe("SELECT pgrac_ges_lock('$v', 'PR')"), 't', 'a session takes PR from the cache');
is($s1c->query_safe("SELECT pgrac_ges_lock('$v', 'EX', 5000)"), 't', 'and converts it to EX');
is( $n2->safe_psql('postgres',
		"SELECT node_id || ':' || pid || ':' || mode FROM pg_cluster_ges_locks WHERE resource = '$v'"),
	"1:$pid1c:EX", 'the master lists the session itself in EX');
cmp_ok(stat1($n1, 'cache_conversions'), '>=', 1, 'counted as a conversion of a cached lock');
is($n3->safe_psql('postgres', "SELECT pgrac_ges_lock('$v', 'PR', 0)"), 'f', 'node 3 cannot share it');
is($s1c->query_safe("SELECT pgrac_ges_unlock('$v') AND pgrac_ges_unlock('$v')"), 't', 'two unlocks release it');

# ---- a session that ends with a cached use: the use ends with it
my $e = resource_where($n1, 'e', 'master_node = 3');
$n1->safe_psql('postgres', "SELECT pgrac_ges_lock('$e', 'EX') AND pgrac_ges_unlock('$e')");
my $s1d = bg($n1);
is($s1d->query_safe("SELECT pgrac_ges_lock('$e', 'EX')"), 't', 'a session takes the cached lock');
$s1d->quit;
ok($n1->poll_query_until('postgres', "SELECT users = 0 FROM pg_cluster_ges_cache WHERE resource = '$e'"),
	'its use ends with the session');
is($n2->safe_psql('postgres', "SELECT pgrac_ges_lock('$e', 'EX', 5000)"), 't',
	'and node 2 gets the lock');

# ---- local waiters: a second session of node 1 waits in node 1 (no message
# to the master) and is served from the cache; a BAST sends it to the master,
# behind the remote waiter, which waits only for the user of the moment
my $l = resource_where($n1, 'l', 'master_node = 2');
$n1->safe_psql('postgres', "SELECT pgrac_ges_lock('$l', 'EX') AND pgrac_ges_unlock('$l')");
ok($n1->poll_query_until('postgres', "SELECT count(*) = 1 FROM pg_cluster_ges_cache WHERE resource = '$l'"),
	"node 1 caches $l");
my ($la, $lb, $lc) = (bg($n1), bg($n1), bg($n1));
my ($pb, $pc) = map { $_->query_safe('SELECT pg_backend_pid()') } ($lb, $lc);
my $lw0 = stat1($n1, 'local_waits');
my $ta = (split /\n/, $la->query_safe("SELECT pgrac_ges_lock('$l', 'EX'); SELECT pgrac_ges_lock_token('$l')"))[-1];
$lb->query_until(qr/started/, "\\echo started\nSELECT pgrac_ges_lock('$l', 'EX', 20000);\n");
ok( $n1->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_cluster_ges_locks WHERE resource = '$l' AND node_id = 1 AND pid = $pb AND state = 'waiting_local'"),
	'a second session of node 1 waits in node 1 (waiting_local)');
is( $n1->safe_psql('postgres',
		"SELECT string_agg(node_id || ':' || pid || ':' || state, ',') FROM pg_cluster_ges_locks WHERE resource = '$l' AND state <> 'waiting_local'"),
	'1:0:granted', 'the master knows only the node\'s lock');
is($n1->safe_psql('postgres', "SELECT local_waiters FROM pg_cluster_ges_cache WHERE resource = '$l'"),
	't', 'the cache entry shows a local waiter');
cmp_ok(stat1($n1, 'local_waits'), '>', $lw0, 'counted in local_waits');
$la->query_safe("SELECT pgrac_ges_unlock('$l')");
my $tb = (split /\n/, $lb->query_safe("SELECT pgrac_ges_lock_token('$l')"))[-1];
cmp_ok($tb, '>', $ta, "served from the cache when the first session unlocked ($tb > $ta)");
$lc->query_until(qr/started/, "\\echo started\nSELECT pgrac_ges_lock('$l', 'EX', 20000);\n");
ok( $n1->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_cluster_ges_locks WHERE resource = '$l' AND pid = $pc AND state = 'waiting_local'"),
	'a third session waits in node 1 too');
my $w3l = bg($n3);
$w3l->query_until(qr/started/, "\\echo started\nSELECT pgrac_ges_lock('$l', 'EX', 20000);\n");
ok( $n1->poll_query_until('postgres',
		"SELECT string_agg(node_id::text, ',' ORDER BY since) = '3,1' FROM pg_cluster_ges_locks WHERE resource = '$l' AND state = 'waiting'"),
	'node 3 asks: the BAST sends node 1\'s waiter to the master, behind node 3');
$lb->query_safe("SELECT pgrac_ges_unlock('$l')");
ok( $n1->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_cluster_ges_locks WHERE resource = '$l' AND node_id = 3 AND state = 'granted'"),
	'node 1\'s user unlocks: node 3 is granted, not node 1\'s waiter');
is( $n1->safe_psql('postgres', "SELECT state FROM pg_cluster_ges_locks WHERE resource = '$l' AND pid = $pc"),
	'waiting', 'node 1\'s waiter still waits at the master');
$w3l->query_safe("SELECT pgrac_ges_unlock('$l')");
ok( $n1->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_cluster_ges_locks WHERE resource = '$l' AND pid = $pc AND state = 'granted'"),
	'then node 1\'s waiter');
$lc->query_safe("SELECT pgrac_ges_unlock('$l')");
$_->quit for ($la, $lb, $lc, $w3l);

# ---- many cached locks: the view reads each master's table in pages
is( $n1->safe_psql('postgres',
		"SELECT count(*) FILTER (WHERE pgrac_ges_lock('many' || g, 'PR') AND pgrac_ges_unlock('many' || g))
		   FROM generate_series(1, 12000) g"),
	'12000', 'node 1 locks and releases 12,000 resources');
ok( $n1->poll_query_until('postgres',
		"SELECT count(*) = 12000 FROM pg_cluster_ges_locks WHERE resource LIKE 'many%' AND node_id = 1 AND pid = 0"),
	'pg_cluster_ges_locks lists all 12,000 cached locks (more than one reply a table)');
my ($many_out, $many_err) = ('', '');
$n2->psql('postgres', 'SELECT count(*) FROM pg_cluster_ges_locks', stdout => \$many_out, stderr => \$many_err);
unlike($many_err, qr/truncated/, 'and no NOTICE says a table was cut short');

# ---- node 1 fenced (its listener stopped past its lease): its cached lock and
# the use of it are void, node 2 gets the lock, node 1's session is told
my $f = resource_where($n1, 'f', 'master_node = 2');
$n1->safe_psql('postgres', "SELECT pgrac_ges_lock('$f', 'EX') AND pgrac_ges_unlock('$f')");
ok($n1->poll_query_until('postgres', "SELECT count(*) = 1 FROM pg_cluster_ges_cache WHERE resource = '$f'"),
	"node 1 caches $f");
my $s1f = bg($n1);
is($s1f->query_safe("SELECT pgrac_ges_lock('$f', 'EX')"), 't', 'a session of node 1 uses it');
my $lpid = $c->worker_pid(1, 'pgrac_ic listener');
kill 'STOP', $lpid or die "SIGSTOP $lpid: $!";
ok( $n2->poll_query_until('postgres',
		"SELECT members = '{2,3}' FROM pg_cluster_membership", 't'),
	'nodes 2 and 3 form a view without node 1');
is($n2->safe_psql('postgres', "SELECT pgrac_ges_lock('$f', 'EX', 10000)"), 't',
	'node 2 gets the lock node 1 had cached and was using');
ok($n1->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_cluster_ges_cache WHERE resource = '$f'"),
	'node 1 fenced itself: its cache is empty');
kill 'CONT', $lpid;
my ($fo, $fe) = GesFaultKit::bq($s1f, "SELECT pgrac_ges_lock_token('$f')");
like($fe // '', qr/global lock lost/, "node 1's session is told its lock is lost")
  or diag('stdout: ' . ($fo // ''));
ok( $n1->poll_query_until('postgres',
		"SELECT state = 'member' AND lease_valid FROM pg_cluster_membership"),
	'node 1 is a member again');
ok($n1->poll_query_until('postgres', "SELECT pgrac_ges_lock('$f', 'EX', 0) AND pgrac_ges_unlock('$f')"),
	'and takes the lock again (node 2 released it when its session ended)');

# ---- caching off: cluster.ges_cache_entries = 0 on a node keeps nothing
is($n1->safe_psql('postgres', 'SHOW cluster.ges_cache_entries'), '16384', 'the default size');

$_->quit for ($s1, $s1b, $s1c, $w3, $s1f);
$c->stop_all;
done_testing();
