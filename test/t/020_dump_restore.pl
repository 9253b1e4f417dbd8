# Backup and restore with pg_dump (docs/operations.md).
#
# A database is filled with every kind of state pg_claim keeps: queues with
# their settings, ready, scheduled, waiting, failed and dead items (groups,
# priorities, run_at, dedup keys, dependencies), finished and cancelled items
# with results, a schedule, once keys, the guard ledger, a table feeding a
# queue through enqueue_trigger; and what it does not keep: a live claim and
# a live lease. It is dumped in custom and in plain format, and each dump is
# restored into a fresh database of the same cluster and into a fresh
# cluster; a --data-only dump is restored into a database that already has
# the extension. In each restored database:
#   - every public view and every dumped table and sequence equals the
#     source's, leaving out only the documented volatile parts (live claims
#     and leases, clock-relative columns, shared-memory counters);
#   - once keys are remembered, the guard ledger holds its results;
#   - tokens granted by queues, leases and guards are higher than every token
#     the source had handed out; the source's claim and lease tokens are stale
#     (PC001);
#   - a dependency chain runs in order; the trigger still enqueues;
#   - the schedule fires once, for the tick it was waiting for.
# A dump taken while sessions claim and complete is consistent: every item
# ends exactly once across the dump point. A 0.2.0 database is dumped the
# way docs/operations.md says and ends equal to a fresh install; a dump is
# restored into an extension created at its version beforehand. A database
# of partition 2 restored with pg_restore -C hands out partition 2's tokens;
# restored into a database of partition 0, the restore fails.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $tmp = PostgreSQL::Test::Utils::tempdir;

# No background workers at first: the state must not move (a schedule fire,
# an expiry) between the dump and the comparison. The destination cluster
# turns them on at the end, for the schedule.
sub new_node
{
	my ($name) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'pg_claim'\npg_claim.worker_enabled = off\n");
	$node->start;
	return $node;
}

my $src = new_node('dump_src');
my $dst = new_node('dump_dst');    # the fresh cluster

# Runs a client program of the installation against a node.
sub run_ok
{
	my ($node, $cmd, $name, %env) = @_;
	local $ENV{PGHOST} = $node->host;
	local $ENV{PGPORT} = $node->port;
	local @ENV{ keys %env } = values %env;
	my ($out, $err);
	my $ok = IPC::Run::run($cmd, '>', \$out, '2>', \$err);
	ok($ok, $name) or diag("stdout: $out\nstderr: $err");
	return $ok;
}

