#!/usr/bin/perl

# HTTP/2 from clients: prior-knowledge h2c on a plain port with `http2 on`
# (HTTP/1 still served there), nginx 1.22's `listen ... http2`, ALPN h2 over
# TLS (and http/1.1 where HTTP/2 is off), $server_protocol, $http2 and the
# access log, proxy_pass to an HTTP/1 backend, 5 MB both ways, an empty
# body in one HEADERS frame with END_STREAM (HEAD, 204, empty 200), an
# upstream's 204 with a Content-Length (dropped, with its type, as nginx),
# connection headers dropped, a client reset mid-response, keepalive_requests
# (GOAWAY), a too-large header field (GOAWAY ENHANCE_YOUR_CALM), and h2load
# with 100 streams per connection. Needs curl with HTTP/2 and nghttp2's
# h2load and nghttp.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_openssl openssl_in/;
use Test::Sluice::H2 qw/h2_connect h2_request h2_rst h2_frames h2_data_of/;

need_openssl();
plan(skip_all => 'no curl with HTTP/2') unless `curl --version 2>/dev/null` =~ /HTTP2/;
plan(skip_all => 'no h2load/nghttp (nghttp2-client)')
	unless `h2load --version 2>/dev/null` =~ /nghttp2/ && `nghttp --version 2>/dev/null` =~ /nghttp2/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(37);
my $d = $t->testdir();

