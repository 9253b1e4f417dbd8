# A wait inside the server notices that its client is gone: a worker
# process killed (SIGKILL) while its connection waits in claim_next, or in
# lease_acquire, leaves a backend that ends at once (the client's socket
# closed wakes the sleep), instead of waking later to claim an item or
# take a lease it cannot hand over. The item goes to a healthy waiter, at
# its first attempt.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use IPC::Run;
use PgClaimNode;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = pgclaim_node('gone', '');
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_claim;
	SELECT claim.create_queue('q', lease => '2 seconds', max_attempts => 2);
});

# A psql that runs `sql` under application_name `app`, in the background.
sub start_psql
{
	my ($app, $sql) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres') . " application_name=$app", '-c', $sql ],
		'>', \$out, '2>', \$err);
	return { h => $h, out => \$out, err => \$err };
}

sub waiting
{
	my ($app) = @_;
	return $node->poll_query_until('postgres', qq{
		SELECT count(*) = 1 FROM pg_stat_activity
		WHERE application_name = '$app' AND state = 'active' AND wait_event_type = 'Extension'});
}

# Within 5 s (the waits are for 30 s: an orphan that is only found when
# its wait ends is too late).
sub gone
{
	my ($app) = @_;
	my ($rc, $out) = $node->psql('postgres', qq{
		DO \$\$
		DECLARE stop timestamptz := clock_timestamp() + interval '5 seconds';
		BEGIN
		    WHILE EXISTS (SELECT FROM pg_stat_activity WHERE application_name = '$app') LOOP
		        IF clock_timestamp() > stop THEN RAISE EXCEPTION 'still there'; END IF;
		        PERFORM pg_sleep(0.05);
		        PERFORM pg_stat_clear_snapshot();
		    END LOOP;
		END \$\$;
		SELECT 'gone'});
	return $rc == 0 && $out eq 'gone';
}

# --- claim_next
my $victim = start_psql('victim', q{SELECT id FROM claim.claim_next('q', wait => '30 seconds')});
ok(waiting('victim'), 'the victim waits in claim_next');
$victim->{h}->signal('KILL');
$victim->{h}->finish;
ok(gone('victim'), 'its backend ends once its client is killed, without being woken');

my $healthy = start_psql('healthy', q{SELECT id FROM claim.claim_next('q', wait => '30 seconds')});
ok(waiting('healthy'), 'a healthy worker waits');
my $id = $node->safe_psql('postgres', q{SELECT claim.enqueue('q', '{}')});
$healthy->{h}->finish;
chomp(my $got = ${ $healthy->{out} });
is($got, $id, 'the item goes to the healthy worker');
is($node->safe_psql('postgres', "SELECT attempt FROM claim.claimed_items WHERE id = $id"), '1',
	'at its first attempt: the killed worker cost none');

# --- lease_acquire
my $tok = $node->safe_psql('postgres', q{SELECT claim.lease_acquire('L', '1 minute')});
my $lv = start_psql('lease_victim', q{SELECT claim.lease_acquire('L', '1 minute', wait => '30 seconds')});
ok(waiting('lease_victim'), 'the victim waits in lease_acquire');
$lv->{h}->signal('KILL');
$lv->{h}->finish;
ok(gone('lease_victim'), 'its backend ends once its client is killed');
$node->safe_psql('postgres', "SELECT claim.lease_release('L', $tok)");
isnt($node->safe_psql('postgres', q{SELECT claim.lease_acquire('L', '1 minute')}), '',
	'and the lease it waited for is free once released: the killed waiter did not take it');

$node->stop;
done_testing();
