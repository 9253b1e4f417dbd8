# Statements that need a database to themselves (DROP DATABASE, ALTER
# DATABASE ... RENAME or SET TABLESPACE, CREATE DATABASE ... TEMPLATE) pause
# that database's pg_claim worker first, but only for a role PostgreSQL will
# let through. A role without the rights gets PostgreSQL's own permission
# error, again and again, and the worker keeps running undisturbed; the
# owner's rename pauses it and the worker comes back under the new name.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PgClaimNode;
use Time::HiRes qw(time usleep);

my $node = pgclaim_node('hook', "pg_claim.worker_naptime = 100\n");
$node->safe_psql('postgres', q{
	CREATE DATABASE appdb;
	CREATE ROLE mallory LOGIN;
	CREATE ROLE owner_role LOGIN CREATEDB;
	ALTER DATABASE appdb OWNER TO owner_role;
});
$node->safe_psql('appdb', 'CREATE EXTENSION pg_claim');

sub wait_worker
{
	my ($db, $old) = @_;
	my $deadline = time + 30;
	while (time < $deadline)
	{
		my $pid = worker_pid($node, $db);
		return $pid if $pid && $pid != ($old // 0);
		usleep(50_000);
	}
	return 0;
}

my $pid = wait_worker('appdb');
ok($pid, 'appdb has its worker');

my $refused = 0;
for my $i (1 .. 50)
{
	my ($out, $err);
	$node->psql('postgres', 'ALTER DATABASE appdb RENAME TO stolen',
		stdout => \$out, stderr => \$err, extra_params => [ '-U', 'mallory' ]);
	$refused++ if $err =~ /must be owner of database appdb/;
	$node->psql('postgres', 'DROP DATABASE appdb',
		stdout => \$out, stderr => \$err, extra_params => [ '-U', 'mallory' ]);
	$refused++ if $err =~ /must be owner of database appdb/;
	$node->psql('postgres', 'CREATE DATABASE copy TEMPLATE appdb',
		stdout => \$out, stderr => \$err, extra_params => [ '-U', 'mallory' ]);
	$refused++ if $err =~ /permission denied to create database/;
}
is($refused, 150, 'every statement of the role without rights fails its permission check');
usleep(500_000);
is(worker_pid($node, 'appdb'), $pid, 'and the worker kept running: it was never paused');

# The owner may: the worker is paused for the rename and comes back.
$node->safe_psql('postgres', 'ALTER DATABASE appdb RENAME TO renamed', extra_params => [ '-U', 'owner_role' ]);
ok(wait_worker('renamed', $pid), 'the owner\'s rename paused the worker, which runs again');

$node->stop;
done_testing();
