# Recurring schedules fired by the database's worker (docs/schedules.md):
#   - a schedule every second fires once per tick for ~10 s: as many items
#     as distinct ticks (the item's dedup_key names the tick), each with the
#     schedule's payload, group_key and priority; unschedule stops it;
#   - an immediate stop (a crash) across a tick: after the restart exactly
#     one catch-up item, for that tick, and next_run is the first tick after
#     the restart;
#   - two ticks missed while the server is down give one item;
#   - a schedule added while the worker sleeps fires on time (next_run),
#     and dropping its queue removes it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PgClaimNode;
use IPC::Run;
use Time::HiRes qw(time usleep sleep);

my $node = pgclaim_node('schedules', qq{max_locks_per_transaction = 256
pg_claim.worker_naptime = 1000
});
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_claim;
	SELECT claim.create_queue('ticks', '1 minute', 3, '1 second');
});

# Runs $sql until it returns $want (up to $secs); returns the last result.
sub poll_until
{
	my ($sql, $want, $secs) = @_;
	my $deadline = time + ($secs // 15);
	my $got;
	while (time < $deadline)
	{
		$got = $node->safe_psql('postgres', $sql);
		return $got if $got eq $want;
		usleep(50_000);
	}
	return $got;
}

# Items of schedule $name: "count|distinct ticks|min tick|max tick" (ticks
# in Unix seconds, from the dedup_key "schedule:<name>:<tick>").
sub items_of
{
	my ($name) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT count(*), count(DISTINCT dedup_key),
		       coalesce(min(split_part(dedup_key, ':', 3)::int8), 0),
		       coalesce(max(split_part(dedup_key, ':', 3)::int8), 0)
		FROM claim.items WHERE dedup_key LIKE 'schedule:$name:%'});
}

sub epoch
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', "SELECT extract(epoch FROM ($sql))::int8");
}

# ---------------------------------------------------------------- every second
my $t0 = time;
$node->safe_psql('postgres', q{
	SELECT claim.schedule('every_second', '* * * * * *', 'ticks', '{"k": "s"}',
	                      group_key => 'g', priority => 7)});
sleep(10.5);
$node->safe_psql('postgres', q{SELECT claim.unschedule('every_second')});
my $t1 = time;
my ($n, $distinct, $first, $last) = split /\|/, items_of('every_second');
note "every second: $n items over " . sprintf('%.1f', $t1 - $t0) . " s, ticks $first..$last";
is($distinct, $n, 'every second: one item per tick, no tick twice');
cmp_ok($n, '>=', 8, 'every second: about one item per second over 10 s');
cmp_ok($n, '<=', int($t1 - $t0) + 1, 'every second: no more items than ticks in the window');
cmp_ok($last - $first + 1, '>=', $n, 'every second: ticks are distinct whole seconds');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM claim.items
	WHERE dedup_key LIKE 'schedule:every_second:%'
	  AND (payload <> '{"k": "s"}' OR group_key IS DISTINCT FROM 'g' OR priority <> 7)}),
	'0', 'every second: items carry the payload, group_key and priority');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM claim.schedules WHERE name = 'every_second'}), '0',
	'unschedule removed it');
my ($after_n) = split /\|/, items_of('every_second');
sleep(1.5);
my ($later_n) = split /\|/, items_of('every_second');
is($later_n, $after_n, 'no item after unschedule');

# crash_across(NAME, FIRST, LAST): the server stops (immediate) while the
# schedule's tick FIRST is still ahead and starts again after its tick LAST;
# the schedule fires after the restart.
sub crash_across
{
	my ($name, $first, $last) = @_;
	cmp_ok(time, '<', $first, "$name: the tick is still ahead when the server stops");
	$node->stop('immediate');
	sleep(0.1) while time < $last + 1.5;
	$node->start;
	is(poll_until(qq{SELECT last_run IS NOT NULL FROM claim.schedules WHERE name = '$name'}, 't'),
		't', "$name: the missed tick fired after the restart");
}

# ---------------------------------------------------------------- crash across a tick
# A tick 4 s ahead (then once a minute at that second).
my $sec = (int(time) + 4) % 60;
$node->safe_psql('postgres', qq{SELECT claim.schedule('crash', '$sec * * * * *', 'ticks')});
my $tick = epoch(q{SELECT next_run FROM claim.schedules WHERE name = 'crash'});
crash_across('crash', $tick, $tick);
is(items_of('crash'), "1|1|$tick|$tick", 'crash: exactly one catch-up item, for the missed tick');
is(epoch(q{SELECT next_run FROM claim.schedules WHERE name = 'crash'}), $tick + 60,
	'crash: next_run is the first tick after the restart');
