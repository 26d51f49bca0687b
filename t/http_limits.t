#!/usr/bin/perl

# Request heads nginx refuses: Content-Length with Transfer-Encoding (closed), duplicate or bad Content-Length (400), HTTP/1.1 without Host (400),
# a request line or header beyond large_client_header_buffers (414, and 400
# with nginx's "Request Header Or Cookie Too Large" page).

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(7);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    large_client_header_buffers 2 1k;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { return 200 "ok"; }
    }
}

EOF

$t->run();

my $r = http("POST / HTTP/1.1\nHost: localhost\nContent-Length: 5\nTransfer-Encoding: chunked\n\n0\r\n\r\nGET / HTTP/1.1\nHost: localhost\n\n");
# Refused with 400 and closed, as nginx: nothing can be smuggled behind it.
like($r, qr!^HTTP/1\.1 400 .*Connection: close\r\n!s, 'Content-Length and Transfer-Encoding: 400, connection closed');
is(() = $r =~ /^HTTP\/1\.1 /mg, 1, 'no smuggled second request');
like(http("POST / HTTP/1.1\nHost: localhost\nContent-Length: 5\nContent-Length: 6\nConnection: close\n\nhello"),
	qr!^HTTP/1\.1 400 !, 'duplicate Content-Length: 400');
like(http("GET / HTTP/1.1\nConnection: close\n\n"), qr!^HTTP/1\.1 400 !, 'HTTP/1.1 without Host: 400');
like(http_get('/' . ('a' x 1100)), qr!^HTTP/1\.1 414 Request-URI Too Large!, 'long URI: 414');
$r = http("GET / HTTP/1.0\nHost: localhost\nX-Big: " . ('b' x 1100) . "\n\n");
like($r, qr!^HTTP/1\.1 400 Bad Request\r\n.*<title>400 Request Header Or Cookie Too Large</title>!s, 'long header: 400 page');
like(http_get('/'), qr!\r\n\r\nok$!, 'normal request served');
