#!/usr/bin/perl

# HTTP/1 request framing (RFC 9112) as nginx applies it: how a request's body
# is delimited (Content-Length, chunked, neither), which heads are refused
# and with what status, header syntax, head size limits
# (large_client_header_buffers), versions, pipelining, Expect: 100-continue,
# HEAD and HTTP/1.0. For each case: the status, whether the connection is
# closed after it (read to EOF), nginx's page for a refusal, and what the
# backend received: nothing at all for a refused request (every byte the raw
# backend reads is recorded), the body it was meant to get otherwise.
#
# Every expectation was checked against nginx 1.22.1 by running this file
# with SLUICE_BINARY=/usr/sbin/nginx: the comment by each case says what
# nginx does. Cases nginx answers differently (or that nginx 1.22 gets
# wrong) are said so where they are. A TODO names where sluice still
# differs, and why (each is in sluice(8)).

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Wire qw/exchange/;

my $t = Test::Sluice->new()->has(qw/http proxy/)->plan(455);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;

        location / { proxy_pass http://127.0.0.1:%%PORT_8081%%; }
    }

    server {
        listen 127.0.0.1:%%PORT_8082%%;
        server_name localhost;
        large_client_header_buffers 2 1k;

        location / { proxy_pass http://127.0.0.1:%%PORT_8081%%; }
    }
}

EOF

$t->raw_backend(port(8081));
$t->run();

my $H = "Host: localhost\r\n";

my %reason = (400 => 'Bad Request', 413 => 'Request Entity Too Large',
	414 => 'Request-URI Too Large', 501 => 'Not Implemented',
	505 => 'HTTP Version Not Supported');

# What the backend has read so far, all connections, whole requests or not.
sub backend_bytes { length $t->raw_bytes(port(8081)) }

