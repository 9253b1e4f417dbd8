# Crash and restart: a committed claim, an immediate stop (no shutdown
# checkpoint: the server must recover from WAL), a restart.
#
# After the restart:
#   - the item claimed before the crash is claimable again (at once or once
#     its lease has run out: both designs are allowed), under a token greater
#     than every token handed out before the crash;
#   - the holder's old token is refused with SQLSTATE PC001, by complete()
#     and by the other token functions;
#   - items completed before the crash stay completed (never delivered again),
#     and their tokens are refused too.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('crash');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_claim'\n");
$node->start;

$node->safe_psql('postgres', 'CREATE EXTENSION pg_claim');
$node->safe_psql('postgres', q{SELECT claim.create_queue('crashq', lease => '30 seconds')});
$node->safe_psql('postgres', q{SELECT claim.create_queue('otherq')});

# claim_next returning exactly one row: (id, token).
sub claim_one
{
	my ($queue, $lease) = @_;
	my $out = $node->safe_psql('postgres',
		"SELECT id, token FROM claim.claim_next('$queue', lease => '$lease')");
	return split /\|/, $out;
}

# Run SQL that must fail; return the SQLSTATE ('' when it did not fail).
sub sqlstate_of
{
	my ($sql) = @_;
	my ($stdout, $stderr);
	my $rc = $node->psql(
		'postgres', $sql,
		stdout => \$stdout,
		stderr => \$stderr,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return '' if $rc == 0;
	return $stderr =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : "no SQLSTATE in: $stderr";
}

# Five items, in delivery order (same priority: oldest first).
my @ids;
for my $i (1 .. 5)
{
	push @ids, $node->safe_psql('postgres',
		"SELECT claim.enqueue('crashq', jsonb_build_object('n', $i))");
}
my $other_id = $node->safe_psql('postgres',
	q{SELECT claim.enqueue('otherq', '{"n": 0}')});

my @tokens;

# Item 1: claimed and completed before the crash.
my ($done_id, $done_token) = claim_one('crashq', '30 seconds');
is($done_id, $ids[0], 'first claim returns the oldest item');
push @tokens, $done_token;
is($node->safe_psql('postgres', "SELECT claim.complete($done_token)"),
	'1', 'completing the first item before the crash');

# Item 2: the claim that the crash interrupts, committed with a short lease.
my ($held_id, $held_token) = claim_one('crashq', '2 seconds');
is($held_id, $ids[1], 'second claim returns the next item');
push @tokens, $held_token;

# Items 3-5: more tokens (one claim on another queue, as tokens are global),
# all completed, so that nothing but item 2 can be ready after the restart.
for my $i (2 .. 4)
{
	my ($id, $token) = claim_one('crashq', '30 seconds');
	is($id, $ids[$i], "claim " . ($i + 1) . " returns item " . ($i + 1));
	push @tokens, $token;
	$node->safe_psql('postgres', "SELECT claim.complete($token)");
}
my ($oid, $otoken) = claim_one('otherq', '30 seconds');
is($oid, $other_id, 'claim on the other queue');
push @tokens, $otoken;
$node->safe_psql('postgres', "SELECT claim.complete($otoken)");

my %seen;
$seen{$_}++ for @tokens;
is(scalar(keys %seen), scalar(@tokens), 'no token was handed out twice before the crash');
my ($max_before) = sort { $b <=> $a } @tokens;
note "tokens before the crash: @tokens (max $max_before)";

# Crash.
$node->stop('immediate');
$node->start;

# The held item becomes claimable again: at once, or when its 2-second lease
# has passed. Poll for up to 10 s.
my ($new_id, $new_token);
my $deadline = time() + 10;
while (1)
{
	my $out = $node->safe_psql('postgres',
		q{SELECT id, token FROM claim.claim_next('crashq', lease => '30 seconds')});
	if ($out ne '')
	{
		($new_id, $new_token) = split /\|/, $out;
		last;
	}
	last if time() > $deadline;
	usleep(100_000);
}

ok(defined $new_id, 'the item claimed before the crash is claimable after the restart');
is($new_id, $held_id, 'it is the item that was held, not a completed one');
cmp_ok($new_token, '>', $max_before,
	'its new token is greater than every token issued before the crash');

# A claim on another queue after the restart also gets a higher token.
my $other2 = $node->safe_psql('postgres',
	q{SELECT claim.enqueue('otherq', '{"n": 1}')});
my ($oid2, $otoken2) = claim_one('otherq', '30 seconds');
is($oid2, $other2, 'a new item on the other queue is claimable');
cmp_ok($otoken2, '>', $new_token, 'tokens keep increasing after the restart');

# The old holder is fenced off.
is(sqlstate_of("SELECT claim.complete($held_token)"),
	'PC001', 'complete() with the pre-crash token is refused with PC001');
is(sqlstate_of("SELECT claim.extend($held_token)"),
	'PC001', 'extend() with the pre-crash token is refused with PC001');
is(sqlstate_of("SELECT claim.assert_token($held_token)"),
	'PC001', 'assert_token() with the pre-crash token is refused with PC001');
is(sqlstate_of("SELECT claim.complete($done_token)"),
	'PC001', 'a token whose item was completed before the crash is refused with PC001');

# Completed items stay completed: nothing else is ready, only the reclaimed
# item is in the queue.
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM claim.claim_next('crashq', n => 10)}),
	'0', 'no completed item is delivered again');
