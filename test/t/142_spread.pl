# One hot queue spread over four partitions behind the PL/Proxy front
# (pg_claim_proxy, docs/partitions.md "Spread queues"): a fresh install of
# pg_claim_proxy equal to one updated from 0.2.0; placement by group
# key and evenly without one, claims that return at most n from one
# partition and are not starved by empty ones, waits woken from any
# partition, the calls refused for a spread queue, figures summed; 8 workers
# draining 100k items through the front exactly once (PGCLAIM_SPREAD_ITEMS
# sets another count); a partition stopped in the middle of a drain of
# groups and started again (PC003 naming it meanwhile, the other partitions
# serving claims; nothing lost, nothing doubled, each group in order); the
# same hash in the Python and Node clients as at the front, and a drain
# through the Python client's direct routing.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use File::Basename qw(dirname);
use File::Spec;
use lib dirname(__FILE__);
use ProxyCluster qw(background_psql drain_through_front fnv1a start_proxy_cluster);
use IPC::Run;
use Time::HiRes qw(usleep time);

my $root = File::Spec->rel2abs(dirname(__FILE__) . '/../..');
my $P = 4;
my $ITEMS = $ENV{PGCLAIM_SPREAD_ITEMS} // 100000;

sub part_of { return fnv1a($_[0]) & ($P - 1); }

# ------------------------------------------------------------------ clusters
my ($front, $partsref, $dsnref) = start_proxy_cluster($P) or plan skip_all => $ProxyCluster::SKIP;
my @parts = @$partsref;
my @dsn = @$dsnref;

sub f { return $front->safe_psql('postgres', $_[0]); }
sub on { my ($k, $sql) = @_; return $parts[$k]->safe_psql('postgres', $sql); }
sub code_of { my ($e) = f("SELECT error_of(\$q\$$_[0]\$q\$)"); return substr($e, 0, 5); }

sub bg { return background_psql($front, $_[0]); }

# ------------------------------------- a fresh install equals an update
{
	my $shape = q{SELECT md5(string_agg(x, E'\n' ORDER BY x)) FROM (
		SELECT p.oid::regprocedure::text || pg_get_functiondef(p.oid) || coalesce(p.proacl::text, '') AS x
		FROM pg_proc p WHERE p.pronamespace = 'claim'::regnamespace AND p.prokind = 'f'
		UNION ALL
		SELECT c.relname || coalesce(c.relacl::text, '') || coalesce(pg_get_viewdef(c.oid), '')
		FROM pg_class c WHERE c.relnamespace = 'claim'::regnamespace
		UNION ALL
		SELECT 'dump ' || array_to_string(extconfig::regclass[]::text[], ',')
		FROM pg_extension WHERE extname = 'pg_claim_proxy') s};
	$front->safe_psql('postgres', 'CREATE DATABASE upd');
	$front->safe_psql('upd', q{CREATE EXTENSION pg_claim_proxy VERSION '0.2.0' CASCADE;
		ALTER EXTENSION pg_claim_proxy UPDATE});
	is($front->safe_psql('upd', $shape), $front->safe_psql('postgres', $shape),
		'pg_claim_proxy 0.2.0 updated to the current version equals a fresh install (functions, privileges, views)');
}

# ------------------------------------------------------------- declaring
f(q{SELECT claim.create_queue('hot', lease => '5 minutes', spread => true)});
is(join(',', map { on($_, q{SELECT count(*) FROM claim.queues WHERE name = 'hot'}) } 0 .. $P - 1),
	'1,1,1,1', 'a spread queue exists on every partition');
is(f(q{SELECT partitions FROM claim.spread_queues WHERE queue = 'hot'}), '{0,1,2,3}',
	'the front records it with its partitions');
f(q{SELECT claim.create_queue('sub', spread => true, partitions => '{3,1}')});
is(join(',', map { on($_, q{SELECT count(*) FROM claim.queues WHERE name = 'sub'}) } 0 .. $P - 1),
	'0,1,0,1', 'a stated subset of partitions');
is(code_of(q{SELECT claim.create_queue('bad', spread => true, partitions => '{4}')}), '22023',
	'a partition that is not in the cluster: 22023');
is(code_of(q{SELECT claim.create_queue('bad', spread => true, partitions => '{1,1}')}), '22023',
	'a partition listed twice: 22023');
is(code_of(q{SELECT claim.create_queue('bad', partitions => '{1}')}), '22023',
	'partitions without spread: 22023');
is(code_of(q{SELECT claim.create_queue('hot', spread => true)}), '42710',
	'a spread queue that exists: 42710');

