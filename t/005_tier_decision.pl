
# How the tier is decided at postmaster start (docs/configuration.md), end to
# end on one instance: auto, an explicit RDMA tier, and strict mode, on the
# host without an RDMA device (auto starts at tier3 with a WARNING and the
# reason in pg_cluster_rdma_status) and in the soft-RoCE VM (auto starts at
# tier2; tier1 asked on a RoCE port falls back to tier2, or refuses to start
# when strict).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my @devices = glob('/sys/class/infiniband/*');
my $rdma = @devices > 0;
my $addr = $rdma ? ($ENV{PGRAC_RDMA_ADDR} // $ENV{RXEVM_IPADDR}) : '127.0.0.1';
plan skip_all => 'an RDMA device without PGRAC_RDMA_ADDR (its netdev address)' unless $addr;
note('single instance at ' . ($rdma ? 'tier2' : 'tier3') . ' (auto on this machine)');

my $node = PostgreSQL::Test::Cluster->new('tiers');
$node->init;
my $ic_port = PostgreSQL::Test::Cluster::get_free_port();
$node->append_conf('postgresql.conf', <<"EOC");
shared_preload_libraries = 'pgrac_ic'
cluster.interconnect_tier = auto
cluster.interconnect_strict = off
cluster.node_id = 1
cluster.nodes = '1\@$addr:$ic_port'
EOC

# Starts with these tier settings; returns whether the start succeeded and
# the server log written by it.
sub start_with
{
	my ($tier, $strict) = @_;
	$node->stop if defined $node->{_pid};
	$node->adjust_conf('postgresql.conf', 'cluster.interconnect_tier', $tier);
	$node->adjust_conf('postgresql.conf', 'cluster.interconnect_strict', $strict ? 'on' : 'off');
	my $offset = -s $node->logfile // 0;
	my $ok = $node->start(fail_ok => 1);
	my $log = slurp_file($node->logfile, $offset);
	return ($ok, $log);
}

# How many tier fallbacks the errors view counted since this start.
sub fallbacks
{
	return $node->safe_psql('postgres',
		"SELECT total FROM pg_cluster_rdma_error_totals WHERE type = 'tier_fallback'");
}

sub status
{
	$node->safe_psql('postgres', 'CREATE EXTENSION IF NOT EXISTS pgrac_ic');
	return $node->safe_psql('postgres',
		"SELECT tier || '|' || tier_requested || '|' || tier_reason FROM pg_cluster_rdma_status");
}

if (!$rdma)
{
	my ($ok, $log) = start_with('auto', 0);
	ok($ok, 'auto without an RDMA device starts');
	like($log, qr/WARNING:  No RDMA HCA detected; running at Tier 3 \(TCP\)/,
		'... with the WARNING the docs give');
	like(status(), qr/^tier3\|auto\|No RDMA HCA detected; running at Tier 3 \(TCP\)$/,
		'... and pg_cluster_rdma_status says tier3, auto and why');
	is(fallbacks(), '1', '... and the errors view counts one tier_fallback');

	($ok, $log) = start_with('tier1', 0);
	ok($ok, 'tier1 without an RDMA device starts (not strict)');
	like(status(), qr/^tier3\|tier1\|No RDMA HCA detected/, '... at tier3, saying why');

	for my $tier ('auto', 'tier2')
	{
		($ok, $log) = start_with($tier, 1);
		ok(!$ok, "strict $tier without an RDMA device refuses to start");
		like($log,
			qr/FATAL:  pgrac_ic cannot start at cluster.interconnect_tier = $tier: No RDMA HCA detected; cluster.interconnect_strict is on/,
			"... with a FATAL that says why");
	}
}
else
{
	my ($ok, $log) = start_with('auto', 0);
	ok($ok, 'auto with a RoCE port starts');
	like(status(), qr/^tier2\|auto\|\w+ port \d+ is an ACTIVE Ethernet port \(RoCE v2 GID \d+\); running at Tier 2/,
		'... at tier2, and says which port');
	unlike($log, qr/WARNING:.*running at/, '... without a fallback WARNING');
	is(fallbacks(), '0', '... and no tier_fallback counted');

	($ok, $log) = start_with('tier1', 0);
	ok($ok, 'tier1 on a RoCE port starts (not strict)');
	like(status(), qr/^tier2\|tier1\|tier1 requested but no ACTIVE InfiniBand port .*; running at Tier 2/,
		'... falls back to the RoCE port, saying why');
	like($log, qr/WARNING:  tier1 requested but no ACTIVE InfiniBand port/, '... with a WARNING');
	is(fallbacks(), '1', '... counted as a tier_fallback');

	($ok, $log) = start_with('tier1', 1);
	ok(!$ok, 'strict tier1 on a RoCE port refuses to start');
	like($log,
		qr/FATAL:  pgrac_ic cannot start at cluster.interconnect_tier = tier1: tier1 requested but no ACTIVE InfiniBand port/,
		'... with a FATAL that says why');
}

# stub and tier3 are taken as asked, whatever the hardware.
for my $tier ('stub', 'tier3')
{
	my ($ok) = start_with($tier, 1);
	ok($ok, "$tier starts, strict or not");
	like(status(), qr/^$tier\|$tier\|cluster.interconnect_tier = $tier$/, "... and says so");
}
$node->stop;
done_testing();
