#!/usr/bin/perl

# HTTP/2 requests that RFC 9113 calls malformed, or that nginx refuses, and
# the host a request is routed by. Each refused request gets no answer
# from the backend (it reaches nothing there), and is refused the way nginx
# or the RFC has it:
#   - a Host field that names another host than :authority: 400 ("client
#     sent duplicate host header", as nginx); the same host twice is one
#     host (nginx 1.22 refuses that too: the man page says why not);
#   - no :authority and no Host: 400 ("client sent HTTP/1.1 request
#     without "Host" header", nginx's words for every version above 1.0);
#   - no :path, with a Host field and no :authority: 400 ("client sent no
#     :path header"; h2 reads that request as one for "/");
#   - CONNECT (no :scheme, no :path): 400 ("client sent no :scheme
#     header"), never passed on as a tunnel request; TRACE: 405;
#   - connection-specific fields, TE other than "trailers", a field name in
#     upper case or with a space or colon, a value with CR, LF or NUL,
#     pseudo-headers missing, twice, unknown, empty, after a regular field,
#     or a path that is not absolute, a Content-Length that is not a number,
#     twice, or that the DATA frames do not match: the stream (RST_STREAM
#     PROTOCOL_ERROR) or the connection (GOAWAY PROTOCOL_ERROR) is refused,
#     or a 400 answered; never a request to the backend.
# Core Perl and Test::Sluice::H2 only.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::H2 qw/h2_connect h2_frames h2_data_of h2_status/;

plan(skip_all => 'no curl with HTTP/2') unless `curl --version 2>/dev/null` =~ /HTTP2/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(49);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        http2 on;
        server_name localhost;
        location / { proxy_pass http://127.0.0.1:%%PORT_8081%%; }
        location = /host { return 200 "host=$host http_host=$http_host"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name other.example;
        location / { return 200 "other"; }
    }
}

EOF

$t->raw_backend(port(8081));
$t->run();

my @workers = $t->started_workers();
my $p = port(8080);

sub frame { Test::Sluice::H2::frame(@_) }
sub literal { Test::Sluice::H2::literal(@_) }
sub block { join '', map { literal(@$_) } @_ }

