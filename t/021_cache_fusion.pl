# Cache Fusion block shipping over tier3 with three instances made from one
# data directory that pgbench filled before the copy: pages changed on one
# instance only are shipped byte for byte (as get_raw_page sees them there),
# also when they are not in its buffer pool; batches; clear errors.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PgracCluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $c = PgracCluster->new(
	n => 3,
	tier => 'tier3',
	before_copy => sub {
		my $node = shift;
		$node->command_ok(
			[ 'pgbench', '-i', '-s', '1', '-h', $node->host, '-p', $node->port, 'postgres' ],
			'pgbench -i on node 1 before the copy');
		$node->safe_psql('postgres',
			'CREATE EXTENSION pageinspect; CREATE TABLE dropme AS SELECT g FROM generate_series(1, 5000) g');
	});
my ($n1, $n2, $n3) = map { $c->node($_) } 1 .. 3;

my $md5_local = sub {
	my ($node, $blk) = @_;
	return $node->safe_psql('postgres', "SELECT md5(get_raw_page('pgbench_accounts', $blk))");
};

# Change rows on node 1 only (block 0 holds aid 1..61), then read them once so
# that hint bits are set before anyone compares bytes.
$n1->safe_psql('postgres', 'UPDATE pgbench_accounts SET abalance = abalance + 7 WHERE aid <= 50');
$n1->safe_psql('postgres', 'SELECT sum(abalance) FROM pgbench_accounts WHERE aid <= 100');

my $fetched = $n2->safe_psql('postgres', "SELECT md5(pgrac_fetch_block(1, 'pgbench_accounts', 0))");
is($fetched, $md5_local->($n1, 0), 'block 0 fetched by node 2 from node 1 equals get_raw_page on node 1');
isnt($fetched, $md5_local->($n2, 0), "... and differs from node 2's own copy");
is( $n2->safe_psql('postgres',
		"SELECT length(pgrac_fetch_block(1, 'pgbench_accounts', 0, 'main'))"),
	'8192', 'a block is 8 KiB');
