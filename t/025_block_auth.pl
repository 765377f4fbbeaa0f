# Cache Fusion authorisation on both sides (docs/cache_fusion.md): the
# requester checks privileges before it locks anything and refuses row-level
# security; fetch by BufferTag is for superusers; the serving node locks the
# relation without waiting and serves a block only if the request names the
# relation's current storage there; a TRUNCATE racing fetches breaks nothing.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use IPC::Run;
use PgracCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $c = PgracCluster->new(
	n => 2,
	tier => 'tier3',
	name => 'auth',
	before_copy => sub {
		shift->safe_psql('postgres', q{
			CREATE TABLE cf_t AS SELECT g, repeat('x', 100) AS pad FROM generate_series(1, 5000) g;
			CREATE TABLE cf_div AS SELECT g FROM generate_series(1, 5000) g;
			CREATE TABLE cf_churn AS SELECT g FROM generate_series(1, 2000) g;
			CREATE TABLE cf_rls AS SELECT g FROM generate_series(1, 10) g;
			ALTER TABLE cf_rls ENABLE ROW LEVEL SECURITY;
			CREATE POLICY cf_none ON cf_rls USING (false);
		});
	});
my ($n1, $n2) = map { $c->node($_) } 1 .. 2;

$n2->safe_psql('postgres', q{
	CREATE ROLE cf_low LOGIN;
	CREATE ROLE cf_reader LOGIN;
	CREATE ROLE cf_bypass LOGIN BYPASSRLS;
	CREATE ROLE cf_readall LOGIN IN ROLE pg_read_all_data;
	GRANT EXECUTE ON FUNCTION pgrac_fetch_block, pgrac_fetch_blocks, pgrac_fetch_block_tag
		TO cf_low, cf_reader, cf_bypass, cf_readall;
	GRANT SELECT ON cf_rls TO cf_reader, cf_bypass;
});
is($n2->safe_psql('postgres', "SELECT length(pgrac_fetch_block(1, 'cf_t', 0))"),
	'8192', 'a superuser fetches a block');

# Privileges are checked before the relation is locked: with ACCESS EXCLUSIVE
# held by another session, the unprivileged fetch fails at once with a
# permission error instead of queueing for the lock.
my $holder = $n2->background_psql('postgres');
$holder->query_safe('BEGIN; LOCK TABLE cf_t IN ACCESS EXCLUSIVE MODE');
my ($rc, $out, $err) = $n2->psql('postgres',
	"SET lock_timeout = '5s'; SET ROLE cf_low; SELECT pgrac_fetch_block(1, 'cf_t', 0)");
like($err, qr/permission denied for table cf_t/,
	'no SELECT: permission denied while the table is locked, without waiting for the lock');
$holder->query_safe('ROLLBACK');
$holder->quit;

# Row-level security: a raw page shows every row.
($rc, $out, $err) = $n2->psql('postgres', "SET ROLE cf_reader; SELECT pgrac_fetch_block(1, 'cf_rls', 0)");
like($err, qr/row-level security applies to the current user/, 'RLS table refused without BYPASSRLS');
($rc, $out, $err) = $n2->psql('postgres', "SET ROLE cf_readall; SELECT pgrac_fetch_block(1, 'cf_rls', 0)");
like($err, qr/row-level security applies to the current user/,
	'... also for pg_read_all_data (it does not bypass RLS)');
is($n2->safe_psql('postgres', "SET ROLE cf_bypass; SELECT length(pgrac_fetch_block(1, 'cf_rls', 0))"),
	'8192', 'a BYPASSRLS role with SELECT fetches it');

# By BufferTag: superuser only (pg_read_all_data neither bypasses RLS nor
# CONNECT).
my ($db, $spc, $file, $oid) = split /\|/, $n2->safe_psql('postgres', q{
	SELECT d.oid, t.oid, pg_relation_filenode('cf_t'), 'cf_t'::regclass::oid
	  FROM pg_database d, pg_tablespace t WHERE d.datname = current_database() AND t.spcname = 'pg_default'});
($rc, $out, $err) = $n2->psql('postgres',
	"SET ROLE cf_readall; SELECT pgrac_fetch_block_tag(1, $spc, $db, $file, 'main', 0)");
like($err, qr/permission denied to fetch blocks by BufferTag/, 'pg_read_all_data may not fetch by tag');
is( $n2->safe_psql('postgres', "SELECT md5(pgrac_fetch_block_tag(1, $spc, $db, $file, 'main', 0))"),
	$n2->safe_psql('postgres', "SELECT md5(pgrac_fetch_block(1, 'cf_t', 0))"),
	'a superuser fetches by tag (relation found in the local catalog)');

