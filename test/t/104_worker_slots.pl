# The workers' share of background worker slots and their error handling
# (docs/worker.md, docs/hardening.md):
#   - with more databases than worker slots (max_worker_processes = 4: the
#     pg_claim launcher, the logical replication launcher and two workers;
#     five databases with pg_claim and postgres without it), the databases
#     take turns: claim.worker_status() shows one waiting for a slot, the
#     launcher logs it once, and in every database the due schedule fires
#     exactly once, expired claims on their last attempt die, and scheduled
#     items are promoted, with no client calls;
#   - an error in a round is caught: a cancel of the worker, and a trigger
#     that makes every round fail while a flag is set, are each logged in
#     one line; the round is rolled back and done again once the cause is
#     gone, by the same worker process.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PgClaimNode;
use Time::HiRes qw(usleep);

# ------------------------------------------------------------ sharing slots
my $node = pgclaim_node('slots', qq{max_worker_processes = 4
max_parallel_workers = 0
max_parallel_workers_per_gather = 0
max_locks_per_transaction = 256
});

my @dbs = map { "d$_" } 1 .. 5;
for my $db (@dbs)
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION pg_claim');
}

ok($node->poll_query_until('d1',
	q{SELECT count(*) > 0 FROM claim.worker_status() WHERE state = 'waiting'}),
	'claim.worker_status() shows a database waiting for a worker slot');
ok($node->wait_for_log(qr/pg_claim launcher: \d+ database\(s\) wait for a worker slot/),
	'the launcher logs that databases take turns');

# In each database: a schedule due in a few seconds, three claims on their
# last attempt that expire, three scheduled items.
my $sec = $node->safe_psql('postgres',
	q{SELECT (extract(second FROM clock_timestamp())::int + 8) % 60});
for my $db (@dbs)
{
	$node->safe_psql($db, qq{
		SELECT claim.create_queue('once', lease => '1 second', max_attempts => 1);
		SELECT claim.create_queue('later');
		SELECT claim.create_queue('ticks');
		SELECT claim.enqueue('once') FROM generate_series(1, 3);
		SELECT count(*) FROM claim.claim_next('once', 3);
		SELECT claim.enqueue('later', run_at => clock_timestamp() + interval '1 second')
		FROM generate_series(1, 3);
		SELECT claim.schedule('tick', '$sec * * * * *', 'ticks');
	});
}

for my $db (@dbs)
{
	ok($node->poll_query_until($db,
		q{SELECT count(*) = 3 FROM claim.items WHERE state = 'd'}),
		"$db: the three expired claims on their last attempt died");
	ok($node->poll_query_until($db,
		q{SELECT last_run IS NOT NULL FROM claim.schedules WHERE name = 'tick'}),
		"$db: the schedule fired");
	$node->safe_psql($db, q{SELECT claim.unschedule('tick')});
	is($node->safe_psql($db,
		q{SELECT count(*) FROM claim.items WHERE dedup_key LIKE 'schedule:tick:%'}),
		'1', "$db: exactly one item of the schedule");
	ok($node->poll_query_until($db, q{
		SELECT s.promoted >= 3 AND s.killed = 3 FROM claim.worker_status() s
		WHERE s.datid = (SELECT oid FROM pg_database WHERE datname = current_database())}),
		"$db: the workers of the database promoted the scheduled items and killed three");
}
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_claim worker'}) <= 2
	? 'ok' : 'too many', 'ok', 'never more workers than slots');

$node->stop;

# ------------------------------------------------------------ error handling
my $en = pgclaim_node('errors', qq{max_worker_processes = 8
max_locks_per_transaction = 256
});
$en->safe_psql('postgres', 'CREATE EXTENSION pg_claim');

ok($en->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity
	  WHERE backend_type = 'pg_claim worker' AND datname = 'postgres'}),
	'the worker runs');
my $pid = worker_pid($en, 'postgres');

# A cancel of the worker is an error of one round, not the end of the worker.
my $offset = -s $en->logfile;
$en->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
ok($en->wait_for_log(
	qr/pg_claim worker: a round failed and was rolled back, next try in \d+ ms: canceling statement due to user request/,
	$offset), 'a cancel is logged in one line');
$en->safe_psql('postgres', q{SELECT claim.create_queue('once', lease => '1 second', max_attempts => 1)});
my $id = $en->safe_psql('postgres', q{SELECT claim.enqueue('once')});
$en->safe_psql('postgres', q{SELECT count(*) FROM claim.claim_next('once')});
ok($en->poll_query_until('postgres', qq{SELECT state = 'd' FROM claim.items WHERE id = $id}),
	'after the cancel the worker applies expiry');
is(worker_pid($en, 'postgres'), $pid, '... with the same process');

# A round that fails while a cause lasts: a trigger raises on the schedule
# update that every round with a due schedule makes.
$en->safe_psql('postgres', q{
	CREATE TABLE public.fail_rounds (on_ boolean NOT NULL);
	INSERT INTO public.fail_rounds VALUES (true);
	CREATE FUNCTION public.fail_round() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF (SELECT on_ FROM public.fail_rounds) THEN
			RAISE EXCEPTION 'test: this round fails';
		END IF;
		RETURN NEW;
	END $$;
	CREATE TRIGGER fail_round BEFORE UPDATE ON claim.schedule_defs
		FOR EACH ROW EXECUTE FUNCTION public.fail_round();
	SELECT claim.create_queue('ticks');
});
$offset = -s $en->logfile;
$en->safe_psql('postgres', q{SELECT claim.schedule('tick', '* * * * * *', 'ticks')});
$id = $en->safe_psql('postgres', q{SELECT claim.enqueue('once')});
$en->safe_psql('postgres', q{SELECT count(*) FROM claim.claim_next('once')});
ok($en->wait_for_log(
	qr/pg_claim worker: a round failed and was rolled back, next try in \d+ ms: test: this round fails/,
	$offset), 'the failing round is logged');
sleep(2);
is($en->safe_psql('postgres', qq{
	SELECT state::text || '/' || (SELECT count(*) FROM claim.items WHERE dedup_key LIKE 'schedule:tick:%')
	FROM claim.items WHERE id = $id}),
	'r/0', 'while rounds fail, their work is rolled back (no death, no tick)');
$en->safe_psql('postgres', q{UPDATE public.fail_rounds SET on_ = false});
ok($en->poll_query_until('postgres', qq{SELECT state = 'd' FROM claim.items WHERE id = $id}),
	'once the cause is gone, the expired claim is applied');
ok($en->poll_query_until('postgres',
	q{SELECT count(*) > 0 FROM claim.items WHERE dedup_key LIKE 'schedule:tick:%'}),
	'... and the schedule fires');
$en->safe_psql('postgres', q{SELECT claim.unschedule('tick')});
is(worker_pid($en, 'postgres'), $pid, 'the same worker process served the database throughout');
is($en->safe_psql('postgres', q{
	SELECT count(*) FROM pg_stat_activity
	WHERE backend_type = 'pg_claim worker' AND state = 'idle in transaction'}),
	'0', 'the worker is not left inside a transaction');

$en->stop;
done_testing();
