# Promotion under load. A primary (pg_claim preloaded) streams to a hot
# standby, synchronously (remote_apply): a commit the primary acknowledged is
# replayed on the standby. Producers enqueue and workers claim, check their
# token (assert_token), record the effect and complete, all the time:
#   - on the hot standby, every function that writes refuses with SQLSTATE
#     25006 and a hint; what reads claims says what it cannot show
#     (queue_stats and metrics(): NULL for what needs claims; claimed_items,
#     blocked_groups, leases and item_state: SQLSTATE 55000 naming the
#     primary); everything else reads;
#   - the primary is stopped (immediate) in the middle of the load and the
#     standby is promoted; on the new primary every item whose enqueue was
#     acknowledged is there, and after draining every enqueued item has
#     exactly one effect (none lost, none twice, none unexpected);
#   - every token granted after the promotion is higher than any token the
#     old primary handed out, and the old holders' tokens are refused (PC001).
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PgClaimNode;

my $primary = pgclaim_node('primary', "max_connections = 30\n", allows_streaming => 1);
$primary->safe_psql('postgres', q{
	CREATE EXTENSION pg_claim;
	SELECT claim.create_queue('p', lease => '1 hour');
	SELECT claim.create_queue('s', lease => '1 hour');
	SELECT claim.enqueue('s', '{}') FROM generate_series(1, 3);
	SELECT claim.create_queue('g', lease => '1 hour');
	SELECT claim.enqueue('g', '{}', group_key => 'a');
	CREATE SEQUENCE ks;
});
$primary->safe_psql('postgres', ledger_sql());

# Live claims, a lease and a guard of the old primary: their tokens must be
# refused on the standby (25006) and after the promotion (PC001).
my @held = split /\n/, $primary->safe_psql('postgres',
	q{SELECT token FROM claim.claim_next('s', 2)});
my $s_ids = $primary->safe_psql('postgres',
	q{SELECT string_agg(id::text, ',') FROM claim.items i JOIN claim.queues q USING (queue_id) WHERE q.name = 's'});
my $lease_token = $primary->safe_psql('postgres', q{SELECT claim.lease_acquire('L', '1 hour')});
my $guard_token = $primary->safe_psql('postgres', q{SELECT claim.guard_begin('G', '1 hour')});
$primary->safe_psql('postgres', q{SELECT claim.schedule('sched', '0 0 1 1 *', 's')});

$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);
$primary->append_conf('postgresql.conf',
	"synchronous_standby_names = '*'\nsynchronous_commit = remote_apply\n");
$primary->reload;
$primary->poll_query_until('postgres',
	q{SELECT EXISTS (SELECT FROM pg_stat_replication WHERE sync_state = 'sync')})
  or die 'the standby did not become synchronous';

# Background load: 2 pgbench clients enqueue and work for long enough that the
# primary stops in its middle.
my $bench = ledger_load($primary, 'promotion');

# The acknowledged enqueues: a key is in @acked once put() returned it.
my $producer = $primary->background_psql('postgres');
my @acked;
sub produce { push @acked, split /\n/, $producer->query_safe('SELECT put(3)') }
produce() for 1 .. 10;

# ---------------------------------------------------------------------------
# On the hot standby, under that load.
# ---------------------------------------------------------------------------
$primary->wait_for_catchup($standby);

sub on_standby
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	$standby->psql('postgres', $sql, stdout => \$out, stderr => \$err,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return ($out, $err);
}

sub sqlstate { $_[0] =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : 'none' }

