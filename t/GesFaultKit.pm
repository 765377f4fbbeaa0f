# Copyright: pgrac_ic authors. Test helper for the GES fault tests (t/023,
# t/031): bounded SQL, background sessions with requests that wait, freezing
# an instance (SIGSTOP of the postmaster and every child: they call setsid,
# so never by process group) and the safety report. Every wait is bounded.
package GesFaultKit;

use strict;
use warnings;

use Exporter 'import';
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

our @EXPORT = qw(elapsed sql sql_value poll_until bg bq start_waiter waiter_done wait_waiter
  cancel_waiter close_session postmaster_pid descendants freeze thaw report_safety %frozen_pids);

# Processes a test stopped with SIGSTOP: continued however the test ends, so
# that the framework's teardown can stop the instances.
our %frozen_pids;

END
{
	kill 'CONT', keys %frozen_pids if %frozen_pids;
}

# A request that is expected to wait is numbered (start_waiter).
my $wait_seq = 0;

sub elapsed
{
	my ($since) = @_;
	return sprintf('%.2f s', time - $since);
}

# Runs a query in a new psql process, bounded; never dies.
sub sql
{
	my ($node, $query, $secs) = @_;
	my ($out, $err, $to) = ('', '', 0);
	my $ret = $node->psql(
		'postgres', $query,
		stdout => \$out,
		stderr => \$err,
		timeout => $secs // 20,
		timed_out => \$to);
	return { ret => $ret // -1, out => $out // '', err => $err // '', timed_out => $to };
}

# The single value of a query, or undef if it failed or timed out.
sub sql_value
{
	my ($node, $query, $secs) = @_;
	my $r = sql($node, $query, $secs);
	return undef if $r->{timed_out} || $r->{ret} != 0;
	return $r->{out};
}

# Repeats $cb every $step_ms until it returns true or $secs pass.
sub poll_until
{
	my ($secs, $cb, $step_ms) = @_;
	my $end = time + $secs;
	for (;;)
	{
		return 1 if $cb->();
		return 0 if time > $end;
		usleep(($step_ms // 100) * 1000);
	}
}

sub bg
{
	my ($node) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->{pgrac_pid} = $s->query_safe('SELECT pg_backend_pid()');
	return $s;
}

# Runs one query in a background session and returns (stdout, stderr); the
# stderr is consumed.
sub bq
{
	my ($s, $query) = @_;
	my ($out) = $s->query($query);
	my $err = $s->{stderr};
	$s->{stderr} = '';
	return ($out, $err);
}

sub start_waiter
{
	my ($s, $query) = @_;
	my $tag = 'w' . ++$wait_seq;
	$s->{stdout} = '';
	$s->{stderr} = '';
	$s->{stdin} .= "\\echo 'begin_$tag'\n$query;\n\\echo 'end_$tag'\n\\warn 'end_$tag'\n";
	my $end = time + 10;
	until ($s->{stdout} =~ /begin_$tag\n/ || time > $end)
	{
		$s->{run}->pump_nb;
		usleep(10_000);
	}
	die "waiter $tag did not start" unless $s->{stdout} =~ /begin_$tag\n/;
	return { s => $s, tag => $tag, started => time, done => 0 };
}

sub waiter_done
{
	my ($w) = @_;
	return 1 if $w->{done};
	my $s = $w->{s};
	eval { $s->{run}->pump_nb; 1 } or note("waiter $w->{tag}: $@");
	my $tag = $w->{tag};
	return 0 unless $s->{stdout} =~ /end_$tag\n/ && $s->{stderr} =~ /end_$tag\n/;
	($w->{out}) = $s->{stdout} =~ /begin_$tag\n(.*?)\n?end_$tag\n/s;
	($w->{err}) = $s->{stderr} =~ /^(.*?)end_$tag\n/s;
	$w->{out} //= '';
	$w->{err} //= '';
	$s->{stdout} = '';
	$s->{stderr} = '';
	$w->{done} = 1;
	$w->{at} = time;
	return 1;
}

sub wait_waiter
{
	my ($w, $secs) = @_;
	return poll_until($secs, sub { waiter_done($w) }, 50);
}

# A waiter that never answered: cancel its query (on its node) and collect
# whatever it printed, so that the session can be closed.
sub cancel_waiter
{
	my ($w, $node) = @_;
	return if waiter_done($w);
	sql($node, "SELECT pg_cancel_backend($w->{s}{pgrac_pid})", 10);
	wait_waiter($w, 10);
}

sub close_session
{
	my ($s) = @_;
	eval {
		$s->{run}->pump_nb;
		$s->{stdin} .= "\\q\n";
		$s->{run}->finish;
		1;
	} or eval { $s->{run}->kill_kill; };
}

# The processes of an instance: its postmaster and all its descendants,
# found through /proc (never by process group or name).
sub postmaster_pid
{
	my ($node) = @_;
	open my $fh, '<', $node->data_dir . '/postmaster.pid' or return $node->{_pid};
	my $pid = <$fh>;
	close $fh;
	chomp $pid;
	return $pid;
}

sub descendants
{
	my ($root) = @_;
	my %kids;
	opendir my $d, '/proc' or die "cannot read /proc: $!";
	for my $p (grep { /^\d+$/ } readdir $d)
	{
		open my $fh, '<', "/proc/$p/stat" or next;
		my $s = <$fh>;
		close $fh;
		next unless defined $s;
		my $rp = rindex($s, ')');
		next if $rp < 0;
		my (undef, $ppid) = split ' ', substr($s, $rp + 2);
		push @{ $kids{$ppid} }, $p;
	}
	closedir $d;
	my @out;
	my @queue = ($root);
	while (@queue)
	{
		my $p = shift @queue;
		for my $c (@{ $kids{$p} // [] })
		{
			push @out, $c;
			push @queue, $c;
		}
	}
	return @out;
}

# SIGSTOP of a whole instance: the postmaster first (so that it forks nothing
# more), then its descendants until no new one shows up. Returns the pids.
sub freeze
{
	my ($node) = @_;
	my $pm = postmaster_pid($node);
	die 'no postmaster pid for ' . $node->name unless $pm;
	kill 'STOP', $pm or die "SIGSTOP $pm: $!";
	my %stopped = ($pm => 1);
	for (1 .. 5)
	{
		my @new = grep { !$stopped{$_} } descendants($pm);
		last unless @new;
		kill 'STOP', @new;
		$stopped{$_} = 1 for @new;
	}
	$frozen_pids{$_} = 1 for keys %stopped;
	note($node->name . ': froze ' . scalar(keys %stopped) . " processes (postmaster $pm)");
	return [ keys %stopped ];
}

sub thaw
{
	my ($pids) = @_;
	kill 'CONT', @$pids;
	delete $frozen_pids{$_} for @$pids;
}

sub report_safety
{
	my ($label, $st) = @_;
	is($st->{conflicts} // 0, 0,
		"$label: no conflicting modes granted in "
		  . ($st->{polls} // 0) . ' polls of pg_cluster_ges_locks ('
		  . ($st->{unreadable} // 0) . ' unreadable)');
	is($st->{double_grants} // 0, 0,
		"$label: no NOWAIT probe granted while held (" . ($st->{probes} // 0) . ' probes)');
}

1;
