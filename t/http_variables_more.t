#!/usr/bin/perl

# More variables real configs use: $nginx_version (http and stream, the
# version `sluice -v` names), the stub_status counters $connections_active,
# _reading, _writing, _waiting (http, without any stub_status location),
# $upstream_cookie_NAME (a cookie from the upstream's Set-Cookie, as nginx
# finds it) and, in stream, $hostname, $msec and $time_local.

use warnings;
use strict;

use Test::More;
use IO::Select;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http stream/)->plan(10);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    # Accepted, no effect (sluice's log paths have no variables).
    open_log_file_cache max=1000 inactive=20s valid=1m min_uses=2;
    log_format cookies "$upstream_cookie_sid|$upstream_cookie_LANG|[$upstream_cookie_none]";

    server {
        listen 127.0.0.1:%%PORT_8080%%;

        location /version { return 200 "v=$nginx_version\n"; }
        location /conns {
            return 200 "$connections_active $connections_reading $connections_writing $connections_waiting\n";
        }
        location /cookie {
            access_log %%TESTDIR%%/cookies.log cookies;
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
        }
    }
}

stream {
    server {
        listen 127.0.0.1:%%PORT_8090%%;
        return "$nginx_version|$hostname|$msec|$time_local\n";
    }
}

EOF

$t->raw_backend(port(8081),
	'/cookie' => "HTTP/1.1 200 OK\r\nSet-Cookie: sid=abc123; Path=/; HttpOnly\r\n"
		. "Set-Cookie: lang = en;Max-Age=60\r\nContent-Length: 3\r\n\r\nok\n");
$t->run();

my (undef, undef, $v) = $t->run_binary('-v');
my ($version) = $v =~ /nginx version: nginx\/([\d.]+)/;
ok($version, 'sluice -v names an nginx version');

like(http_get('/version'), qr/^v=\Q$version\E$/m, 'http $nginx_version is the one -v names');

# An idle connection (nothing sent) is one more active connection, waiting.
my $idle = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080), Timeout => 5)
	or die "connect: $!";
select undef, undef, undef, 0.3;
my ($a, $r, $w, $wait) = http_get('/conns') =~ /^(\d+) (\d+) (\d+) (\d+)$/m;
ok(defined $a, 'the counters are numbers');
cmp_ok($a // 0, '>=', 2, '$connections_active counts this and the idle connection');
cmp_ok($w // 0, '>=', 1, '$connections_writing counts this request');
is(($r // 0) + ($w // 0) + ($wait // 0), $a // -1, 'active = reading + writing + waiting');
close $idle;

like(http_get('/cookie'), qr/ 200 .*ok$/s, 'proxied');
ok($t->waitforfile("$d/cookies.log"), 'access log written');
my $log = '';
for (1 .. 30) {
	$log = $t->read_file('cookies.log');
	last if $log =~ /\n/;
	select undef, undef, undef, 0.1;
}
is($log, "abc123|en|[-]\n", '$upstream_cookie_NAME: by name, any case, to the ";"; none: empty');

my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8090), Timeout => 5)
	or die "connect: $!";
my $got = '';
my $sel = IO::Select->new($s);
while ($sel->can_read(3)) {
	$s->sysread($got, 4096, length $got) or last;
}
like($got, qr/^\Q$version\E\|[^|]+\|\d+\.\d{3}\|\d\d\/[A-Z][a-z]{2}\/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}$/m,
	'stream: $nginx_version, $hostname, $msec, $time_local');
