# test/t/PgClaimNode.pm — what the TAP tests share (not a test of its own):
#
#   use FindBin;
#   use lib $FindBin::RealBin;
#   use PgClaimNode;
#
#   pgclaim_node(NAME, CONF, %init)  a PostgreSQL::Test::Cluster, initialized
#                                    (%init: PostgreSQL::Test::Cluster::init's
#                                    arguments), with pg_claim preloaded and
#                                    CONF (postgresql.conf lines) appended,
#                                    started; no database changed
#   worker_pid(NODE, DB)             the pid of DB's pg_claim worker, 0 if none
package PgClaimNode;

use strict;
use warnings;

use Exporter 'import';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use IPC::Run;
use Test::More ();

our @EXPORT = qw(pgclaim_node worker_pid ledger_sql ledger_load ledger_load_stop);

sub pgclaim_node
{
	my ($name, $conf, %init) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%init);
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'pg_claim'\n" . ($conf // ''));
	$node->start;
	return $node;
}

sub worker_pid
{
	my ($node, $db) = @_;
	return $node->safe_psql('postgres',
		qq{SELECT coalesce(max(pid), 0) FROM pg_stat_activity
		   WHERE backend_type = 'pg_claim worker' AND datname = '$db'});
}

# The exactly-once ledger of the failover tests (009, 160), as SQL to run
# after CREATE SEQUENCE ks and a queue 'p': enq, one row per enqueued item
# (its key k, in the enqueue's transaction); effects, one row per item whose
# work committed, with its token and the side (cluster_name) that did it;
# dups, a second effect of a key. put(n) enqueues n items; CALL work(n)
# claims up to n items in one transaction, then works each in its own:
# assert_token, the effect, complete.
sub ledger_sql
{
	return q{
	CREATE TABLE enq (k bigint PRIMARY KEY);
	CREATE TABLE effects (k bigint PRIMARY KEY, token bigint NOT NULL, side text NOT NULL);
	CREATE TABLE dups (k bigint NOT NULL, token bigint NOT NULL, side text NOT NULL);
	CREATE FUNCTION put(n int) RETURNS SETOF bigint LANGUAGE plpgsql AS $$
	DECLARE k bigint;
	BEGIN
		FOR i IN 1..n LOOP
			k := nextval('ks');
			INSERT INTO enq VALUES (k);
			PERFORM claim.enqueue('p', jsonb_build_object('k', k));
			RETURN NEXT k;
		END LOOP;
	END $$;
	-- Claims up to n items (one transaction), then works each in its own.
	CREATE PROCEDURE work(n int, INOUT done int DEFAULT 0) LANGUAGE plpgsql AS $$
	DECLARE toks bigint[]; ks bigint[];
	BEGIN
		SELECT coalesce(array_agg(token ORDER BY token), '{}'),
		       coalesce(array_agg((payload->>'k')::bigint ORDER BY token), '{}')
		  INTO toks, ks FROM claim.claim_next('p', n);
		COMMIT;
		done := coalesce(array_length(toks, 1), 0);
		FOR i IN 1..done LOOP
			PERFORM claim.assert_token(toks[i]);
			INSERT INTO effects VALUES (ks[i], toks[i], current_setting('cluster_name'))
			    ON CONFLICT (k) DO NOTHING;
			IF NOT FOUND THEN
				INSERT INTO dups VALUES (ks[i], toks[i], current_setting('cluster_name'));
			END IF;
			PERFORM claim.complete(toks[i]);
			COMMIT;
		END LOOP;
	END $$;
};
}

# The ledger's load in the background: 2 pgbench clients running put(2) and
# CALL work(3) against $node for up to 60 s. Returns its handle for
# ledger_load_stop, which kills it and notes what pgbench said.
sub ledger_load
{
	my ($node, $name) = @_;
	my $script = "${PostgreSQL::Test::Utils::tmp_check}/${name}_load.sql";
	open(my $fh, '>', $script) or die "cannot write $script: $!";
	print $fh "SELECT put(2);\nCALL work(3);\n";
	close $fh;
	my $load = { out => '', err => '' };
	$load->{run} = IPC::Run::start(
		[ 'pgbench', '-n', '-c', '2', '-j', '2', '-T', '60', '-f', $script,
		  $node->connstr('postgres') ],
		'>', \$load->{out}, '2>', \$load->{err});
	return $load;
}

sub ledger_load_stop
{
	my ($load) = @_;
	$load->{run}->kill_kill;
	Test::More::note('pgbench: ' . ($load->{err} =~ s/\n/ /gr));
}

1;
