#!/usr/bin/perl

# Hostile requests: framing a front proxy could read another way (smuggling
# forms), headers nginx refuses, pipelining, and slow clients. Each case
# checks the status, whether the connection is closed or still usable (as
# nginx has it), what the backend received (nothing for a refused request),
# that no worker restarted, and (at the end, by the harness) that no
# [alert] was logged.

use warnings;
use strict;

use Test::More;
use IO::Select;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(113);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    client_header_timeout 1s;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        server_name localhost;

        location / { proxy_pass http://127.0.0.1:%%PORT_8081%%; }
        location = /noread { return 200 "no"; }
    }
}

EOF

$t->raw_backend(port(8081));
$t->run();

my @workers = $t->started_workers();

# Sends raw bytes on a new connection; returns the first response and
# whether the connection was closed after it (1), or still open (0).
sub send_raw {
	my ($bytes) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080), Timeout => 5)
		or die "connect: $!\n";
	local $SIG{PIPE} = 'IGNORE';
	$s->syswrite($bytes);
	my $buf = '';
	my $sel = IO::Select->new($s);
	my $closed = 0;
	while ($sel->can_read(3)) {
		my $n = $s->sysread($buf, 65536, length $buf);
		unless ($n) {
			$closed = 1;
			last;
		}
		if ($buf =~ /\r\n\r\n/) {
			my $end = index($buf, "\r\n\r\n") + 4;
			my ($len) = substr($buf, 0, $end) =~ /^Content-Length: (\d+)/mi;
			last if defined $len && length($buf) >= $end + $len;
		}
	}
	unless ($closed) {
		# Closed, or still open and quiet?
		$closed = closed_within($s, 0.5) ? 1 : 0;
	}
	close $s;
	return ($buf, $closed);
}

# How many requests for $path the backend has seen.
sub reached {
	my ($path) = @_;
	return scalar grep { $_->[2] =~ /^\Q$path\E(\?|$)/ } $t->raw_log(port(8081));
}

# A refused request: the status, the connection closed, and the backend saw
# nothing of it.
sub refused {
	my ($name, $bytes, $status, $path) = @_;
	my ($r, $closed) = send_raw($bytes);
	like($r, qr/^HTTP\/1.1 $status /, "$name: $status");
	is($closed, 1, "$name: connection closed");
	is(reached($path), 0, "$name: nothing reached the backend");
}

refused('two Host headers',
	"GET /dup-host HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n\r\n", 400, '/dup-host');
refused('an empty Host',
	"GET /empty-host HTTP/1.1\r\nHost: \r\n\r\n", 400, '/empty-host');
refused('a Host of a port only',
	"GET /port-host HTTP/1.1\r\nHost: :80\r\n\r\n", 400, '/port-host');
ok($t->waitforlog(qr/client sent duplicate host header: "Host: evil.example", previous value: "Host: localhost" while reading client request headers/),
	'two Host headers: logged as nginx');
# Spaces and control characters in a host (refused since nginx 1.21.1), and
# user information in an absolute target.
refused('a space in the Host',
	"GET /space-host HTTP/1.1\r\nHost: a b\r\n\r\n", 400, '/space-host');
refused('a control character in the Host',
	"GET /ctl-host HTTP/1.1\r\nHost: a\x01b\r\n\r\n", 400, '/ctl-host');
refused('a Host with a space beside an absolute target',
	"GET http://localhost/abs-space HTTP/1.1\r\nHost: a b\r\n\r\n", 400, '/abs-space');
refused('user information in an absolute target',
	"GET http://u\@localhost/userinfo HTTP/1.1\r\nHost: localhost\r\n\r\n", 400, '/userinfo');

# A space in the target, before a version that is right: once rewritten into
# itself and parsed again without end, a stack overflow that took the
# worker down; refused as nginx refuses it.
refused('a space in the target',
	"GET /sp ace HTTP/1.1\r\nHost: localhost\r\n\r\n", 400, '/sp');
