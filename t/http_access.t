#!/usr/bin/perl

# The access module: allow and deny by address, CIDR, IPv6, unix: and all,
# the first matching rule deciding, rules inherited from the server by a
# location that has none and replaced by one that has some; a refused
# request gets 403 (through error_page too) and nginx's "access forbidden
# by rule" line; in stream, a refused session is closed with $status 403.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;
use IO::Socket::IP;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http access stream/)->plan(21);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        listen [::1]:%%PORT_8080%%;
        listen unix:%%TESTDIR%%/http.sock;
        server_name localhost;

        root %%TESTDIR%%;
        deny 127.0.0.3;

        # return runs before the access phase, as in nginx.
        location /return { deny all; return 200 "in\n"; }

        location /inherit { }
        location /first { deny 127.0.0.2; allow 127.0.0.0/8; deny all; }
        location /only2 { allow 127.0.0.2; deny all; }
        location /net { allow 127.0.0.0/30; deny all; }
        location /v6 { deny ::1; allow all; }
        location /unix { deny unix:; allow all; }
        location /page { deny all; error_page 403 /denied; }
        location /denied { allow all; return 200 "denied page\n"; }
    }
}

stream {
    log_format s "$status";
    access_log %%TESTDIR%%/stream.log s;

    server {
        listen 127.0.0.1:%%PORT_8081%%;
        deny 127.0.0.2;
        return "hello\n";
    }
}

EOF

$t->write_file($_, "in\n") for qw/inherit first only2 net v6 unix/;
$t->run();

###############################################################################

sub from {
	my ($src, $uri) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080),
		LocalAddr => $src, Proto => 'tcp') or return "connect: $!";
	my $r = http("GET $uri HTTP/1.0\nHost: localhost\n\n", socket => $s);
	return $r =~ /^HTTP\/1.1 (\d+)/ ? $1 : $r;
}

is(from('127.0.0.1', '/inherit'), 200, 'server rules: not denied');
is(from('127.0.0.1', '/return'), 200, 'return comes before access');
is(from('127.0.0.3', '/inherit'), 403, 'server rules inherited');
is(from('127.0.0.3', '/first'), 200, 'location rules replace the server\'s');
is(from('127.0.0.2', '/first'), 403, 'first match: deny');
is(from('127.0.0.1', '/first'), 200, 'first match: allow CIDR');
is(from('127.0.0.1', '/only2'), 403, 'deny all');
is(from('127.0.0.2', '/only2'), 200, 'allow address');
is(from('127.0.0.3', '/net'), 200, '/30 includes .3');
is(from('127.0.0.4', '/net'), 403, '/30 excludes .4');

my $s6 = IO::Socket::IP->new(PeerHost => '::1', PeerPort => port(8080), Proto => 'tcp');
my $r = $s6 ? http("GET /v6 HTTP/1.0\nHost: localhost\n\n", socket => $s6) : '';
like($r, qr/^HTTP\/1.1 403/, 'IPv6 deny');
$s6 = IO::Socket::IP->new(PeerHost => '::1', PeerPort => port(8080), Proto => 'tcp');
$r = $s6 ? http("GET /first HTTP/1.0\nHost: localhost\n\n", socket => $s6) : '';
like($r, qr/^HTTP\/1.1 403/, 'IPv6 client: IPv4 rules do not match, deny all does');

like(http("GET /unix HTTP/1.0\nHost: localhost\n\n", unix => "$d/http.sock"),
	qr/^HTTP\/1.1 403/, 'unix: denied');
like(http("GET /inherit HTTP/1.0\nHost: localhost\n\n", unix => "$d/http.sock"),
	qr/^HTTP\/1.1 200/, 'unix: server rules do not name it');

$r = http_get('/page');
like($r, qr/^HTTP\/1.1 403/, 'error_page: status kept');
like($r, qr/denied page/, 'error_page: its page');

$r = http_get('/only2');
like($r, qr/<title>403 Forbidden<\/title>/, '403 page');
ok($t->waitforlog(qr/\[error\] \d+#\d+: \*\d+ access forbidden by rule, client: 127\.0\.0\.1, server: localhost, request: "GET \/only2 HTTP\/1\.0", host: "localhost"/),
	'error log line');

# Stream.

sub stream_from {
	my ($src) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8081),
		LocalAddr => $src, Proto => 'tcp') or return "connect: $!";
	return http_end($s);
}

is(stream_from('127.0.0.1'), "hello\n", 'stream: allowed');
is(stream_from('127.0.0.2'), '', 'stream: denied, closed');
poll_until(sub { $t->read_file('stream.log') =~ /403/ }, 5);
like($t->read_file('stream.log'), qr/^200\n403\n$/, 'stream: $status 403');

###############################################################################
