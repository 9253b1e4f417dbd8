# Job lifecycle with the background worker and across a crash:
#   - finished items of a queue with retain are kept, then removed by the
#     worker once their retention ended: the history ring is truncated (no
#     dead tuples in it), dead items are deleted;
#   - history (results) and dependencies survive an immediate stop;
#   - a waiting child whose parent was claimed when the server crashed runs
#     exactly once, after the parent completes;
#   - under producers and workers, each completed item of a retaining queue
#     is in the history exactly once, while another session keeps enabling
#     and disabling a trigger on claim.finished (the completions switch
#     between the direct write of the history row and SQL).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('lifecycle');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{shared_preload_libraries = 'pg_claim'
pg_claim.worker_naptime = '100ms'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pg_claim');

# --- retention expiry by the worker ------------------------------------------------
$node->safe_psql('postgres', q{
	SELECT claim.create_queue('short', lease => '1 hour', max_attempts => 1, retain => '2 seconds');
	SELECT claim.enqueue('short', jsonb_build_object('n', g)) FROM generate_series(1, 20) g;
	SELECT claim.complete(token, jsonb_build_object('ok', true)) FROM claim.claim_next('short', n => 19);
	SELECT claim.fail(token, 'no luck') FROM claim.claim_next('short');
});
is($node->safe_psql('postgres', q{
	SELECT string_agg(state || ':' || n, ',' ORDER BY state)
	FROM (SELECT state, count(*) AS n FROM claim.finished_items WHERE queue = 'short' GROUP BY state) s}),
	'completed:19,dead:1', 'finished items are kept while retained');
ok($node->poll_query_until('postgres',
	q{SELECT count(*) = 0 FROM claim.finished_items WHERE queue = 'short'}),
	'they are gone once their retention ended');
ok($node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM claim.finished}),
	'the worker truncated the history slots that held them');
is($node->safe_psql('postgres', q{
	SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables
	WHERE schemaname = 'claim' AND relname LIKE 'finished_%' AND relname <> 'finished_ring'}),
	'0', 'the history has no dead tuples');
is($node->safe_psql('postgres', q{SELECT count(*) FROM claim.items i JOIN claim.queues q USING (queue_id)
	WHERE q.name = 'short'}), '0', 'the dead item was deleted too');

# --- history and dependencies survive a crash ---------------------------------------
$node->safe_psql('postgres', q{
	SELECT claim.create_queue('keep', lease => '1 hour', retain => '1 hour');
	CREATE TABLE runs (item bigint PRIMARY KEY, n int NOT NULL DEFAULT 1);
});
my $done = $node->safe_psql('postgres', q{SELECT claim.enqueue('keep', '{"x": 1}')});
$node->safe_psql('postgres',
	q{SELECT claim.complete(token, '{"answer": 42}') FROM claim.claim_next('keep')});
my $parent = $node->safe_psql('postgres', q{SELECT claim.enqueue('keep', '{"parent": true}')});
my $child = $node->safe_psql('postgres',
	qq{SELECT claim.enqueue('keep', '{"child": true}', after => ARRAY[${parent}::bigint])});
my $old_token = $node->safe_psql('postgres', q{SELECT token FROM claim.claim_next('keep')});
is($node->safe_psql('postgres', qq{SELECT (claim.item_state('keep', $child)).state}),
	'waiting', 'the child waits for its claimed parent');

$node->stop('immediate');
$node->start;

is($node->safe_psql('postgres', qq{SELECT s.state || ' ' || s.result FROM claim.item_state('keep', $done) s}),
	'completed {"answer": 42}', 'the completed item and its result survived the crash');
is($node->safe_psql('postgres', qq{SELECT (claim.item_state('keep', $child)).state}),
	'waiting', 'the child still waits');
is($node->safe_psql('postgres', qq{SELECT (claim.item_state('keep', $parent)).state}),
	'ready', 'the parent is ready again (its claim was lost)');
my ($rc, $out, $err) = $node->psql('postgres', "SELECT claim.complete($old_token)");
like($err, qr/not a live claim/, 'the old holder of the parent is refused');

# Workers: each claims with a wait, records a run, completes.
my $work = q{
	WITH c AS (SELECT id, token FROM claim.claim_next('keep', wait => '2 s')),
	r AS (INSERT INTO runs (item) SELECT id FROM c
	      ON CONFLICT (item) DO UPDATE SET n = runs.n + 1 RETURNING item)
	SELECT claim.complete(c.token) FROM c JOIN r ON r.item = c.id};
