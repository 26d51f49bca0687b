#!/usr/bin/perl

# Trailer fields through the HTTP/1 proxy, both ways (nginx drops them):
#   - an upstream's chunked response with trailers goes to an HTTP/1.1
#     client chunked, its trailers after the last chunk, with or without
#     proxy_buffering (read whole, it keeps chunked framing rather than a
#     length, which could not carry them); to an HTTP/2 client as a
#     trailers frame; an HTTP/1.0 client gets the body alone. Fields a
#     trailer may not carry (Content-Length here) are left out; a chunked
#     response without trailers still goes with its length when read
#     whole;
#   - a client's chunked body with trailers, streamed to the upstream
#     (proxy_request_buffering off), ends with those trailers (less the
#     ones a trailer may not carry); read whole first, it goes with a
#     length and no trailers.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

plan(skip_all => 'no nghttp (nghttp2-client)') unless `nghttp --version 2>/dev/null` =~ /nghttp2/;

my $t = Test::Sluice->new()->has(qw/http proxy/)->plan(17);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    upstream u { server 127.0.0.1:%%PORT_8081%%; keepalive 4; }
    # No keep-alive: the backend does not read chunked bodies, and would
    # take the rest of one for requests on a connection kept.
    upstream once { server 127.0.0.1:%%PORT_8081%%; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        # h2c by prior knowledge, HTTP/1 as well.
        http2 on;
        proxy_http_version 1.1;
        proxy_set_header Connection "";

        location / { proxy_pass http://u; }
        location /nobuf/ { proxy_pass http://u/; proxy_buffering off; }
        location /stream/ { proxy_pass http://once/; proxy_request_buffering off; }
        location /whole/ { proxy_pass http://once/; }
    }
}

EOF

my $chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n"
	. "5\r\nhello\r\n6\r\n world\r\n";
$t->raw_backend(port(8081),
	'/trailers' => $chunked . "0\r\nX-T: v1\r\nContent-Length: 99\r\nX-Two: 2\r\n\r\n",
	'/plain' => $chunked . "0\r\n\r\n",
	'/up' => "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
$t->run();

# The head, the body as sent, and what followed the last chunk.
sub get {
	my ($path, $version) = @_;
	$version //= '1.1';
	my $r = http("GET $path HTTP/$version\r\nHost: localhost\r\nConnection: close\r\n\r\n") // '';
	my ($head, $body) = split /\r\n\r\n/, $r, 2;
	return ($head // '', $body // '');
}

my ($head, $body) = get('/trailers');
like($head, qr/^Transfer-Encoding: chunked\r?$/mi, 'buffered, with trailers: chunked to HTTP/1.1');
like($body, qr/\r\n0\r\n(?:[^\r]+\r\n)*X-T: v1\r\n(?:[^\r]+\r\n)*\r\n\z/i, 'the trailer follows the last chunk');
like($body, qr/\r\n0\r\n(?:[^\r]+\r\n)*X-Two: 2\r\n/i, 'and the other one');
unlike($body, qr/\r\n0\r\n.*Content-Length/si, 'Content-Length is not passed as a trailer');
is(dechunk($body), 'hello world', 'the body whole');

($head, $body) = get('/nobuf/trailers');
like($body, qr/\r\n0\r\n(?:[^\r]+\r\n)*X-T: v1\r\n/i, 'proxy_buffering off: the trailer passed');
is(dechunk($body), 'hello world', 'proxy_buffering off: the body whole');

($head, $body) = get('/plain');
like($head, qr/^Content-Length: 11\r?$/mi, 'without trailers, read whole: sent with its length');

($head, $body) = get('/trailers', '1.0');
is($body, 'hello world', 'to HTTP/1.0: the body alone');
unlike($head, qr/^Transfer-Encoding/mi, 'to HTTP/1.0: not chunked');

# HTTP/2: the trailers as a HEADERS frame after the DATA.
my $o = `nghttp -nv http://127.0.0.1:${\ port(8080)}/trailers 2>&1`;
like($o, qr/recv DATA frame.*recv \(stream_id=\d+\) x-t: v1\n.*recv HEADERS frame[^\n]*\n\s*; END_STREAM/s,
	'to HTTP/2: the trailer in a HEADERS frame with END_STREAM after the data') or diag($o);
unlike($o, qr/recv \(stream_id=\d+\) content-length: 99/, 'to HTTP/2: not Content-Length');

# The client's trailers, streamed.
my $chunked_req = "POST %s HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n"
	. "Connection: close\r\n\r\n4\r\nbody\r\n0\r\nX-Sum: abc\r\nContent-Length: 9\r\n\r\n";
like(http(sprintf($chunked_req, '/stream/up')), qr/^HTTP\/1.1 200 .*ok$/s, 'a chunked body with trailers, streamed: 200');
my $bytes = $t->raw_bytes(port(8081));
like($bytes, qr/POST \/up HTTP\/1.1\r\n.*\r\n\r\n4\r\nbody\r\n0\r\nX-Sum: abc\r\n\r\n/s,
	'the upstream got the body and the trailer, Content-Length left out');

like(http(sprintf($chunked_req, '/whole/up')), qr/^HTTP\/1.1 200 .*ok$/s, 'read whole first: 200');
$bytes = $t->raw_bytes(port(8081));
my ($last) = $bytes =~ /.*(POST \/up HTTP\/1.1\r\n.*)\z/s;
like($last // '', qr/^Content-Length: 4\r\n(?:[^\r]*\r\n)*\r\nbody\z/mi, 'read whole: sent with its length');
unlike($last // '', qr/X-Sum/, 'read whole: no trailer');
