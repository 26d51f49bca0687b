#!/usr/bin/perl

# proxy_request_buffering: with "off" the client's body goes upstream as it
# arrives (the backend sees the first half before the client sent the
# second), with its Content-Length, or chunked to an HTTP/1.1 upstream (to
# HTTP/1.0 it is buffered and gets a length, as nginx). A chunked body that
# grows past client_max_body_size, or has a bad chunk size mid-stream, or a
# client that stops sending (client_body_timeout) ends the attempt (413, 400,
# 408) and the upstream connection is closed, not reused. A
# peer that refuses the connection is skipped with the body untouched; once
# the body started, a failure is final (502, the next peer sees nothing). With
# "on" (the default) the backend sees nothing until the body is whole.

use warnings;
use strict;

use Test::More;
use Digest::MD5 qw/md5_hex/;
use IO::Socket::INET;
use IO::Select;
use POSIX ();
use Time::HiRes qw/sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy/)->plan(29);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    upstream u {
        server 127.0.0.1:%%PORT_8081%%;
        keepalive 4;
    }
    upstream refused {
        server 127.0.0.1:%%PORT_8084%%;
        server 127.0.0.1:%%PORT_8081%% backup;
    }
    upstream failing {
        server 127.0.0.1:%%PORT_8082%%;
        server 127.0.0.1:%%PORT_8083%% backup;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        proxy_request_buffering off;

        location / {
            proxy_pass http://u;
        }
        location /v10/ {
            proxy_pass http://u;
            proxy_http_version 1.0;
        }
        location /small/ {
            proxy_pass http://u;
            client_max_body_size 1k;
        }
        location /retry/ {
            proxy_pass http://refused;
        }
        location /fail/ {
            proxy_pass http://failing;
        }
        location /slow/ {
            proxy_pass http://u;
            client_body_timeout 1s;
        }
        location /on/ {
            proxy_pass http://u;
            proxy_request_buffering on;
        }
    }
}

EOF

my $d = $t->testdir();
for my $p (8081, 8082, 8083) {
	my $port = port($p);
	Test::Sluice::_release_ports();
	$t->run_daemon(\&backend, $port, $d);
	$t->waitforfile("$d/b$port.ready") or die "backend $port did not start\n";
}
# Nothing listens on 8084: connections to it are refused.
port(8084);
$t->run();

my ($main, $failing, $backup) = map { port($_) } 8081, 8082, 8083;

# What the backend on $port has read so far, and its event log.
sub bytes_seen { $t->read_file("b$_[0].bytes") }
sub events { $t->read_file("b$_[0].log") }

# The connection number the backend gave the request for $uri.
sub conn_of {
	my ($port, $uri) = @_;
	my ($n) = events($port) =~ /^(\d+) head \Q$uri\E$/m;
	return $n;
}

sub answer {
	my ($body, $framing) = @_;
	return "framing=$framing len=" . length($body) . " md5=" . md5_hex($body);
}

# Sends the head and $first, waits until $seen (a code ref) holds or 5 s
# pass, then sends $rest and returns (what $seen returned, the response).
sub in_two {
	my ($head, $first, $rest, $seen) = @_;
	my $s = http($head, start => 1, body => $first) or return (0, '');
	my $saw = poll_until($seen, 5);
	return ($saw, http($rest, socket => $s, raw => 1));
}

# Content-Length: the first half reaches the backend before the client
# sends the second; the body arrives whole with the client's length.
my $half1 = 'first-half-' . ('a' x 3000);
my $half2 = 'second-half-' . ('b' x 3000);
my ($saw, $r) = in_two(<<"EOF", $half1, $half2, sub { index(bytes_seen($main), $half1) >= 0 });
PUT /cl HTTP/1.1
Host: localhost
Connection: close
Content-Length: @{[length($half1 . $half2)]}

EOF
ok($saw, 'off: the first half reached the backend before the client sent the rest');
like($r, qr/^HTTP\/1.1 200/, 'off: length body answered');
like($r, qr/\Q${\ answer($half1 . $half2, 'length')}\E$/, 'off: length body arrived whole, with its length');

# Chunked to an HTTP/1.1 upstream: streamed chunked.
my $c1 = 'chunk-one-' . ('c' x 1014);
($saw, $r) = in_two(<<"EOF", sprintf("%x\r\n%s\r\n", length $c1, $c1),
PUT /chunked HTTP/1.1
Host: localhost
Connection: close
Transfer-Encoding: chunked

EOF
	"5\r\nhello\r\n0\r\n\r\n", sub { index(bytes_seen($main), $c1) >= 0 });
