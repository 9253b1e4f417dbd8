# pg_claim over four partitions behind a PL/Proxy front (pg_claim_proxy,
# docs/partitions.md): routing by the documented hash, tokens that route
# back, SQLSTATEs through the front, waits woken and cancelled through the
# front, fencing of leases, once and guards, a stopped partition, and 8
# workers draining 16 queues through the front with every item exactly once
# (100k items; PGCLAIM_PROXY_ITEMS sets another count), and the end of a
# partition's token sequence.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep);
use File::Basename qw(dirname);
use lib dirname(__FILE__);
use ProxyCluster qw(background_psql drain_through_front fnv1a start_proxy_cluster);

my $P = 4;
my $ITEMS = $ENV{PGCLAIM_PROXY_ITEMS} // 100000;

sub part_of { return fnv1a($_[0]) & ($P - 1); }

# ------------------------------------------------------------------ clusters
my ($front, $partsref) = start_proxy_cluster($P) or plan skip_all => $ProxyCluster::SKIP;
my @parts = @$partsref;
$front->safe_psql('postgres', q{
	CREATE FUNCTION sqlstate_of(q text) RETURNS text LANGUAGE sql
		AS $$ SELECT split_part(error_of(q), ':', 1) $$;
});

sub f { return $front->safe_psql('postgres', $_[0]); }
sub on { my ($k, $sql) = @_; return $parts[$k]->safe_psql('postgres', $sql); }

# ------------------------------------------------------- the same API
# Every function and view of pg_claim (but its internal helpers, the
# trigger function, which runs where its table is, the partition number
# of a database, set on each partition, and the lock table of the session's
# own transaction) is at the front with the same
# arguments, defaults and result.
{
	my $api = q{
		SELECT string_agg(x, E'\n' ORDER BY x) FROM (
			SELECT p.proname || '(' || pg_get_function_arguments(p.oid) || ') -> '
			       || pg_get_function_result(p.oid) AS x
			FROM pg_proc p WHERE p.pronamespace = 'claim'::regnamespace
			  AND p.proname NOT LIKE '\_%' AND p.proname NOT IN ('enqueue_trigger', 'queue_counters', 'partition', 'set_partition', 'lock_table')
			  -- sessions and the watch run on one partition (docs/coordination.md, "Partitions")
			  AND p.proname NOT IN ('session_open', 'session_keepalive', 'session_close', 'session_lease',
			                        'session_claim', 'session_group_claim', 'watch', 'revision')
			UNION ALL
			SELECT 'view ' || c.relname || '(' || string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum) || ')'
			FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
			WHERE c.relnamespace = 'claim'::regnamespace AND c.relkind = 'v' AND c.relname <> 'sessions'
			GROUP BY c.relname) s};
	# create_queue at the front has two arguments more (spread queues)
	my %front_api = map { s/, spread boolean DEFAULT false, partitions integer\[\] DEFAULT NULL::integer\[\]\)/)/r => 1 }
	  split /\n/, $front->safe_psql('postgres', $api);
	my @part_api = split /\n/, on(0, $api);
	cmp_ok(scalar(@part_api), '>', 35, 'pg_claim\'s API as listed on a partition');
	my @missing = grep { !$front_api{$_} } @part_api;
	is(join("\n", @missing), '', 'the front has every function and view of pg_claim, alike');
}

# ------------------------------------------------------------------- routing
for my $key ('', 'a', 'foobar', 'q7', "k\xc3\xb6ln-\xc3\xbc")
{
	my $h = fnv1a($key);
	$h -= 4294967296 if $h >= 2147483648;
	is(f("SELECT claim.route_hash('$key')"), $h, "route_hash('$key') is FNV-1a of its UTF-8 bytes");
}
is(fnv1a('a'), 0xe40c292c, 'the reference FNV-1a gives the published value for "a"');