is($node->safe_psql('postgres', q{
	SELECT s.last_item = i.id FROM claim.schedules s, claim.items i
	WHERE s.name = 'crash' AND i.dedup_key LIKE 'schedule:crash:%'}), 't',
	'crash: last_item is the item');
$node->safe_psql('postgres', q{SELECT claim.unschedule('crash')});

# ---------------------------------------------------------------- two ticks missed
my $now = int(time);
my ($s1, $s2) = (($now + 4) % 60, ($now + 6) % 60);
$node->safe_psql('postgres', qq{SELECT claim.schedule('missed', '$s1,$s2 * * * * *', 'ticks')});
my $tick1 = epoch(q{SELECT next_run FROM claim.schedules WHERE name = 'missed'});
my $tick2 = epoch(qq{SELECT claim.cron_next('$s1,$s2 * * * * *', to_timestamp($tick1))});
is($tick2, $tick1 + 2, 'missed: two ticks 2 s apart');
crash_across('missed', $tick1, $tick2);
is(items_of('missed'), "1|1|$tick1|$tick1", 'missed: two missed ticks give one item');
is(epoch(q{SELECT next_run FROM claim.schedules WHERE name = 'missed'}), $tick1 + 60,
	'missed: next_run is the first tick after the restart');
$node->safe_psql('postgres', q{SELECT claim.unschedule('missed')});

# ---------------------------------------------------------------- a second firer
# A session plays a second worker: it locks a schedule before its tick,
# holds the lock across the tick, then fires the tick itself as the worker
# does (compare-and-set on next_run) and commits. The worker skips the
# locked row without waiting (another schedule keeps firing meanwhile) and
# does not fire that tick again once the session committed.
$sec = (int(time) + 3) % 60;
$node->safe_psql('postgres', qq{
	SELECT claim.schedule('contended', '$sec * * * * *', 'ticks');
	SELECT claim.schedule('free', '* * * * * *', 'ticks');});
