# Cache invalidations under load: producers (a row-level trigger and
# enqueue) and workers (claim_next, complete) run while other sessions make
# PostgreSQL invalidate its cached descriptions of claim.items over and over
# (ANALYZE, and an index created and dropped). The backends' own caches
# (index descriptions, predicates, queue ids, relation OIDs) must follow
# without an error and without losing an item.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PgClaimNode;

my $node = pgclaim_node('inval', "max_connections = 30\n");

$node->safe_psql('postgres', q{
	CREATE EXTENSION pg_claim;
	SELECT claim.create_queue('changes');
	SELECT claim.create_queue('jobs');
	CREATE TABLE orders (id bigserial PRIMARY KEY, customer int, note text);
	CREATE TRIGGER orders_changes AFTER INSERT ON orders
		FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('changes', 'customer');
	CREATE TABLE done (token bigint);
});

my $dir = $PostgreSQL::Test::Utils::tmp_check;
my %scripts = (
	'produce.sql' => "\\set c random(1, 1000)\n"
	  . "INSERT INTO orders (customer, note) VALUES (:c, 'n');\n"
	  . "SELECT claim.enqueue('jobs', '{}');\n",
	'work.sql' => "SELECT coalesce(max(token), 0) AS tok FROM claim.claim_next('jobs') \\gset\n"
	  . "SELECT claim.complete(:tok::bigint) WHERE :tok::bigint > 0;\n"
	  . "INSERT INTO done SELECT :tok::bigint WHERE :tok::bigint > 0;\n",
	# Two sessions may race to create or drop the index: that error is
	# theirs, not the producers'.
	'inval.sql' => "ANALYZE claim.items;\n"
	  . "DO \$\$ BEGIN CREATE INDEX IF NOT EXISTS regress_extra ON claim.items ((payload->>'op')); "
	  . "EXCEPTION WHEN unique_violation OR duplicate_table THEN NULL; END \$\$;\n"
	  . "DROP INDEX IF EXISTS claim.regress_extra;\n",
);
for my $name (keys %scripts) {
	open(my $fh, '>', "$dir/$name") or die "cannot write $dir/$name: $!";
	print $fh $scripts{$name};
	close $fh;
}

my @cmd = (
	'pgbench', '-n', '-M', 'prepared', '-c', '8', '-j', '2', '-T', '8',
	'-f', "$dir/produce.sql\@10", '-f', "$dir/work.sql\@5", '-f', "$dir/inval.sql\@1",
	'-h', $node->host, '-p', $node->port, 'postgres');
my $out = '';
my $err = '';
my $ok = IPC::Run::run(\@cmd, '>', \$out, '2>', \$err);
ok($ok, 'producers, workers and invalidations ran without an error')
  or diag("pgbench stderr:\n$err");

is($node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM orders) =
	       (SELECT count(*) FROM claim.items i JOIN claim.queues q USING (queue_id)
	        WHERE q.name = 'changes')}),
	't', 'every inserted row has its item');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM claim.items i
	WHERE NOT EXISTS (SELECT 1 FROM claim.queues q WHERE q.queue_id = i.queue_id)}),
	'0', 'no item without its queue');
is($node->safe_psql('postgres', 'SELECT count(*) - count(DISTINCT token) FROM done'),
	'0', 'no token completed twice');
unlike(slurp_file($node->logfile), qr/wrong number of index expressions|TRAP|PANIC/,
	'the server log has no internal error');

$node->stop;
done_testing();
