#!/usr/bin/perl

# Hostile input from an upstream: responses framed two ways (Content-Length
# with Transfer-Encoding, codings other than chunked, duplicate or invalid
# lengths), bad status lines (and those nginx reads: no reason, wide spaces,
# a control byte in the reason, a second status line among the headers),
# truncated bodies, 1xx, an unasked-for 101 and huge heads. Each case
# checks the status the client gets, that nothing else arrives on its
# connection and that the next request there gets its own answer, that the
# upstream connection was not reused after a bad response, the error-log
# line, and that no worker restarted. With proxy_buffering on and off.

use warnings;
use strict;

use Test::More;
use IO::Select;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(150);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    upstream u { server 127.0.0.1:%%PORT_8081%%; keepalive 4; }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;
        proxy_http_version 1.1;
        proxy_set_header Connection "";

        location / { proxy_pass http://u; }
        location /nobuf/ { proxy_pass http://u/; proxy_buffering off; }
        location /small/ {
            proxy_pass http://u/;
            proxy_buffer_size 1k;
            proxy_buffers 2 1k;
            proxy_busy_buffers_size 1k;
        }
    }
}

EOF

my $chunked_poison = "8\r\nPOISONED\r\n0\r\n\r\n";
my $poison_response = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nPOISONED";
my %script = (
	# The upstream's own length is shorter than the chunked body: a client
	# that trusted it would read the rest as its next response.
	'/cl-te-short' => "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n"
		. "Transfer-Encoding: chunked\r\n\r\n"
		. sprintf("%x\r\n", 3 + length $poison_response) . "abc$poison_response\r\n0\r\n\r\n",
	# Longer: the client would swallow its next response.
	'/cl-te-long' => "HTTP/1.1 200 OK\r\nContent-Length: 200\r\n"
		. "Transfer-Encoding: chunked\r\n\r\n$chunked_poison",
	'/te-cl' => "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
		. "Content-Length: 8\r\n\r\n$chunked_poison",
	'/gzip-chunked' => "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
		. $chunked_poison,
	'/identity' => "HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\nPOISONED",
	'/te-twice' => "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
		. "Transfer-Encoding: chunked\r\n\r\n$chunked_poison",
	'/cl-twice' => "HTTP/1.1 200 OK\r\nContent-Length: 8\r\nContent-Length: 8\r\n\r\nPOISONED",
	'/cl-differ' => "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 8\r\n\r\nPOISONED",
	'/cl-bad' => "HTTP/1.1 200 OK\r\nContent-Length: 8x\r\n\r\nPOISONED",
	'/cl-negative' => "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nPOISONED",
	'/http10-te' => "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n$chunked_poison",
	'/bad-status' => "HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nok",
	'/not-http' => "POISONED\r\n\r\n",
	'/space-colon' => "HTTP/1.1 200 OK\r\nContent-Length : 8\r\n\r\nPOISONED",
	'/truncated' => { send => "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", close => 1 },
	'/bad-chunk' => { send => "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n", close => 1 },
	'/continue' => "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nfinal!",
	'/switch' => "HTTP/1.1 101 Switching Protocols\r\nUpgrade: poison\r\nConnection: upgrade\r\n\r\n"
		. $poison_response,
	# Larger than a 1k proxy_buffer_size, smaller than a read: too big all
	# the same, as in nginx, however it arrives.
	'/head-1500' => "HTTP/1.1 200 OK\r\nX-Big: " . ('x' x 1500) . "\r\nContent-Length: 2\r\n\r\nok",
	'/head-900' => "HTTP/1.1 200 OK\r\nX-Big: " . ('x' x 900) . "\r\nContent-Length: 2\r\n\r\nok",
	'/huge-head' => "HTTP/1.1 200 OK\r\n" . ("X-Big: " . ('x' x 1000) . "\r\n") x 600
		. "Content-Length: 2\r\n\r\nok",
	'/good' => "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ngood",
	# Status lines nginx reads: no reason (httparse gives one outside the
	# buffer: the worker's task panicked on it), an empty one, two spaces.
	'/no-reason' => "HTTP/1.1 200\r\nContent-Length: 4\r\n\r\nnone",
	'/empty-reason' => "HTTP/1.1 200 \r\nContent-Length: 5\r\n\r\nempty",
	'/two-spaces' => "HTTP/1.1  200  OK\r\nContent-Length: 3\r\n\r\ntwo",
	# A header name nginx reads (and passes on) but that is not a token:
	# sluice leaves the line out (sluice(8)); the response passes.
	'/odd-name' => "HTTP/1.1 200 OK\r\nX-Odd\@: 1\r\nContent-Length: 3\r\nX-Kept: k\r\n\r\nodd",
	# A reason with a control byte (nginx takes any byte but CR and LF).
	'/ctl-reason' => "HTTP/1.1 200 \x01OK\r\nContent-Length: 3\r\n\r\nctl",
	# IIS's duplicate status line among the headers: nginx skips it.
	'/iis' => "HTTP/1.1 200 OK\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-Kept: k\r\n\r\niis",
	# Reads the request, then closes without a word.
	'/drop' => { close => 1 },
);
$t->raw_backend(port(8081), %script);
$t->run();

