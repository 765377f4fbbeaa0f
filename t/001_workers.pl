
# The IC listener and the LMS workers: present, restarted when they die,
# there again after a restart of the instance; bad settings stop the start
# with a message that says what is wrong.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

note('single instance at stub');
my $node = PostgreSQL::Test::Cluster->new('single');
$node->init;
$node->append_conf('postgresql.conf', <<'EOC');
shared_preload_libraries = 'pgrac_ic'
cluster.interconnect_tier = stub
cluster.lms_workers = 3
restart_after_crash = on
EOC
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pgrac_ic');

my $workers_sql = q{SELECT string_agg(backend_type, ',' ORDER BY backend_type)
  FROM pg_stat_activity WHERE backend_type LIKE 'pgrac_ic%'};
my $expected = 'pgrac_ic listener,pgrac_ic lms 0,pgrac_ic lms 1,pgrac_ic lms 2';

sub pid_of
{
	my ($type) = @_;
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = '$type'");
}

ok($node->poll_query_until('postgres', "SELECT ($workers_sql) = '$expected'"),
	'listener and three LMS workers are running');
cmp_ok($node->safe_psql('postgres', 'SELECT pgrac_ic_ping(1)'), '>', 0, 'ping to self');

# A listener that exits (SIGTERM, as pg_terminate_backend) is started again.
my $listener = pid_of('pgrac_ic listener');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($listener)");
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pgrac_ic listener' AND pid <> $listener"
	),
	'terminated listener is restarted');
ok($node->poll_query_until('postgres', q{SELECT listener_ready FROM pg_cluster_rdma_status}),
	'restarted listener is ready');
cmp_ok($node->safe_psql('postgres', 'SELECT pgrac_ic_ping(1)'),
	'>', 0, 'ping works through the new listener');

# An LMS worker that exits is started again, and serves requests.
my $lms = pid_of('pgrac_ic lms 1');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($lms)");
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pgrac_ic lms 1' AND pid <> $lms"
	),
	'terminated LMS worker is restarted');
is( $node->safe_psql('postgres',
		'SELECT iterations_done FROM pgrac_ic_bench(1, 64, 300)'),
	'300',
	'RPCs routed over every LMS worker complete');

# A worker killed outright makes the postmaster reinitialize; everything comes back.
$lms = pid_of('pgrac_ic lms 0');
kill 'KILL', $lms;
ok($node->poll_query_until('postgres', "SELECT ($workers_sql) = '$expected'"),
	'workers are back after a SIGKILL and crash recovery');
ok($node->poll_query_until('postgres', 'SELECT pgrac_ic_ping(1) > 0'),
	'ping works after crash recovery');

# A restart of the instance brings them back too.
$node->restart;
ok($node->poll_query_until('postgres', "SELECT ($workers_sql) = '$expected'"),
	'workers are present after a restart');
cmp_ok($node->safe_psql('postgres', 'SELECT pgrac_ic_ping(1)'), '>', 0,
	'ping after restart');

# A clean shutdown stops every worker.
$node->stop('fast');
my $log = slurp_file($node->logfile);
like($log, qr/pgrac_ic listener started: node 1, tier stub/, 'listener logged its start');

# ---- bad settings at start: a clear FATAL, nothing half-started
sub start_fails_with
{
	my ($name, $conf, $pattern) = @_;
	my $bad = PostgreSQL::Test::Cluster->new($name);
	$bad->init;
	$bad->append_conf('postgresql.conf', "shared_preload_libraries = 'pgrac_ic'\n$conf");
	my $ok = $bad->start(fail_ok => 1);
	ok(!$ok, "$name: the instance refuses to start");
	like(slurp_file($bad->logfile), $pattern, "$name: the log says why");
}

my $key = "$PostgreSQL::Test::Utils::tmp_check/open.key";
open my $fh, '>', $key or die;
print $fh "0123456789abcdef0123456789abcdef\n";
close $fh;
chmod 0644, $key;

start_fails_with('node_not_listed',
	"cluster.node_id = 3\ncluster.nodes = '1\@127.0.0.1:7401,2\@127.0.0.1:7402'\n",
	qr/cluster\.node_id 3 is not listed in cluster\.nodes/);
start_fails_with('timeout_too_short',
	"cluster.heartbeat_interval = 1s\ncluster.peer_timeout = 1500ms\n",
	qr/cluster\.peer_timeout \(1500 ms\) must be at least twice cluster\.heartbeat_interval/);
start_fails_with('no_key',
	"cluster.interconnect_tier = tier3\ncluster.nodes = '1\@127.0.0.1:7401,2\@127.0.0.1:7402'\n",
	qr/cluster\.auth_key_file must be set/);
start_fails_with('open_key',
	"cluster.interconnect_tier = tier3\ncluster.nodes = '1\@127.0.0.1:7401,2\@127.0.0.1:7402'\ncluster.auth_key_file = '$key'\n",
	qr/cluster\.auth_key_file: .*(mode|permission|readable)/i);
start_fails_with('bad_nodes', "cluster.nodes = '1\@nowhere'\n",
	qr/FATAL:  invalid value for parameter "cluster\.nodes": entry 1/);

done_testing();
