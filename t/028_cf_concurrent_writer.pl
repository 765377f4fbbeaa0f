# Cache Fusion under a concurrent writer: hot heap pages on node 2 are updated
# continuously (pgbench, two clients, data checksums on) while node 1 fetches
# them tens of thousands of times, and every image shipped is checked for being
# one consistent state of its page. The LMS copies a page under its share
# content lock; an image copied while a writer holds the exclusive lock (adding
# a tuple version and pointing the old one at it) is torn, and fails one of the
# checks below. Without the lock around the copy in src/lms/block_service.cpp
# this test finds tens of torn images in a run.
#
# What "consistent" means for this table (no index, so an update is HOT while
# the page has room; fillfactor 10, so each of the 4 rows starts on its own
# page, and a page is pruned as soon as it has little room): each version of
# row id is (id int4, v int8, pad = repeat(md5(v::text), 16)), 556 bytes; an
# update of version v writes version v + 1 and points the old version's t_ctid
# at it. So in every consistent image: the header is sane, the LSN in the image
# is the LSN shipped with it (both read under the lock), a page's LSN never
# goes back from one fetch to the next, every normal line pointer holds a
# whole tuple whose data decodes, every redirect points at a tuple, every
# t_ctid into the same page points at version v + 1 of the same row, and no
# row has two versions that are both the latest.
#
# The page checksum is not checked: in shared buffers PostgreSQL sets it only
# on the copy it writes out (PageSetChecksumCopy), and the LMS ships the
# buffer as it is (src/lms/block_service.cpp), so pd_checksum is whatever the
# page had when it was last read from storage. Checksums are on because they
# change how hint bits are set (MarkBufferDirtyHint WAL-logs a full page
# image), which the writer and the server's readers then do.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use IPC::Run;
use PgracCluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $rows = 4;
my $c = PgracCluster->new(
	n => 2,
	tier => 'tier3',
	initdb_extra => ['--data-checksums'],
	# No checkpoint while the probe runs: with checksums on, the first hint
	# bit set on a page after a checkpoint WAL-logs the page and sets its LSN
	# under a share lock, which would make the LSN check below racy.
	conf => "checkpoint_timeout = 1h\nmax_wal_size = 10GB\n",
	before_copy => sub {
		my $node = shift;
		$node->safe_psql('postgres', qq{
			CREATE EXTENSION pageinspect;
			CREATE TABLE hot (id int4, v int8, pad text) WITH (autovacuum_enabled = off, fillfactor = 10);
			INSERT INTO hot SELECT g, 0, repeat(md5('0'), 16) FROM generate_series(1, $rows) g;
		});
	});
my ($n1, $n2) = map { $c->node($_) } 1 .. 2;

is($n2->safe_psql('postgres', 'SHOW data_checksums'), 'on', 'data checksums are on');