ok($saw, 'off: the first chunk reached the backend before the last');
like($r, qr/\Q${\ answer($c1 . 'hello', 'chunked')}\E$/, 'off: chunked body arrived chunked and whole');
is(conn_of($main, '/chunked'), conn_of($main, '/cl'),
	'off: the upstream connection of a streamed request is reused');

# Chunked to an HTTP/1.0 upstream: buffered, sent with a length.
my $c2 = 'to-ten-' . ('e' x 500);
($saw, $r) = in_two(<<"EOF", sprintf("%x\r\n%s\r\n", length $c2, $c2),
PUT /v10/chunked HTTP/1.1
Host: localhost
Connection: close
Transfer-Encoding: chunked

EOF
	"0\r\n\r\n", sub { index(bytes_seen($main), $c2) >= 0 });
ok(!$saw, 'off, HTTP/1.0 upstream: a chunked body is buffered');
like($r, qr/\Q${\ answer($c2, 'length')}\E$/, 'off, HTTP/1.0 upstream: it arrives with a length');

# The default, on: nothing reaches the backend before the body is whole.
my $h1 = 'buffered-half-' . ('f' x 2000);
my $s = http(<<"EOF", start => 1, body => $h1);
PUT /on/x HTTP/1.1
Host: localhost
Connection: close
Content-Length: @{[2 * length($h1)]}

EOF
sleep 0.5;
is(index(bytes_seen($main), $h1), -1, 'on: the backend saw nothing of an unfinished body');
$r = http($h1, socket => $s, raw => 1);
like($r, qr/\Q${\ answer($h1 x 2, 'length')}\E$/, 'on: then the whole body went');

# A chunked body that grows past client_max_body_size mid-stream: 413, and
# the upstream connection (a cached one) is closed.
my $c3 = 'limit-' . ('g' x 594);
($saw, $r) = in_two(<<"EOF", sprintf("%x\r\n%s\r\n", length $c3, $c3),
PUT /small/x HTTP/1.1
Host: localhost
Connection: close
Transfer-Encoding: chunked

EOF
	sprintf("%x\r\n%s\r\n0\r\n\r\n", 600, 'h' x 600),
	sub { index(bytes_seen($main), $c3) >= 0 });
ok($saw, 'over the limit: the first chunk had gone');
like($r, qr/^HTTP\/1.1 413/, 'over the limit mid-stream: 413');
my $n = conn_of($main, '/small/x');
ok(poll_until(sub { defined $n && events($main) =~ /^$n closed$/m }, 5),
	'over the limit: the upstream connection was closed');
unlike(events($main), qr/request PUT \/small\/x/, 'over the limit: the backend got no whole request');
ok($t->waitforlog(qr/\[error\].*client intended to send too large chunked body: 1200 bytes/),
	'over the limit: logged as nginx');

# A bad chunk size mid-stream: 400, the upstream connection closed.
my $c4 = 'badsize-' . ('i' x 100);
($saw, $r) = in_two(<<"EOF", sprintf("%x\r\n%s\r\n", length $c4, $c4),
PUT /bad HTTP/1.1
Host: localhost
Connection: close
Transfer-Encoding: chunked

EOF
	"zz\r\nxx\r\n0\r\n\r\n", sub { index(bytes_seen($main), $c4) >= 0 });
ok($saw, 'bad chunk: the first chunk had gone');
like($r, qr/^HTTP\/1.1 400/, 'bad chunk size mid-stream: 400');
$n = conn_of($main, '/bad');
ok(poll_until(sub { defined $n && events($main) =~ /^$n closed$/m }, 5),
	'bad chunk: the upstream connection was closed');

# The cached connection still serves a plain request.
$r = http(<<"EOF");
PUT /after HTTP/1.1
Host: localhost
Connection: close
Content-Length: 5

after
EOF
like($r, qr/\Q${\ answer('after', 'length')}\E$/, 'a later request is served');

# A peer that refuses the connection: the next one gets the whole body.
my $h2 = 'retried-' . ('j' x 4000);
($saw, $r) = in_two(<<"EOF", $h2, $h2, sub { 1 });
PUT /retry/x HTTP/1.1
Host: localhost
Connection: close
Content-Length: @{[2 * length($h2)]}

EOF
like($r, qr/\Q${\ answer($h2 x 2, 'length')}\E$/, 'refused peer: the next peer got the whole body');
like(events($main), qr/request PUT \/retry\/x /, 'refused peer: the backup answered');
ok($t->waitforlog(qr/\[error\].*connect\(\) failed \(111: Connection refused\).*PUT \/retry\/x/),
	'refused peer: it was tried first');

# A peer that fails once the body started: no retry, 502, the next peer
# sees nothing.
my $h3 = 'doomed-' . ('k' x 2000);
($saw, $r) = in_two(<<"EOF", $h3, $h3, sub { events($failing) =~ /failed/ });
PUT /fail/x HTTP/1.1
Host: localhost
Connection: close
Content-Length: @{[2 * length($h3)]}

