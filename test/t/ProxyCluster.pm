# One PL/Proxy front (pg_claim_proxy) over P partitions (pg_claim), for the
# TAP tests of the front (140_proxy.pl, 142_spread.pl).
#
#   use lib dirname(__FILE__);
#   use ProxyCluster qw(fnv1a start_proxy_cluster);
#   my ($front, $parts, $dsn) = start_proxy_cluster(4)
#     or plan skip_all => $ProxyCluster::SKIP;
#
# Nodes 'front' and 'part0'..'partP-1'; partition k has claim.set_partition(k);
# the front's server claim_cluster has p0..pP-1 (connect_timeout=2) and a user
# mapping for PUBLIC; on the front, error_of(q) runs q and returns 'ok' or
# 'SQLSTATE: message'. $dsn: the partitions' connection strings.
package ProxyCluster;

use strict;
use warnings;

use Exporter 'import';
use PostgreSQL::Test::Cluster;
use IPC::Run;

our @EXPORT_OK = qw(background_psql drain_through_front fnv1a start_proxy_cluster);
our $SKIP = 'PL/Proxy or pg_claim_proxy is not installed (test/setup.sh installs both)';

# FNV-1a, 32 bits, over the bytes of the key: the routing hash the docs
# define, computed here independently of the front's claim.route_hash.
sub fnv1a
{
	my ($s) = @_;
	my $h = 0x811c9dc5;
	$h = (($h ^ $_) * 16777619) & 0xffffffff for unpack('C*', $s);
	return $h;
}

# psql running one statement on the node in the background: [harness,
# \stdout, \stderr] (IPC::Run; finish the harness to collect them).
sub background_psql
{
	my ($node, $sql) = @_;
	my ($in, $o, $e) = ('', '', '');
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
		  '-c', $sql ],
		'<', \$in, '>', \$o, '2>', \$e);
	return [ $h, \$o, \$e ];
}

# 8 pgbench workers through the front, each running the script $per_client
# times, in rounds until $left_sql (a count) says 0, at most 20 rounds; each
# round is a test. Returns the number of rounds.
sub drain_through_front
{
	my ($front, $script, $per_client, $left_sql) = @_;
	my $rounds = 0;
	while ($rounds < 20)
	{
		$rounds++;
		$front->command_ok(
			[ 'pgbench', '-n', '-M', 'simple', '-c', '8', '-j', '2',
			  '-t', $per_client, '-f', $script, 'postgres' ],
			"8 workers through the front, round $rounds");
		last if $front->safe_psql('postgres', $left_sql) == 0;
	}
	return $rounds;
}

sub start_proxy_cluster
{
	my ($P) = @_;
	my $front = PostgreSQL::Test::Cluster->new('front');
	$front->init;
	$front->append_conf('postgresql.conf', "max_connections = 40\n");
	$front->start;
	if ($front->safe_psql('postgres', q{SELECT count(*) FROM pg_available_extensions
			WHERE name IN ('plproxy', 'pg_claim_proxy')}) != 2)
	{
		$front->stop;
		return;
	}
	my @parts;
	for my $k (0 .. $P - 1)
	{
		my $n = PostgreSQL::Test::Cluster->new("part$k");
		$n->init;
		$n->append_conf('postgresql.conf',
			"shared_preload_libraries = 'pg_claim'\nmax_connections = 40\n");
		$n->start;
		$n->safe_psql('postgres', qq{
			CREATE EXTENSION pg_claim;
			SELECT claim.set_partition($k);
		});
		push @parts, $n;
	}
	my @dsn = map { sprintf('host=%s port=%d dbname=postgres connect_timeout=2',
			$parts[$_]->host, $parts[$_]->port) } 0 .. $P - 1;
	my $opts = join(', ', map { "p$_ '$dsn[$_]'" } 0 .. $P - 1);
	my $user = $front->safe_psql('postgres', 'SELECT current_user');
	$front->safe_psql('postgres', qq{
		CREATE EXTENSION pg_claim_proxy CASCADE;
		CREATE SERVER claim_cluster FOREIGN DATA WRAPPER plproxy OPTIONS ($opts);
		CREATE USER MAPPING FOR PUBLIC SERVER claim_cluster OPTIONS (user '$user');
		CREATE FUNCTION public.error_of(q text) RETURNS text LANGUAGE plpgsql AS \$\$
		BEGIN
			EXECUTE q;
			RETURN 'ok';
		EXCEPTION WHEN OTHERS THEN
			RETURN SQLSTATE || ': ' || SQLERRM;
		END \$\$;
	});
	return ($front, \@parts, \@dsn);
}

1;
