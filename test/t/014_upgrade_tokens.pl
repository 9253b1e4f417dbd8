# Tokens and renamed array forms across the update from 0.2.0 to the current
# version, and the partition of a database under a running system.
#
#   - partition 0: tokens granted after the update are higher than every
#     token of 0.2.0, and at most 2^53 - 1;
#   - partition 5: the tokens 0.2.0 handed out (5 * 2^53 + n, above 2^53 - 1)
#     still complete, assert and release after the update and keep their
#     partition in claim.token_partition; new tokens are of partition 5 and
#     at most 2^53 - 1;
#   - the array forms: complete(bigint[]), cancel(text, bigint[]) and
#     enqueue_batch are gone, complete_many, cancel_many, enqueue_many and a
#     one-item cancel take their place, and claim.complete($1) with an
#     untyped parameter, ambiguous under 0.2.0 (42725), resolves;
#   - claim.set_partition only raises the partition, tokens keep increasing;
#     a session or role setting of pg_claim.partition is refused tokens;
#   - a crash restart moves the sequence at most one block of the ceiling;
#   - a ceiling raised by one backend covers the tokens other backends grant
#     under it, across a crash.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $MAX = 9007199254740991;          # 2^53 - 1
my $UNIT = 140737488355328;          # 2^47: one partition's block
my $OLD_UNIT = 9007199254740992;     # 2^53: a partition in 0.2.0
my $BLOCK = 65536;                   # one raise of the durable ceiling

my $node = PostgreSQL::Test::Cluster->new('upgrade_tokens');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_claim'\n");
$node->start;

sub q1 { my ($db, $sql) = @_; return $node->safe_psql($db, $sql); }
sub sqlstate
{
	my ($db, $sql) = @_;
	my ($rc, $out, $err) = $node->psql($db, "\\set VERBOSITY verbose\n$sql");
	return $rc == 0 ? 'ok' : ($err =~ /ERROR:\s+([0-9A-Z]{5})/ ? $1 : $err);
}

# --- partition 0 ------------------------------------------------------------------
q1('postgres', 'CREATE DATABASE p0');
q1('p0', q{CREATE EXTENSION pg_claim VERSION '0.2.0';
	SELECT claim.create_queue('jobs', lease => '1 hour');
	SELECT claim.enqueue('jobs', jsonb_build_object('n', g)) FROM generate_series(1, 10) g});
my @old = split /,/, q1('p0',
	q{SELECT string_agg(token::text, ',' ORDER BY token) FROM claim.claim_next('jobs', n => 4)});
is(scalar @old, 4, 'partition 0: four claims under 0.2.0');
is(q1('p0', "SELECT claim.complete(ARRAY[$old[0]]::bigint[])"), '1', '0.2.0: complete(bigint[]) exists');
is(sqlstate('p0', "PREPARE c AS SELECT claim.complete(\$1)"), '42725',
	'0.2.0: claim.complete($1) with an untyped parameter is ambiguous');
my $max_before = q1('p0', q{SELECT max(token) FROM claim.claims});

q1('p0', 'ALTER EXTENSION pg_claim UPDATE');
is(q1('p0', "SELECT claim.complete($old[1])"), '1', 'a 0.2.0 token completes after the update');
is(q1('p0', "SELECT claim.complete_many(ARRAY[$old[2]])"), '1', '... through complete_many too');
is(q1('p0', "PREPARE c AS SELECT claim.complete(\$1); EXECUTE c('$old[3]')"), '1',
	'claim.complete($1) with an untyped parameter resolves');
my $new = q1('p0', q{SELECT token FROM claim.claim_next('jobs')});
cmp_ok($new, '>', $max_before, 'partition 0: a token after the update is higher than those of 0.2.0');
cmp_ok($new, '<=', $MAX, '... and at most 2^53 - 1');
is(q1('p0', 'SELECT claim.partition()'), '0', 'claim.partition() is 0');

is(sqlstate('p0', q{SELECT claim.complete(ARRAY[1]::bigint[])}), '42883', 'complete(bigint[]) is gone');
is(sqlstate('p0', q{SELECT claim.cancel('jobs', ARRAY[1]::bigint[])}), '42883', 'cancel(text, bigint[]) is gone');
is(sqlstate('p0', q{SELECT claim.enqueue_batch('jobs', ARRAY['{}']::jsonb[])}), '42883', 'enqueue_batch is gone');
is(q1('p0', q{SELECT count(*) FROM claim.enqueue_many('jobs', ARRAY['{}', '{}']::jsonb[])}), '2',
	'enqueue_many adds items');
