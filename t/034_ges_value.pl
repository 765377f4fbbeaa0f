# Lock value blocks (docs/ges.md, "Lock value blocks") on a real three-node
# cluster: a PW/EX holder's value reaches the next holder on another node,
# through the master, through a node's cache (local writes go back with the
# give-back) and through a down-conversion; a writer whose session ends
# holding EX, or whose node is fenced, leaves it invalid (NULL) until the next
# write; bad uses are refused by name; the functions are not PUBLIC's.
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

# ---- node 1 writes, node 2 reads (the lock goes back from node 1's cache)
my $r = resource_where($n1, 'v', 'master_node = 3');
my $s1 = bg($n1);
is($s1->query_safe("SELECT pgrac_ges_lock('$r', 'EX')"), 't', "node 1 takes $r EX (master 3)");
is($s1->query_safe("SELECT pgrac_ges_lock_value('$r') = ''::bytea"), 't',
	'a new resource\'s value is valid and empty');
$s1->query_safe("SELECT pgrac_ges_set_lock_value('$r', 'hello')");
is($s1->query_safe("SELECT convert_from(pgrac_ges_lock_value('$r'), 'UTF8')"), 'hello',
	'the session reads what it set');
$s1->query_safe("SELECT pgrac_ges_unlock('$r')");
is( $n2->safe_psql('postgres',
		"SELECT pgrac_ges_lock('$r', 'PR', 10000); SELECT convert_from(pgrac_ges_lock_value('$r'), 'UTF8')"),
	"t\nhello", 'node 2 is granted PR with node 1\'s value');

# ---- through node 1's cache: a second session writes locally, node 3 reads it
my $k = resource_where($n1, 'k', 'master_node = 2');
$s1->query_safe("SELECT pgrac_ges_lock('$k', 'EX')");
$s1->query_safe("SELECT pgrac_ges_set_lock_value('$k', 'v1')");
$s1->query_safe("SELECT pgrac_ges_unlock('$k')");
ok($n1->poll_query_until('postgres', "SELECT count(*) = 1 FROM pg_cluster_ges_cache WHERE resource = '$k' AND mode = 'EX'"),
	"node 1 keeps $k in its cache");
my $s1b = bg($n1);
my $hits0 = $n1->safe_psql('postgres', 'SELECT cache_hits FROM pg_cluster_ges_stats');
is( $s1b->query_safe(
		"SELECT pgrac_ges_lock('$k', 'EX'); SELECT convert_from(pgrac_ges_lock_value('$k'), 'UTF8')"),
	"t\nv1", 'another session of node 1 takes it from the cache with the value');
cmp_ok($n1->safe_psql('postgres', 'SELECT cache_hits FROM pg_cluster_ges_stats'),
	'>', $hits0, 'a local take');
$s1b->query_safe("SELECT pgrac_ges_set_lock_value('$k', 'v2, written in the cache')");
$s1b->query_safe("SELECT pgrac_ges_unlock('$k')");
is( $n3->safe_psql('postgres',
		"SELECT pgrac_ges_lock('$k', 'PR', 10000); SELECT convert_from(pgrac_ges_lock_value('$k'), 'UTF8')"),
	"t\nv2, written in the cache", 'node 3 reads the value written locally on node 1 (given back after the BAST)');

# ---- a down-conversion writes
my $d = resource_where($n2, 'd', 'master_node = 1');
my $s2 = bg($n2);
$s2->query_safe("SELECT pgrac_ges_lock('$d', 'EX')");
$s2->query_safe("SELECT pgrac_ges_set_lock_value('$d', '\\x00ff00'::bytea)");
is($s2->query_safe("SELECT pgrac_ges_lock('$d', 'PR'); SELECT pgrac_ges_lock_value('$d') = '\\x00ff00'::bytea"),
	"t\nt", 'node 2 converts EX to PR, writing its value');
is( $n3->safe_psql('postgres',
		"SELECT pgrac_ges_lock('$d', 'PR', 10000); SELECT encode(pgrac_ges_lock_value('$d'), 'hex')"),
	"t\n00ff00", 'node 3, sharing PR, reads it while node 2 still holds');