ok($t->waitforlog(qr/client sent invalid request while reading client request line/, 1),
	'a space in the target: logged as nginx');

refused('two equal Content-Length',
	"POST /dup-cl HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\nbody",
	400, '/dup-cl');
ok($t->waitforlog(qr/client sent duplicate header line: "Content-Length: 4", previous value: "Content-Length: 4"/, 1),
	'two Content-Length: logged');

refused('Transfer-Encoding: identity, chunked',
	"POST /te-identity HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: identity, chunked\r\n\r\n"
	. "4\r\nbody\r\n0\r\n\r\n", 501, '/te-identity');
ok($t->waitforlog(qr/client sent unknown "Transfer-Encoding": "identity, chunked"/),
	'unknown coding: logged');

# The other fields nginx takes once: two Authorization (which a backend
# might read either way), two Expect.
refused('two Authorization',
	"GET /two-auth HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic YTpi\r\n"
	. "Authorization: Basic Yzpk\r\n\r\n", 400, '/two-auth');
ok($t->waitforlog(qr/client sent duplicate header line: "Authorization: Basic Yzpk", previous value: "Authorization: Basic YTpi"/),
	'two Authorization: logged as nginx');
refused('two Expect',
	"POST /two-expect HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\nExpect: 100-continue\r\n"
	. "Content-Length: 1\r\n\r\nx", 400, '/two-expect');
# A missing host is found before the body's framing, as nginx orders them.
refused('no Host and an unknown coding',
	"POST /nohost-te HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 400, '/nohost-te');

# An unknown coding beside a length: the coding is nginx's first finding.
refused('Transfer-Encoding: gzip beside Content-Length',
	"POST /te-gzip-cl HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: gzip\r\nContent-Length: 4\r\n\r\nbody",
	501, '/te-gzip-cl');

refused('two Transfer-Encoding',
	"POST /te-twice HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n"
	. "Transfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n\r\n", 400, '/te-twice');

refused('lowercase method',
	"get /lower HTTP/1.1\r\nHost: localhost\r\n\r\n", 400, '/lower');
ok($t->waitforlog(qr/client sent invalid method while reading client request line/),
	'lowercase method: logged');
# Before a version nginx does not take (505), what precedes it is read
# first: a method nginx refuses is a 400.
refused('lowercase method before HTTP/2.0',
	"get /lower2 HTTP/2.0\r\nHost: localhost\r\n\r\n", 400, '/lower2');
refused('HTTP/2.0 in a request line', "GET /v2 HTTP/2.0\r\nHost: localhost\r\n\r\n", 505, '/v2');

# The classic smuggling form: a front that frames by Content-Length sends
# one request; one that frames by chunked sees a second.
{
	my $smuggle = "POST /clte HTTP/1.1\r\nHost: localhost\r\nContent-Length: 50\r\n"
		. "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: localhost\r\n\r\n";
	my ($r, $closed) = send_raw($smuggle);
	is($closed, 1, 'Content-Length with Transfer-Encoding: connection closed');
	is(reached('/smuggled'), 0, 'Content-Length with Transfer-Encoding: nothing smuggled');
	like($r, qr/^HTTP\/1.1 400 /, 'Content-Length with Transfer-Encoding: 400');
	is(reached('/clte'), 0, 'Content-Length with Transfer-Encoding: nothing reached the backend');
}

# More framing nginx refuses.
refused('invalid Content-Length',
	"POST /bad-cl HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4x\r\n\r\nbody", 400, '/bad-cl');
refused('differing Content-Length',
	"POST /cl-differ HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nbody",
	400, '/cl-differ');
refused('space before the colon',
	"GET /space HTTP/1.1\r\nHost: localhost\r\nX-Bad : 1\r\n\r\n", 400, '/space');
refused('obs-fold',
	"GET /fold HTTP/1.1\r\nHost: localhost\r\nX-Fold: a\r\n  b\r\n\r\n", 400, '/fold');
refused('NUL in a header value',
	"GET /nul HTTP/1.1\r\nHost: localhost\r\nX-Nul: a\0b\r\n\r\n", 400, '/nul');

# A chunk size that overflows: the request head reached the backend only if
# the body was streamed; never a 2xx for it, and the connection closes.
{
	my ($r, $closed) = send_raw("POST /overflow HTTP/1.1\r\nHost: localhost\r\n"
		. "Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff1\r\nx\r\n0\r\n\r\n");
	like($r, qr/^HTTP\/1.1 400 /, 'chunk size overflow: 400');
	is($closed, 1, 'chunk size overflow: connection closed');
	is(reached('/overflow'), 0, 'chunk size overflow: nothing reached the backend');
}

# Allowed forms keep the connection: pipelined requests answered in order,
# a chunked body forwarded with its length.
{
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080), Timeout => 5)
		or die "connect: $!\n";
	$s->syswrite("GET /p1 HTTP/1.1\r\nHost: localhost\r\n\r\n"
		. "POST /p2 HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
		. "4\r\nbody\r\n0\r\n\r\n"
		. "GET /p3 HTTP/1.1\r\nHost: localhost\r\n\r\n");
	my $buf = '';
	my $sel = IO::Select->new($s);
	while ($sel->can_read(3)) {
		$s->sysread($buf, 65536, length $buf) or last;
		last if $buf =~ /ok \/p3/;
	}
	like($buf, qr/ok \/p1.*ok \/p2.*ok \/p3/s, 'pipelined: answered in order');
	is(closed_within($s, 0.3), 0, 'pipelined: connection still open');
	close $s;
	my @p2 = grep { $_->[2] eq '/p2' } $t->raw_log(port(8081));
	is(scalar(@p2) && $p2[0][3], 4, 'chunked body forwarded with Content-Length 4');
}

