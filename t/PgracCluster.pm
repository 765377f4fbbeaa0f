
# Copyright: pgrac_ic authors. Test helper: an N-instance pgrac_ic cluster on
# loopback, every instance a physical copy of one data directory (same system
# identifier and relfilenodes, as instances on shared storage would have), or
# (streaming => 1) a primary and streaming standbys made with pg_basebackup.
package PgracCluster;

use strict;
use warnings;

use File::Copy;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::RecursiveCopy;
use PostgreSQL::Test::Utils;
use Test::More;

# PgracCluster->new(n => 3, tier => 'tier3', conf => "extra lines", name => 'node',
#                   node_conf => { 2 => "lines for node 2" }, start => 1,
#                   fixed_tier => 0, before_copy => sub { my $node1 = shift; ... },
#                   preload => ['pgrac_example'], initdb_extra => [ '--data-checksums' ])
# The tier: PGRAC_TEST_TIER when set (scripts/test runs the cluster suites at
# tier3 on the host and at tier2 in the soft-RoCE VM), else `tier`; a test
# whose cases only make sense on one tier passes fixed_tier => 1. At tier1 and
# tier2 every instance listens on the RDMA netdev's address, PGRAC_RDMA_ADDR
# (in the VM: RXEVM_IPADDR); at tier3 on 127.0.0.1.
# before_copy (optional): run against node 1, started alone without pgrac_ic,
# before its data directory is copied (e.g. pgbench -i): every copy then has
# the same relations with the same relfilenodes and contents.
# preload (optional): libraries loaded after pgrac_ic (shared_preload_libraries
# = 'pgrac_ic,...'), e.g. an upper layer that registers handlers.
# initdb_extra (optional): more initdb options for node 1's data directory,
# which every other instance copies.
# streaming (optional): node 1 is a primary (initialised with allows_streaming)
# and nodes 2..n are hot standbys streaming from it, each made from one
# pg_basebackup of node 1 (taken after before_copy) with init_from_backup's
# has_streaming. A standby is read-only, so start_all creates the extension
# on node 1 only and waits until every standby has replayed it.
sub new
{
	my ($class, %args) = @_;
	my $n = $args{n} // 3;
	my $tier = $args{tier} // 'tier3';
	$tier = $ENV{PGRAC_TEST_TIER} if $ENV{PGRAC_TEST_TIER} && !$args{fixed_tier};
	my $host = '127.0.0.1';
	if ($tier eq 'tier1' || $tier eq 'tier2')
	{
		$host = $ENV{PGRAC_RDMA_ADDR} // $ENV{RXEVM_IPADDR}
		  // die "$tier needs PGRAC_RDMA_ADDR, the address of the RDMA netdev\n";
	}
	note("cluster of $n instances at $tier on $host");
	my $self = bless {
		n => $n,
		tier => $tier,
		host => $host,
		nodes => [],
		ic_ports => [],
		preload => join(',', 'pgrac_ic', @{ $args{preload} // [] }),
		streaming => $args{streaming} // 0,
	}, $class;

	$self->{ic_ports} = [ map { PostgreSQL::Test::Cluster::get_free_port() } 1 .. $n ];
	$self->{key_file} = $self->write_key('pgrac.key', 0600);

	# name: prefix of the instances' names (several clusters in one test).
	my $prefix = $args{name} // 'node';
	my $first = PostgreSQL::Test::Cluster->new("${prefix}1");
	$first->init(
		($args{initdb_extra} ? (extra => $args{initdb_extra}) : ()),
		($self->{streaming} ? (allows_streaming => 1) : ()));
	push @{ $self->{nodes} }, $first;
	if ($self->{streaming})
	{
		# The base backup is taken before any pgrac_ic setting is in node 1's
		# postgresql.conf, so that each standby gets only its own (below).
		$first->start;
		$args{before_copy}->($first) if $args{before_copy};
		$first->backup('pgrac_base');
		$first->stop;
		for my $i (2 .. $n)
		{
			my $node = PostgreSQL::Test::Cluster->new("$prefix$i");
			$node->init_from_backup($first, 'pgrac_base', has_streaming => 1);
			push @{ $self->{nodes} }, $node;
			$self->stream_from($i, 1);
		}
	}
	else
	{
		if ($args{before_copy})
		{
			$first->start;
			$args{before_copy}->($first);
			$first->stop;
		}
		for my $i (2 .. $n)
		{
			my $node = PostgreSQL::Test::Cluster->new("$prefix$i");
			PostgreSQL::Test::RecursiveCopy::copypath($first->data_dir, $node->data_dir);
			chmod 0700, $node->data_dir;
			push @{ $self->{nodes} }, $node;
		}
	}
	for my $i (1 .. $n)
	{
		my $node = $self->node($i);
		$node->append_conf('postgresql.conf', $self->conf_for($i));
		$node->append_conf('postgresql.conf', $args{conf}) if $args{conf};
		# Extra settings for experiments, e.g. PGRAC_TEST_CONF='cluster.busy_poll_us = 0'.
		$node->append_conf('postgresql.conf', $ENV{PGRAC_TEST_CONF}) if $ENV{PGRAC_TEST_CONF};
		$node->append_conf('postgresql.conf', $args{node_conf}{$i})
		  if $args{node_conf} && $args{node_conf}{$i};
	}
	$self->start_all if $args{start} // 1;
	return $self;
}

# Points standby i's walreceiver at node j (takes effect at start, or on a
# reload), with application_name = its node name: wait_for_catchup and
# pg_stat_replication tell the standbys apart by it.
sub stream_from
{
	my ($self, $i, $j) = @_;
	my $node = $self->node($i);
	my $connstr = $self->node($j)->connstr . ' application_name=' . $node->name;
	$node->append_conf('postgresql.conf', "primary_conninfo = '$connstr'\n");
}

# A fresh random key file (hex) with the given mode; returns its path.
sub write_key
{
	my ($self, $name, $mode) = @_;
	my $path = "$PostgreSQL::Test::Utils::tmp_check/$name";
	open my $fh, '>', $path or die "cannot write $path: $!";
	print $fh join('', map { sprintf '%02x', int(rand(256)) } 1 .. 32), "\n";
	close $fh;
	chmod $mode, $path;
	return $path;
}

sub nodes_setting
{
	my ($self) = @_;
	return join(',', map { "$_\@$self->{host}:$self->{ic_ports}[$_ - 1]" } 1 .. $self->{n});
}

sub conf_for
{
	my ($self, $i) = @_;
	my $port = $self->node($i)->port;
	return <<"EOC";
port = $port
shared_preload_libraries = '$self->{preload}'
cluster.interconnect_tier = $self->{tier}
cluster.node_id = $i
cluster.nodes = '@{[ $self->nodes_setting ]}'
cluster.auth_key_file = '$self->{key_file}'
cluster.heartbeat_interval = 200ms
cluster.peer_timeout = 2s
cluster.rpc_timeout = 5s
cluster.lms_workers = 2
EOC
}

sub n { return $_[0]->{n}; }
# True when built as a primary (node 1) and streaming standbys.
sub streaming { return $_[0]->{streaming}; }
sub tier { return $_[0]->{tier}; }
# The address the instances' interconnect listens on.
sub ic_host { return $_[0]->{host}; }

# True when the cluster runs one of the given tiers; otherwise says in the
# output why the cases that follow are skipped here (use with SKIP blocks:
#   SKIP: { skip 'needs TCP', 3 unless $c->on_tier('tier3', 'kills TCP connections'); ... }).
sub on_tier
{
	my ($self, @args) = @_;
	my $why = pop @args;
	return 1 if grep { $_ eq $self->{tier} } @args;
	note("not at $self->{tier}: $why");
	return 0;
}
sub node { my ($self, $i) = @_; return $self->{nodes}[ $i - 1 ]; }
sub nodes { return @{ $_[0]->{nodes} }; }
sub ic_port { my ($self, $i) = @_; return $self->{ic_ports}[ $i - 1 ]; }

sub start_all
{
	my ($self) = @_;
	$_->start for $self->nodes;
	if ($self->{streaming})
	{
		# CREATE EXTENSION is refused on a standby (read-only); it arrives
		# there by replay.
		$self->node(1)->safe_psql('postgres', 'CREATE EXTENSION IF NOT EXISTS pgrac_ic');
		$self->node(1)->wait_for_catchup($self->node($_)) for 2 .. $self->{n};
	}
	else
	{
		for my $node ($self->nodes)
		{
			$node->safe_psql('postgres', 'CREATE EXTENSION IF NOT EXISTS pgrac_ic');
		}
	}
	$self->wait_all_up;
}

# Waits until node i sees every node UP (bounded by the test timeout).
sub wait_up
{
	my ($self, $i, $expected) = @_;
	$expected //= $self->{n};
	return $self->node($i)->poll_query_until('postgres',
		"SELECT count(*) = $expected FROM pg_cluster_ic_peers WHERE state = 'UP'");
}

sub wait_all_up
{
	my ($self) = @_;
	for my $i (1 .. $self->{n})
	{
		ok($self->wait_up($i), "node $i sees all $self->{n} nodes UP");
	}
	$self->wait_all_members;
}

# Waits until node i is a member of a committed view with `expected` members
# (default: all nodes) and a valid lease: global locks are served from then on.
sub wait_member
{
	my ($self, $i, $expected) = @_;
	$expected //= $self->{n};
	return $self->node($i)->poll_query_until('postgres',
		"SELECT state = 'member' AND lease_valid AND cardinality(members) = $expected "
		  . "FROM pg_cluster_membership");
}

sub wait_all_members
{
	my ($self) = @_;
	for my $i (1 .. $self->{n})
	{
		ok($self->wait_member($i), "node $i is a member of a view of all $self->{n} nodes");
	}
}

# Waits until node i sees node j in the given state.
sub wait_peer_state
{
	my ($self, $i, $j, $state) = @_;
	return $self->node($i)->poll_query_until('postgres',
		"SELECT state = '$state' FROM pg_cluster_ic_peers WHERE node_id = $j");
}

# Waits until every LMS worker of every instance has finished its start-up
# replay barrier: a NOWAIT global lock gets an answer on each instance (one
# assertion per instance).
sub wait_ges_ready
{
	my ($self) = @_;
	for my $i (1 .. $self->n)
	{
		ok( $self->node($i)->poll_query_until('postgres',
				"SELECT pgrac_ges_lock('warmup$i', 'EX', 0) AND pgrac_ges_unlock('warmup$i')"),
			"GES answers on node $i");
	}
}

# Sets cluster.serve_in_place on node i ('on' or 'off') and waits until its
# listener applied the reload: a ping from node j is then served in place, or
# not (served_in_place moves, or stays). True once it did.
sub set_serve_in_place
{
	my ($self, $i, $value, $j) = @_;
	my ($node, $from) = ($self->node($i), $self->node($j));
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET cluster.serve_in_place = $value; SELECT pg_reload_conf()");
	my $sql = "SELECT served_in_place FROM pg_cluster_rdma_counters WHERE peer_node_id = $j";
	for (1 .. 100)
	{
		my $before = $node->safe_psql('postgres', $sql);
		$from->safe_psql('postgres', "SELECT pgrac_ic_ping($i)");
		my $moved = $node->safe_psql('postgres', $sql) != $before;
		return 1 if $moved == ($value eq 'on');
		select(undef, undef, undef, 0.1);
	}
	return 0;
}

# PID of an instance's background worker by backend_type ("pgrac_ic listener").
sub worker_pid
{
	my ($self, $i, $type) = @_;
	return $self->node($i)->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = '$type'");
}

# A global lock resource name (prefix || g, g = 1..1000) whose placement
# satisfies $cond, a condition on pgrac_ges_resource's columns (master_node,
# lms_worker, route_key), e.g. 'master_node = 2'. A plain function.
sub resource_where
{
	my ($node, $prefix, $cond) = @_;
	return $node->safe_psql('postgres',
		"SELECT n FROM generate_series(1, 1000) g, LATERAL (SELECT '$prefix' || g AS n) s,
		        LATERAL pgrac_ges_resource(n) r WHERE $cond ORDER BY g LIMIT 1");
}

sub stop_all
{
	my ($self, $mode) = @_;
	$_->stop($mode // 'fast') for $self->nodes;
}

1;