EOF
ok($saw, 'the failing peer had the start of the body');
like($r, qr/^HTTP\/1.1 502/, 'failure after the body started: 502');
is(bytes_seen($backup), '', 'failure after the body started: no retry');

# A client that stops sending mid-way: client_body_timeout, 408, and the
# upstream connection closed.
my $h4 = 'stalled-' . ('l' x 100);
$s = http(<<"EOF", start => 1, body => $h4);
PUT /slow/x HTTP/1.1
Host: localhost
Connection: close
Content-Length: 1000

EOF
$r = http_end($s, timeout => 5);
like($r, qr/^HTTP\/1.1 408/, 'client_body_timeout mid-way: 408');
$n = conn_of($main, '/slow/x');
ok(poll_until(sub { defined $n && events($main) =~ /^$n closed$/m }, 5),
	'client_body_timeout: the upstream connection was closed');

# Expect: 100-continue is answered when the body is first read.
$s = http(<<"EOF", start => 1);
PUT /expect HTTP/1.1
Host: localhost
Connection: close
Expect: 100-continue
Content-Length: 5

EOF
my $cont = '';
IO::Select->new($s)->can_read(5) and $s->sysread($cont, 100);
like($cont, qr/^HTTP\/1.1 100 Continue/, 'Expect: 100 Continue sent');
$r = http('hello', socket => $s, raw => 1);
like($r, qr/\Q${\ answer('hello', 'length')}\E$/, 'Expect: then the body went');

###############################################################################

sub note_to {
	my ($file, $text) = @_;
	open my $fh, '>>', $file or die "$file: $!\n";
	binmode $fh;
	print $fh $text;
	close $fh;
}

# A backend: each connection in its own process. It logs every byte as it
# arrives (bPORT.bytes) and its events (bPORT.log: "N head URI", "N request
# METHOD URI ANSWER", "N failed", "N closed"), decodes length and chunked
# bodies, and answers with the body's framing, length and digest. A URI with
# "fail" closes the connection as soon as the first body byte came.
sub backend {
	my ($port, $dir) = @_;
	my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port", Listen => 32,
		ReuseAddr => 1, Proto => 'tcp') or die "backend $port: $!\n";
	$SIG{CHLD} = 'IGNORE';
	note_to("$dir/b$port.ready", '');
	my $n = 0;
	while (1) {
		my $c = $l->accept() or next;
		$n++;
		my $pid = fork();
		if (defined $pid && $pid == 0) {
			close $l;
			serve($c, $n, "$dir/b$port");
			POSIX::_exit(0);
		}
		close $c;
	}
}

sub serve {
	my ($c, $n, $base) = @_;
	alarm(20);
	my $buf = '';
	my $more = sub {
		my $got = sysread($c, my $chunk, 65536);
		return 0 unless $got;
		note_to("$base.bytes", $chunk);
		$buf .= $chunk;
		return 1;
	};
	REQUEST: while (1) {
		while ($buf !~ /\r\n\r\n/) {
			$more->() or last REQUEST;
		}
		$buf =~ s/^(.*?\r\n\r\n)//s;
		my $head = $1;
		my ($method, $uri) = $head =~ /^(\S+) (\S+)/;
		note_to("$base.log", "$n head $uri\n");
		if ($uri =~ /fail/) {
			while ($buf eq '') {
				$more->() or last REQUEST;
			}
			note_to("$base.log", "$n failed\n");
			close $c;
			return;
		}
		my ($body, $framing) = ('', 'none');
		if ($head =~ /^transfer-encoding:\s*chunked/mi) {
			$framing = 'chunked';
			while (1) {
				while ($buf !~ /\r\n/) {
					$more->() or last REQUEST;
				}
				$buf =~ s/^([0-9a-fA-F]+)\r\n// or last REQUEST;
				my $size = hex $1;
				while (length($buf) < $size + 2) {
					$more->() or last REQUEST;
				}
				$body .= substr($buf, 0, $size, '');
				$buf =~ s/^\r\n// or last REQUEST;
				last if $size == 0;
			}
		} elsif ($head =~ /^content-length:\s*(\d+)/mi) {
			my $len = $1;
			$framing = 'length';
			while (length($buf) < $len) {
				$more->() or last REQUEST;
			}
			$body = substr($buf, 0, $len, '');
		}
		my $answer = answer($body, $framing);
		note_to("$base.log", "$n request $method $uri $answer\n");
		syswrite($c, "HTTP/1.1 200 OK\r\nContent-Length: " . length($answer)
			. "\r\n\r\n$answer");
		last if $head =~ /^connection:\s*close/mi;
	}
	note_to("$base.log", "$n closed\n");
}
