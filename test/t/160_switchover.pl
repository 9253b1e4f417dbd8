# A blue/green switchover through logical replication (docs/operations.md,
# "Moving with logical replication"). Blue (wal_level = logical) runs
# producers and workers (pgbench) and a schedule that fires every second; it
# publishes every table, green (CREATE EXTENSION pg_claim, the same ledger
# tables) subscribes while the load runs. Then the switchover: the load
# stops, green catches up, its subscription is disabled, blue stops.
#   - while subscribed, green's worker does no duties (green's copy of the
#     schedule does not fire; the apply never conflicts);
#   - copied ids and tokens moved green's sequences: 10,000 items enqueued in
#     one statement on green collide with nothing; every token green grants
#     (claims, leases, guards) is higher than every token blue handed out,
#     2^32 past (the margin of a promotion);
#   - once keys and schedules behave as on blue: a copied once key is taken,
#     the schedule goes on firing on green, later ticks, new item ids;
#   - the ledger: every item enqueued on either side is completed exactly
#     once across both (none lost, none twice).
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PgClaimNode;
use Time::HiRes qw(time usleep);

my $conf = "max_connections = 30\npg_claim.worker_naptime = 200\n";
my $blue = pgclaim_node('blue', $conf, allows_streaming => 'logical');
my $green = pgclaim_node('green', $conf);

# The ledger (PgClaimNode::ledger_sql), the same on both sides: the
# publication copies it too.
my $ledger = ledger_sql();

$blue->safe_psql('postgres', qq{
	CREATE EXTENSION pg_claim;
	SELECT claim.create_queue('p', lease => '1 hour', retain => '1 hour');
	SELECT claim.create_queue('s', lease => '1 hour');
	SELECT claim.enqueue('s', '{}') FROM generate_series(1, 2);
	SELECT claim.create_queue('p2', lease => '1 hour');
	SELECT claim.schedule('tick', '* * * * * *', 'p2');
	CREATE SEQUENCE ks;
	$ledger
});
$blue->safe_psql('postgres', q{SELECT count(*) FROM put(300)});
$blue->safe_psql('postgres', q{CALL work(100)});

# Held on blue: a claim, a lease, a guard attempt, a once key.
my $old_claim = $blue->safe_psql('postgres', q{SELECT token FROM claim.claim_next('s')});
my $old_lease = $blue->safe_psql('postgres', q{SELECT claim.lease_acquire('L', '1 hour')});
my $old_guard = $blue->safe_psql('postgres', q{SELECT claim.guard_begin('G', '1 hour')});
$blue->safe_psql('postgres', q{SELECT claim.once('k1')});

# Producers and workers on blue while green subscribes.
my $bench = ledger_load($blue, 'switchover');

# A publication of every table needs a replica identity on the tables whose
# rows are updated or deleted: pg_claim's logged tables have primary keys,
# but the partitions of claim.finished (only inserted and truncated).
is($blue->safe_psql('postgres', q{
	SELECT string_agg(c.relname, ' ' ORDER BY c.relname) FROM pg_class c
	WHERE c.relnamespace = 'claim'::regnamespace AND c.relkind IN ('r', 'p')
	  AND c.relpersistence = 'p'
	  AND NOT EXISTS (SELECT FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)}),
	'finished finished_0 finished_1 finished_2 finished_3',
	'every logged table of pg_claim has a primary key, but claim.finished\'s (insert and truncate only)');
$blue->safe_psql('postgres', 'CREATE PUBLICATION pg_claim_move FOR ALL TABLES');
$green->safe_psql('postgres', qq{
	CREATE EXTENSION pg_claim;
	CREATE SEQUENCE ks START 1000000000;
	$ledger
});
my $blue_conn = $blue->connstr . ' dbname=postgres';
$green->safe_psql('postgres', "CREATE SUBSCRIPTION pg_claim_move CONNECTION '$blue_conn' PUBLICATION pg_claim_move");
$green->wait_for_subscription_sync($blue, 'pg_claim_move');
ok(1, 'green copied every table of blue under load');

# The apply goes on under the load for a while, blue's schedule firing.
my $t0 = time;
$blue->safe_psql('postgres', q{SELECT count(*) FROM put(50)});
$blue->wait_for_catchup('pg_claim_move');
usleep(1_500_000);
$blue->wait_for_catchup('pg_claim_move');
# While subscribed, green's worker leaves the schedule alone: every item of
# the schedule's queue on green is blue's, same id and tick (the schedule
# fires every second and green's worker runs rounds every 200 ms; blue's
# items are never completed, so blue's list only grows).
my $sched_items = q{SELECT coalesce(string_agg(i.id || ':' || i.dedup_key, ' ' ORDER BY i.id), '')
	FROM claim.items i JOIN claim.queues q USING (queue_id) WHERE q.name = 'p2'};
