#!/usr/bin/perl

# Parked keep-alive connections: an idle keep-alive connection gives back
# its read buffer and waits with none, as nginx frees an idle connection's
# buffers; after 100 ms it also leaves its task for the worker's parker (a
# private epoll set) and is resumed when the client sends. The pauses below
# (0.3 s and more) cross that line. Requests on a parked connection are served as on any
# other: sequential, pipelined, split heads, HTTP/1.0 keep-alive, bodies,
# unix sockets; keepalive_timeout and a graceful stop still close it.

use warnings;
use strict;

use Test::More;
use IO::Select;
use IO::Socket::UNIX;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(14);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
    worker_connections 8;
}

http {
    access_log off;
    keepalive_timeout 2s;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        listen unix:%%TESTDIR%%/unix.sock;
        location / { return 200 "ok $request_uri"; }
        location /short { keepalive_timeout 1s; return 200 "short"; }
    }
}

EOF

$t->run();

# Reads what arrives on $s until $want responses (Content-Length framed) are
# complete or nothing comes for 3 s.
sub responses {
	my ($s, $want) = @_;
	my $buf = '';
	my $sel = IO::Select->new($s);
	while ($sel->can_read(3)) {
		my $n = $s->sysread($buf, 4096, length $buf) or last;
		my ($rest, $got) = ($buf, 0);
		while ($rest =~ /\r\n\r\n/ && $rest =~ /Content-Length: (\d+)/i) {
			my $end = index($rest, "\r\n\r\n") + 4 + $1;
			last if length($rest) < $end;
			$rest = substr($rest, $end);
			$got++;
		}
		last if $got >= $want;
	}
	return $buf;
}


# Two idle connections beside it (they once decided whether it parked).
my @idle = map { http('', start => 1) } 1 .. 2;

my $s = http('', start => 1);
$s->syswrite("GET /1 HTTP/1.1\r\nHost: localhost\r\n\r\n");
like(responses($s, 1), qr/ok \/1$/, 'first request');
ok($t->waitforlog(qr/http keepalive: connection parked, buffers freed/),
	'idle connection parked');
$s->syswrite("GET /2 HTTP/1.1\r\nHost: localhost\r\n\r\n");
like(responses($s, 1), qr/^HTTP\/1.1 200.*ok \/2$/s, 'request on a parked connection');

$s->syswrite("GET /3 HTTP/1.1\r\nHost: localhost\r\n\r\n"
	. "GET /4 HTTP/1.1\r\nHost: localhost\r\n\r\n"
	. "GET /5 HTTP/1.1\r\nHost: localhost\r\n\r\n");
my $r = responses($s, 3);
ok($r =~ /ok \/3.*ok \/4.*ok \/5$/s, 'pipelined requests all answered in order');

$s->syswrite("GET /6 HTTP/1.1\r\nHo");
sleep 0.3;
$s->syswrite("st: localhost\r\n\r\n");
like(responses($s, 1), qr/ok \/6$/, 'request head split across a pause');

# The start of the next request arrives with this one: parked with it.
$s->syswrite("GET /6a HTTP/1.1\r\nHost: localhost\r\n\r\nGET /6b HTTP/1.1\r\nHo");
my $a = responses($s, 1);
sleep 0.3;
$s->syswrite("st: localhost\r\n\r\n");
ok($a =~ /ok \/6a$/ && responses($s, 1) =~ /ok \/6b$/,
	'bytes read ahead are kept over parking');

$s->syswrite("POST /7 HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nhello"
	. "GET /8 HTTP/1.1\r\nHost: localhost\r\n\r\n");
like(responses($s, 2), qr/ok \/7.*ok \/8$/s, 'request with a body, then another');

$s->syswrite("GET /9 HTTP/1.1\r\nHost: localhost\r\n\r\n");
like(responses($s, 1), qr/ok \/9$/, 'still open after all that');

my $parked = $t->log_count(qr/connection parked/);
ok($parked >= 4, "parked between requests ($parked times)");

# HTTP/1.0 keep-alive: nginx's HTTP/1.1 status line on both answers.
my $h = http('', start => 1);
$h->syswrite("GET /a HTTP/1.0\r\nHost: localhost\r\nConnection: keep-alive\r\n\r\n");
my $first = responses($h, 1);
sleep 0.2;
$h->syswrite("GET /b HTTP/1.0\r\nHost: localhost\r\nConnection: keep-alive\r\n\r\n");
my $second = responses($h, 1);
ok($first =~ /^HTTP\/1.1 200/ && $second =~ /^HTTP\/1.1 200.*ok \/b$/s,
	'HTTP/1.0 keep-alive across parking');

my $u = IO::Socket::UNIX->new(Type => SOCK_STREAM,
	Peer => $t->testdir() . '/unix.sock');
$u->syswrite("GET /u1 HTTP/1.1\r\nHost: localhost\r\n\r\n");
my $u1 = responses($u, 1);
sleep 0.2;
$u->syswrite("GET /u2 HTTP/1.1\r\nHost: localhost\r\n\r\n");
ok($u1 =~ /ok \/u1$/ && responses($u, 1) =~ /ok \/u2$/, 'unix socket, parked');

my $k = http('', start => 1);
$k->syswrite("GET /short HTTP/1.1\r\nHost: localhost\r\n\r\n");
responses($k, 1);
my $start = time();
ok(closed_within($k, 3) && time() - $start >= 0.9,
	'keepalive_timeout closes a parked connection');

# A graceful stop closes parked connections at once.
$start = time();
$t->stop();
ok(closed_within($s, 3), 'QUIT closes a parked connection');
ok(time() - $start < 3, 'and the worker does not wait for it');
