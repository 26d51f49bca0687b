#!/usr/bin/perl

# Upstream keep-alive: connections are reused (counted at the backend),
# `keepalive 0` turns the cache off, `Connection: close` from the upstream is
# honoured, keepalive_requests bounds reuse, and a cached connection the
# upstream closed is replaced without an error.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http upstream_keepalive/)->plan(6);

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

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location /implicit/ { proxy_pass http://implicit/; }
        location /off/ { proxy_pass http://off/; }
        location /closing/ { proxy_pass http://closing/; }
        location /limited/ { proxy_pass http://limited/; }
        location /silent/ { proxy_pass http://silent/; }
    }
}

EOF

$t->backend(port(8081));
$t->backend(port(8082));
$t->backend(port(8083), close => 1);
$t->backend(port(8084));
$t->backend(port(8085), close_after => 1);
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
unlike($t->read_file('error.log'), qr/\[error\]/, 'without errors');
