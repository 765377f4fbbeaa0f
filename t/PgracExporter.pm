
# Copyright: pgrac_ic authors. Test helper: Debian's prometheus-postgres-exporter run
# against one instance with monitoring/postgres_exporter_queries.yaml, its /metrics
# scraped and parsed (the Prometheus text format), and promtool, for t/040.
package PgracExporter;

use strict;
use warnings;

use HTTP::Tiny;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(sleep time);

our $BINARY = $ENV{PGRAC_PG_EXPORTER} // '/usr/bin/prometheus-postgres-exporter';
our $PROMTOOL = $ENV{PGRAC_PROMTOOL} // '/usr/bin/promtool';

# PgracExporter->start(node => $node, name => 'node1', queries => FILE, user => ROLE,
#                      queries_in_env => 0):
# an exporter on 127.0.0.1 (a free port) reading $node as ROLE over its Unix socket,
# as the Debian service would (DATA_SOURCE_NAME, default collectors on); the queries
# file given by --extend.query-path, or with queries_in_env by
# PG_EXPORTER_EXTEND_QUERY_PATH (docs/monitoring.md shows both). Returns once
# /metrics answers (bounded).
sub start
{
	my ($class, %args) = @_;
	my $node = $args{node};
	my $self = bless {
		name => $args{name},
		port => PostgreSQL::Test::Cluster::get_free_port(),
		log => "$PostgreSQL::Test::Utils::log_path/exporter_$args{name}.log",
	}, $class;
	local $ENV{DATA_SOURCE_NAME} = sprintf('host=%s port=%d user=%s dbname=postgres sslmode=disable',
		$node->host, $node->port, $args{user});
	local $ENV{PG_EXPORTER_EXTEND_QUERY_PATH} = $args{queries} if $args{queries_in_env};
	my @queries = $args{queries_in_env} ? () : ("--extend.query-path=$args{queries}");
	$self->{harness} = IPC::Run::start(
		[ $BINARY, "--web.listen-address=127.0.0.1:$self->{port}", @queries, '--log.level=warn' ],
		'<', \undef, '>>', $self->{log}, '2>>', $self->{log});
	my $deadline = time + 30;
	until (defined $self->get)
	{
		die "exporter $self->{name} did not answer on port $self->{port} (log: $self->{log})\n"
		  if time > $deadline || !$self->{harness}->pumpable;
		sleep 0.2;
	}
	return $self;
}

sub port { return $_[0]->{port}; }
sub log_file { return $_[0]->{log}; }

# The body of /metrics, or undef if it did not answer 200 (in time).
sub get
{
	my ($self) = @_;
	# Straight to loopback, whatever http_proxy says.
	my $http = HTTP::Tiny->new(timeout => 30, no_proxy => ['127.0.0.1']);
	my $r = $http->get("http://127.0.0.1:$self->{port}/metrics");
	return $r->{success} ? $r->{content} : undef;
}

# One scrape, parsed (PgracExporter::Scrape).
sub scrape
{
	my ($self) = @_;
	my $text = $self->get // die "scrape of exporter $self->{name} failed\n";
	return PgracExporter::Scrape->new($text);
}

sub stop
{
	my ($self) = @_;
	return unless $self->{harness};
	$self->{harness}->signal('TERM');
	eval { $self->{harness}->finish; 1 } or $self->{harness}->kill_kill;
	delete $self->{harness};
}

sub DESTROY { $_[0]->stop; }

# promtool with arguments (and input on stdin); returns (ok, stdout and stderr).
sub promtool
{
	my ($in, @args) = @_;
	my $out = '';
	my $ok = IPC::Run::run([ $PROMTOOL, @args ], '<', \$in, '>&', \$out,
		IPC::Run::timeout(60));
	return ($ok, $out);
}

