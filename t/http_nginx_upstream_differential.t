#!/usr/bin/perl

# sluice beside nginx (Debian's /usr/sbin/nginx) on the upstream's side:
# both proxy to one raw backend that gives each request path an answer
# drawn at random (seeded; NGINX_UDIFF_SEED replays, NGINX_UDIFF_ANSWERS
# sets how many) from a grammar of status lines (versions, codes, reasons,
# spacing), fields, and framings (a length, chunks with extensions and
# trailers, the connection's close; bodies that fit the buffers sluice
# reads ahead into and bodies that do not). Each path is asked of both,
# with a method (GET or HEAD), a version (1.1 or 1.0) and a Connection
# field drawn at random, and a second request after it on the same
# connection. What the client gets must be the same: the status, the
# fields but Date and Server (by name; nginx writes those it makes
# first), whether the body has no length (ends at the close), the body
# (chunks joined), and whether the second request was answered on the
# connection. A body with a Content-Length and one in chunks count as
# the same (sluice sends a body it read whole with a length, nginx as the
# upstream framed it); so, for an HTTP/1.0 client, do one that ends at
# the close and one with a length (sluice.conf(5), proxy_buffering).
#
# The grammar leaves out what sluice does differently on purpose, each in
# sluice.conf(5): answers nginx passes and sluice refuses with 502 (no
# status line, a version other than 1.x, codes below 100 or of more than
# three digits, field names with bytes outside tokens, control characters
# in values, lengths that are not a number, codings other than chunked,
# bare LF in chunks, an unasked 101), fields sluice drops as hop-by-hop
# and nginx passes (Upgrade, TE, Trailer, Proxy-Connection), bodies cut
# short (nginx has sent the
# head and answers 200; sluice, which reads a small body before the head
# goes out, answers 502), and 1xx before the answer (nginx 1.22 passes the
# 1xx as the answer).

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/nginx_beside/;

plan(skip_all => 'no nginx') unless -x '/usr/sbin/nginx';

my $t = Test::Sluice->new()->has(qw/http/)->plan(1);

my $seed = $ENV{NGINX_UDIFF_SEED} // int(rand(1 << 31));
srand($seed);
my $count = $ENV{NGINX_UDIFF_ANSWERS} // 200;

sub pick { $_[int(rand(@_))] }

# Answer $n: what the backend sends for /a$n.
sub answer {
	my ($n) = @_;
	my $version = pick('HTTP/1.1', 'HTTP/1.1', 'HTTP/1.0');
	my $code = pick(200, 200, 200, 201, 203, 204, 301, 302, 304, 400, 404, 410, 500, 503);
	my $sp = pick(' ', ' ', '  ');
	my $line = "$version$sp$code" . pick(' X', ' OK', ' Two Words', '', ' ');
	my @h = grep { rand() < 0.3 } ('X-A: b', 'Cache-Control: no-cache', 'Set-Cookie: a=1',
		'Set-Cookie: b=2', 'Location: /loc', 'ETag: "e"', 'Vary: Accept', 'Content-Type: text/plain',
		'X-Empty:', 'X-Spaces:   s  ', 'Keep-Alive: timeout=5', 'Connection: keep-alive',
		'Content-Type: text/html', 'Content-Type:', 'X-Pad: avoid browser bug', 'X-Accel-Expires: 5',
		'Status: 200 OK', 'Content-Encoding: identity', 'WWW-Authenticate: Basic',
		'Last-Modified: Thu, 01 Jan 1970 00:00:01 GMT', 'Link: </a>; rel=preload');
	# Most fit the buffers sluice reads ahead into; some do not.
	my $body = "a$n " . ('b' x (rand() < 0.85 ? int(rand(3000)) : 40000 + int(rand(30000))));
	my $f = rand();
	my $close = 0;
	my $framed;
	if ($f < 0.5) {
		$framed = 'Content-Length: ' . length($body) . "\r\n" . join('', map { "$_\r\n" } @h)
			. "\r\n$body";
	} elsif ($f < 0.8 && $version eq 'HTTP/1.1') {
		my $w = random_chunks($body, ext => 0.2) . "0\r\n" . (rand() < 0.3 ? "X-T: t\r\n" : '')
			. "\r\n";
		$framed = "Transfer-Encoding: " . pick('chunked', 'Chunked') . "\r\n"
			. join('', map { "$_\r\n" } @h) . "\r\n$w";
	} else {
		$framed = join('', map { "$_\r\n" } grep { !/^Connection/ } @h) . "\r\n$body";
		$close = 1;
	}
	return { send => "$line\r\n$framed", close => $close };
}

my %script = map { ("/a$_" => answer($_)) } 1 .. $count;
$script{'/end'} = { send => "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nend" };