# A 400 for a bad request never leaks into a kept connection: a good request
# after the refused one on the same connection is not answered.
{
	my ($r) = send_raw("GET /first HTTP/1.1\r\nHost: localhost\r\nHost: x\r\n\r\n"
		. "GET /after HTTP/1.1\r\nHost: localhost\r\n\r\n");
	unlike($r, qr/ok \/after/, 'after a refused request: the next one is not served');
	is(reached('/after'), 0, 'after a refused request: nothing reached the backend');
}

# Slow clients: a head that never completes is closed at
# client_header_timeout (nginx: 408 is logged, nothing sent) and costs no
# backend request.
{
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080), Timeout => 5)
		or die "connect: $!\n";
	$s->syswrite("GET /slow HTTP/1.1\r\nHost: local");
	my $t0 = time;
	my $closed = closed_within($s, 4);
	ok($closed, 'slow head: closed by client_header_timeout');
	close $s;
	is(reached('/slow'), 0, 'slow head: nothing reached the backend');
}

# The same on a kept-alive connection: the head's clock starts with its first
# byte, not keepalive_timeout (75 s by default) after the last response.
{
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080), Timeout => 5)
		or die "connect: $!\n";
	like(keepalive_get($s, '/ka'), qr/ok \/ka/, 'slow second head: first request served');
	$s->syswrite("GET /slow2 HTTP/1.1\r\nHost: local");
	ok(closed_within($s, 4), 'slow second head: closed by client_header_timeout');
	close $s;
	ok($t->waitforlog(qr/client timed out \(110: Connection timed out\) while reading client request headers/),
		'slow head: logged');
}

# Many slow clients at once do not stop a normal one.
{
	my @slow;
	for (1 .. 50) {
		my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080), Timeout => 5)
			or last;
		$s->syswrite("GET /slow HTTP/1.1\r\n");
		push @slow, $s;
	}
	is(scalar @slow, 50, '50 slow clients connected');
	like(http_get('/normal'), qr/ok \/normal/, 'a normal request is served beside them');
	close $_ for @slow;
}