my @queues = map { "q$_" } 0 .. 15;
my @drain = map { "d$_" } 0 .. 15;
f(join('', map { "SELECT claim.create_queue('$_', lease => '5 minutes');\n" } @queues));
my %seen;
for my $q (@queues)
{
	my $want = part_of($q);
	$seen{$want}++;
	my @where = grep { on($_, "SELECT count(*) FROM claim.queues WHERE name = '$q'") == 1 }
	  0 .. $P - 1;
	is("@where", $want, "queue $q lives on partition $want only");
}
is(scalar(keys %seen), $P, 'the 16 queues spread over all 4 partitions');

# -------------------------------------------------------- tokens route back
for my $q ('q0', 'q1', 'q2', 'q3')
{
	my $k = part_of($q);
	f(qq{SELECT claim.alter_queue('$q', retain => '1 hour')});
	my $id = f("SELECT claim.enqueue('$q', '{\"n\": 1}')");
	my ($cid, $tok) = split /\|/, f("SELECT id, token FROM claim.claim_next('$q')");
	is($cid, $id, "$q: the item enqueued through the front is claimed through it");
	is(f("SELECT claim.token_partition($tok)"), $k, "$q: its token carries partition $k");
	is(on($k, "SELECT count(*) FROM claim.claims WHERE token = $tok AND item_id = $id"),
		1, "$q: the partition holds the claim under that token");
	is(f("SELECT claim.extend($tok, '10 minutes') > now()"), 't', "$q: extend routes by token");
	is(f("SELECT claim.complete($tok, '{\"ok\": true}')"), 1, "$q: complete(token) through the front");
	is(f("SELECT state || ' ' || result::text FROM claim.item_state('$q', $id)"),
		'completed {"ok": true}', "$q: the item is completed with its result");
	is(on($k, "SELECT count(*) FROM claim.claims WHERE token = $tok"), 0,
		"$q: no claim is left on partition $k");
	is(f("SELECT sqlstate_of('SELECT claim.complete($tok)')"), 'PC001',
		"$q: the stale token gives PC001 through the front");
}
my ($ret, $out, $err) = $front->psql('postgres', 'SELECT claim.complete(12345)',
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/PC001.*not a live claim/s, 'the error text of the partition reaches the client');

# fail and release route by token; array complete of one partition is atomic
{
	my $ids = f(q{SELECT count(*) FROM claim.enqueue_many('q5', ARRAY['{}','{}','{}']::jsonb[])});
	is($ids, 3, 'enqueue_batch through the front');
	my @t = split /\n/, f(q{SELECT token FROM claim.claim_next('q5', 3)});
	is(scalar(@t), 3, 'three claimed');
	is(f("SELECT claim.fail($t[0], 'boom', '0')"), 1, 'fail through the front');
	is(f("SELECT claim.release($t[1])"), 1, 'release through the front');
	is(f("SELECT sqlstate_of('SELECT claim.complete_many(ARRAY[$t[2], $t[1]])')"), 'PC001',
		'a batch with a stale token: PC001, nothing completed');
	is(f("SELECT claim.complete_many(ARRAY[$t[2]])"), 1, 'its live token still completes');
	f(q{SELECT claim.enqueue('q2')});
	my $other = f(q{SELECT token FROM claim.claim_next('q2')});
	my $live5 = f(q{SELECT token FROM claim.claim_next('q5')});
	is(f("SELECT sqlstate_of('SELECT claim.complete_many(ARRAY[$other, $live5])')"), 'PC001',
		'a batch goes to the partition of its first token: one of another partition is unknown there');
	is(f("SELECT claim.complete_many(ARRAY[$other, $live5], skip_stale => true)"), 1,
		'with skip_stale it is skipped and the rest completed');
	is(f("SELECT claim.release($live5)"), 1, 'the skipped token\'s claim was left alone');
}

