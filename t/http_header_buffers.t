#!/usr/bin/perl

# client_header_buffer_size and large_client_header_buffers together, as
# nginx packs a head: it starts in the client_header_buffer_size buffer; a
# line that does not fit moves to a large buffer. The same head of short
# lines fits a 2k first buffer and one large buffer, and needs two large
# buffers after a 1k one (more than the one allowed: 400 "Request Header Or
# Cookie Too Large").

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(3);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    large_client_header_buffers 1 1k;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        client_header_buffer_size 2k;
        location / { return 200 "ok"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8081%%;
        location / { return 200 "ok"; }
    }
}

EOF

$t->run();

# About 2.5k of 100-byte lines: 2k + 1k holds them, 1k + 1k does not.
my $head = "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
	. join('', map { "X-$_: " . ('v' x 90) . "\r\n" } 10 .. 34) . "\r\n";

like(http($head), qr/^HTTP\/1\.1 200 .*ok$/s, 'head within a 2k client_header_buffer_size');
like(http($head, PeerAddr => '127.0.0.1:' . port(8081)),
	qr/^HTTP\/1\.1 400 .*Request Header Or Cookie Too Large/s,
	'the same head past 1k and one large buffer: 400');
like(http("GET / HTTP/1.0\r\nX-Short: 1\r\n\r\n", PeerAddr => '127.0.0.1:' . port(8081)),
	qr/^HTTP\/1\.1 200 /, 'a short head on the 1k default');
