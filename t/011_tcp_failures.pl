
# Failures: an instance killed and restarted under a stream of RPCs, a stopped
# (SIGSTOP) listener, (tier3 only) garbage written to the interconnect port,
# and resends forced by a receiver that refuses frames it cannot hold.
# Every RPC succeeds exactly once or fails with a clear error; none hangs.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use IO::Socket::INET;
use IPC::Run;
use PgracCluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $c = PgracCluster->new(n => 3, tier => 'tier3');
# The RPC timeout in force (PGRAC_TEST_CONF may raise it, as in the VM).
my $rpc_timeout_ms = $c->node(1)->safe_psql('postgres',
	q{SELECT setting FROM pg_settings WHERE name = 'cluster.rpc_timeout'});

# A stream of exactly-once probes (numbered stream $stream) from node $i to
# @targets for $seconds, or until the test sets sequence stream_stop_$stream
# on node $i to 2 (stop_stream: a sequence, because its value is seen at once
# inside the stream's transaction), recorded in table outcomes on node $i.
# Runs in the background.
sub start_stream
{
	my ($i, $stream, $seconds, @targets) = @_;
	my $node = $c->node($i);
	my $targets = join(',', @targets);
	$node->safe_psql('postgres',
		"CREATE TABLE IF NOT EXISTS outcomes(target int, seq int, outcome text, ms float8);
		 CREATE SEQUENCE stream_stop_$stream");
	my $sql = <<"EOS";
DO \$\$
DECLARE i int; t0 timestamptz; o text; s int := 0; stop timestamptz := clock_timestamp() + interval '$seconds s';
BEGIN
  WHILE clock_timestamp() < stop AND (SELECT last_value FROM stream_stop_$stream) = 1 LOOP
    s := s + 1;
    FOREACH i IN ARRAY '{$targets}'::int[] LOOP
      t0 := clock_timestamp();
      BEGIN
        o := pgrac_ic_seq_rpc(i, $stream, s);
      EXCEPTION WHEN OTHERS THEN
        o := 'error: ' || SQLERRM;
      END;
      INSERT INTO outcomes VALUES (i, s, o, extract(epoch FROM clock_timestamp() - t0) * 1000);
    END LOOP;
    PERFORM pg_sleep(0.002);
  END LOOP;
END \$\$;
EOS
	my ($out, $err) = ('', '');
	# The script goes on the command line: IPC::Run feeds stdin only when pumped.
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-c', $sql ],
		'<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return { h => $h, out => \$out, err => \$err, node => $node, i => $i, stream => $stream };
}

sub stop_stream
{
	my ($s) = @_;
	$s->{node}->safe_psql('postgres', "SELECT setval('stream_stop_$s->{stream}', 2)");
	finish_stream($s);
}

sub finish_stream
{
	my ($s) = @_;
	$s->{h}->finish;
	is($s->{h}->result(0), 0, "stream from node $s->{i} ran to its end")
	  or diag(${ $s->{err} });
}

# Kills every process of instance $i at once, as a machine crash would.
sub kill_instance
{
	my ($i) = @_;
	my $node = $c->node($i);
	my $pid = PostgreSQL::Test::Utils::slurp_file($node->data_dir . '/postmaster.pid');
	($pid) = split /\n/, $pid;
	my @children = split /\s+/, `pgrep -P $pid` // '';
	kill 'KILL', $pid, grep { /^\d+$/ } @children;
	$node->{_pid} = undef;
	unlink $node->data_dir . '/postmaster.pid';
}

# ---- 1. SIGKILL one instance under RPC streams from the two others
# The streams run until node 3 is back and has served them for a while: how
# long its restart takes depends on the machine (the soft-RoCE VM is slow).
my $most = $PostgreSQL::Test::Utils::timeout_default - 30;    # within IPC::Run's timeout
my @streams = (start_stream(1, 1, $most, 2, 3), start_stream(2, 2, $most, 1, 3));
sleep 3;
kill_instance(3);
sleep 1;
my $started = 0;
for (1 .. 30)
{
	last if ($started = $c->node(3)->start(fail_ok => 1));
	sleep 0.5;
}
ok($started, 'killed instance restarts');
ok($c->wait_up(3), 'restarted instance sees every node UP again');
for my $s (@streams)
{
	# The outcomes are not visible before the stream's transaction ends: wait
	# until node 3 answers this node, give the stream a moment to use that,
	# then stop it. "work again after its restart" below checks the stream.
	$s->{node}->poll_query_until('postgres', 'SELECT pgrac_ic_ping(3) IS NOT NULL');
	sleep 1;
	stop_stream($s);
}

for my $i (1, 2)
{
	my $node = $c->node($i);
	my $other = $i == 1 ? 2 : 1;
	my $bad = $node->safe_psql('postgres',
		q{SELECT count(*) FROM outcomes WHERE outcome IN ('duplicate', 'reordered')});
	is($bad, '0', "node $i: no RPC was applied twice or out of order");
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM outcomes WHERE target = $other AND outcome <> 'applied'"),
		'0',
		"node $i: every RPC to the surviving node $other succeeded");
	my $unclear = $node->safe_psql('postgres',
		q{SELECT string_agg(DISTINCT outcome, '; ') FROM outcomes
		   WHERE outcome LIKE 'error:%' AND outcome !~
		   'pgrac_ic seq probe to node 3 failed: (peer unreachable|peer restarted while the request was in flight|timed out waiting for the reply|the interconnect listener is not running)'});
	is($unclear, '', "node $i: RPCs to the killed node failed only with clear errors");
	cmp_ok($node->safe_psql('postgres', 'SELECT max(ms) FROM outcomes'),
		'<', $rpc_timeout_ms + 1500, "node $i: no RPC hung");
	cmp_ok( $node->safe_psql('postgres',
			q{SELECT count(*) FROM outcomes WHERE target = 3 AND outcome LIKE 'error:%'}),
		'>', 0, "node $i: the kill was felt (some RPCs to node 3 failed)");
	my $last = $node->safe_psql('postgres',
		q{SELECT outcome FROM outcomes WHERE target = 3 ORDER BY seq DESC LIMIT 1});
	is($last, 'applied', "node $i: RPCs to node 3 work again after its restart");
	$node->safe_psql('postgres', 'TRUNCATE outcomes');
}
like(
	$c->node(1)->safe_psql('postgres',
		q{SELECT string_agg(type, ',') FROM pg_cluster_rdma_errors WHERE peer_node_id = 3}),
	qr/peer_reset|peer_down/,
	'node 1 recorded that node 3 went away');

