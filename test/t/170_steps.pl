# Durable steps (docs/steps.md) through crashes: a five-step job whose every
# step writes a row (its effect) and records its checkpoint with
# claim.step_done in the same transaction. For each step k in turn, a worker
# runs steps 1..k, begins step k+1 (its effect written, not committed), and
# dies there: its backend is killed with SIGKILL (the server restarts), its
# client (psql) is killed with SIGKILL (the backend notices and rolls back),
# or its backend is ended with pg_terminate_backend. A second worker then
# claims the job again and runs it to the end.
#
# Checked: every step's effect is there exactly once for every job (none
# lost, none twice), the job completed, its five checkpoints are kept with
# it (the queue retains finished items), and once a job of a queue that
# retains nothing completes, the worker deletes its checkpoints.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('steps');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pg_claim'
max_locks_per_transaction = 256
client_connection_check_interval = '100ms'
restart_after_crash = on
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_claim;
	SELECT claim.create_queue('jobs', lease => '2 seconds', retain => '1 hour');
	SELECT claim.create_queue('plain', lease => '2 seconds');
	CREATE TABLE effects (item bigint, step int);
});

# The psql script of a worker: claim one item of `queue`, run the steps not
# done yet, each in one transaction with its checkpoint; then either die in
# the middle of step crash+1 (sleeping there until killed) or complete.
sub job_script
{
	my ($queue, $crash) = @_;
	my $s = qq{\\set ON_ERROR_STOP on
SET application_name = 'steps_worker';
SELECT id, token FROM claim.claim_next('$queue', wait => '20 s') \\gset
};
	for my $i (1 .. 5)
	{
		if (defined $crash && $i == $crash + 1)
		{
			$s .= qq{BEGIN;
INSERT INTO effects VALUES (:id, $i);
SET application_name = 'steps_victim';
SELECT pg_sleep(60);
};
			return $s;
		}
		$s .= qq{BEGIN;
SELECT claim.step(:token, 's$i') IS NULL AS todo \\gset
\\if :todo
INSERT INTO effects VALUES (:id, $i);
SELECT claim.step_done(:token, 's$i', to_jsonb($i));
\\endif
COMMIT;
};
	}
	if (defined $crash)    # crash after the last step, before complete
	{
		$s .= qq{SET application_name = 'steps_victim';
SELECT pg_sleep(60);
};
		return $s;
	}
	return $s . qq{SELECT claim.complete(:token) AS completed;\n};
}

# Runs a script to its end; returns (rc, stdout, stderr).
sub run_script
{
	my ($script) = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
		'<', \$script, '>', \$out, '2>', \$err);
	return ($ok, $out, $err);
}

my @how = ('SIGKILL of the backend', 'SIGKILL of the client', 'pg_terminate_backend',
	'SIGKILL of the backend', 'SIGKILL of the client');
my @items;
for my $k (1 .. 5)
{
	my $how = $how[ $k - 1 ];
	my $item = $node->safe_psql('postgres',
		qq{SELECT claim.enqueue('jobs', jsonb_build_object('crash_after', $k))});
	push @items, $item;
	my $script = job_script('jobs', $k);
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start([ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
		'<', \$script, '>', \$out, '2>', \$err);
	my $pid;
	my $deadline = time + 30;
	while (time < $deadline)
	{
		$h->pump_nb;    # feeds the script to psql
		$pid = $node->safe_psql('postgres', q{
			SELECT pid FROM pg_stat_activity
			WHERE application_name = 'steps_victim' AND wait_event = 'PgSleep'});
		last if $pid;
		usleep(50_000);
	}
	ok($pid, "job $k: the worker died after step $k, "
		  . ($k < 5 ? 'inside step ' . ($k + 1) : 'before completing'));
	if ($how eq 'SIGKILL of the backend')
	{
		kill 'KILL', $pid;
	}
	elsif ($how eq 'SIGKILL of the client')
	{
		$h->kill_kill;
	}
	else
	{
		$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	}
	$h->finish unless $how eq 'SIGKILL of the client';
	# After a SIGKILL of a backend the server restarts: wait for it.
	$node->poll_query_until('postgres', 'SELECT true');
	is($node->safe_psql('postgres',
		"SELECT count(*) FROM effects WHERE item = $item AND step = " . ($k + 1)),
		'0', "job $k ($how): the effect of the step it died in is not there");

	my ($ok, $rout, $rerr) = run_script(job_script('jobs', undef));
	ok($ok, "job $k: a second worker runs it to the end") or diag($rerr);
	like($rout, qr/^1$/m, "job $k: ... and completes it");
}

is($node->safe_psql('postgres', q{
	SELECT count(*) FROM effects GROUP BY item, step HAVING count(*) <> 1}),
	'', 'no step of any job ran twice');
is($node->safe_psql('postgres', q{SELECT count(*) FROM effects}), '25',
	'every step of every job ran: 5 jobs x 5 steps');
is($node->safe_psql('postgres',
	"SELECT count(*) FROM claim.finished_items WHERE state = 'completed' AND id IN ("
	  . join(',', @items) . ')'), '5', 'the five jobs completed');
is($node->safe_psql('postgres', q{
	SELECT string_agg(id || ':' || n, ',' ORDER BY id) FROM (
		SELECT id, count(*) AS n FROM claim.item_steps WHERE queue = 'jobs' GROUP BY id) x}),
	join(',', map { "$_:5" } @items),
	'each job keeps its five checkpoints with its result (retain)');

# A queue that retains nothing: the checkpoints of a completed job go.
my $plain = $node->safe_psql('postgres', q{SELECT claim.enqueue('plain')});
my ($ok, $rout, $rerr) = run_script(job_script('plain', undef));
ok($ok, 'a job of a queue without retain completes') or diag($rerr);
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM claim.steps WHERE item_id = $plain"),
	'... and the worker deletes its checkpoints');

$node->stop;
done_testing();