is($node->safe_psql('postgres',
		q{SELECT ready, scheduled, claimed, dead FROM claim.queue_stats WHERE queue = 'crashq'}),
	'0|0|1|0', 'queue_stats: only the reclaimed item, claimed');

# The new holder can finish it; then the queue is empty.
is($node->safe_psql('postgres', "SELECT claim.complete($new_token)"),
	'1', 'the new token completes the item');
is($node->safe_psql('postgres',
		q{SELECT ready + scheduled + claimed + dead FROM claim.queue_stats WHERE queue = 'crashq'}),
	'0', 'the queue is empty');
$node->safe_psql('postgres', "SELECT claim.complete($otoken2)");

# A second crash right after claims: still no token reuse.
my $id3 = $node->safe_psql('postgres', q{SELECT claim.enqueue('crashq', '{"n": 6}')});
my ($cid3, $ctoken3) = claim_one('crashq', '1 second');
$node->stop('immediate');
$node->start;
$node->safe_psql('postgres', q{SELECT claim.enqueue('crashq', '{"n": 7}')});
my $after = $node->safe_psql('postgres',
	q{SELECT max(token) FROM claim.claim_next('crashq', n => 2)});
cmp_ok($after, '>', $ctoken3, 'after a second crash, tokens are still higher');

# Asynchronous commit: the claims' commits do not flush WAL, and the WAL
# writer is slowed down so it does not flush either. Many claims cross several
# of the sequence's cached-value batches; then crash at once. Tokens handed
# out before the crash must still never come back.
$node->append_conf('postgresql.conf', "wal_writer_delay = '10s'\n");
$node->restart;
$node->safe_psql('postgres', q{SELECT claim.create_queue('asyncq')});
$node->safe_psql('postgres',
	q{SELECT claim.enqueue('asyncq', jsonb_build_object('n', g)) FROM generate_series(1, 100) g});
my $claims_sql = "SET synchronous_commit = off;\n"
  . "SELECT token FROM claim.claim_next('asyncq', lease => '1 hour');\n" x 100;
my @async_tokens = split /\n/, $node->safe_psql('postgres', $claims_sql);
is(scalar(@async_tokens), 100, '100 claims with synchronous_commit = off');
my ($async_max) = sort { $b <=> $a } @async_tokens;
$node->stop('immediate');
$node->start;
my $async_after = $node->safe_psql('postgres',
	q{SELECT min(token) FROM claim.claim_next('asyncq', n => 100, lease => '1 hour')});
cmp_ok($async_after, '>', $async_max,
	'after a crash that followed asynchronous commits, every new token is higher');

$node->stop;
done_testing();
