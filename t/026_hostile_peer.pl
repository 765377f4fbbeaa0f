
# A hostile peer, written from docs/protocol.md alone (tests/hostile/peer.py),
# attacks a running instance over TCP: oversized and malformed frames, bad
# lengths before and after authentication, sequence and ack abuse, replayed and
# altered sealed frames, byte-by-byte writes, unauthenticated refusals, an
# impersonator holding the key, and floods of idle connections. After every
# attack: the instances were not restarted and no backend crashed, the real
# nodes still talk both ways, and the refusal is counted by name.
#
# Layout: cluster.nodes has ids 1, 2 and 3; instances run as nodes 2 and 3.
# The lower id dials, so the peer plays node 1 (lower than both) against node 2,
# and plays node 2 against node 3 (impersonation).
#
# PGRAC_HOSTILE_SKIP=case1,case2 makes the peer skip those attacks (to see the
# assertions fail).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use IPC::Run;
use Time::HiRes qw(sleep time);
use PgracCluster;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $peer_py = "$FindBin::RealBin/../tests/hostile/peer.py";
my $have_aead = system('python3', '-c', 'import cryptography.hazmat.primitives.ciphers.aead') == 0;
plan skip_all => 'python3-cryptography is not installed' unless $have_aead;

my %skip = map { $_ => 1 } split /,/, ($ENV{PGRAC_HOSTILE_SKIP} // '');

# The hostile peer speaks TCP: tier3 whatever PGRAC_TEST_TIER says.
my $c = PgracCluster->new(n => 3, tier => 'tier3', fixed_tier => 1, start => 0);
my ($n2, $n3) = ($c->node(2), $c->node(3));
$_->start for ($n2, $n3);
$_->safe_psql('postgres', 'CREATE EXTENSION pgrac_ic') for ($n2, $n3);
for my $i (2, 3)
{
	ok($c->wait_up($i, 2), "node $i sees nodes 2 and 3 UP");
	ok($c->wait_member($i, 2), "node $i is a member of a view of nodes 2 and 3");
}

my $sysid = $n2->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
my $cluster = $n2->safe_psql('postgres', 'SHOW cluster.name');
my %start_time = map { $_ => $c->node($_)->safe_psql('postgres', 'SELECT pg_postmaster_start_time()') } (2, 3);
# The settings every node must share (sent in Auth) and the timing our pongs carry.
my %setting = map {
	$_ => $n2->safe_psql('postgres', "SELECT setting FROM pg_settings WHERE name = 'cluster.$_'")
} qw(nodes lms_workers tcp_paths witness_nodes peer_timeout heartbeat_interval);
my @settings_args = (
	'--nodes', $setting{nodes}, '--lms-workers', $setting{lms_workers},
	'--tcp-paths', $setting{tcp_paths}, '--witnesses', $setting{witness_nodes},
	'--peer-timeout', $setting{peer_timeout}, '--heartbeat-interval', $setting{heartbeat_interval});

# Runs one case; returns (exit code, { RESULT key => value }, stdout . stderr).
sub peer
{
	my (%a) = @_;
	my $target = $a{target} // 2;
	my @cmd = (
		'python3', $peer_py, '--host', '127.0.0.1', '--port', $c->ic_port($target),
		'--key-file', $c->{key_file}, '--node-id', $a{as} // 1, '--cluster', $cluster,
		'--system-id', $sysid, '--case', $a{case}, @settings_args, @{ $a{args} // [] });
	push @cmd, '--skip' if $skip{ $a{case} };
	my ($out, $err) = ('', '');
	IPC::Run::run(\@cmd, '>', \$out, '2>', \$err, IPC::Run::timeout(90));
	my %r = $out =~ /^RESULT (\w+)=(.*)$/mg;
	return ($? >> 8, \%r, $out . $err);
}

sub totals
{
	my ($i) = @_;
	my %t = split /[|\n]/,
	  $c->node($i)->safe_psql('postgres', 'SELECT type, total FROM pg_cluster_rdma_error_totals');
	return \%t;
}

# Both ways, within a few seconds.
sub pings_ok
{
	my ($label) = @_;
	for my $pair ([ 2, 3 ], [ 3, 2 ])
	{
		my ($from, $to) = @$pair;
		my ($ok, $err) = (0, '');
		for (1 .. 10)
		{
			my ($ret, $out, $e) = $c->node($from)->psql('postgres', "SELECT pgrac_ic_ping($to)");
			if ($ret == 0 && $out > 0) { $ok = 1; last; }
			$err = $e;
			sleep 0.5;
		}
		ok($ok, "$label: ping $from -> $to") or diag($err);
	}
}

my %log_pos = map { $_ => -s $c->node($_)->logfile } (2, 3);

sub healthy
{
	my ($label) = @_;
	for my $i (2, 3)
	{
		my $node = $c->node($i);
		is($node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'),
			$start_time{$i}, "$label: node $i was not restarted");
		my $log = slurp_file($node->logfile, $log_pos{$i});
		unlike($log, qr/terminated by signal|server process .* was terminated/,
			"$label: node $i: no process crashed");
	}
	pings_ok($label);
}

# One attack on node 2 (or node 3): the named error total rises (if $error),
# the RESULT lines match, the instances are healthy.
sub attack
{
	my (%a) = @_;
	my $target = $a{target} // 2;
	my $before = totals($target);
	my ($rc, $r, $out) = peer(%a);
	is($rc, 0, "$a{case}: the peer performed the attack") or diag($out);
	for my $k (sort keys %{ $a{expect} // {} })
	{
		is($r->{$k}, $a{expect}{$k}, "$a{case}: $k = $a{expect}{$k}") or diag($out);
	}
	if (my $error = $a{error})
	{
		my $ok = 0;
		my $after;
		for (1 .. 20)
		{
			$after = totals($target);
			if (($after->{$error} // 0) > ($before->{$error} // 0)) { $ok = 1; last; }
			sleep 0.1;
		}
		my @delta = map { "$_+" . ($after->{$_} - ($before->{$_} // 0)) }
		  grep { $after->{$_} != ($before->{$_} // 0) } sort keys %$after;
		ok($ok, "$a{case}: counted as $error on node $target") or diag("totals changed: @delta");
	}
	healthy($a{case});
	return $r;
}

my %dropped = (dropped => 'yes');

# a. oversized messages; the largest body is accepted and echoed.
attack(case => "oversize_$_", error => 'oversized_message', expect => \%dropped)
  for (200000, 150000, 65537);
attack(case => 'max_body', expect => { status => 0, echo => 'ok', after => 'ok' });

# b. payload_len 0, max, max+1, 2^32-1 before and after authentication. Before:
# a limit of 512 (docs/protocol.md, "Frame"); 0 and 512 bytes of garbage do not
# parse as a Hello.
attack(case => 'len_pre_0', error => 'handshake_failed', expect => \%dropped);
attack(case => 'len_pre_max', error => 'handshake_failed', expect => \%dropped);
attack(case => 'len_pre_max1', error => 'oversized_message', expect => \%dropped);
attack(case => 'len_pre_u32max', error => 'oversized_message', expect => \%dropped);
attack(case => 'len_post_0', error => 'malformed_frame', expect => \%dropped);
attack(case => 'len_post_max', expect => { echo => 'ok' });
attack(case => 'len_post_max1', error => 'oversized_message', expect => \%dropped);
attack(case => 'len_post_u32max', error => 'oversized_message', expect => \%dropped);

# c. malformed frames.
attack(case => 'pre_bad_crc', error => 'bad_checksum', expect => \%dropped);
attack(case => 'pre_bad_magic', error => 'malformed_frame', expect => \%dropped);
attack(case => 'pre_message', error => 'handshake_failed', expect => \%dropped);
# "a stream that ends inside a frame is `truncated`, counted as `malformed_frame`"
attack(case => 'pre_truncated', error => 'malformed_frame', expect => \%dropped);
attack(case => 'bad_crc', error => 'bad_checksum', expect => \%dropped);
attack(case => 'bad_magic', error => 'malformed_frame', expect => \%dropped);
attack(case => 'bad_type', error => 'malformed_frame', expect => \%dropped);
attack(case => 'bad_flags', error => 'malformed_frame', expect => \%dropped);
# The document names no error type for these (only that they drop the
# connection, "each counted by name"); the instance counts malformed_frame.
attack(case => $_, error => 'malformed_frame', expect => \%dropped)
  for qw(bad_msg_type reserved heartbeat_size backoff_size handshake_type src_node void_rpc);
# "a stream that ends inside a frame is `truncated`, counted as `malformed_frame`"
attack(case => 'truncated', error => 'malformed_frame', expect => \%dropped);

# d. sequence and ack abuse.
attack(case => 'wrong_source', error => 'wrong_source', expect => { alive_after => 'yes' });
{
	my $q = 'SELECT duplicates_dropped FROM pg_cluster_rdma_counters WHERE peer_node_id = 1';
	my $before = $n2->safe_psql('postgres', $q) || 0;
	attack(case => 'duplicate', expect => { alive_after => 'yes' });
	cmp_ok($n2->safe_psql('postgres', $q) || 0, '>', $before,
		'duplicate: counted in duplicates_dropped');
}
attack(case => 'gap', error => 'malformed_frame', expect => \%dropped);
attack(case => 'ack_beyond', error => 'malformed_frame', expect => \%dropped);

# e. a whole handshake and a ping written one byte at a time.
attack(case => 'onebyte', expect => { handshake => 'ok', echo => 'ok' });

# f. unauthenticated refusals carry an empty detail; the HelloReply holds only
# the version and a nonce.
attack(case => 'wrong_key', error => 'wrong_key',
	expect => { rejected => 'wrong_key', detail_len => 0 });
attack(case => 'wrong_cluster', error => 'cluster_mismatch',
	expect => { rejected => 'cluster_mismatch', detail_len => 0 });
attack(case => 'wrong_system', error => 'system_mismatch',
	expect => { rejected => 'system_mismatch', detail_len => 0 });
attack(case => 'hello_reply', expect => { hello_reply_len => 33, hello_reply_version => 3 });

# i. secure mode (the default): a replayed or altered sealed frame.
attack(case => $_, error => 'frame_auth_failed', expect => \%dropped)
  for qw(replay alter alter_header);

# h. impersonation: node 2's id, a new incarnation, the key; the real node 2 is up.
attack(case => 'impersonate', target => 3, as => 2, error => 'duplicate_node',
	expect => { rejected => 'duplicate_node' });
{
	my $fails = 0;
	my $until = time + 30;
	while (time < $until)
	{
		for my $pair ([ 2, 3 ], [ 3, 2 ])
		{
			my ($ret, $out) = $c->node($pair->[0])->psql('postgres', "SELECT pgrac_ic_ping($pair->[1])");
			$fails++ unless $ret == 0 && $out > 0;
		}
		sleep 1;
	}
	is($fails, 0, 'impersonate: pings 2 <-> 3 keep working for the next 30 s');
}

# g. floods of idle unauthenticated connections against node 2, whose listener
# is held to 1024 descriptors.
sub listener_cpu_ticks
{
	my ($pid) = @_;
	my @f = split ' ', slurp_file("/proc/$pid/stat") =~ s/^.*\) //sr;
	return $f[11] + $f[12];    # utime + stime (fields 14, 15)
}

sub flood
{
	my ($label, $error, @extra) = @_;
	my $pid = $c->worker_pid(2, 'pgrac_ic listener');
	ok($pid, "$label: node 2's listener is pid $pid");
	system('prlimit', '--pid', $pid, '--nofile=1024:1024') == 0
	  or diag("prlimit failed");
	like(slurp_file("/proc/$pid/limits"), qr/Max open files\s+1024\s+1024/,
		"$label: the listener is limited to 1024 files");
	my $before = totals(2);
	my $log_before = () = slurp_file($n2->logfile) =~ /\n/g;
	my ($out, $err) = ('', '');
	my @cmd = ('python3', $peer_py, '--port', $c->ic_port(2), '--key-file', $c->{key_file},
		'--node-id', 1, '--cluster', $cluster, '--system-id', $sysid, '--case', 'flood',
		'--count', 1100, '--hold', 20, @settings_args, @extra);
	push @cmd, '--skip' if $skip{flood};
	my $h = IPC::Run::start(\@cmd, '>', \$out, '2>', \$err, IPC::Run::timeout(60));
	$h->pump until $out =~ /FLOOD_READY|skipped/ || !$h->pumpable;
	sleep 2;
	my $t0 = listener_cpu_ticks($pid);
	my $t = time;
	pings_ok("$label, during");
	sleep 1 while time < $t + 10;
	my $ticks = listener_cpu_ticks($pid) - $t0;
	cmp_ok($ticks, '<', 200, "$label: the listener used $ticks ticks of CPU in 10 s (< 2 s)");
	is($n2->safe_psql('postgres', "SELECT state FROM pg_cluster_ic_peers WHERE node_id = 3"),
		'UP', "$label: node 3 stays UP on node 2");
	is($n3->safe_psql('postgres', "SELECT state FROM pg_cluster_ic_peers WHERE node_id = 2"),
		'UP', "$label: node 2 stays UP on node 3");
	$h->finish;
	note($out);
	like($out, qr/RESULT opened=1100/, "$label: 1100 connections opened") or diag($out . $err);
	my $log_after = () = slurp_file($n2->logfile) =~ /\n/g;
	cmp_ok($log_after - $log_before, '<', 100,
		"$label: node 2 logged " . ($log_after - $log_before) . " lines (< 100)");
	my $after = totals(2);
	cmp_ok($after->{$error} // 0, '>', $before->{$error} // 0, "$label: counted as $error")
	  or diag(join ' ', map { "$_+" . ($after->{$_} - ($before->{$_} // 0)) }
		  grep { $after->{$_} != ($before->{$_} // 0) } sort keys %$after);
	healthy("$label, after");
}

# Held idle: the instance closes what is beyond the limit (or times it out).
flood('flood (max_unauthenticated 64)', 'unauthenticated_limit');

# With room for 5000 authenticating connections the listener runs out of
# descriptors first: accept fails with EMFILE.
$n2->append_conf('postgresql.conf', "cluster.max_unauthenticated = 5000\n");
$n2->restart;
ok($c->wait_up(2, 2) && $c->wait_up(3, 2), 'node 2 restarted with cluster.max_unauthenticated = 5000');
$start_time{2} = $n2->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
# Re-opening whatever the instance closes keeps the listener out of descriptors for 20 s.
flood('flood (max_unauthenticated 5000)', 'accept_paused', '--reopen');

$n2->stop('fast');
$n3->stop('fast');
done_testing();
