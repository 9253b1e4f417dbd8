# The upgrade path from the released 0.1.0 to the current version.
#
# A database is installed at 0.1.0 and filled: ready, claimed, scheduled and
# dead items, a group, leases and a semaphore held, once keys and a finished
# guard, a row trigger feeding a queue. After ALTER EXTENSION pg_claim UPDATE:
#   - every item, claim, lease and guard is still there, in the same state;
#   - the tokens of live claims and leases still work (complete, lease_assert);
#   - tokens granted afterwards are higher than every earlier one;
#   - the trigger still enqueues;
# and the catalog of the updated extension equals a fresh install's:
# functions with their definitions, settings and privileges, tables, columns,
# indexes, constraints, views, types, sequences and their privileges.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('upgrade');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_claim'\n");
$node->start;

my $default = $node->safe_psql('postgres',
	q{SELECT default_version FROM pg_available_extensions WHERE name = 'pg_claim'});
isnt($default, '0.1.0', "the default version ($default) is newer than the released 0.1.0");

$node->safe_psql('postgres', 'CREATE DATABASE up');
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('up', q{CREATE EXTENSION pg_claim VERSION '0.1.0'});
is($node->safe_psql('up', q{SELECT extversion FROM pg_extension WHERE extname = 'pg_claim'}),
	'0.1.0', 'installed at 0.1.0');

# --- fill it --------------------------------------------------------------------
$node->safe_psql('up', q{
	SELECT claim.create_queue('jobs', lease => '1 hour');
	SELECT claim.create_queue('fragile', lease => '1 hour', max_attempts => 1);
	SELECT claim.enqueue('jobs', jsonb_build_object('n', g)) FROM generate_series(1, 10) g;
	SELECT claim.enqueue('jobs', '{"later": true}', run_at => clock_timestamp() + interval '1 day');
	SELECT claim.enqueue('jobs', '{"g": 1}', group_key => 'tenant-1');
	SELECT claim.enqueue('jobs', '{"g": 2}', group_key => 'tenant-1');
	SELECT claim.enqueue('fragile', '{"doomed": true}');
	CREATE TABLE orders (id bigint PRIMARY KEY, customer text);
	CREATE TRIGGER orders_enqueue AFTER INSERT ON orders
	    FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('jobs');
	INSERT INTO orders VALUES (1, 'a');
});
my $claimed = $node->safe_psql('up',
	q{SELECT string_agg(token::text, ',' ORDER BY token) FROM claim.claim_next('jobs', n => 3)});
my @tokens = split /,/, $claimed;
is(scalar @tokens, 3, 'three items claimed before the update');
my $dead_token = $node->safe_psql('up', q{SELECT token FROM claim.claim_next('fragile')});
$node->safe_psql('up', "SELECT claim.fail($dead_token, 'broken before the update')");
my $lease = $node->safe_psql('up', q{SELECT claim.lease_acquire('acct:1', '1 hour', 'host-a')});
my $sem = $node->safe_psql('up', q{SELECT claim.lease_acquire('pool', '1 hour', permits => 2)});
$node->safe_psql('up', q{SELECT claim.once('mail:1')});
my $guard = $node->safe_psql('up', q{SELECT claim.guard_begin('charge:1', '1 hour')});
$node->safe_psql('up', qq{SELECT claim.guard_finish('charge:1', $guard, '{"ok": true}')});

my $census_sql = q{
	SELECT string_agg(format('%s/%s/%s/%s', q.name, i.state, i.run_at IS NULL,
	                         c.item_id IS NOT NULL), ' ' ORDER BY i.id)
	FROM claim.items i JOIN claim.queues q USING (queue_id)
	LEFT JOIN claim.claims c ON c.item_id = i.id};
my $census_before = $node->safe_psql('up', $census_sql);
my $max_token_before = $node->safe_psql('up', q{SELECT max(t) FROM (
	SELECT token AS t FROM claim.claims UNION ALL
	SELECT token FROM claim.lease_holders) s});

# --- update -----------------------------------------------------------------------
$node->safe_psql('up', 'ALTER EXTENSION pg_claim UPDATE');
is($node->safe_psql('up', q{SELECT extversion FROM pg_extension WHERE extname = 'pg_claim'}),
	$default, "updated to $default");

is($node->safe_psql('up', $census_sql), $census_before,
	'every item kept its queue, state, schedule and claim');
is($node->safe_psql('up', q{SELECT count(*) FROM claim.dead_items WHERE last_error LIKE 'broken%'}),
	'1', 'the dead item and its error survived');
is($node->safe_psql('up', q{SELECT claim.lease_acquire('acct:1', '1 hour', 'host-b') IS NULL}),
	't', 'the mutex is still held');
my ($rc, $out, $err) = $node->psql('up', "SELECT claim.lease_assert('acct:1', $lease)");
is($rc, 0, "the lease holder's token still asserts ($err)");
is($node->safe_psql('up', q{SELECT claim.once('mail:1')}), 'f', 'the once key survived');
is($node->safe_psql('up', q{SELECT claim.guard_result('charge:1')}), '{"ok": true}',
	'the finished guard survived');

is($node->safe_psql('up', "SELECT claim.complete($tokens[0])"), '1',
	'a claim taken before the update completes after it');
is($node->safe_psql('up', "SELECT claim.complete_many(ARRAY[$tokens[1], $tokens[2]]::bigint[])"), '2',
	'... and so do the others, in the array form');