sub pseudo {
	my ($path, %o) = @_;
	return ([':method', $o{method} // 'GET'], [':scheme', 'http'], [':path', $path],
		[':authority', 'localhost']);
}

# Sends $bytes after the preface; returns stream 1's answer: the status of
# its HEADERS, or "reset N" (RST_STREAM), or "goaway N", and its body.
sub exchange {
	my ($bytes) = @_;
	my $s = h2_connect($p);
	syswrite($s, $bytes);
	my ($f, $closed) = h2_frames($s, sub {
		my $x = $_[0];
		return ($x->{type} eq 'DATA' && $x->{sid} == 1 && $x->{flags} & 1)
			|| ($x->{type} eq 'HEADERS' && $x->{sid} == 1 && $x->{flags} & 1)
			|| ($x->{type} eq 'RST_STREAM' && $x->{sid} == 1) || $x->{type} eq 'GOAWAY';
	}, 5);
	close $s;
	my $answer = 'none';
	for my $x (@$f) {
		if ($x->{type} eq 'HEADERS' && $x->{sid} == 1) {
			$answer = h2_status($x->{payload});
			last;
		}
		if ($x->{type} eq 'RST_STREAM' && $x->{sid} == 1) {
			$answer = 'reset ' . unpack('N', $x->{payload});
			last;
		}
		if ($x->{type} eq 'GOAWAY') {
			$answer = 'goaway ' . unpack('N', substr($x->{payload}, 4, 4));
			last;
		}
	}
	return ($answer, h2_data_of($f, 1));
}

sub reached {
	my ($path) = @_;
	return scalar grep { $_->[2] =~ /^\Q$path\E(\?|$)/ } $t->raw_log(port(8081));
}

# The host.
{
	my ($a, $body) = exchange(frame(1, 0x5, 1, block(pseudo('/host'), ['host', 'localhost'])));
	is($a, 200, 'Host as :authority: 200');
	is($body, 'host=localhost http_host=localhost', 'Host as :authority: one host');

	($a, $body) = exchange(frame(1, 0x5, 1, block(pseudo('/host'), ['host', 'LocalHost'])));
	is($a, 200, 'Host as :authority, in other case: 200');

	($a, $body) = exchange(frame(1, 0x5, 1, block(pseudo('/host/1'), ['host', 'other.example'])));
	is($a, 400, 'Host naming another host than :authority: 400');
	ok($t->waitforlog(qr/client sent duplicate host header: "Host: other.example", previous value: "Host: localhost" while reading client request headers/),
		'Host naming another host: logged as nginx');
	is(reached('/host/1'), 0, 'Host naming another host: nothing reached the backend');

	($a, $body) = exchange(frame(1, 0x5, 1, block([':method', 'GET'], [':scheme', 'http'],
		[':path', '/host'], ['host', 'other.example'])));
	is($a, 200, 'Host without :authority: 200');
	is($body, 'other', 'Host without :authority: picks the server');

	($a, $body) = exchange(frame(1, 0x5, 1, block([':method', 'GET'], [':scheme', 'http'],
		[':path', '/nohost'])));
	is($a, 400, 'neither :authority nor Host: 400');
	ok($t->waitforlog(qr/client sent HTTP\/1.1 request without "Host" header while reading client request headers/),
		'neither :authority nor Host: logged as nginx');
	is(reached('/nohost'), 0, 'neither :authority nor Host: nothing reached the backend');

	# Without :authority, h2 takes a request with no :path (its URI reads
	# as "/"); nginx refuses it.
	($a, $body) = exchange(frame(1, 0x5, 1, block([':method', 'GET'], [':scheme', 'http'],
		['host', 'localhost'])));
	is($a, 400, 'no :path, Host instead of :authority: 400');
	ok($t->waitforlog(qr/client sent no :path header while reading client request headers/),
		'no :path: logged as nginx');
	is(reached('/'), 0, 'no :path: nothing reached the backend');

	# nginx finds an invalid Host while it reads the fields, a missing
	# :path only once the head is whole.
	($a, $body) = exchange(frame(1, 0x5, 1, block([':method', 'GET'], [':scheme', 'http'],
		['host', 'bad/host'])));
	is($a, 400, 'no :path and an invalid Host: 400');
	ok($t->waitforlog(qr/client sent invalid host header while reading client request headers.*host: "bad\/host"/),
		'no :path and an invalid Host: the host logged, as nginx');
}

# CONNECT and TRACE.
{
	my ($a) = exchange(frame(1, 0x5, 1, block([':method', 'CONNECT'], [':authority', 'localhost:80'])));
	is($a, 400, 'CONNECT: 400');
	ok($t->waitforlog(qr/client sent no :scheme header while reading client request headers/),
		'CONNECT: logged as nginx');
	is(scalar(grep { $_->[1] eq 'CONNECT' } $t->raw_log(port(8081))), 0,
		'CONNECT: nothing reached the backend');

	($a) = exchange(frame(1, 0x5, 1, block(pseudo('/trace', method => 'TRACE'))));
	is($a, 405, 'TRACE: 405');
	is(reached('/trace'), 0, 'TRACE: nothing reached the backend');
}

# Malformed requests (RFC 9113 8.1.1, 8.2, 8.3): refused, each by the
# stream's reset, the connection's GOAWAY, or a 400; none reaches the
# backend.
my @post = pseudo('/m', method => 'POST');
my %malformed = (
	'connection field' => frame(1, 0x5, 1, block(pseudo('/m/1'), ['connection', 'keep-alive'])),
	'keep-alive field' => frame(1, 0x5, 1, block(pseudo('/m/2'), ['keep-alive', 'timeout=5'])),
	'transfer-encoding field' => frame(1, 0x4, 1, block(pseudo('/m/3', method => 'POST'),
		['transfer-encoding', 'chunked'])) . frame(0, 0x1, 1, "3\r\nabc\r\n0\r\n\r\n"),
	'upgrade field' => frame(1, 0x5, 1, block(pseudo('/m/4'), ['upgrade', 'websocket'])),
	'TE gzip' => frame(1, 0x5, 1, block(pseudo('/m/5'), ['te', 'gzip'])),
	'a name in upper case' => frame(1, 0x5, 1, block(pseudo('/m/6'), ['X-Foo', '1'])),
	'a name with a space' => frame(1, 0x5, 1, block(pseudo('/m/7'), ['x foo', '1'])),
	'a name with a colon' => frame(1, 0x5, 1, block(pseudo('/m/8'), ['x:foo', '1'])),
	'a value with CR LF' => frame(1, 0x5, 1, block(pseudo('/m/9'), ['x-a', "a\r\nx-b: c"])),
	'a value with NUL' => frame(1, 0x5, 1, block(pseudo('/m/10'), ['x-a', "a\0b"])),
	'no :path' => frame(1, 0x5, 1, block([':method', 'GET'], [':scheme', 'http'],
		[':authority', 'localhost'])),
	'no :method' => frame(1, 0x5, 1, block([':scheme', 'http'], [':path', '/m/12'],
		[':authority', 'localhost'])),
	'no :scheme' => frame(1, 0x5, 1, block([':method', 'GET'], [':path', '/m/13'],
		[':authority', 'localhost'])),
	':path twice' => frame(1, 0x5, 1, block(pseudo('/m/14'), [':path', '/m/14b'])),
	'empty :path' => frame(1, 0x5, 1, block([':method', 'GET'], [':scheme', 'http'],
		[':path', ''], [':authority', 'localhost'])),
	'a relative :path' => frame(1, 0x5, 1, block([':method', 'GET'], [':scheme', 'http'],
		[':path', 'm/16'], [':authority', 'localhost'])),
	'an unknown pseudo-header' => frame(1, 0x5, 1, block(pseudo('/m/17'), [':foo', '1'])),
	'a pseudo-header after a field' => frame(1, 0x5, 1, block([':method', 'GET'],
		[':scheme', 'http'], ['x-a', '1'], [':path', '/m/18'], [':authority', 'localhost'])),
	'a response pseudo-header' => frame(1, 0x5, 1, block(pseudo('/m/19'), [':status', '200'])),
	'Content-Length not a number' => frame(1, 0x4, 1, block(pseudo('/m/20', method => 'POST'),
		['content-length', 'abc'])) . frame(0, 0x1, 1, 'abc'),
	'Content-Length twice' => frame(1, 0x4, 1, block(pseudo('/m/21', method => 'POST'),
		['content-length', '3'], ['content-length', '4'])) . frame(0, 0x1, 1, 'abc'),
	'DATA short of Content-Length' => frame(1, 0x4, 1, block(pseudo('/m/22', method => 'POST'),
		['content-length', '5'])) . frame(0, 0x1, 1, 'abc'),
	'DATA past Content-Length' => frame(1, 0x4, 1, block(pseudo('/m/23', method => 'POST'),
		['content-length', '2'])) . frame(0, 0x1, 1, 'abcde'),
);
for my $name (sort keys %malformed) {
	my ($a) = exchange($malformed{$name});
	like($a, qr/^(reset 1|goaway 1|400)$/, "$name: refused ($a)");
}
is(scalar(grep { $_->[2] =~ m{^/m(/|$)} } $t->raw_log(port(8081))), 0,
	'malformed requests: none reached the backend');

# Well-formed neighbours of those are served.
{
	my ($a, $body) = exchange(frame(1, 0x5, 1, block(pseudo('/ok/1'), ['te', 'trailers'])));
	is($a, 200, 'TE: trailers: served');
	($a, $body) = exchange(frame(1, 0x4, 1, block(pseudo('/ok/2', method => 'POST'),
		['content-length', '3'])) . frame(0, 0x1, 1, 'abc'));
	is($a, 200, 'a body of its Content-Length: served');
	is(reached('/ok/1') + reached('/ok/2'), 2, 'both reached the backend');
}

is(join(' ', $t->worker_pids()), join(' ', @workers), 'no worker restarted');