# The pg_ samples of scrapes ({instance => scrape}) as promtool input series:
# {'name{labels,instance="..."}' => value}; NaN and infinities have no sample.
sub series_values
{
	my ($scrapes) = @_;
	my %values;
	for my $instance (sort keys %$scrapes)
	{
		for my $s ($scrapes->{$instance}->samples)
		{
			my ($name, $labels, $value) = @$s;
			next unless $name =~ /^pg_/ && $value =~ /^-?[0-9]/;
			my %l = (%$labels, instance => $instance);
			my $sel = join(',', map { qq{$_="} . escape($l{$_}) . '"' } sort keys %l);
			$values{"$name\{$sel\}"} = number($value);
		}
	}
	return \%values;
}

# A promtool rule test (JSON is YAML) that feeds the scrapes ({instance => scrape}) as
# constant series for `minutes` and checks that exactly the alerts `expected`
# ([alertname, {labels}] ...) fire at the end; written to DIR/NAME.json and run.
# Returns (ok, output).
sub alerts_firing_on
{
	my (%args) = @_;
	my $steps = $args{minutes} * 4;    # 15 s apart
	my $values = series_values($args{scrapes});
	my @series = map { +{ series => $_, values => "$values->{$_}x$steps" } } sort keys %$values;
	my (@exp, %by);
	for my $e (@{ $args{expected} })
	{
		my ($alert, $labels) = @$e;
		my %l = (%$labels, alertname => $alert);
		$by{$_} = 1 for keys %l;
		push @exp,
		  { labels => '{' . join(',', map { qq{$_="$l{$_}"} } sort keys %l) . '}', value => 1 };
	}
	my $by = join(', ', 'alertname', sort grep { $_ ne 'alertname' } keys %by);
	my $test = {
		rule_files => [ $args{rules} ],
		evaluation_interval => '15s',
		tests => [
			{
				interval => '15s',
				input_series => \@series,
				promql_expr_test => [
					{
						expr => "count by ($by) (ALERTS{alertstate=\"firing\"})",
						eval_time => "$args{minutes}m",
						exp_samples => \@exp,
					}
				],
			}
		],
	};
	my $file = "$args{dir}/$args{name}.json";
	open my $fh, '>', $file or die "cannot write $file: $!";
	print $fh JSON::PP->new->canonical->pretty->encode($test);
	close $fh;
	return promtool('', 'test', 'rules', $file);
}

# A value in promtool's series notation (no exponent: "1e+09x4" reads as a+bxn).
sub number
{
	my ($v) = @_;
	my $s = sprintf('%.9f', $v);
	$s =~ s/\.?0+$// if $s =~ /\./;
	return $s eq '-0' ? '0' : $s;
}

sub escape
{
	my ($s) = @_;
	$s =~ s/(["\\])/\\$1/g;
	$s =~ s/\n/\\n/g;
	return $s;
}

package PgracExporter::Scrape;

# The Prometheus text exposition format: "# TYPE family type", then samples
# "name{label="value",...} value" (label values escape \\, \" and \n).
sub new
{
	my ($class, $text) = @_;
	my $self = bless { text => $text, types => {}, samples => [] }, $class;
	for my $line (split /\n/, $text)
	{
		if ($line =~ /^# TYPE (\S+) (\S+)$/)
		{
			$self->{types}{$1} = $2;
			next;
		}
		next if $line =~ /^#/ || $line !~ /\S/;
		$line =~ /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: \d+)?$/
		  or die "not the Prometheus text format: $line\n";
		my ($name, $body, $value) = ($1, $2 // '', $3);
		my %labels;
		while ($body =~ /\G([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?/gc)
		{
			my ($k, $v) = ($1, $2);
			$v =~ s/\\(.)/$1 eq 'n' ? "\n" : $1/ge;
			$labels{$k} = $v;
		}
		die "cannot read the labels of: $line\n" if (pos($body) // 0) != length $body;
		push @{ $self->{samples} }, [ $name, \%labels, $value ];
	}
	return $self;
}

sub text { return $_[0]->{text}; }
sub type { my ($self, $family) = @_; return $self->{types}{$family}; }
sub families { return sort keys %{ $_[0]->{types} }; }

# Every sample, or those of one name: [name, {labels}, value].
sub samples
{
	my ($self, $name) = @_;
	return grep { !defined $name || $_->[0] eq $name } @{ $self->{samples} };
}

# Samples of $name whose labels include %want.
sub matching
{
	my ($self, $name, %want) = @_;
	return grep {
		my $l = $_->[1];
		!grep { !defined $l->{$_} || $l->{$_} ne $want{$_} } keys %want
	} $self->samples($name);
}

# The value (a number) of the one sample of $name with labels %want; undef if none,
# and dies if there are several (the labels do not name one series).
sub value
{
	my ($self, $name, %want) = @_;
	my @m = $self->matching($name, %want);
	die "$name\{" . join(',', map { "$_=$want{$_}" } sort keys %want) . "} names " . scalar(@m) . " series\n"
	  if @m > 1;
	return @m ? 0 + $m[0][2] : undef;    # 9.5619651e+07 is 95619651
}

1;