# group_claim, pause, resume and cancel through the front
{
	my $q = 'q7';
	my $k = part_of($q);
	f(qq{SELECT claim.enqueue('$q', '{}', group_key => 'g') FROM generate_series(1, 3)});
	my @g = split /\n/, f(qq{SELECT token FROM claim.group_claim('$q')});
	is(scalar(@g), 3, 'group_claim through the front takes the whole group');
	is(f("SELECT count(DISTINCT t) || ' ' || min(claim.token_partition(t)) FROM unnest(ARRAY[" . join(',', @g) . "]) t"),
		"1 $k", 'under one token of the queue\'s partition');
	is(f("SELECT claim.complete($g[0])"), 3, 'complete(token) finishes the group');

	f(qq{SELECT claim.pause('$q')});
	my $id = f(qq{SELECT claim.enqueue('$q')});
	is(f(qq{SELECT count(*) FROM claim.claim_next('$q')}), 0, 'a paused queue hands out nothing');
	f(qq{SELECT claim.resume('$q')});
	my $tok = f(qq{SELECT token FROM claim.claim_next('$q')});
	ok($tok, 'after resume it does');
	is(f(qq{SELECT claim.cancel_many('$q', ARRAY[$id])}), 1, 'cancel through the front');
	is(f("SELECT sqlstate_of('SELECT claim.complete($tok)')"), 'PC001',
		'the cancelled claim\'s token is stale');
}

# views and item_state answered from all partitions
is(f(q{SELECT count(*) FROM claim.queue_stats}), 16, 'queue_stats: every queue of every partition');
is(f(q{SELECT count(DISTINCT datid::text || pid) >= 4 FROM claim.worker_status()}), 't',
	'worker_status: the workers of every partition');
is(f(q{SELECT count(*) FROM claim.metrics() WHERE queue LIKE 'q%'}), 16,
	'metrics: every queue of every partition');

# flow control and schedules through the front
f(q{SELECT claim.alter_queue('q9', max_active => 2)});
is(on(part_of('q9'), q{SELECT max_active FROM claim.queues WHERE name = 'q9'}), 2,
	'alter_queue(max_active) reaches the partition of the queue');
f(q{SELECT claim.schedule('nightly', '0 3 * * *', 'q3', '{"s": 1}')});
is(f(q{SELECT queue FROM claim.schedules}), 'q3', 'schedules: the schedule is listed');
is(on(part_of('q3'), q{SELECT count(*) FROM claim.schedules WHERE name = 'nightly'}), 1,
	'it lives on the partition of its queue');
is(f(q{SELECT claim.cron_next('0 3 * * *', '2026-01-01 10:00+00', 'UTC') = '2026-01-02 03:00+00'}),
	't', 'cron_next through the front');
is(f(q{SELECT claim.unschedule('nightly')}), 't', 'unschedule finds it');
is(f(q{SELECT claim.unschedule('nightly')}), 'f', 'and it is gone');

# ------------------------------------------------------------- waits
sub bg { return background_psql($front, $_[0]); }

sub waiters
{
	my ($k) = @_;
	return on($k, q{SELECT count(*) FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND state = 'active'
		  AND query LIKE '%claim_next%' AND pid <> pg_backend_pid()});
}

my $wq = 'q6';
my $wk = part_of($wq);
my $w = bg(qq{SELECT payload->>'w' FROM claim.claim_next('$wq', wait => '60 s')});
ok($parts[$wk]->poll_query_until('postgres', qq{
	SELECT count(*) = 1 FROM pg_stat_activity
	WHERE backend_type = 'client backend' AND state = 'active' AND query LIKE '%claim_next%'
	  AND pid <> pg_backend_pid()}),
	'claim_next(wait) through the front waits on the partition');
f(qq{SELECT claim.enqueue('$wq', '{"w": "woken"}')});
$w->[0]->finish;
is(${ $w->[1] }, "woken\n", 'an enqueue through the front wakes the waiter with its item');
f(q{SELECT claim.complete_many(ARRAY(SELECT token FROM claim.claimed_items WHERE queue = 'q6'))});

# pg_cancel_backend on the front ends the wait on the partition
$w = bg(qq{SELECT count(*) FROM claim.claim_next('$wq', wait => '60 s')});
ok($front->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	WHERE backend_type = 'client backend' AND query LIKE '%claim_next%wait%'
	  AND pid <> pg_backend_pid()}), 'a second waiter');
ok($parts[$wk]->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	WHERE backend_type = 'client backend' AND state = 'active' AND query LIKE '%claim_next%'
	  AND pid <> pg_backend_pid()}),
	'it waits on the partition');
