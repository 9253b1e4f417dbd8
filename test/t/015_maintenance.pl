# Maintenance of the queue tables under load: every operation a DBA runs on
# claim.items and claim.claims while producers and workers run, with a
# ledger that proves every item completed exactly once, and amcheck
# afterwards. One cluster; each operation runs under its own short load:
#   - pg_repack of claim.items (its log trigger makes the calls write
#     through SQL while it runs: docs/internals.md); claim.claims is
#     UNLOGGED, which pg_repack leaves alone;
#   - REINDEX INDEX CONCURRENTLY of every index of both tables, and a
#     CREATE INDEX CONCURRENTLY on claim.items that the direct inserts must
#     fill while it is built;
#   - VACUUM FULL and CLUSTER (they wait for the calls, and the calls for
#     them);
#   - CREATE INDEX CONCURRENTLY held at its phases while a backend enqueues
#     (the index's readiness reaches the backend's cached index info);
# then the backlog is drained, and the ledger holds each produced item
# exactly once; bt_index_check(heapallindexed) finds every index whole.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use IPC::Run qw(start finish);
use PgClaimNode;
use PostgreSQL::Test::Utils;
use Test::More;

my $have_repack = grep { -x "$_/pg_repack" } split /:/, $ENV{PATH};
my $node = pgclaim_node('maint', "max_connections = 40\n");
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_claim;
	CREATE EXTENSION amcheck;
	SELECT claim.create_queue('q', lease => '10 seconds');
	CREATE TABLE produced (id bigint NOT NULL);
	CREATE TABLE ledger (id bigint NOT NULL);
	-- One job: claim, record, complete, all in one transaction.
	CREATE FUNCTION work_one() RETURNS int LANGUAGE plpgsql AS $$
	DECLARE r record;
	BEGIN
	    SELECT id, token INTO r FROM claim.claim_next('q');
	    IF NOT FOUND THEN RETURN 0; END IF;
	    INSERT INTO public.ledger VALUES (r.id);
	    PERFORM claim.complete(r.token);
	    RETURN 1;
	END $$;
	INSERT INTO produced SELECT claim.enqueue('q', jsonb_build_object('n', g)) FROM generate_series(1, 2000) g;
});
$node->safe_psql('postgres', 'CREATE EXTENSION pg_repack') if $have_repack;

my $dir = PostgreSQL::Test::Utils::tempdir;
open(my $fh, '>', "$dir/produce.sql") or die;
print $fh "INSERT INTO produced SELECT claim.enqueue('q', '{\"p\": 1}');\n"
  . "INSERT INTO produced SELECT claim.enqueue_many('q', ARRAY['{}', '{}', '{}']::jsonb[]);\n";
close $fh;
open($fh, '>', "$dir/work.sql") or die;
print $fh "SELECT work_one();\n";
close $fh;

# Two producers and four workers for `seconds`, in the background.
sub load
{
	my ($seconds) = @_;
	my @h;
	for my $s ([ 'produce', 2 ], [ 'work', 4 ])
	{
		my ($out, $err) = ('', '');
		push @h,
		  [
			start(
				[
					'pgbench', '-n', '-f', "$dir/$s->[0].sql", '-c', $s->[1], '-j', 1, '-T', $seconds,
					'-h', $node->host, '-p', $node->port, 'postgres'
				],
				'>', \$out, '2>', \$err),
			\$out, \$err, $s->[0]
		  ];
	}
	return \@h;
}