# ---- 2. a stopped listener is DOWN within peer_timeout, UP after SIGCONT
my $stream = start_stream(1, 5, $most, 2);
sleep 1;
my $listener = $c->worker_pid(2, 'pgrac_ic listener');
kill 'STOP', $listener;
my $t0 = time;
ok($c->wait_peer_state(1, 2, 'DOWN'), 'stopped peer is declared DOWN');
my $took = time - $t0;
# peer_timeout is 2 s; the detection itself runs on the listener's clock, which
# under TCG (the soft-RoCE VM) may be seconds late.
my $slack = $ENV{RXEVM} ? 5 : 1.5;
cmp_ok($took, '<', 2.0 + $slack, "DOWN within peer_timeout (took ${took}s)");
my $fail = $c->node(1)->psql('postgres', 'SELECT pgrac_ic_ping(2)', stderr => \my $ping_err);
like($ping_err, qr/pgrac_ic ping to node 2 failed: peer unreachable/,
	'a ping to the stopped peer fails at once with a clear error');
sleep 1;
kill 'CONT', $listener;
ok($c->wait_peer_state(1, 2, 'UP'), 'peer is UP again after SIGCONT');
$c->node(1)->poll_query_until('postgres', 'SELECT pgrac_ic_ping(2) IS NOT NULL');
sleep 1;
stop_stream($stream);
is( $c->node(1)->safe_psql('postgres',
		q{SELECT count(*) FROM outcomes WHERE outcome IN ('duplicate', 'reordered')}),
	'0',
	'across the stop and the reconnect no RPC was applied twice');
is( $c->node(1)->safe_psql('postgres',
		q{SELECT outcome FROM outcomes ORDER BY seq DESC LIMIT 1}),
	'applied', 'RPCs work again after SIGCONT');
cmp_ok($c->node(1)->safe_psql('postgres', 'SELECT max(ms) FROM outcomes'),
	'<', $rpc_timeout_ms + 1500, 'no RPC hung while the peer was stopped');

# ---- 3. garbage on the interconnect port: the connection is dropped, counted
SKIP:
{
	skip 'garbage is written to a TCP port', 4
	  unless $c->on_tier('tier3', 'this part writes garbage to the TCP interconnect port');
	my $before = $c->node(1)->safe_psql('postgres',
		q{SELECT coalesce(sum(total), 0) FROM pg_cluster_rdma_error_totals
		   WHERE type IN ('malformed_frame', 'bad_checksum', 'handshake_failed', 'oversized_message')});
	for my $round (1 .. 3)
	{
		my $sock = IO::Socket::INET->new(
			PeerAddr => '127.0.0.1',
			PeerPort => $c->ic_port(1),
			Proto => 'tcp',
			Timeout => 5) or die "connect: $!";
		my $junk = join('', map { chr(int(rand(256))) } 1 .. 4096);
		$junk = "RC" . substr($junk, 2) if $round == 2;    # right magic, garbage after
		print $sock $junk;
		my $buf;
		$sock->recv($buf, 100);
		close $sock;
	}
	ok( $c->node(1)->poll_query_until('postgres',
			qq{SELECT coalesce(sum(total), 0) > $before FROM pg_cluster_rdma_error_totals
			    WHERE type IN ('malformed_frame', 'bad_checksum', 'handshake_failed', 'oversized_message')}),
		'random bytes are counted as errors');
	for my $i (1 .. 3)
	{
		cmp_ok($c->node($i)->safe_psql('postgres', 'SELECT pgrac_ic_ping(1)'),
			'>', 0, "node $i is up and reaches node 1 after the garbage");
	}
}

