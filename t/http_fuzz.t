#!/usr/bin/perl

# A fuzz of the HTTP/1 engine from both sides, with an oracle for response
# framing and for answers given to the wrong request (the desync class of
# bugs): 1,000 connections each send pipelined requests, mostly
# well-formed, with random methods, targets, versions, headers, framing
# (Content-Length right or wrong, chunked with random chunk sizes,
# extensions and trailers, both, neither), bodies, Expect: 100-continue,
# Connection: close, now and then a switch to a tunnel (Upgrade), a
# malformed line or bytes at random; written in random pieces, then the
# write side shut. Whatever sluice answers must parse, strictly, as a
# sequence of whole HTTP/1.1 responses, in order, each framed as RFC 9112
# says for the request it answers (HEAD, 1xx, 204, 304 without body;
# chunked, length or close; after a 101, the tunnel's bytes), with nothing
# after the last one; an echo must hold its own connection's token. Some
# requests go to a scripted upstream (kept alive) that answers at random:
# framing right and wrong, bodies where none may be, and now and then a
# second response after the first, which no client may ever get. The
# worker must live, keep its memory and serve. Seeded (HTTP_FUZZ_SEED
# replays; HTTP_FUZZ_CONNS lengthens).

use warnings;
use strict;

use Test::More;
use IO::Select;
use IO::Socket::INET;
use Socket qw/SHUT_WR/;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(5);
my $d = $t->testdir();

$t->write_file('file.txt', 'f' x 3000);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    client_header_timeout 2s;
    client_body_timeout 2s;
    client_max_body_size 64k;
    # The client shuts its side once it has written everything: that is
    # not an abort here (it would be, and go unanswered, as in nginx).
    proxy_ignore_client_abort on;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;
        root %%TESTDIR%%;

        location / { return 200 "r"; }
        location = /file.txt { }
        location /p/ { proxy_pass http://127.0.0.1:%%PORT_8081%%/; }
        location /nb/ {
            proxy_pass http://127.0.0.1:%%PORT_8081%%/;
            proxy_request_buffering off;
            proxy_buffering off;
        }
        location = /204 { return 204; }
        location = /redir { return 301 /r; }
        location /u/ {
            proxy_pass http://raw/;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_read_timeout 300ms;
            proxy_next_upstream off;
        }
    }

    upstream raw {
        server 127.0.0.1:%%PORT_8082%%;
        keepalive 4;
    }
}
EOF

my $seed = $ENV{HTTP_FUZZ_SEED} // int(rand(1 << 31));
srand($seed);

$t->backend(port(8081));
# The upstream side's fuzz: a scripted backend answers each request at
# random (its own generator, seeded from the same seed).
$t->random_backend(port(8082), \&upstream_answer);
$t->run();
my $p = port(8080);
my ($w) = $t->worker_pids();

sub rss { rss_kb($w) }

sub pick { $_[int(rand(@_))] }
sub rbytes { join '', map { chr(int(rand(256))) } 1 .. $_[0] }

# One request: its bytes and its method (for the oracle's HEAD rule). Its
# target carries $tok (tok=CnRn) where the backend echoes it.
sub request {
	my ($tok) = @_;
	my $method = rand() < 0.9 ? pick(qw/GET GET GET HEAD POST POST PUT OPTIONS DELETE/)
		: pick('get', 'G@T', 'PRI', 'CONNECT', 'X' x 40);
	my $target = rand() < 0.95
		? pick('/', '/r', '/file.txt', "/p/echo?$tok", "/p/x?$tok", "/nb/echo?$tok", '/204', '/redir',
			'/p/status/304', '/p/status/204', '/%2e%2e/r', "/p/echo?$tok&" . ('a' x int(rand(300))), '/' . ('z' x 2000),
			"/u/a?$tok", "/u/b?$tok", "/u/c?$tok", "/u/d?$tok")
		: pick('*', 'http://localhost/r', '//r', 'r', "/\x01", '/' . rbytes(5));
	my $version = rand() < 0.95 ? pick('HTTP/1.1', 'HTTP/1.1', 'HTTP/1.0') : pick('HTTP/2.0', 'HTTP/1.2', 'HTTP/1', 'http/1.1');
	my @h;
	push @h, 'Host: localhost' if rand() < 0.95;
	push @h, pick('Connection: close', 'Connection: keep-alive') if rand() < 0.1;
	push @h, 'Expect: 100-continue' if rand() < 0.1;
	# Now and then a switch to a tunnel (the backend's is one for any
	# Upgrade): what follows it on the connection is the tunnel's.
	push @h, 'Upgrade: websocket', 'Connection: Upgrade' if rand() < 0.03;
	push @h, "X-R$_: " . ('v' x int(rand(50))) for 1 .. int(rand(4));
	push @h, pick("Bad Name: x", "X-Fold: a\r\n b", "X-Nul: a\0b", "X-Cr: a\rb", ": empty", 'X-Lf: y')
		if rand() < 0.05;
	my $body = rbytes(rand() < 0.5 ? 0 : int(rand(3000)));
	my $framing = rand();
	my $wire = '';
	if ($framing < 0.4) {
		# Content-Length, now and then off by some, or twice.
		my $len = length $body;
		$len += pick(-3, -1, 1, 5) if rand() < 0.05 && $len > 3;
		push @h, "Content-Length: $len" if length $body || rand() < 0.5;
		push @h, pick("Content-Length: $len", 'Content-Length: ' . ($len + 1)) if rand() < 0.03;
		$wire = $body;
	} elsif ($framing < 0.65) {
		# Chunked, in random chunks, with extensions and trailers now and then.
		push @h, pick('Transfer-Encoding: chunked', 'Transfer-Encoding: chunked', 'transfer-encoding: CHUNKED',
			'Transfer-Encoding: gzip, chunked', 'Transfer-Encoding: chunked, chunked');
		push @h, 'Content-Length: ' . length($body) if rand() < 0.03;
		$wire = random_chunks($body, ext => 0.1);
		$wire .= '0' . "\r\n" . (rand() < 0.1 ? "X-Trailer: t\r\n" : '') . "\r\n";
		$wire = pick('fffffffffffffffff1', 'zz', '-1', '') . "\r\n" . $wire if rand() < 0.03;
	} else {
		# No framing: any bytes that follow are the next request's.
		$wire = rand() < 0.05 ? rbytes(int(rand(30))) : '';
	}
	my $head = "$method $target $version\r\n" . join('', map { "$_\r\n" } @h) . "\r\n";
	# Or garbage for a head. It starts with a byte that is not a line end:
	# empty lines before a request are skipped (nginx's rule), so an empty
	# one would get no answer, and the next answer would be taken for its
	# (seed 698230850: a HEAD's answer, read as a GET's, looked cut short).
	$head = 'J' . rbytes(int(rand(60))) . "\r\n\r\n" if rand() < 0.02;
	return ($head . $wire, $method);
}