sub wait_load
{
	my ($h, $what) = @_;
	for my $l (@$h)
	{
		finish($l->[0]);
		my ($failed) = ${ $l->[1] } =~ /number of failed transactions: (\d+)/;
		my ($done) = ${ $l->[1] } =~ /number of transactions actually processed: (\d+)/;
		ok(($done // 0) > 0 && ($failed // 0) == 0 && ${ $l->[2] } !~ /ERROR|aborted/,
			"$what: the $l->[3] load ran without an error (" . ($done // 0) . ' transactions)')
		  or diag(${ $l->[1] } . ${ $l->[2] });
	}
}

# Run `cmd` (a list for IPC::Run, or SQL) under 4 s of load.
sub under_load
{
	my ($what, $cmd) = @_;
	my $h = load(4);
	select(undef, undef, undef, 0.7);
	my ($rc, $out, $err);
	if (ref $cmd)
	{
		($out, $err) = ('', '');
		$rc = IPC::Run::run($cmd, '>', \$out, '2>', \$err) ? 0 : 1;
	}
	else
	{
		($rc, $out, $err) = $node->psql('postgres', $cmd);
	}
	is($rc, 0, "$what succeeded under load") or diag("$out $err");
	wait_load($h, $what);
}

SKIP:
{
	skip 'pg_repack is not installed', 3 unless $have_repack;
	under_load('pg_repack -t claim.items',
		[ 'pg_repack', '--no-order', '-t', 'claim.items', '-h', $node->host, '-p', $node->port, 'postgres' ]);
}

my @indexes = split /\n/, $node->safe_psql('postgres', q{
	SELECT indexrelid::regclass FROM pg_index
	WHERE indrelid IN ('claim.items'::regclass, 'claim.claims'::regclass) ORDER BY 1::text});
under_load('REINDEX CONCURRENTLY of every index',
	join('', map { "REINDEX INDEX CONCURRENTLY $_;\n" } @indexes));
under_load('CREATE INDEX CONCURRENTLY on claim.items',
	'CREATE INDEX CONCURRENTLY items_by_enqueued ON claim.items (enqueued_at)');
under_load('VACUUM FULL claim.items, claim.claims', 'VACUUM FULL claim.items, claim.claims');
under_load('CLUSTER claim.items', 'CLUSTER claim.items USING items_pkey');

# CREATE INDEX CONCURRENTLY, held at each of its phases, with a backend that
# enqueues through the direct path at each: while the new index is not yet
# ready (the backend caches what it knows of the index), and after the
# build's validation while it waits for an older snapshot (the index is
# ready, the validation has run: an entry the backend skips now stays
# missing). The backend must notice that the index became ready.
{
	my $writer = $node->background_psql('postgres');
	$writer->query_safe(q{INSERT INTO produced SELECT claim.enqueue('q', '{"cic": 0}')});
	my $old = $node->background_psql('postgres');
	$old->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
	$old->query_safe('SELECT count(*) FROM claim.items');
	my $holder = $node->background_psql('postgres');
	$holder->query_safe('BEGIN');
	$holder->query_safe(q{INSERT INTO produced SELECT claim.enqueue('q', '{"cic": 1}')});
	my ($cout, $cerr) = ('', '');
	my $cic = start(
		[
			'psql', '-X', '-v', 'ON_ERROR_STOP=1', '-h', $node->host, '-p', $node->port, 'postgres',
			'-c', 'CREATE INDEX CONCURRENTLY items_cic ON claim.items (queue_id, id)'
		],
		'>', \$cout, '2>', \$cerr);
	ok( $node->poll_query_until('postgres', q{
		SELECT EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass('claim.items_cic')
		               AND NOT indisready)}),
		'CREATE INDEX CONCURRENTLY waits with its index not ready');
	$writer->query_safe(q{INSERT INTO produced SELECT claim.enqueue('q', '{"cic": 2}')});
	$holder->query_safe('COMMIT');
	ok( $node->poll_query_until('postgres', q{
		SELECT EXISTS (SELECT FROM pg_stat_progress_create_index
		               WHERE phase = 'waiting for old snapshots')
		   AND EXISTS (SELECT FROM pg_index WHERE indexrelid = 'claim.items_cic'::regclass
		               AND indisready AND NOT indisvalid)}),
		'CREATE INDEX CONCURRENTLY waits for an old snapshot after its validation');
	$writer->query_safe(q{INSERT INTO produced
		SELECT claim.enqueue('q', jsonb_build_object('cic', g)) FROM generate_series(3, 22) g});
	$old->query_safe('COMMIT');
	finish($cic);
	is($cerr, '', 'CREATE INDEX CONCURRENTLY ended');
	my ($rc, $out, $err) = $node->psql('postgres', "SELECT bt_index_check('claim.items_cic', true)");
	is($rc, 0, 'amcheck: an index built concurrently has the entries of every direct insert')
	  or diag($err);
	is($node->safe_psql('postgres', q{
		SELECT count(*) FROM claim.items WHERE payload ? 'cic' AND queue_id > 0 AND id > 0}), '23',
		'the items enqueued during the build are there');
	$_->quit for ($writer, $old, $holder);
	$node->safe_psql('postgres', 'DROP INDEX claim.items_cic');
}

# Drain what is left (a claimer may pass over items that a walk's shared
# position says are claimed until the leases it saw end: at most the
# queue's lease, so the drain goes on until the table is empty or 30 s
# passed), then the ledger.
my $waited = $node->safe_psql('postgres', q{
	DO $$
	DECLARE stop timestamptz := clock_timestamp() + interval '30 seconds';
	BEGIN
	    LOOP
	        WHILE public.work_one() > 0 LOOP END LOOP;
	        EXIT WHEN NOT EXISTS (SELECT FROM claim.items) OR clock_timestamp() > stop;
	        PERFORM pg_sleep(0.1);
	    END LOOP;
	END $$;
	SELECT count(*) FROM claim.items});
note("items left after the first drain pass: see the loop above ($waited at the end)");
my $ledger = $node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM produced) || ' ' || (SELECT count(*) FROM ledger) || ' '
	    || (SELECT count(DISTINCT id) FROM ledger) || ' '
	    || (SELECT count(*) FROM produced p WHERE NOT EXISTS (SELECT FROM ledger l WHERE l.id = p.id)) || ' '
	    || (SELECT count(*) FROM claim.items)});
