# The background worker: launcher and per-database workers.
#
#   - the launcher and the workers appear in pg_stat_activity by backend_type;
#   - databases with the extension are served, whether it was installed
#     before the server started or after;
#   - expired claims are applied on time with no client calls (dead after the
#     last attempt, claimable again otherwise: a waiting claim_next gets it);
#   - due scheduled items are handed to a waiting claim_next;
#   - SIGHUP applies changed GUCs;
#   - a terminated worker or launcher comes back, and so does everything
#     after a crash of a backend (postmaster crash-restart);
#   - DROP EXTENSION ends the worker, CREATE EXTENSION brings it back;
#   - DROP DATABASE succeeds at once while a worker serves the database.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PgClaimNode;
use IPC::Run;
use Time::HiRes qw(time usleep);

my $node = pgclaim_node('worker', qq{max_worker_processes = 16
restart_after_crash = on
max_locks_per_transaction = 256
});

# A database with the extension before the server (and the launcher) start.
$node->safe_psql('postgres', 'CREATE DATABASE early');
$node->safe_psql('early', 'CREATE EXTENSION pg_claim');
$node->restart;

sub launcher_pid
{
	return $node->safe_psql('postgres',
		q{SELECT coalesce(max(pid), 0) FROM pg_stat_activity
		  WHERE backend_type = 'pg_claim launcher'});
}

# Wait (up to $secs) until the worker of $db runs and differs from $old.
sub wait_worker
{
	my ($db, $old, $secs) = @_;
	$old //= 0;
	$secs //= 10;
	my $deadline = time + $secs;
	while (time < $deadline)
	{
		my $pid = worker_pid($node, $db);
		return $pid if $pid && $pid != $old;
		usleep(50_000);
	}
	return 0;
}

sub wait_no_worker
{
	my ($db, $secs) = @_;
	my $deadline = time + ($secs // 10);
	while (time < $deadline)
	{
		return 1 if !worker_pid($node, $db);
		usleep(50_000);
	}
	return 0;
}

# --- it runs and is visible ---------------------------------------------------

ok($node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pg_claim launcher'}),
	'launcher in pg_stat_activity with backend_type "pg_claim launcher"');
my $w_early = wait_worker('early');
ok($w_early, 'database with the extension before start is served by a "pg_claim worker"');

$node->safe_psql('postgres', 'CREATE DATABASE late');
$node->safe_psql('late', 'CREATE EXTENSION pg_claim');
my $t0 = time;
my $w_late = wait_worker('late', 0, 10);
ok($w_late, 'database created after start is served once the extension is created');
cmp_ok(time - $t0, '<', 3, 'CREATE EXTENSION starts its worker promptly');

is(worker_pid($node, 'postgres'), 0, 'no worker stays in a database without the extension');
is($node->safe_psql('postgres',
	q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_claim worker'
	    AND (state = 'idle in transaction' OR backend_xmin IS NOT NULL)}),
	'0', 'workers are never idle in a transaction nor hold a snapshot between rounds');

# --- expiry with no client calls ----------------------------------------------------

$node->safe_psql('early', q{
	SELECT claim.create_queue('one_shot', lease => '1 second', max_attempts => 1);
	SELECT claim.create_queue('retry', lease => '1 second', max_attempts => 5);
	SELECT claim.create_queue('later');
});
my $dead_id = $node->safe_psql('early', q{SELECT claim.enqueue('one_shot')});
my $until = $node->safe_psql('early',
	q{SELECT lease_until FROM claim.claim_next('one_shot')});
ok($node->poll_query_until('early',
	qq{SELECT state = 'd' FROM claim.items WHERE id = $dead_id}),
	'item whose last lease expired becomes dead without client calls');
is($node->safe_psql('early',
	qq{SELECT died_at >= '$until'::timestamptz FROM claim.items WHERE id = $dead_id}),
	't', '... and not before its lease ended');
like($node->safe_psql('early', qq{SELECT last_error FROM claim.dead_items WHERE id = $dead_id}),
	qr/lease expired on attempt 1, the last allowed/, 'dead item says why');

# A waiting claim_next gets an item whose lease expired, at once.
my $retry_id = $node->safe_psql('early', q{SELECT claim.enqueue('retry')});
$until = $node->safe_psql('early', q{SELECT lease_until FROM claim.claim_next('retry')});
my $out = $node->safe_psql('early', q{
	SELECT id, attempt, clock_timestamp() FROM claim.claim_next('retry', wait => '5 s')});
my ($got_id, $attempt, $at) = split /\|/, $out;
is($got_id, $retry_id, 'waiting claim_next receives the item after its lease ended');
is($attempt, 2, '... as the second attempt');
is($node->safe_psql('early',
	qq{SELECT '$at'::timestamptz >= '$until'::timestamptz}),
	't', '... not before the first lease ended');