# A client that waits for "100 Continue" before sending its body, to a
# location that answers without reading it: it is not asked for the body,
# and the answer says the connection closes (so the client does not send
# its next request on a connection about to close).
{
	my ($r, $closed) = send_raw("POST /noread HTTP/1.1\r\nHost: localhost\r\n"
		. "Expect: 100-continue\r\nContent-Length: 10\r\n\r\n");
	ok($r =~ /^HTTP\/1.1 200 / && $r !~ /100 Continue/ && $r =~ /^Connection: close\r$/m
		&& $closed, 'Expect: 100-continue unread: no 100, Connection: close, closed');
}

# TRACE gets nginx's 405 at once, whatever the location does, and the
# connection closes (nginx refuses it before keep-alive is decided).
{
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port(8080), Timeout => 5)
		or die "connect: $!\n";
	$s->syswrite("TRACE /trace HTTP/1.1\r\nHost: localhost\r\n\r\n");
	my $buf = '';
	my $sel = IO::Select->new($s);
	while ($sel->can_read(3)) {
		$s->sysread($buf, 4096, length $buf) or last;
		last if $buf =~ /\r\n\r\n/ && $buf =~ /Content-Length: (\d+)/i
			&& length($buf) >= index($buf, "\r\n\r\n") + 4 + $1;
	}
	like($buf, qr/^HTTP\/1.1 405 /, 'TRACE: 405');
	like($buf, qr/^Connection: close\r$/m, 'TRACE: Connection: close');
	ok(closed_within($s, 3), 'TRACE: the connection closes');
	close $s;
	is(reached('/trace'), 0, 'TRACE: nothing reached the backend');
	ok($t->waitforlog(qr/client sent TRACE method while reading client request headers/),
		'TRACE: logged as nginx');
}

# CONNECT gets nginx's 405 (nginx 1.21.1+): a proxy that passed it on
# would ask its upstream for a tunnel. The authority form nginx refuses
# earlier, as a request line it cannot read (400).
{
	for my $v ('1.1', '1.0') {
		my ($r, $closed) = send_raw("CONNECT /connect HTTP/$v\r\nHost: localhost\r\n\r\n");
		like($r, qr/^HTTP\/1.1 405 .*^Connection: close\r$/ms, "CONNECT in HTTP/$v: 405, Connection: close");
		ok($closed, "CONNECT in HTTP/$v: the connection closes");
	}
	my ($r, $closed) = send_raw("CONNECT localhost:443 HTTP/1.1\r\nHost: localhost:443\r\n\r\n");
	ok($r =~ /^HTTP\/1.1 400 / && $closed, 'CONNECT to an authority: 400, closed');
	is(reached('/connect') + reached('localhost:443'), 0, 'CONNECT: nothing reached the backend');
	ok($t->waitforlog(qr/client sent CONNECT method while reading client request headers/),
		'CONNECT: logged as nginx');
}

# Bytes nginx takes in a target that a URI holds only percent-encoded
# (JSON in a query, angle brackets, a backquote, bytes that are not UTF-8):
# served, the target passed on with them encoded, not refused.
{
	my ($r) = send_raw("GET /enc/a`b?q={\"x\":1}<y> HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
	like($r, qr/^HTTP\/1.1 200 /, 'a target with bytes a URI holds only encoded: served');
	($r) = send_raw("GET /enc/caf\xc3\xa9<> HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
	like($r, qr/^HTTP\/1.1 200 /, 'and with UTF-8 beside them: served');
	($r) = send_raw("GET /enc/caf\xe9\xff?\xe9 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
	like($r, qr/^HTTP\/1.1 200 /, 'and bytes that are not UTF-8: served');
	is(join(' ', map { $_->[2] } grep { $_->[2] =~ m{^/enc/} } $t->raw_log(port(8081))),
		'/enc/a%60b?q=%7B%22x%22:1%7D%3Cy%3E /enc/caf%C3%A9%3C%3E /enc/caf%E9%FF?%E9',
		'all passed on encoded');
}

# A bad request does not hurt the next connection.
like(http_get('/fine'), qr/^HTTP\/1.1 200 .*ok \/fine/s, 'next connection served');

is(join(' ', $t->worker_pids()), join(' ', @workers), 'no worker restarted');