my ($produced, $completed, $distinct, $lost, $left) = split / /, $ledger;
cmp_ok($produced, '>', 2000, "items were produced under load ($produced)");
is($lost, 0, 'no produced item was lost');
is($completed, $distinct, 'no item was completed twice');
is($distinct, $produced, 'every produced item was completed once');
is($left, 0, 'claim.items is empty')
  or diag($node->safe_psql('postgres', q{
	SELECT i.state, i.run_at IS NULL, c.item_id IS NOT NULL, c.lease_until > now(), count(*),
	       (SELECT count(*) FROM claim.claim_next('q', n => 1000))
	FROM claim.items i LEFT JOIN claim.claims c ON c.item_id = i.id GROUP BY 1, 2, 3, 4}));

# Every index whole (heapallindexed: every heap row has its entry).
for my $i (@indexes, 'claim.items_by_enqueued')
{
	my ($rc, $out, $err) = $node->psql('postgres', "SELECT bt_index_check('$i'::regclass, true)");
	is($rc, 0, "amcheck: $i is whole") or diag($err);
}

# ALTER EXTENSION UPDATE under a backend that ran before it: the backend's
# caches follow (a pooled connection that claimed under 0.2.0 enqueues
# with fair keys once the update added them).
$node->safe_psql('postgres', 'CREATE DATABASE up');
my $fair = $node->safe_psql('up', q{
	CREATE EXTENSION pg_claim VERSION '0.2.0';
	SELECT claim.create_queue('old');
	SELECT claim.enqueue('old', '{}');
	SELECT count(*) FROM claim.claim_next('old');
	ALTER EXTENSION pg_claim UPDATE;
	SELECT claim.create_queue('fq', fair => true);
	SELECT claim.enqueue('fq', '{}', fair_key => 'A');
	SELECT count(*) FROM claim.items WHERE fair_key_id IS NOT NULL});
is((split /\n/, $fair)[-1], '1',
	'a backend that ran before ALTER EXTENSION UPDATE gives its fair items their key');

$node->stop;
done_testing();