# The checks, on node 1 (the requester). cf_le: a little-endian integer of up
# to 8 bytes. cf_check: NULL for a consistent image, else what is wrong.
$n1->safe_psql('postgres', q{
CREATE FUNCTION cf_le(b bytea) RETURNS int8 LANGUAGE sql IMMUTABLE STRICT AS $$
  SELECT ('x' || lpad(string_agg(lpad(to_hex(get_byte(b, i)), 2, '0'), '' ORDER BY i DESC), 16, '0'))::bit(64)::int8
    FROM generate_series(0, length(b) - 1) i
$$;
CREATE FUNCTION cf_check(img bytea, shipped pg_lsn, blk int8, OUT problem text, OUT tuples int)
LANGUAGE plpgsql AS $$
DECLARE h record; nlp int;
BEGIN
  tuples := 0;
  IF length(img) <> 8192 THEN problem := 'image of ' || length(img) || ' bytes'; RETURN; END IF;
  h := page_header(img);
  IF h.pagesize <> 8192 OR h.version <> 4 OR h.special <> 8192 OR h.lower < 24
     OR h.lower > h.upper OR h.upper > h.special THEN
    problem := format('header: lower %s upper %s special %s pagesize %s version %s',
                      h.lower, h.upper, h.special, h.pagesize, h.version);
    RETURN;
  END IF;
  IF h.lsn <> shipped THEN
    problem := format('the page LSN is %s, shipped with LSN %s', h.lsn, shipped); RETURN;
  END IF;
  nlp := (h.lower - 24) / 4;
  WITH it AS (
    SELECT lp, lp_off, lp_flags, lp_len, t_hoff, t_data,
           (t_ctid::text::point)[0]::int AS ctid_blk, (t_ctid::text::point)[1]::int AS ctid_off
      FROM heap_page_items(img)),
  tup AS (
    SELECT it.*,
           CASE WHEN length(t_data) = 532 THEN cf_le(substring(t_data FROM 1 FOR 4)) END AS id,
           CASE WHEN length(t_data) = 532 THEN cf_le(substring(t_data FROM 9 FOR 8)) END AS v
      FROM it WHERE lp_flags = 1),
  bad AS (
    SELECT 1 AS ord, lp, format('line pointer %s: offset %s length %s t_hoff %s data %s bytes (upper %s)',
                                lp, lp_off, lp_len, t_hoff, length(t_data), h.upper) AS why
      FROM tup
     WHERE lp_off < h.upper OR lp_off + lp_len > h.special OR lp_len <> 556
        OR t_hoff IS DISTINCT FROM 24 OR length(t_data) IS DISTINCT FROM 532
    UNION ALL
    SELECT 2, lp, format('tuple %s: row %s version %s does not decode', lp, id, v)
      FROM tup
     WHERE length(t_data) = 532
       AND (id NOT BETWEEN 1 AND 4 OR v < 0
            OR substring(t_data FROM 21) <> convert_to(repeat(md5(v::text), 16), 'UTF8'))
    UNION ALL
    SELECT 3, r.lp, format('redirect %s points at line pointer %s of %s, which is not a tuple',
                           r.lp, r.lp_off, nlp)
      FROM it r
     WHERE r.lp_flags = 2 AND NOT EXISTS (SELECT 1 FROM tup t WHERE t.lp = r.lp_off)
    UNION ALL
    SELECT 4, t.lp, format('tuple %s (row %s version %s) points at (%s,%s) of %s line pointers, '
                           'which holds %s', t.lp, t.id, t.v, blk, t.ctid_off, nlp,
                           coalesce('row ' || n.id || ' version ' || n.v, 'no tuple'))
      FROM tup t LEFT JOIN tup n ON n.lp = t.ctid_off
     WHERE t.ctid_blk = blk AND t.ctid_off <> t.lp AND t.v IS NOT NULL
       AND (n.lp IS NULL OR n.id IS DISTINCT FROM t.id OR n.v IS DISTINCT FROM t.v + 1)
    UNION ALL
    SELECT 5, min(lp), format('row %s has %s versions on the page that are the latest (t_ctid to '
                              'themselves): %s', id, count(*), string_agg(v::text, ', ' ORDER BY v))
      FROM tup
     WHERE ctid_blk = blk AND ctid_off = lp AND id IS NOT NULL
     GROUP BY id HAVING count(*) > 1)
  SELECT (SELECT why FROM bad ORDER BY ord, lp LIMIT 1), (SELECT count(*) FROM tup)
    INTO problem, tuples;
EXCEPTION WHEN OTHERS THEN
  problem := 'pageinspect: ' || SQLERRM;
END $$;
-- Fetches the pages of hot from node 2 and checks every image, until n of
-- them showed a change since the page's last image (or max_s seconds). Every 20th round fetches every block; the others
-- fetch only the blocks whose LSN changed in the last sweep: the hot pages.
-- (The rows stay on their pages while pruning keeps room there; when it
-- cannot, because the page is pinned at that moment, an update moves the row
-- to another block, which the next sweep finds.)
CREATE FUNCTION cf_probe(n int, max_s float8, OUT images int, OUT bad int, OUT first_bad text,
                         OUT lsn_changes int, OUT tuples_checked int8)
LANGUAGE plpgsql AS $$
DECLARE r record; chk record; why text; prev pg_lsn; prevs pg_lsn[] := '{}'; round int := 0;
        hot int8[] := '{}'; swept int8[]; b int8;
        stop timestamptz := clock_timestamp() + make_interval(secs => max_s);
BEGIN
  images := 0; bad := 0; lsn_changes := 0; tuples_checked := 0;
  WHILE lsn_changes < n AND clock_timestamp() < stop LOOP
    IF round % 20 = 0 THEN swept := '{}'; END IF;
    FOR r IN SELECT f.blkno, f.lsn, f.page
               FROM unnest(CASE WHEN round % 20 = 0 THEN '{-1}'::int8[] ELSE hot END) h(blk),
                    LATERAL pgrac_fetch_blocks(2, 'hot', greatest(h.blk, 0),
                                               CASE WHEN h.blk < 0 THEN 1000 ELSE 1 END) f
    LOOP
      images := images + 1;
      SELECT * INTO chk FROM cf_check(r.page, r.lsn, r.blkno);
      why := chk.problem;
      tuples_checked := tuples_checked + chk.tuples;
      prev := coalesce(prevs[r.blkno + 1], '0/0');
      IF why IS NULL AND r.lsn < prev THEN
        why := format('the LSN went back from %s to %s', prev, r.lsn);
      END IF;
      IF r.lsn <> prev THEN
        lsn_changes := lsn_changes + 1;
        IF round % 20 = 0 THEN swept := swept || r.blkno; END IF;
      END IF;
      prevs[r.blkno + 1] := greatest(prev, r.lsn);
      IF why IS NOT NULL THEN
        bad := bad + 1;
        first_bad := coalesce(first_bad, format('image %s, block %s: %s', images, r.blkno, why));
      END IF;
    END LOOP;
    IF round % 20 = 0 THEN hot := swept; END IF;
    round := round + 1;
  END LOOP;
END $$;
});