f(q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity
	WHERE backend_type = 'client backend' AND query LIKE '%claim_next%wait%'
	  AND pid <> pg_backend_pid()});
$w->[0]->finish;
like(${ $w->[2] }, qr/canceling statement due to user request/, 'the front session is cancelled');
ok($parts[$wk]->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM pg_stat_activity
	WHERE backend_type = 'client backend' AND state = 'active' AND query LIKE '%claim_next%'
	  AND pid <> pg_backend_pid()}), 'no waiter lingers on the partition after a cancel');

# statement_timeout on the front does the same
($ret, $out, $err) = $front->psql('postgres',
	qq{SET statement_timeout = '1s'; SELECT count(*) FROM claim.claim_next('$wq', wait => '60 s')});
like($err, qr/statement timeout/, 'statement_timeout on the front ends the wait');
ok($parts[$wk]->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM pg_stat_activity
	WHERE backend_type = 'client backend' AND state = 'active' AND query LIKE '%claim_next%'
	  AND pid <> pg_backend_pid()}), 'no waiter lingers on the partition after the timeout');
is(f(qq{SELECT claim.enqueue('$wq', '{"w": "after"}') > 0}), 't', 'the queue works after the cancels');
is(f(qq{SELECT count(*) FROM claim.claim_next('$wq')}), 1, 'and its item is claimable');
f(q{SELECT claim.complete_many(ARRAY(SELECT token FROM claim.claimed_items WHERE queue = 'q6'))});

# ------------------------------- the coordination service's named primitives
# Elections, latches and barriers go to the partition of their name.
{
	my $ek = part_of('E');
	my $e1 = f(q{SELECT claim.elect('E', '30 s', holder => 'one')});
	ok($e1 > 0, 'elected through the front');
	is(f(q{SELECT claim.elect('E', '30 s', holder => 'two') IS NULL}), 't',
		'a second candidate is not elected while the leader lives');
	is(f(q{SELECT holder || ' ' || epoch FROM claim.leader('E')}), "one $e1",
		'leader() through the front names the leader and its epoch');
	is(on($ek, q{SELECT count(*) FROM claim.coord_leaders WHERE name = 'E'}), 1,
		'the election lives on the partition of its name');
	is(f("SELECT claim.resign('E', $e1)"), 't', 'the leader resigns through the front');
	my $e2 = f(q{SELECT claim.elect('E', '30 s', holder => 'two')});
	ok($e2 > $e1, 'the next leader gets a higher epoch');

	f(q{SELECT claim.latch('LT', 2)});
	is(f(q{SELECT claim.count_down('LT')}), 1, 'count_down through the front');
	is(f(q{SELECT claim.latch_wait('LT')}), 'f', 'the latch is still closed');
	is(f(q{SELECT claim.count_down('LT')}), 0, 'the last count_down');
	is(f(q{SELECT claim.latch_wait('LT')}), 't', 'the latch is open');
	is(on(part_of('LT'), q{SELECT count(*) FROM claim.coord_latches WHERE name = 'LT'}), 1,
		'the latch lives on the partition of its name');
	is(f(q{SELECT claim.barrier('B', 1, '1 s')}), 1, 'a barrier of one party opens through the front');
}

