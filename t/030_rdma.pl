
# Two instances at tier2 over a real RDMA device (soft-RoCE rxe0 in the VM of
# tests/rxe/tap_in_vm.sh): the verbs transport carries pings and the RPC bench,
# the views show what runs, a tiny CQ overflows and is survived, and an
# instance killed with SIGKILL comes back and its peer resumes, as on TCP.
#
# Runs only where an RDMA device exists or RXEVM=1, and needs the IP address of
# the RDMA netdev: PGRAC_RDMA_ADDR (default: RXEVM_IPADDR).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PgracCluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my @devices = glob('/sys/class/infiniband/*');
my $addr = $ENV{PGRAC_RDMA_ADDR} // $ENV{RXEVM_IPADDR};
plan skip_all => 'no RDMA device (run tests/rxe/tap_in_vm.sh for the soft-RoCE VM)'
  unless $ENV{RXEVM} || @devices;
plan skip_all => 'set PGRAC_RDMA_ADDR to the IP address of the RDMA netdev' unless $addr;

my $t0 = time;
my $c = PgracCluster->new(
	n => 2,
	tier => 'tier2',
	start => 0,
	conf => <<'EOC');
cluster.rdma_hugepage_size = 2MB
cluster.rdma_numa_auto_bind = on
EOC
# Every instance listens on the RDMA netdev's address (ports differ): rdma_cm
# resolves it to the device.
my $nodes = join(',', map { "$_\@$addr:" . $c->ic_port($_) } 1 .. 2);
$_->append_conf('postgresql.conf', "cluster.nodes = '$nodes'") for $c->nodes;
# The page size each instance's buffer pool gets: 2 MB pages when there are
# enough free (tests/rxe/tap_in_vm.sh reserves 64; each pool takes ~26), 4 kB
# pages and ", fallback" when there are none; between, either.
my ($hp_free) = slurp_file('/proc/meminfo') =~ /^HugePages_Free:\s+(\d+)/m;
$hp_free //= 0;
my $hp_expected =
    $hp_free >= 64 ? qr/^2MB$/
  : $hp_free == 0 ? qr/^none \(4kB pages\), fallback$/
  :                 qr/^(?:2MB|none \(4kB pages\), fallback)$/;
note "free 2 MB hugepages before the start: $hp_free";
$c->start_all;
note sprintf('cluster up after %.1f s', time - $t0);

sub q1 { my ($i, $sql) = @_; return $c->node($i)->safe_psql('postgres', $sql); }