# The requests the backend answered since it had read $since requests.
sub new_requests {
	my ($since) = @_;
	my @r = $t->raw_requests(port(8081));
	return @r[$since .. $#r];
}

# A refused request: its status with nginx's page, Connection: close and the
# connection closed, and not a byte of it at the backend. %todo names, for
# each of status, page, header, closed and backend, why the current engine
# fails that check.
sub refused {
	my ($name, $send, $status, %o) = @_;
	my %todo = %{$o{todo} // {}};
	my $before = backend_bytes();
	my $r = exchange(port => port($o{port} // 8080), send => ref $send ? $send : [$send]);
	my $first = $r->{responses}[0] // { status => 0, h => {}, body => '' };
	TODO: {
		local $TODO = $todo{status};
		is($first->{status}, $status, "$name: $status");
	}
	TODO: {
		local $TODO = $todo{page};
		like($first->{body}, qr/<center><h1>$status \Q$reason{$status}\E<\/h1><\/center>/,
			"$name: nginx's page");
	}
	TODO: {
		local $TODO = $todo{header};
		is(lc($first->{h}{connection} // ''), 'close', "$name: Connection: close");
	}
	TODO: {
		local $TODO = $todo{closed};
		ok($r->{closed}, "$name: connection closed");
	}
	TODO: {
		local $TODO = $todo{backend};
		is(backend_bytes() - $before, 0, "$name: the backend got nothing");
	}
	return $r;
}

# An accepted request: 200, the connection still open, and the backend got
# one request whose body is $body (and which matches $o{forwarded}, and does
# not match $o{not_forwarded}, when given).
sub served {
	my ($name, $send, $body, %o) = @_;
	my %todo = %{$o{todo} // {}};
	my $n = () = $t->raw_requests(port(8081));
	my $r = exchange(port => port($o{port} // 8080), send => ref $send ? $send : [$send]);
	my $first = $r->{responses}[0] // { status => 0, h => {}, body => '' };
	my @got = new_requests($n);
	TODO: {
		local $TODO = $todo{status};
		is($first->{status}, 200, "$name: 200");
	}
	TODO: {
		local $TODO = $todo{closed};
		ok(!$r->{closed}, "$name: connection kept");
	}
	TODO: {
		local $TODO = $todo{backend};
		is(scalar(@got) == 1 && $got[0] =~ /\r\n\r\n(.*)\z/s ? $1 : undef, $body,
			"$name: the backend got the body once");
		like($got[0] // '', $o{forwarded}, "$name: forwarded as expected")
			if $o{forwarded};
	}
	TODO: {
		local $TODO = $todo{not_forwarded};
		unlike($got[0] // '', $o{not_forwarded}, "$name: not forwarded as it was")
			if $o{not_forwarded};
	}
	return $r;
}

###############################################################################
# How the body is delimited.

# nginx: 400, 'client sent "Content-Length" and "Transfer-Encoding" headers
# at the same time', either order.
refused('Content-Length with Transfer-Encoding',
	"POST /clte HTTP/1.1\r\n${H}Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
	. "4\r\nbody\r\n0\r\n\r\n", 400);
refused('Transfer-Encoding with Content-Length',
	"POST /tecl HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n"
	. "4\r\nbody\r\n0\r\n\r\n", 400);

# nginx: 400 'client sent duplicate header line: "Content-Length: 5",
# previous value: "Content-Length: 4"'; also for two equal lines.
refused('two differing Content-Length',
	"POST /cl-differ HTTP/1.1\r\n${H}Content-Length: 4\r\nContent-Length: 5\r\n\r\nbody", 400);
refused('two equal Content-Length',
	"POST /cl-equal HTTP/1.1\r\n${H}Content-Length: 4\r\nContent-Length: 4\r\n\r\nbody", 400);

# nginx: 400 'client sent invalid "Content-Length" header' for anything but
# digits (around which spaces are trimmed), and for a value past 2^63.
for my $v ('abc', '-1', '1 2', '+4', '99999999999999999999', '', '4, 4', '0x4', '4.0') {
	refused("Content-Length: '$v'",
		"POST /cl-bad HTTP/1.1\r\n${H}Content-Length: $v\r\n\r\nbody", 400);
}

# nginx: leading zeros and spaces around the digits are fine.
served('Content-Length: 04', "POST /cl-zero HTTP/1.1\r\n${H}Content-Length: 04\r\n\r\nbody",
	'body');
served('Content-Length with a trailing space',
	"POST /cl-space HTTP/1.1\r\n${H}Content-Length: 4 \r\n\r\nbody", 'body');

# nginx: 501 'client sent unknown "Transfer-Encoding": "gzip"' for anything
# but "chunked" alone (any case, spaces trimmed), even when chunked is last.
for my $te ('gzip', 'chunked, gzip', 'identity') {
	refused("Transfer-Encoding: $te",
		"POST /te-bad HTTP/1.1\r\n${H}Transfer-Encoding: $te\r\n\r\n4\r\nbody\r\n0\r\n\r\n", 501);
}
for my $te ('gzip, chunked', 'chunked, chunked') {
	refused("Transfer-Encoding: $te",
		"POST /te-bad HTTP/1.1\r\n${H}Transfer-Encoding: $te\r\n\r\n4\r\nbody\r\n0\r\n\r\n", 501);
}
served('Transfer-Encoding: Chunked',
	"POST /te-case HTTP/1.1\r\n${H}Transfer-Encoding: Chunked\r\n\r\n4\r\nbody\r\n0\r\n\r\n",
	'body', forwarded => qr/^Content-Length: 4\r$/mi, not_forwarded => qr/^Transfer-Encoding/mi);

# nginx: an empty body the client framed goes with "Content-Length: 0" (an
# upstream may answer 411 to a POST without a length); no framing, no length.
served('POST with Content-Length: 0',
	"POST /cl-empty HTTP/1.1\r\n${H}Content-Length: 0\r\n\r\n", '',
	forwarded => qr/^Content-Length: 0\r$/mi);
served('chunked body that ends at once',
	"PUT /te-empty HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", '',
	forwarded => qr/^Content-Length: 0\r$/mi, not_forwarded => qr/^Transfer-Encoding/mi);
served('POST without a body', "POST /no-body HTTP/1.1\r\n${H}\r\n", '',
	not_forwarded => qr/^Content-Length/mi);

# nginx: 400 'client sent HTTP/1.0 request with "Transfer-Encoding" header'.
refused('Transfer-Encoding in HTTP/1.0',
	"POST /te-10 HTTP/1.0\r\n${H}Transfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n\r\n", 400);

###############################################################################
# Header syntax.

# nginx: 400 'client sent invalid header line: "Host\x20..."' for
# whitespace before the colon, a folded line (obs-fold), a line that starts
# with whitespace, NUL or a bare CR in a value, a name with a space in it or
# no name at all.
my %bad_syntax = (
	'space before the colon' => "GET /sp HTTP/1.1\r\nHost : localhost\r\n\r\n",
	'tab before the colon' => "GET /tab HTTP/1.1\r\n${H}X-Foo\t: bar\r\n\r\n",
	'obs-fold (space)' => "GET /fold HTTP/1.1\r\n${H}X-Fold: a\r\n b\r\n\r\n",
	'obs-fold (tab)' => "GET /fold HTTP/1.1\r\n${H}X-Fold: a\r\n\tb\r\n\r\n",
	'head starting with a space' => "GET /lead HTTP/1.1\r\n ${H}\r\n",
	'NUL in a value' => "GET /nul HTTP/1.1\r\n${H}X-Nul: a\0b\r\n\r\n",
	'bare CR in a value' => "GET /cr HTTP/1.1\r\n${H}X-Cr: a\rb\r\n\r\n",
	'space in a name' => "GET /nsp HTTP/1.1\r\n${H}X Y: x\r\n\r\n",
	'empty name' => "GET /empty HTTP/1.1\r\n${H}: x\r\n\r\n",
);
for my $name (sort keys %bad_syntax) {
	refused($name, $bad_syntax{$name}, 400);
}

# nginx (ignore_invalid_headers on, underscores_in_headers off, the
# defaults): a name with a character outside [A-Za-z0-9-] is not an error;
# the line is logged ('client sent invalid header line: "Fo@o: x"'), left
# out, and the request served.
served('invalid header names',
	"GET /ignored HTTP/1.1\r\n${H}Fo\@o: x\r\nX(y): z\r\nX-Ok: y\r\n\r\n", '',
	forwarded => qr/^X-Ok: y\r$/m, not_forwarded => qr/Fo\@o|X\(y\)/);
served('header name with an underscore',
	"GET /underscore HTTP/1.1\r\n${H}X_Under: u\r\nX-Ok: y\r\n\r\n", '',
	forwarded => qr/^X-Ok: y\r$/m, not_forwarded => qr/X_Under/);

# nginx: a line may end in a bare LF.
served('bare LF line ends', "GET /lf HTTP/1.1\n${H}X-Lf: a\n\n", '');

# nginx: a name alone on its line is a field with an empty value; one it
# flags invalid is left out.
served('header line without a colon',
	"GET /nocolon HTTP/1.1\r\n${H}X-Foo\r\nX\@Bar\r\nX-Ok: y\r\n\r\n", '',
	forwarded => qr/^X-Foo: ?\r$/m, not_forwarded => qr/X\@Bar/);

# nginx: 400 'client sent invalid request' for an absolute target whose
# host is not letters, digits, dots and dashes (or an IP literal) or whose
# port is not digits; 'client sent invalid host header' for a Host with a
# space or a control character anywhere, its port too. A Host of UTF-8
# bytes is served.
refused('absolute target with a port that is not digits',
	"GET http://localhost:b/x HTTP/1.1\r\n${H}\r\n", 400);
refused('absolute target with a semicolon in its host',
	"GET http://local;host/x HTTP/1.1\r\n${H}\r\n", 400);
served('absolute target with an IP literal and a port',
	"GET http://[::1]:8080/lit HTTP/1.1\r\n${H}\r\n", '');
refused('Host with a space in its port', "GET /hsp HTTP/1.1\r\nHost: localhost:1 2\r\n\r\n", 400);
served('Host of UTF-8 bytes', "GET /utf HTTP/1.1\r\nHost: \xc3\xa9.example\r\n\r\n", '');

###############################################################################
# Chunked request bodies.

# nginx: 400, [error] 'client sent invalid chunked body', for a size that
# does not fit (nginx checks it against 2^63 with the CRLF it needs), a
# character that is not hex, a sign or 0x, and data not followed by CRLF.
my %bad_chunks = (
	'chunk size overflow' => "ffffffffffffffffffff\r\nx\r\n0\r\n\r\n",
	'chunk size 2^63-1' => "7fffffffffffffff\r\nx\r\n0\r\n\r\n",
	'chunk size not hex' => "4g\r\nbody\r\n0\r\n\r\n",
	'chunk size 0x4' => "0x4\r\nbody\r\n0\r\n\r\n",
	'chunk size -4' => "-4\r\nbody\r\n0\r\n\r\n",
	'chunk data without CRLF' => "4\r\nbodyXX0\r\n\r\n",
	'chunk size missing' => "\r\n4\r\nbody\r\n0\r\n\r\n",
	'chunk size line of an extension only' => ";x\r\n4\r\nbody\r\n0\r\n\r\n",
);
for my $name (sort keys %bad_chunks) {
	refused($name, "POST /chunks HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n"
		. $bad_chunks{$name}, 400);
}

# nginx: 413 'client intended to send too large chunked body' as soon as a
# chunk's size passes client_max_body_size (1m), not when it has arrived.
refused('chunk larger than client_max_body_size',
	"POST /big HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\nfffffff\r\nx", 413);

# nginx: chunk extensions are skipped, trailer fields read and dropped, hex
# in either case and spaces after the size allowed; the body goes to the
# backend with a Content-Length.
served('chunk extension',
	"POST /ext HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n4;name=val\r\nbody\r\n0\r\n\r\n",
	'body');
served('chunked body with trailers',
	"POST /trailers HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n5\r\n12345\r\n"
	. "0\r\nX-Trailer: t\r\nX-Other: u\r\n\r\n", 'body12345',
	forwarded => qr/^Content-Length: 9\r$/m, not_forwarded => qr/X-Trailer|X-Other/);
served('chunk size in upper case',
	"POST /hex HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n",
	'0123456789');
served('space after the chunk size',
	"POST /csp HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n4 \r\nbody\r\n0\r\n\r\n", 'body');
# nginx: bare LF ends chunk lines too, as it ends header lines.
served('chunk lines ending in LF',
	"POST /clf HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n4\nbody\n0\n\n", 'body');
# nginx: a space or a tab after the size starts an extension too; leading
# zeros are read while the size fits; trailer lines are skipped, whatever
# they hold.
served('chunk extension after a space',
	"POST /cext HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n5 e\r\nhello\r\n0\r\n\r\n", 'hello');
served('chunk size with leading zeros',
	"POST /czero HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n000000000000000005\r\nhello\r\n0\r\n\r\n", 'hello');
served('trailer lines no field holds',
	"POST /ctrail HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX y\r\n: z\r\nX-T: \x01\r\n\r\n", 'hello');
served('chunk lines ending in LF, with an extension and trailers',
	"POST /clf2 HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n4;a=b\nbody\n1\r\n!\n0\nX-T: t\n\n", 'body!');

###############################################################################
# Head size: large_client_header_buffers 4 8k by default, 2 1k on port 8082.

# nginx: 414 'client sent too long URI' for a request line longer than a
# buffer; 400 'client sent too long header line' with the page "Request
# Header Or Cookie Too Large" for a header line longer than one; the same,
# 'client sent too large request', when the lines do not fit in the buffers
# (a line never spans two).
for my $c ([8080, 8000, 8200], [8082, 900, 1100]) {
	my ($p, $fits, $over) = @$c;
	my $k = $p == 8082 ? ' (2 1k)' : '';
	my $r = exchange(port => port($p), send => ["GET /" . ('a' x $fits) . " HTTP/1.1\r\n${H}\r\n"]);
	is($r->{responses}[0]{status}, 200, "request line of $fits bytes$k: served");
	refused("request line of $over bytes$k", "GET /" . ('a' x $over) . " HTTP/1.1\r\n${H}\r\n",
		414, port => $p);
	$r = exchange(port => port($p),
		send => ["GET /hdr HTTP/1.1\r\n${H}X-Big: " . ('b' x ($fits - 20)) . "\r\n\r\n"]);
	is($r->{responses}[0]{status}, 200, "header of $fits bytes$k: served");
	for my $h ('X-Big', 'Cookie') {
		$r = refused("$h header of $over bytes$k",
			"GET /hdr HTTP/1.1\r\n${H}$h: " . ('b' x $over) . "\r\n\r\n", 400, port => $p);
		TODO: {
			local $TODO = undef;
			is($r->{responses}[0]{body} =~ s/<hr><center>[^<]*</<hr><center>SERVER</r,
				"<html>\r\n<head><title>400 Request Header Or Cookie Too Large</title></head>\r\n"
				. "<body>\r\n<center><h1>400 Bad Request</h1></center>\r\n"
				. "<center>Request Header Or Cookie Too Large</center>\r\n"
				. "<hr><center>SERVER</center>\r\n</body>\r\n</html>\r\n",
				"$h header of $over bytes$k: nginx's Request Header Or Cookie Too Large page");
		}
	}
}
my $lines = sub {
	my ($n, $len) = @_;
	return join('', map { "X-B$_: " . ('b' x $len) . "\r\n" } 1 .. $n);
};
# 4 x 8k: three lines of 7000 fit, five do not; a hundred lines of 300 bytes
# (30k) fit, 120 do not; 200 short lines are fine (nginx counts bytes, not
# lines).
served('3 headers of 7000 bytes', "GET /h3 HTTP/1.1\r\n$H" . $lines->(3, 7000) . "\r\n", '');
refused('5 headers of 7000 bytes', "GET /h5 HTTP/1.1\r\n$H" . $lines->(5, 7000) . "\r\n", 400);
served('100 headers of 300 bytes', "GET /h100 HTTP/1.1\r\n$H" . $lines->(100, 300) . "\r\n", '');
refused('120 headers of 300 bytes', "GET /h120 HTTP/1.1\r\n$H" . $lines->(120, 300) . "\r\n", 400);
served('200 short headers', "GET /h200 HTTP/1.1\r\n$H" . $lines->(200, 1) . "\r\n", '');
# 2 x 1k (and the 1k client_header_buffer_size first): three lines of 600
# bytes fit, four do not; ten of 100 fit, thirty do not.
served('3 headers of 600 bytes (2 1k)', "GET /k3 HTTP/1.1\r\n$H" . $lines->(3, 600) . "\r\n", '',
	port => 8082);
refused('4 headers of 600 bytes (2 1k)', "GET /k4 HTTP/1.1\r\n$H" . $lines->(4, 600) . "\r\n", 400,
	port => 8082);
served('10 headers of 100 bytes (2 1k)', "GET /k10 HTTP/1.1\r\n$H" . $lines->(10, 100) . "\r\n",
	'', port => 8082);
refused('30 headers of 100 bytes (2 1k)', "GET /k30 HTTP/1.1\r\n$H" . $lines->(30, 100) . "\r\n",
	400, port => 8082);

###############################################################################
# Request line and version.

# nginx: 400 'client sent HTTP/1.1 request without "Host" header'; HTTP/1.0
# needs none.
refused('HTTP/1.1 without Host', "GET /nohost HTTP/1.1\r\n\r\n", 400);
{
	my $r = exchange(port => port(8080), send => ["GET /nohost10 HTTP/1.0\r\n\r\n"]);
	is($r->{responses}[0]{status}, 200, 'HTTP/1.0 without Host: served');
}

# nginx: any HTTP/1.x is served as HTTP/1.1 (kept alive); 505 'client sent
# invalid version' for a major version other than 1.
for my $v ('1.2', '1.9', '1.10') {
	served("HTTP/$v", "GET /v HTTP/$v\r\n${H}\r\n", '');
}
for my $v ('2.0', '3.0', '11', '20') {
	refused("HTTP/$v request line", "GET /v HTTP/$v\r\n${H}\r\n", 505);
}
# nginx: spaces after the version are read.
served('spaces after the version', "GET /vsp HTTP/1.1  \r\n${H}\r\n", '');

# nginx: 400 'client sent invalid method' / 'invalid request' for garbage, a
# TLS hello and a version in lower case.
refused('garbage request line', "HELLO\r\n\r\n", 400);
refused('TLS-like bytes', "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400);
refused('version in lower case', "GET /lowv http/1.1\r\n${H}\r\n", 400);

# nginx: more than one space between the parts of the request line is fine.
served('two spaces after the method', "GET  /twosp HTTP/1.1\r\n${H}\r\n", '');

###############################################################################
# Pipelining, Expect, HEAD, HTTP/1.0.

# nginx: two requests in one write are answered in order on the connection.
{
	my $r = exchange(port => port(8080), responses => 2,
		send => ["GET /p1 HTTP/1.1\r\n${H}\r\nPOST /p2 HTTP/1.1\r\n${H}Content-Length: 2\r\n\r\nhi"]);
	is(join(' ', map { $_->{body} } @{$r->{responses}}), 'ok /p1 ok /p2', 'pipelined: in order');
	ok(!$r->{closed}, 'pipelined: connection kept');
}

# nginx: a request after a refused one in the same write is never served.
for my $c (['invalid Content-Length', "Content-Length: x\r\n"],
	['Content-Length with Transfer-Encoding', "Content-Length: 0\r\nTransfer-Encoding: chunked\r\n"])
{
	my $before = backend_bytes();
	my $r = exchange(port => port(8080), responses => 2,
		send => ["POST /r1 HTTP/1.1\r\n$H$c->[1]\r\n0\r\n\r\nGET /r2 HTTP/1.1\r\n${H}\r\n"]);
	TODO: {
		local $TODO = undef;
		is(join(' ', map { $_->{status} } @{$r->{responses}}), '400',
			"pipelined after $c->[0]: one 400 only");
		is(backend_bytes() - $before, 0, "pipelined after $c->[0]: the backend got nothing");
	}
	ok($r->{closed}, "pipelined after $c->[0]: connection closed");
}

# nginx: a request after an HTTP/1.0 one without keep-alive is not served.
{
	my $r = exchange(port => port(8080), responses => 2,
		send => ["GET /q1 HTTP/1.0\r\n${H}\r\nGET /q2 HTTP/1.1\r\n${H}\r\n"]);
	is(join(' ', map { $_->{body} } @{$r->{responses}}), 'ok /q1',
		'after HTTP/1.0: the next request is not served');
	ok($r->{closed}, 'after HTTP/1.0: connection closed');
}

# nginx: "100 Continue" for Expect: 100-continue from an HTTP/1.1 client
# once it reads the body, before the client sends it; then the response.
# None to HTTP/1.0, none for another expectation.
for my $c (['Content-Length', "Content-Length: 4\r\n", 'body'],
	['chunked', "Transfer-Encoding: chunked\r\n", "4\r\nbody\r\n0\r\n\r\n"])
{
	my $n = () = $t->raw_requests(port(8081));
	my $r = exchange(port => port(8080),
		send => ["POST /expect HTTP/1.1\r\n${H}Expect: 100-continue\r\n$c->[1]\r\n",
			{ sleep => 1 }, $c->[2]]);
	is($r->{marks}[0], "HTTP/1.1 100 Continue\r\n\r\n",
		"Expect with $c->[0]: 100 Continue before the body is sent");
	is($r->{responses}[0]{status}, 200, "Expect with $c->[0]: then 200");
	my @got = new_requests($n);
	is(scalar(@got) == 1 && $got[0] =~ /\r\n\r\n(.*)\z/s ? $1 : undef, 'body',
		"Expect with $c->[0]: the backend got the body");
	unlike($got[0] // '', qr/^Expect/mi, "Expect with $c->[0]: Expect not forwarded");
}
for my $c (['HTTP/1.0', "POST /expect HTTP/1.0\r\n${H}Expect: 100-continue\r\n"],
	['another expectation', "POST /expect HTTP/1.1\r\n${H}Expect: something\r\n"])
{
	my $r = exchange(port => port(8080),
		send => ["$c->[1]Content-Length: 4\r\n\r\n", { sleep => 0.5 }, 'body']);
	is($r->{marks}[0], '', "Expect from $c->[0]: no 100 Continue");
	is($r->{responses}[0]{status}, 200, "Expect from $c->[0]: 200");
}

# nginx: HEAD gets the backend's headers, Content-Length included, and no
# body; the connection goes on.
{
	my $r = exchange(port => port(8080), responses => 2, methods => ['HEAD', 'GET'],
		send => ["HEAD /head HTTP/1.1\r\n${H}\r\nGET /after-head HTTP/1.1\r\n${H}\r\n"]);
	my ($head, $next) = @{$r->{responses}};
	is($head->{status}, 200, 'HEAD: 200');
	is($head->{h}{'content-length'}, 8, "HEAD: the backend's Content-Length");
	like($r->{raw}, qr/\A[^\r\n]*\r\n(?:[^\r\n]+\r\n)*\r\nHTTP\/1.1 200 /, 'HEAD: no body');
	is($next && $next->{body}, 'ok /after-head', 'HEAD: the next request is served');
	ok(!$r->{closed}, 'HEAD: connection kept');
}

# nginx: an HTTP/1.0 client gets an HTTP/1.1 status line, Connection: close
# and the connection closed, unless it asked for keep-alive; an HTTP/1.1
# client's Connection: close is honoured the same way.
{
	my $r = exchange(port => port(8080), send => ["GET /h10 HTTP/1.0\r\n${H}\r\n"]);
	like($r->{raw}, qr/^HTTP\/1.1 200 OK\r\n/, 'HTTP/1.0: status line HTTP/1.1');
	TODO: {
		local $TODO = undef;
		is($r->{responses}[0]{h}{connection}, 'close', 'HTTP/1.0: Connection: close');
	}
	ok($r->{closed}, 'HTTP/1.0: connection closed');
	$r = exchange(port => port(8080),
		send => ["GET /h10ka HTTP/1.0\r\n${H}Connection: keep-alive\r\n\r\n"]);
	is($r->{responses}[0]{h}{connection}, 'keep-alive', 'HTTP/1.0 keep-alive: Connection: keep-alive');
	ok(!$r->{closed}, 'HTTP/1.0 keep-alive: connection kept');
	$r = exchange(port => port(8080),
		send => ["GET /h10kac HTTP/1.0\r\n${H}Connection: keep-alive, close\r\n\r\n"]);
	ok($r->{closed}, 'HTTP/1.0 with keep-alive and close: connection closed');
	$r = exchange(port => port(8080), send => ["GET /h11c HTTP/1.1\r\n${H}Connection: close\r\n\r\n"]);
	is($r->{responses}[0]{h}{connection}, 'close', 'HTTP/1.1 Connection: close: echoed');
	ok($r->{closed}, 'HTTP/1.1 Connection: close: connection closed');
}

###############################################################################
# nginx's log lines for the refusals above (info, [error] for chunked bodies).

for my $c (
	[qr/client sent "Content-Length" and "Transfer-Encoding" headers at the same time while reading client request headers/],
	[qr/client sent duplicate header line: "Content-Length: 5", previous value: "Content-Length: 4" while reading client request headers/],
	[qr/client sent invalid "Content-Length" header while reading client request headers/],
	[qr/client sent unknown "Transfer-Encoding": "gzip" while reading client request headers/],
	[qr/client sent unknown "Transfer-Encoding": "gzip, chunked" while reading client request headers/],
	[qr/client sent HTTP\/1.0 request with "Transfer-Encoding" header while reading client request headers/],
	[qr/client sent invalid header line: "Fo\@o: x" while reading client request headers/],
	[qr/\[error\] .*client sent invalid chunked body/],
	[qr/client intended to send too large chunked body/],
	[qr/client sent too long URI while reading client request line/],
	[qr/client sent too long header line: "X-Big: b+\.\.\." while reading client request headers/],
	# nginx names the line that found no buffer also when the lines only
	# do not fit together.
	[qr/client sent too long header line: "X-B4: b+\.\.\." while reading client request headers, client: 127.0.0.1, server: localhost, request: "GET \/k4 HTTP\/1.1"/,
		'sluice: the line is logged without the client, server and request context'],
	[qr/client sent HTTP\/1.1 request without "Host" header while reading client request headers/],
	[qr/client sent invalid version while reading client request line/],
	)
{
	TODO: {
		local $TODO = $c->[1];
		ok($t->waitforlog($c->[0], 0.2), "logged: $c->[0]");
	}
}
