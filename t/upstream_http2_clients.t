#!/usr/bin/perl

# HTTP/2 clients through sluice to HTTP/2 (h2c) upstreams, end to end
# (issue 17): h2load over h2c (`http2 on`) and over TLS (ALPN h2), not
# HTTP/1.1 clients.
#   - A backend that takes two streams at a time (nginx,
#     http2_max_concurrent_streams 2, each answer ~20 ms late) and 20
#     streams at once from h2load (-c2 -m10): the streams over its limit
#     wait for a free one on the one connection, none fails, none is sent
#     past the limit (nginx refuses none).
#   - A backend that ends each connection after 20 requests (nginx,
#     keepalive_requests 20: GOAWAY) under h2load -n600 -c4 -m10, over h2c
#     with proxy_pass + proxy_http_version 2 and over TLS with grpc_pass:
#     none fails (streams a GOAWAY refused go again, their bodies with
#     them); every 2xx reached the backend once (none sent again after
#     being processed); more than one connection, none past 20 requests.
#   - A request's trailers from an HTTP/2 client (HEADERS, DATA, then
#     200 ms later HEADERS with END_STREAM) reach an HTTP/2 upstream with
#     their values when the body streams (grpc_pass; proxy_http_version 2
#     with proxy_request_buffering off), as sluice.conf(5) says; with the
#     body read whole first they are not passed (the man page's rule). An
#     HTTP/1.1 chunked body's trailer goes the same way. The upstream is
#     Test::Sluice::H2Echo, which decodes HPACK and logs the fields and
#     trailers each stream brought. (nginx 1.22 as the front would end the
#     connection at the trailers: nothing to compare with.)
# Needs nginx with http_v2, h2load (nghttp2-client) and openssl.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_openssl openssl_in/;
use Test::Sluice::Grpc qw/need_nginx_h2 nginx_backend/;
use Test::Sluice::H2 qw/h2_connect h2_frames h2_block h2_status h2_data_of h2_close/;
use Test::Sluice::H2Echo;

need_nginx_h2();
need_openssl();
plan(skip_all => 'no h2load (nghttp2-client)') unless `h2load --version 2>/dev/null` =~ /nghttp2/;

my $t = Test::Sluice->new()->has(qw/http proxy/)->plan(23);
my $d = $t->testdir();

openssl_in($d, "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
	. "-keyout s.key -out s.crt -days 3 -subj /CN=localhost");

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        listen 127.0.0.1:%%PORT_8443%% ssl;
        http2 on;
        ssl_certificate     s.crt;
        ssl_certificate_key s.key;

        location /narrow/ {
            proxy_pass http://127.0.0.1:%%PORT_8081%%;
            proxy_http_version 2;
        }
        location /ka/ {
            proxy_pass http://127.0.0.1:%%PORT_8082%%;
            proxy_http_version 2;
        }
        location /kg/ {
            grpc_pass grpc://127.0.0.1:%%PORT_8082%%;
        }
        location /tp/ {
            proxy_pass http://127.0.0.1:%%PORT_8084%%;
            proxy_http_version 2;
            proxy_request_buffering off;
        }
        location /tb/ {
            proxy_pass http://127.0.0.1:%%PORT_8084%%;
            proxy_http_version 2;
        }
        location /tg/ {
            grpc_pass grpc://127.0.0.1:%%PORT_8084%%;
        }
    }
}

EOF

# nginx: 8081 takes two streams at a time and answers through a Perl
# backend that waits 20 ms; 8082 sends GOAWAY after 20 requests.
my $nd = nginx_backend($t, 'b', <<"EOF");
log_format c '\$connection \$request_uri \$status';
server {
    listen 127.0.0.1:${\ port(8081)} http2;
    http2_max_concurrent_streams 2;
    access_log $d/nginx_b/narrow.log c;
    location / {
        proxy_pass http://127.0.0.1:${\ port(8083)}/slow/0.02/;
    }
}
server {
    listen 127.0.0.1:${\ port(8082)} http2;
    keepalive_requests 20;
    access_log $d/nginx_b/ka.log c;
    location / {
        return 200 "ka\\n";
    }
}
EOF
$t->backend(port(8083));

