#!/usr/bin/perl

# sluice beside nginx (Debian's /usr/sbin/nginx) on the upstream's side:
# both proxy to one raw backend that gives each request path an answer
# drawn at random (seeded; NGINX_UDIFF_SEED replays, NGINX_UDIFF_ANSWERS
# sets how many) from a grammar of status lines (versions, codes, reasons,
# spacing), fields, and framings (a length, chunks with extensions and
# trailers, the connection's close). Each path is asked of both; the
# status, the body (chunks joined) and the Set-Cookie and Location fields
# the client gets must be the same.
#
# The grammar leaves out what sluice does differently on purpose, each in
# sluice.conf(5): answers nginx passes and sluice refuses with 502 (no
# status line, a version other than 1.x, codes below 100 or of more than
# three digits, field names with bytes outside tokens, control characters
# in values, lengths that are not a number, codings other than chunked,
# bare LF in chunks, an unasked 101), bodies cut short (nginx has sent the
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
		'X-Empty:', 'X-Spaces:   s  ', 'Keep-Alive: timeout=5', 'Connection: keep-alive');
	my $body = "a$n " . ('b' x int(rand(3000)));
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

my $server = <<'EOF';
    server {
        listen 127.0.0.1:PORT;
        server_name localhost;
        location / { proxy_pass http://127.0.0.1:BACKEND; }
    }
EOF
nginx_beside($t, $server, %script);

# What a client sees of GET $path: "STATUS | body | cookies | location",
# the body's chunks joined.
sub seen {
	my ($port, $path) = @_;
	my $buf = http("GET $path HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
		raw => 1, PeerAddr => "127.0.0.1:$port", timeout => 5) // '';
	my ($head, $body) = split /\r\n\r\n/, $buf, 2;
	return 'none' unless defined $head && $head =~ /^HTTP\/1\.1 (\d{3})/;
	my $code = $1;
	$body //= '';
	if ($head =~ /^Transfer-Encoding: chunked\r?$/mi) {
		my $joined = '';
		while ($body =~ s/^([0-9a-fA-F]+)[^\r\n]*\r\n//) {
			my $len = hex $1;
			last if $len == 0;
			$joined .= substr($body, 0, $len, '');
			$body =~ s/^\r\n//;
		}
		$body = $joined;
	}
	my $cookies = join(',', $head =~ /^Set-Cookie: ([^\r\n]*)/mgi);
	my ($location) = $head =~ /^Location: ([^\r\n]*)/mi;
	return join(' | ', $code, $body, $cookies, $location // '');
}

my (@diffs, $same);
for my $n (1 .. $count) {
	my $ref = seen(port(8081), "/a$n");
	my $ours = seen(port(8080), "/a$n");
	if ($ref eq $ours) {
		$same++;
		next;
	}
	my $show = sub { my $v = shift; length $v > 120 ? substr($v, 0, 120) . '...' : $v };
	(my $sent = $script{"/a$n"}{send}) =~ s/\r\n/\\r\\n/g;
	push @diffs, "answer $n: nginx [" . $show->($ref) . '], sluice [' . $show->($ours)
		. '] for: ' . $show->($sent);
}

is(scalar(@diffs), 0, "$count upstream answers (seed $seed): the client sees what nginx's sees ("
	. ($same // 0) . ' the same)')
	or diag(join("\n", @diffs[0 .. ($#diffs < 9 ? $#diffs : 9)]));
