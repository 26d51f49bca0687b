#!/usr/bin/perl

# sluice beside nginx (Debian's /usr/sbin/nginx), request by request: the
# same configuration in both (a location that proxies to one raw backend,
# one that answers itself), the same request heads and bodies, drawn at
# random (seeded; NGINX_DIFF_SEED replays, NGINX_DIFF_REQUESTS sets how
# many) from a grammar of well-formed and broken parts: methods, targets,
# versions, line ends, hosts, header lines, framing and bodies. Each
# request goes to both on a new connection; the statuses of the final
# answers that come back (1xx left out) must be the same, and for an
# answer from the backend, so must the request the backend got (line,
# fields in order, and body; both proxy with HTTP/1.1 and no Connection
# field, sluice's defaults).
#
# The grammar leaves out what sluice does differently on purpose, each
# written in sluice.conf(5): bytes nginx takes that sluice refuses (a space
# after the version, control characters in header values, header lines
# without a colon, names with bytes outside tokens, bare LF in chunked
# bodies, a backslash or a leading dot in a host), targets sluice passes
# on percent-encoded ("<>`, bytes above 0x7F) or without their
# fragment (nginx passes "#..." on), and clients that
# shut their side early (sluice sees the end at once and drops the answer
# as an abort, nginx often answers first), and broken chunks in a body a
# `return` discards (nginx reads them first and answers 400). What is left
# is where the two must agree; a difference names its request and both
# answers.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Grpc qw/nginx_beside/;

plan(skip_all => 'no nginx') unless -x '/usr/sbin/nginx';

my $t = Test::Sluice->new()->has(qw/http/)->plan(2);

