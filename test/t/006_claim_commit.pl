# A claim commits without waiting for the WAL flush, and the caller's own
# writes in the same transaction still do.
#
# A claim writes unlogged claim rows; the only WAL it may write besides its
# commit record is non-transactional (heap pruning while it reads, the token
# sequence's record every 32 tokens, protected by the jump at startup). So a
# transaction that only claims commits asynchronously. A transaction that
# also wrote logged rows, before or after the claim, must still wait for the
# flush: an immediate stop right after its commit loses nothing.
#
# The WAL writer is slowed down (wal_writer_delay = 10 s) so that an
# asynchronous commit stays unflushed for the duration of the test, and
# autovacuum is off so that no other process flushes meanwhile. Before this
# behaviour, the 300 claims below made 11 flushes, the 200 group claims 7.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('claim_commit');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{shared_preload_libraries = 'pg_claim'
fsync = on
synchronous_commit = on
wal_writer_delay = 10s
autovacuum = off
});
$node->start;

$node->safe_psql('postgres', 'CREATE EXTENSION pg_claim');
$node->safe_psql('postgres', q{SELECT claim.create_queue('cq', lease => '1 hour')});
$node->safe_psql('postgres',
	q{SELECT count(*) FROM claim.enqueue_many('cq', array_fill('{}'::jsonb, ARRAY[1000]))});
$node->safe_psql('postgres', 'CREATE TABLE side (id int PRIMARY KEY)');
# The first grant after start-up moves the token sequence and flushes: out of the way.
$node->safe_psql('postgres', q{SELECT count(*) FROM claim.claim_next('cq')});
$node->safe_psql('postgres', 'CHECKPOINT');

# WAL flushes (fdatasync calls) made by the statements in $sql, each run as
# its own transaction in one session; the session reports its statistics
# before it ends. Up to PostgreSQL 17 pg_stat_wal counts them; from 18 on,
# pg_stat_io (object 'wal').
my $wal_syncs = $node->safe_psql('postgres', 'SHOW server_version_num') >= 180000
  ? q{SELECT coalesce(sum(fsyncs), 0) FROM pg_stat_io WHERE object = 'wal'}
  : 'SELECT wal_sync FROM pg_stat_wal';
sub syncs_of
{
	my ($sql) = @_;
	my $before = $node->safe_psql('postgres', $wal_syncs);
	$node->safe_psql('postgres', $sql . "\nSELECT pg_stat_force_next_flush();");
	$node->safe_psql('postgres', 'SELECT pg_stat_force_next_flush()');
	my $after = $node->safe_psql('postgres', $wal_syncs);
	return $after - $before;
}

# The measurement works: 30 durable commits flush 30 times.
my $inserts = join "\n", map { "INSERT INTO side VALUES ($_);" } 1 .. 30;
cmp_ok(syncs_of($inserts), '>=', 30, 'each durable commit flushes the WAL');

# 300 claims (10 records of the token sequence, and any pruning on the way)
# commit without a flush of their own.
my $claims = join "\n",
  map { q{SELECT count(*) FROM claim.claim_next('cq');} } 1 .. 300;
my $n = syncs_of($claims);
cmp_ok($n, '<=', 3, "300 claim transactions flush the WAL at most 3 times ($n)");
is($node->safe_psql('postgres', 'SELECT count(*) FROM claim.claimed_items'),
	'301', 'the 300 claims (and the first) are there');

# Group claims too: 200 groups of two items, one group_claim each.
$node->safe_psql('postgres', q{SELECT claim.create_queue('gq', lease => '1 hour')});
$node->safe_psql('postgres',
	q{SELECT count(*) FROM claim.enqueue_many('gq', array_fill('{}'::jsonb, ARRAY[400]),
	    ARRAY(SELECT (g % 200)::text FROM generate_series(1, 400) g))});
$node->safe_psql('postgres', 'CHECKPOINT');
$n = syncs_of(join "\n",
	map { q{SELECT count(*) FROM claim.group_claim('gq');} } 1 .. 200);
cmp_ok($n, '<=', 3, "200 group claims flush the WAL at most 3 times ($n)");
is($node->safe_psql('postgres', q{SELECT count(*) FROM claim.claimed_items WHERE queue = 'gq'}),
	'400', 'the 200 group claims took both items of every group');

# The same claims in transactions that also write a logged row, before or
# after claiming: each waits for its flush.
$n = syncs_of(join "\n",
	map { "BEGIN; INSERT INTO side VALUES (100 + $_); SELECT count(*) FROM claim.claim_next('cq'); COMMIT;" } 1 .. 10);
cmp_ok($n, '>=', 10, "a row written before the claim is flushed at commit ($n)");
$n = syncs_of(join "\n",
	map { "BEGIN; SELECT count(*) FROM claim.claim_next('cq'); INSERT INTO side VALUES (200 + $_); COMMIT;" } 1 .. 10);
cmp_ok($n, '>=', 10, "a row written after the claim is flushed at commit ($n)");

# And survives an immediate stop right after the commit (no shutdown
# checkpoint; the slowed-down WAL writer has flushed nothing asynchronous).
my $max_token;
for my $case ([301, 'INSERT INTO side VALUES (301); SELECT count(*) FROM claim.claim_next(\'cq\');'],
	[302, 'SELECT count(*) FROM claim.claim_next(\'cq\'); INSERT INTO side VALUES (302);'])
{
	my ($id, $body) = @$case;
	$node->safe_psql('postgres', "BEGIN; $body COMMIT;");
	$max_token = $node->safe_psql('postgres', 'SELECT max(token) FROM claim.claimed_items');
	$node->stop('immediate');
	$node->start;
	is($node->safe_psql('postgres', "SELECT count(*) FROM side WHERE id = $id"),
		'1', "row $id, committed with a claim, survives a crash");
}
is($node->safe_psql('postgres', 'SELECT count(*) FROM side'),
	'52', 'every row committed before the crashes is there');
# Tokens handed out after the crash are above every token before it.
my $token = $node->safe_psql('postgres',
	q{SELECT token FROM claim.claim_next('cq')});
cmp_ok($token, '>', $max_token, 'tokens keep increasing across the crash');

$node->stop;
done_testing();