is( $n3->safe_psql('postgres',
		"SELECT md5(pgrac_fetch_block_tag(1, t.reltablespace_eff, d.oid, pg_relation_filenode('pgbench_accounts'), 'main', 0))
		   FROM (SELECT CASE WHEN reltablespace = 0 THEN (SELECT oid FROM pg_tablespace WHERE spcname = 'pg_default') ELSE reltablespace END AS reltablespace_eff
		           FROM pg_class WHERE relname = 'pgbench_accounts') t,
		        pg_database d WHERE d.datname = current_database()"),
	$md5_local->($n1, 0), 'the same block named by its BufferTag');

# A batch: 20 blocks in ceil(20/7) round trips, with their LSNs.
my $expect = $n1->safe_psql('postgres',
	"SELECT string_agg(md5(get_raw_page('pgbench_accounts', g::int)), ',' ORDER BY g) FROM generate_series(0, 19) g");
is( $n2->safe_psql('postgres',
		"SELECT string_agg(md5(page), ',' ORDER BY blkno) FROM pgrac_fetch_blocks(1, 'pgbench_accounts', 0, 20)"),
	$expect, 'a batch of 20 blocks equals get_raw_page on node 1');
is( $n2->safe_psql('postgres',
		"SELECT lsn FROM pgrac_fetch_blocks(1, 'pgbench_accounts', 0, 1)"),
	$n1->safe_psql('postgres', "SELECT lsn FROM page_header(get_raw_page('pgbench_accounts', 0))"),
	'the LSN shipped with the block is the page LSN on node 1');
my $nblocks = $n1->safe_psql('postgres', "SELECT pg_relation_size('pgbench_accounts') / 8192");
is( $n3->safe_psql('postgres',
		"SELECT count(*) || ':' || max(blkno) FROM pgrac_fetch_blocks(1, 'pgbench_accounts', $nblocks - 3, 10)"),
	'3:' . ($nblocks - 1), 'a batch stops at the end of the relation');

# Blocks that are not in the server's buffer pool: restart node 1 (a fast
# stop checkpoints the change), change a far block again, fetch before node 1
# itself reads anything else.
$n1->restart;
ok($c->wait_up($_), "node $_ sees all nodes UP again") for 1 .. 3;
my $far = $nblocks - 10;
my $fetched_far = $n3->safe_psql('postgres', "SELECT md5(pgrac_fetch_block(1, 'pgbench_accounts', $far))");
is($fetched_far, $md5_local->($n1, $far), "block $far, read from storage by node 1's LMS, equals get_raw_page there");
$fetched = $n3->safe_psql('postgres', "SELECT md5(pgrac_fetch_block(1, 'pgbench_accounts', 0))");
is($fetched, $md5_local->($n1, 0), 'the changed block 0 after the restart equals node 1\'s');
isnt($fetched, $md5_local->($n3, 0), "... and differs from node 3's copy");

# Errors: past the end, a relation dropped on the server, an unknown relation.
my ($rc, $out, $err) = $n2->psql('postgres',
	"SELECT pgrac_fetch_block(1, 'pgbench_accounts', $nblocks + 100)");
like($err, qr/beyond the end of relation .* \($nblocks blocks\)/, 'block past the end: clear error');
$n1->safe_psql('postgres', 'DROP TABLE dropme');
($rc, $out, $err) = $n2->psql('postgres', "SELECT pgrac_fetch_block(1, 'dropme', 0)");
like($err, qr/relation \d+ does not exist in database \d+ on node 1/,
	'relation dropped on the server: refused by its catalog there');
($rc, $out, $err) = $n2->psql('postgres',
	"SELECT pgrac_fetch_block_tag(1, 1663, 5, 4000000000, 'main', 0)");
like($err, qr/no relation of this database has storage 1663\/5\/4000000000/, 'unknown relation: clear error');
($rc, $out, $err) = $n2->psql('postgres', "SELECT pgrac_fetch_block(1, 'pgbench_accounts', 0, 'nosuchfork')");
like($err, qr/invalid fork name/, 'bad fork name');
# After the errors the LMS still serves, and nothing stayed pinned on node 1.
# Through the listeners (a requester lane takes no reply pool chunks).
is( $n2->safe_psql('postgres',
		"SET cluster.requester_lanes = off; SELECT count(*) FROM pgrac_fetch_blocks(1, 'pgbench_accounts', 0, 50)"),
	'50', 'node 1 still serves after the errors');
$n1->safe_psql('postgres', 'VACUUM FREEZE pgbench_accounts');
is( $n1->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'pgrac_ic lms%'"),
	'2', 'the LMS workers are alive (no buffer left pinned: VACUUM FREEZE finished)');

# Reply space comes from the shared reply pool while a fetch is in flight,
# and goes back after it: also when the requester is terminated mid-fetch.
is( $n2->safe_psql('postgres',
		'SELECT reply_pool_in_use_bytes || \':\' || (reply_pool_peak_bytes >= 7 * 8192)
		        || \':\' || reply_pool_refusals FROM pg_cluster_rdma_status'),
	'0:true:0', 'a batch took 7 chunks of the reply pool, and every chunk came back');
# Node 1's listener serves blocks that are in its buffer pool where the
# request arrives; a block it would have to read goes to an LMS worker.
my $in_place = sub {
	return $n1->safe_psql('postgres',
		'SELECT served_in_place || \':\' || in_place_handoffs FROM pg_cluster_rdma_counters WHERE peer_node_id = 2');
};
my $sealed = sub {
	return $n1->safe_psql('postgres',
		'SELECT sealed_in_place FROM pg_cluster_rdma_counters WHERE peer_node_id = 2');
};
my ($served0, $handoffs0) = split /:/, $in_place->();
my $sealed0 = $sealed->();
$n2->safe_psql('postgres', "SELECT pgrac_fetch_block(1, 'pgbench_accounts', 0)");
my ($served1, $handoffs1) = split /:/, $in_place->();
is($served1 - $served0, 1, 'a block in the buffer pool is served in place by the listener');
is($handoffs1, $handoffs0, '... with no handoff to an LMS worker');
# Under secure (the default) on the backend's requester lane, the cipher
# reads the page in the buffer pool: no copy before it (docs/rdma.md).
is($sealed->() - $sealed0, 1, '... sealed while it was read, with no copy before the cipher');
# Sealed that way, a batch of 7 and single blocks are still the bytes and LSN
# get_raw_page and page_header see on node 1 (the LSN is sealed apart).
my ($served_b0) = split /:/, $in_place->();
my $sealed_b0 = $sealed->();
is( $n2->safe_psql('postgres',
		"SELECT string_agg(md5(page) || '/' || lsn, ',' ORDER BY blkno) FROM pgrac_fetch_blocks(1, 'pgbench_accounts', 0, 7)"),
	$n1->safe_psql('postgres',
		"SELECT string_agg(md5(get_raw_page('pgbench_accounts', g::int)) || '/' || (page_header(get_raw_page('pgbench_accounts', g::int))).lsn, ',' ORDER BY g) FROM generate_series(0, 6) g"),
	'blocks sealed from the buffer pool equal get_raw_page on node 1, LSNs too');
# A block that is not a buffer pool hit (or not free to share-lock) sends the
# batch to an LMS worker, which copies: every reply served in place is sealed.
my ($served_b1) = split /:/, $in_place->();
is($sealed->() - $sealed_b0, $served_b1 - $served_b0,
	'... the batch sealed from the pool if the listener served it in place');
# cluster.serve_in_place = off: every request goes straight to an LMS worker.
ok($c->set_serve_in_place(1, 'off', 2), 'serve_in_place off on node 1');
my $counts_off = $in_place->();
$n2->safe_psql('postgres', "SELECT pgrac_fetch_block(1, 'pgbench_accounts', 0)");
is($in_place->(), $counts_off,
	'with serve_in_place off, a block in the buffer pool goes straight to an LMS worker');
ok($c->set_serve_in_place(1, 'on', 2), 'serve_in_place on again');
# With the LMS workers frozen, only a block that is not in the buffer pool
# waits: restart node 1 to empty it.
$n1->restart;
ok($c->wait_up($_), "node $_ sees all nodes UP after node 1's restart") for 1 .. 3;
# The restart's GES replay reaches node 1's LMS workers first: once GES answers
# everywhere their inboxes are empty, so the fetch below is taken in place
# (and handed on), not queued behind replay traffic for a frozen worker.
$c->wait_ges_ready;
my @lms1 = split /\n/, $n1->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type LIKE 'pgrac_ic lms%'");
kill 'STOP', @lms1;
my $fetcher = $n2->background_psql('postgres', on_error_stop => 0);
my $fetcher_pid = $fetcher->query_safe('SELECT pg_backend_pid()');
$fetcher->query_until(qr/started/,
	"SET cluster.requester_lanes = off;\n\\echo started\nSELECT count(*) FROM pgrac_fetch_blocks(1, 'pgbench_accounts', 0, 7);\n");
ok( $n1->poll_query_until('postgres',
		'SELECT in_place_handoffs >= 1 FROM pg_cluster_rdma_counters WHERE peer_node_id = 2'),
	'a block not in the buffer pool is handed to an LMS worker');
ok( $n2->poll_query_until('postgres',
		'SELECT reply_pool_in_use_bytes > 0 FROM pg_cluster_rdma_status'),
	'a fetch waiting on a frozen server holds reply pool chunks');
$n2->safe_psql('postgres', "SELECT pg_terminate_backend($fetcher_pid)");
ok( $n2->poll_query_until('postgres',
		'SELECT reply_pool_in_use_bytes = 0 FROM pg_cluster_rdma_status'),
	'the terminated requester returned its chunks');
kill 'CONT', @lms1;
eval { $fetcher->quit; };    # its session was terminated: psql is gone
is($n2->safe_psql('postgres', "SELECT length(pgrac_fetch_block(1, 'pgbench_accounts', 0))"),
	'8192', 'node 1 serves again after its LMS workers resume');

# Privileges: not for PUBLIC.
$n2->safe_psql('postgres', 'CREATE ROLE cf_nobody LOGIN');
($rc, $out, $err) = $n2->psql('postgres',
	"SET ROLE cf_nobody; SELECT pgrac_fetch_block(1, 'pgbench_accounts', 0)");
like($err, qr/permission denied for function pgrac_fetch_block/, 'PUBLIC may not fetch blocks');

# A role allowed to call the functions still needs SELECT on the relation, may
# not bypass row-level security, and may not name blocks by BufferTag.
$n2->safe_psql('postgres', q{
	CREATE ROLE cf_exec LOGIN;
	GRANT EXECUTE ON FUNCTION pgrac_fetch_block, pgrac_fetch_blocks, pgrac_fetch_block_tag TO cf_exec;
	CREATE TABLE cf_rls AS SELECT g FROM generate_series(1, 10) g;
	ALTER TABLE cf_rls ENABLE ROW LEVEL SECURITY;
	CREATE POLICY cf_none ON cf_rls USING (false);
	GRANT SELECT ON cf_rls TO cf_exec;
});
($rc, $out, $err) = $n2->psql('postgres',
	"SET ROLE cf_exec; SELECT pgrac_fetch_block(1, 'pgbench_accounts', 0)");
like($err, qr/permission denied for table pgbench_accounts/,
	'EXECUTE without SELECT: permission denied for the table');
($rc, $out, $err) = $n2->psql('postgres',
	"SET ROLE cf_exec; SELECT count(*) FROM pgrac_fetch_blocks(1, 'pgbench_accounts', 0, 3)");
like($err, qr/permission denied for table pgbench_accounts/, '... also for a batch');
($rc, $out, $err) = $n2->psql('postgres',
	"SET ROLE cf_exec; SELECT pgrac_fetch_block(1, 'cf_rls', 0)");
like($err, qr/cannot fetch blocks of relation "cf_rls": row-level security/,
	'a relation with row-level security for the caller is refused');
($rc, $out, $err) = $n2->psql('postgres',
	"SET ROLE cf_exec; SELECT pgrac_fetch_block_tag(1, 1663, 5, 16397, 'main', 0)");
like($err, qr/permission denied to fetch blocks by BufferTag/,
	'fetch by BufferTag needs superuser');
$n2->safe_psql('postgres', 'GRANT SELECT ON pgbench_accounts TO cf_exec');
is( $n2->safe_psql('postgres',
		"SET ROLE cf_exec; SELECT length(pgrac_fetch_block(1, 'pgbench_accounts', 0))"),
	'8192', 'with SELECT granted the role fetches the block');

# A dead peer: a clear error, bounded in time.
$n3->stop('immediate');
ok($c->wait_peer_state(2, 3, 'DOWN'), 'node 2 sees node 3 DOWN');
($rc, $out, $err) = $n2->psql('postgres', "SELECT pgrac_fetch_block(3, 'pgbench_accounts', 0)");
like($err, qr/block fetch to node 3 failed: peer unreachable/, 'fetch from a dead node fails clearly');

$n1->stop('fast');
$n2->stop('fast');
done_testing();
