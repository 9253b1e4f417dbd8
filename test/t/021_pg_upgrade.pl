# pg_upgrade keeps everything, live claims and leases included
# (docs/operations.md, "Upgrading PostgreSQL"). A cluster with queues, a
# live claim, a live lease, a once key and a schedule is stopped cleanly and
# upgraded with pg_upgrade into a new cluster of the same major version (the
# path of a major upgrade: pg_upgrade moves the data files, the unlogged
# tables' too, and the sequences' values). In the new cluster:
#   - items, queues, once keys and the schedule are there;
#   - the claim and the lease are live, and their tokens still work;
#   - tokens granted afterwards are higher than every earlier one.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $old = PostgreSQL::Test::Cluster->new('upgrade_old');
$old->init;
$old->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_claim'\n");
$old->start;

$old->safe_psql('postgres', 'CREATE DATABASE app');
$old->safe_psql('app', q{
	CREATE EXTENSION pg_claim;
	SELECT claim.create_queue('jobs', lease => '1 hour', retain => '1 day');
	SELECT claim.enqueue('jobs', jsonb_build_object('n', g)) FROM generate_series(1, 5) g;
	SELECT claim.complete(token, '{"ok": true}') FROM claim.claim_next('jobs');
	SELECT claim.once('mail:1');
	SELECT claim.schedule('nightly', '0 3 * * *', 'jobs');
});
my $claim = $old->safe_psql('app', q{SELECT token FROM claim.claim_next('jobs', worker => 'w1')});
my $lease = $old->safe_psql('app', q{SELECT claim.lease_acquire('acct:1', '1 hour', 'host-a')});
my $views = q{
	SELECT (SELECT string_agg(format('%s %s %s %s', queue, ready, claimed, dead), ',') FROM claim.queue_stats)
	    || ' / ' || (SELECT string_agg(format('%s %s', id, state), ',' ORDER BY id) FROM claim.finished_items)
	    || ' / ' || (SELECT string_agg(format('%s %s', name, next_run), ',') FROM claim.schedules)};
my $before = $old->safe_psql('app', $views);
$old->stop;

my $new = PostgreSQL::Test::Cluster->new('upgrade_new');
$new->init;
$new->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_claim'\n");

my $bindir = $old->config_data('--bindir');
my $sockets = PostgreSQL::Test::Utils::tempdir_short;
my $cwd = PostgreSQL::Test::Utils::tempdir;
chdir $cwd or die "chdir $cwd: $!";
command_ok(
	[
		'pg_upgrade', '--no-sync',
		'-b', $bindir, '-B', $bindir,
		'-d', $old->data_dir, '-D', $new->data_dir,
		'-p', $old->port, '-P', $new->port,
		'-s', $sockets
	],
	'pg_upgrade');
$new->start;

is($new->safe_psql('app', $views), $before, 'queues, items, finished items and schedules are kept');
is($new->safe_psql('app', q{SELECT count(*) FROM claim.claimed_items WHERE live}), '1',
	'the live claim is kept (the unlogged table came along)');
is($new->safe_psql('app', q{SELECT count(*) FROM claim.leases}), '1', 'the live lease is kept');
is($new->safe_psql('app', q{SELECT claim.once('mail:1')}), 'f', 'the once key is kept');
is($new->safe_psql('app', "SELECT claim.complete($claim)"), '1', 'the claim taken before the upgrade completes');
my ($rc, $out, $err) = $new->psql('app', "SELECT claim.lease_assert('acct:1', $lease)");
is($rc, 0, "the lease's token still asserts ($err)");
my $t = $new->safe_psql('app', q{SELECT token FROM claim.claim_next('jobs')});
cmp_ok($t, '>', $lease, 'a token granted after the upgrade is higher than every earlier one');
cmp_ok($new->safe_psql('app', q{SELECT claim.lease_acquire('acct:2', '1 minute')}), '>', $t, '... a lease\'s too');

$new->stop;
done_testing();