$node->safe_psql('postgres', $work) for 1 .. 3;
is($node->safe_psql('postgres', qq{SELECT string_agg(item || ':' || n, ',' ORDER BY item) FROM runs}),
	"$parent:1,$child:1", 'parent, then child, each ran exactly once');
is($node->safe_psql('postgres', qq{SELECT (claim.item_state('keep', $child)).state}),
	'completed', 'the child completed');

# --- the history under load -----------------------------------------------------------
$node->safe_psql('postgres', q{
	SELECT claim.create_queue('hist', lease => '1 hour', retain => '1 hour');
	CREATE TABLE made (k bigserial PRIMARY KEY, id bigint NOT NULL);
	CREATE TABLE done (id bigint PRIMARY KEY);
	CREATE TABLE noted (id bigint NOT NULL);
	CREATE FUNCTION public.note_hist() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN INSERT INTO public.noted VALUES (NEW.id); RETURN NEW; END $$;
});
my $script = "${PostgreSQL::Test::Utils::tmp_check}/hist_load.sql";
open(my $fh, '>', $script) or die "cannot write $script: $!";
print $fh q{INSERT INTO made (id) SELECT claim.enqueue('hist', '{"n": 1}') FROM generate_series(1, 2);
WITH c AS (SELECT id, token FROM claim.claim_next('hist', 3)),
     d AS (INSERT INTO done SELECT id FROM c RETURNING id)
SELECT claim.complete_many(array_agg(c.token)) FROM c JOIN d USING (id) HAVING count(*) > 0;
};
close $fh;
my ($out, $err) = ('', '');
my $load = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '4', '-j', '2', '-T', '5', '-f', $script, $node->connstr('postgres') ],
	'>', \$out, '2>', \$err);
# (Enabled and disabled, not created and dropped: PostgreSQL's DROP TRIGGER on
# a partitioned table can deadlock with any INSERT routed through it.)
$node->safe_psql('postgres', q{CREATE TRIGGER note AFTER INSERT ON claim.finished
	FOR EACH ROW EXECUTE FUNCTION public.note_hist();
	ALTER TABLE claim.finished DISABLE TRIGGER note});
my $toggles = 0;
while ($load->pumpable)
{
	$node->safe_psql('postgres', q{ALTER TABLE claim.finished ENABLE TRIGGER note});
	$node->safe_psql('postgres', q{SELECT pg_sleep(0.2)});
	$node->safe_psql('postgres', q{ALTER TABLE claim.finished DISABLE TRIGGER note});
	$node->safe_psql('postgres', q{SELECT pg_sleep(0.2)});
	$toggles++;
	$load->pump_nb;
}
$load->finish;
like($out, qr/number of failed transactions: 0 /, 'the load ran without a failed transaction');
note("pgbench: $out; trigger enabled and disabled $toggles times");
# Drain what is left.
$node->safe_psql('postgres', q{SELECT claim.complete_many(array_agg(token))
	FROM claim.claim_next('hist', 10000) HAVING count(*) > 0});
my $q = q{(SELECT queue_id FROM claim.queues WHERE name = 'hist')};
is($node->safe_psql('postgres', qq{
	SELECT (SELECT count(*) FROM made) > 0,
	       (SELECT count(*) FROM made) = (SELECT count(*) FROM claim.finished WHERE queue_id = $q),
	       (SELECT count(DISTINCT id) FROM claim.finished WHERE queue_id = $q)
	         = (SELECT count(*) FROM claim.finished WHERE queue_id = $q),
	       NOT EXISTS (SELECT 1 FROM made m WHERE NOT EXISTS (
	         SELECT 1 FROM claim.finished f WHERE f.id = m.id AND f.queue_id = $q)),
	       NOT EXISTS (SELECT 1 FROM claim.items WHERE queue_id = $q)}),
	't|t|t|t|t', 'every item made is in the history exactly once, and none is left');
is($node->safe_psql('postgres', q{
	SELECT count(*) > 0 AND count(*) = count(DISTINCT id)
	   AND NOT EXISTS (SELECT 1 FROM noted n WHERE NOT EXISTS (
	         SELECT 1 FROM claim.finished f WHERE f.id = n.id))
	FROM noted}),
	't', 'the trigger saw history rows while it was there, each once');

$node->stop;
done_testing();