# ------------------------------------------------------------- placement
{
	my @keys = map { "g$_" } 0 .. 39;
	f(join('', map { "SELECT claim.enqueue('hot', '{}', group_key => '$_');\n" } @keys));
	my $wrong = 0;
	for my $k (0 .. $P - 1)
	{
		for my $g (split /\n/, on($k, q{SELECT DISTINCT i.group_key FROM claim.items i
				JOIN claim.queues q USING (queue_id) WHERE q.name = 'hot'}))
		{
			$wrong++ if part_of($g) != $k;
		}
	}
	is($wrong, 0, 'an item with a group key lands on the partition of its key (FNV-1a & (P - 1))');
	f(q{SELECT count(*) FROM claim.enqueue_many('hot', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 400)))});
	is(join(',', map { on($_, q{SELECT count(*) FROM claim.items i JOIN claim.queues q USING (queue_id)
			WHERE q.name = 'hot' AND i.group_key IS NULL}) } 0 .. $P - 1),
		'100,100,100,100', 'items without a key are spread evenly');
	is(f(q{SELECT count(*) || ' ' || sum(ready) FROM claim.queue_stats WHERE queue = 'hot'}), '1 440',
		'queue_stats shows the queue once, summed');
	is(f(q{SELECT count(*) || ' ' || sum(enqueued) FROM claim.metrics() WHERE queue = 'hot'}), '1 440',
		'metrics() too');
	f(q{SELECT claim.enqueue('sub', '{}') FROM generate_series(1, 10)});
	is(on(1, q{SELECT count(*) FROM claim.items i JOIN claim.queues q USING (queue_id) WHERE q.name = 'sub'})
		+ on(3, q{SELECT count(*) FROM claim.items i JOIN claim.queues q USING (queue_id) WHERE q.name = 'sub'}),
		10, 'a subset queue places its items on its partitions only');
}

# ------------------------------------------------------------------ claims
{
	my @r = split /\n/, f(q{SELECT claim.token_partition(token) FROM claim.claim_next('hot', 7)});
	is(scalar(@r), 7, 'claim_next(n => 7) returns 7');
	is(scalar(keys %{ { map { $_ => 1 } @r } }), 1, 'all from one partition');
	my $claimed = 7;
	for (1 .. 20)
	{
		my $got = f(q{SELECT count(*) FROM claim.claim_next('hot', 1000)});
		cmp_ok($got, '<=', 1000, 'never more than n') if $_ == 1;
		$claimed += $got;
		last if $got == 0;
	}
	is($claimed, 440, 'every item claimed once');
	is(f(q{SELECT sum(claimed) FROM claim.queue_stats WHERE queue = 'hot'}), 440,
		'and nothing claimed that was not returned');
	f(q{SELECT claim.complete_many(ARRAY(SELECT token FROM claim.claimed_items c
		WHERE c.queue = 'hot' AND claim.token_partition(c.token) = k)) FROM generate_series(0, 3) k});
	# one item on one partition, three empty ones: found whatever the start
	my $ok = 0;
	for my $i (1 .. 12)
	{
		f(qq{SELECT claim.enqueue('hot', '{"late": $i}', group_key => 'late$i')});
		$ok++ if f(q{SELECT payload->>'late' FROM claim.claim_next('hot', 5)}) eq $i;
	}
	is($ok, 12, 'empty partitions do not starve a claim');
	f(q{SELECT claim.complete_many(ARRAY(SELECT token FROM claim.claimed_items c
		WHERE c.queue = 'hot' AND claim.token_partition(c.token) = k)) FROM generate_series(0, 3) k});

	# wait: woken by an item on any partition
	for my $key ('w0', 'w1', 'w2')
	{
		my $w = bg(q{SELECT payload->>'w' FROM claim.claim_next('hot', wait => '30 s')});
		ok($front->poll_query_until('postgres', q{SELECT count(*) = 1 FROM pg_stat_activity
			WHERE query LIKE '%claim_next%30 s%' AND pid <> pg_backend_pid()}), "$key: a waiter");
		usleep(300_000);
		my $t0 = time;
		f(qq{SELECT claim.enqueue('hot', '{"w": "$key"}', group_key => '$key')});
		$w->[0]->finish;
		my $took = time - $t0;
		is(${ $w->[1] }, "$key\n", "$key (partition " . part_of($key) . '): the waiter gets the item');
		cmp_ok($took, '<', 2, "$key: within the bound (took " . sprintf('%.3f', $took) . ' s)');
	}
	f(q{SELECT claim.complete_many(ARRAY(SELECT token FROM claim.claimed_items c
		WHERE c.queue = 'hot' AND claim.token_partition(c.token) = k)) FROM generate_series(0, 3) k});

	# addressed by id: refused
	for my $call (q{SELECT claim.item_state('hot', 1)}, q{SELECT claim.cancel('hot', 1)},
		q{SELECT claim.cancel_many('hot', '{1}')}, q{SELECT claim.redrive('hot', '{1}')},
		q{SELECT claim.enqueue('hot', '{}', after => '{1}')},
		q{SELECT claim.enqueue_many('hot', '{"{}"}', after => '{1}')})
	{
		is(code_of($call), '0A000', "spread: $call is refused (0A000)");
	}
	is(f(q{SELECT claim.redrive('hot')}), 0, 'redrive of all dead items sums over the partitions');
	f(q{SELECT claim.pause('hot')});
	is(join(',', map { on($_, q{SELECT paused FROM claim.queues WHERE name = 'hot'}) } 0 .. $P - 1),
		't,t,t,t', 'pause reaches every partition');
	f(q{SELECT claim.resume('hot')});
	f(q{SELECT claim.alter_queue('hot', max_active => 10)});
	is(join(',', map { on($_, q{SELECT max_active FROM claim.queues WHERE name = 'hot'}) } 0 .. $P - 1),
		'10,10,10,10', 'alter_queue too (max_active holds per partition)');
}