my $id = q1('p0', q{SELECT claim.enqueue('jobs', '{"cancel": 1}')});
is(q1('p0', "SELECT claim.cancel('jobs', $id)"), '1', 'cancel(queue, id) cancels one item');
$id = q1('p0', q{SELECT claim.enqueue('jobs', '{"cancel": 2}')});
is(q1('p0', "SELECT claim.cancel_many('jobs', ARRAY[$id])"), '1', 'cancel_many cancels a list');
is(q1('p0', q{SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
	WHERE n.nspname = 'claim' AND p.proname IN ('complete_many', 'cancel_many', 'enqueue_many')}), '3',
	'the renamed forms are in the catalog');

# --- a crash restart moves the sequence at most one block --------------------------
my $before_crash = q1('p0', q{SELECT claim.lease_acquire('crash', '1 hour')});
$node->stop('immediate');
$node->start;
my $after_crash = q1('p0', q{SELECT claim.lease_acquire('crash2', '1 hour')});
cmp_ok($after_crash, '>', $before_crash, 'after a crash restart tokens are higher');
cmp_ok($after_crash - $before_crash, '<=', $BLOCK + 64, '... by at most one block of the ceiling');

# --- a ceiling raised by one backend covers another's tokens across a crash ---------
# Backend A crosses the durable ceiling and raises it; backend B, which never
# raised it, grants a token above the old ceiling on A's raise (published in
# shared memory, flushed first). A crash right after loses none of it.
my $ceiling = q1('p0', q{SELECT last_value FROM claim.token_ceiling});
q1('p0', "SELECT setval('claim.token_seq', $ceiling - 1)");
my $a_tok = q1('p0', q{SELECT max(claim.lease_acquire('cross:' || g, '1 hour')) FROM generate_series(1, 2) g});
cmp_ok($a_tok, '>', $ceiling, 'backend A granted a token above the old ceiling');
cmp_ok(q1('p0', q{SELECT last_value FROM claim.token_ceiling}), '>=', $a_tok, '... and raised the durable ceiling');
my $b_tok = q1('p0', q{SELECT claim.lease_acquire('cross:b', '1 hour')});
cmp_ok($b_tok, '>', $a_tok, 'backend B granted the next token');
$node->stop('immediate');
$node->start;
my $c_tok = q1('p0', q{SELECT claim.lease_acquire('cross:c', '1 hour')});
cmp_ok($c_tok, '>', $b_tok, 'after a crash the next token is higher than the token of backend B');

# --- partition 5 under 0.2.0 -------------------------------------------------------
# The library is the current one, which hands out no token of another
# partition under the 0.2.0 schema; the tokens 0.2.0 handed out in partition
# 5 are made here by moving those of partition 0 up by 5 * 2^53.
q1('postgres', 'CREATE DATABASE p5');
q1('p5', q{CREATE EXTENSION pg_claim VERSION '0.2.0';
	SELECT claim.create_queue('jobs', lease => '1 hour');
	SELECT claim.enqueue('jobs', jsonb_build_object('n', g)) FROM generate_series(1, 10) g;
	SELECT count(*) FROM claim.claim_next('jobs', n => 3);
	SELECT claim.lease_acquire('L', '1 hour');});
q1('p5', qq{UPDATE claim.claims SET token = token + 5 * $OLD_UNIT;
	UPDATE claim.lease_holders SET token = token + 5 * $OLD_UNIT;
	ALTER DATABASE p5 SET pg_claim.partition = 5;});
is(sqlstate('p5', q{SELECT claim.lease_acquire('L2', '1 hour')}), '55000',
	'partition 5 under the 0.2.0 schema: the current library refuses to hand out tokens until the update');
@old = split /,/, q1('p5', q{SELECT string_agg(token::text, ',' ORDER BY token) FROM claim.claims});
my $old_lease = q1('p5', q{SELECT token FROM claim.lease_holders WHERE name = 'L'});
cmp_ok($old[0], '>', $MAX, '0.2.0 tokens of partition 5 are above 2^53 - 1');

