# claim.claims takes a row per claim and gives it back at completion. The
# room of completed claims is used again without VACUUM (docs/claim-core.md,
# "The rows of claim.claims"): pruned, a page takes new claims until its line
# pointers run out, about 290 claims a page, where rows that were never
# reused would fill a page every 80 or so claims. Autovacuum is off here, so
# only that reuse can keep the table small.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PgClaimNode;

my $jobs = 6000;
my $node = pgclaim_node('reuse', "autovacuum = off\n");
$node->safe_psql('postgres', qq{
	CREATE EXTENSION pg_claim;
	SELECT claim.create_queue('q');
	SELECT claim.enqueue_many('q', array_agg(jsonb_build_object('n', g))) FROM generate_series(1, $jobs) g;
});

# One session, each claim and each completion a transaction of its own
# (autocommit), as a worker runs them.
my $script = "SELECT claim.complete(token) FROM claim.claim_next('q');\n" x $jobs;
my ($out, $err);
$node->psql('postgres', $script, stdout => \$out, stderr => \$err);
is($err, '', 'every claim and completion ran without an error');
is($node->safe_psql('postgres', q{SELECT count(*) FROM claim.items}), '0', "all $jobs jobs were done");

# Reused: 6000 claims in about 21 pages; never reused: about 75.
my $pages = $node->safe_psql('postgres',
	q{SELECT pg_relation_size('claim.claims') / current_setting('block_size')::int});
cmp_ok($pages, '<=', 30, "claim.claims reuses its pages: $jobs claims and completions in $pages pages");

$node->stop;
done_testing();
