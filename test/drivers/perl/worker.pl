# A pg_claim worker with DBD::Pg. Connects with the libpq environment (PGHOST, ...).
use strict;
use warnings;
use DBI;
use JSON::PP;

my $STALE = 'PC001';    # the token is not the live claim (lease lost, item finished)
my $dbh = DBI->connect('dbi:Pg:', undef, undef, { AutoCommit => 1, RaiseError => 1, PrintError => 0 });

# The user's write and complete commit together, fenced by assert_token.
sub finish {
    my ($id, $token, $address) = @_;
    my $ok = eval {
        $dbh->begin_work;
        $dbh->do('SELECT claim.assert_token(?)', undef, $token);
        $dbh->do('INSERT INTO sent_mail (item_id, token, address) VALUES (?, ?, ?)', undef, $id, $token, $address);
        $dbh->do('SELECT claim.complete(?, ?)', undef, $token, encode_json([$address]));
        $dbh->commit;
        1;
    };
    return 1 if $ok;
    my ($err, $state) = ($@, $dbh->state);
    $dbh->rollback;
    die $err unless $state eq $STALE;
    print "stale $token $state\n";    # rolled back: nothing of this item was written
    return 0;
}

my $last;
while (1) {
    my $row = $dbh->selectrow_arrayref(
        q{SELECT id, token, payload->>'to' FROM claim.claim_next(?, wait => ?)}, undef, 'emails', '1 second');
    last unless $row;    # the queue stayed empty for a second
    my ($id, $token, $address) = @$row;
    if (!defined $address) {
        $dbh->do('SELECT claim.fail(?, ?)', undef, $token, 'no address');
        print "failed $id $token\n";
        next;
    }
    $dbh->do('SELECT claim.extend(?, ?)', undef, $token, '30 seconds');    # heartbeat
    print "done $id $token\n" if finish($id, $token, $address);
    $last = [$id, $token, $address];
}
finish(@$last) if $last;    # a finished token again: what a worker that lost its lease sees
$dbh->disconnect;
