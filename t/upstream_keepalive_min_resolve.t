#!/usr/bin/perl

# keepalive_min with resolved peers: a name with two addresses gets its
# connections to each; when the DNS answer drops one address, the
# connections to it close (idle ones at once, a busy one after its request)
# and those to the other stay topped up; when the address returns, it gets
# its connections again. Open connections are counted from /proc/net/tcp.
# pick_first over a resolved name: the choice leaves an address the answer
# dropped and stays where it went when the address returns.

use warnings;
use strict;

use Test::More;
use JSON::PP qw/decode_json/;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

plan(skip_all => 'no /proc/net/tcp') unless -r '/proc/net/tcp';
my $t = Test::Sluice->new()->has(qw/http proxy upstream_zone/)->plan(13);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    log_format u "$uri $status $upstream_addr";
    access_log %%TESTDIR%%/access.log u;
    resolver 127.0.0.1:%%PORT_8053%% valid=1s;
    resolver_timeout 1s;

    upstream app {
        zone app 64k;
        server app.test:%%PORT_8081%% resolve;
        keepalive_min 3;
    }
    upstream pf {
        zone pf 64k;
        pick_first warm=0;
        server pf.test:%%PORT_8081%% resolve;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { proxy_pass http://app; }
        location /pf/ { proxy_pass http://pf; }
        location /api/ { api; }
    }
}

EOF

my $p = port(8081);
sub answer { $t->write_file('dns.txt', join '', map { "$_\n" } @_) }
my @pf = ('pf.test A 127.0.0.2 1', 'pf.test A 127.0.0.1 1');
answer('app.test A 127.0.0.1 1', 'app.test A 127.0.0.2 1', @pf);
$t->dns(port(8053));
$t->backend($p);
$t->backend($p, addr => '127.0.0.2');
$t->run();

# Established connections from anyone to $ip:$port (sluice's side of them).
sub established {
	my ($ip) = @_;
	my $want = sprintf('%s:%04X', join('', map { sprintf '%02X', $_ } reverse split /\./, $ip), $p);
	my $n = 0;
	for my $f ('/proc/net/tcp') {
		open my $fh, '<', $f or next;
		while (<$fh>) {
			my @c = split;
			$n++ if ($c[2] // '') eq $want && ($c[3] // '') eq '01';
		}
	}
	return $n;
}

sub api {
	my $r = http_get("/api/9/http/upstreams/$_[0]") // '';
	my ($body) = $r =~ /\r\n\r\n(.*)/s;
	return eval { decode_json($body // '') } // {};
}

sub peers { join ' ', sort map { "$_->{server}=$_->{sluice}{open}" } @{api('app')->{peers} // []} }

sub choice { api('pf')->{sluice}{pick_first} // 'none' }

sub addr_of { my ($a) = (http_get($_[0]) // '') =~ /^X-Addr: (\S+)/mi; $a // '127.0.0.1' }

ok(poll_until(sub { established('127.0.0.1') == 3 && established('127.0.0.2') == 3 }, 5),
	'three connections to each address') or diag(peers());
is(peers(), "127.0.0.1:$p=3 127.0.0.2:$p=3", 'api: open per peer');

# Requests in flight to both addresses (round robin), then one goes away.
my @slow = map { http_get('/slow/4/x', start => 1) } 1 .. 2;
answer('app.test A 127.0.0.1 1', @pf);
ok(poll_until(sub { peers() eq "127.0.0.1:$p=3" }, 5), 'the address left the peers');
ok(poll_until(sub { established('127.0.0.2') == 1 }, 2), 'its idle connections closed, the busy one not') or diag(established('127.0.0.2') . ' ' . established('127.0.0.1'));
is(scalar(grep { /^HTTP\/1\.1 200/ } map { http_end($_) } @slow), 2, 'the requests in flight finished');
ok(poll_until(sub { established('127.0.0.2') == 0 && established('127.0.0.1') == 3 }, 3),
	'then its connection closed too; the other address keeps three');

answer('app.test A 127.0.0.1 1', 'app.test A 127.0.0.2 1', @pf);
ok(poll_until(sub { established('127.0.0.2') == 3 }, 5), 'back in the answer: three again');

# pick_first over a resolved name: the first address answered first.
my $first = choice();
like($first, qr/^127\.0\.0\.[12]:$p$/, 'pick_first: a choice among the answers');
my ($ip) = $first =~ /^([\d.]+):/;
my ($other) = grep { $_ ne $ip } '127.0.0.1', '127.0.0.2';
is(addr_of('/pf/x'), $ip, 'pick_first: requests go to it');
answer('app.test A 127.0.0.1 1', "pf.test A $other 1");
ok(poll_until(sub { choice() eq "$other:$p" }, 5), 'its address dropped: the choice moved');
is(addr_of('/pf/x'), $other, 'requests follow');
answer('app.test A 127.0.0.1 1', "pf.test A $ip 1", "pf.test A $other 1");
ok(poll_until(sub { scalar(@{api('pf')->{peers} // []}) == 2 }, 5), 'the address is back');
is(choice(), "$other:$p", 'the choice stays') or diag(explain(api('pf')));
