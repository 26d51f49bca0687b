#!/usr/bin/perl

# expires: Expires and Cache-Control as nginx writes them for a time, a
# negative time (no-cache), 0, epoch, max, modified (from Last-Modified),
# a daily time, a value from a variable (an invalid one adds nothing), off
# in a nested location; only for 200/201/204/206/301/302/303/304/307/308;
# with add_header Cache-Control both lines; an upstream's Expires and
# Cache-Control replaced.

use warnings;
use strict;

use Test::More;
use POSIX qw/strftime/;
use Time::Local qw/timegm/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy/)->plan(23);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;
        root %%TESTDIR%%/html;

        location /hour { expires 1h; }
        location /neg { expires -1; }
        location /zero { expires 0; }
        location /epoch { expires epoch; }
        location /max { expires max; }
        location /mod { expires modified 1d; }
        location /daily { expires @3h; }
        location /var { expires $arg_e; }
        location /outer {
            expires 1h;
            location /outer/off { expires off; }
        }
        location /notfound { expires 1h; }
        location /redir { expires 1h; return 302 /x; }
        location /ret500 { expires 1h; return 500 "x"; }
        location /both { expires 30s; add_header Cache-Control public; }
        location /p/ { expires 2m; proxy_pass http://127.0.0.1:%%PORT_8081%%/; }
    }
}

EOF

mkdir "$d/html";
mkdir "$d/html/outer";
for my $f (qw/hour neg zero epoch max mod daily var both outer\/off/) {
	$t->write_file("html/$f", "x");
}
# Modified a known time ago.
my $mtime = time() - 3600;
utime $mtime, $mtime, "$d/html/mod";

$t->raw_backend(port(8081),
	'/up' => "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nExpires: Fri, 01 Jan 2100 00:00:00 GMT\r\n"
		. "Cache-Control: private\r\nCache-Control: no-store\r\n\r\nok");

$t->run();

sub expires_at {
	my ($r) = @_;
	my ($e) = $r =~ /^Expires: (.*?)\r$/m or return undef;
	my %mon = (Jan => 0, Feb => 1, Mar => 2, Apr => 3, May => 4, Jun => 5,
		Jul => 6, Aug => 7, Sep => 8, Oct => 9, Nov => 10, Dec => 11);
	my ($dd, $mm, $yy, $h, $mi, $s) =
		$e =~ /^\w{3}, (\d\d) (\w{3}) (\d{4}) (\d\d):(\d\d):(\d\d) GMT$/ or return undef;
	return timegm($s, $mi, $h, $dd, $mon{$mm}, $yy);
}

sub near { my ($a, $b) = @_; defined $a && abs($a - $b) <= 3 }

my $r = http_get('/hour');
like($r, qr/^Cache-Control: max-age=3600\r$/m, 'time: max-age');
ok(near(expires_at($r), time() + 3600), 'time: Expires an hour ahead');

$r = http_get('/neg');
like($r, qr/^Cache-Control: no-cache\r$/m, 'negative: no-cache');
ok(near(expires_at($r), time() - 1), 'negative: Expires in the past');

$r = http_get('/zero');
like($r, qr/^Cache-Control: max-age=0\r$/m, 'zero: max-age=0');

$r = http_get('/epoch');
like($r, qr/^Expires: Thu, 01 Jan 1970 00:00:01 GMT\r$/m, 'epoch: Expires');
like($r, qr/^Cache-Control: no-cache\r$/m, 'epoch: no-cache');

$r = http_get('/max');
like($r, qr/^Expires: Thu, 31 Dec 2037 23:55:55 GMT\r$/m, 'max: Expires');
like($r, qr/^Cache-Control: max-age=315360000\r$/m, 'max: max-age');

$r = http_get('/mod');
ok(near(expires_at($r), $mtime + 86400), 'modified: from Last-Modified');
my ($age) = $r =~ /^Cache-Control: max-age=(\d+)\r$/m;
ok(defined $age && abs($age - (86400 - 3600)) <= 3, 'modified: max-age from it');

$r = http_get('/daily');
my $at = expires_at($r);
ok(defined $at && $at > time() && $at <= time() + 86400 + 3600
	&& strftime('%H:%M:%S', localtime($at)) eq '03:00:00', 'daily: next 03:00 local');

like(http_get('/var?e=max'), qr/^Cache-Control: max-age=315360000\r$/m, 'variable');
unlike(http_get('/var?e=bad'), qr/^(Expires|Cache-Control):/mi, 'invalid variable value');

unlike(http_get('/outer/off'), qr/^Expires:/m, 'off in nested location');
unlike(http_get('/notfound'), qr/^Expires:/m, 'not for 404');
like(http_get('/redir'), qr/^Cache-Control: max-age=3600\r$/m, 'for 302');
unlike(http_get('/ret500'), qr/^Expires:/m, 'not for 500');

$r = http_get('/both');
like($r, qr/^Cache-Control: max-age=30\r\nCache-Control: public\r$/m,
	'add_header Cache-Control after expires');
is(() = $r =~ /^Cache-Control:/mg, 2, 'two Cache-Control lines');

$r = http_get('/p/up');
like($r, qr/^Cache-Control: max-age=120\r$/m, 'proxied: Cache-Control replaced');
is(() = $r =~ /^(?:Cache-Control|Expires):/mg, 2, 'proxied: the upstream\'s gone');
ok(near(expires_at($r), time() + 120), 'proxied: Expires replaced');