# ------------------------------------------- fencing: leases, once, guards
# Two front sessions: the fixture (f) and a second psql (bg2).
{
	my $lk = part_of('L');
	my $t1 = f(q{SELECT claim.lease_acquire('L', '2 s', 'one')});
	ok($t1 > 0, 'lease granted through the front');
	is(f("SELECT claim.token_partition($t1)"), $lk, 'the lease token carries the partition of its name');
	my ($r2, $o2) = $front->psql('postgres', q{SELECT claim.lease_acquire('L', '30 s', 'two')});
	is($o2, '', 'a second session is refused while the lease is held');
	my $t2;
	for (1 .. 100)
	{
		(undef, $t2) = $front->psql('postgres', q{SELECT claim.lease_acquire('L', '30 s', 'two')});
		last if $t2;
		usleep(100_000);
	}
	ok($t2 && $t2 > $t1, 'after the expiry the second session gets a higher token');
	is(f("SELECT sqlstate_of('SELECT claim.lease_renew(''L'', $t1, ''10 s'')')"), 'PC001',
		'the old holder cannot renew: PC001');
	is(f("SELECT sqlstate_of('SELECT claim.lease_assert(''L'', $t1)')"), 'PC001',
		'nor pass lease_assert');
	is(f("SELECT sqlstate_of('SELECT claim.lease_assert(''L'', $t2)')"), 'ok',
		'the new holder passes lease_assert');
	is(f("SELECT claim.lease_release('L', $t2)"), 't', 'and releases');
	is(on($lk, q{SELECT count(*) FROM claim.lease_holders WHERE name = 'L'}), 1,
		'the lease lives on the partition of its name');

	is(f(q{SELECT claim.once('k', '1 hour')}), 't', 'once: the first session wins');
	my (undef, $o3) = $front->psql('postgres', q{SELECT claim.once('k', '1 hour')});
	is($o3, 'f', 'once: the second session loses');
	is(on(part_of('k'), q{SELECT count(*) FROM claim.once_keys WHERE key = 'k'}), 1,
		'the once key lives on the partition of its key');

	my $g1 = f(q{SELECT claim.guard_begin('gk', '1 s')});
	my $g2;
	for (1 .. 100)
	{
		(undef, $g2) = $front->psql('postgres', q{SELECT claim.guard_begin('gk', '30 s')});
		last if $g2;
		usleep(100_000);
	}
	ok($g2 && $g2 > $g1, 'guard: a new attempt after the lease gets a higher token');
	is(f("SELECT sqlstate_of('SELECT claim.guard_finish(''gk'', $g1, ''1'')')"), 'PC001',
		'guard: the old attempt cannot finish');
	f(qq{SELECT claim.guard_finish('gk', $g2, '{"r": 2}')});
	is(f(q{SELECT claim.guard_result('gk')}), '{"r": 2}', 'guard: the new attempt finished');
}

# --------------------------------------------------- one partition stopped
{
	my $down = part_of('q0');
	my ($up_q) = grep { part_of($_) != $down } @queues;
	f(q{SELECT claim.enqueue('q0')});
	my $before = f(q{SELECT token FROM claim.claim_next('q0')});
	# A crash: the tokens handed out after the restart must still be higher.
	$parts[$down]->stop('immediate');
	is(f(qq{SELECT claim.enqueue('$up_q', '{}') > 0}), 't',
		"partition $down crashed: $up_q on another partition still works");
	my $t0 = time;
	($ret, $out, $err) = $front->psql('postgres', q{SELECT claim.enqueue('q0', '{}')});
	isnt($ret, 0, 'a call for the stopped partition fails');
	like($err, qr/claim\.enqueue.*(connection to server|could not connect|No such file)/s,
		'with an error that names the function and the failed connection');
	note('failed after ' . (time - $t0) . ' s');
	$parts[$down]->start;
	my $ok = 0;
	for (1 .. 50)
	{
		my ($r) = $front->psql('postgres', q{SELECT claim.enqueue('q0', '{}')});
		if ($r == 0) { $ok = 1; last; }
		usleep(100_000);
	}
	ok($ok, 'calls for the partition work again once it is back');
	# The claim of before the crash is gone with the crash (claims are
	# unlogged): its item is delivered again, with the new one.
	my @after = split /\n/, f(q{SELECT token FROM claim.claim_next('q0', 10)});
	is(scalar(@after), 2, 'its queue is served: the new item and the one claimed before the crash');
	is(scalar(grep { $_ > $before } @after), 2, 'tokens after the crash are higher than before it');
	is(f("SELECT count(*) FROM unnest(ARRAY[" . join(',', @after) . "]) t WHERE claim.token_partition(t) = $down"),
		2, 'and keep their partition bits');
	is(f("SELECT sqlstate_of('SELECT claim.complete($before)')"), 'PC001',
		'the token from before the crash is stale');
	is(f("SELECT claim.complete_many(ARRAY[" . join(',', @after) . "])"), 2, 'the new ones complete');
	f(qq{SELECT claim.complete_many(ARRAY(SELECT token FROM claim.claim_next('$up_q', 10)))});
}

