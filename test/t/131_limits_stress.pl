# Limits under load, with the worker:
#   - 16 sessions claim from a queue with max_active = 5 and from one with
#     group_limit = 3 for 10 s, holding each claim a moment, while a monitor
#     samples the live claims every few milliseconds: the count never
#     exceeds the limit (per queue, per group);
#   - 16 sessions compete for a large backlog of a queue with rate = 200
#     per second for 10 s: the claims of the first 10 s are within 2% of
#     2000, and no one-second window holds more than 200 plus the burst.
use strict;
use warnings;

use IPC::Run qw(start finish);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('limits');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{shared_preload_libraries = 'pg_claim'
pg_claim.worker_naptime = '100ms'
max_connections = 60
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_claim;
	SELECT claim.create_queue('capped', lease => '1 minute', max_active => 5);
	SELECT claim.create_queue('tenants', lease => '1 minute', group_limit => 3);
	SELECT count(claim.enqueue('capped', jsonb_build_object('n', g))) FROM generate_series(1, 100000) g;
	SELECT count(claim.enqueue('tenants', jsonb_build_object('n', g), group_key => 't' || (g % 4)))
	FROM generate_series(1, 100000) g;
	CREATE TABLE samples (queue text, grp text, live int);
});

my $dir = PostgreSQL::Test::Utils::tempdir;
my $script = "$dir/claim.sql";
open(my $fh, '>', $script) or die;
print $fh <<'EOS';
\set q random(0, 1)
SELECT coalesce((SELECT token FROM claim.claim_next(CASE :q WHEN 0 THEN 'capped' ELSE 'tenants' END,
                                                  wait => '50 ms')), 0) AS t \gset
\sleep 3 ms
SELECT claim.complete(:t::bigint) WHERE :t > 0;
EOS
close $fh;

sub pgbench
{
	my ($file, $clients, $seconds) = @_;
	my ($out, $err) = ('', '');
	my $h = start(
		[
			'pgbench', '-n', '-f', $file, '-c', $clients, '-j', 4, '-T', $seconds,
			'-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>', \$out, '2>', \$err);
	return [ $h, \$out, \$err ];
}

my $load = pgbench($script, 16, 10);
# The monitor: one session samples the live claims for 11 s (each statement
# of the loop reads the latest committed state).
my ($mout, $merr) = ('', '');
my $monitor = start(
	[
		'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-h', $node->host, '-p', $node->port,
		'-d', 'postgres', '-c', q{
DO $$
DECLARE stop timestamptz := clock_timestamp() + interval '11 seconds';
BEGIN
    WHILE clock_timestamp() < stop LOOP
        INSERT INTO samples
        SELECT queue, NULL, count(*) FROM claim.claimed_items WHERE live AND queue = 'capped' GROUP BY queue
        UNION ALL
        SELECT c.queue, i.group_key, count(*) FROM claim.claimed_items c JOIN claim.items i ON i.id = c.id
        WHERE c.live AND c.queue = 'tenants' GROUP BY c.queue, i.group_key;
        INSERT INTO samples VALUES ('round', NULL, 0);
        PERFORM pg_sleep(0.002);
    END LOOP;
END $$}
	],
	'>', \$mout, '2>', \$merr);
finish($load->[0]);
finish($monitor);
note("pgbench: ${ $load->[1] } ${ $load->[2] }; monitor: $merr");
my $rounds = $node->safe_psql('postgres', q{SELECT count(*) FROM samples WHERE queue = 'round'});

cmp_ok($rounds, '>', 100, "the monitor sampled $rounds times");
is($node->safe_psql('postgres', q{SELECT coalesce(max(live), 0) <= 5 FROM samples WHERE queue = 'capped'}),
	't', 'max_active 5: never more than 5 live claims ('
	  . $node->safe_psql('postgres', q{SELECT max(live) FROM samples WHERE queue = 'capped'}) . ' at most)');
is($node->safe_psql('postgres', q{SELECT coalesce(max(live), 0) <= 3 FROM samples WHERE queue = 'tenants'}),
	't', 'group_limit 3: never more than 3 live claims per group ('
	  . $node->safe_psql('postgres', q{SELECT max(live) FROM samples WHERE queue = 'tenants'}) . ' at most)');
cmp_ok($node->safe_psql('postgres', q{SELECT max(live) FROM samples WHERE queue = 'capped'}),
	'>=', 2, '... and the limit was reached (the test put it under pressure)');
my $completed = $node->safe_psql('postgres', q{
	SELECT (SELECT 100000 - count(*) FROM claim.items i JOIN claim.queues q USING (queue_id) WHERE q.name = 'capped')});
cmp_ok($completed, '>', 100, "jobs were completed in the capped queue ($completed)");

# --- rate ------------------------------------------------------------------------------
$node->safe_psql('postgres', q{
	SELECT claim.create_queue('rated', lease => '1 hour', rate => 200);
	SELECT count(claim.enqueue('rated', jsonb_build_object('n', g))) FROM generate_series(1, 5000) g;
});
my $rate_script = "$dir/rate.sql";
open($fh, '>', $rate_script) or die;
print $fh "SELECT count(*) FROM claim.claim_next('rated', n => 5, wait => '200 ms');\n";
close $fh;
$load = pgbench($rate_script, 16, 12);
finish($load->[0]);
my $first10 = $node->safe_psql('postgres', q{
	WITH c AS (SELECT claimed_at FROM claim.claimed_items WHERE queue = 'rated'),
	     t0 AS (SELECT min(claimed_at) AS t0 FROM c)
	SELECT count(*) FROM c, t0 WHERE claimed_at < t0 + interval '10 seconds'});
cmp_ok(abs($first10 - 2000), '<=', 40, "rate 200/s: $first10 claims in the first 10 s (2000 within 2%)");
my $max_window = $node->safe_psql('postgres', q{
	WITH c AS (SELECT claimed_at FROM claim.claimed_items WHERE queue = 'rated')
	SELECT max((SELECT count(*) FROM c c2
	            WHERE c2.claimed_at >= c1.claimed_at AND c2.claimed_at < c1.claimed_at + interval '1 second'))
	FROM c c1});
cmp_ok($max_window, '<=', 219, "no one-second window holds more than 200 + the burst of 20 - 1 ($max_window)");

$node->stop;
done_testing();
