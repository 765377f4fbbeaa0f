# GES under faults, three instances at tier3 (heartbeat 200 ms, peer_timeout
# 2 s, so a membership lease of 1.5 s). Each case below reproduces one fault
# from the issue and checks the three safety properties of the global locks:
#  * no conflicting mode is ever granted: every poll of pg_cluster_ges_locks
#    (from an instance that is not frozen) shows only compatible granted
#    modes per resource, and a NOWAIT probe from a third instance is never
#    granted while a legitimate holder still holds;
#  * no request is lost: every waiter gets an answer within a bounded time
#    (granted once the resource is free, or a named error), never a hang;
#  * no lock leaks: once everybody unlocked, the resource is free and no row
#    of it is left in pg_cluster_ges_locks.
# Faults: the master's listener restarted (cases 1, 2), the master's LMS
# worker killed with the master's own backend holding or waiting (3), a
# holder's instance frozen (SIGSTOP) longer and shorter than its lease (4), a
# waiter's instance frozen (5), the master frozen while the holder unlocks
# (6), the master instance killed -9 and restarted (7); and how fast the first
# NOWAIT answers once the cluster has formed (8). Every wait is bounded.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use GesFaultKit;
use PgracCluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

# ------------------------------------------------------------------ helpers

my $T0 = time;

# Polls a query on a node until it returns $expected ('t' by default).
sub poll_sql
{
	my ($node, $query, $secs, $expected) = @_;
	$expected //= 't';
	my $last;
	my $ok = poll_until(
		$secs,
		sub {
			$last = sql($node, $query, 10);
			return !$last->{timed_out} && $last->{ret} == 0 && $last->{out} eq $expected;
		});
	diag("poll timed out after $secs s: $query\nlast: out '$last->{out}' err '$last->{err}'"
		  . ($last->{timed_out} ? ' (timed out)' : ''))
	  unless $ok;
	return $ok;
}

# A request that is expected to wait: sent in session $s, without waiting for
# its answer. waiter_done() reads the answer without blocking.

my %compatible;
{
	my @m = qw(NL CR CW PR PW EX);
	my @ok = (
		[ 1, 1, 1, 1, 1, 1 ],
		[ 1, 1, 1, 1, 1, 0 ],
		[ 1, 1, 1, 0, 0, 0 ],
		[ 1, 1, 0, 1, 0, 0 ],
		[ 1, 1, 0, 0, 0, 0 ],
		[ 1, 0, 0, 0, 0, 0 ]);
	for my $i (0 .. 5)
	{
		$compatible{"$m[$i]/$m[$_]"} = $ok[$i][$_] for 0 .. 5;
	}
}

