# pg_claim's lock table in shared memory (src/pg/xact_locks.cpp):
#  * when it is full, a claim fails with 53400 and a hint, and nothing is
#    half-claimed; so does the table of rate-limited keys;
#  * a prepared transaction keeps the items it claimed or completed locked
#    until COMMIT/ROLLBACK PREPARED, also across a restart of the server
#    (the table is rebuilt from the prepared transactions' locks);
#  * another session's release of a token whose completion is prepared
#    waits for COMMIT PREPARED, then finds the token stale (PC001).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PgClaimNode;
use IPC::Run;

my $node = pgclaim_node('locks', qq{max_prepared_transactions = 5
pg_claim.max_xact_locks = 1024
pg_claim.max_rate_keys = 64
});
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_claim;
	SELECT claim.create_queue('big', lease => '1 hour');
	SELECT claim.enqueue_many('big', array_agg(jsonb_build_object('n', g))) FROM generate_series(1, 2000) g;
	SELECT claim.create_queue('p', lease => '1 hour');
	SELECT claim.enqueue('p', jsonb_build_object('n', g)) FROM generate_series(1, 2) g;
});

is($node->safe_psql('postgres', 'SELECT capacity FROM claim.lock_table()'), '1024',
	'the table holds pg_claim.max_xact_locks entries');

# --- a full table
my ($out, $err);
$node->psql('postgres', q{SELECT count(*) FROM claim.claim_next('big', n => 2000)},
	stdout => \$out, stderr => \$err, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:\s+53400: pg_claim's lock table is full/, 'a claim past the table fails with 53400');
like($err, qr/HINT:\s+Raise pg_claim\.max_xact_locks/, 'and says what to raise');
is($node->safe_psql('postgres', q{SELECT ready, claimed FROM claim.queue_stats WHERE queue = 'big'}),
	'2000|0', 'nothing was half-claimed');
is($node->safe_psql('postgres', 'SELECT in_use FROM claim.lock_table()'), '0',
	'the failed transaction gave every entry back');
is($node->safe_psql('postgres', q{SELECT count(*) FROM claim.claim_next('big', n => 1000)}), '1000',
	'a claim that fits succeeds');

# --- a full table of rate keys: 53400, nothing claimed
$node->safe_psql('postgres', q{
	SELECT claim.create_queue('rated', lease => '1 hour', rate => 1, rate_per => '1 hour',
	                          rate_per_group => true);
	SELECT claim.enqueue('rated', '{}', group_key => 'g' || g) FROM generate_series(1, 100) g;
});
($out, $err) = ('', '');
$node->psql('postgres', q{SELECT count(*) FROM claim.claim_next('rated', n => 100)},
	stdout => \$out, stderr => \$err, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:\s+53400: pg_claim's table of rate-limited keys is full/,
	'a claim that needs more rate keys than the table holds fails with 53400');
like($err, qr/HINT:\s+Raise the setting/, 'with a hint');
is($node->safe_psql('postgres', q{SELECT claimed FROM claim.queue_stats WHERE queue = 'rated'}), '0',
	'nothing of it was claimed');
is($node->safe_psql('postgres', q{SELECT count(*) FROM claim.claim_next('big', n => 10)}), '10',
	'queues without a rate claim as before');

# --- a prepared claim survives a restart
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT count(*) FROM claim.claim_next('p');
	PREPARE TRANSACTION 'held';
});
is($node->safe_psql('postgres', q{SELECT count(*) FROM claim.claim_next('p', n => 2)}), '1',
	'other claimers skip the prepared claim\'s item');
$node->safe_psql('postgres', q{SELECT claim.release(token) FROM claim.claimed_items WHERE queue = 'p' AND live});
$node->restart;
is($node->safe_psql('postgres', q{SELECT count(*) FROM claim.claim_next('p', n => 2)}), '1',
	'after a restart the prepared claim\'s item is still skipped');
$node->safe_psql('postgres', q{COMMIT PREPARED 'held'});
is($node->safe_psql('postgres', q{SELECT count(*) FROM claim.claimed_items WHERE queue = 'p' AND live}), '2',
	'COMMIT PREPARED makes the prepared claim stand beside the other');
is($node->safe_psql('postgres', q{SELECT count(*) FROM claim.claim_next('p', n => 2)}), '0',
	'both items are claimed');

# --- a prepared completion: a release from elsewhere waits, then is stale
my $tok = $node->safe_psql('postgres', q{SELECT min(token) FROM claim.claimed_items WHERE queue = 'p' AND live});
$node->safe_psql('postgres', qq{
	BEGIN;
	SELECT claim.complete($tok);
	PREPARE TRANSACTION 'done';
});
my ($rout, $rerr) = ('', '');
my $h = IPC::Run::start(
	[ 'psql', '-XAtq', '-v', 'VERBOSITY=verbose', '-d', $node->connstr('postgres'),
	  '-c', "SELECT claim.release($tok)" ],
	'>', \$rout, '2>', \$rerr);
ok($node->poll_query_until('postgres', q{
	SELECT count(*) > 0 FROM pg_stat_activity
	WHERE query LIKE 'SELECT claim.release%' AND wait_event_type = 'Lock'}),
	'the release waits for the prepared transaction');
$node->safe_psql('postgres', q{COMMIT PREPARED 'done'});
$h->finish;
like($rerr, qr/PC001/, 'after COMMIT PREPARED the release finds the token stale');
is($node->safe_psql('postgres', q{SELECT count(*) FROM claim.claimed_items WHERE queue = 'p' AND live}), '1',
	'the completed item is gone, the other claim stays');
is($node->safe_psql('postgres', 'SELECT in_use FROM claim.lock_table()'), '0',
	'no entry is left behind');

$node->stop;
done_testing();