# poll_query_until counts attempts, and one psql costs ~1 s under emulation:
# this one is bounded by wall-clock time.
sub wait_for
{
	my ($i, $sql, $secs) = @_;
	my $deadline = time + ($secs // 60);
	while (time < $deadline)
	{
		return 1 if q1($i, $sql) eq 't';
		sleep 0.3;
	}
	diag("timed out after ${\ ($secs // 60)} s waiting on node $i for: $sql");
	return 0;
}

# What a node's transport has done, for diagnostics.
sub state_of
{
	my ($i) = @_;
	return "node $i: "
	  . q1($i,
		q{SELECT 'verbs sends/recvs ' || verbs_sends || '/' || verbs_recvs || ', cq overflows '
		         || cq_overflow_count || ', cq depth ' || (SELECT cq_depth FROM pg_cluster_rdma_status)
		         || ', reconnects ' || reconnects || ', retransmits ' || retransmits
		    FROM pg_cluster_rdma_counters WHERE peer_node_id IS NULL})
	  . '; peers '
	  . q1($i,
		q{SELECT string_agg(node_id || ':' || state || ':' || coalesce(last_error, ''), ' ')
		    FROM pg_cluster_ic_peers WHERE NOT is_self});
}

sub wait_for_log
{
	my ($i, $re, $offset, $secs) = @_;
	my $deadline = time + ($secs // 60);
	while (time < $deadline)
	{
		my $log = slurp_file($c->node($i)->logfile, $offset);
		return 1 if $log =~ $re;
		sleep 0.5;
	}
	diag("node $i log since offset $offset:\n" . slurp_file($c->node($i)->logfile, $offset));
	return 0;
}

sub ping_ok
{
	my ($i, $j, $name) = @_;
	my ($ret, $out, $err) = $c->node($i)->psql('postgres', "SELECT pgrac_ic_ping($j)");
	ok($ret == 0 && $out > 0, $name)
	  or diag("ping $i -> $j: $err\n" . state_of(1) . "\n" . state_of(2));
}

# ---- 1. The verbs transport runs (no TCP fallback), and the view says how
for my $i (1, 2)
{
	my $st = q1($i,
		q{SELECT tier || '|' || coalesce(tier_reason, '') FROM pg_cluster_rdma_status});
	like($st, qr/^tier2\|/, "node $i runs tier2")
	  or BAIL_OUT("node $i does not run the verbs transport: $st");
	unlike($st, qr/TCP/, "node $i did not fall back to TCP");
	my $dev = q1($i,
		q{SELECT hca_name || '|' || link_layer || '|' || (mtu > 0) || '|' || coalesce(xrc, '')
		         || '|' || (cq_depth >= 4096) FROM pg_cluster_rdma_status});
	like($dev, qr/^\w+\|Ethernet\|true\|off: device has no XRC, using SRQ\|true$/,
		"node $i: status shows the device, RoCE, MTU, SRQ instead of XRC, CQ")
	  or diag($dev);
	like(q1($i, 'SELECT hugepage_size FROM pg_cluster_rdma_status'),
		$hp_expected, "node $i: the buffer pool's page size is what $hp_free free hugepages give");
	# cluster.rdma_numa_auto_bind is on: bound to the HCA's node, or (rxe, a
	# software device) not bound because it has none.
	my ($numa_node, $binding) = split /\|/,
	  q1($i, q{SELECT coalesce(numa_node::text, '') || '|' || coalesce(numa_binding, 'NULL')
	             FROM pg_cluster_rdma_status}), 2;
	is($binding,
		$numa_node eq '' ? 'not bound: device has no NUMA node' : "bound to node $numa_node",
		"node $i: NUMA binding as the device's node allows");
	note "node $i status: "
	  . q1($i,
		q{SELECT hca_name, hca_vendor, link_layer, port_state, mtu, xrc, hugepage_size, numa_node,
		         numa_binding, cq_depth FROM pg_cluster_rdma_status});
	is(q1($i, q{SELECT string_agg(DISTINCT tier, ',') FROM pg_cluster_ic_peers}),
		'tier2', "node $i: peers view says tier2");
}

# ---- 2. Traffic: pings, the RPC bench, and the counters prove it went over verbs
for my $i (1, 2)
{
	for my $j (1, 2)
	{
		cmp_ok(q1($i, "SELECT pgrac_ic_ping($j)"), '>', 0, "node $i pings node $j");
	}
}

my $verbs_sql = q{SELECT verbs_sends || '|' || verbs_recvs FROM pg_cluster_rdma_counters
                   WHERE peer_node_id IS NULL};
my $direct_sql = q{SELECT direct_rpcs_sent FROM pg_cluster_rdma_counters WHERE peer_node_id = 2};
my ($sends0, $recvs0) = split /\|/, q1(1, $verbs_sql);
cmp_ok($sends0, '>', 0, 'node 1 has sent frames through the verbs transport');
my ($sends2_0, $recvs2_0) = split /\|/, q1(2, $verbs_sql);
my $direct0 = q1(1, $direct_sql);
my $writes2_0 = q1(2, q{SELECT rdma_writes FROM pg_cluster_rdma_counters WHERE peer_node_id IS NULL});
my $zc_sql = q{SELECT zero_copy_sends FROM pg_cluster_rdma_counters WHERE peer_node_id IS NULL};
my $zc2_0 = q1(2, $zc_sql);

# The bench, on the default path: each RPC on the backend's own queue pair
# to node 2's listener (requester lanes); then, for the counters of node 1's
# listener and for docs/performance.md, through both listeners.
sub bench
{
	my ($size, $n, $set) = @_;
	my $r = q1(1,
		($set // '') . "SELECT iterations_done || '|' || round(p50_us::numeric, 1) || '|'
		        || round(p99_us::numeric, 1) || '|' || round(ops_per_sec::numeric)
		        FROM pgrac_ic_bench(2, $size, $n)");
	return split /\|/, $r;
}
for my $b ([ 64, 500 ], [ 8192, 200 ], [ 65536, 20 ])
{
	my ($size, $n) = @$b;
	my ($done, $p50, $p99, $ops) = bench($size, $n);
	is($done, $n, "bench $size B x $n over verbs");
	note "bench tier2 $size B x $n: p50 $p50 us, p99 $p99 us, $ops ops/s";
}
cmp_ok(q1(1, $direct_sql) - $direct0, '>=', 720, 'node 1: the bench took its requester lane');
my ($sends2_1, $recvs2_1) = split /\|/, q1(2, $verbs_sql);
cmp_ok($recvs2_1 - $recvs2_0, '>=', 720, 'node 2: its listener received them through verbs');
# Replies of 1 KiB and more (cluster.rdma_write_min) went into the backend's
# landing slots by RDMA WRITE: the 8 KiB and 64 KiB ones, 220 at least.
my $writes_sql = q{SELECT rdma_writes FROM pg_cluster_rdma_counters WHERE peer_node_id IS NULL};
cmp_ok(q1(2, $writes_sql) - $writes2_0, '>=', 220,
	'node 2: the 8 KiB and 64 KiB replies were RDMA WRITEs into the lane\'s landing slots');
# No copy by the transport: under secure (the default) each reply is sealed
# straight into its send slot, under crc and mac its payload is read in place
# from the reply buffer when it is 2 KiB or more (docs/rdma.md, copies per path).
my $protection0 = q1(2, 'SHOW cluster.wire_protection');
cmp_ok(q1(2, $zc_sql) - $zc2_0, '>=', $protection0 eq 'secure' ? 720 : 220,
	"node 2: its replies left without a copy into a send slot ($protection0)");
my $off = 'SET cluster.requester_lanes = off; ';
my ($done_off, $p50_off, $p99_off, $ops_off) = bench(64, 500, $off);
is($done_off, 500, 'bench 64 B x 500 through both listeners');
note "bench tier2 64 B x 500, requester lanes off: p50 $p50_off us, p99 $p99_off us, $ops_off ops/s";
# For docs/performance.md: the same 64 B bench with node 2's listener handing
# the ping to an LMS worker (the path before serving in place), in this boot.
if ($ENV{PGRAC_RXE_PERF})
{
	ok($c->set_serve_in_place(2, 'off', 1), 'node 2: serve_in_place off');
	my (undef, $p50, $p99, $ops) = bench(64, 500, $off);
	note "bench tier2 64 B x 500, requester lanes off, serve_in_place off: p50 $p50 us, p99 $p99 us, $ops ops/s";
	ok($c->set_serve_in_place(2, 'on', 1), 'node 2: serve_in_place on again');
}

my ($sends1, $recvs1) = split /\|/, q1(1, $verbs_sql);
cmp_ok($sends1 - $sends0, '>=', 500, 'node 1: verbs send completions grew by the bench through the listeners');
cmp_ok($recvs1 - $recvs0, '>=', 500, 'node 1: verbs receive completions grew by it');
# No MR cache lookups under mac or secure (the default): every frame is sealed
# into a new buffer and copied into a pre-registered slot, so the hit rate is
# NULL, not 0 (docs/rdma.md). Under crc (PGRAC_TEST_CONF) node 1 registered
# its reply buffers when it served node 2's pings: section 6 checks that case.
my $protection = q1(1, 'SHOW cluster.wire_protection');
is( q1(1,
		q{SELECT CASE WHEN mr_cache_hit_rate IS NULL THEN 'NULL' ELSE 'lookups' END || '|'
		         || cq_overflow_count FROM pg_cluster_rdma_counters WHERE peer_node_id IS NULL}),
	($protection eq 'crc' ? 'lookups' : 'NULL') . '|0',
	"node 1 ($protection): MR cache lookups only under crc, no CQ overflow yet");
is(q1(2, q{SELECT rpcs_served >= 720 FROM pg_cluster_rdma_counters WHERE peer_node_id = 1}),
	't', 'node 2 served the RPCs');

# ---- 3. SIGKILL node 2 and restart it: node 1 resumes, as on TCP
sub kill_instance
{
	my ($i) = @_;
	my $node = $c->node($i);
	my ($pid) = split /\n/, slurp_file($node->data_dir . '/postmaster.pid');
	my @children = split /\s+/, `pgrep -P $pid` // '';
	kill 'KILL', $pid, grep { /^\d+$/ } @children;
	$node->{_pid} = undef;
	unlink $node->data_dir . '/postmaster.pid';
}

kill_instance(2);
ok(wait_for(1, q{SELECT state = 'DOWN' FROM pg_cluster_ic_peers WHERE node_id = 2}, 30),
	'node 1 sees the killed node 2 DOWN');
my $started = 0;
for (1 .. 10)
{
	last if ($started = $c->node(2)->start(fail_ok => 1));
	sleep 1;
}
ok($started, 'killed instance restarts');
my $all_up = q{SELECT count(*) = 2 FROM pg_cluster_ic_peers WHERE state = 'UP'};
ok(wait_for(1, $all_up) && wait_for(2, $all_up), 'both nodes see each other UP again');
ping_ok(1, 2, 'node 1 pings the restarted node 2');
ping_ok(2, 1, 'restarted node 2 pings node 1');
is(q1(2, 'SELECT tier FROM pg_cluster_rdma_status'), 'tier2', 'node 2 runs tier2 again');

# ---- 4. Node 2 with a 4-entry CQ: bursts overflow it; counted and survived
$c->node(2)->stop('fast');
$c->node(2)->append_conf('postgresql.conf', 'cluster.rdma_cq_depth = 4');
$c->node(2)->start;
ok(wait_for(1, $all_up) && wait_for(2, $all_up), 'node 2 with a tiny CQ is UP');
note 'node 2 with a tiny CQ: ' . state_of(2);
my $notes = 200;
q1(1, "SELECT count(pgrac_ic_broadcast('\\x01')) FROM generate_series(1, $notes)");
q1(2, "SELECT count(pgrac_ic_broadcast('\\x02')) FROM generate_series(1, $notes)");
ok( wait_for(2,
		q{SELECT cq_overflow_count > 0 FROM pg_cluster_rdma_counters WHERE peer_node_id IS NULL}),
	'node 2 counted a CQ overflow');
note 'after the overflow: ' . state_of(2);
ok(wait_for(2, "SELECT notes_recv = $notes FROM pg_cluster_ic_peers WHERE node_id = 1"),
	"node 2 received all $notes notes of node 1 exactly once");
ok(wait_for(1, "SELECT notes_recv = $notes FROM pg_cluster_ic_peers WHERE node_id = 2"),
	"node 1 received all $notes notes of node 2 exactly once");
ok(wait_for(1, $all_up) && wait_for(2, $all_up), 'both nodes UP after the overflow');
ping_ok(1, 2, 'ping 1 -> 2 works after the overflow');
ping_ok(2, 1, 'ping 2 -> 1 works after the overflow');
is(q1(1, 'SELECT iterations_done FROM pgrac_ic_bench(2, 8192, 50)'),
	'50', 'bench 8 KiB works after the overflow');
is(q1(2, q{SELECT tier FROM pg_cluster_rdma_status}), 'tier2', 'node 2 still at tier2');

# ---- 5. The verbs transport cannot be made (rxe has no XRC, use_xrc = on)
# With cluster.interconnect_strict the listener refuses to start, clearly.
$c->node(2)->stop('fast');
$c->node(2)->append_conf('postgresql.conf',
	"cluster.rdma_use_xrc = on\ncluster.interconnect_strict = on");
my $offset = -s $c->node(2)->logfile;
$c->node(2)->start;
ok(wait_for_log(2, qr/pgrac_ic listener cannot start: the verbs transport on \w+ port \d+ cannot be created: cluster.rdma_use_xrc=on .*interconnect_strict is on, so tier2 does not fall back to TCP/, $offset),
	'strict: the listener reports why it cannot start');
is(q1(2, 'SELECT tier || listener_ready FROM pg_cluster_rdma_status'),
	'tier2false', 'strict: no listener runs, and nothing pretends to');
# Without strict: TCP, a WARNING, and the view says tier3 and why.
$c->node(2)->stop('fast');
$c->node(2)->append_conf('postgresql.conf', 'cluster.interconnect_strict = off');
$offset = -s $c->node(2)->logfile;
$c->node(2)->start;
ok(wait_for_log(2, qr/WARNING:  the verbs transport on \w+ port \d+ cannot be created \(cluster.rdma_use_xrc=on[^)]*\); running at Tier 3 \(TCP\)/, $offset),
	'not strict: WARNING and fallback to TCP');
ok(wait_for(2, q{SELECT listener_ready FROM pg_cluster_rdma_status}, 30),
	'not strict: the listener runs');
like(q1(2, q{SELECT tier || ': ' || tier_reason FROM pg_cluster_rdma_status}),
	qr/^tier3: the verbs transport .* running at Tier 3 \(TCP\)$/,
	'not strict: the status view says tier3 and why');

# ---- 6. Zero-copy replies: under cluster.wire_protection = crc a reply served
# in place leaves node 2's registered reply buffer without a copy (the MR
# cache's hits), and every reply is still its request's echo (the bench
# checks each one), up to the largest message.
$_->stop('fast') for $c->nodes;
$c->node(2)->append_conf('postgresql.conf', 'cluster.rdma_use_xrc = auto');
$_->append_conf('postgresql.conf', 'cluster.wire_protection = crc') for $c->nodes;
$_->start for $c->nodes;
ok(wait_for(1, $all_up) && wait_for(2, $all_up), 'both nodes UP under crc');
is(q1(2, 'SELECT tier FROM pg_cluster_rdma_status'), 'tier2', 'node 2 at tier2 again');
my $lanes0 = q1(1, $direct_sql);
for my $b ([ 8192, 100 ], [ 65536, 10 ], [ 2048, 100 ], [ 64, 100 ])
{
	my ($size, $n) = @$b;
	my ($done) = bench($size, $n);
	is($done, $n, "crc: bench $size B x $n, every reply its request's echo");
}
cmp_ok(q1(1, $direct_sql) - $lanes0, '>=', 310, 'crc: the benches took the requester lane');
my $hits_sql = q{SELECT coalesce(mr_cache_hit_rate, 0) FROM pg_cluster_rdma_counters
                  WHERE peer_node_id IS NULL};
cmp_ok(q1(2, $hits_sql), '>', 0.9,
	'node 2: replies of 2 KiB and more left its registered buffers (MR cache hit rate)');

$c->stop_all;
note sprintf('test took %.1f s', time - $t0);
done_testing();