# --- fill the source ------------------------------------------------------------
$src->safe_psql('postgres', 'CREATE DATABASE app');
$src->safe_psql('app', q{
	CREATE EXTENSION pg_claim;
	SELECT claim.create_queue('jobs', lease => '1 hour', max_attempts => 3, backoff => '1 minute',
	                          retain => '1 day');
	SELECT claim.create_queue('lim', lease => '1 hour', max_active => 5, group_limit => 2,
	                          rate => 100, rate_per => '1 minute', rate_per_group => true);
	SELECT claim.create_queue('fragile', lease => '1 hour', max_attempts => 1);
	SELECT claim.create_queue('chain', lease => '1 hour');
	SELECT claim.create_queue('sched', lease => '1 hour');
	SELECT claim.create_queue('held', lease => '1 hour');
	SELECT claim.pause('held');
	SELECT claim.enqueue('held', '{"paused": true}');
	SELECT claim.lease_acquire('warmup', '1 second');
	-- Tokens far above where a fresh database starts (also after its first
	-- grant's jump): a restore that lost the sequence would be caught.
	SELECT setval('claim.token_seq', 1099511627776);
	SELECT claim.lease_acquire('warmup2', '1 second');
	SELECT claim.enqueue('jobs', jsonb_build_object('n', g), priority => g % 3)
	FROM generate_series(1, 9) g;
	SELECT claim.enqueue('jobs', jsonb_build_object('g', g), group_key => 'tenant-1')
	FROM generate_series(1, 3) g;
	SELECT claim.enqueue('jobs', '{"later": true}', run_at => clock_timestamp() + interval '1 day');
	SELECT claim.enqueue('jobs', '{"dedup": true}', dedup_key => 'once-only');
	SELECT claim.enqueue('lim', jsonb_build_object('n', g), group_key => 'g' || (g % 2))
	FROM generate_series(1, 4) g;
	SELECT claim.enqueue('fragile', '{"doomed": true}');
	SELECT claim.enqueue('jobs', '{"cancel": true}', priority => 100);
	CREATE TABLE orders (id bigint PRIMARY KEY, customer text);
	CREATE TRIGGER orders_enqueue AFTER INSERT ON orders
	    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('jobs', 'customer');
	INSERT INTO orders VALUES (1, 'a'), (2, 'b');
	CREATE ROLE app_worker NOLOGIN IN ROLE claim_worker;
	GRANT SELECT ON orders TO app_worker;
});
# A dependency chain: first <- second <- third.
my $first = $src->safe_psql('app', q{SELECT claim.enqueue('chain', '{"step": 1}')});
my $second = $src->safe_psql('app', qq{SELECT claim.enqueue('chain', '{"step": 2}', after => ARRAY[${first}]::bigint[])});
$src->safe_psql('app', qq{SELECT claim.enqueue('chain', '{"step": 3}', after => ARRAY[${second}]::bigint[])});
# Finished items with results, a cancelled one, a failed one and a dead one.
$src->safe_psql('app', q{
	DO $c$
	DECLARE
	    victim bigint := (SELECT id FROM claim.items WHERE payload = '{"cancel": true}');
	BEGIN
	    -- cancel_many where the array form has a name of its own
	    IF to_regprocedure('claim.cancel_many(text, bigint[])') IS NOT NULL THEN
	        EXECUTE 'SELECT claim.cancel_many($1, $2)' USING 'jobs', ARRAY[victim];
	    ELSE
	        EXECUTE 'SELECT claim.cancel($1, $2)' USING 'jobs', ARRAY[victim];
	    END IF;
	END $c$;
	SELECT claim.complete(token, jsonb_build_object('result', id)) FROM claim.claim_next('jobs', 2);
	SELECT claim.fail(token, 'try again later') FROM claim.claim_next('jobs');
	SELECT claim.fail(token, 'broken for good') FROM claim.claim_next('fragile');
});
# A live claim and a live lease: not kept.
my ($claim_id, $claim_token, $claim_attempt) = split /\|/,
  $src->safe_psql('app', q{SELECT id || '|' || token || '|' || attempt FROM claim.claim_next('jobs', worker => 'w1')});
my $lease_token = $src->safe_psql('app', q{SELECT claim.lease_acquire('acct:1', '1 hour', 'host-a')});
# Once keys and the guard ledger: a finished key, an abandoned one, a running one.
$src->safe_psql('app', q{
	SELECT claim.once('mail:1');
	SELECT claim.once('mail:2', ttl => '1 day');
});
my $g1 = $src->safe_psql('app', q{SELECT claim.guard_begin('charge:1', '1 hour')});
$src->safe_psql('app', qq{SELECT claim.guard_finish('charge:1', $g1, '{"ok": true}')});
my $g2 = $src->safe_psql('app', q{SELECT claim.guard_begin('charge:2', '1 hour')});
$src->safe_psql('app', qq{SELECT claim.guard_abandon('charge:2', $g2)});
my $g3 = $src->safe_psql('app', q{SELECT claim.guard_begin('charge:3', '1 hour')});
# A schedule whose next tick has passed when the destination's worker starts
# (the cron's following tick is next year, so it fires exactly once).
$src->safe_psql('app', q{
	SELECT claim.schedule('yearly', '0 0 1 1 *', 'sched', '{"tick": true}');
	UPDATE claim.schedule_defs SET next_run = date_trunc('second', clock_timestamp()) + interval '1 second';
});
my $tick = $src->safe_psql('app',
	q{SELECT extract(epoch FROM next_run) FROM claim.schedule_defs WHERE name = 'yearly'});

my $max_token = $src->safe_psql('app', q{SELECT max(t) FROM (
	SELECT token AS t FROM claim.claims UNION ALL
	SELECT token FROM claim.lease_holders UNION ALL
	SELECT token FROM claim.guards) s});
my $max_item_id = $src->safe_psql('app', q{SELECT last_value FROM claim.item_id_seq});
cmp_ok($max_token, '>', 2**40, "the source's tokens are above 2^40 ($max_token)");
cmp_ok($src->safe_psql('app', q{SELECT last_value FROM claim.token_seq}), '>=', $max_token,
	'the token sequence stands at or above the highest token handed out');

# --- the state as the views and the tables show it --------------------------------

# Views or columns that a restore does not keep (docs/operations.md):
#   claimed_items, leases           live claims and leases: empty after a restore
#   queue_stats.ready, .claimed     a claimed item comes back ready: their sum is kept
#   queue_stats.oldest_ready_age    relative to the clock
#   blocked_groups (reason claimed) the claim is not kept
my %volatile_views = map { $_ => 1 } qw(claimed_items leases);
my %volatile_columns = (queue_stats => { oldest_ready_age => 1, ready => 1, claimed => 1 });
my %extra_columns = (queue_stats => 'coalesce(ready, 0) + coalesce(claimed, 0) AS ready_or_claimed');
my %row_filter = (blocked_groups => q{WHERE reason <> 'claimed'});

sub state_of
{
	my ($node, $db) = @_;
	my @parts;
	my $views = $node->safe_psql($db, q{
		SELECT c.relname || ':' || string_agg(a.attname, ',' ORDER BY a.attnum)
		FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
		WHERE c.relnamespace = 'claim'::regnamespace AND c.relkind = 'v'
		GROUP BY c.relname ORDER BY c.relname});
	for my $line (split /\n/, $views)
	{
		my ($view, $cols) = split /:/, $line;
		next if $volatile_views{$view};
		my @cols = grep { !$volatile_columns{$view}{$_} } split /,/, $cols;
		push @cols, $extra_columns{$view} if $extra_columns{$view};
		my $where = $row_filter{$view} // '';
		push @parts, "SELECT 'view $view' AS what, coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '') AS rows "
		  . "FROM (SELECT " . join(', ', map { /\s/ ? $_ : qq{"$_"} } @cols) . " FROM claim.$view $where) t";
	}
	my $tables = $node->safe_psql($db, q{
		SELECT string_agg(c.oid::regclass::text || ':' || c.relkind::text, E'\n' ORDER BY 1)
		FROM pg_extension e, unnest(e.extconfig) cfg JOIN pg_class c ON c.oid = cfg
		WHERE e.extname = 'pg_claim'});
	for my $line (split /\n/, $tables)
	{
		my ($rel, $kind) = split /:/, $line;
		if ($kind eq 'S')
		{
			push @parts, "SELECT 'sequence $rel', last_value || '/' || is_called FROM $rel";
		}
		else
		{
			push @parts, "SELECT 'table $rel', coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '') FROM $rel t";
		}
	}
	return $node->safe_psql($db, "SET timezone = 'UTC';\nSELECT string_agg(what || E'\\n' || rows, E'\\n' ORDER BY what) FROM ("
		  . join("\nUNION ALL\n", @parts) . ") s");
}

my $source_state = state_of($src, 'app');
like($source_state, qr/^table claim\.items$/m, 'the state lists the items table');
like($source_state, qr/^view finished_items$/m, '... and the views');
like($source_state, qr/try again later/, '... with the failed item and its error');

# --- dumps ------------------------------------------------------------------------
my $custom = "$tmp/app.dump";
my $plain = "$tmp/app.sql";
my $data = "$tmp/app.data.dump";
my $globals = "$tmp/globals.sql";
run_ok($src, [ 'pg_dump', '-Fc', '-f', $custom, 'app' ], 'pg_dump custom format');
run_ok($src, [ 'pg_dump', '-Fp', '-f', $plain, 'app' ], 'pg_dump plain format');
run_ok($src, [ 'pg_dump', '-Fc', '--data-only', '-f', $data, 'app' ], 'pg_dump --data-only');
run_ok($src, [ 'pg_dumpall', '--roles-only', '-f', $globals ], 'pg_dumpall --roles-only');
is(state_of($src, 'app'), $source_state, 'the dumps changed nothing in the source');

# Who may dump: pg_dump reads schema claim (docs/operations.md).
$src->safe_psql('app', q{
	CREATE ROLE backup_app LOGIN;
	GRANT SELECT ON orders TO backup_app;
});
{
	local $ENV{PGHOST} = $src->host;
	local $ENV{PGPORT} = $src->port;
	my ($out, $err);
	my $ok = IPC::Run::run([ 'pg_dump', '-U', 'backup_app', '-f', "$tmp/denied.sql", 'app' ],
		'>', \$out, '2>', \$err);
	# pg_dump 18 reads sequences through pg_get_sequence_data(), which says so
	# in its own words
	ok(!$ok && $err =~ /permission denied for schema claim|lack SELECT privilege on the sequence/,
		'a role without rights on schema claim cannot dump the database')
	  or diag("pg_dump exited " . ($ok ? 0 : 'non-zero') . ": $err");
}
run_ok($src, [ 'pg_dump', '-U', 'backup_app', "--exclude-table-data=claim.*", '-f', "$tmp/app_only.sql", 'app' ],
	"... it can with --exclude-table-data='claim.*'");
$src->safe_psql('app', q{GRANT pg_read_all_data TO backup_app});
run_ok($src, [ 'pg_dump', '-U', 'backup_app', '-f', "$tmp/read_all.sql", 'app' ],
	'... and as a member of pg_read_all_data');

# The roles first, into the fresh cluster (docs/operations.md).
run_ok($dst, [ 'psql', '-X', '-q', '-f', $globals, 'postgres' ], 'roles restored into the fresh cluster');

my @restored;    # [node, db, how]
$src->safe_psql('postgres', 'CREATE DATABASE r_custom');
run_ok($src, [ 'pg_restore', '--exit-on-error', '-d', 'r_custom', $custom ],
	'custom format restored into a fresh database')
  and push @restored, [ $src, 'r_custom', 'custom, fresh database' ];
run_ok($dst, [ 'pg_restore', '--exit-on-error', '-C', '-d', 'postgres', $custom ],
	'custom format restored into a fresh cluster (pg_restore -C)')
  and push @restored, [ $dst, 'app', 'custom, fresh cluster' ];
$src->safe_psql('postgres', 'CREATE DATABASE r_plain');
run_ok($src, [ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', 'r_plain', '-f', $plain ],
	'plain format restored into a fresh database')
  and push @restored, [ $src, 'r_plain', 'plain, fresh database' ];
$dst->safe_psql('postgres', 'CREATE DATABASE r_plain');
run_ok($dst, [ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', 'r_plain', '-f', $plain ],
	'plain format restored into a fresh cluster')
  and push @restored, [ $dst, 'r_plain', 'plain, fresh cluster' ];
# --data-only into a database that already has the extension (and the
# application's tables): with session_replication_role = replica, so that
# the application's enqueue triggers do not fire for restored rows.
$dst->safe_psql('postgres', 'CREATE DATABASE r_data');
$dst->safe_psql('r_data', q{
	CREATE EXTENSION pg_claim;
	CREATE TABLE orders (id bigint PRIMARY KEY, customer text);
	CREATE TRIGGER orders_enqueue AFTER INSERT ON orders
	    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('jobs', 'customer');
});
run_ok($dst, [ 'pg_restore', '--exit-on-error', '--data-only', '-d', 'r_data', $data ],
	'--data-only dump restored into it', PGOPTIONS => '-c session_replication_role=replica')
  and push @restored, [ $dst, 'r_data', 'data-only' ];
is(scalar @restored, 5, 'five restores');

# --- each restored database -------------------------------------------------------
for my $r (@restored)
{
	my ($node, $db, $how) = @$r;
	my $state = state_of($node, $db);
	if ($state eq $source_state)
	{
		pass("$how: every view, table and sequence equals the source's");
	}
	else
	{
		my %s = map { $_ => 1 } split /\n/, $source_state;
		my %d = map { $_ => 1 } split /\n/, $state;
		diag("only in the source: $_") for grep { !$d{$_} } sort keys %s;
		diag("only restored: $_") for grep { !$s{$_} } sort keys %d;
		fail("$how: every view, table and sequence equals the source's");
	}
	is($node->safe_psql($db, q{SELECT extversion FROM pg_extension WHERE extname = 'pg_claim'}),
		$src->safe_psql('app', q{SELECT extversion FROM pg_extension WHERE extname = 'pg_claim'}),
		"$how: the extension's version");
	is($node->safe_psql($db, q{SELECT count(*) FROM claim.claimed_items}), '0',
		"$how: no claim is kept");
	is($node->safe_psql($db, q{SELECT count(*) FROM claim.leases}), '0', "$how: no lease is kept");
	is($node->safe_psql($db, q{SELECT ready FROM claim.queue_stats WHERE queue = 'jobs'}),
		$src->safe_psql('app', q{SELECT ready + claimed FROM claim.queue_stats WHERE queue = 'jobs'}),
		"$how: the claimed item is ready again");

	is($node->safe_psql($db, q{SELECT claim.once('mail:1')}), 'f', "$how: a once key is remembered");
	is($node->safe_psql($db, q{SELECT claim.once('mail:2', ttl => '1 day')}), 'f',
		"$how: ... also one with a ttl");
	is($node->safe_psql($db, q{SELECT claim.guard_result('charge:1')}), '{"ok": true}',
		"$how: a finished guard keeps its result");
	is($node->safe_psql($db, q{SELECT claim.guard_begin('charge:1', '1 minute') IS NULL}), 't',
		"$how: ... and begins no new attempt");

	my ($rc, $out, $err) = $node->psql($db, "SELECT claim.complete($claim_token)");
	like($err, qr/PC001|not a live claim/, "$how: the source's claim token is stale");
	($rc, $out, $err) = $node->psql($db, "\\set VERBOSITY verbose\nSELECT claim.complete($claim_token)");
	like($err, qr/PC001/, "$how: ... with PC001");
	($rc, $out, $err) = $node->psql($db, "\\set VERBOSITY verbose\nSELECT claim.lease_renew('acct:1', $lease_token, '1 hour')");
	like($err, qr/PC001/, "$how: the source's lease token is stale (PC001)");
	is($node->safe_psql($db, "SELECT claim.lease_release('acct:1', $lease_token)"), 'f',
		"$how: ... and releases nothing");

	my ($t, $attempt) = split /\|/, $node->safe_psql($db, qq{
		SELECT min(token) || '|' || coalesce(max(attempt) FILTER (WHERE id = $claim_id), -1)
		FROM claim.claim_next('jobs', n => 1000)});
	cmp_ok($t, '>', $max_token, "$how: a claim's token is higher than every token of the source");
	is($attempt, $claim_attempt, "$how: the item claimed at the dump is delivered with the same attempt number again");
	$t = $node->safe_psql($db, q{SELECT claim.lease_acquire('acct:1', '1 minute', 'host-b')});
	cmp_ok($t, '>', $max_token, "$how: ... a lease's too (the source's lease is free here)");
	$t = $node->safe_psql($db, q{SELECT claim.guard_begin('charge:2', '1 minute')});
	cmp_ok($t, '>', $max_token, "$how: ... and a guard's");

	my @order;
	for (1 .. 4)
	{
		my $step = $node->safe_psql($db, q{
			WITH c AS (SELECT * FROM claim.claim_next('chain', n => 10))
			SELECT coalesce(string_agg(payload->>'step', ','), '-') || ':'
			       || coalesce(sum(claim.complete(token)), 0) FROM c});
		push @order, $step;
	}
	is(join(' ', @order), '1:1 2:1 3:1 -:0', "$how: the dependency chain runs in order");

	my $before = $node->safe_psql($db, q{SELECT count(*) FROM claim.items});
	$node->safe_psql($db, q{INSERT INTO orders VALUES (3, 'c')});
	is($node->safe_psql($db, q{SELECT count(*) FROM claim.items}), $before + 1,
		"$how: the trigger still enqueues");
	cmp_ok($node->safe_psql($db, q{SELECT claim.enqueue('jobs', '{"new": true}')}), '>', $max_item_id,
		"$how: item ids go on from the source's");
	is($node->safe_psql($db, q{SELECT count(*) FROM claim.queue_stats}), '6',
		"$how: the queues");
	$node->safe_psql($db, q{SELECT claim.create_queue('after_restore')});
	pass("$how: a new queue can be created (its id does not collide)");
}

# --- the schedule fires once, for its tick, where a worker runs ---------------------
$dst->append_conf('postgresql.conf', "pg_claim.worker_enabled = on\npg_claim.worker_naptime = 100\n");
$dst->reload;
for my $db (map { $_->[1] } grep { $_->[0] == $dst } @restored)
{
	my $fired = $dst->poll_query_until($db,
		q{SELECT last_run IS NOT NULL FROM claim.schedules WHERE name = 'yearly'});
	ok($fired, "$db: the schedule fired");
	sleep 1;
	is($dst->safe_psql($db, q{SELECT count(*) FROM claim.items i JOIN claim.queues q USING (queue_id)
	                          WHERE q.name = 'sched'}),
		'1', "$db: exactly one item");
	is($dst->safe_psql($db, q{SELECT extract(epoch FROM last_run) FROM claim.schedules WHERE name = 'yearly'}),
		$tick, "$db: for the tick the dump was waiting for");
	is($dst->safe_psql($db, q{SELECT next_run > clock_timestamp() + interval '1 day' FROM claim.schedules WHERE name = 'yearly'}),
		't', "$db: the next tick is the cron's next one");
}

# --- a dump taken while sessions claim and complete ---------------------------------
$src->safe_psql('postgres', 'CREATE DATABASE busy');
$src->safe_psql('busy', q{
	CREATE EXTENSION pg_claim;
	SELECT claim.create_queue('w', lease => '1 hour', retain => '1 hour');
	SELECT count(claim.enqueue('w', jsonb_build_object('n', g))) FROM generate_series(1, 6000) g;
	-- What the worker did, written in the transaction that completes the item.
	CREATE TABLE done (id bigint NOT NULL, at_source boolean NOT NULL DEFAULT true);
	CREATE PROCEDURE work(pause float8) LANGUAGE plpgsql AS $$
	DECLARE
	    r record;
	    k int;
	BEGIN
	    LOOP
	        k := 0;
	        FOR r IN SELECT * FROM claim.claim_next('w', n => 3) LOOP
	            INSERT INTO done (id) VALUES (r.id);
	            PERFORM claim.complete(r.token, jsonb_build_object('id', r.id));
	            k := k + 1;
	        END LOOP;
	        COMMIT;
	        EXIT WHEN k = 0;
	        PERFORM pg_sleep(pause);
	    END LOOP;
	END $$;
});
my @workers;
for (1 .. 2)
{
	my ($in, $out, $err) = ('', '', '');
	push @workers, IPC::Run::start(
		[ 'psql', '-X', '-q', '-h', $src->host, '-p', $src->port, '-d', 'busy', '-c', 'CALL work(0.005)' ],
		'<', \$in, '>', \$out, '2>', \$err);
}
$src->poll_query_until('busy', q{SELECT count(*) > 100 FROM done});
my $busy = "$tmp/busy.dump";
run_ok($src, [ 'pg_dump', '-Fc', '-f', $busy, 'busy' ], 'pg_dump while two sessions claim and complete');
$_->finish for @workers;
is($src->safe_psql('busy', q{SELECT count(*), count(DISTINCT id) FROM done}), '6000|6000',
	'the source finished every item once');
$dst->safe_psql('postgres', 'CREATE DATABASE busy');
run_ok($dst, [ 'pg_restore', '--exit-on-error', '-d', 'busy', $busy ], 'restored');
my $split = $dst->safe_psql('busy', q{SELECT (SELECT count(*) FROM done), (SELECT count(*) FROM claim.items)});
my ($done_before, $left) = split /\|/, $split;
ok($done_before > 0 && $left > 0, "the dump was taken midway ($done_before done, $left left)");
is($dst->safe_psql('busy', q{SELECT count(*) FROM claim.finished_items}), $done_before,
	'the finished items are exactly those the dump saw done');
$dst->safe_psql('busy', q{ALTER TABLE done ALTER at_source SET DEFAULT false; CALL work(0)});
is($dst->safe_psql('busy', q{SELECT count(*), count(DISTINCT id), min(id), max(id) FROM done}),
	'6000|6000|1|6000', 'after the restored database drained its queue, every item ended exactly once');
is($dst->safe_psql('busy', q{SELECT count(*) FROM claim.items}), '0', 'nothing left');

# --- versions: a 0.2.0 database --------------------------------------------------
# docs/operations.md: 0.2.0 marks nothing for pg_dump, so its dump holds none
# of pg_claim's rows. Update it (ALTER EXTENSION pg_claim UPDATE), then dump.
my $default = $src->safe_psql('postgres',
	q{SELECT default_version FROM pg_available_extensions WHERE name = 'pg_claim'});
$src->safe_psql('postgres', 'CREATE DATABASE v2');
$src->safe_psql('v2', q{
	CREATE EXTENSION pg_claim VERSION '0.2.0';
	SELECT claim.create_queue('jobs', retain => '1 day');
	SELECT claim.enqueue('jobs', jsonb_build_object('n', g)) FROM generate_series(1, 5) g;
	SELECT claim.complete(token, '{"ok": 1}') FROM claim.claim_next('jobs');
	SELECT claim.once('v2-key');
});
run_ok($src, [ 'pg_dump', '-Fc', '-f', "$tmp/v2raw.dump", 'v2' ], 'pg_dump of a 0.2.0 database');
$src->safe_psql('postgres', 'CREATE DATABASE v2raw');
run_ok($src, [ 'pg_restore', '--exit-on-error', '-d', 'v2raw', "$tmp/v2raw.dump" ], '... restored');
is($src->safe_psql('v2raw', q{SELECT extversion || '/' || (SELECT count(*) FROM claim.queues) FROM pg_extension WHERE extname = 'pg_claim'}),
	"$default/0", "... as $default without pg_claim's rows: 0.2.0 marks none for pg_dump");

$src->safe_psql('v2', 'ALTER EXTENSION pg_claim UPDATE');
my $v2_state = state_of($src, 'v2');
run_ok($src, [ 'pg_dump', '-Fc', '-f', "$tmp/v2.dump", 'v2' ], 'pg_dump of the 0.2.0 database after the update');
$dst->safe_psql('postgres', 'CREATE DATABASE v2');
run_ok($dst, [ 'pg_restore', '--exit-on-error', '-d', 'v2', "$tmp/v2.dump" ], '... restored into the fresh cluster');
is(state_of($dst, 'v2'), $v2_state, '... with all its state');
is($dst->safe_psql('v2', q{SELECT claim.once('v2-key')}), 'f', '... its once key too');

# Its catalog equals a fresh install's.
my $catalog_sql = q{
WITH members AS (
	SELECT d.classid, d.objid FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
	WHERE e.extname = 'pg_claim' AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e')
SELECT string_agg(l, E'\n' ORDER BY l) FROM (
	SELECT 'function ' || p.oid::regprocedure || ' ' || md5(pg_get_functiondef(p.oid))
	       || ' ' || coalesce(p.proacl::text, '-') AS l
	FROM members m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
	UNION ALL
	SELECT format('relation %s %s %s %s', c.oid::regclass, c.relkind, c.relpersistence,
	              coalesce(c.relacl::text, '-'))
	FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
	UNION ALL
	SELECT format('column %s.%s %s %s %s', a.attrelid::regclass, a.attname,
	              format_type(a.atttypid, a.atttypmod), a.attnotnull,
	              coalesce(pg_get_expr(ad.adbin, ad.adrelid), '-'))
	FROM members m JOIN pg_attribute a ON m.classid = 'pg_class'::regclass AND a.attrelid = m.objid
	     AND a.attnum > 0 AND NOT a.attisdropped
	LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
	UNION ALL
	SELECT 'index ' || pg_get_indexdef(i.indexrelid)
	FROM members m JOIN pg_index i ON m.classid = 'pg_class'::regclass AND i.indrelid = m.objid
	UNION ALL
	SELECT format('constraint %s %s', con.conname, pg_get_constraintdef(con.oid))
	FROM members m JOIN pg_constraint con ON m.classid = 'pg_class'::regclass AND con.conrelid = m.objid
	UNION ALL
	SELECT format('trigger %s %s %s', tg.tgname, tg.tgenabled, pg_get_triggerdef(tg.oid))
	FROM members m JOIN pg_trigger tg ON m.classid = 'pg_class'::regclass AND tg.tgrelid = m.objid
	WHERE NOT tg.tgisinternal
	UNION ALL
	SELECT format('config %s %s', cfg::regclass, cond)
	FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS u(cfg, cond)
	WHERE e.extname = 'pg_claim'
	UNION ALL
	SELECT 'version ' || extversion FROM pg_extension WHERE extname = 'pg_claim') s};
$dst->safe_psql('postgres', 'CREATE DATABASE fresh');
$dst->safe_psql('fresh', 'CREATE EXTENSION pg_claim');
my $fresh = $dst->safe_psql('fresh', $catalog_sql);
like($fresh, qr/^config claim\.items /m, 'the catalog description lists the dumped tables');
is($dst->safe_psql('v2', $catalog_sql), $fresh, "the restored database's catalog equals a fresh $default install's");
is($src->safe_psql('v2raw', $catalog_sql), $fresh, "... and so does the one restored from the un-updated dump");

# A dump restored where a newer version is the default: the extension is
# created at the dump's version first, everything but schema claim restored,
# then updated (docs/operations.md, with the version this dump has).
my $version = $src->safe_psql('app', q{SELECT extversion FROM pg_extension WHERE extname = 'pg_claim'});
# The dump holds the schedule whose tick has passed: with the workers off
# again, nothing fires it before the state is compared.
$dst->append_conf('postgresql.conf', "pg_claim.worker_enabled = off\n");
$dst->reload;
$dst->poll_query_until('postgres',
	q{SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'pg_claim worker'})
  or die 'the workers did not stop';
$dst->safe_psql('postgres', 'CREATE DATABASE r_pinned');
$dst->safe_psql('r_pinned', "CREATE EXTENSION pg_claim VERSION '$version'");
my $toc;
{
	local $ENV{PGHOST} = $dst->host;
	local $ENV{PGPORT} = $dst->port;
	IPC::Run::run([ 'pg_restore', '-l', $custom ], '>', \$toc) or die 'pg_restore -l failed';
}
like($toc, qr/ SCHEMA - claim /, "the dump's table of contents names schema claim");
open(my $list, '>', "$tmp/pinned.list") or die $!;
print $list join("\n", grep { !/ SCHEMA - claim / } split /\n/, $toc), "\n";
close $list;
run_ok($dst, [ 'pg_restore', '--exit-on-error', '-L', "$tmp/pinned.list", '-d', 'r_pinned', $custom ],
	'restored into a database with the extension created at the dump\'s version');
$dst->safe_psql('r_pinned', 'ALTER EXTENSION pg_claim UPDATE');
is(state_of($dst, 'r_pinned'), $source_state, '... with all its state');

# --- partitions ---------------------------------------------------------------------
# A database of partition 2 restored with pg_restore -C hands out partition
# 2's tokens, above the source's; restored into a database of partition 0,
# the restore fails instead of handing out another partition's tokens.
$src->safe_psql('postgres', 'CREATE DATABASE part');
$src->safe_psql('part', q{
	CREATE EXTENSION pg_claim;
	SELECT claim.set_partition(2);
});
$src->safe_psql('part', q{
	SELECT claim.create_queue('p');
	SELECT claim.enqueue('p', '{}') FROM generate_series(1, 3);
	SELECT claim.lease_acquire('lp', '1 hour');
});
my $part_token = $src->safe_psql('part', q{SELECT token FROM claim.claim_next('p')});
is($src->safe_psql('part', "SELECT claim.token_partition($part_token)"), '2', 'the source hands out partition 2\'s tokens');
run_ok($src, [ 'pg_dump', '-Fc', '-f', "$tmp/part.dump", 'part' ], 'pg_dump of a partition');
run_ok($dst, [ 'pg_restore', '--exit-on-error', '-C', '-d', 'postgres', "$tmp/part.dump" ],
	'restored with pg_restore -C');
my $t2 = $dst->safe_psql('part', q{SELECT token FROM claim.claim_next('p')});
is($dst->safe_psql('part', "SELECT claim.token_partition($t2)"), '2', '... it hands out partition 2\'s tokens');
cmp_ok($t2, '>', $part_token, '... above the source\'s');
$dst->safe_psql('postgres', 'CREATE DATABASE part_set');
$dst->safe_psql('postgres', 'ALTER DATABASE part_set SET pg_claim.partition = 2');
run_ok($dst, [ 'pg_restore', '--exit-on-error', '-d', 'part_set', "$tmp/part.dump" ],
	'restored into a database set to partition 2 beforehand');
$t2 = $dst->safe_psql('part_set', q{SELECT token FROM claim.claim_next('p')});
is($dst->safe_psql('part_set', "SELECT claim.token_partition($t2)"), '2', '... it hands out partition 2\'s tokens');
cmp_ok($t2, '>', $part_token, '... above the source\'s');
$dst->safe_psql('postgres', 'CREATE DATABASE part_wrong');
{
	local $ENV{PGHOST} = $dst->host;
	local $ENV{PGPORT} = $dst->port;
	my ($out, $err);
	my $ok = IPC::Run::run([ 'pg_restore', '--exit-on-error', '-d', 'part_wrong', "$tmp/part.dump" ],
		'>', \$out, '2>', \$err);
	ok(!$ok, 'restored into a database of partition 0, the restore fails');
	like($err, qr/setval: value \d+ is out of bounds for sequence "token_seq"/, "... on setval of claim.token_seq");
}

$src->stop;
$dst->stop;
done_testing();
