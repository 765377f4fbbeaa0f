# Prometheus metrics through the real exporter: Debian's prometheus-postgres-exporter,
# with monitoring/postgres_exporter_queries.yaml, reads each instance of a live
# three-instance cluster as a pg_monitor role; /metrics is scraped on 127.0.0.1 and
# every metric family is checked against the views (types, labels, values), healthy,
# with a peer down, and with a node fallen back to TCP. monitoring/alerts.yaml is
# checked by promtool, unit-tested, and evaluated on those scrapes; every query of
# monitoring/grafana_pgrac_ic.json must be valid PromQL that returns data from them.
use strict;
use warnings;

use FindBin;
use IO::Socket::INET;
use JSON::PP;
use lib $FindBin::RealBin;
use PgracCluster;
use PgracExporter;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = "$FindBin::RealBin/..";
my $queries = "$root/monitoring/postgres_exporter_queries.yaml";
my $rules = "$root/monitoring/alerts.yaml";
my $dashboard = "$root/monitoring/grafana_pgrac_ic.json";

# scripts/setup installs both; a missing tool fails under CI rather than skipping.
my @missing = grep { !-x $_ } ($PgracExporter::BINARY, $PgracExporter::PROMTOOL);
if (@missing)
{
	my $why = "not installed: @missing (scripts/setup installs prometheus-postgres-exporter "
	  . "and prometheus)";
	plan skip_all => $why unless ($ENV{CI} // '') eq 'true';
	fail($why);
	done_testing();
	exit;
}

# The whole test is bounded: a hung scrape or exporter must not hang the suite.
my $budget = 400;
local $SIG{ALRM} = sub { BAIL_OUT("t/040 did not finish in $budget s") };
alarm $budget;

# Every family the queries file makes, and its type; the verbs family only exists at
# tier1 and tier2.
my %families = (
	(
		map { ("pg_cluster_rdma_status_$_" => 'gauge') }
		  qw(info fallback hugepage_fallback listener_ready strict lms_workers epoch
		  verify_issues start_time_seconds reply_pool_bytes reply_pool_in_use_bytes
		  reply_pool_peak_bytes)
	),
	pg_cluster_rdma_status_reply_pool_refusals_total => 'counter',
	(
		map { ("pg_cluster_rdma_counters_${_}_total" => 'counter') }
		  qw(msgs_sent msgs_recv bytes_sent bytes_recv rpcs_sent rpcs_served retransmits
		  reconnects duplicates_dropped backpressure_stalls served_in_place in_place_handoffs
		  sealed_in_place
		  direct_rpcs_sent direct_rpcs_served)
	),
	pg_cluster_rdma_counters_requester_lanes => 'gauge',
	(map { ("pg_cluster_rdma_latency_$_" => 'gauge') } qw(p50_seconds p99_seconds p999_seconds)),
	pg_cluster_rdma_latency_samples_total => 'counter',
	pg_cluster_rdma_errors_total => 'counter',
	(map { ("pg_cluster_rdma_errors_recent_$_" => 'gauge') } qw(entries newest_timestamp_seconds)),
	(
		map { ("pg_cluster_ic_peers_$_" => 'gauge') }
		  qw(up state_seconds paths_up paths epoch rtt_seconds last_heard_seconds queued_msgs
		  queued_bytes unacked_msgs peer_timeout_seconds)
	),
	(
		map { ("pg_cluster_ic_peers_${_}_total" => 'counter') }
		  qw(notes_recv session_resets config_refusals duplicate_refusals)
	),
	pg_cluster_ic_peer_state => 'gauge',
	(map { ("pg_cluster_ges_locks_$_" => 'gauge') } qw(requests oldest_seconds)),
	(
		map { ("pg_cluster_membership_$_" => 'gauge') }
		  qw(is_member is_fenced epoch members quorum lease_valid lease_remaining_seconds
		  accepted_epoch)
	),
	(
		map { ("pg_cluster_membership_${_}_total" => 'counter') }
		  qw(fences stale_epoch_messages epoch_requests)
	),
	(
		map { ("pg_cluster_membership_history_$_" => 'gauge') }
		  qw(events last_timestamp_seconds last_epoch)
	),
);
my %verbs_families = (
	(map { ("pg_cluster_rdma_verbs_$_" => 'counter') } qw(sends_total recvs_total rdma_writes_total zero_copy_sends_total cq_overflows_total)),
	(map { ("pg_cluster_rdma_verbs_$_" => 'gauge') } qw(mr_cache_hit_rate cq_depth mtu)),
);
# Not a number where the view has NULL: this instance's own RTT and last contact.
# And a peer's timing before its first heartbeat.
my %nan_ok = map { $_ => 1 }
  qw(pg_cluster_ic_peers_rtt_seconds pg_cluster_ic_peers_last_heard_seconds
  pg_cluster_ic_peers_peer_timeout_seconds);

my $c = PgracCluster->new(n => 3, tier => 'tier3');
my ($n1, $n2, $n3) = map { $c->node($_) } 1 .. 3;
my $verbs = $c->tier eq 'tier1' || $c->tier eq 'tier2';

# The exporter's role, as docs/monitoring.md makes it: pg_monitor, short RPC waits.
for my $node ($c->nodes)
{
	$node->safe_psql('postgres', q{CREATE ROLE pgrac_exporter LOGIN IN ROLE pg_monitor;
		ALTER ROLE pgrac_exporter SET cluster.rpc_timeout = '2s'});
}

# ---- traffic, an error, a held lock and a waiter, for the metrics to show
for my $i (1 .. 3)
{
	cmp_ok($c->node($i)->safe_psql('postgres', "SELECT pgrac_ic_ping($_)"), '>', 0,
		"node $i pings node $_")
	  for 1 .. 3;
}
is($n1->safe_psql('postgres', 'SELECT iterations_done FROM pgrac_ic_bench(2, 64, 500)'),
	'500', '500 RPCs from node 1 to node 2');
# Errors: garbage on node 1's interconnect port (TCP only), as in t/011.
my $garbage_types = q{('malformed_frame', 'bad_checksum', 'handshake_failed', 'oversized_message')};
my $garbage = 0;
SKIP:
{
	skip 'garbage is written to a TCP port', 1
	  unless $c->on_tier('tier3', 'garbage is written to the TCP interconnect port');
	my $sock = IO::Socket::INET->new(
		PeerAddr => '127.0.0.1',
		PeerPort => $c->ic_port(1),
		Proto => 'tcp',
		Timeout => 5) or die "connect: $!";
	print $sock join('', map { chr(int(rand(256))) } 1 .. 4096);
	$sock->recv(my $buf, 100);
	close $sock;
	ok( $n1->poll_query_until('postgres',
			"SELECT sum(total) > 0 FROM pg_cluster_rdma_error_totals WHERE type IN $garbage_types"),
		'node 1 counts the garbage on its interconnect port as an error');
	$garbage = 1;
}
my $holder = $n2->background_psql('postgres', on_error_stop => 0);
is($holder->query_safe("SELECT pgrac_ges_lock('mon:held')"), 't', 'node 2 holds mon:held');
my $waiter = $n3->background_psql('postgres', on_error_stop => 0);
$waiter->query_until(qr/waiting/,
	"\\echo waiting\nSELECT pgrac_ges_lock('mon:held', 'EX', 120000);\n");
ok( $n1->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_cluster_ges_locks WHERE state = 'waiting'}),
	'node 3 waits for mon:held');

