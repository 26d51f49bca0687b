#!/usr/bin/perl

# $upstream_bytes_received and $upstream_bytes_sent with an HTTP/2 upstream
# (proxy_http_version 2): the head and the body on the wire as estimated
# (HEADERS frames as HPACK literals, DATA frames with their 9-byte
# headers), not the body alone. The upstream is sluice itself, over h2c.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy http_v2/)->plan(6);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    log_format up '$request_uri br=$upstream_bytes_received bs=$upstream_bytes_sent '
                  'len=$upstream_response_length';

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        access_log %%TESTDIR%%/up.log up;
        location / {
            proxy_http_version 2;
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
        }
    }

    server {
        listen 127.0.0.1:%%PORT_8081%%;
        http2 on;
        access_log off;
        location / {
            add_header X-Extra "some value";
            return 200 "0123456789";
        }
    }
}

EOF

$t->run();

like(http_get('/get'), qr!\r\n\r\n0123456789$!, 'proxied over HTTP/2');
like(http("POST /post HTTP/1.0\nHost: localhost\nContent-Length: 5\n\nabcde"),
	qr!\r\n\r\n0123456789$!, 'a body too');

my %line;
ok(poll_until(sub {
	%line = map { /^(\S+) (.*)$/ ? ($1, $2) : () } split /\n/, $t->read_file('up.log');
	keys %line == 2;
}), 'logged');

my ($br, $bs, $len) = ($line{'/get'} // '') =~ /br=(\d+) bs=(\d+) len=(\d+)/;
is($len, 10, '$upstream_response_length is the body');
# The response: a HEADERS frame (9 + :status + content-type, content-length,
# x-extra, server, date...) and one DATA frame (9 + 10).
cmp_ok($br // 0, '>', 9 + 10 + 9 + length('x-extra') + length('some value'),
	'received: the head and the framed body');
my ($bs_post) = ($line{'/post'} // '') =~ /bs=(\d+)/;
# The POST's body is 5 bytes in one DATA frame more than the GET's nothing,
# its head about as long (its method and content-length differ a little).
cmp_ok(($bs_post // 0) - ($bs // 0), '>=', 5 + 9,
	'sent: the request head, and a body with its frame header');

$t->stop();