$tick = epoch(q{SELECT next_run FROM claim.schedules WHERE name = 'contended'});
my ($in, $out, $err) = (qq{
BEGIN;
SELECT 1 FROM claim.schedule_defs WHERE name = 'contended' FOR UPDATE;
SELECT pg_sleep_until(to_timestamp($tick + 1.5));
UPDATE claim.schedule_defs s
SET next_run = claim.cron_next(s.cron, clock_timestamp(), s.timezone), last_run = s.next_run,
    last_item = claim.enqueue('ticks', s.payload, s.group_key, NULL, s.priority,
                              'schedule:contended:$tick')
WHERE s.name = 'contended' AND s.next_run = to_timestamp($tick);
COMMIT;
}, '', '');
my $h = IPC::Run::start([ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres') ],
	'<', \$in, '>', \$out, '2>', \$err);
$h->finish;
is($?, 0, 'second firer: its transaction committed') or diag($err);
my ($free_n) = split /\|/, items_of('free');
cmp_ok($free_n, '>=', 2, 'second firer: the worker went on firing other schedules meanwhile');
$node->safe_psql('postgres', q{SELECT claim.unschedule('free')});
sleep(1.5);
is(items_of('contended'), "1|1|$tick|$tick", 'second firer: one item for the tick, not two');
is($node->safe_psql('postgres', q{
	SELECT s.last_item = i.id FROM claim.schedules s, claim.items i
	WHERE s.name = 'contended' AND i.dedup_key LIKE 'schedule:contended:%'}), 't',
	'second firer: its item is the one recorded');
# A compare-and-set on a tick that already fired changes nothing and enqueues nothing.
my $before = $node->safe_psql('postgres', 'SELECT count(*) FROM claim.items');
is($node->safe_psql('postgres', qq{
	WITH u AS (
	  UPDATE claim.schedule_defs s SET last_item = claim.enqueue('ticks', '{}')
	  WHERE s.name = 'contended' AND s.next_run = to_timestamp($tick) RETURNING 1)
	SELECT count(*) FROM u}), '0', 'a stale compare-and-set does nothing');
is($node->safe_psql('postgres', 'SELECT count(*) FROM claim.items'), $before,
	'... and enqueues nothing');
$node->safe_psql('postgres', q{SELECT claim.unschedule('contended')});

# ---------------------------------------------------------------- while the worker sleeps
# The worker sleeps up to pg_claim.worker_naptime when it knows of nothing
# sooner; the first tick of a new schedule fires at most that late.
$node->safe_psql('postgres', q{SELECT claim.create_queue('later', '1 minute', 3, '1 second')});
$sec = (int(time) + 3) % 60;
$node->safe_psql('postgres', qq{SELECT claim.schedule('later', '$sec * * * * *', 'later')});
$tick = epoch(q{SELECT next_run FROM claim.schedules WHERE name = 'later'});
is(poll_until(q{SELECT last_run IS NOT NULL FROM claim.schedules WHERE name = 'later'}, 't', 10),
	't', 'a new schedule fires');
is(items_of('later'), "1|1|$tick|$tick", 'a new schedule: one item for its tick');
$node->safe_psql('postgres', q{SELECT claim.drop_queue('later')});
is($node->safe_psql('postgres', q{SELECT count(*) FROM claim.schedule_defs WHERE name = 'later'}),
	'0', 'dropping the queue removed its schedule');

# The worker stayed healthy throughout: no warnings from it about schedules.
my $log = slurp_file($node->logfile);
unlike($log, qr/pg_claim: schedule .* (skipped|has no next tick)/, 'no schedule was skipped');

# ---------------------------------------------------------------- an item that cannot be enqueued
# Two schedules on the same tick; the enqueue of one fails (a trigger on
# claim.items refuses its payload). The other fires; the failing one skips
# that tick with a WARNING and goes on with its next tick.
$node->safe_psql('postgres', q{
	CREATE FUNCTION public.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF NEW.payload ? 'refuse' THEN RAISE EXCEPTION 'refused by test'; END IF;
		RETURN NEW;
	END $$;
	CREATE TRIGGER refuse BEFORE INSERT ON claim.items FOR EACH ROW EXECUTE FUNCTION public.refuse();});
$sec = (int(time) + 3) % 60;
$node->safe_psql('postgres', qq{
	SELECT claim.schedule('good', '$sec * * * * *', 'ticks');
	SELECT claim.schedule('bad', '$sec * * * * *', 'ticks', '{"refuse": 1}');});
$tick = epoch(q{SELECT next_run FROM claim.schedules WHERE name = 'good'});
is(poll_until(q{SELECT count(*) FROM claim.schedules WHERE name IN ('good', 'bad')
                AND next_run > now() + interval '30 seconds'}, '2', 10),
	'2', 'failing enqueue: both schedules moved on to their next tick');
is(items_of('good'), "1|1|$tick|$tick", 'failing enqueue: the other schedule fired');
is(items_of('bad'), '0|0|0|0', 'failing enqueue: no item for the failing one');
is($node->safe_psql('postgres', q{SELECT last_run IS NULL FROM claim.schedules WHERE name = 'bad'}),
	't', 'failing enqueue: its tick did not count as run');
like(slurp_file($node->logfile), qr/WARNING:  pg_claim: schedule "bad" skipped its tick at .*refused by test/,
	'failing enqueue: a WARNING names the schedule and the error');
$node->safe_psql('postgres', q{
	DROP TRIGGER refuse ON claim.items;
	SELECT claim.unschedule('good'); SELECT claim.unschedule('bad');});

$node->stop;

# ---------------------------------------------------------------- without the preload
# The schedule is stored, and the session is told once that nothing fires it.
my $plain = PostgreSQL::Test::Cluster->new('no_preload');
$plain->init;
$plain->start;
$plain->safe_psql('postgres', q{
	CREATE EXTENSION pg_claim;
	SELECT claim.create_queue('ticks', '1 minute', 3, '1 second');});
my ($rc, $stdout, $stderr) = $plain->psql('postgres', q{
	SELECT claim.schedule('a', '* * * * *', 'ticks');
	SELECT claim.schedule('b', '* * * * *', 'ticks');});
is($rc, 0, 'without the preload: schedule succeeds');
my @notices = ($stderr =~ /NOTICE:  schedules fire only where pg_claim is preloaded/g);
is(scalar(@notices), 1, 'without the preload: one NOTICE per session') or diag($stderr);
like($stderr, qr/HINT:  Add pg_claim to shared_preload_libraries/, '... with a hint');
is($plain->safe_psql('postgres', 'SELECT count(*) FROM claim.schedules'), '2',
	'without the preload: the schedules are stored');
# What else needs the preload says so where it shows: a rate limit when it
# is set (claims would fail), the counters of metrics() when they are read.
($rc, $stdout, $stderr) = $plain->psql('postgres', q{
	SELECT claim.create_queue('limited', rate => 10);
	SELECT count(*) FROM claim.metrics();
	SELECT count(*) FROM claim.metrics();});
is($rc, 0, 'without the preload: a rate limit and metrics() succeed');
like($stderr, qr/WARNING:  rate limits need pg_claim in shared_preload_libraries: claims from queue "limited" fail/,
	'without the preload: a rate limit warns when it is set');
my @counters = ($stderr =~ /WARNING:  the counters of claim.metrics\(\) need pg_claim/g);
is(scalar(@counters), 1, 'without the preload: metrics() warns once per session') or diag($stderr);
$plain->stop;

done_testing();