# ------------------------------------------------- 8 workers, 16 queues
f(join('', map { "SELECT claim.create_queue('$_', lease => '5 minutes');\n" } @drain));
my $per = int($ITEMS / 16);
my $total = $per * 16;
f(join('', map {
	"SELECT count(*) FROM claim.enqueue_many('$_', ARRAY(SELECT jsonb_build_object('q', '$_', 'i', g) FROM generate_series(1, $per) g));\n"
} @drain));
f(q{CREATE TABLE done (queue text NOT NULL, id bigint NOT NULL, token bigint NOT NULL)});
is(f(q{SELECT sum(ready) FROM claim.queue_stats WHERE queue LIKE 'd%'}), $total, "$total items over 16 queues");

my $script = "${PostgreSQL::Test::Utils::tmp_check}/proxy_drain.sql";
open(my $fh, '>', $script) or die "cannot write $script: $!";
print $fh <<'SQL';
\set q random(0, 15)
SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg(token), '{}') AS toks FROM claim.claim_next('d' || :q, 50) \gset
INSERT INTO done SELECT 'd' || :q, unnest(':ids'::bigint[]), unnest(':toks'::bigint[]);
SELECT claim.complete_many(':toks'::bigint[]);
SQL
close $fh;

# Random queues: rounds until every queue is empty (each round is bounded).
my $rounds = drain_through_front($front, $script, int($total / 50 / 8 * 1.5) + 20,
	q{SELECT coalesce(sum(ready + claimed), 0) FROM claim.queue_stats WHERE queue LIKE 'd%'});
note("drained in $rounds pgbench rounds");
is(f(q{SELECT count(*) FROM done}), $total, 'every item was delivered');
is(f(q{SELECT count(*) FROM (SELECT DISTINCT queue, id FROM done) d}), $total,
	'no item was delivered twice');
is(f(q{SELECT count(DISTINCT token) FROM done}), $total, 'every delivery had its own token');
is(f(q{SELECT count(*) FROM done WHERE claim.token_partition(token) <> (claim.route_hash(queue) & 3)}),
	0, 'every token came from the partition of its queue');
for my $k (0 .. $P - 1)
{
	is(on($k, q{SELECT count(*) FROM claim.items i JOIN claim.queues q USING (queue_id)
			WHERE q.name LIKE 'd%' AND i.state = 'r'}), 0, "partition $k: nothing left");
	is(on($k, q{SELECT count(*) FROM claim.claims c JOIN claim.queues q USING (queue_id)
			WHERE q.name LIKE 'd%'}), 0, "partition $k: no claim left");
}

# ------------------------------------------ the end of a partition's tokens
# The sequence stops at the end of the partition's block: the last token
# keeps its partition, the next grant is refused (2200H), never a token of
# partition+1.
{
	my $q = 'd0';
	my $k = part_of($q);
	my ($lname) = grep { part_of($_) == $k } map { "end$_" } 0 .. 50;
	on($k, "SELECT setval('claim.token_seq', " . ((($k + 1) << 47) - 2) . ")");
	f(qq{SELECT claim.enqueue('$q') FROM generate_series(1, 2)});
	my $last = f(qq{SELECT token FROM claim.claim_next('$q')});
	is($last, (($k + 1) << 47) - 1, 'the last token of the partition');
	cmp_ok($last, '<=', 9007199254740991, 'at most 2^53 - 1');
	is(f("SELECT claim.token_partition($last)"), $k, 'keeps its partition bits');
	is(f(qq{SELECT sqlstate_of('SELECT claim.claim_next(''$q'')')}), '2200H',
		'the next claim is refused: 2200H');
	is(f(qq{SELECT sqlstate_of('SELECT claim.lease_acquire(''$lname'', ''1 minute'')')}), '2200H',
		'so is a lease grant on that partition');
	is(f("SELECT claim.complete($last)"), 1, 'the last token still completes');
}

$front->stop;
$_->stop for @parts;
done_testing();