# A scheduled item is handed over when due.
$node->safe_psql('early',
	q{SELECT claim.enqueue('later', run_at => clock_timestamp() + interval '800 ms')});
$out = $node->safe_psql('early', q{
	SELECT extract(epoch FROM clock_timestamp() - i.enqueued_at)
	FROM claim.claim_next('later', wait => '5 s') i});
ok($out ne '' && $out >= 0.7 && $out < 1.3, "scheduled item delivered to a waiter when due (${out}s)");

# --- SIGHUP ---------------------------------------------------------------------

$node->safe_psql('postgres', q{ALTER SYSTEM SET pg_claim.worker_naptime = '250ms'});
$node->reload;
ok($node->poll_query_until('postgres', q{SELECT current_setting('pg_claim.worker_naptime') = '250ms'}),
	'SIGHUP: new sessions see the changed naptime');
$node->safe_psql('postgres', q{ALTER SYSTEM SET pg_claim.worker_enabled = off});
$node->reload;
ok(wait_no_worker('early') && wait_no_worker('late'), 'SIGHUP: worker_enabled = off stops the workers');
ok(launcher_pid() > 0, '... the launcher stays');
$node->safe_psql('postgres', q{ALTER SYSTEM RESET pg_claim.worker_enabled});
$node->reload;
$w_early = wait_worker('early');
ok($w_early && wait_worker('late'), 'SIGHUP: worker_enabled = on starts them again');

# --- termination and crash ------------------------------------------------------------

$node->safe_psql('postgres', "SELECT pg_terminate_backend($w_early)");
my $w2 = wait_worker('early', $w_early, 10);
ok($w2, 'worker comes back after pg_terminate_backend');

my $l1 = launcher_pid();
$node->safe_psql('postgres', "SELECT pg_terminate_backend($l1)");
ok($node->poll_query_until('postgres',
	qq{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pg_claim launcher' AND pid <> $l1}),
	'launcher comes back after pg_terminate_backend');
is(worker_pid($node, 'early'), $w2, '... and adopts the running worker (no second one)');

# Crash: a backend killed with SIGKILL makes the postmaster reinitialize.
my ($in, $bout, $berr) = ('', '', '');
my $h = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr('early'), '-c', 'SELECT pg_sleep(60) AS victim' ],
	'<', \$in, '>', \$bout, '2>', \$berr);
my $victim = 0;
my $deadline = time + 10;
while (!$victim && time < $deadline)
{
	usleep(20_000);
	$victim = $node->safe_psql('postgres',
		q{SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE query LIKE '%AS victim'
		    AND backend_type = 'client backend' AND pid <> pg_backend_pid()});
}
ok($victim, 'got a backend to kill');
kill 'KILL', $victim;
$h->finish;
ok($node->poll_query_until('postgres', 'SELECT 1', '1'), 'server is back after the crash');
my $w3 = wait_worker('early', $w2, 20);
ok($w3, 'worker comes back after a crash-restart');
ok(wait_worker('late', 0, 10), '... in every database');
is($node->safe_psql('postgres',
	q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_claim launcher'}),
	'1', '... with one launcher');

# --- DROP EXTENSION / DROP DATABASE --------------------------------------------------------

$node->safe_psql('late', 'DROP EXTENSION pg_claim');
ok(wait_no_worker('late', 5), 'DROP EXTENSION ends the worker of that database');
$node->safe_psql('late', 'CREATE EXTENSION pg_claim');
ok(wait_worker('late', 0, 5), 'CREATE EXTENSION again brings it back');

my $w_late2 = worker_pid($node, 'late');
$t0 = time;
my ($rc, $so, $se) = $node->psql('postgres', 'DROP DATABASE late');
is($rc, 0, 'DROP DATABASE succeeds while its worker runs') or diag $se;
cmp_ok(time - $t0, '<', 3, '... without waiting for the worker to go by itself');
is($node->safe_psql('postgres',
	qq{SELECT count(*) FROM pg_stat_activity WHERE pid = $w_late2}), '0', '... the worker is gone');
is(worker_pid($node, 'early'), $w3, 'the other database keeps its worker');

# ALTER DATABASE RENAME needs the database to itself, too.
($rc, $so, $se) = $node->psql('postgres', 'ALTER DATABASE early RENAME TO early2');
is($rc, 0, 'ALTER DATABASE RENAME succeeds while its worker runs') or diag $se;
ok(wait_worker('early2', 0, 10), 'the renamed database is served again');

$node->stop;
ok(!$node->log_contains('TRAP|terminated by signal 11|PANIC'), 'no crash of our own in the log');

done_testing();