my @workers = sort $t->started_workers();

# Reads one response (head and Content-Length body, or up to EOF) from $s.
sub read_response {
	my ($s) = @_;
	my $buf = '';
	my $sel = IO::Select->new($s);
	while ($sel->can_read(5)) {
		my $n = $s->sysread($buf, 65536, length $buf) or last;
		if ($buf =~ /\r\n\r\n/) {
			my $end = index($buf, "\r\n\r\n") + 4;
			my ($len) = substr($buf, 0, $end) =~ /^Content-Length: (\d+)/mi;
			last if defined $len && length($buf) >= $end + $len;
		}
	}
	return $buf;
}

# Whatever arrives on $s within $secs seconds ('' for nothing, 'EOF' when the
# peer closed).
sub extra_bytes {
	my ($s, $secs) = @_;
	my $sel = IO::Select->new($s);
	return '' unless $sel->can_read($secs);
	my $n = $s->sysread(my $b, 65536);
	return $n ? $b : 'EOF';
}

# One request for $path on a fresh keep-alive connection, then /good on the
# same connection. Returns the first response, what else arrived, and the
# second response.
sub pair {
	my ($path) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080), Timeout => 5)
		or die "connect: $!\n";
	$s->syswrite("GET $path HTTP/1.1\r\nHost: localhost\r\n\r\n");
	my $first = read_response($s);
	my $extra = extra_bytes($s, 0.3);
	my $second = '';
	if ($extra eq '') {
		$s->syswrite("GET /good HTTP/1.1\r\nHost: localhost\r\n\r\n");
		$second = read_response($s);
	}
	close $s;
	return ($first, $extra, $second);
}

# The backend connection that served each request, by URI.
sub conn_of {
	my ($uri) = @_;
	my @l = grep { $_->[2] eq $uri } $t->raw_log(port(8081));
	return @l ? $l[-1][0] : -1;
}

my %logged = (
	'/cl-te-short' => qr/upstream sent "Content-Length" and "Transfer-Encoding" headers at the same time while reading response header from upstream, client: 127.0.0.1, server: localhost, request: "GET \/(nobuf\/)?cl-te-short HTTP\/1.1", upstream: "http:\/\/127.0.0.1:\d+\/cl-te-short"/,
	'/cl-te-long' => qr/"Content-Length" and "Transfer-Encoding" headers at the same time/,
	'/te-cl' => qr/"Content-Length" and "Transfer-Encoding" headers at the same time/,
	'/gzip-chunked' => qr/upstream sent unknown "Transfer-Encoding": "gzip, chunked" while reading response header/,
	'/identity' => qr/upstream sent unknown "Transfer-Encoding": "identity"/,
	'/te-twice' => qr/upstream sent duplicate header line: "Transfer-Encoding: chunked", previous value: "Transfer-Encoding: chunked"/,
	'/cl-twice' => qr/upstream sent duplicate header line: "Content-Length: 8", previous value: "Content-Length: 8"/,
	'/cl-differ' => qr/upstream sent (duplicate header line|invalid header)/,
	'/cl-bad' => qr/upstream sent invalid (header|"Content-Length" header)/,
	'/cl-negative' => qr/upstream sent invalid (header|"Content-Length" header)/,
);

# Framing the client could read two ways: 502, nothing else on the client
# connection, the next request there answered by its own response, and the
# upstream connection closed (the next request went on a new one).
for my $prefix ('', '/nobuf') {
	for my $path (sort keys %logged) {
		my ($first, $extra, $second) = pair("$prefix$path");
		my $name = "$path" . ($prefix ? ' (proxy_buffering off)' : '');
		like($first, qr/^HTTP\/1.1 502 /, "$name: 502");
		is($extra, '', "$name: nothing more on the client connection");
		like($second, qr/^HTTP\/1.1 200 .*\r\n\r\ngood$/s,
			"$name: the next request gets its own answer");
		isnt(conn_of('/good'), conn_of($path),
			"$name: the upstream connection was not reused");
	}
}

for my $path (sort keys %logged) {
	ok($t->waitforlog($logged{$path}), "$path: logged as nginx does");
}
unlike($t->read_file('error.log'), qr/POISONED/, 'no poisoned bytes reached a log or a client');

# A HTTP/1.0 response cannot be chunked; status lines and heads that do not
# parse are invalid headers.
for my $path ('/http10-te', '/bad-status', '/not-http', '/space-colon') {
	my ($first, $extra, $second) = pair($path);
	like($first, qr/^HTTP\/1.1 502 /, "$path: 502");
	unlike($first . $second, qr/POISONED/, "$path: nothing of the upstream's body passed");
}