# The serving node checks the identity: a crafted request naming cf_rls with
# cf_t's storage is refused there.
my $rls_oid = $n2->safe_psql('postgres', "SELECT 'cf_rls'::regclass::oid");
($rc, $out, $err) = $n2->psql('postgres',
	"SELECT pgrac_fetch_block_tag(1, $spc, $db, $file, 'main', 0, $rls_oid)");
like($err, qr/block request names relation $rls_oid of database $db with storage $spc\/$db\/$file, but on node 1 its storage is $spc\/$db\/\d+/,
	'relation and relfilenode that do not match are refused by the server');
# A relation rewritten on the server only: the requester's relfilenode is no
# longer the relation's there.
$n1->safe_psql('postgres', 'TRUNCATE cf_div; INSERT INTO cf_div SELECT generate_series(1, 100); CHECKPOINT');
($rc, $out, $err) = $n2->psql('postgres', "SELECT pgrac_fetch_block(1, 'cf_div', 0)");
like($err, qr/block request names relation \d+ .* but on node 1 its storage is/,
	'a relation truncated on the server: its old storage is not served');
my ($div_oid, $div_file) = split /\|/, $n1->safe_psql('postgres',
	"SELECT 'cf_div'::regclass::oid, pg_relation_filenode('cf_div')");
is( $n2->safe_psql('postgres',
		"SELECT md5(pgrac_fetch_block_tag(1, $spc, $db, $div_file, 'main', 0, $div_oid))"),
	$n1->safe_psql('postgres', "SELECT md5(pg_read_binary_file(pg_relation_filepath('cf_div')))"),
	'... its new storage is (the row the TRUNCATE wrote is found in pg_class there)');

# pg_class itself rewritten on the server (a new relation map): the serving
# LMS workers, which cache where pg_class lives, must notice and read the new
# one. Sixteen blocks spread over every worker, before (to fill the caches)
# and after.
my $blocks16 = "SELECT string_agg(md5(pgrac_fetch_block(1, 'cf_t', b)), ',' ORDER BY b)
                  FROM generate_series(0, 15) b";
my $before16 = $n2->safe_psql('postgres', $blocks16);
$n1->safe_psql('postgres', 'VACUUM FULL pg_class; CHECKPOINT');
is($n2->safe_psql('postgres', $blocks16), $before16,
	'after VACUUM FULL pg_class on the server, its new pg_class is read');

# The server locks the relation without waiting: a DDL lock there makes the
# fetch fail at once with a retryable error.
my $ddl = $n1->background_psql('postgres');
$ddl->query_safe('BEGIN; LOCK TABLE cf_t IN ACCESS EXCLUSIVE MODE');
($rc, $out, $err) = $n2->psql('postgres', "SET statement_timeout = '20s'; SELECT pgrac_fetch_block(1, 'cf_t', 0)");
like($err, qr/relation $oid of database $db is locked by a concurrent DDL on node 1, retry/,
	'ACCESS EXCLUSIVE on the server: refused at once');
$ddl->query_safe('ROLLBACK');
$ddl->quit;

# TRUNCATE in a loop on the server while node 2 fetches the relation's
# current storage: every answer is a page or a clear error, nothing crashes.
my $script = PostgreSQL::Test::Utils::tempdir() . '/churn.sql';
PostgreSQL::Test::Utils::append_to_file($script,
	"TRUNCATE cf_churn;\nINSERT INTO cf_churn SELECT generate_series(1, 2000);\n\\sleep 30 ms\n");
my $churn = IPC::Run::start(
	[ 'pgbench', '-n', '-T', '6', '-c', '1', '-f', $script, '-h', $n1->host, '-p', $n1->port, 'postgres' ],
	'>', \my $churn_out, '2>', \my $churn_err);
