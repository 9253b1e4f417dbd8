# Two-phase commit and pg_claim's lock table (src/pg/xact_locks.cpp):
#  * an XA-style run, every transaction prepared (claim, complete, PREPARE,
#    COMMIT PREPARED), leaves no entry behind: the entries of a prepared
#    transaction are freed when it ends, by the backend that ends it;
#  * ROLLBACK PREPARED frees them too, and the item is claimable again;
#  * a transaction holding 10,000 items prepares at the default
#    max_locks_per_transaction (no heavyweight lock per item);
#  * across a restart, what a prepared transaction claimed or completed is
#    not handed out again (kept by the rows: the lock table starts empty),
#    and COMMIT PREPARED then stands.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use PgClaimNode;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = pgclaim_node('twophase', "max_prepared_transactions = 5\n");
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_claim;
	SELECT claim.create_queue('xa', lease => '1 hour');
	SELECT claim.enqueue_many('xa', array_agg('{}'::jsonb)) FROM generate_series(1, 2000);
	SELECT claim.create_queue('big', lease => '1 hour');
	SELECT claim.enqueue_many('big', array_agg('{}'::jsonb)) FROM generate_series(1, 10005);
});

sub in_use { $node->safe_psql('postgres', 'SELECT in_use FROM claim.lock_table()') }

# --- XA: 2,000 prepared completions in one session
my $script = join('', map { <<"EOS" } 1 .. 2000);
BEGIN;
SELECT claim.complete(token) FROM claim.claim_next('xa');
PREPARE TRANSACTION 'xa$_';
COMMIT PREPARED 'xa$_';
EOS
$node->safe_psql('postgres', $script);
is($node->safe_psql('postgres', q{SELECT ready FROM claim.queue_stats WHERE queue = 'xa'}), '0',
	'2,000 prepared transactions completed every item');
is(in_use(), '0', 'and left no entry in the lock table');

# --- ROLLBACK PREPARED
$node->safe_psql('postgres', q{
	SELECT claim.enqueue('xa', '{"r": 1}');
	BEGIN;
	SELECT count(*) FROM claim.claim_next('xa');
	PREPARE TRANSACTION 'rb';
});
is(in_use(), '1', 'a prepared claim keeps its entry');
is($node->safe_psql('postgres', q{SELECT count(*) FROM claim.claim_next('xa')}), '0',
	'and its item is not claimable');
$node->safe_psql('postgres', q{ROLLBACK PREPARED 'rb'});
is(in_use(), '0', 'ROLLBACK PREPARED frees it');
is($node->safe_psql('postgres', q{SELECT count(*) FROM claim.complete_many(ARRAY(SELECT token FROM claim.claim_next('xa')))}),
	'1', 'and the item is claimable again');

# --- 10,000 items in one prepared transaction
my ($rc, $out, $err) = $node->psql('postgres', q{
	BEGIN;
	SELECT count(*) FROM claim.claim_next('big', n => 10000);
	PREPARE TRANSACTION 'big';
});
is($rc, 0, 'a transaction holding 10,000 items prepares at the default max_locks_per_transaction')
  or diag($err);
is(in_use(), '10000', 'its entries stay in the lock table');
is($node->safe_psql('postgres', q{SELECT count(*) FROM claim.claim_next('big', n => 100)}), '5',
	'other claimers get only the 5 items it does not hold');
$node->safe_psql('postgres', q{SELECT claim.release(token) FROM claim.claimed_items WHERE queue = 'big' AND live});

# --- a prepared completion and the prepared claims across a restart
$node->safe_psql('postgres', q{SELECT claim.enqueue('xa', '{"c": 1}')});
my $tok = $node->safe_psql('postgres', q{SELECT token FROM claim.claim_next('xa')});
$node->safe_psql('postgres', qq{
	BEGIN;
	SELECT claim.complete($tok);
	PREPARE TRANSACTION 'done';
});
$node->restart;
is(in_use(), '0', 'after a restart the lock table is empty');
is($node->safe_psql('postgres', q{SELECT count(*) FROM claim.claim_next('xa')}), '0',
	'the item whose completion is prepared is not handed out');
is($node->safe_psql('postgres', q{SELECT count(*) FROM claim.claim_next('big', n => 100)}), '5',
	'the 10,000 items of the prepared claims are not handed out');
$node->safe_psql('postgres', q{COMMIT PREPARED 'done'; COMMIT PREPARED 'big'});
is($node->safe_psql('postgres', q{SELECT count(*) FROM claim.claimed_items WHERE queue = 'big' AND live}),
	'10005', 'COMMIT PREPARED makes the 10,000 claims stand beside the 5 taken after the restart');
is($node->safe_psql('postgres', q{SELECT count(*) FROM claim.items i JOIN claim.queues q USING (queue_id) WHERE q.name = 'xa'}),
	'0', 'and the prepared completion');
is(in_use(), '0', 'no entry is left behind');

$node->stop;
done_testing();
