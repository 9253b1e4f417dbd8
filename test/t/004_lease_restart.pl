# Leases and guards are durable: a crash (immediate stop) and restart keep a
# granted lease held until its TTL, keep once() keys and finished guards, and
# every token granted afterwards is higher than any granted before.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('leases');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_claim'\n");
$node->start;

$node->safe_psql('postgres', 'CREATE EXTENSION pg_claim');
my $t1 = $node->safe_psql('postgres', q{SELECT claim.lease_acquire('acct:42', '1 hour', 'host-a')});
my $t2 = $node->safe_psql('postgres', q{SELECT claim.lease_acquire('sem', '1 hour', permits => 2)});
is($node->safe_psql('postgres', q{SELECT claim.once('welcome-mail:7')}), 't', 'once: first caller');
my $g = $node->safe_psql('postgres', q{SELECT claim.guard_begin('charge:9', '1 hour')});
$node->safe_psql('postgres', "SELECT claim.guard_finish('charge:9', $g, '{\"ok\": true}')");
ok($t1 > 0 && $t2 > $t1, 'tokens granted before the crash');

$node->stop('immediate');
$node->start;

is($node->safe_psql('postgres', q{SELECT claim.lease_acquire('acct:42', '1 hour', 'host-b') IS NULL}),
	't', 'the mutex is still held after the crash');
my ($assert_rc, $assert_out, $assert_err) =
	$node->psql('postgres', "SELECT claim.lease_assert('acct:42', $t1)");
is($assert_rc, 0, 'the holder\'s token still asserts after the crash');
is($assert_err, '', '... with no error');
my $t3 = $node->safe_psql('postgres', q{SELECT claim.lease_acquire('sem', '1 hour', permits => 2)});
ok(defined $t3 && $t3 ne '', 'the semaphore\'s second permit is free');
cmp_ok($t3, '>', $t2, 'a token granted after the crash is higher than every earlier one');
is($node->safe_psql('postgres', q{SELECT claim.once('welcome-mail:7')}), 'f', 'once: the key survived');
is($node->safe_psql('postgres', q{SELECT claim.guard_result('charge:9')}), '{"ok": true}',
	'the guard result survived');
is($node->safe_psql('postgres', "SELECT claim.lease_release('acct:42', $t1)"), 't',
	'the holder can release after the crash');

$node->stop;
done_testing();
