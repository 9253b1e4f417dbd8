# A hot standby: items replicate, claims do not (unlogged); every function
# that claims or writes refuses with SQLSTATE 25006; after promotion every
# item is claimable again under tokens higher than any handed out before.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_claim'\n");
$primary->start;
$primary->safe_psql('postgres', q{
	CREATE EXTENSION pg_claim;
	SELECT claim.create_queue('s', lease => '1 hour');
	SELECT claim.enqueue('s', jsonb_build_object('n', g)) FROM generate_series(1, 3) g;
});
my $held = $primary->safe_psql('postgres', q{SELECT token FROM claim.claim_next('s')});

$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

is($standby->safe_psql('postgres', 'SELECT count(*) FROM claim.items'),
	'3', 'the standby has the items');

sub sqlstate_on_standby
{
	my ($sql) = @_;
	my ($out, $err);
	$standby->psql('postgres', $sql, stdout => \$out, stderr => \$err,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : "no error: $err";
}

is(sqlstate_on_standby(q{SELECT * FROM claim.claim_next('s')}), '25006', 'claim_next refused on the standby');
is(sqlstate_on_standby(q{SELECT claim.enqueue('s', '{}')}), '25006', 'enqueue refused on the standby');
is(sqlstate_on_standby("SELECT claim.complete($held)"), '25006', 'complete refused on the standby');
is(sqlstate_on_standby("SELECT claim.assert_token($held)"), '25006', 'assert_token refused on the standby');

$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()') or die 'no promotion';

my $after = $standby->safe_psql('postgres',
	q{SELECT count(*) || ' ' || min(token) FROM claim.claim_next('s', 10)});
my ($n, $min) = split / /, $after;
is($n, '3', 'after promotion every item is claimable, the one claimed on the old primary too');
cmp_ok($min, '>', $held, 'tokens on the promoted standby are higher than the old primary\'s');

$standby->stop;
$primary->stop;
done_testing();
