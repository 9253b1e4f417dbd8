# test/t/PgClaimNode.pm — what the TAP tests share (not a test of its own):
#
#   use FindBin;
#   use lib $FindBin::RealBin;
#   use PgClaimNode;
#
#   pgclaim_node(NAME, CONF, %init)  a PostgreSQL::Test::Cluster, initialized
#                                    (%init: PostgreSQL::Test::Cluster::init's
#                                    arguments), with pg_claim preloaded and
#                                    CONF (postgresql.conf lines) appended,
#                                    started; no database changed
#   worker_pid(NODE, DB)             the pid of DB's pg_claim worker, 0 if none
package PgClaimNode;

use strict;
use warnings;

use Exporter 'import';
use PostgreSQL::Test::Cluster;

our @EXPORT = qw(pgclaim_node worker_pid);

sub pgclaim_node
{
	my ($name, $conf, %init) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%init);
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'pg_claim'\n" . ($conf // ''));
	$node->start;
	return $node;
}

sub worker_pid
{
	my ($node, $db) = @_;
	return $node->safe_psql('postgres',
		qq{SELECT coalesce(max(pid), 0) FROM pg_stat_activity
		   WHERE backend_type = 'pg_claim worker' AND datname = '$db'});
}

1;