# ------------------------------------------------- 8 workers, 100k items
{
	f(q{SELECT claim.create_queue('big', lease => '5 minutes', spread => true)});
	my $chunk = 10000;
	for (my $i = 0; $i < $ITEMS; $i += $chunk)
	{
		my $m = $ITEMS - $i < $chunk ? $ITEMS - $i : $chunk;
		f(qq{SELECT count(*) FROM claim.enqueue_many('big',
			ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series($i + 1, $i + $m) g))});
	}
	is(f(q{SELECT ready FROM claim.queue_stats WHERE queue = 'big'}), $ITEMS, "$ITEMS items spread");
	f(q{CREATE TABLE done (part int NOT NULL, id bigint NOT NULL, token bigint NOT NULL)});
	my $script = "${PostgreSQL::Test::Utils::tmp_check}/spread_drain.sql";
	open(my $fh, '>', $script) or die "cannot write $script: $!";
	print $fh <<'SQL';
SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg(token), '{}') AS toks FROM claim.claim_next('big', 50) \gset
INSERT INTO done SELECT claim.token_partition(t), i, t FROM unnest(':ids'::bigint[], ':toks'::bigint[]) AS u(i, t);
SELECT claim.complete_many(':toks'::bigint[]);
SQL
	close $fh;
	my $t0 = time;
	my $rounds = drain_through_front($front, $script, int($ITEMS / 50 / 8 * 1.2) + 20,
		q{SELECT ready + claimed FROM claim.queue_stats WHERE queue = 'big'});
	note(sprintf('drained %d items in %d pgbench rounds, %.1f s', $ITEMS, $rounds, time - $t0));
	is(f(q{SELECT count(*) FROM done}), $ITEMS, 'every item was delivered');
	is(f(q{SELECT count(*) FROM (SELECT DISTINCT part, id FROM done) d}), $ITEMS,
		'no item was delivered twice');
	is(f(q{SELECT count(DISTINCT token) FROM done}), $ITEMS, 'every delivery had its own token');
	is(f(q{SELECT count(DISTINCT part) FROM done}), $P, 'from all four partitions');
	for my $k (0 .. $P - 1)
	{
		is(on($k, q{SELECT count(*) FROM claim.items i JOIN claim.queues q USING (queue_id)
				WHERE q.name = 'big' AND i.state IN ('r', 'c')}), 0, "partition $k: nothing left");
	}
}