my $tok = $held[0];
my %writes = (
	'create_queue'  => q{SELECT claim.create_queue('new')},
	'drop_queue'    => q{SELECT claim.drop_queue('s')},
	'alter_queue'   => q{SELECT claim.alter_queue('s', lease => '1 minute')},
	'pause'         => q{SELECT claim.pause('s')},
	'resume'        => q{SELECT claim.resume('s')},
	'enqueue'       => q{SELECT claim.enqueue('s', '{}')},
	'enqueue_many'  => q{SELECT claim.enqueue_many('s', ARRAY['{}'::jsonb])},
	'claim_next'    => q{SELECT * FROM claim.claim_next('s')},
	'group_claim'   => q{SELECT * FROM claim.group_claim('s')},
	'complete'      => "SELECT claim.complete($tok)",
	'complete_many' => "SELECT claim.complete_many(ARRAY[$tok]::bigint[])",
	'fail'          => "SELECT claim.fail($tok, 'x')",
	'extend'        => "SELECT claim.extend($tok, '1 minute')",
	'release'       => "SELECT claim.release($tok)",
	'assert_token'  => "SELECT claim.assert_token($tok)",
	'cancel'        => "SELECT claim.cancel('s', (ARRAY[$s_ids]::bigint[])[1])",
	'cancel_many'   => "SELECT claim.cancel_many('s', ARRAY[$s_ids]::bigint[])",
	'redrive'       => q{SELECT claim.redrive('s')},
	'lease_acquire' => q{SELECT claim.lease_acquire('L2', '1 minute')},
	'lease_acquire_shared' => q{SELECT claim.lease_acquire_shared('L4', '1 minute')},
	'lease_renew'   => "SELECT claim.lease_renew('L', $lease_token, '1 minute')",
	'lease_release' => "SELECT claim.lease_release('L', $lease_token)",
	'lease_assert'  => "SELECT claim.lease_assert('L', $lease_token)",
	'lease_purge'   => q{SELECT claim.lease_purge()},
	'once'          => q{SELECT claim.once('k')},
	'guard_begin'   => q{SELECT claim.guard_begin('G2', '1 minute')},
	'guard_finish'  => "SELECT claim.guard_finish('G', $guard_token)",
	'guard_abandon' => "SELECT claim.guard_abandon('G', $guard_token)",
	'schedule'      => q{SELECT claim.schedule('sched2', '* * * * *', 's')},
	'unschedule'    => q{SELECT claim.unschedule('sched')},
	'set_partition' => q{SELECT claim.set_partition(1)},
	'set_fair_weight' => q{SELECT claim.set_fair_weight('s', 'k', 2)},
	'step'           => "SELECT claim.step($tok, 'a')",
	'step_done'      => "SELECT claim.step_done($tok, 'a')",
	'sleep'          => "SELECT claim.sleep($tok, now() + interval '1 minute')",
	'sleep_for'      => "SELECT claim.sleep_for($tok, '1 minute')",
	'await_event'    => "SELECT claim.await_event($tok, 'e', '1 minute')",
	'await_children' => "SELECT claim.await_children($tok, ARRAY[1]::bigint[])",
	'emit_event'     => q{SELECT claim.emit_event('e', '{}')},
	'session_open'      => q{SELECT claim.session_open()},
	'session_keepalive' => q{SELECT claim.session_keepalive(1)},
	'session_close'     => q{SELECT claim.session_close(1)},
	'session_lease'     => q{SELECT claim.session_lease(1, 'L3')},
	'session_claim'     => q{SELECT * FROM claim.session_claim(1, 's')},
	'session_group_claim' => q{SELECT * FROM claim.session_group_claim(1, 's')},
	'elect'             => q{SELECT claim.elect('e', '1 minute')},
	'resign'            => q{SELECT claim.resign('e', 1)},
	'latch'             => q{SELECT claim.latch('l', 2)},
	'count_down'        => q{SELECT claim.count_down('l')},);
# Functions that only read (they work on a standby), and the trigger
# functions (the INSERT into their tables is refused by PostgreSQL itself).
my %reads = map { $_ => 1 } qw(item_state guard_result token_partition partition cron_next
  queue_counters metrics worker_status lock_table enqueue_trigger _claim_rows _claim_times _lease_releases
  _finished_ring_restore _fair_state _follow_copy
  _steps_wake _steps_wait_children _steps_claim _steps_park
  leader revision watch latch_wait barrier
  _coord_attach_claims _coord_attach_lease _coord_compacted _coord_end_session _coord_key
  _coord_live_until _coord_log _coord_maintain _coord_ms _coord_next_lease_end _coord_primary _coord_session
  _coord_session_claims _coord_token _coord_wait _coord_wake _coord_watch_leases);

my @all = split /\n/, $standby->safe_psql('postgres',
	q{SELECT DISTINCT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
	  WHERE n.nspname = 'claim' ORDER BY 1});
my @unlisted = grep { !$reads{$_} && !exists $writes{$_} } @all;
is("@unlisted", '', 'every function of schema claim is checked here (writes) or only reads');

