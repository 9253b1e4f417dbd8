# The regression files of queues, leases and guards (test/sql) run through a
# PL/Proxy front (pg_claim_proxy) over four partitions. Their output must
# equal the expected output of one server (expected/) except for the
# differences docs/partitions.md lists, recorded hunk by hunk in
# test/t/proxy_regress/<file>.diff:
#   * the tables of the extension are not at the front (claim.items, ...);
#   * every call is its own transaction on its partition: a ROLLBACK at the
#     front takes nothing back, a READ ONLY front transaction still writes,
#     assert_token/lease_assert hold nothing past the call, and the lock
#     table of a transaction (claim.lock_table) is not at the front;
#   * tokens compare by age only within a partition, item ids are per
#     partition, views list the partitions' rows one partition after another;
#   * and what follows from these later in the same file.
# Before comparing, both sides drop PL/Proxy's additions to error messages
# (the "claim.f(n): [db] REMOTE ERROR: " prefix, "Remote detail: " and the
# like, the NOTICE about a dropped connection) and table alignment. When a
# file under test/sql changes, its diff is written to tmp_check: check that
# every hunk is one of the differences above and copy it over the recorded
# one.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Cwd ();
use File::Basename qw(dirname);
use File::Temp qw(tempfile);
use IPC::Run;

my $root = dirname(__FILE__) . '/../..';
my @files = qw(queue leases guards);
my $P = 4;

my $front = PostgreSQL::Test::Cluster->new('rfront');
$front->init;
$front->start;
if ($front->safe_psql('postgres', q{SELECT count(*) FROM pg_available_extensions
		WHERE name IN ('plproxy', 'pg_claim_proxy')}) != 2)
{
	$front->stop;
	plan skip_all => 'PL/Proxy or pg_claim_proxy is not installed (test/setup.sh installs both)';
}

my @parts;
for my $k (0 .. $P - 1)
{
	my $n = PostgreSQL::Test::Cluster->new("rpart$k");
	$n->init;
	$n->append_conf('postgresql.conf', slurp_file("$root/test/regress.conf"));
	$n->start;
	push @parts, $n;
}
my $user = $front->safe_psql('postgres', 'SELECT current_user');

# The database settings pg_regress gives its databases.
my $settings = q{SET lc_messages TO 'C'; SET lc_monetary TO 'C'; SET lc_numeric TO 'C';
	SET lc_time TO 'C'; SET bytea_output TO 'hex'; SET timezone_abbreviations TO 'Default';
	SET intervalstyle TO 'postgres_verbose'};
sub db_settings
{
	my ($db) = @_;
	return join('', map { "ALTER DATABASE $db $_;\n" } split /;\s*/, $settings);
}

# The CONTEXT lines of the front's own functions (claim.<f> calls
# claim._on_<f>, which calls the PL/Proxy function claim._part_<f>) are not
# in one server's output.
my $front_context = qr{(?:SQL statement "SELECT (?:\* FROM )?claim\._(?:part|on|all)_[a-z_]+\([^"]*"|PL/pgSQL function claim\.[a-z_]+\([^)]*\) line \d+ at [A-Z ]+)\n};

sub normalize
{
	my ($text) = @_;
	$text =~ s/^CONTEXT:  (?:$front_context)+//mg;
	$text =~ s/^(?:$front_context)+//mg;
	my @out;
	for my $l (split /\n/, $text)
	{
		next if $l =~ /^CREATE EXTENSION pg_claim;$/;
		next if $l =~ /NOTICE:  PL\/Proxy: dropping stale conn/;
		$l =~ s/claim\.[a-z_]+\(\d+\): \[[a-z_0-9]+\] REMOTE ERROR: //;
		$l =~ s/Remote (detail|hint|context): //;
		$l =~ s/^psql:[^:]*:\d+: //;
		$l =~ s/on socket "[^"]*"/on socket "S"/g;
		$l =~ s/port \d+/port N/g;
		$l =~ s/-{2,}/--/g;
		$l =~ s/\+-/-/g;
		$l =~ s/ +/ /g;
		$l =~ s/ $//;
		push @out, $l;
	}
	return join("\n", @out) . "\n";
}

for my $f (@files)
{
	my $db = "r_$f";
	my $opts = join(', ',
		map { sprintf("p%d 'host=%s port=%d dbname=%s connect_timeout=2'",
				$_, $parts[$_]->host, $parts[$_]->port, $db) } 0 .. $P - 1);
	for my $k (0 .. $P - 1)
	{
		$parts[$k]->safe_psql('postgres', "CREATE DATABASE $db");
		$parts[$k]->safe_psql($db,
			"CREATE EXTENSION pg_claim;\nSELECT claim.set_partition($k);\n"
			  . db_settings($db));
	}
	$front->safe_psql('postgres', "CREATE DATABASE $db");
	$front->safe_psql($db, qq{
		CREATE EXTENSION pg_claim_proxy CASCADE;
		CREATE SERVER claim_cluster FOREIGN DATA WRAPPER plproxy OPTIONS ($opts);
		CREATE USER MAPPING FOR PUBLIC SERVER claim_cluster OPTIONS (user '$user');
	} . db_settings($db));

	my $sql = join('', grep { !/^CREATE EXTENSION pg_claim;$/ }
		  split /^/, slurp_file("$root/test/sql/$f.sql"));
	my ($out, $err) = ('', '');
	local $ENV{PGTZ} = 'PST8PDT';
	# the files include test/sql/include/*.sql as pg_regress runs them
	local $ENV{PG_ABS_SRCDIR} = Cwd::abs_path("$root/test");
	local $ENV{PGDATESTYLE} = 'Postgres, MDY';
	IPC::Run::run([ 'psql', '-X', '-a', '-q', '-d', $front->connstr($db) ],
		'<', \$sql, '>&', \$out);

	my $want = normalize(slurp_file("$root/expected/$f.out"));
	my $got = normalize($out);
	my ($wfh, $wname) = tempfile();
	my ($gfh, $gname) = tempfile();
	print $wfh $want;
	print $gfh $got;
	close $wfh;
	close $gfh;
	my $diff = '';
	IPC::Run::run([ 'diff', '-U3', $wname, $gname ], '>', \$diff);
	# The file names and the line numbers of the hunks (which any change
	# elsewhere in the file moves) are left out.
	$diff =~ s/^(---|\+\+\+) .*\n//mg;
	$diff =~ s/^\@\@ .* \@\@$/\@\@/mg;
	my $recorded = -f "$root/test/t/proxy_regress/$f.diff"
	  ? slurp_file("$root/test/t/proxy_regress/$f.diff") : '';
	my $keep = "${PostgreSQL::Test::Utils::tmp_check}/proxy_regress_$f.diff";
	open(my $kfh, '>', $keep) or die "cannot write $keep: $!";
	print $kfh $diff;
	close $kfh;
	is($diff, $recorded,
		"$f.sql through the front: only the recorded differences from one server")
	  or diag("the differences now are in $keep");
}

$front->stop;
$_->stop for @parts;
done_testing();