my ($pages, $clear, %kinds, @other) = (0, 0);
my $churn_oid = $n1->safe_psql('postgres', "SELECT 'cf_churn'::regclass::oid");
for my $i (1 .. 150)
{
	my $f = $n1->safe_psql('postgres', "SELECT pg_relation_filenode('cf_churn')");
	($rc, $out, $err) = $n2->psql('postgres',
		"SELECT length(pgrac_fetch_block_tag(1, $spc, $db, $f, 'main', 0, $churn_oid))");
	if ($rc == 0 && $out eq '8192') { $pages++ }
	elsif ($err =~ /(locked by a concurrent DDL|but on node 1 its storage is|changed on node 1 while|is empty or was dropped|does not exist on node 1|beyond the end)/)
	{
		$clear++;
		$kinds{$1}++;
	}
	else { push @other, $err }
}
$churn->finish;
note("during TRUNCATEs: $pages pages, $clear clear errors: " . join(", ", map { "$_ $kinds{$_}" } sort keys %kinds));
ok($pages > 0, 'pages were shipped while the relation was truncated over and over');
is(scalar(@other), 0, 'every other answer was a clear error') or diag(join("\n", @other));
is($n1->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'pgrac_ic lms%'"),
	'2', 'the LMS workers are alive after the race');
is($n2->safe_psql('postgres', "SELECT length(pgrac_fetch_block(1, 'cf_t', 0))"),
	'8192', 'and still serve');
unlike(PostgreSQL::Test::Utils::slurp_file($n1->logfile), qr/terminated by signal|PANIC|WARNING:  you don't own a lock/,
	'no crash and no lock bookkeeping warning on the server');

# Files the listener keeps open between the blocks it serves in place
# (src/lms/kept_files.hpp). A kept file still gives the relation's size as it
# is now: VACUUM on the server truncates a relation between two fetches.
sub tag_fetch
{
	my ($rel, $blk) = @_;
	my ($roid, $rfile) = split /\|/, $n1->safe_psql('postgres',
		"SELECT '$rel'::regclass::oid, pg_relation_filenode('$rel')");
	return $n2->psql('postgres',
		"SELECT length(pgrac_fetch_block_tag(1, $spc, $db, $rfile, 'main', $blk, $roid))");
}
$n1->safe_psql('postgres', q{
	CREATE TABLE cf_shrink WITH (autovacuum_enabled = off) AS
		SELECT g, repeat('y', 500) AS pad FROM generate_series(1, 1500) g;
	CREATE TABLE cf_gone AS SELECT g FROM generate_series(1, 1000) g;
});
my $shrink_pages = $n1->safe_psql('postgres', "SELECT pg_relation_size('cf_shrink') / 8192");
($rc, $out, $err) = tag_fetch('cf_shrink', $shrink_pages - 1);
is($out, '8192', "the last of cf_shrink's $shrink_pages blocks is served") or diag($err);
$n1->safe_psql('postgres', 'DELETE FROM cf_shrink WHERE g > 100; VACUUM cf_shrink');
my $shrunk = $n1->safe_psql('postgres', "SELECT pg_relation_size('cf_shrink') / 8192");
ok($shrunk < $shrink_pages, "VACUUM truncated cf_shrink to $shrunk blocks");
($rc, $out, $err) = tag_fetch('cf_shrink', $shrink_pages - 1);
like($err, qr/block \d+ is beyond the end of relation .* on node 1 \($shrunk blocks\)/,
	'after the truncation the kept file reports the new size');
($rc, $out, $err) = tag_fetch('cf_shrink', 0);
is($out, '8192', '... and its first block is still served') or diag($err);

# No file of a dropped relation stays open in the listener once a checkpoint
# has begun, even if no block is requested after it (its space is freed).
($rc, $out, $err) = tag_fetch('cf_gone', 0);
is($out, '8192', 'a block of cf_gone is served (its file is kept open)') or diag($err);
my $gone_path = $n1->safe_psql('postgres', "SELECT pg_relation_filepath('cf_gone')");
my $listener1 = $c->worker_pid(1, 'pgrac_ic listener');
sub held_files
{
	my ($pattern) = @_;
	my @held;
	for my $fd (glob("/proc/$listener1/fd/*"))
	{
		my $to = readlink($fd) // next;
		push @held, $to if $to =~ $pattern;
	}
	return @held;
}
sub held_deleted { return held_files(qr/\Q$gone_path\E.*\(deleted\)/) }
is(scalar(held_files(qr/\Q$gone_path\E$/)), 1, "the listener holds cf_gone's file open");
$n1->safe_psql('postgres', 'DROP TABLE cf_gone; CHECKPOINT');
my @held;
for (1 .. 100)
{
	@held = held_deleted();
	last unless @held;
	select(undef, undef, undef, 0.1);
}
is(scalar(@held), 0, "the listener closed cf_gone's file after DROP TABLE and a checkpoint")
	or diag(join("\n", @held));