# ---- the exporters: one per instance, as on one host each; node 2's is given the
# queries file in the environment, the others on the command line
my %exporter = map {
	$_ => PgracExporter->start(
		node => $c->node($_),
		name => "node$_",
		queries => $queries,
		queries_in_env => $_ == 2,
		user => 'pgrac_exporter')
} 1 .. 3;
pass('the three exporters answer on /metrics');

# What the views say just before and just after a scrape bracket what it shows.
sub sql_map
{
	my ($node, $query) = @_;
	return { map { split /\|/, $_, 2 } split /\n/, $node->safe_psql('postgres', $query) };
}
my $counters_q = q{SELECT peer_node_id || ':' || c, v FROM pg_cluster_rdma_counters,
	LATERAL (VALUES ('rpcs_sent', rpcs_sent), ('rpcs_served', rpcs_served),
	                ('bytes_sent', bytes_sent), ('msgs_recv', msgs_recv),
	                ('latency_samples', latency_samples)) x(c, v)
	WHERE peer_node_id IS NOT NULL};
my $errors_q = q{SELECT type, total FROM pg_cluster_rdma_error_totals};
my $recent_q = q{SELECT s, count(e.severity) FROM unnest(ARRAY['INFO', 'WARNING', 'ERROR']) s
	LEFT JOIN pg_cluster_rdma_errors e ON e.severity = s GROUP BY s};