# ------------------------------------------- a partition down mid-drain
{
	my ($G, $M) = (64, 100);
	my $total = $G * $M;
	f(q{SELECT claim.create_queue('grp', lease => '4 s', retain => '1 hour', spread => true)});
	f(qq{SELECT count(*) FROM claim.enqueue_many('grp',
		ARRAY(SELECT jsonb_build_object('g', 'k' || g, 's', s) FROM generate_series(1, $M) s, generate_series(1, $G) g ORDER BY s, g),
		ARRAY(SELECT 'k' || g FROM generate_series(1, $M) s, generate_series(1, $G) g ORDER BY s, g))});
	f(q{SELECT claim.create_queue('plain')});
	f(q{
		CREATE TABLE log (n bigserial, part int, id bigint, token bigint, g text, s int);
		CREATE TABLE errs (e text);
		CREATE FUNCTION work(q text, k int) RETURNS int LANGUAGE plpgsql AS $$
		DECLARE toks bigint[];
		BEGIN
			WITH c AS (SELECT * FROM claim.claim_next(q, k)),
			     ins AS (INSERT INTO log (part, id, token, g, s)
			             SELECT claim.token_partition(c.token), c.id, c.token, c.payload->>'g',
			                    (c.payload->>'s')::int FROM c RETURNING token)
			SELECT array_agg(token) INTO toks FROM ins;
			IF toks IS NULL THEN RETURN 0; END IF;
			PERFORM claim.complete_many(toks);
			RETURN cardinality(toks);
		EXCEPTION WHEN OTHERS THEN
			INSERT INTO errs VALUES (SQLSTATE || ': ' || SQLERRM);
			RETURN -1;
		END $$;
	});
	my $down = part_of('k1');
	my ($other_q) = grep { part_of($_) != $down } map { "plain$_" } 0 .. 20;
	f(qq{SELECT claim.create_queue('$other_q')});
	my $script = "${PostgreSQL::Test::Utils::tmp_check}/spread_groups.sql";
	open(my $fh, '>', $script) or die "cannot write $script: $!";
	print $fh "SELECT work('grp', 2);\n";
	close $fh;
	# output to a file: PL/Proxy's notices while the partition is down would
	# fill a pipe that nobody reads meanwhile
	my $pgb = "${PostgreSQL::Test::Utils::tmp_check}/spread_groups.out";
	my $h = IPC::Run::start(
		[ 'pgbench', '-n', '-M', 'simple', '-c', '8', '-j', '2', '-T', '10', '-f', $script,
		  '-d', $front->connstr('postgres') ], '>', $pgb, '2>&1');
	ok($front->poll_query_until('postgres', 'SELECT count(*) > 100 FROM log'), 'the drain is under way');
	$parts[$down]->stop('fast');
	note('partition ' . $down . ' stopped at ' . f('SELECT count(*) FROM log') . " of $total");
	my $err = f(q{SELECT error_of($$SELECT claim.enqueue('grp', '{}', group_key => 'k1')$$)});
	like($err, qr/^PC003: claim\.enqueue: partition $down of claim_cluster cannot be reached/,
		'an enqueue for the stopped partition: PC003 naming it');
	like(f(q{SELECT error_of($$SELECT * FROM claim.queue_stats$$)}), qr/^PC003: /,
		'the views need every partition: PC003');
	my $tok_down = ($down << 47) + 1;
	like(f(qq{SELECT error_of(\$\$SELECT claim.complete($tok_down)\$\$)}),
		qr/^PC003: claim\.complete: partition $down /, 'a token of the stopped partition: PC003');
	is(f(qq{SELECT claim.enqueue('$other_q', '{}') > 0}), 't', 'a queue of another partition works');
	is(f(q{SELECT claim.enqueue('grp', '{"g": "none"}') > 0}), 't',
		'an enqueue without a key to the spread queue works (on a partition that is up)');
	# 300 items in 30 groups of the partitions that are up, enqueued while it
	# is down, are all claimed and completed while it is down
	my @up = (grep { part_of($_) != $down } map { "u$_" } 0 .. 199)[0 .. 29];
	my $keys = join(',', map { "'$_'" } @up);
	f(qq{SELECT count(*) FROM claim.enqueue_many('grp',
		ARRAY(SELECT jsonb_build_object('g', k, 's', s) FROM unnest(ARRAY[$keys]) k, generate_series(1, 10) s ORDER BY s, k),
		ARRAY(SELECT k FROM unnest(ARRAY[$keys]) k, generate_series(1, 10) s ORDER BY s, k))});
	my $served = 0;
	my $t1 = time;
	while (time - $t1 < 60)
	{
		$served = f(q{SELECT count(*) FROM log WHERE g LIKE 'u%'});
		last if $served == 300;
		f(q{SELECT work('grp', 50)});
	}
	is($served, 300, 'the spread queue is served by the partitions that are up')
	  or diag(f(q{SELECT count(*) || ' x ' || left(e, 300) FROM errs GROUP BY e}));
	$parts[$down]->start;
	$h->finish;
	my $t0 = time;
	while (time - $t0 < 90)
	{
		my $n = f(q{SELECT work('grp', 50)});
		next if $n > 0;
		last if f(q{SELECT ready + claimed + scheduled FROM claim.queue_stats WHERE queue = 'grp'}) == 0;
		usleep(200_000);
	}
	$total += 1 + 300;
	is(f(q{SELECT count(*) FROM log}), $total, 'after the partition is back: every item completed');
	is(f(q{SELECT count(*) FROM (SELECT DISTINCT part, id FROM log) d}), $total, 'none twice');
	is(f(q{SELECT count(*) FROM claim.finished_items WHERE queue = 'grp' AND state = 'completed'}),
		$total, 'and the partitions hold them all completed');
	is(f(q{SELECT count(*) FROM (SELECT g, row_number() OVER (PARTITION BY g ORDER BY n) AS a,
			row_number() OVER (PARTITION BY g ORDER BY s) AS b FROM log WHERE g <> 'none') x WHERE a <> b}),
		0, 'each group was delivered in order');
	is(f(q{SELECT count(*) FROM (SELECT g FROM log WHERE g <> 'none' GROUP BY g HAVING count(DISTINCT part) > 1) x}),
		0, 'each group on one partition');
}