# One look at the granted (and converting: their held mode) locks of
# resource $r through pg_cluster_ges_locks on $node. Returns the number of
# conflicting pairs seen (0 if the view could not be read: a member frozen).
# Adds to the case's counters in $st.
sub check_grants
{
	my ($node, $r, $st) = @_;
	my $q = sql(
		$node,
		"SELECT node_id || ':' || pid || ':' ||
		        CASE WHEN state = 'converting' THEN held_mode ELSE mode END
		   FROM pg_cluster_ges_locks WHERE resource = '$r' AND state IN ('granted', 'converting')",
		12);
	if ($q->{timed_out} || $q->{ret} != 0)
	{
		$st->{unreadable}++;
		return 0;
	}
	$st->{polls}++;
	my @g = map { [ split /:/ ] } grep { $_ ne '' } split /\n/, $q->{out};
	my $bad = 0;
	for my $i (0 .. $#g)
	{
		for my $j ($i + 1 .. $#g)
		{
			next if $compatible{"$g[$i][2]/$g[$j][2]"};
			$bad++;
			diag("CONFLICTING GRANTS of $r seen from " . $node->name
				  . ": node $g[$i][0] pid $g[$i][1] $g[$i][2] and node $g[$j][0] pid $g[$j][1] $g[$j][2]");
		}
	}
	$st->{conflicts} += $bad;
	return $bad;
}

# A NOWAIT request for $r in a fresh session on $node: 't' (granted; the
# session ends at once, which releases it), 'f' (refused), 'error' or
# 'timeout'.
sub nowait_probe
{
	my ($node, $r, $mode) = @_;
	$mode //= 'EX';
	my $q = sql($node, "SELECT pgrac_ges_lock('$r', '$mode', 0)", 15);
	return 'timeout' if $q->{timed_out};
	return 'error' if $q->{ret} != 0;
	return $q->{out};
}

# Probes that must be refused while a legitimate holder holds: counts a
# grant as a double grant in $st.
sub probe_refused
{
	my ($node, $r, $st, $mode) = @_;
	my $p = nowait_probe($node, $r, $mode);
	$st->{probes}++;
	if ($p eq 't')
	{
		$st->{double_grants}++;
		diag("DOUBLE GRANT: NOWAIT " . ($mode // 'EX') . " of $r from " . $node->name
			  . ' was granted while another holder still holds it');
	}
	return $p;
}

# kill -9 of every process of an instance (stopped first, so that none of
# them reacts before all are killed); the framework then knows it is down.
sub kill9_instance
{
	my ($node) = @_;
	my $pids = freeze($node);
	kill 'KILL', @$pids;
	delete $frozen_pids{$_} for @$pids;
	$node->{_pid} = undef;    # as PostgreSQL::Test::Cluster::kill9 does
	my $gone = poll_until(10, sub { !grep { kill 0, $_ } @$pids });
	ok($gone, $node->name . ': every process of the instance is gone after kill -9');
}

my $c = PgracCluster->new(n => 3, tier => 'tier3');
my ($n1, $n2, $n3) = map { $c->node($_) } 1 .. 3;
my $t_formed = time;
note(sprintf('cluster formed (every node a member) %.2f s after the test started', $t_formed - $T0));

# resource_where($node, $prefix, $cond): PgracCluster::resource_where.
sub resource_where { return PgracCluster::resource_where(@_); }

sub membership
{
	my ($node) = @_;
	my $v = sql_value($node,
		'SELECT state, epoch, members, lease_valid, fence_count FROM pg_cluster_membership', 10);
	return undef unless defined $v;
	my %m;
	@m{qw(state epoch members lease_valid fence_count)} = split /\|/, $v;
	return \%m;
}

# One field of a node's membership row ('' if it cannot be read).
sub mem
{
	my ($node, $field) = @_;
	my $m = membership($node);
	return $m ? $m->{$field} : '';
}

sub history_count
{
	my ($node, $event) = @_;
	return sql_value($node,
		"SELECT count(*) FROM pg_cluster_membership_history WHERE event = '$event'", 10);
}

# Before each case: every node a member of one 3-node epoch with a valid
# lease, GES answering on every node, and no global lock left anywhere.
my $settle_seq = 0;

sub settle
{
	my ($label) = @_;
	my $t = time;
	my $ok = poll_until(
		40,
		sub {
			my %epochs;
			for my $i (1 .. 3)
			{
				my $m = membership($c->node($i));
				return 0
				  unless $m
				  && $m->{state} eq 'member'
				  && $m->{lease_valid} eq 't'
				  && $m->{members} eq '{1,2,3}';
				$epochs{ $m->{epoch} } = 1;
			}
			return keys(%epochs) == 1;
		},
		200);
	ok($ok, "$label: every node is a member of one epoch of {1,2,3}");
	for my $i (1 .. 3)
	{
		my $r = 'settle' . ++$settle_seq;
		ok( poll_sql(
				$c->node($i), "SELECT pgrac_ges_lock('$r', 'EX', 0) AND pgrac_ges_unlock('$r')", 30),
			"$label: GES answers on node $i");
	}
	# Nodes keep released locks cached (the node owner, pid 0): none may
	# be left to a backend, and no cached lock may still be in use.
	ok(poll_sql($n1, 'SELECT count(*) FROM pg_cluster_ges_locks WHERE pid <> 0', 15, '0'),
		"$label: no backend's global lock is left anywhere");
	for my $i (1 .. 3)
	{
		ok( poll_sql(
				$c->node($i), 'SELECT count(*) FROM pg_cluster_ges_cache WHERE users > 0', 15, '0'),
			"$label: no cached lock of node $i is in use");
	}
	note("$label: settled in " . elapsed($t) . ', epoch ' . mem($n1, 'epoch'));
}

# The end of a case: the resource is free (a NOWAIT EX from $node succeeds)
# and nothing of it is left in the view.
sub check_no_leak
{
	my ($label, $r, $node) = @_;
	$node //= $n3;
	my $t = time;
	ok( poll_sql($node, "SELECT pgrac_ges_lock('$r', 'EX', 0) AND pgrac_ges_unlock('$r')", 15),
		"$label: $r is free at the end (NOWAIT EX from " . $node->name . ')');
	ok( poll_sql($node, "SELECT count(*) FROM pg_cluster_ges_locks WHERE resource = '$r' AND pid <> 0",
			10, '0'),
		"$label: no backend's row of $r is left in pg_cluster_ges_locks (cached: pid 0)");
	note("$label: free and clean after " . elapsed($t));
}

# ------------------------------------------------------------------ case 8
# The first NOWAIT lock right after the cluster formed answers in well under
# 1 s (run first, while the cluster is fresh).
{
	my $label = 'case 8 (first NOWAIT after formation)';
	my $since = time - $t_formed;
	for my $i (1 .. 3)
	{
		my $t = time;
		my $q = sql($c->node($i),
			"SELECT pgrac_ges_lock('first$i', 'EX', 0),
			        (extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000)::int", 10);
		my $wall = time - $t;
		my ($granted, $ms) = split /\|/, $q->{out};
		is($granted, 't', "$label: NOWAIT EX on node $i granted");
		cmp_ok($ms // 99999, '<', 1000, "$label: node $i answered in ${\($ms // '?')} ms");
		note(sprintf('%s: node %d NOWAIT took %s ms in the server, %.0f ms wall (%.2f s after formation)',
				$label, $i, $ms // '?', $wall * 1000, $since));
	}
	my $h = bg($n2);
	is($h->query_safe("SELECT pgrac_ges_lock('firstheld', 'EX', 0)"), 't', "$label: node 2 holds firstheld");
	my $t = time;
	is(nowait_probe($n3, 'firstheld'), 'f', "$label: NOWAIT EX from node 3 refused");
	my $ms = (time - $t) * 1000;
	cmp_ok($ms, '<', 1000, sprintf('%s: the refusal came in %.0f ms (wall, with psql start)', $label, $ms));
	$h->query_safe('SELECT pgrac_ges_unlock_all()');
	close_session($h);
}

# ------------------------------------------------------------------ case 1
# Node 2 holds EX on a resource mastered on node 1; a node-1 backend waits
# for it; node 1's listener is terminated. The waiter must not be granted
# while node 2 holds; once node 2 unlocks, it is.
{
	my $label = 'case 1 (master listener restart, waiter on the master)';
	settle($label);
	my %st;
	my $r = resource_where($n1, 'c1r', 'master_node = 1');
	my $h2 = bg($n2);
	my $w1s = bg($n1);
	is($h2->query_safe("SELECT pgrac_ges_lock('$r')"), 't', "$label: node 2 holds $r EX (master 1)");
	my $w = start_waiter($w1s, "SELECT pgrac_ges_lock('$r', 'EX', -1)");
	ok( poll_sql($n3,
			"SELECT count(*) = 1 FROM pg_cluster_ges_locks WHERE resource = '$r' AND state = 'waiting' AND node_id = 1",
			10),
		"$label: the node 1 backend waits");
	my $lpid = $c->worker_pid(1, 'pgrac_ic listener');
	my $t = time;
	sql($n1, "SELECT pg_terminate_backend($lpid)");
	my $back = 0;
	my $granted_early = 0;
	poll_until(
		4,
		sub {
			$back ||= (sql_value($n1,
					"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pgrac_ic listener' AND pid <> $lpid",
					5) // '') eq '1';
			if (waiter_done($w) && $w->{out} eq 't')
			{
				$granted_early = 1;
			}
			probe_refused($n3, $r, \%st);
			check_grants($n3, $r, \%st);
			return 0;
		},
		200);
	note("$label: listener back: " . ($back ? 'yes' : 'no') . ' after 4 s of polling');
	ok($back || poll_sql($n1,
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pgrac_ic listener' AND pid <> $lpid", 15),
		"$label: node 1's listener is back");
	is($granted_early, 0, "$label: the waiter was not granted while node 2 held $r");
	ok(!$w->{done}, "$label: the waiter is still waiting 4 s after the listener was terminated")
	  or diag("waiter answered: out '$w->{out}' err '$w->{err}'");
	my ($tok, $err) = bq($h2, "SELECT pgrac_ges_lock_token('$r') IS NOT NULL");
	is($tok, 't', "$label: node 2 still holds $r") or diag($err);
	probe_refused($n3, $r, \%st);
	check_grants($n1, $r, \%st);
	my $tu = time;
	is($h2->query_safe("SELECT pgrac_ges_unlock('$r')"), 't', "$label: node 2 unlocks");
	ok(wait_waiter($w, 15), "$label: the waiter answered after the unlock");
	is($w->{out}, 't', "$label: the waiter is granted") or diag("waiter stderr: $w->{err}");
	note("$label: waiter answered " . ($w->{done} ? sprintf('%.2f s', $w->{at} - $tu) : 'never')
		  . ' after the unlock, ' . elapsed($t) . ' after the listener was terminated');
	check_grants($n3, $r, \%st);
	probe_refused($n3, $r, \%st) if $w->{done} && $w->{out} eq 't';
	cancel_waiter($w, $n1);
	bq($w1s, 'SELECT pgrac_ges_unlock_all()');
	report_safety($label, \%st);
	check_no_leak($label, $r);
	close_session($_) for $h2, $w1s;
}

# ------------------------------------------------------------------ case 2
# Two PR holders (nodes 2 and 3), an EX waiter on node 1 (the master) while
# node 1's listener restarts: EX is granted only once both PR are released.
{
	my $label = 'case 2 (two PR holders, EX waiter, master listener restart)';
	settle($label);
	my %st;
	my $r = resource_where($n1, 'c2r', 'master_node = 1');
	my $h2 = bg($n2);
	my $h3 = bg($n3);
	my $w1s = bg($n1);
	is($h2->query_safe("SELECT pgrac_ges_lock('$r', 'PR')"), 't', "$label: node 2 holds $r PR");
	is($h3->query_safe("SELECT pgrac_ges_lock('$r', 'PR')"), 't', "$label: node 3 holds $r PR");
	my $w = start_waiter($w1s, "SELECT pgrac_ges_lock('$r', 'EX', -1)");
	ok( poll_sql($n2,
			"SELECT count(*) = 1 FROM pg_cluster_ges_locks WHERE resource = '$r' AND state = 'waiting' AND node_id = 1",
			10),
		"$label: the EX request of node 1 waits");
	my $lpid = $c->worker_pid(1, 'pgrac_ic listener');
	my $t = time;
	sql($n1, "SELECT pg_terminate_backend($lpid)");
	my $early = 0;
	poll_until(
		4,
		sub {
			$early = 1 if waiter_done($w) && $w->{out} eq 't';
			check_grants($n2, $r, \%st);
			return 0;
		},
		250);
	ok( poll_sql($n1,
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pgrac_ic listener' AND pid <> $lpid", 15),
		"$label: node 1's listener is back");
	is($early, 0, "$label: EX not granted while both PR are held (4 s after the listener was terminated)");
	ok(!$w->{done}, "$label: the EX request still waits") or diag("waiter: out '$w->{out}' err '$w->{err}'");
	my ($o2, $e2) = bq($h2, "SELECT pgrac_ges_lock_token('$r') IS NOT NULL");
	my ($o3, $e3) = bq($h3, "SELECT pgrac_ges_lock_token('$r') IS NOT NULL");
	is("$o2/$o3", 't/t', "$label: both PR holders still hold") or diag("$e2 $e3");
	is($h2->query_safe("SELECT pgrac_ges_unlock('$r')"), 't', "$label: node 2 releases its PR");
	poll_until(
		1.5,
		sub {
			$early = 1 if waiter_done($w) && $w->{out} eq 't';
			check_grants($n2, $r, \%st);
			return 0;
		},
		250);
	is($early, 0, "$label: EX not granted while node 3 still holds PR");
	my $tu = time;
	is($h3->query_safe("SELECT pgrac_ges_unlock('$r')"), 't', "$label: node 3 releases its PR");
	ok(wait_waiter($w, 15), "$label: the EX waiter answered");
	is($w->{out}, 't', "$label: EX granted once both PR were released") or diag("waiter stderr: $w->{err}");
	note("$label: EX granted " . ($w->{done} ? sprintf('%.2f s', $w->{at} - $tu) : 'never')
		  . ' after the last PR release; ' . elapsed($t) . ' after the listener was terminated');
	check_grants($n2, $r, \%st);
	cancel_waiter($w, $n1);
	bq($w1s, 'SELECT pgrac_ges_unlock_all()');
	report_safety($label, \%st);
	check_no_leak($label, $r);
	close_session($_) for $h2, $h3, $w1s;
}

# ------------------------------------------------------------------ case 3
# The master's LMS worker for a resource is killed while one of the master
# node's own backends holds it: the restarted worker gets the node's locks
# back from its registry copy in shared memory, so the holder keeps the lock
# (same token) and nobody else gets it until it unlocks. Then the same with
# the master's own backend waiting: it gets an answer, never hangs.
{
	my $label = 'case 3a (master LMS killed, master-local holder)';
	settle($label);
	my %st;
	my $r = resource_where($n1, 'c3a', 'master_node = 1');
	my $k = sql_value($n1, "SELECT lms_worker FROM pgrac_ges_resource('$r')");
	my $h1 = bg($n1);
	is($h1->query_safe("SELECT pgrac_ges_lock('$r')"), 't', "$label: a node 1 backend holds $r (master 1, LMS $k)");
	my $tok0 = $h1->query_safe("SELECT pgrac_ges_lock_token('$r')");
	my $lms = $c->worker_pid(1, "pgrac_ic lms $k");
	my $t = time;
	sql($n1, "SELECT pg_terminate_backend($lms)");
	my $back_at;
	my $first_grant_at;
	poll_until(
		5,
		sub {
			$back_at //= time
			  if (sql_value($n1,
					"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pgrac_ic lms $k' AND pid <> $lms",
					5) // '') eq '1';
			my $p = probe_refused($n2, $r, \%st);
			$first_grant_at //= time if $p eq 't';
			check_grants($n3, $r, \%st);
			return 0;
		},
		250);
	note("$label: LMS $k back " . (defined $back_at ? sprintf('%.2f s', $back_at - $t) : 'not yet')
		  . ' after the kill; '
		  . (defined $first_grant_at
			? sprintf('node 2 was GRANTED %s %.2f s after the kill, before the holder heard anything', $r, $first_grant_at - $t)
			: 'no other node was granted while the holder had not been told'));
	ok( defined $back_at || poll_sql($n1,
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pgrac_ic lms $k' AND pid <> $lms", 15),
		"$label: LMS $k restarted");
	note("$label: pg_cluster_ges_locks rows of $r before the holder's next call: '"
		  . (sql_value($n3,
				"SELECT string_agg(node_id || '/' || pid || '/' || mode || '/' || state, ' ')
				   FROM pg_cluster_ges_locks WHERE resource = '$r'") // '?')
		  . "' (holder: node 1 pid $h1->{pgrac_pid}, token $tok0)");
	report_safety("$label, while the LMS restarted", \%st);
	is($first_grant_at, undef, "$label: no other node was granted $r while its holder holds it");
	# The restarted worker got this node's locks back (its registry copy in
	# shared memory): the holder still holds the lock, under the same token.
	my ($out, $err) = bq($h1, "SELECT pgrac_ges_lock_token('$r')");
	is($out, $tok0, "$label: the holder still holds $r with the same fencing token") or diag($err);
	ok($n1->log_contains(qr/LMS $k\): restarted; got back [1-9]\d* lock/),
		"$label: the restarted worker logged the locks it got back");
	is(sql_value($n2, "SELECT pgrac_ges_lock('$r', 'EX', 0)"), 'f',
		"$label: node 2 is still refused");
	my $tl = time;
	is($h1->query_safe("SELECT pgrac_ges_unlock('$r')"), 't', "$label: the holder unlocks");
	my $h2 = bg($n2);
	ok(poll_until(20, sub { ($h2->query("SELECT pgrac_ges_lock('$r', 'EX', 0)"))[0] eq 't' }, 100),
		"$label: after that, node 2 gets $r");
	$h2->{stderr} = '';
	note("$label: node 2 got it " . elapsed($tl) . ' after the unlock');
	my $tok2 = $h2->query_safe("SELECT pgrac_ges_lock_token('$r')");
	cmp_ok($tok2, '>', $tok0, "$label: the new grant's fencing token ($tok2) is above the old one ($tok0)");
	$h2->query_safe("SELECT pgrac_ges_unlock('$r')");
	close_session($h2);
	check_no_leak($label, $r);
	close_session($h1);

	$label = 'case 3b (master LMS killed, master-local waiter)';
	settle($label);
	%st = ();
	$r = resource_where($n1, 'c3b', 'master_node = 1');
	$k = sql_value($n1, "SELECT lms_worker FROM pgrac_ges_resource('$r')");
	$h2 = bg($n2);
	my $w1s = bg($n1);
	is($h2->query_safe("SELECT pgrac_ges_lock('$r')"), 't', "$label: node 2 holds $r (master 1, LMS $k)");
	my $w = start_waiter($w1s, "SELECT pgrac_ges_lock('$r', 'EX', -1)");
	ok( poll_sql($n3,
			"SELECT count(*) = 1 FROM pg_cluster_ges_locks WHERE resource = '$r' AND state = 'waiting' AND node_id = 1",
			10),
		"$label: the node 1 backend waits");
	$lms = $c->worker_pid(1, "pgrac_ic lms $k");
	$t = time;
	sql($n1, "SELECT pg_terminate_backend($lms)");
	my $early = 0;
	poll_until(
		4,
		sub {
			$early = 1 if waiter_done($w) && $w->{out} eq 't';
			probe_refused($n3, $r, \%st);
			check_grants($n3, $r, \%st);
			return 0;
		},
		250);
	ok( poll_sql($n1,
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pgrac_ic lms $k' AND pid <> $lms", 15),
		"$label: LMS $k restarted");
	is($early, 0, "$label: the waiter was not granted while node 2 holds $r");
	my ($tk, $e) = bq($h2, "SELECT pgrac_ges_lock_token('$r') IS NOT NULL");
	is($tk, 't', "$label: node 2 still holds $r after the LMS restart") or diag($e);
	note("$label: pg_cluster_ges_locks rows of $r after the LMS restart: '"
		  . (sql_value($n3,
				"SELECT string_agg(node_id || '/' || pid || '/' || mode || '/' || state, ' ')
				   FROM pg_cluster_ges_locks WHERE resource = '$r'") // '?')
		  . "' (waiter: node 1 pid $w1s->{pgrac_pid})");
	note("$label: after 4 s the waiter " . ($w->{done}
			? sprintf("answered (%.2f s after the kill): out '%s' err '%s'", $w->{at} - $t, $w->{out}, $w->{err})
			: 'still waits'));
	my $tu = time;
	is($h2->query_safe("SELECT pgrac_ges_unlock('$r')"), 't', "$label: node 2 unlocks");
	my $answered = wait_waiter($w, 15);
	ok($answered, "$label: the waiter got an answer (bounded: 15 s after the unlock)");
	if ($answered)
	{
		ok( $w->{out} eq 't' || $w->{err} =~ /ERROR:  (global lock|.*refused|.*lost)/,
			"$label: the answer is a grant or a named error (out '$w->{out}', err '$w->{err}')");
		note("$label: waiter answered "
			  . sprintf('%.2f s after the kill, %.2f s after the unlock', $w->{at} - $t, $w->{at} - $tu)
			  . ": out '$w->{out}' err '$w->{err}'");
	}
	else
	{
		diag("$label: the waiter HANGS: no answer " . elapsed($t) . ' after the LMS kill; cancelling it');
		cancel_waiter($w, $n1);
		diag("after cancel: out '" . ($w->{out} // '') . "' err '" . ($w->{err} // '') . "'");
	}
	check_grants($n3, $r, \%st);
	bq($w1s, 'SELECT pgrac_ges_unlock_all()');
	report_safety($label, \%st);
	check_no_leak($label, $r);
	close_session($_) for $h2, $w1s;
}

# ------------------------------------------------------------------ case 4
# The holder's instance frozen. Shorter than the lease: nothing changes.
# Longer than peer_timeout: the other two form an epoch without it, a waiter
# elsewhere is granted; after the thaw the frozen node was fenced, its
# holder's next call says "global lock lost", and it becomes a member again.
{
	my $label = 'case 4a (holder frozen 0.5 s, under the lease)';
	settle($label);
	my %st;
	my $r = resource_where($n1, 'c4a', 'master_node = 1');
	my $h3 = bg($n3);
	is($h3->query_safe("SELECT pgrac_ges_lock('$r')"), 't', "$label: node 3 holds $r (master 1)");
	my $tok = $h3->query_safe("SELECT pgrac_ges_lock_token('$r')");
	my %m0 = map { $_ => membership($c->node($_)) } 1 .. 3;
	my $f0 = history_count($n3, 'fenced');
	my $pids = freeze($n3);
	usleep(500_000);
	thaw($pids);
	usleep(1_000_000);
	my %m1 = map { $_ => membership($c->node($_)) } 1 .. 3;
	is( join(',', map { $m1{$_}{epoch} } 1 .. 3),
		join(',', map { $m0{$_}{epoch} } 1 .. 3),
		"$label: the epoch did not change on any node ($m0{1}{epoch})");
	is($m1{3}{fence_count}, $m0{3}{fence_count}, "$label: node 3 was not fenced (fence_count)");
	is(history_count($n3, 'fenced'), $f0, "$label: no 'fenced' event in node 3's history");
	is($m1{3}{state} . '/' . $m1{3}{lease_valid}, 'member/t', "$label: node 3 is a member with a lease");
	my ($o, $e) = bq($h3, "SELECT pgrac_ges_lock_token('$r')");
	is($o, $tok, "$label: node 3 still holds $r with the same token") or diag($e);
	probe_refused($n1, $r, \%st);
	probe_refused($n2, $r, \%st);
	check_grants($n2, $r, \%st);
	is($h3->query_safe("SELECT pgrac_ges_unlock('$r')"), 't', "$label: node 3 unlocks");
	report_safety($label, \%st);
	check_no_leak($label, $r, $n2);
	close_session($h3);

	$label = 'case 4b (holder frozen > peer_timeout)';
	settle($label);
	%st = ();
	$r = resource_where($n1, 'c4b', 'master_node = 1');
	$h3 = bg($n3);
	my $w2s = bg($n2);
	is($h3->query_safe("SELECT pgrac_ges_lock('$r')"), 't', "$label: node 3 holds $r (master 1)");
	my $tok3 = $h3->query_safe("SELECT pgrac_ges_lock_token('$r')");
	my $w = start_waiter($w2s, "SELECT pgrac_ges_lock('$r', 'EX', -1)");
	ok( poll_sql($n1,
			"SELECT count(*) = 1 FROM pg_cluster_ges_locks WHERE resource = '$r' AND state = 'waiting' AND node_id = 2",
			10),
		"$label: node 2 waits for $r");
	my $e0 = mem($n1, 'epoch');
	my $fenced0 = history_count($n3, 'fenced');
	my $fc0 = mem($n3, 'fence_count');
	my $t = time;
	$pids = freeze($n3);
	my ($epoch_at, $grant_at, $two);
	poll_until(
		15,
		sub {
			unless (defined $epoch_at)
			{
				my $m = membership($n1);
				if ($m && $m->{members} eq '{1,2}' && $m->{epoch} > $e0)
				{
					$epoch_at = time;
					$two = $m;
				}
			}
			$grant_at //= time if waiter_done($w);
			check_grants($n1, $r, \%st) if defined $epoch_at;
			return defined $epoch_at && defined $grant_at && time - $t >= 4;
		},
		100);
	note("$label: nodes 1 and 2 committed "
		  . (defined $epoch_at ? sprintf('epoch %d {1,2} %.2f s', $two->{epoch}, $epoch_at - $t) : 'NO new epoch')
		  . ' after the freeze; the waiter answered '
		  . (defined $grant_at ? sprintf('%.2f s', $grant_at - $t) : 'never')
		  . ' after the freeze');
	ok(defined $epoch_at, "$label: while node 3 is frozen nodes 1 and 2 form an epoch of {1,2}");
	ok($w->{done} && $w->{out} eq 't', "$label: while node 3 is frozen the waiter on node 2 is granted")
	  or diag("waiter: done $w->{done} out '" . ($w->{out} // '') . "' err '" . ($w->{err} // '') . "'");
	# Node 3's lease (1.5 s) ran from a ping it sent before the freeze: a
	# grant earlier than 1.5 s after the freeze could overlap its holding.
	cmp_ok(defined $grant_at ? $grant_at - $t : 0, '>=', 1.5,
		"$label: the waiter was granted only after the frozen holder's lease (1.5 s) had run out");
	my $frozen_for = time - $t;
	thaw($pids);
	note(sprintf('%s: node 3 was frozen %.2f s', $label, $frozen_for));
	my $tt = time;
	my ($o3, $e3) = bq($h3, "SELECT pgrac_ges_lock_token('$r')");
	like($e3, qr/global lock lost/, "$label: the frozen holder's next GES call raises 'global lock lost'")
	  or diag("holder got out '$o3' err '$e3'");
	note("$label: the holder's first call after the thaw answered in " . elapsed($tt));
	probe_refused($n1, $r, \%st);
	check_grants($n1, $r, \%st);
	ok( poll_sql($n3, "SELECT count(*) > $fenced0 FROM pg_cluster_membership_history WHERE event = 'fenced'", 10),
		"$label: node 3's history shows a 'fenced' event");
	cmp_ok(mem($n3, 'fence_count') || 0, '>', $fc0, "$label: node 3's fence_count went up");
	my $rejoined = poll_sql($n3,
		"SELECT state = 'member' AND lease_valid AND cardinality(members) = 3 FROM pg_cluster_membership", 20);
	ok($rejoined, "$label: node 3 is a member of a 3-node view again");
	my $ep3 = mem($n3, 'epoch') || 0;
	cmp_ok($ep3, '>', $two ? $two->{epoch} : $e0, "$label: in a later epoch ($ep3)");
	note("$label: node 3 a member again " . elapsed($tt) . " after the thaw, epoch $ep3");
	my $h = sql_value($n3,
		"SELECT string_agg(epoch || ':' || event || ':' || members::text, ' ' ORDER BY at)
		   FROM pg_cluster_membership_history WHERE at > now() - interval '30 s'");
	note("$label: node 3's recent history: " . ($h // '?'));
	# The waiter (node 2) still holds; nobody else gets it.
	probe_refused($n3, $r, \%st);
	probe_refused($n1, $r, \%st);
	check_grants($n1, $r, \%st);
	my ($o2, $e2) = bq($w2s, "SELECT pgrac_ges_lock_token('$r')");
	ok($o2 ne '' && $e2 eq '', "$label: node 2 still holds $r after node 3 rejoined") or diag($e2);
	cmp_ok($o2 || 0, '>', $tok3, "$label: node 2's fencing token ($o2) is above the frozen holder's ($tok3)");
	bq($w2s, 'SELECT pgrac_ges_unlock_all()');
	bq($h3, 'SELECT pgrac_ges_unlock_all()');
	report_safety($label, \%st);
	check_no_leak($label, $r);
	close_session($_) for $h3, $w2s;
}

# ------------------------------------------------------------------ case 5
# The waiter's instance frozen and thawed (> peer_timeout): its request gets
# a named error, or a grant only when the resource is free; never two EX
# holders in the view of a third node.
{
	my $label = 'case 5a (waiter frozen, holder keeps holding)';
	settle($label);
	my %st;
	my $r = resource_where($n1, 'c5a', 'master_node = 1');
	my $h2 = bg($n2);
	my $w3s = bg($n3);
	is($h2->query_safe("SELECT pgrac_ges_lock('$r')"), 't', "$label: node 2 holds $r (master 1)");
	my $w = start_waiter($w3s, "SELECT pgrac_ges_lock('$r', 'EX', -1)");
	ok( poll_sql($n1,
			"SELECT count(*) = 1 FROM pg_cluster_ges_locks WHERE resource = '$r' AND state = 'waiting' AND node_id = 3",
			10),
		"$label: node 3 waits for $r");
	my $t = time;
	my $pids = freeze($n3);
	my $excluded_at;
	poll_until(
		12,
		sub {
			$excluded_at //= time if mem($n1, 'members') eq '{1,2}';
			check_grants($n1, $r, \%st);
			return defined $excluded_at && time - $t >= 4;
		},
		200);
	note("$label: node 3 left the view "
		  . (defined $excluded_at ? sprintf('%.2f s', $excluded_at - $t) : 'NEVER') . ' after the freeze');
	ok(defined $excluded_at, "$label: nodes 1 and 2 form an epoch without node 3");
	thaw($pids);
	my $tt = time;
	my $early = 0;
	poll_until(
		3,
		sub {
			$early = 1 if waiter_done($w) && $w->{out} eq 't';
			check_grants($n1, $r, \%st);
			return 0;
		},
		200);
	is($early, 0, "$label: the waiter was not granted while node 2 held $r");
	my ($tk, $e) = bq($h2, "SELECT pgrac_ges_lock_token('$r') IS NOT NULL");
	is($tk, 't', "$label: node 2 still holds $r") or diag($e);
	my $tu = time;
	is($h2->query_safe("SELECT pgrac_ges_unlock('$r')"), 't', "$label: node 2 unlocks");
	my $answered = wait_waiter($w, 15);
	ok($answered, "$label: the waiter got an answer (bounded)");
	ok( $answered && ($w->{out} eq 't' || $w->{err} =~ /ERROR:  global lock/),
		"$label: a grant (now that $r is free) or a named error")
	  or diag("waiter: out '" . ($w->{out} // '') . "' err '" . ($w->{err} // '') . "'");
	note("$label: waiter answered "
		  . ($answered ? sprintf('%.2f s after the thaw (%s the unlock)', $w->{at} - $tt,
				$w->{at} < $tu ? 'before' : sprintf('%.2f s after', $w->{at} - $tu)) : 'never')
		  . ": out '" . ($w->{out} // '') . "' err '" . ($w->{err} // '') . "'");
	cancel_waiter($w, $n3);
	check_grants($n1, $r, \%st);
	bq($w3s, 'SELECT pgrac_ges_unlock_all()');
	report_safety($label, \%st);
	check_no_leak($label, $r, $n1);
	close_session($_) for $h2, $w3s;

	# The holder unlocks while the waiter's node is frozen, before it is
	# excluded: the master may grant to the frozen node. Once it is excluded
	# another node takes the lock; after the thaw the frozen waiter must not
	# believe it holds it too.
	$label = 'case 5b (waiter frozen, holder unlocks during the freeze)';
	settle($label);
	%st = ();
	$r = resource_where($n1, 'c5b', 'master_node = 1');
	$h2 = bg($n2);
	$w3s = bg($n3);
	my $h1 = bg($n1);
	is($h2->query_safe("SELECT pgrac_ges_lock('$r')"), 't', "$label: node 2 holds $r (master 1)");
	$w = start_waiter($w3s, "SELECT pgrac_ges_lock('$r', 'EX', -1)");
	ok( poll_sql($n1,
			"SELECT count(*) = 1 FROM pg_cluster_ges_locks WHERE resource = '$r' AND state = 'waiting' AND node_id = 3",
			10),
		"$label: node 3 waits for $r");
	$t = time;
	$pids = freeze($n3);
	usleep(300_000);
	is($h2->query_safe("SELECT pgrac_ges_unlock('$r')"), 't', "$label: node 2 unlocks 0.3 s into the freeze");
	my $got_at;
	poll_until(
		12,
		sub {
			unless (defined $got_at)
			{
				my ($o) = bq($h1, "SELECT pgrac_ges_lock('$r', 'EX', 0)");
				$got_at = time if $o eq 't';
			}
			check_grants($n2, $r, \%st);
			return defined $got_at && time - $t >= 4;
		},
		200);
	note("$label: node 1 got $r "
		  . (defined $got_at ? sprintf('%.2f s', $got_at - $t) : 'NEVER') . ' after the freeze of node 3');
	ok(defined $got_at, "$label: a node 1 backend gets $r while node 3 is frozen");
	thaw($pids);
	$tt = time;
	$early = 0;
	poll_until(
		3,
		sub {
			$early = 1 if waiter_done($w) && $w->{out} eq 't';
			check_grants($n2, $r, \%st);
			return 0;
		},
		200);
	is($early, 0, "$label: the thawed waiter was not granted while node 1 holds $r");
	($tk, $e) = bq($h1, "SELECT pgrac_ges_lock_token('$r') IS NOT NULL");
	is($tk, 't', "$label: node 1 still holds $r") or diag($e);
	$tu = time;
	is($h1->query_safe("SELECT pgrac_ges_unlock('$r')"), 't', "$label: node 1 unlocks");
	$answered = wait_waiter($w, 15);
	ok($answered, "$label: the waiter got an answer (bounded)");
	ok( $answered && ($w->{out} eq 't' || $w->{err} =~ /ERROR:  global lock/),
		"$label: a grant (now that $r is free) or a named error")
	  or diag("waiter: out '" . ($w->{out} // '') . "' err '" . ($w->{err} // '') . "'");
	note("$label: waiter answered "
		  . ($answered ? sprintf('%.2f s after the thaw (%s node 1 unlocked)', $w->{at} - $tt,
				$w->{at} < $tu ? 'before' : sprintf('%.2f s after', $w->{at} - $tu)) : 'never')
		  . ": out '" . ($w->{out} // '') . "' err '" . ($w->{err} // '') . "'");
	cancel_waiter($w, $n3);
	check_grants($n2, $r, \%st);
	bq($w3s, 'SELECT pgrac_ges_unlock_all()');
	report_safety($label, \%st);
	check_no_leak($label, $r, $n1);
	close_session($_) for $h1, $h2, $w3s;
}

# ------------------------------------------------------------------ case 6
# The master frozen while the holder unlocks: after the thaw the resource is
# free within a bounded time, not stuck until the holder's session ends.
for my $freeze_s (1, 4)
{
	my $label = "case 6 (master frozen ${freeze_s} s while the holder unlocks)";
	settle($label);
	my %st;
	my $r = resource_where($n1, "c6f$freeze_s", 'master_node = 1');
	my $h2 = bg($n2);
	is($h2->query_safe("SELECT pgrac_ges_lock('$r')"), 't', "$label: node 2 holds $r (master 1)");
	my $t = time;
	my $pids = freeze($n1);
	usleep(200_000);
	my $tu = time;
	my ($o, $e) = bq($h2, "SELECT pgrac_ges_unlock('$r')");
	is($o, 't', "$label: node 2 unlocks while the master is frozen") or diag($e);
	note(sprintf('%s: the unlock returned in %.0f ms', $label, (time - $tu) * 1000));
	usleep(1_000_000 * $freeze_s - (time - $t) * 1_000_000) if time - $t < $freeze_s;
	thaw($pids);
	my $tt = time;
	ok( poll_sql($n3, "SELECT pgrac_ges_lock('$r', 'EX', 0) AND pgrac_ges_unlock('$r')", 20),
		"$label: after the thaw a NOWAIT EX from node 3 succeeds (bounded)");
	note("$label: $r free for node 3 " . elapsed($tt) . ' after the thaw');
	my ($still) = bq($h2, "SELECT pgrac_ges_lock_token('$r') IS NULL");
	is($still, 't', "$label: the holder's session does not hold $r any more");
	check_grants($n3, $r, \%st);
	report_safety($label, \%st);
	check_no_leak($label, $r, $n2);
	close_session($h2);
}

# ------------------------------------------------------------------ case 7
# kill -9 of the master instance while node 2 holds and node 3 waits; the
# master restarts. The holder keeps its lock (NOWAIT from the others
# refused) until it unlocks, then the waiter gets it; never two holders.
{
	my $label = 'case 7 (master killed -9 and restarted)';
	settle($label);
	my %st;
	my $r = resource_where($n1, 'c7r', 'master_node = 1');
	my $h2 = bg($n2);
	my $w3s = bg($n3);
	is($h2->query_safe("SELECT pgrac_ges_lock('$r')"), 't', "$label: node 2 holds $r (master 1)");
	my $w = start_waiter($w3s, "SELECT pgrac_ges_lock('$r', 'EX', -1)");
	ok( poll_sql($n2,
			"SELECT count(*) = 1 FROM pg_cluster_ges_locks WHERE resource = '$r' AND state = 'waiting' AND node_id = 3",
			10),
		"$label: node 3 waits for $r");
	my $t = time;
	kill9_instance($n1);
	my $early = 0;
	my $two_at;
	poll_until(
		12,
		sub {
			$two_at //= time if mem($n2, 'members') eq '{2,3}';
			$early = 1 if waiter_done($w) && $w->{out} eq 't';
			check_grants($n2, $r, \%st);
			return defined $two_at && time - $two_at > 1;
		},
		200);
	note("$label: nodes 2 and 3 formed an epoch of {2,3} "
		  . (defined $two_at ? sprintf('%.2f s', $two_at - $t) : 'NEVER') . ' after the kill');
	ok(defined $two_at, "$label: nodes 2 and 3 form an epoch without node 1");
	is($early, 0, "$label: the waiter was not granted while node 2 holds (node 1 down)");
	probe_refused($n3, $r, \%st);
	probe_refused($n2, $r, \%st);
	my $ts = time;
	$n1->start;
	my $member = poll_sql($n1,
		"SELECT state = 'member' AND lease_valid AND cardinality(members) = 3 FROM pg_cluster_membership", 30);
	ok($member, "$label: node 1 restarted and is a member of a 3-node view");
	note("$label: node 1 a member again " . elapsed($ts) . ' after its restart began');
	poll_until(
		2,
		sub {
			$early = 1 if waiter_done($w) && $w->{out} eq 't';
			check_grants($n2, $r, \%st);
			return 0;
		},
		200);
	is($early, 0, "$label: the waiter was not granted while node 2 holds (node 1 back)");
	probe_refused($n1, $r, \%st);
	probe_refused($n3, $r, \%st);
	my ($tk, $e) = bq($h2, "SELECT pgrac_ges_lock_token('$r') IS NOT NULL");
	is($tk, 't', "$label: node 2 still holds $r") or diag($e);
	ok(!$w->{done}, "$label: node 3's request still waits")
	  or diag("waiter: out '$w->{out}' err '$w->{err}'");
	my $tu = time;
	is($h2->query_safe("SELECT pgrac_ges_unlock('$r')"), 't', "$label: node 2 unlocks");
	ok(wait_waiter($w, 15), "$label: the waiter answered after the unlock");
	is($w->{out}, 't', "$label: the waiter is granted") or diag("waiter stderr: $w->{err}");
	note("$label: waiter granted "
		  . ($w->{done} ? sprintf('%.2f s', $w->{at} - $tu) : 'never') . ' after the unlock');
	check_grants($n2, $r, \%st);
	probe_refused($n1, $r, \%st) if $w->{done} && $w->{out} eq 't';
	cancel_waiter($w, $n3);
	bq($w3s, 'SELECT pgrac_ges_unlock_all()');
	report_safety($label, \%st);
	check_no_leak($label, $r, $n1);
	close_session($_) for $h2, $w3s;
}

# Case 9 (two instances) is covered elsewhere.

settle('end');
note('total run time ' . elapsed($T0));
$c->stop_all('fast');
done_testing();