my @green_ticks = split / /, $green->safe_psql('postgres', $sched_items);
my %blue_ticks = map { $_ => 1 } split / /, $blue->safe_psql('postgres', $sched_items);
cmp_ok(scalar(@green_ticks), '>', 0, 'blue fired the schedule, green has its items');
is(join(' ', grep { !$blue_ticks{$_} } @green_ticks), '',
	'while subscribed green does not fire the schedule: every item of it on green is blue\'s');

# ---------------------------------------------------------------------------
# The switchover: stop blue's producers and workers, let green catch up,
# disable the subscription; blue stops (its worker also writes).
# ---------------------------------------------------------------------------
ledger_load_stop($bench);
# A worker of blue holds 5 claims across the switchover (it never completes).
$blue->safe_psql('postgres', q{SELECT count(*) FROM put(10)});
my $held_keys = $blue->safe_psql('postgres',
	q{SELECT string_agg(payload->>'k', ',') FROM claim.claim_next('p', 5)});
# The steps of docs/operations.md, as written there: the worker's last round
# publishes blue's token ceiling (claim.token_marks), then the worker stops.
$blue->poll_query_until('postgres', q{
	SELECT coalesce(bool_or(m.ceiling >= s.last_value), false)
	  FROM claim.token_marks m, claim.token_seq s})
  or die 'blue did not publish its token ceiling';
$blue->safe_psql('postgres', q{ALTER SYSTEM SET pg_claim.worker_enabled = off});
$blue->safe_psql('postgres', q{SELECT pg_reload_conf()});
$blue->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'pg_claim worker'})
  or die 'blue\'s worker did not stop';
$blue->poll_query_until('postgres', q{
	SELECT replay_lsn >= pg_current_wal_lsn() FROM pg_stat_replication
	 WHERE application_name = 'pg_claim_move'})
  or die 'green did not catch up';
$green->safe_psql('postgres', 'ALTER SUBSCRIPTION pg_claim_move DISABLE');
my ($blue_tokens, $blue_ids, $blue_enq) = split /\|/, $blue->safe_psql('postgres', q{
	SELECT (SELECT last_value FROM claim.token_seq), (SELECT last_value FROM claim.item_id_seq),
	       (SELECT count(*) FROM enq)});
my $blue_tick = $blue->safe_psql('postgres', q{SELECT floor(extract(epoch FROM last_run))::int8 FROM claim.schedules});
$blue->stop;
$green->safe_psql('postgres', 'ALTER SUBSCRIPTION pg_claim_move SET (slot_name = NONE); DROP SUBSCRIPTION pg_claim_move');
note("blue handed out tokens up to $blue_tokens and item ids up to $blue_ids; $blue_enq enqueued");
is($green->safe_psql('postgres', 'SELECT count(*) FROM enq'), $blue_enq, 'green has every enqueue of blue');

# ---------------------------------------------------------------------------
# Green after the switchover.
# ---------------------------------------------------------------------------
my ($id_seq, $copied_max_id) = split /\|/, $green->safe_psql('postgres', q{
	SELECT (SELECT last_value FROM claim.item_id_seq),
	       greatest((SELECT max(id) FROM claim.items), (SELECT max(id) FROM claim.finished))});
cmp_ok($id_seq, '>=', $copied_max_id, 'green\'s item id sequence is past every copied item id');

# 10,000 items in one statement, no collision.
my ($n, $min_id) = split /\|/, $green->safe_psql('postgres', q{
	WITH k AS (INSERT INTO enq SELECT nextval('ks') FROM generate_series(1, 10000) RETURNING k)
	SELECT count(*), min(id) FROM claim.enqueue_many('p', (SELECT array_agg(jsonb_build_object('k', k)) FROM k)) id});
is($n, '10000', 'green enqueued 10,000 items in one statement');
cmp_ok($min_id, '>', $blue_ids, 'their ids are past every id blue handed out');
$green->safe_psql('postgres', q{SELECT count(*) FROM put(20)});
# Queues came with the first copy only (none was created on blue later).
$green->safe_psql('postgres', q{SELECT claim.create_queue('after')});
is($green->safe_psql('postgres', q{
	SELECT queue_id > (SELECT max(queue_id) FROM claim.queues WHERE name <> 'after')
	  FROM claim.queues WHERE name = 'after'}),
	't', 'a queue created on green has a new id (the first copy moved the sequence too)');