# Parses what a connection received against the methods it sent: the
# responses' bodies (a list) if it is a strict sequence of whole responses,
# else a string saying what is wrong. Garbage after a request makes the
# server answer a request the client did not count, so a response to what
# the client sent as HEAD may be one to garbage, with a body: both readings
# are tried.
sub check {
	my ($buf, $methods, $i) = @_;
	$i //= 0;
	return [] unless length $buf;
	$buf =~ s/^(HTTP\/1\.[01]) (\d{3}) [^\r\n]*\r\n((?:[!#\$%&'*+.^_`|~0-9A-Za-z-]+:[^\r\n]*\r\n)*)\r\n//
		or return "response " . ($i + 1) . " does not start with a status line and head: "
			. unpack('H*', substr($buf, 0, 40));
	my ($code, $fields) = ($2, $3);
	my %h;
	for (split /\r\n/, $fields) {
		my ($n, $v) = /^([^:]+):\s*(.*?)\s*$/;
		push @{$h{lc $n}}, $v;
	}
	# 101: the rest is the tunnel's (the backend sends it back in upper
	# case), not responses.
	return [] if $code == 101;
	# Any other 1xx: the same request's final response follows.
	return check($buf, $methods, $i) if $code >= 100 && $code < 200;
	my $method = $methods->[$i] // 'GET';
	my $n = $i + 1;
	return "response $n: both Transfer-Encoding and Content-Length"
		if $h{'transfer-encoding'} && $h{'content-length'};
	my $rest = sub {
		my ($body, $after) = @_;
		my $more = check($after, $methods, $i + 1);
		return ref $more ? [$body, @$more] : $more;
	};
	my $bodiless = $code == 204 || $code == 304;
	if ($method eq 'HEAD' || $bodiless) {
		my $r = $rest->('', $buf);
		return $r if ref $r || $bodiless || !$h{'content-length'};
		# Or an answer to garbage, with its body.
	}
	if (my $te = $h{'transfer-encoding'}) {
		return "response $n: Transfer-Encoding @$te" unless "@$te" =~ /^chunked$/i;
		my $body = '';
		while (1) {
			$buf =~ s/^([0-9a-fA-F]+)(?:;[^\r\n]*)?\r\n// or return "response $n: bad chunk size: "
				. unpack('H*', substr($buf, 0, 20));
			my $len = hex $1;
			if ($len == 0) {
				$buf =~ s/^(?:[^\r\n]+\r\n)*\r\n// or return "response $n: bad last chunk";
				last;
			}
			return "response $n: truncated chunk" if length $buf < $len + 2;
			$body .= substr($buf, 0, $len, '');
			$buf =~ s/^\r\n// or return "response $n: chunk without CRLF";
		}
		return $rest->($body, $buf);
	} elsif (my $cl = $h{'content-length'}) {
		return "response $n: Content-Length @$cl" if @$cl > 1 || $cl->[0] !~ /^\d+$/;
		return "response $n: body shorter than its Content-Length ($cl->[0] > " . length($buf) . ')'
			if length $buf < $cl->[0];
		my $body = substr($buf, 0, $cl->[0], '');
		return $rest->($body, $buf);
	}
	# Close-delimited: the rest is the body.
	return [$buf];
}

# A random answer from the upstream to a request: mostly well-formed (its
# body names the request's token), with 1xx first, bodies where none may be,
# Content-Length short or long or twice, chunked right and wrong, both,
# close-delimited; and now and then a whole second response after it,
# which names a token no request has (tok=FAKE): kept on a keep-alive
# connection, it would be the next request's answer. Or no answer, or a
# close.
sub upstream_answer {
	my ($method, $uri) = @_;
	my ($tok) = ($uri // '') =~ /(tok=C\d+R\d+;)/;
	$tok //= 'tok=none;';
	my $r = rand();
	return { hold => 1 } if $r < 0.03;
	return { close => 1 } if $r < 0.06;
	my $body = "$tok " . ('b' x int(rand(2000)));
	my $status = pick(200, 200, 200, 201, 204, 304, 404, 500);
	my $out = rand() < 0.05 ? pick("HTTP/1.1 100 Continue\r\n\r\n", "HTTP/1.1 103 Early Hints\r\nLink: </s>\r\n\r\n") : '';
	# The status line with a reason, none, an empty one, or wide spaces.
	$out .= pick("HTTP/1.1 $status X", "HTTP/1.1 $status X", "HTTP/1.1 $status", "HTTP/1.1 $status ",
		"HTTP/1.1  $status  X") . "\r\nX-T: t\r\n";
	my $f = rand();
	my $close = 0;
	if ($f < 0.55) {
		$out .= 'Content-Length: ' . length($body) . "\r\n\r\n$body";
	} elsif ($f < 0.6) {
		# Short: the connection closes before the length is there.
		$out .= 'Content-Length: ' . (length($body) + 10) . "\r\n\r\n$body";
		$close = 1;
	} elsif ($f < 0.63) {
		$out .= 'Content-Length: ' . length($body) . "\r\nContent-Length: " . (length($body) + 1) . "\r\n\r\n$body";
	} elsif ($f < 0.8) {
		my $w = random_chunks($body) . "0\r\n\r\n";
		$w = 'zz' . $w if rand() < 0.05;
		$out .= pick("Transfer-Encoding: chunked\r\n", "Transfer-Encoding: chunked\r\n",
			"Transfer-Encoding: gzip\r\n", "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n") . "\r\n$w";
	} else {
		$out .= "\r\n$body";
		$close = 1;
	}
	$out .= "HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\ntok=FAKE; xyz" if !$close && rand() < 0.1;
	return { send => $out, close => $close };
}

my $before = rss();
my ($bad, $answered, $conns) = (0, 0, $ENV{HTTP_FUZZ_CONNS} // 1000);
for my $c (1 .. $conns) {
	my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$p", Proto => 'tcp') or die "connect: $!\n";
	binmode $s;
	local $SIG{PIPE} = 'IGNORE';
	my ($out, @methods) = ('');
	# A third of the connections ask the random upstream only, with clean
	# requests, so that its answers and its kept connections see use.
	my $upstream_only = rand() < 0.33;
	for my $r (1 .. 1 + int(rand($upstream_only ? 8 : 5))) {
		my ($bytes, $method) = $upstream_only
			? ("GET /u/" . pick('a', 'b', 'c') . "?tok=C${c}R$r; HTTP/1.1\r\nHost: localhost\r\n\r\n", 'GET')
			: request("tok=C${c}R$r;");
		$out .= $bytes;
		push @methods, $method;
	}
	# Written in random pieces, now and then with a pause between.
	while (length $out) {
		my $piece = substr($out, 0, 1 + int(rand(rand() < 0.5 ? 64 : 4096)), '');
		last unless defined syswrite($s, $piece);
		sleep 0.001 if rand() < 0.05;
	}
	shutdown($s, SHUT_WR);
	my ($buf, $sel, $end) = ('', IO::Select->new($s), time() + 8);
	while (time() < $end && $sel->can_read($end - time())) {
		my $n = sysread($s, my $chunk, 65536);
		last unless $n;
		$buf .= $chunk;
	}
	close $s;
	my $got = check($buf, \@methods);
	$answered++ if length $buf;
	# An echo carries its request's token: one of another connection's
	# would be an answer given to the wrong client.
	my $why = ref $got ? (map { /tok=C(\d+)R\d+;/ && $1 != $c ? "an answer holds another connection's token: $&"
			: /tok=FAKE;/ ? 'an answer is what an upstream sent after its response' : () } @$got)[0]
		: $got;
	if (defined $why) {
		$bad++;
		diag("connection $c (seed $seed): $why") if $bad <= 5;
	}
}

is($bad, 0, "random requests (seed $seed): every connection's answers parse as whole responses ($answered of $conns answered)");
ok(scalar(grep { $_ == $w } $t->worker_pids()), "random requests (seed $seed): the worker lived");
ok(rss() - $before < 16384, "random requests (seed $seed): the worker grew by less than 16 MB (" . (rss() - $before) . ' kB)');
like(`curl -s --max-time 5 http://127.0.0.1:$p/r`, qr/^r$/, 'the worker serves');
like(`curl -s --max-time 5 http://127.0.0.1:$p/p/x`, qr/^\d+ \/x$/, 'and proxies');
