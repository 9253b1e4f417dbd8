# Concurrency: 8 sessions drain 100k items, each claiming in one transaction
# and completing in another; every item is completed exactly once.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PgClaimNode;

my $node = pgclaim_node('drain', "max_connections = 30\n");

$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_claim;
	SELECT claim.create_queue('d', lease => '5 minutes');
	CREATE TABLE done (id bigint NOT NULL, token bigint NOT NULL);
	SELECT count(*) FROM claim.enqueue_many('d',
		ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, 100000) g));
});

# pgbench substitutes variables as text (simple query mode).
my $script = "${PostgreSQL::Test::Utils::tmp_check}/drain.sql";
open(my $fh, '>', $script) or die "cannot write $script: $!";
print $fh <<'SQL';
SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg(token), '{}') AS toks FROM claim.claim_next('d', 25) \gset
INSERT INTO done SELECT unnest(':ids'::bigint[]), unnest(':toks'::bigint[]);
SELECT claim.complete_many(':toks'::bigint[]);
SQL
close $fh;

# Enough rounds for everyone: 8 clients x 800 x 25 = 160k > 100k.
$node->command_ok(
	[ 'pgbench', '-n', '-M', 'simple', '-c', '8', '-j', '2', '-t', '800', '-f', $script,
	  'postgres' ],
	'8 concurrent workers drain the queue');

is($node->safe_psql('postgres', 'SELECT count(*) FROM done'),
	'100000', 'every item was delivered');
is($node->safe_psql('postgres', 'SELECT count(DISTINCT id) FROM done'),
	'100000', 'no item was delivered twice');
is($node->safe_psql('postgres', 'SELECT count(DISTINCT token) FROM done'),
	'100000', 'every delivery had its own token');
is($node->safe_psql('postgres', 'SELECT count(*) FROM claim.items'),
	'0', 'every item was completed');
is($node->safe_psql('postgres', 'SELECT count(*) FROM claim.claims'),
	'0', 'no claim is left');

$node->stop;
done_testing();