sub bracketed
{
	my ($got, $lo, $hi, $what) = @_;
	ok(defined $got && $got >= $lo && $got <= $hi,
		"$what: " . ($got // 'missing') . " within the view's $lo .. $hi");
}

my (%before, %after, %scrape);
for my $i (1 .. 3)
{
	my $node = $c->node($i);
	$before{$i} = { counters => sql_map($node, $counters_q), errors => sql_map($node, $errors_q),
		recent => sql_map($node, $recent_q) };
	$scrape{$i} = $exporter{$i}->scrape;
	$after{$i} = { counters => sql_map($node, $counters_q), errors => sql_map($node, $errors_q),
		recent => sql_map($node, $recent_q) };
}
my $epoch = $n1->safe_psql('postgres', 'SELECT epoch FROM pg_cluster_membership');
my $now = time;

# ---- every family, typed, with the node label, sane on every instance
for my $i (1 .. 3)
{
	my $s = $scrape{$i};
	is($s->value('pg_up'), 1, "node $i: the exporter reaches PostgreSQL (pg_up 1)");
	is($s->value('pg_exporter_last_scrape_error'), 0,
		"node $i: every query of the scrape succeeded (pg_exporter_last_scrape_error 0)");
	my @load = $s->samples('pg_exporter_user_queries_load_error');
	ok(@load && !(grep { $_->[2] != 0 } @load), "node $i: the queries file loaded");
	for my $f (sort keys %families)
	{
		is($s->type($f), $families{$f}, "node $i: $f is a $families{$f}");
	}
	for my $f (sort keys %verbs_families)
	{
		is($s->type($f), $verbs ? $verbs_families{$f} : undef,
			"node $i: $f " . ($verbs ? "is a $verbs_families{$f}" : 'is absent at ' . $c->tier));
	}
	my @ours = grep { /^pg_cluster_/ } $s->families;
	my @unknown = grep { !$families{$_} && !$verbs_families{$_} } @ours;
	is("@unknown", '', "node $i: no pg_cluster_ family beyond those of the queries file");
	my @samples = grep { $_->[0] =~ /^pg_cluster_/ } $s->samples;
	my @empty = grep { my $f = $_; !grep { $_->[0] eq $f } @samples } @ours;
	is("@empty", '', "node $i: every family has samples");
	my @other_node = grep { ($_->[1]{node} // '') ne $i } @samples;
	is(scalar(@other_node), 0, "node $i: every sample carries node=\"$i\"");
	my @bad = grep {
		my ($name, $l, $v) = @$_;
		# The MR cache's hit rate is NaN until its first lookup (at tier1 and
		# tier2 under secure there is none: docs/rdma.md).
		$v eq 'NaN'
		  ? !(($nan_ok{$name} && $l->{is_self} eq 'true')
			|| $name eq 'pg_cluster_rdma_verbs_mr_cache_hit_rate')
		  : $v !~ /^[0-9]/;
	} @samples;
	is(join(' ', map { "$_->[0]=$_->[2]" } @bad), '',
		"node $i: every value is a number >= 0 (NaN only for this instance's own RTT and contact, and an MR cache never looked up)");
}

# ---- status
my $s1 = $scrape{1};
for my $i (1 .. 3)
{
	my $s = $scrape{$i};
	is($s->value('pg_cluster_rdma_status_info', tier => $c->tier, tier_requested => $c->tier),
		1, "node $i: info says it runs " . $c->tier . ' as asked');
	is($s->value('pg_cluster_rdma_status_fallback'), 0, "node $i: no fallback");
	is($s->value('pg_cluster_rdma_status_listener_ready'), 1, "node $i: the listener is ready");
	is($s->value('pg_cluster_rdma_status_lms_workers'), 2, "node $i: 2 LMS workers");
	is($s->value('pg_cluster_rdma_status_epoch'), $epoch, "node $i: status epoch $epoch");
	is($s->value('pg_cluster_rdma_status_reply_pool_bytes'),
		16 * 1024 * 1024, "node $i: a reply pool of 16 MB (the default)");
	is($s->value('pg_cluster_rdma_status_reply_pool_refusals_total'),
		0, "node $i: the reply pool never ran short");
}
my $start = $s1->value('pg_cluster_rdma_status_start_time_seconds');
ok($start > $now - 600 && $start <= $now, "node 1 started in the last 10 minutes ($start)");

# ---- peers: every node UP from every node, with RTTs and both paths
for my $i (1 .. 3)
{
	my $s = $scrape{$i};
	for my $j (1 .. 3)
	{
		is($s->value('pg_cluster_ic_peers_up', peer => $j), 1, "node $i sees node $j UP");
		next if $i == $j;
		is($s->value('pg_cluster_ic_peer_state', peer => $j, state => 'UP'),
			1, "node $i: peer_state of node $j is UP");
		my @states = $s->matching('pg_cluster_ic_peer_state', peer => $j);
		is(scalar(@states) . ':' . (eval { my $t = 0; $t += $_->[2] for @states; $t }),
			'5:1', "node $i: node $j is in exactly one of the 5 states");
	}
	is($s->value('pg_cluster_ic_peers_up', peer => $i, is_self => 'true'),
		1, "node $i: its own row is is_self");
}
for my $j (2, 3)
{
	my $rtt = $s1->value('pg_cluster_ic_peers_rtt_seconds', peer => $j);
	ok($rtt > 0 && $rtt < 1, "node 1: RTT to node $j in seconds ($rtt)");
	is( $s1->value('pg_cluster_ic_peers_paths_up', peer => $j) . '/'
		  . $s1->value('pg_cluster_ic_peers_paths', peer => $j),
		'2/2', "node 1: both paths to node $j up");
	is($s1->value('pg_cluster_ic_peers_epoch', peer => $j), $epoch, "node 1: node $j sends epoch $epoch");
	my $heard = $s1->value('pg_cluster_ic_peers_last_heard_seconds', peer => $j);
	ok($heard >= 0 && $heard < 5, "node 1 heard from node $j within 5 s ($heard)");
}

# ---- counters and latency, bracketed by the view
for my $c_ (
	[ 1, 2, 'rpcs_sent', 500 ],
	[ 1, 2, 'bytes_sent', 500 * 64 ],
	[ 1, 2, 'msgs_recv', 500 ],
	[ 2, 1, 'rpcs_served', 500 ],
	[ 1, 3, 'rpcs_sent', 1 ])
{
	my ($i, $j, $col, $least) = @$c_;
	my $got = $scrape{$i}->value("pg_cluster_rdma_counters_${col}_total", peer => $j);
	bracketed($got, $before{$i}{counters}{"$j:$col"}, $after{$i}{counters}{"$j:$col"},
		"node $i: ${col}_total to/from node $j");
	cmp_ok($got // 0, '>=', $least, "node $i: ${col}_total for node $j is at least $least");
}
is(scalar($s1->samples('pg_cluster_rdma_counters_rpcs_sent_total')), 3,
	'node 1: counters for 3 peers (itself included), no total row');
bracketed(
	$s1->value('pg_cluster_rdma_latency_samples_total', peer => 2),
	$before{1}{counters}{'2:latency_samples'},
	$after{1}{counters}{'2:latency_samples'},
	'node 1: latency samples_total for node 2');
for my $peer (2, 'all')
{
	my ($p50, $p99, $p999) =
	  map { $s1->value("pg_cluster_rdma_latency_${_}_seconds", peer => $peer) } qw(p50 p99 p999);
	ok( $p50 > 0 && $p50 < 1 && $p99 >= $p50 && $p999 >= $p99,
		"node 1: latency to $peer in seconds, ordered: p50 $p50 <= p99 $p99 <= p999 $p999");
}

# ---- errors: every type, equal to the view; the ring by severity
my $types = $before{1}{errors};
is(scalar($s1->samples('pg_cluster_rdma_errors_total')), scalar(keys %$types),
	'node 1: one errors_total series per error type of the view (' . scalar(keys %$types) . ')');
my @off = grep {
	my $got = $s1->value('pg_cluster_rdma_errors_total', type => $_);
	!defined $got || $got < $types->{$_} || $got > $after{1}{errors}{$_};
} sort keys %$types;
is("@off", '', 'node 1: every errors_total equals the view (within the scrape)');
if ($garbage)
{
	my $n = 0;
	$n += $s1->value('pg_cluster_rdma_errors_total', type => $_) // 0
	  for $garbage_types =~ /'(\w+)'/g;
	cmp_ok($n, '>=', 1, "node 1: the garbage is counted ($n)");
}
for my $sev (qw(INFO WARNING ERROR))
{
	bracketed($s1->value('pg_cluster_rdma_errors_recent_entries', severity => $sev),
		$before{1}{recent}{$sev}, $after{1}{recent}{$sev}, "node 1: recent $sev errors");
}

# ---- global locks: the same cluster-wide numbers from every instance
for my $i (1 .. 3)
{
	my $s = $scrape{$i};
	is($s->value('pg_cluster_ges_locks_requests', state => 'waiting'), 1, "node $i: one waiter");
	cmp_ok($s->value('pg_cluster_ges_locks_requests', state => 'granted'), '>=', 1,
		"node $i: mon:held is granted");
	is($s->value('pg_cluster_ges_locks_requests', state => 'converting'), 0, "node $i: no conversion");
	my $oldest = $s->value('pg_cluster_ges_locks_oldest_seconds', state => 'waiting');
	ok($oldest > 0 && $oldest < 120, "node $i: the waiter has waited $oldest s");
}

# ---- membership
for my $i (1 .. 3)
{
	my $s = $scrape{$i};
	is( join(',', map { $s->value("pg_cluster_membership_$_") }
			qw(is_member is_fenced members quorum lease_valid epoch fences_total)),
		"1,0,3,2,1,$epoch,0",
		"node $i: member of a view of 3 (quorum 2), lease valid, epoch $epoch, never fenced");
	cmp_ok($s->value('pg_cluster_membership_lease_remaining_seconds'), '>', 0,
		"node $i: lease time left");
}
is($s1->value('pg_cluster_membership_history_last_epoch', event => 'committed'),
	$epoch, "node 1: history's newest committed view is epoch $epoch");
cmp_ok($s1->value('pg_cluster_membership_history_events', event => 'committed'), '>=', 1,
	'node 1: committed views in the history');
is($s1->value('pg_cluster_membership_history_events', event => 'fenced'), 0, 'node 1: no fence');
my $changed = $s1->value('pg_cluster_membership_history_last_timestamp_seconds', event => 'committed');
ok($changed > $now - 600 && $changed <= $now + 1, "node 1: the last view was committed just now ($changed)");

# ---- promtool: the rules, their unit tests, the lint of our families
my ($ok, $out) = PgracExporter::promtool('', 'check', 'rules', $rules);
ok($ok, 'promtool check rules monitoring/alerts.yaml') or diag($out);
($ok, $out) = PgracExporter::promtool('', 'test', 'rules', "$root/monitoring/alerts_test.yaml");
ok($ok, 'promtool test rules monitoring/alerts_test.yaml') or diag($out);
my $ours = join('', map { "$_\n" } grep { /^(# (HELP|TYPE) )?pg_cluster_/ } split /\n/, $s1->text);
($ok, $out) = PgracExporter::promtool($ours, 'check', 'metrics');
ok($ok, 'promtool check metrics: the pg_cluster_ families follow the naming rules') or diag($out);

my $dir = $PostgreSQL::Test::Utils::tmp_check;
($ok, $out) = PgracExporter::alerts_firing_on(
	dir => $dir,
	name => 'alerts_healthy',
	rules => $rules,
	minutes => 3,
	scrapes => { map { ("node$_" => $scrape{$_}) } 1 .. 3 },
	expected => []);
ok($ok, 'no alert fires on the healthy cluster') or diag($out);

# ---- a peer down: node 3 stops
is($holder->query_safe('SELECT pgrac_ges_unlock_all()'), '1', 'node 2 releases mon:held');
$waiter->quit;
$holder->quit;
my $errors_up = 0;
$errors_up += $_ for values %{ sql_map($n1, $errors_q) };
$n3->stop('immediate');
ok($c->node(1)->poll_query_until('postgres',
		q{SELECT state <> 'UP' FROM pg_cluster_ic_peers WHERE node_id = 3}),
	'node 1 sees node 3 go');
ok($c->wait_member(1, 2), 'node 1 is a member of a view of 2');
ok($c->wait_member(2, 2), 'node 2 is a member of a view of 2');
my $epoch2 = $n1->safe_psql('postgres', 'SELECT epoch FROM pg_cluster_membership');
my %down = map { $_ => $exporter{$_}->scrape } 1 .. 3;
my $d1 = $down{1};
is($d1->value('pg_exporter_last_scrape_error'), 0, 'node 1: every query works with a peer down');
is($d1->value('pg_cluster_ic_peers_up', peer => 3), 0, 'node 1: node 3 is not UP');
is($d1->value('pg_cluster_ic_peer_state', peer => 3, state => 'UP'), 0, 'node 1: peer_state UP is 0');
my $in = 0;
$in += $_->[2] for $d1->matching('pg_cluster_ic_peer_state', peer => 3);
is($in, 1, 'node 1: node 3 is in one (other) state');
is($d1->value('pg_cluster_ic_peers_up', peer => 2), 1, 'node 1: node 2 is still UP');
is( join(',', map { $d1->value("pg_cluster_membership_$_") } qw(is_member members epoch)),
	"1,2,$epoch2", "node 1: a member of the view of 2, epoch $epoch2");
cmp_ok($epoch2, '>', $epoch, 'the epoch moved on');
is($d1->value('pg_cluster_membership_history_last_epoch', event => 'committed'),
	$epoch2, "node 1: history's newest committed view is epoch $epoch2");
my $errors_down = 0;
$errors_down += $_->[2] for $d1->samples('pg_cluster_rdma_errors_total');
cmp_ok($errors_down, '>', $errors_up, "node 1: errors_total grew ($errors_up -> $errors_down)");
cmp_ok(
	$d1->value('pg_cluster_rdma_errors_total', type => 'peer_down'),
	'>', $s1->value('pg_cluster_rdma_errors_total', type => 'peer_down'),
	'node 1: node 3 going is counted as peer_down');
is($down{3}->value('pg_up'), 0, "node 3's exporter: pg_up 0, its PostgreSQL is gone");
is(scalar(grep { /^pg_cluster_/ } $down{3}->families), 0, "node 3's exporter: no pg_cluster_ metrics");

($ok, $out) = PgracExporter::alerts_firing_on(
	dir => $dir,
	name => 'alerts_peer_down',
	rules => $rules,
	minutes => 3,
	scrapes => { map { ("node$_" => $down{$_}) } 1 .. 3 },
	expected => [ map { [ 'PgracPeerNotUp', { node => $_, peer => 3 } ] } 1, 2 ]);
ok($ok, 'PgracPeerNotUp fires for node 3 on nodes 1 and 2, and nothing else') or diag($out);

# ---- a fallback: node 3 comes back at auto, and this host has no RDMA device
my %fallback;
SKIP:
{
	skip 'an RDMA device is here: auto would not fall back', 9
	  if !$c->on_tier('tier3', 'the fallback case is a TCP one') || glob('/sys/class/infiniband/*');
	$n3->append_conf('postgresql.conf', 'cluster.interconnect_tier = auto');
	$n3->start;
	$c->wait_all_up;
	%fallback = map { $_ => $exporter{$_}->scrape } 1 .. 3;
	my $f3 = $fallback{3};
	is($f3->value('pg_up'), 1, "node 3's exporter reaches PostgreSQL again");
	is($f3->value('pg_cluster_rdma_status_fallback'), 1, 'node 3: fallback 1');
	is($f3->value('pg_cluster_rdma_status_info', tier => 'tier3', tier_requested => 'auto'),
		1, 'node 3: info says tier3, auto asked');
	is($f3->value('pg_cluster_ic_peers_up', peer => 1), 1, 'node 3 sees node 1 UP');
	is($fallback{1}->value('pg_cluster_ic_peers_up', peer => 3), 1, 'node 1 sees node 3 UP again');
	cmp_ok($fallback{1}->value('pg_cluster_ic_peers_session_resets_total', peer => 3),
		'>=', 1, 'node 1: the session with the restarted node 3 was reset');
	is($fallback{1}->value('pg_cluster_membership_members'), 3, 'node 1: 3 members again');
	cmp_ok($fallback{1}->value('pg_cluster_ic_peers_state_seconds', peer => 3), '<',
		$fallback{1}->value('pg_cluster_ic_peers_state_seconds', peer => 2),
		'node 1: node 3 has been UP for less time than node 2');
	($ok, $out) = PgracExporter::alerts_firing_on(
		dir => $dir,
		name => 'alerts_fallback',
		rules => $rules,
		minutes => 3,
		scrapes => { map { ("node$_" => $fallback{$_}) } 1 .. 3 },
		expected => [ [ 'PgracTierFallback', { node => 3 } ] ]);
	ok($ok, 'PgracTierFallback fires for node 3, and nothing else') or diag($out);
}

# ---- the dashboard and the rules name only metrics that exist, and every dashboard
# query is PromQL that returns data from the healthy scrapes
my %seen = map { $_ => 1 } map { $_->families } values %scrape, values %down, values %fallback;
my $dash = decode_json(slurp_file($dashboard));
my @exprs;
my $walk;
$walk = sub {
	my ($x) = @_;
	if (ref $x eq 'HASH')
	{
		push @exprs, $x->{expr} if defined $x->{expr} && !ref $x->{expr};
		$walk->($_) for values %$x;
	}
	elsif (ref $x eq 'ARRAY') { $walk->($_) for @$x; }
};
$walk->($dash);
cmp_ok(scalar(@exprs), '>=', 15, 'the dashboard has ' . scalar(@exprs) . ' queries');
my %named = map { $_ => 1 } map { /\b(pg_cluster_\w+)/g } @exprs, rule_exprs($rules);
my @unknown = grep { !$seen{$_} } sort keys %named;
is("@unknown", '', 'every pg_cluster_ metric the dashboard and the rules name is exported');
my @panel_rules = map {
	(my $e = $exprs[$_]) =~ s/\$__rate_interval/1m/g;
	$e =~ s/\$instance/.*/g;
	{ record => "pgrac_dashboard_query_$_", expr => $e }
} 0 .. $#exprs;
my $panel_file = "$dir/dashboard_queries.json";
open my $fh, '>', $panel_file or die "cannot write $panel_file: $!";
print $fh encode_json({ groups => [ { name => 'dashboard', rules => \@panel_rules } ] });
close $fh;
($ok, $out) = PgracExporter::promtool('', 'check', 'rules', $panel_file);
ok($ok, "every dashboard query is valid PromQL (promtool check rules $panel_file)") or diag($out);
# At least one series from every query, fed with the healthy scrapes and then the
# peer-down ones (the error-rate panels show only rates > 0).
($ok, $out) = dashboard_has_data($panel_file, scalar(@exprs),
	{ map { ("node$_" => $scrape{$_}) } 1 .. 3 },
	{ map { ("node$_" => $down{$_}) } 1 .. 3 });
ok($ok, 'every dashboard query returns data from the scrapes') or diag($out);

$_->stop for values %exporter;
$c->stop_all;
alarm 0;
done_testing();

# The expr: of every rule in a rules file (one line, or a block of deeper lines).
sub rule_exprs
{
	my ($file) = @_;
	my (@exprs, $indent);
	for my $line (split /\n/, slurp_file($file))
	{
		if (defined $indent && $line =~ /^(\s*)\S/ && length($1) > $indent)
		{
			$exprs[-1] .= "$line\n";
			next;
		}
		undef $indent;
		next unless $line =~ /^(\s*)(?:- )?expr:\s*(.*)$/;
		my ($lead, $rest) = ($1, $2);
		push @exprs, $rest eq '|' ? '' : $rest;
		$indent = length $lead if $rest eq '|';
	}
	return @exprs;
}

# promtool test rules over the dashboard's queries (recording rules in $rule_file):
# each scrape a constant series, the healthy ones for a minute, then the peer-down ones;
# at 75 s every query has at least one series.
sub dashboard_has_data
{
	my ($rule_file, $nqueries, $healthy, $down) = @_;
	my %values;
	for my $phase (0, 1)
	{
		my $v = PgracExporter::series_values(($healthy, $down)[$phase]);
		$values{$_}[$phase] = $v->{$_} for keys %$v;
	}
	# 0 s .. 45 s healthy, 60 s .. 105 s peer down; '_': no sample.
	my @series = map {
		my $v = $values{$_};
		+{ series => $_, values => join(' ', map { $v->[$_] // '_' } 0, 0, 0, 0, 1, 1, 1, 1) }
	} sort keys %values;
	my @tests = map {
		{
			expr => "clamp_max(count(pgrac_dashboard_query_$_), 1)",
			eval_time => '75s',
			exp_samples => [ { labels => '{}', value => 1 } ]
		}
	} 0 .. $nqueries - 1;
	my $test = {
		rule_files => [$rule_file],
		evaluation_interval => '15s',
		tests => [ { interval => '15s', input_series => \@series, promql_expr_test => \@tests } ]
	};
	my $file = "$PostgreSQL::Test::Utils::tmp_check/dashboard_test.json";
	open my $fh, '>', $file or die "cannot write $file: $!";
	print $fh JSON::PP->new->canonical->encode($test);
	close $fh;
	return PgracExporter::promtool('', 'test', 'rules', $file);
}