# The checks accept the page as it is now.
is($n1->safe_psql('postgres',
		"SELECT coalesce((cf_check(page, lsn, blkno)).problem, 'consistent') FROM pgrac_fetch_blocks(2, 'hot', 0, 1)"),
	'consistent', 'the idle page as fetched passes the checks');

# The writer: two clients updating random rows of the hot page on node 2,
# and now and then a VACUUM, which tells the free space map where the pruned
# room is, so that a row moved off a full page (pruning needs the page
# unpinned) comes back to the first blocks instead of growing the table.
# (Without truncating: that would take a lock which a fetch does not wait for.)
my $script = "$PostgreSQL::Test::Utils::tmp_check/cf_writer.sql";
PostgreSQL::Test::Utils::append_to_file($script,
	"\\set id random(1, $rows)\n"
	  . "UPDATE hot SET v = v + 1, pad = repeat(md5((v + 1)::text), 16) WHERE id = :id;\n");
my $vacuum = "$PostgreSQL::Test::Utils::tmp_check/cf_vacuum.sql";
PostgreSQL::Test::Utils::append_to_file($vacuum, "VACUUM (TRUNCATE false) hot;\n");
my ($wout, $werr) = ('', '');
my $writer = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '2', '-j', '2', '-T', '150', '-f', "$script\@200", '-f', "$vacuum\@1",
	  '-h', $n2->host, '-p', $n2->port, 'postgres' ],
	'<', \undef, '>', \$wout, '2>', \$werr,
	IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
ok($n2->poll_query_until('postgres', 'SELECT sum(v) > 200 FROM hot'), 'the writer is updating the hot page');

my $res = $n1->safe_psql('postgres',
	q{SELECT images || '|' || bad || '|' || coalesce(first_bad, '') || '|' || lsn_changes || '|' || tuples_checked
	    FROM cf_probe(15000, 60)});
my ($images, $bad, $first_bad, $lsn_changes, $tuples) = split /\|/, $res, 5;
my $versions = $n2->safe_psql('postgres', 'SELECT sum(v) FROM hot');
$writer->kill_kill;
my $blocks = $n2->safe_psql('postgres', "SELECT pg_relation_size('hot') / 8192");
note("$images images checked, $blocks blocks at the end, $lsn_changes LSN changes seen, "
	  . "$tuples tuples checked, $versions updates");

# Under TCG (the soft-RoCE VM) a minute of probing yields about a fifth of the
# host's images: fewer are required there, enough that the writer ran.
my $min_images = $ENV{RXEVM} ? 1000 : 5000;
cmp_ok($lsn_changes, '>=', $min_images,
	"node 1 checked at least $min_images images that changed since the page's last one (the writer ran)");
cmp_ok($tuples, '>=', $min_images, 'the images held tuples, and each was checked');
is($bad, '0', 'every image fetched is a consistent state of the page')
  or diag("$bad torn images; the first: $first_bad");

# The page the writer left is whole on node 2 too (pageinspect there).
is( $n2->safe_psql('postgres',
		"SELECT count(*) FROM heap_page_items(get_raw_page('hot', 0)) WHERE lp_flags = 1 AND lp_len <> 556"),
	'0', "node 2's own view of the page: every tuple whole");

$c->stop_all;
done_testing();
