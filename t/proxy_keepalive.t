#!/usr/bin/perl

# Upstream keep-alive: connections are reused (counted at the backend),
# `keepalive 0` turns the cache off, `Connection: close` from the upstream is
# honoured, keepalive_requests bounds reuse, and a cached connection the
# upstream closed is replaced without an error. Over `keepalive N`, idle
# connections stay a second or two (unlike nginx, which closes them at
# once), so the next burst takes them again.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_keepalive/)->plan(9);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    upstream implicit { server 127.0.0.1:%%PORT_8081%%; }
    upstream off { server 127.0.0.1:%%PORT_8082%%; keepalive 0; }
    upstream closing { server 127.0.0.1:%%PORT_8083%%; }
    upstream limited { server 127.0.0.1:%%PORT_8084%%; keepalive 8; keepalive_requests 3; }
    upstream silent { server 127.0.0.1:%%PORT_8085%%; }
    upstream burst { server 127.0.0.1:%%PORT_8086%%; keepalive 1; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location /implicit/ { proxy_pass http://implicit/; }
        location /off/ { proxy_pass http://off/; }
        location /closing/ { proxy_pass http://closing/; }
        location /limited/ { proxy_pass http://limited/; }
        location /silent/ { proxy_pass http://silent/; }
        location /burst/ { proxy_pass http://burst/; }
    }
}

EOF

$t->backend(port(8081));
$t->backend(port(8082));
$t->backend(port(8083), close => 1);
$t->backend(port(8084));
$t->backend(port(8085), close_after => 1);
$t->backend(port(8086));
$t->run();

sub conns {
	my ($prefix, $n) = @_;
	http_get("/$prefix/x") for 1 .. $n;
	my ($c) = http_get("/$prefix/conns") =~ /\r\n\r\n(\d+)$/;
	return $c;
}

is(conns('implicit', 10), 1, 'implicit keepalive: one connection for 11 requests');
is(conns('off', 10), 11, 'keepalive 0: a connection per request');
is(conns('closing', 10), 11, 'Connection: close from upstream honoured');
is(conns('limited', 8), 3, 'keepalive_requests 3: 9 requests on 3 connections');

my $ok = grep { http_get('/silent/x') =~ /^HTTP\/1\.1 200/ } 1 .. 10;
is($ok, 10, 'connections closed by the upstream are replaced');

# Three requests at once on `keepalive 1`: three connections, all kept a
# while; a second burst at once opens none. Two seconds and a half later
# the two over the cache are gone: a third burst opens two.
sub burst {
	my @s = map { http_start("GET /burst/slow/0.3/$_ HTTP/1.0\nHost: localhost\n\n") } 1 .. 3;
	http_end($_) for grep { defined } @s;
	my ($c) = http_get('/burst/conns') =~ /\r\n\r\n(\d+)$/;
	return $c;
}
is(burst(), 3, 'keepalive 1: a burst of three opens three connections');
is(burst(), 3, 'the next burst at once takes them again');
select undef, undef, undef, 2.5;
is(burst(), 5, 'after 2.5 s idle, the two over the cache were closed');
unlike($t->read_file('error.log'), qr/\[error\]/, 'without errors');
