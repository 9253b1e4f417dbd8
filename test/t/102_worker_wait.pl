# Waiting inside the server (shared_preload_libraries = 'pg_claim'):
#
#   - a waiting claim_next returns the item as soon as another session
#     commits an enqueue (its latency is measured by the bench, test/bench/wake.sh);
#   - it returns nothing when that session rolls back;
#   - one enqueue wakes one of several waiters, not all of them;
#   - a wait is cancellable (57014) and leaves no registration behind;
#   - a LISTEN client gets one NOTIFY per queue from the worker, not from
#     the producer;
#   - without the preload, waits fall back to naps and say so once.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('wait');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pg_claim'
max_locks_per_transaction = 256
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_claim;
	SELECT claim.create_queue('w');
	SELECT claim.create_queue('herd');
});
ok($node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pg_claim worker'}),
	'worker runs');

# Start psql in the background running $sql; returns [handle, \stdout, \stderr].
sub bg
{
	my ($sql, @opts) = @_;
	my ($in, $out, $err) = ('', '', '');
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-v', 'VERBOSITY=verbose', @opts,
		  '-d', $node->connstr('postgres'), '-c', $sql ],
		'<', \$in, '>', \$out, '2>', \$err);
	return [ $h, \$out, \$err ];
}

# Wait until $n sessions wait inside claim_next (wait_event Extension).
sub wait_waiters
{
	my ($n) = @_;
	return $node->poll_query_until('postgres', qq{
		SELECT count(*) >= $n FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND wait_event = 'Extension'
		  AND query LIKE '%claim_next%'});
}

# --- commit wakes the waiter ---------------------------------------------------

my $w = bg(q{SELECT id, extract(epoch FROM clock_timestamp()) FROM claim.claim_next('w', wait => '10 s')});
ok(wait_waiters(1), 'claim_next waits');
my $before = $node->safe_psql('postgres', q{
	BEGIN;
	SELECT claim.enqueue('w', '{"n": 1}');
	SELECT extract(epoch FROM clock_timestamp());
	COMMIT;});
my ($id, $t_commit) = split /\n/, $before;
$w->[0]->finish;
my ($got, $t_got) = split /\|/, ${ $w->[1] };
is($got, $id, 'the waiter receives the item the other session committed');
cmp_ok($t_got, '>=', $t_commit, '... and returns after the COMMIT began');

# --- rollback wakes nobody (or nobody finds anything) -----------------------------------

$w = bg(q{SELECT count(*) FROM claim.claim_next('w', wait => '1500 ms')});
ok(wait_waiters(1), 'claim_next waits again');
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT claim.enqueue('w', '{"n": 2}');
	ROLLBACK;});
my $t0 = time;
$w->[0]->finish;
is(${ $w->[1] }, "0\n", 'an enqueue that rolls back gives the waiter nothing');
cmp_ok(time - $t0, '>', 0.5, '... it waited until its wait ended');

# --- no thundering herd -------------------------------------------------------------

my @herd = map { bg(q{SELECT count(*) FROM claim.claim_next('herd', wait => '3 s')}) } 1 .. 4;
ok(wait_waiters(4), 'four sessions wait on one queue');
$node->safe_psql('postgres', q{SELECT claim.enqueue('herd')});
usleep(300_000);
my $still = $node->safe_psql('postgres', q{
	SELECT count(*) FROM pg_stat_activity
	WHERE backend_type = 'client backend' AND wait_event = 'Extension' AND query LIKE '%herd%'});
is($still, 3, 'one enqueue wakes one waiter; the three others keep sleeping');
$node->safe_psql('postgres',
	q{SELECT claim.enqueue_many('herd', ARRAY['{}', '{}', '{}']::jsonb[])});
my $n = 0;
for my $b (@herd) { $b->[0]->finish; $n += ${ $b->[1] }; }
is($n, 4, 'a batch of three reaches the three others (baton passed on)');

# --- cancel -------------------------------------------------------------------------

$w = bg(q{SELECT * FROM claim.claim_next('w', wait => '30 s')});
ok(wait_waiters(1), 'a long wait');
$node->safe_psql('postgres', q{
	SELECT pg_cancel_backend(pid) FROM pg_stat_activity
	WHERE backend_type = 'client backend' AND query LIKE '%30 s%' AND pid <> pg_backend_pid()});
$t0 = time;
$w->[0]->finish;
like(${ $w->[2] }, qr/57014/, 'pg_cancel_backend ends a wait with SQLSTATE 57014');
cmp_ok(time - $t0, '<', 5, '... at once');

$w = bg(q{SET statement_timeout = '300ms'; SELECT * FROM claim.claim_next('w', wait => '30 s')});
$w->[0]->finish;
like(${ $w->[2] }, qr/57014/, 'statement_timeout ends a wait with SQLSTATE 57014');

# The cancelled waiters left nothing behind: a new waiter is woken.
$w = bg(q{SELECT count(*) FROM claim.claim_next('w', wait => '5 s')});
ok(wait_waiters(1), 'a new waiter');
$t0 = time;
$node->safe_psql('postgres', q{SELECT claim.enqueue('w')});
$w->[0]->finish;
is(${ $w->[1] }, "1\n", 'after the cancels, a commit still wakes the new waiter');
cmp_ok(time - $t0, '<', 1, '... at once');

# --- LISTEN -----------------------------------------------------------------------------

my $worker = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_claim worker'});
my ($lin, $lout, $lerr) = ("LISTEN pg_claim;\nSELECT 'listening';\n", '', '');
my $lh = IPC::Run::start([ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
	'<', \$lin, '>', \$lout, '2>', \$lerr);
my $deadline = time + 10;
while ($lout !~ /listening/ && time < $deadline) { $lh->pump_nb; usleep(20_000); }
my $producer = $node->safe_psql('postgres', q{
	SELECT pg_backend_pid();
	SELECT claim.enqueue('w');
	SELECT claim.enqueue('w');});
($producer) = split /\n/, $producer;
usleep(300_000);
$lin .= "SELECT 'done';\n";
$deadline = time + 10;
while ($lout !~ /done/ && time < $deadline) { $lh->pump_nb; usleep(20_000); }
$lin .= "\\q\n";
$lh->finish;
my @notes = $lout =~ /Asynchronous notification "pg_claim" with payload "w" received from server process with PID (\d+)/g;
ok(@notes >= 1, 'a LISTEN client gets NOTIFY pg_claim with the queue name as payload');
is($notes[0], $worker, '... sent by the worker, not by the producer');
isnt($notes[0], $producer, '... the producer sent nothing');

$node->stop;

# --- without the preload -------------------------------------------------------------------

my $plain = PostgreSQL::Test::Cluster->new('plain');
$plain->init;
$plain->append_conf('postgresql.conf', "max_locks_per_transaction = 256\n");
$plain->start;
$plain->safe_psql('postgres', q{CREATE EXTENSION pg_claim; SELECT claim.create_queue('p')});
my ($rc, $out, $err) = ('', '', '');
$rc = $plain->psql('postgres', q{
	SELECT count(*) FROM claim.claim_next('p', wait => '200 ms');
	SELECT count(*) FROM claim.claim_next('p', wait => '200 ms');},
	stdout => \$out, stderr => \$err);
is($rc, 0, 'without the preload, waits work');
my @notices = $err =~ /NOTICE:.*polling/g;
is(scalar @notices, 1, '... and say once that they poll');
like($err, qr/HINT:.*shared_preload_libraries/, '... with a hint to preload');
is($plain->safe_psql('postgres',
	q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'pg_claim%'}), '0',
	'... and no worker runs');
$plain->stop;

done_testing();