my $server = <<'EOF';
    server {
        listen 127.0.0.1:PORT;
        server_name localhost;
        location / { proxy_pass http://127.0.0.1:BACKEND; }
    }
EOF
nginx_beside($t, $server, %script);

# The request answer $n is asked with: a method, a version and a
# Connection field, then (pipelined) a last request on the same
# connection, which shows whether the connection was kept.
sub asking {
	my ($n) = @_;
	my $method = pick('GET', 'GET', 'HEAD');
	my $version = pick('HTTP/1.1', 'HTTP/1.1', 'HTTP/1.0');
	my $connection = pick('', '', "Connection: close\r\n", "Connection: keep-alive\r\n");
	return "$method /a$n $version\r\nHost: localhost\r\n$connection\r\n"
		. "GET /end HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
}

# What a client sees of an answer: "STATUS | framing | fields | body |
# next", the fields but Date and Server in their order, the body's chunks
# joined, and whether the last request was answered on the connection.
sub seen {
	my ($port, $n, $request) = @_;
	my $buf = http($request, raw => 1, PeerAddr => "127.0.0.1:$port", timeout => 5) // '';
	my ($head, $rest) = split /\r\n\r\n/, $buf, 2;
	return 'none' unless defined $head && $head =~ /^HTTP\/1\.1 (\d{3})/;
	my $code = $1;
	$rest //= '';
	my @fields = grep { !/^(Date|Server):/i } split /\r\n/, $head;
	shift @fields;
	# By name: nginx writes the fields it makes (the length, the
	# connection's) first, sluice where the upstream had them.
	@fields = sort { lc((split /:/, $a)[0]) cmp lc((split /:/, $b)[0]) } @fields;
	my ($framing, $body) = ('none', '');
	if ($request =~ /^HEAD/ || $code == 204 || $code == 304) {
		$framing .= $head =~ /^Content-Length:/mi ? ' (length)' : '';
	} elsif ($head =~ /^Transfer-Encoding: chunked\r?$/mi) {
		$framing = 'chunked';
		while ($rest =~ s/^([0-9a-fA-F]+)[^\r\n]*\r\n//) {
			my $len = hex $1;
			if ($len == 0) {
				$rest =~ s/^(?:[^\r\n]+\r\n)*\r\n//;
				last;
			}
			$body .= substr($rest, 0, $len, '');
			$rest =~ s/^\r\n//;
		}
	} elsif ($head =~ /^Content-Length: (\d+)\r?$/mi) {
		$framing = 'length';
		$body = substr($rest, 0, $1, '');
	} else {
		($framing, $body, $rest) = ('close', $rest, '');
	}
	# A body sent whole with a length or in chunks: the same to a client
	# (see sluice.conf(5), proxy_buffering).
	if ($framing eq 'length' || $framing eq 'chunked') {
		$framing = 'delimited';
		@fields = grep { !/^(Content-Length|Transfer-Encoding):/i } @fields;
	}
	my $next = $rest =~ /^HTTP\/1\.1 200 .*\r\n\r\nend$/s ? 'kept'
		: $rest eq '' ? 'closed' : 'garbage: ' . substr($rest, 0, 40);
	return join(' | ', $code, $framing, join(', ', @fields), $body, $next);
}

my (@diffs, $same);
for my $n (1 .. $count) {
	my $request = asking($n);
	my $ref = seen(port(8081), $n, $request);
	my $ours = seen(port(8080), $n, $request);
	# An HTTP/1.0 client, an answer without a length that sluice read
	# whole: sluice sends it with a length (and keeps the connection if
	# asked to), nginx until it closes (sluice.conf(5), proxy_buffering).
	if ($ref =~ /^\d+ \| close \|/ && $ours =~ /^\d+ \| delimited \|/ && $request =~ /^\S+ \S+ HTTP\/1\.0/) {
		s/^(\d+) \| \w+ \|/$1 | 1.0 |/, s/Connection: [\w-]+(, )?//, s/ \| \w+$// for $ref, $ours;
	}
	if ($ref eq $ours) {
		$same++;
		next;
	}
	my $show = sub { my $v = shift; length $v > 300 ? substr($v, 0, 300) . '...' : $v };
	(my $sent = $script{"/a$n"}{send}) =~ s/\r\n/\\r\\n/g;
	(my $asked = $request) =~ s/\r\n.*//s;
	$asked .= $request =~ /^(Connection: [^\r]*)\r\n\r\nGET \/end/m ? " $1" : '';
	s/(b{6})b+/$1.../g for $ref, $ours;
	push @diffs, "answer $n to $asked: nginx [" . $show->($ref) . '], sluice [' . $show->($ours)
		. '] for: ' . $show->($sent);
}

is(scalar(@diffs), 0, "$count upstream answers (seed $seed): the client sees what nginx's sees ("
	. ($same // 0) . ' the same)')
	or diag(join("\n", @diffs[0 .. ($#diffs < 9 ? $#diffs : 9)]));
