# The coordination service across a crash (immediate stop) and restart:
# a session ends no later than its ttl (the worker ends it, its leadership
# with it), a ttl leader keeps leading until its ttl, every epoch and
# session id granted afterwards is higher than any before, and the watch
# log goes on from the last revision, gap-free. On a hot standby the reads
# and the watch work (a waiting watch sees what replay brings) and the
# writes raise 25006.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('coordination');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'pg_claim'\npg_claim.worker_naptime = 100ms\n");
$node->start;

$node->safe_psql('postgres', 'CREATE EXTENSION pg_claim');
my $s = $node->safe_psql('postgres', q{SELECT claim.session_open('2 seconds', 'runner-a')});
my $e1 = $node->safe_psql('postgres', "SELECT claim.elect('cron/runner', session => $s)");
my $e2 = $node->safe_psql('postgres', q{SELECT claim.elect('cron/ttl', '1 hour', holder => 'host-a')});
my $rev = $node->safe_psql('postgres', q{SELECT claim.revision()});
ok($s > 0 && $e1 > $s && $e2 > $e1, 'session id and epochs before the crash');

$node->stop('immediate');
$node->start;

is($node->safe_psql('postgres', q{SELECT holder FROM claim.leader('cron/ttl')}), 'host-a',
	'a ttl leader still leads after the crash');
# The session's ttl ends within 2 s of its last keepalive; the worker ends it.
ok($node->poll_query_until('postgres',
	q{SELECT count(*) = 0 FROM claim.coord_sessions}), 'the worker ended the expired session');
is($node->safe_psql('postgres', q{SELECT count(*) FROM claim.leader('cron/runner')}), '0',
	'its leadership ended with it');
my $e3 = $node->safe_psql('postgres', q{SELECT claim.elect('cron/runner', '1 minute', holder => 'runner-b')});
cmp_ok($e3, '>', $e2, 'an epoch granted after the crash is higher than every earlier one');
my $s2 = $node->safe_psql('postgres', q{SELECT claim.session_open('1 hour')});
cmp_ok($s2, '>', $e2, 'so is a session id');
is($node->safe_psql('postgres',
	"SELECT string_agg(kind || ' ' || event, ', ' ORDER BY revision) FROM claim.watch('cron/runner', $rev)"),
	'leader expired, leader elected', 'the watch goes on after the crash');
is($node->safe_psql('postgres',
	q{SELECT bool_and(revision > prev) FROM (SELECT revision, lag(revision, 1, 0::bigint) OVER (ORDER BY revision) AS prev FROM claim.watch('')) w}),
	't', 'revisions rise in the log');
# A hot standby.
$node->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('coordination_standby');
$standby->init_from_backup($node, 'b', has_streaming => 1);
$standby->start;
$node->wait_for_catchup($standby);
is($standby->safe_psql('postgres', q{SELECT holder FROM claim.leader('cron/runner')}), 'runner-b',
	'the standby reads the leader');
my $srev = $standby->safe_psql('postgres', q{SELECT claim.revision()});
is($standby->safe_psql('postgres', q{SELECT count(*) FROM claim.sessions WHERE claims IS NULL}),
	$node->safe_psql('postgres', q{SELECT count(*) FROM claim.sessions}),
	'the standby lists the sessions (their claims unknown there)');
is($standby->safe_psql('postgres', q{SELECT claim.barrier('standby', 1, '0')}), '1',
	'a barrier works on the standby');
my ($rc, $out, $err) = $standby->psql('postgres', q{SELECT claim.elect('cron/x', '1 minute')});
like($err, qr/cannot call claim\.elect on a hot standby/, 'elect on the standby: refused');
($rc, $out, $err) = $standby->psql('postgres', q{SELECT claim.session_open()},
	extra_params => ['-v', 'VERBOSITY=verbose']);
like($err, qr/25006/, 'session_open on the standby: 25006');
# a watch waiting on the standby sees a change the primary commits later
my $watch = $standby->background_psql('postgres');
$watch->query_until(qr/started/, "\\echo started\nSELECT name || ' ' || event AS seen FROM claim.watch('cron/', $srev, '20 seconds');\n");
$node->safe_psql('postgres', q{SELECT claim.latch('cron/gate', 1)});
my $seen = $watch->query_safe(q{SELECT 'done'});
like($seen, qr{cron/gate set}, 'a watch waiting on the standby returned the change');
$watch->quit;
$standby->stop;

$node->stop;
done_testing();