for my $fn (sort keys %writes)
{
	my ($out, $err) = on_standby($writes{$fn});
	is(sqlstate($err), '25006', "$fn on the hot standby: 25006")
	  or diag($err);
	like($err, qr/^HINT:\s+\S/m, "$fn on the hot standby: with a hint");
}

# What only reads works, claims excepted.
for my $read (
	q{SELECT count(*) FROM claim.items},
	q{SELECT count(*) FROM claim.dead_items},
	q{SELECT count(*) FROM claim.finished_items},
	q{SELECT count(*) FROM claim.lease_holders},
	q{SELECT count(*) FROM claim.schedules},
	q{SELECT claim.guard_result('G')},
	"SELECT claim.token_partition($tok)",
	q{SELECT claim.cron_next('* * * * *', now())},
	q{SELECT count(*) FROM claim.worker_status()})
{
	my ($out, $err) = on_standby($read);
	is($err, '', "on the standby: $read") or diag($err);
}

# What needs claims (or lease releases) says so: 55000 naming the primary.
my $s_id = (split /,/, $s_ids)[0];
for my $read (
	[ 'claimed_items',  q{SELECT * FROM claim.claimed_items}, qr/claims are not replicated/ ],
	[ 'blocked_groups', q{SELECT * FROM claim.blocked_groups}, qr/claims are not replicated/ ],
	[ 'item_state',     "SELECT * FROM claim.item_state('s', $s_id)", qr/claims are not replicated/ ],
	[ 'leases',         q{SELECT * FROM claim.leases}, qr/lease releases are not replicated/ ])
{
	my ($name, $sql, $why) = @$read;
	my ($out, $err) = on_standby($sql);
	is(sqlstate($err), '55000', "$name on the standby: 55000") or diag($err);
	like($err, $why, "$name on the standby: says why");
	like($err, qr/^HINT:\s+.*primary/m, "$name on the standby: the hint names the primary");
}

# queue_stats: the counts that need claims are NULL (unknown), the rest are read.
{
	my ($out, $err) = on_standby(q{
		SELECT ready IS NULL, claimed IS NULL, oldest_ready_age IS NULL, dead, waiting, paused
		FROM claim.queue_stats WHERE queue = 's'});
	is($err, '', 'queue_stats reads on the standby') or diag($err);
	is($out, 't|t|t|0|0|f', 'queue_stats on the standby: ready, claimed, oldest_ready_age unknown');
	($out, $err) = on_standby(q{SELECT count(*) FROM claim.metrics() WHERE ready IS NULL AND in_flight IS NULL});
	like($out, qr/^[1-9]/, 'metrics() on the standby: ready and in_flight unknown');
	($out, $err) = on_standby(q{SELECT obj_description('claim.queue_stats'::regclass, 'pg_class')});
	like($out, qr/standby/, 'queue_stats says so in its comment');
}

# ---------------------------------------------------------------------------
# Stop the primary in the middle of the load, promote the standby.
# ---------------------------------------------------------------------------
produce() for 1 .. 10;
$producer->quit;
$primary->stop('immediate');
ledger_load_stop($bench);

$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()') or die 'no promotion';

# The highest token the old primary handed out: its sequence after a restart
# (the sequence is WAL-logged ahead of the values it hands out, and every
# token a client saw was flushed by the claim's commit).
$primary->append_conf('postgresql.conf', "synchronous_standby_names = ''\n");
$primary->start;
my $old_max = $primary->safe_psql('postgres', 'SELECT last_value FROM claim.token_seq');
$primary->stop;
my $effects_max = $standby->safe_psql('postgres', 'SELECT coalesce(max(token), 0) FROM effects');
cmp_ok($effects_max, '<=', $old_max, 'the old primary\'s sequence covers every token of its effects');
note("acknowledged enqueues: " . scalar(@acked) . "; old primary's last token $old_max");

my $acked_list = join(',', @acked);
is($standby->safe_psql('postgres', qq{
	SELECT count(*) FROM unnest('{$acked_list}'::bigint[]) a(k)
	WHERE NOT EXISTS (SELECT FROM effects e WHERE e.k = a.k)
	  AND NOT EXISTS (SELECT FROM claim.items i WHERE (i.payload->>'k')::bigint = a.k)}),
	'0', 'every acknowledged enqueue is there after the promotion (an item, or its effect)');