# --------------------------------------------- clients that route directly
my ($python) = grep { -x $_ } ('/usr/bin/python3');
$python //= 'python3';
my $pydir = "$root/clients/python";
my $have_py = system($python, '-c', 'import psycopg') == 0;
my $have_node = system('node', '-e', "require('$root/clients/node/lib/routing')") == 0;
{
	my @keys = ('', 'a', 'hot', "k\xc3\xb6ln-\xc3\xbc", map { "name-$_" } 0 .. 1999);
	my $keyfile = "${PostgreSQL::Test::Utils::tmp_check}/spread_keys.txt";
	open(my $kf, '>', $keyfile) or die;
	print $kf "$_\n" for @keys;
	close $kf;
	f(q{CREATE TABLE keys (n serial, k text)});
	$front->safe_psql('postgres', "\\copy keys (k) FROM '$keyfile'");
	# hash, partition of P = 4, spread partition over {1,3} and {0,1,2}
	my $want = f(q{SELECT string_agg(claim.route_hash(k) || ' ' || (claim.route_hash(k) & 3) || ' '
		|| claim.spread_partition('{1,3}', k) || ' ' || claim.spread_partition('{0,1,2}', k), E'\n' ORDER BY n) FROM keys});
	SKIP:
	{
		skip 'python3 with psycopg is not installed (test/setup.sh installs it)', 1 unless $have_py;
		my ($out, $err2) = ('', '');
		IPC::Run::run([ $python, "$pydir/tests/spread_drain.py", 'hash' ], '<', $keyfile, '>', \$out, '2>', \$err2);
		chomp $out;
		is($out, $want, 'Python: route_hash, the partition and spread_partition equal the front\'s over ' . scalar(@keys) . ' keys')
		  or diag($err2);
	}
	SKIP:
	{
		skip 'node is not installed', 1 unless $have_node;
		my ($out, $err2) = ('', '');
		IPC::Run::run([ 'node', "$root/clients/node/test/spread_hash.js" ], '<', $keyfile, '>', \$out, '2>', \$err2);
		chomp $out;
		is($out, $want, 'Node: route_hash, the partition and spread_partition equal the front\'s over ' . scalar(@keys) . ' keys')
		  or diag($err2);
	}
}
SKIP:
{
	skip 'python3 with psycopg is not installed (test/setup.sh installs it)', 5 unless $have_py;
	my $n = int($ITEMS / 5);
	f(q{SELECT claim.create_queue('py', lease => '5 minutes', spread => true)});
	f(qq{SELECT count(*) FROM claim.enqueue_many('py', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, $n) g))});
	my ($out, $err2) = ('', '');
	my $t0 = time;
	my $ok = IPC::Run::run([ $python, "$pydir/tests/spread_drain.py", 'drain', 'py', '8', @dsn ],
		'>', \$out, '2>', \$err2);
	ok($ok, 'the Python client drains the queue directly from the partitions, 8 workers') or diag($err2);
	note(sprintf('python drain of %d items: %.1f s', $n, time - $t0));
	my @lines = split /\n/, $out;
	my %seen;
	my $twice = 0;
	my %ps;
	for (@lines)
	{
		my ($p, $id, $tok) = split / /;
		$twice++ if $seen{"$p $id"}++;
		$ps{$p}++;
	}
	is(scalar(@lines), $n, "every one of $n items delivered");
	is($twice, 0, 'none twice');
	is(scalar(keys %ps), $P, 'from all four partitions');
	is(f(q{SELECT ready + claimed FROM claim.queue_stats WHERE queue = 'py'}), 0, 'nothing left');
}

$front->stop;
$_->stop for @parts;
done_testing();
