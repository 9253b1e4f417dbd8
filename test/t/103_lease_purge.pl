# The worker deletes the rows of lease holdings that ended longer ago than
# pg_claim.lease_purge_after (expired or released), never a live holder's,
# and keeps them all when the setting is -1.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PgClaimNode;

# Purging starts off (-1), so the rows are counted before the worker may
# delete any, however slow the machine.
my $node = pgclaim_node('lease_purge', qq{pg_claim.worker_naptime = '100ms'
pg_claim.lease_purge_after = -1
});
$node->safe_psql('postgres', 'CREATE EXTENSION pg_claim');

# expired, live, released, and a semaphore with one live and one expired
# slot (the live one first: a slot that expired would be taken over by the
# next acquire instead of a second row, however slow the machine)
$node->safe_psql('postgres', q{SELECT claim.lease_acquire('expired', '100 ms')});
$node->safe_psql('postgres', q{SELECT claim.lease_acquire('live', '1 hour')});
$node->safe_psql('postgres',
	q{SELECT claim.lease_release('released', claim.lease_acquire('released', '1 hour'))});
my $sem_live = $node->safe_psql('postgres',
	q{SELECT claim.lease_acquire('sem', '1 hour', permits => 2)});
$node->safe_psql('postgres', q{SELECT claim.lease_acquire('sem', '100 ms', permits => 2)});
is($node->safe_psql('postgres', 'SELECT count(*) FROM claim.lease_holders'),
	'5', 'five holder rows');
$node->safe_psql('postgres', q{ALTER SYSTEM SET pg_claim.lease_purge_after = '1s'});
$node->reload;

ok( $node->poll_query_until(
		'postgres', q{SELECT count(*) = 2 FROM claim.lease_holders}),
	'the worker deleted the ended holdings');
cmp_ok($node->safe_psql('postgres', 'SELECT sum(purged) FROM claim.worker_status()'),
	'>=', 3, 'claim.worker_status() counts the rows it deleted');
is( $node->safe_psql(
		'postgres', q{SELECT string_agg(name, ',' ORDER BY name) FROM claim.leases}),
	'live,sem', 'live holders are kept');
is($node->safe_psql('postgres', 'SELECT count(*) FROM claim.lease_released'),
	'0', 'the release records of deleted holdings are gone too');
is($node->safe_psql('postgres', "SELECT claim.lease_renew('sem', $sem_live, '1 hour') > now()"),
	't', 'the live slot of the semaphore can be renewed');
ok($node->safe_psql('postgres', q{SELECT claim.lease_acquire('expired', '1 hour')}) > 0,
	'a purged name can be acquired again');

# -1: nothing is deleted
$node->safe_psql('postgres', q{ALTER SYSTEM SET pg_claim.lease_purge_after = -1});
$node->reload;
ok( $node->poll_query_until(
		'postgres', q{SELECT current_setting('pg_claim.lease_purge_after') = '-1'}),
	'setting reloaded');
sleep 1;    # the worker reloads at its next round (naptime 100 ms)
$node->safe_psql('postgres', q{SELECT claim.lease_acquire('kept', '100 ms')});
sleep 3;
is( $node->safe_psql(
		'postgres', q{SELECT count(*) FROM claim.lease_holders WHERE name = 'kept'}),
	'1', 'with -1 the ended holding stays');
is( $node->safe_psql('postgres', q{SELECT claim.lease_purge('0 s')}),
	'1', 'claim.lease_purge() still deletes it on demand');

$node->stop;
done_testing();