# ---- refused uses, by name
my ($o, $e) = GesFaultKit::bq($s2, "SELECT pgrac_ges_set_lock_value('$d', 'x')");
like($e // '', qr/cannot write the lock value block of "$d" under PR/, 'a PR holder cannot write');
($o, $e) = GesFaultKit::bq($s2, "SELECT pgrac_ges_lock_value('never-locked')");
like($e // '', qr/holds no global lock on "never-locked"/, 'no value without the lock');
$s2->query_safe("SELECT pgrac_ges_unlock('$d')");
my $big = resource_where($n2, 'b', 'master_node = 2');
$s2->query_safe("SELECT pgrac_ges_lock('$big', 'EX')");
($o, $e) = GesFaultKit::bq($s2, "SELECT pgrac_ges_set_lock_value('$big', repeat('z', 33)::bytea)");
like($e // '', qr/a lock value block is 0 to 32 bytes, not 33/, 'at most 32 bytes');
$s2->query_safe("SELECT pgrac_ges_set_lock_value('$big', repeat('z', 32)::bytea)");
$s2->query_safe("SELECT pgrac_ges_unlock('$big')");
is( $n1->safe_psql('postgres',
		"SELECT pgrac_ges_lock('$big', 'PR', 10000); SELECT length(pgrac_ges_lock_value('$big'))"),
	"t\n32", '32 bytes go through');

# ---- bigint resources (the C API)
is( $n1->safe_psql('postgres',
		"SELECT pgrac_ges_lock(4242::bigint, 'PW'); SELECT pgrac_ges_set_lock_value(4242::bigint, '\\xbeef');
		 SELECT pgrac_ges_unlock(4242::bigint)"),
	"t\n\nt", 'a bigint resource is written through the C API');
is( $n3->safe_psql('postgres',
		"SELECT pgrac_ges_lock(4242::bigint, 'CR', 10000); SELECT encode(pgrac_ges_lock_value(4242::bigint), 'hex')"),
	"t\nbeef", 'and read on node 3');

# ---- a session that ends holding EX leaves the value invalid
my $x = resource_where($n1, 'x', 'master_node = 2');
my $keep = bg($n3);
is($keep->query_safe("SELECT pgrac_ges_lock('$x', 'NL')"), 't',
	'node 3 holds NL (the value lives as long as a lock does)');
my $inv0 = $n2->safe_psql('postgres', 'SELECT value_invalidations FROM pg_cluster_ges_stats');
my $dies = bg($n1);
$dies->query_safe("SELECT pgrac_ges_lock('$x', 'EX')");
$dies->query_safe("SELECT pgrac_ges_set_lock_value('$x', 'never written')");
$dies->quit;    # the session ends holding EX: its set value is not written
is( $n2->safe_psql('postgres',
		"SELECT pgrac_ges_lock('$x', 'PR', 10000); SELECT pgrac_ges_lock_value('$x') IS NULL"),
	"t\nt", 'the next holder finds the value invalid (NULL)');
cmp_ok($n2->safe_psql('postgres', 'SELECT value_invalidations FROM pg_cluster_ges_stats'),
	'>', $inv0, 'the master counts the invalidation');
is( $n1->safe_psql('postgres',
		"SELECT pgrac_ges_lock('$x', 'EX', 10000); SELECT pgrac_ges_set_lock_value('$x', 'again');
		 SELECT pgrac_ges_unlock('$x')"),
	"t\n\nt", 'a writer makes it valid again');
is( $n2->safe_psql('postgres',
		"SELECT pgrac_ges_lock('$x', 'PR', 10000); SELECT convert_from(pgrac_ges_lock_value('$x'), 'UTF8')"),
	"t\nagain", 'as the next holder sees');

# ---- a writer's node fenced: invalid
my $f = resource_where($n1, 'f', 'master_node = 2');
is($keep->query_safe("SELECT pgrac_ges_lock('$f', 'NL')"), 't', "node 3 holds NL on $f");
my $s1f = bg($n1);
$s1f->query_safe("SELECT pgrac_ges_lock('$f', 'EX')");
$s1f->query_safe("SELECT pgrac_ges_set_lock_value('$f', 'lost with node 1')");
my $lpid = $c->worker_pid(1, 'pgrac_ic listener');
kill 'STOP', $lpid or die "SIGSTOP $lpid: $!";
ok( $n2->poll_query_until('postgres', "SELECT members = '{2,3}' FROM pg_cluster_membership", 't'),
	'nodes 2 and 3 form a view without node 1');
is( $n2->safe_psql('postgres',
		"SELECT pgrac_ges_lock('$f', 'PR', 10000); SELECT pgrac_ges_lock_value('$f') IS NULL"),
	"t\nt", 'node 2 is granted the fenced node\'s EX lock with an invalid value');
kill 'CONT', $lpid;
($o, $e) = GesFaultKit::bq($s1f, "SELECT pgrac_ges_lock_value('$f')");
like($e // '', qr/global lock lost/, 'node 1\'s session is told its lock is lost');
ok($n1->poll_query_until('postgres', "SELECT state = 'member' AND lease_valid FROM pg_cluster_membership"),
	'node 1 is a member again');

# ---- not PUBLIC's
$n1->safe_psql('postgres', 'CREATE ROLE lvb_nobody LOGIN');
like(GesFaultKit::sql($n1, "SET ROLE lvb_nobody; SELECT pgrac_ges_lock_value('$r')")->{err},
	qr/permission denied for function pgrac_ges_lock_value/, 'reading needs a grant');
like(GesFaultKit::sql($n1, "SET ROLE lvb_nobody; SELECT pgrac_ges_set_lock_value('$r', 'x')")->{err},
	qr/permission denied for function pgrac_ges_set_lock_value/, 'writing too');

$_->quit for ($s1, $s1b, $s2, $keep, $s1f);
$c->stop_all;
done_testing();