# Tokens.
my $new_lease = $green->safe_psql('postgres', q{SELECT claim.lease_acquire('L2', '1 hour')});
my $new_guard = $green->safe_psql('postgres', q{SELECT claim.guard_begin('G2', '1 hour')});
cmp_ok($new_lease, '>', $blue_tokens, 'a lease granted on green: higher than every token of blue');
cmp_ok($new_guard, '>', $blue_tokens, 'a guard attempt on green: higher than every token of blue');
cmp_ok($new_lease - $blue_tokens, '>', 2**31, 'green\'s tokens start 2^32 past blue\'s ceiling');

sub sqlstate_on_green
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	$green->psql('postgres', $sql, stdout => \$out, stderr => \$err,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : 'none';
}
is(sqlstate_on_green("SELECT claim.complete($old_claim)"), 'PC001',
	'a claim token of blue is refused on green (claims are not copied)');
is(sqlstate_on_green("SELECT claim.lease_assert('L', $old_lease)"), 'none',
	'the lease held on blue is held on green, under its token');
is($green->safe_psql('postgres', q{SELECT claim.lease_acquire('L', '1 minute') IS NULL}), 't',
	'and nobody else takes it');
is(sqlstate_on_green("SELECT claim.guard_finish('G', $old_guard)"), 'none',
	'the guard attempt begun on blue finishes on green');

is($green->safe_psql('postgres', qq{SELECT count(*) || ' ' || bool_and(token > $blue_tokens)
	FROM claim.claim_next('s', 10)}), '2 true',
	'the item claimed on blue is ready on green, and claimed again under a higher token');

# Once keys.
is($green->safe_psql('postgres', q{SELECT claim.once('k1')}), 'f', 'a once key taken on blue is taken on green');
is($green->safe_psql('postgres', q{SELECT claim.once('k2')}), 't', 'a new once key is free');

# The schedule goes on firing on green, at later ticks, under new item ids.
ok($green->poll_query_until('postgres',
	qq{SELECT extract(epoch FROM last_run)::int8 > $blue_tick FROM claim.schedules}),
	'green fires the schedule after the switchover');
my ($tick_item, $old_ticks) = split /\|/, $green->safe_psql('postgres', qq{
	SELECT (SELECT last_item FROM claim.schedules),
	       (SELECT count(*) FROM claim.items
	         WHERE dedup_key LIKE 'schedule:tick:%' AND id > $blue_ids
	           AND split_part(dedup_key, ':', 3)::int8 <= $blue_tick)});
cmp_ok($tick_item, '>', $blue_ids, 'its items have ids past every id blue handed out');
is($old_ticks, '0', 'green fires only ticks after blue\'s last (no tick fired on both sides)');

# Drain green: claims of blue's items (those claimed when the load stopped)
# are gone, their items ready again.
my $rounds = 0;
while ($green->safe_psql('postgres', 'CALL work(1000)') ne '0')
{
	die 'the drain does not end' if ++$rounds > 100;
}
my $green_min = $green->safe_psql('postgres', q{SELECT min(token) FROM effects WHERE side = 'green'});
cmp_ok($green_min, '>', $blue_tokens, 'every claim token of green is higher than every token of blue');
is($green->safe_psql('postgres', q{SELECT count(*) FROM effects WHERE side = 'blue' AND token > } . $blue_tokens),
	'0', 'blue\'s effects carry blue\'s tokens');

is($green->safe_psql('postgres', qq{SELECT count(*) FROM effects WHERE side = 'green' AND k IN ($held_keys)}),
	'5', 'the items claimed on blue at the switchover were completed on green');

# The ledger across both sides.
my ($enq_n, $eff_blue, $eff_green) = split /\|/, $green->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM enq), (SELECT count(*) FROM effects WHERE side = 'blue'),
	       (SELECT count(*) FROM effects WHERE side = 'green')});
note("enqueued $enq_n; completed on blue $eff_blue, on green $eff_green");
cmp_ok($eff_blue, '>', 100, 'blue completed items under the load');
is($green->safe_psql('postgres', 'SELECT count(*) FROM dups'), '0', 'no item was completed twice');
is($green->safe_psql('postgres', 'SELECT count(*) FROM enq WHERE k NOT IN (SELECT k FROM effects)'),
	'0', 'lost: 0 (every item enqueued on either side was completed)');
is($green->safe_psql('postgres', 'SELECT count(*) FROM effects WHERE k NOT IN (SELECT k FROM enq)'),
	'0', 'unexpected: 0');
is($green->safe_psql('postgres',
	q{SELECT count(*) FROM claim.items i JOIN claim.queues q USING (queue_id) WHERE q.name = 'p'}),
	'0', 'the queue is empty');
note(sprintf('test body: %.1f s', time - $t0));

$green->stop;
done_testing();