my $new_token = $node->safe_psql('up', q{SELECT token FROM claim.claim_next('jobs')});
cmp_ok($new_token, '>', $max_token_before, 'a token granted after the update is higher than every earlier one');
my $new_lease = $node->safe_psql('up', q{SELECT claim.lease_acquire('pool', '1 hour', permits => 2)});
cmp_ok($new_lease, '>', $max_token_before, '... for leases too');
is($node->safe_psql('up', "SELECT claim.lease_release('acct:1', $lease)"), 't',
	'the old lease token releases');

my $items_before = $node->safe_psql('up', q{SELECT count(*) FROM claim.items});
$node->safe_psql('up', q{INSERT INTO orders VALUES (2, 'b')});
is($node->safe_psql('up', q{SELECT count(*) FROM claim.items}), $items_before + 1,
	'the trigger created under 0.1.0 still enqueues');

($rc, $out, $err) = $node->psql('up', 'SELECT claim._lock_item(1)');
like($err, qr/function claim\._lock_item\(integer\) does not exist/, 'claim._lock_item is gone');

# --- the catalog of the updated extension equals a fresh install's ----------------
$node->safe_psql('fresh', 'CREATE EXTENSION pg_claim');

# One line per object of the extension, described by name, never by OID.
my $catalog_sql = q{
WITH ext AS (SELECT oid FROM pg_extension WHERE extname = 'pg_claim'),
members AS (
	SELECT d.classid, d.objid FROM pg_depend d, ext
	WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'),
lines AS (
	SELECT 'function ' || p.oid::regprocedure::text || E'\n' || pg_get_functiondef(p.oid)
	       || E'\nacl ' || coalesce(p.proacl::text, '-') AS l
	FROM members m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
	UNION ALL
	SELECT format('relation %s kind %s persistence %s acl %s options %s', c.oid::regclass,
	              c.relkind, c.relpersistence, coalesce(c.relacl::text, '-'),
	              coalesce(c.reloptions::text, '-'))
	FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
	UNION ALL
	SELECT format('column %s.%s %s notnull %s default %s collation %s identity %s generated %s compression %s',
	              c.oid::regclass, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
	              coalesce(pg_get_expr(ad.adbin, ad.adrelid), '-'),
	              coalesce(co.collname, '-'), a.attidentity, a.attgenerated, a.attcompression)
	FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
	JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
	LEFT JOIN pg_attrdef ad ON ad.adrelid = c.oid AND ad.adnum = a.attnum
	LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 0
	WHERE c.relkind IN ('r', 'p', 'u', 'v', 'm', 'c', 'f')
	UNION ALL
	SELECT 'index ' || pg_get_indexdef(i.indexrelid)
	FROM members m JOIN pg_index i ON m.classid = 'pg_class'::regclass AND i.indrelid = m.objid
	UNION ALL
	SELECT format('constraint %s on %s: %s', con.conname, con.conrelid::regclass,
	              pg_get_constraintdef(con.oid))
	FROM members m JOIN pg_constraint con ON m.classid = 'pg_class'::regclass AND con.conrelid = m.objid
	UNION ALL
	SELECT format('view %s: %s', c.oid::regclass, pg_get_viewdef(c.oid))
	FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
	WHERE c.relkind IN ('v', 'm')
	UNION ALL
	SELECT format('sequence %s %s start %s inc %s min %s max %s cycle %s', s.seqrelid::regclass,
	              format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin, s.seqmax,
	              s.seqcycle)
	FROM members m JOIN pg_sequence s ON m.classid = 'pg_class'::regclass AND s.seqrelid = m.objid
	UNION ALL
	SELECT format('type %s kind %s', t.oid::regtype, t.typtype)
	FROM members m JOIN pg_type t ON m.classid = 'pg_type'::regclass AND t.oid = m.objid
	UNION ALL
	SELECT format('trigger %s on %s: %s', tg.tgname, tg.tgrelid::regclass, pg_get_triggerdef(tg.oid))
	FROM members m JOIN pg_trigger tg ON m.classid = 'pg_class'::regclass AND tg.tgrelid = m.objid
	WHERE NOT tg.tgisinternal
	UNION ALL
	SELECT format('other %s %s', m.classid::regclass, pg_describe_object(m.classid, m.objid, 0))
	FROM members m
	WHERE m.classid NOT IN ('pg_proc'::regclass, 'pg_class'::regclass, 'pg_type'::regclass)
	UNION ALL
	SELECT format('schema %s acl %s', n.nspname, coalesce(n.nspacl::text, '-'))
	FROM pg_namespace n WHERE n.nspname = 'claim'
	UNION ALL
	SELECT format('config table %s filter %s', cfg::regclass, coalesce(cond, '-'))
	FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS u(cfg, cond)
	WHERE e.extname = 'pg_claim'
)
SELECT string_agg(l, E'\n' ORDER BY l) FROM lines};

my $updated = $node->safe_psql('up', $catalog_sql);
my $fresh = $node->safe_psql('fresh', $catalog_sql);
cmp_ok(length($fresh), '>', 1000, 'the catalog description is not empty');
like($fresh, qr/^function claim\.complete\(bigint[,)]/m, '... and lists the functions');
if ($updated eq $fresh)
{
	pass('the updated extension\'s catalog equals a fresh install\'s');
}
else
{
	my %u = map { $_ => 1 } split /\n(?=function |relation |column |index |constraint |view |sequence |type |trigger |other |schema |config )/, $updated;
	my %f = map { $_ => 1 } split /\n(?=function |relation |column |index |constraint |view |sequence |type |trigger |other |schema |config )/, $fresh;
	diag("only after the update: $_") for grep { !$f{$_} } sort keys %u;
	diag("only in a fresh install: $_") for grep { !$u{$_} } sort keys %f;
	fail('the updated extension\'s catalog equals a fresh install\'s');
}

$node->stop;
done_testing();