ok(scalar(@acked) >= 60, 'the producer was acknowledged all its enqueues');

# The old holders' tokens are refused on the new primary.
sub sqlstate_of
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	$standby->psql('postgres', $sql, stdout => \$out, stderr => \$err,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return sqlstate($err);
}
for my $t (@held)
{
	is(sqlstate_of("SELECT claim.assert_token($t)"), 'PC001', "old token $t: assert_token refused");
	is(sqlstate_of("SELECT claim.complete($t)"), 'PC001', "old token $t: complete refused");
	is(sqlstate_of("SELECT claim.extend($t, '1 minute')"), 'PC001', "old token $t: extend refused");
}

my ($enq_n, $eff_n) = split /\|/, $standby->safe_psql('postgres',
	'SELECT (SELECT count(*) FROM enq), (SELECT count(*) FROM effects)');
note("before the drain: $enq_n enqueued, $eff_n completed");
cmp_ok($enq_n, '>', scalar(@acked), 'pgbench enqueued too (the load ran beside the producer)');
cmp_ok($eff_n, '>', 0, 'items were completed on the old primary');

# Drain on the new primary; everything claimed from here on is new.
$standby->safe_psql('postgres', 'CREATE TABLE effects_before AS SELECT k FROM effects');
my $rounds = 0;
while ($standby->safe_psql('postgres', 'CALL work(500)') ne '0')
{
	die 'drain does not end' if ++$rounds > 1000;
}
$standby->safe_psql('postgres', 'SELECT put(5)');
$standby->safe_psql('postgres', 'CALL work(500)');
my $s_tokens = $standby->safe_psql('postgres',
	q{SELECT count(*) || ' ' || min(token) FROM claim.claim_next('s', 10)});
my ($s_n, $s_min) = split / /, $s_tokens;

my $new_min = $standby->safe_psql('postgres',
	'SELECT min(token) FROM effects WHERE k NOT IN (SELECT k FROM effects_before)');
cmp_ok($new_min, '>', $old_max, 'tokens after the promotion are higher than any before');
# The promoted standby's shared memory was set up when it started as a
# standby, where no token is granted: its first grant after the promotion
# moves the sequence 2^32 ahead of what it replayed, which covers tokens
# handed out in WAL the standby never received.
cmp_ok($new_min - $old_max, '>', 2**31, 'the first grant after the promotion jumped the sequence');
cmp_ok($s_min, '>', $old_max, 'the items claimed on the old primary are claimed again, under higher tokens');
is($s_n, '3', 'the items claimed on the old primary are ready again');

is($standby->safe_psql('postgres', 'SELECT count(*) FROM dups'), '0', 'no item had its effect twice');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM enq WHERE k NOT IN (SELECT k FROM effects)'),
	'0', 'lost: 0 (every enqueued item was completed)');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM effects WHERE k NOT IN (SELECT k FROM enq)'),
	'0', 'unexpected: 0 (every effect belongs to an enqueued item)');
is($standby->safe_psql('postgres', qq{
	SELECT count(*) FROM unnest('{$acked_list}'::bigint[]) a(k)
	WHERE NOT EXISTS (SELECT FROM effects e WHERE e.k = a.k)}),
	'0', 'every acknowledged enqueue was completed once');
is($standby->safe_psql('postgres',
	q{SELECT count(*) FROM claim.items i JOIN claim.queues q USING (queue_id) WHERE q.name = 'p'}),
	'0', 'the queue is empty');
is($standby->safe_psql('postgres',
	q{SELECT ready IS NOT NULL AND claimed IS NOT NULL FROM claim.queue_stats WHERE queue = 's'}),
	't', 'queue_stats counts claims again on the new primary');
is($standby->safe_psql('postgres', q{SELECT count(*) FROM claim.claimed_items WHERE queue = 's'}),
	'3', 'claimed_items reads on the new primary');
is($standby->safe_psql('postgres', q{SELECT count(*) FROM claim.leases WHERE name = 'L'}),
	'1', 'leases reads on the new primary (the lease of the old primary is held until it expires)');
is($standby->safe_psql('postgres', "SELECT state FROM claim.item_state('s', $s_id)"),
	'claimed', 'item_state reads on the new primary');

$standby->stop;
done_testing();