my $ready = "$d/echo.ready";
$t->run_daemon(\&Test::Sluice::H2Echo::run, port(8084), log => "$d/echo.log", ready => $ready);
$t->waitforfile($ready) or die "h2 echo backend did not start\n";

$t->run();

my ($p, $ps) = (port(8080), port(8443));

sub h2load {
	my $o = `timeout 30 h2load @_ 2>&1`;
	my ($req) = $o =~ /^(requests: .*)$/m;
	my ($codes) = $o =~ /^(status codes: .*)$/m;
	return ($req // "none: $o", $codes // 'none');
}

# Requests nginx logged for URIs matching $re (once the count stops
# growing, or reaches $want): by connection.
sub by_connection {
	my ($log, $re, $want) = @_;
	my %by;
	poll_until(sub {
		%by = ();
		for (split /\n/, $t->read_file($log)) {
			my ($c, $uri) = split / /;
			$by{$c}++ if $uri =~ $re;
		}
		my $n = 0;
		$n += $_ for values %by;
		$n >= $want;
	}, 3);
	return \%by;
}

sub total { my $n = 0; $n += $_ for values %{$_[0]}; return $n }

###############################################################################
# More streams than the upstream's SETTINGS_MAX_CONCURRENT_STREAMS.

my $start = time();
my ($req, $codes) = h2load("-n 200 -c 2 -m 10 http://127.0.0.1:$p/narrow/x");
my $took = time() - $start;
like($req, qr/ 200 succeeded, 0 failed, 0 errored, 0 timeout$/,
	'max_concurrent_streams 2, 20 streams at once: none failed') or diag($req);
is($codes, 'status codes: 200 2xx, 0 3xx, 0 4xx, 0 5xx', 'every answer 200');
my $by = by_connection('nginx_b/narrow.log', qr!^/narrow/x$!, 200);
is(total($by), 200, 'each request reached the backend once');
is(scalar(keys %$by), 1, 'all on the one connection: the streams over its limit waited')
	or diag(explain $by);
# Two at a time, 20 ms each: 100 rounds at least.
ok($took >= 1.9, "two at a time ($took s)");
unlike($t->read_file('nginx_b/error.log'), qr/concurrent streams exceeded/,
	'none sent past the limit (nginx refused none)');
unlike($t->read_file('error.log'), qr/free HTTP\/2 stream|REFUSED/i, 'none timed out waiting');

###############################################################################
# GOAWAY from the upstream every 20 requests, under load.

# h2load's 2xx count, from its "status codes" line.
sub ok2xx { my ($n) = $_[0] =~ /(\d+) 2xx/; return $n // -1 }

# Requests by h2load through sluice to the GOAWAY backend: none fails;
# every 2xx is a request nginx served once (none served twice, as a
# stream sent again after being processed would be); more than one
# connection, none past 20 requests: the GOAWAYs happened.
sub goaway_load {
	my ($name, $url, $re) = @_;
	my ($req, $codes) = h2load("-n 600 -c 4 -m 10 $url");
	like($req, qr/ 600 succeeded, 0 failed, 0 errored, 0 timeout$/, "$name: none failed")
		or diag($req);
	is($codes, 'status codes: 600 2xx, 0 3xx, 0 4xx, 0 5xx', "$name: every answer 200");
	my $by = by_connection('nginx_b/ka.log', $re, ok2xx($codes));
	is(total($by), ok2xx($codes), "$name: each answered request reached the backend once");
	my ($most) = sort { $b <=> $a } values %$by;
	ok(keys %$by > 1 && ($most // 99) <= 20,
		"$name: " . keys(%$by) . ' backend connections, at most ' . ($most // 0) . ' requests each')
		or diag(explain $by);
}

goaway_load('keepalive_requests 20 (GOAWAY), h2c, proxy_http_version 2',
	"http://127.0.0.1:$p/ka/y", qr!^/ka/y$!);
goaway_load('keepalive_requests 20 (GOAWAY), h2 over TLS, grpc_pass',
	"https://127.0.0.1:$ps/kg/z", qr!^/kg/z$!);

###############################################################################
# A request's trailers from an HTTP/2 client.

# POST $path on a new connection: HEADERS (the fields), DATA ($data), and
# 200 ms later HEADERS with END_STREAM (the trailers). The response's
# :status and DATA, and the line the echo backend logged for $path.
sub trailed {
	my ($path, $data, $fields, $trailers) = @_;
	my $frame = \&Test::Sluice::H2::frame;
	my $s = h2_connect($p);
	syswrite($s, $frame->(1, 0x4, 1, h2_block([':method', 'POST'], [':scheme', 'http'],
		[':path', $path], [':authority', 'localhost'], @$fields))
		. $frame->(0, 0, 1, $data));
	sleep 0.2;
	syswrite($s, $frame->(1, 0x5, 1, h2_block(@$trailers)));
	my ($f) = h2_frames($s, sub {
		$_[0]{type} =~ /^(?:RST_STREAM|GOAWAY)$/
			|| $_[0]{sid} == 1 && $_[0]{flags} & 1 && $_[0]{type} =~ /^(?:DATA|HEADERS)$/;
	}, 5);
	h2_close($s);
	my ($head) = grep { $_->{type} eq 'HEADERS' && $_->{sid} == 1 } @$f;
	my ($line) = grep { / \Q$path\E / } split /\n/, $t->read_file('echo.log');
	return ($head ? h2_status($head->{payload}) : 'none: ' . join(' ', map { $_->{type} } @$f),
		h2_data_of($f, 1), $line // 'none');
}

my @two = (['x-checksum', 'abc'], ['x-trailer-two', '2']);

my ($status, $data, $line) = trailed('/tp/a', 'hello', [['content-type', 'text/plain']], \@two);
is($status, 200, 'proxy_request_buffering off: answered');
like($line, qr/ body=hello .* trailers=x-checksum: abc\|x-trailer-two: 2$/,
	'proxy_request_buffering off: the body, then the trailers with their values upstream')
	or diag($line);

my $grpc = pack('CN', 0, 5) . 'hello';
($status, $data, $line) = trailed('/tg/test.Echo/Unary', $grpc,
	[['content-type', 'application/grpc'], ['te', 'trailers']], [['x-checksum', 'abc']]);
is($status, 200, 'grpc_pass: answered');
like($data, qr/^\0\0\0\0.POST \/tg\/test\.Echo\/Unary /s, 'grpc_pass: the answer\'s message');
like($line, qr/ body=\\x00\\x00\\x00\\x00\\x05hello fields=.*te: trailers.* trailers=x-checksum: abc$/,
	'grpc_pass: the message, then the trailer upstream') or diag($line);

# The body read whole first: it goes with a length, the trailers do not
# (sluice.conf(5): passed only when the body streams).
($status, $data, $line) = trailed('/tb/a', 'hello', [], \@two);
is($status, 200, 'body read whole: answered');
like($line, qr/ body=hello fields=content-length: 5 trailers=$/,
	'body read whole: the body with its length, no trailers')
	or diag($line);

# HTTP/1.1 chunked trailers go the same way.
my $r = http(<<EOF, body => "5\r\nhello\r\n0\r\nX-Checksum: h1\r\n\r\n");
POST /tp/h1 HTTP/1.1
Host: localhost
Transfer-Encoding: chunked
Connection: close

EOF
like($r, qr/^HTTP\/1\.1 200.* body=hello .* trailers=x-checksum: h1\r?$/ms,
	'an HTTP/1.1 chunked body\'s trailer too') or diag($r);