# The listener keeps its lock on the database it serves between requests
# (src/lms/held_db_lock.hpp), and gives it up as soon as someone waits for
# it: DROP DATABASE on the server finishes at once while node 2 keeps
# fetching from that database.
$n1->safe_psql('postgres', 'CREATE DATABASE cf_dropme');
$n1->safe_psql('cf_dropme', 'CREATE TABLE d AS SELECT g FROM generate_series(1, 1000) g');
my ($d_db, $d_oid, $d_file) = split /\|/, $n1->safe_psql('cf_dropme',
	"SELECT (SELECT oid FROM pg_database WHERE datname = 'cf_dropme'), 'd'::regclass::oid,
	        pg_relation_filenode('d')");
my $d_fetch = "SELECT length(pgrac_fetch_block_tag(1, $spc, $d_db, $d_file, 'main', 0, $d_oid))";
my $d_held = "SELECT count(*) FROM pg_locks WHERE locktype = 'object' AND database = 0
                AND classid = 'pg_database'::regclass AND objid = $d_db AND pid = $listener1";
is($n2->safe_psql('postgres', $d_fetch), '8192', 'a block of database cf_dropme is served');
# Fetches from node 2 for a while: the lock is held between them, and given up
# 10 ms after the last.
sub fetch_for
{
	my ($seconds) = @_;
	my $script = PostgreSQL::Test::Utils::tempdir() . "/fetch_$d_db.sql";
	PostgreSQL::Test::Utils::append_to_file($script, "$d_fetch;\n") unless -e $script;
	return IPC::Run::start(
		[ 'pgbench', '-n', '-T', $seconds, '-c', '1', '-f', $script, '-h', $n2->host, '-p', $n2->port, 'postgres' ],
		'>', \my $out, '2>', \my $err);
}
sub wait_held
{
	my ($want) = @_;
	for (1 .. 100)
	{
		return 1 if $n1->safe_psql('postgres', $d_held) eq $want;
		select(undef, undef, undef, 0.05);
	}
	return 0;
}
my $fetcher = fetch_for(2);
ok(wait_held('1'), 'while node 2 fetches from cf_dropme, the listener keeps its lock on it');
$fetcher->finish;
ok(wait_held('0'), '... and gives it up once no request comes');

$fetcher = fetch_for(10);
ok(wait_held('1'), 'node 2 fetches again');
my $t0 = time();
($rc, $out, $err) = $n1->psql('postgres', "SET statement_timeout = '9s'; DROP DATABASE cf_dropme");
my $took = time() - $t0;
is($rc, 0, 'DROP DATABASE on the server succeeds while blocks of it are fetched') or diag($err);
ok($took <= 5, "... without waiting for the fetches to stop (${took} s)");
$fetcher->finish;
is($n2->safe_psql('postgres', "SELECT length(pgrac_fetch_block(1, 'cf_t', 0))"),
	'8192', 'and the listener still serves');

# A listener that exits while it holds the lock leaves nothing locked behind
# it: terminated while node 2 fetches, then DROP DATABASE of that database.
$n1->safe_psql('postgres', 'CREATE DATABASE cf_dropme2');
$n1->safe_psql('cf_dropme2', 'CREATE TABLE d AS SELECT g FROM generate_series(1, 1000) g');
($d_db, $d_oid, $d_file) = split /\|/, $n1->safe_psql('cf_dropme2',
	"SELECT (SELECT oid FROM pg_database WHERE datname = 'cf_dropme2'), 'd'::regclass::oid,
	        pg_relation_filenode('d')");
$d_fetch = "SELECT length(pgrac_fetch_block_tag(1, $spc, $d_db, $d_file, 'main', 0, $d_oid))";
$d_held = "SELECT count(*) FROM pg_locks WHERE locktype = 'object' AND database = 0
             AND classid = 'pg_database'::regclass AND objid = $d_db AND pid = $listener1";
$fetcher = fetch_for(5);
my $terminated = wait_held('1') && $n1->safe_psql('postgres',
	"SELECT pg_terminate_backend($listener1) WHERE ($d_held) = 1") eq 't';
$fetcher->finish;
ok($terminated, 'the listener was terminated while it held its lock on cf_dropme2');
ok($c->wait_up(1) && $c->wait_up(2), 'the restarted listener is connected again');
($rc, $out, $err) = $n1->psql('postgres', "SET statement_timeout = '9s'; DROP DATABASE cf_dropme2");
is($rc, 0, 'DROP DATABASE after the exit: the lock went with the process') or diag($err);

$c->stop_all;
done_testing();
