# The extension scripts and the functions under attack by an unprivileged
# role that plants objects before CREATE EXTENSION and ALTER EXTENSION
# UPDATE, in the classes of PostgreSQL's extension CVEs:
#   CVE-2018-1058   functions and operators on the search_path that shadow
#                   built-ins (public writable, a schema first on the path);
#   CVE-2020-14350  objects an extension script would adopt or call
#                   (CREATE OR REPLACE, IF NOT EXISTS, unqualified names);
#   CVE-2022-2625   objects of the extension's own names planted in its
#                   schema before the script runs;
#   CVE-2023-39417  @extschema@/@extowner@ substituted inside quotes.
# Every planted function records in a log table and a sequence (the sequence
# survives a rollback) and tries to make the attacker a superuser. After
# each step: nothing planted ran, the attacker is no superuser, and no
# extension object is owned or replaceable by the attacker.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use PgClaimNode;
use Time::HiRes qw(usleep);

my $node = pgclaim_node('script_attacks', qq{pg_claim.worker_naptime = '100ms'
pg_claim.lease_purge_after = '1s'
});

my $installer = $node->safe_psql('postgres', 'SELECT current_user');
my $hostile_path = 'evil, pg_catalog, public';

# ----------------------------------------------------------------- helpers

# SQL run by a trusted session: pinned search_path first.
sub clean
{
	my ($db, $sql) = @_;
	return $node->safe_psql($db, "SET search_path = pg_catalog, pg_temp;\n$sql");
}

# psql as the attacker (a plain login role); returns (exit code, stdout, stderr).
sub as_attacker
{
	my ($db, $sql) = @_;
	my ($ret, $out, $err) =
	  $node->psql($db, $sql, extra_params => [ '-U', 'attacker' ]);
	return ($ret, $out, $err);
}

# Built-ins the scripts and the C code could reach by name, shadowed by
# functions of the same signature: [name, arguments, result]; each calls
# pg_catalog's function of that name with its arguments.
my @shadow_functions = (
	[ 'clock_timestamp', '', 'timestamptz' ],
	[ 'now', '', 'timestamptz' ],
	[ 'statement_timestamp', '', 'timestamptz' ],
	[ 'transaction_timestamp', '', 'timestamptz' ],
	[ 'nextval', 'regclass', 'bigint' ],
	[ 'currval', 'regclass', 'bigint' ],
	[ 'setval', 'regclass, bigint', 'bigint' ],
	[ 'lower', 'text', 'text' ],
	[ 'upper', 'text', 'text' ],
	[ 'length', 'text', 'integer' ],
	[ 'octet_length', 'text', 'integer' ],
	[ 'md5', 'text', 'text' ],
	[ 'hashtext', 'text', 'integer' ],
	[ 'format', 'text', 'text' ],
	[ 'format', 'text, text', 'text' ],
	[ 'format', 'text, text, text', 'text' ],
	[ 'quote_ident', 'text', 'text' ],
	[ 'quote_literal', 'text', 'text' ],
	[ 'quote_nullable', 'text', 'text' ],
	[ 'concat', 'text, text', 'text' ],
	[ 'to_jsonb', 'anyelement', 'jsonb' ],
	[ 'to_json', 'anyelement', 'json' ],
	[ 'jsonb_build_object', 'text, text', 'jsonb' ],
	[ 'jsonb_build_object', 'text, jsonb', 'jsonb' ],
	[ 'jsonb_typeof', 'jsonb', 'text' ],
	[ 'jsonb_set', 'jsonb, text[], jsonb', 'jsonb' ],
	[ 'array_length', 'anyarray, integer', 'integer' ],
	[ 'cardinality', 'anyarray', 'integer' ],
	[ 'array_to_string', 'anyarray, text', 'text' ],
	[ 'pg_advisory_xact_lock', 'bigint', 'void' ],
	[ 'pg_try_advisory_xact_lock', 'bigint', 'boolean' ],
	[ 'pg_advisory_xact_lock', 'integer, integer', 'void' ],
	[ 'pg_notify', 'text, text', 'void' ],
	[ 'set_config', 'text, text, boolean', 'text' ],
	[ 'current_setting', 'text', 'text' ],
	[ 'txid_current', '', 'bigint' ],
	[ 'pg_current_xact_id', '', 'xid8' ],
	[ 'random', '', 'double precision' ],
	[ 'pg_sleep', 'double precision', 'void' ],
	[ 'unnest', 'anyarray', 'SETOF anyelement' ],
	[ 'generate_series', 'integer, integer', 'SETOF integer' ],);