# The server block both run, on their own ports.
my $server = <<'EOF';
    client_header_timeout 1s;
    client_body_timeout 1s;
    server {
        listen 127.0.0.1:PORT;
        server_name localhost;
        location / {
            proxy_pass http://127.0.0.1:BACKEND;
            # sluice's defaults, which nginx's are not.
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
        location = /self { return 200 "self"; }
    }
EOF
nginx_beside($t, $server);

my $seed = $ENV{NGINX_DIFF_SEED} // int(rand(1 << 31));
srand($seed);
my $count = $ENV{NGINX_DIFF_REQUESTS} // 300;

sub pick { $_[int(rand(@_))] }

# One request's bytes. Every body is whole for the framing it claims, or
# broken so that both refuse it at once: a server waiting for bytes that
# never come would time out, and the timeouts' answers are not compared.
sub request {
	my ($n) = @_;
	my $method = pick(qw/GET GET GET POST HEAD PUT OPTIONS DELETE PATCH get G@T M-SEARCH M_X/,
		'X' x 40);
	my $path = pick('/', "/d$n", "/d$n?a=b&c", "/d$n/../x$n", "/%2e%2e/d$n", "/a//d$n",
		"/d$n%00", "/d$n%zz", "/d$n%2F", "/d$n;p", '/self', '/self?x',
		'*', "http://localhost/d$n", "//d$n", "/d$n b", "../d$n", "/d$n\{x\}|^",
		"/d$n/caf\xc3\xa9");
	my $version = pick('HTTP/1.1', 'HTTP/1.1', 'HTTP/1.1', 'HTTP/1.0', 'HTTP/1.2', 'HTTP/2.0',
		'HTTP/1', 'http/1.1', 'HTTP/10.1', 'HTTP/1.10');
	my $eol = pick("\r\n", "\r\n", "\r\n", "\n");
	my @h;
	push @h, 'Host: ' . pick('localhost', 'localhost', 'LOCALHOST', 'localhost:80', 'localhost:',
		'127.0.0.1', '[::1]', '[::1', 'a..b', '', 'x y', 'localhost.', 'a_b', 'a:b:c', 'a/b')
		if rand() < 0.9;
	push @h, 'Host: other' if rand() < 0.05;
	for (1 .. int(rand(3))) {
		push @h, pick('X-A: b', 'X-A:b', 'X-A:  b  ', 'X-A:', 'X_A: u', 'X A: b', 'X-A : b',
			': b', 'Cookie: a=b', 'Connection: keep-alive', 'Connection: close, foo',
			'Expect: 100-continue', 'Expect: foo', 'Range: bytes=0-1', 'TE: trailers',
			'Upgrade: foo', 'Content-Type: x', 'X-Fold: a', ' folded', 'Keep-Alive: 300',
			'X-Forwarded-For: 1.2.3.4', 'Cookie: c=d', 'x-a: lower');
	}
	my $body = '';
	my $f = rand();
	if ($f < 0.25) {
		my $b = pick('', 'abc', 'abcdefgh');
		push @h, 'Content-Length: ' . pick(length($b), length($b), sprintf('%03d', length($b)),
			length($b) . ', ' . length($b), '-1', '1e3', "+" . length($b));
		$body = $b;
	} elsif ($f < 0.45) {
		push @h, 'Transfer-Encoding: ' . pick('chunked', 'chunked', 'Chunked', 'chunked, chunked',
			'gzip, chunked', 'identity', 'gzip');
		push @h, 'Content-Length: 3' if rand() < 0.2;
		# Broken chunks only where the body is read before the answer:
		# nginx's `return` reads what has come of a body it discards and
		# answers 400 for broken chunks; sluice answers, then discards.
		$body = pick("3\r\nabc\r\n0\r\n\r\n", "3;ext=1\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
			"0\r\n\r\n", $path =~ /self/ ? () : ("zz\r\nabc\r\n0\r\n\r\n",
			"fffffffffffffffff1\r\nabc\r\n0\r\n\r\n", "-1\r\nabc\r\n0\r\n\r\n",
			"3\r\nabcX\r\n0\r\n\r\n"));
	} elsif ($f < 0.5) {
		push @h, 'Content-Length: 3', 'Content-Length: ' . pick(3, 4);
		$body = 'abc';
	}
	push @h, 'Connection: close';
	return "$method $path $version$eol" . join('', map { "$_$eol" } @h) . $eol . $body;
}

# The final statuses a connection got for $bytes, in order ("none" when it
# closed without an answer), as "200 200" ...
sub answers {
	my ($port, $bytes) = @_;
	my $buf = http($bytes, raw => 1, PeerAddr => "127.0.0.1:$port", timeout => 4) // '';
	my @codes = grep { !/^1/ } $buf =~ /(?:^|\r\n)HTTP\/1\.[01] (\d{3})[^\r\n]*\r\n/g;
	return @codes ? join(' ', @codes) : 'none';
}

# What the backend got for request $n: each request's bytes (head and
# body) as it came, in order, with the Content-Length field last in the
# head (nginx writes it after the Host field, sluice after the client's).
sub reached {
	my ($n) = @_;
	return join(', ', map { s/\r\n/\\r\\n/gr }
		map { s/^(Content-Length: \d+\r\n)((?:[^\r\n]+\r\n)*)(?=\r\n)/$2$1/mr }
		grep { /^\S+ (?:\S*\/)?(?:d|x)$n(?:[^\d\r ]\S*)? / } $t->raw_requests(port(8082)));
}

my (@diffs, $same);
for my $n (1 .. $count) {
	my $r = request($n);
	my $ref = answers(port(8081), $r);
	my $ours = answers(port(8080), $r);
	my $our_got = reached($n);
	# The backend's log holds both proxies' requests for $n: nginx's
	# first, then sluice's; each must be the other's twin.
	my @got = split /, /, $our_got;
	my @theirs = @got[0 .. @got / 2 - 1];
	my @mine = @got[@got / 2 .. $#got];
	my $forwarded_same = @got % 2 == 0
		&& join(', ', @theirs) eq join(', ', @mine);
	if ($ref ne $ours || !$forwarded_same) {
		push @diffs, sprintf("request %d: nginx %s, sluice %s; backend got [%s] (nginx first): %s",
			$n, $ref, $ours, $our_got, join('', map { $_ < 32 || $_ > 126 ? sprintf('\\x%02x', $_) : chr }
				unpack('C*', $r)));
	} else {
		$same++;
	}
}

is(scalar(@diffs), 0, "$count requests (seed $seed): sluice answers as nginx does ($same the same)")
	or diag(join("\n", @diffs[0 .. ($#diffs < 9 ? $#diffs : 9)]));
like(http_get('/self'), qr/^HTTP\/1.1 200 .*self$/s, 'sluice serves after them');
