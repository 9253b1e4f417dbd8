# Long waits keep a backend's memory flat: each round of claim_next(wait),
# group_claim(wait) and lease_acquire(wait) frees what it allocated. A
# waiter is woken hundreds of times by work it cannot take (items behind a
# claimed group head; a lease taken again by its holder); the backend's
# memory, logged by pg_log_backend_memory_contexts, grows by less than 1 MB
# between the 50th and the last wake-up.
#
# Also: a claim_next(wait) sleeping on a queue that is dropped returns at
# once with the unknown-queue error (42704) instead of sleeping out its wait.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep);

my $rounds = $ENV{PGCLAIM_WAIT_ROUNDS} // 400;

my $node = PostgreSQL::Test::Cluster->new('waitmem');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pg_claim'
pg_claim.worker_enabled = off
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_claim;
	SELECT claim.create_queue('g', lease => '1 hour');
	SELECT claim.enqueue('g', '{}', group_key => 'x');
	SELECT count(*) FROM claim.claim_next('g');
	CREATE TABLE t (token bigint);
	INSERT INTO t SELECT claim.lease_acquire('L', '1 hour');
});

# The "Grand total" of the backend's memory contexts, as logged.
sub logged_total
{
	my ($pid) = @_;
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', "SELECT pg_log_backend_memory_contexts($pid)");
	my $total;
	for (1 .. 200)
	{
		my $log = slurp_file($node->logfile, $offset);
		if ($log =~ /Grand total: (\d+) bytes/) { $total = $1; last; }
		usleep(50_000);
	}
	return $total;
}

sub waiter
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'VERBOSITY=verbose', '-d', $node->connstr('postgres'), '-c', $sql ],
		'>', \$out, '2>', \$err);
	my $q = $sql =~ s/'/''/gr;
	$node->poll_query_until('postgres', qq{
		SELECT count(*) = 1 FROM pg_stat_activity WHERE query = '$q' AND state = 'active'})
	  or die "the waiter did not start";
	my $pid = $node->safe_psql('postgres', qq{SELECT pid FROM pg_stat_activity WHERE query = '$q'});
	return ($h, $pid, \$out, \$err);
}

# Wake the waiter $n times with work it cannot take: $wake runs in its own
# transaction each time.
sub measure
{
	my ($name, $sql, $wake) = @_;
	my ($h, $pid, $out, $err) = waiter($sql);
	my ($first, $last);
	for my $i (1 .. $rounds)
	{
		$node->safe_psql('postgres', $wake);
		usleep(2_000);
		$first = logged_total($pid) if $i == 50;
	}
	$last = logged_total($pid);
	ok(defined $first && defined $last, "$name: memory logged twice");
	cmp_ok($last - $first, '<', 1024 * 1024,
		"$name: memory flat over " . ($rounds - 50) . " wake-ups ($first -> $last bytes)");
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
	$h->finish;
}

measure('claim_next(wait)', q{SELECT count(*) FROM claim.claim_next('g', wait => '10 min')},
	q{SELECT claim.enqueue('g', '{}', group_key => 'x')});
measure('group_claim(wait)', q{SELECT count(*) FROM claim.group_claim('g', wait => '10 min')},
	q{SELECT claim.enqueue('g', '{}', group_key => 'x')});
measure('lease_acquire(wait)', q{SELECT claim.lease_acquire('L', '1 hour', wait => '10 min') IS NOT NULL},
	q{WITH r AS (SELECT claim.lease_release('L', token) FROM t)
	  UPDATE t SET token = claim.lease_acquire('L', '1 hour') FROM r});

# A dropped queue ends its waiters at once.
$node->safe_psql('postgres', q{SELECT claim.create_queue('dq')});
my ($h, $pid, $out, $err) = waiter(q{SELECT count(*) FROM claim.claim_next('dq', wait => '10 min')});
$node->safe_psql('postgres', q{SELECT claim.drop_queue('dq')});
$h->finish;
like($$err, qr/ERROR:\s+42704: queue "dq" does not exist/,
	'a claim_next waiting on a dropped queue ends with the unknown-queue error');

$node->stop;
done_testing();