# Operators: [operator, left type or undef for prefix, right type, result].
my @shadow_operators = (
	[ '=', 'text', 'text', 'boolean' ],
	[ '<>', 'text', 'text', 'boolean' ],
	[ '=', 'bigint', 'bigint', 'boolean' ],
	[ '=', 'integer', 'integer', 'boolean' ],
	[ '=', 'bigint', 'integer', 'boolean' ],
	[ '=', 'integer', 'bigint', 'boolean' ],
	[ '=', 'oid', 'oid', 'boolean' ],
	[ '=', 'name', 'name', 'boolean' ],
	[ '=', '"char"', '"char"', 'boolean' ],
	[ '=', 'jsonb', 'jsonb', 'boolean' ],
	[ '<', 'bigint', 'bigint', 'boolean' ],
	[ '>', 'bigint', 'bigint', 'boolean' ],
	[ '<', 'timestamptz', 'timestamptz', 'boolean' ],
	[ '<=', 'timestamptz', 'timestamptz', 'boolean' ],
	[ '>', 'timestamptz', 'timestamptz', 'boolean' ],
	[ '>=', 'timestamptz', 'timestamptz', 'boolean' ],
	[ '<=', 'interval', 'interval', 'boolean' ],
	[ '>', 'interval', 'interval', 'boolean' ],
	[ '+', 'timestamptz', 'interval', 'timestamptz' ],
	[ '-', 'timestamptz', 'interval', 'timestamptz' ],
	[ '+', 'integer', 'integer', 'integer' ],
	[ '+', 'bigint', 'bigint', 'bigint' ],
	[ '-', undef, 'integer', 'integer' ],
	[ '||', 'text', 'text', 'text' ],
	[ '->', 'jsonb', 'text', 'jsonb' ],
	[ '->>', 'jsonb', 'text', 'text' ],
	[ '@>', 'jsonb', 'jsonb', 'boolean' ],
	[ '@>', 'anyarray', 'anyarray', 'boolean' ],
	[ '=', 'anyarray', 'anyarray', 'boolean' ],);

# Relations of the extension's names, for unqualified references.
my @shadow_relations = qw(items claims queues lease_holders lease_released
  once_keys guards finished_items queue_stats);

# The attacker's log: a table and a sequence anyone may write (a planted
# function runs with the privileges of whoever calls it).
sub setup_spy
{
	my ($db) = @_;
	$node->safe_psql($db, q{
		DO $$ BEGIN
			IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'attacker') THEN
				CREATE ROLE attacker LOGIN;
			END IF;
		END $$;
		CREATE SCHEMA spy AUTHORIZATION attacker;
	});
	my ($ret, $out, $err) = as_attacker($db, q{
		CREATE TABLE spy.log (what text, by_role name, at timestamptz DEFAULT pg_catalog.clock_timestamp());
		CREATE SEQUENCE spy.hits;
		GRANT USAGE ON SCHEMA spy TO PUBLIC;
		GRANT INSERT ON spy.log TO PUBLIC;
		GRANT USAGE, UPDATE ON SEQUENCE spy.hits TO PUBLIC;
		CREATE FUNCTION spy.hit(what text) RETURNS void LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM pg_catalog.nextval('spy.hits');
			RAISE WARNING 'SPY: % ran as %', what, current_user;
			INSERT INTO spy.log (what, by_role) VALUES (what, current_user);
			BEGIN
				EXECUTE 'ALTER ROLE attacker SUPERUSER';
			EXCEPTION WHEN OTHERS THEN
				NULL;
			END;
		END $$;
		CREATE FUNCTION spy.trg() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM spy.hit('a trigger of the attacker');
			RETURN NEW;
		END $$;
	});
	die "spy set-up failed: $err" if $ret != 0;
}