# Status lines without a reason, or with more than one space: read as nginx
# reads them, the body passed, and the next request on the client
# connection answered.
for my $prefix ('', '/nobuf') {
	for my $case (['/no-reason', 'none'], ['/empty-reason', 'empty'], ['/two-spaces', 'two'], ['/odd-name', 'odd'],
			['/iis', 'iis'], ['/ctl-reason', 'ctl']) {
		my ($path, $body) = @$case;
		my ($first, $extra, $second) = pair("$prefix$path");
		like($first, qr/^HTTP\/1.1 200 .*\r\n\r\n$body$/s, "$prefix$path: 200 and its body");
		like($second, qr/^HTTP\/1.1 200 .*\r\n\r\ngood$/s, "$prefix$path: the next request answered");
	}
}
unlike($t->read_file('error.log'), qr/panic/, 'status lines: no panic');
{
	my ($first) = pair('/odd-name');
	ok($first =~ /^X-Kept: k\r$/m && $first !~ /X-Odd/, 'a header name that is not a token: its line left out, the others passed');
	($first) = pair('/ctl-reason');
	like($first, qr/^HTTP\/1.1 200 OK\r\n/, "a reason with a control byte: the code's own reason passed");
	($first) = pair('/iis');
	ok($first =~ /^X-Kept: k\r$/m && $first !~ /\r\nHTTP\/1.1 200 OK\r\n/, "a second status line among the headers: left out, as nginx");
}

# A body cut short: never a complete-looking response followed by more on a
# reused connection.
{
	my ($first, $extra, $second) = pair('/truncated');
	like($first, qr/^HTTP\/1.1 502 /, 'truncated body: 502 (the body was buffered first)');
	my ($f2) = pair('/nobuf/truncated');
	like($f2, qr/^HTTP\/1.1 200 /, 'truncated body, unbuffered: the head went out');
	unlike($f2, qr/\r\n\r\nshort.{95}/s, 'truncated body, unbuffered: not completed');
	ok($t->waitforlog(qr/upstream prematurely closed connection while reading upstream/),
		'truncated body: logged');
	my ($b1) = pair('/bad-chunk');
	like($b1, qr/^HTTP\/1.1 502 /, 'invalid chunked body: 502');
	ok($t->waitforlog(qr/upstream sent invalid chunked response while reading upstream, client: 127.0.0.1, server: localhost, request: "GET \/bad-chunk HTTP\/1.1"/),
		'invalid chunked body: logged as nginx');
}

# 1xx before the final response is skipped.
{
	my ($first, $extra, $second) = pair('/continue');
	like($first, qr/^HTTP\/1.1 200 .*\r\n\r\nfinal!$/s, '100 then 200: the 200');
	is($extra, '', '100 then 200: nothing more');
	like($second, qr/good$/, '100 then 200: the connection goes on');
}

# A 101 the client did not ask for.
{
	my ($first, $extra, $second) = pair('/switch');
	like($first, qr/^HTTP\/1.1 502 /, 'unasked-for 101: 502');
	is($extra, '', 'unasked-for 101: nothing more');
	like($second, qr/good$/, 'unasked-for 101: the next request answered');
	ok($t->waitforlog(qr/upstream sent "101 Switching Protocols" to a request without "Upgrade" while reading response header from upstream/),
		'unasked-for 101: logged');
}

# A head far larger than any buffer.
{
	my ($first, $extra, $second) = pair('/huge-head');
	like($first, qr/^HTTP\/1.1 502 /, 'huge upstream head: 502');
	like($second, qr/good$/, 'huge upstream head: the next request answered');
}

# A head over proxy_buffer_size (1k) that comes in one read: 502, logged; one
# within it passes.
{
	my ($first, $extra, $second) = pair('/small/head-1500');
	like($first, qr/^HTTP\/1.1 502 /, 'head over proxy_buffer_size in one read: 502');
	like($second, qr/good$/, 'head over proxy_buffer_size: the next request answered');
	ok($t->waitforlog(qr/upstream sent too big header while reading response header from upstream.*small\/head-1500/),
		'head over proxy_buffer_size: logged as nginx');
	like(http_get('/small/head-900'), qr/^HTTP\/1.1 200 .*\r\n\r\nok$/s, 'a head within proxy_buffer_size: 200');
}

# A POST on a kept-alive upstream connection that the upstream closes after
# reading it: the request went, so it is not sent again (nginx's rule for
# non-idempotent requests); 502.
{
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080), Timeout => 5)
		or die "connect: $!\n";
	$s->syswrite("GET /good HTTP/1.1\r\nHost: localhost\r\n\r\n");
	like(read_response($s), qr/good$/, 'a first request leaves a kept-alive upstream connection');
	$s->syswrite("POST /drop HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4\r\n\r\nbody");
	like(read_response($s), qr/^HTTP\/1.1 502 /, 'POST closed on after it was read: 502');
	close $s;
	my @drops = grep { $_->[2] eq '/drop' } $t->raw_log(port(8081));
	is(scalar @drops, 1, 'the POST reached the upstream once, not again');
}

is(join(' ', sort $t->worker_pids()), join(' ', @workers), 'no worker restarted');