openssl_in($d, "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout s.key -out s.crt -days 3 -subj /CN=localhost");
$t->write_file('big.bin', join('', map { sprintf("%07d\n", $_) } 1 .. 655360));

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    log_format p '$request $status $server_protocol "$http2"';
    access_log %%TESTDIR%%/access.log p;
    ssl_certificate     s.crt;
    ssl_certificate_key s.key;
    client_max_body_size 10m;
    keepalive_requests 100000;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        listen 127.0.0.1:%%PORT_8443%% ssl;
        http2 on;
        root %%TESTDIR%%;

        location / { return 200 "$server_protocol|$http2|$http_cookie|$host"; }
        location = /big.bin { }
        location = /empty { return 200 ""; }
        location = /none { return 204; }
        location = /close { add_header Connection close; return 200 "x"; }
        location /echo { proxy_pass http://127.0.0.1:%%PORT_8082%%; }
        location /p/ { proxy_pass http://127.0.0.1:%%PORT_8082%%/; }
        location = /nc { proxy_pass http://127.0.0.1:%%PORT_8084%%; }
        location = /limited { keepalive_requests 2; return 200 "l"; }
        location = /metrics { metrics; }
    }

    server {
        listen 127.0.0.1:%%PORT_8081%% http2;
        location / { return 200 "old $server_protocol"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8444%% ssl;
        location / { return 200 "tls1 $server_protocol"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8083%%;
        http2 on;
        keepalive_requests 2;
        location / { return 200 "k"; }
    }
}
EOF

$t->backend(port(8082));
# An upstream 204 that gives a length and a type.
$t->raw_backend(port(8084), '/nc' => "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n"
	. "Content-Type: text/plain\r\nX-A: 1\r\n\r\n");
$t->run();

my ($p, $p1, $ps, $ps1, $pk) = (port(8080), port(8081), port(8443), port(8444), port(8083));

sub curl { my $o = `curl -s --max-time 20 @_ 2>&1`; return $o; }

# h2c and HTTP/1 on the same port.
is(curl("--http2-prior-knowledge -H 'Cookie: a=1' -H 'Cookie: b=2' http://127.0.0.1:$p/x"),
	'HTTP/2.0|h2c|a=1; b=2|127.0.0.1', 'h2c: protocol, $http2, cookies joined, :authority as host');
is(curl("http://127.0.0.1:$p/x"), 'HTTP/1.1|||127.0.0.1', 'HTTP/1.1 on the http2 port');
like(http_get('/x'), qr/^HTTP\/1\.1 200.*HTTP\/1\.0\|\|\|localhost$/s, 'HTTP/1.0 too');
is(curl("--http2-prior-knowledge http://127.0.0.1:$p1/"), 'old HTTP/2.0', 'listen ... http2 (1.22)');
like($t->read_file('error.log'), qr/the "listen \.\.\. http2" directive is deprecated/, 'deprecation warning');

# TLS: ALPN.
is(curl("--http2 -k -w ' %{http_version}' https://127.0.0.1:$ps/x"), 'HTTP/2.0|h2||127.0.0.1 2',
	'ALPN h2 over TLS');
is(curl("--http2 -k -w ' %{http_version}' https://127.0.0.1:$ps1/"), 'tls1 HTTP/1.1 1.1',
	'no h2 offered where HTTP/2 is off');

# The access log.
$t->waitforfile("$d/access.log");
like($t->read_file('access.log'), qr{^GET /x HTTP/2\.0 200 HTTP/2\.0 "h2c"$}m, 'access log says HTTP/2.0');

# Proxying to an HTTP/1 backend.
like(curl("--http2-prior-knowledge http://127.0.0.1:$p/p/abc"), qr/^\d+ \/abc$/, 'proxy_pass over h2c');
like(curl("--http2 -k https://127.0.0.1:$ps/p/def"), qr/^\d+ \/def$/, 'proxy_pass over h2');

# 5 MB both ways.
my $big = $t->read_file('big.bin');
my $got = curl("--http2-prior-knowledge http://127.0.0.1:$p/big.bin");
ok($got eq $big, '5 MB download over h2c');
$got = curl("--http2 -k https://127.0.0.1:$ps/big.bin");
ok($got eq $big, '5 MB download over h2');
$got = curl("--http2-prior-knowledge --data-binary \@$d/big.bin -H 'Content-Type: application/x' http://127.0.0.1:$p/echo");
ok(length($got) > length($big) && index($got, $big) > 0, '5 MB upload over h2c, echoed back')
	or diag(length($got) . ' bytes: ' . substr($got, 0, 300));
$got = curl("--http2 -k --data-binary \@$d/big.bin https://127.0.0.1:$ps/echo");
ok(index($got, $big) > 0, '5 MB upload over h2')
	or diag(length($got) . ' bytes: ' . substr($got, 0, 300));
like($got, qr/^content-length: 5242880\r?$/mi, 'the upload went with its length');

# Frames: an empty body is one HEADERS frame with END_STREAM.
sub frames { my $o = `nghttp -nv @_ 2>&1`; return join "\n", $o =~ /recv (HEADERS|DATA) frame <length=\d+, flags=(0x\w+)/g; }
is(frames("http://127.0.0.1:$p/empty"), "HEADERS\n0x05", 'empty 200: HEADERS with END_STREAM only');
is(frames("http://127.0.0.1:$p/none"), "HEADERS\n0x05", '204: HEADERS with END_STREAM only');
is(frames("-H ':method: HEAD' http://127.0.0.1:$p/big.bin"), "HEADERS\n0x05", 'HEAD: no DATA');
# An upstream's 204 with Content-Length: 5: passed on, the length with
# END_STREAM and no DATA is malformed, and curl refuses the answer. The
# length and the type go, as in nginx.
my $nc = `curl -s -o /dev/null -D - --max-time 5 --http2-prior-knowledge http://127.0.0.1:$p/nc`;
like($nc, qr/^HTTP\/2 204/, "an upstream's 204 with a length: answered");
like($nc, qr/^x-a: 1\r?$/mi, "an upstream's 204: its other fields passed");
unlike($nc, qr/^content-(length|type):/mi, "an upstream's 204: no length, no type");
like(frames("http://127.0.0.1:$p/x"), qr/^HEADERS\n0x04\nDATA\n0x01$/, 'a body: HEADERS, then DATA with END_STREAM');
my $hdrs = `curl -s -o /dev/null -D - --http2-prior-knowledge http://127.0.0.1:$p/close`;
unlike($hdrs, qr/^connection:/mi, 'Connection dropped from an h2 response');
like($hdrs, qr/^HTTP\/2 200/, 'and the response sent');

# A client reset mid-response: the connection goes on.
{
	my $s = h2_connect($p, window => 1 << 30);
	h2_request($s, 1, '/big.bin');
	my ($f) = h2_frames($s, sub { $_[0]{type} eq 'DATA' }, 5);
	h2_rst($s, 1);
	h2_request($s, 3, '/x');
	($f) = h2_frames($s, sub { $_[0]{type} eq 'DATA' && $_[0]{sid} == 3 && $_[0]{flags} & 1 }, 5);
	is(h2_data_of($f, 3), 'HTTP/2.0|h2c||localhost', 'after a reset, the next stream is answered');
	ok($t->waitforlog(qr/client canceled stream 1\b/), 'a CANCEL is logged in nginx\'s words');
	# nginx's other wordings: REFUSED_STREAM, INTERNAL_ERROR, any other code.
	my $sid = 5;
	for (['7', qr/client refused stream 5\b/], ['2', qr/client terminated stream 7 due to internal error/],
		['11', qr/client terminated stream 9 with status 11\b/]) {
		my ($code, $re) = @$_;
		h2_request($s, $sid, '/big.bin');
		h2_frames($s, sub { $_[0]{type} eq 'DATA' && $_[0]{sid} == $sid }, 5);
		h2_rst($s, $sid, $code);
		ok($t->waitforlog($re), "RST_STREAM $code logged as nginx logs it");
		$sid += 2;
	}
	my ($resets) = (http_get('/metrics') // '') =~ /^sluice_http2_client_resets_total (\d+)$/m;
	is($resets, 4, 'the four resets counted in the metrics');
}

# keepalive_requests: GOAWAY after the second stream.
{
	my $s = h2_connect($pk);
	h2_request($s, 1, '/');
	h2_request($s, 3, '/');
	my $seen = 0;
	my ($f) = h2_frames($s, sub { $_[0]{type} eq 'HEADERS' && ++$seen == 2 }, 5);
	my @ga = grep { $_->{type} eq 'GOAWAY' } @$f;
	ok(@ga, 'GOAWAY after keepalive_requests streams');
	is(scalar(grep { $_->{type} eq 'HEADERS' } @$f), 2, 'both streams answered');
}

# A header field larger than large_client_header_buffers: GOAWAY
# ENHANCE_YOUR_CALM, as nginx.
{
	my $o = `curl -s -v --max-time 10 --http2-prior-knowledge -H 'X-Big: @{['a' x 9000]}' http://127.0.0.1:$p/ 2>&1`;
	unlike($o, qr/^< HTTP\/2 200/m, 'too large a field is not served');
	ok($t->waitforlog(qr/client sent too large header field/), 'and logged');
}

# 100 streams per connection.
my $h2load = `h2load -n 2000 -c 4 -m 100 http://127.0.0.1:$p/x 2>&1`;
like($h2load, qr/2000 succeeded, 0 failed, 0 errored, 0 timeout/, 'h2load -m 100 h2c: no failures');
$h2load = `h2load -n 1000 -c 2 -m 100 https://127.0.0.1:$ps/p/y 2>&1`;
like($h2load, qr/1000 succeeded, 0 failed, 0 errored, 0 timeout/, 'h2load -m 100 h2 proxied: no failures');

# Preface sniffing: a client that sends the preface slowly still gets h2.
{
	my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$p") or die;
	syswrite($s, "PRI * HTTP/2.0\r\n");
	select(undef, undef, undef, 0.2);
	syswrite($s, "\r\nSM\r\n\r\n" . pack('CnCCN', 0, 0, 4, 0, 0));
	my ($f) = h2_frames($s, sub { $_[0]{type} eq 'SETTINGS' }, 5);
	ok(grep({ $_->{type} eq 'SETTINGS' } @$f), 'a preface sent in two pieces');
}