# ---- 4. Resends, forced: node 2's LMS workers are stopped while node 1
# streams 32 KiB notes to it. Node 2's listener holds what its LMS cannot take
# up to 256 MB, then refuses the next frame before acknowledging it and drops
# the connection; node 1 reconnects and resends every frame node 2 has not
# acknowledged (retransmits), again and again until the LMS runs. Every note
# must then be handled exactly once: a receiver that delivered a frame twice,
# or lost one, changes notes_recv.
# Under TCG (the soft-RoCE VM) 295 MB through rxe takes the sending listener
# longer per frame than its peers' heartbeats allow: measured 2026-11-25, node 1
# was fenced 20 s into the stream and the refusal never came. The backlog and
# resend logic is the engine's, the same on every transport; on a real RDMA
# port this part runs at tier1/tier2 too.
SKIP:
{
	if ($ENV{RXEVM} && $c->{tier} ne 'tier3')
	{
		note("not at $c->{tier} in the soft-RoCE VM: 295 MB of notes through rxe under TCG "
			  . "starve the sender's heartbeats (the resend logic is the engine's, run at tier3)");
		skip 'a 295 MB stream through soft-RoCE under TCG', 10;
	}
	my $counters_sql =
	  q{SELECT retransmits || '|' || reconnects FROM pg_cluster_rdma_counters WHERE peer_node_id = 2};
	my ($retx0, $reconn0) = split /\|/, $c->node(1)->safe_psql('postgres', $counters_sql);
	my $notes_sql = 'SELECT notes_recv FROM pg_cluster_ic_peers WHERE node_id = 1';
	my $notes0 = $c->node(2)->safe_psql('postgres', $notes_sql);
	my $refusals_sql = q{SELECT count(*) FROM pg_cluster_rdma_errors
	                      WHERE type = 'inbox_full' AND description LIKE '%dropped with its requests unacknowledged%'};
	my $refusals0 = $c->node(2)->safe_psql('postgres', $refusals_sql);
	my $dups_sql = 'SELECT duplicates_dropped FROM pg_cluster_rdma_counters WHERE peer_node_id = 1';
	my $dups0 = $c->node(2)->safe_psql('postgres', $dups_sql);
	my @lms = split /\n/, $c->node(2)->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type LIKE 'pgrac_ic lms%'});
	is(scalar(@lms), 2, "node 2's two LMS workers found");
	my $n_notes = 9000;    # 295 MB: more than the inbox ring and the 256 MB backlog
	# Notes are served in place by the listener; the LMS backlog needs them
	# to go to the (frozen) LMS workers.
	ok($c->set_serve_in_place(2, 'off', 1), "node 2's listener hands every request to the LMS");
	kill 'STOP', @lms;
	my ($sout, $serr) = ('', '');
	my $sh = IPC::Run::start(
		[ 'psql', '-X', '-Atq', '-v', 'ON_ERROR_STOP=1', '-d', $c->node(1)->connstr('postgres'),
		  '-c', "SELECT messages_sent FROM pgrac_ic_stream(2, 32768, $n_notes)" ],
		'<', \undef, '>', \$sout, '2>', \$serr,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	my $refused = $c->node(2)->poll_query_until('postgres', "SELECT ($refusals_sql) > $refusals0");
	my $resent = $c->node(1)->poll_query_until('postgres',
		"SELECT retransmits > $retx0 FROM pg_cluster_rdma_counters WHERE peer_node_id = 2");
	kill 'CONT', @lms;
	ok($refused, "node 2 refused frames it could not hold, unacknowledged, and dropped the connection");
	ok($resent, 'node 1 resent frames node 2 had been sent but not acknowledged (retransmits)');
	$sh->finish;
	is($sout =~ s/\s+$//r, $n_notes, "the stream of $n_notes notes completed") or diag($serr);
	my ($retx1, $reconn1) = split /\|/, $c->node(1)->safe_psql('postgres', $counters_sql);
	cmp_ok($reconn1, '>', $reconn0, 'node 1 reconnected to node 2');
	note "node 1 -> 2: @{[ $retx1 - $retx0 ]} frames resent over @{[ $reconn1 - $reconn0 ]} reconnects";
	# Node 2 closed each connection itself, so the last seq it reported in the
	# next handshake was current: a resend starts right after it.
	is($c->node(2)->safe_psql('postgres', $dups_sql) - $dups0,
		0, 'node 1 resent only frames node 2 had not received (no duplicate reached it)');
	is($c->node(2)->safe_psql('postgres', $notes_sql) - $notes0,
		$n_notes, "node 2 handled each of the $n_notes notes exactly once across the resends");
	is($c->node(1)->safe_psql('postgres', 'SELECT pgrac_ic_seq_rpc(2, 7, 1)'),
		'applied', 'RPCs to node 2 work after the resends');
	ok($c->set_serve_in_place(2, 'on', 1), "node 2's listener serves in place again");
}

$c->stop_all;
done_testing();