q1('p5', 'ALTER EXTENSION pg_claim UPDATE');
is(q1('p5', 'SELECT claim.partition()'), '5', 'the update takes pg_claim.partition as the partition');
is(q1('p5', "SELECT claim.token_partition($old[0])"), '5', 'an old token keeps its partition');
is(q1('p5', "SELECT claim.complete($old[0])"), '1', 'an old token completes after the update');
is(q1('p5', "SELECT claim.complete_many(ARRAY[$old[1]])"), '1', '... through complete_many too');
is(q1('p5', "SELECT claim.release($old[2])"), '1', '... and releases');
is(sqlstate('p5', "SELECT claim.lease_assert('L', $old_lease)"), 'ok', 'an old lease token asserts');
is(q1('p5', "SELECT claim.lease_release('L', $old_lease)"), 't', '... and releases');
my $t5 = q1('p5', q{SELECT token FROM claim.claim_next('jobs')});
cmp_ok($t5, '<=', $MAX, 'partition 5: new tokens are at most 2^53 - 1');
is(q1('p5', "SELECT claim.token_partition($t5)"), '5', '... and of partition 5');
cmp_ok($t5, '>', 5 * $UNIT, '... above every token of partitions 0 to 4');

# --- the partition under a running system ------------------------------------------
is(sqlstate('p5', q{SET pg_claim.partition = 0; SELECT claim.lease_acquire('S', '1 hour')}), '55000',
	'a session setting of another partition is refused tokens');
is(sqlstate('p5', q{SET pg_claim.partition = 7; SELECT claim.guard_begin('S', '1 hour')}), '55000',
	'... a higher one too');
q1('p5', q{CREATE ROLE worker_r LOGIN SUPERUSER; ALTER ROLE worker_r SET pg_claim.partition = 2});
my ($rc, $out, $err) = $node->psql('p5', q{SELECT claim.lease_acquire('R', '1 hour')},
	extra_params => [ '-U', 'worker_r' ]);
like($err, qr/pg_claim\.partition is 2 in this session, but this database hands out the tokens of partition 5/,
	'a role setting of another partition is refused tokens');
q1('p5', q{ALTER ROLE worker_r RESET pg_claim.partition});

my $before_raise = q1('p5', q{SELECT claim.lease_acquire('before-raise', '1 hour')});
is(q1('p5', 'SELECT claim.set_partition(6)'), '6', 'set_partition raises the partition');
my $after_raise = q1('p5', q{SELECT claim.lease_acquire('after-raise', '1 hour')});
cmp_ok($after_raise, '>', $before_raise, 'tokens keep increasing across the raise');
is(q1('p5', "SELECT claim.token_partition($after_raise)"), '6', '... in partition 6');
cmp_ok($after_raise, '<=', $MAX, '... at most 2^53 - 1');
# A session that still says partition 5 (as one opened before the raise
# does) is refused, not handed lower tokens.
is(sqlstate('p5', q{SET pg_claim.partition = 5; SELECT claim.lease_acquire('old-session', '1 hour')}),
	'55000', 'a session that still says the old partition is refused tokens');
is(sqlstate('p5', 'SELECT claim.set_partition(5)'), '22023', 'a lower partition is refused');
is(q1('p5', q{SELECT setting FROM pg_db_role_setting s, unnest(s.setconfig) setting
	WHERE s.setdatabase = (SELECT oid FROM pg_database WHERE datname = 'p5') AND s.setrole = 0}),
	'pg_claim.partition=6', 'set_partition set pg_claim.partition for the database');

# The last tokens of the last partition are still at most 2^53 - 1.
q1('p5', 'SELECT claim.set_partition(63)');
q1('p5', "SELECT setval('claim.token_seq', $MAX - 2)");
my $last = q1('p5', q{SELECT claim.lease_acquire('last', '1 hour')});
is($last, $MAX - 1, 'the last partition hands out up to 2^53 - 1');
is(q1('p5', q{SELECT claim.lease_acquire('very-last', '1 hour')}), $MAX, '... its last token');
is(sqlstate('p5', q{SELECT claim.lease_acquire('beyond', '1 hour')}), '2200H', 'and then 2200H, never more');

done_testing();