# The objects the attacker plants in a schema: shadowing functions,
# operators and aggregates, and (unless $shadows_only) relations and
# sequences of the extension's names.
sub plant_sql
{
	my ($s, $shadows_only) = @_;
	my $sql = '';
	my $n = 0;
	for my $f (@shadow_functions)
	{
		my ($name, $args, $ret) = @$f;
		my $nargs = $args eq '' ? 0 : scalar(split /,/, $args);
		my $call = "pg_catalog.$name(" . join(', ', map { "\$$_" } 1 .. $nargs) . ')';
		my $tag = "$s.$name($args)";
		my $body;
		if ($ret =~ /^SETOF/) { $body = "RETURN QUERY SELECT $call;"; }
		elsif ($ret eq 'void') { $body = "PERFORM $call;"; }
		else { $body = "RETURN $call;"; }
		$sql .= "CREATE FUNCTION $s.$name($args) RETURNS $ret LANGUAGE plpgsql AS \$f\$\n"
		  . "BEGIN PERFORM spy.hit('$tag'); $body END \$f\$;\n";
	}
	for my $o (@shadow_operators)
	{
		my ($op, $left, $right, $ret) = @$o;
		$n++;
		my $fn = "$s.op_$n";
		my $tag = "$s.operator $op (" . ($left // 'NONE') . ", $right)";
		if (defined $left)
		{
			$sql .= "CREATE FUNCTION $fn($left, $right) RETURNS $ret LANGUAGE plpgsql AS \$f\$\n"
			  . "BEGIN PERFORM spy.hit('$tag'); RETURN \$1 OPERATOR(pg_catalog.$op) \$2; END \$f\$;\n"
			  . "CREATE OPERATOR $s.$op (LEFTARG = $left, RIGHTARG = $right, FUNCTION = $fn);\n";
		}
		else
		{
			$sql .= "CREATE FUNCTION $fn($right) RETURNS $ret LANGUAGE plpgsql AS \$f\$\n"
			  . "BEGIN PERFORM spy.hit('$tag'); RETURN OPERATOR(pg_catalog.$op) \$1; END \$f\$;\n"
			  . "CREATE OPERATOR $s.$op (RIGHTARG = $right, FUNCTION = $fn);\n";
		}
	}
	$sql .= qq{
CREATE FUNCTION $s.agg_count(bigint) RETURNS bigint LANGUAGE plpgsql AS \$f\$
BEGIN PERFORM spy.hit('$s.count(*)'); RETURN \$1 OPERATOR(pg_catalog.+) 1; END \$f\$;
CREATE AGGREGATE $s.count(*) (SFUNC = $s.agg_count, STYPE = bigint, INITCOND = '0');
CREATE FUNCTION $s.agg_max(bigint, bigint) RETURNS bigint LANGUAGE plpgsql AS \$f\$
BEGIN PERFORM spy.hit('$s.max(bigint)'); RETURN pg_catalog.int8larger(\$1, \$2); END \$f\$;
CREATE AGGREGATE $s.max(bigint) (SFUNC = $s.agg_max, STYPE = bigint);
CREATE FUNCTION $s.agg_string(text, text, text) RETURNS text LANGUAGE plpgsql AS \$f\$
BEGIN PERFORM spy.hit('$s.string_agg(text, text)'); RETURN pg_catalog.concat(\$1, \$3, \$2); END \$f\$;
CREATE AGGREGATE $s.string_agg(text, text) (SFUNC = $s.agg_string, STYPE = text);
CREATE FUNCTION $s.rel_hit(what text) RETURNS SETOF record LANGUAGE plpgsql AS \$f\$
BEGIN PERFORM spy.hit(what); END \$f\$;
};
	$sql .= "GRANT USAGE ON SCHEMA $s TO PUBLIC;\n" unless $s eq 'public';
	return $sql if $shadows_only;
	$sql .= qq{
CREATE SEQUENCE $s.token_seq;
CREATE SEQUENCE $s.item_id_seq;
GRANT USAGE, SELECT, UPDATE ON SEQUENCE $s.token_seq, $s.item_id_seq TO PUBLIC;
};
	for my $r (@shadow_relations)
	{
		$sql .= "CREATE VIEW $s.$r AS SELECT * FROM $s.rel_hit('relation $s.$r') AS t(id bigint);\n"
		  . "GRANT ALL ON $s.$r TO PUBLIC;\n";
	}
	return $sql;
}

sub plant
{
	my ($db, $schema, $shadows_only) = @_;
	my ($ret, $out, $err) = as_attacker($db, plant_sql($schema, $shadows_only));
	is($ret, 0, "$db: the attacker planted shadowing objects in $schema")
	  or diag($err);
}

# The usual hostile set-up: public writable (PostgreSQL before 15), and a
# schema of the attacker's first on the search_path of every session of
# the database (the installer's, the workers').
sub hostile_database
{
	my ($db) = @_;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	setup_spy($db);
	$node->safe_psql($db, qq{
		GRANT CREATE ON SCHEMA public TO PUBLIC;
		CREATE SCHEMA evil AUTHORIZATION attacker;
		ALTER DATABASE $db SET search_path = $hostile_path;
	});
	plant($db, 'public');
	plant($db, 'evil');
}

# Nothing planted ran: the log is empty, the sequence untouched (it also
# counts calls whose transaction rolled back), the attacker no superuser.
sub nothing_ran
{
	my ($db, $what, $stderr) = @_;
	is( clean($db,
			q{SELECT coalesce(string_agg(what || ' as ' || by_role, '; '), 'none') FROM spy.log}),
		'none', "$db: no planted object ran during $what");
	is( clean($db, q{
			SELECT coalesce(string_agg(schemaname || '.' || sequencename, ', '), 'none')
			FROM pg_sequences WHERE sequenceowner = 'attacker' AND last_value IS NOT NULL}),
		'none', "$db: no planted object or sequence was used during $what, not even in a rolled-back transaction");
	is(clean($db, q{SELECT rolsuper FROM pg_roles WHERE rolname = 'attacker'}),
		'f', "$db: the attacker is no superuser after $what");
	unlike($stderr // '', qr/SPY:/, "$db: no planted object raised its warning during $what");
}

# Every extension object and everything in schema claim belongs to the
# installer; the attacker can neither write the tables nor create, replace,
# drop or rename anything there.
sub owned_by_installer
{
	my ($db, $what) = @_;
	cmp_ok(
		clean($db, q{
			SELECT count(*) FROM pg_depend d
			WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
			  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_claim')}),
		'>', 20, "$db: the extension has its members ($what)");
	is( clean($db, q{
			WITH o(kind, name, owner) AS (
				SELECT 'schema', nspname::text, nspowner FROM pg_namespace WHERE nspname = 'claim'
				UNION ALL SELECT 'relation', relname::text, relowner FROM pg_class WHERE relnamespace = 'claim'::regnamespace
				UNION ALL SELECT 'function', oid::regprocedure::text, proowner FROM pg_proc WHERE pronamespace = 'claim'::regnamespace
				UNION ALL SELECT 'type', typname::text, typowner FROM pg_type WHERE typnamespace = 'claim'::regnamespace
				UNION ALL SELECT 'operator', oprname::text, oprowner FROM pg_operator WHERE oprnamespace = 'claim'::regnamespace
				UNION ALL SELECT 'opfamily', opfname::text, opfowner FROM pg_opfamily WHERE opfnamespace = 'claim'::regnamespace
				UNION ALL SELECT 'collation', collname::text, collowner FROM pg_collation WHERE collnamespace = 'claim'::regnamespace
				UNION ALL SELECT 'conversion', conname::text, conowner FROM pg_conversion WHERE connamespace = 'claim'::regnamespace)
			SELECT coalesce(string_agg(kind || ' ' || name || ' owned by ' || owner::regrole::text, '; '), 'none')
			FROM o WHERE owner <> (SELECT oid FROM pg_roles WHERE rolname = current_user)}),
		'none', "$db: the schema and every object in it belong to the installer ($what)");
	is( clean($db, q{
			SELECT coalesce(string_agg(a.grantee::regrole::text, ', '), 'none')
			FROM pg_namespace n, aclexplode(n.nspacl) a
			WHERE n.nspname = 'claim' AND a.privilege_type = 'CREATE' AND a.grantee <> n.nspowner}),
		'none', "$db: nobody else may create in schema claim ($what)");
	is( clean($db, q{
			SELECT coalesce(string_agg(c.oid::regclass::text, ', '), 'none')
			FROM pg_class c
			WHERE c.relnamespace = 'claim'::regnamespace
			  AND CASE WHEN c.relkind IN ('r', 'p', 'v', 'm', 'f')
			      THEN has_table_privilege('attacker', c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER') END}),
		'none', "$db: the attacker may not write any table of the extension ($what)");
	is( clean($db, q{
			SELECT coalesce(string_agg(c.oid::regclass::text, ', '), 'none')
			FROM pg_class c
			WHERE c.relnamespace = 'claim'::regnamespace
			  AND CASE WHEN c.relkind = 'S' THEN has_sequence_privilege('attacker', c.oid, 'UPDATE') END}),
		'none', "$db: the attacker may not set any sequence of the extension ($what)");

	my @tries = (
		[ 'replace claim.complete(bigint)',
		  q{CREATE OR REPLACE FUNCTION claim.complete(token bigint) RETURNS integer LANGUAGE sql AS 'SELECT 1'} ],
		[ 'add an overload claim.complete(integer)',
		  q{CREATE FUNCTION claim.complete(token integer) RETURNS integer LANGUAGE sql AS 'SELECT 1'} ],
		[ 'add an operator to schema claim',
		  q{CREATE OPERATOR claim.= (LEFTARG = text, RIGHTARG = text, FUNCTION = pg_catalog.texteq)} ],
		[ 'create a table in schema claim', q{CREATE TABLE claim.planted (x int)} ],
		[ 'drop claim.enqueue_trigger()', q{DROP FUNCTION claim.enqueue_trigger()} ],
		[ 'take over claim.enqueue_trigger()', q{ALTER FUNCTION claim.enqueue_trigger() OWNER TO attacker} ],
		[ 'rename schema claim', q{ALTER SCHEMA claim RENAME TO claim_old} ],
		[ 'rename claim.items', q{ALTER TABLE claim.items RENAME TO items_old} ],
		[ 'add a trigger to claim.items',
		  q{CREATE TRIGGER t BEFORE INSERT ON claim.items FOR EACH ROW EXECUTE FUNCTION spy.trg()} ],
		[ 'write claim.queues', q{INSERT INTO claim.queues (name, lease, max_attempts, backoff) VALUES ('x', '1 s', 1, '1 s')} ],
		[ 'change payloads', q{UPDATE claim.items SET payload = '{}'} ],
		[ 'reset the token sequence', q{SELECT pg_catalog.setval('claim.token_seq', 1)} ],);
	for my $t (@tries)
	{
		my ($name, $sql) = @$t;
		my ($ret, $out, $err) = as_attacker($db, $sql);
		isnt($ret, 0, "$db: the attacker cannot $name ($what)");
		like($err, qr/permission denied|must be owner|does not exist/,
			"$db: ... refused for lack of privilege ($what)")
		  or diag($err);
	}
}

# Every function of the API under the hostile search_path, as the
# installer (a superuser): all work, and nothing planted runs.
sub exercise_api
{
	my ($db) = @_;
	my ($ret, $out, $err) = $node->psql($db, qq{
SET search_path = $hostile_path;
SET client_min_messages = warning;
SELECT claim.create_queue('q', lease => '1 minute', max_attempts => 2, backoff => '0');
SELECT claim.create_queue('g');
SELECT claim.create_queue('empty');
SELECT claim.enqueue('q', '{"n": 1}') IS NOT NULL;
SELECT claim.enqueue('q', '{"n": 2}', dedup_key => 'd1') AS d1 \\gset
SELECT claim.enqueue('q', '{"n": 2}', dedup_key => 'd1') AS d1b \\gset
SELECT claim.enqueue('q', '{"n": 5}', run_at => pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) interval '1 second', priority => 5) IS NOT NULL;
SELECT claim.enqueue_many('g', ARRAY['{"n": 3}', '{"n": 4}', '{"n": 6}']::jsonb[], ARRAY['k', 'k', 'm']) IS NOT NULL;
SELECT token AS t1 FROM claim.claim_next('q', n => 1, lease => '1 minute', worker => 'w') \\gset
SELECT claim.extend(:t1, '2 minutes') IS NOT NULL;
SELECT claim.assert_token(:t1);
SELECT claim.complete(:t1);
SELECT token AS t2 FROM claim.claim_next('q') \\gset
SELECT claim.fail(:t2, 'boom', '0');
SELECT token AS t3 FROM claim.claim_next('q') \\gset
SELECT claim.release(:t3);
SELECT token AS t4 FROM claim.claim_next('q') \\gset
SELECT claim.fail(:t4, 'boom again', '0');
SELECT claim.redrive('q');
SELECT token AS t5 FROM claim.claim_next('q') \\gset
SELECT claim.complete_many(ARRAY[:t5]::bigint[]);
SELECT claim.complete_many(ARRAY[:t5, 0]::bigint[], skip_stale => true);
SELECT token AS t6 FROM claim.group_claim('g', max_items => 10, worker => 'w') LIMIT 1 \\gset
SELECT claim.complete(:t6);
SELECT token IS NULL FROM claim.claim_next('empty', wait => '150 ms');
SELECT claim.lease_acquire('L', '1 minute', holder => 'h') AS l1 \\gset
SELECT claim.lease_renew('L', :l1, '2 minutes') IS NOT NULL;
SELECT claim.lease_assert('L', :l1);
SELECT claim.lease_release('L', :l1);
SELECT claim.lease_acquire('S', '1 minute', permits => 2) IS NOT NULL;
SELECT claim.lease_acquire('S', '1 minute', permits => 2) IS NOT NULL;
SELECT claim.lease_acquire('S', '1 minute', permits => 2, wait => '150 ms') IS NULL;
SELECT claim.lease_acquire('short', '200 ms') IS NOT NULL;
SELECT claim.lease_purge('0');
SELECT claim.once('k');
SELECT claim.once('k', '1 minute');
SELECT claim.guard_begin('gk', '1 minute') AS gt \\gset
SELECT claim.guard_finish('gk', :gt, '{"r": 1}');
SELECT claim.guard_result('gk');
SELECT claim.guard_begin('gk2', '1 minute') AS gt2 \\gset
SELECT claim.guard_abandon('gk2', :gt2);
CREATE SCHEMA app;
CREATE TABLE app.orders (id int PRIMARY KEY, g text, note text);
CREATE TRIGGER row_enqueue AFTER INSERT OR UPDATE ON app.orders
	FOR EACH ROW EXECUTE FUNCTION claim.enqueue_trigger('q', 'g', 'coalesce');
CREATE TRIGGER stmt_enqueue AFTER INSERT ON app.orders REFERENCING NEW TABLE AS new_rows
	FOR EACH STATEMENT EXECUTE FUNCTION claim.enqueue_trigger('g', 'g', 'batch=10');
INSERT INTO app.orders VALUES (1, 'a', 'x'), (2, 'a', 'y'), (3, 'b', 'z');
UPDATE app.orders SET note = 'changed';
SELECT * FROM claim.queue_stats;
SELECT * FROM claim.dead_items;
SELECT * FROM claim.claimed_items;
SELECT * FROM claim.blocked_groups;
SELECT * FROM claim.leases;
SELECT * FROM claim.worker_status();
SELECT claim.drop_queue('empty');
});
	is($ret, 0, "$db: every API call works under search_path $hostile_path") or diag($err);

	# the 0.2.0 API, where it is installed
	if (clean($db, q{SELECT to_regprocedure('claim.item_state(text, bigint, interval)') IS NOT NULL}) eq 't')
	{
		my ($r2, $o2, $e2) = $node->psql($db, qq{
SET search_path = $hostile_path;
SET client_min_messages = warning;
SELECT claim.create_queue('r', retain => '1 hour');
SELECT claim.alter_queue('r', lease => '2 minutes', max_attempts => 3, backoff => '0', retain => '2 hours');
SELECT claim.enqueue('r', '{"step": 1}') AS p1 \\gset
SELECT claim.enqueue('r', '{"step": 2}', after => ARRAY[:p1]::bigint[]) AS c1 \\gset
SELECT claim.enqueue_many('r', ARRAY['{"step": 3}']::jsonb[], after => ARRAY[:p1]::bigint[]) IS NOT NULL;
SELECT state FROM claim.item_state('r', :c1);
SELECT token AS r1 FROM claim.claim_next('r') \\gset
SELECT claim.complete(:r1, '{"ok": true}');
SELECT state FROM claim.item_state('r', :p1, wait => '100 ms');
SELECT token AS r2 FROM claim.claim_next('r') \\gset
SELECT token IS NOT NULL FROM claim.claim_next('r', done => ARRAY[:r2]::bigint[]);
SELECT claim.enqueue('r', '{"step": 4}') AS x1 \\gset
SELECT claim.cancel_many('r', ARRAY[:x1]::bigint[]);
SELECT claim.pause('r');
SELECT token IS NULL FROM claim.claim_next('r', wait => '100 ms');
SELECT claim.resume('r');
SELECT * FROM claim.finished_items;
SELECT * FROM claim.queue_stats;
});
		is($r2, 0, "$db: the 0.2.0 API works under search_path $hostile_path") or diag($e2);
		$err .= $e2;
	}

	# error paths (their messages and any SQL behind them)
	my @errors = (
		[ q{SELECT claim.complete(0::bigint)}, qr/not a live claim/ ],
		[ q{SELECT claim.complete_many(ARRAY[0, -1]::bigint[])}, qr/not a live claim/ ],
		[ q{SELECT claim.fail(0)}, qr/not a live claim/ ],
		[ q{SELECT claim.enqueue('nope', '{}')}, qr/does not exist/ ],
		[ q{SELECT claim.enqueue('nope', '{}', dedup_key => 'x')}, qr/does not exist/ ],
		[ q{SELECT claim.claim_next('nope')}, qr/does not exist/ ],
		[ q{SELECT claim.create_queue('q')}, qr/already exists/ ],
		[ q{SELECT claim.lease_acquire('S', '1 minute', permits => 3)}, qr/permit/ ],
		[ q{SELECT claim.lease_assert('L', 1)}, qr/does not hold lease/ ],
		[ q{SELECT claim.guard_finish('gk', 1)}, qr/not the running attempt/ ],
		[ q{SELECT claim.enqueue(NULL, '{}')}, qr/must not be NULL/ ],);
	for my $e (@errors)
	{
		my ($sql, $re) = @$e;
		my ($r, $o, $er) = $node->psql($db, "SET search_path = $hostile_path;\n$sql");
		like($er, $re, "$db: $sql fails as documented under the hostile search_path");
		unlike($er, qr/SPY:/, "$db: ... and runs nothing planted");
	}
	return $err;
}

# ------------------------------------------------- static checks of the scripts
my $sharedir = $node->safe_psql('postgres', q{SELECT setting FROM pg_config WHERE name = 'SHAREDIR'});
my @scripts = sort glob("$sharedir/extension/pg_claim--*.sql");
ok(@scripts > 0, 'the installed extension scripts are found');
my %created;    # function names created by the install scripts so far
for my $path (@scripts)
{
	my $name = $path =~ s{.*/}{}r;
	my $text = slurp_file($path) =~ s/--[^\n]*//gr;    # comments name what the code avoids
	unlike($text, qr/\bIF\s+NOT\s+EXISTS\b/i,
		"$name: no CREATE ... IF NOT EXISTS (it would adopt a planted object)");
	unlike($text, qr/['"][^'"\n]*\@ext(schema|owner)\@|\@ext(schema|owner)\@[^'"\n]*['"]/,
		"$name: no \@extschema\@/\@extowner\@ inside quotes");
	my @unqualified = $text =~ /\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:UNLOGGED\s+)?(?:FUNCTION|TABLE|VIEW|SEQUENCE|TYPE|INDEX\s+\w+\s+ON|AGGREGATE|OPERATOR)\s+(?!claim\.)(\w+)/gi;
	is("@unqualified", '', "$name: every object it creates is schema-qualified");
	if ($name =~ /^pg_claim--[^-]+\.sql$/)
	{
		unlike($text, qr/\bOR\s+REPLACE\b/i, "$name: an install script replaces nothing");
	}
	else
	{
		# an update script may replace only functions an earlier script made
		my @replaced = $text =~ /\bCREATE\s+OR\s+REPLACE\s+FUNCTION\s+claim\.(\w+)/gi;
		my @foreign = grep { !$created{$_} } @replaced;
		is("@foreign", '', "$name: CREATE OR REPLACE only of the extension's own functions");
	}
	$created{$_} = 1 for $text =~ /\bCREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+claim\.(\w+)/gi;
}

# ------------------------------------- CREATE EXTENSION in a hostile database
hostile_database('victim');
my ($ret, $out, $err) = $node->psql('victim',
	"SET search_path = $hostile_path;\nCREATE EXTENSION pg_claim;");
is($ret, 0, 'victim: CREATE EXTENSION works with the attacker first on the search_path')
  or diag($err);
nothing_ran('victim', 'CREATE EXTENSION', $err);

# SQL and plpgsql functions of the extension pin their search_path
is( clean('victim', q{
		SELECT coalesce(string_agg(p.oid::regprocedure::text, ', '), 'none')
		FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
		WHERE p.pronamespace = 'claim'::regnamespace AND l.lanname <> 'c'
		  AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false)}),
	'none', 'victim: every SQL-language function pins search_path = pg_catalog, pg_temp');
is( clean('victim', q{
		SELECT coalesce(string_agg(p.oid::regprocedure::text, ', '), 'none')
		FROM pg_proc p
		WHERE p.pronamespace = 'claim'::regnamespace AND p.prosecdef
		  AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false)}),
	'none', 'victim: no SECURITY DEFINER function without a pinned search_path');

owned_by_installer('victim', 'after CREATE EXTENSION');
$err = exercise_api('victim');
nothing_ran('victim', 'the API calls', $err);

# The workers run in the same database (its search_path is the attacker's):
# a scheduled item comes due, leases end and are purged.
$node->safe_psql('victim', qq{
	SET search_path = $hostile_path;
	SELECT claim.lease_acquire('brief', '100 ms');
	SELECT claim.enqueue('q', '{}', run_at => pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) interval '300 ms');
});
my $worked = 0;
for (1 .. 100)
{
	$worked = clean('victim', q{
		SELECT (SELECT count(*) FROM claim.items WHERE run_at IS NOT NULL) = 0
		   AND (SELECT coalesce(sum(purged), 0) FROM claim.worker_status()) > 0});
	last if $worked eq 't';
	usleep(100_000);
}
is($worked, 't', 'victim: the worker promoted due items and purged ended leases');
nothing_ran('victim', 'the worker rounds', '');
owned_by_installer('victim', 'after the API calls');

# Control: the spy sees what it should. An unqualified count(*) of the
# victim runs the planted aggregate with the victim's privileges.
($ret, $out, $err) = $node->psql('victim',
	"SET search_path = $hostile_path;\nSELECT count(*) FROM (VALUES (1)) v;");
like($err, qr/SPY: evil\.count\(\*\) ran as \Q$installer\E/,
	'control: an unqualified count(*) of the victim runs the planted aggregate');
is(clean('victim', q{SELECT rolsuper FROM pg_roles WHERE rolname = 'attacker'}),
	't', 'control: ... and it made the attacker a superuser');
$node->safe_psql('victim', 'ALTER ROLE attacker NOSUPERUSER');

# ------------------------------ a schema "claim" owned by the attacker
$node->safe_psql('postgres', 'CREATE DATABASE owned');
setup_spy('owned');
$node->safe_psql('owned', 'GRANT CREATE ON DATABASE owned TO attacker');
($ret, $out, $err) = as_attacker('owned', 'CREATE SCHEMA claim;');
is($ret, 0, 'owned: the attacker created schema claim') or diag($err);
plant('owned', 'claim', 1);
($ret, $out, $err) = $node->psql('owned', "SET search_path = $hostile_path;\nCREATE EXTENSION pg_claim;");
nothing_ran('owned', 'CREATE EXTENSION into the attacker\'s schema', $err);
{
	isnt($ret, 0, 'owned: CREATE EXTENSION refuses a schema claim owned by another role');
	like($err, qr/schema "claim" is owned by role attacker/, 'owned: ... saying who owns it');
	is( clean('owned', q{SELECT count(*) FROM pg_extension WHERE extname = 'pg_claim'}),
		'0', 'owned: no extension was made in it');
}

# -------------------- a pre-existing schema "claim" others may create in
$node->safe_psql('postgres', 'CREATE DATABASE planted');
setup_spy('planted');
$node->safe_psql('planted', q{
	CREATE SCHEMA claim;
	GRANT USAGE, CREATE ON SCHEMA claim TO attacker;
});
plant('planted', 'claim', 1);
($ret, $out, $err) = as_attacker('planted', q{
	CREATE TABLE claim.items (id bigint);
	GRANT ALL ON claim.items TO PUBLIC;
	CREATE FUNCTION claim.create_queue(queue text, lease interval DEFAULT '30 seconds',
	                                   max_attempts integer DEFAULT 5, backoff interval DEFAULT '1 second')
	RETURNS void LANGUAGE plpgsql AS $$ BEGIN PERFORM spy.hit('claim.create_queue'); END $$;
});
is($ret, 0, 'planted: the attacker planted claim.items and claim.create_queue') or diag($err);
($ret, $out, $err) = $node->psql('planted', "SET search_path = $hostile_path;\nCREATE EXTENSION pg_claim;");
isnt($ret, 0, 'planted: CREATE EXTENSION fails on the planted objects');
like($err, qr/other roles may create objects in schema "claim"/,
	'planted: ... because others may create objects in schema claim');
is(clean('planted', q{SELECT count(*) FROM pg_extension WHERE extname = 'pg_claim'}),
	'0', 'planted: no extension was made');
is( clean('planted', q{SELECT relowner::regrole FROM pg_class WHERE oid = 'claim.items'::regclass}),
	'attacker', 'planted: claim.items is still only the attacker\'s table');
nothing_ran('planted', 'CREATE EXTENSION over planted objects', $err);

# The same schema without objects of the extension's names: the shadowing
# objects stay; CREATE EXTENSION must not call them.
($ret, $out, $err) = as_attacker('planted', q{
	DROP TABLE claim.items;
	DROP FUNCTION claim.create_queue(text, interval, integer, interval);
});
($ret, $out, $err) = $node->psql('planted', "SET search_path = $hostile_path;\nCREATE EXTENSION pg_claim;");
nothing_ran('planted', 'CREATE EXTENSION next to planted shadowing objects', $err);
{
	isnt($ret, 0, 'planted: CREATE EXTENSION refuses a schema claim others may create in');
}

# ----------------------------------------------- ALTER EXTENSION UPDATE
my $versions = $node->safe_psql('postgres', q{
	SELECT string_agg(version, ' ' ORDER BY string_to_array(version, '.')::int[])
	FROM pg_available_extension_versions WHERE name = 'pg_claim'});
my @versions = split ' ', $versions;
my $default = $node->safe_psql('postgres',
	q{SELECT default_version FROM pg_available_extensions WHERE name = 'pg_claim'});
my $from = $versions[0];
my $path = $node->safe_psql('postgres', qq{
	SELECT path FROM pg_extension_update_paths('pg_claim')
	WHERE source = '$from' AND target = '$default'});
SKIP:
{
	skip "only version $versions is installed: no update to attack", 1
	  if @versions < 2 || $from eq $default || $path eq '';

	# the old version is installed first, in a still clean database
	$node->safe_psql('postgres', 'CREATE DATABASE upgraded');
	$node->safe_psql('upgraded', "CREATE EXTENSION pg_claim VERSION '$from'");
	setup_spy('upgraded');
	$node->safe_psql('upgraded', qq{
		GRANT CREATE ON SCHEMA public TO PUBLIC;
		CREATE SCHEMA evil AUTHORIZATION attacker;
		ALTER DATABASE upgraded SET search_path = $hostile_path;
	});
	plant('upgraded', 'public');
	plant('upgraded', 'evil');
	($ret, $out, $err) = $node->psql('upgraded',
		"SET search_path = $hostile_path;\nALTER EXTENSION pg_claim UPDATE;");
	is($ret, 0, "upgraded: ALTER EXTENSION UPDATE ($path) works with the attacker first on the search_path")
	  or diag($err);
	is(clean('upgraded', q{SELECT extversion FROM pg_extension WHERE extname = 'pg_claim'}),
		$default, "upgraded: the extension is at $default");
	nothing_ran('upgraded', 'ALTER EXTENSION UPDATE', $err);
	owned_by_installer('upgraded', 'after ALTER EXTENSION UPDATE');
	$err = exercise_api('upgraded');
	nothing_ran('upgraded', 'the API calls after the update', $err);

	# Objects of the names the update scripts create, planted in schema
	# claim by a role that may create there: the update fails or leaves them
	# outside the extension, and runs none of them.
	$node->safe_psql('postgres', 'CREATE DATABASE upgraded2');
	$node->safe_psql('upgraded2', "CREATE EXTENSION pg_claim VERSION '$from'");
	setup_spy('upgraded2');
	$node->safe_psql('upgraded2', 'GRANT USAGE, CREATE ON SCHEMA claim TO attacker');
	my (%names, %functions);
	for my $p (@scripts)
	{
		next unless $p =~ /pg_claim--[^-]+--[^-]+\.sql$/;
		my $text = slurp_file($p);
		$names{ lc $_ } = 1 for $text =~
		  /\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:UNLOGGED\s+)?(?:TABLE|VIEW|SEQUENCE|TYPE)\s+claim\.(\w+)/gi;
		$functions{ lc $_ } = 1 for $text =~
		  /\bCREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+claim\.(\w+)/gi;
	}
	# relations of those names, and functions of those names without
	# arguments (the same signature as the extension's where it has none),
	# where the old version has nothing of that name
	my %old = map { $_ => 1 } split ' ', clean('upgraded2', q{
		SELECT string_agg(relname, ' ') FROM pg_class WHERE relnamespace = 'claim'::regnamespace
		UNION ALL SELECT string_agg(typname, ' ') FROM pg_type WHERE typnamespace = 'claim'::regnamespace
		UNION ALL SELECT string_agg(proname, ' ') FROM pg_proc WHERE pronamespace = 'claim'::regnamespace});
	delete @names{ keys %old };
	delete @functions{ keys %old };
	my $plant = join '', map {
		"CREATE VIEW claim.$_ AS SELECT * FROM spy.rel_hit('claim.$_') AS t(id bigint);\n"
	} sort keys %names;
	$plant .= join '', map {
		"CREATE FUNCTION claim.$_() RETURNS void LANGUAGE plpgsql AS \$f\$ BEGIN PERFORM spy.hit('claim.$_()'); END \$f\$;\n"
	} sort keys %functions;
	($ret, $out, $err) = as_attacker('upgraded2', qq{
		CREATE FUNCTION spy.rel_hit(what text) RETURNS SETOF record LANGUAGE plpgsql AS \$f\$
		BEGIN PERFORM spy.hit(what); END \$f\$;
		$plant
	});
	is($ret, 0, 'upgraded2: the attacker planted objects of the update\'s names: '
		  . join(', ', sort(keys %names, map { "$_()" } keys %functions))) or diag($err);
	($ret, $out, $err) = $node->psql('upgraded2', 'ALTER EXTENSION pg_claim UPDATE;');
	if (%names)
	{
		isnt($ret, 0, 'upgraded2: ALTER EXTENSION UPDATE fails on the planted relations');
	}
	is( clean('upgraded2', q{
			SELECT count(*) FROM pg_depend d
			LEFT JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
			LEFT JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid
			WHERE d.deptype = 'e' AND 'attacker'::regrole IN (c.relowner, p.proowner)}),
		'0', 'upgraded2: no planted object became part of the extension');
	nothing_ran('upgraded2', 'ALTER EXTENSION UPDATE over planted relations', $err);
}

$node->stop;
done_testing();
